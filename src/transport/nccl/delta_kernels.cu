/*
 * The CUDA kernels of the NCCL transport's delta codec. The steps (masks, the scan's
 * phases, the body, apply's counts and items) live in delta_kernels.h and are shared with
 * the CPU emulation the tests run; this file only maps groups, runs and scan segments to
 * threads and orders the scan's phases with barriers.
 */
#include "transport/nccl/delta_kernels.h"
#include "transport/nccl/nccl_internal.h"

#define RS_DK_THREADS 256

static unsigned int grid_of(uint64_t items)
{
    const uint64_t b = (items + RS_DK_THREADS - 1) / RS_DK_THREADS, max = (uint64_t)1 << 20;
    return (unsigned int)(b < max ? (b ? b : 1) : max); /* grid-stride loops: the rest */
}

__global__ void rs_dk_mask_kernel(const rs_dk_job_t j, const uint8_t *cur, const uint8_t *prev)
{
    for (uint64_t g = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; g < j.groups;
         g += (uint64_t)gridDim.x * blockDim.x)
        rs_dk_enc_mask(&j, cur, prev, g);
}

__global__ void __launch_bounds__(RS_DK_SCAN) rs_dk_scan_kernel(const rs_dk_job_t j, uint8_t *out)
{
    const int t = threadIdx.x;
    rs_dk_enc_scan_a(&j, t);
    __syncthreads();
    if (t == 0)
        rs_dk_enc_scan_b(&j);
    __syncthreads();
    rs_dk_enc_scan_c(&j, t);
    __syncthreads();
    if (t == 0)
        rs_dk_enc_scan_d(&j, out);
    __syncthreads();
    rs_dk_enc_scan_e(&j, t);
}

__global__ void rs_dk_body_kernel(const rs_dk_job_t j, const uint8_t *cur, uint8_t *prev,
                                  uint8_t *out)
{
    for (uint64_t g = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; g < j.groups;
         g += (uint64_t)gridDim.x * blockDim.x)
        rs_dk_enc_body(&j, cur, prev, out, g);
}

extern "C" cudaError_t rs_delta_encode_launch(const rs_dk_job_t *j, const uint8_t *cur,
                                              uint8_t *prev, uint8_t *out, cudaStream_t s)
{
    if (j->groups == 0)
        return cudaErrorInvalidValue; /* an empty chunk is never encoded */
    rs_dk_mask_kernel<<<grid_of(j->groups), RS_DK_THREADS, 0, s>>>(*j, cur, prev);
    rs_dk_scan_kernel<<<1, RS_DK_SCAN, 0, s>>>(*j, out);
    rs_dk_body_kernel<<<grid_of(j->groups), RS_DK_THREADS, 0, s>>>(*j, cur, prev, out);
    return cudaGetLastError();
}

__global__ void rs_dk_clear_kernel(const rs_dk_job_t j)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        j.err->code = RS_DK_ERR_NONE; /* before any count: launches on one stream are ordered */
}

__global__ void rs_dk_counts_kernel(const rs_dk_job_t j, const uint8_t *body, uint64_t items)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < items;
         i += (uint64_t)gridDim.x * blockDim.x)
        rs_dk_apply_count(&j, body, i);
}

__global__ void __launch_bounds__(RS_DK_SCAN) rs_dk_apply_scan_kernel(const rs_dk_job_t j)
{
    const int t = threadIdx.x;
    rs_dk_apply_scan_a(&j, t);
    __syncthreads();
    if (t == 0)
        rs_dk_apply_scan_b(&j);
    __syncthreads();
    rs_dk_apply_scan_c(&j, t);
}

__global__ void rs_dk_items_kernel(const rs_dk_job_t j, const uint8_t *body, uint8_t *chunk,
                                   uint64_t items)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < items;
         i += (uint64_t)gridDim.x * blockDim.x)
        rs_dk_apply_item(&j, body, chunk, i);
}

__global__ void rs_dk_gaps_kernel(const rs_dk_job_t j, const uint8_t *body, uint8_t *chunk)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        rs_dk_apply_gaps(&j, body, chunk);
}

extern "C" cudaError_t rs_delta_apply_launch(const rs_dk_job_t *j, const uint8_t *in,
                                             uint8_t *chunk, cudaStream_t s)
{
    const uint8_t *body = in + RS_DELTA_HEADER_BYTES;
    rs_dk_clear_kernel<<<1, 1, 0, s>>>(*j); /* clears the error record */
    if (j->kind == RS_DELTA_GAPS) {
        rs_dk_gaps_kernel<<<1, 1, 0, s>>>(*j, body, chunk);
        return cudaGetLastError();
    }
    const uint64_t items = j->kind == RS_DELTA_DENSE ? j->groups : rs_dk_apply_items(j);
    if (j->kind != RS_DELTA_DENSE) {
        if (items)
            rs_dk_counts_kernel<<<grid_of(items), RS_DK_THREADS, 0, s>>>(*j, body, items);
        rs_dk_apply_scan_kernel<<<1, RS_DK_SCAN, 0, s>>>(*j);
    }
    if (items)
        rs_dk_items_kernel<<<grid_of(items), RS_DK_THREADS, 0, s>>>(*j, body, chunk, items);
    return cudaGetLastError();
}

__global__ void rs_dk_hash_clear_kernel(unsigned long long *sum)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *sum = 0;
}

__global__ void __launch_bounds__(RS_DK_THREADS)
    rs_dk_hash_kernel(const uint8_t *chunk, uint64_t len, unsigned long long *sum)
{
    __shared__ unsigned long long part[RS_DK_THREADS];
    const uint64_t words = (len + 7) / 8;
    unsigned long long h = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
         i += (uint64_t)gridDim.x * blockDim.x)
        h += rs_dk_hash_term(chunk, len, i);
    part[threadIdx.x] = h;
    __syncthreads();
    for (int w = RS_DK_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(sum, part[0]); /* mod 2^64: the order of the blocks does not matter */
}

extern "C" cudaError_t rs_delta_hash_launch(const uint8_t *chunk, uint64_t len, uint64_t *sum,
                                            cudaStream_t s)
{
    unsigned long long *out = (unsigned long long *)sum;
    rs_dk_hash_clear_kernel<<<1, 1, 0, s>>>(out);
    if (len)
        rs_dk_hash_kernel<<<grid_of((len + 7) / 8), RS_DK_THREADS, 0, s>>>(chunk, len, out);
    return cudaGetLastError();
}
