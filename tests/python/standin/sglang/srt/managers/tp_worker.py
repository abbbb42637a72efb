"""Stand-in of SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e (python/sglang/srt/managers/tp_worker.py): TpModelWorker.update_weights_from_tensor.

(165-174): deserializes its own entry of the request's serialized_named_tensors
(index tp_rank) with MultiprocessingSerializer and calls its ModelRunner's
update_weights_from_tensor(named_tensors, load_format), returning (success,
message)."""

from sglang.srt.utils import MultiprocessingSerializer


class TpModelWorker:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.tp_rank = model_runner.tp_rank

    def update_weights_from_tensor(self, recv_req):
        return self.model_runner.update_weights_from_tensor(
            named_tensors=MultiprocessingSerializer.deserialize(
                recv_req.serialized_named_tensors[self.tp_rank]),
            load_format=recv_req.load_format)
