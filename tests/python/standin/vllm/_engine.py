"""Stand-in of one vLLM engine's weight-sync control plane, as the trainer reaches it
(VLLMWeightSyncClient: the EngineClient / HTTP / Ray surface), over in-process
worker engines, one thread per worker per call (vLLM's collective RPC).

What it models, from /work/shared/FRAMEWORKS.md (Dec 2026 audit) and the files at
the revision named in ../__init__.py (base.py, v1/worker/gpu_worker.py):
- one update session at a time: a second start_weight_update is refused;
- a failed start, update or finish, two ways (``fail_closed``):
  False (FRAMEWORKS.md's worker): every worker runs engine.abort_weight_update(),
  then engine.reset_weight_update_target(), and the session is dropped;
  True (gpu_worker.py at 142e770e): no abort; the worker marks the update failed,
  resets the target, drops the session, and refuses every later start ("serving is
  disabled") until restarted or fully reloaded;
  either way the call raises the first worker's error;
- finish_weight_update(weight_version): the version get_weight_version() reports
  advances only when every worker finished;
- list payloads: each worker takes entry data_parallel_rank * world_size + rank
  (gpu_worker.py: one entry per worker across the data-parallel replicas);
- _require_resident_weights: updates are refused while the weights sleep (sleep
  level 1 or 2, until wake_up with the weights tag).
It is not vLLM."""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional


class StandinEngine:
    def __init__(self, workers: List[Any], errors: Optional[Dict[int, BaseException]] = None,
                 name: str = "engine 0", fail_closed: bool = False) -> None:
        self.workers = workers
        self.fail_closed = fail_closed
        self.failed = False
        self.errors = {} if errors is None else errors
        self.name = name
        self.session = False
        self.weight_version: Optional[str] = None
        self.asleep: set = set()
        self.calls: List[str] = []
        self.threads: List[threading.Thread] = []

    # -- vLLM's own surface ---------------------------------------------------------
    def get_weight_version(self) -> Optional[str]:
        return self.weight_version

    def sleep(self, level: int = 1) -> None:
        self.asleep = {"weights", "kv_cache"}
        self.sleep_level = level

    def wake_up(self, tags: Optional[List[str]] = None) -> None:
        self.asleep -= set(tags or ["weights", "kv_cache"])

    def _require_resident_weights(self, what: str) -> None:
        if "weights" in self.asleep:
            raise RuntimeError("%s: cannot %s while the weights are asleep" % (self.name, what))

    # -- VLLMWeightSyncClient ---------------------------------------------------------
    def _all(self, method: str, fn: Any) -> None:
        errs: List[BaseException] = []

        def body(i: int, w: Any) -> None:
            try:
                fn(i, w)
            except Exception as e:  # noqa: BLE001 - recorded per worker
                self.errors[getattr(w, "rank", i)] = e
                errs.append(e)
        ts = [threading.Thread(target=body, args=(i, w)) for i, w in enumerate(self.workers)]
        self.threads += ts
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errs:
            raise errs[0]

    def _failed(self) -> None:
        for w in self.workers:
            if not self.fail_closed:
                w.abort_weight_update()
            w.reset_weight_update_target()
        self.session = False
        self.failed = self.fail_closed

    def _in_session(self, method: str, fn: Any) -> None:
        try:
            self._all(method, fn)
        except BaseException:
            self._failed()
            raise

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        self._all("init", lambda i, w: w.init_transfer_engine(w.parse_init_info(init_info)))

    def start_weight_update(self) -> None:
        self.calls.append("start")
        self._require_resident_weights("start a weight update")
        if self.failed:
            raise RuntimeError("%s: a weight update failed after the transaction started; "
                               "serving is disabled (restart or reload_weights)" % self.name)
        if self.session:
            raise RuntimeError("%s: a weight update is already active" % self.name)
        self.session = True
        self._in_session("start", lambda i, w: w.start_weight_update())

    def update_weights(self, update_info: Any) -> None:
        self.calls.append("update")
        self._require_resident_weights("update weights")
        if not self.session:
            raise RuntimeError("%s: update_weights without start_weight_update" % self.name)

        def one(i: int, w: Any) -> None:
            d = update_info
            if isinstance(update_info, list):
                pc = w.parallel_config
                d = update_info[pc.data_parallel_index * pc.tensor_parallel_size
                                * getattr(pc, "pipeline_parallel_size", 1) + pc.rank]
            w.update_weights(d)
        self._in_session("update", one)

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        self.calls.append("finish")
        if not self.session:
            raise RuntimeError("%s: finish_weight_update without start_weight_update"
                               % self.name)
        self._in_session("finish", lambda i, w: w.finish_weight_update())
        self.session = False
        if weight_version is not None:
            self.weight_version = weight_version

    def join(self) -> None:
        for t in self.threads:
            t.join(120)
