"""Delta refit through the package (Plan(..., delta=True)) on in-process threads: every
destination element equals the oracle's shard of the step's new values (dtensor_oracle,
PyTorch's rules), bit for bit; versions and states as reshard_delta.h says."""

import numpy as np
import pytest

import reshard
from reshard import Shard
from dtensor_oracle import local_shard

SRC_MESH = [0, 1]
DST_MESH = [2, 3]
WORLD = 4
SHAPE = (64, 48)
FRACTIONS = [1.0, 0.01, 0.0, 0.3]  # fraction of elements changed before each step


def steps():
    """The whole tensor at each step (float32), each from the previous by FRACTIONS."""
    rng = np.random.default_rng(5)
    out = [rng.standard_normal(SHAPE).astype(np.float32)]
    for f in FRACTIONS[1:]:
        nxt = out[-1].copy()
        mask = rng.random(SHAPE) < f
        nxt[mask] = rng.standard_normal(int(mask.sum())).astype(np.float32)
        out.append(nxt)
    return out


def layouts():
    """One float32 tensor "w": rows sharded over SRC_MESH, columns over DST_MESH."""
    tensors = reshard.Tensors()
    tensors.add("w", SHAPE, np.float32)
    return (reshard.Layout.from_placements(tensors, {"w": (SRC_MESH, [Shard(0)])}),
            reshard.Layout.from_placements(tensors, {"w": (DST_MESH, [Shard(1)])}))


def sources(whole, r):
    """Rank ``r``'s source tensors of step value ``whole`` (none outside SRC_MESH)."""
    shard = local_shard(whole, SRC_MESH, [Shard(0)], r)
    return {"w": np.ascontiguousarray(shard)} if shard is not None and shard.size else {}


def assert_exact(held, whole, r):
    """Destination rank ``r`` holds its shard of ``whole``, bit for bit."""
    want = local_shard(whole, DST_MESH, [Shard(1)], r)
    assert held.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()


def test_delta_refit_exact_and_versions():
    full = steps()
    src, dst = layouts()
    got, infos = {}, {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1, delta=True)
        assert plan.delta_info()["state"] == "none"
        d = {p.name: np.full(p.shape, -3, dtype=np.float32) for p in dst.parameters(r)}
        for k, g in enumerate(full):
            s = sources(g, r)
            plan.execute(comm, src=s, dst=d)  # the same destination arrays every step
            infos[(r, k)] = plan.delta_info()
            if d:
                got[(r, k)] = d["w"].copy()

    reshard.run_threads(WORLD, rank_fn)
    for k, g in enumerate(full):
        for r in DST_MESH:
            assert_exact(got[(r, k)], g, r)
            assert infos[(r, k)]["state"] == "committed"
        for r in range(WORLD):
            assert infos[(r, k)]["version"] == k + 1
    sent = {k: sum(infos[(r, k)]["wire_bytes"] for r in SRC_MESH) for k in range(len(full))}
    dense = SHAPE[0] * SHAPE[1] * 4
    assert sent[0] >= dense  # the first refit is dense
    assert infos[(0, 0)]["dense_streams"] == 2
    assert sent[1] * 5 < dense  # 1% of fp32 words changed
    assert sent[2] * 50 < dense  # nothing changed: headers only
    assert infos[(0, 1)]["snapshot_bytes"] == dense // 2


def test_delta_flag_is_checked():
    src, dst = layouts()
    with pytest.raises(TypeError, match="delta"):
        reshard.Plan(src, dst, rank=0, world=WORLD, delta=1)
    plan = reshard.Plan(src, dst, rank=0, world=WORLD)
    with pytest.raises(reshard.ReshardError, match="without delta"):
        plan.delta_info()


@pytest.mark.parametrize("kw", [{}, {"checksum": True}, {"verify": True}])
def test_delta_verification_catches_changed_destination(kw):
    """Verification, on by default (and the explicit forms): a destination element changed between executes (behind reshard's
    back) fails that execute on every rank, the receiver's error names tensor, rank and
    box, its weights are torn, and the next execute is complete (every byte as the oracle).
    """
    full = steps()
    src, dst = layouts()
    order = [0, 1, 1, 2]  # the step each execute sends; the third changes nothing
    errors, infos, got = {}, {}, {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1, delta=True, **kw)
        d = {p.name: np.zeros(p.shape, dtype=np.float32) for p in dst.parameters(r)}
        for i, k in enumerate(order):
            s = sources(full[k], r)
            if i == 2 and r == 2:
                d["w"][5, 3] += 1.0  # behind reshard's back: global (5, 3), from rank 0
            try:
                plan.execute(comm, src=s, dst=d)
            except reshard.ReshardError as e:
                errors[(r, i)] = e
            infos[(r, i)] = plan.delta_info()
            if d:
                got[(r, i)] = d["w"].copy()

    reshard.run_threads(WORLD, rank_fn)
    assert sorted(errors) == [(r, 2) for r in range(WORLD)]  # that execute, every rank
    e = errors[(2, 2)]
    assert e.c_name == "RESHARD_ERR_VERIFY"
    assert "rank 2: delta checksum" in str(e) and "from rank 0" in str(e)
    assert "tensor 'w' box [0:32, 0:24]" in str(e)
    assert infos[(2, 2)]["state"] == "torn" and infos[(2, 2)]["version"] == 2
    for r in DST_MESH:  # the next execute: committed, complete, every byte
        assert_exact(got[(r, 3)], full[2], r)
        assert infos[(r, 3)]["state"] == "committed" and infos[(r, 3)]["version"] == 3
    assert infos[(0, 3)]["dense_streams"] == 2
    with pytest.raises(TypeError, match="checksum"):
        reshard.Plan(src, dst, rank=0, world=WORLD, delta=True, checksum=1)
    with pytest.raises(ValueError, match="delta"):
        reshard.Plan(src, dst, rank=0, world=WORLD, checksum=True)
    with pytest.raises(ValueError, match="disagree"):
        reshard.Plan(src, dst, rank=0, world=WORLD, delta=True, checksum=True, verify=False)


def test_delta_verify_false_trusts_the_destination():
    """verify=False, the opt-out: the same change behind reshard's back goes unseen (the
    assumption it states is broken): the execute returns OK with that element stale,
    which is why verification is the default."""
    full = steps()
    src, dst = layouts()
    order = [0, 1, 1]
    got = {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1, delta=True,
                            verify=False)
        d = {p.name: np.zeros(p.shape, dtype=np.float32) for p in dst.parameters(r)}
        for i, k in enumerate(order):
            if i == 2 and r == 2:
                d["w"][5, 3] += 1.0
            plan.execute(comm, src=sources(full[k], r), dst=d)
        if d:
            got[r] = d["w"].copy()

    reshard.run_threads(WORLD, rank_fn)
    want = local_shard(full[1], DST_MESH, [Shard(1)], 2)
    assert got[2][5, 3] == want[5, 3] + 1.0  # stale: the opt-out's documented risk


def test_delta_adopt_keeps_versions():
    """A replanned membership (here: the same layouts) adopts each rank's state: the next
    execute stays delta (no stream dense), versions go on, every byte as the oracle."""
    full = steps()
    src, dst = layouts()
    infos, got = {}, {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1, delta=True)
        d = {p.name: np.zeros(p.shape, dtype=np.float32) for p in dst.parameters(r)}
        for k in range(3):
            if k == 2:
                nxt = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1, delta=True)
                nxt.delta_adopt(plan)
                assert plan.delta_info()["version"] == 0  # moved
                plan = nxt
            s = sources(full[k], r)
            plan.execute(comm, src=s, dst=d)
            infos[(r, k)] = plan.delta_info()
            if d:
                got[(r, k)] = d["w"].copy()
        with pytest.raises(TypeError, match="Plan"):
            plan.delta_adopt(None)

    reshard.run_threads(WORLD, rank_fn)
    for r in DST_MESH:
        assert_exact(got[(r, 2)], full[2], r)
    for r in range(WORLD):
        assert infos[(r, 2)]["version"] == 3
    assert infos[(0, 2)]["dense_streams"] == 0 and infos[(1, 2)]["dense_streams"] == 0


def test_delta_invalidate_after_the_engine_rewrote_weights():
    """An engine rewrote its weights behind reshard's back (here zeros in place, the same
    array objects): same address and size, so reshard cannot tell them from the committed
    ones and a delta would land on zeros; after delta_invalidate() the step is sent dense
    and exact. (New objects at a freed address: test_delta_fresh_destination_*.)"""
    full = steps()
    src, dst = layouts()
    got, infos = {}, {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1, delta=True)
        keep = {p.name: np.zeros(p.shape, dtype=np.float32) for p in dst.parameters(r)}
        for k in range(3):
            d = keep
            if k == 2 and keep:  # the engine's rewrite, in place
                for t in keep.values():
                    t[...] = 0
                plan.delta_invalidate()
            s = sources(full[k], r)
            plan.execute(comm, src=s, dst=d)
            infos[(r, k)] = plan.delta_info()
            if d:
                got[(r, k)] = d["w"].copy()
        with pytest.raises(reshard.ReshardError, match="not a rank"):
            plan.delta_invalidate(WORLD + 3)

    reshard.run_threads(WORLD, rank_fn)
    for r in DST_MESH:
        assert_exact(got[(r, 2)], full[2], r)
        assert infos[(r, 2)]["state"] == "committed" and infos[(r, 2)]["version"] == 3
    assert infos[(0, 2)]["dense_streams"] >= 1  # the invalidated receivers got it dense
    dense = reshard.Plan(src, dst, rank=0, world=WORLD, staging_mb=1)
    with pytest.raises(reshard.ReshardError, match="without delta"):
        dense.delta_invalidate()


def _fresh_destinations_run(make, keep_base=False):
    """Each rank executes every step of steps() (after the first, 30% of the words zeroed)
    into destinations from ``make(shape)``: new ones every step (they land at the freed
    address), or views of one base array when ``keep_base``. Returns got, infos, ptrs."""
    full = steps()
    rng = np.random.default_rng(11)
    for g in full[1:]:  # words that become +0.0: a delta applied onto zeros never sends them
        g[rng.random(SHAPE) < 0.3] = 0.0
    src, dst = layouts()
    got, infos, ptrs = {}, {}, {}

    def rank_fn(comm):
        r = comm.rank
        # checksum mode off, explicitly: the identity record itself must keep it exact
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1, delta=True,
                            checksum=False)
        base = {p.name: make(p.shape) for p in dst.parameters(r)}
        for k, g in enumerate(full):
            if keep_base:  # a new view object of the same base array each step
                d = {n: t[...] for n, t in base.items()}
            else:
                base = None
                d = {p.name: make(p.shape) for p in dst.parameters(r)}
            plan.execute(comm, src=sources(g, r), dst=d)
            infos[(r, k)] = plan.delta_info()
            if d:
                got[(r, k)] = np.asarray(d["w"]).copy()
                ptrs[(r, k)] = np.asarray(d["w"]).ctypes.data
            del d

    reshard.run_threads(WORLD, rank_fn)
    return full, got, infos, ptrs


def test_delta_fresh_destination_at_freed_address_is_dense():
    """A fresh np.zeros destination each step (landing at the freed address, as vLLM's
    weight reload or an engine restart does): the Plan sees a new object, so the step is
    sent dense and every element is exact (a delta would land on zeros)."""
    full, got, infos, ptrs = _fresh_destinations_run(lambda s: np.zeros(s, dtype=np.float32))
    for k, g in enumerate(full):
        for r in DST_MESH:
            assert_exact(got[(r, k)], g, r)
            assert infos[(r, k)]["state"] == "committed" and infos[(r, k)]["version"] == k + 1
        assert infos[(0, k)]["dense_streams"] == 2 and infos[(1, k)]["dense_streams"] == 2
    # the case itself: at least one refit bound a new array at the address of the last
    assert any(ptrs[(r, k)] == ptrs[(r, k - 1)] for r in DST_MESH for k in range(1, len(full)))


def test_delta_views_of_the_same_base_stay_delta():
    """New view objects of one base array each step: the same memory, so delta."""
    full, got, infos, _ = _fresh_destinations_run(
        lambda s: np.zeros(s, dtype=np.float32), keep_base=True)
    for k, g in enumerate(full):
        for r in DST_MESH:
            assert_exact(got[(r, k)], g, r)
    for k in range(1, len(full)):
        assert infos[(0, k)]["dense_streams"] == 0 and infos[(1, k)]["dense_streams"] == 0


def test_delta_fresh_torch_destination_is_dense():
    """The same with a fresh torch.zeros each step."""
    torch = pytest.importorskip("torch")
    full, got, infos, _ = _fresh_destinations_run(
        lambda s: torch.zeros(tuple(s), dtype=torch.float32))
    for k, g in enumerate(full):
        for r in DST_MESH:
            assert_exact(got[(r, k)], g, r)
        assert infos[(0, k)]["dense_streams"] == 2 and infos[(1, k)]["dense_streams"] == 2
