"""The vLLM shell against the stand-in of vLLM's newest weight-transfer API
(tests/python/standin, revision in its header): every abstract method of the
stand-in's base classes (WeightTransferEngine, TrainerWeightTransferEngine,
WeightSource), every method vLLM's worker calls on an engine, and every method of
the VLLMWeightSyncClient protocol, with its signature (parameter names, kinds,
defaults; annotations aside). A shell class that misses one, leaves one abstract or
changes its signature fails here, naming the class and the method."""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any, List, Tuple

import pytest

from contract import abstract_names, shape

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "standin")

# what vLLM's worker calls on its engine beyond the abstract methods (FRAMEWORKS.md:
# the failure path runs abort_weight_update() then reset_weight_update_target(); a
# draft update retargets with set_weight_update_target; a caller that drives the
# tail itself calls drain_pending() when defers_processing is set). abort is not on
# the base class at the followed revision: its expected signature is the call's.
WORKER_CALLS = ("parse_init_info", "parse_update_info", "update_weights",
                "set_weight_update_target", "reset_weight_update_target", "drain_pending")
WORKER_CALLS_NOT_ON_BASE = {"abort_weight_update": ["self"]}


@pytest.fixture
def vllm_api(monkeypatch):
    monkeypatch.syspath_prepend(STANDIN)
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, k)
    import reshard.integrations.vllm as rv
    monkeypatch.setattr(rv, "_BUILT", {})
    from vllm.distributed.weight_transfer import base
    return rv, base



def contract_problems(shell: type, base: type, extra: Tuple[str, ...] = ()) -> List[str]:
    """What ``shell`` lacks of ``base``: each abstract method of base (and each name in
    ``extra``) must be on shell, not abstract, with base's parameters."""
    out = []
    for name in abstract_names(base) + list(extra):
        mine = inspect.getattr_static(shell, name, None)
        if mine is None:
            out.append("%s.%s: missing" % (shell.__name__, name))
            continue
        if getattr(getattr(shell, name), "__isabstractmethod__", False):
            out.append("%s.%s: still abstract (not implemented)" % (shell.__name__, name))
            continue
        want, got = shape(getattr(base, name)), shape(getattr(shell, name))
        if want != got:
            out.append("%s.%s: signature %s, vLLM's is %s"
                       % (shell.__name__, name, got, want))
    return out


def test_standin_lists_the_newest_revision(vllm_api):
    """The stand-in says which revision it follows, and has what marks the newest."""
    import vllm
    _, base = vllm_api
    assert vllm.REVISION == ("new-TonyWang/vllm", "142e770e57b802c8e2668e989c538aabb668b8c5")
    assert abstract_names(base.WeightTransferEngine) == [
        "finish_weight_update", "init_transfer_engine", "receive_weights", "shutdown",
        "start_weight_update"]
    assert abstract_names(base.TrainerWeightTransferEngine) == ["send_weights", "trainer_init"]
    assert abstract_names(base.WeightSource) == ["__iter__", "metadata"]
    assert base.WeightTransferEngine.defers_processing is False
    assert shape(base.WeightSource.held_names) == [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty)]
    assert shape(base.VLLMWeightSyncClient.finish_weight_update)[1][0] == "weight_version"
    assert [p[0] for p in shape(base.TrainerWeightTransferEngine.trainer_init)] == \
        ["init_info", "client", "source"]  # no config


def test_worker_engine_implements_the_newest_base(vllm_api):
    rv, base = vllm_api
    shell = rv.ReshardWeightTransferEngine
    assert issubclass(shell, base.WeightTransferEngine)
    assert contract_problems(shell, base.WeightTransferEngine, WORKER_CALLS) == []
    assert not getattr(shell, "__abstractmethods__", None)
    for name, params in WORKER_CALLS_NOT_ON_BASE.items():
        fn = getattr(shell, name, None)
        assert fn is not None, "%s.%s: missing (vLLM's worker calls it)" % (shell.__name__, name)
        assert [p[0] for p in shape(fn)] == params, name
    # synchronous: update_weights returns with the weights written, nothing to drain
    assert shell.defers_processing is False


def test_trainer_engine_implements_the_newest_base(vllm_api):
    rv, base = vllm_api
    shell = rv.ReshardTrainerEngine
    assert issubclass(shell, base.TrainerWeightTransferEngine)
    assert contract_problems(shell, base.TrainerWeightTransferEngine,
                             ("__init__", "shutdown")) == []
    assert not getattr(shell, "__abstractmethods__", None)


def test_source_implements_weight_source(vllm_api):
    rv, base = vllm_api
    assert issubclass(rv.MegatronSource, base.WeightSource)
    assert contract_problems(rv.MegatronSource, base.WeightSource, ("held_names",)) == []
    assert not getattr(rv.MegatronSource, "__abstractmethods__", None)


def test_standin_engine_and_trainer_calls_follow_the_client_protocol(vllm_api):
    """The stand-in's engine control plane has the protocol's methods with its
    signatures (so the trainer tests drive it as they would drive vLLM), and each
    call the trainer makes binds to the protocol's signature."""
    rv, base = vllm_api
    from vllm._engine import StandinEngine
    proto = base.VLLMWeightSyncClient
    names = ["init_weight_transfer_engine", "start_weight_update", "update_weights",
             "finish_weight_update"]
    for n in names:
        assert shape(getattr(StandinEngine, n)) == shape(getattr(proto, n)), n
    assert isinstance(StandinEngine([]), proto)

    calls: List[str] = []

    class Checked:  # binds every call against the protocol's own signature
        def __getattr__(self, n: str) -> Any:
            if n not in names:
                raise AssertionError("trainer called %r, not in VLLMWeightSyncClient" % n)

            def call(*a: Any, **k: Any) -> None:
                inspect.signature(getattr(proto, n)).bind(self, *a, **k)
                calls.append(n)
            return call
    info = rv.ReshardTrainerInitInfo(model="m", train="tp=1", infer="tp=1", rank=0)
    t = rv.ReshardTrainerEngine(client=Checked(), source=None, is_sender=True)
    t.version, t.comm, t.info = 0, object(), info
    t._announce = lambda what, failure: None
    t._send = lambda: None
    t.send_weights()
    assert calls == ["start_weight_update", "update_weights", "finish_weight_update"]


def test_the_check_names_a_missing_or_changed_method(vllm_api):
    """contract_problems itself: a shell class without receive_weights, one whose
    finish_weight_update takes an argument vLLM does not pass, and a trainer whose
    trainer_init still takes a config are each named."""
    rv, base = vllm_api
    from reshard.integrations.worker import WorkerCore

    class NoReceive(WorkerCore, base.WeightTransferEngine):
        receive_weights = base.WeightTransferEngine.receive_weights

    class OddFinish(WorkerCore, base.WeightTransferEngine):
        def finish_weight_update(self, version):  # noqa: ARG002
            pass

    class ConfigFirst(rv.ReshardTrainerEngine):
        @classmethod
        def trainer_init(cls, config, init_info, *, client, source=None):  # noqa: ARG003
            pass
    assert contract_problems(NoReceive, base.WeightTransferEngine) == [
        "NoReceive.receive_weights: still abstract (not implemented)"]
    got = contract_problems(OddFinish, base.WeightTransferEngine)
    assert len(got) == 1 and got[0].startswith("OddFinish.finish_weight_update: signature")
    got = contract_problems(ConfigFirst, base.TrainerWeightTransferEngine)
    assert len(got) == 1 and got[0].startswith("ConfigFirst.trainer_init: signature")
