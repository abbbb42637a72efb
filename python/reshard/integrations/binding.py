"""Binding a framework's live tensors to a rank's declared parameters, checked before
anything moves: every declared parameter and buffer present with its name, shape,
dtype, device and contiguity, and no live parameter left out of the refit (it would
stay stale). The checks are the package's own (Plan.execute's binding); this adds the
live-model side: the module's named_parameters() and named_buffers(), and the
post-load rules (post_load.py)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ..buffers import allocate, bind
from ..layout import Layout
from .post_load import Rule, split_rules

Tensor = Any


def live_tensors(module: Any) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """(named_parameters(), named_buffers()) of ``module`` as dicts."""
    return dict(module.named_parameters()), dict(module.named_buffers())


class Bound:
    """What one rank binds: ``tensors`` (layout name -> the tensor the refit reads or
    writes: the live tensor, or staging for a Staged rule), ``staged`` (loaded name
    -> (rule, target tensor)), ``reruns``, and ``problems`` (messages naming the rank
    and parameter; empty when binding is possible)."""

    def __init__(self) -> None:
        self.tensors: Dict[str, Tensor] = {}
        self.staged: Dict[str, Tuple[Any, Tensor]] = {}
        self.reruns: List[Any] = []
        self.problems: List[str] = []

    def current(self, params: Dict[str, Tensor], buffers: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """The tensors to bind for this refit: each name's live tensor now (a framework
        may have replaced a parameter since init), staging for Staged rules (their
        targets looked up again too). A name no longer live is left out, so the
        execution refuses it on every rank (missing parameter, BUFFER)."""
        live = {**buffers, **params}
        out: Dict[str, Tensor] = {}
        for name, t in self.tensors.items():
            if name in self.staged:
                rule, _ = self.staged[name]
                if rule.target in live:
                    self.staged[name] = (rule, live[rule.target])
                    out[name] = t
            elif name in live:
                out[name] = live[name]
        return out


def bind_live(layout: Layout, rank: int, side: str, params: Dict[str, Tensor],
              buffers: Dict[str, Tensor], device: str, writable: bool,
              rules: List[Rule] = ()) -> Bound:
    """Bind ``rank``'s declared parameters of ``layout`` to the live ``params``
    (every one must be declared, or be a post-load target) and ``buffers`` (only the
    declared ones are taken: a module keeps buffers no refit writes, e.g. rotary
    tables). ``device``: the memory the comm moves ("cpu", "cuda"); ``writable``: the
    destination side. Nothing is written; staging for Staged rules is allocated."""
    out = Bound()
    declared = {p.name: p for p in layout.parameters(rank)}
    staged, out.reruns, refused = split_rules(list(rules))
    for r in refused:
        out.problems.append("%s rank %d: parameter %r: %s" % (side, rank, r.name, r.reason))
    targets = {r.target for r in staged.values()}
    for name, t in params.items():
        if name in targets:
            continue
        out.tensors[name] = t  # undeclared names are reported by bind() below
    for name, t in buffers.items():
        if name in declared and name not in params:
            out.tensors[name] = t
    for loaded, rule in staged.items():
        target = params[rule.target]
        p = declared[loaded]
        out.tensors[loaded] = allocate(p, "torch", None, str(target.device))
        out.staged[loaded] = (rule, target)
    _, _, _, problems = bind(layout, rank, out.tensors, side, device, writable)
    out.problems += [msg for _, msg in problems]
    return out


def apply_post_load(bound: Bound) -> None:
    """After a refit: set each Staged target in place from its staging, then run the
    reruns (the engine's own post-load steps)."""
    for loaded, (rule, target) in bound.staged.items():
        target.data.copy_(rule.compute(bound.tensors[loaded]).to(target.dtype))
    for r in bound.reruns:
        r.run()
