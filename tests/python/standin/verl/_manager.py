"""Revision followed: dongha-yoon/verl d6f2c522 (checked against verl-project/verl 1dda039b).
CheckpointEngineManager.update_weights's sequence (verl/checkpoint_engine/base.py
at dongha-yoon/verl d6f2c522) between separately started processes, without Ray:
each actor and rollout worker calls ``sync`` with its worker; the manager's
single-controller steps become store round trips:

1. ``prepare`` on every worker (execute_checkpoint_engine), results gathered in
   order: actor workers, then rollout workers;
2. ``backend_cls.build_topology(actor world, rollout world, metadata)`` (every
   process computes the same; each list must have one entry per worker);
3. ``init_process_group(**its entries)`` on every worker;
4. actor workers ``update_weights(global_steps=...)`` (send_weights), rollout workers
   ``update_weights(global_steps=...)`` (receive_weights into the server adapter);
5. ``finalize`` on every worker.
verl calls this every sync (build_process_group included)."""

from __future__ import annotations

import asyncio
import datetime
import pickle
from typing import Any


class StoreManager:
    def __init__(self, store: Any, actor_world: int, rollout_world: int, backend_cls: type,
                 timeout_s: float = 60.0) -> None:
        self.store, self.actor_world, self.rollout_world = store, actor_world, rollout_world
        self.backend_cls = backend_cls
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.syncs = 0

    def sync(self, worker: Any, side: str, index: int, global_steps: int = None) -> Any:
        n = self.syncs
        self.syncs += 1
        meta = worker.execute_checkpoint_engine("prepare")
        self.store.set("ce/%d/prepare/%s/%d" % (n, side, index), pickle.dumps(meta))
        keys = ["ce/%d/prepare/actor/%d" % (n, i) for i in range(self.actor_world)] + \
            ["ce/%d/prepare/rollout/%d" % (n, i) for i in range(self.rollout_world)]
        self.store.wait(keys, self.timeout)
        metadata = [pickle.loads(self.store.get(k)) for k in keys]
        actor_kwargs, rollout_kwargs = self.backend_cls.build_topology(
            self.actor_world, self.rollout_world, metadata)
        for k, v in actor_kwargs.items():
            assert len(v) == self.actor_world, f"actor_wg_kwargs[{k}] must have length of {self.actor_world}"
        for k, v in rollout_kwargs.items():
            assert len(v) == self.rollout_world, f"rollout_kwargs[{k}] must have length of {self.rollout_world}"
        mine = actor_kwargs if side == "actor" else rollout_kwargs
        worker.execute_checkpoint_engine("init_process_group", **{k: v[index] for k, v in mine.items()})
        result = asyncio.run(worker.update_weights(global_steps=global_steps))
        worker.execute_checkpoint_engine("finalize")
        return result
