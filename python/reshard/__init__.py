"""reshard: move freshly trained weights from training ranks to inference ranks.

A pure-Python package over libreshard.so (ctypes): the C library plans and moves,
this package describes layouts in PyTorch terms and binds torch tensors and numpy
arrays to them by parameter name, without copies.

    import reshard
    from reshard import Shard, Replicate

    comm = reshard.Comm.from_torch(group)  # or Comm.from_mpi(MPI.COMM_WORLD), ...
    plan = reshard.Model("qwen3-0.6b", layers=2).plan(comm, "tp=2", "tp=2")  # once
    plan.execute(src=trainer_params, dst=None)  # every step
"""

import sys

try:
    import numpy  # noqa: F401  (every module below needs it)
except ImportError as _e:  # the usual first mistake: an interpreter without Debian's packages
    raise ImportError(
        "reshard needs numpy (and torch to bind torch tensors); this interpreter (%s) has "
        "neither: run Debian's /usr/bin/python3, which has python3-numpy and python3-torch, "
        "or install numpy into this one" % sys.executable) from _e

from ._lib import path as library_path  # noqa: E402
from .baseline import Baseline
from .comm import (Comm, InprocGroup, exchange_unique_id, from_cuda_ipc, from_mpi, from_nccl,
                   from_nccl_store, nccl_available, nccl_unique_id, run_threads)
from .dtypes import DType, to_dtype, torch_dtype
from .errors import ReshardError, Status
from .hf import HFSlice, hf_from_shards, open_safetensors, shards_from_hf
from .layout import Fragment, Layout, Parameter
from .model import Model, Refit, agree_values
from .pattern import SENTINEL_BYTE, fill_pattern, verify_pattern
from .placements import Placement, Replicate, Shard, StridedShard
from .plan import ALL_RANKS, DEFAULT_TIMEOUT_S, Plan, placement_from_mpi, plan_fail
from .shared import alloc_shared, shared_like
from .tensors import Quant, QuantInfo, TensorInfo, Tensors, to_quant
from .torch_comm import from_torch
from . import elastic  # noqa: E402  (plans over a membership, lost peers, shrink, rejoin)

Comm.from_mpi = staticmethod(from_mpi)
Comm.from_nccl_store = staticmethod(from_nccl_store)
Comm.from_nccl = staticmethod(from_nccl)
Comm.from_cuda_ipc = staticmethod(from_cuda_ipc)
Comm.from_torch = staticmethod(from_torch)

__version__ = "0.1.0"

__all__ = ["ALL_RANKS", "agree_values", "Baseline", "Comm", "DEFAULT_TIMEOUT_S", "DType", "Fragment", "HFSlice", "InprocGroup", "Layout", "Model", "Parameter",
           "Placement", "Plan", "placement_from_mpi", "Quant", "QuantInfo", "Refit", "Replicate", "ReshardError", "SENTINEL_BYTE", "Shard",
           "Status", "StridedShard", "TensorInfo", "Tensors", "alloc_shared", "exchange_unique_id",
           "fill_pattern", "from_cuda_ipc", "hf_from_shards", "open_safetensors", "shards_from_hf", "from_mpi", "from_nccl", "from_nccl_store", "from_torch", "library_path", "nccl_available",
           "nccl_unique_id", "plan_fail", "run_threads", "shared_like", "to_dtype", "to_quant", "torch_dtype", "verify_pattern"]
