"""Comm.from_nccl (an existing ncclComm_t) and the NCCL branch of Comm.from_torch,
without a GPU: ranks are threads of this process over the fake CUDA runtime + NCCL of
tests/gpu (ctest python_fake_nccl_comms sets RESHARD_LIBRARY to the library linked with
it; its device memory is host memory). Every destination element is checked against
dtensor_oracle (PyTorch's rules). Elsewhere skipped; tools/gpu-check.sh runs the real
transport."""

import ctypes
import threading
import time

import numpy as np

import reshard
from reshard import _lib
from dtensor_oracle import local_shard
from test_nccl_rejoin import DST_MESH, DST_PL, FULL, WORLD, layouts, needs_fake_nccl, refit


class UniqueId(ctypes.Structure):  # ncclUniqueId, passed by value
    _fields_ = [("internal", ctypes.c_char * 128)]


class Config(ctypes.Structure):  # the head of ncclConfig_t: the fake reads .blocking
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("rest", ctypes.c_char * 256)]


def run_ranks(fn):
    out, errors = {}, []

    def body(r):
        try:
            out[r] = fn(r)
        except Exception as e:  # noqa: BLE001 - reported below with the rank
            errors.append((r, repr(e)))

    threads = [threading.Thread(target=body, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return out


def check(out):
    for r in (2, 3):
        want = local_shard(FULL, DST_MESH, DST_PL, r)
        assert np.array_equal(out[r], want), r


@needs_fake_nccl
def test_from_nccl_on_the_callers_communicator():
    lib = _lib.lib
    lib.ncclCommInitRankConfig.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                           UniqueId, ctypes.c_int, ctypes.POINTER(Config)]
    lib.ncclCommGetAsyncError.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    uid = UniqueId()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
    src, dst = layouts()

    def rank_fn(r):
        nccl = ctypes.c_void_p()
        cfg = Config(size=ctypes.sizeof(Config), blocking=0)
        rc = lib.ncclCommInitRankConfig(ctypes.byref(nccl), WORLD, uid, r, ctypes.byref(cfg))
        assert rc in (0, 7), rc  # ncclSuccess or ncclInProgress
        state, deadline = ctypes.c_int(7), time.monotonic() + 20
        while state.value == 7 and time.monotonic() < deadline:  # until every rank joined
            lib.ncclCommGetAsyncError(nccl, ctypes.byref(state))
            time.sleep(0.001)
        assert state.value == 0
        comm = reshard.Comm.from_nccl(nccl)  # the communicator stays ours
        assert (comm.kind, comm.device, comm.rank, comm.size) == ("nccl", "cuda", r, WORLD)
        got = refit(src, dst, comm, r)
        comm.close()
        return got

    check(run_ranks(rank_fn))


@needs_fake_nccl
def test_from_torch_nccl_group(monkeypatch):
    """An NCCL process group (mocked: torch here is CPU-only): group rank 0's unique id
    reaches every rank through the group's broadcast_object_list."""
    import torch.distributed as dist
    box, ready = [], threading.Event()

    def broadcast_object_list(objs, src, group):
        assert src == 0
        if group.rank() == 0:
            box.append(objs[0])
            ready.set()
        else:
            assert ready.wait(20)
            objs[0] = box[0]

    class Group:
        def __init__(self, r):
            self.r = r

        def rank(self):
            return self.r

        def size(self):
            return WORLD

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group: "nccl")
    monkeypatch.setattr(dist, "broadcast_object_list", broadcast_object_list)
    monkeypatch.setattr(dist.distributed_c10d, "_get_global_rank", lambda group, r: r)
    src, dst = layouts()

    def rank_fn(r):
        comm = reshard.Comm.from_torch(Group(r))
        assert (comm.kind, comm.device, comm.rank, comm.size) == ("nccl", "cuda", r, WORLD)
        got = refit(src, dst, comm, r)
        comm.close()
        return got

    check(run_ranks(rank_fn))
