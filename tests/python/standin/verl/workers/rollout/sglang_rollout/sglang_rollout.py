"""Revision followed: verl-project/verl 120aa35d (main), verl/workers/rollout/sglang_rollout/
sglang_rollout.py: verl's SGLang ServerAdapter (stand-in), as the rollout's
CheckpointEngineWorker calls it. ``update_weights(weights, global_steps, wire_format)``
iterates the engine's generator: every (name, tensor) it yields is a full HF tensor
that verl packs into buckets of update_weights_bucket_megabytes and posts to SGLang's
update_weights_from_tensor (SGLang's load_weights slices it); that load is not
modelled here (NotImplementedError naming the tensor). "delta_flush" (verl's delta
loader) is not modelled either. Then the server's TP-rank-0 adapter flushes the cache
and sets the server's global_steps. Only TP rank 0 of a server talks to it (``_engine``,
verl's AsyncHttpServerAdapter: here the object given as ``server``, with
post(path, body)); the other ranks' adapters hold none. release() / resume() are
SGLang's release_memory_occupation / resume_memory_occupation: not modelled (the
weights stay where they are)."""

from __future__ import annotations

from ..base import BaseRollout
from ..vllm_rollout import _aiter


class ServerAdapter(BaseRollout):
    def __init__(self, server=None, config=None, model_config=None, device_mesh=None,
                 replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        self._engine = server  # the server's TP rank 0 only
        self.replica_rank = replica_rank
        self.global_steps = None
        self.loaded = 0

    async def update_weights(self, weights, global_steps: int = None,
                             wire_format: str = "named_tensors", **kwargs):
        if wire_format == "delta_flush":
            raise NotImplementedError("stand-in: verl's delta loader is not modelled")
        async for name, _t in _aiter(weights):
            raise NotImplementedError("stand-in: full-tensor loads through SGLang's "
                                      "update_weights_from_tensor are not modelled (%r)" % name)
        self.loaded = 0
        if self._engine is not None and global_steps is not None:
            self.global_steps = global_steps  # server_actor.set_global_steps

    async def release(self):
        return None

    async def resume(self, tags: list[str]):
        return None
