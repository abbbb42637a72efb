"""Revision followed: new-TonyWang/vllm 142e770e57b802c8e2668e989c538aabb668b8c5.
Stand-in of vllm/distributed/weight_transfer/factory.py (the trainer registry as
the newest base describes it: dispatch on init_info.backend, no config): lazy registries by
(name, module path, class name) or class, a second registration of a name refused,
create_engine(config, vllm_config, device, model) selecting config.backend, and the
trainer registry whose trainer_init dispatches on init_info.backend."""

import importlib
from typing import Any, Callable, Dict


def _loader(module_path_or_cls: Any, class_name: Any) -> Callable[[], type]:
    if isinstance(module_path_or_cls, str):
        if class_name is None:
            raise ValueError("class_name is required when registering with module path")
        return lambda: getattr(importlib.import_module(module_path_or_cls), class_name)
    return lambda: module_path_or_cls


class WeightTransferEngineFactory:
    _registry: Dict[str, Callable[[], type]] = {}

    @classmethod
    def register_engine(cls, name: str, module_path_or_cls: Any, class_name: Any = None) -> None:
        if name in cls._registry:
            raise ValueError(f"Weight transfer engine '{name}' is already registered.")
        cls._registry[name] = _loader(module_path_or_cls, class_name)

    @classmethod
    def create_engine(cls, config: Any, vllm_config: Any, device: Any, model: Any) -> Any:
        if config.backend not in cls._registry:
            raise ValueError(f"Invalid weight transfer backend: {config.backend}. "
                             f"Available engines: {list(cls._registry)}")
        return cls._registry[config.backend]()(config, vllm_config, device, model)


class WeightTransferTrainerFactory:
    _registry: Dict[str, Callable[[], type]] = {}

    @classmethod
    def register_engine(cls, name: str, module_path_or_cls: Any, class_name: Any = None) -> None:
        if name in cls._registry:
            raise ValueError(f"Weight transfer trainer engine '{name}' is already registered.")
        cls._registry[name] = _loader(module_path_or_cls, class_name)

    @classmethod
    def trainer_init(cls, init_info: Any, *, client: Any, source: Any = None) -> Any:
        backend = init_info.backend
        if backend not in cls._registry:
            raise ValueError(f"Invalid weight transfer backend: {backend}. "
                             f"Available trainer engines: {list(cls._registry)}")
        return cls._registry[backend]().trainer_init(init_info, client=client, source=source)


WeightTransferEngineFactory.register_engine(
    "nccl", "vllm.distributed.weight_transfer.nccl_engine", "NCCLWeightTransferEngine")
