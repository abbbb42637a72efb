/*
 * Delta chunk encode and apply throughput (docs/benchmarks.md) against memcpy of the same
 * bytes, side by side in one run, and the encoded size against dense.
 *
 * A chunk of bf16 words (default 1 MiB, a typical stream chunk) of which a fraction F
 * changed, at random positions. encode: compare with the previous version, write the
 * chosen encoding (what a sender does per chunk, plus its snapshot update); apply: write
 * the changed words into the previous version (what a receiver does). Both as GB/s of
 * chunk bytes, and as a ratio to memcpy of the chunk.
 *
 * usage: bench_delta [chunk_KiB (default 1024)] [repeats (default 15)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_median.h"
#include "exec/delta_codec.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    size_t len = (size_t)(argc > 1 ? atoi(argv[1]) : 1024) << 10;
    int reps = argc > 2 ? atoi(argv[2]) : 15;
    if (reps < 1 || reps > MAX_REPS || len == 0) {
        fprintf(stderr, "usage: bench_delta [chunk_KiB] [repeats 1..%d]\n", MAX_REPS);
        return 2;
    }
    uint8_t *prev = malloc(len), *cur = malloc(len), *snap = malloc(len), *dst = malloc(len);
    uint8_t *enc = malloc(len + RS_DELTA_HEADER_BYTES);
    if (!prev || !cur || !snap || !dst || !enc) {
        fprintf(stderr, "bench_delta: out of memory\n");
        return 1;
    }
    const double fracs[] = {0.0, 0.0005, 0.01, 0.05, 0.2, 1.0};
    printf("bench_delta: %zu KiB chunks of bf16, median of %d\n", len >> 10, reps);
    printf("  %-8s %9s %7s %10s %10s %10s %8s %8s\n", "changed", "enc/dense", "kind", "memcpy",
           "encode", "apply", "enc/cpy", "app/cpy");
    int rc = 0;
    for (size_t f = 0; f < sizeof fracs / sizeof *fracs; f++) {
        uint64_t s = 7 + f;
        for (size_t i = 0; i < len; i++)
            prev[i] = (uint8_t)mix(&s);
        memcpy(cur, prev, len);
        for (size_t w = 0; w < len / 2; w++)
            if ((double)(mix(&s) % 1000000) < fracs[f] * 1e6)
                cur[2 * w] ^= 1; /* the low mantissa bit: an RL-sized update */
        double tc[MAX_REPS], te[MAX_REPS], ta[MAX_REPS];
        uint64_t n = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            memcpy(dst, cur, len);
            double t1 = now();
            memcpy(snap, prev, len);
            double t2 = now();
            n = rs_delta_encode(cur, snap, len, 2, enc, NULL); /* and updates the snapshot */
            double t3 = now();
            memcpy(dst, prev, len);
            rs_delta_header_t h;
            double t4 = now();
            rs_delta_header(enc, len, &h, "bench");
            rs_delta_apply(enc, &h, dst, len, "bench");
            double t5 = now();
            tc[r] = t1 - t0;
            te[r] = t3 - t2;
            ta[r] = t5 - t4;
            if (memcmp(dst, cur, len) != 0 || memcmp(snap, cur, len) != 0)
                rc = 1;
        }
        double mc = median(tc, reps), me = median(te, reps), ma = median(ta, reps);
        const char *kinds[] = {"dense", "bitmap", "runs", "gaps"};
        printf("  %-8.4f %9.4f %7s %7.2f GB/s %7.2f GB/s %7.2f GB/s %8.2f %8.2f\n", fracs[f],
               (double)n / (double)len, kinds[enc[0]], len / mc / 1e9, len / me / 1e9,
               len / ma / 1e9, mc / me, mc / ma);
    }
    printf("  enc/cpy, app/cpy: throughput of encode (with its snapshot copy) and apply as a "
           "fraction of memcpy's\n");
    if (rc)
        fprintf(stderr, "bench_delta: an applied chunk or the snapshot differs from the new "
                        "bytes\n");
    free(prev);
    free(cur);
    free(snap);
    free(dst);
    free(enc);
    return rc;
}
