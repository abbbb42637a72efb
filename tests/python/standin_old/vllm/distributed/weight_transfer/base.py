"""Stand-in of vllm/distributed/weight_transfer/base.py: the worker-side
WeightTransferEngine (constructed with config, vllm_config, device, model; dicts
parsed into the engine's init_info_cls / update_info_cls; update_weights = parse,
receive_weights, synchronize), the trainer-side TrainerWeightTransferEngine
(trainer_init classmethod with keyword-only client and source, send_weights,
shutdown), TrainerInitInfo (class-level backend, keyword-only rank, is_sender) and
the four-method VLLMWeightSyncClient protocol."""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Protocol, runtime_checkable


class WeightTransferEngine(ABC):
    init_info_cls: type
    update_info_cls: type

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        self.config = config
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.model_config = vllm_config.model_config
        self.device = device
        self.model = model

    def parse_init_info(self, init_dict: Dict[str, Any]) -> Any:
        try:
            return self.init_info_cls(**init_dict)
        except TypeError as e:
            raise ValueError(f"Invalid init_info for {self.__class__.__name__}: {e}") from e

    def parse_update_info(self, update_dict: Dict[str, Any]) -> Any:
        try:
            return self.update_info_cls(**update_dict)
        except TypeError as e:
            raise ValueError(f"Invalid update_info for {self.__class__.__name__}: {e}") from e

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


@dataclass
class TrainerInitInfo:
    backend: ClassVar[str]
    rank: int = field(kw_only=True)

    @property
    def is_sender(self) -> bool:
        return self.rank == 0


@runtime_checkable
class VLLMWeightSyncClient(Protocol):
    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None: ...

    def start_weight_update(self) -> None: ...

    def update_weights(self, update_info: Any) -> None: ...

    def finish_weight_update(self, weight_version: Any = None) -> None: ...


class TrainerWeightTransferEngine(ABC):
    init_info_cls: type

    def __init__(self, *, client: Any, source: Any = None, is_sender: bool = True) -> None:
        self.is_sender = is_sender
        self.client = client
        self.source = source

    @classmethod
    @abstractmethod
    def trainer_init(cls, init_info: Any, *, client: Any, source: Any = None) -> Any: ...

    @abstractmethod
    def send_weights(self) -> None: ...

    def shutdown(self) -> None:
        pass
