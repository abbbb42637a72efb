/* The CPU quantizer (exec/quant.c) against the tests' independent reference
 * (tests/common/quant_ref.c, written from the rule of DeepGEMM's
 * per_block_cast_to_fp8 and the OCP MX spec): the e4m3 conversion over every
 * bf16 value and random fp32 values, and whole boxes — block-aligned and
 * ragged, zero blocks, one huge value, NaN and Inf, expert stacks, strided
 * and offset fragments, fp32 and power-of-two scales, MXFP8 — checking every
 * element, every scale and that no byte outside the box is written. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "exec/quant.h"
#include "quant_ref.h"

static unsigned seed = 13;

static uint32_t draw(void)
{
    return ((uint32_t)rand_r(&seed) << 16) ^ (uint32_t)rand_r(&seed);
}

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

/* A finite bf16 of random sign, mantissa and an exponent in [lo, hi]. */
static uint16_t rand_bf16(int lo, int hi)
{
    uint32_t e = (uint32_t)(lo + (int)(draw() % (uint32_t)(hi - lo + 1))) + 127u;
    return (uint16_t)(((draw() & 1u) << 15) | (e << 7) | (draw() & 0x7Fu));
}

static void e4m3_every_bf16(void **state)
{
    (void)state;
    /* every bf16 pattern (NaN, Inf, subnormals, zeros included) as fp32 */
    for (uint32_t b = 0; b < 65536; b++) {
        float f = ref_bf16((uint16_t)b);
        assert_int_equal(rs_e4m3_from_f32(f), ref_e4m3(f));
    }
    /* random fp32 around e4m3's range, ties and the subnormal edge */
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (draw() & 0x80000000u) | ((110u + draw() % 30u) << 23) | (draw() & 0x7FFFFFu);
        float f;
        memcpy(&f, &u, sizeof f);
        assert_int_equal(rs_e4m3_from_f32(f), ref_e4m3(f));
    }
    const float edge[] = {448.0f,
                          448.5f,
                          464.0f,
                          479.9f,
                          480.0f,
                          1e30f,
                          0.0f,
                          -0.0f,
                          0.0009765625f /* 2^-10: tie between 0 and 2^-9 */,
                          0.0029296875f /* 1.5 * 2^-9: tie between 1 and 2 steps */,
                          0.0146484375f /* 0.9375 * 2^-6: tie between 7/8 and 8/8 */,
                          18.0f /* exact: 16 + one step of 2 */,
                          17.0f /* tie between 16 and 18: even is 16 */,
                          19.0f,
                          -17.0f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        assert_int_equal(rs_e4m3_from_f32(edge[i]), ref_e4m3(edge[i]));
    /* the rule, spelled out on a few values */
    assert_int_equal(rs_e4m3_from_f32(448.0f), 0x7E);
    assert_int_equal(rs_e4m3_from_f32(1e30f), 0x7E);
    assert_int_equal(rs_e4m3_from_f32(-INFINITY), 0xFE);
    assert_int_equal(rs_e4m3_from_f32(NAN), 0x7F);
    assert_int_equal(rs_e4m3_from_f32(17.0f), 0x58); /* tie 16 | 18: 16 = 1.000 * 2^4, e=11, m=0 */
    assert_int_equal(rs_e4m3_from_f32(19.0f), 0x5A); /* tie 18 | 20: 20 = 1.010 * 2^4 */
    assert_int_equal(rs_e4m3_from_f32(-0.0f), 0x80);
}

typedef struct {
    int64_t E, rows, cols, br, bc;
    bool pow2, mx;
    int fill; /* 0 random, 1 zero block + huge value + NaN/Inf, 2 all zero, 3 every bf16 pattern */
} shape_t;

/* Quantize the sub-box [e0:e1, r0:r1, c0:c1] (block-aligned or at the
 * tensor's end) of a tensor held in a strided, offset source fragment into
 * strided, offset destination and scale fragments; compare with the
 * reference on the whole tensor and check the untouched bytes. */
static void run_box(const shape_t *t, int64_t e0, int64_t e1, int64_t r0, int64_t r1, int64_t c0,
                    int64_t c1, int64_t col_stride)
{
    int64_t E = t->E, R = t->rows, C = t->cols, n = E * R * C;
    int64_t RB = (R + t->br - 1) / t->br, CB = (C + t->bc - 1) / t->bc, ns = E * RB * CB;
    uint16_t *x = malloc((size_t)n * sizeof *x);
    uint8_t *qref = malloc((size_t)n);
    uint8_t *sref = malloc((size_t)ns * 4);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = t->fill == 2 ? 0 : t->fill == 3 ? (uint16_t)i : rand_bf16(-12, 12);
    if (t->fill == 1) {
        /* block (0,0,0): zero; block (0,0,1) or the next: one huge value;
         * the last block: a NaN, an Inf and a -Inf among finite values */
        for (int64_t r = 0; r < t->br && r < R; r++)
            for (int64_t c = 0; c < t->bc && c < C; c++)
                x[r * C + c] = 0;
        int64_t hc = CB > 1 ? t->bc : 0, hr = CB > 1 ? 0 : (RB > 1 ? t->br : 0);
        x[hr * C + hc + (hc + 3 < C ? 3 : 0)] = bf16_of(3.0e38f);
        x[n - 1] = 0x7FC0;
        x[n - 2] = 0x7F80;
        x[n - 3] = 0xFF80;
    }
    ref_quantize(x, E, R, C, t->br, t->bc, t->pow2, t->mx, qref, sref);

    /* source: [E, R, C] with column stride col_stride, rows padded by 5 */
    int64_t sc = C * col_stride + 5, se = R * sc, sbase = 7;
    uint16_t *src = malloc((size_t)(sbase + E * se) * sizeof *src);
    for (int64_t i = 0; i < sbase + E * se; i++)
        src[i] = 0x7FC1; /* NaN: read by mistake, it would show */
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                src[sbase + e * se + r * sc + c * col_stride] = x[(e * R + r) * C + c];
    /* destination: the box only, dense with row padding 3, at base 11 */
    int64_t bE = e1 - e0, bR = r1 - r0, bC = c1 - c0;
    int64_t dc = bC + 3, de = bR * dc, dbase = 11, dbytes = dbase + bE * de + 16;
    uint8_t *dst = malloc((size_t)dbytes);
    memset(dst, 0xA5, (size_t)dbytes);
    /* scales: the box's blocks, row-major, at base 2 */
    int64_t sb0 = r0 / t->br, sb1 = (r1 + t->br - 1) / t->br;
    int64_t cb0 = c0 / t->bc, cb1 = (c1 + t->bc - 1) / t->bc;
    int64_t ssz = t->mx ? 1 : 4, sbase2 = 2;
    int64_t sbytes = (sbase2 + bE * (sb1 - sb0) * (cb1 - cb0)) * ssz + 8;
    uint8_t *scl = malloc((size_t)sbytes);
    memset(scl, 0xA5, (size_t)sbytes);

    int nd = E > 1 || e0 > 0 ? 3 : 2;
    reshard_box_t box = {.ndim = nd};
    reshard_fragment_t sf = {.base = sbase}, df = {.base = dbase}, ff = {.base = sbase2};
    int k = 0;
    if (nd == 3) {
        box.offset[0] = e0;
        box.extent[0] = bE;
        sf.box.offset[0] = 0;
        sf.box.extent[0] = E;
        sf.stride[0] = se;
        df.box.offset[0] = e0;
        df.box.extent[0] = bE;
        df.stride[0] = de;
        ff.box.offset[0] = e0;
        ff.box.extent[0] = bE;
        ff.stride[0] = (sb1 - sb0) * (cb1 - cb0);
        k = 1;
    }
    box.offset[k] = r0;
    box.extent[k] = bR;
    box.offset[k + 1] = c0;
    box.extent[k + 1] = bC;
    sf.box.ndim = df.box.ndim = ff.box.ndim = nd;
    sf.box.offset[k] = 0;
    sf.box.extent[k] = R;
    sf.box.offset[k + 1] = 0;
    sf.box.extent[k + 1] = C;
    sf.stride[k] = sc;
    sf.stride[k + 1] = col_stride;
    df.box.offset[k] = r0;
    df.box.extent[k] = bR;
    df.box.offset[k + 1] = c0;
    df.box.extent[k + 1] = bC;
    df.stride[k] = dc;
    df.stride[k + 1] = 1;
    ff.box.offset[k] = sb0;
    ff.box.extent[k] = sb1 - sb0;
    ff.box.offset[k + 1] = cb0;
    ff.box.extent[k + 1] = cb1 - cb0;
    ff.stride[k] = cb1 - cb0;
    ff.stride[k + 1] = 1;
    rs_quant_t q = {t->mx ? RS_QUANT_MXFP8 : RS_QUANT_FP8_BLOCK, t->br, t->bc, t->pow2};
    rs_quant_box_cpu(&q, dst, &df, scl, &ff, src, &sf, &box);

    int64_t wrong = 0;
    for (int64_t e = e0; e < e1; e++)
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = c0; c < c1; c++)
                wrong += dst[dbase + (e - e0) * de + (r - r0) * dc + (c - c0)] !=
                         qref[(e * R + r) * C + c];
    assert_int_equal(wrong, 0);
    for (int64_t e = e0; e < e1; e++)
        for (int64_t bi = sb0; bi < sb1; bi++)
            for (int64_t bj = cb0; bj < cb1; bj++) {
                int64_t at =
                    sbase2 + ((e - e0) * (sb1 - sb0) + (bi - sb0)) * (cb1 - cb0) + (bj - cb0);
                int64_t ri = (e * RB + bi) * CB + bj;
                assert_memory_equal(scl + at * ssz, sref + ri * ssz, (size_t)ssz);
            }
    /* untouched: the padding of dst, the bytes around the scales */
    for (int64_t i = 0; i < dbytes; i++) {
        int64_t j = i - dbase;
        bool in = j >= 0 && j < bE * de && (j % de) % dc < bC && (j % de) / dc < bR;
        if (!in)
            assert_int_equal(dst[i], 0xA5);
    }
    for (int64_t i = 0; i < sbase2 * ssz; i++)
        assert_int_equal(scl[i], 0xA5);
    for (int64_t i = (sbase2 + bE * (sb1 - sb0) * (cb1 - cb0)) * ssz; i < sbytes; i++)
        assert_int_equal(scl[i], 0xA5);
    free(x);
    free(qref);
    free(sref);
    free(src);
    free(dst);
    free(scl);
}

static void block_aligned(void **state)
{
    (void)state;
    shape_t t = {1, 256, 384, 128, 128, false, false, 0};
    run_box(&t, 0, 1, 0, 256, 0, 384, 1);
    run_box(&t, 0, 1, 128, 256, 128, 384, 1); /* a sub-box */
    t.pow2 = true;
    run_box(&t, 0, 1, 0, 256, 0, 384, 1);
}

static void ragged(void **state)
{
    (void)state;
    shape_t t = {1, 300, 200, 128, 128, false, false, 0};
    run_box(&t, 0, 1, 0, 300, 0, 200, 1);
    run_box(&t, 0, 1, 256, 300, 128, 200, 1); /* the ragged corner block alone */
    t.pow2 = true;
    run_box(&t, 0, 1, 128, 300, 0, 200, 2);           /* and a column-strided source */
    shape_t u = {1, 5, 7, 128, 128, false, false, 0}; /* smaller than one block */
    run_box(&u, 0, 1, 0, 5, 0, 7, 1);
}

static void special_values(void **state)
{
    (void)state;
    shape_t t = {1, 256, 300, 128, 128, false, false, 1};
    run_box(&t, 0, 1, 0, 256, 0, 300, 1);
    t.pow2 = true;
    run_box(&t, 0, 1, 0, 256, 0, 300, 1);
    /* every bf16 pattern (NaN, Inf, subnormals, both signs) through the block loops */
    shape_t every = {1, 512, 128, 128, 128, false, false, 3};
    run_box(&every, 0, 1, 0, 512, 0, 128, 1);
    every.pow2 = true;
    run_box(&every, 0, 1, 0, 512, 0, 128, 1);
    shape_t every_mx = {1, 2048, 32, 1, 32, true, true, 3};
    run_box(&every_mx, 0, 1, 0, 2048, 0, 32, 1);
    shape_t z = {1, 130, 129, 128, 128, false, false, 2}; /* every block zero */
    run_box(&z, 0, 1, 0, 130, 0, 129, 1);
    /* the amax = 0 rule spelled out: scale 1e-4/448, zeros stay zero */
    rs_quant_t q = {RS_QUANT_FP8_BLOCK, 128, 128, false};
    assert_true(rs_quant_scale(&q, 0.0f) == 1e-4f / 448.0f);
    q.pow2_scale = true;
    assert_true(rs_quant_scale(&q, 0.0f) == ldexpf(1.0f, -22));
    assert_true(rs_quant_scale(&q, 448.0f) == 1.0f);
    assert_true(rs_quant_scale(&q, 449.0f) == 2.0f);
}

static void expert_stack(void **state)
{
    (void)state;
    shape_t t = {4, 256, 160, 128, 128, false, false, 0};
    run_box(&t, 0, 4, 0, 256, 0, 160, 1);
    run_box(&t, 1, 3, 128, 256, 0, 160, 1); /* two experts, their second block row */
    t.pow2 = true;
    t.fill = 1;
    run_box(&t, 0, 4, 0, 256, 0, 160, 1);
}

static void mxfp8(void **state)
{
    (void)state;
    shape_t t = {1, 3, 100, 1, 32, true, true, 0}; /* ragged last block of 4 */
    run_box(&t, 0, 1, 0, 3, 0, 100, 1);
    run_box(&t, 0, 1, 1, 2, 32, 100, 2);
    t.fill = 1;
    run_box(&t, 0, 1, 0, 3, 0, 100, 1);
    shape_t e = {3, 8, 64, 1, 32, true, true, 0};
    run_box(&e, 0, 3, 0, 8, 0, 64, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(e4m3_every_bf16), cmocka_unit_test(block_aligned),
        cmocka_unit_test(ragged),          cmocka_unit_test(special_values),
        cmocka_unit_test(expert_stack),    cmocka_unit_test(mxfp8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
