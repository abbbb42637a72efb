"""DTensor placements and meshes, named as in torch.distributed.tensor.

Semantics are the C library's (reshard_layout_add_dtensor), which follow PyTorch:
Shard(d) splits dim d like torch.chunk (5 over 4 ranks: 2,2,1,0), several mesh
dims sharding one tensor dim apply left to right, StridedShard(d, split_factor)
gives a rank the i-th chunk of each of split_factor blocks, Replicate copies.
"""

import ctypes

import numpy as np

from . import _lib

_REPLICATE, _SHARD, _STRIDED = 0, 1, 2


class Placement:
    """Base of the three placements."""

    def _c(self):
        raise NotImplementedError

    def __eq__(self, other):
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self):
        return hash((type(self).__name__,) + tuple(sorted(self.__dict__.items())))

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False


class Replicate(Placement):
    """Every rank on this mesh dim holds the same elements."""

    def _c(self):
        return _lib.Placement(_REPLICATE, 0, 1)

    def is_replicate(self):
        return True

    def __repr__(self):
        return "Replicate()"


class Shard(Placement):
    """Split tensor (view) dim ``dim`` over this mesh dim like torch.chunk."""

    def __init__(self, dim):
        self.dim = int(dim)

    def _c(self):
        return _lib.Placement(_SHARD, self.dim, 1)

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    def __repr__(self):
        return "Shard(dim=%d)" % self.dim


class StridedShard(Shard):
    """torch's _StridedShard(dim, split_factor): dim is cut into split_factor
    blocks and a rank holds its torch.chunk of each block."""

    def __init__(self, dim, split_factor):
        super().__init__(dim)
        self.split_factor = int(split_factor)

    def _c(self):
        return _lib.Placement(_STRIDED, self.dim, self.split_factor)

    def __repr__(self):
        return "StridedShard(dim=%d, split_factor=%d)" % (self.dim, self.split_factor)


def as_placement(p):
    """A reshard placement from ours or from torch.distributed.tensor's (duck-typed:
    Shard has .dim, _StridedShard also .split_factor, Replicate is_replicate())."""
    if isinstance(p, Placement):
        return p
    if hasattr(p, "split_factor") and hasattr(p, "dim"):
        return StridedShard(p.dim, p.split_factor)
    if callable(getattr(p, "is_shard", None)) and p.is_shard():
        return Shard(p.dim)
    if callable(getattr(p, "is_replicate", None)) and p.is_replicate():
        return Replicate()
    raise TypeError("reshard: placement %r is not Shard, StridedShard or Replicate "
                    "(Partial needs a reduction, which a refit does not do)" % (p,))


def as_mesh(mesh):
    """(numpy int32 array of rank ids, ctypes Mesh) from a nested list, a numpy
    array, a torch tensor or a torch DeviceMesh (its .mesh). The array must be
    kept alive while the Mesh is used."""
    if hasattr(mesh, "mesh") and not isinstance(mesh, np.ndarray):
        mesh = mesh.mesh  # torch DeviceMesh
    if hasattr(mesh, "cpu") and hasattr(mesh, "numpy"):
        mesh = mesh.cpu().numpy()
    arr = np.ascontiguousarray(np.asarray(mesh, dtype=np.int64))
    if arr.ndim < 1 or arr.ndim > _lib.MAX_DIMS:
        raise ValueError("reshard: a mesh has 1..%d dims, got %d" % (_lib.MAX_DIMS, arr.ndim))
    ranks = np.ascontiguousarray(arr.astype(np.int32))
    if not np.array_equal(ranks, arr):
        raise ValueError("reshard: mesh rank ids must fit in int32")
    m = _lib.Mesh(arr.ndim, _lib.shape_array(arr.shape),
                  ranks.ctypes.data_as(ctypes.POINTER(_lib.c_i32)))
    return ranks, m
