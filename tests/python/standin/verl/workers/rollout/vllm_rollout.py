"""Revision followed: dongha-yoon/verl d6f2c522 (checked against verl-project/verl 1dda039b).
verl's vLLM ServerAdapter (stand-in), with the vLLM worker's model in the same
process instead of behind CUDA IPC. ``update_weights`` with wire format
"rank_local_named_tensors" loads each yielded tensor into the worker's parameter of
that name without TP slicing (dongha-yoon/verl d6f2c522, PR #8087's
nccl_m2n_weight_loader: the tensors are already this rank's): same shape and dtype or
an error naming it. ``release()`` frees the weights (vLLM's sleep) and
``resume(["weights"])`` maps new memory for them (wake_up): the values are gone until
the next update. ``global_steps`` of the last update is kept, as the server's
set_global_steps."""

from __future__ import annotations

import torch

from .base import BaseRollout

WIRE_FORMATS = ("named_tensors", "rank_local_named_tensors")


class ServerAdapter(BaseRollout):
    def __init__(self, model: torch.nn.Module, config=None, model_config=None):
        super().__init__(config, model_config, None)
        self.model = model
        self.global_steps = None
        self.loaded = 0  # tensors loaded by the last update

    async def update_weights(self, weights, global_steps: int = None,
                             wire_format: str = "named_tensors", **kwargs):
        assert wire_format in WIRE_FORMATS, wire_format
        params = dict(self.model.named_parameters())
        n = 0
        async for name, t in _aiter(weights):
            if wire_format == "named_tensors":
                raise NotImplementedError("full-tensor loads are vLLM's load_weights (not modelled)")
            p = params.get(name)
            if p is None or p.shape != t.shape or p.dtype != t.dtype:
                raise ValueError("vLLM worker: no parameter %r of shape %s, %s" % (name, tuple(t.shape), t.dtype))
            with torch.no_grad():
                p.copy_(t)
            n += 1
        self.loaded = n
        if global_steps is not None:
            self.global_steps = global_steps

    async def release(self):
        for m in self.model.modules():
            for leaf, p in list(m._parameters.items()):
                m._parameters[leaf] = torch.nn.Parameter(torch.empty(0, dtype=p.dtype),
                                                         requires_grad=False)
                m._parameters[leaf]._shape = tuple(p.shape)

    async def resume(self, tags: list[str]):
        if "weights" not in tags:
            return
        for m in self.model.modules():
            for leaf, p in list(m._parameters.items()):
                shape = getattr(p, "_shape", None)
                if shape is not None:  # new memory, not the old values
                    m._parameters[leaf] = torch.nn.Parameter(
                        torch.full(shape, float("nan"), dtype=p.dtype), requires_grad=False)


async def _aiter(weights):
    if hasattr(weights, "__aiter__"):
        async for x in weights:
            yield x
    else:
        for x in weights:
            yield x
