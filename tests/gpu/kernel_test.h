/* Shared by the kernel tests (test_nccl_box_copy, test_nccl_quant): the random cases'
 * generator (xorshift64: the same cases on every run and machine, so a failure names a case
 * that can be run again) and the device setup of --gpu. */
#ifndef RS_KERNEL_TEST_H
#define RS_KERNEL_TEST_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard_nccl.h"

/* Exit status of a test that did not run (ctest SKIP_RETURN_CODE). */
#define SKIP 77

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static inline uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Uniform in [lo, hi]. */
static inline int64_t rnd(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}

/* Device 0 and a non-blocking stream in @p s: 0, or SKIP without a CUDA device (said on
 * stdout), or 1 when CUDA fails. */
static inline int kernel_test_device(cudaStream_t *s)
{
    int ndev = 0;
    if (reshard_nccl_device_count(&ndev) != RESHARD_OK) {
        printf("SKIPPED: %s\n", reshard_last_error());
        return SKIP;
    }
    if (cudaSetDevice(0) != cudaSuccess ||
        cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "CUDA setup failed\n");
        return 1;
    }
    return 0;
}

/* The kernel tests' start: the command line --gpu|--emulate|--op [--cases N] into *@p mode
 * ("gpu", "emulate" or "op") and *@p cases (left as given when absent), and unless
 * emulated (*@p gpu false) device 0 and a stream in @p s. Returns 0 to go on, else the exit
 * status: 2 (usage printed), SKIP without a CUDA device, 1 when CUDA fails. */
static inline int kernel_test_start(int argc, char **argv, int *cases, const char **mode, bool *gpu,
                                    cudaStream_t *s)
{
    *mode = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gpu") == 0 || strcmp(argv[i], "--emulate") == 0 ||
            strcmp(argv[i], "--op") == 0)
            *mode = argv[i] + 2;
        else if (strcmp(argv[i], "--cases") == 0 && i + 1 < argc)
            *cases = atoi(argv[++i]);
        else
            *mode = NULL, i = argc;
    }
    if (*mode == NULL) {
        fprintf(stderr, "usage: %s --gpu|--emulate|--op [--cases N]\n", argv[0]);
        return 2;
    }
    *gpu = strcmp(*mode, "emulate") != 0;
    return *gpu ? kernel_test_device(s) : 0;
}

/* "Device" memory of @p n bytes: cudaMalloc'ed on a GPU (@p gpu), host memory when the
 * kernels are emulated; exits on failure. */
static inline void *kernel_test_alloc(bool gpu, size_t n)
{
    void *p = NULL;
    if (gpu ? cudaMalloc(&p, n) != cudaSuccess : (p = malloc(n)) == NULL) {
        fprintf(stderr, "%s of %zu bytes failed\n", gpu ? "cudaMalloc" : "malloc", n);
        exit(1);
    }
    return p;
}

static inline void kernel_test_free(bool gpu, void *p)
{
    if (gpu)
        cudaFree(p);
    else
        free(p);
}

#endif
