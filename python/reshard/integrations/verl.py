"""The verl shell: a ``reshard`` checkpoint engine for verl's pluggable weight sync
(verl/checkpoint_engine/), trainer side and rollout side.

Followed upstream: verl/checkpoint_engine/base.py at dongha-yoon/verl d6f2c522 (the
newest stored revision: CheckpointEngine with prepare / build_topology /
init_process_group / finalize / send_weights / receive_weights, the
``rank_local_named_tensors`` wire format, ``is_master_rank``), checked against
verl-project/verl 1dda039b (main: the same abstract methods, signatures and
registry); the nccl_m2n engine beside it (nccl_m2n_checkpoint_engine.py at
dongha-yoon/verl d6f2c522) for how a rank-local engine takes its topology and
yields destination-local tensors; engine_workers.py and base.py's
CheckpointEngineWorker / CheckpointEngineManager for the call order. The stand-in
(tests/python/standin/verl) models that revision; docs/verl.md says what ran.

How verl drives an engine, every sync (CheckpointEngineManager.update_weights):
``prepare()`` on every actor and rollout worker, ``build_topology(actor world,
rollout world, metadata)`` once, ``init_process_group(**kwargs)`` on every worker,
then the actor workers' ``send_weights(generator, global_steps)`` beside the rollout
workers' ``server_adapter.update_weights(receive_weights(global_steps),
wire_format=...)``, then ``finalize()`` everywhere. Third-party backends are loaded
by module path: ``checkpoint_engine.custom_backend_module`` is imported (verl's
import_external_libs) before ``CheckpointEngineRegistry.new(backend, ...)``; importing
this module from verl registers ``reshard`` (register()).

What this engine does with that sequence (the engine-independent classes do the
work: ReshardTrainer on actor ranks, WorkerCore on rollout ranks):
- the first init_process_group plans, binds and agrees (every rank fails closed,
  naming rank and parameter: rendezvous.agree); later ones (verl calls it every
  sync) check the topology is the same and reuse the plan and the communicator;
- send_weights never iterates verl's full-tensor generator (nothing is gathered):
  each actor rank sends its own shards, bound in place at init: a Megatron actor's
  model chunks (MegatronChunks), or an FSDP2 module (reshard.integrations.fsdp,
  where the package has it);
- receive_weights executes the rank's plan, then yields rank-local tensors
  (``rank_local_named_tensors``, what verl's vLLM adapter loads without slicing),
  named as vLLM names its parameters; only after the whole refit landed, so a
  failed sync yields nothing and the rollout keeps its previous weights whole;
- ``global_steps`` is the refit's version (increasing; None: the next one).

verl is imported only by register() and when ReshardCheckpointEngine is first used:
it is built then, on verl's own CheckpointEngine, from VerlEngineCore."""

from __future__ import annotations

import inspect
import socket
import sys
import time
from types import SimpleNamespace
from typing import Any, AsyncGenerator, Dict, List, Optional, Tuple

from ..errors import Status, error
from .binding import live_tensors
from .trainer import ReshardTrainer, ReshardTrainerInitInfo
from .ranks import sizes
from .sglang import SGLangClient, spec_keys
from .worker import ReshardUpdateInfo, WorkerCore

BACKEND = "reshard"
WIRE_FORMAT = "rank_local_named_tensors"
_BUILT: Dict[str, type] = {}

# engine_kwargs (checkpoint_engine.engine_kwargs.reshard) that become ReshardInitInfo
# fields as they are; anything else is refused by name at construction
INFO_KWARGS = ("model", "train", "infer", "layers", "domain_size", "infer_dtype",
               "store_path", "master_address", "master_port", "timeout_s", "staging_mb",
               "moe_backend", "transport", "delta", "delta_checksum", "rendezvous_name")


class NoControlPlane:
    """The trainer's control plane under verl: none. verl's CheckpointEngineManager
    drives the rollout side itself (receive_weights on every rollout worker, beside
    send_weights on every actor worker), so ReshardTrainer's four calls to the
    inference side (VLLMWeightSyncClient's) have nothing to do."""

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:  # noqa: ARG002
        return None

    def start_weight_update(self) -> None:
        return None

    def update_weights(self, update_info: Dict[str, Any]) -> None:  # noqa: ARG002
        return None

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:  # noqa: ARG002
        return None


class StagingModel:
    """The rollout worker's tensors when the engine runs beside the inference engine
    (verl's CheckpointEngineWorker: another process on the same GPU, no live model):
    one tensor per parameter the rank's plan declares, shaped as vLLM holds it on that
    rank, allocated on first use from the plan (so nothing is planned twice) and kept
    between syncs (delta refits stay valid while the rollout sleeps). Looks like a
    module to WorkerCore (named_parameters / named_buffers)."""

    def __init__(self, core: WorkerCore, device: str) -> None:
        self.core, self.device = core, device
        self.tensors: Optional[Dict[str, Any]] = None

    def named_parameters(self):
        if self.tensors is None:
            from ..buffers import allocate
            plan, rank = self.core.plan, self.core.rank
            self.tensors = {p.name: allocate(p, "torch", 0, self.device)
                            for p in plan.dst.parameters(rank)}
        return iter(self.tensors.items())

    def named_buffers(self):
        return iter(())

    def named_modules(self):
        return iter(())


class VerlEngineCore:
    """One verl worker's ``reshard`` engine, engine-independent (what the verl shell
    puts on verl's CheckpointEngine). Built by verl as
    ``CheckpointEngineRegistry.new("reshard", bucket_size=..., [is_master=...,]
    **engine_kwargs)`` on actor and rollout workers alike; which side it is comes from
    build_topology's ``role``. ``engine_kwargs``: ``model``, ``train``, ``infer`` (the
    specs of `reshard plan`) and any other INFO_KWARGS field (ReshardInitInfo).
    ``source`` (actor side: the actor's module, Megatron chunks or an FSDP2 module) and
    ``model_in_place`` (rollout side: a live vLLM-named module to write in place instead
    of yielding tensors) may be given here or with bind(); without a source, the first
    init_process_group takes the actor worker's ``actor.engine.module`` (the worker
    that calls execute_checkpoint_engine), and fails closed naming the rank when there
    is none."""

    wire_format = WIRE_FORMAT

    def __init__(self, bucket_size: int = 0, is_master: bool = False, *,
                 source: Any = None, model_in_place: Any = None, server: Any = None,
                 device: str = "cpu", **engine_kwargs: Any) -> None:
        unknown = sorted(set(engine_kwargs) - set(INFO_KWARGS))
        missing = [k for k in ("model", "train", "infer") if k not in engine_kwargs]
        if unknown or missing:
            raise ValueError("checkpoint_engine.engine_kwargs.reshard: %s%s (fields: %s)"
                             % ("unknown %s" % unknown if unknown else "",
                                " missing %s" % missing if missing else "",
                                list(INFO_KWARGS)))
        self.bucket_size = int(bucket_size)  # unused: the plan's staging bound is staging_mb
        self.is_master = bool(is_master)
        self.kwargs = dict(engine_kwargs)
        self.kwargs.setdefault("rendezvous_name", "verl")
        self.sizes = sizes(self.kwargs["train"], self.kwargs["infer"])
        self.source, self.model_in_place, self.device = source, model_in_place, device
        self.server = server
        # an SGLang rollout (infer spec engine=sglang): its TP workers receive in place
        # through reshard's SGLang loader; this engine is their server's control plane
        self.sglang = spec_keys(self.kwargs["infer"]).get("engine") == "sglang"
        self.client: Optional[SGLangClient] = None
        self.leader = False
        if self.sglang:
            self.wire_format = "named_tensors"  # nothing is yielded: the adapter loads none
        self.rank: Optional[int] = None
        self.role: Optional[str] = None
        self.topology: Optional[Tuple[Any, ...]] = None
        self.trainer: Optional[ReshardTrainer] = None
        self.core: Optional[WorkerCore] = None
        self.synced_steps: Optional[int] = None  # global_steps of the last refit landed
        self.attempted_steps: Optional[int] = None  # of the last one begun (_version)
        self.last_sync_s = 0.0
        self._live_ids: Optional[Dict[str, Tuple[int, int]]] = None

    @classmethod
    def is_master_rank(cls, trainer_rank: int, **engine_kwargs: Any) -> bool:
        """Trainer rank 0 hosts the refit's store (verl's default rule)."""
        return trainer_rank == 0

    def bind(self, source: Any = None, model_in_place: Any = None, server: Any = None) -> None:
        """Give the actor's module (``source``), the rollout's live module
        (``model_in_place``) or, for an SGLang rollout, its server (``server``: an
        object with ``post(path, body)``, as SGLangClient takes) explicitly, before the
        first init_process_group."""
        if source is not None:
            self.source = source
        if model_in_place is not None:
            self.model_in_place = model_in_place
        if server is not None:
            self.server = server

    # -- verl's lifecycle ------------------------------------------------------------
    def prepare(self) -> Dict[str, Any]:
        """Every worker: what build_topology needs. The master (trainer rank 0) adds the
        refit's store: the engine_kwargs' store_path, or a TCPStore it will host
        (master_address: this host's address unless given; master_port: a free one)."""
        meta: Dict[str, Any] = {"model": self.kwargs["model"], "train": self.kwargs["train"],
                                "infer": self.kwargs["infer"], "master": None,
                                "rollout": _rollout_name_of_caller(self)}
        if self.is_master:
            if self.topology is not None:  # the store of the first sync, reused
                meta["master"] = self.topology[2]
            elif self.kwargs.get("store_path"):
                meta["master"] = {"store_path": self.kwargs["store_path"]}
            else:
                addr = self.kwargs.get("master_address") or _host_address()
                port = self.kwargs.get("master_port") or _free_port()
                meta["master"] = {"master_address": addr, "master_port": int(port)}
        return meta

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int,
                       metadata: List[Any]) -> Tuple[Dict[str, List[Any]], Dict[str, List[Any]]]:
        """Refit ranks: actor workers [0, A) in worker-group order (their
        torch.distributed rank: the Megatron rank), rollout workers [A, A + R) in
        replica order (engine-major: replica, then its workers). Raises ValueError
        unless exactly one trainer is the master, every worker planned the same model
        and specs, and A and R are the specs' train world and infer world."""
        masters = [m["master"] for m in metadata[:actor_wg_world_size]
                   if isinstance(m, dict) and m.get("master")]
        if len(masters) != 1:
            raise ValueError("reshard: exactly one trainer master, got %d" % len(masters))
        first = metadata[0]
        for i, m in enumerate(metadata):
            if not isinstance(m, dict) or any(m.get(k) != first.get(k)
                                              for k in ("model", "train", "infer")):
                side = "actor" if i < actor_wg_world_size else "rollout"
                raise ValueError("reshard: %s worker %d planned %r, actor worker 0 %r"
                                 % (side, i if i < actor_wg_world_size else i -
                                    actor_wg_world_size, m, first))
        engine = "sglang" if spec_keys(first["infer"]).get("engine") == "sglang" else "vllm"
        for i, m in enumerate(metadata[actor_wg_world_size:]):
            if m.get("rollout") not in (None, engine):
                raise ValueError("reshard: rollout worker %d runs rollout.name=%r, the infer "
                                 "spec %r plans %s's layouts%s" % (
                                     i, m["rollout"], first["infer"], engine,
                                     " (give it engine=sglang)" if m["rollout"] == "sglang"
                                     else ""))
        s = sizes(first["train"], first["infer"])
        infer_world = s.world - s.train_world
        if actor_wg_world_size != s.train_world or rollout_world_size != infer_world:
            raise ValueError("reshard: train %r and infer %r need %d actor and %d rollout "
                             "workers, verl has %d and %d" % (
                                 first["train"], first["infer"], s.train_world, infer_world,
                                 actor_wg_world_size, rollout_world_size))
        world = s.world
        return ({"rank": list(range(s.train_world)), "world_size": [world] * s.train_world,
                 "master_metadata": [masters[0]] * s.train_world,
                 "role": ["source"] * s.train_world},
                {"rank": list(range(s.train_world, world)), "world_size": [world] * infer_world,
                 "master_metadata": [masters[0]] * infer_world,
                 "role": ["destination"] * infer_world})

    def init_process_group(self, rank: int, world_size: int, master_metadata: Dict[str, Any],
                           role: str) -> None:
        """The first call joins the refit (collective over every actor and rollout
        worker): plan, bind the actor's shards or the rollout's tensors, agree;
        ReshardError on every rank when any rank is not ready, naming it and its
        parameters; nothing moved. verl calls it again before every sync: the same
        topology reuses everything, another one raises (ValueError naming both)."""
        topo = (int(rank), int(world_size), dict(master_metadata), role)
        if self.topology is not None:
            if topo != self.topology:
                raise ValueError("reshard rank %s: init_process_group%r after %r: a new "
                                 "topology needs a new engine (and rendezvous_name)"
                                 % (self.rank, topo, self.topology))
            return
        if role not in ("source", "destination"):
            raise ValueError("reshard: role must be source or destination, got %r" % (role,))
        if world_size != self.sizes.world:
            raise ValueError("reshard rank %d: world_size %d, the specs give %d"
                             % (rank, world_size, self.sizes.world))
        self.rank, self.role, self.topology = int(rank), role, topo
        fields = {k: v for k, v in self.kwargs.items()}
        fields.update(master_metadata)
        if role == "source":
            source = self.source if self.source is not None else _actor_module_of_caller(self)
            info = ReshardTrainerInitInfo(rank=self.rank, **fields)
            # no source: ReshardTrainer refuses it by name, on every rank, in the agreement
            self.trainer = ReshardTrainer.trainer_init(info, client=NoControlPlane(),
                                                       source=source)
        elif self.sglang:
            self._init_sglang(fields)
        else:
            i = self.rank - self.sizes.train_world
            per = self.sizes.per_engine
            local = i % per
            fields["engine_index"] = i // per
            pc = SimpleNamespace(tensor_parallel_size=self.sizes.tp,
                                 data_parallel_size=self.sizes.dp,
                                 data_parallel_index=local // self.sizes.tp,
                                 rank=local % self.sizes.tp, pipeline_parallel_size=1)
            core = WorkerCore(None, pc, self.device)
            core.model = self.model_in_place if self.model_in_place is not None \
                else StagingModel(core, self.device)
            core.init_transfer_engine(core.parse_init_info(fields))
            core.attempted = -1  # verl's first sync is global_steps 0
            self.core = core
            if self.model_in_place is not None:
                from .vllm import follow_worker_sleep
                follow_worker_sleep()  # in a vLLM worker: sleep level 2 invalidates delta

    def _init_sglang(self, fields: Dict[str, Any]) -> None:
        """Rollout side, SGLang: this worker is beside TP rank t of server e (rollout
        worker i = e * ranks per server + t), whose scheduler runs reshard's loader
        (``--custom-weight-loader reshard.integrations.sglang.load_weights``): that TP
        worker is refit rank ``self.rank``. The worker beside TP rank 0 drives its
        server as SGLangClient does (reshard's INIT through
        /update_weights_from_tensor; every TP worker then plans, checks its live
        parameters and agrees with every refit rank); every worker of the server then
        reads every TP worker's outcome from the refit's store and raises the first
        error (VERIFY: naming the rank and parameter), so each verl worker fails when
        any refit rank refused."""
        i = self.rank - self.sizes.train_world
        engine, t = divmod(i, self.sizes.per_engine)
        fields["engine_index"] = engine
        client = SGLangClient(None, self.sizes.per_engine, pause="")
        if t == 0:
            server = self.server if self.server is not None else _server_of_caller(self)
            if server is None:
                raise ValueError("reshard rank %d: an SGLang rollout worker beside TP rank 0 "
                                 "needs its server (bind(server=...), or the calling "
                                 "CheckpointEngineWorker's server_adapter)" % self.rank)
            client.server = server
            client.init_weight_transfer_engine(fields)
        else:
            client.attach(fields)
            client.check("init")
        self.client, self.leader = client, t == 0

    def _version(self, global_steps: Optional[int]) -> int:
        """The refit version of a sync: ``global_steps`` (None: the one after the last
        attempted, 0 first), which must exceed the last one attempted, as the vLLM
        worker's rule and the SGLang loader's require. Every actor and rollout worker
        applies it to the same sequence, so a repeated or older one (a failed step
        retried included) is refused on every rank at once, before anything moves or
        changes state (INVALID_ARG), rather than by the rollouts alone while the actors
        wait out a timeout that ends their communicator."""
        last = self.attempted_steps
        version = (last + 1 if last is not None else 0) if global_steps is None \
            else int(global_steps)
        if version < 0:
            raise error(Status.INVALID_ARG, "reshard rank %d: global_steps %d (verl counts "
                        "from 0; nothing was sent)" % (self.rank, version))
        if last is not None and version <= last:
            raise error(Status.INVALID_ARG, "reshard rank %d: global_steps %d after %d "
                        "(versions increase, a failed one included; nothing was sent)"
                        % (self.rank, version, last))
        self.attempted_steps = version
        return version

    def _receive_sglang(self, global_steps: int) -> None:
        """One sync into the SGLang server's live parameters: refit round
        global_steps + 1 (the loader counts rounds from 1; verl's first sync is 0),
        then SGLang's weight version set to ``global_steps`` once every TP worker
        committed (the leader); every worker raises when any TP worker did not."""
        client = self.client
        if self.leader:
            client.update_weights({"version": global_steps + 1})
            client.finish_weight_update(global_steps)
        else:
            client.check(str(global_steps + 1))

    async def send_weights(self, weights: Any, global_steps: Optional[int] = None) -> Dict[str, Any]:
        """Actor workers: one refit of this rank's own shards (bound at init). verl's
        ``weights`` (its full-tensor generator) is closed unconsumed: nothing is
        gathered. Returns verl's per-sync metrics."""
        if self.trainer is None:
            raise error(Status.INVALID_ARG, "reshard rank %s: send_weights on a %s worker "
                        "before init_process_group as a source" % (self.rank, self.role))
        await _close(weights)
        version = self._version(global_steps)
        t0 = time.perf_counter()
        self.trainer.send_weights()
        self.last_sync_s = time.perf_counter() - t0
        self.synced_steps = version
        out = {"reshard/sync_s": self.last_sync_s}
        if self.kwargs.get("delta"):
            d = self.trainer.plan.delta_info()
            out.update({"reshard/wire_bytes": d["wire_bytes"],
                        "reshard/stream_bytes": d["stream_bytes"]})
        return out

    async def receive_weights(self, global_steps: Optional[int] = None
                              ) -> AsyncGenerator[Tuple[str, Any], None]:
        """Rollout workers: one refit into this rank's tensors, then (staging) each
        parameter as (vLLM name, rank-local tensor), ``rank_local_named_tensors``; with
        a live module bound in place, nothing is yielded. The refit lands whole before
        the first tensor is yielded: a failed one raises (ReshardError on every rank:
        TIMEOUT naming a dead peer, ...) and yields nothing. ``global_steps`` is the
        version: it must increase (a repeated or older one is refused)."""
        if self.client is not None:
            version = self._version(global_steps)
            t0 = time.perf_counter()
            self._receive_sglang(version)
            self.last_sync_s = time.perf_counter() - t0
            self.synced_steps = version
            return  # the TP workers hold the weights: nothing for the adapter to load
        core = self.core
        if core is None:
            raise error(Status.INVALID_ARG, "reshard rank %s: receive_weights on a %s "
                        "worker before init_process_group as a destination"
                        % (self.rank, self.role))
        version = self._version(global_steps)
        self._follow_reallocation()
        t0 = time.perf_counter()
        core.start_weight_update()
        try:
            core.receive_weights(ReshardUpdateInfo(version))
        except BaseException:
            core.abort_weight_update()  # torn; with delta the next refit is whole
            raise
        core.finish_weight_update()  # raises (VERIFY) on torn weights
        self.last_sync_s = time.perf_counter() - t0
        self.synced_steps = version
        self._live_ids = self._ids()
        if isinstance(core.model, StagingModel):
            for name, t in core.model.named_parameters():
                yield name, t

    def finalize(self) -> None:
        """After every sync: nothing to free (the plan, the bound tensors and the
        communicator serve the next sync; close() releases them)."""

    def close(self) -> None:
        for side in (self.trainer, self.core):
            if side is not None:
                side.shutdown()
        if self.client is not None and self.leader:
            self.client.shutdown()  # every TP worker closes its communicator

    def weights_state(self) -> Dict[str, Any]:
        """Rollout workers: WorkerCore.weights_state() (``state`` none / committed / torn,
        ``version`` = the global_steps landed)."""
        if self.client is not None:  # committed on every TP worker, or receive raised
            return {"state": "committed" if self.synced_steps is not None else "none",
                    "version": self.synced_steps}
        if self.core is None:
            return {"state": "none", "version": None}
        out = self.core.weights_state()
        if out["state"] != "torn" and self.synced_steps is not None:
            out["state"] = "committed"  # global_steps 0 is a version too
        out["version"] = self.synced_steps
        return out

    def invalidate_weights(self) -> None:
        """The live weights were reloaded or reallocated behind the engine's back: with
        delta, the next refit rewrites every element."""
        if self.core is not None:
            self.core.invalidate_weights()

    def _ids(self) -> Optional[Dict[str, Tuple[int, int]]]:
        if self.core is None or isinstance(self.core.model, StagingModel):
            return None
        params, buffers = live_tensors(self.core.model)
        return {n: (id(t), t.data_ptr()) for n, t in {**buffers, **params}.items()}

    def _follow_reallocation(self) -> None:
        """In place: a live tensor replaced or moved since the last refit (the rollout
        slept and woke with new weight memory) invalidates the delta state, so this
        refit rewrites every element (staging never moves: nothing to follow)."""
        if self._live_ids is not None and self._ids() != self._live_ids:
            self.core.invalidate_weights()


async def _close(weights: Any) -> None:
    """Close verl's weight generator without running it (a sync or an async
    generator: no tensor is materialized, nothing is gathered)."""
    if hasattr(weights, "aclose"):
        await weights.aclose()
    elif callable(getattr(weights, "close", None)):
        weights.close()


def _actor_module_of_caller(engine: Any) -> Any:
    """The actor's module from the verl worker that calls this engine: verl's actor
    worker (engine_workers.py) calls ``getattr(self.checkpoint_engine, method)(...)`` in
    execute_checkpoint_engine; that worker holds the actor's training engine at
    ``self.actor.engine``, whose ``module`` is the Megatron model chunks (a list) or the
    FSDP2 module. None when no frame up the stack is such a worker (the trainer then
    refuses at init, naming the rank)."""
    engine_of_actor = getattr(getattr(_worker_of_caller(engine), "actor", None), "engine", None)
    return getattr(engine_of_actor, "module", None)


def _worker_of_caller(engine: Any) -> Any:
    """The verl worker whose ``checkpoint_engine`` is ``engine``, up the stack (verl's
    workers call it through execute_checkpoint_engine), or None."""
    frame = inspect.currentframe()
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not engine and getattr(owner, "checkpoint_engine", None) is engine:
            return owner
        frame = frame.f_back
    return None


def _rollout_name_of_caller(engine: Any) -> Optional[str]:
    """``rollout.name`` ("vllm", "sglang") of the CheckpointEngineWorker calling
    ``engine``; None on actor workers or outside verl."""
    config = getattr(_worker_of_caller(engine), "rollout_config", None)
    name = getattr(config, "name", None)
    return str(name) if name is not None else None


def _server_of_caller(engine: Any) -> Any:
    """The SGLang server the calling CheckpointEngineWorker's server adapter talks to:
    its ``_engine`` (verl's http_server_engine adapter) when it has ``post(path,
    body)``, else an HTTPServer at its ``base_url``; None without one."""
    from .sglang import HTTPServer
    adapter = getattr(_worker_of_caller(engine), "server_adapter", None)
    server = getattr(adapter, "_engine", None)
    if callable(getattr(server, "post", None)):
        return server
    url = getattr(server, "base_url", None)
    return HTTPServer(url) if url else None


def _host_address() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def register() -> None:
    """Register ``reshard`` in verl's CheckpointEngineRegistry (idempotent). verl calls
    it by importing this module (``checkpoint_engine.custom_backend_module``)."""
    from verl.checkpoint_engine.base import CheckpointEngineRegistry
    if BACKEND not in CheckpointEngineRegistry._registry:
        CheckpointEngineRegistry.register(BACKEND)(_engine_class_built())


def _engine_class() -> type:
    from verl.checkpoint_engine.base import CheckpointEngine

    class ReshardCheckpointEngine(VerlEngineCore, CheckpointEngine):
        """verl checkpoint engine "reshard": VerlEngineCore on verl's base class."""

        wire_format = WIRE_FORMAT

    ReshardCheckpointEngine.__module__ = __name__
    return ReshardCheckpointEngine


def _engine_class_built() -> type:
    if "ReshardCheckpointEngine" not in _BUILT:
        _BUILT["ReshardCheckpointEngine"] = _engine_class()
    return _BUILT["ReshardCheckpointEngine"]


def __getattr__(name: str) -> Any:
    """ReshardCheckpointEngine, built on first use on verl's CheckpointEngine."""
    if name == "ReshardCheckpointEngine":
        return _engine_class_built()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# verl imports this module (custom_backend_module) from a process where its
# checkpoint_engine.base is loaded already: register then, without importing verl
if "verl.checkpoint_engine.base" in sys.modules:
    register()

__all__ = ["BACKEND", "INFO_KWARGS", "NoControlPlane", "StagingModel", "VerlEngineCore",
           "WIRE_FORMAT", "register"]
