/* The tests' reference quantizer (quant_ref.h). */
#include "quant_ref.h"

#include <math.h>
#include <string.h>

float ref_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Value of the e4m3 magnitude code c (0..0x7E): bias 7, 3 mantissa bits,
 * exponent field 0 = subnormal (m/8 * 2^-6). */
static double e4m3_value(int c)
{
    int e = (c >> 3) & 15, m = c & 7;
    return e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
}

uint8_t ref_e4m3(float y)
{
    if (isnan(y))
        return signbit(y) ? 0xFF : 0x7F;
    uint8_t sign = signbit(y) ? 0x80 : 0;
    double a = fabs((double)y);
    if (a >= 448.0)
        return sign | 0x7E;
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c <= 0x7E; c++) {
        double d = fabs(e4m3_value(c) - a);
        if (d < bd || (d == bd && (c & 1) == 0)) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)(sign | best);
}

float ref_block_scale(const uint16_t *v, int64_t n, bool pow2)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float f = ref_bf16(v[i]);
        if (isfinite(f) && fabsf(f) > amax)
            amax = fabsf(f);
    }
    if (amax < 1e-4f)
        amax = 1e-4f;
    float s = amax / 448.0f;
    if (pow2) {
        int e;
        float m = frexpf(s, &e); /* s = m * 2^e, m in [0.5, 1) */
        s = m == 0.5f ? s : ldexpf(1.0f, e);
    }
    return s;
}

void ref_quantize(const uint16_t *x, int64_t E, int64_t rows, int64_t cols, int64_t br, int64_t bc,
                  bool pow2, bool mx, uint8_t *q, void *s)
{
    int64_t RB = (rows + br - 1) / br, CB = (cols + bc - 1) / bc;
    uint16_t blk[128 * 128];
    for (int64_t e = 0; e < E; e++)
        for (int64_t bi = 0; bi < RB; bi++)
            for (int64_t bj = 0; bj < CB; bj++) {
                int64_t n = 0;
                for (int64_t r = bi * br; r < rows && r < (bi + 1) * br; r++)
                    for (int64_t c = bj * bc; c < cols && c < (bj + 1) * bc; c++)
                        blk[n++] = x[(e * rows + r) * cols + c];
                float sc = ref_block_scale(blk, n, pow2 || mx);
                int64_t si = (e * RB + bi) * CB + bj;
                if (mx) {
                    int ex;
                    frexpf(sc, &ex);
                    ((uint8_t *)s)[si] = (uint8_t)(ex - 1 + 127);
                } else {
                    ((float *)s)[si] = sc;
                }
                float inv = 1.0f / sc;
                for (int64_t r = bi * br; r < rows && r < (bi + 1) * br; r++)
                    for (int64_t c = bj * bc; c < cols && c < (bj + 1) * bc; c++) {
                        int64_t i = (e * rows + r) * cols + c;
                        q[i] = ref_e4m3(ref_bf16(x[i]) * inv);
                    }
            }
}
