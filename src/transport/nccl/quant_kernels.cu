/*
 * The CUDA kernel of the NCCL transport's quantize operation: bf16 blocks into e4m3 bytes
 * and one scale per block. The rule, the index arithmetic, the loads and the stores live in
 * quant_box.h and are shared with the CPU emulation the tests run; this file only maps
 * blocks to thread groups and reduces each block's amax across its group.
 */
#include "transport/nccl/nccl_internal.h"
#include "transport/nccl/quant_box.h"

/* The maximum of @p key over the @p group threads (a power of two) of the calling thread's
 * group; every thread of the CUDA block calls it (it synchronises the block for groups
 * wider than a warp). @p warp_max is shared memory of one word per warp. */
static __device__ __forceinline__ uint32_t group_max(uint32_t key, int group, uint32_t *warp_max)
{
    const int width = group < 32 ? group : 32;
    for (int o = width / 2; o > 0; o /= 2) {
        const uint32_t other = __shfl_xor_sync(0xFFFFFFFFu, key, o);
        key = other > key ? other : key;
    }
    if (group <= 32)
        return key;
    const int warp = threadIdx.x / 32, warps = group / 32;
    if (threadIdx.x % 32 == 0)
        warp_max[warp] = key;
    __syncthreads();
    const int first = warp / warps * warps;
    for (int w = 0; w < warps; w++) {
        const uint32_t other = warp_max[first + w];
        key = other > key ? other : key;
    }
    __syncthreads(); /* warp_max is rewritten by the next block */
    return key;
}

/* CUDA block b quantizes blocks b * groups + g (g its groups), then again gridDim.x *
 * groups further (a grid-stride loop, uniform over the CUDA block so that group_max's
 * barriers are met by every thread). */
__global__ void __launch_bounds__(256)
    rs_quant_kernel(const rs_quant_job_t j, uint8_t *dst, void *scale, const uint16_t *src)
{
    __shared__ uint32_t warp_max[256 / 32];
    const int group = j.group;
    const int groups = blockDim.x / group;
    const int g = threadIdx.x / group, t = threadIdx.x % group;
    for (int64_t b0 = (int64_t)blockIdx.x * groups; b0 < j.blocks;
         b0 += (int64_t)gridDim.x * groups) {
        const int64_t b = b0 + g;
        const bool live = b < j.blocks;
        rs_quant_block_t blk;
        rs_qvec_t v[RS_QB_REGS];
        uint32_t key = 0;
        if (live) {
            rs_qb_block(&j, b, &blk);
#pragma unroll
            for (int k = 0; k < RS_QB_REGS; k++) {
                const int64_t x = t + (int64_t)k * group;
                const uint32_t kx = x < j.nv ? rs_qb_load(&j, &blk, x, src, &v[k]) : 0;
                key = kx > key ? kx : key;
            }
            for (int64_t x = t + (int64_t)RS_QB_REGS * group; x < j.nv; x += group) {
                rs_qvec_t w;
                const uint32_t kx = rs_qb_load(&j, &blk, x, src, &w);
                key = kx > key ? kx : key;
            }
        }
        key = group_max(key, group, warp_max);
        if (!live)
            continue;
        const float s = rs_fp8_scale(key, j.pow2), inv = rs_fp8_inverse(s);
#pragma unroll
        for (int k = 0; k < RS_QB_REGS; k++) {
            const int64_t x = t + (int64_t)k * group;
            if (x < j.nv)
                rs_qb_store(&j, &blk, x, &v[k], inv, dst);
        }
        for (int64_t x = t + (int64_t)RS_QB_REGS * group; x < j.nv; x += group) {
            rs_qvec_t w;
            rs_qb_load(&j, &blk, x, src, &w);
            rs_qb_store(&j, &blk, x, &w, inv, dst);
        }
        if (t == 0)
            rs_qb_store_scale(&j, &blk, s, scale);
    }
}

extern "C" cudaError_t rs_quant_launch(const rs_quant_job_t *j, void *dst, void *scale,
                                       const void *src, cudaStream_t stream)
{
    if (j->blocks == 0)
        return cudaSuccess;
    const int64_t groups = j->threads / j->group;
    const int64_t need = (j->blocks + groups - 1) / groups;
    const int64_t max_blocks = (int64_t)1 << 20; /* the grid-stride loop covers the rest */
    const unsigned int grid = (unsigned int)(need < max_blocks ? need : max_blocks);
    rs_quant_kernel<<<grid, j->threads, 0, stream>>>(*j, (uint8_t *)dst, scale,
                                                     (const uint16_t *)src);
    return cudaGetLastError();
}
