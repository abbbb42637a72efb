"""The common path in one call (Model.plan / Refit.plan): the comm gives the rank and
the world, the plan is checked against it, and a rank whose planning fails tells its
peers, which fail at once naming it instead of timing out. In-process threads; the
same path over gloo processes is test_torch_gloo.py's."""

import json
import os
import re
import time

import pytest
import torch

import reshard
import conventions
from test_model_refit import TINY

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def config_path(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(TINY, tie_word_embeddings=False)))
    return str(p)


@pytest.mark.parametrize("infer,domain_size", [("tp=2", None), ("tp=1,dp=2", 2)])
def test_model_plan_one_call(config_path, infer, domain_size):
    """Every rank: plan = model.plan(comm, train, infer); plan.execute(src=, dst=); every
    vLLM element checked against the frameworks' rules."""
    model = reshard.Model(config_path)
    w = conventions.Weights(conventions.load_config(config_path))
    got = {}

    def rank_fn(comm):
        plan = model.plan(comm, "tp=2", infer, domain_size=domain_size)
        assert (plan.rank, plan.world, plan.refit.rank) == (comm.rank, 4, comm.rank)
        side, i = plan.refit.role(comm.rank)
        if side == "train":
            plan.execute(src=conventions.megatron_state_dict(w, "tp=2", i))
            return
        expect = conventions.vllm_state_dict(w, infer, i, reshard.SENTINEL_BYTE)
        dst = {n: torch.empty_like(t).view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
               .view(t.dtype) for n, t in expect.items()}
        plan.execute(dst=dst)
        got[i] = {n: conventions.mismatches(dst[n], e) for n, e in expect.items()}

    reshard.run_threads(4, rank_fn)
    assert sorted(got) == [0, 1]
    assert all(bad == 0 for g in got.values() for bad in g.values()), got


def test_model_plan_world_differs_from_comm(config_path):
    """A 4-rank refit on a 3-rank comm: every rank raises at once (no timeout)."""
    model = reshard.Model(config_path)
    errors = {}

    def rank_fn(comm):
        t0 = time.monotonic()
        with pytest.raises(reshard.ReshardError) as e:
            model.plan(comm, "tp=2", "tp=2", timeout_s=30)
        errors[comm.rank] = (e.value.status, e.value.message, time.monotonic() - t0)

    reshard.run_threads(3, rank_fn)
    for r, (status, message, secs) in errors.items():
        assert status == reshard.Status.INVALID_ARG, message
        assert "needs 4 ranks, the comm has 3" in message
        assert secs < 10


def test_refit_plan_failure_told_to_peers(config_path):
    """Rank 1's plan fails (a staging bound under the minimum; Refit.plan, which does not
    agree on its inputs first as Model.plan does): it raises STAGING, and every peer's
    execute fails at once with STAGING naming rank 1 and its own first problem, nothing
    written."""
    model = reshard.Model(config_path)
    whole = model.refit("tp=2", "tp=2")
    out = {}

    def rank_fn(comm):
        t0 = time.monotonic()
        dst = None
        try:
            plan = whole.plan(comm, timeout_s=30, staging_mb=0.001 if comm.rank == 1 else None)
            dst = plan.refit.infer.new_buffers(comm.rank, fill=reshard.SENTINEL_BYTE) \
                if comm.rank >= 2 else None
            src = plan.refit.train.new_buffers(comm.rank) if comm.rank < 2 else None
            plan.execute(src=src, dst=dst)
        except reshard.ReshardError as e:
            out[comm.rank] = (e.status, e.message, time.monotonic() - t0)
            if comm.rank >= 2:
                assert all((t.view(torch.uint8) == reshard.SENTINEL_BYTE).all()
                           for t in dst.values())

    reshard.run_threads(4, rank_fn)
    assert sorted(out) == [0, 1, 2, 3]
    for r, (status, message, secs) in out.items():
        assert status == reshard.Status.STAGING, (r, message)
        assert secs < 10
        if r != 1:
            assert "rank 1 could not create its plan" in message, message
            assert out[1][1][:60] in message, (out[1][1], message)


def test_refit_plan_is_checked_against_the_comm(config_path):
    """Refit.plan of a whole refit takes the comm's rank; a scoped refit built for
    another rank is refused, and the peers are told."""
    model = reshard.Model(config_path)
    whole = model.refit("tp=2", "tp=2")
    errors = {}

    def rank_fn(comm):
        other = model.refit("tp=2", "tp=2", rank=(comm.rank + 1) % 4)
        with pytest.raises(reshard.ReshardError) as e:
            other.plan(comm, timeout_s=30)
        errors[comm.rank] = e.value.status
        plan = whole.plan(comm)
        assert (plan.rank, plan.world) == (comm.rank, 4)

    reshard.run_threads(4, rank_fn)
    assert all(s == reshard.Status.INVALID_ARG for s in errors.values()), errors


def test_one_default_timeout():
    """Python's default timeout is the library's and the command line's."""
    with open(os.path.join(ROOT, "include", "reshard", "reshard.h")) as f:
        c = float(re.search(r"#define RESHARD_DEFAULT_TIMEOUT_S ([0-9.]+)", f.read()).group(1))
    with open(os.path.join(ROOT, "tools", "cmd_run.c")) as f:
        cli = f.read()
    assert reshard.DEFAULT_TIMEOUT_S == c
    assert ".timeout_s = RESHARD_DEFAULT_TIMEOUT_S" in cli
    assert "a silent peer fails the refit (%g)" % c in cli


@pytest.mark.parametrize("odd,what,first", [
    ("layout", "(the layouts, the declared buffers differ; the first tensor where they do: 1 ",
     "x"),
    ("catalogue", "(the catalogue differ; the first tensor where they do: 2 ", None),
    ("timeout", "(the params differ: timeout_s)", None),
    ("checksum", "(the params differ: delta/delta_checksum)", None),
])
def test_mismatch_says_what_differs(odd, what, first):
    """Rank 3 plans from other inputs: every rank's MISMATCH names what differs
    and the first tensor where it does, the same on every rank."""
    from reshard import Shard
    import numpy as np
    out = {}

    def fn(comm):
        odd_rank = comm.rank == 3
        tensors = reshard.Tensors()
        tensors.add("a", (8, 4), np.float32)
        tensors.add("x", (8, 4), np.float32)
        if odd == "catalogue" and odd_rank:
            tensors.add("y", (2,), np.float32)  # one tensor more
        pl = Shard(0) if odd == "layout" and odd_rank else Shard(1)
        src = reshard.Layout.from_placements(tensors, {"a": ([0, 1], [Shard(0)]),
                                                       "x": ([0, 1], [Shard(0)])})
        dst = reshard.Layout.from_placements(tensors, {"a": ([2, 3], [Shard(0)]),
                                                       "x": ([2, 3], [pl])})
        plan = reshard.Plan(src, dst, rank=comm.rank, world=4,
                            timeout_s=31 if odd == "timeout" and odd_rank else 30,
                            delta=odd == "checksum",
                            checksum=odd == "checksum" and odd_rank)
        with pytest.raises(reshard.ReshardError) as e:
            plan.execute(comm, src=src.new_buffers(comm.rank) if comm.rank < 2 else None,
                         dst=dst.new_buffers(comm.rank) if comm.rank >= 2 else None)
        out[comm.rank] = e.value

    reshard.run_threads(4, fn)
    for r, e in sorted(out.items()):
        assert e.status == reshard.Status.MISMATCH
        assert e.message.startswith("rank %d: ranks 0 and 3 planned from different inputs %s"
                                    % (r, what)), e.message
        if first:
            assert "('%s' on this rank)" % first in e.message
    assert "('y' on this rank)" in out[3].message if odd == "catalogue" else True


def _plan_errors(world, call):
    """Run call(comm) on ``world`` threads; each rank's ReshardError (or None) and time."""
    out = {}

    def fn(comm):
        t0 = time.monotonic()
        try:
            call(comm)
            out[comm.rank] = (None, time.monotonic() - t0)
        except reshard.ReshardError as e:
            out[comm.rank] = (e, time.monotonic() - t0)

    reshard.run_threads(world, fn)
    return out


def test_model_plan_specs_differ_fail_every_rank_at_plan(config_path):
    """Rank 3 plans with infer "tp=1,dp=2" among "tp=2" (both fit the world): every rank
    fails at plan(), before anything is bound, naming the input, both values and the
    ranks holding each; a spec written differently but equal ("dp=1,tp=2" on rank 2)
    is not a difference."""
    model = reshard.Model(config_path)
    infer = {0: "tp=2", 1: "tp=2", 2: "dp=1,tp=2", 3: "tp=1,dp=2"}
    out = _plan_errors(4, lambda comm: model.plan(comm, "tp=2", infer[comm.rank],
                                                  timeout_s=30))
    for r, (e, secs) in sorted(out.items()):
        assert e is not None and e.status == reshard.Status.MISMATCH, (r, e)
        assert secs < 10
        assert e.message.startswith("rank %d: the ranks were given different inputs (nothing "
                                    "was planned): infer: " % r), e.message
        assert "on ranks 0, 1, 2; 'tp=1,dp=2,ep=0,engines=1,vllm=0,redundant=0' on rank 3" \
            in e.message, e.message
        assert "train" not in e.message.split("infer: ", 1)[1], e.message


def test_model_plan_parameters_differ_are_named(config_path):
    """staging_mb and delta differ on one rank each: both inputs are named with their
    ranks, on every rank, at plan()."""
    model = reshard.Model(config_path)

    def call(comm):
        model.plan(comm, "tp=2", "tp=2", timeout_s=30,
                   staging_mb=64 if comm.rank == 1 else None, delta=comm.rank == 2)

    out = _plan_errors(4, call)
    for r, (e, _) in out.items():
        assert e is not None and e.status == reshard.Status.MISMATCH, (r, e)
        assert "staging_mb: 'None' on ranks 0, 2, 3; '64.0' on rank 1" in e.message, e.message
        assert "delta: 'False' on ranks 0, 1, 3; 'True' on rank 2" in e.message, e.message


def test_model_plan_rank_identity_checked(config_path):
    """Trainers whose comm ranks are swapped against their Megatron TP ranks (rank 0
    holds TP shard 1 and the reverse): equal shapes, so binding cannot see it; with
    coords= every rank fails at plan() with RANK naming both numberings. Inference
    coords that match pass; coords of the right ranks plan and refit exactly."""
    model = reshard.Model(config_path)
    swapped = {0: {"tp": 1, "pp": 0}, 1: {"tp": 0, "pp": 0},
               2: {"engine": 0, "dp": 0, "tp": 0}, 3: {"engine": 0, "dp": 0, "tp": 1}}
    out = _plan_errors(4, lambda comm: model.plan(comm, "tp=2", "tp=2", timeout_s=30,
                                                  coords=swapped[comm.rank]))
    for r, (e, secs) in out.items():
        assert e is not None and e.status == reshard.Status.RANK, (r, e)
        assert secs < 10
        assert "rank 0 is Megatron tp_rank 1, pp_rank 0; the layout's rank 0 is tp_rank 0, " \
            "pp_rank 0" in e.message, e.message
        assert "rank 1 is Megatron tp_rank 0, pp_rank 0; the layout's rank 1 is tp_rank 1, " \
            "pp_rank 0" in e.message, e.message
    right = {0: {"tp": 0, "pp": 0}, 1: {"tp": 1, "pp": 0, "dp": 0, "cp": 0},
             2: {"engine": 0, "tp": 0}, 3: {"tp": 1}}
    out = _plan_errors(4, lambda comm: model.plan(comm, "tp=2", "tp=2", timeout_s=30,
                                                  coords=right[comm.rank]))
    assert all(e is None for e, _ in out.values()), out


def test_model_plan_bad_argument_on_one_rank_fails_every_rank_at_once(config_path):
    """A rank whose own arguments are bad (an unknown coords key, a non-int coordinate, an
    engines count past 32 bits) raises its own error; its peers fail at once with MISMATCH
    naming it (the bad argument goes into the agreement), never waiting for the timeout."""
    model = reshard.Model(config_path)
    bad = {"coords": dict(coords={"pp": 0}), "not_int": dict(coords={"tp": "1"}),
           "engines": dict(engines=2**40)}
    for case, kw in bad.items():
        own = {}

        def call(comm):
            try:
                model.plan(comm, "tp=2", "tp=2", timeout_s=30, **(kw if comm.rank == 3 else {}))
            except (TypeError, ValueError) as e:
                own[comm.rank] = e
                raise reshard.errors.error(reshard.Status.INVALID_ARG, str(e))

        out = _plan_errors(4, call)
        assert isinstance(own.get(3), (TypeError, ValueError)), (case, own)
        for r in (0, 1, 2):
            e, secs = out[r]
            assert e is not None and e.status == reshard.Status.MISMATCH, (case, r, e)
            assert secs < 10, (case, r, secs)
            assert "arguments: 'valid' on ranks 0, 1, 2; '" in e.message and \
                "' on rank 3" in e.message, (case, e.message)


def test_model_plan_equal_arguments_written_differently_agree(config_path):
    """verify=None and verify=True on a delta plan (both: verification on), 30 and 30.0
    seconds, "bf16" and "bfloat16": the same inputs, no MISMATCH."""
    models = [reshard.Model(config_path, dtype="bf16"), reshard.Model(config_path,
                                                                      dtype="bfloat16")]

    def call(comm):
        r = comm.rank
        models[r % 2].plan(comm, "tp=2", "tp=2", delta=True, verify=True if r else None,
                           timeout_s=30 if r % 2 else 30.0)

    out = _plan_errors(4, call)
    assert all(e is None for e, _ in out.values()), out


class _Stepped(conventions.Weights):
    """conventions.Weights after ``step`` optimizer-like steps: every fifth row of each
    tensor (by step) has its first element moved, the rest unchanged."""

    def __init__(self, cfg, step):
        super().__init__(cfg)
        self.step = step

    def rows(self, name, a=0, b=None):
        t = super().rows(name, a, b).clone()
        if self.step:
            flat = t.view(t.shape[0], -1)
            sel = torch.arange(a, a + t.shape[0]) % 5 == self.step % 5
            flat[sel, 0] += float(self.step)
        return t


def test_model_plan_delta(config_path):
    """Delta through the one-call path: Model.plan(..., delta=True) over in-process
    comms; three steps of changed training weights, every vLLM element checked against
    the frameworks' rules; from the second step on the senders send deltas (fewer wire
    bytes than stream bytes, no dense stream)."""
    model = reshard.Model(config_path)
    cfg = conventions.load_config(config_path)
    got, sent = {}, {}

    def rank_fn(comm):
        plan = model.plan(comm, "tp=2", "tp=2", delta=True, timeout_s=30)
        side, i = plan.refit.role(comm.rank)
        dst = None
        for step in range(3):
            w = _Stepped(cfg, step)
            if side == "train":
                plan.execute(src=conventions.megatron_state_dict(w, "tp=2", i))
                sent[(i, step)] = plan.delta_info(comm.rank)
                continue
            expect = conventions.vllm_state_dict(w, "tp=2", i, reshard.SENTINEL_BYTE)
            if dst is None:  # padding rows are never written: they keep the sentinel
                dst = {n: torch.empty_like(t).view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
                       .view(t.dtype) for n, t in expect.items()}
            plan.execute(dst=dst)
            got[(i, step)] = (sum(conventions.mismatches(dst[n], e) for n, e in expect.items()),
                              plan.delta_info(comm.rank)["state"])

    reshard.run_threads(4, rank_fn)
    assert sorted(got) == [(i, s) for i in (0, 1) for s in range(3)]
    assert all(v == (0, "committed") for v in got.values()), got
    for (i, step), info in sent.items():
        if step:
            assert info["dense_streams"] == 0 and info["wire_bytes"] < info["stream_bytes"] / 4, \
                info
