/*
 * Delta chunk encode and apply throughput (docs/benchmarks.md) against memcpy of the same
 * bytes, measured in the same loop, and the encoded size against dense.
 *
 * A chunk of bf16 words (default 1 MiB, a typical stream chunk) of which a fraction F
 * changed, at random positions. encode: compare with the previous version, write the
 * chosen encoding (what a sender does per chunk, plus its snapshot update); apply: write
 * the changed words into the previous version (what a receiver does). Each repeat times
 * memcpy of the chunk, encode and apply back to back; a ratio is the median over repeats
 * of memcpy's time / the operation's time (so a busy machine slows both sides of a ratio
 * alike), a GB/s the chunk's bytes over the median time.
 *
 * Residency: "cache", every buffer was just touched (the chunk's buffers fit the last
 * level cache); "dram", every buffer is flushed from the caches (clflush) before each timed
 * call, so memcpy, encode and apply all start from memory. x86 only; elsewhere skipped.
 *
 * usage: bench_delta [chunk_KiB (default 1024)] [repeats (default 7)]
 * (RESHARD_DELTA_CODEC=portable in the environment measures the portable codec path)
 * Exit status 1 when an applied chunk or the snapshot differs from the new bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define HAVE_FLUSH 1
#else
#define HAVE_FLUSH 0
#endif

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

/* The five buffers of a measurement and their sizes in bytes. */
typedef struct {
    uint8_t *b[5];
    size_t len[5];
} bufs_t;

/* Evict every buffer from every cache level (a no-op without clflush). */
static void flush(const bufs_t *bs, int dram)
{
#if HAVE_FLUSH
    if (!dram)
        return;
    for (int k = 0; k < 5; k++)
        for (size_t i = 0; i < bs->len[k]; i += 64)
            _mm_clflush(bs->b[k] + i);
    _mm_mfence();
#else
    (void)bs;
    (void)dram;
#endif
}

int main(int argc, char **argv)
{
    size_t len = (size_t)(argc > 1 ? atoi(argv[1]) : 1024) << 10;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
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
    bufs_t bs = {{prev, cur, snap, dst, enc}, {len, len, len, len, len + RS_DELTA_HEADER_BYTES}};
    const double fracs[] = {0.0, 0.001, 0.01, 0.05, 0.2, 1.0};
    const char *kinds[] = {"dense", "bitmap", "runs", "gaps"};
    printf("bench_delta: %zu KiB chunks of bf16, median of %d, codec path %s\n", len >> 10, reps,
           rs_delta_codec_path());
    printf("  %-7s %-5s %9s %7s %10s %10s %10s %8s %8s\n", "changed", "from", "enc/dense", "kind",
           "memcpy", "encode", "apply", "enc/cpy", "app/cpy");
    int rc = 0;
    double worst_e = 1e300, worst_a = 1e300;
    for (size_t f = 0; f < sizeof fracs / sizeof *fracs; f++)
        for (int dram = 0; dram <= HAVE_FLUSH; dram++) {
            uint64_t s = 7 + f;
            for (size_t i = 0; i < len; i++)
                prev[i] = (uint8_t)mix(&s);
            memcpy(cur, prev, len);
            for (size_t w = 0; w < len / 2; w++)
                if ((double)(mix(&s) % 1000000) < fracs[f] * 1e6)
                    cur[2 * w] ^= 1; /* the low mantissa bit: an RL-sized update */
            double tc[MAX_REPS], te[MAX_REPS], ta[MAX_REPS], re[MAX_REPS], ra[MAX_REPS];
            uint64_t n = 0;
            for (int r = 0; r < reps; r++) {
                flush(&bs, dram);
                double t0 = now();
                memcpy(dst, cur, len);
                double t1 = now();
                memcpy(snap, prev, len);
                flush(&bs, dram);
                double t2 = now();
                n = rs_delta_encode(cur, snap, len, 2, enc, NULL); /* and updates the snapshot */
                double t3 = now();
                memcpy(dst, prev, len);
                flush(&bs, dram);
                rs_delta_header_t h;
                double t4 = now();
                rs_delta_header(enc, len, &h, "bench");
                rs_delta_apply(enc, &h, dst, len, "bench");
                double t5 = now();
                tc[r] = t1 - t0;
                te[r] = t3 - t2;
                ta[r] = t5 - t4;
                re[r] = tc[r] / te[r];
                ra[r] = tc[r] / ta[r];
                if (memcmp(dst, cur, len) != 0 || memcmp(snap, cur, len) != 0)
                    rc = 1;
            }
            double mc = median(tc, reps), me = median(te, reps), ma = median(ta, reps);
            double qe = median(re, reps), qa = median(ra, reps);
            worst_e = qe < worst_e ? qe : worst_e;
            worst_a = qa < worst_a ? qa : worst_a;
            printf("  %-7.4f %-5s %9.4f %7s %7.2f GB/s %7.2f GB/s %7.2f GB/s %8.2f %8.2f\n",
                   fracs[f], dram ? "dram" : "cache", (double)n / (double)len, kinds[enc[0]],
                   len / mc / 1e9, len / me / 1e9, len / ma / 1e9, qe, qa);
        }
    printf("  enc/cpy, app/cpy: median over repeats of memcpy's time / encode's (with its "
           "snapshot update), apply's\n");
    printf("  lowest: encode %.2f, apply %.2f x memcpy\n", worst_e, worst_a);
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
