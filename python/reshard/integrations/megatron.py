"""The training side's tensors as a Megatron-Core rank holds them: its model chunks
(one, or a list under virtual pipeline parallelism), each unwrapped from the
DistributedDataParallel / Float16Module wrappers, their named_parameters() named as
the refit's layout names them (chunk c's names prefixed "c." when there are several
chunks), and the module buffers the layout declares (router.expert_bias).
Imports nothing of Megatron: a wrapper is recognised as Megatron's unwrap_model
recognises one, by the wrapped module it holds as ``.module``."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple


def unwrap(module: Any) -> Any:
    """``module`` with every wrapper that holds the real module as ``.module`` taken
    off (Megatron's DistributedDataParallel and Float16Module; torch's DDP), so that
    names carry no "module." prefix."""
    import torch
    while isinstance(getattr(module, "module", None), torch.nn.Module):
        module = module.module
    return module


class MegatronChunks:
    """The rank's model chunks: ``chunks`` is one module or a list (virtual pipeline
    stages, in Megatron's order: chunk c of stage p holds the (c*pp+p)-th block of
    layers)."""

    def __init__(self, chunks: Any) -> None:
        self.chunks: List[Any] = [unwrap(c) for c in (
            chunks if isinstance(chunks, (list, tuple)) else [chunks])]

    def named(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(parameters, buffers) by layout name."""
        params: Dict[str, Any] = {}
        buffers: Dict[str, Any] = {}
        many = len(self.chunks) > 1
        for c, m in enumerate(self.chunks):
            pre = "%d." % c if many else ""
            params.update((pre + n, t) for n, t in m.named_parameters())
            buffers.update((pre + n, t) for n, t in m.named_buffers())
        return params, buffers


def as_chunks(source: Any) -> MegatronChunks:
    """``source`` as MegatronChunks (a module or a list of them is wrapped)."""
    return source if isinstance(source, MegatronChunks) else MegatronChunks(source)

