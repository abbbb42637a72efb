"""Stand-in of SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e (python/sglang/srt/model_executor/model_runner.py): ModelRunner's weight update from tensors, with the custom weight loader path.

update_weights_from_tensor(named_tensors, load_format=None) (2066-2095): each tensor
unwrapped onto the worker's device (_unwrap_tensor 3250-3253), then by load_format:
"direct" (each tensor copied into the parameter of its name), one listed in
server_args.custom_weight_loader (dynamic_import(load_format)(self.model,
named_tensors)), None (model.load_weights), anything else NotImplementedError;
returns (True, "Success") whatever the custom loader did, and lets its exceptions
through (the scheduler then exits: managers/scheduler.py 4229-4233).
"flattened_bucket" is not modelled (refused here). The constructor stands for what
ModelRunner.__init__ and initialize_model_parallel set up in a TP worker: the model
(here given, already loaded), this worker's tp_rank / tp_size, the process-global
server args."""

from sglang.srt.distributed import _set_place
from sglang.srt.server_args import set_global_server_args_for_scheduler
from sglang.srt.utils import dynamic_import


class ModelRunner:
    def __init__(self, model, server_args, tp_rank, device="cpu"):
        self.model, self.server_args, self.tp_rank = model, server_args, tp_rank
        self.tp_size, self.device = server_args.tp_size, device
        _set_place(tp_rank, server_args.tp_size, server_args.pp_size)
        set_global_server_args_for_scheduler(server_args)

    def update_weights_from_tensor(self, named_tensors, load_format=None):
        if load_format == "flattened_bucket":
            raise NotImplementedError("stand-in: flattened_bucket is not modelled")
        named_tensors = [(name, _unwrap_tensor(t, self.tp_rank, self.device))
                         for name, t in named_tensors]
        if load_format == "direct":
            params = dict(self.model.named_parameters())
            for name, t in named_tensors:
                params[name].data.copy_(t)
        elif load_format in self.server_args.custom_weight_loader:
            custom_loader = dynamic_import(load_format)
            custom_loader(self.model, named_tensors)
        elif load_format is None:
            self.model.load_weights(named_tensors)
        else:
            raise NotImplementedError(f"Unknown load_format={load_format}")
        return True, "Success"


def _unwrap_tensor(tensor, tp_rank, device):
    get = getattr(tensor, "get", None)  # LocalSerializedTensor: one entry per rank
    if callable(get):
        tensor = get(tp_rank)
    return tensor.to(device)
