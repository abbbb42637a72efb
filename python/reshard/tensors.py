"""Logical tensors: the catalogue both sides of a refit describe (reshard_tensors_t)."""

import ctypes
from collections import namedtuple

from . import _lib
from .dtypes import DType, to_dtype

TensorInfo = namedtuple("TensorInfo", "id name dtype shape view_shape numel bytes")
TensorInfo.__doc__ = """One logical tensor: id, name, DType, global shape, view shape, elements, bytes."""


class Tensors:
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
