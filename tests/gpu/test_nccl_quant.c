/*
 * The NCCL transport's quantize kernel (bf16 blocks -> OCP e4m3 bytes + one scale per block)
 * against the tests' reference quantizer (tests/common/quant_ref.c: written from the rule,
 * sharing no code with the product; e4m3 by a nearest search over the decoded code values),
 * applied to the box gathered through the fragments' definition (base + index * stride).
 *
 *   --emulate  run the kernel's own code (quant_box.h) on the CPU: everything but the launch.
 *   --gpu      run the CUDA kernel (exit 77 = skipped when there is no CUDA device).
 *   --op       run the transport's quantize op on a one-rank NCCL endpoint (device memory
 *              through reshard_nccl_*): on a GPU, or against the fake CUDA/NCCL of the
 *              fake_nccl_quant test; also its bad-input errors.
 *   --cases N  random cases after the named ones (default 300).
 *
 * Each case checks every byte of the whole destination and scale buffers (bytes outside the
 * box must keep their sentinel values).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard_nccl.h"
#include "exec/quant.h"
#include "quant_ref.h"
#include "kernel_test.h"
#include "transport/nccl/nccl_internal.h"
#include "util/error.h"

static bool use_gpu;               /* device memory (--gpu, --op) */
static reshard_comm_t *endpoint;   /* --op: the endpoint whose quantize op runs */
static int n_svec, n_dvec, n_wide; /* cases with 16-byte loads, 8-byte stores, groups > 32 */
static cudaStream_t stream;

/* ---- the reference ------------------------------------------------------------------- */

/* Element position of point @p idx in fragment @p f. */
static int64_t pos(const reshard_fragment_t *f, const int64_t *idx)
{
    int64_t p = f->base;
    for (int k = 0; k < f->box.ndim; k++)
        p += (idx[k] - f->box.offset[k]) * f->stride[k];
    return p;
}

typedef struct {
    bool mx, pow2;
    int64_t br, bc;
    reshard_box_t box;
    reshard_fragment_t src, dst, scale;
} qcase_t;

/* Tensor coordinates of the @p i-th point (row-major over [E?] x @p nr x @p nc) of case
 * @p q's box, or with @p blocks of its scale box. */
static void box_point(const qcase_t *q, bool blocks, int64_t i, int64_t nr, int64_t nc,
                      int64_t *idx)
{
    const int nd = q->box.ndim, rd = nd - 2, cd = nd - 1;
    if (nd == 3)
        idx[0] = q->box.offset[0] + i / (nr * nc);
    idx[rd] = (blocks ? q->box.offset[rd] / q->br : q->box.offset[rd]) + i / nc % nr;
    idx[cd] = (blocks ? q->box.offset[cd] / q->bc : q->box.offset[cd]) + i % nc;
}

/* Quantize case @p q from @p src into @p dst and @p scale (host buffers) by the rule: the
 * box gathered densely through the fragments' positions, quantized by the tests' reference
 * (tests/common/quant_ref.c), scattered back through the fragments. */
static void ref_quantize_case(const qcase_t *q, const uint16_t *src, uint8_t *dst, uint8_t *scale)
{
    const int nd = q->box.ndim;
    const int64_t ne = nd == 3 ? q->box.extent[0] : 1, nr = q->box.extent[nd - 2],
                  nc = q->box.extent[nd - 1];
    const int64_t nbr = (nr + q->br - 1) / q->br, nbc = (nc + q->bc - 1) / q->bc;
    uint16_t *x = malloc((size_t)(ne * nr * nc) * 2);
    uint8_t *y = malloc((size_t)(ne * nr * nc));
    uint8_t *g = malloc((size_t)(ne * nbr * nbc) * 4);
    if (x == NULL || y == NULL || g == NULL)
        exit(1);
    int64_t idx[3];
    for (int64_t i = 0; i < ne * nr * nc; i++) {
        box_point(q, false, i, nr, nc, idx);
        x[i] = src[pos(&q->src, idx)];
    }
    ref_quantize(x, ne, nr, nc, q->br, q->bc, q->pow2, q->mx, y, g);
    for (int64_t i = 0; i < ne * nr * nc; i++) {
        box_point(q, false, i, nr, nc, idx);
        dst[pos(&q->dst, idx)] = y[i];
    }
    const size_t gs = q->mx ? 1 : 4;
    for (int64_t i = 0; i < ne * nbr * nbc; i++) {
        box_point(q, true, i, nbr, nbc, idx);
        memcpy(scale + gs * (size_t)pos(&q->scale, idx), g + gs * (size_t)i, gs);
    }
    free(x);
    free(y);
    free(g);
}

/* ---- cases --------------------------------------------------------------------------- */

/* Layout kinds of a fragment: 0 row-major, 1 rows padded (by multiples of 8 or not),
 * 2 transposed (dims in reverse order), 3 interleaved inner dim (stride 2 or 3), 4 rows of a
 * multiple of 8 elements at a base multiple of 16 (the kernel's vector paths). */
static void make_fragment(reshard_fragment_t *f, const reshard_box_t *box, int kind, bool margin)
{
    memset(f, 0, sizeof *f);
    f->box.ndim = box->ndim;
    for (int k = 0; k < box->ndim; k++) {
        const bool m = margin && (kind != 4 || k + 1 < box->ndim);
        const int64_t lo = m && next_u64() % 3 == 0 ? rnd(0, 2) : 0;
        const int64_t hi = m && next_u64() % 3 == 0 ? rnd(0, 2) : 0;
        f->box.offset[k] = box->offset[k] - (lo <= box->offset[k] ? lo : 0);
        f->box.extent[k] = box->extent[k] + (box->offset[k] - f->box.offset[k]) + hi;
    }
    const int nd = box->ndim;
    int64_t s = kind == 3 ? rnd(2, 3) : 1;
    for (int i = 0; i < nd; i++) {
        const int d = kind == 2 ? i : nd - 1 - i; /* innermost first */
        f->stride[d] = s;
        int64_t span = s * f->box.extent[d];
        if (kind == 1 && next_u64() % 2)
            span += next_u64() % 2 ? 8 * rnd(1, 4) : rnd(1, 7);
        if (kind == 4 && i == 0)
            span = (span + 7) / 8 * 8 + 8 * rnd(0, 2);
        s = span;
    }
    f->base = next_u64() % 2 ? 0 : (next_u64() % 2 ? 16 * rnd(1, 3) : rnd(1, 40));
    if (kind == 4)
        f->base = 16 * rnd(0, 3);
}

static int64_t frag_elems(const reshard_fragment_t *f)
{
    int64_t last = f->base;
    for (int k = 0; k < f->box.ndim; k++)
        last += (f->box.extent[k] - 1) * f->stride[k];
    return last + 1;
}

/* Value patterns of a block: normal values at a random magnitude, all zeros (+-0), tiny
 * (below the amax clamp), one huge value among normal ones, NaN and Inf among normal ones,
 * bf16 subnormals. */
enum { V_NORMAL, V_ZERO, V_TINY, V_HUGE, V_NONFINITE, V_SUBNORMAL, V_KINDS };

static uint16_t random_bf16(int exp_lo, int exp_hi)
{
    const uint16_t sign = (uint16_t)(next_u64() % 2 ? 0x8000 : 0);
    const uint16_t e = (uint16_t)rnd(exp_lo, exp_hi); /* biased exponent field */
    return (uint16_t)(sign | (uint16_t)(e << 7) | (uint16_t)(next_u64() & 0x7F));
}

/* Fill the source box's values block by block with random patterns (or @p force >= 0). */
static void fill_values(const qcase_t *q, uint16_t *src, int force)
{
    const int nd = q->box.ndim, rd = nd - 2, cd = nd - 1;
    const int64_t ne = nd == 3 ? q->box.extent[0] : 1;
    const int64_t r_end = q->box.offset[rd] + q->box.extent[rd];
    const int64_t c_end = q->box.offset[cd] + q->box.extent[cd];
    for (int64_t e = 0; e < ne; e++)
        for (int64_t r0 = q->box.offset[rd]; r0 < r_end; r0 += q->br)
            for (int64_t c0 = q->box.offset[cd]; c0 < c_end; c0 += q->bc) {
                const int pat = force >= 0 ? force : (int)(next_u64() % (2 * V_KINDS)) % V_KINDS;
                const int center = (int)rnd(100, 160); /* block magnitude 2^(center-127) */
                const int64_t r1 = r0 + q->br < r_end ? r0 + q->br : r_end;
                const int64_t c1 = c0 + q->bc < c_end ? c0 + q->bc : c_end;
                const int64_t n = (r1 - r0) * (c1 - c0);
                const int64_t special = rnd(0, n - 1);
                int64_t i = 0;
                int64_t idx[3];
                if (nd == 3)
                    idx[0] = q->box.offset[0] + e;
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = c0; c < c1; c++, i++) {
                        idx[rd] = r;
                        idx[cd] = c;
                        uint16_t h = random_bf16(center - 12, center);
                        if (pat == V_ZERO)
                            h = (uint16_t)(next_u64() % 2 ? 0x8000 : 0);
                        else if (pat == V_TINY)
                            h = random_bf16(100, 112); /* < 2^-14 < 1e-4 */
                        else if (pat == V_HUGE && i == special)
                            h = next_u64() % 2 ? 0x7F7F : 0xFF7F; /* +-3.39e38 */
                        else if (pat == V_NONFINITE && (i == special || next_u64() % 16 == 0)) {
                            static const uint16_t nf[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81};
                            h = nf[next_u64() % 5];
                        } else if (pat == V_SUBNORMAL)
                            h = (uint16_t)((next_u64() % 2 ? 0x8000 : 0) | (next_u64() & 0x7F));
                        src[pos(&q->src, idx)] = h;
                    }
            }
}

/* "Device" memory: cudaMalloc'ed with --gpu, host memory with --emulate. */
static void *dev_alloc(size_t n)
{
    void *p = NULL;
    const bool fail = endpoint != NULL ? reshard_nccl_alloc(endpoint, n, &p) != RESHARD_OK
                      : use_gpu        ? cudaMalloc(&p, n) != cudaSuccess
                                       : (p = malloc(n)) == NULL;
    if (fail) {
        fprintf(stderr, "allocating %zu bytes failed\n", n);
        exit(1);
    }
    return p;
}

static void dev_free(void *p)
{
    if (endpoint != NULL)
        reshard_nccl_free(endpoint, p);
    else if (use_gpu)
        cudaFree(p);
    else
        free(p);
}

static void copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    if (!use_gpu) {
        memcpy(dst, src, n);
        return;
    }
    if (endpoint != NULL) { /* on the endpoint's stream, after its kernels */
        if (reshard_nccl_memcpy(endpoint, dst, src, n) != RESHARD_OK) {
            fprintf(stderr, "reshard_nccl_memcpy: %s\n", reshard_last_error());
            exit(1);
        }
        return;
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

static int check_bytes(const char *name, const char *what, const uint8_t *got, const uint8_t *want,
                       size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "%s: %s differs at byte %zu of %zu (got %02x, want %02x)\n", name, what,
                    i, n, got[i], want[i]);
            return 1;
        }
    return 0;
}

/* Run case @p q: values by pattern @p force (-1: random per block); pointer offsets
 * @p ms (bytes, even), @p md, @p mg (multiple of 4 for fp32 scales). */
static int run_case(const char *name, const qcase_t *q, int force, size_t ms, size_t md, size_t mg)
{
    const size_t sbytes = (size_t)frag_elems(&q->src) * 2 + ms;
    const size_t dbytes = (size_t)frag_elems(&q->dst) + md;
    const size_t gbytes = (size_t)frag_elems(&q->scale) * (q->mx ? 1 : 4) + mg;
    uint8_t *hs = malloc(sbytes), *hd = malloc(dbytes), *hg = malloc(gbytes);
    uint8_t *wd = malloc(dbytes), *wg = malloc(gbytes);
    if (hs == NULL || hd == NULL || hg == NULL || wd == NULL || wg == NULL)
        exit(1);
    for (size_t i = 0; i < sbytes; i++)
        hs[i] = (uint8_t)next_u64();
    for (size_t i = 0; i < dbytes; i++)
        hd[i] = wd[i] = (uint8_t)next_u64();
    for (size_t i = 0; i < gbytes; i++)
        hg[i] = wg[i] = (uint8_t)next_u64();
    fill_values(q, (uint16_t *)(hs + ms), force);
    ref_quantize_case(q, (const uint16_t *)(hs + ms), wd + md, wg + mg);

    uint8_t *ds = dev_alloc(sbytes), *dd = dev_alloc(dbytes), *dg = dev_alloc(gbytes);
    copy(ds, hs, sbytes, cudaMemcpyHostToDevice);
    copy(dd, hd, dbytes, cudaMemcpyHostToDevice);
    copy(dg, hg, gbytes, cudaMemcpyHostToDevice);
    rs_quant_job_t j;
    int bad = 0;
    const rs_quant_t rule = {q->mx ? RS_QUANT_MXFP8 : RS_QUANT_FP8_BLOCK, q->br, q->bc, q->pow2};
    if (endpoint != NULL) {
        if (rs_nccl_quant_job(&j, &rule, dd + md, &q->dst, dg + mg, &q->scale, ds + ms, &q->src,
                              &q->box) != RESHARD_OK ||
            endpoint->ops->quantize(endpoint, &rule, dd + md, &q->dst, dg + mg, &q->scale, ds + ms,
                                    &q->src, &q->box) != RESHARD_OK) {
            fprintf(stderr, "%s: quantize op: %s\n", name, reshard_last_error());
            bad = 1;
        }
        n_svec += j.svec;
        n_dvec += j.dvec;
        n_wide += j.group > 32;
    } else if (rs_quant_job_init(&j, q->mx, q->br, q->bc, q->pow2, dd + md, &q->dst, dg + mg,
                                 &q->scale, ds + ms, &q->src, &q->box) != RESHARD_OK) {
        fprintf(stderr, "%s: job init: %s\n", name, reshard_last_error());
        bad = 1;
    } else if (use_gpu) {
        n_svec += j.svec;
        n_dvec += j.dvec;
        n_wide += j.group > 32;
        const cudaError_t e = rs_quant_launch(&j, dd + md, dg + mg, ds + ms, stream);
        if (e != cudaSuccess) {
            fprintf(stderr, "%s: launch: %s\n", name, cudaGetErrorString(e));
            bad = 1;
        }
    } else {
        n_svec += j.svec;
        n_dvec += j.dvec;
        n_wide += j.group > 32;
        rs_quant_emulate(&j, dd + md, dg + mg, ds + ms);
    }
    copy(hd, dd, dbytes, cudaMemcpyDeviceToHost);
    copy(hg, dg, gbytes, cudaMemcpyDeviceToHost);
    bad = bad || check_bytes(name, "e4m3 buffer", hd, wd, dbytes);
    bad = bad || check_bytes(name, "scale buffer", hg, wg, gbytes);
    if (bad) {
        char b[256];
        fprintf(stderr,
                "  %s %" PRId64 "x%" PRId64 " pow2 %d box %s; strides src %" PRId64 ",%" PRId64
                " dst %" PRId64 ",%" PRId64 "; vec %d/%d group %d; offsets %zu %zu %zu\n",
                q->mx ? "mxfp8" : "fp8", q->br, q->bc, q->pow2, rs_box_str(&q->box, b, sizeof b),
                q->src.stride[q->box.ndim - 2], q->src.stride[q->box.ndim - 1],
                q->dst.stride[q->box.ndim - 2], q->dst.stride[q->box.ndim - 1], j.svec, j.dvec,
                j.group, ms, md, mg);
    }
    dev_free(ds);
    dev_free(dd);
    dev_free(dg);
    free(hs);
    free(hd);
    free(hg);
    free(wd);
    free(wg);
    return bad;
}

/* A case over tensor [E,] R x C: the box of blocks [e0, e1) x [i0, i1) x [k0, k1) (clipped at
 * the tensor end), layouts @p sk, @p dk, @p gk for source, destination and scales. */
static void make_case(qcase_t *q, bool mx, bool pow2, int64_t br, int64_t bc, int64_t E, int64_t R,
                      int64_t C, const int64_t blk[6], int sk, int dk, int gk)
{
    memset(q, 0, sizeof *q);
    q->mx = mx;
    q->pow2 = pow2;
    q->br = br;
    q->bc = bc;
    const int nd = E > 0 ? 3 : 2, rd = nd - 2, cd = nd - 1;
    q->box.ndim = nd;
    if (nd == 3) {
        q->box.offset[0] = blk[0];
        q->box.extent[0] = blk[1] - blk[0];
    }
    q->box.offset[rd] = blk[2] * br;
    q->box.extent[rd] = (blk[3] * br < R ? blk[3] * br : R) - q->box.offset[rd];
    q->box.offset[cd] = blk[4] * bc;
    q->box.extent[cd] = (blk[5] * bc < C ? blk[5] * bc : C) - q->box.offset[cd];
    make_fragment(&q->src, &q->box, sk, true);
    make_fragment(&q->dst, &q->box, dk, true);
    reshard_box_t g = q->box;
    g.offset[rd] = blk[2];
    g.extent[rd] = (q->box.extent[rd] + br - 1) / br;
    g.offset[cd] = blk[4];
    g.extent[cd] = (q->box.extent[cd] + bc - 1) / bc;
    make_fragment(&q->scale, &g, gk, true);
}

static int named_cases(int *n)
{
    static const struct {
        const char *name;
        bool mx, pow2;
        int64_t E, R, C;
        int sk, dk, gk, force;
    } t[] = {
        {"fp8 aligned 256x384", false, false, 0, 256, 384, 4, 4, 0, -1},
        {"fp8 aligned pow2 256x256", false, true, 0, 256, 256, 4, 4, 0, -1},
        {"fp8 ragged 300x200", false, false, 0, 300, 200, 0, 0, 0, -1},
        {"fp8 ragged 130x129 padded", false, true, 0, 130, 129, 1, 1, 1, -1},
        {"fp8 zero blocks", false, false, 0, 256, 200, 0, 0, 0, V_ZERO},
        {"fp8 tiny blocks (amax clamp)", false, false, 0, 200, 256, 0, 0, 0, V_TINY},
        {"fp8 one huge value per block", false, false, 0, 256, 256, 0, 0, 0, V_HUGE},
        {"fp8 NaN and Inf", false, false, 0, 256, 136, 0, 0, 0, V_NONFINITE},
        {"fp8 bf16 subnormals", false, true, 0, 128, 128, 0, 0, 0, V_SUBNORMAL},
        {"fp8 expert stack 3x200x260", false, false, 3, 200, 260, 4, 4, 0, -1},
        {"fp8 transposed source", false, false, 0, 256, 192, 2, 0, 0, -1},
        {"fp8 interleaved source, transposed destination", false, false, 2, 130, 140, 3, 2, 2, -1},
        {"mxfp8 aligned 64x256", true, true, 0, 64, 256, 4, 4, 0, -1},
        {"mxfp8 ragged 33x100", true, true, 0, 33, 100, 0, 0, 0, -1},
        {"mxfp8 zero blocks", true, true, 0, 16, 96, 0, 0, 0, V_ZERO},
        {"mxfp8 NaN and Inf", true, true, 0, 16, 96, 0, 0, 0, V_NONFINITE},
        {"mxfp8 one huge value", true, true, 0, 16, 96, 0, 0, 0, V_HUGE},
        {"mxfp8 expert stack 4x40x72 strided", true, true, 4, 40, 72, 1, 3, 2, -1},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const int64_t br = t[i].mx ? 1 : 128, bc = t[i].mx ? 32 : 128;
        const int64_t blk[6] = {0, t[i].E, 0, (t[i].R + br - 1) / br, 0, (t[i].C + bc - 1) / bc};
        qcase_t q;
        make_case(&q, t[i].mx, t[i].pow2, br, bc, t[i].E, t[i].R, t[i].C, blk, t[i].sk, t[i].dk,
                  t[i].gk);
        failed += run_case(t[i].name, &q, t[i].force, 0, 0, 0);
        (*n)++;
    }
    return failed;
}

static int random_case(int c)
{
    char name[64];
    snprintf(name, sizeof name, "random case %d", c);
    const int shape = (int)rnd(0, 4);
    bool mx = false, pow2 = next_u64() % 2;
    int64_t br = 128, bc = 128;
    if (shape == 1) {
        mx = true;
        br = 1;
        bc = 32;
    } else if (shape >= 2) { /* other block sizes: every path of the thread split */
        static const int64_t rows[] = {1, 2, 3, 8, 16, 64}, cols[] = {1, 5, 8, 16, 32, 40, 64};
        br = rows[next_u64() % 6];
        bc = cols[next_u64() % 7];
        mx = next_u64() % 4 == 0;
    }
    const int64_t E = next_u64() % 3 == 0 ? rnd(1, 3) : 0;
    const int64_t nbr = rnd(1, br >= 64 ? 3 : 6), nbc = rnd(1, bc >= 64 ? 3 : 6);
    const int64_t R = (nbr - 1) * br + rnd(1, br), C = (nbc - 1) * bc + rnd(1, bc);
    int64_t blk[6];
    blk[0] = E > 0 ? rnd(0, E - 1) : 0;
    blk[1] = E > 0 ? rnd(blk[0] + 1, E) : 0;
    blk[2] = rnd(0, nbr - 1);
    blk[3] = rnd(blk[2] + 1, nbr);
    blk[4] = rnd(0, nbc - 1);
    blk[5] = rnd(blk[4] + 1, nbc);
    qcase_t q;
    make_case(&q, mx, pow2, br, bc, E, R, C, blk, (int)rnd(0, 5) % 5, (int)rnd(0, 5) % 5,
              (int)rnd(0, 4));
    const size_t ms = next_u64() % 3 == 0 ? 2 * (size_t)rnd(0, 7) : 0;
    const size_t md = next_u64() % 3 == 0 ? (size_t)rnd(0, 15) : 0;
    const size_t mg = next_u64() % 3 == 0 ? (mx ? (size_t)rnd(0, 3) : 4 * (size_t)rnd(0, 3)) : 0;
    return run_case(name, &q, -1, ms, md, mg);
}

/* --op: bad input is an INVALID_ARG naming the tensor and rank, before any launch. */
static int bad_inputs(void)
{
    const int64_t blk[6] = {0, 0, 0, 2, 0, 2};
    qcase_t q;
    make_case(&q, false, false, 128, 128, 0, 256, 256, blk, 0, 0, 0);
    q.src.tensor = q.dst.tensor = q.scale.tensor = 7;
    q.src.rank = q.dst.rank = q.scale.rank = 0;
    static char buf[1 << 20];
    rs_quant_t rule = {RS_QUANT_FP8_BLOCK, 128, 128, false};
    int failed = 0;
    for (int t = 0; t < 4; t++) {
        qcase_t b = q;
        rs_quant_t r = rule;
        const char *what = "kind NONE";
        if (t == 0) {
            r.kind = RS_QUANT_NONE;
        } else if (t == 1) {
            what = "box off a block bound";
            b.box.offset[0] = 64;
            b.box.extent[0] = 64;
        } else if (t == 2) {
            what = "scale fragment too small";
            b.scale.box.extent[1] = 1;
        } else { /* an empty box is no work, not an error */
            b.box.extent[1] = 0;
            if (endpoint->ops->quantize(endpoint, &r, buf, &b.dst, buf, &b.scale, buf, &b.src,
                                        &b.box) != RESHARD_OK) {
                fprintf(stderr, "empty box: %s\n", reshard_last_error());
                failed++;
            }
            continue;
        }
        const reshard_status_t st =
            endpoint->ops->quantize(endpoint, &r, buf, &b.dst, buf, &b.scale, buf, &b.src, &b.box);
        const char *msg = reshard_last_error();
        if (st != RESHARD_ERR_INVALID_ARG ||
            (t > 0 && (strstr(msg, "tensor 7") == NULL || strstr(msg, "rank 0") == NULL))) {
            fprintf(stderr, "bad input (%s): status %d, message '%s'\n", what, (int)st, msg);
            failed++;
        }
    }
    return failed;
}

int main(int argc, char **argv)
{
    int cases = 300;
    const char *mode = NULL;
    const int rc = kernel_test_start(argc, argv, &cases, &mode, &use_gpu, &stream);
    if (rc != 0)
        return rc;
    int failed = 0;
    if (strcmp(mode, "op") == 0) {
        char id[128];
        if (reshard_nccl_unique_id_size() != sizeof id || reshard_nccl_get_unique_id(id) != 0 ||
            reshard_comm_create_nccl_from_id(id, 0, 1, 0, NULL, &endpoint) != RESHARD_OK) {
            fprintf(stderr, "endpoint: %s\n", reshard_last_error());
            return 1;
        }
        failed += bad_inputs();
    }
    int n = 0;
    failed += named_cases(&n);
    for (int c = 0; c < cases && failed < 5; c++, n++)
        failed += random_case(c);
    printf("%s quantize: %d cases checked byte for byte (%d with 16-byte loads, %d with 8-byte "
           "stores, %d with groups wider than a warp), %d failed\n",
           mode, n, n_svec, n_dvec, n_wide, failed);
    if (endpoint != NULL)
        reshard_comm_destroy(endpoint);
    if (use_gpu)
        cudaStreamDestroy(stream);
    return failed ? 1 : 0;
}
