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
 * Each case compares, for pack, unpack and local copy, the WHOLE allocation of the
 * destination (guard bytes before its shifted start and after its end included) and of the
 * source (unchanged) with the CPU result; the emulation also runs some copies with a grid
 * smaller than their units (the kernel's grid-stride later passes).
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
    /* The kernel's thread count, and sometimes an odd one: any count must work; and
     * sometimes a grid smaller than the units, so that blocks take a second pass. */
    const int nthr = next_u64() % 4 == 0 ? (int)rnd(1, 9) : rs_box_copy_threads(d);
    if (d->units > 1 && next_u64() % 3 == 0)
        rs_box_copy_emulate_grid(d, dst, src, nthr, rnd(1, d->units - 1));
    else
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

/* A "device" buffer of n bytes placed @p mis bytes after a 64-aligned address, inside an
 * allocation with GUARD bytes (or more) on both sides, and its host twin: the WHOLE
 * allocation is compared, so a stray write before the shifted start or past the end fails. */
typedef struct {
    uint8_t *hraw, *draw, *want; /* host twin, device allocation, expected allocation */
    size_t raw, off;             /* allocation bytes; offset of the buffer in it */
} twin_t;

static void twin_init(twin_t *t, size_t n, size_t mis)
{
    t->raw = n + 2 * GUARD + 64;
    t->hraw = malloc(t->raw);
    t->want = malloc(t->raw);
    if (t->hraw == NULL || t->want == NULL)
        exit(1);
    t->draw = kernel_test_alloc(use_gpu, t->raw);
    t->off = GUARD + (64 - ((uintptr_t)t->draw + GUARD) % 64) % 64 + mis;
}

static uint8_t *twin_h(const twin_t *t)
{
    return t->hraw + t->off;
}

static uint8_t *twin_d(const twin_t *t)
{
    return t->draw + t->off;
}

/* Random bytes everywhere (host twin and device), and the expectation "unchanged". */
static void twin_randomize(twin_t *t)
{
    fill_random(t->hraw, t->raw);
    to_dev(t->draw, t->hraw, t->raw);
    memcpy(t->want, t->hraw, t->raw);
}

/* The device allocation against t->want, all of it. */
static int twin_check(const char *what, int ncase, twin_t *t)
{
    uint8_t *got = malloc(t->raw);
    if (got == NULL)
        exit(1);
    from_dev(got, t->draw, t->raw);
    for (size_t i = 0; i < t->raw; i++)
        if (got[i] != t->want[i]) {
            fprintf(stderr,
                    "case %d: %s differs at byte %zd of the buffer (allocation byte %zu of %zu, "
                    "buffer at %zu; got %02x, want %02x)\n",
                    ncase, what, (ssize_t)i - (ssize_t)t->off, i, t->raw, t->off, got[i],
                    t->want[i]);
            free(got);
            return 1;
        }
    free(got);
    return 0;
}

static void twin_free(twin_t *t)
{
    free(t->hraw);
    free(t->want);
    kernel_test_free(use_gpu, t->draw);
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

    twin_t tf, tg, tp; /* fragment f (source of pack), fragment g, packed */
    twin_init(&tf, fbytes, mf);
    twin_init(&tg, gbytes, mg);
    twin_init(&tp, pbytes, mp);
    int bad = 0;
    rs_box_copy_t d;

    /* pack: f -> packed; the source must stay as it was */
    twin_randomize(&tf);
    twin_randomize(&tp);
    rs_pack_cpu(tp.want + tp.off, twin_h(&tf), &span);
    if (rs_box_copy_for_pack(&d, &span, twin_d(&tp), twin_d(&tf)) != RESHARD_OK) {
        fprintf(stderr, "case %d: pack init: %s\n", ncase, reshard_last_error());
        bad = 1;
    }
    bad = bad || run_copy(&d, twin_d(&tp), twin_d(&tf));
    bad = bad || twin_check("pack (packed buffer and its guards)", ncase, &tp);
    bad = bad || twin_check("pack (source)", ncase, &tf);
    cnt->pack++;

    /* unpack: packed -> f */
    if (!bad) {
        twin_randomize(&tp);
        twin_randomize(&tf);
        rs_unpack_cpu(tf.want + tf.off, twin_h(&tp), &span);
        if (rs_box_copy_for_unpack(&d, &span, twin_d(&tf), twin_d(&tp)) != RESHARD_OK) {
            fprintf(stderr, "case %d: unpack init: %s\n", ncase, reshard_last_error());
            bad = 1;
        }
        bad = bad || run_copy(&d, twin_d(&tf), twin_d(&tp));
        bad = bad || twin_check("unpack (fragment buffer and its guards)", ncase, &tf);
        cnt->unpack++;
    }

    /* local copy of the whole box: f -> g */
    if (!bad) {
        twin_randomize(&tf);
        twin_randomize(&tg);
        rs_copy_box_cpu(tg.want + tg.off, &g, twin_h(&tf), &f, &box, es);
        if (rs_box_copy_for_local(&d, twin_d(&tg), &g, twin_d(&tf), &f, &box, es) != RESHARD_OK) {
            fprintf(stderr, "case %d: local init: %s\n", ncase, reshard_last_error());
            bad = 1;
        }
        bad = bad || run_copy(&d, twin_d(&tg), twin_d(&tf));
        bad = bad || twin_check("local copy (destination and its guards)", ncase, &tg);
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
    twin_free(&tf);
    twin_free(&tg);
    twin_free(&tp);
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
