"""Growing back over MPI through the Python package (reshard.elastic.grow_mpi/join_mpi):

    mpirun -np 3 python3 tests/python/mpi_grow.py

Three processes hold plan ranks 0-2 of a world of 4 (plan rank 3 is missing: a view of
their MPI comm). They spawn one new process of this script (MPI.Comm.Spawn), which
takes plan rank 3 (join_mpi on MPI.Comm.Get_parent()); everyone refits the original
layouts (train ranks 0-1 -> infer ranks 2-3) and the new process's fresh buffers must
hold every element, checked against dtensor_oracle (PyTorch's rules). Prints
"GROW OK" on plan rank 0 when every destination matched; exits non-zero otherwise."""

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reshard  # noqa: E402
from reshard import Replicate, Shard  # noqa: E402
from dtensor_oracle import local_shard  # noqa: E402

WORLD, NEW = 4, 3
SRC_MESH, SRC_PL = [[0, 1]], [Replicate(), Shard(0)]
DST_MESH, DST_PL = [[2, 3]], [Replicate(), Shard(1)]
SHAPE = (6, 8)
FULL = (np.arange(48, dtype=np.float32) * 3 - 11).reshape(SHAPE)


def refit(comm):
    tensors = reshard.Tensors()
    tensors.add("w", SHAPE, np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": (SRC_MESH, SRC_PL)})
    dst = reshard.Layout.from_placements(tensors, {"w": (DST_MESH, DST_PL)})
    rank = comm.rank
    plan = reshard.Plan(src, dst, rank=rank, world=WORLD, staging_mb=1, timeout_s=20)
    shard = local_shard(FULL, SRC_MESH, SRC_PL, rank)
    s = {"w": np.ascontiguousarray(shard)} if shard is not None else None
    d = {p.name: np.full(p.shape, -1, np.float32) for p in dst.parameters(rank)}
    plan.execute(comm, src=s, dst=d or None)
    want = local_shard(FULL, DST_MESH, DST_PL, rank)
    return want is None or np.array_equal(d["w"], want)


def main():
    parent = MPI.Comm.Get_parent()
    if parent != MPI.COMM_NULL:  # the new process
        comm = reshard.elastic.join_mpi(parent)
        assert (comm.rank, comm.size) == (NEW, WORLD), (comm.rank, comm.size)
    else:
        world = MPI.COMM_WORLD
        assert world.size == 3, "run with mpirun -np 3"
        members = reshard.from_mpi(world)
        part = reshard.elastic.view(members, WORLD, [0, 1, 2, -1])  # plan rank 3 missing
        inter = world.Spawn(sys.executable, [os.path.abspath(__file__)], maxprocs=1, root=0)
        comm = reshard.elastic.grow_mpi(part, inter, [NEW])
        part.close()
        assert (comm.rank, comm.size) == (world.rank, WORLD)
    ok = refit(comm)
    team = (parent if parent != MPI.COMM_NULL else inter).Merge(parent != MPI.COMM_NULL)
    all_ok = team.allreduce(1 if ok else 0, op=MPI.MIN)
    comm.close()
    if team.rank == 0:
        print("GROW OK: every destination element, the new process's included" if all_ok
              else "GROW FAILED: a destination differs from the oracle", flush=True)
    team.Free()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
