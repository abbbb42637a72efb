"""Handle objects and their arguments (issue 25): copying or pickling a handle owner is
a TypeError naming the class (never a second owner that frees twice); two threads on
one comm: the second is refused and the peer verifies; closing a comm while another
thread executes on it waits for that execution; Plan() and the pattern helpers check
every number instead of coercing it."""

import copy
import itertools
import pickle
import threading
import time

import numpy as np
import pytest

import reshard
from reshard import Shard


def layouts():
    tensors = reshard.Tensors()
    tensors.add("w", (64, 64), np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": ([0], [reshard.Replicate()])})
    dst = reshard.Layout.from_placements(tensors, {"w": ([1], [Shard(0)])})
    return tensors, src, dst


def handle_objects():
    tensors, src, dst = layouts()
    plan = reshard.Plan(src, dst, rank=reshard.ALL_RANKS, world=2)
    model = reshard.Model("qwen3-0.6b", layers=1)
    refit = model.refit("tp=1", "tp=1")
    group = reshard.InprocGroup(1)
    comm = group.comm(0)
    return {"Tensors": tensors, "Layout": src, "Plan": plan, "Model": model, "Refit": refit,
            "Comm": comm, "InprocGroup": group}


COPIES = {
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    "pickle": lambda x: pickle.loads(pickle.dumps(x)),
    "pickle protocol 0": lambda x: pickle.loads(pickle.dumps(x, protocol=0)),
}


@pytest.mark.parametrize("how", sorted(COPIES))
def test_handles_refuse_copy_and_pickle(how):
    objs = handle_objects()
    for name, obj in objs.items():
        with pytest.raises(TypeError, match=r"reshard\.%s cannot be (copied|pickled)" % name):
            COPIES[how](obj)
    # the originals still work, and each is freed once when collected
    assert objs["Comm"].rank == 0
    assert objs["Plan"].stats()["bytes_total"] == 64 * 64 * 4
    objs["Comm"].close()
    objs["InprocGroup"].close()


def _wait_busy(comm):
    """Until a thread executes on ``comm`` (at most 5 s)."""
    t0 = time.monotonic()
    while comm._calls == 0 and time.monotonic() - t0 < 5:
        time.sleep(0.001)
    assert comm._calls == 1


_REFITS = itertools.count()


class _Refit:
    """Rank 0 sends "w" to rank 1 on one in-process group; start() runs rank 1 (0.5 s
    late) and rank 0 on threads and returns once rank 0 executes (it waits for rank 1
    in the first agreement); join() waits for both and checks what rank 1 received."""

    def __init__(self):
        _, self.src, self.dst = layouts()
        # named: plans of earlier tests may still be live (an unnamed plan executed
        # beside another live one of its inputs is refused)
        self.plan = reshard.Plan(self.src, self.dst, rank=reshard.ALL_RANKS, world=2,
                                 timeout_s=10, name="refit %d" % next(_REFITS))
        self.group = reshard.InprocGroup(2)
        self.c0, self.c1 = self.group.comm(0), self.group.comm(1)
        self.s0 = self.src.new_buffers(0, library="numpy")
        reshard.fill_pattern(self.src, 0, self.s0)
        self.d1 = self.dst.new_buffers(1, library="numpy")
        self.errs = []

    def _rank(self, r):
        if r == 1:
            time.sleep(0.5)  # the ranks' order is fixed by this, not by the load
        try:
            self.plan.execute(*((self.c0, self.s0, {}) if r == 0 else (self.c1, {}, self.d1)))
        except reshard.ReshardError as e:
            self.errs.append(e)

    def start(self):
        self.threads = [threading.Thread(target=self._rank, args=(r,)) for r in (1, 0)]
        for t in self.threads:
            t.start()
        _wait_busy(self.c0)

    def again(self):
        """Both ranks execute once more at once (rank 1 0.5 s late), into zeroed
        destinations; returns their errors."""
        self.errs = []
        self.d1 = self.dst.new_buffers(1, library="numpy", fill=0)
        threads = [threading.Thread(target=self._rank, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.errs

    def join(self, contended=False, close=True):
        """Both ranks OK and rank 1 verified; or, when another thread called rank 0's
        comm meanwhile (``contended``), both ranks failed (the refit is refused on every
        rank, never OK with a peer that may have run the other thread's plan)."""
        for t in self.threads:
            t.join()
        if contended:
            assert len(self.errs) == 2, self.errs
            assert any("another thread called this comm" in str(e) for e in self.errs)
        else:
            assert self.errs == []
            assert reshard.verify_pattern(self.dst, 1, self.d1) == 64 * 64 * 4
        if close:
            self.group.close()


def test_two_threads_on_one_comm():
    x = _Refit()
    x.start()
    zeros = x.src.new_buffers(0, library="numpy", fill=0)
    with pytest.raises(reshard.ReshardError,
                       match="rank 0: another thread is executing on this comm") as e:
        x.plan.execute(x.c0, src=zeros, dst={})  # a second thread of rank 0, zeroed sources
    assert e.value.status == reshard.Status.INVALID_ARG
    x.join(contended=True)


def test_a_comm_two_threads_called_at_once_refuses_every_later_execution():
    """After the race, the threads' plans may pair differently on different ranks (each
    rank keeps running whichever thread won there; equal layouts look alike), so every
    later execution on that comm fails on every rank, before anything moves."""
    x = _Refit()
    x.start()
    with pytest.raises(reshard.ReshardError, match="another thread is executing"):
        x.plan.execute(x.c0, src=x.src.new_buffers(0, library="numpy", fill=0), dst={})
    x.join(contended=True, close=False)
    for step in range(2):
        x.again()
        assert len(x.errs) == 2, (step, x.errs)
        mine = [e for e in x.errs if "rank 0: two threads called this comm at once" in str(e)]
        assert len(mine) == 2, x.errs  # rank 0's own error, and rank 1 naming rank 0's
        assert not x.d1["w"].any()  # nothing moved
    x.group.close()


def test_close_waits_for_an_execution():
    x = _Refit()
    t0 = time.monotonic()
    x.start()
    x.c0.close()  # while rank 0 waits for rank 1, which starts 0.5 s after t0
    assert time.monotonic() - t0 >= 0.5  # so close() waited for rank 0's execution
    assert x.c0.closed
    with pytest.raises(reshard.ReshardError, match="comm is closed"):
        x.plan.execute(x.c0, src=x.s0, dst={})
    x.join()


def test_plan_close_waits_for_its_execution():
    """Plan.close from another thread while the plan executes (tester round 11, F1: the
    process crashed, the plan freed under the execution) waits for that execution, which
    returns OK with every element; a later execute is refused on every rank."""
    x = _Refit()
    t0 = time.monotonic()
    x.start()
    x.plan.close()  # while rank 0 waits for rank 1, which starts 0.5 s after t0
    assert time.monotonic() - t0 >= 0.5  # so close() waited for the execution
    x.join(close=False)
    x.again()
    assert len(x.errs) == 2 and all("the plan was closed" in str(e) for e in x.errs), x.errs
    assert not x.d1["w"].any()
    x.group.close()


BAD_PLAN_ARGS = [
    ({"rank": 2**32 + 1}, ValueError, "rank = 4294967297 is outside"),
    ({"world": 2**32 + 4}, ValueError, "world = 4294967300 is outside"),
    ({"domain_size": 2**32 + 2}, ValueError, "domain_size = 4294967298 is outside"),
    ({"domain_size": -1}, ValueError, "domain_size = -1 is outside"),
    ({"rank": 1.9}, TypeError, "rank must be an int, got 1.9"),
    ({"world": 4.5}, TypeError, "world must be an int, got 4.5"),
    ({"rank": True}, TypeError, "rank must be an int, got True"),
    ({"world": "2"}, TypeError, "world must be an int"),
    ({"staging_mb": -1}, ValueError, "staging_mb = -1 MiB is outside"),
    ({"relay_mb": -5}, ValueError, "relay_mb = -5 MiB is outside"),
    ({"staging_mb": 2**50}, ValueError, "staging_mb = 1125899906842624 MiB is outside"),
    ({"staging_mb": float("nan")}, ValueError, "staging_mb = nan MiB is outside"),
    ({"relay_mb": float("inf")}, ValueError, "relay_mb = inf MiB is outside"),
    ({"staging_mb": "1"}, TypeError, "staging_mb must be a number of MiB, got '1'"),
    ({"relay_mb": None, "staging_mb": False}, TypeError, "staging_mb must be a number"),
    ({"timeout_s": "5"}, TypeError, "timeout_s must be a number of seconds"),
]


@pytest.mark.parametrize("bad,exc,msg", BAD_PLAN_ARGS, ids=[repr(b[0]) for b in BAD_PLAN_ARGS])
def test_plan_checks_every_number(bad, exc, msg):
    _, src, dst = layouts()
    args = dict(rank=0, world=2)
    args.update(bad)
    with pytest.raises(exc, match=msg.replace("(", r"\(").replace("+", r"\+")):
        reshard.Plan(src, dst, **args)


def test_plan_numbers_that_are_fine():
    _, src, dst = layouts()
    p = reshard.Plan(src, dst, rank=np.int64(1), world=np.int32(2), staging_mb=0.5,
                     relay_mb=np.int64(1), domain_size=0, timeout_s=np.float64(3))
    assert (p.rank, p.world) == (1, 2)
    assert type(p.rank) is int
    with pytest.raises(ValueError, match="src_rank = 4294967296 is outside"):
        p.pair_bytes(2**32, 1)


def test_pattern_helpers_check_the_rank():
    _, src, _ = layouts()
    with pytest.raises(ValueError, match="rank = 2147483653 is outside"):
        reshard.fill_pattern(src, 2**31 + 5, {})
    with pytest.raises(TypeError, match="rank must be an int, got 0.5"):
        reshard.verify_pattern(src, 0.5, {})
