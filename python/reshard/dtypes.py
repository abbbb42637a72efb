"""Element types: reshard_dtype_t, and the torch and numpy dtypes that match them."""

import enum

import numpy as np

try:
    import torch
except ImportError:  # torch is optional: numpy buffers work without it
    torch = None


class DType(enum.IntEnum):
    """reshard_dtype_t (reshard.h), named as the C library prints them."""

    bf16 = 0
    fp16 = 1
    fp32 = 2
    fp64 = 3
    fp8_e4m3 = 4
    fp8_e5m2 = 5
    int8 = 6
    uint8 = 7
    int32 = 8
    int64 = 9

    @property
    def itemsize(self):
        return _ITEMSIZE[self]


_ITEMSIZE = {DType.bf16: 2, DType.fp16: 2, DType.fp32: 4, DType.fp64: 8, DType.fp8_e4m3: 1,
             DType.fp8_e5m2: 1, DType.int8: 1, DType.uint8: 1, DType.int32: 4, DType.int64: 8}

_NUMPY = {np.dtype(np.float16): DType.fp16, np.dtype(np.float32): DType.fp32,
          np.dtype(np.float64): DType.fp64, np.dtype(np.int8): DType.int8,
          np.dtype(np.uint8): DType.uint8, np.dtype(np.int32): DType.int32,
          np.dtype(np.int64): DType.int64}

_TORCH = {}
if torch is not None:
    _TORCH = {torch.bfloat16: DType.bf16, torch.float16: DType.fp16, torch.float32: DType.fp32,
              torch.float64: DType.fp64, torch.int8: DType.int8, torch.uint8: DType.uint8,
              torch.int32: DType.int32, torch.int64: DType.int64}
    for _tn, _d in (("float8_e4m3fn", DType.fp8_e4m3), ("float8_e5m2", DType.fp8_e5m2)):
        if hasattr(torch, _tn):  # torch >= 2.1
            _TORCH[getattr(torch, _tn)] = _d

_ALIASES = {"bfloat16": DType.bf16, "float16": DType.fp16, "half": DType.fp16,
            "float32": DType.fp32, "float": DType.fp32, "float64": DType.fp64,
            "double": DType.fp64, "float8_e4m3fn": DType.fp8_e4m3, "float8_e5m2": DType.fp8_e5m2}


def to_dtype(d):
    """A DType from a DType, its name ("bf16", "float32", ...), a torch dtype or a
    numpy dtype. Raises TypeError for anything reshard has no type for."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str):
        if d in DType.__members__:
            return DType[d]
        if d in _ALIASES:
            return _ALIASES[d]
        raise TypeError("reshard: unknown dtype name %r" % d)
    if torch is not None and isinstance(d, torch.dtype):
        if d in _TORCH:
            return _TORCH[d]
        raise TypeError("reshard: torch dtype %s has no reshard dtype" % d)
    try:
        nd = np.dtype(d)
    except TypeError:
        raise TypeError("reshard: %r is not a dtype" % (d,)) from None
    if nd in _NUMPY:
        return _NUMPY[nd]
    raise TypeError("reshard: numpy dtype %s has no reshard dtype" % nd)


def torch_dtype(d):
    """The torch dtype of a reshard dtype (None when this torch has none, e.g. fp8
    before torch 2.1)."""
    d = to_dtype(d)
    for k, v in _TORCH.items():
        if v == d:
            return k
    return None
