/* The verification pattern of quantized destinations: the e4m3 bytes and
 * scales the rule (util/fp8.h; conventions in exec/quant.h) makes of the bf16 pattern values of the
 * source. */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "util/fp8.h"
#include "util/quant_types.h"

typedef struct {
    int32_t T;
    rs_quant_t q;
    int64_t E, R, C, RB, CB;
    float *sc;    /* per block column: the cached scale */
    int64_t *key; /* per block column: (e * RB + rb) of the cached scale, -1: none */
} qexp_t;

/* bf16 bits of the pattern value of element @p flat of tensor T. */
static uint16_t bf16_bits(int32_t T, int64_t flat)
{
    return (uint16_t)rs_pattern_value(T, flat);
}

/* The scale of block (e, rb, kb) of the pattern of tensor T. */
static float block_scale(qexp_t *x, int64_t e, int64_t rb, int64_t kb)
{
    int64_t k = e * x->RB + rb;
    if (x->key[kb] == k)
        return x->sc[kb];
    int64_t r1 = (rb + 1) * x->q.block_rows, c1 = (kb + 1) * x->q.block_cols;
    r1 = r1 < x->R ? r1 : x->R;
    c1 = c1 < x->C ? c1 : x->C;
    uint32_t amax = 0;
    for (int64_t r = rb * x->q.block_rows; r < r1; r++)
        for (int64_t c = kb * x->q.block_cols; c < c1; c++) {
            uint32_t key = rs_fp8_amax_key(bf16_bits(x->T, (e * x->R + r) * x->C + c));
            amax = key > amax ? key : amax;
        }
    x->key[kb] = k;
    return x->sc[kb] = rs_fp8_scale(amax, rs_quant_pow2(&x->q));
}

int64_t rs_quant_pattern_check(const reshard_layout_t *l, const reshard_fragment_t *f,
                               const uint8_t *buf, int32_t T, bool scale, int64_t *first_bad)
{
    const rs_tensor_t *t = &l->tensors->t[T], *ft = &l->tensors->t[f->tensor];
    bool mx = t->quant.kind == RESHARD_QUANT_MXFP8;
    int nd = t->ndim;
    qexp_t x = {.T = T,
                .q = {mx ? RS_QUANT_MXFP8 : RS_QUANT_FP8_BLOCK, mx ? 1 : 128, mx ? 32 : 128,
                      t->quant.pow2_scale != 0},
                .E = nd == 3 ? t->shape[0] : 1,
                .R = t->shape[nd - 2],
                .C = t->shape[nd - 1]};
    x.RB = (x.R + x.q.block_rows - 1) / x.q.block_rows;
    x.CB = (x.C + x.q.block_cols - 1) / x.q.block_cols;
    x.sc = malloc((size_t)x.CB * sizeof *x.sc);
    x.key = malloc((size_t)x.CB * sizeof *x.key);
    if (!x.sc || !x.key) {
        free(x.sc);
        free(x.key);
        *first_bad = -1;
        return 1;
    }
    for (int64_t i = 0; i < x.CB; i++)
        x.key[i] = -1;
    size_t es = scale ? rs_quant_scale_size(&x.q) : 1;
    int last = f->box.ndim - 1;
    int64_t idx[RESHARD_MAX_DIMS], bad = 0;
    memcpy(idx, f->box.offset, sizeof idx);
    do {
        int64_t flat0 = rs_flat_index(ft->vndim, ft->vshape, idx);
        const uint8_t *p = buf + (size_t)rs_frag_pos(f, idx) * es;
        for (int64_t j = 0; j < f->box.extent[last]; j++, p += (size_t)f->stride[last] * es) {
            int64_t flat = flat0 + j, e, rb, kb;
            uint32_t want;
            if (scale) {
                e = flat / (x.RB * x.CB);
                rb = flat / x.CB % x.RB;
                kb = flat % x.CB;
                float s = block_scale(&x, e, rb, kb);
                if (mx)
                    want = rs_fp8_e8m0(s);
                else
                    memcpy(&want, &s, 4);
            } else {
                e = flat / (x.R * x.C);
                rb = flat / x.C % x.R / x.q.block_rows;
                kb = flat % x.C / x.q.block_cols;
                float s = block_scale(&x, e, rb, kb);
                want = rs_fp8_quantize(bf16_bits(T, flat), rs_fp8_inverse(s));
            }
            uint32_t got = 0;
            memcpy(&got, p, es); /* little-endian */
            if (got != want && bad++ == 0)
                *first_bad = flat;
        }
    } while (rs_box_next_row(&f->box, idx));
    free(x.sc);
    free(x.key);
    return bad;
}
