"""Which global elements a DTensor rank holds, written from PyTorch's rules
(torch.distributed.tensor), independently of the library:

- Shard(d) over k ranks splits the current extent like torch.chunk: chunk size
  c = ceil(n / k), rank i holds [i*c, min((i+1)*c, n)) (empty for trailing ranks);
- several mesh dims sharding one dim apply left to right on the current extent;
- _StridedShard(d, sf): the current extent is cut into sf blocks by torch.chunk
  and rank i holds its torch.chunk of each block, blocks in order;
- Replicate: unchanged.
"""

import numpy as np

from reshard import Replicate, StridedShard


def chunk(n, k, i):
    c = -(-n // k)
    return min(i * c, n), min((i + 1) * c, n)


def local_indices(shape, mesh, placements, rank):
    """Per tensor dim, the global indices rank ``rank`` holds, in its local order;
    None when the rank is not in the mesh."""
    mesh = np.asarray(mesh)
    where = np.argwhere(mesh == rank)
    if len(where) == 0:
        return None
    coord = where[0]
    idx = [np.arange(n) for n in shape]
    for md, p in enumerate(placements):
        k, i = mesh.shape[md], coord[md]
        if isinstance(p, Replicate):
            continue
        cur = idx[p.dim]
        if isinstance(p, StridedShard):
            pieces = []
            for b in range(p.split_factor):
                b0, b1 = chunk(len(cur), p.split_factor, b)
                a0, a1 = chunk(b1 - b0, k, i)
                pieces.append(cur[b0 + a0:b0 + a1])
            idx[p.dim] = np.concatenate(pieces)
        else:
            a0, a1 = chunk(len(cur), k, i)
            idx[p.dim] = cur[a0:a1]
    return idx


def local_shard(full, mesh, placements, rank):
    """The local tensor of ``rank`` (a numpy copy of ``full``'s elements it holds)."""
    idx = local_indices(full.shape, mesh, placements, rank)
    return None if idx is None else full[np.ix_(*idx)]


def four_rank_refit(comm, timeout_s=30.0):
    """A refit on the 4 ranks of ``comm`` across DTensor placements (StridedShard and
    2-d meshes, a replicated int64 tensor), every destination element checked against
    local_shard; returns the elements checked on this rank."""
    import torch
    import reshard
    from reshard import Shard
    tensors = reshard.Tensors()
    tensors.add("w", (10, 6), torch.float32)
    tensors.add("b", (7,), torch.int64)
    src_p = {"w": ([0, 1, 2, 3], [Shard(0)]), "b": ([1, 2], [Replicate()])}
    dst_p = {"w": ([[3, 2], [1, 0]], [Shard(1), StridedShard(0, 2)]),
             "b": ([[0, 1], [2, 3]], [Shard(0), Replicate()])}
    src = reshard.Layout.from_placements(tensors, src_p)
    dst = reshard.Layout.from_placements(tensors, dst_p)
    full = {"w": np.arange(60, dtype=np.float32).reshape(10, 6) + 0.5,
            "b": np.arange(7, dtype=np.int64) * 11 - 3}
    r = comm.rank
    s = {}
    for n, (mesh, pl) in src_p.items():
        shard = local_shard(full[n], mesh, pl, r)
        if shard is not None and shard.size:
            s[n] = torch.from_numpy(np.ascontiguousarray(shard))
    d = dst.new_buffers(r, fill=reshard.SENTINEL_BYTE)
    plan = reshard.Plan(src, dst, rank=r, world=4, staging_mb=0.01, timeout_s=timeout_s)
    plan.execute(comm, src=s, dst=d)
    checked = 0
    for n, (mesh, pl) in dst_p.items():
        want = local_shard(full[n], mesh, pl, r)
        assert np.array_equal(d[n].numpy(), want), n
        checked += 0 if want is None else want.size
    return checked
