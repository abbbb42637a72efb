"""The vLLM shell: a ``reshard`` weight-transfer backend for vLLM's pluggable weight
transfer (vllm/distributed/weight_transfer/), worker side and trainer side.

Followed upstream: vllm/distributed/weight_transfer/base.py at new-TonyWang/vllm
142e770e (the newest stored revision: WeightSource with held_names(), list payloads,
defers_processing, a trainer engine without config, finish_weight_update with a
weight_version), the worker's failure path (abort_weight_update, then
reset_weight_update_target) and factory.py's registries; the in-tree nccl_m2n
trainer (m2n_trainer.py at vllm-project/vllm 4189be05) for how a trainer takes
rank-local shards from its source (a source subclass that carries them, any other
source refused by name). tests/python/standin models that revision; docs/vllm-reference.md
says what ran.

vLLM is imported only when a class of this module is first used:
ReshardWeightTransferEngine, ReshardTrainerEngine and MegatronSource are built then,
on vLLM's own base classes, from the engine-independent WorkerCore, ReshardTrainer
and MegatronChunks."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import eplb
from .post_load import Refused, Rerun, Rule, staged_rules
from .megatron import MegatronChunks
from .trainer import ReshardTrainer, ReshardTrainerInitInfo
from .worker import ReshardInitInfo, ReshardUpdateInfo, WorkerCore

BACKEND = "reshard"
_BUILT: Dict[str, type] = {}

FLASHINFER_MOE = ("flashinfer_cutlass", "flashinfer_trtllm")
# vLLM's UnquantizedMoeBackend members whose w13 is the FusedMoE layer's [gate; up]
WRITABLE_MOE = ("TRITON", "BATCHED_TRITON")


def register() -> None:
    """Register the backend with vLLM (idempotent): WeightTransferEngineFactory and,
    where this vLLM has one, WeightTransferTrainerFactory, both lazily by module
    path. Needed in every process that creates engines, the workers included: the
    installed package's ``vllm.general_plugins`` entry point (plugin()) does it in
    each vLLM process; from a source tree, call it. Then ``--weight-transfer-config
    '{"backend": "reshard"}'``."""
    from vllm.distributed.weight_transfer import factory
    worker = factory.WeightTransferEngineFactory
    if BACKEND not in worker._registry:
        worker.register_engine(BACKEND, __name__, "ReshardWeightTransferEngine")
    trainer = getattr(factory, "WeightTransferTrainerFactory", None)
    if trainer is not None and BACKEND not in trainer._registry:
        trainer.register_engine(BACKEND, __name__, "ReshardTrainerEngine")


def plugin() -> None:
    """The ``vllm.general_plugins`` entry point of the installed package: register()
    when this vLLM has pluggable weight transfer; with an older vLLM, nothing (the
    backend is then not offered, and selecting it fails in vLLM naming the backends
    it has)."""
    import importlib.util
    try:
        found = importlib.util.find_spec("vllm.distributed.weight_transfer.factory")
    except ImportError:  # no vllm.distributed at all
        found = None
    if found is not None:
        register()


def vllm_post_load_rules(model: Any, declared: List[str], live: Dict[str, Any],
                         info: ReshardInitInfo, act_dtype: Any) -> List[Rule]:
    """The parameters vLLM holds in a post-load form, for the backend in use:
    - Nemotron-H ``mixer.A`` = -exp(A_log) (fp32), Qwen3-Next ``linear_attn.norm.weight``
      (Megatron's out_norm + 1) and ``linear_attn.A_log`` (fp32), GLM-4.5
      ``mlp.gate.weight`` (fp32): staged (post_load.py).
    - MLA: an attention module keeping ``W_UK_T`` / ``W_UV`` (derived from
      ``kv_b_proj``, mla_attention.py): its process_weights_after_loading(act_dtype)
      runs again after every refit; without one, the kv_b_proj parameter is refused.
    - FlashInfer CUTLASS/TRTLLM MoE (``moe_backend``): w13 is swapped to [up; gate]
      and re-blocked after loading (fused_moe/oracle/unquantized.py): every
      ``w13_weight`` is refused by name."""
    rules: List[Rule] = list(staged_rules(declared, live))
    by_id = {id(t): n for n, t in live.items()}
    for mod_name, m in model.named_modules():
        if not (hasattr(m, "W_UK_T") or hasattr(m, "W_UV")):
            continue
        kv_b = getattr(m, "kv_b_proj", None)
        w = getattr(kv_b, "weight", None)
        name = by_id.get(id(w), (mod_name + ".kv_b_proj.weight").lstrip("."))
        hook = getattr(m, "process_weights_after_loading", None)
        if callable(hook):
            rules.append(Rerun(name, mod_name + ".process_weights_after_loading",
                               lambda hook=hook: hook(act_dtype)))
        else:
            rules.append(Refused(name, "MLA module %r keeps W_UK_T/W_UV derived from it and "
                                 "has no process_weights_after_loading to rerun" % mod_name))
    if info.moe_backend in FLASHINFER_MOE:
        rules += [Refused(n, "the %s MoE backend swaps w13 to [up; gate] and re-blocks it "
                          "after loading (not modelled: use the triton backend)"
                          % info.moe_backend) for n in declared if n.endswith("w13_weight")]
    return rules


def vllm_engine_problems(vllm_config: Any, model: Any, follow_eplb: bool = False) -> List[str]:
    """What a vLLM engine runs that this backend does not write yet, each named (told
    on every rank at init, so nothing lands in the wrong place silently):
    - EPLB (``parallel_config.enable_eplb``) unless the init info follows it
      (``follow_eplb``, ReshardInitInfo.eplb): vLLM rearranges experts at run time,
      per engine, and a plan made with one map writes stale slots after the next
      rearrangement; and the converse, eplb=True for an engine without EPLB;
    - LoRA (``vllm_config.lora_config``, or live parameters named
      ``...base_layer.<param>``): the wrapped layers' names are not the layout's;
    - an unquantized MoE kernel other than Triton, read from the live layers
      (``quant_method.unquantized_backend``, vLLM's own choice, whatever the user
      said in ``moe_backend``): FlashInfer CUTLASS keeps w13 as [up; gate], TRTLLM
      re-blocks it, AITER shuffles it; the layout writes Triton's [gate; up]."""
    out: List[str] = []
    for mod_name, m in model.named_modules():
        backend = getattr(getattr(m, "quant_method", None), "unquantized_backend", None)
        name = getattr(backend, "name", backend)
        if backend is not None and name not in WRITABLE_MOE:
            out.append("%s.w13_weight: vLLM runs this MoE layer on its %s kernel, whose "
                       "w13 layout the refit does not write (it writes Triton's [gate; "
                       "up])" % (mod_name, name))
            break  # one layer names it: every MoE layer of an engine shares the choice
    enabled = bool(getattr(getattr(vllm_config, "parallel_config", None), "enable_eplb",
                           False))
    if enabled and not follow_eplb:
        out.append("the engine runs with --enable-eplb: vLLM moves experts between "
                   "slots at run time; set eplb=True in the init info (every rank) so "
                   "that each refit follows the engines' live maps (refused rather than "
                   "writing experts into stale slots)")
    elif follow_eplb and not enabled:
        out.append("the init info has eplb=True but the engine runs without "
                   "--enable-eplb (no live map to follow): leave eplb out")
    wrapped = [n for n, _ in model.named_parameters() if ".base_layer." in n]
    if getattr(vllm_config, "lora_config", None) is not None or wrapped:
        out.append("the engine runs with --enable-lora: its layers are wrapped (%s) and "
                   "the refit does not map base_layer names yet"
                   % (wrapped[0] if wrapped else "lora_config set"))
    return out


def vllm_eplb_map(model: Any) -> Optional[List[List[int]]]:
    """The engine's live EPLB map: one physical_to_logical row per MoE layer, in
    layer order (None: no layer has EPLB state). vLLM keeps no physical_to_logical
    row on its layers; each MoE layer holds its rows of EplbState's
    logical_to_physical_map [E, max replicas] (-1 padded) and logical_replica_count
    [E], views that EPLB's rearrangement updates in place: set by
    FusedMoE.set_eplb_state(moe_layer_idx, expert_load_view, logical_to_physical_map,
    logical_replica_count) as ``layer.eplb_state.<name>`` (vLLM 0.25: routed experts
    under a runner, fused_moe/layer.py) or ``layer.<name>`` (0.24), called by the
    model's MixtureOfExperts.set_eplb_state (models/interfaces.py). Raises
    ReshardError (CONFIG naming the layer) for rows that are no map (eplb.py)."""
    rows: Dict[int, List[int]] = {}
    for name, m in model.named_modules():
        state = getattr(m, "eplb_state", None)
        holder = state if getattr(state, "logical_to_physical_map", None) is not None else m
        l2p = getattr(holder, "logical_to_physical_map", None)
        count = getattr(holder, "logical_replica_count", None)
        found = re.search(r"(?:^|\.)layers\.(\d+)\.", name + ".")
        if l2p is None or count is None or found is None or not hasattr(l2p, "tolist"):
            continue
        layer = int(found.group(1))
        if layer not in rows:  # a runner and its routed experts may both hold it
            rows[layer] = eplb.physical_to_logical(l2p, count, name)
    return [rows[k] for k in sorted(rows)] if rows else None


def follow_worker_sleep() -> None:
    """vLLM's worker frees the weights at sleep level 2 and maps them back on wake_up
    in new memory at the same addresses, without telling its weight-transfer engine;
    the engine then holds none of the last refit's bytes, and a delta refit would
    send only what changed. Wrap the worker's sleep (once, where vLLM's gpu_worker is
    already imported: this runs in the worker process, from our engine's __init__)
    so that a level-2 sleep invalidates our engine's delta state: the next refit
    rewrites every element."""
    import sys
    mod = sys.modules.get("vllm.v1.worker.gpu_worker")
    worker = getattr(mod, "Worker", None)
    if worker is None or getattr(worker.sleep, "_reshard_follows", False):
        return
    original = worker.sleep

    def sleep(self: Any, level: int = 1) -> None:
        original(self, level)
        engine = getattr(self, "weight_transfer_engine", None)
        if level == 2 and isinstance(engine, WorkerCore):
            engine.invalidate_weights()
    sleep._reshard_follows = True  # type: ignore[attr-defined]
    worker.sleep = sleep


def _worker_class() -> type:
    from vllm.distributed.weight_transfer.base import WeightTransferEngine

    class ReshardWeightTransferEngine(WorkerCore, WeightTransferEngine):
        """vLLM worker-side backend "reshard": WorkerCore on vLLM's base class."""

        init_info_cls = ReshardInitInfo
        update_info_cls = ReshardUpdateInfo
        # the plan is bound to the model of init: no draft-model retarget
        supports_draft_weight_update = False

        def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
            WeightTransferEngine.__init__(self, config, vllm_config, device, model)
            self.setup(model, vllm_config.parallel_config, device)
            self.vllm_model_config = vllm_config.model_config
            follow_worker_sleep()

        def post_load_rules(self, declared: List[str], live: Dict[str, Any],
                            info: ReshardInitInfo) -> List[Rule]:
            dtype = getattr(self.vllm_model_config, "dtype", None)
            return vllm_post_load_rules(self.model, declared, live, info, dtype)

        def engine_problems(self, info: ReshardInitInfo) -> List[str]:
            return vllm_engine_problems(self.vllm_config, self.model, info.eplb)

        def live_eplb_map(self) -> Optional[List[List[int]]]:
            return vllm_eplb_map(self.model)

        @staticmethod
        def trainer_send_weights(*_: Any, **__: Any) -> None:
            raise NotImplementedError("reshard: use ReshardTrainerEngine.trainer_init(...) "
                                      "and send_weights() on every trainer rank")

    ReshardWeightTransferEngine.__module__ = __name__
    return ReshardWeightTransferEngine


def _trainer_class() -> type:
    from vllm.distributed.weight_transfer.base import TrainerWeightTransferEngine

    class ReshardTrainerEngine(ReshardTrainer, TrainerWeightTransferEngine):
        """vLLM trainer-side backend "reshard": ReshardTrainer on vLLM's base class
        (the newest trainer API: no config; trainer_init(init_info, *, client,
        source))."""

        init_info_cls = ReshardTrainerInitInfo

        def __init__(self, *, client: Any, source: Any = None,
                     is_sender: bool = True) -> None:
            TrainerWeightTransferEngine.__init__(self, client=client, source=source,
                                                 is_sender=is_sender)
            ReshardTrainer.__init__(self, client=client, source=source,
                                    is_sender=is_sender)

    ReshardTrainerEngine.__module__ = __name__
    return ReshardTrainerEngine


def _source_class() -> type:
    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class MegatronSource(WeightSource):
        """vLLM's WeightSource over one Megatron rank's model chunks: what this
        backend's trainer takes. Unlike vLLM's ModuleSource it yields this rank's
        own shards, by the names the refit's layout gives them (chunk c prefixed
        "c." under virtual pipeline stages), never full HF tensors: metadata() and
        iteration describe this rank's tensors (local shapes), held_names() is
        their names. The trainer plans from the layout, not from metadata()."""

        def __init__(self, chunks: Any) -> None:
            self.megatron_chunks = chunks if isinstance(chunks, MegatronChunks) \
                else MegatronChunks(chunks)

        def _params(self) -> Dict[str, Any]:
            return self.megatron_chunks.named()[0]

        def metadata(self) -> List[Any]:
            return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self._params().items()]

        def __iter__(self) -> Iterator[Tuple[str, Any]]:
            return iter(list(self._params().items()))

        def held_names(self) -> Optional[List[str]]:
            return list(self._params())

    MegatronSource.__module__ = __name__
    return MegatronSource


_MAKERS = {"ReshardWeightTransferEngine": _worker_class, "ReshardTrainerEngine": _trainer_class,
           "MegatronSource": _source_class}


def __getattr__(name: str) -> Any:
    """ReshardWeightTransferEngine / ReshardTrainerEngine, built on first use (this is
    what vLLM's lazy registry calls: getattr(module, class_name))."""
    make = _MAKERS.get(name)
    if make is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    if name not in _BUILT:
        _BUILT[name] = make()
    return _BUILT[name]


# ReshardWeightTransferEngine, ReshardTrainerEngine and MegatronSource are attributes too (built by
# __getattr__ on first use, importing vLLM), left out of __all__ so that a star import
# does not import vLLM.
__all__ = ["BACKEND", "ReshardInitInfo", "ReshardTrainerInitInfo", "ReshardUpdateInfo",
           "plugin", "register", "vllm_engine_problems", "vllm_post_load_rules"]
