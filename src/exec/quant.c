/* The CPU quantizer: bf16 blocks into e4m3 elements and one scale per block
 * (the rule and its sources are in quant.h). */
#include "exec/quant.h"

#include <string.h>

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Branch-free so that the row loops below vectorize. */
static inline uint8_t e4m3_of(float x)
{
    uint32_t b = f32_bits(x);
    uint32_t sign = (b >> 24) & 0x80u, a = b & 0x7FFFFFFFu;
    /* Normal e4m3 range (|x| >= 2^-6): round the fp32 mantissa to 3 bits,
     * ties to even, and rebias the exponent (127 -> 7). */
    uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
    uint32_t norm = r - (120u << 3);
    /* Subnormal range (|x| < 2^-6, multiples of 2^-9): adding 2^14, whose
     * fp32 ulp is 2^-9, rounds |x| to the grid; the low bits count steps. */
    uint32_t sub = f32_bits(bits_f32(a) + 16384.0f) - 0x46800000u;
    uint32_t code = a < 0x3C800000u ? sub : norm;
    code = a > 0x43E00000u ? 0x7Eu : code; /* above 448 (and Inf): saturate */
    code = code > 0x7Eu ? 0x7Eu : code;
    code = a > 0x7F800000u ? 0x7Fu : code; /* NaN */
    return (uint8_t)(code | sign);
}

uint8_t rs_e4m3_from_f32(float x)
{
    return e4m3_of(x);
}

uint32_t rs_quant_scale_size(const rs_quant_t *q)
{
    return q->kind == RS_QUANT_MXFP8 ? 1u : 4u;
}

float rs_quant_scale(const rs_quant_t *q, float amax)
{
    if (!(amax >= RS_QUANT_AMAX_MIN))
        amax = RS_QUANT_AMAX_MIN;
    float s = amax / RS_E4M3_MAX;
    if (q->kind == RS_QUANT_MXFP8 || q->pow2_scale) {
        uint32_t b = f32_bits(s);
        if (b & 0x7FFFFFu) /* not a power of two: the next one up */
            b = (b & 0x7F800000u) + 0x800000u;
        s = bits_f32(b);
    }
    return s;
}

uint8_t rs_e8m0_from_scale(float scale)
{
    return (uint8_t)(f32_bits(scale) >> 23);
}

/* The largest |bf16| bit pattern of n elements, non-finite ones left out:
 * non-negative bf16 patterns order like their values. */
static inline uint16_t amax_bits(const uint16_t *restrict v, int64_t n)
{
    uint16_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t a = v[i] & 0x7FFFu;
        a = a < 0x7F80u ? a : 0;
        m = a > m ? a : m;
    }
    return m;
}

static inline void convert_row(uint8_t *restrict out, const uint16_t *restrict v, int64_t n,
                               float inv)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = e4m3_of(bits_f32((uint32_t)v[i] << 16) * inv);
}

/* Element position in @p f's buffer of point @p idx of an @p nd-dim box. */
static int64_t pos_of(const reshard_fragment_t *f, int nd, const int64_t *idx)
{
    int64_t p = f->base;
    for (int d = 0; d < nd; d++)
        p += (idx[d] - f->box.offset[d]) * f->stride[d];
    return p;
}

#define ROW_MAX 4096 /* columns converted per step */

void rs_quant_box_cpu(const rs_quant_t *q, void *dst, const reshard_fragment_t *dst_frag,
                      void *scale, const reshard_fragment_t *scale_frag, const void *src,
                      const reshard_fragment_t *src_frag, const reshard_box_t *box)
{
    const int nd = box->ndim, rd = nd - 2, cd = nd - 1;
    const int64_t br = q->block_rows, bc = q->block_cols;
    const uint16_t *s16 = src;
    uint8_t *d8 = dst;
    const bool s_dense = box->extent[cd] == 1 || src_frag->stride[cd] == 1;
    const bool d_dense = box->extent[cd] == 1 || dst_frag->stride[cd] == 1;
    uint16_t tmp[ROW_MAX];
    uint8_t otmp[ROW_MAX];
    int64_t E = nd == 3 ? box->extent[0] : 1;
    int64_t r_lo = box->offset[rd], r_hi = r_lo + box->extent[rd];
    int64_t c_lo = box->offset[cd], c_hi = c_lo + box->extent[cd];
    for (int64_t e = 0; e < E; e++) {
        int64_t idx[3], sidx[3];
        if (nd == 3)
            idx[0] = sidx[0] = box->offset[0] + e;
        for (int64_t r0 = r_lo; r0 < r_hi; r0 += br) {
            int64_t r1 = r0 + br < r_hi ? r0 + br : r_hi;
            for (int64_t c0 = c_lo; c0 < c_hi; c0 += bc) {
                int64_t c1 = c0 + bc < c_hi ? c0 + bc : c_hi;
                /* pass 1: amax over the block (in pieces of ROW_MAX columns) */
                uint16_t m = 0;
                for (int64_t r = r0; r < r1; r++) {
                    idx[rd] = r;
                    for (int64_t a = c0; a < c1; a += ROW_MAX) {
                        int64_t n = c1 - a < ROW_MAX ? c1 - a : ROW_MAX;
                        idx[cd] = a;
                        int64_t p = pos_of(src_frag, nd, idx);
                        const uint16_t *v = s16 + p;
                        if (!s_dense) {
                            for (int64_t i = 0; i < n; i++)
                                tmp[i] = s16[p + i * src_frag->stride[cd]];
                            v = tmp;
                        }
                        uint16_t mm = amax_bits(v, n);
                        m = mm > m ? mm : m;
                    }
                }
                float sc = rs_quant_scale(q, bits_f32((uint32_t)m << 16));
                float inv = 1.0f / sc;
                sidx[rd] = r0 / br;
                sidx[cd] = c0 / bc;
                int64_t sp = pos_of(scale_frag, nd, sidx);
                if (q->kind == RS_QUANT_MXFP8)
                    ((uint8_t *)scale)[sp] = rs_e8m0_from_scale(sc);
                else
                    memcpy((uint8_t *)scale + sp * 4, &sc, 4);
                /* pass 2: the elements */
                for (int64_t r = r0; r < r1; r++) {
                    idx[rd] = r;
                    for (int64_t a = c0; a < c1; a += ROW_MAX) {
                        int64_t n = c1 - a < ROW_MAX ? c1 - a : ROW_MAX;
                        idx[cd] = a;
                        int64_t p = pos_of(src_frag, nd, idx), dp = pos_of(dst_frag, nd, idx);
                        const uint16_t *v = s16 + p;
                        if (!s_dense) {
                            for (int64_t i = 0; i < n; i++)
                                tmp[i] = s16[p + i * src_frag->stride[cd]];
                            v = tmp;
                        }
                        if (d_dense) {
                            convert_row(d8 + dp, v, n, inv);
                        } else {
                            convert_row(otmp, v, n, inv);
                            for (int64_t i = 0; i < n; i++)
                                d8[dp + i * dst_frag->stride[cd]] = otmp[i];
                        }
                    }
                }
            }
        }
    }
}
