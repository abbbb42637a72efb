"""The SGLang shell against the stand-in of SGLang at 1am9trash/sglang@a17753e
(tests/python/standin/sglang, revision in its header). SGLang has no base class for
a weight receiver: its contract is the calls it makes and the requests it takes, so
each is checked with its signature (parameter names, kinds, defaults; annotations
aside): the custom loader as model_runner calls it (``custom_loader(self.model,
named_tensors)``, resolved from the load_format by dynamic_import), the server args
and parallel-state functions the receiver reads, and every request body the client
posts against the io_struct dataclass SGLang parses it into. A shell that misses one
or changes a signature fails here, naming it."""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from typing import Any, Dict, List

import pytest

from contract import shape

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "standin")
# model_runner.py 2088-2090: custom_loader(self.model, named_tensors), positionally
LOADER_CALL = ["model", "named_tensors"]


@pytest.fixture
def sglang_api(monkeypatch):
    monkeypatch.syspath_prepend(STANDIN)
    for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, k)
    import reshard.integrations.sglang as rs
    import sglang
    return rs, sglang


def loader_problems(fn: Any) -> List[str]:
    """What keeps ``fn`` from being called as SGLang calls a custom loader."""
    try:
        inspect.signature(fn).bind(object(), [])
    except TypeError as e:
        return ["%s: SGLang calls custom_loader(model, named_tensors): %s"
                % (getattr(fn, "__name__", fn), e)]
    got = [p[0] for p in shape(fn)]
    return [] if got == LOADER_CALL else ["%s: parameters %s, SGLang passes %s"
                                          % (fn.__name__, got, LOADER_CALL)]


def body_problems(path: str, body: Dict[str, Any]) -> List[str]:
    """What SGLang's route ``path`` refuses of ``body`` (its io_struct dataclass)."""
    from sglang._server import ROUTES
    cls = ROUTES.get(path)
    if cls is None:
        return ["%s: no such SGLang route" % path]
    names = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    out = ["%s: %s has no field %r" % (path, cls.__name__, k) for k in body if k not in names]
    out += ["%s: %s needs %r" % (path, cls.__name__, k) for k in required - set(body)]
    return out


def test_standin_lists_the_followed_revision(sglang_api):
    _, sglang = sglang_api
    assert sglang.REVISION == ("1am9trash/sglang", "a17753e449fb4a33070de071942da9cff1e2010e")
    from sglang.srt.model_executor.model_runner import ModelRunner
    assert [p[0] for p in shape(ModelRunner.update_weights_from_tensor)] == [
        "self", "named_tensors", "load_format"]


def test_loader_is_what_model_runner_calls(sglang_api):
    """The load_format value resolves (dynamic_import) to the shell's loader, which
    binds SGLang's call; through the stand-in's ModelRunner a message that is not
    reshard's reaches it and is refused by it."""
    rs, _ = sglang_api
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils import dynamic_import
    assert dynamic_import(rs.LOADER) is rs.load_weights
    assert loader_problems(rs.load_weights) == []
    runner = ModelRunner(torch.nn.Module(), ServerArgs(tp_size=1, custom_weight_loader=[rs.LOADER]),
                         tp_rank=0)
    with pytest.raises(ValueError, match="reshard's SGLang loader takes one control message"):
        runner.update_weights_from_tensor([("x", torch.zeros(1))], load_format=rs.LOADER)


def test_receiver_reads_what_sglang_has(sglang_api):
    rs, _ = sglang_api
    import sglang.srt.distributed as dist
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs
    fields = {f.name for f in dataclasses.fields(ServerArgs)}
    assert [f for f in rs.SERVER_FLAGS if f not in fields] == []
    for name in rs.PARALLEL_STATE:
        assert shape(getattr(dist, name)) == [], name
    ModelRunner(torch.nn.Module(), ServerArgs(tp_size=4), tp_rank=3)
    place = rs.sglang_place()
    assert (place.tp_rank, place.tp_size, place.pp_size) == (3, 4, 1)
    assert place.server_args.tp_size == 4


class Checked:
    """A server that checks each body against SGLang's request dataclass."""

    def __init__(self):
        self.problems: List[str] = []
        self.paths: List[str] = []

    def post(self, path, body):
        self.paths.append(path)
        self.problems += body_problems(path, body)
        from sglang._server import ROUTES
        if not self.problems:
            ROUTES[path](**body)  # SGLang's own parse (PauseGenerationReqInput's mode)
        return {"success": True, "message": "Success"}


def test_client_bodies_follow_sglangs_requests(sglang_api, tmp_path):
    rs, _ = sglang_api
    from sglang.srt.utils import MultiprocessingSerializer
    srv = Checked()
    c = rs.SGLangClient(srv, 2, serialize=lambda o: MultiprocessingSerializer.serialize(
        o, output_str=True))
    c.check = lambda key: None  # the outcomes: test_sglang.py
    c.store = object()
    c.info = {"engine_index": 0}
    c.start_weight_update()
    c.update_weights({"version": 1})
    c.finish_weight_update(weight_version="1")
    c.shutdown()
    assert srv.problems == []
    assert srv.paths == ["/pause_generation", "/update_weights_from_tensor",
                         "/update_weight_version", "/continue_generation",
                         "/update_weights_from_tensor"]


def test_the_checks_name_a_wrong_loader_or_body(sglang_api):
    def one_arg(model):  # noqa: ARG001
        pass

    def swapped(named_tensors, model):  # noqa: ARG001
        pass
    assert "SGLang calls custom_loader(model, named_tensors)" in loader_problems(one_arg)[0]
    assert loader_problems(swapped) == [
        "swapped: parameters ['named_tensors', 'model'], SGLang passes %s" % LOADER_CALL]
    assert body_problems("/update_weight_version", {"version": "1"}) == [
        "/update_weight_version: UpdateWeightVersionReqInput has no field 'version'",
        "/update_weight_version: UpdateWeightVersionReqInput needs 'new_version'"]
    assert body_problems("/update_weights", {}) == ["/update_weights: no such SGLang route"]
