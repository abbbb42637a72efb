"""The verification pattern (reshard.h section 7) for examples and tests: sources
filled with a value per (tensor id, global index), destinations checked element by
element and, outside fragments, byte by byte against SENTINEL_BYTE."""

import ctypes

from . import _lib
from .buffers import as_list

SENTINEL_BYTE = 0xA5


def fill_pattern(layout, rank, buffers):
    """Write the pattern into every element of ``rank``'s fragments in ``buffers``
    (name -> tensor dict or list by buffer id, CPU memory). Raises ReshardError."""
    rank = _lib.as_int(rank, "rank")
    arr, n, views = as_list(layout, rank, buffers)
    _lib.check(_lib.lib.reshard_fill_pattern(layout._h, rank, arr, n))
    del views


def verify_pattern(layout, rank, buffers):
    """Check every element of ``rank``'s fragments against the pattern and every
    other byte of the buffers against SENTINEL_BYTE; returns the bytes checked.
    Raises ReshardError (VERIFY names the tensor, rank, box and first wrong element)."""
    rank = _lib.as_int(rank, "rank")
    arr, n, views = as_list(layout, rank, buffers)
    verified = _lib.c_u64()
    _lib.check(_lib.lib.reshard_verify_pattern(layout._h, rank, arr, n,
                                               ctypes.byref(verified)))
    del views
    return verified.value
