"""Layouts: where every element of every logical tensor lives on one side of a
refit (reshard_layout_t), and the buffer table that names each rank's buffers."""

import ctypes
from collections import namedtuple

from . import _lib
from .dtypes import DType, to_dtype
from .placements import as_mesh, as_placement
from .tensors import Tensors

class Parameter(namedtuple("Parameter", "name shape dtype rank buffer bytes")):
    """One declared buffer of a rank: the framework's parameter name (what
    named_parameters() calls it), its shape (as torch.Tensor.shape), its dtype as
    reshard's DType (``DType.bf16``; ``torch_dtype`` gives torch's), the rank, the
    buffer id, and its size in bytes."""

    __slots__ = ()

    @property
    def torch_dtype(self):
        """The torch dtype of a tensor bound to this parameter (torch.bfloat16, ...):
        torch.uint8 for fp8 where torch has no float8 (before 2.1), as new_buffers
        allocates them. Raises ImportError without torch."""
        from .dtypes import torch_dtype
        from .buffers import _FP8
        import torch
        td = torch_dtype(self.dtype)
        if td is None and self.dtype in _FP8:
            return torch.uint8
        return td

Fragment = namedtuple("Fragment", "tensor rank buffer offset extent base strides")
Fragment.__doc__ = """Elements box(offset, extent) of logical tensor ``tensor`` (id) live
in buffer ``buffer`` of rank ``rank``: element offset+i at position
base + sum(i[d] * strides[d]) (elements of the tensor's dtype)."""


def _contiguous_strides(extent):
    strides, s = [], 1
    for e in reversed(extent):
        strides.append(s)
        s *= int(e)
    return tuple(reversed(strides))


class Layout(_lib.Handle):
    """All fragments of one side of a refit, over a Tensors catalogue.

    Build one from explicit fragments (add_fragment), from DTensor placements
    (add_dtensor, from_placements, from_dtensor), or take one of a Model's refit.
    """

    def __init__(self, tensors, _handle=None, _owner=None):
        if not isinstance(tensors, Tensors):
            raise TypeError("reshard: Layout(tensors) needs a reshard.Tensors")
        self.tensors = tensors  # the C layout keeps the catalogue by pointer
        self._owner = _owner
        if _handle is None:
            h = _lib.c_vp()
            _lib.check(_lib.lib.reshard_layout_create(tensors._h, ctypes.byref(h)))
            _handle, self._owned = h.value, True
        else:
            self._owned = False
        self._h = _handle

    def __del__(self):
        if getattr(self, "_owned", False) and self._h:
            _lib.lib.reshard_layout_destroy(self._h)
            self._h = None

    # --- fragments -------------------------------------------------------------------

    def add_fragment(self, tensor, rank, buffer, offset, extent, base=0, strides=None):
        """Add one fragment; ``tensor`` by id or name; ``strides`` default to the
        row-major strides of ``extent`` (the box stored contiguously from ``base``).
        Raises ReshardError (BOX, RANK, INVALID_ARG, OVERFLOW) with the C message."""
        tid = self.tensors.id_of(tensor)
        offset, extent = tuple(offset), tuple(extent)
        if len(offset) != len(extent) or len(offset) > _lib.MAX_DIMS:
            raise ValueError("reshard: offset and extent need the same 1..%d dims" % _lib.MAX_DIMS)
        strides = tuple(strides) if strides is not None else _contiguous_strides(extent)
        f = _lib.Fragment(tid, int(rank), int(buffer), _lib.Box(len(offset), _lib.shape_array(offset),
                                                               _lib.shape_array(extent)),
                          int(base), _lib.shape_array(strides))
        _lib.check(_lib.lib.reshard_layout_add_fragment(self._h, ctypes.byref(f)))

    def add_dtensor(self, tensor, mesh, placements, buffer=0, base=0, name=None, dtype=None):
        """Place logical tensor ``tensor`` (id or name) as a DTensor on ``mesh`` (nested
        list / array of rank ids, or a torch DeviceMesh) with one placement per mesh
        dim (Shard, StridedShard, Replicate, or torch.distributed.tensor's). Each rank's
        local shard is a contiguous row-major array in its buffer ``buffer`` from
        element ``base``. With ``name``, buffer ``buffer`` of each rank holding a
        non-empty shard is declared as parameter ``name`` of the local shape (the
        shard's extents, strided pieces summed), so it can be bound by name; its dtype
        is the tensor's, or ``dtype`` (e.g. "fp8_e4m3" for the destination buffers of a
        tensor marked by Tensors.set_quant)."""
        tid = self.tensors.id_of(tensor)
        ranks, m = as_mesh(mesh)
        placements = [as_placement(p) for p in placements]
        if len(placements) != ranks.ndim:
            raise ValueError("reshard: %d placements for a %d-d mesh" % (len(placements), ranks.ndim))
        cp = (_lib.Placement * len(placements))(*[p._c() for p in placements])
        first = len(self)
        _lib.check(_lib.lib.reshard_layout_add_dtensor(self._h, tid, ctypes.byref(m), cp,
                                                        int(buffer), int(base)))
        if name is not None:
            dtype = to_dtype(dtype) if dtype is not None else self.tensors.info(tid).dtype
            for rank, shape in sorted(_local_shapes(self.fragments(first)).items()):
                self.declare_buffer(rank, buffer, name, dtype, shape)

    def __len__(self):
        return _lib.lib.reshard_layout_count(self._h)

    def fragments(self, start=0):
        """The fragments from index ``start`` on, as Fragment tuples."""
        out, f = [], _lib.Fragment()
        for i in range(start, len(self)):
            _lib.check(_lib.lib.reshard_layout_fragment(self._h, i, ctypes.byref(f)))
            n = f.box.ndim
            out.append(Fragment(f.tensor, f.rank, f.buffer, tuple(f.box.offset[:n]),
                                tuple(f.box.extent[:n]), f.base, tuple(f.stride[:n])))
        return out

    def buffer_bytes(self, rank, buffer):
        """Bytes buffer ``buffer`` of ``rank`` must have for its fragments (0: unused)."""
        return _lib.lib.reshard_layout_buffer_bytes(self._h, int(rank), int(buffer))

    def buffer_count(self, rank):
        """One more than the largest buffer id ``rank``'s fragments or declarations use."""
        n = _lib.lib.reshard_layout_buffer_count(self._h, int(rank))
        declared = self.parameters(rank)
        return max([n] + [p.buffer + 1 for p in declared])

    # --- the buffer table --------------------------------------------------------------

    def declare_buffer(self, rank, buffer, name, dtype, shape):
        """Say that buffer ``buffer`` of ``rank`` is parameter ``name`` of ``dtype`` and
        ``shape``: the plan then checks fragments fit it, and execution wants exactly
        that tensor. Raises ReshardError (INVALID_ARG for a duplicate, SHAPE, ...)."""
        shape = tuple(int(s) for s in shape)
        if not 1 <= len(shape) <= _lib.MAX_DIMS:
            raise ValueError("reshard: parameter %r: 1..%d dims" % (name, _lib.MAX_DIMS))
        _lib.check(_lib.lib.reshard_layout_declare_buffer(
            self._h, int(rank), int(buffer), name.encode(), int(to_dtype(dtype)), len(shape),
            _lib.shape_array(shape)))

    def zero_buffer(self, rank, buffer):
        """Mark declared destination buffer ``buffer`` of ``rank`` zero-filled: a
        parameter the engine holds at zero there that no source sends (vLLM's gpt-oss
        w2_bias without EP on every rank but the first). No fragment may lie in it
        (Plan: INVALID_ARG); every execute, dense or delta, writes all its bytes with
        zeros once every rank agreed, and a missing one is BUFFER on every rank.
        Raises ReshardError (INVALID_ARG: not declared)."""
        _lib.check(_lib.lib.reshard_layout_zero_buffer(self._h, int(rank), int(buffer)))

    def parameters(self, rank):
        """The parameters ``rank`` holds on this side: its declared buffers, in
        buffer-id order, as Parameter(name, shape, dtype, rank, buffer, bytes); [] for a
        rank that holds none on this side. A layout of a refit scoped to one rank
        (Model.refit(..., rank=r), Model.plan) declares that rank's parameters only:
        asking it for another rank raises ReshardError (RANK) rather than answer []."""
        self._check_scope(rank)
        n = _lib.lib.reshard_layout_declared_count(self._h, int(rank))
        out, bi = [], _lib.BufferInfo()
        for i in range(n):
            _lib.check(_lib.lib.reshard_layout_buffer_info(self._h, int(rank), i, ctypes.byref(bi)))
            out.append(_parameter(bi))
        return out

    def _check_scope(self, rank):
        scope = getattr(self._owner, "rank", None)
        if scope is not None and int(rank) not in (scope, _lib.ALL_RANKS):
            from .errors import Status, error
            raise error(Status.RANK, "this layout belongs to a refit scoped to rank %d "
                        "(Model.refit(..., rank=%d) or Model.plan), which declares rank %d's "
                        "parameters only; rank %d's need the whole refit (Model.refit without "
                        "rank=) or its own scoped one" % (scope, scope, scope, int(rank)))

    def find_parameter(self, rank, name):
        """Parameter ``name`` of ``rank``, or None (ReshardError RANK for another rank
        than a scoped refit's, as parameters)."""
        self._check_scope(rank)
        b = _lib.lib.reshard_layout_find_buffer(self._h, int(rank), name.encode())
        if b < 0:
            return None
        bi = _lib.BufferInfo()
        _lib.check(_lib.lib.reshard_layout_declared_buffer(self._h, int(rank), b, ctypes.byref(bi)))
        return _parameter(bi)

    def ranks(self):
        """Sorted ranks that hold a fragment or a declared buffer."""
        rs = {f.rank for f in self.fragments()}
        n = _lib.lib.reshard_layout_declared_count(self._h, _lib.ALL_RANKS)
        bi = _lib.BufferInfo()
        for i in range(n):
            _lib.check(_lib.lib.reshard_layout_buffer_info(self._h, _lib.ALL_RANKS, i,
                                                            ctypes.byref(bi)))
            rs.add(bi.rank)
        return sorted(rs)

    def new_buffers(self, rank, library="torch", fill=None, device=None):
        """A name -> tensor dict with one new tensor per parameter of ``rank``
        (library "torch", optionally on ``device``, or "numpy"), each element set to
        byte ``fill`` when given (e.g. reshard.SENTINEL_BYTE for destinations)."""
        from .buffers import allocate
        return {p.name: allocate(p, library, fill, device) for p in self.parameters(rank)}

    # --- constructors -----------------------------------------------------------------------

    @classmethod
    def from_placements(cls, tensors, placed, quantized=False):
        """A layout in which each logical tensor is one DTensor: ``placed`` maps a
        tensor name to (mesh, placements); every rank holds each of its shards in its
        own buffer (ids in the order of ``placed``) declared under the tensor's name.
        ``quantized``: a destination layout holding the tensors marked by
        Tensors.set_quant in their quantized form (buffers of dtype fp8_e4m3; place
        their scale tensors too)."""
        layout = cls(tensors)
        for buffer, (name, (mesh, placements)) in enumerate(placed.items()):
            dtype = "fp8_e4m3" if quantized and tensors.quant(name) is not None else None
            layout.add_dtensor(name, mesh, placements, buffer=buffer, name=name, dtype=dtype)
        return layout

    @classmethod
    def from_dtensors(cls, tensors, dtensors):
        """As from_placements, reading each mesh and placements from a torch >= 2
        DTensor (``dtensors``: name -> DTensor, e.g. dict(module.named_parameters())
        of a module whose parameters are DTensors)."""
        return cls.from_placements(tensors, {
            name: (t.device_mesh, tuple(t.placements)) for name, t in dtensors.items()})


def _parameter(bi):
    return Parameter(bi.name.decode(), tuple(bi.shape[:bi.ndim]), DType(bi.dtype), bi.rank,
                     bi.buffer, bi.bytes)


def _local_shapes(frags):
    """Per rank, the shape of its local shard from the fragments add_dtensor made:
    per dim, the extents of its pieces at distinct offsets summed (a StridedShard
    rank holds split_factor pieces stored back to back along the dim)."""
    per_rank = {}
    for f in frags:
        dims = per_rank.setdefault(f.rank, [dict() for _ in f.extent])
        for d, (o, e) in enumerate(zip(f.offset, f.extent)):
            dims[d][o] = e
    return {r: tuple(sum(d.values()) for d in dims) for r, dims in per_rank.items()}
