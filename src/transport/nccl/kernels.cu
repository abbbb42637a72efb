/*
 * The CUDA kernel of the NCCL transport: one strided box copy (pack, unpack, local copy).
 * All index arithmetic lives in box_copy.h and is shared with the CPU emulation the tests
 * run; this file only maps units to blocks and threads.
 */
#include "transport/nccl/nccl_internal.h"

/* Block b copies units b, b + gridDim.x, ...; its threads split each unit's bytes
 * (contiguous rows) or elements (strided rows). Threads of a block never write the same
 * byte, blocks never touch the same unit, and no unit's bytes overlap another's, so
 * there is no synchronisation. */
__global__ void rs_box_copy_kernel(const rs_box_copy_t d, char *dst, const char *src)
{
    for (int64_t u = blockIdx.x; u < d.units; u += gridDim.x)
        rs_box_copy_unit(&d, dst, src, u, threadIdx.x, blockDim.x);
}

extern "C" cudaError_t rs_box_copy_launch(const rs_box_copy_t *d, void *dst, const void *src,
                                          cudaStream_t stream)
{
    if (d->units == 0)
        return cudaSuccess;
    const int threads = rs_box_copy_threads(d);
    const unsigned int blocks = (unsigned int)rs_box_copy_blocks(d); /* grid-stride: the rest */
    rs_box_copy_kernel<<<blocks, threads, 0, stream>>>(*d, (char *)dst, (const char *)src);
    return cudaGetLastError();
}
