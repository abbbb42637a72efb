/* The CPU quantizer: bf16 blocks into e4m3 elements and one scale per block
 * (the rule and its sources are in quant.h). */
#include "exec/quant.h"

#include <stdlib.h>
#include <string.h>

#include "util/fp8.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <xmmintrin.h>
#endif

uint8_t rs_e4m3_from_f32(float x)
{
    return rs_fp8_e4m3(x);
}

float rs_quant_scale(const rs_quant_t *q, float amax)
{
    return rs_fp8_scale_of_amax(amax, rs_quant_pow2(q));
}

uint8_t rs_e8m0_from_scale(float scale)
{
    return rs_fp8_e8m0(scale);
}

/* The row loops are inlined into each clone of quant_strip below, so that they are
 * compiled (and vectorized) for its target; an out-of-line copy is baseline code. */
#if defined(__GNUC__)
#define RS_QUANT_INLINE static inline __attribute__((always_inline))
#else
#define RS_QUANT_INLINE static inline
#endif

/* The largest |bf16| bit pattern of n elements, non-finite ones left out:
 * non-negative bf16 patterns order like their values. Adding 0x80 to |x|
 * moves exactly the non-finite patterns (>= 0x7F80) to 0x8000 and above,
 * negative as int16, so a signed max (one vector instruction) skips them. */
RS_QUANT_INLINE uint16_t amax_bits(const uint16_t *restrict v, int64_t n)
{
    int16_t m = 0x80;
    for (int64_t i = 0; i < n; i++) {
        int16_t a = (int16_t)(uint16_t)((v[i] & 0x7FFFu) + 0x80u);
        m = a > m ? a : m;
    }
    return (uint16_t)(m - 0x80);
}

RS_QUANT_INLINE void convert_row(uint8_t *restrict out, const uint16_t *restrict v, int64_t n,
                                 float inv)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = rs_fp8_quantize(v[i], inv);
}

/* AVX-512 form of convert_row (x86-64 with AVX512F/BW/VL, chosen at run time): the steps
 * of rs_fp8_e4m3 in util/fp8.h, 16 lanes at a time, with mask registers for its selections
 * and one narrowing store; a ragged end is a masked load and store. GCC's vectorization of
 * convert_row spends lane shuffles on the uint8 result and selections by blends; this form
 * measured faster in bench_quant. The scalar rule it must equal is rs_fp8_e4m3 (the tests
 * compare both against an independent reference on every bf16 pattern). */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define RS_QUANT_AVX512 1
#define RS_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

/* 16 elements (lanes of @p live) of @p v times @p vinv into @p out. */
RS_AVX512_TARGET static inline void convert16_avx512(uint8_t *out, const uint16_t *v,
                                                     __mmask16 live, __m512 vinv)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1),
                  /* the rounding bias and the exponent rebias (-120 << 23) as one addend */
        round = _mm512_set1_epi32((int)(0x7FFFFu - (960u << 20))), maxn = _mm512_set1_epi32(0x7E),
                  nan = _mm512_set1_epi32(0x7F), sub_top = _mm512_set1_epi32(0x3C800000),
                  magic_bits = _mm512_set1_epi32(0x46800000), inf = _mm512_set1_epi32(0x7F800000),
                  sign_bit = _mm512_set1_epi32(0x80);
    const __m512 magic = _mm512_set1_ps(16384.0f);
    __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, v));
    __m512i b =
        _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(h, 16)), vinv));
    __m512i a = _mm512_and_si512(b, abs_mask);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, 20), one);
    /* normal lanes; in subnormal lanes (below 2^-7 the sum wraps) it is replaced below */
    __m512i code = _mm512_min_epu32(
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, round), lsb), 20), maxn);
    /* subnormal lanes: the magic add, unclamped (other lanes keep the normal code) */
    code = _mm512_mask_sub_epi32(code, _mm512_cmplt_epu32_mask(a, sub_top),
                                 _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), magic)),
                                 magic_bits);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(a, inf), nan);
    __m512i sign = _mm512_and_si512(_mm512_srli_epi32(b, 24), sign_bit);
    _mm512_mask_cvtepi32_storeu_epi8(out, live, _mm512_or_si512(code, sign));
}

/* Fold the amax keys of @p n elements of @p v from a block bound on into amax[j] for block
 * j (of @p bc columns, a multiple of 32): amax_bits' signed-max formulation, 32 lanes, and
 * one horizontal step per block (phminposuw finds the least of 8 lanes; x ^ 0x7FFF turns
 * the signed maximum into an unsigned minimum). */
RS_AVX512_TARGET static void amax_blocks_avx512(const uint16_t *restrict v, int64_t n, int64_t bc,
                                                uint16_t *restrict amax)
{
    const __m512i abs_mask = _mm512_set1_epi16(0x7FFF), bias = _mm512_set1_epi16(0x80);
    for (int64_t c = 0, j = 0; c < n; c += bc, j++) {
        const int64_t end = c + bc < n ? c + bc : n;
        __m512i m = bias;
        for (int64_t i = c; i < end; i += 32) {
            __mmask32 live =
                end - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (end - i)) - 1u);
            __m512i x = _mm512_maskz_loadu_epi16(live, v + i);
            m = _mm512_max_epi16(m, _mm512_add_epi16(_mm512_and_si512(x, abs_mask), bias));
        }
        __m256i m8 = _mm256_max_epi16(_mm512_castsi512_si256(m), _mm512_extracti64x4_epi64(m, 1));
        __m128i m4 = _mm_max_epi16(_mm256_castsi256_si128(m8), _mm256_extracti128_si256(m8, 1));
        __m128i lo = _mm_minpos_epu16(_mm_xor_si128(m4, _mm_set1_epi16(0x7FFF)));
        uint16_t key = (uint16_t)(((uint16_t)_mm_cvtsi128_si32(lo) ^ 0x7FFFu) - 0x80u);
        amax[j] = key > amax[j] ? key : amax[j];
    }
}

/* @p n elements of @p v from a block bound on, block j (of @p bc columns, a multiple of 16)
 * times inv[j]. */
RS_AVX512_TARGET static void convert_blocks_avx512(uint8_t *restrict out,
                                                   const uint16_t *restrict v, int64_t n,
                                                   const float *inv, int64_t bc)
{
    for (int64_t c = 0, j = 0; c < n; c += bc, j++) {
        const __m512 vinv = _mm512_set1_ps(inv[j]);
        const int64_t end = c + bc < n ? c + bc : n;
        int64_t i = c;
        for (; i + 16 <= end; i += 16)
            convert16_avx512(out + i, v + i, (__mmask16)0xFFFF, vinv);
        if (i < end)
            convert16_avx512(out + i, v + i, (__mmask16)((1u << (end - i)) - 1u), vinv);
    }
}
#endif

/* Element position in @p f's buffer of point @p idx of an @p nd-dim box. */
static int64_t pos_of(const reshard_fragment_t *f, int nd, const int64_t *idx)
{
    int64_t p = f->base;
    for (int d = 0; d < nd; d++)
        p += (idx[d] - f->box.offset[d]) * f->stride[d];
    return p;
}

#define ROW_MAX 4096 /* columns read per step */

/* A row's columns [a, a+n) of the box as contiguous bf16: in place when the
 * source's columns are contiguous, else gathered into @p tmp. */
static inline const uint16_t *row_of(const uint16_t *s16, const reshard_fragment_t *f, int nd,
                                     const int64_t *idx, int64_t n, bool dense, uint16_t *tmp)
{
    int64_t p = pos_of(f, nd, idx);
    if (dense)
        return s16 + p;
    for (int64_t i = 0; i < n; i++)
        tmp[i] = s16[p + i * f->stride[nd - 1]];
    return tmp;
}

/* The scales of block row @p rb (expert @p e of a 3-d box), block columns
 * [cb0, cb0 + nb), from their amax bits; their reciprocals into @p inv. */
RS_QUANT_INLINE void write_scales(const rs_quant_t *q, void *scale, const reshard_fragment_t *sf,
                                  int nd, int64_t e, int64_t rb, int64_t cb0, int64_t nb,
                                  const uint16_t *restrict amax, float *restrict inv)
{
    int64_t sidx[RESHARD_MAX_DIMS] = {0};
    sidx[0] = e; /* 2-d boxes overwrite it with the block row */
    sidx[nd - 2] = rb;
    sidx[nd - 1] = cb0;
    const int64_t sp = pos_of(sf, nd, sidx), ss = sf->stride[nd - 1];
    const int pow2 = rs_quant_pow2(q);
    if (q->kind == RS_QUANT_MXFP8) {
        uint8_t *s8 = (uint8_t *)scale + sp;
        for (int64_t b = 0; b < nb; b++) {
            float sc = rs_fp8_scale(amax[b], pow2);
            inv[b] = rs_fp8_inverse(sc);
            s8[b * ss] = rs_fp8_e8m0(sc);
        }
    } else {
        uint8_t *s8 = (uint8_t *)scale + sp * 4; /* fp32 scales, possibly unaligned */
        for (int64_t b = 0; b < nb; b++) {
            float sc = rs_fp8_scale(amax[b], pow2);
            inv[b] = rs_fp8_inverse(sc);
            memcpy(s8 + b * ss * 4, &sc, 4);
        }
    }
}

/* Built for AVX-512 and AVX2 beside the baseline, picked at load time (GCC
 * function multiversioning): the row loops are 16 or 8 lanes wide there. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define RS_QUANT_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define RS_QUANT_CLONES
#endif

/* One strip of block rows [r0, r1) at expert index idx[0] (3-d boxes): pass
 * 1 reads its rows in order and keeps one amax per block column, pass 2
 * reads them again (from cache) and converts. Reading whole rows in order
 * keeps the hardware prefetchers streaming. */
RS_QUANT_CLONES
static void quant_strip(const rs_quant_t *q, uint8_t *d8, const reshard_fragment_t *df, void *scale,
                        const reshard_fragment_t *sf, const uint16_t *s16,
                        const reshard_fragment_t *srcf, const reshard_box_t *box, int64_t *idx,
                        int64_t r0, int64_t r1, uint16_t *amax, float *inv, uint16_t *tmp,
                        uint8_t *otmp)
{
    const int nd = box->ndim, rd = nd - 2, cd = nd - 1;
    const int64_t bc = q->block_cols, c_lo = box->offset[cd], c_hi = c_lo + box->extent[cd];
    const int64_t nb = (c_hi - c_lo + bc - 1) / bc;
    const bool s_dense = box->extent[cd] == 1 || srcf->stride[cd] == 1;
    const bool d_dense = box->extent[cd] == 1 || df->stride[cd] == 1;
    memset(amax, 0, (size_t)nb * sizeof *amax);
#ifdef RS_QUANT_AVX512
    /* segments start on block bounds (ROW_MAX is a multiple of bc) and no vector of 16
     * crosses one (bc a multiple of 16) */
    const bool avx512_blocks =
        bc % 16 == 0 && ROW_MAX % bc == 0 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            write_scales(q, scale, sf, nd, idx[0], r0 / q->block_rows, c_lo / bc, nb, amax, inv);
        for (int64_t r = r0; r < r1; r++) {
            idx[rd] = r;
            for (int64_t a = c_lo; a < c_hi; a += ROW_MAX) {
                int64_t n = c_hi - a < ROW_MAX ? c_hi - a : ROW_MAX;
                idx[cd] = a;
                const uint16_t *v = row_of(s16, srcf, nd, idx, n, s_dense, tmp);
                int64_t dp = pass ? pos_of(df, nd, idx) : 0;
                uint8_t *out = d_dense ? d8 + dp : otmp;
#ifdef RS_QUANT_AVX512
                /* the segment in one call */
                const bool done = avx512_blocks && (pass == 1 || bc % 32 == 0);
                if (done && pass == 0)
                    amax_blocks_avx512(v, n, bc, amax + (a - c_lo) / bc);
                else if (done)
                    convert_blocks_avx512(out, v, n, inv + (a - c_lo) / bc, bc);
#else
                const bool done = false;
#endif
                for (int64_t c = a; !done && c < a + n;) { /* block columns: bc-aligned from c_lo */
                    int64_t b = (c - c_lo) / bc, end = c_lo + (b + 1) * bc;
                    end = end < a + n ? end : a + n;
                    if (pass == 0) {
                        uint16_t m = amax_bits(v + (c - a), end - c);
                        amax[b] = m > amax[b] ? m : amax[b];
                    } else if (end - c == 128) { /* whole blocks: a fixed trip count */
                        convert_row(out + (c - a), v + (c - a), 128, inv[b]);
                    } else if (end - c == 32) {
                        convert_row(out + (c - a), v + (c - a), 32, inv[b]);
                    } else {
                        convert_row(out + (c - a), v + (c - a), end - c, inv[b]);
                    }
                    c = end;
                }
                if (pass == 1 && !d_dense)
                    for (int64_t i = 0; i < n; i++)
                        d8[dp + i * df->stride[cd]] = otmp[i];
            }
        }
    }
}

void rs_quant_box_cpu(const rs_quant_t *q, void *dst, const reshard_fragment_t *dst_frag,
                      void *scale, const reshard_fragment_t *scale_frag, const void *src,
                      const reshard_fragment_t *src_frag, const reshard_box_t *box)
{
    const int nd = box->ndim, rd = nd - 2, cd = nd - 1;
    const int64_t br = q->block_rows, bc = q->block_cols;
    int64_t nb = (box->extent[cd] + bc - 1) / bc;
    uint16_t tmp[ROW_MAX], small_amax[64];
    uint8_t otmp[ROW_MAX];
    float small_inv[64];
    uint16_t *amax = nb <= 64 ? small_amax : malloc((size_t)nb * sizeof *amax);
    float *inv = nb <= 64 ? small_inv : malloc((size_t)nb * sizeof *inv);
    if (!amax || !inv) { /* out of memory: one block column at a time */
        if (amax != small_amax)
            free(amax);
        if (inv != small_inv)
            free(inv);
        for (int64_t c = 0; c < box->extent[cd]; c += bc) {
            reshard_box_t b = *box;
            b.offset[cd] += c;
            b.extent[cd] = box->extent[cd] - c < bc ? box->extent[cd] - c : bc;
            rs_quant_box_cpu(q, dst, dst_frag, scale, scale_frag, src, src_frag, &b);
        }
        return;
    }
#if defined(__x86_64__) && defined(__SSE2__)
    /* Denormal operands and results of the fp32 product take microcode assists on x86 (about
     * a hundred cycles an instruction); flushing them to zero changes no byte: a bf16
     * denormal times the largest multiplier (448 / 1e-4 < 2^23) is below 2^-103, and a
     * product below 2^-126 is below half e4m3's smallest subnormal (2^-10); either rounds to
     * zero of the same sign, which the flushed zero keeps. Scales and multipliers are normal
     * (amax >= 1e-4, scale <= 2^120). */
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15) and DAZ (bit 6) */
#endif
    int64_t E = nd == 3 ? box->extent[0] : 1;
    int64_t r_lo = box->offset[rd], r_hi = r_lo + box->extent[rd];
    int64_t idx[RESHARD_MAX_DIMS] = {0};
    for (int64_t e = 0; e < E; e++) {
        if (nd == 3)
            idx[0] = box->offset[0] + e;
        for (int64_t r0 = r_lo; r0 < r_hi; r0 += br)
            quant_strip(q, dst, dst_frag, scale, scale_frag, src, src_frag, box, idx, r0,
                        r0 + br < r_hi ? r0 + br : r_hi, amax, inv, tmp, otmp);
    }
#if defined(__x86_64__) && defined(__SSE2__)
    _mm_setcsr(csr);
#endif
    if (amax != small_amax)
        free(amax);
    if (inv != small_inv)
        free(inv);
}
