"""Hugging Face tensors into the shards a training or inference rank holds, and back.

Nothing here knows a framework rule: a refit's layouts already say, fragment by
fragment, which box of which logical tensor (HF name, HF shape) lies where in which
parameter of which rank. shards_from_hf copies those boxes out of full HF tensors
into new tensors named and shaped as the framework's named_parameters();
hf_from_shards reads them back out as HF slices. Elements move as their bits, so
every dtype (bf16, fp8 bytes, fp32) round-trips exactly.

What the layouts do not say, and this module adds:
  - the values of elements no fragment covers: vocabulary padding rows and
    zero-filled buffers. vLLM zeroes its padding rows (vocab_parallel_embedding.py)
    and the zero-filled buffers; Megatron-LM's HF converter fills the padding rows
    with copies of the last vocabulary row (tools/checkpoint saver, pad_weight:
    "Expanding embedding to larger size by replicating final entry");
    Megatron-Bridge does not pad.
  - HF checkpoints store routed experts one tensor per expert
    ("...mlp.experts.E.gate_proj.weight"); the catalogue stacks them
    ("...mlp.experts.gate_proj.weight" [E, ...], expert e = row e: reshard_model.h).
    Either form is accepted.
"""

import json
import os
import re
import struct
from collections import namedtuple
from collections.abc import Mapping
from typing import Dict, Iterable, List, Tuple, Union

import numpy as np

from .dtypes import DType, to_dtype, torch_dtype
from .errors import Status, error

try:
    import torch
except ImportError:  # numpy alone works
    torch = None

HFSlice = namedtuple("HFSlice", "offset extent array")
HFSlice.__doc__ = """Elements [offset, offset + extent) (per dimension, in the HF
tensor's shape) of one logical tensor, and their values (shape ``extent``)."""

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_SIGNED = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}  # torch has no uint16..64
_NUMPY_OF = {DType.fp16: np.float16, DType.fp32: np.float32, DType.fp64: np.float64,
             DType.int8: np.int8, DType.uint8: np.uint8, DType.int32: np.int32,
             DType.int64: np.int64}
# numpy has no bfloat16 or float8: their bits, as uint16 / uint8 arrays
_NUMPY_BITS_FOR = {DType.bf16: np.uint16, DType.fp8_e4m3: np.uint8, DType.fp8_e5m2: np.uint8}

_STACKED = re.compile(r"^(.*\.experts)\.([^.0-9][^.]*\..*)$")


# --- the public calls ---------------------------------------------------------------------

def shards_from_hf(refit, side: str, rank: int, hf: Mapping, library: str = "torch"):
    """{parameter name: tensor} of ``rank`` on ``side`` ("train": Megatron, "infer":
    vLLM) of ``refit`` (Model.refit), exactly as that framework's rank holds them
    (names, shapes, dtypes, fused order, padding rows as the framework fills them,
    zero-filled buffers zero), built from the full HF tensors in ``hf`` (any Mapping
    from HF names to torch tensors or numpy arrays: a state_dict, open_safetensors(...)).
    ``rank`` is the layout's rank (Layout.parameters' rank: inference ranks count from
    refit.infer_offset). Routed experts may be given stacked (the catalogue's
    "...experts.gate_proj.weight" [E, ...]) or one tensor per expert as HF stores them
    ("...experts.E.gate_proj.weight"). Each HF tensor the rank needs is read once, only
    the experts it holds; names it does not need are not read. ``library``: "torch" or
    "numpy" (bf16 and fp8 as their bits: uint16 / uint8 arrays).
    Raises ReshardError naming the tensor: INVALID_ARG (missing), SHAPE, DTYPE;
    UNSUPPORTED for a destination that holds a quantized form (infer_dtype="fp8")."""
    if library not in ("torch", "numpy"):
        raise ValueError("reshard: library is 'torch' or 'numpy', not %r" % (library,))
    _, params, frags = _rank_side(refit, side, rank)
    tensors = refit.tensors
    bufs = {p.buffer: np.zeros(p.bytes // p.dtype.itemsize, _UNSIGNED[p.dtype.itemsize])
            for p in params}
    by_tensor: Dict[int, list] = {}
    last_rows: Dict[int, np.ndarray] = {}  # a tensor's last row, for Megatron-LM's padding
    for f in frags:
        by_tensor.setdefault(f.tensor, []).append(f)
    for tid, fs in by_tensor.items():  # one logical tensor at a time: read once, then dropped
        info = tensors.info(tid)
        if side == "infer" and tensors.quant(tid) is not None:
            raise error(Status.UNSUPPORTED, "%s: the inference side holds it quantized "
                        "(infer_dtype); shards_from_hf copies HF values, it does not "
                        "quantize" % info.name)
        lo = min(f.offset[0] for f in fs)
        hi = max(f.offset[0] + f.extent[0] for f in fs)
        src = _read_rows(hf, info, lo, hi)  # view-shaped, rows [lo, hi) of view dim 0
        for f in fs:
            box = (slice(f.offset[0] - lo, f.offset[0] - lo + f.extent[0]),) + \
                tuple(slice(o, o + e) for o, e in zip(f.offset[1:], f.extent[1:]))
            _strided(bufs[f.buffer], f)[...] = src[box]
        if side == "train" and len(info.shape) == 2 and hi == info.shape[0]:
            last_rows[tid] = src[-1].copy()
        del src
    if side == "train" and refit.convention == "megatron-lm":
        _megatron_padding(tensors, params, frags, bufs, hf, last_rows)
    return {p.name: _output(bufs[p.buffer].reshape(p.shape), p.dtype, library) for p in params}


def hf_from_shards(refit, side: str, rank: int, shards: Mapping,
                   split_experts: bool = False) -> Dict[str, List[HFSlice]]:
    """The HF slices ``rank`` of ``side`` holds, read from its parameters ``shards``
    ({parameter name: tensor}, e.g. dict(module.named_parameters()) or
    shards_from_hf's result): {logical tensor name: [HFSlice(offset, extent, array)]},
    offsets and extents in the HF shape (stacked experts: dimension 0 is the expert;
    ``split_experts``: one entry per expert under HF's own name,
    "...experts.E.gate_proj.weight"), arrays of the shards' library (torch or numpy)
    holding those elements. A box held
    twice (replicas: EPLB's redundant slots) is given once. Padding rows and
    zero-filled buffers belong to no tensor and are not read. Raises ReshardError
    naming the parameter: INVALID_ARG (missing), SHAPE, DTYPE."""
    _, params, frags = _rank_side(refit, side, rank)
    bits, library = {}, "numpy"
    for p in params:
        if p.name not in shards:
            raise error(Status.INVALID_ARG, "%s rank %d: parameter %r (%s %s) is missing"
                        % (side, rank, p.name, p.dtype.name, list(p.shape)))
        x = shards[p.name]
        if not isinstance(x, np.ndarray):
            library = "torch"
        bits[p.buffer] = _bits(x, p.name, p.dtype, p.shape, "parameter").reshape(-1)
    out: Dict[str, List[HFSlice]] = {}
    seen = set()
    for f in frags:
        info = refit.tensors.info(f.tensor)
        key = (f.tensor, f.offset, f.extent)
        if key in seen:
            continue
        seen.add(key)
        block = _strided(bits[f.buffer], f).copy()
        m = _STACKED.match(info.name) if split_experts else None
        for off, ext, arr in hf_boxes(info.shape, info.view_shape or info.shape,
                                      f.offset, f.extent, block):
            if m is None:
                out.setdefault(info.name, []).append(
                    HFSlice(off, ext, _output(np.ascontiguousarray(arr), info.dtype, library)))
                continue
            for i in range(ext[0]):
                out.setdefault("%s.%d.%s" % (m.group(1), off[0] + i, m.group(2)), []).append(
                    HFSlice(off[1:], ext[1:], _output(np.ascontiguousarray(arr[i]), info.dtype,
                                                      library)))
    return out


def open_safetensors(paths: Union[str, Iterable[str]], library: str = "torch"):
    """A read-only Mapping over the tensors of one or more ``*.safetensors`` files (a
    file, a directory holding them, or a list of files), read lazily from a memory map
    without the safetensors package: a tensor's bytes are read when its elements are.
    Values are torch tensors (bf16 as torch.bfloat16) or, with library="numpy", numpy
    arrays (bf16 as its uint16 bits). Raises ReshardError (IO) for a malformed file."""
    return SafetensorsFiles(paths, library)


class SafetensorsFiles(Mapping):
    """See open_safetensors."""

    _DTYPES = {"BF16": (np.uint16, DType.bf16), "F16": (np.float16, DType.fp16),
               "F32": (np.float32, DType.fp32), "F64": (np.float64, DType.fp64),
               "I8": (np.int8, DType.int8), "U8": (np.uint8, DType.uint8),
               "I32": (np.int32, DType.int32), "I64": (np.int64, DType.int64),
               "F8_E4M3": (np.uint8, DType.fp8_e4m3), "F8_E5M2": (np.uint8, DType.fp8_e5m2)}

    def __init__(self, paths, library="torch"):
        if isinstance(paths, (str, os.PathLike)):
            p = os.fspath(paths)
            paths = sorted(os.path.join(p, n) for n in os.listdir(p)
                           if n.endswith(".safetensors")) if os.path.isdir(p) else [p]
        self.library = library
        self._where: Dict[str, Tuple[str, int, str, Tuple[int, ...], int, int]] = {}
        for path in paths:
            self._index(os.fspath(path))

    def _index(self, path):
        try:
            with open(path, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            size = os.path.getsize(path)
        except (OSError, ValueError, struct.error) as e:
            raise error(Status.IO, "%s: not a safetensors file (%s)" % (path, e)) from e
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            if meta["dtype"] not in self._DTYPES:
                raise error(Status.IO, "%s: tensor %r has dtype %s, which reshard does not "
                            "read" % (path, name, meta["dtype"]))
            a, b = meta["data_offsets"]
            if not 0 <= a <= b <= size - 8 - n:
                raise error(Status.IO, "%s: tensor %r lies outside the file" % (path, name))
            self._where[name] = (path, 8 + n + a, meta["dtype"], tuple(meta["shape"]), a, b)

    def __getitem__(self, name):
        path, start, dt, shape, a, b = self._where[name]
        npd = self._DTYPES[dt][0]
        count = int(np.prod(shape, dtype=np.int64))
        if count * np.dtype(npd).itemsize != b - a:
            raise error(Status.IO, "%s: tensor %r: %d bytes for shape %s %s"
                        % (path, name, b - a, list(shape), dt))
        arr = np.memmap(path, dtype=npd, mode="c", offset=start, shape=(count,)) if count \
            else np.zeros(0, npd)
        arr = arr.reshape(shape)
        if self.library == "numpy":
            return arr
        return _output(arr.view(_UNSIGNED[arr.itemsize]), self._DTYPES[dt][1], "torch")

    def dtype(self, name) -> DType:
        """The reshard DType of tensor ``name`` as the file declares it."""
        return self._DTYPES[self._where[name][2]][1]

    def __contains__(self, name):
        return name in self._where

    def __iter__(self):
        return iter(self._where)

    def __len__(self):
        return len(self._where)


# --- helpers ------------------------------------------------------------------------------

def _rank_side(refit, side, rank):
    """(layout, parameters, this rank's fragments) of ``side``, checked."""
    if side not in ("train", "infer"):
        raise ValueError("reshard: side is 'train' or 'infer', not %r" % (side,))
    layout = refit.train if side == "train" else refit.infer
    params = layout.parameters(rank)  # RANK for another rank than a scoped refit's
    if not params:
        raise error(Status.RANK, "%s rank %d holds no parameters in this refit (%s ranks: %s)"
                    % (side, rank, side, _span(layout.ranks())))
    frags = [f for f in layout.fragments() if f.rank == rank]
    return layout, params, frags


def _span(ranks):
    return "%d..%d" % (ranks[0], ranks[-1]) if ranks else "none"


def _bits(x, name, dtype: DType, shape, what="HF tensor") -> np.ndarray:
    """The elements of ``x`` (torch tensor or numpy array) as an unsigned numpy array of
    the same item size, after checking its dtype and shape against ``dtype`` /
    ``shape``; no copy for contiguous CPU memory."""
    if isinstance(x, np.ndarray):
        ok = x.dtype == np.dtype(_NUMPY_BITS_FOR.get(dtype, object)) or \
            _dtype_or_none(x.dtype) == dtype
        got = str(x.dtype)
    elif torch is not None and isinstance(x, torch.Tensor):
        ok = _dtype_or_none(x.dtype) == dtype or (dtype in _NUMPY_BITS_FOR and
                                                   x.dtype == torch.uint8 and
                                                   dtype.itemsize == 1)
        got = str(x.dtype).replace("torch.", "")
    else:
        raise error(Status.INVALID_ARG, "%s %r is a %s, not a torch tensor or numpy array"
                    % (what, name, type(x).__name__))
    if not ok:
        raise error(Status.DTYPE, "%s %r has dtype %s, reshard expects %s"
                    % (what, name, got, dtype.name))
    if tuple(x.shape) != tuple(shape):
        raise error(Status.SHAPE, "%s %r has shape %s, reshard expects %s"
                    % (what, name, list(x.shape), list(shape)))
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x).view(_UNSIGNED[x.itemsize])
    t = x.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    n = t.element_size()
    if n > 1:
        t = t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[n])
    elif t.dtype != torch.uint8:
        t = t.view(torch.uint8)
    return t.numpy().view(_UNSIGNED[n])


def _dtype_or_none(d):
    try:
        return to_dtype(d)
    except TypeError:
        return None


def _output(bits: np.ndarray, dtype: DType, library: str):
    """Unsigned element bits as a tensor of ``dtype`` in ``library``."""
    if library == "numpy":
        np_dt = _NUMPY_OF.get(dtype)
        return bits.view(np_dt) if np_dt is not None else bits
    if torch is None:
        raise ImportError("reshard: torch is not installed (use library='numpy')")
    t = torch.from_numpy(bits.view(_SIGNED[bits.itemsize]))
    td = torch_dtype(dtype) or torch.uint8  # fp8 before torch 2.1: the bytes
    return t if t.dtype == td else t.view(td)


def _lookup(hf: Mapping, name: str):
    """hf[name], or None when it has no such name: one access (a Mapping's ``in`` may
    read the tensor as well)."""
    try:
        return hf[name]
    except KeyError:
        return None


def _read_rows(hf: Mapping, info, lo: int, hi: int) -> np.ndarray:
    """Rows [lo, hi) of dimension 0 of logical tensor ``info``'s view shape, as unsigned
    bits, from the HF mapping: the tensor by its name, or stacked from one HF tensor
    per expert (only experts lo..hi-1 are read)."""
    view = info.view_shape or info.shape
    x = _lookup(hf, info.name)
    if x is not None:
        return _bits(x, info.name, info.dtype, info.shape).reshape(view)[lo:hi]
    m = _STACKED.match(info.name)
    if m is None:
        raise error(Status.INVALID_ARG, "HF tensor %r is missing (%s %s)"
                    % (info.name, info.dtype.name, list(info.shape)))
    per_expert = "%s.%%d.%s" % (m.group(1), m.group(2))
    rows = []
    for e in range(lo, hi):
        name = per_expert % e
        x = _lookup(hf, name)
        if x is None:
            raise error(Status.INVALID_ARG, "HF tensor %r is missing (%s %s), and so is %r "
                        "(expert %d of it as HF stores it)"
                        % (info.name, info.dtype.name, list(info.shape), name, e))
        rows.append(_bits(x, name, info.dtype, info.shape[1:]))
    return np.stack(rows).reshape((hi - lo,) + tuple(view[1:]))


def _strided(flat: np.ndarray, f) -> np.ndarray:
    """Fragment ``f``'s elements in buffer ``flat`` (1-D), as an array of its extent."""
    isz = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[f.base:], shape=f.extent,
                                           strides=[s * isz for s in f.strides])


def _megatron_padding(tensors, params, frags, bufs, hf, last_rows):
    """Megatron-LM's padding rows: rows of a parameter no fragment covers, in a buffer
    holding rows of one logical tensor of the same row shape, get that tensor's last
    row (the converter's rule; vocabulary padding is the one case the layouts have)."""
    in_buffer: Dict[int, set] = {}
    for f in frags:
        in_buffer.setdefault(f.buffer, set()).add(f.tensor)
    for p in params:
        tids = in_buffer.get(p.buffer, set())
        if len(tids) != 1:
            continue
        info = tensors.info(next(iter(tids)))
        if len(p.shape) < 2 or tuple(info.shape[1:]) != tuple(p.shape[1:]):
            continue
        covered = np.zeros(bufs[p.buffer].size, dtype=bool)
        for f in frags:
            if f.buffer == p.buffer:
                _strided(covered, f)[...] = True
        rows = covered.reshape(p.shape[0], -1)
        empty = ~rows.any(axis=1)
        if not empty.any() or not rows[~empty].all():
            continue
        if tuple(info.view_shape or info.shape) != tuple(info.shape):
            continue
        last = last_rows.get(info.id)
        if last is None:
            last = _read_rows(hf, info, info.shape[0] - 1, info.shape[0])
        bufs[p.buffer].reshape(p.shape[0], -1)[empty] = last.reshape(1, -1)


def hf_boxes(shape, view, offset, extent, block):
    """A view-shape box (``offset``, ``extent``) of a tensor of HF ``shape`` and view
    shape ``view``, with its elements ``block`` (shape ``extent``), as HF boxes:
    [(hf offset, hf extent, elements)]. One box unless the view box is not a box of
    the HF shape (then one per run of contiguous HF indices). ``block`` None: the
    boxes alone (elements None)."""
    groups, v = [], 0  # per HF dim, the view dims it splits into
    for s in shape:
        g, p = [], 1
        while p < s or not g:
            g.append(v)
            p *= view[v]
            v += 1
        groups.append(g)
    outer_dims, reshaped, runs = [], [], []  # runs: per HF dim (start base, length)
    for g in groups:
        # the innermost dims that are full merge into one run with the first partial one
        j = len(g) - 1
        while j > 0 and extent[g[j]] == view[g[j]]:
            j -= 1
        inner = int(np.prod([view[d] for d in g[j + 1:]], dtype=np.int64))
        strides = [int(np.prod([view[d] for d in g[i + 1:]], dtype=np.int64))
                   for i in range(len(g))]
        outer_dims.append([(offset[d], extent[d], strides[i]) for i, d in enumerate(g[:j])])
        reshaped += [extent[d] for d in g[:j]] + [extent[g[j]] * inner]
        runs.append((offset[g[j]] * strides[j], extent[g[j]] * inner))
    arr = block.reshape(reshaped) if block is not None else None
    out = []
    for idx in np.ndindex(*[e for od in outer_dims for (_, e, _) in od]):
        it, sel, off, ext = iter(idx), [], [], []
        for od, (start, length) in zip(outer_dims, runs):
            base = 0
            for (o, _, st) in od:
                i = next(it)
                sel.append(i)
                base += (o + i) * st
            sel.append(slice(None))
            off.append(base + start)
            ext.append(length)
        out.append((tuple(off), tuple(ext), arr[tuple(sel)] if arr is not None else None))
    return out
