"""Revision followed: dongha-yoon/verl d6f2c522 (checked against verl-project/verl 1dda039b).
verl/workers/rollout/base.py's BaseRollout (stand-in): what a server adapter
implements."""

from abc import ABC, abstractmethod


class BaseRollout(ABC):
    def __init__(self, config, model_config, device_mesh, *args, **kwargs):
        self.config = config
        self.model_config = model_config
        self.device_mesh = device_mesh

    @abstractmethod
    async def resume(self, tags: list[str]):
        pass

    @abstractmethod
    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs):
        pass

    @abstractmethod
    async def release(self):
        pass
