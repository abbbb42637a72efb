"""Comm.from_nccl: an endpoint on the caller's ncclComm_t. Without a GPU only what
comes before the communicator is touched can be checked: the address forms taken, a
NULL one refused, and no device reported as UNSUPPORTED (the C side counts devices
before it reads the communicator); tools/gpu-check.sh runs the real ones."""

import ctypes

import pytest

import reshard
from reshard.comm import _raw_pointer

needs_nccl = pytest.mark.skipif(not reshard.nccl_available(),
                                reason="libreshard built without NCCL")


class CupyLike:  # cupy.cuda.nccl.NcclCommunicator carries its ncclComm_t as .ptr
    ptr = 0x1230


def test_address_forms():
    assert _raw_pointer(0x1230, "nccl_comm") == 0x1230
    assert _raw_pointer(ctypes.c_void_p(0x1230), "nccl_comm") == 0x1230
    assert _raw_pointer(CupyLike(), "nccl_comm") == 0x1230
    raw = ctypes.cast(ctypes.c_void_p(0x1230), ctypes.POINTER(ctypes.c_char))  # vLLM's pynccl
    assert _raw_pointer(raw, "nccl_comm") == 0x1230
    for bad in (0, None, ctypes.c_void_p(None), "comm"):
        with pytest.raises(reshard.ReshardError) as e:
            _raw_pointer(bad, "nccl_comm")
        assert e.value.status == reshard.Status.INVALID_ARG


def _device_count():
    n = ctypes.c_int(0)
    st = reshard._lib.lib.reshard_nccl_device_count(ctypes.byref(n))
    return n.value if st == 0 else 0


@needs_nccl
def test_null_communicator_refused():
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Comm.from_nccl(0)
    assert e.value.status == reshard.Status.INVALID_ARG


@needs_nccl
@pytest.mark.skipif(_device_count() > 0, reason="a CUDA device: the fake address would be read")
def test_no_device_is_unsupported():
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Comm.from_nccl(0x1230, stream=0x10)
    assert e.value.status == reshard.Status.UNSUPPORTED
