"""NCCL rejoin through a key-value store (reshard.elastic.rejoin_nccl): ranks are threads
of this process. Refit 1 runs on every rank over an NCCL comm bootstrapped through the
store; then rank 3 restarts (new buffers, sentinel only) and the members [0, 1, 2, 3]
rejoin with a fresh unique id under a key of its own; the refit after the rejoin fills
every element of the restarted rank, checked against dtensor_oracle (PyTorch's rules).

It needs NCCL without a GPU: ctest runs it (python_fake_nccl_rejoin) over a libreshard
linked with the fake CUDA runtime + NCCL of tests/gpu (RESHARD_TEST_FAKE_NCCL=1, device
memory is host memory there). Elsewhere it is skipped."""

import os
import threading

import numpy as np
import pytest

import reshard
from reshard import Replicate, Shard
from dtensor_oracle import local_shard
from test_nccl_bootstrap import DictStore

needs_fake_nccl = pytest.mark.skipif(
    os.environ.get("RESHARD_TEST_FAKE_NCCL") != "1",
    reason="needs the fake CUDA/NCCL library (ctest python_fake_nccl_rejoin)")

WORLD, RESTARTED, TIMEOUT = 4, 3, 5.0
SRC_MESH, SRC_PL = [0, 1], [Shard(0)]
DST_MESH, DST_PL = [[2, 3]], [Replicate(), Shard(1)]
SHAPE = (6, 8)
FULL = (np.arange(48, dtype=np.float32) * 5 - 7).reshape(SHAPE)


class FakeDeviceTensor:
    """A host array presented as a CUDA tensor (the fake's device memory is host
    memory): what reshard reads of a torch tensor."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)
        self.device = type("Device", (), {"type": "cuda"})()
        self.dtype = self.array.dtype
        self.shape = self.array.shape

    def data_ptr(self):
        return self.array.__array_interface__["data"][0]

    def numel(self):
        return self.array.size

    def element_size(self):
        return self.array.itemsize

    def is_contiguous(self):
        return True


def layouts():
    tensors = reshard.Tensors()
    tensors.add("w", SHAPE, np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": ([SRC_MESH], [Replicate(), Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"w": (DST_MESH, DST_PL)})
    return src, dst


def refit(src, dst, comm, rank):
    """Plan, execute with fresh destination buffers (-1 everywhere), return this rank's
    destination array (or None)."""
    plan = reshard.Plan(src, dst, rank=rank, world=WORLD, staging_mb=1, timeout_s=TIMEOUT)
    shard = local_shard(FULL, [SRC_MESH], [Replicate(), Shard(0)], rank)
    s = {"w": FakeDeviceTensor(shard)} if shard is not None else None
    d = {p.name: FakeDeviceTensor(np.full(p.shape, -1, np.float32))
         for p in dst.parameters(rank)}
    plan.execute(comm, src=s, dst=d or None)
    return d["w"].array if "w" in d else None


def test_membership_map_orders_members_by_plan_rank():
    assert reshard.elastic.membership_map(6, [5, 0, 2]) == [0, -1, 1, -1, -1, 2]
    with pytest.raises(reshard.ReshardError) as e:
        reshard.elastic.membership_map(4, [0, 4])
    assert e.value.status == reshard.Status.RANK
    assert reshard.elastic.rejoin_key(1) != reshard.elastic.rejoin_key(2)


@needs_fake_nccl
def test_restarted_rank_rejoins_through_the_store_and_is_refit_completely():
    src, dst = layouts()
    store, out, errors = DictStore(timeout=20.0), {}, []

    def rank_fn(r):
        try:
            comm = reshard.from_nccl_store(store, r, WORLD, key="job/nccl")
            out[("first", r)] = refit(src, dst, comm, r)
            if r != RESTARTED:
                comm.close()  # survivors leave the old comm ...
            # ... the restarted rank is a new process: nothing of the old one is used
            back = reshard.elastic.rejoin_nccl(store, r, WORLD, range(WORLD), generation=1)
            out[("size", r)] = (back.rank, back.size)
            out[("rejoin", r)] = refit(src, dst, back, r)
            back.close()
            if r == RESTARTED:
                comm.close()
        except Exception as e:  # noqa: BLE001 - reported below with the rank
            errors.append((r, repr(e)))

    threads = [threading.Thread(target=rank_fn, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    # one id per communicator, each made once by the lowest member, the rejoin's fresh
    assert store.sets == ["job/nccl", reshard.elastic.rejoin_key(1)]
    assert store.get("job/nccl") != store.get(reshard.elastic.rejoin_key(1))
    for r in range(WORLD):
        assert out[("size", r)] == (r, WORLD)
    for r in (2, 3):  # every element of both destinations, the restarted one included
        want = local_shard(FULL, DST_MESH, DST_PL, r)
        assert np.array_equal(out[("first", r)], want), "rank %d, refit 1" % r
        assert np.array_equal(out[("rejoin", r)], want), "rank %d after the rejoin" % r
