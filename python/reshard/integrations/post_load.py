"""Parameters an inference engine holds in another form than the one it loads.

vLLM transforms some weights after load_weights (process_weights_after_loading).
Writing the refit straight into such a parameter is right only where the runtime
form equals the loaded form, so the receiver meets each one with a rule:

- Staged: the layout delivers the loaded form (``loaded``, e.g. Nemotron-H's
  ``mixer.A_log``) into staging memory the receiver owns; after every refit it sets
  the engine's parameter (``target``, ``mixer.A``) in place with ``compute`` (vLLM's
  own rule: A = -exp(A_log) in fp32, mamba_mixer2.py).
- Rerun: the parameter is written in place, then the engine's post-load step of the
  module that keeps derived copies is run again (MLA's ``W_UK_T``/``W_UV`` from
  ``kv_b_proj``: the attention layer's process_weights_after_loading).
- Refused: a form the receiver cannot rebuild (FlashInfer MoE's [up; gate]
  re-blocking of ``w13_weight``): init fails naming the parameter and the reason.

The rules are data; which ones apply is the engine shell's call (vllm.py), made from
the engine version and kernel backend in use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List

Tensor = Any  # a torch.Tensor (torch stays an optional import of the package)


@dataclass(frozen=True)
class Staged:
    """The layout declares ``loaded``; the engine holds ``target`` = compute(loaded)."""

    loaded: str
    target: str
    compute: Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Rerun:
    """After every refit, ``run()`` redoes the engine's post-load step that derives
    state from parameter ``param`` (``what`` says which step, for messages)."""

    param: str
    what: str
    run: Callable[[], None]


@dataclass(frozen=True)
class Refused:
    """Parameter ``name`` is transformed after loading in a way not rebuilt here."""

    name: str
    reason: str


Rule = Any  # Staged | Rerun | Refused


def neg_exp_fp32(a_log: Tensor) -> Tensor:
    """vLLM MambaMixer2's ``A``: -exp(A_log) computed in fp32 (the loaded A_log is
    the trainer's dtype, bf16 under bf16 training)."""
    return -a_log.float().exp()


def nemotron_a_rules(declared: List[str], live: Dict[str, Tensor]) -> List[Rule]:
    """A Staged rule for each declared ``...mixer.A_log`` whose engine holds
    ``...mixer.A`` (vLLM's NemotronH names the parameter A and holds -exp(A_log))."""
    out: List[Rule] = []
    for name in declared:
        if name.endswith(".mixer.A_log"):
            target = name[:-len("A_log")] + "A"
            if target in live and name not in live:
                out.append(Staged(name, target, neg_exp_fp32))
    return out


def widen(x: Tensor) -> Tensor:
    """The staged value as it is (apply_post_load casts it to the target's dtype):
    a bf16 trainer tensor vLLM holds fp32 (Qwen3-Next's ``linear_attn.A_log``, GLM-4.5's
    ``mlp.gate.weight``)."""
    return x


def plus_one(x: Tensor) -> Tensor:
    """HF/vLLM's plain RMSNorm weight from Megatron's zero-centered one (Qwen3-Next's
    ``linear_attn.norm.weight`` = ``out_norm.weight`` + 1, Megatron-Bridge
    RMSNorm2ZeroCenteredRMSNormMapping), in fp32 before the cast."""
    return x.float() + 1


# Staged names the layouts declare by suffix: the engine's parameter is the name
# without it, computed from the staged value (the C header says which layout
# declares which).
STAGED_SUFFIXES = (("_bf16", widen), ("_minus_1", plus_one))


def suffix_rules(declared: List[str], live: Dict[str, Tensor]) -> List[Rule]:
    """A Staged rule for each declared ``X_bf16`` / ``X_minus_1`` whose engine holds
    ``X`` (and not the staged name itself)."""
    out: List[Rule] = []
    for name in declared:
        for sfx, compute in STAGED_SUFFIXES:
            target = name[:-len(sfx)]
            if name.endswith(sfx) and target in live and name not in live:
                out.append(Staged(name, target, compute))
    return out


def staged_rules(declared: List[str], live: Dict[str, Tensor]) -> List[Rule]:
    """Every Staged rule of the layouts: Nemotron-H's A and the suffixed names."""
    return nemotron_a_rules(declared, live) + suffix_rules(declared, live)


def split_rules(rules: List[Rule]):
    """(staged by loaded name, reruns, refused) of ``rules``."""
    staged = {r.loaded: r for r in rules if isinstance(r, Staged)}
    reruns = [r for r in rules if isinstance(r, Rerun)]
    refused = [r for r in rules if isinstance(r, Refused)]
    return staged, reruns, refused
