"""Every misuse is a ReshardError with the library's (or the binding check's) message,
raised before anything moves, on every rank of the refit; never a crash, never a
silently wrong element."""

import threading

import numpy as np
import pytest
import torch

import reshard
from reshard import Shard, Status

WORLD = 4


def layouts():
    tensors = reshard.Tensors()
    tensors.add("layer.weight", (4, 6), np.float32)
    tensors.add("layer.norm", (6,), np.float32)
    src = reshard.Layout.from_placements(tensors, {"layer.weight": ([0, 1], [Shard(0)]),
                                                   "layer.norm": ([0, 1], [reshard.Replicate()])})
    dst = reshard.Layout.from_placements(tensors, {"layer.weight": ([2, 3], [Shard(1)]),
                                                   "layer.norm": ([2, 3], [Shard(0)])})
    return tensors, src, dst


def good_buffers(layout, rank):
    return layout.new_buffers(rank, library="numpy", fill=0x11)


def outcomes(edit, world=WORLD, layouts_=None, plans=None):
    """Run a refit where rank r's (src, dst) dicts pass through edit(r, src, dst);
    returns per rank the exception raised (or None) and the destination dicts.
    Each rank's plan is plans[r] when given, else made from layouts_ (default
    layouts()) with a 30 s timeout."""
    _, src, dst = layouts_ or layouts()
    errs, dsts = [None] * world, [None] * world

    def rank_fn(comm):
        r = comm.rank
        plan = plans[r] if plans else reshard.Plan(src, dst, rank=r, world=world, timeout_s=30)
        s, d = good_buffers(src, r), good_buffers(dst, r)
        s, d = edit(r, s, d)
        dsts[r] = d
        try:
            plan.execute(comm, src=s, dst=d)
        except reshard.ReshardError as e:
            errs[r] = e

    reshard.run_threads(world, rank_fn)
    return errs, dsts


def assert_all_fail(errs, bad_rank, *words):
    """The rank at fault names the problem; every other rank fails too (BUFFER, the
    library's agreement); no destination byte was written."""
    for r, e in enumerate(errs):
        assert isinstance(e, reshard.ReshardError), "rank %d did not fail" % r
    for w in words:
        assert w in str(errs[bad_rank]), str(errs[bad_rank])
    for r, e in enumerate(errs):
        if r != bad_rank:
            assert e.status == Status.BUFFER and e.message, str(e)


def assert_untouched(dsts):
    for d in dsts:
        for name, t in (d or {}).items():
            t = getattr(t, "_t", t)  # FakeCudaTensor below
            assert (np.asarray(t).view(np.uint8) == 0x11).all(), name


class FakeCudaTensor:
    """A CPU tensor that says it lives on a CUDA device: how a CUDA tensor handed to
    a CPU transport looks to the binding (this machine has no GPU)."""

    def __init__(self, t):
        self._t = t
        self.device = torch.device("cuda", 0)
        self.dtype, self.shape = t.dtype, t.shape

    def data_ptr(self):
        return self._t.data_ptr()

    def numel(self):
        return self._t.numel()

    def element_size(self):
        return self._t.element_size()

    def is_contiguous(self):
        return True


def _rename(s, d):
    d["layer.wieght"] = d.pop("layer.weight")


def _drop(s, d):
    del s["layer.norm"]


def _extra(s, d):
    d["lm_head.weight"] = np.full(4, 0x11111111, np.uint32).view(np.float32)


def _fp64(s, d):
    s["layer.norm"] = s["layer.norm"].astype(np.float64)


def _reshaped(s, d):  # the right bytes, the wrong shape
    d["layer.weight"] = np.full((3, 4), 0x11111111, np.uint32).view(np.float32)


def _strided(s, d):  # (2, 6) with strides (1, 2)
    s["layer.weight"] = torch.empty(6, 2).t()


def _on_cuda(s, d):
    d["layer.norm"] = FakeCudaTensor(torch.from_numpy(d["layer.norm"]))


def _read_only(s, d):
    d["layer.norm"].flags.writeable = False


# misuse: (the rank that makes it, what it does, its status, words its message has)
MISUSES = {
    "wrong_name": (2, _rename, Status.BUFFER,
                   ["'layer.wieght' is not in the layout", "'layer.weight'", "is missing"]),
    "missing_parameter": (0, _drop, Status.BUFFER, ["source rank 0", "'layer.norm'",
                                                    "is missing"]),
    "extra_parameter": (3, _extra, Status.BUFFER, ["'lm_head.weight' is not in the layout"]),
    "wrong_dtype": (1, _fp64, Status.DTYPE, ["'layer.norm'", "dtype fp64", "declares fp32"]),
    "wrong_shape_same_bytes": (2, _reshaped, Status.BUFFER,
                               ["'layer.weight'", "shape [3, 4]", "declares [4, 3]"]),
    "non_contiguous": (0, _strided, Status.BUFFER, ["'layer.weight'", "not contiguous"]),
    "wrong_device": (3, _on_cuda, Status.BUFFER, ["'layer.norm'", "is on cuda", "CPU memory"]),
    "read_only_destination": (2, _read_only, Status.BUFFER, ["'layer.norm'", "read-only"]),
}


@pytest.mark.parametrize("misuse", sorted(MISUSES))
def test_misuse(misuse):
    bad_rank, act, status, words = MISUSES[misuse]

    def edit(r, s, d):
        if r == bad_rank:
            act(s, d)
        return s, d

    errs, dsts = outcomes(edit)
    assert_all_fail(errs, bad_rank, *words)
    assert errs[bad_rank].status == status
    assert_untouched(dsts)


def _bound_by(bad_rank, src_of, dst_of=None, **kw):
    """outcomes() where rank ``bad_rank`` binds src_of(s) and dst_of(d) instead of its
    good buffers."""
    def edit(r, s, d):
        if r == bad_rank:
            return src_of(s), (dst_of(d) if dst_of else d)
        return s, d

    return outcomes(edit, **kw)


def _assert_peers_told(errs, bad_rank):
    """Every peer fails BUFFER naming the bad rank and that rank's own first problem
    (its message's first 60 characters, carried over the agreement)."""
    first = errs[bad_rank].message[:60]
    for r, e in enumerate(errs):
        assert e is not None, "rank %d did not fail" % r
        if r != bad_rank:
            assert e.status == Status.BUFFER, str(e)
            assert "rank %d could not" % bad_rank in e.message, str(e)
            assert first in e.message, (first, str(e))


def test_not_a_tensor():
    """A list where a tensor goes: View raises TypeError before any C call; the rank
    still tells its peers (they fail at once, not at the timeout) and raises
    ReshardError naming the parameter, chained to the TypeError."""
    errs, dsts = _bound_by(1, lambda s: dict(s, **{"layer.weight": [1.0, 2.0]}))
    e = errs[1]
    assert e.status == Status.BUFFER and "'layer.weight'" in e.message, str(e)
    assert "source rank 1" in e.message and "torch.Tensor or a numpy.ndarray" in e.message
    assert isinstance(e.__cause__, TypeError)
    _assert_peers_told(errs, 1)
    assert_untouched(dsts)


class _BrokenTensor:
    device = torch.device("cpu")

    def data_ptr(self):
        raise RuntimeError("storage was freed")


def test_data_ptr_raises():
    errs, dsts = _bound_by(2, lambda s: s, lambda d: dict(d, **{"layer.norm": _BrokenTensor()}))
    e = errs[2]
    assert e.status == Status.BUFFER and "destination rank 2" in e.message, str(e)
    assert "'layer.norm'" in e.message and "storage was freed" in e.message, str(e)
    assert isinstance(e.__cause__, RuntimeError)
    _assert_peers_told(errs, 2)
    assert_untouched([{k: v for k, v in d.items() if not isinstance(v, _BrokenTensor)}
                      for d in dsts])


def test_binding_error_on_a_rank_without_buffers():
    """World 4, rank 3 holds nothing; it passes a name no layout declares: it has no
    buffer to withhold, yet every rank fails before a byte moves."""
    tensors = reshard.Tensors()
    tensors.add("layer.weight", (4, 6), np.float32)
    src = reshard.Layout.from_placements(tensors, {"layer.weight": ([0], [reshard.Replicate()])})
    dst = reshard.Layout.from_placements(tensors, {"layer.weight": ([1, 2], [Shard(0)])})
    assert src.parameters(3) == [] and dst.parameters(3) == []
    extra = np.full(4, 0x11111111, np.uint32).view(np.float32)
    errs, dsts = _bound_by(3, lambda s: s, lambda d: {"lm_head.weight": extra},
                           layouts_=(tensors, src, dst))
    assert errs[3].status == Status.BUFFER, str(errs[3])
    assert "'lm_head.weight' is not in the layout" in errs[3].message
    _assert_peers_told(errs, 3)
    assert_untouched(dsts)


def test_plan_for_another_rank():
    """Plans made with rank=(1, 0, 2, 3) on comms 0, 1, 2, 3: the comm/plan rank
    mismatch is named (not a missing parameter) and no rank waits for the timeout."""
    _, src, dst = layouts()
    order = [1, 0, 2, 3]
    plans = [reshard.Plan(src, dst, rank=order[r], world=WORLD, timeout_s=30)
             for r in range(WORLD)]
    errs, dsts = _bound_by(-1, None, plans=plans)
    for r in (0, 1):
        assert errs[r].status == Status.INVALID_ARG, str(errs[r])
        assert "comm is rank %d of 4, the plan is for rank %d of 4" % (r, order[r]) \
            in errs[r].message, str(errs[r])
    for r in (2, 3):
        assert errs[r].status == Status.BUFFER and "rank 0 could not" in errs[r].message
    assert_untouched(dsts)


def test_rank_out_of_range():
    _, src, dst = layouts()
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Plan(src, dst, rank=WORLD, world=WORLD)
    assert e.value.status == Status.RANK and "my_rank 4 outside [0, 4)" in e.value.message
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Plan(src, dst, rank=0, world=3)  # the layouts use rank 3
    assert e.value.status == Status.RANK and "rank 3" in e.value.message
    with pytest.raises(reshard.ReshardError) as e:
        src.add_fragment("layer.weight", -1, 0, (0, 0), (1, 1))
    assert e.value.status == Status.RANK and "negative rank" in e.value.message


def test_another_plans_tensors():
    """Tensors bound for plan A handed to plan B: by name they do not match; by
    buffer id the library's exact size check refuses them on every rank."""
    _, src, dst = layouts()
    tensors_b = reshard.Tensors()
    tensors_b.add("other.weight", (4, 6), np.float32)
    src_b = reshard.Layout.from_placements(tensors_b, {"other.weight": ([0, 1], [Shard(1)])})
    dst_b = reshard.Layout.from_placements(tensors_b, {"other.weight": ([2, 3], [Shard(0)])})
    errs = [None] * WORLD

    def rank_fn(comm):
        r = comm.rank
        plan_b = reshard.Plan(src_b, dst_b, rank=r, world=WORLD)
        s, d = good_buffers(src, r), good_buffers(dst, r)  # plan A's tensors
        try:
            plan_b.execute(comm, src=s, dst=d)
        except reshard.ReshardError as e:
            errs[r] = e

    reshard.run_threads(WORLD, rank_fn)
    assert all(e is not None for e in errs)
    assert "'layer.weight' is not in the layout" in str(errs[0])

    errs = [None] * WORLD

    def by_id(comm):
        r = comm.rank
        plan_b = reshard.Plan(src_b, dst_b, rank=r, world=WORLD)
        s, d = good_buffers(src, r), good_buffers(dst, r)
        try:  # by position: plan A's weight shard (2, 6) where plan B wants (4, 3)
            plan_b.execute(comm, src=list(s.values())[:1], dst=list(d.values())[:1])
        except reshard.ReshardError as e:
            errs[r] = e

    reshard.run_threads(WORLD, by_id)
    assert all(e is not None and e.status == Status.BUFFER for e in errs)
    assert "'other.weight'" in str(errs[0]) and "[2, 6]" in str(errs[0])


def test_bad_model_and_spec_carry_c_message():
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Model("no-such-model")
    assert e.value.status == Status.IO and "no such shipped model" in e.value.message
    m = reshard.Model("qwen3-0.6b", layers=2)
    with pytest.raises(reshard.ReshardError) as e:
        m.refit("tp=3", "tp=2")
    assert e.value.status == Status.CONFIG and "tp=3 does not divide" in e.value.message
    with pytest.raises(reshard.ReshardError) as e:
        m.refit("tq=2", "tp=2")
    assert e.value.status == Status.INVALID_ARG and "unknown key 'tq'" in e.value.message


def test_last_error_is_per_thread():
    """Each thread's exception carries its own C message, even when another
    thread fails in between (reshard_last_error is per thread)."""
    tensors = reshard.Tensors()
    tensors.add("t", (2,), "fp32")
    barrier, seen = threading.Barrier(2), {}

    def fail(name, call):
        try:
            call()
        except reshard.ReshardError as e:
            barrier.wait()  # both have failed before either reads its message
            seen[name] = e.message

    a = threading.Thread(target=fail, args=("a", lambda: tensors.add("t", (2,), "fp32")))
    b = threading.Thread(target=fail, args=("b", lambda: reshard.Model("/no/such.json")))
    a.start(), b.start(), a.join(), b.join()
    assert "t" in seen["a"] and "json" not in seen["a"]
    assert "/no/such.json" in seen["b"]


def test_cpu_tensor_for_the_nccl_transport():
    """An NCCL communicator moves CUDA memory: a CPU tensor is refused by the binding
    (checked through bind() itself, which Plan.execute calls with the comm's memory
    kind; a real NCCL comm needs a GPU, see test_nccl_bootstrap.py)."""
    from reshard.buffers import bind
    _, src, _ = layouts()
    arr, n, views, problems = bind(src, 0, good_buffers(src, 0), "source", "cuda", False)
    assert len(problems) == 2 and all("is on cpu but this communicator moves CUDA memory" in m
                                      for _, m in problems)
    assert all(arr[b].ptr is None for b in range(n))  # withheld: nothing can move


def _every_rank(fn):
    errs = [None] * WORLD

    def rank_fn(comm):
        try:
            fn(comm)
        except reshard.ReshardError as e:
            errs[comm.rank] = e

    reshard.run_threads(WORLD, rank_fn)
    return errs


def test_failed_plan_tells_the_peers():
    """Rank 1 plans for a world of 3 (its layouts name rank 3): with comm= it tells
    its peers, whose execute fails at once with its status, naming it."""
    _, src, dst = layouts()
    written = []

    def fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=3 if r == 1 else WORLD, comm=comm,
                            timeout_s=30)
        d = good_buffers(dst, r)
        written.append(d)
        plan.execute(comm, src=good_buffers(src, r), dst=d)

    errs = _every_rank(fn)
    assert errs[1].status == Status.RANK and "world size 3" in errs[1].message
    for r in (0, 2, 3):
        assert errs[r].status == Status.RANK, str(errs[r])
        assert "rank 1 could not create its plan" in errs[r].message, str(errs[r])
    assert_untouched(written)


def test_plans_from_different_inputs_fail_every_rank():
    """Rank 2 planned with another staging bound: the fingerprints differ, every
    rank fails with MISMATCH before a byte moves."""
    _, src, dst = layouts()
    written = []

    def fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=2 if r == 2 else 1)
        d = good_buffers(dst, r)
        written.append(d)
        plan.execute(comm, src=good_buffers(src, r), dst=d)

    errs = _every_rank(fn)
    assert all(e is not None and e.status == Status.MISMATCH for e in errs), errs
    assert all("different inputs" in e.message for e in errs)
    assert_untouched(written)


def test_error_pickles_and_copies():
    """multiprocessing and Ray pickle exceptions: status, C name, message and context
    survive a round trip, and so does the text."""
    import copy
    import pickle

    err = reshard.errors.error(Status.BUFFER, "rank 2: parameter 'w' is missing", "execute")
    for back in (pickle.loads(pickle.dumps(err)), copy.copy(err), copy.deepcopy(err)):
        assert type(back) is reshard.ReshardError
        assert back.status == Status.BUFFER and isinstance(back.status, Status)
        assert back.c_name == "RESHARD_ERR_BUFFER" and back.context == "execute"
        assert back.message == "rank 2: parameter 'w' is missing"
        assert str(back) == str(err)


def test_closed_comm():
    """A closed comm is named as such, not rank -1 and "bad argument"."""
    _, src, dst = layouts()
    plan = reshard.Plan(src, dst, rank=0, world=WORLD)
    group = reshard.InprocGroup(WORLD)
    comm = group.comm(0)
    comm.close()
    for use in (lambda: comm.rank, lambda: plan.execute(comm),
                lambda: reshard.plan_fail(comm, Status.SHAPE)):
        with pytest.raises(reshard.ReshardError) as e:
            use()
        assert e.value.status == Status.INVALID_ARG and "comm is closed" in e.value.message
    assert "closed" in repr(comm)
    group.close()


def test_plan_from_other_layouts_fails_every_rank_alike():
    """Rank 2 planned from other layouts (another parameter name): its binding by
    name fails first, so it tells its peers; every rank fails with the same status
    (BUFFER), at once, rank 2 naming the parameter, and nothing moves."""
    _, src, dst = layouts()
    tensors_b = reshard.Tensors()
    tensors_b.add("layer.weight", (4, 6), np.float32)
    tensors_b.add("layer.bias", (6,), np.float32)
    src_b = reshard.Layout.from_placements(tensors_b, {"layer.weight": ([0, 1], [Shard(0)]),
                                                       "layer.bias": ([0, 1], [Shard(0)])})
    dst_b = reshard.Layout.from_placements(tensors_b, {"layer.weight": ([2, 3], [Shard(1)]),
                                                       "layer.bias": ([2, 3], [Shard(0)])})
    plans = [reshard.Plan(src_b, dst_b, rank=r, world=WORLD, timeout_s=30) if r == 2 else
             reshard.Plan(src, dst, rank=r, world=WORLD, timeout_s=30) for r in range(WORLD)]
    errs, dsts = _bound_by(-1, None, plans=plans)
    assert all(e is not None and e.status == Status.BUFFER for e in errs), errs
    assert "'layer.norm' is not in the layout" in errs[2].message, str(errs[2])
    _assert_peers_told(errs, 2)
    assert_untouched(dsts)


def test_summary_plan():
    """A summary plan counts what the full global plan moves (4x6 fp32 Shard(0) ->
    Shard(1): 96 bytes, between every source and destination pair 24) but keeps no
    pieces: it is refused for one rank and for execution."""
    _, src, dst = layouts()
    full = reshard.Plan(src, dst, rank=reshard.ALL_RANKS, world=WORLD)
    summ = reshard.Plan(src, dst, rank=reshard.ALL_RANKS, world=WORLD, summary=True)
    assert summ.stats() == full.stats()
    assert summ.stats()["bytes_total"] == 4 * 6 * 4 + 6 * 4
    for s in (0, 1):
        for d in (2, 3):
            assert summ.pair_bytes(s, d) == full.pair_bytes(s, d)
    assert summ.pair_bytes(0, 2) + summ.pair_bytes(1, 2) == 4 * 3 * 4 + 3 * 4
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Plan(src, dst, rank=0, world=WORLD, summary=True)
    assert e.value.status == Status.INVALID_ARG and "summary" in e.value.message
    errs, dsts = _bound_by(-1, None, plans=[summ] * WORLD)
    for r in range(WORLD):
        assert errs[r].status == Status.INVALID_ARG and "summary" in errs[r].message, str(errs[r])
    assert_untouched(dsts)


@pytest.mark.parametrize("shape,text", [((2 ** 33, 2 ** 31), "more than an allocation"),
                                        ((2 ** 62 + 1, 4), "more than an allocation"),
                                        ((-1, -1), "integer >= 0"), ((0, 4), "no bytes")])
def test_alloc_shared_bad_shape_is_named(shape, text):
    """A shape whose byte count wraps int64 (or is negative, or empty) is INVALID_ARG
    naming it, never a smaller allocation."""
    if not reshard._lib.has("reshard_alloc_shared"):
        pytest.skip("this libreshard has no reshard_alloc_shared")
    with pytest.raises(reshard.ReshardError, match=text) as e:
        reshard.alloc_shared(shape)
    assert e.value.status == reshard.Status.INVALID_ARG
    assert reshard.alloc_shared((3, 4), "float32").nbytes == 48


def test_module_prefix_names_give_a_short_error_with_the_fix():
    """The whole qwen3-0.6b (28 layers) bound with a DDP-style ``module.`` prefix on
    every name: the error is under 2 KB (the first problems, the count, what the layout
    declares) and says to strip the prefix; e.problems holds every problem; the peer
    names rank 0 and its first problem."""
    model = reshard.Model("qwen3-0.6b")
    out = {}

    def fn(comm):
        plan = model.plan(comm, "tp=1", "tp=1", timeout_s=30)
        names = [p.name for p in plan.refit.train.parameters(0)] if comm.rank == 0 else []
        src = {"module." + n: np.zeros(1, np.float32) for n in names} if comm.rank == 0 else None
        try:
            plan.execute(src=src, dst=None if comm.rank == 0 else
                         plan.refit.infer.new_buffers(1))  # not touched: never written
        except reshard.ReshardError as e:
            out[comm.rank] = e

    reshard.run_threads(2, fn)
    e = out[0]
    n = len(model.refit("tp=1", "tp=1").train.parameters(0))
    assert n > 200  # 28 layers
    assert e.status == Status.BUFFER and len(str(e)) < 2048, (len(str(e)), str(e))
    assert "%d problems" % (2 * n + 1) in e.message, e.message
    assert "carry the prefix 'module.' that the layout's names do not" in e.message, e.message
    assert "strip it" in e.message and len(e.problems) == 2 * n + 1
    assert "rank 0 could not" in out[1].message and e.message[:60] in out[1].message, out[1]
    assert "carry the prefix 'module.'" in out[1].message, out[1]  # the hint travels first


def test_unpadded_vocabulary_and_local_spec_names_say_what_to_do():
    """Train rank 0 binds an unpadded embedding (Megatron-Bridge's 75,968 rows at tp=2
    where Megatron-LM pads to 76,032) and the local layer spec's norm name: each problem
    says what to do (convention='megatron-bridge'; the TE spec's fused norm names)."""
    model = reshard.Model("qwen3-0.6b", layers=1)
    out = {}

    def fn(comm):
        plan = model.plan(comm, "tp=2", "tp=2", timeout_s=30)
        side, _ = plan.refit.role(comm.rank)
        layout = plan.refit.train if side == "train" else plan.refit.infer
        bufs = layout.new_buffers(comm.rank)  # never written: nothing moves
        if comm.rank == 0:
            emb = bufs["embedding.word_embeddings.weight"]
            assert emb.shape[0] == 76032
            bufs["embedding.word_embeddings.weight"] = torch.empty(75968, emb.shape[1],
                                                                   dtype=emb.dtype)
            norm = "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"
            bufs["decoder.layers.0.input_layernorm.weight"] = bufs.pop(norm)
        try:
            plan.execute(src=bufs if side == "train" else None,
                         dst=bufs if side == "infer" else None)
        except reshard.ReshardError as e:
            out[comm.rank] = e

    reshard.run_threads(4, fn)
    e = out[0]
    assert e.status == Status.BUFFER, str(e)
    assert "shape [75968, 1024], the layout declares [76032, 1024] (the layout pads the " \
        "vocabulary as Megatron-LM does" in e.message and \
        "convention='megatron-bridge'" in e.message, e.message
    assert "'decoder.layers.0.input_layernorm.weight' is a name of Megatron's local layer " \
        "spec" in e.message and "linear_qkv.layer_norm_weight" in e.message, e.message
    assert all("rank 0 could not" in out[r].message for r in (1, 2, 3)), out


def test_model_name_typo_says_did_you_mean():
    """A shipped model's name mistyped: IO, the shipped names and the closest ones."""
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Model("qwen3-06b")
    assert e.value.status == Status.IO
    assert e.value.message.endswith("did you mean 'qwen3-0.6b' or 'qwen3-30b-a3b'?"), e.value


def test_an_interpreter_without_numpy_is_told_which_python():
    """The usual first mistake: a python3 without Debian's packages (numpy blocked here):
    the ImportError says to run /usr/bin/python3."""
    import subprocess
    import sys
    code = "import sys; sys.modules['numpy'] = None; import reshard"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert "reshard needs numpy" in p.stderr and "run Debian's /usr/bin/python3" in p.stderr, \
        p.stderr[-2000:]


def test_list_binding_refuses_a_buffer_the_layout_does_not_have():
    """Buffers bound as a list by id: an id past the layout's buffers of the rank is
    refused (BUFFER) on that rank and its peers fail too, nothing written."""
    def edit(r, s, d):
        if r == 3:
            d = [d["layer.weight"], d["layer.norm"], np.full(7, -1.0, np.float64)]
        return s, d

    errs, dsts = outcomes(edit)
    assert errs[3].status == Status.BUFFER and "buffer 2 is given, but the layout has 2 " \
        "buffer(s) for this rank" in errs[3].message, errs[3]
    _assert_peers_told(errs, 3)


def test_a_very_long_name_gives_a_bounded_message():
    """A 100,000-character parameter name: the rank's own message stays short."""
    def edit(r, s, d):
        if r == 3:
            d = dict(d, **{"x" * 100000: np.zeros(2, np.float32)})
        return s, d

    errs, _ = outcomes(edit)
    assert errs[3].status == Status.BUFFER and len(errs[3].message) < 2048, len(errs[3].message)
