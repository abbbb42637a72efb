"""examples/python/verl_loop.py run small: verl's trainer loop (stand-in of
dongha-yoon/verl@d6f2c522) with the reshard checkpoint engine, in separate processes
over gloo; every element every rollout holds after every sync is checked against the
oracle (HF weights through the same AdamW steps, laid out by vLLM's or SGLang's rules:
conventions.vllm_state_dict, slime_loop.sglang_state_dict), and the actors pulled
nothing from verl's full-tensor generator; Megatron-shaped and FSDP2-shaped actors
(DTensor stand-in), vLLM-shaped and SGLang-shaped rollouts. And bad configurations: an
actor rank whose module holds a parameter the layout lacks, an SGLang TP worker whose
live parameter disagrees with the spec: refused at init on every rank, naming it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "verl_loop.py")
TINY = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
        "tie_word_embeddings": False}


def run(tmp_path, *args):
    path = os.path.join(str(tmp_path), "tiny.json")
    with open(path, "w") as f:
        json.dump(TINY, f)
    return subprocess.run([sys.executable, EXAMPLE, "--model", path, "--timeout", "20"] +
                          list(args), capture_output=True, text=True, timeout=200)


# qwen3 tiny, vLLM or SGLang tp=2 (the same layouts for a dense model): embed and
# lm_head (vocab padded to 320 rows of 64) and every layer's qkv/o/gate_up/down split in
# two, norms on both ranks; elements summed over both rollout ranks
LAYER = 2 * (2 * 64 + 2 * 16) + (4 + 2 + 2) * 16 * 64 + 64 * 64 + 2 * 96 * 64 + 64 * 96


def per_sync(layers):
    return 2 * 320 * 64 + 2 * 64 + layers * LAYER


def test_verl_loop_megatron_pp_to_vllm_tp_with_delta(tmp_path):
    """Megatron pp=2 -> vLLM tp=2 (fused qkv / gate_up split by vLLM's rules),
    global_steps 0..2, delta refits, the rollouts sleeping and waking (new weight
    memory) between syncs."""
    p = run(tmp_path, "--layers", "2", "--train", "tp=1,pp=2", "--infer", "tp=2", "--delta")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "%d elements checked over 3 sync(s)" % (3 * per_sync(2)) in p.stdout
    assert "0 wrong: OK" in p.stdout
    assert "get_per_tensor_param(): 0" in p.stdout
    wire = [float(x) for x in re.findall(r"delta ([0-9.]+) of", p.stdout)]
    assert len(wire) == 3 and wire[0] > 0


def test_actor_shard_outside_the_layout_refused_on_every_rank(tmp_path):
    p = run(tmp_path, "--layers", "1", "--steps", "1", "--fault", "actor")
    assert p.returncode == 1
    lines = [x for x in p.stderr.splitlines() if x.startswith("verl_loop: rank")]
    assert len(lines) == 4, p.stderr
    for r, line in enumerate(lines):
        assert line.startswith("verl_loop: rank %d: " % r)
        assert "RESHARD_ERR_BUFFER" in line and "train rank 1: parameter 'stale_copy'" in line
    assert "0 elements checked" in p.stdout


def test_a_repeated_global_steps_is_refused_on_every_rank(tmp_path):
    """verl runs global_steps 1 twice (delta): every actor and rollout worker refuses the
    second at once (INVALID_ARG, nothing sent, the weights kept committed), where the
    rollouts alone refused it and the actors waited out a timeout that ended every later
    sync (tester round 7, R7-2); step 2 then syncs and every element is exact."""
    p = run(tmp_path, "--layers", "1", "--steps", "2", "--delta", "--fault", "repeat")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "a repeated global_steps 1: " + ", ".join(
        "rank %d refused" % r for r in range(4)) in p.stdout, p.stdout
    assert "over 3 sync(s), 0 wrong: OK" in p.stdout


def test_verl_loop_fsdp2_actor_to_vllm(tmp_path):
    """An FSDP2 actor (fsdp=2: DTensor shards, torch.chunk rows) into vLLM tp=2, through
    verl's actor worker (engine.module: the FSDP2 module)."""
    p = run(tmp_path, "--layers", "1", "--steps", "1", "--actor", "fsdp", "--train", "fsdp=2",
            "--infer", "tp=2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "verl actor FSDP2 fsdp=2 -> rollout vLLM tp=2" in p.stdout
    assert "%d elements checked over 2 sync(s), 0 wrong: OK" % (2 * per_sync(1)) in p.stdout
    assert "get_per_tensor_param(): 0" in p.stdout


def test_verl_loop_megatron_actor_to_sglang_with_delta(tmp_path):
    """Megatron tp=2 into one SGLang server of tp=2 (engine=sglang): the TP workers
    receive in place through reshard's loader, SGLang's weight version follows
    global_steps; delta refits."""
    p = run(tmp_path, "--layers", "1", "--steps", "2", "--rollout", "sglang", "--delta")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "verl actor Megatron tp=2 -> rollout SGLang engine=sglang,tp=2" in p.stdout
    assert "%d elements checked over 3 sync(s), 0 wrong: OK" % (3 * per_sync(1)) in p.stdout
    wire = [float(x) for x in re.findall(r"delta ([0-9.]+) of", p.stdout)]
    assert len(wire) == 3 and wire[0] > 0


def test_sglang_live_parameter_against_the_spec_refused_on_every_rank(tmp_path):
    """SGLang TP worker 0's embedding has another shape than engine=sglang,tp=2 gives:
    the actors (the refit's agreement) and both verl rollout workers (the TP workers'
    outcomes, read by each) raise, naming infer rank 2 and the parameter."""
    p = run(tmp_path, "--layers", "1", "--steps", "1", "--rollout", "sglang", "--fault", "live")
    assert p.returncode == 1
    lines = [x for x in p.stderr.splitlines() if x.startswith("verl_loop: rank")]
    assert len(lines) == 4, p.stderr
    for r, line in enumerate(lines):
        assert line.startswith("verl_loop: rank %d: " % r)
        assert "RESHARD_ERR_BUFFER" in line and "rank 2: infer rank 2 buffer 0 " \
            "('model.embed_tokens.weight'): shape [10240], the layout declares [160, 64]" in line
    assert "0 elements checked" in p.stdout
