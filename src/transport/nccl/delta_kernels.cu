/*
 * The CUDA kernels of the NCCL transport's delta codec. The steps (a lane's unit bits, a
 * group's sum, a word's part of the body, apply's counts, values and gaps segments) live in
 * delta_kernels.h and are shared with the CPU emulation the tests run; this file maps them to
 * lanes, warps and blocks, ORs a group's lanes with shuffles and scans sums within a block
 * (warp shuffles, then the warps' totals) between barriers.
 */
#include "transport/nccl/delta_kernels.h"
#include "transport/nccl/nccl_internal.h"

#define FULL_MASK 0xffffffffu

static unsigned int grid_of(uint64_t items)
{
    return (unsigned int)rs_dk_grid_of(items); /* grid-stride loops: the rest */
}

static __device__ rs_dk_sum_t sum_zero(void)
{
    rs_dk_sum_t z = {0, 0, 0, 0, 0};
    return z;
}

static __device__ rs_dk_sum_t shfl_up_sum(rs_dk_sum_t x, int o)
{
    x.c = __shfl_up_sync(FULL_MASK, x.c, o);
    x.runs = __shfl_up_sync(FULL_MASK, x.runs, o);
    x.first = __shfl_up_sync(FULL_MASK, x.first, o);
    x.last = __shfl_up_sync(FULL_MASK, x.last, o);
    x.gbi = __shfl_up_sync(FULL_MASK, x.gbi, o);
    return x;
}

/* The warp's inclusive scan of @p x (all lanes). */
static __device__ rs_dk_sum_t warp_incl(rs_dk_sum_t x)
{
    const int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        const rs_dk_sum_t y = shfl_up_sum(x, o);
        if (lane >= o)
            x = rs_dk_sum_add(y, x);
    }
    return x;
}

/* The block's exclusive scan of @p x in thread order (every thread of a block of NT calls
 * it); the block's total into *@p total. Ends with a barrier. */
template <int NT> static __device__ rs_dk_sum_t block_excl(rs_dk_sum_t x, rs_dk_sum_t *total)
{
    __shared__ rs_dk_sum_t wt[NT / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const rs_dk_sum_t incl = warp_incl(x);
    rs_dk_sum_t ex = shfl_up_sum(incl, 1);
    if (lane == 0)
        ex = sum_zero();
    if (lane == 31)
        wt[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        rs_dk_sum_t v = lane < NT / 32 ? wt[lane] : sum_zero();
        v = warp_incl(v);
        if (lane < NT / 32)
            wt[lane] = v;
    }
    __syncthreads();
    const rs_dk_sum_t r = warp ? rs_dk_sum_add(wt[warp - 1], ex) : ex;
    *total = wt[NT / 32 - 1];
    __syncthreads();
    return r;
}

/* ---- encode ----------------------------------------------------------------------------- */

/* Kernel 1, one block per tile: the groups' masks (each lane a 16-byte unit, a group's lanes
 * ORed) and the tile's sum. */
__global__ void __launch_bounds__(RS_DK_THREADS)
    rs_dk_enc_tile_kernel(const rs_dk_job_t j, const uint8_t *cur, const uint8_t *prev)
{
    __shared__ uint64_t sm[RS_DK_TILE_GROUPS];
    const uint64_t t = blockIdx.x, units = rs_dk_group_units(&j);
    uint64_t lo, hi;
    rs_dk_tile_groups(&j, t, &lo, &hi);
    const uint64_t u0 = lo * units, u1 = u0 + RS_DK_TILE_GROUPS * units; /* w passes */
    for (uint64_t u = u0 + threadIdx.x; u < u1; u += RS_DK_THREADS) {
        uint64_t m = rs_dk_unit_mask(&j, u, rs_dk_unit_bits(&j, cur, prev, u));
        for (unsigned o = 1; o < units; o <<= 1) /* a group's lanes: aligned, <= 32 */
            m |= __shfl_xor_sync(FULL_MASK, m, o);
        if (u % units == 0 && u / units < hi)
            sm[u / units - lo] = m;
    }
    __syncthreads();
    rs_dk_sum_t x = sum_zero();
    if (threadIdx.x < hi - lo) {
        const uint64_t g = lo + threadIdx.x, m = sm[threadIdx.x];
        const uint64_t carry = threadIdx.x ? sm[threadIdx.x - 1] >> 63
                               : g         ? rs_dk_word_changed(&j, cur, prev, g * RS_DK_GROUP - 1)
                                           : 0;
        x = rs_dk_group_sum(g, m, carry);
        j.mask[g] = m;
    }
    rs_dk_sum_t total;
    (void)block_excl<RS_DK_THREADS>(x, &total);
    if (threadIdx.x == 0)
        j.tile[t] = total;
}

/* Kernel 2 (and apply's scan), one block: the items' exclusive prefixes, each thread over a
 * contiguous segment; then the kind and header (encode) or the values' check (apply). */
__global__ void __launch_bounds__(RS_DK_SCAN) rs_dk_scan_kernel(const rs_dk_job_t j, uint8_t *out)
{
    uint64_t lo, hi;
    rs_dk_segment(j.items, (int)threadIdx.x, RS_DK_SCAN, &lo, &hi);
    rs_dk_sum_t x = sum_zero();
    for (uint64_t t = lo; t < hi; t++)
        x = rs_dk_sum_add(x, j.tile[t]);
    rs_dk_sum_t total;
    rs_dk_sum_t p = block_excl<RS_DK_SCAN>(x, &total);
    for (uint64_t t = lo; t < hi; t++) {
        const rs_dk_sum_t y = j.tile[t];
        j.tile[t] = p;
        p = rs_dk_sum_add(p, y);
    }
    if (threadIdx.x == 0) {
        if (j.apply)
            rs_dk_apply_check(&j, total);
        else
            rs_dk_enc_choose(&j, total, j.total, out);
    }
}

/* Kernel 3, one block per tile: the groups' prefixes (a block scan from the tile's), then
 * one thread per word. */
__global__ void __launch_bounds__(RS_DK_THREADS)
    rs_dk_enc_body_kernel(const rs_dk_job_t j, const uint8_t *cur, uint8_t *prev, uint8_t *out)
{
    __shared__ rs_dk_sum_t pre[RS_DK_TILE_GROUPS];
    __shared__ uint64_t sm[RS_DK_TILE_GROUPS], sc[RS_DK_TILE_GROUPS], sn[RS_DK_TILE_GROUPS];
    const uint64_t t = blockIdx.x;
    uint64_t lo, hi;
    rs_dk_tile_groups(&j, t, &lo, &hi);
    rs_dk_sum_t x = sum_zero();
    if (threadIdx.x < hi - lo) {
        const uint64_t g = lo + threadIdx.x, m = j.mask[g];
        sm[threadIdx.x] = m;
        sc[threadIdx.x] = g ? j.mask[g - 1] >> 63 : 0;
        sn[threadIdx.x] = g + 1 < j.groups ? j.mask[g + 1] & 1 : 0;
        x = rs_dk_group_sum(g, m, sc[threadIdx.x]);
    }
    rs_dk_sum_t total;
    const rs_dk_sum_t ex = block_excl<RS_DK_THREADS>(x, &total);
    if (threadIdx.x < hi - lo)
        pre[threadIdx.x] = rs_dk_sum_add(j.tile[t], ex);
    __syncthreads();
    const rs_dk_total_t T = *j.total;
    const uint64_t end = hi * RS_DK_GROUP < j.n ? hi * RS_DK_GROUP : j.n;
    for (uint64_t i = lo * RS_DK_GROUP + threadIdx.x; i < end; i += RS_DK_THREADS) {
        const uint64_t k = i / RS_DK_GROUP - lo;
        rs_dk_enc_word(&j, &T, pre[k], sm[k], sc[k], sn[k], cur, prev, out, i);
    }
}

/* Kernel 4: each run's end into its length (runs encodings only). */
__global__ void rs_dk_run_len_kernel(const rs_dk_job_t j, uint8_t *out)
{
    const uint64_t runs = j.total->kind == RS_DELTA_RUNS ? j.total->s.runs : 0;
    for (uint64_t r = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; r < runs;
         r += (uint64_t)gridDim.x * blockDim.x)
        rs_dk_enc_run_len(j.total, out, r);
}

extern "C" cudaError_t rs_delta_encode_launch(const rs_dk_job_t *j, const uint8_t *cur,
                                              uint8_t *prev, uint8_t *out, cudaStream_t s)
{
    if (j->groups == 0)
        return cudaErrorInvalidValue; /* an empty chunk is never encoded */
    const unsigned int tiles = (unsigned int)j->tiles;
    rs_dk_enc_tile_kernel<<<tiles, RS_DK_THREADS, 0, s>>>(*j, cur, prev);
    rs_dk_scan_kernel<<<1, RS_DK_SCAN, 0, s>>>(*j, out);
    rs_dk_enc_body_kernel<<<tiles, RS_DK_THREADS, 0, s>>>(*j, cur, prev, out);
    rs_dk_run_len_kernel<<<(unsigned int)rs_dk_grid_runs(j), RS_DK_THREADS, 0, s>>>(*j, out);
    return cudaGetLastError();
}

/* ---- apply ------------------------------------------------------------------------------ */

__global__ void rs_dk_clear_kernel(const rs_dk_job_t j)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        j.err->code = RS_DK_ERR_NONE; /* before any count: launches on one stream are ordered */
}

/* Items per thread of a runs tile (contiguous, so that prefixes follow run order). */
#define RUNS_PER_THREAD (RS_DK_TILE / RS_DK_THREADS)

/* Apply step 1, one block per tile: the counts of its bitmap groups or runs, summed. */
__global__ void __launch_bounds__(RS_DK_THREADS)
    rs_dk_apply_count_kernel(const rs_dk_job_t j, const uint8_t *body)
{
    const uint64_t t = blockIdx.x, items = rs_dk_apply_items(&j);
    rs_dk_sum_t x = sum_zero();
    if (j.kind == RS_DELTA_BITMAP) {
        const uint64_t g = t * RS_DK_TILE_GROUPS + threadIdx.x;
        if (threadIdx.x < RS_DK_TILE_GROUPS && g < items)
            x = rs_dk_apply_count(&j, body, g);
    } else {
        const uint64_t r0 = t * RS_DK_TILE + threadIdx.x * (uint64_t)RUNS_PER_THREAD;
        for (uint64_t r = r0; r < r0 + RUNS_PER_THREAD && r < items; r++)
            x = rs_dk_sum_add(x, rs_dk_apply_count(&j, body, r));
    }
    rs_dk_sum_t total;
    (void)block_excl<RS_DK_THREADS>(x, &total);
    if (threadIdx.x == 0)
        j.tile[t] = total;
}

/* Apply step 3 of a bitmap, one block per tile: the groups' prefixes, one thread per word. */
__global__ void __launch_bounds__(RS_DK_THREADS)
    rs_dk_apply_bitmap_kernel(const rs_dk_job_t j, const uint8_t *body, uint8_t *chunk)
{
    __shared__ rs_dk_sum_t pre[RS_DK_TILE_GROUPS];
    __shared__ uint64_t sm[RS_DK_TILE_GROUPS];
    if (j.err->code != RS_DK_ERR_NONE) /* found before this launch: the same for all */
        return;
    const uint64_t t = blockIdx.x;
    uint64_t lo, hi;
    rs_dk_tile_groups(&j, t, &lo, &hi);
    rs_dk_sum_t x = sum_zero();
    if (threadIdx.x < hi - lo) {
        sm[threadIdx.x] = rs_dk_bitmap_mask(&j, body, lo + threadIdx.x);
        x.c = (uint64_t)rs_dk_pop(sm[threadIdx.x]);
    }
    rs_dk_sum_t total;
    const rs_dk_sum_t ex = block_excl<RS_DK_THREADS>(x, &total);
    if (threadIdx.x < hi - lo)
        pre[threadIdx.x] = rs_dk_sum_add(j.tile[t], ex);
    __syncthreads();
    const uint64_t end = hi * RS_DK_GROUP < j.n ? hi * RS_DK_GROUP : j.n;
    for (uint64_t i = lo * RS_DK_GROUP + threadIdx.x; i < end; i += RS_DK_THREADS) {
        const uint64_t k = i / RS_DK_GROUP - lo;
        rs_dk_apply_bitmap_word(&j, body, chunk, pre[k], sm[k], i);
    }
}

/* Apply step 3 of runs, one block per tile of runs: each run's first value. */
__global__ void __launch_bounds__(RS_DK_THREADS)
    rs_dk_apply_run_offsets_kernel(const rs_dk_job_t j, const uint8_t *body)
{
    if (j.err->code != RS_DK_ERR_NONE)
        return;
    const uint64_t t = blockIdx.x, items = j.nruns;
    const uint64_t r0 = t * RS_DK_TILE + threadIdx.x * (uint64_t)RUNS_PER_THREAD;
    rs_dk_sum_t x = sum_zero();
    for (uint64_t r = r0; r < r0 + RUNS_PER_THREAD && r < items; r++)
        x.c += rs_dk_get_u32(body + r * 8 + 4);
    rs_dk_sum_t total;
    uint64_t p = rs_dk_sum_add(j.tile[t], block_excl<RS_DK_THREADS>(x, &total)).c;
    for (uint64_t r = r0; r < r0 + RUNS_PER_THREAD && r < items; r++) {
        j.cnt[r] = p;
        p += rs_dk_get_u32(body + r * 8 + 4);
    }
}

/* Apply step 4 of runs: one thread per value. */
__global__ void rs_dk_apply_run_values_kernel(const rs_dk_job_t j, const uint8_t *body,
                                              uint8_t *chunk, uint64_t values)
{
    if (j.err->code != RS_DK_ERR_NONE)
        return;
    for (uint64_t v = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; v < values;
         v += (uint64_t)gridDim.x * blockDim.x)
        rs_dk_apply_run_value(&j, body, chunk, v);
}

/* Gaps step 1: one thread per (segment, entry offset). */
__global__ void rs_dk_gaps_parse_kernel(const rs_dk_job_t j, const uint8_t *body)
{
    const uint64_t total = j.segs * RS_DK_MAX_ENTRY;
    for (uint64_t x = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; x < total;
         x += (uint64_t)gridDim.x * blockDim.x)
        j.gtab[x] =
            rs_dk_gaps_parse(&j, body, x / RS_DK_MAX_ENTRY, (uint32_t)(x % RS_DK_MAX_ENTRY));
}

/* A log-step inclusive scan of @p count (<= RS_DK_GBLK) tables in shared memory @p tab, one
 * thread each (every thread of the block calls it): each round's new table in registers,
 * written back between barriers. */
static __device__ void gs_block_scan(const rs_dk_job_t *j, rs_dk_gs_t *tab, uint64_t count)
{
    const uint64_t t = threadIdx.x;
    for (int k = 0; k < RS_DK_GBLK_ROUNDS; k++) {
        rs_dk_gs_t next[RS_DK_MAX_ENTRY];
        if (t < count)
            rs_dk_gs_scan_round(j, tab, count, k, t, next);
        __syncthreads();
        if (t < count)
            for (uint32_t e = 0; e < RS_DK_MAX_ENTRY; e++)
                tab[t * RS_DK_MAX_ENTRY + e] = next[e];
        __syncthreads();
    }
}

/* Gaps step 2, one block of RS_DK_GBLK threads per RS_DK_GBLK segments: their tables
 * composed from the block's first segment (back into gtab) and the block's own (gblk). */
__global__ void __launch_bounds__(RS_DK_GBLK) rs_dk_gaps_block_kernel(const rs_dk_job_t j)
{
    __shared__ rs_dk_gs_t tab[RS_DK_GBLK * RS_DK_MAX_ENTRY];
    const uint64_t s0 = blockIdx.x * (uint64_t)RS_DK_GBLK;
    const uint64_t count = j.segs - s0 < RS_DK_GBLK ? j.segs - s0 : RS_DK_GBLK;
    for (uint64_t x = threadIdx.x; x < count * RS_DK_MAX_ENTRY; x += RS_DK_GBLK)
        tab[x] = j.gtab[s0 * RS_DK_MAX_ENTRY + x];
    __syncthreads();
    gs_block_scan(&j, tab, count);
    for (uint64_t x = threadIdx.x; x < count * RS_DK_MAX_ENTRY; x += RS_DK_GBLK)
        j.gtab[s0 * RS_DK_MAX_ENTRY + x] = tab[x];
    if (threadIdx.x < RS_DK_MAX_ENTRY)
        j.gblk[blockIdx.x * (uint64_t)RS_DK_MAX_ENTRY + threadIdx.x] =
            tab[(count - 1) * RS_DK_MAX_ENTRY + threadIdx.x];
}

/* Gaps step 3, one block: the blocks' tables composed from the first (back into gblk), and
 * the whole body checked. */
__global__ void __launch_bounds__(RS_DK_GBLK) rs_dk_gaps_top_kernel(const rs_dk_job_t j)
{
    __shared__ rs_dk_gs_t tab[RS_DK_GBLK * RS_DK_MAX_ENTRY];
    const uint64_t count = rs_dk_gaps_blocks(&j);
    for (uint64_t x = threadIdx.x; x < count * RS_DK_MAX_ENTRY; x += RS_DK_GBLK)
        tab[x] = j.gblk[x];
    __syncthreads();
    gs_block_scan(&j, tab, count);
    for (uint64_t x = threadIdx.x; x < count * RS_DK_MAX_ENTRY; x += RS_DK_GBLK)
        j.gblk[x] = tab[x];
    if (threadIdx.x == 0)
        rs_dk_gaps_check(&j, count ? tab[(count - 1) * RS_DK_MAX_ENTRY] : rs_dk_gs_id(0));
}

/* Gaps step 4: one thread per segment. */
__global__ void rs_dk_gaps_write_kernel(const rs_dk_job_t j, const uint8_t *body, uint8_t *chunk)
{
    if (j.err->code != RS_DK_ERR_NONE)
        return;
    for (uint64_t s = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; s < j.segs;
         s += (uint64_t)gridDim.x * blockDim.x)
        rs_dk_gaps_write(&j, body, chunk, s);
}

extern "C" cudaError_t rs_delta_apply_launch(const rs_dk_job_t *j, const uint8_t *in,
                                             uint8_t *chunk, cudaStream_t s)
{
    const uint8_t *body = in + RS_DELTA_HEADER_BYTES;
    rs_dk_clear_kernel<<<1, 1, 0, s>>>(*j); /* clears the error record */
    if (j->kind == RS_DELTA_DENSE) {
        const cudaError_t e =
            cudaMemcpyAsync(chunk, body, (size_t)j->len, cudaMemcpyDeviceToDevice, s);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    if (j->kind == RS_DELTA_GAPS) {
        const unsigned int blocks = (unsigned int)rs_dk_gaps_blocks(j); /* <= RS_DK_GBLK */
        if (blocks) {
            rs_dk_gaps_parse_kernel<<<grid_of(j->segs * RS_DK_MAX_ENTRY), RS_DK_THREADS, 0, s>>>(
                *j, body);
            rs_dk_gaps_block_kernel<<<blocks, RS_DK_GBLK, 0, s>>>(*j);
        }
        rs_dk_gaps_top_kernel<<<1, RS_DK_GBLK, 0, s>>>(*j); /* also checks an empty body */
        if (blocks)
            rs_dk_gaps_write_kernel<<<grid_of(j->segs), RS_DK_THREADS, 0, s>>>(*j, body, chunk);
        return cudaGetLastError();
    }
    const unsigned int items = (unsigned int)j->items;
    if (items)
        rs_dk_apply_count_kernel<<<items, RS_DK_THREADS, 0, s>>>(*j, body);
    rs_dk_scan_kernel<<<1, RS_DK_SCAN, 0, s>>>(*j, NULL);
    if (j->kind == RS_DELTA_BITMAP) {
        if (items)
            rs_dk_apply_bitmap_kernel<<<items, RS_DK_THREADS, 0, s>>>(*j, body, chunk);
        return cudaGetLastError();
    }
    const uint64_t values = (j->body - (uint64_t)j->nruns * 8) / j->word;
    if (items)
        rs_dk_apply_run_offsets_kernel<<<items, RS_DK_THREADS, 0, s>>>(*j, body);
    if (values)
        rs_dk_apply_run_values_kernel<<<grid_of(values), RS_DK_THREADS, 0, s>>>(*j, body, chunk,
                                                                                values);
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

__global__ void rs_dk_hash_put_kernel(const unsigned long long *sum, uint64_t len,
                                      const uint8_t *header, uint8_t *msg)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        rs_dk_hash_put(*sum, len, header, msg);
}

extern "C" cudaError_t rs_delta_hash_launch(const uint8_t *chunk, uint64_t len, uint64_t *sum,
                                            const uint8_t *header, uint8_t *msg, cudaStream_t s)
{
    unsigned long long *out = (unsigned long long *)sum;
    rs_dk_hash_clear_kernel<<<1, 1, 0, s>>>(out);
    if (len)
        rs_dk_hash_kernel<<<grid_of((len + 7) / 8), RS_DK_THREADS, 0, s>>>(chunk, len, out);
    if (msg)
        rs_dk_hash_put_kernel<<<1, 1, 0, s>>>(out, len, header, msg);
    return cudaGetLastError();
}
