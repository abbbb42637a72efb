"""The SGLang shell: a receiver in every SGLang TP worker (its custom weight loader)
and the trainer's control-plane client for an SGLang server.

Followed upstream: SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e
(sgl-project/sglang main of 2026-06-22, the revision docs/sglang-layouts.md follows);
paths under python/sglang/srt/:

- the hook: ``update_weights_from_tensor(named_tensors, load_format=L)`` with ``L``
  listed in ``--custom-weight-loader`` runs ``dynamic_import(L)(self.model,
  named_tensors)`` in every TP worker (model_executor/model_runner.py 2066-2095,
  server_args.py 2308-2314, utils/common.py 3336), each worker getting its own entry of
  ``serialized_named_tensors[tp_rank]`` (managers/tp_worker.py 165-174). It is the one
  per-worker hook that runs caller code on the live model; update_weights_from_ipc
  is bound to the checkpoint-engine package, update_weights_from_distributed to full
  tensors broadcast from rank 0 into ``load_weights``.
- what the hook cannot do: model_runner returns (True, "Success") after the loader
  whatever it did (2088-2095), and an exception there ends the scheduler process
  (managers/scheduler.py 4229-4233: the server goes down). So the loader here never
  raises: it records the refit's outcome (committed or torn, with the version) in the
  refit's store, and the client reads it from there, raising on the trainer when any
  worker did not commit.
- the version: ``weight_version`` of a request is applied only on success
  (managers/tokenizer_control_mixin.py 485-489), and success is always reported for
  a custom loader; so the client sends none with the update and sets it afterwards
  with ``/update_weight_version`` (entrypoints/http_server.py 1309-1320), only when
  every worker of the server committed.
- the post-load step: DeepSeek MLA keeps ``w_kc``/``w_vc`` derived from
  ``kv_b_proj`` (models/deepseek_common/deepseek_weight_loader.py 411-623,
  ``post_load_weights(is_nextn, weight_names)``), rerun per layer after every refit.

The control messages travel as the hook's ``named_tensors`` (tensors, since the HTTP
route carries serialized tensors only): ``reshard.init`` (the ReshardInitInfo as JSON
bytes, uint8), ``reshard.update`` (the version, int64), ``reshard.shutdown``. SGLang
is imported only inside the worker process (its parallel state, its server args); the
client needs none of it beyond the ``server`` object it is given."""

from __future__ import annotations

import datetime
import json
import logging

from typing import Any, Dict, List, Optional, Tuple

from ..errors import Status, error
from .post_load import Refused, Rerun, Rule, staged_rules
from .rendezvous import open_client_store
from .worker import ReshardInitInfo, ReshardUpdateInfo, WorkerCore

LOADER = __name__ + ".load_weights"  # the --custom-weight-loader / load_format value
INIT, UPDATE, SHUTDOWN = "reshard.init", "reshard.update", "reshard.shutdown"
OUTCOME = "sglang/outcome/%s/%d"  # (refit version or "init", refit rank) -> JSON
# SGLang's --moe-runner-backend values whose w13 is the FusedMoE layer's [gate; up]
WRITABLE_MOE_RUNNERS = ("auto", "triton")
# the ServerArgs fields server_problems reads (server_args.py at the followed revision)
SERVER_FLAGS = ("dp_size", "enable_dp_attention", "ep_size", "enable_eplb",
                "ep_num_redundant_experts", "enable_lora", "moe_runner_backend")
# the parallel-state functions sglang_place calls (sglang.srt.distributed)
PARALLEL_STATE = ("get_tensor_model_parallel_rank", "get_tensor_model_parallel_world_size",
                  "get_pipeline_model_parallel_world_size")

_RECEIVERS: Dict[int, "SGLangReceiver"] = {}  # id(model) -> this worker's receiver
log = logging.getLogger(__name__)


def spec_keys(spec: str) -> Dict[str, str]:
    """The key=value pairs of a spec string (its grammar: comma-separated pairs), for
    comparing the server's flags with it; the library parses and checks the spec."""
    return dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv)


def sglang_place() -> Any:
    """This worker's place in its server, from SGLang's own state (imported here, in
    the worker process): tp_rank, tp_size, pp_size and the server args."""
    from sglang.srt.distributed import (get_pipeline_model_parallel_world_size,
                                        get_tensor_model_parallel_rank,
                                        get_tensor_model_parallel_world_size)
    from sglang.srt.server_args import get_global_server_args
    from types import SimpleNamespace
    return SimpleNamespace(tp_rank=int(get_tensor_model_parallel_rank()),
                           tp_size=int(get_tensor_model_parallel_world_size()),
                           pp_size=int(get_pipeline_model_parallel_world_size()),
                           server_args=get_global_server_args())


def server_problems(args: Any, infer: str, tp_size: int, pp_size: int) -> List[str]:
    """What the server runs that the infer spec does not say, or that the refit cannot
    write, each by SGLang's flag (server_args.py at the followed revision):
    --tp-size against tp; --dp-size > 1 without --enable-dp-attention (independent
    schedulers, each a whole model: engines=K); DP attention and its size against
    dp/dp_attention; --ep-size against ep; --pp-size > 1; --enable-eplb and redundant
    experts (experts move at run time); --enable-lora (wrapped layers); a
    --moe-runner-backend other than auto/triton (another w13 form)."""
    kv = spec_keys(infer)
    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    out: List[str] = []
    tp = int(kv.get("tp", 1))
    if tp_size != tp:
        out.append("SGLang --tp-size %d, the infer spec says tp=%d" % (tp_size, tp))
    dp, dp_attn = int(g("dp_size", 1) or 1), bool(g("enable_dp_attention", False))
    spec_dp, spec_attn = int(kv.get("dp", 1)), kv.get("dp_attention", "off") == "on"
    if dp > 1 and not dp_attn:
        out.append("SGLang --dp-size %d without --enable-dp-attention runs %d independent "
                   "schedulers (each a whole model): give the infer spec engines=%d"
                   % (dp, dp, dp))
    elif dp_attn != spec_attn or (dp_attn and dp != spec_dp):
        out.append("SGLang runs %s, the infer spec says %s"
                   % ("--enable-dp-attention --dp-size %d" % dp if dp_attn else
                      "no DP attention", "dp=%d,dp_attention=on" % spec_dp if spec_attn
                      else "no dp_attention"))
    ep = int(g("ep_size", 1) or 1)
    spec_ep = kv.get("ep", "off")
    want_ep = tp if spec_ep == "on" else 1 if spec_ep == "off" else int(spec_ep)
    if ep != want_ep:
        out.append("SGLang --ep-size %d, the infer spec says ep=%s" % (ep, spec_ep))
    if pp_size != 1:
        out.append("SGLang --pp-size %d: pipeline parallelism is not modelled" % pp_size)
    if g("enable_eplb", False) or int(g("ep_num_redundant_experts", 0) or 0):
        out.append("the server runs with --enable-eplb / --ep-num-redundant-experts: "
                   "experts move between slots at run time and the refit does not follow "
                   "them (refused rather than writing experts into the wrong slots)")
    if g("enable_lora", None):
        out.append("the server runs with --enable-lora: its layers are wrapped and the "
                   "refit does not map their names")
    runner = str(g("moe_runner_backend", "auto") or "auto")
    if runner not in WRITABLE_MOE_RUNNERS:
        out.append("the server runs --moe-runner-backend %s, whose w13 form the refit does "
                   "not write (it writes the Triton runner's [gate; up])" % runner)
    return out


def sglang_post_load_rules(model: Any, declared: List[str], live: Dict[str, Any]) -> List[Rule]:
    """The parameters SGLang holds in a post-load form: the staged ones (post_load.py)
    and DeepSeek MLA's ``w_kc``/``w_vc``, derived from each layer's
    ``self_attn.kv_b_proj.weight`` by the model's post_load_weights(is_nextn,
    weight_names) (deepseek_weight_loader.py 411): rerun for that layer after every
    refit; a model without post_load_weights has its kv_b_proj refused by name."""
    rules: List[Rule] = list(staged_rules(declared, live))
    post = getattr(model, "post_load_weights", None)
    by_id = {id(t): n for n, t in live.items()}
    for mod_name, m in model.named_modules():
        if not (hasattr(m, "w_kc") or hasattr(m, "w_vc")):
            continue
        w = getattr(getattr(m, "kv_b_proj", None), "weight", None)
        name = by_id.get(id(w), (mod_name + ".kv_b_proj.weight").lstrip("."))
        if callable(post):
            rules.append(Rerun(name, "post_load_weights(weight_names=[%r])" % name,
                               lambda post=post, name=name: post(is_nextn=False,
                                                                 weight_names=[name])))
        else:
            rules.append(Refused(name, "MLA module %r keeps w_kc/w_vc derived from it and "
                                 "the model has no post_load_weights to rerun" % mod_name))
    return rules


class SGLangReceiver(WorkerCore):
    """One SGLang TP worker's receiver: WorkerCore over the worker's live model, placed
    by SGLang's own parallel state (``place``: tp_rank, tp_size, pp_size,
    server_args; sglang_place() in a real worker). Refit rank: train world +
    engine_index * ranks per server + tp_rank (a server's DP-attention and EP groups
    live inside its TP ranks)."""

    def __init__(self, model: Any, place: Any, device: Any = "cpu") -> None:
        self.place = place
        self.setup(model, place, device)

    def refit_rank(self, s: Any, info: ReshardInitInfo) -> Tuple[int, List[str]]:
        problems = []
        if not 0 <= info.engine_index < s.engines:
            problems.append("engine_index %d outside the spec's %d server(s)"
                            % (info.engine_index, s.engines))
        if not 0 <= self.place.tp_rank < s.per_engine:
            problems.append("SGLang tp_rank %d outside the server's %d ranks"
                            % (self.place.tp_rank, s.per_engine))
        rank = s.train_world + info.engine_index * s.per_engine + self.place.tp_rank
        return rank, problems

    def engine_problems(self, info: ReshardInitInfo) -> List[str]:
        return server_problems(self.place.server_args, info.infer, self.place.tp_size,
                               self.place.pp_size)

    def post_load_rules(self, declared: List[str], live: Dict[str, Any],
                        info: ReshardInitInfo) -> List[Rule]:
        return sglang_post_load_rules(self.model, declared, live)

    def publish(self, key: str, err: str) -> None:
        """This worker's outcome of ``key`` (a version, or "init") for the client."""
        store = getattr(self, "store", None)
        if store is None:
            return
        out = dict(self.weights_state(), error=err) if self.plan is not None else \
            {"state": "none", "error": err}
        out.pop("delta", None)
        store.set(OUTCOME % (key, self.rank), json.dumps(out))

    def handle(self, kind: str, payload: Any) -> None:
        """One control message (INIT, UPDATE, SHUTDOWN); never raises: the outcome
        goes to the refit's store (and SGLang's log)."""
        key = {INIT: "init", SHUTDOWN: "shutdown"}.get(kind) or str(payload)
        try:
            if kind == INIT:
                self.init_transfer_engine(self.parse_init_info(payload))
            elif kind == UPDATE:
                self.start_weight_update()
                try:
                    self.receive_weights(ReshardUpdateInfo(int(payload)))
                    self.finish_weight_update()
                except BaseException:
                    self.abort_weight_update()
                    raise
            else:
                self.shutdown()
                return
        except Exception as e:  # noqa: BLE001 - reported through the store, not raised
            err = "engine %d, infer rank %d: %s: %s" % (
                getattr(getattr(self, "info", None), "engine_index", -1),
                getattr(self, "rank", -1), type(e).__name__, e)
            log.error("reshard: %s", err)
            self.last_error = err
            self.publish(key, err)
            return
        self.last_error = ""
        self.publish(key, "")


def _message(named_tensors: List[Tuple[str, Any]]) -> Tuple[str, Any]:
    names = [n for n, _ in named_tensors]
    if len(named_tensors) != 1 or names[0] not in (INIT, UPDATE, SHUTDOWN):
        raise ValueError("reshard's SGLang loader takes one control message (%s, %s or "
                         "%s), got %s: send weights through reshard's client, not this "
                         "load_format" % (INIT, UPDATE, SHUTDOWN, names[:4]))
    name, t = named_tensors[0]
    if name == INIT:
        return name, json.loads(bytes(t.cpu().numpy().tobytes()).decode())
    return name, int(t.reshape(-1)[0]) if name == UPDATE else None


def load_weights(model: Any, named_tensors: List[Tuple[str, Any]]) -> None:
    """SGLang's custom weight loader (``--custom-weight-loader
    reshard.integrations.sglang.load_weights``; model_runner calls it in every TP
    worker as ``custom_loader(self.model, named_tensors)``). INIT builds this worker's
    receiver (SGLang's parallel state, fail-closed check of the live parameters,
    agreement with every refit rank); UPDATE runs refit ``version`` into the live
    parameters in place, then the post-load rules; SHUTDOWN closes the communicator.
    Outcomes go to the refit's store; only a malformed message (not reshard's) raises
    ValueError here."""
    kind, payload = _message(named_tensors)
    recv = _RECEIVERS.get(id(model))
    if kind == INIT:
        if recv is not None:  # a new refit group (the trainer restarted): drop the old one
            recv.shutdown()
        recv = _RECEIVERS[id(model)] = SGLangReceiver(model, sglang_place(), _device(model))
    elif recv is None:
        log.error("reshard: %s before %s on this worker", kind, INIT)
        return
    recv.handle(kind, payload)
    if kind == SHUTDOWN:
        _RECEIVERS.pop(id(model), None)


def receiver_of(model: Any) -> Optional[SGLangReceiver]:
    """The receiver the loader built for ``model`` in this worker (None before INIT
    or after SHUTDOWN): weights_state() and last_error, for the worker's own checks."""
    return _RECEIVERS.get(id(model))


def _device(model: Any) -> Any:
    p = next(iter(model.parameters()), None)
    return getattr(p, "device", "cpu")


class SGLangClient:
    """The trainer's control plane for one SGLang server (ReshardTrainer's client:
    init_weight_transfer_engine, start_weight_update, update_weights,
    finish_weight_update, shutdown), over ``server``: any object with
    ``post(path, body) -> dict`` for SGLang's HTTP routes (/pause_generation,
    /update_weights_from_tensor, /continue_generation, /update_weight_version;
    HTTPServer below for a real one). ``tp_size``: the server's --tp-size (one
    serialized message per TP rank); ``serialize``: SGLang's
    MultiprocessingSerializer.serialize(obj, output_str=True) (imported from SGLang
    when not given). ``pause``: pause generation around each update (slime's
    update step does)."""

    def __init__(self, server: Any, tp_size: int, serialize: Any = None,
                 pause: str = "retract") -> None:
        self.server, self.tp_size, self.pause = server, int(tp_size), pause
        self._serialize = serialize
        self.store: Any = None
        self.info: Optional[Dict[str, Any]] = None
        self.weight_version: Optional[str] = None  # what this client last set
        self.paused = False

    def _post(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        out = self.server.post(path, body)
        if isinstance(out, dict) and out.get("success", True) is False:
            raise error(Status.TRANSPORT, "SGLang server %d: %s failed: %s"
                        % (self._engine(), path, out.get("message")))
        return out

    def _engine(self) -> int:
        return int((self.info or {}).get("engine_index", 0))

    def _send(self, name: str, tensor: Any, flush_cache: bool) -> None:
        ser = self._serialize
        if ser is None:
            from sglang.srt.utils import MultiprocessingSerializer
            ser = lambda obj: MultiprocessingSerializer.serialize(obj, output_str=True)  # noqa: E731
        one = ser([(name, tensor)])
        self._post("/update_weights_from_tensor",
                   {"serialized_named_tensors": [one] * self.tp_size, "load_format": LOADER,
                    "flush_cache": flush_cache})

    def _outcomes(self, key: str, timeout_s: float) -> List[Dict[str, Any]]:
        """Every TP worker's outcome of ``key``; TIMEOUT naming the silent ranks."""
        from .ranks import sizes
        info = self.info
        s = sizes(info["train"], info["infer"])
        base = s.train_world + self._engine() * s.per_engine
        keys = [OUTCOME % (key, base + r) for r in range(s.per_engine)]
        try:
            self.store.wait(keys, datetime.timedelta(seconds=timeout_s))
        except RuntimeError as e:
            late = []
            for r, k in enumerate(keys):
                try:
                    self.store.wait([k], datetime.timedelta(milliseconds=10))
                except RuntimeError:
                    late.append(base + r)
            raise error(Status.TIMEOUT, "SGLang server %d: refit %s: rank(s) %s gave no "
                        "outcome within %.1f s (dead or stalled worker); the weight version "
                        "is not advanced" % (self._engine(), key, late, timeout_s)) from e
        return [json.loads(self.store.get(k)) for k in keys]

    def check(self, key: str) -> None:
        """Every TP worker of this server committed ``key`` (a version, or "init"), else
        ReshardError: VERIFY naming the first worker's error, TIMEOUT naming silent ones.
        A client attached without a server (attach()) checks what another posted."""
        bad = [o for o in self._outcomes(key, 2 * float(self.info["timeout_s"]))
               if o["error"] or o["state"] != "committed" and key != "init"]
        if bad:
            raise error(Status.VERIFY, "SGLang server %d: refit %s did not commit on every "
                        "worker (%s); the weight version is not advanced: %s"
                        % (self._engine(), key, bad[0]["state"], bad[0]["error"] or bad[0]))

    def attach(self, init_info: Dict[str, Any]) -> None:
        """Open the refit's store for ``init_info`` (its server by engine_index), so
        check() reads its workers' outcomes; sends nothing."""
        self.info = dict(init_info)
        info = ReshardInitInfo(**self.info)
        self.store = open_client_store(info.rendezvous(), info.timeout_s * 3)

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        import torch
        self.attach(init_info)
        raw = torch.frombuffer(bytearray(json.dumps(self.info).encode()), dtype=torch.uint8)
        self._send(INIT, raw, flush_cache=False)
        self.check("init")

    def start_weight_update(self) -> None:
        if self.pause:
            self._post("/pause_generation", {"mode": self.pause})
            self.paused = True

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        import torch
        version = int(update_info["version"])
        self._send(UPDATE, torch.tensor([version], dtype=torch.int64), flush_cache=True)
        self.check(str(version))
        self._landed = version

    def finish_weight_update(self, weight_version: Any = None) -> None:
        """With a version (every worker committed it): SGLang's weight version becomes
        it, then generation continues. Without one (a failed refit): generation stays
        paused on torn weights; the version stays."""
        if weight_version is None:
            return
        self._post("/update_weight_version", {"new_version": str(weight_version),
                                              "abort_all_requests": False})
        self.weight_version = str(weight_version)
        if self.paused:
            self._post("/continue_generation", {})
            self.paused = False

    def shutdown(self) -> None:
        import torch
        self._send(SHUTDOWN, torch.zeros(1, dtype=torch.uint8), flush_cache=False)


class HTTPServer:
    """A real SGLang server's HTTP routes: post(path, body) -> the JSON reply."""

    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        self.url, self.timeout_s = url.rstrip("/"), timeout_s

    def post(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        import urllib.error
        import urllib.request
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}") or {"success": False, "message": str(e)}


__all__ = ["HTTPServer", "INIT", "LOADER", "SHUTDOWN", "SGLangClient", "SGLangReceiver",
           "UPDATE", "load_weights", "receiver_of", "server_problems", "sglang_place",
           "sglang_post_load_rules", "spec_keys"]

