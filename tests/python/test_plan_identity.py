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


def swapped(comm, r, x, y):
    """Ranks 0 and 2 execute plan x (values of salt 0) then y (salt 1000), ranks 1 and 3
    y then x; per execution "returned OK" or (status, nothing written)."""
    out = []
    for plan, salt in (((x, 0), (y, 1000)) if r in (0, 2) else ((y, 1000), (x, 0))):
        s, d = buffers(r, salt)
        try:
            plan.execute(comm, src=s, dst=d)
            out.append("returned OK")
        except reshard.ReshardError as e:
            out.append((e.status, not d or not d["w"].any()))
    return out


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
        for plan in made.values():  # the errors kept in out keep the plans alive
            plan.close()
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


def test_a_name_must_be_1_to_63_bytes():
    src, dst = layouts()
    with pytest.raises(reshard.ReshardError, match="a name of 1 to 63 bytes"):
        reshard.Plan(src, dst, rank=0, world=4, name="")
    with pytest.raises(reshard.ReshardError, match="a name of 1 to 63 bytes"):
        reshard.Plan(src, dst, rank=0, world=4, name="x" * 64)


def test_plans_that_ran_on_another_comm_still_pair_by_creation_order():
    """Both plans ran on one comm in one order; on a new comm ranks 0 and 2 run a, 1
    and 3 run b first: every rank fails (the plans' order does not depend on the comm
    they last ran on), where both used to count as the first and pair."""
    src, dst = layouts()
    group = reshard.InprocGroup(4)

    def rank_fn(comm):
        r = comm.rank
        a = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10)
        b = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10)
        for plan, salt in ((a, 0), (b, 1000)):
            s, d = buffers(r, salt)
            plan.execute(comm, src=s, dst=d)
        c2 = group.comm(r)
        first = (a, 0) if r in (0, 2) else (b, 1000)
        s, d = buffers(r, first[1])
        try:
            first[0].execute(c2, src=s, dst=d)
        except reshard.ReshardError as e:
            return e
        return "returned OK"
    got = reshard.run_threads(4, rank_fn)
    group.close()
    assert all(isinstance(e, reshard.ReshardError) and e.status == reshard.Status.MISMATCH
               for e in got), got


def test_named_plans_of_two_threads_on_one_comm_pair_by_name():
    """Each rank makes plan a on one thread and plan b on another (one per model), in
    another order on odd ranks, and runs both on one comm: named, they pair by name and
    every element is exact. (Unnamed, plans of two threads have no order to agree on and
    nothing can tell them apart: docs/python-reference.md says to name them.)"""
    import threading
    src, dst = layouts()

    def rank_fn(comm):
        r = comm.rank
        made = {}

        def make(k):
            made[k] = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10,
                                   name={"a": "policy", "b": "reference"}[k])
        for k in ("ab" if r % 2 == 0 else "ba"):
            t = threading.Thread(target=make, args=(k,))
            t.start()
            t.join()
        out = []
        for k, salt in (("a", 0), ("b", 1000)):
            s, d = buffers(r, salt)
            made[k].execute(comm, src=s, dst=d)
            want = full(salt)[:, (r - 2) * 24:(r - 1) * 24] if d else None
            out.append("ok" if not d or np.array_equal(d["w"], want) else "wrong")
        for plan in made.values():
            plan.close()
        return out
    got = reshard.run_threads(4, rank_fn)
    assert all(o == "ok" for out in got for o in out), got


def test_a_closed_plan_no_longer_counts():
    """A plan kept alive (here: by the test) but closed (Plan.close) before the next plan
    of the same inputs is made does not shift that plan's number: refits with the new
    plan pair with a rank that never had the old one; executing the closed plan is
    refused."""
    src, dst = layouts()

    def rank_fn(comm):
        r = comm.rank
        old = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10) if r < 2 else None
        if old is not None:
            old.close()
        new = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10)
        s, d = buffers(r, 0)
        new.execute(comm, src=s, dst=d)
        want = full(0)[:, (r - 2) * 24:(r - 1) * 24] if d else None
        return (old, "ok" if not d or np.array_equal(d["w"], want) else "wrong")
    got = reshard.run_threads(4, rank_fn)
    assert [o for _, o in got] == ["ok"] * 4, got
    with pytest.raises(reshard.ReshardError, match="the plan was closed"):
        reshard.run_threads(4, lambda c: got[c.rank][0].execute(c, src={}, dst={})
                            if c.rank < 2 else reshard.plan_fail(c, reshard.Status.BUFFER))


def _swap_after_a_timeout(stalled):
    """Plans a and b (unnamed, one creation order on every rank). The ranks in
    ``stalled`` execute a, which times out there (rank 3 arrives late; the others never
    execute it: their framework failed first), so a is retired on those ranks only. Then,
    on a new comm, ranks 0 and 2 run a then b, ranks 1 and 3 b then a; then every rank a,
    then b. Returns per rank [a's first outcome or None, swapped 1, swapped 2, a, b]."""
    import threading
    import time
    src, dst = layouts()
    group = reshard.InprocGroup(4)
    bar = threading.Barrier(4)

    def rank_fn(comm):
        r = comm.rank
        a = reshard.Plan(src, dst, rank=r, world=4, timeout_s=1)
        b = reshard.Plan(src, dst, rank=r, world=4, timeout_s=1)
        first = None
        if r in stalled:
            if r == 3:
                time.sleep(3)  # a stall: the others give up on a
            s, d = buffers(r, 0)
            try:
                a.execute(comm, src=s, dst=d)
                first = "returned OK"
            except reshard.ReshardError as e:
                first = e
        bar.wait()
        c2 = group.comm(r)
        out = [first]
        for plan, salt in (((a, 0), (b, 1000)) if r in (0, 2) else ((b, 1000), (a, 0))):
            s, d = buffers(r, salt)
            try:
                plan.execute(c2, src=s, dst=d)
                out.append("returned OK")
            except reshard.ReshardError as e:
                out.append(e)
                assert not d or not d["w"].any(), "rank %d: written though it failed" % r
        for plan, salt in ((a, 0), (b, 1000)):
            s, d = buffers(r, salt)
            try:
                plan.execute(c2, src=s, dst=d)
            except reshard.ReshardError as e:
                out.append(e)
                continue
            want = full(salt)[:, (r - 2) * 24:(r - 1) * 24] if d else None
            out.append("ok" if not d or np.array_equal(d["w"], want) else "wrong")
        return out
    got = reshard.run_threads(4, rank_fn)
    group.close()
    return got


@pytest.mark.parametrize("stalled", [(0, 1, 2, 3), (1, 3)], ids=["every rank", "some ranks"])
def test_plans_swapped_after_a_timeout_fail_every_rank(stalled):
    """After a timed-out execution of plan a, on every rank or only on some (where it is
    retired), ranks executing a and b in another order fail on every rank (MISMATCH),
    nothing written, where a and b both counted first and paired, returning OK with the
    other plan's values (768 of 1536 elements wrong; tester rounds 6 and 7). Then a retry
    of a on every rank: exact where every rank retired it, else MISMATCH on every rank (a
    plan retired on some ranks only pairs with no plan there: close it); b: exact."""
    got = _swap_after_a_timeout(stalled)
    for r, (first, x, y, retry, last) in enumerate(got):
        assert (first is None) == (r not in stalled), (r, first)
        assert first is None or isinstance(first, reshard.ReshardError), (r, first)
        for e in (x, y):
            assert isinstance(e, reshard.ReshardError), (r, got)
            assert e.status == reshard.Status.MISMATCH, e
        if len(stalled) == 4:
            assert retry == "ok", (r, got)
        else:
            assert isinstance(retry, reshard.ReshardError), (r, got)
            assert retry.status == reshard.Status.MISMATCH, retry
        assert last == "ok", (r, got)


def test_a_name_held_by_a_live_plan_of_the_same_inputs_is_refused():
    """Two live plans of equal inputs named alike on one rank could pair with each other
    across ranks (a policy and a reference model both named after the architecture):
    the second name is refused, INVALID_ARG; once the first is closed the name is free."""
    src, dst = layouts()
    first = reshard.Plan(src, dst, rank=0, world=4, name="qwen3-0.6b")
    with pytest.raises(reshard.ReshardError, match="is named 'qwen3-0.6b' already"):
        reshard.Plan(src, dst, rank=0, world=4, name="qwen3-0.6b")
    other_rank = reshard.Plan(src, dst, rank=1, world=4, name="qwen3-0.6b")  # another rank
    first.close()
    again = reshard.Plan(src, dst, rank=0, world=4, name="qwen3-0.6b")
    again.close()
    other_rank.close()


def test_the_old_plan_of_delta_adopt_pairs_only_with_itself():
    """After delta_adopt the old plan no longer counts: on ranks 0 and 2 the old plan, on
    1 and 3 the new one fails every rank (MISMATCH), nothing written; the old one on
    every rank sends dense, exact; then the new one, exact."""
    src, dst = layouts()

    def rank_fn(comm):
        r = comm.rank
        old = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10, delta=True)
        s, d = buffers(r, 0)
        old.execute(comm, src=s, dst=d)
        new = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10, delta=True)
        new.delta_adopt(old)
        s, d2 = buffers(r, 1000)
        try:
            (old if r in (0, 2) else new).execute(comm, src=s, dst=d2)
            out = ["returned OK"]
        except reshard.ReshardError as e:
            out = [e, not d2 or not d2["w"].any()]
        s, d3 = buffers(r, 1000)
        old.execute(comm, src=s, dst=d3)
        new.execute(comm, src=s, dst=d)
        want = full(1000)[:, (r - 2) * 24:(r - 1) * 24] if d else None
        return out + [all(not x or np.array_equal(x["w"], want) for x in (d, d3))]
    got = reshard.run_threads(4, rank_fn)
    for r, (e, untouched, exact) in enumerate(got):
        assert isinstance(e, reshard.ReshardError) and e.status == reshard.Status.MISMATCH
        assert untouched and exact, (r, got)


def test_model_plan_takes_a_name_and_agrees_on_it():
    """Model.plan(name=) names the plan (two plans of one refit on a rank pair by name
    whatever the order), and ranks giving different names fail every rank at the
    agreement (MISMATCH naming 'name')."""
    model = reshard.Model("qwen3-0.6b", layers=1)
    group = reshard.InprocGroup(2)

    def rank_fn(comm):
        p = model.plan(comm, "tp=1", "tp=1", name="policy", timeout_s=10)
        with pytest.raises(reshard.ReshardError, match="named 'policy' already"):
            model.plan(comm, "tp=1", "tp=1", name="policy", timeout_s=10)
        p.close()
        c2 = group.comm(comm.rank)
        try:
            model.plan(c2, "tp=1", "tp=1", name="policy" if comm.rank else "reference",
                       timeout_s=10)
        except reshard.ReshardError as e:
            return e
        return "returned OK"
    got = reshard.run_threads(2, rank_fn)
    group.close()
    for e in got:
        assert isinstance(e, reshard.ReshardError) and e.status == reshard.Status.MISMATCH, e
        assert "name" in e.message, e


@pytest.mark.parametrize("pattern", ["replan both", "close the first", "adopt"])
def test_two_live_plans_never_share_a_number(pattern):
    """Every rank runs the same sequence, leaving two live unnamed plans x and y of equal
    inputs; then ranks 0 and 2 execute x then y, ranks 1 and 3 y then x: every execution
    fails on every rank (MISMATCH), nothing written. A number was a count of the live
    plans, reused once an earlier plan stopped counting, so x and y both held it and
    paired, OK with 768 of 1536 elements wrong (tester round 8, R8-1):
    - "replan both": pol = Plan(); ref = Plan(); pol = Plan(); ref = Plan();
    - "close the first": a, b; a closed; c (x = b, y = c);
    - "adopt": a, b; a closed; b2 adopts b (delta); c (x = b2, y = c)."""
    src, dst = layouts()
    delta = pattern == "adopt"

    def make(r):
        return reshard.Plan(src, dst, rank=r, world=4, timeout_s=10, delta=delta)

    def rank_fn(comm):
        r = comm.rank
        if pattern == "replan both":
            pol = make(r)
            ref = make(r)
            pol = make(r)
            ref = make(r)
            x, y = pol, ref
        else:
            a, b = make(r), make(r)
            a.close()
            if pattern == "adopt":
                b2 = make(r)
                b2.delta_adopt(b)
                b.close()
                b = b2
            x, y = b, make(r)
        return swapped(comm, r, x, y)
    got = reshard.run_threads(4, rank_fn)
    assert all(o == (reshard.Status.MISMATCH, True) for out in got for o in out), got


def test_delta_adopt_carries_the_name():
    """A named plan replaced through delta_adopt: the new plan (made unnamed, since the
    old one still holds the name) takes the old one's name, so it never pairs with an
    unnamed plan of the same inputs (tester round 8, R8-2: it took number 0 and paired
    with the unnamed reference plan)."""
    src, dst = layouts()

    def rank_fn(comm):
        r = comm.rank
        pol = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10, delta=True, name="pol",
                           verify=False)
        ref = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10, delta=True,
                           verify=False)
        new = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10, delta=True,
                           verify=False)
        new.delta_adopt(pol)
        pol.close()
        return swapped(comm, r, new, ref)
    got = reshard.run_threads(4, rank_fn)
    assert all(o == (reshard.Status.MISMATCH, True) for out in got for o in out), got


def test_a_plan_for_every_rank_never_pairs_with_a_ranks_own_plan():
    """X = Plan(rank=ALL_RANKS) and Y = Plan(rank=r) of the same layouts have one
    fingerprint (it leaves the rank out) and used to both be number 0: executed in
    swapped order they paired, OK with 768 of 1536 elements wrong (tester round 10,
    R10-1). Now every execution fails on every rank (MISMATCH), nothing written."""
    src, dst = layouts()

    def rank_fn(comm):
        r = comm.rank
        x = reshard.Plan(src, dst, rank=reshard.ALL_RANKS, world=4, timeout_s=10)
        y = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10)
        return swapped(comm, r, x, y)
    got = reshard.run_threads(4, rank_fn)
    assert all(o == (reshard.Status.MISMATCH, True) for out in got for o in out), got


@pytest.mark.parametrize("named", [False, True], ids=["unnamed", "named"])
def test_adopting_a_retired_plan_takes_nothing_a_live_plan_holds(named):
    """A times out on every rank (retired); B is made (number 0 again, or the name "pol"
    that A's retirement freed); N adopts A: it must not take A's number or name, which B
    holds now. N and B executed in swapped order fail on every rank (MISMATCH), nothing
    written, where they paired, OK with 768 of 1536 elements wrong (tester round 9,
    R9-1)."""
    import threading
    import time
    src, dst = layouts()
    group = reshard.InprocGroup(4)
    bar = threading.Barrier(4)
    name = "pol" if named else None

    def rank_fn(comm):
        r = comm.rank
        a = reshard.Plan(src, dst, rank=r, world=4, timeout_s=1, delta=True, name=name)
        if r == 3:
            time.sleep(3)  # a stall: the others give up on a
        s, d = buffers(r, 0)
        try:
            a.execute(comm, src=s, dst=d)
        except reshard.ReshardError:
            pass
        bar.wait()
        b = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10, delta=True, name=name)
        n = reshard.Plan(src, dst, rank=r, world=4, timeout_s=10, delta=True)
        n.delta_adopt(a)
        c2 = group.comm(r)
        return swapped(c2, r, n, b)
    got = reshard.run_threads(4, rank_fn)
    group.close()
    assert all(o == (reshard.Status.MISMATCH, True) for out in got for o in out), got
