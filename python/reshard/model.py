"""Shipped models and the Megatron / vLLM conventions (reshard_model.h): a model and
two parallel specs give the logical tensors and both layouts, with every rank's
parameters named as its framework names them."""

import ctypes
import numbers

import numpy as np

from . import _lib
from .dtypes import to_dtype
from .errors import ReshardError, Status, error
from .layout import Layout
from .plan import Plan, comm_open, plan_fail
from .tensors import Quant, Tensors, to_quant


class Model(_lib.Handle):
    """A model config: a shipped name ("qwen3-0.6b", "qwen3-30b-a3b", "deepseek-v3", ...)
    or a path to a HF config.json. ``layers`` > 0 keeps the first K decoder layers;
    ``mtp`` adds the multi-token-prediction layers; ``dtype`` "bf16" or "fp8_e4m3"
    (e4m3 weights with 128x128 fp32 block scales on both sides). ``infer_dtype`` "bf16"
    (default: as the training side), "fp8" or "mxfp8": the training side holds bf16 and
    the inference side the FP8 form of the linear weights (e4m3 bytes, bound as uint8
    tensors where torch has no float8, plus "..._scale_inv" tensors: fp32 per 128x128
    block, or uint8 e8m0 per 1x32 block), quantized during the refit; embedding, output
    layer, norms and router stay bf16, as in vLLM's FP8 checkpoints. ``pow2_scale``:
    fp8 scales rounded up to powers of two (UE8M0). Raises ReshardError (IO, CONFIG)."""

    def __init__(self, name_or_path, layers=0, mtp=False, dtype="bf16", infer_dtype="bf16",
                 pow2_scale=False):
        quant = to_quant(infer_dtype)
        opts = _lib.ModelOptions(int(bool(mtp)), int(to_dtype(dtype)), int(layers), int(quant),
                                 int(bool(pow2_scale)))
        h = _lib.c_vp()
        try:
            _lib.check(_lib.lib.reshard_model_load(str(name_or_path).encode(),
                                                   ctypes.byref(opts), ctypes.byref(h)))
        except ReshardError as e:
            raise _did_you_mean(e, str(name_or_path)) from None
        self._h = h.value
        self.name = str(name_or_path)
        self.infer_quant = quant if quant != Quant.none else None
        # what Model.plan agrees on across ranks
        self.options = "layers=%d mtp=%d dtype=%s infer_dtype=%s pow2_scale=%d" % (
            int(layers), int(bool(mtp)), to_dtype(dtype).name, quant.name,
            int(bool(pow2_scale)))

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.lib.reshard_model_destroy(self._h)
            self._h = None

    def refit(self, train, infer, infer_offset=None, rank=None, domain_size=0, engines=None,
              vllm=None, convention=None, redundant=None, eplb_map=None):
        """The refit of this model from Megatron ``train`` ("tp=2,pp=2,ep=2") on ranks
        [0, train_world) to vLLM ``infer`` ("tp=4" or "tp=2,dp=2,ep=on") on ranks
        [infer_offset, infer_offset + infer_world) (default: right after training).
        ``engines``: independent vLLM engines, each the whole model on tp*dp ranks (the
        spec's "engines=N"; RL frameworks' inference data parallelism), as opposed to
        vLLM's own dp, whose MoE layers span tp*dp. ``vllm``: the engine version whose
        parameter names the layout uses, "0.24" or "0.25" (the default; spec
        "vllm="). ``convention``: the training framework, "megatron-lm" (the default)
        or "megatron-bridge" (no vocabulary padding; spec "convention="). ``redundant``:
        vLLM EPLB's num_redundant_experts (spec "redundant="; needs ep=on). ``eplb_map``:
        EPLB's current physical_to_logical map (vLLM's
        ``EplbState.physical_to_logical_map``), a sequence of E + redundant logical
        expert ids (one map for every MoE layer) or one such row per MoE layer (a
        nested list, a numpy or torch array of shape [moe_layers, E + redundant]): EP rank
        r of an engine holds slots [r*P/(tp*dp), (r+1)*P/(tp*dp)) of P = E + redundant
        as its w13/w2 rows, slot p holding logical expert map[p]; each logical expert is
        written into every slot holding it. None: vLLM's initial map when
        redundant > 0. When the balancer moves experts, build a new refit (and Plan)
        with the new map: with ``rank``, that rank's own cheap replan. A wrong length,
        an id out of range or an expert with no slot raises CONFIG naming it. Each keyword
        is the same as its spec key (giving both is an error). Megatron's
        ``...mlp.router.expert_bias`` is a module buffer: bind the trainer's
        ``{**dict(m.named_parameters()), **dict(m.named_buffers())}``
        (Refit.module_buffers names them).
        With ``rank``: only that rank's part, for its own Plan (rank=rank, the same
        ``domain_size``): every rank's fragments of the tensors the rank sends or its
        NVLink domain receives, and its own parameters only
        (reshard_model_refit_create_scoped); its cost grows with what the rank touches,
        not with the world, and a Plan for another rank, another domain size or
        ALL_RANKS refuses it. Raises ReshardError (INVALID_ARG for a malformed spec,
        CONFIG for a rule the model breaks, with the rule; RANK for a rank outside the
        refit)."""
        train, infer = str(train), str(infer)
        if convention is not None:
            train += ",convention=%s" % (convention,)
        if engines is not None:
            infer += ",engines=%d" % (_int32(engines, "engines"),)
        if vllm is not None:
            infer += ",vllm=%s" % (vllm,)
        if redundant is not None:
            infer += ",redundant=%d" % (_int32(redundant, "redundant"),)
        return Refit(self, train, infer, infer_offset, rank, domain_size, eplb_map=eplb_map)

    def plan(self, comm, train, infer, infer_offset=None, domain_size=None, staging_mb=None,
             relay_mb=None, timeout_s=None, engines=None, vllm=None, convention=None,
             redundant=None, eplb_map=None, hosts=None, devices=None, colocated=False,
             delta=False, verify=None, coords=None, name=None):
        """The common path in one call: this rank's plan of the refit from ``train`` to
        ``infer`` over ``comm`` (any reshard.Comm: its rank and size are the rank's
        and the world's). Every rank of the comm calls it, then plan.execute(src=...,
        dst=...) every step.

        Before anything is built, the ranks agree on their inputs
        (reshard_comm_agree_values): the model and its options, both specs (compared
        parsed: "tp=2" equals "pp=1,tp=2"), infer_offset, engines, vllm, convention,
        redundant, the EPLB map, domain_size, staging_mb, relay_mb, timeout_s, the
        placement, delta, verify and name. A difference fails every rank here with MISMATCH
        naming each differing input, its value and the ranks holding each ("infer:
        'tp=2' on ranks 0, 1, 2; 'tp=1,dp=2' on rank 3").

        ``coords``: this rank's own coordinates as its framework numbers them, checked
        against the rank the comm gives it: a training rank's Megatron ranks
        ({"tp": parallel_state.get_tensor_model_parallel_rank(), "pp": ..., "dp": ...,
        "cp": ..., "ep": ..., "etp": ...}, any subset), an inference rank's vLLM ranks
        ({"engine": e, "dp": data_parallel_rank, "tp": tensor-parallel rank}). The
        layout numbers training ranks as Megatron's default order "tp-cp-ep-dp-pp"
        (tp fastest; the expert grid etp, ep, edp over the same ranks) and inference
        ranks engine by engine, dp-major, tp fastest, after the trainers. A rank whose
        coordinates differ fails every rank here with RANK, naming both numberings.
        Without coords nothing can see a rank holding another rank's shards of the
        same shapes: it would deliver that rank's weights (bind the framework's rank
        as comm rank, or pass coords).

        Then it builds the rank's scoped refit (Model.refit(..., rank=comm.rank,
        domain_size=...)) and its own Plan with the same domain size, checks the
        refit's world against the comm's size, and when anything of that fails, tells
        every peer through the comm (plan_fail: their execute, or their Model.plan,
        fails at once naming this rank and its first problem) before raising. The
        Plan's ``refit`` is the scoped refit (role(), parameters(rank)); ``engines``,
        ``vllm``, ``convention``, ``redundant`` and ``eplb_map`` are Model.refit's (a
        new EPLB map: call plan again, every rank with the same map), ``delta`` and
        ``verify`` Plan's (a delta refit over any comm, gloo included: docs/delta.md),
        the other arguments Plan's. Raises ReshardError (MISMATCH, RANK, this rank's
        error, or the one of a peer whose planning failed)."""
        comm_open(comm)
        rank, size = comm.rank, comm.size
        t, i = str(train), str(infer)
        # a bad argument on one rank must fail every rank at once, not leave the others
        # waiting in the agreement: it goes into the agreement, then is raised here
        bad, problem = None, None
        try:
            if convention is not None:
                t += ",convention=%s" % (convention,)
            if engines is not None:
                i += ",engines=%d" % (_int32(engines, "engines"),)
            if vllm is not None:
                i += ",vllm=%s" % (vllm,)
            if redundant is not None:
                i += ",redundant=%d" % (_int32(redundant, "redundant"),)
            if not isinstance(delta, bool):
                raise TypeError("reshard: delta must be True or False, got %r" % (delta,))
            if verify and not delta:
                raise ValueError("reshard: verify=True checks delta refits: set delta=True")
            inputs = [("model", "%s %s" % (self.name, self.options)),
                      ("train", _canonical(t, True)), ("infer", _canonical(i, False)),
                      ("infer_offset", _number(infer_offset, int)),
                      ("eplb_map", _digest(_eplb_entries(eplb_map))),
                      ("domain_size", _number(domain_size or None, int)),
                      ("staging_mb", _number(staging_mb, float)),
                      ("relay_mb", _number(relay_mb, float)),
                      ("timeout_s", _number(timeout_s, float)),
                      ("placement", _digest((hosts, devices, bool(colocated)))),
                      ("delta", repr(delta)),
                      # None is the default: verification on for delta plans
                      ("verify", repr(bool(delta) and verify is not False) if delta
                       else repr(verify)),
                      ("name", repr(name))]
            problem = _coords_problem(rank, t, i, infer_offset, coords)
        except (TypeError, ValueError, ReshardError) as e:
            bad = e
            inputs = [(k, "") for k in ("model", "train", "infer", "infer_offset", "eplb_map",
                                        "domain_size", "staging_mb", "relay_mb", "timeout_s",
                                        "placement", "delta", "verify", "name")]
        try:
            agree_values(comm, [("arguments", "valid" if bad is None else
                                 "%s: %s" % (type(bad).__name__, str(bad)[:100]))] + inputs,
                         timeout_s if bad is None else None)
        except ReshardError as e:
            if bad is not None:
                raise bad from e
            raise
        if bad is not None:  # every rank had a bad argument: each raises its own
            raise bad
        try:
            agree_values(comm, [("rank identity", problem or "as the layout numbers it")],
                         timeout_s)
        except ReshardError as e:
            if e.status != Status.MISMATCH:
                raise
            raise error(Status.RANK, "rank %d: a rank's framework coordinates differ from "
                        "the layout's numbering (nothing was planned): %s" % (
                            rank, e.message.split("(nothing was planned): ", 1)[-1]))
        try:
            refit = self.refit(train, infer, infer_offset=infer_offset, rank=rank,
                               domain_size=domain_size or 0, engines=engines, vllm=vllm,
                               convention=convention, redundant=redundant, eplb_map=eplb_map)
        except ReshardError as e:
            plan_fail(comm, e, timeout_s)
            raise
        if refit.world != size:
            e = error(Status.INVALID_ARG, "rank %d: the refit %s -> %s needs %d ranks, the "
                      "comm has %d" % (rank, train, infer, refit.world, size))
            plan_fail(comm, e, timeout_s)
            raise e
        return refit.plan(comm, staging_mb=staging_mb, relay_mb=relay_mb, timeout_s=timeout_s,
                          domain_size=domain_size, hosts=hosts, devices=devices,
                          colocated=colocated, delta=delta, verify=verify, name=name)


def _did_you_mean(e, name):
    """A shipped-model miss with the closest shipped names added; ``e`` otherwise."""
    import difflib
    import re
    m = re.search(r"no such shipped model \(shipped: ([^)]*)\)", e.message)
    if e.status != Status.IO or not m:
        return e
    close = difflib.get_close_matches(name.lower(), m.group(1).split(", "), n=2, cutoff=0.6)
    if not close:
        return e
    return ReshardError(e.status, e.c_name, "%s; did you mean %s?" % (
        e.message, " or ".join(repr(c) for c in close)), e.context)


def agree_values(comm, items, timeout_s=None):
    """Every rank of ``comm`` gives the same names in ``items`` ((name, value text)
    pairs) and its own values: returns when every rank's are equal, else raises
    ReshardError MISMATCH on every rank naming each differing name, its values and the
    ranks holding them (reshard_comm_agree_values; TIMEOUT when a peer does not come
    within ``timeout_s``, default DEFAULT_TIMEOUT_S)."""
    comm_open(comm)
    keys = (_lib.c_str * max(1, len(items)))(*[str(k).encode() for k, _ in items])
    values = (_lib.c_str * max(1, len(items)))(*[str(v).encode() for _, v in items])
    h = comm._enter()
    try:
        st = _lib.lib.reshard_comm_agree_values(h, len(items), keys, values,
                                                float(timeout_s or 0))
    finally:
        comm._leave()
    _lib.check(st)


def _number(value, kind):
    """A number argument as the text the ranks compare (30 and 30.0 equal); the text
    itself when it is not a number (the argument's own check refuses it later)."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return repr(value)
    try:
        return repr(kind(value))
    except (TypeError, ValueError):
        return repr(value)


def _canonical(spec, train):
    """A spec as the library reads it (every field, defaults filled), so that equal
    specs written differently compare equal; the text itself when it does not parse
    (the ranks then compare what they were given)."""
    s = _lib.TrainSpec() if train else _lib.InferSpec()
    fn = _lib.lib.reshard_train_spec_parse if train else _lib.lib.reshard_infer_spec_parse
    if fn(spec.encode(), ctypes.byref(s)) != 0:
        return spec
    names = ["tp", "pp", "dp", "cp", "ep", "etp", "vpp", "first", "last", "convention"] if train \
        else ["tp", "dp", "ep", "engines", "vllm", "redundant"]
    return ",".join("%s=%d" % (n, getattr(s, n)) for n in names)


def _digest(value):
    """A short stable text for a long input (an EPLB map, a placement)."""
    if value is None:
        return "none"
    import hashlib
    data = bytes(value) if isinstance(value, ctypes.Array) else repr(value).encode()
    return hashlib.sha256(data).hexdigest()[:16]


_TRAIN_COORDS = ("tp", "cp", "dp", "pp", "ep", "etp")
_INFER_COORDS = ("engine", "dp", "tp")


def _coords_problem(rank, train, infer, infer_offset, coords):
    """None when ``coords`` (a rank's framework coordinates) match what the layout's
    numbering gives comm rank ``rank`` (Model.plan), else the problem naming both. A
    rank that is both a training and an inference rank (colocated, infer_offset=0)
    gives {"train": {...}, "infer": {...}} (either or both); a flat dict is its
    training coordinates."""
    if coords is None:
        return None
    if not isinstance(coords, dict):
        raise TypeError("reshard: coords= is a dict of the framework's ranks, e.g. "
                        "{'tp': 1, 'pp': 0}, not %s" % type(coords).__name__)
    ts, ispec = _lib.TrainSpec(), _lib.InferSpec()
    _lib.check(_lib.lib.reshard_train_spec_parse(train.encode(), ctypes.byref(ts)),
               "train spec %r" % train)
    _lib.check(_lib.lib.reshard_infer_spec_parse(infer.encode(), ctypes.byref(ispec)),
               "infer spec %r" % infer)
    train_world = int(_lib.lib.reshard_train_world(ctypes.byref(ts)))
    offset = train_world if infer_offset is None else int(infer_offset)
    tp, dp = max(1, ispec.tp), max(1, ispec.dp)
    infer_world = int(_lib.lib.reshard_infer_world(ctypes.byref(ispec)))
    roles = {}
    if rank < train_world:
        local = rank % (ts.tp * ts.cp * ts.dp)
        roles["train"] = ("Megatron", _TRAIN_COORDS, {
            "tp": rank % ts.tp, "cp": rank // ts.tp % ts.cp,
            "dp": rank // (ts.tp * ts.cp) % ts.dp, "pp": rank // (ts.tp * ts.cp * ts.dp),
            "etp": local % ts.etp, "ep": local // ts.etp % ts.ep})
    if offset <= rank < offset + infer_world:
        r = rank - offset
        if ispec.engine == 1:  # SGLang: a server is tp ranks; dp = the attention DP rank
            roles["infer"] = ("SGLang", _INFER_COORDS, {
                "tp": r % tp, "dp": r % tp // (tp // dp) if ispec.dp_attention else 0,
                "engine": r // tp})
        else:
            roles["infer"] = ("vLLM", _INFER_COORDS,
                              {"tp": r % tp, "dp": r // tp % dp, "engine": r // (tp * dp)})
    nested = bool(coords) and set(coords) <= {"train", "infer"}
    given = coords if nested else {("train" if "train" in roles else "infer"): coords}
    problems = []
    for side, c in given.items():
        if side not in roles:
            raise ValueError("reshard: coords= gives %s coordinates, but rank %d is not an "
                             "%s rank of this refit" % (side, rank, side + "ing" if
                                                          side == "train" else "inference"))
        if not isinstance(c, dict):
            raise TypeError("reshard: coords=[%r] is a dict, not %s" % (side,
                                                                       type(c).__name__))
        framework, known, want = roles[side]
        unknown = sorted(str(k) for k in set(c) - set(known))
        if unknown:
            raise ValueError("reshard: coords= for %s %s rank takes %s, not %s%s" % (
                "a" if side == "train" else "an", "training" if side == "train" else
                "inference", ", ".join(known), ", ".join(unknown),
                "" if nested or len(roles) < 2 else " (rank %d is both: give {'train': "
                "{...}, 'infer': {...}})" % rank))
        for k in known:
            if k in c and (isinstance(c[k], bool) or not isinstance(c[k], numbers.Integral)):
                raise TypeError("reshard: coords[%r] must be an int, got %r" % (k, c[k]))
        if [k for k in known if k in c and int(c[k]) != want[k]]:
            problems.append("rank %d is %s %s; the layout's rank %d is %s" % (
                rank, framework, ", ".join("%s_rank %d" % (k, int(c[k])) for k in known
                                           if k in c), rank,
                ", ".join("%s_rank %d" % (k, want[k]) for k in known if k in c)))
    return "; ".join(problems) or None


def _eplb_entries(eplb_map):
    """An EPLB map (flat, per-layer rows [layers][P], or with several engines per-engine
    maps [engines][layers][P]: nested lists, numpy or torch arrays, or a list of each
    engine's EplbState.physical_to_logical_map) as a C int32 array, row-major, or
    None."""
    if eplb_map is None:
        return None
    try:  # rectangular: a ragged nesting would be read as another engine's or layer's rows
        shape = np.asarray(eplb_map.tolist() if hasattr(eplb_map, "tolist") else eplb_map,
                           dtype=np.int64).shape
    except (ValueError, TypeError) as e:
        raise error(Status.CONFIG, "infer: EPLB map: not a rectangular array of expert ids "
                    "(a flat list, [layers][P] rows, or [engines][layers][P]): %s" % e) from None
    if len(shape) > 3:
        raise error(Status.CONFIG, "infer: EPLB map: %d levels of nesting; at most 3 "
                    "([engines][layers][P])" % len(shape))
    flat = []

    def walk(x):
        if hasattr(x, "tolist"):
            x = x.tolist()
        if isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        else:
            flat.append(x)
    walk(eplb_map)
    return (_lib.c_i32 * len(flat))(*[_int32(v, "eplb_map entry") for v in flat])


def _int32(value, name):
    """``value`` as an int the C side takes (int32_t): ValueError otherwise, never a
    silent wrap."""
    v = int(value)
    if not -2**31 <= v < 2**31:
        raise ValueError("reshard: %s=%d is outside a 32-bit rank number" % (name, v))
    return v


class Refit(_lib.Handle):
    """Everything one refit needs: ``tensors`` (HF names and shapes), ``train`` and
    ``infer`` Layouts (their parameters(rank) are the frameworks' named_parameters()),
    ``train_world``, ``infer_world``, ``infer_offset`` and ``world``; ``engines`` (independent
    inference engines), ``vllm`` (the vLLM version whose names the inference layout uses,
    "0.24" or "0.25") and ``convention`` ("megatron-lm" or "megatron-bridge"); ``rank``: the
    rank a scoped refit was built for (its layouts name only that rank's parameters),
    None for the whole refit."""

    def __init__(self, model, train, infer, infer_offset=None, rank=None, domain_size=0,
                 eplb_map=None):
        ts, ispec = _lib.TrainSpec(), _lib.InferSpec()
        _lib.check(_lib.lib.reshard_train_spec_parse(str(train).encode(), ctypes.byref(ts)),
                   "train spec %r" % train)
        _lib.check(_lib.lib.reshard_infer_spec_parse(str(infer).encode(), ctypes.byref(ispec)),
                   "infer spec %r" % infer)
        entries = _eplb_entries(eplb_map)
        if entries is not None:  # read by the C side during the build only
            ispec.eplb_map = entries
            ispec.eplb_map_len = len(entries)
        self._eplb = entries  # the refit's copy of the spec points at it
        self._r = _lib.ModelRefit()
        off = -1 if infer_offset is None else _int32(infer_offset, "infer_offset")
        if rank is None and domain_size:
            raise ValueError("reshard: domain_size=%r is for a rank's scoped refit: give rank= "
                             "too (the whole refit serves every domain size)" % (domain_size,))
        if rank is None:
            _lib.check(_lib.lib.reshard_model_refit_create_at(model._h, ctypes.byref(ts),
                                                              ctypes.byref(ispec), off,
                                                              ctypes.byref(self._r)))
        else:
            _lib.check(_lib.lib.reshard_model_refit_create_scoped(
                model._h, ctypes.byref(ts), ctypes.byref(ispec), off, _int32(rank, "rank"),
                _int32(domain_size or 0, "domain_size"), ctypes.byref(self._r)))
        self.model = model
        self.rank = None if rank is None else int(rank)
        self.domain_size = int(domain_size or 0)
        self.train_spec, self.infer_spec = str(train), str(infer)
        self.tensors = Tensors(_handle=self._r.tensors, _owner=self)
        self.train = Layout(self.tensors, _handle=self._r.train, _owner=self)
        self.infer = Layout(self.tensors, _handle=self._r.infer, _owner=self)
        self.engines = max(1, self._r.infer_spec.engines)
        self.vllm = _lib.lib.reshard_vllm_version_name(self._r.infer_spec.vllm).decode()
        self.convention = _lib.lib.reshard_train_convention_name(
            self._r.train_spec.convention).decode()
        self.train_world = self._r.train_world
        self.infer_world = self._r.infer_world
        self.infer_offset = self._r.infer_offset
        self.world = self.infer_offset + self.infer_world

    def module_buffers(self, rank):
        """Names of training rank ``rank``'s tensors that its module registers as buffers
        (named_buffers(), not named_parameters()): Megatron's router.expert_bias."""
        out, b = [], _lib.ModelBuffer()
        for i in range(_lib.lib.reshard_model_buffers_count(self._r.train_buffers)):
            _lib.check(_lib.lib.reshard_model_buffers_get(self._r.train_buffers, i,
                                                          ctypes.byref(b)))
            if b.rank == rank and b.module_buffer:
                out.append(b.name.decode())
        return out

    def plan(self, comm, domain_size=None, staging_mb=None, relay_mb=None, timeout_s=None,
             hosts=None, devices=None, colocated=False, delta=False, verify=None, name=None):
        """This rank's Plan of the refit over ``comm``: rank comm.rank of comm.size
        (which must be the refit's world); a scoped refit takes the domain size it was
        built with. A failure is told to the peers through the comm before it is raised
        (Plan(comm=)). The plan's ``refit`` is this refit and its ``comm`` the comm, so
        plan.execute(src=..., dst=...) needs no comm. ``hosts``, ``devices`` and
        ``colocated`` are Plan's (one-sided reads between ranks of one host), and so are
        ``delta`` and ``verify`` (docs/delta.md) and ``name`` (which of this rank's plans
        of equal inputs it is: name plans of one refit made on several threads, or in
        another order per rank)."""
        comm_open(comm)
        if domain_size is None and self.domain_size:
            domain_size = self.domain_size
        plan = Plan(self.train, self.infer, rank=comm.rank, world=comm.size,
                    domain_size=domain_size, staging_mb=staging_mb, relay_mb=relay_mb,
                    timeout_s=timeout_s, comm=comm, hosts=hosts, devices=devices,
                    colocated=colocated, delta=delta, verify=verify, name=name)
        plan.refit = self
        return plan

    def role(self, rank):
        """("train", rank) for a training rank, ("infer", rank - infer_offset) for an
        inference rank, (None, None) for a rank in neither."""
        if 0 <= rank < self.train_world:
            return "train", rank
        if self.infer_offset <= rank < self.world:
            return "infer", rank - self.infer_offset
        return None, None

    def __del__(self):
        if getattr(self, "_r", None) is not None:
            _lib.lib.reshard_model_refit_destroy(ctypes.byref(self._r))
            self._r = None
