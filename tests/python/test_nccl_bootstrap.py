"""NCCL endpoints for separately launched processes: the unique id goes through a
key-value store. The exchange is tested with a dict-backed store whose get() waits
like torch.distributed.TCPStore's; making the communicator needs a GPU and a library
built with NCCL, and is skipped (with the reason) where either is missing."""

import threading

import pytest
import torch

import reshard
from reshard import Status


class DictStore:
    """set(key, bytes) / get(key) -> bytes, get waiting until the key is set (as
    TCPStore.get does, up to its timeout)."""

    def __init__(self, timeout=10.0):
        self._d, self._cv, self.timeout = {}, threading.Condition(), timeout
        self.sets = []

    def set(self, key, value):
        with self._cv:
            self._d[key] = bytes(value)
            self.sets.append(key)
            self._cv.notify_all()

    def get(self, key):
        with self._cv:
            if not self._cv.wait_for(lambda: key in self._d, self.timeout):
                raise RuntimeError("DictStore: %r not set within %s s" % (key, self.timeout))
            return self._d[key]


def test_unique_id_exchange_through_a_store():
    """Rank 0 makes the id and sets it once; ranks 1..3, started first, get those
    exact bytes."""
    store, made, got = DictStore(), [], {}
    ids = iter([bytes(range(128)), b"never used"])

    def make():
        made.append(1)
        return next(ids)

    def rank_fn(r):
        got[r] = reshard.exchange_unique_id(store, r, key="job7/nccl", make_id=make)

    threads = [threading.Thread(target=rank_fn, args=(r,)) for r in (3, 2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [1] and store.sets == ["job7/nccl"]
    assert all(got[r] == bytes(range(128)) for r in range(4))


def test_exchange_accepts_str_values():
    """Stores that hand back str (latin-1) still give the id bytes."""
    class StrStore(DictStore):
        def get(self, key):
            return super().get(key).decode("latin-1")
    store = StrStore()
    store.set("k", bytes([0, 200, 255]))
    assert reshard.exchange_unique_id(store, 1, key="k") == bytes([0, 200, 255])


def test_exchange_with_torch_tcpstore():
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not built")
    from datetime import timedelta
    server = dist.TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=20),
                           wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", server.port, 2, False, timedelta(seconds=20))
    uid = bytes((i * 37) % 256 for i in range(128))
    out = {}
    t = threading.Thread(target=lambda: out.update(
        r1=reshard.exchange_unique_id(client, 1, key="reshard/id")))
    t.start()
    out["r0"] = reshard.exchange_unique_id(server, 0, key="reshard/id", make_id=lambda: uid)
    t.join()
    assert out["r0"] == uid and out["r1"] == uid


@pytest.mark.skipif(reshard.nccl_available(), reason="this libreshard has NCCL")
def test_no_nccl_in_library_is_a_clear_error():
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Comm.from_nccl_store(DictStore(), 0, 1)
    assert e.value.status == Status.UNSUPPORTED and "without the NCCL transport" in str(e.value)
    with pytest.raises(reshard.ReshardError):
        reshard.nccl_unique_id()


@pytest.mark.skipif(not reshard.nccl_available(), reason="this libreshard was built without NCCL")
def test_nccl_unique_id_from_the_library():
    uid = reshard.nccl_unique_id()
    assert len(uid) == 128 and uid != bytes(128)


@pytest.mark.skipif(not reshard.nccl_available(), reason="this libreshard was built without NCCL")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (and this torch is %s)"
                    % ("CPU-only" if not torch.version.cuda else "CUDA " + torch.version.cuda))
def test_nccl_comm_on_the_current_stream():
    store = DictStore()
    with reshard.Comm.from_nccl_store(store, 0, 1) as comm:
        assert (comm.kind, comm.rank, comm.size, comm.device) == ("nccl", 0, 1, "cuda")
        tensors = reshard.Tensors()
        tensors.add("w", (64, 8), torch.float32)
        src = reshard.Layout.from_placements(tensors, {"w": ([0], [reshard.Replicate()])})
        dst = reshard.Layout.from_placements(tensors, {"w": ([0], [reshard.Shard(1)])})
        w = torch.arange(512, dtype=torch.float32, device="cuda").reshape(64, 8)
        out = torch.zeros(64, 8, device="cuda")
        reshard.Plan(src, dst, rank=0, world=1).execute(comm, src={"w": w}, dst={"w": out})
        assert torch.equal(out, w)
        with pytest.raises(reshard.ReshardError, match="is on cpu"):
            reshard.Plan(src, dst, rank=0, world=1).execute(comm, src={"w": w.cpu()},
                                                            dst={"w": out})


@pytest.mark.skipif(not reshard.nccl_available(), reason="this libreshard was built without NCCL")
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_nccl_without_a_device_is_a_clear_error():
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Comm.from_nccl_store(DictStore(), 0, 1)
    assert e.value.status in (Status.UNSUPPORTED, Status.TRANSPORT), str(e.value)
    assert "CUDA" in e.value.message or "device" in e.value.message, str(e.value)


def test_nccl_rank_out_of_range():
    if not reshard.nccl_available():
        pytest.skip("this libreshard was built without NCCL")
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Comm.from_nccl_store(DictStore(), 4, 4)
    assert e.value.status == Status.RANK
