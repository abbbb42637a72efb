/*
 * The NCCL transport's delta kernels (src/transport/nccl/delta_kernels.h) against cudaMemcpy
 * device-to-device of the same chunk, side by side in one run: encode (the snapshot taken,
 * the body written, its kind chosen on the device; no host copy) and apply (of the encoded
 * chunk onto the old bytes) of one chunk of --mib MiB of 2- and 4-byte words with 0, 1, 5
 * and 100% of its words changed, scattered at random. Times are medians over --iters runs
 * (CUDA events around the launches alone, every run enqueued before the first is waited for;
 * the snapshot is restored between encodes, outside the timing). "x D2D" = cudaMemcpy's time / the
 * kernel's: 1.0 is as fast as copying the chunk, the target of issue 45 is >= 0.5 at <= 5% changed.
 *
 * usage: bench_gpu_delta [--mib N (default 256)] [--iters N (default 20)]
 *                        [--check]     compare every case's encoding with the CPU codec's
 *                                      (rs_delta_encode), byte for byte, and its apply with
 *                                      the new chunk; exit 1 on a difference or when encode or
 *                                      apply at <= 5% changed is under 0.5 x D2D
 *                        [--no-target] with --check: verify only (the fake CUDA runtime,
 *                                      where times mean nothing)
 * Exit 77 when there is no CUDA device; without the NCCL build it says so and exits 0.
 */
#include <stdio.h>

#ifndef RESHARD_HAVE_NCCL
int main(void)
{
    printf("bench_gpu_delta: this build has no NCCL transport (configure with "
           "-DRESHARD_WITH_NCCL=ON)\n");
    return 0;
}
#else

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "exec/delta_codec.h"
#include "reshard/reshard_nccl.h"
#include "transport/nccl/delta_kernels.h"
#include "transport/nccl/nccl_internal.h"

#define MAX_ITERS 200
#define TARGET 0.5

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int ok_cuda(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        fprintf(stderr, "bench_gpu_delta: %s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

typedef struct {
    uint8_t *cur, *prev, *old, *out, *chunk, *scratch; /* device */
    cudaStream_t s;
    cudaEvent_t e0[MAX_ITERS], e1[MAX_ITERS];
    int iters;
} bench_t;

/* The median of @p iters timings of what @p op launches (ms); @p op 0 memcpy, 1 encode (the
 * snapshot restored from b->old before each, untimed), 2 apply of b->out. */
static float timed(bench_t *b, int op, uint64_t len, uint32_t word)
{
    float t[MAX_ITERS];
    rs_dk_job_t j;
    rs_delta_header_t h = {0};
    if (op == 2) {
        uint8_t hdr[RS_DELTA_HEADER_BYTES];
        cudaMemcpy(hdr, b->out, sizeof hdr, cudaMemcpyDeviceToHost);
        if (rs_delta_header(hdr, len, &h, "bench chunk") != RESHARD_OK)
            return -1;
    }
    rs_dk_job_init(&j, len, word, op == 2 ? &h : NULL, b->scratch);
    /* every run enqueued before any is waited for: a run's launches are queued while the one
     * before it runs, so the events time the device, not the host's enqueueing */
    for (int i = 0; i < b->iters; i++) {
        if (op == 1)
            cudaMemcpyAsync(b->prev, b->old, len, cudaMemcpyDeviceToDevice, b->s);
        cudaEventRecord(b->e0[i], b->s);
        cudaError_t e = cudaSuccess;
        if (op == 0)
            e = cudaMemcpyAsync(b->chunk, b->cur, len, cudaMemcpyDeviceToDevice, b->s);
        else if (op == 1)
            e = rs_delta_encode_launch(&j, b->cur, b->prev, b->out, b->s);
        else
            e = rs_delta_apply_launch(&j, b->out, b->chunk, b->s);
        cudaEventRecord(b->e1[i], b->s);
        if (!ok_cuda(e, "launch"))
            return -1;
    }
    if (!ok_cuda(cudaStreamSynchronize(b->s), "run"))
        return -1;
    for (int i = 0; i < b->iters; i++)
        cudaEventElapsedTime(&t[i], b->e0[i], b->e1[i]);
    qsort(t, (size_t)b->iters, sizeof *t, cmp_f);
    return t[b->iters / 2];
}

/* One case: @p pct percent of the words changed. Returns 0 when verified (and, with
 * @p target, fast enough), else 1. */
static int run_case(bench_t *b, uint64_t len, uint32_t word, double pct, bool check, bool target,
                    uint8_t *h_old, uint8_t *h_cur, uint8_t *h_enc, uint8_t *h_got)
{
    const uint64_t n = len / word;
    memcpy(h_cur, h_old, len);
    if (pct >= 100) {
        for (uint64_t i = 0; i < n; i++)
            h_cur[i * word] ^= 0x5a;
    } else {
        const uint64_t k = (uint64_t)((double)n * pct / 100.0);
        for (uint64_t c = 0; c < k; c++) /* collisions leave a few fewer: fine for timing */
            h_cur[(next_u64() % n) * word + next_u64() % word] ^= (uint8_t)(1 + next_u64() % 255);
    }
    cudaMemcpy(b->old, h_old, len, cudaMemcpyHostToDevice);
    cudaMemcpy(b->cur, h_cur, len, cudaMemcpyHostToDevice);
    const float t_copy = timed(b, 0, len, word), t_enc = timed(b, 1, len, word);
    /* the chunk holds the old bytes for apply (idempotent: each run writes the same) */
    cudaMemcpy(b->chunk, b->old, len, cudaMemcpyDeviceToDevice);
    const float t_apply = timed(b, 2, len, word);
    if (t_copy < 0 || t_enc < 0 || t_apply < 0)
        return 1;
    uint8_t hdr[RS_DELTA_HEADER_BYTES];
    cudaMemcpy(hdr, b->out, sizeof hdr, cudaMemcpyDeviceToHost);
    int fail = 0;
    if (check) {
        memcpy(h_got, h_old, len); /* the CPU codec's snapshot */
        const uint64_t size = rs_delta_encode(h_cur, h_got, len, word, h_enc, NULL);
        uint8_t *dev_enc = malloc(size);
        cudaMemcpy(dev_enc, b->out, size, cudaMemcpyDeviceToHost);
        if (!dev_enc || memcmp(dev_enc, h_enc, size) != 0) {
            fprintf(stderr, "word %u, %g%%: the device encoding differs from the CPU codec's\n",
                    word, pct);
            fail = 1;
        }
        free(dev_enc);
        cudaMemcpy(h_got, b->chunk, len, cudaMemcpyDeviceToHost);
        if (memcmp(h_got, h_cur, len) != 0) {
            fprintf(stderr, "word %u, %g%%: the device apply did not give the new chunk\n", word,
                    pct);
            fail = 1;
        }
    }
    uint64_t body = 0;
    memcpy(&body, hdr + 8, 8);
    const double xe = t_copy / t_enc, xa = t_copy / t_apply;
    const double gbs = (double)len / 1e6 / t_copy; /* GB/s of the copy (len bytes read+written) */
    printf("word %u %5.1f%%  kind %u  body %10.2f MiB  memcpy %8.3f ms (%6.0f GB/s)  encode %8.3f "
           "ms (%4.2f x D2D)  apply %8.3f ms (%4.2f x D2D)\n",
           word, pct, hdr[0], (double)body / 1048576.0, t_copy, gbs, t_enc, xe, t_apply, xa);
    if (target && pct <= 5 && (xe < TARGET || xa < TARGET)) {
        printf("# target: word %u %g%%: encode %.2f, apply %.2f x D2D, under %.1f\n", word, pct, xe,
               xa, TARGET);
        fail = 1;
    }
    return fail;
}

int main(int argc, char **argv)
{
    uint64_t mib = 256;
    bench_t b = {0};
    b.iters = 20;
    bool check = false, target = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            b.iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--check") == 0)
            check = true;
        else if (strcmp(argv[i], "--no-target") == 0)
            target = false;
        else {
            fprintf(stderr, "usage: %s [--mib N] [--iters N] [--check [--no-target]]\n", argv[0]);
            return 2;
        }
    }
    if (mib == 0 || b.iters < 1 || b.iters > MAX_ITERS) {
        fprintf(stderr, "bench_gpu_delta: --mib >= 1, --iters 1..%d\n", MAX_ITERS);
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bench_gpu_delta: no CUDA device\n");
        return 77;
    }
    const uint64_t len = mib << 20;
    const uint64_t sb = rs_delta_dev_scratch_bytes(len, 1); /* the most for any word */
    cudaSetDevice(0);
    if (!ok_cuda(cudaMalloc((void **)&b.cur, len), "cudaMalloc") ||
        !ok_cuda(cudaMalloc((void **)&b.prev, len), "cudaMalloc") ||
        !ok_cuda(cudaMalloc((void **)&b.old, len), "cudaMalloc") ||
        !ok_cuda(cudaMalloc((void **)&b.chunk, len), "cudaMalloc") ||
        !ok_cuda(cudaMalloc((void **)&b.out, len + RS_DELTA_HEADER_BYTES), "cudaMalloc") ||
        !ok_cuda(cudaMalloc((void **)&b.scratch, sb), "cudaMalloc"))
        return 1;
    cudaStreamCreate(&b.s);
    for (int i = 0; i < b.iters; i++) {
        cudaEventCreate(&b.e0[i]);
        cudaEventCreate(&b.e1[i]);
    }
    uint8_t *h_old = malloc(len), *h_cur = malloc(len), *h_got = malloc(len);
    uint8_t *h_enc = malloc(len + RS_DELTA_HEADER_BYTES);
    if (!h_old || !h_cur || !h_got || !h_enc)
        return 1;
    for (uint64_t i = 0; i < len / 8; i++) {
        const uint64_t x = next_u64();
        memcpy(h_old + i * 8, &x, 8);
    }
    printf("# bench_gpu_delta: one chunk of %llu MiB, median of %d; x D2D = memcpy time / "
           "kernel time (target >= %.1f at <= 5%% changed)\n",
           (unsigned long long)mib, b.iters, TARGET);
    const uint32_t words[] = {2, 4};
    const double pcts[] = {0, 1, 5, 100};
    int fails = 0;
    for (int w = 0; w < 2; w++)
        for (int p = 0; p < 4; p++)
            fails += run_case(&b, len, words[w], pcts[p], check, check && target, h_old, h_cur,
                              h_enc, h_got);
    if (check)
        printf("# verify: %s (%d of 8 cases failed)\n",
               fails ? "FAILED" : "every case byte for byte", fails);
    for (int i = 0; i < b.iters; i++) {
        cudaEventDestroy(b.e0[i]);
        cudaEventDestroy(b.e1[i]);
    }
    cudaStreamDestroy(b.s);
    cudaFree(b.cur);
    cudaFree(b.prev);
    cudaFree(b.old);
    cudaFree(b.chunk);
    cudaFree(b.out);
    cudaFree(b.scratch);
    free(h_old);
    free(h_cur);
    free(h_got);
    free(h_enc);
    return fails ? 1 : 0;
}
#endif
