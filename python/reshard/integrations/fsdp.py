"""The training side's tensors as a PyTorch FSDP2 rank holds them: the HF module's own
named_parameters(), each a DTensor (torch.distributed.tensor) whose local shard
(``to_local()``) is bound in place: no gather, no copy.

What the refit relies on, from PyTorch's source (pytorch/pytorch@00131b6b):
placement_types.py: ``Shard(dim)`` splits like torch.chunk (trailing shards short or
empty), ``_StridedShard(dim, split_factor)`` is FSDP2's placement over a dim that
tensor parallelism sharded first, ``Partial`` holds addends of a reduction;
_api.py: ``DTensor.device_mesh`` (a DeviceMesh: ``.mesh``, a tensor of global ranks,
``get_coordinate()``), ``.placements`` (one per mesh dim), ``.shape`` (the global
shape), ``to_local()`` (this rank's shard, a view of FSDP2's sharded storage, which
the optimizer updates in place). Imports nothing of torch.distributed.tensor: a
DTensor is recognised by those attributes.

Names: FSDP2's fully_shard keeps the module's names; torch.compile adds ``_orig_mod.``,
activation checkpointing ``_checkpoint_wrapped_module.``, FSDP1 and DDP
``_fsdp_wrapped_module.`` and ``module.``: they are taken off (FSDPModule.names)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..layout import Layout, _local_shapes
from ..placements import as_placement
from ..tensors import Tensors

# Module segments wrappers insert into parameter names (anywhere in the path).
WRAPPER_SEGMENTS = ("_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")


def is_dtensor(t: Any) -> bool:
    """A torch DTensor (or anything with its attributes: device_mesh, placements,
    to_local)."""
    return hasattr(t, "device_mesh") and hasattr(t, "placements") and \
        callable(getattr(t, "to_local", None))


def hf_name(name: str) -> str:
    """``name`` without the wrappers' segments (WRAPPER_SEGMENTS) and a leading
    ``module.`` (DDP)."""
    parts = [p for p in name.split(".") if p not in WRAPPER_SEGMENTS]
    while parts and parts[0] == "module":
        parts = parts[1:]
    return ".".join(parts)


def _mesh_ranks(mesh: Any) -> np.ndarray:
    m = getattr(mesh, "mesh", mesh)
    if hasattr(m, "cpu"):
        m = m.cpu().numpy()
    return np.asarray(m, dtype=np.int64)


class FSDPModule:
    """This rank's FSDP2 module (``module``: the model after fully_shard, wrapped or
    not). ``named()`` gives its parameters by HF name as local shards; ``problems``
    checks them against the refit's train layout before anything moves."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.was_dtensor: Dict[str, bool] = {}

    def live(self) -> Dict[str, Any]:
        """HF name -> the parameter as the module holds it (a DTensor when sharded)."""
        out: Dict[str, Any] = {}
        for n, p in self.module.named_parameters():
            out[hf_name(n)] = p
        return out

    def named(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(parameters, buffers) by HF name: each DTensor parameter's local shard
        (to_local(), bound in place; an empty one, FSDP2's chunk of a trailing rank, is
        left out as the layout declares none), plain tensors as they are (a module that
        holds them unsharded fails the binding's shape check, and problems() names
        why)."""
        params = {}
        for n, p in self.live().items():
            local = p.to_local() if is_dtensor(p) else p
            if is_dtensor(p) and local.numel() == 0:
                continue  # FSDP2's empty chunk (trailing ranks): the layout declares none
            params[n] = local
        buffers = {hf_name(n): b for n, b in self.module.named_buffers()}
        return params, buffers

    def problems(self, layout: Layout, rank: int, side: str = "train",
                 train: Optional[str] = None) -> List[str]:
        """What makes this rank's live module differ from ``layout`` at ``rank`` (the
        refit's train layout; rank = this trainer rank), each naming the rank and
        parameter: a ``Partial`` or unknown placement; a mesh holding ranks outside
        the refit's training ranks or not putting this process at ``rank``; a local
        shard whose shape is not what its placements imply; placements that put
        other elements of the parameter here than the layout does (another spec, a
        mesh in another order: checked element by element for parameters the layout
        holds whole under their own name); a plain tensor where the layout declares a
        shard (FSDP2 unsharded: call module.reshard() first). Missing, extra and
        renamed parameters are the binding's (bind_live)."""
        out: List[str] = []
        declared = {p.name: p for p in layout.parameters(rank)}
        world = max(layout.ranks()) + 1 if layout.ranks() else 0
        frags = [f for f in layout.fragments() if f.rank == rank]
        seen: Dict[int, Tuple[int, str]] = {}  # shard count -> (this rank's index, parameter)
        for name, p in self.live().items():
            where = "%s rank %d: parameter %r" % (side, rank, name)
            want = declared.get(name)
            if not is_dtensor(p):
                if want is not None and tuple(p.shape) != want.shape:
                    out.append("%s is a plain tensor of shape %s where the layout holds the "
                               "shard %s: an FSDP2 module's parameters must be sharded "
                               "DTensors when send_weights runs (after the optimizer step; "
                               "call module.reshard() after a forward that left them "
                               "unsharded)" % (where, tuple(p.shape), want.shape))
                continue
            mine = [f for f in frags if want is not None and f.buffer == want.buffer]
            problem = _dtensor_problem(layout, name, p, rank, world, want, mine, where,
                                       _tp_of(train, rank))
            if not problem and train:
                problem = _shard_index_problem(p, rank, train, where)
            if not problem:  # every parameter's FSDP shard index the same on this rank
                for size, index in _shard_indices(p, rank):
                    first = seen.setdefault(size, (index, name))
                    if first[0] != index:
                        problem = ("%s: its mesh puts this rank at shard %d of %d where "
                                   "parameter %r's puts it at shard %d (meshes in different "
                                   "orders)" % (where, index, size, first[1], first[0]))
                        break
            if problem:
                out.append(problem)
        return out


def _tp_of(train: Optional[str], rank: int) -> Optional[Tuple[int, int]]:
    """(tp, this rank's tp index) under the train spec, or None without one."""
    if not train:
        return None
    from .ranks import fsdp_sizes
    _, tp = fsdp_sizes(train)
    return tp, rank % tp


def _shard_indices(p: Any, rank: int) -> List[Tuple[int, int]]:
    """(mesh dim size, this rank's index) of the first mesh dim that shards dim 0 (FSDP2's
    dp_shard: it comes before tp in the mesh), or nothing."""
    mesh = _mesh_ranks(p.device_mesh)
    at = np.argwhere(mesh == rank)
    if len(at) == 0:
        return []
    out = []
    for d, pl in enumerate(p.placements):
        shard = getattr(pl, "is_shard", None)
        if callable(shard) and shard(0) and mesh.shape[d] > 1:
            out.append((int(mesh.shape[d]), int(at[0][d])))
            break
    return out


def _shard_index_problem(p: Any, rank: int, train: str, where: str) -> Optional[str]:
    """FSDP2's shard of this rank under the spec ``train`` is (rank // tp) % fsdp: the
    live mesh must put this rank at that index of the mesh dim that shards dim 0 over
    fsdp ranks (its first such dim). Covers the parameters the element check cannot
    (fused or per-expert ones, sharded on a mesh of another order)."""
    from .ranks import fsdp_sizes
    fsdp, tp = fsdp_sizes(train)
    if fsdp <= 1:
        return None
    mesh = _mesh_ranks(p.device_mesh)
    at = np.argwhere(mesh == rank)
    if len(at) == 0:
        return None
    for d, pl in enumerate(p.placements):
        shard = getattr(pl, "is_shard", None)
        if callable(shard) and shard(0) and mesh.shape[d] == fsdp:
            want = (rank // tp) % fsdp
            if int(at[0][d]) != want:
                return ("%s: its mesh puts trainer rank %d at FSDP shard %d; the train spec "
                        "%r gives it shard %d (a mesh in another order than the spec's "
                        "[dp_replicate, dp_shard, tp])" % (where, rank, int(at[0][d]), train,
                                                           want))
            return None
    return None


def _dtensor_problem(layout: Layout, name: str, p: Any, rank: int, world: int,
                     want: Optional[Any], frags: List[Any], where: str,
                     tp: Optional[Tuple[int, int]] = None) -> Optional[str]:
    placements = tuple(p.placements)
    for d, pl in enumerate(placements):
        partial = getattr(pl, "is_partial", None)
        if callable(partial) and partial():
            return ("%s: placement %r on mesh dim %d is Partial: its shards are addends of "
                    "a reduction, which a refit does not do (reduce it, e.g. "
                    "redistribute to Replicate or Shard, before sending)" % (where, pl, d))
        try:
            as_placement(pl)
        except TypeError:
            return ("%s: placement %r on mesh dim %d is not Shard, _StridedShard or "
                    "Replicate" % (where, pl, d))
    mesh = _mesh_ranks(p.device_mesh)
    if mesh.ndim != len(placements):
        return "%s: %d placements on a %d-dim mesh" % (where, len(placements), mesh.ndim)
    flat = mesh.reshape(-1)
    if world and (flat.min() < 0 or flat.max() >= world or len(set(flat.tolist())) != flat.size):
        return ("%s: its mesh holds ranks %s; the refit's training ranks are 0..%d (a mesh "
                "that differs across ranks, or ranks numbered otherwise than the spec: "
                "[dp_replicate, dp_shard, tp] in row-major order)"
                % (where, flat.tolist()[:16], world - 1))
    at = np.argwhere(mesh == rank)
    if len(at) == 0:
        return "%s: its mesh %s does not hold this trainer rank %d" % (where, flat.tolist()[:16],
                                                                        rank)
    coord = getattr(p.device_mesh, "get_coordinate", None)
    here = coord() if callable(coord) else None
    if here is not None and tuple(int(x) for x in at[0]) != tuple(int(x) for x in here):
        return ("%s: this process is at mesh coordinate %s, where the refit's trainer "
                "rank %d is at %s (rank= must be the process's rank in the training mesh)"
                % (where, tuple(int(x) for x in here), rank, tuple(int(x) for x in at[0])))
    local = tuple(p.to_local().shape)
    gshape = tuple(int(x) for x in p.shape)
    # _StridedShard over unequal blocks (an uneven TP split) is FSDP2's chunk of the TP
    # chunk, which the library's strided placement does not describe: such a parameter
    # is checked by its shape and shard index only
    strided = any(hasattr(x, "split_factor") for x in placements)
    live = None if strided else _live_layout(name, gshape, mesh, placements,
                                             p.to_local().dtype)
    if live is not None:
        implied = _local_shapes(live.fragments()).get(rank)
        if implied is not None and local != implied:
            return ("%s: its local shard has shape %s, where placements %s of global shape "
                    "%s imply %s" % (where, local, placements, gshape, implied))
    if want is not None and local != tuple(want.shape):
        return ("%s: placements %s on mesh %s give this rank a shard of shape %s; the "
                "refit's train spec gives it %s (the live sharding differs from the spec)"
                % (where, placements, list(mesh.shape), local, tuple(want.shape)))
    if live is not None and want is not None:
        return _same_elements(layout, name, live, rank, frags, where, tp)
    return None


def _live_layout(name: str, gshape: Tuple[int, ...], mesh: np.ndarray, placements: Tuple,
                 dtype: Any) -> Optional[Layout]:
    """The parameter alone as its placements lay it out (the library's DTensor rules,
    which follow torch.chunk), in buffer 0 of each rank; None where they cannot."""
    if not gshape or 0 in gshape:
        return None
    t = Tensors()
    t.add(name, gshape, dtype)
    try:
        lay = Layout(t)
        lay.add_dtensor(name, mesh, [as_placement(x) for x in placements], buffer=0)
        return lay
    except Exception:  # noqa: BLE001 - the shape checks report instead
        return None


def _tp_piece(live: Layout, view: Tuple[int, ...], rank: int,
              tp: Optional[Tuple[int, int]]) -> Optional[Layout]:
    """A parameter that tensor parallelism split as a plain tensor (transformers'
    "local_colwise"/"local_rowwise", and every TP style of transformers 5): FSDP2 sees
    the TP piece, so the live DTensor's global shape is the piece's. When it differs
    from the logical ``view`` in one dim only, by the extent of tp rank t's torch.chunk
    piece there (get_tensor_shard's rule), the live layout moved to that piece's
    offset: each element's index in the whole tensor. None otherwise."""
    shape = tuple(live.tensors.info(0).shape)
    if tp is None or tp[0] <= 1 or len(shape) != len(view):
        return None
    differ = [d for d in range(len(view)) if shape[d] != view[d]]
    if len(differ) != 1:
        return None
    d, (k, t) = differ[0], tp
    c = -(-view[d] // k)
    a = min(t * c, view[d])
    if shape[d] != min((t + 1) * c, view[d]) - a:
        return None
    moved_t = Tensors()
    moved_t.add("piece", view, live.tensors.info(0).dtype)
    moved = Layout(moved_t)
    for f in live.fragments():
        if f.rank == rank:
            off = list(f.offset)
            off[d] += a
            moved.add_fragment("piece", rank, 0, off, f.extent, f.base, f.strides)
    return moved


def _same_elements(layout: Layout, name: str, live: Layout, rank: int, frags: List[Any],
                   where: str, tp: Optional[Tuple[int, int]] = None) -> Optional[str]:
    """When the layout's buffer holds exactly the logical tensor ``name``: whether each
    element of this rank's local shard is the same global element under the live
    placements as under the spec (every element: both descriptions fill a buffer with
    the pattern of the global index, compared byte for byte). A plain TP piece
    (_tp_piece) is compared at its place in the whole tensor."""
    from ..pattern import fill_pattern
    try:
        tid = layout.tensors.find(name)
    except KeyError:
        return None  # a fused or renamed parameter: the shape checks stand
    if not frags or any(f.tensor != tid for f in frags):
        return None
    info = layout.tensors.info(tid)
    view = tuple(info.view_shape or info.shape)
    live = _tp_piece(live, view, rank, tp) or live
    spec_t = Tensors()
    spec_t.add(name, view, live.tensors.info(0).dtype)
    spec = Layout(spec_t)
    for f in frags:
        spec.add_fragment(name, rank, 0, f.offset, f.extent, f.base, f.strides)
    n = live.buffer_bytes(rank, 0)
    if n != spec.buffer_bytes(rank, 0) or int(np.prod(view)) != int(np.prod(
            live.tensors.info(0).shape)):
        return ("%s: its shard is %d bytes under the live placements, %d under the spec"
                % (where, n, spec.buffer_bytes(rank, 0)))
    a, b = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    fill_pattern(live, rank, [a])
    fill_pattern(spec, rank, [b])
    if not np.array_equal(a, b):
        first = int(np.argmax(a != b))
        return ("%s: its placements put other elements of the parameter on this rank than "
                "the refit's train spec (first at byte %d of its shard): the live sharding "
                "differs from the spec" % (where, first))
    return None


__all__ = ["FSDPModule", "hf_name", "is_dtensor", "WRAPPER_SEGMENTS"]
