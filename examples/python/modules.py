"""torch modules holding given named tensors: what a framework's model looks like to
the refit (named_parameters(), named_buffers()), with the frameworks' names and
shapes, and no forward. Megatron's wrappers (DistributedDataParallel,
Float16Module) hold the real module as ``.module``: Wrapped stands in for them."""

from __future__ import annotations

from typing import Any, Dict

import torch


def module_of(params: Dict[str, torch.Tensor],
              buffers: Dict[str, torch.Tensor] = None) -> torch.nn.Module:
    """A module tree whose named_parameters() are ``params`` and named_buffers() are
    ``buffers`` (dotted names become submodules); the tensors are used as they are."""
    root = torch.nn.Module()

    def parent(name: str):
        m = root
        *path, leaf = name.split(".")
        for p in path:
            if not hasattr(m, p):
                m.add_module(p, torch.nn.Module())
            m = getattr(m, p)
        return m, leaf

    for n, t in params.items():
        m, leaf = parent(n)
        m.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=False))
    for n, t in (buffers or {}).items():
        m, leaf = parent(n)
        m.register_buffer(leaf, t)
    return root


class Wrapped(torch.nn.Module):
    """A wrapper holding the real module as ``.module`` (names "module.")."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.module = module
