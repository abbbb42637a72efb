"""A stand-in for vLLM's weight-sync control plane between separately started
processes: trainer rank 0 holds a StoreClient (the four methods of vLLM's
VLLMWeightSyncClient protocol), each inference worker runs serve(), which calls its
weight-transfer engine as vLLM's worker does for each request (parse the dict, call
the engine) and replies. Requests and replies travel through a torch.distributed
store, one request at a time, every worker of the engine answering each (as vLLM's
collective RPC to the engine's workers).

A failed update (vLLM's newest weight-transfer API): a worker whose start, update
or finish raised runs its engine's abort_weight_update() then
reset_weight_update_target() and keeps serving; the client then asks every worker
of the engine to do the same ("abort_weight_update": the session is dropped on all
of them, as the engine drops it) and raises the first error.
finish_weight_update(weight_version) carries the trainer's version: each worker's
the client reports it as the engine's weight version (``weight_version``, vLLM's
get_weight_version()) only once every worker finished.

A dead driver: vLLM's own control plane (Ray, or the HTTP server's client) is what
tells an idle engine that the trainer is gone; this stand-in models it with a
heartbeat. StoreClient bumps a counter in the store every ``timeout_s / 6`` seconds
from a daemon thread, and serve() fails, naming trainer rank 0, when the counter has
not moved for ``driver_timeout_s`` while it waits for a request."""

from __future__ import annotations

import datetime
import json
import threading
import time
from typing import Any, Dict, List

from reshard.errors import Status, error


class StoreClient:
    """The control plane of engine ``engine`` (``workers`` processes) on ``store``."""

    def __init__(self, store: Any, engine: int, workers: int, timeout_s: float) -> None:
        self.store, self.prefix, self.workers = store, "rpc/e%d/" % engine, workers
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.seq = 0
        self.weight_version: Any = None  # what vLLM's get_weight_version() reports
        self.alive = threading.Event()  # cleared by shutdown(): the beat stops
        self.alive.set()
        threading.Thread(target=self._beat, args=(timeout_s / 6.0,), daemon=True).start()

    def _beat(self, period_s: float) -> None:
        while self.alive.is_set():
            self.store.add(self.prefix + "alive", 1)
            time.sleep(period_s)

    def _call(self, method: str, arg: Any = None) -> None:
        try:
            self._one(method, arg)
        except RuntimeError:
            if method in SESSION:  # the engine drops the session on every worker
                try:
                    self._one("abort_weight_update")
                except RuntimeError:
                    pass
            raise

    def _one(self, method: str, arg: Any = None) -> None:
        n = self.seq
        self.seq += 1
        self.store.set(self.prefix + str(n), json.dumps({"method": method, "arg": arg}))
        keys = [self.prefix + "%d/reply/%d" % (n, w) for w in range(self.workers)]
        self.store.wait(keys, self.timeout)
        errors: List[str] = [json.loads(self.store.get(k))["error"] for k in keys]
        errors = [e for e in errors if e]
        if errors:
            raise RuntimeError("%s failed on the inference side: %s" % (method, errors[0]))

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        self._call("init_weight_transfer_engine", init_info)

    def start_weight_update(self) -> None:
        self._call("start_weight_update")

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        self._call("update_weights", update_info)

    def finish_weight_update(self, weight_version: Any = None) -> None:
        self._call("finish_weight_update", weight_version)
        if weight_version is not None:  # every worker finished it
            self.weight_version = weight_version

    def shutdown(self) -> None:
        try:
            self._call("shutdown")
        finally:
            self.alive.clear()


SESSION = ("start_weight_update", "update_weights", "finish_weight_update")


def serve(store: Any, engine: int, worker: int, target: Any, on_finish: Any = None,
          timeout_s: float = 600.0, driver_timeout_s: float = 60.0,
          on_error: Any = None) -> None:
    """Answer requests for ``target`` (a weight-transfer engine) until "shutdown" or an
    init that failed. ``on_finish(weight_version)`` runs after each
    finish_weight_update that succeeded (the example checks the model there, after
    the reply); ``on_error(method, error)`` after each failed start, update or
    finish, once the engine ran abort_weight_update() and
    reset_weight_update_target() (vLLM's worker path); serving goes on unless it
    returns True (then the error is re-raised). Errors are
    replied; an init error is then re-raised. Waiting for a request fails (ReshardError TIMEOUT naming
    trainer rank 0) after ``timeout_s``, or once the driver's heartbeat has been seen
    and then stood still for ``driver_timeout_s``."""
    prefix, n = "rpc/e%d/" % engine, 0
    while True:
        wait_request(store, prefix, n, worker, engine, timeout_s, driver_timeout_s)
        req = json.loads(store.get(prefix + str(n)))
        err, stop = "", req["method"] == "shutdown"
        try:
            m = req["method"]
            if m == "init_weight_transfer_engine":
                target.init_transfer_engine(target.parse_init_info(req["arg"]))
            elif m == "update_weights":
                target.update_weights(req["arg"])
            elif m in ("start_weight_update", "finish_weight_update", "shutdown"):
                getattr(target, m)()
            elif m == "abort_weight_update":
                target.abort_weight_update()
                target.reset_weight_update_target()
            else:
                raise ValueError("unknown request %r" % m)
        except Exception as e:  # noqa: BLE001 - replied to the trainer
            err = "worker %d: %s: %s" % (worker, type(e).__name__, e)
            if req["method"] not in SESSION:
                stop = True
                store.set(prefix + "%d/reply/%d" % (n, worker), json.dumps({"error": err}))
                raise
            target.abort_weight_update()
            target.reset_weight_update_target()
            store.set(prefix + "%d/reply/%d" % (n, worker), json.dumps({"error": err}))
            if on_error is not None and on_error(req["method"], err):
                raise  # the caller's policy: this failure ends serving
            n += 1
            continue
        store.set(prefix + "%d/reply/%d" % (n, worker), json.dumps({"error": err}))
        if req["method"] == "finish_weight_update" and on_finish is not None:
            on_finish(req["arg"])
        n += 1
        if stop:
            return


def wait_request(store: Any, prefix: str, n: int, worker: int, engine: int,
                 timeout_s: float, driver_timeout_s: float) -> None:
    """Wait for request ``n``, watching the driver's heartbeat (see serve)."""
    t0 = time.monotonic()
    beat, beat_at = None, t0
    while True:
        try:
            store.wait([prefix + str(n)], datetime.timedelta(milliseconds=200))
            return
        except RuntimeError:  # torch's bare "Wait timeout": this slice ended
            pass
        now = time.monotonic()
        seen = store.add(prefix + "alive", 0)
        if seen != beat:
            beat, beat_at = seen, now
        silent = ""
        if seen and now - beat_at > driver_timeout_s:  # 0: no beat seen yet
            silent = "no heartbeat for %.1f s" % (now - beat_at)
        elif now - t0 > timeout_s:
            silent = "no request within %.1f s" % timeout_s
        if silent:
            raise error(Status.TIMEOUT, "worker %d of engine %d: rank(s) 0 (trainer rank 0, "
                        "the control-plane driver) stalled or dead: %s while waiting for "
                        "request %d" % (worker, engine, silent, n))
