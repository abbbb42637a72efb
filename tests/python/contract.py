"""Signature walks shared by the engine contract tests (test_vllm_contract.py,
test_verl_contract.py, test_sglang_contract.py): a callable's parameters without
annotations, a class's abstract methods."""

from __future__ import annotations

import inspect
from typing import Any, List, Tuple


def shape(fn: Any) -> List[Tuple[str, Any, Any]]:
    """A callable's parameters as (name, kind, default), annotations left out."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def abstract_names(cls: type) -> List[str]:
    return sorted(n for n in dir(cls)
                  if getattr(getattr(cls, n, None), "__isabstractmethod__", False))
