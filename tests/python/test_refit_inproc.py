"""Refits between DTensor layouts on in-process threads, numpy and torch buffers,
every destination element checked against dtensor_oracle (PyTorch's rules)."""

import numpy as np
import pytest
import torch

import reshard
from reshard import Replicate, Shard, StridedShard
from dtensor_oracle import local_shard

SRC_MESH = [0, 1]
DST_MESH = [[2, 3], [4, 5]]
WORLD = 6
# name: (shape, numpy dtype, source placements, destination placements)
CASE = {
    "a": ((7, 6), np.float32, [Shard(0)], [Shard(1), StridedShard(0, 2)]),
    "b": ((10,), np.int64, [Replicate()], [Shard(0), Shard(0)]),
    "c": ((4, 6, 3), np.float64, [Shard(1)], [Replicate(), Shard(2)]),
    "d": ((5,), np.int32, [Shard(0)], [StridedShard(0, 2), Replicate()]),
}


def full_values(shape, dtype, salt):
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.int64) * 7 + salt * 1000 + 1).astype(dtype).reshape(shape)


def build(case):
    tensors = reshard.Tensors()
    for name, (shape, dtype, _, _) in case.items():
        tensors.add(name, shape, dtype)
    src = reshard.Layout.from_placements(tensors, {n: (SRC_MESH, c[2]) for n, c in case.items()})
    dst = reshard.Layout.from_placements(tensors, {n: (DST_MESH, c[3]) for n, c in case.items()})
    return tensors, src, dst


def run_refit(case, to_buffer, from_buffer):
    """Every rank: its oracle shards as sources, sentinel-filled destinations; returns
    the destination dicts by rank, converted back to numpy."""
    full = {n: full_values(c[0], c[1], i) for i, (n, c) in enumerate(case.items())}
    _, src, dst = build(case)
    results = {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1)
        s = {}
        for n, c in case.items():
            shard = local_shard(full[n], SRC_MESH, c[2], r)
            if shard is not None and shard.size:
                s[n] = to_buffer(np.ascontiguousarray(shard))
        d = {p.name: to_buffer(np.full(p.shape, -3, dtype=case[p.name][1]))
             for p in dst.parameters(r)}
        stats = plan.execute(comm, src=s, dst=d)
        results[r] = ({n: from_buffer(t) for n, t in d.items()}, stats)

    reshard.run_threads(WORLD, rank_fn)
    return full, results


def check(case, full, results):
    checked = 0
    for r in range(WORLD):
        got, _ = results[r]
        want = {n: local_shard(full[n], DST_MESH, c[3], r) for n, c in case.items()}
        want = {n: w for n, w in want.items() if w is not None and w.size}
        assert sorted(got) == sorted(want), "rank %d holds %s" % (r, sorted(got))
        for n, w in want.items():
            assert got[n].shape == w.shape
            assert np.array_equal(got[n], w), "rank %d tensor %s" % (r, n)
            checked += w.size
    # every destination element of every rank: each tensor once per replica
    assert checked == sum(int(np.prod(c[0])) * 2 if isinstance(c[3][0], Replicate) or
                          isinstance(c[3][1], Replicate) else int(np.prod(c[0]))
                          for c in case.values())


def test_refit_numpy_threads():
    full, results = run_refit(CASE, lambda a: a, lambda a: a)
    check(CASE, full, results)
    assert sum(st["bytes_recv"] + st["bytes_local"] for _, st in results.values()) > 0


def test_refit_torch_threads():
    full, results = run_refit(CASE, torch.from_numpy, lambda t: t.numpy())
    check(CASE, full, results)


def test_refit_torch_bf16_bits():
    """bf16 tensors (no numpy dtype): compared bit for bit through int16 views."""
    tensors = reshard.Tensors()
    tensors.add("w", (9, 8), torch.bfloat16)
    src = reshard.Layout.from_placements(tensors, {"w": ([0, 1, 2], [Shard(1)])})
    dst = reshard.Layout.from_placements(tensors, {"w": ([3, 4], [Shard(0)])})
    g = torch.Generator().manual_seed(5)
    bits = torch.randint(-2**15, 2**15, (9, 8), dtype=torch.int32, generator=g).to(torch.int16)
    full = bits.numpy()
    out = {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=5)
        s = {}
        shard = local_shard(full, [0, 1, 2], [Shard(1)], r)
        if shard is not None:
            s["w"] = torch.from_numpy(np.ascontiguousarray(shard)).view(torch.bfloat16)
        d = dst.new_buffers(r, fill=reshard.SENTINEL_BYTE)
        plan.execute(comm, src=s, dst=d)
        out[r] = {n: t.view(torch.int16).numpy().copy() for n, t in d.items()}

    reshard.run_threads(5, rank_fn)
    for r in (3, 4):
        assert np.array_equal(out[r]["w"], local_shard(full, [3, 4], [Shard(0)], r))


def test_same_ranks_both_sides_local_copies():
    """Ranks that are both source and destination: TP2 -> TP2 on other dims."""
    tensors = reshard.Tensors()
    tensors.add("x", (6, 4), np.float32)
    src = reshard.Layout.from_placements(tensors, {"x": ([0, 1], [Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"x": ([1, 0], [Shard(1)])})
    full = full_values((6, 4), np.float32, 3)
    out = {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=2)
        s = {"x": np.ascontiguousarray(local_shard(full, [0, 1], [Shard(0)], r))}
        d = dst.new_buffers(r, library="numpy", fill=0)
        st = plan.execute(comm, src=s, dst=d)
        out[r] = (d["x"], st)

    reshard.run_threads(2, rank_fn)
    for r in range(2):
        assert np.array_equal(out[r][0], local_shard(full, [1, 0], [Shard(1)], r))
        assert out[r][1]["bytes_local"] == 3 * 2 * 4  # rows it holds x its own columns


def test_list_by_buffer_id():
    """Buffers may be given as a list indexed by buffer id instead of by name."""
    tensors = reshard.Tensors()
    tensors.add("x", (4, 4), np.float64)
    tensors.add("y", (8,), np.float64)
    src = reshard.Layout.from_placements(tensors, {"x": ([0], [Replicate()]),
                                                   "y": ([0], [Replicate()])})
    dst = reshard.Layout.from_placements(tensors, {"x": ([1], [Replicate()]),
                                                   "y": ([1], [Replicate()])})
    fx, fy = full_values((4, 4), np.float64, 1), full_values((8,), np.float64, 2)
    out = {}

    def rank_fn(comm):
        plan = reshard.Plan(src, dst, rank=comm.rank, world=2)
        if comm.rank == 0:
            plan.execute(comm, src=[fx.copy(), fy.copy()])
        else:
            d = [np.zeros((4, 4)), np.zeros(8)]
            plan.execute(comm, dst=d)
            out["d"] = d

    reshard.run_threads(2, rank_fn)
    assert np.array_equal(out["d"][0], fx) and np.array_equal(out["d"][1], fy)


def test_placement_local_shapes_follow_torch_chunk():
    """Shard(0) of 5 over 4 ranks: 2, 2, 1 and nothing (torch.chunk)."""
    tensors = reshard.Tensors()
    tensors.add("v", (5,), "fp32")
    lay = reshard.Layout.from_placements(tensors, {"v": ([0, 1, 2, 3], [Shard(0)])})
    shapes = [[p.shape for p in lay.parameters(r)] for r in range(4)]
    assert shapes == [[(2,)], [(2,)], [(1,)], []]
    assert lay.ranks() == [0, 1, 2]  # rank 3's shard is empty: it holds nothing
    # StridedShard(0, 2) of 8 over 2: each rank 2 blocks of 2 -> local 4
    lay2 = reshard.Layout.from_placements(tensors, {"v": ([0, 1], [StridedShard(0, 2)])})
    frags = sorted((f.rank, f.offset, f.extent) for f in lay2.fragments())
    assert frags == [(0, (0,), (2,)), (0, (3,), (1,)), (1, (2,), (1,)), (1, (4,), (1,))]
    assert [p.shape for p in lay2.parameters(0)] == [(3,)]


def test_plan_stats_is_a_dict_of_counters():
    _, src, dst = build(CASE)
    st = reshard.Plan(src, dst, rank=reshard.ALL_RANKS, world=WORLD).stats()
    want = sum(int(np.prod(c[0])) * np.dtype(c[1]).itemsize * (2 if Replicate() in c[3] else 1)
               for c in CASE.values())
    assert st["bytes_total"] == want
    assert set(st) >= {"bytes_network", "bytes_local", "transfers", "max_nic_send_bytes"}


def test_dtensor_duck_typed_placements():
    """Placements read from objects shaped like torch.distributed.tensor's."""
    class TShard:
        def __init__(self, dim):
            self.dim = dim

        def is_shard(self, dim=None):
            return True

        def is_replicate(self):
            return False

    class TReplicate:
        def is_shard(self, dim=None):
            return False

        def is_replicate(self):
            return True

    class TStrided(TShard):
        def __init__(self, dim, split_factor):
            super().__init__(dim)
            self.split_factor = split_factor

    class FakeDTensor:
        def __init__(self, mesh, placements):
            self.device_mesh = type("DeviceMesh", (), {"mesh": torch.tensor(mesh)})()
            self.placements = placements

    tensors = reshard.Tensors()
    tensors.add("w", (6, 4), np.float32)
    lay = reshard.Layout.from_dtensors(tensors, {"w": FakeDTensor([[0, 1], [2, 3]],
                                                                  (TStrided(0, 2), TShard(0)))})
    ref = reshard.Layout.from_placements(tensors, {"w": ([[0, 1], [2, 3]],
                                                         [StridedShard(0, 2), Shard(0)])})
    assert lay.fragments() == ref.fragments()
    lay = reshard.Layout.from_dtensors(tensors, {"w": FakeDTensor([0, 1], (TReplicate(),))})
    assert [f.rank for f in lay.fragments()] == [0, 1]


def test_dtensor_from_torch():
    dt = pytest.importorskip("torch.distributed.tensor",
                             reason="DTensor needs torch >= 2.x; this torch is %s"
                             % torch.__version__)
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("torch.distributed is not built")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = dt.DeviceMesh("cpu", [0])
        t = dt.distribute_tensor(torch.arange(12.0).reshape(3, 4), mesh, [dt.Shard(1)])
        tensors = reshard.Tensors()
        tensors.add("w", (3, 4), torch.float32)
        lay = reshard.Layout.from_dtensors(tensors, {"w": t})
        assert [p.shape for p in lay.parameters(0)] == [tuple(t.to_local().shape)]
    finally:
        dist.destroy_process_group()


def test_fill_and_verify_pattern_helpers():
    """fill_pattern / verify_pattern (the library's check, for examples): a refit
    verifies every byte; one flipped element is reported, naming the tensor."""
    _, src, dst = build(CASE)
    bufs = {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD)
        s = src.new_buffers(r, library="numpy", fill=0)
        reshard.fill_pattern(src, r, s)
        d = dst.new_buffers(r, library="numpy", fill=reshard.SENTINEL_BYTE)
        plan.execute(comm, src=s, dst=d)
        bufs[r] = d

    reshard.run_threads(WORLD, rank_fn)
    total = sum(reshard.verify_pattern(dst, r, bufs[r]) for r in range(2, WORLD))
    assert total == sum(p.bytes for r in range(2, WORLD) for p in dst.parameters(r))
    bufs[2]["a"].reshape(-1)[1] += 1
    with pytest.raises(reshard.ReshardError) as e:
        reshard.verify_pattern(dst, 2, bufs[2])
    assert e.value.status == reshard.Status.VERIFY and "tensor a" in e.value.message
