"""verl.checkpoint_engine (stand-in: the base module only; the in-tree engines are
imported optionally by the real package and are not modelled)."""

from .base import (CheckpointEngine, CheckpointEngineRegistry, CheckpointEngineWithCache,
                   CheckpointEngineWorker, ColocatedCheckpointEngine, TensorMeta)

__all__ = ["CheckpointEngine", "CheckpointEngineRegistry", "CheckpointEngineWithCache",
           "CheckpointEngineWorker", "ColocatedCheckpointEngine", "TensorMeta"]
