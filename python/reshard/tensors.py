"""Logical tensors: the catalogue both sides of a refit describe (reshard_tensors_t)."""

import ctypes
import enum
from collections import namedtuple

from . import _lib
from .dtypes import DType, to_dtype

TensorInfo = namedtuple("TensorInfo", "id name dtype shape view_shape numel bytes")
TensorInfo.__doc__ = """One logical tensor: id, name, DType, global shape, view shape, elements, bytes."""


class Quant(enum.IntEnum):
    """reshard_quant_kind_t (reshard.h): the quantized form a destination holds a bf16
    tensor in. fp8_block: e4m3 with fp32 scales per 128x128 block (vLLM / DeepSeek-V3
    "weight_scale_inv"); mxfp8: e4m3 with e8m0 (uint8) scales per 1x32 block."""

    none = 0
    fp8_block = 1
    mxfp8 = 2


_QUANT_ALIASES = {"fp8": Quant.fp8_block, "bf16": Quant.none}

QuantInfo = namedtuple("QuantInfo", "kind scale_tensor pow2_scale")
QuantInfo.__doc__ = """A tensor's quantized destination form: Quant kind, id of its scale
tensor, scales rounded up to powers of two (UE8M0)."""


def to_quant(kind):
    """A Quant from a Quant, its name ("fp8_block", "mxfp8", "none") or "fp8"/"bf16"
    (the inference dtypes of the command line's --infer-dtype)."""
    if isinstance(kind, Quant):
        return kind
    if isinstance(kind, str):
        if kind in Quant.__members__:
            return Quant[kind]
        if kind in _QUANT_ALIASES:
            return _QUANT_ALIASES[kind]
    raise ValueError("reshard: unknown quantized form %r (fp8, fp8_block, mxfp8, none)" % (kind,))


class Tensors(_lib.Handle):
    """An ordered catalogue of logical tensors (ids 0, 1, 2, ... in order of add).

    >>> t = Tensors(); t.add("w", (8, 4), "fp32")
    0
    """

    def __init__(self, _handle=None, _owner=None):
        if _handle is None:
            h = _lib.c_vp()
            _lib.check(_lib.lib.reshard_tensors_create(ctypes.byref(h)))
            _handle, self._owned = h.value, True
        else:
            self._owned = False
        self._h = _handle
        self._owner = _owner  # keeps a model refit alive for a borrowed catalogue

    def __del__(self):
        if getattr(self, "_owned", False) and self._h:
            _lib.lib.reshard_tensors_destroy(self._h)
            self._h = None

    def add(self, name, shape, dtype, view_shape=None):
        """Add tensor ``name`` of global ``shape`` (row-major) and ``dtype`` (a DType,
        its name, a torch or numpy dtype); ``view_shape`` a finer reshape boxes are
        written in. Returns its id. Raises ReshardError (INVALID_ARG for a duplicate
        name, SHAPE, OVERFLOW)."""
        shape = tuple(int(s) for s in shape)
        view = tuple(int(s) for s in view_shape) if view_shape is not None else ()
        if not 1 <= len(shape) <= _lib.MAX_DIMS or len(view) > _lib.MAX_DIMS:
            raise ValueError("reshard: tensor %r: 1..%d dims" % (name, _lib.MAX_DIMS))
        tid = _lib.c_i32()
        _lib.check(_lib.lib.reshard_tensors_add(
            self._h, name.encode(), int(to_dtype(dtype)), len(shape), _lib.shape_array(shape),
            len(view), _lib.shape_array(view), ctypes.byref(tid)))
        return tid.value

    def set_quant(self, tensor, kind, scale=None, pow2_scale=False):
        """Mark ``tensor`` (id or name, bf16, 2-d [rows, cols] or 3-d [experts, rows,
        cols]) as held by destinations in quantized form ``kind`` (see Quant; "none"
        removes the mark), with one scale per block in logical tensor ``scale`` (id or
        name; fp32 [E?] x ceil(rows/128) x ceil(cols/128) for fp8_block, uint8
        [E?] x rows x ceil(cols/32) for mxfp8). Destination layouts then hold its e4m3
        bytes in buffers of dtype fp8_e4m3 (torch.uint8 tensors where torch has no
        float8) and its scales as the scale tensor's fragments; sources hold bf16.
        ``pow2_scale``: fp8_block scales rounded up to powers of two (UE8M0).
        Raises ReshardError (INVALID_ARG, DTYPE, SHAPE) with the C message."""
        k = to_quant(kind)
        q = _lib.Quant(int(k), self.id_of(scale) if scale is not None else -1,
                       1 if pow2_scale else 0)
        _lib.check(_lib.lib.reshard_tensors_set_quant(self._h, self.id_of(tensor),
                                                      ctypes.byref(q)))

    def quant(self, tensor):
        """QuantInfo of ``tensor`` (id or name), or None when destinations hold it as
        its dtype."""
        q = _lib.Quant()
        _lib.check(_lib.lib.reshard_tensors_get_quant(self._h, self.id_of(tensor),
                                                      ctypes.byref(q)))
        if q.kind == Quant.none:
            return None
        return QuantInfo(Quant(q.kind), q.scale_tensor, bool(q.pow2_scale))

    def __len__(self):
        return _lib.lib.reshard_tensors_count(self._h)

    def find(self, name):
        """Id of tensor ``name``; KeyError when there is none."""
        i = _lib.lib.reshard_tensors_find(self._h, name.encode())
        if i < 0:
            raise KeyError("reshard: no logical tensor named %r" % name)
        return i

    def id_of(self, tensor):
        return self.find(tensor) if isinstance(tensor, str) else int(tensor)

    def info(self, tensor):
        """TensorInfo of a tensor given by id or name."""
        i = self.id_of(tensor)
        ti = _lib.TensorInfo()
        _lib.check(_lib.lib.reshard_tensors_info(self._h, i, ctypes.byref(ti)))
        return TensorInfo(i, ti.name.decode(), DType(ti.dtype), tuple(ti.shape[:ti.ndim]),
                          tuple(ti.view_shape[:ti.view_ndim]), ti.numel, ti.bytes)

    def __iter__(self):
        return (self.info(i) for i in range(len(self)))

    @property
    def bytes(self):
        """Bytes of every tensor once."""
        return _lib.lib.reshard_tensors_bytes(self._h)
