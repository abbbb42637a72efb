/*
 * CPU quantize throughput (exec/quant.c: bf16 -> e4m3 + block scales)
 * against memcpy of the same source bytes, measured side by side in one run.
 *
 * A dense R x C bf16 matrix (values of random sign, mantissa and exponents
 * in [2^-12, 2^12)) is quantized whole, per mode: FP8 128x128 blocks with
 * fp32 scales, with power-of-two (UE8M0) scales, and MXFP8 1x32; the last
 * row again FP8 128x128 on values whose exponents span the whole finite bf16
 * range (denormals included: small values against a large block amax make
 * fp32 denormal products, which x86 handles slowly unless flushed). The ratio
 * column is quantize GB/s over memcpy GB/s of the R*C*2 source bytes (the
 * target is >= 0.5). On a shared machine the wall clock counts the time the
 * process waits for a core; the last column is the same ratio in thread CPU
 * time (CLOCK_THREAD_CPUTIME_ID), which does not.
 *
 * usage: bench_quant [rows (default 4096)] [cols (default 4096)] [repeats (default 9)]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_median.h"
#include "exec/quant.h"
#include "util/timeout.h"

/* Random sign and mantissa, biased exponent in [e_lo, e_lo + e_span). */
static void fill(uint16_t *src, size_t n, uint32_t e_lo, uint32_t e_span)
{
    unsigned seed = 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t e = (uint32_t)rand_r(&seed) % e_span + e_lo;
        src[i] = (uint16_t)((((uint32_t)rand_r(&seed) & 1u) << 15) | (e << 7) |
                            ((uint32_t)rand_r(&seed) & 0x7Fu));
    }
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int64_t R = argc > 1 ? atoll(argv[1]) : 4096, C = argc > 2 ? atoll(argv[2]) : 4096;
    int reps = argc > 3 ? atoi(argv[3]) : 9;
    if (R < 1 || C < 1 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench_quant [rows] [cols] [repeats 1..%d]\n", MAX_REPS);
        return 2;
    }
    size_t n = (size_t)(R * C);
    uint16_t *src = malloc(n * 2), *cpy = malloc(n * 2);
    uint8_t *dst = malloc(n);
    float *scale = malloc(((size_t)R * (size_t)((C + 31) / 32)) * 4);
    if (!src || !cpy || !dst || !scale)
        return 1;
    reshard_box_t box = {.ndim = 2, .offset = {0, 0}, .extent = {R, C}};
    reshard_fragment_t sf = {.box = box, .stride = {C, 1}}, df = sf;
    const struct {
        const char *name;
        rs_quant_t q;
        bool wide; /* exponents over the whole finite range, else [2^-12, 2^12) */
    } modes[] = {{"fp8 128x128 fp32", {RS_QUANT_FP8_BLOCK, 128, 128, false}, false},
                 {"fp8 128x128 ue8m0", {RS_QUANT_FP8_BLOCK, 128, 128, true}, false},
                 {"mxfp8 1x32 e8m0", {RS_QUANT_MXFP8, 1, 32, true}, false},
                 {"fp8 fp32 wide range", {RS_QUANT_FP8_BLOCK, 128, 128, false}, true}};
    printf("bf16 %lld x %lld (%.1f MiB), median of %d\n", (long long)R, (long long)C,
           (double)n * 2 / (1 << 20), reps);
    printf("%-20s %12s %12s %8s %10s\n", "mode", "quant GB/s", "memcpy GB/s", "ratio", "cpu ratio");
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        const rs_quant_t *q = &modes[m].q;
        if (m == 0 || modes[m].wide != modes[m - 1].wide)
            fill(src, n, modes[m].wide ? 0 : 115, modes[m].wide ? 255 : 24);
        int64_t RB = (R + q->block_rows - 1) / q->block_rows,
                CB = (C + q->block_cols - 1) / q->block_cols;
        reshard_fragment_t ff = {.box = {.ndim = 2, .extent = {RB, CB}}, .stride = {CB, 1}};
        double tq[MAX_REPS], tm[MAX_REPS], cq[MAX_REPS], cm[MAX_REPS];
        for (int r = 0; r < reps; r++) {
            double t0 = rs_now_s(), u0 = cpu_s();
            memcpy(cpy, src, n * 2);
            double t1 = rs_now_s(), u1 = cpu_s();
            rs_quant_box_cpu(q, dst, &df, scale, &ff, src, &sf, &box);
            double t2 = rs_now_s(), u2 = cpu_s();
            tm[r] = t1 - t0;
            tq[r] = t2 - t1;
            cm[r] = u1 - u0;
            cq[r] = u2 - u1;
        }
        double gq = (double)n * 2 / median(tq, reps) / 1e9,
               gm = (double)n * 2 / median(tm, reps) / 1e9;
        double cpu_ratio = median(cm, reps) / median(cq, reps);
        printf("%-20s %12.2f %12.2f %8.2f %10.2f\n", modes[m].name, gq, gm, gq / gm, cpu_ratio);
    }
    /* keep the results alive */
    unsigned sum = 0;
    for (size_t i = 0; i < n; i += 4099)
        sum += dst[i] + cpy[i];
    printf("(checksum %u)\n", sum);
    free(src);
    free(cpy);
    free(dst);
    free(scale);
    return 0;
}
