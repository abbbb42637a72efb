/*
 * The copy kernel's large-index paths: boxes of more than 2^31 elements, positions past
 * 4 GiB, and copies of more units than the kernel's grid (RS_BOX_COPY_MAX_BLOCKS), whose
 * blocks then walk their units in a second and later pass.
 *
 *   --emulate  (label nccl, anywhere) 1. index arithmetic without memory: for boxes of up to
 *              ~10^10 elements at bases past 2^33 elements, rs_box_copy_segment of sampled
 *              units (the first, the last, those past the grid, random ones) against a
 *              reference computed from the original box (row-major unravel, int64 sums);
 *              2. a real pack and unpack of 2^20 + 77 strided rows (more units than the
 *              grid) through the kernel's emulation with its own grid, against the CPU pack.
 *   --gpu      (label gpu) the same index checks and grid-stride copy on the device, plus a
 *              pack + unpack of a 1-byte box of 2^31 + 4099 elements and a bf16 fragment whose
 *              base lies past 4 GiB in a 4.1 GiB buffer; the device results are read back in
 *              windows (the first and last MiB, random 4 KiB windows) and compared with the
 *              pattern of each byte's offset (exit 77 = skipped without a CUDA device).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/pack.h"
#include "kernel_test.h"
#include "reshard/reshard_nccl.h"
#include "transport/nccl/nccl_internal.h"
#include "window_check.h"

static bool use_gpu;
static cudaStream_t stream;

/* ---- 1. index arithmetic ---------------------------------------------------------------- */

/* Position in fragment @p f of linear index @p lin of @p box (row-major), from scratch. */
static int64_t ref_pos(const reshard_fragment_t *f, const reshard_box_t *box, int64_t lin)
{
    int64_t p = f->base;
    for (int k = box->ndim - 1; k >= 0; k--) {
        const int64_t i = lin % box->extent[k];
        lin /= box->extent[k];
        p += (box->offset[k] + i - f->box.offset[k]) * f->stride[k];
    }
    return p;
}

/* Unit @p u of pack descriptor @p d (of @p span) against the reference; 1 when wrong. */
static int check_unit(const char *name, const rs_box_copy_t *d, const reshard_span_t *span,
                      int64_t u)
{
    int64_t n = 0, sp = 0, dp = 0;
    const int got = rs_box_copy_segment(d, u, &n, &sp, &dp);
    /* the reference: unit u is tile t of row r of the merged rows, clipped to the span */
    const int64_t len = d->ext[d->nd - 1], r = d->row0 + u / d->tiles_per_row;
    int64_t a = (u % d->tiles_per_row) * d->tile, b = a + d->tile < len ? a + d->tile : len;
    a = a > span->first - r * len ? a : span->first - r * len;
    b = b < span->first + span->count - r * len ? b : span->first + span->count - r * len;
    const int want = a < b;
    const int64_t lin = r * len + a;
    if (got != want || (want && (n != b - a || sp != ref_pos(span->frag, span->box, lin) ||
                                 dp != lin - span->first))) {
        fprintf(stderr,
                "%s: unit %" PRId64 " of %" PRId64 ": got %d n %" PRId64 " src %" PRId64
                " dst %" PRId64 ", want %d n %" PRId64 " src %" PRId64 " dst %" PRId64 "\n",
                name, u, d->units, got, n, sp, dp, want, b - a,
                want ? ref_pos(span->frag, span->box, lin) : 0, lin - span->first);
        return 1;
    }
    return 0;
}

typedef struct {
    const char *name;
    int ndim;
    int64_t ext[3], stride[3], base;
    uint32_t es;
} big_t;

static int index_checks(void)
{
    static const big_t cases[] = {
        /* 1-d: 2^31 + 12345 bytes at a base past 8 GiB */
        {"1-d, 2^31+12345 elements, base 2^33+7",
         1,
         {((int64_t)1 << 31) + 12345},
         {1},
         ((int64_t)1 << 33) + 7,
         1},
        /* 3-d, strided rows: ~4.7e9 elements, positions past 2^33 */
        {"3-d strided, 4.7e9 elements, base 2^32+11",
         3,
         {3, ((int64_t)1 << 20) + 3, 1500},
         {(((int64_t)1 << 20) + 5) * 1600, 1600, 1},
         ((int64_t)1 << 32) + 11,
         2},
        /* 2-d, rows of 2^31+5 elements: many tiles per row, interleaved inner dim */
        {"2-d, rows of 2^31+5 elements, stride 2",
         2,
         {5, ((int64_t)1 << 31) + 5},
         {(((int64_t)1 << 31) + 9) * 2, 2},
         3,
         4},
        /* 2-d: 2^22 rows of 8 elements: four grid passes */
        {"2-d, 2^22 rows of 8 (4 grid passes)", 2, {(int64_t)1 << 22, 8}, {16, 1}, 5, 2},
    };
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const big_t *k = &cases[c];
        reshard_box_t box;
        reshard_fragment_t f;
        memset(&box, 0, sizeof box);
        memset(&f, 0, sizeof f);
        box.ndim = f.box.ndim = k->ndim;
        int64_t numel = 1;
        for (int i = 0; i < k->ndim; i++) {
            box.offset[i] = f.box.offset[i] = 1;
            box.extent[i] = f.box.extent[i] = k->ext[i];
            f.stride[i] = k->stride[i];
            numel *= k->ext[i];
        }
        f.base = k->base;
        /* the whole box, and a span starting past 2^31 elements that ends at the end */
        const int64_t firsts[2] = {0, numel / 2 + ((int64_t)1 << 31) % (numel / 2)};
        for (int s = 0; s < 2; s++) {
            reshard_span_t span = {&f, &box, firsts[s], numel - firsts[s], k->es};
            rs_box_copy_t d;
            if (rs_box_copy_for_pack(&d, &span, NULL, NULL) != RESHARD_OK) {
                fprintf(stderr, "%s: %s\n", k->name, reshard_last_error());
                bad = 1;
                continue;
            }
            const int64_t blocks = rs_box_copy_blocks(&d);
            int wrong =
                check_unit(k->name, &d, &span, 0) + check_unit(k->name, &d, &span, d.units - 1);
            for (int i = 0; i < 2000 && !wrong; i++) {
                int64_t u = (int64_t)(next_u64() % (uint64_t)d.units);
                if (i % 2 && d.units > blocks) /* a unit of a later grid pass */
                    u = blocks + (int64_t)(next_u64() % (uint64_t)(d.units - blocks));
                wrong += check_unit(k->name, &d, &span, u);
            }
            printf("index %s, span from %" PRId64 ": %" PRId64 " elements, %" PRId64
                   " units, %" PRId64 " blocks: %s\n",
                   k->name, firsts[s], span.count, d.units, blocks, wrong ? "WRONG" : "ok");
            bad |= wrong != 0;
        }
    }
    return bad;
}

/* ---- 2. copies ----------------------------------------------------------------------------- */

/* The byte pattern (rs_pat of the offset) in @p n bytes of "device" memory at @p d. */
static void fill_pattern(uint8_t *d, uint64_t n)
{
    const uint64_t piece = 64 << 20;
    uint8_t *h = use_gpu ? malloc(piece) : d;
    for (uint64_t at = 0; at < n; at += piece) {
        const uint64_t len = n - at < piece ? n - at : piece;
        uint8_t *w = use_gpu ? h : d + at;
        for (uint64_t i = 0; i < len; i++)
            w[i] = rs_pat(at + i);
        if (use_gpu && cudaMemcpy(d + at, h, len, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(stderr, "cudaMemcpy (pattern) failed\n");
            exit(1);
        }
    }
    if (use_gpu) {
        free(h);
        /* a pageable cudaMemcpy may return before its DMA ends; the kernels' stream is not
         * ordered with the legacy stream */
        if (cudaDeviceSynchronize() != cudaSuccess)
            exit(1);
    }
}

static void dev_clear(void *d, uint64_t n)
{
    if (use_gpu) {
        if (cudaMemset(d, 0, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
            exit(1);
    } else {
        memset(d, 0, n);
    }
}

static int run(const rs_box_copy_t *d, void *dst, const void *src)
{
    if (!use_gpu) {
        rs_box_copy_emulate(d, dst, src, rs_box_copy_threads(d));
        return 0;
    }
    cudaError_t e = rs_box_copy_launch(d, dst, src, stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        fprintf(stderr, "kernel: %s\n", cudaGetErrorString(e));
    return e != cudaSuccess;
}

/* A 2-d fragment [rows, cols] of @p es-byte elements, rows @p stride elements apart. */
typedef struct {
    reshard_fragment_t f;
    reshard_box_t box;
    uint32_t es;
} frag2_t;

static void frag2(frag2_t *x, int64_t rows, int64_t cols, int64_t stride, int64_t base, uint32_t es)
{
    memset(x, 0, sizeof *x);
    x->box.ndim = x->f.box.ndim = 2;
    x->box.extent[0] = x->f.box.extent[0] = rows;
    x->box.extent[1] = x->f.box.extent[1] = cols;
    x->f.stride[0] = stride;
    x->f.stride[1] = 1;
    x->f.base = base;
    x->es = es;
}

/* Packed byte q of the fragment (pattern in its buffer), a span from element @p first. */
typedef struct {
    const frag2_t *x;
    int64_t first;
} packed_ctx_t;

static uint8_t want_packed(const void *ctx, uint64_t q)
{
    const packed_ctx_t *c = ctx;
    const frag2_t *x = c->x;
    const uint64_t lin = (uint64_t)c->first + q / x->es, cols = (uint64_t)x->box.extent[1];
    return rs_pat(((uint64_t)x->f.base + lin / cols * (uint64_t)x->f.stride[0] + lin % cols) *
                      x->es +
                  q % x->es);
}

/* Fragment-buffer byte o after unpacking the span into a cleared buffer. */
static uint8_t want_unpacked(const void *ctx, uint64_t o)
{
    const packed_ctx_t *c = ctx;
    const frag2_t *x = c->x;
    const uint64_t e = o / x->es;
    if (e < (uint64_t)x->f.base)
        return 0;
    const uint64_t rel = e - (uint64_t)x->f.base, stride = (uint64_t)x->f.stride[0];
    const uint64_t row = rel / stride, col = rel % stride, cols = (uint64_t)x->box.extent[1];
    if (col >= cols || row >= (uint64_t)x->box.extent[0] || row * cols + col < (uint64_t)c->first)
        return 0;
    return rs_pat(o);
}

/* Byte-for-byte compare of host memory (emulation) or windows of device memory. */
static uint64_t compare(const char *what, const uint8_t *d, uint64_t n, rs_want_fn want,
                        const void *ctx)
{
    if (use_gpu)
        return rs_check_windows(what, d, n, want, ctx, 2048);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < n; i++)
        if (d[i] != want(ctx, i) && wrong++ == 0)
            fprintf(stderr, "%s: byte %" PRIu64 " is %02x, want %02x\n", what, i, d[i],
                    want(ctx, i));
    return wrong;
}

/* Pack the span [first, end) of fragment @p x (buffer of @p fbytes, pattern-filled) and
 * check it; unpack it into a cleared buffer and check the whole buffer. */
static int pack_unpack(const char *name, const frag2_t *x, uint64_t fbytes, int64_t first)
{
    const int64_t numel = x->box.extent[0] * x->box.extent[1];
    reshard_span_t span = {&x->f, &x->box, first, numel - first, x->es};
    const uint64_t pbytes = (uint64_t)(numel - first) * x->es;
    uint8_t *fb = kernel_test_alloc(use_gpu, fbytes), *pk = kernel_test_alloc(use_gpu, pbytes);
    fill_pattern(fb, fbytes);
    dev_clear(pk, pbytes);
    rs_box_copy_t d;
    int bad = rs_box_copy_for_pack(&d, &span, pk, fb) != RESHARD_OK;
    bad = bad || run(&d, pk, fb);
    packed_ctx_t ctx = {x, first};
    uint64_t wrong = bad ? 1 : compare(name, pk, pbytes, want_packed, &ctx);
    const int64_t units = d.units, blocks = rs_box_copy_blocks(&d);
    if (!bad) {
        dev_clear(fb, fbytes);
        bad = rs_box_copy_for_unpack(&d, &span, fb, pk) != RESHARD_OK || run(&d, fb, pk);
        wrong += bad ? 1 : compare(name, fb, fbytes, want_unpacked, &ctx);
    }
    printf("copy %s: %" PRId64 " elements of %u B, %" PRId64 " units on %" PRId64
           " blocks (%" PRId64 " passes), buffer %.2f GiB: %" PRIu64 " wrong byte(s)%s\n",
           name, numel - first, x->es, units, blocks, (units + blocks - 1) / blocks,
           (double)fbytes / (1 << 30), wrong, bad ? ", FAILED to run" : "");
    kernel_test_free(use_gpu, fb);
    kernel_test_free(use_gpu, pk);
    return bad || wrong;
}

int main(int argc, char **argv)
{
    const bool gpu = argc == 2 && strcmp(argv[1], "--gpu") == 0;
    if (!gpu && !(argc == 2 && strcmp(argv[1], "--emulate") == 0)) {
        fprintf(stderr, "usage: %s --gpu|--emulate\n", argv[0]);
        return 2;
    }
    use_gpu = gpu;
    if (use_gpu) {
        const int rc = kernel_test_device(&stream);
        if (rc != 0)
            return rc;
    }
    int bad = index_checks();
    frag2_t x;
    /* more units than the grid: 2^20 + 77 rows of 8 bf16, 16 apart, span from row 3 */
    frag2(&x, RS_BOX_COPY_MAX_BLOCKS + 77, 8, 16, 5, 2);
    bad |=
        pack_unpack("grid-stride (2^20+77 rows)", &x, (uint64_t)(x.box.extent[0] * 16 + 5) * 2, 24);
    if (use_gpu) {
        /* more than 2^31 elements: one 1-byte row merged from [2^15, 2^16 + 128] */
        frag2(&x, (int64_t)1 << 15, ((int64_t)1 << 16) + 128, ((int64_t)1 << 16) + 128, 5, 1);
        bad |= pack_unpack(">2^31 elements", &x, ((uint64_t)1 << 31) + ((uint64_t)1 << 22) + 5, 3);
        /* a base past 4 GiB: bf16 rows of 3000, 4096 apart, at element 2^31 + 1000 */
        const int64_t base = ((int64_t)1 << 31) + 1000;
        frag2(&x, 1024, 3000, 4096, base, 2);
        bad |= pack_unpack("base past 4 GiB", &x, (uint64_t)(base + 1024 * 4096) * 2, 7);
        cudaStreamDestroy(stream);
    }
    printf("%s\n", bad ? "FAILED" : "passed");
    return bad;
}
