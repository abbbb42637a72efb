"""Elastic refit through the Python package, in-process threads: rank 5 (inference)
stops answering; the survivors agree it is gone, shrink, replan for the membership and
refit, every element checked against dtensor_oracle (PyTorch's rules); then it rejoins
through a new group and is refit completely. Losing both replicas of a row block is
UNCOVERED naming the tensor and the lost ranks."""

import threading

import numpy as np
import pytest

import reshard
from reshard import Replicate, Shard
from dtensor_oracle import local_shard

WORLD, VICTIM, TIMEOUT = 8, 5, 0.3
SRC_MESH, SRC_PL = [[0, 1], [2, 3]], [Replicate(), Shard(0)]  # DP replicas {0,2}, {1,3}
DST_MESH, DST_PL = [4, 5, 6, 7], [Shard(1)]
SHAPE = (6, 8)


def layouts():
    tensors = reshard.Tensors()
    tensors.add("w", SHAPE, np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": (SRC_MESH, SRC_PL)})
    dst = reshard.Layout.from_placements(tensors, {"w": (DST_MESH, DST_PL)})
    return tensors, src, dst


FULL = (np.arange(48, dtype=np.float32) * 3 + 1).reshape(SHAPE)


def refit(src, dst, comm, rank):
    """Plan, execute, return this rank's destination array (or None)."""
    plan = reshard.Plan(src, dst, rank=rank, world=WORLD, staging_mb=1, timeout_s=TIMEOUT)
    shard = local_shard(FULL, SRC_MESH, SRC_PL, rank)
    s = {"w": np.ascontiguousarray(shard)} if shard is not None else None
    d = {p.name: np.full(p.shape, -1, np.float32) for p in dst.parameters(rank)}
    plan.execute(comm, src=s, dst=d or None)
    return d.get("w")


def expect(rank):
    return local_shard(FULL, DST_MESH, DST_PL, rank)


def test_lost_rank_survivors_refit_then_rejoin():
    _, src, dst = layouts()
    everyone = reshard.InprocGroup(WORLD)
    survivors = reshard.InprocGroup(WORLD - 1)
    rejoin = reshard.InprocGroup(WORLD)
    comms = [everyone.comm(r) for r in range(WORLD)]
    recovered = threading.Barrier(WORLD)
    out = {}

    def body(r):
        try:
            if r == VICTIM:
                recovered.wait()  # stops answering until the others are done
            else:
                with pytest.raises(reshard.ReshardError) as e:
                    refit(src, dst, comms[r], r)
                assert e.value.status == reshard.Status.TIMEOUT
                gone = reshard.elastic.agree_gone(comms[r], TIMEOUT / 6)
                comm2 = reshard.elastic.shrink(comms[r], gone, survivors=survivors)
                assert (comm2.rank, comm2.size) == (r, WORLD)
                src2, dst2 = reshard.elastic.membership_layouts(src, dst, gone)
                out[r] = (gone, refit(src2, dst2, comm2, r))
                comm2.close()
                recovered.wait()
            back = reshard.elastic.view(rejoin.comm(r), WORLD, list(range(WORLD)))
            out[("rejoin", r)] = refit(src, dst, back, r)
            back.close()
        except BaseException as e:  # reported on the main thread
            out[("error", r)] = e
            recovered.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, v in out.items():
        if isinstance(k, tuple) and k[0] == "error":
            raise v
    for r in range(WORLD):
        if r == VICTIM:
            continue
        gone, got = out[r]
        assert gone == [VICTIM]
        if r in DST_MESH:
            assert np.array_equal(got, expect(r)), "rank %d after the shrink" % r
        else:
            assert got is None
    for r in DST_MESH:  # the rejoined rank too: every element
        assert np.array_equal(out[("rejoin", r)], expect(r)), "rank %d after rejoining" % r
    for g in (everyone, survivors, rejoin):
        g.close()


def test_lost_every_replica_is_uncovered():
    _, src, dst = layouts()
    with pytest.raises(reshard.ReshardError) as e:
        reshard.elastic.membership_layouts(src, dst, [1, 3])
    assert e.value.status == reshard.Status.UNCOVERED
    assert "'w'" in e.value.message and "1, 3" in e.value.message
    s2, d2 = reshard.elastic.membership_layouts(src, dst, [3, 6])
    assert len(s2) == 3 and len(d2) == 3  # rank 3 and rank 6 hold one fragment each
    assert 3 not in s2.ranks() and 6 not in d2.ranks()


def test_rank_lists_are_checked_ints():
    """Ranks are ints in [0, 2**31): 2**32 would wrap to rank 0, '1' and 1.7 are not
    ranks; the message names the argument."""
    _, src, dst = layouts()
    for bad, kind in ((2 ** 32, ValueError), (-1, ValueError), ("1", TypeError),
                      (1.7, TypeError), (True, TypeError), (None, TypeError)):
        with pytest.raises(kind, match=r"gone\[0\]"):
            reshard.elastic.membership_layouts(src, dst, [bad])
    with pytest.raises(TypeError, match="gone must be a list"):
        reshard.elastic.membership_layouts(src, dst, "1")
    s2, d2 = reshard.elastic.membership_layouts(src, dst, [np.int64(6)])
    assert 6 not in d2.ranks() and len(d2) == 3
    with pytest.raises(ValueError, match=r"members\[1\]"):
        reshard.elastic.membership_map(4, [0, 2 ** 32])
    assert reshard.elastic.membership_map(4, [3, 1]) == [-1, 0, -1, 1]


def test_agree_gone_timeout_is_checked():
    group = reshard.InprocGroup(1)
    comm = group.comm(0)
    for bad, kind in ((float("nan"), ValueError), (0, ValueError), (-1.0, ValueError),
                      ("0.1", TypeError), (True, TypeError), (1e9, ValueError)):
        with pytest.raises(kind, match="timeout_s"):
            reshard.elastic.agree_gone(comm, bad)
    assert reshard.elastic.agree_gone(comm, 0.01) == []  # alone: nobody is lost
