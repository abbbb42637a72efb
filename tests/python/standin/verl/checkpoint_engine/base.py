"""Revision followed: dongha-yoon/verl d6f2c522 (checked against verl-project/verl 1dda039b).
verl/checkpoint_engine/base.py at dongha-yoon/verl d6f2c522 (stand-in; see
verl/__init__.py): the registry, the CheckpointEngine ABC with its abstract methods
and signatures, and the rollout-side CheckpointEngineWorker's engine construction and
update_weights (without Ray's decorators). CheckpointEngineManager's per-sync
sequence is in verl/_manager.py (it needs Ray in verl)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generator

import torch

from verl.utils.import_utils import import_external_libs


@dataclass
class TensorMeta:
    name: str
    shape: torch.Size
    dtype: torch.dtype
    chunk_offset: int
    chunk_size: int
    offset: int


class CheckpointEngineRegistry:
    """Checkpoint engine registry."""

    _registry: dict[str, type["CheckpointEngine"]] = {}

    def register(backend: str):
        def wrapper(cls: type["CheckpointEngine"]):
            CheckpointEngineRegistry._registry[backend] = cls
            return cls

        return wrapper

    @classmethod
    def get(cls, backend: str) -> type["CheckpointEngine"]:
        return cls._registry[backend]

    @classmethod
    def new(cls, backend: str, *args, **kwargs) -> "CheckpointEngine":
        if backend not in cls._registry:
            raise ValueError(f"Checkpoint engine {backend} not registered")
        return cls._registry[backend](*args, **kwargs)


class CheckpointEngine(ABC):
    """Transfers weights from actor to rollout (verl's ABC)."""

    # How receive_weights yields weights to the server adapter:
    #   "named_tensors"            -- (name, tensor) pairs, bucketed into full-tensor loads.
    #   "rank_local_named_tensors" -- (name, tensor) pairs already sharded for each destination rank.
    #   "delta_flush"              -- per-flush sparse payloads applied via a custom loader.
    wire_format = "named_tensors"

    @classmethod
    def is_master_rank(cls, trainer_rank: int, **engine_kwargs) -> bool:
        return trainer_rank == 0

    @abstractmethod
    def prepare(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    @abstractmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        raise NotImplementedError

    @abstractmethod
    def init_process_group(self, **kwargs):
        raise NotImplementedError

    @abstractmethod
    def finalize(self):
        raise NotImplementedError

    @abstractmethod
    async def send_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        global_steps: int | None = None,
    ):
        raise NotImplementedError

    @abstractmethod
    async def receive_weights(
        self,
        global_steps: int | None = None,
    ) -> Generator[tuple[str, torch.Tensor], None, None]:
        raise NotImplementedError


class CheckpointEngineWithCache(CheckpointEngine):
    @abstractmethod
    async def get_weights(self) -> Generator[tuple[str, torch.Tensor], None, None]:
        raise NotImplementedError


@CheckpointEngineRegistry.register("naive")
class ColocatedCheckpointEngine(CheckpointEngine):
    def __init__(self, bucket_size: int, is_master: bool = False) -> None:
        self.bucket_size = bucket_size
        self.is_master = is_master

    def prepare(self):
        raise NotImplementedError

    def init_process_group(self, **kwargs):
        raise NotImplementedError

    def finalize(self):
        raise NotImplementedError

    @classmethod
    def build_topology(cls, *args, **kwargs):
        raise NotImplementedError

    def send_weights(self, weights, global_steps: int | None = None):
        self.weights = weights

    def receive_weights(self, global_steps: int | None = None):
        yield from self.weights
        self.weights = None


class CheckpointEngineWorker:
    """The rollout side's engine host, beside the inference engine's worker on the
    same GPU (verl's is a Ray Worker). ``rollout_config``: ``name``,
    ``checkpoint_engine`` (``backend``, ``engine_kwargs``, ``custom_backend_module``,
    ``update_weights_bucket_megabytes``)."""

    def __init__(self, rollout_config: Any, model_config: Any = None,
                 server_adapter: Any = None, *args, **kwargs) -> None:
        self.rollout_config = rollout_config
        self.model_config = model_config
        self.server_adapter = server_adapter
        ce = rollout_config.checkpoint_engine
        backend = ce.backend
        if backend == "nccl_m2n" and rollout_config.name != "vllm":
            raise NotImplementedError("checkpoint_engine.backend='nccl_m2n' currently requires rollout.name='vllm'")
        bucket_size = ce.update_weights_bucket_megabytes << 20
        engine_kwargs = dict(ce.engine_kwargs.get(backend, {}))
        import_external_libs(ce.custom_backend_module or None)
        self.checkpoint_engine: CheckpointEngine = CheckpointEngineRegistry.new(
            backend, bucket_size=bucket_size, **engine_kwargs)

    async def update_weights(self, global_steps: int = None):
        weights = self.checkpoint_engine.receive_weights(global_steps=global_steps)
        await self.server_adapter.update_weights(
            weights,
            global_steps=global_steps,
            wire_format=getattr(self.checkpoint_engine, "wire_format", "named_tensors"),
        )

    def execute_checkpoint_engine(self, method: str, *args, **kwargs):
        return getattr(self.checkpoint_engine, method)(*args, **kwargs)
