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
"""

import ctypes
import os

import numpy as np
import pytest

import reshard
from reshard import Shard, Status
from reshard import comm as rcomm
from test_nccl_bootstrap import DictStore
from test_nccl_rejoin import FakeDeviceTensor

FAKE = os.environ.get("RESHARD_TEST_FAKE_NCCL") == "1"
SHAPE = (64, 96)
FULL = (np.arange(SHAPE[0] * SHAPE[1], dtype=np.float32) * 3 + 1).reshape(SHAPE)


class _Stream:
    def __init__(self, handle, device):
        self.cuda_stream = handle
        self.device = type("Device", (), {"index": device})()


@pytest.fixture
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
    with pytest.raises(reshard.ReshardError) as e:
        rcomm._cuda_device_stream(0, _Stream(0x5000, 1))
    assert e.value.status == Status.INVALID_ARG
    assert "device 1" in str(e.value)


def _cuda_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.mark.skipif(not FAKE and _cuda_torch() is None,
                    reason="needs the fake CUDA/NCCL library or PyTorch with a GPU")
def test_refit_is_ordered_after_a_pending_write_on_the_default_stream():
    if not FAKE and not reshard.nccl_available():
        pytest.skip("this libreshard has no NCCL transport")
    tensors = reshard.Tensors()
    tensors.add("w", SHAPE, np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": ([0], [Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"w": ([0], [Shard(1)])})
    plan = reshard.Plan(src, dst, rank=0, world=1, staging_mb=1, timeout_s=20.0)
    nbytes = FULL.nbytes
    if FAKE:
        # the caller's default stream, as torch.cuda.current_stream() reports it
        comm = reshard.from_nccl_store(DictStore(), 0, 1, key="order", device=0,
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
        comm = reshard.from_nccl_store(DictStore(), 0, 1, key="order")  # torch's defaults
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
