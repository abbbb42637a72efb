"""Revision followed: dongha-yoon/verl d6f2c522 (checked against verl-project/verl 1dda039b).
verl/workers/engine_workers.py's actor side (stand-in): how the actor worker builds
its checkpoint engine (custom_backend_module imported first, then
``CheckpointEngineRegistry.new(backend, is_master=backend_cls.is_master_rank(rank,
**engine_kwargs), bucket_size=..., **engine_kwargs)``), its update_weights for a
non-naive backend (``send_weights(self.actor.engine.get_per_tensor_param()[0],
global_steps=...)``) and execute_checkpoint_engine, which verl's manager dispatches
prepare / init_process_group / finalize through. ``TrainingEngine`` stands in for
verl's BaseEngine: ``module`` (Megatron: the list of model chunks; FSDP: the FSDP2
module) and get_per_tensor_param(), a generator of full HF tensors that counts what it
gathered."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Iterator, Tuple

from verl.checkpoint_engine.base import CheckpointEngineRegistry
from verl.utils.import_utils import import_external_libs


class TrainingEngine:
    def __init__(self, module: Any, full_tensors: Callable[[], Iterator[Tuple[str, Any]]]):
        self.module = module
        self.full_tensors = full_tensors
        self.gathered = 0  # full tensors a checkpoint engine pulled from the generator

    def get_per_tensor_param(self, **kwargs):
        def gen():
            for name, t in self.full_tensors():
                self.gathered += 1
                yield name, t
        return gen(), None


class ActorWorker:
    def __init__(self, config: Any, engine: TrainingEngine, rank: int) -> None:
        self.config = config
        self.actor = SimpleNamespace(engine=engine)
        ce = config.rollout.checkpoint_engine
        backend = ce.backend
        bucket_size = ce.update_weights_bucket_megabytes << 20
        engine_kwargs = dict(ce.engine_kwargs.get(backend, {}))
        import_external_libs(ce.custom_backend_module or None)
        backend_cls = CheckpointEngineRegistry.get(backend)
        self.checkpoint_engine = CheckpointEngineRegistry.new(
            backend,
            is_master=backend_cls.is_master_rank(rank, **engine_kwargs),
            bucket_size=bucket_size,
            **engine_kwargs,
        )

    async def update_weights(self, global_steps: int = None, mode: str = "auto"):
        effective_mode = mode if mode != "auto" else self.config.rollout.checkpoint_engine.backend
        if effective_mode == "naive":
            raise NotImplementedError("the naive (in-process hybrid) path is not modelled")
        per_tensor_param, _ = self.actor.engine.get_per_tensor_param()
        metrics = await self.checkpoint_engine.send_weights(per_tensor_param, global_steps=global_steps)
        return metrics or {}

    def execute_checkpoint_engine(self, method: str, *args, **kwargs):
        return getattr(self.checkpoint_engine, method)(*args, **kwargs)
