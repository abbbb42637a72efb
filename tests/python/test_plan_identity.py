"""Plans of equal inputs on one comm pair by identity (reshard_plan_set_name): each rank
holds two live plans made from the same layouts (a policy and a reference model of one
architecture) with different values; a rank that executes the other plan than its
peers must fail preflight on every rank (MISMATCH), nothing written, where the plans'
equal fingerprints used to pair one plan's sources with the other's destinations and
return OK. The oracle: destination rank 2 + j holds columns [24j, 24j + 24) of the
sending plan's full matrix (Shard(0) over ranks 0, 1 to Shard(1) over ranks 2, 3)."""

import numpy as np
import pytest

import reshard
from reshard import Replicate, Shard  # noqa: F401

SHAPE = (64, 48)


def layouts():
    tensors = reshard.Tensors()
    tensors.add("w", SHAPE, np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": ([0, 1], [Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"w": ([2, 3], [Shard(1)])})
    return src, dst


def full(salt):
    return (np.arange(SHAPE[0] * SHAPE[1]) * 3 + salt).astype(np.float32).reshape(SHAPE)


def buffers(r, salt):
    if r < 2:
        return {"w": np.ascontiguousarray(full(salt)[r * 32:(r + 1) * 32])}, {}
    return {}, {"w": np.zeros((64, 24), np.float32)}


def run(order, names=(None, None), create=None):
    """Every rank creates plans "a" (salt 0) and "b" (salt 1000) (in ``create(r)``'s
    order), then executes them in ``order(r)``; returns per rank the list of
    (plan, outcome): "ok", "wrong" (OK with another plan's values) or the error."""
    src, dst = layouts()

    def rank_fn(comm):
        r = comm.rank
        made = {}
        for k in (create(r) if create else "ab"):
            made[k] = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10,
                                   name=names["ab".index(k)])
        out = []
        for k in order(r):
            salt = 0 if k == "a" else 1000
            s, d = buffers(r, salt)
            try:
                made[k].execute(comm, src=s, dst=d)
            except reshard.ReshardError as e:
                out.append((k, e))
                continue
            if d:
                want = full(salt)[:, (r - 2) * 24:(r - 1) * 24]
                out.append((k, "ok" if np.array_equal(d["w"], want) else "wrong"))
            else:
                out.append((k, "ok"))
        return out
    return reshard.run_threads(4, rank_fn)


def test_plans_of_equal_inputs_executed_in_another_order_fail_every_rank():
    """Ranks 0 and 2 execute a then b, ranks 1 and 3 b then a: both executions fail on
    every rank (MISMATCH naming the different plans), nothing is written; then all in
    one order: exact."""
    got = run(lambda r: "ab" if r in (0, 2) else "ba")
    for r, out in enumerate(got):
        for k, e in out:
            assert isinstance(e, reshard.ReshardError), (r, k, e)
            assert e.status == reshard.Status.MISMATCH, e
            assert "execute different plans made from the same inputs" in e.message, e
    ok = run(lambda r: "abba")
    assert all(o == "ok" for out in ok for _, o in out), ok


def test_named_plans_pair_by_name_whatever_the_creation_order():
    """Ranks created a, b in different orders (as threads do): unnamed, their executions
    in one order fail (the ordinals differ); named, they pair by name and are exact."""
    create = (lambda r: "ab" if r % 2 == 0 else "ba")
    bad = run(lambda r: "ab", create=create)
    assert all(isinstance(o, reshard.ReshardError) and o.status == reshard.Status.MISMATCH
               for out in bad for _, o in out), bad
    good = run(lambda r: "ab", names=("policy", "reference"), create=create)
    assert all(o == "ok" for out in good for _, o in out), good
    swapped = run(lambda r: "ab" if r < 2 else "ba", names=("policy", "reference"))
    assert all(isinstance(o, reshard.ReshardError) for out in swapped for _, o in out)
    assert "the plan named 'policy'" in str(swapped[0][0][1]), swapped[0]


def test_a_name_taken_by_a_live_plan_of_the_same_inputs_is_refused():
    src, dst = layouts()
    a = reshard.Plan(src, dst, rank=0, world=4, name="policy")
    with pytest.raises(reshard.ReshardError, match="named 'policy' already"):
        reshard.Plan(src, dst, rank=0, world=4, name="policy")
    with pytest.raises(reshard.ReshardError, match="a name of 1 to 63 bytes"):
        reshard.Plan(src, dst, rank=0, world=4, name="")
    del a
    reshard.Plan(src, dst, rank=0, world=4, name="policy")  # the name is free again
