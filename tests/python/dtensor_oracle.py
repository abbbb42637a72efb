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
