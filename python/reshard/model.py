"""Shipped models and the Megatron / vLLM conventions (reshard_model.h): a model and
two parallel specs give the logical tensors and both layouts, with every rank's
parameters named as its framework names them."""

import ctypes

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
        _lib.check(_lib.lib.reshard_model_load(str(name_or_path).encode(), ctypes.byref(opts),
                                               ctypes.byref(h)))
        self._h = h.value
        self.name = str(name_or_path)
        self.infer_quant = quant if quant != Quant.none else None

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
             redundant=None, eplb_map=None, hosts=None, devices=None, colocated=False):
        """The common path in one call: this rank's plan of the refit from ``train`` to
        ``infer`` over ``comm`` (any reshard.Comm: its rank and size are the rank's
        and the world's). It builds the rank's scoped refit (Model.refit(...,
        rank=comm.rank, domain_size=...)) and its own Plan with the same domain size,
        checks the refit's world against the comm's size, and when anything of that
        fails, tells every peer through the comm (plan_fail: their execute, or their
        Model.plan, fails at once naming this rank) before raising. Every rank of the
        comm calls it, then plan.execute(src=..., dst=...) every step. The Plan's
        ``refit`` is the scoped refit (role(), parameters(rank)); ``engines``, ``vllm``,
        ``convention``, ``redundant`` and ``eplb_map`` are Model.refit's (a new EPLB map:
        call plan again, every rank with the same map), the other arguments Plan's. Raises ReshardError (this rank's error, or the one of a peer whose
        planning failed)."""
        comm_open(comm)
        rank, size = comm.rank, comm.size
        try:
            refit = self.refit(train, infer, infer_offset=infer_offset, rank=rank,
                               domain_size=domain_size or 0, engines=engines, vllm=vllm,
                               convention=convention, redundant=redundant, eplb_map=eplb_map)
        except ReshardError as e:
            plan_fail(comm, e.status, timeout_s)
            raise
        if refit.world != size:
            e = error(Status.INVALID_ARG, "rank %d: the refit %s -> %s needs %d ranks, the "
                      "comm has %d" % (rank, train, infer, refit.world, size))
            plan_fail(comm, e.status, timeout_s)
            raise e
        return refit.plan(comm, staging_mb=staging_mb, relay_mb=relay_mb, timeout_s=timeout_s,
                          domain_size=domain_size, hosts=hosts, devices=devices,
                          colocated=colocated)


def _eplb_entries(eplb_map):
    """An EPLB map (flat or per-layer rows: lists, numpy or torch arrays) as a C int32
    array, or None."""
    if eplb_map is None:
        return None
    if hasattr(eplb_map, "tolist"):
        eplb_map = eplb_map.tolist()
    flat = []
    for x in eplb_map:
        if hasattr(x, "tolist"):
            x = x.tolist()
        flat.extend(x if isinstance(x, (list, tuple)) else [x])
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
             hosts=None, devices=None, colocated=False):
        """This rank's Plan of the refit over ``comm``: rank comm.rank of comm.size
        (which must be the refit's world); a scoped refit takes the domain size it was
        built with. A failure is told to the peers through the comm before it is raised
        (Plan(comm=)). The plan's ``refit`` is this refit and its ``comm`` the comm, so
        plan.execute(src=..., dst=...) needs no comm. ``hosts``, ``devices`` and
        ``colocated`` are Plan's (one-sided reads between ranks of one host)."""
        comm_open(comm)
        if domain_size is None and self.domain_size:
            domain_size = self.domain_size
        plan = Plan(self.train, self.infer, rank=comm.rank, world=comm.size,
                    domain_size=domain_size, staging_mb=staging_mb, relay_mb=relay_mb,
                    timeout_s=timeout_s, comm=comm, hosts=hosts, devices=devices,
                    colocated=colocated)
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
