"""Caller buffers: torch tensors and numpy arrays seen as (pointer, bytes) without a
copy, bound to a layout's buffer ids by parameter name, checked before anything
moves."""

import numpy as np

from . import _lib
from .dtypes import _NUMPY, DType, to_dtype, torch_dtype
from .errors import Status, error

try:
    import torch
except ImportError:
    torch = None


_FP8 = (DType.fp8_e4m3, DType.fp8_e5m2)


class View:
    """What reshard needs of one caller tensor: address, size, dtype, shape, device
    type ("cpu", "cuda"), contiguity, writability, and the object (kept alive)."""

    __slots__ = ("obj", "ptr", "nbytes", "dtype", "shape", "device", "contiguous", "writable")

    def __init__(self, obj):
        self.obj = obj
        if isinstance(obj, np.ndarray):
            self.ptr = obj.__array_interface__["data"][0]
            self.nbytes = obj.nbytes
            self.dtype = _dtype_or_none(obj.dtype)
            self.shape = tuple(obj.shape)
            self.device = "cpu"
            self.contiguous = obj.flags.c_contiguous
            self.writable = obj.flags.writeable
        elif hasattr(obj, "data_ptr") and hasattr(obj, "device"):
            # torch.Tensor / nn.Parameter, or anything shaped like one
            self.ptr = obj.data_ptr()
            self.nbytes = obj.numel() * obj.element_size()
            self.dtype = _dtype_or_none(obj.dtype)
            self.shape = tuple(obj.shape)
            self.device = getattr(obj.device, "type", str(obj.device))
            self.contiguous = obj.is_contiguous()
            self.writable = True
        else:
            raise TypeError("reshard: a buffer is a torch.Tensor or a numpy.ndarray, not %s"
                            % type(obj).__name__)


class BindingFailed(Exception):
    """Reading a caller object as a buffer raised; the message names the parameter,
    rank and buffer, the original exception is the __cause__."""


def _view(obj, side, rank, b, name):
    try:
        return View(obj)
    except Exception as e:  # noqa: BLE001 - any object may raise anything
        raise BindingFailed("%s rank %d buffer %s%s: %s: %s"
                            % (side, rank, b, " (%r)" % name if name else "",
                               type(e).__name__, e)) from e


def _dtype_or_none(d):
    try:
        return to_dtype(d)
    except TypeError:
        return None


def _dtype_text(v):
    return v.dtype.name if v.dtype is not None else str(v.obj.dtype)


def _device_problem(v, device):
    if v.device == device:
        return None
    need = "CPU memory (torch CPU tensors, numpy arrays)" if device == "cpu" else \
        "CUDA memory (torch CUDA tensors)"
    return "is on %s but this communicator moves %s" % (v.device, need)


def bind(layout, rank, buffers, side, device, writable):
    """Turn ``buffers`` (name -> tensor dict, or a list by buffer id with None for
    unused ids) into the ctypes array of reshard_buffer_t for ``rank`` of ``layout``.

    Returns (array, n, views, problems): problems is a list of (Status, message), each
    message naming the parameter, rank and buffer; when it is not empty the array is
    left empty (Plan.execute then does not execute, see there)."""
    problems = []
    if buffers is None:
        buffers = {}
    params = {p.name: p for p in layout.parameters(rank)}
    slots = {}  # buffer id -> (name or None, View)
    if isinstance(buffers, dict):
        unknown = [name for name in buffers if name not in params]
        hint = _name_hint(unknown, params)
        for name, obj in buffers.items():
            p = params.get(name)
            if p is None:
                problems.append((Status.BUFFER, "%s rank %d: parameter %r is not in the layout"
                                 % (side, rank, name)))
                continue
            slots[p.buffer] = (name, _view(obj, side, rank, p.buffer, name))
        for name, p in params.items():
            if name not in buffers:
                problems.append((Status.BUFFER, "%s rank %d: parameter %r (buffer %d, %s %s) "
                                 "is missing" % (side, rank, name, p.buffer, p.dtype.name,
                                                 list(p.shape))))
        if unknown:  # once, after the problems: what the layout declares, and what to do
            problems.append((Status.BUFFER, "%s rank %d: %s%s" % (side, rank, hint or "the "
                             "layout declares %s" % _names(params), "" if not hint else
                             " (the layout declares %s)" % _names(params))))
    else:
        by_id = {p.buffer: p for p in params.values()}
        count = layout.buffer_count(rank)
        for b, obj in enumerate(buffers):
            if obj is not None and b >= count:  # never read nor written: a mistake
                problems.append((Status.BUFFER, "%s rank %d: buffer %d is given, but the "
                                 "layout has %d buffer(s) for this rank (ids 0..%d)"
                                 % (side, rank, b, count, count - 1)))
            elif obj is not None:
                p = by_id.get(b)
                name = p.name if p else None
                slots[b] = (name, _view(obj, side, rank, b, name))
    for b, (name, v) in sorted(slots.items()):
        what = "%s rank %d buffer %d%s" % (side, rank, b, " (%r)" % name if name else "")
        p = params.get(name) if name else None
        if p is not None and v.dtype == DType.uint8 and p.dtype in _FP8:
            v.dtype = p.dtype  # fp8 bytes in a uint8 tensor (torch < 2.1, numpy: no float8)
        if p is not None and v.dtype != p.dtype:
            problems.append((Status.DTYPE, "%s: dtype %s, the layout declares %s"
                             % (what, _dtype_text(v), p.dtype.name)))
        elif p is not None and v.shape != p.shape:
            problems.append((Status.BUFFER, "%s: shape %s, the layout declares %s%s"
                             % (what, list(v.shape), list(p.shape), _vocab_hint(name, v, p))))
        if not v.contiguous:
            problems.append((Status.BUFFER, "%s: the tensor is not contiguous (call "
                             ".contiguous() on a copy and copy back, or bind the original)"
                             % what))
        dev = _device_problem(v, device)
        if dev:
            problems.append((Status.BUFFER, "%s: %s" % (what, dev)))
        if writable and not v.writable:
            problems.append((Status.BUFFER, "%s: the array is read-only" % what))
    n = max([layout.buffer_count(rank)] + [b + 1 for b in slots])
    arr = (_lib.Buffer * max(n, 1))()
    if not problems:
        for b, (name, v) in slots.items():
            arr[b].ptr = v.ptr
            arr[b].bytes = v.nbytes
            if name is not None:  # the library checks them again against its table
                arr[b].name = name.encode()
            if v.dtype is not None:
                arr[b].flags = _lib.BUFFER_DTYPE
                arr[b].dtype = int(v.dtype)
    views = [v for _, v in slots.values()]
    return arr, n, views, problems


def _names(params):
    names = sorted(params)
    if not names:
        return "no parameter for this rank"
    if len(names) > 6:
        return "%s, ... (%d in all)" % (", ".join(repr(n) for n in names[:6]), len(names))
    return ", ".join(repr(n) for n in names)


# Prefixes that wrappers put before a module's parameter names: DDP and FSDP1
# (``module.``), torch.compile (``_orig_mod.``), a model held as ``model`` of another
# module, and the ones HF and vLLM names carry where Megatron's do not.
_PREFIXES = ("module.", "_orig_mod.", "model.", "module.module.", "_orig_mod.module.",
             "module._orig_mod.", "model.module.")
SHOWN_PROBLEMS = 3  # problems a binding error's message shows; e.problems has every one
PROBLEM_CHARS = 400  # each shown at most this long


def _name_hint(unknown, params):
    """What to do about parameter names the layout does not declare, when they differ
    from declared ones by a known prefix (``module.``, ``_orig_mod.``, ``model.``) or
    are the other framework's names; None otherwise."""
    if not unknown:
        return None
    for pre in sorted(_PREFIXES, key=len, reverse=True):
        stripped = [n for n in unknown if n.startswith(pre) and n[len(pre):] in params]
        if stripped and len(stripped) * 2 >= len(unknown):
            return ("%d of the names carry the prefix %r that the layout's names do not "
                    "(e.g. %r is declared as %r): strip it, e.g. {k.removeprefix(%r): v for "
                    "k, v in named}" % (len(stripped), pre, stripped[0], stripped[0][len(pre):],
                                        pre))
        added = [n for n in unknown if pre + n in params]
        if added and len(added) * 2 >= len(unknown):
            return ("%d of the names lack the prefix %r that the layout's names have (e.g. "
                    "%r is declared as %r): add it" % (len(added), pre, added[0], pre + added[0]))
    local = [n for n in unknown if n.endswith((".input_layernorm.weight",
                                                ".pre_mlp_layernorm.weight"))]
    if local and any(n.endswith(".layer_norm_weight") for n in params):
        return ("%r is a name of Megatron's local layer spec; the layout follows the "
                "Transformer Engine spec, whose fused layers hold the norms: "
                "input_layernorm.weight is linear_qkv.layer_norm_weight and "
                "pre_mlp_layernorm.weight is linear_fc1.layer_norm_weight (rename them)"
                % local[0])
    megatron = any(".self_attention." in n or n.startswith("decoder.") for n in params)
    hf = sum(".self_attn." in n or n.startswith("model.") for n in unknown)
    if megatron and hf * 2 >= len(unknown):
        return ("the names given are Hugging Face / vLLM names (e.g. %r) but this side of the "
                "refit takes Megatron's named_parameters() names" % unknown[0])
    if not megatron and any(".self_attention." in n or n.startswith("decoder.")
                            for n in unknown):
        return ("the names given are Megatron's (e.g. %r) but this side of the refit takes "
                "vLLM's named_parameters() names" % [n for n in unknown
                                                     if ".self_attention." in n or
                                                     n.startswith("decoder.")][0])
    return None


def problems_message(problems):
    """The message of a binding error: their count; when some names were not in the
    layout, what to do and what the layout declares (the last problem) first; then
    the first SHOWN_PROBLEMS problems."""
    # each problem at most PROBLEM_CHARS (a name can be any length)
    texts = [m if len(m) <= PROBLEM_CHARS else m[:PROBLEM_CHARS - 3] + "..."
             for _, m in problems]
    if len(texts) == 1:
        msg = texts[0]
    else:
        hint = [texts[-1]] if " declares " in texts[-1] else []  # names: what to do, first
        shown = hint + [t for t in texts[:SHOWN_PROBLEMS] if t not in hint]
        msg = "%d problems: %s" % (len(texts), "; ".join(shown))
        if len(shown) < len(texts):
            msg += "; and %d more (the exception's .problems lists every one)" % (
                len(texts) - len(shown))
    return msg


def _vocab_hint(name, v, p):
    """For a vocabulary-parallel Megatron tensor given fewer rows than the layout pads
    to: the convention that does not pad."""
    if not name.endswith(("word_embeddings.weight", "output_layer.weight")) or \
            len(v.shape) != 2 or v.shape[1:] != tuple(p.shape[1:]) or v.shape[0] >= p.shape[0]:
        return ""
    return (" (the layout pads the vocabulary as Megatron-LM does, to a multiple of 128*tp; "
            "an unpadded one is Megatron-Bridge's, NeMo RL's: plan with "
            "convention='megatron-bridge')")


def raise_problems(problems, c_message=None):
    """Raise ReshardError with the first problem's status and problems_message;
    ``e.problems`` holds every (Status, message)."""
    msg = problems_message(problems)
    if c_message:
        msg += " (telling the peers failed too: %s)" % c_message
    e = error(problems[0][0], msg)
    e.problems = list(problems)
    raise e


def allocate(param, library="torch", fill=None, device=None):
    """A new contiguous tensor for Parameter ``param``: torch (on ``device``) or numpy,
    every byte ``fill`` when given."""
    if library == "numpy":
        a = np.empty(param.bytes, dtype=np.uint8)
        if fill is not None:
            a.fill(fill)
        if param.dtype in _FP8:  # numpy has no float8: the bytes
            return a.reshape(param.shape)
        for nd, d in _NUMPY.items():
            if d == param.dtype:
                return a.view(nd).reshape(param.shape)
        raise TypeError("reshard: numpy has no dtype for %s (parameter %r); use torch"
                        % (param.dtype.name, param.name))
    if torch is None:
        raise ImportError("reshard: torch is not installed")
    td = torch_dtype(param.dtype)
    if td is None and param.dtype in _FP8:
        td = torch.uint8  # torch < 2.1 has no float8: the bytes in a uint8 tensor
    if td is None:
        raise TypeError("reshard: this torch has no dtype for %s (parameter %r)"
                        % (param.dtype.name, param.name))
    t = torch.empty(param.bytes, dtype=torch.uint8, device=device)
    if fill is not None:
        t.fill_(fill)
    return t.view(td).view(param.shape)


def as_list(layout, rank, buffers, device="cpu"):
    """The ctypes buffer array for pattern helpers (no device check beyond memory kind)."""
    arr, n, views, problems = bind(layout, rank, buffers, "buffers", device, False)
    if problems:
        raise_problems(problems)
    return arr, n, views

