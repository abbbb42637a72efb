/* Shared by bench_gpu_pack --check and test_nccl_large: a byte pattern of a buffer offset,
 * and a check that reads windows of a device buffer back and compares them with what each
 * offset should hold. Needs cuda_runtime.h (cudaMemcpy). */
#ifndef RS_WINDOW_CHECK_H
#define RS_WINDOW_CHECK_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

/* The pattern byte of offset @p o (depends on all 64 bits: bytes past 4 GiB differ). */
static inline uint8_t rs_pat(uint64_t o)
{
    o = (o ^ (o >> 29)) * 0x9E3779B97F4A7C15ull;
    return (uint8_t)(o >> 56);
}

/* What byte @p off of a checked buffer should hold (@p ctx: the caller's description). */
typedef uint8_t (*rs_want_fn)(const void *ctx, uint64_t off);

static inline uint64_t rs_window_rand(void)
{
    static uint64_t s = 0x2545F4914F6CDD1Dull;
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

/* Compare windows of device buffer @p d (@p n bytes) with want(ctx, offset): the first and
 * last MiB and @p windows random 4 KiB windows. Prints the first wrong byte (naming @p what)
 * and returns the number of wrong bytes; a failed copy counts as n wrong. */
static inline uint64_t rs_check_windows(const char *what, const void *d, uint64_t n,
                                        rs_want_fn want, const void *ctx, int windows)
{
    static uint8_t h[1 << 20];
    uint64_t wrong = 0;
    for (int w = -2; w < windows && n > 0; w++) {
        const uint64_t cap = w < 0 ? sizeof h : 4096;
        const uint64_t len = n < cap ? n : cap;
        const uint64_t at = w == -2 ? 0 : w == -1 ? n - len : rs_window_rand() % (n - len + 1);
        if (cudaMemcpy(h, (const uint8_t *)d + at, len, cudaMemcpyDeviceToHost) != cudaSuccess) {
            fprintf(stderr, "%s: cudaMemcpy of %llu bytes at %llu failed\n", what,
                    (unsigned long long)len, (unsigned long long)at);
            return n;
        }
        for (uint64_t i = 0; i < len; i++)
            if (h[i] != want(ctx, at + i) && wrong++ == 0)
                fprintf(stderr, "%s: byte %llu is %02x, want %02x\n", what,
                        (unsigned long long)(at + i), h[i], want(ctx, at + i));
    }
    return wrong;
}

#endif
