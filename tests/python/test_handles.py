"""Handle objects and their arguments (issue 25): copying or pickling a handle owner is
a TypeError naming the class (never a second owner that frees twice); two threads on
one comm: the second is refused and the peer verifies; closing a comm while another
thread executes on it waits for that execution; Plan() and the pattern helpers check
every number instead of coercing it."""

import copy
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


def _delayed(fn, delay_s):
    def body():
        time.sleep(delay_s)
        fn()
    return body


def _wait_busy(comm):
    """Until a thread executes on ``comm`` (at most 5 s)."""
    t0 = time.monotonic()
    while comm._calls == 0 and time.monotonic() - t0 < 5:
        time.sleep(0.001)
    assert comm._calls == 1


def test_two_threads_on_one_comm():
    _, src, dst = layouts()
    plan = reshard.Plan(src, dst, rank=reshard.ALL_RANKS, world=2, timeout_s=10)
    group = reshard.InprocGroup(2)
    c0, c1 = group.comm(0), group.comm(1)
    s0 = src.new_buffers(0, library="numpy")
    reshard.fill_pattern(src, 0, s0)
    zeros = src.new_buffers(0, library="numpy", fill=0)
    d1 = dst.new_buffers(1, library="numpy")
    out = {}

    def rank0():
        out[0] = plan.execute(c0, src=s0, dst={})

    def rank1():
        out[1] = plan.execute(c1, src={}, dst=d1)

    t0 = threading.Thread(target=rank0)
    t1 = threading.Thread(target=_delayed(rank1, 0.5))  # rank 0 waits for it
    t1.start()
    t0.start()
    _wait_busy(c0)
    with pytest.raises(reshard.ReshardError,
                       match="rank 0: another thread is executing on this comm") as e:
        plan.execute(c0, src=zeros, dst={})  # a second thread of rank 0, zeroed sources
    assert e.value.status == reshard.Status.INVALID_ARG
    t0.join()
    t1.join()
    assert reshard.verify_pattern(dst, 1, d1) == 64 * 64 * 4
    assert out[1]["bytes_recv"] == 64 * 64 * 4
    group.close()


def test_close_waits_for_an_execution():
    _, src, dst = layouts()
    plan = reshard.Plan(src, dst, rank=reshard.ALL_RANKS, world=2, timeout_s=10)
    group = reshard.InprocGroup(2)
    c0, c1 = group.comm(0), group.comm(1)
    s0 = src.new_buffers(0, library="numpy")
    reshard.fill_pattern(src, 0, s0)
    d1 = dst.new_buffers(1, library="numpy")
    done, errs = {}, []

    def rank0():
        try:
            plan.execute(c0, src=s0, dst={})
        except reshard.ReshardError as e:
            errs.append(e)
        done[0] = time.monotonic()

    t0 = threading.Thread(target=rank0)
    t1 = threading.Thread(target=_delayed(lambda: plan.execute(c1, src={}, dst=d1), 0.5))
    t1.start()
    t0.start()
    _wait_busy(c0)
    c0.close()  # while rank 0 waits for rank 1
    closed = time.monotonic()
    t0.join()
    t1.join()
    assert errs == []
    assert done[0] <= closed
    assert c0.closed
    assert reshard.verify_pattern(dst, 1, d1) == 64 * 64 * 4
    with pytest.raises(reshard.ReshardError, match="comm is closed"):
        plan.execute(c0, src=s0, dst={})
    group.close()


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
