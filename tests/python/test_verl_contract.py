"""The verl shell against the stand-in of verl's checkpoint engine API
(tests/python/standin/verl, revision in its header): every abstract method of the
stand-in's CheckpointEngine, with its signature (parameter names, kinds, defaults;
annotations aside) and its sync/async kind, plus what verl calls beyond them
(is_master_rank, the wire_format its CheckpointEngineWorker reads, the registry's
construction with bucket_size / is_master / engine_kwargs, loading by module path).
A shell that misses one, leaves one abstract or changes its signature fails here,
naming the class and the method."""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any, List

import pytest

from contract import abstract_names, shape

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "standin")
ABSTRACT = ["build_topology", "finalize", "init_process_group", "prepare", "receive_weights",
            "send_weights"]
KWARGS = {"model": "qwen3-0.6b", "train": "tp=2", "infer": "tp=2", "layers": 1}


@pytest.fixture
def verl_api(monkeypatch):
    monkeypatch.syspath_prepend(STANDIN)
    for k in [k for k in sys.modules if k == "verl" or k.startswith("verl.")
              or k == "reshard.integrations.verl"]:
        monkeypatch.delitem(sys.modules, k)
    from verl.checkpoint_engine import base
    monkeypatch.setattr(base.CheckpointEngineRegistry, "_registry",
                        dict(base.CheckpointEngineRegistry._registry))
    import reshard.integrations.verl as rv  # verl is loaded: registers on import
    return rv, base



def is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def contract_problems(shell: type, base: type) -> List[str]:
    """What ``shell`` lacks of ``base``'s abstract methods (and is_master_rank):
    present, not abstract, base's parameters (init_process_group: verl passes
    build_topology's lists by keyword, so it must take the keys our build_topology
    returns), base's sync/async kind."""
    out = []
    for name in abstract_names(base) + ["is_master_rank"]:
        mine = getattr(shell, name, None)
        if mine is None:
            out.append("%s.%s: missing" % (shell.__name__, name))
            continue
        if getattr(mine, "__isabstractmethod__", False):
            out.append("%s.%s: still abstract (not implemented)" % (shell.__name__, name))
            continue
        want = getattr(base, name)
        if is_async(want) != is_async(mine):
            out.append("%s.%s: %s, verl's is %s" % (shell.__name__, name,
                       "async" if is_async(mine) else "sync",
                       "async" if is_async(want) else "sync"))
        if name == "init_process_group":
            continue  # base: (self, **kwargs); checked against build_topology below
        if shape(want) != shape(mine):
            out.append("%s.%s: signature %s, verl's is %s" % (shell.__name__, name,
                                                               shape(mine), shape(want)))
    return out


def test_standin_lists_the_followed_revision(verl_api):
    import verl
    _, base = verl_api
    assert verl.REVISION == ("dongha-yoon/verl", "d6f2c522870e8194efd102b34cb02ffbcff30c02")
    assert abstract_names(base.CheckpointEngine) == ABSTRACT
    assert base.CheckpointEngine.wire_format == "named_tensors"
    assert shape(base.CheckpointEngine.send_weights)[1:] == [
        ("weights", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
        ("global_steps", inspect.Parameter.POSITIONAL_OR_KEYWORD, None)]
    assert [p[0] for p in shape(base.CheckpointEngine.build_topology)] == [
        "actor_wg_world_size", "rollout_world_size", "metadata"]


def test_engine_implements_the_base(verl_api):
    rv, base = verl_api
    shell = rv.ReshardCheckpointEngine
    assert issubclass(shell, base.CheckpointEngine)
    assert contract_problems(shell, base.CheckpointEngine) == []
    assert not getattr(shell, "__abstractmethods__", None)
    assert shell.wire_format == "rank_local_named_tensors"
    assert inspect.isasyncgenfunction(shell.receive_weights)  # as nccl_m2n's
    # init_process_group takes every key build_topology hands each side
    actor, rollout = shell.build_topology(2, 2, [
        dict(KWARGS, train="tp=2", infer="tp=2", master={"store_path": "/x"}),
        dict(KWARGS, master=None), dict(KWARGS, master=None), dict(KWARGS, master=None)])
    sig = inspect.signature(shell.init_process_group)
    for kw in (actor, rollout):
        for i in range(2):
            sig.bind(object(), **{k: v[i] for k, v in kw.items()})
    assert actor["rank"] == [0, 1] and rollout["rank"] == [2, 3]
    assert rollout["role"] == ["destination"] * 2 and actor["world_size"] == [4, 4]


def test_loaded_by_module_path_and_built_as_verl_builds_it(verl_api):
    """custom_backend_module imports reshard.integrations.verl, which registers
    "reshard"; the registry builds it with verl's arguments on both sides."""
    rv, base = verl_api
    from types import SimpleNamespace
    from verl.checkpoint_engine.base import CheckpointEngineRegistry, CheckpointEngineWorker
    assert CheckpointEngineRegistry.get("reshard") is rv.ReshardCheckpointEngine
    ce = SimpleNamespace(backend="reshard", custom_backend_module="reshard.integrations.verl",
                         update_weights_bucket_megabytes=64, engine_kwargs={"reshard": KWARGS})
    w = CheckpointEngineWorker(SimpleNamespace(name="vllm", checkpoint_engine=ce), None, None)
    assert isinstance(w.checkpoint_engine, rv.ReshardCheckpointEngine)
    assert not w.checkpoint_engine.is_master
    e = CheckpointEngineRegistry.new("reshard", is_master=True, bucket_size=1 << 20, **KWARGS)
    assert e.prepare()["master"]["master_port"] > 0
    with pytest.raises(ValueError, match="unknown \\['tensor_parallel'\\]"):
        CheckpointEngineRegistry.new("reshard", bucket_size=1, tensor_parallel=2, **KWARGS)


def test_build_topology_refuses_what_verl_did_not_size(verl_api):
    rv, _ = verl_api
    meta = [dict(KWARGS, master={"store_path": "/x"})] + [dict(KWARGS, master=None)] * 3
    with pytest.raises(ValueError, match="need 2 actor and 2 rollout workers, verl has 1 and 3"):
        rv.ReshardCheckpointEngine.build_topology(1, 3, meta)
    with pytest.raises(ValueError, match="exactly one trainer master, got 0"):
        rv.ReshardCheckpointEngine.build_topology(2, 2, [dict(KWARGS, master=None)] * 4)
    with pytest.raises(ValueError, match="rollout worker 1 planned"):
        rv.ReshardCheckpointEngine.build_topology(2, 2, meta[:3] + [dict(KWARGS, infer="tp=1,dp=2",
                                                                        master=None)])


def test_the_check_names_a_missing_or_changed_method(verl_api):
    rv, base = verl_api

    class NoReceive(rv.VerlEngineCore, base.CheckpointEngine):
        receive_weights = base.CheckpointEngine.receive_weights

    class SyncSend(rv.VerlEngineCore, base.CheckpointEngine):
        def send_weights(self, weights, global_steps=None):  # noqa: ARG002
            return {}

    class NoSteps(rv.VerlEngineCore, base.CheckpointEngine):
        async def send_weights(self, weights):  # noqa: ARG002
            return {}
    assert contract_problems(NoReceive, base.CheckpointEngine) == [
        "NoReceive.receive_weights: still abstract (not implemented)"]
    assert contract_problems(SyncSend, base.CheckpointEngine) == [
        "SyncSend.send_weights: sync, verl's is async"]
    got = contract_problems(NoSteps, base.CheckpointEngine)
    assert len(got) == 1 and got[0].startswith("NoSteps.send_weights: signature")
