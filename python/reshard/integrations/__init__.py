"""Engine integrations: the refit inside a Megatron trainer and vLLM workers.

Engine-independent (tested for real over torch.distributed gloo across processes):
  WorkerCore        the inference side, with vLLM's WeightTransferEngine lifecycle
  ReshardTrainer    the training side, shaped like vLLM's TrainerWeightTransferEngine
  MegatronChunks    a Megatron rank's model chunks, unwrapped, named as the layout names
  ReshardInitInfo, ReshardTrainerInitInfo, ReshardUpdateInfo   the messages
Engine shells, importing their engine lazily:
  reshard.integrations.vllm   register(), ReshardWeightTransferEngine, ReshardTrainerEngine
  reshard.integrations.sglang load_weights (SGLang's --custom-weight-loader), SGLangClient
See docs/vllm.md, docs/sglang.md."""

from .megatron import MegatronChunks, unwrap
from .post_load import Refused, Rerun, Staged
from .rendezvous import Rendezvous
from .trainer import ReshardTrainer, ReshardTrainerInitInfo
from .worker import ReshardInitInfo, ReshardUpdateInfo, WorkerCore

__all__ = ["MegatronChunks", "Refused", "Rendezvous", "Rerun", "ReshardInitInfo",
           "ReshardTrainer", "ReshardTrainerInitInfo", "ReshardUpdateInfo", "Staged",
           "WorkerCore", "unwrap"]
