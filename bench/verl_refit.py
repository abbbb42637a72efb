"""verl's weight sync from a Megatron actor into vLLM-shaped or SGLang-shaped rollouts,
in separate processes over one torch.distributed gloo group: reshard (each actor
rank's Megatron shards sent shard to shard into each rollout rank's parameters: the
plan verl_loop.py's ``reshard`` checkpoint engine runs, executed here on that group)
beside the path verl's ``nccl`` checkpoint engine takes as verl runs it
(verl/checkpoint_engine/nccl_checkpoint_engine.py at verl-project/verl 3f8086c7, one
sender (multi_sender=False; relays carry no data the rollouts need): every
actor rank runs the actor's get_per_tensor_param(), which all-gathers each parameter's
TP shards and converts it to full HF tensors; actor rank 0 packs them into buckets of
update_weights_bucket_megabytes and broadcasts each bucket to every rollout rank; each
rollout rank unpacks the bucket and its engine's weight loader keeps its slice). The
broadcast and the loads are bench/sglang_refit.py's (slime's update step moves the
same bytes the same way); only the destination layout and the labels differ. Every
element every rollout rank holds is checked against the oracle (vLLM's rules:
conventions.vllm_state_dict; SGLang's: slime_loop.sglang_state_dict) after each timed
refit, outside the timing, for both paths.

    /usr/bin/python3 bench/verl_refit.py                         # qwen3-0.6b, 2 layers, tp=2 -> vLLM tp=2,dp=2
    /usr/bin/python3 bench/verl_refit.py --rollout sglang --iters 3

Prints one row per path: the median refit seconds (the slowest rank's median over
--iters), elements verified, wrong elements, and the ratio."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sglang_refit  # noqa: E402  (its path setup: python/, examples/python/, the stand-ins)


def vllm_expected(a, w, i):
    """What vLLM rank ``i`` holds (conventions.vllm_state_dict: vLLM's rules)."""
    import conventions
    import reshard
    return conventions.vllm_state_dict(w, a.infer, i, reshard.SENTINEL_BYTE)


ROLLOUTS = {"vllm": ("vLLM", "tp=2,dp=2", vllm_expected),
            "sglang": ("SGLang", "engine=sglang,tp=2,engines=2", sglang_refit.sglang_expected)}

if __name__ == "__main__":
    sglang_refit.main("verl_refit", __doc__, ROLLOUTS,
                      "verl nccl: gather + bucketed broadcast")
