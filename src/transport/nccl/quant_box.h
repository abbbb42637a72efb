/*
 * Block quantization of a bf16 box into OCP FP8 E4M3FN bytes plus one scale per block: the
 * NCCL transport's `quantize` operation. Shared by the CUDA kernel (quant_kernels.cu), the
 * host code that prepares a job (quant_box.c) and a CPU emulation of the kernel used by the
 * tests, so the arithmetic that runs on the GPU is the arithmetic the CPU tests check.
 *
 * The rule is the product's (src/exec/quant.h documents it and its sources), computed by
 * the host/device functions of util/fp8.h: amax over the block's finite values (clamped
 * below), scale = amax / 448 (pow2: rounded up to a power of two), q = e4m3(v * (1/scale)).
 *
 * Geometry. A box of 2 or 3 dims ([E,] rows, cols) of one tensor is cut into blocks of
 * block_rows x block_cols starting at the box's offset (which lies on a block bound); the
 * last block of a dim is clipped at the box end (a ragged tensor end). Block (e, i, j) has
 * its scale at scale-tensor point (E0 + e, R0 / br + i, C0 / bc + j).
 *
 * Work split: a group of `group` threads (a power of two) quantizes one block; a CUDA block
 * of `threads` threads holds threads / group groups. Each block is read as vectors of
 * RS_QB_VEC consecutive columns of one row (one 16-byte load when the source rows are
 * contiguous and 16-byte aligned, otherwise element by element); vector v of a block is row
 * v / vpr, columns (v % vpr) * RS_QB_VEC..; thread t of a group holds vectors t, t + group, ...
 * (the first RS_QB_REGS of them in registers between the amax pass and the store pass).
 */
#ifndef RS_NCCL_QUANT_BOX_H
#define RS_NCCL_QUANT_BOX_H

#include <stdint.h>
#include <string.h>

#include "reshard/reshard.h"
#include "exec/comm.h"
#include "util/fp8.h"

#ifdef __CUDACC__
#define RS_QHD static __host__ __device__ __forceinline__
#else
#define RS_QHD static inline
#endif

/** Columns of one vector (8 bf16 = 16 bytes). */
#define RS_QB_VEC 8
/** Vectors a thread keeps in registers between the two passes. */
#define RS_QB_REGS 8

/** A prepared quantization job; plain data, passed to the kernel by value. */
typedef struct {
    int32_t mx;                /**< 1: MXFP8 (uint8 e8m0 scales), 0: fp32 scales */
    int32_t pow2;              /**< scales rounded up to a power of two */
    int64_t br, bc;            /**< block rows, cols */
    int64_t ne, nr, nc;        /**< box extents (ne = 1 for a 2-d box) */
    int64_t nbr, nbc;          /**< blocks per dim: ceil(nr / br), ceil(nc / bc) */
    int64_t blocks;            /**< ne * nbr * nbc */
    int64_t sbase, se, sr, sc; /**< source position of box point 0 and strides (bf16 elements) */
    int64_t dbase, de, dr, dc; /**< destination (bytes = e4m3 elements) */
    int64_t gbase, ge, gr, gc; /**< scale position of the first block and strides (elements) */
    int64_t vpr;               /**< vectors per block row: ceil(bc / RS_QB_VEC) */
    int32_t vpr_shift;         /**< log2(vpr) when vpr is a power of two, else -1 */
    int64_t nv;                /**< vectors per block: br * vpr */
    int32_t svec;              /**< source vectors may be one 16-byte load */
    int32_t dvec;              /**< destination vectors may be one 8-byte store */
    int32_t group;             /**< threads per block (power of two) */
    int32_t threads;           /**< threads per CUDA block (multiple of group) */
} rs_quant_job_t;

/* ---- geometry ------------------------------------------------------------------------- */

/** One block of a job: its row/col extents and positions. */
typedef struct {
    int64_t rows, cols;
    int64_t spos, dpos, gpos;
} rs_quant_block_t;

RS_QHD void rs_qb_block(const rs_quant_job_t *j, int64_t b, rs_quant_block_t *o)
{
    const int64_t per_e = j->nbr * j->nbc;
    const int64_t e = b / per_e;
    const int64_t rest = b - e * per_e;
    const int64_t i = rest / j->nbc;
    const int64_t k = rest - i * j->nbc;
    const int64_t r0 = i * j->br, c0 = k * j->bc;
    o->rows = j->nr - r0 < j->br ? j->nr - r0 : j->br;
    o->cols = j->nc - c0 < j->bc ? j->nc - c0 : j->bc;
    o->spos = j->sbase + e * j->se + r0 * j->sr + c0 * j->sc;
    o->dpos = j->dbase + e * j->de + r0 * j->dr + c0 * j->dc;
    o->gpos = j->gbase + e * j->ge + i * j->gr + k * j->gc;
}

/** Eight bf16 values of one vector (w[i] holds columns 2i, 2i+1). */
typedef struct {
    uint32_t w[RS_QB_VEC / 2];
} rs_qvec_t;

RS_QHD uint16_t rs_qv_get(const rs_qvec_t *v, int i)
{
    return (uint16_t)(v->w[i >> 1] >> ((i & 1) * 16));
}

/** Row and first column of vector @p v of a block (v < nv < 2^32: 32-bit division, or a
 *  shift for a power-of-two vpr). */
RS_QHD void rs_qb_split(const rs_quant_job_t *j, int64_t v, int64_t *row, int64_t *c)
{
    const uint32_t x = (uint32_t)v, n = (uint32_t)j->vpr;
    const uint32_t r = j->vpr_shift >= 0 ? x >> j->vpr_shift : x / n;
    *row = r;
    *c = (int64_t)(x - r * n) * RS_QB_VEC;
}

/**
 * Load vector @p v of block @p b into @p out; returns the maximum key of its elements
 * (0 for a vector outside the block; missing columns read as 0).
 */
RS_QHD uint32_t rs_qb_load(const rs_quant_job_t *j, const rs_quant_block_t *b, int64_t v,
                           const uint16_t *src, rs_qvec_t *out)
{
    int64_t row, c;
    rs_qb_split(j, v, &row, &c);
    for (int i = 0; i < RS_QB_VEC / 2; i++)
        out->w[i] = 0;
    if (row >= b->rows || c >= b->cols)
        return 0;
    const uint16_t *p = src + b->spos + row * j->sr + c * j->sc;
    if (j->svec && c + RS_QB_VEC <= b->cols) {
#ifdef __CUDA_ARCH__
        const uint4 x = *(const uint4 *)p;
        out->w[0] = x.x;
        out->w[1] = x.y;
        out->w[2] = x.z;
        out->w[3] = x.w;
#else
        memcpy(out->w, p, 16);
#endif
    } else {
        const int64_t n = b->cols - c;
        for (int i = 0; i < RS_QB_VEC; i++) /* constant indices: registers on the device */
            if (i < n)
                out->w[i >> 1] |= (uint32_t)p[i * j->sc] << ((i & 1) * 16);
    }
    uint32_t key = 0;
    for (int i = 0; i < RS_QB_VEC; i++) {
        const uint32_t k = rs_fp8_amax_key(rs_qv_get(out, i));
        key = k > key ? k : key;
    }
    return key;
}

/** Quantize vector @p v of block @p b (values @p in) with multiplier @p inv (1 / scale)
 *  into @p dst. */
RS_QHD void rs_qb_store(const rs_quant_job_t *j, const rs_quant_block_t *b, int64_t v,
                        const rs_qvec_t *in, float inv, uint8_t *dst)
{
    int64_t row, c;
    rs_qb_split(j, v, &row, &c);
    if (row >= b->rows || c >= b->cols)
        return;
    uint8_t *p = dst + b->dpos + row * j->dr + c * j->dc;
    if (j->dvec && c + RS_QB_VEC <= b->cols) {
        uint32_t lo = 0, hi = 0;
        for (int i = 0; i < 4; i++) {
            lo |= (uint32_t)rs_fp8_quantize(rs_qv_get(in, i), inv) << (8 * i);
            hi |= (uint32_t)rs_fp8_quantize(rs_qv_get(in, i + 4), inv) << (8 * i);
        }
#ifdef __CUDA_ARCH__
        *(uint2 *)p = make_uint2(lo, hi);
#else
        memcpy(p, &lo, 4);
        memcpy(p + 4, &hi, 4);
#endif
    } else {
        const int64_t n = b->cols - c;
        for (int i = 0; i < RS_QB_VEC; i++)
            if (i < n)
                p[i * j->dc] = rs_fp8_quantize(rs_qv_get(in, i), inv);
    }
}

/** Write block @p b's scale @p s (fp32, or the e8m0 byte for MXFP8). */
RS_QHD void rs_qb_store_scale(const rs_quant_job_t *j, const rs_quant_block_t *b, float s,
                              void *scale)
{
    if (j->mx)
        ((uint8_t *)scale)[b->gpos] = rs_fp8_e8m0(s);
    else
        ((float *)scale)[b->gpos] = s;
}

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Prepare the job that quantizes @p box (tensor coordinates; 2 dims rows, cols, or 3 with
 * a leading expert dim) of bf16 elements read from @p src per @p src_frag into e4m3 bytes
 * written to @p dst per @p dst_frag, and one scale per block to @p scale per @p scale_frag
 * (scale-tensor coordinates; fp32 for FP8_BLOCK, uint8 e8m0 for MXFP8). @p mx: MXFP8
 * (else FP8_BLOCK); @p br, @p bc, @p pow2 as rs_quant_t. Pointers are read for their alignment
 * only. An empty box gives a job of no blocks. Errors: INVALID_ARG (a box not on block bounds,
 * outside a fragment, ndim not 2 or 3, bad block sizes, an unknown kind), naming the tensor and
 * rank of the fragment.
 */
reshard_status_t rs_quant_job_init(rs_quant_job_t *j, int mx, int64_t br, int64_t bc, int pow2,
                                   const void *dst, const reshard_fragment_t *dst_frag,
                                   const void *scale, const reshard_fragment_t *scale_frag,
                                   const void *src, const reshard_fragment_t *src_frag,
                                   const reshard_box_t *box);

/** Run job @p j on the CPU exactly as the kernel would (each block, each thread of its
 *  group; the group's maximum, then the stores); for tests and the fake device. */
void rs_quant_emulate(const rs_quant_job_t *j, void *dst, void *scale, const void *src);

#ifdef __cplusplus
}
#endif

#endif
