"""A stand-in for the parts of torch.distributed.tensor (DTensor) and FSDP2 that
reshard's FSDP2 sender reads, for torch 1.13 (no DTensor) here.

Revision followed: pytorch/pytorch @ 00131b6bd4bedfa71eb27b407292be0ba45e5ee8:
torch/distributed/tensor/placement_types.py (Placement.is_shard / is_replicate /
is_partial; Shard(dim) splits like torch.chunk, trailing shards short or empty;
_StridedShard(dim, *, split_factor), a Shard; Replicate(); Partial(reduce_op="sum")),
torch/distributed/tensor/_api.py (DTensor.device_mesh, .placements (a tuple),
.shape (global), to_local()), torch/distributed/device_mesh.py (DeviceMesh.mesh, a
tensor of global ranks; mesh_dim_names; get_coordinate(); size(mesh_dim); ndim),
torch/distributed/fsdp/_fully_shard/_fsdp_param.py (FSDP2 chunks each parameter's
local tensor on dim 0 with torch.chunk, empty chunks appended (_chunk_with_empty);
the sharded parameter is the unpadded chunk; a parameter that tensor parallelism
sharded on dim 0 gets _StridedShard(0, split_factor=tp) on the data-parallel dim).
It is not PyTorch: no collectives, no dispatch. Written from those files' facts.

``fully_shard`` is also the tests' oracle of what an FSDP2 rank holds: each
parameter's local shard made with torch.chunk, as FSDP2 and ColwiseParallel /
RowwiseParallel make it, never with reshard's code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import torch

REVISION = ("pytorch/pytorch", "00131b6bd4bedfa71eb27b407292be0ba45e5ee8")


class Placement:
    def is_shard(self, dim: Optional[int] = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self, reduce_op: Optional[str] = None) -> bool:
        return False


@dataclass(frozen=True)
class Shard(Placement):
    dim: int

    def is_shard(self, dim: Optional[int] = None) -> bool:
        return dim is None or dim == self.dim


@dataclass(frozen=True)
class _StridedShard(Shard):
    split_factor: int = 1


@dataclass(frozen=True)
class Replicate(Placement):
    def is_replicate(self) -> bool:
        return True


@dataclass(frozen=True)
class Partial(Placement):
    reduce_op: str = "sum"

    def is_partial(self, reduce_op: Optional[str] = None) -> bool:
        return reduce_op is None or reduce_op == self.reduce_op


class DeviceMesh:
    """``mesh``: nested lists or a tensor of global ranks; ``rank``: this process's
    global rank (torch.distributed.get_rank() in PyTorch)."""

    def __init__(self, device_type: str, mesh, *, mesh_dim_names=None, rank: int = 0):
        self.device_type = device_type
        self.mesh = torch.as_tensor(mesh, dtype=torch.int64)
        self.mesh_dim_names = tuple(mesh_dim_names) if mesh_dim_names else None
        self._rank = rank

    @property
    def ndim(self) -> int:
        return self.mesh.ndim

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.mesh.shape)

    def size(self, mesh_dim: Optional[int] = None) -> int:
        return self.mesh.numel() if mesh_dim is None else self.mesh.size(mesh_dim)

    def get_coordinate(self):
        at = (self.mesh == self._rank).nonzero()
        return [int(x) for x in at[0]] if len(at) else None


class DTensor(torch.nn.Parameter):
    """A parameter whose data is the local shard (as FSDP2's sharded parameter) and
    whose ``shape`` is the global shape, as a DTensor's."""

    def __new__(cls, local: torch.Tensor, mesh: DeviceMesh, placements: Sequence[Placement],
                shape: Sequence[int]):
        p = torch.Tensor._make_subclass(cls, local, False)
        p._local_tensor = local
        p._mesh = mesh
        p._placements = tuple(placements)
        p._global = torch.Size(shape)
        return p

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._mesh

    @property
    def placements(self) -> Tuple[Placement, ...]:
        return self._placements

    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        return self._global

    def to_local(self) -> torch.Tensor:
        return self._local_tensor


def chunk_with_empty(t: torch.Tensor, n: int, dim: int):
    """FSDP2's _chunk_with_empty: torch.chunk, then empty chunks up to n."""
    chunks = list(torch.chunk(t, n, dim=dim))
    while len(chunks) < n:
        shape = list(t.shape)
        shape[dim] = 0
        chunks.append(t.new_empty(shape))
    return chunks


# ColwiseParallel shards dim 0 over tp, RowwiseParallel dim 1; anything else is
# replicated over tp (torch/distributed/tensor/parallel/style.py at the revision).
COLWISE, ROWWISE, REPLICATED = "colwise", "rowwise", "replicated"
# transformers' tensor parallelism with plain tensors (no DTensor over tp): v4.57.6's
# "local_colwise" / "local_rowwise" (ColwiseParallel(use_dtensor=False): the
# parameter is the TP piece, get_tensor_shard's torch.chunk on dim -2, or dim -1 for
# a bias / rowwise), and every style of transformers 5 (a597f974: shard_tensor returns
# the piece as a plain tensor), with its "packed_colwise" on the fused [E, 2I, H]
# gate_up_proj (get_packed_weights: rows [t*b, (t+1)*b) of the gate half and of the up
# half, b = I // tp). FSDP2 then sees a plain tensor: Shard(0) of the piece over the
# data-parallel mesh only, whose global shape is the piece's.
LOCAL_COLWISE, LOCAL_ROWWISE, LOCAL_PACKED = "local_colwise", "local_rowwise", "local_packed"


def tp_piece(full: torch.Tensor, style: str, tp: int, t: int) -> torch.Tensor:
    """Tensor-parallel rank t's plain piece of ``full`` under a local style."""
    if style == LOCAL_PACKED:
        b = full.shape[-2] // 2 // tp
        half = full.shape[-2] // 2
        return torch.cat([full[..., t * b:(t + 1) * b, :],
                          full[..., half + t * b:half + (t + 1) * b, :]], dim=-2)
    dim = -1 if style == LOCAL_ROWWISE or full.dim() == 1 else -2
    return chunk_with_empty(full, tp, full.dim() + dim)[t]


def local_shard(full: torch.Tensor, style: str, fsdp: int, tp: int, s: int,
                t: int) -> torch.Tensor:
    """What FSDP2 rank s of fsdp, tensor-parallel rank t of tp holds of ``full``:
    the tp split first (torch.chunk on dim 0 or 1), then FSDP2's torch.chunk of that
    on dim 0."""
    x = full
    if tp > 1 and style == COLWISE:
        x = chunk_with_empty(x, tp, 0)[t]
    elif tp > 1 and style == ROWWISE:
        x = chunk_with_empty(x, tp, 1)[t]
    return chunk_with_empty(x, fsdp, 0)[s].contiguous().clone()


def placements_of(style: str, replicas: int, tp: int) -> Tuple[Placement, ...]:
    """The placements FSDP2 (over [dp_replicate,] dp_shard) and the tp style give."""
    out: Tuple[Placement, ...] = (Replicate(),) if replicas > 1 else ()
    if tp > 1 and style == COLWISE:
        return out + (_StridedShard(0, split_factor=tp), Shard(0))
    if tp > 1 and style == ROWWISE:
        return out + (Shard(0), Shard(1))
    if tp > 1:
        return out + (Shard(0), Replicate())
    return out + (Shard(0),)


def mesh_of(replicas: int, fsdp: int, tp: int, rank: int) -> DeviceMesh:
    """init_device_mesh over [dp_replicate,] dp_shard[, tp], ranks in row-major order."""
    dims = [d for d in ((replicas, "dp_replicate"), (fsdp, "dp_shard"), (tp, "tp"))
            if d[0] > 1 or d[1] == "dp_shard"]
    shape = [d[0] for d in dims]
    return DeviceMesh("cpu", torch.arange(replicas * fsdp * tp).reshape(shape),
                      mesh_dim_names=[d[1] for d in dims], rank=rank)


def fully_shard(full: Dict[str, torch.Tensor], styles: Dict[str, str], rank: int, *,
                fsdp: int, replicas: int = 1, tp: int = 1,
                prefix: str = "") -> torch.nn.Module:
    """A module whose named_parameters() are ``prefix`` + each name of ``full`` as
    DTensors of ``rank`` (mesh [dp_replicate, dp_shard, tp], rank = (r*fsdp + s)*tp
    + t), each local shard made by local_shard."""
    t, s = rank % tp, (rank // tp) % fsdp
    mesh = mesh_of(replicas, fsdp, tp, rank)
    dp_mesh = mesh_of(replicas, fsdp, 1, rank)  # the data-parallel ranks of tp rank t
    dp_mesh.mesh = dp_mesh.mesh * tp + t
    m = torch.nn.Module()
    for name, x in full.items():
        style = styles.get(name, REPLICATED)
        if style.startswith("local"):  # a plain TP piece, then FSDP2 over dp only
            piece = tp_piece(x, style, tp, t) if tp > 1 else x
            p = DTensor(local_shard(piece, REPLICATED, fsdp, 1, s, 0), dp_mesh,
                        placements_of(REPLICATED, replicas, 1), piece.shape)
        else:
            p = DTensor(local_shard(x, style, fsdp, tp, s, t), mesh,
                        placements_of(style, replicas, tp), x.shape)
        _set(m, prefix + name, p)
    return m


def _set(root: torch.nn.Module, dotted: str, p: torch.nn.Parameter) -> None:
    *path, leaf = dotted.split(".")
    m = root
    for part in path:
        if not hasattr(m, part):
            m.add_module(part, torch.nn.Module())
        m = getattr(m, part)
    m.register_parameter(leaf, p)
