"""Stand-in of vllm/distributed/weight_transfer/base.py at new-TonyWang/vllm@142e770e
(see ../../__init__.py): the names and signatures of that revision, the bodies
reduced to what a CPU test needs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Generic, List, Optional, Protocol, Tuple, TypeVar, \
    Union, runtime_checkable

TInitInfo = TypeVar("TInitInfo")
TUpdateInfo = TypeVar("TUpdateInfo")
TTrainerInitInfo = TypeVar("TTrainerInitInfo")

# what update_weights carries: one dict for every worker, or one dict per worker
# (resolved by the worker's data_parallel_index)
WeightTransferUpdatePayload = Union[Dict[str, Any], List[Dict[str, Any]]]


def _outer_index(name: str) -> Optional[Tuple[str, int]]:
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[:i]), int(p)
    return None


def layerwise_groups(names: List[str]) -> List[List[str]]:
    """One group per outermost indexed block; un-indexed names before the first
    indexed one form a leading group, the rest a trailing one."""
    head: List[str] = []
    tail: List[str] = []
    blocks: Dict[Tuple[str, int], List[str]] = {}
    for n in names:
        key = _outer_index(n)
        if key is None:
            (tail if blocks else head).append(n)
        else:
            blocks.setdefault(key, []).append(n)
    prefixes: Dict[str, int] = {}
    for p, _ in blocks:
        prefixes.setdefault(p, len(prefixes))
    ordered = sorted(blocks, key=lambda k: (prefixes[k[0]], k[1]))
    return ([head] if head else []) + [blocks[k] for k in ordered] + ([tail] if tail else [])


def materialize_full_tensor(tensor: Any) -> Any:
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


@dataclass(frozen=True)
class ParamMeta:
    name: str
    dtype: Any
    shape: Tuple[int, ...]


class WeightSource(ABC):
    @abstractmethod
    def metadata(self) -> List[ParamMeta]: ...

    @abstractmethod
    def __iter__(self) -> Iterator[Tuple[str, Any]]: ...

    def held_names(self) -> "Collection[str] | None":
        return None

    def groups(self) -> List[List[str]]:
        groups = layerwise_groups([m.name for m in self.metadata()])
        held = self.held_names()
        if held is None:
            return groups
        held = set(held)
        return [g for g in groups if any(n in held for n in g)]

    def iter_groups(self) -> Iterator[Tuple[List[str], List[Any]]]:
        it = iter(self)
        for group in self.groups():
            got = [next(it) for _ in group]
            for (n, _), want in zip(got, group):
                if n != want:
                    raise RuntimeError("WeightSource yielded %r where metadata() has %r"
                                       % (n, want))
            yield [n for n, _ in got], [t for _, t in got]


class ModuleSource(WeightSource):
    def __init__(self, module: Any) -> None:
        self._module = module

    def metadata(self) -> List[ParamMeta]:
        return [ParamMeta(n, p.dtype, tuple(p.shape)) for n, p in self._module.named_parameters()]

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        for n, p in self._module.named_parameters():
            yield n, materialize_full_tensor(p)


@dataclass
class WeightTransferInitInfo(ABC):  # noqa: B024
    pass


@dataclass
class TrainerInitInfo:
    backend: ClassVar[str]
    rank: int = field(kw_only=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not getattr(cls, "backend", None):
            raise TypeError("%s must set a class-level backend string" % cls.__name__)

    @property
    def is_sender(self) -> bool:
        return self.rank == 0


@dataclass
class WeightTransferUpdateInfo(ABC):  # noqa: B024
    pass


@dataclass
class WeightTransferInitRequest:
    init_info: Dict[str, Any] = field(default_factory=dict)


@dataclass
class WeightTransferUpdateRequest:
    update_info: WeightTransferUpdatePayload = field(default_factory=dict)


class WeightTransferEngine(ABC, Generic[TInitInfo, TUpdateInfo]):
    init_info_cls: type
    update_info_cls: type
    supports_draft_weight_update: bool = True
    defers_processing: bool = False

    def drain_pending(self) -> None:
        """No-op unless the engine defers processing."""

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        self.config = config
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.model_config = vllm_config.model_config
        self.device = device
        self.model = model
        self._default_model_config = self.model_config
        self._default_model = model

    def set_weight_update_target(self, model: Any, model_config: Any) -> None:
        self.model = model
        self.model_config = model_config

    def reset_weight_update_target(self) -> None:
        self.model = self._default_model
        self.model_config = self._default_model_config

    def parse_init_info(self, init_dict: Dict[str, Any]) -> Any:
        try:
            return self.init_info_cls(**init_dict)
        except TypeError as e:
            raise ValueError("Invalid init_info for %s: %s" % (type(self).__name__, e)) from e

    def parse_update_info(self, update_dict: Dict[str, Any]) -> Any:
        try:
            return self.update_info_cls(**update_dict)
        except TypeError as e:
            raise ValueError("Invalid update_info for %s: %s" % (type(self).__name__, e)) from e

    @abstractmethod
    def init_transfer_engine(self, init_info: Any) -> None: ...

    @abstractmethod
    def start_weight_update(self) -> None: ...

    @abstractmethod
    def finish_weight_update(self) -> None: ...

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        self.receive_weights(self.parse_update_info(update_info))
        # vLLM synchronizes the accelerator here (torch.accelerator: torch >= 2.6)

    @abstractmethod
    def receive_weights(self, update_info: Any) -> None: ...

    @abstractmethod
    def shutdown(self) -> None: ...


@runtime_checkable
class VLLMWeightSyncClient(Protocol):
    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None: ...

    def start_weight_update(self) -> None: ...

    def update_weights(self, update_info: WeightTransferUpdatePayload) -> None: ...

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None: ...


class TrainerWeightTransferEngine(ABC, Generic[TTrainerInitInfo]):
    init_info_cls: type

    def __init__(self, *, client: Any, source: Optional[WeightSource] = None,
                 is_sender: bool = True) -> None:
        self.is_sender = is_sender
        self.client = client
        self.source = source

    @classmethod
    @abstractmethod
    def trainer_init(cls, init_info: Any, *, client: Any,
                     source: Optional[WeightSource] = None) -> Any: ...

    @abstractmethod
    def send_weights(self) -> None: ...

    def shutdown(self) -> None:
        pass
