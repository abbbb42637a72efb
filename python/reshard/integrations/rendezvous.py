"""Where the trainer ranks and the inference workers of one refit meet: a key-value
store (a torch.distributed FileStore or TCPStore), a gloo process group of their own
over it (the default torch.distributed group of either framework is left alone), and
the agreement at init by which every rank learns whether every other rank is ready.

Ranks: trainers [0, train_world), inference workers [train_world, world), as in
Model.refit. Every rank of the refit calls join(); nothing here moves weights."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..comm import Comm
from ..errors import ReshardError, Status, error

_PREFIX = "reshard/"


@dataclass
class Rendezvous:
    """How to reach the store: ``store_path`` (a FileStore on a file every process
    sees; one machine or a shared file system) or ``master_address`` and
    ``master_port`` (a TCPStore that trainer rank 0 hosts). ``name`` keeps refits of
    one store apart (a new name for a new group, e.g. after a restart)."""

    store_path: Optional[str] = None
    master_address: Optional[str] = None
    master_port: Optional[int] = None
    name: str = "refit"


def open_store(rv: Rendezvous, rank: int, world: int, timeout_s: float) -> Any:
    """The torch.distributed store of ``rv`` for ``rank`` of ``world`` (rank 0 hosts
    a TCPStore). Raises ReshardError (INVALID_ARG) without a store to open."""
    import torch.distributed as dist
    timeout = datetime.timedelta(seconds=timeout_s)
    if rv.store_path:
        store = dist.FileStore(rv.store_path, world)
        store.set_timeout(timeout)
    elif rv.master_address and rv.master_port:
        store = dist.TCPStore(rv.master_address, int(rv.master_port), world, rank == 0,
                              timeout)
    else:
        raise error(Status.INVALID_ARG, "rank %d: the rendezvous needs store_path or "
                    "master_address and master_port" % rank)
    return dist.PrefixStore(_PREFIX + rv.name + "/", store)


def open_client_store(rv: Rendezvous, timeout_s: float) -> Any:
    """The store of ``rv`` for a process that is no rank of the refit (an engine's
    control-plane client reading the workers' outcomes): never the TCPStore's host,
    not counted among the FileStore's users. Raises ReshardError (INVALID_ARG)
    without a store to open."""
    import torch.distributed as dist
    timeout = datetime.timedelta(seconds=timeout_s)
    if rv.store_path:
        store = dist.FileStore(rv.store_path, -1)
        store.set_timeout(timeout)
    elif rv.master_address and rv.master_port:
        store = dist.TCPStore(rv.master_address, int(rv.master_port), None, False, timeout)
    else:
        raise error(Status.INVALID_ARG, "the rendezvous needs store_path or "
                    "master_address and master_port")
    return dist.PrefixStore(_PREFIX + rv.name + "/", store)


def gloo_comm(store: Any, rank: int, world: int, timeout_s: float) -> Comm:
    """A reshard endpoint over a gloo group of the refit's ``world`` ranks made on
    ``store`` (collective: every rank calls it), not registered as torch's default
    group. CPU tensors; the stall and dead-peer rules of Comm.from_torch."""
    import torch.distributed as dist
    from ..torch_comm import from_group
    group = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, world,
                                  datetime.timedelta(seconds=timeout_s))
    return from_group(group, name="refit")  # its own group: one endpoint, on any thread


def open_comm(transport: str, store: Any, rank: int, world: int, timeout_s: float,
              device: Any = None) -> Comm:
    """The refit's endpoint, collective over its ``world``: "gloo" (CPU tensors,
    gloo_comm) or "nccl" (CUDA tensors: an NCCL communicator whose unique id rank 0 puts
    in ``store``, on torch's current stream of ``device``, Comm.from_nccl_store), or
    "cuda-ipc" (CUDA tensors of colocated processes of one host, which may share GPUs:
    Comm.from_cuda_ipc over gloo_comm; plans must be colocated, docs/colocated.md).
    Raises ReshardError (INVALID_ARG for another transport; UNSUPPORTED for nccl
    without NCCL in the library; as Comm.from_nccl_store)."""
    if transport == "gloo":
        return gloo_comm(store, rank, world, timeout_s)
    if transport == "nccl":
        from ..comm import from_nccl_store
        index = getattr(device, "index", None)
        return from_nccl_store(store, rank, world, key="nccl_unique_id",
                               device=index if isinstance(index, int) else None)
    if transport == "cuda-ipc":
        from ..comm import from_cuda_ipc
        index = getattr(device, "index", None)
        return from_cuda_ipc(gloo_comm(store, rank, world, timeout_s),
                             device=index if isinstance(index, int) else None)
    raise error(Status.INVALID_ARG, "rank %d: transport %r: \"gloo\" (CPU tensors), "
                "\"nccl\" or \"cuda-ipc\" (CUDA tensors)" % (rank, transport))


def device_of(transport: str) -> str:
    """The memory the transport moves: "cpu" for gloo, "cuda" for nccl and cuda-ipc."""
    return "cuda" if transport in ("nccl", "cuda-ipc") else "cpu"


def agree(store: Any, rank: int, world: int, record: Dict[str, Any], problems: List[str],
          timeout_s: float, step: str = "init") -> None:
    """Every rank of the refit publishes ``record`` (what it planned from: model, specs,
    ...) and its ``problems``, then waits for every other rank's (at most ``timeout_s``).
    Raises ReshardError on every rank when any rank has problems (BUFFER, naming that
    rank and its first problems), when records differ (MISMATCH, naming the rank and
    the field), or when a rank did not publish in time (TIMEOUT, naming the ranks)."""
    if store.add("%s/claim/%d" % (step, rank), 1) > 1:
        problems = problems + ["rank %d is claimed twice on this rendezvous: by two "
                               "processes (check this worker's rank mapping: engine_index, "
                               "data_parallel_index, rank), or by a second init on the same "
                               "rendezvous (each init needs its own: a new rendezvous_name, "
                               "store_path or master_port)" % rank]
    mine = json.dumps({"record": record, "problems": problems}, sort_keys=True)
    store.set("%s/%d" % (step, rank), mine)
    keys = ["%s/%d" % (step, r) for r in range(world)]
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout_s))
    except RuntimeError as e:
        late, told = [], []
        for r, k in enumerate(keys):
            try:
                store.wait([k], datetime.timedelta(milliseconds=10))
            except RuntimeError:
                late.append(r)
                continue
            told += ["rank %d: %s" % (r, p) for p in json.loads(store.get(k))["problems"]]
        raise error(Status.TIMEOUT, "rank %d: refit %s: rank(s) %s did not arrive within "
                    "%.1f s%s" % (rank, step, late, timeout_s,
                                  "; " + "; ".join(told[:4]) if told else "")) from e
    got = [json.loads(store.get(k)) for k in keys]
    bad = [(r, g["problems"]) for r, g in enumerate(got) if g["problems"]]
    if bad:
        text = "; ".join("rank %d: %s" % (r, "; ".join(p[:4]) + (" (+%d more)" % (len(p) - 4)
                                                             if len(p) > 4 else ""))
                         for r, p in bad)
        raise error(Status.BUFFER, "refit %s refused (%d rank(s) not ready; nothing was "
                    "written): %s" % (step, len(bad), text))
    for r, g in enumerate(got):
        for key, value in record.items():
            if g["record"].get(key) != value:
                raise error(Status.MISMATCH, "rank %d: refit %s: rank %d has %s=%r, this rank "
                            "%r" % (rank, step, r, key, g["record"].get(key), value))


__all__ = ["Rendezvous", "ReshardError", "agree", "device_of", "gloo_comm",
           "open_client_store", "open_comm", "open_store"]
