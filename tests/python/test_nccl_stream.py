"""The NCCL endpoint of the Python package runs in the framework's stream order.

- Unit checks of comm._cuda_device_stream with torch.cuda stubbed (run anywhere): the
  default stream (cuda_stream 0) becomes cudaStreamLegacy, not "no stream" (which would
  make the C side use a stream of its own, unordered with the default stream); a device
  without an index is torch's current device, the one the default stream belongs to; a
  stream of another device is refused.
- A refit ordered after a long kernel writing the source on the default stream, just
  before execute: over the fake CUDA/NCCL (ctest python_fake_nccl_stream: its "long
  kernel" is fake_cuda_delay, the write a cudaMemcpyAsync on the legacy stream) or on a
  real GPU with PyTorch (torch.cuda._sleep, then copy_; tools/gpu-check.sh). One rank, so
  one GPU is enough: the refit's copies are local copy kernels on the endpoint's stream.

`python3 tests/python/test_nccl_stream.py` runs the refit check without pytest (the lent
GPU machine may have none): it prints PASSED, or SKIPPED with the reason (exit 77), or
raises.
"""

import ctypes
import os
import sys

import numpy as np

import reshard
from reshard import Shard, Status
from reshard import comm as rcomm

try:
    import pytest
except ImportError:  # the __main__ run below needs no pytest
    pytest = None

FAKE = os.environ.get("RESHARD_TEST_FAKE_NCCL") == "1"
SHAPE = (64, 96)
FULL = (np.arange(SHAPE[0] * SHAPE[1], dtype=np.float32) * 3 + 1).reshape(SHAPE)


class _Stream:
    def __init__(self, handle, device):
        self.cuda_stream = handle
        self.device = type("Device", (), {"index": device})()


class _Skip(Exception):
    pass


def _skip(reason):
    if pytest is not None:
        pytest.skip(reason)
    raise _Skip(reason)


class _OneRankStore:
    """A key-value store for a one-rank communicator (the id goes nowhere)."""

    def __init__(self):
        self._d = {}

    def set(self, key, value):
        self._d[key] = bytes(value)

    def get(self, key):
        return self._d[key]


def fake_torch_cuda(monkeypatch):
    """torch.cuda as on a machine whose current device is 1 (PyTorch's default stream
    there has handle 0)."""
    torch = pytest.importorskip("torch")
    calls = []

    def current_stream(device=None):
        calls.append(device)
        return _Stream(0, 1 if device is None else device)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    return calls


if pytest is not None:
    fake_torch_cuda = pytest.fixture(fake_torch_cuda)


def test_default_stream_is_passed_as_cuda_stream_legacy(fake_torch_cuda):
    assert rcomm._cuda_device_stream(None, None) == (1, rcomm.CUDA_STREAM_LEGACY)
    assert rcomm._cuda_device_stream(1, _Stream(0, 1)) == (1, rcomm.CUDA_STREAM_LEGACY)
    assert rcomm._cuda_device_stream(1, 0) == (1, rcomm.CUDA_STREAM_LEGACY)
    assert rcomm._cuda_device_stream(1, _Stream(0x5000, 1)) == (1, 0x5000)


def test_device_without_index_is_the_current_device(fake_torch_cuda):
    import torch
    assert rcomm._cuda_device_stream(torch.device("cuda"), None) == (1, rcomm.CUDA_STREAM_LEGACY)
    assert fake_torch_cuda[-1] == 1  # the stream of that same device
    assert rcomm._cuda_device_stream(torch.device("cuda", 0), None)[0] == 0
    assert fake_torch_cuda[-1] == 0


def test_stream_of_another_device_is_refused(fake_torch_cuda):
    try:
        rcomm._cuda_device_stream(0, _Stream(0x5000, 1))
    except reshard.ReshardError as e:
        assert e.status == Status.INVALID_ARG
        assert "device 1" in str(e)
    else:
        raise AssertionError("a stream of device 1 for an endpoint on device 0 was accepted")


def _cuda_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def test_refit_is_ordered_after_a_pending_write_on_the_default_stream():
    if not FAKE and _cuda_torch() is None:
        _skip("needs the fake CUDA/NCCL library or PyTorch with a GPU")
    if not reshard.nccl_available():
        _skip("this libreshard has no NCCL transport")
    tensors = reshard.Tensors()
    tensors.add("w", SHAPE, np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": ([0], [Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"w": ([0], [Shard(1)])})
    plan = reshard.Plan(src, dst, rank=0, world=1, staging_mb=1, timeout_s=20.0)
    nbytes = FULL.nbytes
    if FAKE:
        # the caller's default stream, as torch.cuda.current_stream() reports it
        from test_nccl_rejoin import FakeDeviceTensor
        comm = reshard.from_nccl_store(_OneRankStore(), 0, 1, key="order", device=0,
                                       stream=_Stream(0, 0))
        lib = ctypes.CDLL(os.environ["RESHARD_LIBRARY"])
        lib.fake_cuda_delay.argtypes = [ctypes.c_void_p, ctypes.c_double]
        lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.c_int, ctypes.c_void_p]
        s_arr, d_arr = np.zeros(SHAPE, np.float32), np.full(SHAPE, -1, np.float32)
        s_t, d_t = FakeDeviceTensor(s_arr), FakeDeviceTensor(d_arr)
        lib.fake_cuda_delay(None, 0.5)  # a long kernel on the default stream ...
        lib.cudaMemcpyAsync(s_t.data_ptr(), FULL.ctypes.data, nbytes, 4, None)  # ... then the write
        plan.execute(comm, src={"w": s_t}, dst={"w": d_t})
        got = d_t.array
    else:
        torch = _cuda_torch()
        comm = reshard.from_nccl_store(_OneRankStore(), 0, 1, key="order")  # torch's defaults
        s_t = torch.zeros(SHAPE, dtype=torch.float32, device="cuda")
        d_t = torch.full(SHAPE, -1.0, dtype=torch.float32, device="cuda")
        full = torch.from_numpy(FULL).cuda()
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000_000)  # about a second on the default stream ...
        s_t.copy_(full)  # ... then the write of the source, still pending at execute
        plan.execute(comm, src={"w": s_t}, dst={"w": d_t})
        got = d_t.cpu().numpy()
    comm.close()
    assert np.array_equal(got, FULL), "the refit read the source before the pending write"


if __name__ == "__main__":
    pytest = None  # report a skip as SKIPPED (exit 77), not as pytest's exception
    try:
        test_refit_is_ordered_after_a_pending_write_on_the_default_stream()
    except _Skip as e:
        print("SKIPPED: %s" % e)
        sys.exit(77)
    print("PASSED: the refit read the source after the pending write on the default stream")
