"""Refits between processes over MPI (mpi4py communicators), every element checked.
Run under mpirun with 4 ranks (.ci/run does):

    mpirun -np 4 /usr/bin/python3 -m pytest -q tests/python/test_mpi.py

Alone (one rank) every test is skipped."""

import json

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI", reason="mpi4py is not installed")

import reshard  # noqa: E402
from reshard import Shard  # noqa: E402
import conventions  # noqa: E402
from dtensor_oracle import four_rank_refit  # noqa: E402
from test_model_refit import TINY  # noqa: E402

WORLD = MPI.COMM_WORLD
pytestmark = pytest.mark.skipif(WORLD.size != 4, reason="run under mpirun -np 4 (world is %d)"
                                % WORLD.size)


@pytest.fixture
def comm():
    c = reshard.Comm.from_mpi(WORLD)
    yield c
    c.close()


def test_comm_from_mpi4py(comm):
    assert (comm.kind, comm.rank, comm.size) == ("mpi", WORLD.rank, 4)
    sub = WORLD.Split(WORLD.rank % 2, WORLD.rank)
    c2 = reshard.Comm.from_mpi(sub)
    assert (c2.rank, c2.size) == (WORLD.rank // 2, 2)
    c2.close()
    sub.Free()


def test_dtensor_refit_over_mpi(comm):
    four_rank_refit(comm)


@pytest.mark.parametrize("method", ["plan", "baseline"])
def test_model_refit_over_mpi(comm, tmp_path_factory, method):
    """Megatron tp=2 -> vLLM tp=2 of a tiny model, twice, by reshard's plan and by the
    gather+broadcast baseline: every destination element is vLLM's (the conventions'
    oracle), bytes outside the tensors untouched."""
    path = None
    if WORLD.rank == 0:
        path = str(tmp_path_factory.mktemp("cfg") / "config.json")
        with open(path, "w") as f:
            json.dump(dict(TINY, tie_word_embeddings=False), f)
    path = WORLD.bcast(path)
    refit = reshard.Model(path).refit("tp=2", "tp=2")
    w = conventions.Weights(conventions.load_config(path))
    if method == "plan":
        plan = reshard.Plan(refit.train, refit.infer, rank=WORLD.rank, world=4, timeout_s=30)
        run = lambda **bufs: plan.execute(comm, **bufs)  # noqa: E731
    else:
        base = reshard.Baseline(refit.train, refit.infer, comm, staging_mb=1, timeout_s=30)
        run = base.execute
    side, i = refit.role(WORLD.rank)
    for _ in range(2):  # the plan is reused
        if side == "train":
            run(src=conventions.megatron_state_dict(w, "tp=2", i))
        else:
            expect = conventions.vllm_state_dict(w, "tp=2", i, reshard.SENTINEL_BYTE)
            dst = refit.infer.new_buffers(WORLD.rank, fill=reshard.SENTINEL_BYTE)
            run(dst=dst)
            assert sorted(dst) == sorted(expect)
            for n, e in expect.items():
                assert conventions.mismatches(dst[n], e) == 0, n


def test_misuse_on_one_rank_fails_every_rank_over_mpi(comm):
    """Rank 1 hands a float64 tensor: every rank raises before a byte moves."""
    tensors = reshard.Tensors()
    tensors.add("x", (8, 4), np.float32)
    src = reshard.Layout.from_placements(tensors, {"x": ([0, 1], [Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"x": ([2, 3], [Shard(1)])})
    r = WORLD.rank
    plan = reshard.Plan(src, dst, rank=r, world=4, timeout_s=30)
    s = {"x": np.ones((4, 4), np.float64 if r == 1 else np.float32)} if r < 2 else None
    d = dst.new_buffers(r, library="numpy", fill=reshard.SENTINEL_BYTE)
    with pytest.raises(reshard.ReshardError) as e:
        plan.execute(comm, src=s, dst=d)
    if r == 1:
        assert e.value.status == reshard.Status.DTYPE and "'x'" in str(e.value)
    else:
        assert e.value.status == reshard.Status.BUFFER
    for t in d.values():
        assert (t.view(np.uint8) == reshard.SENTINEL_BYTE).all()


def test_rank_planning_from_other_layouts_fails_every_rank_over_mpi(comm):
    """Rank 3 builds its destination layout with another placement: every rank
    fails with MISMATCH at the first agreement (not after the timeout), and no
    destination byte is written."""
    tensors = reshard.Tensors()
    tensors.add("x", (8, 4), np.float32)
    src = reshard.Layout.from_placements(tensors, {"x": ([0, 1], [Shard(0)])})
    placement = Shard(0) if WORLD.rank == 3 else Shard(1)
    dst = reshard.Layout.from_placements(tensors, {"x": ([2, 3], [placement])})
    r = WORLD.rank
    plan = reshard.Plan(src, dst, rank=r, world=4, timeout_s=30)
    s = src.new_buffers(r, library="numpy", fill=1)
    d = dst.new_buffers(r, library="numpy", fill=reshard.SENTINEL_BYTE)
    with pytest.raises(reshard.ReshardError) as e:
        plan.execute(comm, src=s, dst=d)
    assert e.value.status == reshard.Status.MISMATCH and "different inputs" in e.value.message
    for t in d.values():
        assert (t.view(np.uint8) == reshard.SENTINEL_BYTE).all()


def _in_shared(tensors):
    """The same torch tensors, copied into shared allocations (reshard.shared_like):
    bf16 goes through its bits as int16, torch.from_numpy keeps the memory."""
    import torch
    out = {}
    for n, t in tensors.items():
        bits = t.contiguous().view(torch.int16).numpy()
        out[n] = torch.from_numpy(reshard.shared_like(bits)).view(t.dtype)
        assert torch.equal(out[n].view(torch.int16), t.contiguous().view(torch.int16))
    return out


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("two_hosts", [False, True])
def test_colocated_model_refit_over_mpi(comm, tmp_path_factory, two_hosts, shared):
    """Model.plan(..., colocated=True): pieces between ranks of one host are read
    one-sided (train rank i and infer rank i share device i); with two hosts the
    other pieces cross over MPI. Every element against the conventions oracle, twice
    with the same plan; the read bytes are what the global plan says. With ``shared``
    the training tensors live in reshard.alloc_shared memory (mapped by the readers)."""
    path = None
    if WORLD.rank == 0:
        path = str(tmp_path_factory.mktemp("cfg") / "config.json")
        with open(path, "w") as f:
            json.dump(dict(TINY, tie_word_embeddings=False), f)
    path = WORLD.bcast(path)
    hosts = [r % 2 for r in range(4)] if two_hosts else [0] * 4
    devices = [0, 1, 0, 1]
    model = reshard.Model(path)
    plan = model.plan(comm, "tp=2", "tp=2", timeout_s=30, hosts=hosts, devices=devices,
                      colocated=True)
    whole = model.refit("tp=2", "tp=2")
    g = reshard.Plan(whole.train, whole.infer, rank=reshard.ALL_RANKS, world=4, hosts=hosts,
                     devices=devices, colocated=True).stats()
    assert g["bytes_peer_read"] == g["bytes_same_device"] + g["bytes_same_host"] > 0
    assert (g["bytes_cross_host"] > 0) == two_hosts
    for k in ("same_device", "same_host", "cross_host"):
        assert g["bytes_" + k] == g["bound_%s_bytes" % k]
    w = conventions.Weights(conventions.load_config(path))
    side, i = plan.refit.role(WORLD.rank)
    src = conventions.megatron_state_dict(w, "tp=2", i) if side == "train" else None
    if shared and src is not None:
        src = _in_shared(src)
    read = 0
    for _ in range(2):
        if side == "train":
            got = plan.execute(src=src)
        else:
            expect = conventions.vllm_state_dict(w, "tp=2", i, reshard.SENTINEL_BYTE)
            dst = plan.refit.infer.new_buffers(WORLD.rank, fill=reshard.SENTINEL_BYTE)
            got = plan.execute(dst=dst)
            for n, e in expect.items():
                assert conventions.mismatches(dst[n], e) == 0, n
        read = WORLD.allreduce(got["bytes_peer_read"])
        assert read == g["bytes_peer_read"]
        if side != "train" and shared:  # the readers mapped the owners' shared allocations
            with open("/proc/self/maps") as f:
                assert "reshard-shared" in f.read()


def test_delta_after_the_baseline_wrote_over_mpi(comm):
    """A delta plan refits twice, the gather+broadcast baseline then writes other weights
    into the same destination arrays, then the delta plan again: that refit is dense
    (reshard records the last writer of each destination range) and every element exact.
    Checksum mode off, explicitly: the record alone must keep it exact."""
    from dtensor_oracle import local_shard
    r = WORLD.rank
    shape = (64, 48)
    tensors = reshard.Tensors()
    tensors.add("w", shape, np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": ([0, 1], [Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"w": ([2, 3], [Shard(1)])})
    rng = np.random.default_rng(3)
    g = [rng.standard_normal(shape).astype(np.float32)]
    for _ in range(2):
        g.append(g[-1].copy())
        g[-1][rng.random(shape) < 0.3] = 0.0
    plan = reshard.Plan(src, dst, rank=r, world=4, staging_mb=1, timeout_s=30, delta=True,
                        checksum=False)
    base = reshard.Baseline(src, dst, comm, staging_mb=1, timeout_s=30)
    d = {p.name: np.zeros(p.shape, dtype=np.float32) for p in dst.parameters(r)}
    steps = [(plan, g[0]), (plan, g[1]), (base, -g[1] - 1.0), (plan, g[2])]
    for k, (who, whole) in enumerate(steps):
        shard = local_shard(whole, [0, 1], [Shard(0)], r)
        s = {"w": np.ascontiguousarray(shard)} if shard is not None and shard.size else {}
        if who is plan:
            plan.execute(comm, src=s, dst=d)
        else:
            base.execute(src=s, dst=d)
        if d:
            want = local_shard(whole, [2, 3], [Shard(1)], r)
            assert d["w"].view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), k
    if r < 2:
        assert plan.delta_info()["dense_streams"] == 2
