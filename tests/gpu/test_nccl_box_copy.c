/*
 * The NCCL transport's pack, unpack and local copy against the CPU implementation
 * (src/exec/pack.c) for many random box shapes, strides, spans, dtypes and pointer
 * alignments.
 *
 *   --emulate  run the kernel's own index and copy code (box_copy.h) on the CPU, with the
 *              kernel's thread counts: checks everything but the CUDA launch, anywhere.
 *   --gpu      run the CUDA kernels (exit 77 = skipped when there is no CUDA device).
 *   --cases N  number of random cases (default 4000).
 *
 * Each case compares the packed bytes (pack), the WHOLE destination buffer (unpack,
 * local copy: a stray write anywhere fails), and guard bytes after the packed range.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/pack.h"
#include "reshard/reshard_nccl.h"
#include "transport/nccl/nccl_internal.h"
#include "kernel_test.h"
#include "util/error.h"

#define GUARD 64 /* bytes of slack around every buffer */

static bool use_gpu;
static cudaStream_t stream;

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)next_u64();
}

/* "Device" memory: cudaMalloc'ed with --gpu, host memory with --emulate. */
static void *dev_alloc(size_t n)
{
    void *p = NULL;
    if (use_gpu) {
        if (cudaMalloc(&p, n) != cudaSuccess) {
            fprintf(stderr, "cudaMalloc(%zu) failed\n", n);
            exit(1);
        }
    } else {
        p = malloc(n);
        if (p == NULL) {
            fprintf(stderr, "malloc(%zu) failed\n", n);
            exit(1);
        }
    }
    return p;
}

static void dev_free(void *p)
{
    if (use_gpu)
        cudaFree(p);
    else
        free(p);
}

/* Copies go on the kernels' own (non-blocking) stream and are waited for: a plain
 * cudaMemcpy runs on the legacy stream, which does not order non-blocking streams. */
static void copy_on_stream(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

static void to_dev(void *d, const void *h, size_t n)
{
    if (use_gpu)
        copy_on_stream(d, h, n, cudaMemcpyHostToDevice);
    else
        memcpy(d, h, n);
}

static void from_dev(void *h, const void *d, size_t n)
{
    if (use_gpu)
        copy_on_stream(h, d, n, cudaMemcpyDeviceToHost);
    else
        memcpy(h, d, n);
}

/* Run a prepared copy on the backend. */
static int run_copy(const rs_box_copy_t *d, void *dst, const void *src)
{
    if (use_gpu) {
        cudaError_t e = rs_box_copy_launch(d, dst, src, stream);
        if (e != cudaSuccess) {
            fprintf(stderr, "launch failed: %s\n", cudaGetErrorString(e));
            return 1;
        }
        return 0;
    }
    /* The kernel's thread count, and sometimes an odd one: any count must work. */
    const int nthr = next_u64() % 4 == 0 ? (int)rnd(1, 9) : rs_box_copy_threads(d);
    rs_box_copy_emulate(d, dst, src, nthr);
    return 0;
}

/* A random fragment holding @p box (plus margins). Strides: 0 row-major, 1 padded rows,
 * 2 dims permuted (transposed), 3 interleaved inner dim, 4 rows padded by multiples of 8. */
static void random_fragment(reshard_fragment_t *f, const reshard_box_t *box, int kind)
{
    memset(f, 0, sizeof *f);
    f->box.ndim = box->ndim;
    for (int k = 0; k < box->ndim; k++) {
        const int64_t lo = next_u64() % 3 == 0 ? rnd(0, 2) : 0;
        const int64_t hi = next_u64() % 3 == 0 ? rnd(0, 2) : 0;
        f->box.offset[k] = box->offset[k] - lo;
        f->box.extent[k] = box->extent[k] + lo + hi;
    }
    const int nd = box->ndim;
    int order[RESHARD_MAX_DIMS]; /* innermost first */
    for (int k = 0; k < nd; k++)
        order[k] = nd - 1 - k;
    if (kind == 2) /* transposed: a random permutation of the dims */
        for (int k = nd - 1; k > 0; k--) {
            const int j = (int)rnd(0, k);
            const int tmp = order[k];
            order[k] = order[j];
            order[j] = tmp;
        }
    int64_t s = kind == 3 ? rnd(2, 3) : 1; /* 3: interleaved inner dim */
    for (int k = 0; k < nd; k++) {
        const int d = order[k];
        f->stride[d] = s;
        int64_t span = s * f->box.extent[d];
        if (kind == 1 || kind == 4) /* padded rows */
            span += next_u64() % 2 ? rnd(1, 5) * (kind == 4 ? 8 : 1) : 0;
        s = span;
    }
    f->base = rnd(0, 40);
}

/* Element count up to one past the last position of @p f. */
static int64_t frag_span(const reshard_fragment_t *f)
{
    int64_t last = f->base;
    for (int k = 0; k < f->box.ndim; k++)
        last += (f->box.extent[k] - 1) * f->stride[k];
    return last + 1;
}

static void random_box(reshard_box_t *b, uint32_t es)
{
    memset(b, 0, sizeof *b);
    b->ndim = (int)rnd(1, next_u64() % 8 == 0 ? RESHARD_MAX_DIMS : 4);
    int64_t numel = 1;
    for (int k = 0; k < b->ndim; k++) {
        b->offset[k] = rnd(0, 5);
        b->extent[k] = next_u64() % 4 == 0 ? 1 : rnd(1, 7);
        numel *= b->extent[k];
    }
    /* Sometimes long rows: several tiles per row (a tile is 16 KiB). */
    if (next_u64() % 5 == 0) {
        const int64_t tile = RS_BOX_TILE_BYTES / es;
        b->extent[b->ndim - 1] = rnd(1, 3 * tile);
        for (int k = 0; k + 1 < b->ndim; k++)
            b->extent[k] = rnd(1, 2);
    } else if (numel < 50 && next_u64() % 3 == 0) {
        b->extent[b->ndim - 1] = rnd(100, 3000);
    }
}

typedef struct {
    int pack, unpack, local;
} counts_t;

static int check_bytes(const char *what, int ncase, const uint8_t *got, const uint8_t *want,
                       size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "case %d: %s differs at byte %zu of %zu (got %02x, want %02x)\n", ncase,
                    what, i, n, got[i], want[i]);
            return 1;
        }
    return 0;
}

/* Host buffer of n bytes placed @p mis bytes after a 64-aligned address (own allocation
 * in *raw); the device twin has the same misalignment. */
static uint8_t *host_at(size_t n, size_t mis, uint8_t **raw)
{
    *raw = malloc(n + 2 * GUARD);
    if (*raw == NULL)
        exit(1);
    uint8_t *p = (uint8_t *)(((uintptr_t)*raw + 63) & ~(uintptr_t)63);
    return p + mis;
}

static int one_case(int ncase, counts_t *cnt)
{
    static const uint32_t sizes[] = {1, 2, 4, 8, 2, 2, 4}; /* bf16/fp16 weighted */
    const uint32_t es = sizes[next_u64() % (sizeof sizes / sizeof sizes[0])];
    reshard_box_t box;
    random_box(&box, es);
    int64_t numel = 1;
    for (int k = 0; k < box.ndim; k++)
        numel *= box.extent[k];
    reshard_fragment_t f, g;
    random_fragment(&f, &box, (int)rnd(0, 4));
    random_fragment(&g, &box, (int)rnd(0, 4));

    /* span: whole box, a random sub-range, or a single element */
    int64_t first = 0, count = numel;
    const int pick = (int)rnd(0, 3);
    if (pick == 1) {
        first = rnd(0, numel - 1);
        count = rnd(1, numel - first);
    } else if (pick == 2) {
        first = rnd(0, numel - 1);
        count = 1;
    } else if (pick == 3) {
        first = rnd(0, numel);
        count = numel - first; /* may be 0 */
    }
    reshard_span_t span = {&f, &box, first, count, es};

    const size_t fbytes = (size_t)frag_span(&f) * es, gbytes = (size_t)frag_span(&g) * es;
    const size_t pbytes = (size_t)count * es;
    /* misalignment of each pointer: mostly aligned, sometimes anything */
    const size_t mf = next_u64() % 3 == 0 ? (size_t)rnd(0, 15) : 0;
    const size_t mg = next_u64() % 3 == 0 ? (size_t)rnd(0, 15) : 0;
    const size_t mp = next_u64() % 3 == 0 ? (size_t)rnd(0, 15) : 0;

    uint8_t *rf, *rg, *rp, *rw;
    uint8_t *hf = host_at(fbytes, mf, &rf);         /* fragment f (source of pack) */
    uint8_t *hg = host_at(gbytes, mg, &rg);         /* fragment g */
    uint8_t *hp = host_at(pbytes + GUARD, mp, &rp); /* packed + guard */
    uint8_t *want = host_at(fbytes + gbytes + pbytes + GUARD, 0, &rw);
    uint8_t *draw_f = dev_alloc(fbytes + 2 * GUARD), *draw_g = dev_alloc(gbytes + 2 * GUARD);
    uint8_t *draw_p = dev_alloc(pbytes + 2 * GUARD);
    /* device pointers with the same misalignment modulo 64 (cudaMalloc is 256-aligned) */
    uint8_t *df = (uint8_t *)(((uintptr_t)draw_f + 63) & ~(uintptr_t)63) + mf;
    uint8_t *dg = (uint8_t *)(((uintptr_t)draw_g + 63) & ~(uintptr_t)63) + mg;
    uint8_t *dp = (uint8_t *)(((uintptr_t)draw_p + 63) & ~(uintptr_t)63) + mp;
    int bad = 0;
    rs_box_copy_t d;

    /* pack: f -> packed */
    fill_random(hf, fbytes);
    fill_random(hp, pbytes + GUARD);
    memcpy(want, hp, pbytes + GUARD);
    rs_pack_cpu(want, hf, &span);
    to_dev(df, hf, fbytes);
    to_dev(dp, hp, pbytes + GUARD);
    if (rs_box_copy_for_pack(&d, &span, dp, df) != RESHARD_OK) {
        fprintf(stderr, "case %d: pack init: %s\n", ncase, reshard_last_error());
        bad = 1;
    }
    bad = bad || run_copy(&d, dp, df);
    from_dev(hp, dp, pbytes + GUARD);
    bad = bad || check_bytes("pack (packed bytes + guard)", ncase, hp, want, pbytes + GUARD);
    cnt->pack++;

    /* unpack: packed -> f; the whole fragment buffer must equal the CPU result */
    if (!bad) {
        fill_random(hp, pbytes);
        fill_random(hf, fbytes);
        memcpy(want, hf, fbytes);
        rs_unpack_cpu(want, hp, &span);
        to_dev(df, hf, fbytes);
        to_dev(dp, hp, pbytes);
        if (rs_box_copy_for_unpack(&d, &span, df, dp) != RESHARD_OK) {
            fprintf(stderr, "case %d: unpack init: %s\n", ncase, reshard_last_error());
            bad = 1;
        }
        bad = bad || run_copy(&d, df, dp);
        from_dev(hf, df, fbytes);
        bad = bad || check_bytes("unpack (whole buffer)", ncase, hf, want, fbytes);
        cnt->unpack++;
    }

    /* local copy of the whole box: f -> g */
    if (!bad) {
        fill_random(hf, fbytes);
        fill_random(hg, gbytes);
        memcpy(want, hg, gbytes);
        rs_copy_box_cpu(want, &g, hf, &f, &box, es);
        to_dev(df, hf, fbytes);
        to_dev(dg, hg, gbytes);
        if (rs_box_copy_for_local(&d, dg, &g, df, &f, &box, es) != RESHARD_OK) {
            fprintf(stderr, "case %d: local init: %s\n", ncase, reshard_last_error());
            bad = 1;
        }
        bad = bad || run_copy(&d, dg, df);
        from_dev(hg, dg, gbytes);
        bad = bad || check_bytes("local copy (whole buffer)", ncase, hg, want, gbytes);
        cnt->local++;
    }

    if (bad) {
        char b1[256], b2[256], b3[256];
        fprintf(stderr,
                "  elem %u, box %s (ndim %d), span [%" PRId64 ", +%" PRId64 "), f %s base %" PRId64
                " strides",
                es, rs_box_str(&box, b1, sizeof b1), box.ndim, first, count,
                rs_box_str(&f.box, b2, sizeof b2), f.base);
        for (int k = 0; k < f.box.ndim; k++)
            fprintf(stderr, " %" PRId64, f.stride[k]);
        fprintf(stderr, "; g %s base %" PRId64 " strides", rs_box_str(&g.box, b3, sizeof b3),
                g.base);
        for (int k = 0; k < g.box.ndim; k++)
            fprintf(stderr, " %" PRId64, g.stride[k]);
        fprintf(stderr, "; misalign f %zu g %zu packed %zu\n", mf, mg, mp);
    }
    free(rf);
    free(rg);
    free(rp);
    free(rw);
    dev_free(draw_f);
    dev_free(draw_g);
    dev_free(draw_p);
    return bad;
}

int main(int argc, char **argv)
{
    int cases = 4000;
    bool mode_given = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gpu") == 0) {
            use_gpu = true;
            mode_given = true;
        } else if (strcmp(argv[i], "--emulate") == 0) {
            use_gpu = false;
            mode_given = true;
        } else if (strcmp(argv[i], "--cases") == 0 && i + 1 < argc) {
            cases = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s --gpu|--emulate [--cases N]\n", argv[0]);
            return 2;
        }
    }
    if (!mode_given) {
        fprintf(stderr, "usage: %s --gpu|--emulate [--cases N]\n", argv[0]);
        return 2;
    }
    if (use_gpu) {
        const int rc = kernel_test_device(&stream);
        if (rc != 0)
            return rc;
    }
    counts_t cnt = {0, 0, 0};
    int failed = 0;
    for (int c = 0; c < cases && failed < 5; c++)
        failed += one_case(c, &cnt);
    printf("%s: %d cases, %d pack, %d unpack, %d local copies checked, %d failed\n",
           use_gpu ? "gpu" : "emulated", cases, cnt.pack, cnt.unpack, cnt.local, failed);
    if (use_gpu)
        cudaStreamDestroy(stream);
    return failed ? 1 : 0;
}
