"""Which rank of a refit a trainer process or an inference worker is, from its
framework's own parallel state, and the check that the two agree with the specs."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, List, Tuple

from .. import _lib


@dataclass(frozen=True)
class Sizes:
    """The sizes the specs give: ``train_world`` trainer ranks [0, train_world), then
    ``engines`` inference engines of ``tp`` x ``dp`` ranks each (world = train_world
    + engines * tp * dp)."""

    train_world: int
    tp: int
    dp: int
    engines: int
    infer_world: int = 0  # the library's count (reshard_infer_world); 0: tp*dp*engines

    @property
    def world(self) -> int:
        return self.train_world + (self.infer_world or self.engines * self.tp * self.dp)

    @property
    def per_engine(self) -> int:
        """Ranks of one engine: tp * dp under vLLM; tp under SGLang, whose DP attention
        lives inside a server's TP ranks."""
        return (self.world - self.train_world) // self.engines


def sizes(train: str, infer: str) -> Sizes:
    """Sizes of the Megatron spec ``train`` and the vLLM spec ``infer`` (the spec
    grammar of `reshard plan`). Raises ReshardError (INVALID_ARG) for a malformed spec."""
    ts, ispec = _lib.TrainSpec(), _lib.InferSpec()
    _lib.check(_lib.lib.reshard_train_spec_parse(train.encode(), ctypes.byref(ts)),
               "train spec %r" % train)
    _lib.check(_lib.lib.reshard_infer_spec_parse(infer.encode(), ctypes.byref(ispec)),
               "infer spec %r" % infer)
    return Sizes(int(_lib.lib.reshard_train_world(ctypes.byref(ts))), max(1, ispec.tp),
                 max(1, ispec.dp), max(1, ispec.engines),
                 int(_lib.lib.reshard_infer_world(ctypes.byref(ispec))))


def train_convention(train: str) -> str:
    """The training convention the spec ``train`` names ("megatron-lm",
    "megatron-bridge", "fsdp": any fsdp= key), as the library parses it. Raises
    ReshardError (INVALID_ARG) for a malformed spec."""
    ts = _lib.TrainSpec()
    _lib.check(_lib.lib.reshard_train_spec_parse(train.encode(), ctypes.byref(ts)),
               "train spec %r" % train)
    name = _lib.lib.reshard_train_convention_name(ts.convention)
    return name.decode() if name else "megatron-lm"


def fsdp_sizes(train: str) -> Tuple[int, int]:
    """(fsdp, tp) of an FSDP2 train spec (fsdp 0 for a Megatron one)."""
    ts = _lib.TrainSpec()
    _lib.check(_lib.lib.reshard_train_spec_parse(train.encode(), ctypes.byref(ts)),
               "train spec %r" % train)
    return int(ts.fsdp), max(1, int(ts.tp))


def worker_rank(s: Sizes, engine_index: int, parallel_config: Any) -> Tuple[int, List[str]]:
    """The refit rank of a vLLM worker, as vLLM's own weight-transfer backends number
    workers (nccl_common.worker_init_process_group: data_parallel_index *
    world_size + rank, world_size = TP * PP), after the trainers and the engines
    before this one: train_world + engine_index * tp * dp + that. Returns (rank,
    problems): a problem for each of vLLM's sizes that disagrees with the infer spec
    (tensor_parallel_size, data_parallel_size, pipeline_parallel_size, which must be
    1), and for an engine index or rank outside the spec."""
    tp = int(getattr(parallel_config, "tensor_parallel_size", 1))
    dp = int(getattr(parallel_config, "data_parallel_size", 1))
    pp = int(getattr(parallel_config, "pipeline_parallel_size", 1))
    dp_index = int(getattr(parallel_config, "data_parallel_index",
                           getattr(parallel_config, "data_parallel_rank", 0)))
    local = int(getattr(parallel_config, "rank", 0))
    problems = []
    if tp != s.tp:
        problems.append("vLLM tensor_parallel_size %d, the infer spec says tp=%d" % (tp, s.tp))
    if dp != s.dp:
        problems.append("vLLM data_parallel_size %d, the infer spec says dp=%d" % (dp, s.dp))
    if pp != 1:
        problems.append("vLLM pipeline_parallel_size %d: vLLM pipeline parallelism is not "
                        "modelled (pp must be 1)" % pp)
    if not 0 <= engine_index < s.engines:
        problems.append("engine_index %d outside the spec's %d engine(s)" % (engine_index,
                                                                             s.engines))
    if not 0 <= dp_index < s.dp or not 0 <= local < s.tp:
        problems.append("vLLM data_parallel_index %d, rank %d outside dp=%d, tp=%d"
                        % (dp_index, local, s.dp, s.tp))
    rank = s.train_world + engine_index * s.tp * s.dp + dp_index * tp * pp + local
    return rank, problems
