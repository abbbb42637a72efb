"""The training side of a refit, engine-independent: every Megatron rank builds its
own plan, binds its chunks' tensors by the layout's names (checked at init as the
workers check theirs), and sends its own bytes every step; trainer rank 0 also
drives the inference side's four control-plane calls (vLLM's VLLMWeightSyncClient:
init_weight_transfer_engine, start_weight_update, update_weights,
finish_weight_update), each running concurrently with the collective it starts, as
vLLM's NCCL trainer engine runs them. The vLLM shell (vllm.py) adds vLLM's base
class to ReshardTrainer."""

from __future__ import annotations

import datetime
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Dict, List, Tuple

from .. import errors as reshard_err
from ..errors import ReshardError
from .binding import bind_live
from .fsdp import FSDPModule
from .megatron import MegatronChunks, as_chunks
from .ranks import sizes, train_convention
from .rendezvous import agree, device_of, open_comm, open_store
from .worker import (ReshardInitInfo, ReshardUpdateInfo, build_plan, close_plan, fail_peers,
                     follow_eplb)


@dataclass
class ReshardTrainerInitInfo(ReshardInitInfo):
    """The trainer's init info: every ReshardInitInfo field (what the workers get,
    engine_index set per client) plus ``rank``, this trainer process's rank in
    [0, train world), given explicitly (vLLM's TrainerInitInfo convention: rank 0 is
    the sender that drives the inference side)."""

    backend: ClassVar[str] = "reshard"
    rank: int = field(kw_only=True)  # required: the Megatron rank (docs/vllm.md)

    @property
    def is_sender(self) -> bool:
        return self.rank == 0

    def worker_info(self, engine_index: int) -> Dict[str, Any]:
        d = asdict(self)
        d.pop("rank")
        d["engine_index"] = engine_index
        return d


class ReshardTrainer:
    """One trainer rank's sender. Build it with trainer_init (every trainer rank),
    call send_weights() after every optimizer step (every trainer rank)."""

    init_info_cls = ReshardTrainerInitInfo

    def __init__(self, *, client: Any, source: Any = None, is_sender: bool = True) -> None:
        self.client = client
        self.source = source
        self.is_sender = is_sender
        self.clients: List[Any] = list(client) if isinstance(client, (list, tuple)) else \
            [client]
        self.version = 0
        self.last_refit_s = 0.0
        self.comm = None

    @classmethod
    def trainer_init(cls, init_info: ReshardTrainerInitInfo, *, client: Any,
                     source: Any = None) -> "ReshardTrainer":
        """Rendezvous with the inference side and return a ready sender (vLLM's newest
        trainer API: no config). ``client``: the engine's control plane (one per
        engine when the infer spec has engines=N, in engine order); ``source``: the
        rank's own shards by the layout's names: a MegatronSource (the vLLM shell's
        WeightSource over Megatron model chunks), MegatronChunks, or the chunks
        themselves (a module or a list). A source offering full HF tensors only
        (vLLM's ModuleSource, any other WeightSource) is refused by name on every
        rank (docs/vllm.md). Rank 0 sends each engine its init info
        (init_weight_transfer_engine, run beside this rank's own init since the
        workers block in the same agreement). Raises ReshardError on every rank of
        the refit when any rank is not ready (naming it and its parameters)."""
        if not isinstance(init_info, ReshardTrainerInitInfo):
            raise TypeError("trainer_init(init_info, *, client, source): init_info must be "
                            "a ReshardTrainerInitInfo, got %r" % (type(init_info).__name__,))
        local, refusal = rank_local_source(source, init_info.rank,
                                           _fsdp_spec(init_info.train))
        self = cls(client=client, source=local, is_sender=init_info.is_sender)
        s = sizes(init_info.train, init_info.infer)
        if len(self.clients) not in (1, s.engines) and self.is_sender:
            raise ValueError("ReshardTrainer: %d clients for %d engines"
                             % (len(self.clients), s.engines))
        rank, world = init_info.rank, s.world
        self.rank, self.world, self.info = rank, world, init_info
        exe = ThreadPoolExecutor(max_workers=max(1, len(self.clients)))
        try:
            futures = [exe.submit(c.init_weight_transfer_engine, init_info.worker_info(e))
                       for e, c in enumerate(self.clients)] if self.is_sender else []
            self._init(init_info, rank, world, refusal)  # its error names the rank: first
            for f in futures:
                f.result()  # the inference side's own errors
        finally:
            exe.shutdown(wait=False)
        return self

    def _init(self, info: ReshardTrainerInitInfo, rank: int, world: int,
              refusal: str) -> None:
        problems: List[str] = [refusal] if refusal else []
        if not 0 <= rank < sizes(info.train, info.infer).train_world:
            problems.append("trainer rank %d outside the train spec %r" % (rank, info.train))
        fsdp = isinstance(self.source, FSDPModule)
        if not problems and not fsdp:
            problems += megatron_rank_problems(rank)
        store = open_store(info.rendezvous(), rank, world, info.timeout_s)
        close_plan(self)
        if not problems:
            try:
                _, self.plan = build_plan(info, rank, world)
            except ReshardError as e:
                problems.append("train rank %d: planning failed: %s" % (rank, e))
        if not problems:
            if fsdp:  # the live DTensors against the spec's layout, by name
                problems += self.source.problems(self.plan.src, rank, train=info.train)
            problems += self._bind()
        agree(store, rank, world, info.record(), problems, info.timeout_s)
        self.store, self.eplb_maps = store, None
        self.comm = open_comm(info.transport, store, rank, world, info.timeout_s,
                              getattr(next(iter(self.bound.tensors.values()), None),
                                      "device", None))

    def send_weights(self) -> None:
        """One refit: rank 0 calls start_weight_update, then update_weights on a side
        thread while every trainer rank sends its own bytes, then
        finish_weight_update. The other trainer ranks first wait (at most timeout_s)
        for rank 0 to say that the inference side started the update, so that a dead
        or failed control-plane driver is named as such. Raises ReshardError (a dead
        or stalled peer: TIMEOUT on every rank, naming it; rank 0 dead or stalled
        before the update started: TIMEOUT on the other trainer ranks naming rank 0;
        the update refused or aborted by the inference side at start, update or
        finish: that error on rank 0, TRANSPORT naming it on the other trainer ranks).
        The refit's version goes to finish_weight_update(weight_version=...), so
        vLLM reports it only once every worker finished it."""
        if self.comm is None:
            raise reshard_err.error(reshard_err.Status.INVALID_ARG,
                                    "send_weights: trainer rank %d was shut down "
                                    "(shutdown() closed its communicator)"
                                    % getattr(self, "rank", -1))
        self.version += 1
        update = asdict(ReshardUpdateInfo(self.version))  # one dict for every worker
        t0 = time.perf_counter()
        if not self.is_sender:
            self._wait_started()
            self._send()
            self._wait_outcome()
        else:
            try:
                self._drive(update)
            except BaseException as e:
                self._announce("outcome", "%s: %s" % (type(e).__name__, e))
                raise
            self._announce("outcome", "")
        self.last_refit_s = time.perf_counter() - t0

    def _drive(self, update: Dict[str, Any]) -> None:
        """Rank 0's side of one refit: the control-plane calls around its own send."""
        started: List[Any] = []
        try:
            for c in self.clients:
                c.start_weight_update()
                started.append(c)
        except Exception as e:
            # the failed engine aborted and dropped its session itself (vLLM's
            # worker); the ones started before it are closed without a version
            self._announce("started", "%s: %s" % (type(e).__name__, e))
            _close_quietly(started)
            raise
        self._announce("started", "")
        exe = ThreadPoolExecutor(max_workers=len(self.clients))
        try:
            futures = [exe.submit(c.update_weights, update) for c in self.clients]
            try:
                self._send()  # its error (a dead peer, named) is raised, not the RPCs'
                for f in futures:
                    f.result()
            except BaseException:
                # a failed update RPC aborted its engine's session; one whose RPC
                # returned is closed without a version (vLLM reports no new one)
                _close_quietly([c for c, f in zip(self.clients, futures)
                                if f.exception() is None])
                raise
        finally:
            exe.shutdown(wait=False)
        # our version becomes vLLM's weight version only where every worker finished
        for c in self.clients:
            c.finish_weight_update(weight_version=str(self.version))

    def _announce(self, what: str, failure: str) -> None:
        """Rank 0: tell the other trainer ranks that refit ``version`` ``what``
        ("started" on the inference side, or its "outcome" there): ``failure`` empty,
        or its text."""
        self.store.set("%s/%d" % (what, self.version), json.dumps({"error": failure}))

    def _wait_outcome(self) -> None:
        """Trainer ranks but 0: the refit's outcome on the inference side, as rank 0
        saw it (its update and finish calls return within about twice timeout_s of a
        failure): a refit the engine refused or aborted raises here too, so every
        trainer rank says it failed."""
        key = "outcome/%d" % self.version
        try:
            self.store.wait([key], datetime.timedelta(seconds=3 * self.info.timeout_s))
        except RuntimeError as e:
            raise reshard_err.error(
                reshard_err.Status.TIMEOUT,
                "train rank %d: refit %d: trainer rank 0 (the control-plane driver) did not "
                "say within %.1f s whether the inference side finished the update"
                % (self.rank, self.version, 3 * self.info.timeout_s)) from e
        failure = json.loads(self.store.get(key))["error"]
        if failure:
            raise reshard_err.error(
                reshard_err.Status.TRANSPORT,
                "train rank %d: refit %d failed on the inference side (vLLM aborted it; its "
                "weight version did not advance): %s" % (self.rank, self.version, failure))

    def _wait_started(self) -> None:
        """Trainer ranks but 0: wait at most timeout_s for rank 0's announcement of
        this refit (_announce_started)."""
        key = "started/%d" % self.version
        try:
            self.store.wait([key], datetime.timedelta(seconds=self.info.timeout_s))
        except RuntimeError as e:  # torch's bare "Wait timeout": name who is silent
            raise reshard_err.error(
                reshard_err.Status.TIMEOUT,
                "train rank %d: refit %d: rank(s) 0 (trainer rank 0, the control-plane "
                "driver) did not start the update on the inference side within %.1f s "
                "(dead or stalled); nothing was sent" % (self.rank, self.version,
                                                         self.info.timeout_s)) from e
        failure = json.loads(self.store.get(key))["error"]
        if failure:
            raise reshard_err.error(
                reshard_err.Status.TRANSPORT,
                "train rank %d: refit %d: trainer rank 0 could not start the update on the "
                "inference side (nothing was sent): %s" % (self.rank, self.version, failure))

    def _bind(self) -> List[str]:
        """Bind the plan's source to the rank's live shards (init, and each new plan of
        a moved EPLB map): the problems found."""
        params, buffers = self.source.named()
        self.bound = bind_live(self.plan.src, self.rank, "train", params, buffers,
                               device_of(self.info.transport), False)
        return self.bound.problems

    def _tell_peers(self, e: Exception, status: reshard_err.Status, what: str) -> None:
        """Raise ``e`` (a failure before this refit moved anything) after telling the
        peers (fail_peers), as a ReshardError of ``status`` naming ``what`` and this rank
        where it is not one already."""
        err = e if isinstance(e, ReshardError) else reshard_err.error(
            status, "train rank %d: refit %d: %s: %s: %s" % (self.rank, self.version, what,
                                                            type(e).__name__, e))
        fail_peers(self.comm, err, self.info.timeout_s)
        if err is e:
            raise e
        raise err from e

    def _send(self) -> None:
        if self.info.eplb:  # the engines' maps of this refit (worker.follow_eplb)
            try:
                if follow_eplb(self, self.version):
                    problems = self._bind()
                    if problems:
                        raise reshard_err.error(
                            reshard_err.Status.BUFFER, "train rank %d: refit %d, EPLB map "
                            "moved: %s" % (self.rank, self.version, "; ".join(problems)))
            except Exception as e:  # noqa: BLE001 - every failure here is told to the peers
                self._tell_peers(e, reshard_err.Status.CONFIG, "following the EPLB maps failed")
        try:
            src = self.bound.current(*self.source.named())
        except Exception as e:  # noqa: BLE001 - a weight the refit cannot send exactly
            self._tell_peers(e, reshard_err.Status.BUFFER, "reading the live weights failed")
        self.plan.execute(self.comm, src=src, dst=None)

    def shutdown(self) -> None:
        """Close the comm and the plan (a later trainer_init of this process makes its
        own; left open, it would count among this thread's plans of those inputs)."""
        if self.comm is not None:
            self.comm.close()
            self.comm = None
        close_plan(self)


def _close_quietly(clients: List[Any]) -> None:
    """finish_weight_update() without a version on each of ``clients`` (sessions a
    failed refit left open), errors dropped: the refit's own error is the one raised."""
    for c in clients:
        try:
            c.finish_weight_update()
        except Exception:  # noqa: BLE001
            pass


def _fsdp_spec(train: Any) -> bool:
    try:
        return train_convention(str(train)) == "fsdp"
    except ReshardError:
        return False  # planning names the bad spec


def rank_local_source(source: Any, rank: int, fsdp: bool = False) -> Tuple[Any, str]:
    """(MegatronChunks, "") for a source holding this rank's own shards by the
    layout's names (MegatronSource, MegatronChunks, a module or a list of them);
    with ``fsdp`` (an FSDP2 train spec), (FSDPModule, "") for FSDPModule or the FSDP2
    module itself; or (None, why) for anything else: vLLM's ModuleSource and other
    WeightSources yield full HF tensors, which this backend does not plan
    (docs/vllm-reference.md: refused, not planned as a fully replicated source)."""
    if source is None:
        return None, ("trainer rank %d: no source (pass %s: this rank's own shards)"
                      % (rank, "its FSDP2 module" if fsdp else
                         "MegatronSource(model_chunks)"))
    if fsdp:
        if isinstance(source, FSDPModule):
            return source, ""
        if _is_module(source):
            return FSDPModule(source), ""
        # vLLM's ModuleSource over the FSDP2 module (base.py at 142e770e keeps it as
        # _module): its full tensors are not used, the module's local shards are
        inner = getattr(source, "_module", None)
        if type(source).__name__ == "ModuleSource" and _is_module(inner):
            return FSDPModule(inner), ""
        return None, ("trainer rank %d: source %s is not a module: an FSDP2 train spec "
                      "takes the rank's FSDP2 module (its parameters are DTensors)"
                      % (rank, type(source).__name__))
    if isinstance(source, FSDPModule):
        return None, ("trainer rank %d: an FSDPModule source with a Megatron train spec: "
                      "use fsdp=N in the train spec" % rank)
    chunks = getattr(source, "megatron_chunks", None)
    if isinstance(chunks, MegatronChunks):
        return chunks, ""
    if isinstance(source, MegatronChunks):
        return source, ""
    if _is_module(source) or (isinstance(source, (list, tuple)) and source
                              and all(_is_module(m) for m in source)):
        return as_chunks(source), ""
    return None, ("trainer rank %d: source %s has no rank-local shards (it offers full "
                  "HF-format tensors through metadata()/iteration); reshard moves each "
                  "rank's own Megatron shards: pass MegatronSource(model_chunks)"
                  % (rank, type(source).__name__))


def _is_module(x: Any) -> bool:
    """A model chunk: a torch module, or anything holding its tensors as one does
    (named_parameters / named_buffers)."""
    return callable(getattr(x, "named_parameters", None))


def megatron_rank_problems(rank: int) -> List[str]:
    """The explicit trainer ``rank`` against Megatron's own parallel state, where
    Megatron is importable and initialized (megatron.core.parallel_state): the
    layout numbers trainer ranks tp fastest, then cp, dp, pp (Megatron's default
    order), so rank % TP must be this process's tensor-parallel rank and
    rank // (world / PP) its pipeline rank. Without Megatron nothing is checked (the
    caller's rank must then be that rank: docs/vllm.md)."""
    try:
        from megatron.core import parallel_state as ps  # type: ignore[import-not-found]
    except ImportError:
        return []
    if not ps.model_parallel_is_initialized():
        return []
    tp, tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    pp, pp_rank = (ps.get_pipeline_model_parallel_world_size(),
                   ps.get_pipeline_model_parallel_rank())
    import torch.distributed as dist
    world = dist.get_world_size()
    want_tp, want_pp = rank % tp, rank // max(1, world // pp)
    if (want_tp, want_pp) == (tp_rank, pp_rank):
        return []
    return ["trainer rank %d: Megatron's parallel state says tp_rank %d, pp_rank %d; the "
            "layout's rank %d is tp_rank %d, pp_rank %d (rank= must be the Megatron rank, "
            "tp fastest, then cp, dp, pp)" % (rank, tp_rank, pp_rank, rank, want_tp,
                                              want_pp)]


__all__ = ["ReshardTrainer", "ReshardTrainerInitInfo", "megatron_rank_problems",
           "rank_local_source"]
