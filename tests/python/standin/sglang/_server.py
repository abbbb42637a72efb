"""Stand-in of SGLang's server process boundary (no upstream file): the HTTP routes
reshard's client posts and the scheduler's dispatch to every TP worker, between
separately started processes over a torch.distributed store; SGLang at
1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e.

What it models: entrypoints/http_server.py /update_weights_from_tensor (1250-1269:
{"success", "message"}, 400 on failure), /pause_generation and /continue_generation
(1559-1577), /update_weight_version (1309-1320: sets server_args.weight_version);
the body parsed into its io_struct dataclass (an unknown field refused, as FastAPI
refuses it). The tokenizer manager's update_weights_from_tensor
(managers/tokenizer_control_mixin.py 464-491) fans the request out to every TP
worker's scheduler and merges the replies (success only when all succeeded); the
request's weight_version is applied only on success. Each scheduler
(managers/scheduler_components/weight_updater.py 147-160) calls its TpModelWorker,
flushes the cache on success when asked; an exception in the worker ends the
scheduler process (managers/scheduler.py 4229-4233: here serve() re-raises, the
process exits, and the server answers {"success": False} naming the silent worker
after timeout_s, where SGLang's parent process would take the server down)."""

import datetime
import json

from sglang.srt.managers.io_struct import (ContinueGenerationReqInput, PauseGenerationReqInput,
                                           UpdateWeightsFromTensorReqInput,
                                           UpdateWeightVersionReqInput)

ROUTES = {"/update_weights_from_tensor": UpdateWeightsFromTensorReqInput,
          "/pause_generation": PauseGenerationReqInput,
          "/continue_generation": ContinueGenerationReqInput,
          "/update_weight_version": UpdateWeightVersionReqInput}


class StandinServer:
    """Server ``engine`` of ``tp_size`` TP workers (each running serve()) on ``store``."""

    def __init__(self, store, engine, tp_size, timeout_s=60.0):
        self.store, self.prefix, self.tp_size = store, "sglang/e%d/" % engine, tp_size
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.seq, self.paused, self.weight_version = 0, False, "default"
        self.calls = []  # (path, body) as posted

    def post(self, path, body):
        self.calls.append((path, body))
        cls = ROUTES.get(path)
        if cls is None:
            return {"success": False, "message": "404: no route %s" % path}
        try:
            req = cls(**body)
        except (TypeError, ValueError) as e:
            return {"success": False, "message": "422: %s" % e}
        if cls is PauseGenerationReqInput:
            self.paused = True
        elif cls is ContinueGenerationReqInput:
            self.paused = False
        elif cls is UpdateWeightVersionReqInput:
            self.weight_version = req.new_version
        else:
            return self._fan_out(req)
        return {"success": True, "message": "ok"}

    def _fan_out(self, req):
        n = self.seq
        self.seq += 1
        self.store.set(self.prefix + str(n), json.dumps(req.__dict__))
        keys = [self.prefix + "%d/reply/%d" % (n, r) for r in range(self.tp_size)]
        replies = []
        for r, k in enumerate(keys):
            try:
                self.store.wait([k], self.timeout)
            except RuntimeError:
                return {"success": False, "message": "TP worker %d did not answer request "
                        "%d within %s (its scheduler exited)" % (r, n, self.timeout)}
            replies.append(json.loads(self.store.get(k)))
        bad = [m for ok, m in replies if not ok]
        success = not bad
        if success and req.weight_version is not None:
            self.weight_version = req.weight_version
        return {"success": success, "message": bad[0] if bad else replies[0][1]}

    def close(self):
        """The stand-in's end of the server: every scheduler's serve() returns."""
        self.store.set(self.prefix + str(self.seq), json.dumps({"close": True}))


def serve(store, engine, tp_worker, timeout_s=600.0, after=None):
    """Scheduler of TP worker ``tp_worker`` of server ``engine``: answer each request
    (after(req) runs once the reply is sent) until close()."""
    prefix, n = "sglang/e%d/" % engine, 0
    while True:
        store.wait([prefix + str(n)], datetime.timedelta(seconds=timeout_s))
        body = json.loads(store.get(prefix + str(n)))
        if body.get("close"):
            return
        req = UpdateWeightsFromTensorReqInput(**body)
        success, message = tp_worker.update_weights_from_tensor(req)  # raises: exits
        store.set(prefix + "%d/reply/%d" % (n, tp_worker.tp_rank), json.dumps([success, message]))
        if after is not None:
            after(req)
        n += 1
