"""Shared allocations for colocated refits (reshard_shared.h): host memory that the
ranks of a host reading it in a colocated plan map once per plan and copy with memcpy,
instead of reading it with process_vm_readv. Any other buffer still works (read by the
system call); put the training side's parameters here to read at memcpy speed."""

import ctypes

import numpy as np

from . import _lib
from .errors import Status, error


class _Allocation:
    """One reshard_alloc_shared block; freed when the last array over it is collected.
    Free it only after the plans that read it were closed (a reader that still maps it
    keeps the old pages, never another allocation's)."""

    def __init__(self, nbytes):
        p = _lib.c_vp()
        _lib.check(_lib.lib.reshard_alloc_shared(ctypes.c_uint64(nbytes), ctypes.byref(p)))
        self.ptr = p.value
        self.nbytes = nbytes
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                    "data": (self.ptr, False), "version": 3}

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.lib.reshard_free_shared(_lib.c_vp(self.ptr))
            self.ptr = None


def alloc_shared(shape, dtype=np.uint8):
    """A zeroed numpy array of ``shape`` and ``dtype`` in a shared allocation (one memfd
    of this process). Local. Raises ReshardError (INVALID_ARG: an empty shape, a negative
    or non-integer dimension, a size past 2**63 bytes; NOMEM;
    UNSUPPORTED: a libreshard without shared allocations)."""
    if not _lib.has("reshard_alloc_shared"):
        raise error(Status.UNSUPPORTED, "this libreshard has no reshard_alloc_shared")
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(not isinstance(n, (int, np.integer)) or n < 0 for n in shape):
        raise error(Status.INVALID_ARG, "alloc_shared: shape %r: every dimension must be an "
                    "integer >= 0" % (shape,))
    nbytes = dtype.itemsize
    for n in shape:  # Python integers: no wrap-around
        nbytes *= int(n)
    if nbytes <= 0:
        raise error(Status.INVALID_ARG, "alloc_shared: shape %r of %s holds no bytes"
                    % (shape, dtype))
    if nbytes >= 1 << 63:
        raise error(Status.INVALID_ARG, "alloc_shared: shape %r of %s is %d bytes, more than "
                    "an allocation can hold" % (shape, dtype, nbytes))
    return np.asarray(_Allocation(nbytes)).view(dtype).reshape(shape)


def shared_like(array):
    """A copy of numpy ``array`` (any dtype and shape) in a shared allocation."""
    a = np.ascontiguousarray(array)
    out = alloc_shared(a.shape, a.dtype)
    out[...] = a
    return out
