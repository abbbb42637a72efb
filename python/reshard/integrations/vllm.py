"""The vLLM shell: a ``reshard`` weight-transfer backend for vLLM's pluggable weight
transfer (vllm/distributed/weight_transfer/), worker side and trainer side.

Followed upstream (vllm-project/vllm): base.py (WeightTransferEngine,
TrainerWeightTransferEngine, VLLMWeightSyncClient, TrainerInitInfo), factory.py
(WeightTransferEngineFactory.register_engine(name, module_path, class_name),
create_engine(config, vllm_config, device, model); WeightTransferTrainerFactory),
nccl_engine.py (the call sequence: rank 0 runs init_weight_transfer_engine and
update_weights on a side thread beside its own collective). Read at base.py
aa1cd966 and factory.py 20a3d5e2 (worker ABC and registry), nccl_engine.py 71364e12,
and their later stored revisions with the stateful trainer engine (docs/vllm.md).

vLLM is imported only when a class of this module is first used:
ReshardWeightTransferEngine and ReshardTrainerEngine are built then, on vLLM's own
base classes, from the engine-independent WorkerCore and ReshardTrainer."""

from __future__ import annotations

import inspect
from typing import Any, Dict, List

from .post_load import Refused, Rerun, Rule, staged_rules
from .trainer import ReshardTrainer, ReshardTrainerInitInfo
from .worker import ReshardInitInfo, ReshardUpdateInfo, WorkerCore

BACKEND = "reshard"
_BUILT: Dict[str, type] = {}

FLASHINFER_MOE = ("flashinfer_cutlass", "flashinfer_trtllm")


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

        def post_load_rules(self, declared: List[str], live: Dict[str, Any],
                            info: ReshardInitInfo) -> List[Rule]:
            dtype = getattr(self.vllm_model_config, "dtype", None)
            return vllm_post_load_rules(self.model, declared, live, info, dtype)

        def set_weight_update_target(self, model: Any, model_config: Any) -> None:
            """The plan was bound to the model of init_transfer_engine: another target
            (a draft model) is refused rather than written with the wrong names."""
            if model is not self.model:
                raise ValueError("reshard: the refit is bound to the model it was "
                                 "initialized with; a draft model needs its own backend "
                                 "instance")

        def reset_weight_update_target(self) -> None:
            """Nothing to reset (the target never changes)."""

        @staticmethod
        def trainer_send_weights(*_: Any, **__: Any) -> None:
            raise NotImplementedError("reshard: use ReshardTrainerEngine.trainer_init(...) "
                                      "and send_weights() on every trainer rank")

    ReshardWeightTransferEngine.__module__ = __name__
    return ReshardWeightTransferEngine


def _trainer_class() -> type:
    from vllm.distributed.weight_transfer.base import TrainerWeightTransferEngine

    class ReshardTrainerEngine(ReshardTrainer, TrainerWeightTransferEngine):
        """vLLM trainer-side backend "reshard": ReshardTrainer on vLLM's base class."""

        init_info_cls = ReshardTrainerInitInfo

        def __init__(self, config: Any = None, *, client: Any, source: Any = None,
                     is_sender: bool = True) -> None:
            if "config" in inspect.signature(TrainerWeightTransferEngine.__init__).parameters:
                TrainerWeightTransferEngine.__init__(self, config, client=client,
                                                     source=source, is_sender=is_sender)
            else:  # the older trainer API (no config)
                TrainerWeightTransferEngine.__init__(self, client=client, source=source,
                                                     is_sender=is_sender)
            ReshardTrainer.__init__(self, config, client=client, source=source,
                                    is_sender=is_sender)

    ReshardTrainerEngine.__module__ = __name__
    return ReshardTrainerEngine


_MAKERS = {"ReshardWeightTransferEngine": _worker_class, "ReshardTrainerEngine": _trainer_class}


def __getattr__(name: str) -> Any:
    """ReshardWeightTransferEngine / ReshardTrainerEngine, built on first use (this is
    what vLLM's lazy registry calls: getattr(module, class_name))."""
    make = _MAKERS.get(name)
    if make is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    if name not in _BUILT:
        _BUILT[name] = make()
    return _BUILT[name]


# ReshardWeightTransferEngine and ReshardTrainerEngine are attributes too (built by
# __getattr__ on first use, importing vLLM), left out of __all__ so that a star import
# does not import vLLM.
__all__ = ["BACKEND", "ReshardInitInfo", "ReshardTrainerInitInfo", "ReshardUpdateInfo",
           "plugin", "register", "vllm_post_load_rules"]
