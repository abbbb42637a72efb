"""The inference side of a refit inside an engine's worker process, engine-
independent: the lifecycle of vLLM's WeightTransferEngine (init_transfer_engine,
start_weight_update, receive_weights / update_weights, finish_weight_update,
shutdown) over a model's live tensors. The vLLM shell (vllm.py) adds vLLM's base
class; everything it does is here and is tested without vLLM."""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional

from ..errors import ReshardError, Status, error
from ..model import Model
from ..plan import Plan, plan_fail
from . import eplb
from .binding import Bound, apply_post_load, bind_live, live_tensors
from .post_load import Rule, staged_rules
from .ranks import sizes, worker_rank
from .rendezvous import Rendezvous, agree, device_of, open_comm, open_store


@dataclass
class ReshardInitInfo:
    """What a worker needs to join a refit (vLLM's init_info, sent as a dict by the
    trainer's rank 0 through the engine's init_weight_transfer_engine).

    model         shipped model name or HF config.json path (as reshard.Model)
    train, infer  the Megatron and vLLM specs ("tp=2,pp=2,ep=2,etp=1", "tp=4")
    layers        keep the first K decoder layers (0: all)
    engine_index  which independent engine this worker belongs to (infer spec
                  engines=N; 0 for one engine)
    domain_size   ranks per NVLink domain (0: none)
    infer_dtype   "bf16" or "fp8" / "mxfp8" (reshard.Model's infer_dtype)
    store_path / master_address, master_port / rendezvous_name   the store
                  (rendezvous.Rendezvous)
    timeout_s     the bound on every wait: init, each refit
    staging_mb    staging bound per rank (None: the library's default)
    moe_backend   vLLM's unquantized MoE kernel backend in use ("triton", or one of
                  "flashinfer_cutlass", "flashinfer_trtllm": refused, post_load.py)
    transport     "gloo" (CPU tensors, a gloo group on the store) or "nccl" (CUDA
                  tensors, an NCCL communicator bootstrapped through the store, on
                  torch's current stream), or "cuda-ipc" (CUDA tensors, colocated only:
                  reads over CUDA IPC, control over gloo); every tensor must be in that
                  memory
    colocated     trainer and engine share the machines (docs/colocated.md): pieces
                  between ranks of one host are one-sided reads of the sender's
                  tensors (gloo: process_vm_readv, or mapped reshard.alloc_shared
                  memory; cuda-ipc: CUDA IPC); the others cross as messages
    hosts, devices  with colocated, per refit rank (trainer ranks first, then the
                  engines'): host id and GPU index (None: one host; no devices)
    delta         delta refits (docs/delta.md): each refit sends only the words that
                  changed since the version the worker holds (the first refit, and the
                  next one after a failed or invalidated one, whole); gloo or nccl
    delta_checksum  with delta: verification of every refit (on by default): each
                  chunk carries the sender's hash of its new bytes, compared after apply
                  (a weight changed behind reshard's back fails the refit on every rank,
                  naming it; the next one is whole); False is the opt-out
                  (docs/delta-verification.md: what it assumes and saves); gloo and nccl
    eplb          follow the engines' live EPLB maps (vLLM --enable-eplb; infer spec
                  ep=on, redundant=N as the engine's num_redundant_experts): at every
                  refit each engine's first worker publishes the map its engine holds
                  and every rank plans with the maps of that moment (eplb.py); with
                  delta, a rank whose slots moved is sent whole once
    plan_name     the refit plan's name (Plan(name=)), the same on every rank of the
                  refit and distinct per refit a process serves: needed where one
                  thread of a process holds plans of equal inputs at once (a trainer
                  rank serving two engine groups of equal specs from one thread; unnamed,
                  those are refused on every rank); None: unnamed"""

    model: str
    train: str
    infer: str
    layers: int = 0
    engine_index: int = 0
    domain_size: int = 0
    infer_dtype: str = "bf16"
    store_path: Optional[str] = None
    master_address: Optional[str] = None
    master_port: Optional[int] = None
    rendezvous_name: str = "refit"
    timeout_s: float = 60.0
    staging_mb: Optional[float] = None
    moe_backend: str = "triton"
    transport: str = "gloo"
    colocated: bool = False
    hosts: Optional[List[int]] = None
    devices: Optional[List[int]] = None
    delta: bool = False
    delta_checksum: bool = True
    eplb: bool = False
    plan_name: Optional[str] = None

    def record(self) -> Dict[str, Any]:
        """The fields every rank of the refit must have alike (checked at init): every
        field that enters the plan's fingerprint (reshard_plan_params_t), so a rank
        that differs fails init naming it instead of every refit failing MISMATCH."""
        return {"model": self.model, "train": self.train, "infer": self.infer,
                "layers": self.layers, "domain_size": self.domain_size,
                "staging_mb": self.staging_mb, "timeout_s": self.timeout_s,
                "infer_dtype": self.infer_dtype, "transport": self.transport,
                "colocated": bool(self.colocated), "hosts": _int_list(self.hosts),
                "devices": _int_list(self.devices), "delta": self.delta,
                "delta_checksum": self.delta_checksum, "eplb": self.eplb,
                "plan_name": self.plan_name}

    def rendezvous(self) -> Rendezvous:
        return Rendezvous(self.store_path, self.master_address, self.master_port,
                          self.rendezvous_name)


def _int_list(v: Any) -> Any:
    """A hosts/devices field as it travels (a list of ints), so that a tuple, a numpy
    array or numpy integers agree with the list a peer gave; anything else as given
    (build_plan names what is wrong with it)."""
    if v is None or isinstance(v, (str, bytes)):
        return v
    try:
        return [int(x) if isinstance(x, numbers.Integral) else x for x in v]
    except TypeError:
        return v


@dataclass
class ReshardUpdateInfo:
    """One refit round: ``version`` counts refits from 1 (the worker checks it is the
    next one, so a skipped or repeated round is an error)."""

    version: int


def parse(cls: Any, d: Dict[str, Any], who: str) -> Any:
    """``cls(**d)`` or ValueError naming the unknown or missing fields (vLLM's
    parse_init_info / parse_update_info convention)."""
    try:
        return cls(**d)
    except TypeError as e:
        raise ValueError("Invalid %s for %s: %s (fields: %s)"
                         % (cls.__name__, who, e, [f.name for f in fields(cls)])) from e


def build_plan(info: ReshardInitInfo, rank: int, world: int, eplb_map: Any = None):
    """(refit, plan) of ``rank``: its scoped refit and own plan (no comm: failures are
    told through the init agreement instead); ``eplb_map``: Model.refit's (None:
    vLLM's initial map)."""
    model = Model(info.model, layers=info.layers, infer_dtype=info.infer_dtype)
    refit = model.refit(info.train, info.infer, rank=rank, domain_size=info.domain_size,
                        eplb_map=eplb_map)
    where = {}
    if info.colocated:  # one host unless told: every piece between ranks is a read
        where = dict(hosts=list(info.hosts) if info.hosts else [0] * world,
                     devices=list(info.devices) if info.devices else None, colocated=True)
    elif info.transport == "cuda-ipc":
        raise error(Status.CONFIG, "rank %d: transport \"cuda-ipc\" moves colocated reads "
                    "only: set colocated=True" % rank)
    for f in ("delta", "delta_checksum", "eplb"):
        if not isinstance(getattr(info, f), bool):
            raise error(Status.CONFIG, "rank %d: %s must be True or False, got %r"
                        % (rank, f, getattr(info, f)))
    plan = Plan(refit.train, refit.infer, rank=rank, world=world,
                domain_size=info.domain_size or None, staging_mb=info.staging_mb,
                timeout_s=info.timeout_s, delta=info.delta,
                verify=info.delta_checksum if info.delta else None, name=info.plan_name,
                **where)
    plan.refit = refit
    return refit, plan


def close_plan(owner: Any) -> None:
    """Close ``owner.plan`` (a WorkerCore or ReshardTrainer initialised again) before
    the next is made: left to the garbage collector, it would still count among the
    rank's plans of those inputs when the next is made on some ranks only (plan
    identity: every refit MISMATCH), or hold the next one's name."""
    plan = getattr(owner, "plan", None)
    if plan is not None:
        owner.plan = None
        plan.close()


def follow_eplb(owner: Any, version: int, own: Any = None) -> bool:
    """Every engine's EPLB map for refit ``version`` (eplb.collect; ``own``: this
    worker's engine and its live rows, which must be the published ones); where they
    differ from the maps
    ``owner.plan`` was made with, ``owner.plan`` becomes the plan of these maps
    (with delta it adopts the old plan's state: ranks whose destination slots did
    not move keep their version). Returns whether the plan changed (the caller
    binds it again). ``owner``: a WorkerCore or ReshardTrainer after init. Raises
    ReshardError (TIMEOUT, CONFIG: eplb.collect; CONFIG for ``own`` differing from
    its engine's published map, or a map the layout refuses)."""
    s = sizes(owner.info.train, owner.info.infer)
    who = owner._who() if hasattr(owner, "_who") else "train rank %d" % owner.rank
    maps = eplb.collect(owner.store, version, s.engines, owner.info.timeout_s, who)
    if own is not None:
        differs = eplb.first_difference(own[1], maps[own[0]])
        if differs:
            raise error(Status.CONFIG, "%s: refit %d: the EPLB map this worker holds is not "
                        "its engine's (its first worker published another: %s)"
                        % (who, version, differs))
    if maps == owner.eplb_maps:
        return False
    try:
        _, plan = build_plan(owner.info, owner.rank, owner.world, eplb.one_engine(maps))
    except ReshardError as e:
        raise error(e.status, "%s: refit %d: planning with the engines' EPLB maps failed: "
                    "%s" % (who, version, e.message)) from e
    if owner.info.delta:
        plan.delta_adopt(owner.plan)
    # the old plan is freed now, not when the object goes (an exception's traceback may
    # hold it): otherwise, the maps moving back, it would count among this rank's plans
    # of those inputs and every rank's next refit fail MISMATCH (plan identity)
    owner.plan.close()
    owner.plan, owner.eplb_maps = plan, maps
    return True


def fail_peers(comm: Any, err: ReshardError, timeout_s: float) -> None:
    """Tell the peers on ``comm`` that this rank cannot execute this refit (plan_fail:
    their execute fails at once naming ``err``); a failure to tell is dropped (they
    then fail on the timeout), ``err`` is what the caller raises."""
    try:
        plan_fail(comm, err, timeout_s)
    except ReshardError:
        pass


class WorkerCore:
    """Receives refits into ``model``'s own tensors, in place. ``parallel_config``:
    vLLM's (tensor_parallel_size, data_parallel_size, data_parallel_index, rank,
    pipeline_parallel_size: the worker's place); ``device``: the model's (a
    torch.device, "cpu" or "cuda"; the transport must move its memory).
    ``rules``: callables (declared names, live params) -> post-load rules, added to
    the built-in Nemotron-H A rule (the vLLM shell adds MLA and FlashInfer)."""

    init_info_cls = ReshardInitInfo
    update_info_cls = ReshardUpdateInfo

    def __init__(self, model: Any, parallel_config: Any, device: Any = "cpu") -> None:
        self.setup(model, parallel_config, device)

    def setup(self, model: Any, parallel_config: Any, device: Any) -> None:
        self.model = model
        self.parallel_config = parallel_config
        self.device = device
        self.comm = None
        self.plan: Optional[Plan] = None
        self.bound: Optional[Bound] = None
        self.version = 0  # the last refit that landed on every rank
        self.attempted = 0  # the last refit round this worker took part in
        self.torn = False  # a refit failed after it may have written the weights
        self.session = False  # an update session open (start_weight_update .. finish/abort)
        self.last_refit_s = 0.0

    # vLLM's dict -> dataclass entry points
    def parse_init_info(self, init_dict: Dict[str, Any]) -> ReshardInitInfo:
        return parse(self.init_info_cls, init_dict, type(self).__name__)

    def parse_update_info(self, update_dict: Dict[str, Any]) -> ReshardUpdateInfo:
        return parse(self.update_info_cls, update_dict, type(self).__name__)

    def post_load_rules(self, declared: List[str], live: Dict[str, Any],
                        info: ReshardInitInfo) -> List[Rule]:
        """The post-load rules of this engine (override to add): the staged ones
        (Nemotron-H's A, Qwen3-Next's norm + 1 and A_log, GLM-4.5's fp32 gate)."""
        return staged_rules(declared, live)

    def init_transfer_engine(self, init_info: ReshardInitInfo) -> None:
        """Join the refit: derive this worker's rank, build its plan, check every
        declared parameter and buffer against the live model (and that no live
        parameter is left out), agree with every rank, open the comm. Collective over
        the refit's world. Nothing is written. Raises ReshardError on every rank
        (BUFFER naming rank and parameter, MISMATCH, TIMEOUT, CONFIG, ...)."""
        info = init_info
        if isinstance(info, dict):
            info = self.parse_init_info(info)
        s = sizes(info.train, info.infer)
        rank, problems = self.refit_rank(s, info)
        self.rank, self.world, self.info = rank, s.world, info
        self.attempted = 0  # a new session: its trainer numbers refits from 1 again
        problems = ["infer rank %d: %s" % (rank, p) for p in problems]
        problems += ["engine %d, infer rank %d: %s" % (info.engine_index, rank, p)
                     for p in self.engine_problems(info)]
        store = open_store(info.rendezvous(), rank, s.world, info.timeout_s)
        self.store = store
        close_plan(self)
        if not problems:
            try:
                _, self.plan = build_plan(info, rank, s.world)
            except ReshardError as e:
                problems.append("infer rank %d: planning failed: %s" % (rank, e))
        if not problems:
            problems += self._bind()
        agree(store, rank, s.world, info.record(), problems, info.timeout_s)
        self.eplb_maps = None
        self.comm = open_comm(info.transport, store, rank, s.world, info.timeout_s,
                              self.device)

    def _bind(self) -> List[str]:
        """Bind the plan's destination to the live model (init, and each new plan of
        a moved EPLB map): the problems found."""
        params, buffers = live_tensors(self.model)
        declared = [p.name for p in self.plan.dst.parameters(self.rank)]
        rules = self.post_load_rules(declared, params, self.info)
        self.bound = bind_live(self.plan.dst, self.rank, "infer", params, buffers,
                               device_of(self.info.transport), True, rules)
        return self.bound.problems

    def refit_rank(self, s: Any, info: ReshardInitInfo):
        """(this worker's refit rank, problems with its place) from the engine's
        parallel state (override: vLLM's numbering here, ranks.worker_rank; the SGLang
        shell numbers a server's TP ranks)."""
        return worker_rank(s, info.engine_index, self.parallel_config)

    def engine_problems(self, info: ReshardInitInfo) -> List[str]:
        """What this engine runs that the refit cannot write (override: the vLLM shell
        refuses EPLB, LoRA and MoE kernels by name); told on every rank at init."""
        return []

    def live_eplb_map(self) -> Optional[List[List[int]]]:
        """The engine's live EPLB map, one physical_to_logical row per MoE layer
        (override: the vLLM shell reads its MoE layers); None: the engine has none."""
        return None

    def _follow_eplb(self, version: int) -> None:
        """init info eplb: before refit ``version``, publish this engine's live map (its
        first worker) and plan with every engine's (eplb.py). Raises ReshardError (the
        peers are told first, so every rank fails at once; nothing was written)."""
        s = sizes(self.info.train, self.info.infer)
        engine = self.info.engine_index
        local = (self.rank - s.train_world) % s.per_engine
        rows, why = None, ""
        try:
            rows = self.live_eplb_map()
        except ReshardError as e:
            why = e.message
        except Exception as e:  # noqa: BLE001 - any failure to read it is told, by name
            why = "reading the engine's live EPLB map raised %s: %s" % (type(e).__name__, e)
        if rows is None and not why:
            why = ("the engine keeps no live EPLB map (start it with --enable-eplb, or "
                   "leave eplb out of the init info)")
        if local == 0:
            eplb.publish(self.store, version, engine, rows, why)
        try:
            if why:
                raise error(Status.CONFIG, "%s: refit %d: %s" % (self._who(), version, why))
            if follow_eplb(self, version, (engine, rows)):
                problems = self._bind()
                if problems:
                    raise error(Status.BUFFER, "%s: refit %d, EPLB map moved: %s"
                                % (self._who(), version, "; ".join(problems)))
        except Exception as e:  # noqa: BLE001 - every failure here is told to the peers
            err = e if isinstance(e, ReshardError) else error(
                Status.CONFIG, "%s: refit %d: following the EPLB maps failed: %s: %s"
                % (self._who(), version, type(e).__name__, e))
            fail_peers(self.comm, err, self.info.timeout_s)
            if err is e:
                raise
            raise err from e

    def _who(self) -> str:
        info = getattr(self, "info", None)
        return "engine %d, infer rank %d" % (getattr(info, "engine_index", 0),
                                             getattr(self, "rank", -1))

    def start_weight_update(self) -> None:
        """Open an update session (the refit then writes the model's tensors in place).
        A second start while one is open is refused (INVALID_ARG), as vLLM refuses it."""
        if self.session:
            raise error(Status.INVALID_ARG, "%s: start_weight_update while refit session "
                        "%d is still open (finish or abort it first)"
                        % (self._who(), self.attempted))
        self.session = True

    def set_weight_update_target(self, model: Any, model_config: Any) -> None:
        """The plan was bound to the model of init_transfer_engine: another target (a
        draft model) is refused rather than written with the wrong names."""
        if model is not self.model:
            raise error(Status.UNSUPPORTED, "%s: the refit is bound to the model it was "
                        "initialized with; a draft model needs its own backend instance"
                        % self._who())

    def reset_weight_update_target(self) -> None:
        """Nothing to reset (the target never changes)."""

    def abort_weight_update(self) -> None:
        """vLLM's failure path (a failed start, update or finish): close the session as
        failed. The weights are torn (weights_state() says so; finish_weight_update of
        no later session succeeds until a refit lands whole) and, with delta, the next
        refit rewrites every element (Plan.delta_invalidate). Never raises: with no
        session open (never started, already finished, or aborted twice) it is a
        no-op, as the base class's default abort is."""
        if not self.session:
            return
        self.session = False
        self.torn = True
        self.invalidate_weights()

    def receive_weights(self, update_info: ReshardUpdateInfo) -> None:
        """One refit into the model (collective with every rank of the refit), then the
        post-load rules. Versions increase: a round the worker never saw (the trainer
        could not start it) is skipped, a repeated or older one is refused. Raises
        ReshardError (TIMEOUT naming a dead or stalled peer, within about twice
        timeout_s; INVALID_ARG before init or for a version that does not increase);
        after a failure weights_state() says whether the weights are torn."""
        if getattr(self, "_shut", False):
            raise error(Status.INVALID_ARG, "infer rank %d: receive_weights after shutdown() "
                        "(the communicator is closed)" % self.rank)
        if self.plan is None or self.comm is None:
            raise error(Status.INVALID_ARG, "receive_weights before init_transfer_engine")
        update = update_info
        if update.version <= self.attempted:
            raise error(Status.INVALID_ARG, "infer rank %d: refit version %d, after refit %d "
                        "(versions increase within an init; a repeated or older round is "
                        "refused)" % (self.rank, update.version, self.attempted))
        self.attempted = update.version
        t0 = time.perf_counter()
        if self.info.eplb:
            self._follow_eplb(update.version)
        # torn until the refit and the post-load rules have run; a delta plan knows
        # itself whether a failed execute wrote anything
        self.torn = not self.info.delta
        self.plan.execute(self.comm, src=None, dst=self.bound.current(*live_tensors(self.model)))
        self.torn = True
        apply_post_load(self.bound)
        self.torn = False
        self.last_refit_s = time.perf_counter() - t0
        self.version = update.version

    def weights_state(self) -> Dict[str, Any]:
        """Whether the engine may generate with its weights: ``state`` "none" (no refit
        landed yet), "committed" (they are refit ``version``, the last that landed on
        every rank) or "torn" (a refit failed part way: some elements may be new and
        some old; do not resume generation; the next refit that succeeds rewrites every
        one). ``version`` counts ReshardUpdateInfo rounds; ``attempted`` is the last
        round received. A delta plan adds ``delta`` (Plan.delta_info(): the plan's own
        version and state, wire and changed bytes of the last refit); its state is the
        plan's: a refit that failed before writing anything leaves the weights
        committed. Local, any time after init_transfer_engine."""
        out: Dict[str, Any] = {"version": self.version, "attempted": self.attempted}
        delta = self.plan.delta_info() if self.plan is not None and self.info.delta else None
        if self.torn:  # a dense refit or the post-load rules failed
            out["state"] = "torn"
        elif delta is not None:
            out["state"] = delta["state"]
        else:
            out["state"] = "committed" if self.version else "none"
        if delta is not None:
            out["delta"] = delta
        return out

    def invalidate_weights(self) -> None:
        """The engine's weights no longer hold the last refit: it reloaded, quantized or
        post-processed them in place, or freed and reallocated them (vLLM's sleep level 2
        and wake_up map new memory at the same addresses). With delta the next refit
        sends this worker every parameter whole (Plan.delta_invalidate); without it every
        refit does anyway. Local, between refits."""
        if self.plan is not None and self.info.delta:
            self.plan.delta_invalidate()

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        """vLLM's per-round entry point: parse, receive; with NCCL the device is
        synchronized (the refit runs on torch's current stream), as vLLM's does."""
        self.receive_weights(self.parse_update_info(update_info))
        if self.info.transport == "nccl" and _device_kind(self.device) == "cuda":
            import torch
            if torch.cuda.is_available():
                torch.cuda.synchronize()

    def finish_weight_update(self) -> None:
        """Close the session (receive_weights already ran the post-load rules). Raises
        ReshardError (INVALID_ARG) with no session open, and (VERIFY) when the weights
        are torn, naming engine, rank and refit: a torn engine is never reported as
        updated, so vLLM's weight version does not advance."""
        if not self.session:
            raise error(Status.INVALID_ARG, "%s: finish_weight_update with no update "
                        "session open" % self._who())
        self.session = False
        if self.torn:
            raise error(Status.VERIFY, "%s: refit %d did not land whole (the weights are "
                        "torn: some elements new, some old); not finishing it as an "
                        "update, the next refit rewrites every element"
                        % (self._who(), self.attempted))

    def shutdown(self) -> None:
        if self.comm is not None:
            self.comm.close()
            self.comm = None
            self._shut = True


def _device_kind(device: Any) -> str:
    return str(getattr(device, "type", device)).split(":")[0]


__all__ = ["ReshardInitInfo", "ReshardUpdateInfo", "WorkerCore", "build_plan"]
