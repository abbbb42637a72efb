"""reshard's SGLang shell (python/reshard/integrations/sglang.py) against the stand-in
of SGLang at 1am9trash/sglang@a17753e (tests/python/standin/sglang), over gloo:

- examples/python/slime_loop.py run small: Megatron trainers -> SGLang-shaped TP
  workers receiving through the custom weight loader, AdamW steps, delta on, every
  element of every worker checked against an oracle from SGLang's rules, SGLang's
  weight version set to each update once every worker committed it; two servers;
- fail-closed init: a worker whose live parameter differs from the layout, or whose
  server runs a flag the refit cannot follow, is refused on every rank, named;
- a worker killed mid-update: every live rank fails that update in bounded time, no
  live worker says committed, no server advances its version;
- in process: the server flags refused by name, the loader's message check, DeepSeek
  MLA's post-load rerun, and the client's version reporting (set only when every
  worker of the server committed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "python", "slime_loop.py")
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
from slime_loop import INFER  # noqa: E402  the one spec constant (docs/sglang.md)

TINY = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
        "tie_word_embeddings": False}


def run(tmp_path, *args, timeout="20"):
    path = os.path.join(str(tmp_path), "tiny.json")
    with open(path, "w") as f:
        json.dump(TINY, f)
    return subprocess.run([sys.executable, EXAMPLE, "--model", path, "--layers", "2",
                           "--timeout", timeout] + list(args),
                          capture_output=True, text=True, timeout=300)


def engines(spec: str, k: int) -> str:
    return spec + ",engines=%d" % k


def test_slime_loop_megatron_to_sglang_exact_with_delta(tmp_path):
    """Megatron tp=2,pp=2 -> two SGLang servers of tp=2 (kv heads 2: one per rank;
    fused qkv and gate_up split by SGLang's rules, vocab padded to 64), 2 steps."""
    r = run(tmp_path, "--train", "tp=2,pp=2", "--infer", engines(INFER, 2), "--steps", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 of 4 SGLang worker(s) reported" in r.stdout and "0 wrong: OK" in r.stdout
    assert "weight_version of each server after each update: ['1', '1', '2', '2']" in r.stdout
    assert "delta" in r.stdout.splitlines()[2], r.stdout  # step 2 sent only the changes


def test_more_ranks_than_kv_heads(tmp_path):
    """tp=4 over 2 KV heads: each KV head replicated on 2 ranks (QKVParallelLinear's
    num_kv_head_replicas), Megatron tp=1 -> SGLang tp=4."""
    r = run(tmp_path, "--train", "tp=1", "--infer", INFER.replace("tp=2", "tp=4"),
            "--steps", "1", "--no-delta")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 of 4 SGLang worker(s) reported" in r.stdout and "0 wrong: OK" in r.stdout


@pytest.mark.parametrize("fault,named", [
    ("reshape", r"infer rank 2\b.*model\.embed_tokens\.weight.*shape \[10240\]"),
    ("extra", r"infer rank 2\b.*stale_copy"),
    ("eplb", r"engine 0, infer rank 2: the server runs with --enable-eplb")])
def test_fail_closed_init_names_parameter_and_rank(tmp_path, fault, named):
    import re
    t0 = time.monotonic()
    r = run(tmp_path, "--fault", fault, "--steps", "1")
    assert r.returncode == 0, r.stdout + r.stderr  # every process refused, named
    lines = [x for x in r.stdout.splitlines() if x.startswith("slime_loop: rank")]
    assert len(lines) == 4, r.stdout + r.stderr
    for x in lines:
        assert re.search(named, x), x
    assert time.monotonic() - t0 < 120


def test_killed_worker_every_rank_fails_none_reported(tmp_path):
    t0 = time.monotonic()
    r = run(tmp_path, "--kill-rank", "3", "--kill-at", "2", "--steps", "2", timeout="4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "refit 2 failed on train rank 0" in r.stdout
    assert "refit 2 failed on train rank 1" in r.stdout
    assert "live workers' state after refit 2: ['torn']" in r.stdout, r.stdout
    assert "weight_version of each server after each update: ['1', '1']" in r.stdout
    assert time.monotonic() - t0 < 150


# ---- in process ----

def test_server_flags_refused_by_name():
    from reshard.integrations.sglang import server_problems
    ok = SimpleNamespace(dp_size=1, enable_dp_attention=False, ep_size=1, enable_eplb=False,
                         ep_num_redundant_experts=0, enable_lora=None,
                         moe_runner_backend="auto")
    assert server_problems(ok, "tp=2", 2, 1) == []
    cases = [(dict(dp_size=2), "--dp-size 2 without --enable-dp-attention"),
             (dict(dp_size=2, enable_dp_attention=True), "runs --enable-dp-attention --dp-size 2"),
             (dict(ep_size=2), "--ep-size 2, the infer spec says ep=off"),
             (dict(ep_num_redundant_experts=8), "--ep-num-redundant-experts"),
             (dict(enable_lora=True), "--enable-lora"),
             (dict(moe_runner_backend="flashinfer_cutlass"),
              "--moe-runner-backend flashinfer_cutlass")]
    for change, text in cases:
        got = server_problems(SimpleNamespace(**dict(vars(ok), **change)), "tp=2", 2, 1)
        assert len(got) == 1 and text in got[0], (change, got)
    assert "--tp-size 4, the infer spec says tp=2" in server_problems(ok, "tp=2", 4, 1)[0]
    assert "--pp-size 2" in server_problems(ok, "tp=2", 2, 2)[0]
    spec = "engine=sglang,tp=4,dp=2,dp_attention=on,ep=on"
    dp = SimpleNamespace(**dict(vars(ok), dp_size=2, enable_dp_attention=True, ep_size=4))
    assert server_problems(dp, spec, 4, 1) == []


def test_loader_takes_only_reshard_messages():
    from reshard.integrations.sglang import load_weights
    with pytest.raises(ValueError, match=r"one control message .*\['model.norm.weight'\]"):
        load_weights(torch.nn.Module(), [("model.norm.weight", torch.zeros(2))])


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.kv_b_proj = torch.nn.Linear(4, 6, bias=False)
        self.w_kc, self.w_vc = torch.zeros(1), torch.zeros(1)


def mla_model(with_post: bool):
    m = torch.nn.Module()
    m.model = torch.nn.Module()
    m.model.layers = torch.nn.ModuleList([torch.nn.Module()])
    m.model.layers[0].self_attn = Attn()
    calls = []
    if with_post:
        m.post_load_weights = lambda is_nextn=False, weight_names=None: calls.append(
            (is_nextn, list(weight_names)))
    return m, calls


def test_mla_post_load_rerun_or_refused():
    """DeepSeek MLA's w_kc/w_vc: the model's post_load_weights reruns for that layer's
    kv_b_proj after every refit; without one, the parameter is refused by name."""
    from reshard.integrations.post_load import Refused, Rerun
    from reshard.integrations.sglang import sglang_post_load_rules
    name = "model.layers.0.self_attn.kv_b_proj.weight"
    m, calls = mla_model(True)
    live = dict(m.named_parameters())
    rules = sglang_post_load_rules(m, [name], live)
    assert [type(r) for r in rules] == [Rerun] and rules[0].param == name
    rules[0].run()
    assert calls == [(False, [name])]
    m, _ = mla_model(False)
    rules = sglang_post_load_rules(m, [name], dict(m.named_parameters()))
    assert [type(r) for r in rules] == [Refused] and "w_kc/w_vc" in rules[0].reason


class Recorder:
    def __init__(self):
        self.calls = []

    def post(self, path, body):
        self.calls.append(path)
        return {"success": True, "message": "Success"}  # SGLang's reply to a custom loader


def test_client_sets_version_only_when_every_worker_committed(tmp_path):
    """SGLang reports success for any custom-loader call: the client reads each
    worker's outcome from the refit's store, raises naming the torn worker, leaves
    the version and keeps generation paused; a committed update sets the version."""
    from reshard.errors import ReshardError
    from reshard.integrations.rendezvous import Rendezvous, open_store
    from reshard.integrations.sglang import OUTCOME, SGLangClient
    info = dict(model="qwen3-0.6b", train="tp=1", infer="tp=2", store_path=str(tmp_path / "s"),
                timeout_s=0.5)
    store = open_store(Rendezvous(info["store_path"]), 0, 3, 5.0)
    for r in (1, 2):
        store.set(OUTCOME % ("init", r), json.dumps({"state": "none", "error": ""}))
        store.set(OUTCOME % ("1", r), json.dumps({"state": "committed", "version": 1,
                                                  "error": ""}))
    store.set(OUTCOME % ("2", 1), json.dumps({"state": "committed", "version": 2, "error": ""}))
    store.set(OUTCOME % ("2", 2), json.dumps({"state": "torn", "version": 1,
                                              "error": "engine 0, infer rank 2: TIMEOUT"}))
    srv = Recorder()
    c = SGLangClient(srv, 2, serialize=lambda obj: "x")
    c.init_weight_transfer_engine(info)
    c.start_weight_update()
    c.update_weights({"version": 1})
    c.finish_weight_update(weight_version="1")
    assert c.weight_version == "1" and srv.calls[-2:] == ["/update_weight_version",
                                                          "/continue_generation"]
    c.start_weight_update()
    with pytest.raises(ReshardError, match="refit 2 did not commit.*infer rank 2: TIMEOUT"):
        c.update_weights({"version": 2})
    c.finish_weight_update()  # the trainer's failure path: no version
    assert c.weight_version == "1" and c.paused and srv.calls[-1] == "/update_weights_from_tensor"
    with pytest.raises(ReshardError, match=r"refit 3: rank\(s\) \[1, 2\] gave no outcome"):
        c.update_weights({"version": 3})


def test_bench_refit_both_paths_exact(tmp_path):
    """bench/sglang_refit.py at a small size: Megatron tp=2 -> two SGLang servers of
    tp=2, reshard and slime's bucketed broadcast (2 KB buckets: several flushes), every
    element of both verified."""
    path = os.path.join(str(tmp_path), "tiny.json")
    with open(path, "w") as f:
        json.dump(TINY, f)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sglang_refit.py"),
                        "--model", path, "--layers", "2", "--infer", engines(INFER, 2),
                        "--iters", "1", "--bucket-mb", "0.002"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().endswith("sglang_refit: OK"), p.stdout
    assert "slime: gather + HF + bucketed broadcast" in p.stdout
