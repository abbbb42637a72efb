/*
 * BF16 -> FP8 refits through the NCCL transport's code, against the fake CUDA runtime and
 * NCCL (ranks are threads, device memory is host memory, the kernels run as their CPU
 * emulations): the executor's sender-side quantize steps (into device scratch, before the
 * rounds) and receiver-side ones (from a device bf16 scratch, after them) on the endpoint's
 * stream, through the transport's quantize op. Every destination e4m3 byte and scale is
 * compared with the tests' reference quantizer (tests/common/quant_ref.c) of the source
 * values; the sender-side and receiver-side layouts must give the same bytes; each layout
 * runs twice on the same endpoints (cached staging and scratch); sender-side blocks cross
 * as e4m3 bytes and scales only. (On GPUs the kernels themselves are checked by
 * test_nccl_quant --gpu/--op; a multi-rank NCCL run needs one GPU per rank.)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant_ref.h"
#include "reshard/reshard_nccl.h"
#include "kernel_test.h"

#define WORLD 4 /* ranks 0, 1 train (bf16); 2, 3 infer (fp8) */

/* Ranks of this run: WORLD (threads, the fake device), or 1 (one GPU: every fragment on rank
 * 0, so the data moves by local copies and both quantize steps run on the device). */
static int world = WORLD;

static int32_t rk(int32_t r)
{
    return world == 1 ? 0 : r;
}
#define MAXB 16

/* One quantized tensor: [E?] x R x C bf16, its scale tensor, values and the reference. */
typedef struct {
    const char *name;
    int64_t E, R, C, br, bc;
    bool mx, pow2;
    int32_t id, sid;
    uint16_t *x;
    uint8_t *q, *s;
} qt_t;

static qt_t tensors_under_test[] = {
    {"layers.0.mlp.down_proj.weight", 1, 300, 260, 128, 128, false, false, 0, 0, 0, 0, 0},
    {"layers.0.mlp.experts.w2_weight", 4, 64, 96, 1, 32, true, true, 0, 0, 0, 0, 0},
    {"layers.0.self_attn.o_proj.weight", 1, 256, 128, 128, 128, false, true, 0, 0, 0, 0, 0},
};
#define NQ ((int)(sizeof tensors_under_test / sizeof tensors_under_test[0]))

static uint16_t random_bf16(void)
{
    const uint32_t e = (uint32_t)rnd(100, 150);
    return (uint16_t)(((next_u64() & 1u) << 15) | (e << 7) | (next_u64() & 0x7Fu));
}

static void make_tensor(reshard_tensors_t *T, qt_t *q)
{
    const int nd = q->E > 1 ? 3 : 2;
    const int64_t RB = (q->R + q->br - 1) / q->br, CB = (q->C + q->bc - 1) / q->bc;
    const int64_t shape[3] = {q->E, q->R, q->C}, sshape[3] = {q->E, RB, CB};
    char sname[128];
    snprintf(sname, sizeof sname, "%s_scale_inv", q->name);
    reshard_status_t st =
        reshard_tensors_add(T, q->name, RESHARD_BF16, nd, shape + 3 - nd, 0, NULL, &q->id);
    if (st == RESHARD_OK)
        st = reshard_tensors_add(T, sname, q->mx ? RESHARD_UINT8 : RESHARD_FP32, nd,
                                 sshape + 3 - nd, 0, NULL, &q->sid);
    const reshard_quant_t m = {q->mx ? RESHARD_QUANT_MXFP8 : RESHARD_QUANT_FP8_BLOCK, q->sid,
                               q->pow2};
    if (st == RESHARD_OK)
        st = reshard_tensors_set_quant(T, q->id, &m);
    if (st != RESHARD_OK) {
        fprintf(stderr, "catalogue: %s\n", reshard_last_error());
        exit(1);
    }
    const int64_t n = q->E * q->R * q->C;
    q->x = malloc((size_t)n * 2);
    q->q = malloc((size_t)n);
    q->s = malloc((size_t)(q->E * RB * CB) * 4);
    for (int64_t i = 0; i < n; i++)
        q->x[i] = random_bf16();
    for (int64_t c = 0; c < q->C; c++) /* a row of zeros, a huge value, NaN and Inf */
        q->x[c] = 0;
    q->x[n / 2] = 0x7F7F;
    q->x[n - 1] = 0x7FC0;
    q->x[n - 3] = 0xFF80;
    ref_quantize(q->x, q->E, q->R, q->C, q->br, q->bc, q->pow2, q->mx, q->q, q->s);
}

typedef struct {
    reshard_layout_t *l;
    int32_t next[WORLD];
} side_t;

/* A dense fragment of box (off, ext) of tensor @p t in a new buffer of @p rank, declared
 * with @p dt. */
static void add_dense(side_t *s, int32_t t, int32_t rank, reshard_dtype_t dt, int nd,
                      const int64_t *off, const int64_t *ext)
{
    reshard_fragment_t f = {.tensor = t, .rank = rank, .buffer = s->next[rank]++};
    f.box.ndim = nd;
    int64_t stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        f.box.offset[d] = off[d];
        f.box.extent[d] = ext[d];
        f.stride[d] = stride;
        stride *= ext[d];
    }
    char name[64];
    snprintf(name, sizeof name, "t%d.b%d", t, f.buffer);
    if (reshard_layout_add_fragment(s->l, &f) != RESHARD_OK ||
        reshard_layout_declare_buffer(s->l, rank, f.buffer, name, dt, nd, ext) != RESHARD_OK) {
        fprintf(stderr, "layout: %s\n", reshard_last_error());
        exit(1);
    }
}

/* Rows [r0, r1) x cols [c0, c1) (all experts) of @p q on source rank @p rank. */
static void src_part(side_t *s, const qt_t *q, int32_t rank, int64_t r0, int64_t r1, int64_t c0,
                     int64_t c1)
{
    const int nd = q->E > 1 ? 3 : 2;
    const int64_t off[3] = {0, r0, c0}, ext[3] = {q->E, r1 - r0, c1 - c0};
    add_dense(s, q->id, rank, RESHARD_BF16, nd, off + 3 - nd, ext + 3 - nd);
}

/* Experts [e0, e1) x rows [r0, r1) (all cols) of @p q and their scales on destination rank
 * @p rank: e4m3 bytes and fp32 or e8m0 scales. */
static void dst_part(side_t *s, const qt_t *q, int32_t rank, int64_t e0, int64_t e1, int64_t r0,
                     int64_t r1)
{
    const int nd = q->E > 1 ? 3 : 2;
    const int64_t off[3] = {e0, r0, 0}, ext[3] = {e1 - e0, r1 - r0, q->C};
    add_dense(s, q->id, rank, RESHARD_FP8_E4M3, nd, off + 3 - nd, ext + 3 - nd);
    const int64_t b0 = r0 / q->br, b1 = (r1 + q->br - 1) / q->br;
    const int64_t so[3] = {e0, b0, 0}, se[3] = {e1 - e0, b1 - b0, (q->C + q->bc - 1) / q->bc};
    add_dense(s, q->sid, rank, q->mx ? RESHARD_UINT8 : RESHARD_FP32, nd, so + 3 - nd, se + 3 - nd);
}

/* Sender side (@p receiver_side false): every source part holds whole blocks. Receiver
 * side: the sources cut blocks (rows at 200, columns at 50 / 64), the destinations hold
 * them whole. */
static void make_layouts(reshard_tensors_t *T, bool receiver_side, reshard_layout_t **src,
                         reshard_layout_t **dst)
{
    side_t s = {0}, d = {0};
    if (reshard_layout_create(T, &s.l) != RESHARD_OK || reshard_layout_create(T, &d.l)) {
        fprintf(stderr, "layout: %s\n", reshard_last_error());
        exit(1);
    }
    const qt_t *w = &tensors_under_test[0], *e = &tensors_under_test[1],
               *o = &tensors_under_test[2];
    const int64_t cut = receiver_side ? 200 : 256;
    src_part(&s, w, rk(0), 0, cut, 0, w->C);
    src_part(&s, w, rk(1), cut, w->R, 0, w->C);
    const int64_t ecut = receiver_side ? 50 : 64;
    src_part(&s, e, rk(0), 0, e->R, 0, ecut);
    src_part(&s, e, rk(1), 0, e->R, ecut, e->C);
    const int64_t ocut = receiver_side ? 60 : 128; /* row-parallel o_proj: columns */
    src_part(&s, o, rk(0), 0, o->R, 0, ocut);
    if (ocut < o->C)
        src_part(&s, o, rk(1), 0, o->R, ocut, o->C);
    else
        src_part(&s, o, rk(1), 0, o->R, 0, o->C); /* a replica */
    dst_part(&d, w, rk(2), 0, 1, 0, 128);
    dst_part(&d, w, rk(3), 0, 1, 128, w->R);
    dst_part(&d, e, rk(2), 0, 2, 0, e->R);
    dst_part(&d, e, rk(3), 2, 4, 0, e->R);
    dst_part(&d, o, rk(2), 0, 1, 0, o->R); /* replicated on both (one rank: once) */
    if (world > 1)
        dst_part(&d, o, rk(3), 0, 1, 0, o->R);
    *src = s.l;
    *dst = d.l;
}

static int64_t pos(const reshard_fragment_t *f, const int64_t *idx)
{
    int64_t p = f->base;
    for (int k = 0; k < f->box.ndim; k++)
        p += (idx[k] - f->box.offset[k]) * f->stride[k];
    return p;
}

/* Next point of box @p b in row-major order; false after the last. */
static bool next_point(const reshard_box_t *b, int64_t *idx)
{
    for (int k = b->ndim - 1; k >= 0; k--) {
        if (++idx[k] < b->offset[k] + b->extent[k])
            return true;
        idx[k] = b->offset[k];
    }
    return false;
}

/* The tensor under test of catalogue id @p t (*scale: its scale tensor). */
static const qt_t *tensor_of(int32_t t, bool *scale)
{
    for (int i = 0; i < NQ; i++)
        if (tensors_under_test[i].id == t || tensors_under_test[i].sid == t) {
            *scale = tensors_under_test[i].sid == t;
            return &tensors_under_test[i];
        }
    return NULL;
}

/* Flat index of point @p idx of a [E?] x R x C tensor (or its scales, [E?] x RB x CB). */
static int64_t flat(const qt_t *q, bool scale, int nd, const int64_t *idx)
{
    const int64_t R = scale ? (q->R + q->br - 1) / q->br : q->R;
    const int64_t C = scale ? (q->C + q->bc - 1) / q->bc : q->C;
    const int64_t e = nd == 3 ? idx[0] : 0;
    return (e * R + idx[nd - 2]) * C + idx[nd - 1];
}

typedef struct {
    int32_t rank;
    const char *id;
    const reshard_layout_t *src, *dst;
    uint8_t *host[MAXB]; /* destination buffers copied back, per run */
    uint64_t bytes[MAXB];
    int32_t ndst;
    uint64_t recv[2];
    int ok;
    char msg[512];
} job_t;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(j->msg, sizeof j->msg, __VA_ARGS__);                                              \
        goto out;                                                                                  \
    } while (0)

static void *rank_main(void *arg)
{
    job_t *j = arg;
    reshard_comm_t *c = NULL;
    reshard_plan_t *plan = NULL;
    reshard_buffer_t sb[MAXB] = {{0}}, db[MAXB] = {{0}};
    const int32_t nsb = reshard_layout_buffer_count(j->src, j->rank);
    const int32_t ndb = reshard_layout_buffer_count(j->dst, j->rank);
    reshard_plan_params_t p = {.field_mask =
                                   RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT,
                               .world_size = world,
                               .my_rank = j->rank,
                               .staging_bytes = 64 << 10,
                               .timeout_s = 30};
    if (nsb > MAXB || ndb > MAXB)
        FAIL("%d + %d buffers: more than %d", (int)nsb, (int)ndb, MAXB);
    if (reshard_comm_create_nccl_from_id(j->id, j->rank, world, 0, NULL, &c) != RESHARD_OK ||
        reshard_plan_create(j->src, j->dst, &p, &plan) != RESHARD_OK)
        FAIL("setup: %s", reshard_last_error());
    for (int side = 0; side < 2; side++) {
        reshard_buffer_t *b = side ? db : sb;
        for (int32_t i = 0; i < (side ? ndb : nsb); i++) {
            b[i].bytes = reshard_layout_buffer_bytes(side ? j->dst : j->src, j->rank, i);
            if (reshard_nccl_alloc(c, b[i].bytes, &b[i].ptr) != RESHARD_OK)
                FAIL("alloc: %s", reshard_last_error());
        }
    }
    /* the sources: the tensors' values at every point of this rank's fragments */
    for (int64_t i = 0; i < reshard_layout_count(j->src); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(j->src, i, &f);
        if (f.rank != j->rank)
            continue;
        bool scale = false;
        const qt_t *q = tensor_of(f.tensor, &scale);
        uint16_t *h = calloc(sb[f.buffer].bytes / 2 + 1, 2);
        int64_t idx[RESHARD_MAX_DIMS];
        memcpy(idx, f.box.offset, sizeof idx);
        do
            h[pos(&f, idx)] = q->x[flat(q, false, f.box.ndim, idx)];
        while (next_point(&f.box, idx));
        const reshard_status_t st = reshard_nccl_memcpy(c, sb[f.buffer].ptr, h, sb[f.buffer].bytes);
        free(h);
        if (st != RESHARD_OK)
            FAIL("fill: %s", reshard_last_error());
    }
    j->ndst = ndb;
    for (int run = 0; run < 2; run++) {
        for (int32_t i = 0; i < ndb; i++)
            reshard_nccl_memset(c, db[i].ptr, RESHARD_SENTINEL_BYTE, db[i].bytes);
        reshard_exec_stats_t es;
        if (reshard_plan_execute(plan, c, sb, nsb, db, ndb, &es) != RESHARD_OK)
            FAIL("execute %d: %s", run, reshard_last_error());
        j->recv[run] = es.bytes_recv + es.bytes_local;
    }
    for (int32_t i = 0; i < ndb; i++) { /* the second run's bytes */
        j->bytes[i] = db[i].bytes;
        j->host[i] = malloc(db[i].bytes);
        if (reshard_nccl_memcpy(c, j->host[i], db[i].ptr, db[i].bytes) != RESHARD_OK)
            FAIL("copy back: %s", reshard_last_error());
    }
    j->ok = 1;
out:
    for (int32_t i = 0; c != NULL && i < MAXB; i++) {
        reshard_nccl_free(c, sb[i].ptr);
        reshard_nccl_free(c, db[i].ptr);
    }
    reshard_plan_destroy(plan);
    reshard_comm_destroy(c);
    return NULL;
}

/* Every destination element and scale of @p jobs against the reference; returns the
 * number of wrong bytes (the first few printed). */
static int64_t check(const reshard_layout_t *dst, const job_t *jobs, const char *what)
{
    int64_t wrong = 0, checked = 0;
    for (int64_t i = 0; i < reshard_layout_count(dst); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(dst, i, &f);
        bool scale = false;
        const qt_t *q = tensor_of(f.tensor, &scale);
        const uint8_t *buf = jobs[f.rank].host[f.buffer];
        const size_t es = scale && !q->mx ? 4 : 1;
        int64_t idx[RESHARD_MAX_DIMS];
        memcpy(idx, f.box.offset, sizeof idx);
        do {
            const int64_t k = flat(q, scale, f.box.ndim, idx), p = pos(&f, idx);
            const uint8_t *want = scale ? q->s + es * (size_t)k : q->q + k;
            if (memcmp(buf + es * (size_t)p, want, es) != 0 && wrong++ < 3)
                fprintf(stderr, "%s: rank %d %s%s: element %" PRId64 " differs\n", what, f.rank,
                        q->name, scale ? " (scale)" : "", k);
            checked += (int64_t)es;
        } while (next_point(&f.box, idx));
    }
    printf("%s: %" PRId64 " destination bytes checked, %" PRId64 " wrong\n", what, checked, wrong);
    return checked > 0 ? wrong : 1;
}

/* Both layouts on @p n ranks; returns the number of failures. */
static int run_world(reshard_tensors_t *T, int n)
{
    world = n;
    const int32_t d0 = rk(2); /* the first destination rank */
    int failed = 0;
    uint8_t *first[WORLD][MAXB] = {{0}};
    for (int mode = 0; mode < 2; mode++) {
        char what[64];
        snprintf(what, sizeof what, "%d rank(s), %s", n, mode ? "receiver side" : "sender side");
        reshard_layout_t *src, *dst;
        make_layouts(T, mode == 1, &src, &dst);
        char id[128];
        if (reshard_nccl_get_unique_id(id) != RESHARD_OK)
            return 1;
        job_t jobs[WORLD];
        pthread_t th[WORLD];
        for (int r = 0; r < n; r++) {
            memset(&jobs[r], 0, sizeof jobs[r]);
            jobs[r].rank = r;
            jobs[r].id = id;
            jobs[r].src = src;
            jobs[r].dst = dst;
            pthread_create(&th[r], NULL, rank_main, &jobs[r]);
        }
        for (int r = 0; r < n; r++)
            pthread_join(th[r], NULL);
        int ok = 1;
        for (int r = 0; r < n; r++)
            if (!jobs[r].ok) {
                fprintf(stderr, "%s: rank %d: %s\n", what, r, jobs[r].msg);
                ok = 0;
            }
        failed += !ok;
        if (ok) {
            failed += check(dst, jobs, what) != 0;
            uint64_t recv = 0, fp8 = 0;
            for (int r = d0; r < n; r++) {
                recv += jobs[r].recv[1];
                for (int32_t b = 0; b < jobs[r].ndst; b++)
                    fp8 += jobs[r].bytes[b];
                failed += jobs[r].recv[0] != jobs[r].recv[1];
            }
            /* sender side: exactly the e4m3 bytes and scales arrive; receiver side: bf16 */
            printf("%s: %" PRIu64 " bytes received, destinations hold %" PRIu64 "\n", what, recv,
                   fp8);
            if (mode == 0 && recv != fp8) {
                fprintf(stderr, "%s: received %" PRIu64 " bytes, want %" PRIu64 "\n", what, recv,
                        fp8);
                failed++;
            }
            for (int r = d0; r < n; r++) /* both paths give the same bytes */
                for (int32_t b = 0; b < jobs[r].ndst; b++) {
                    if (mode == 0)
                        first[r][b] = jobs[r].host[b];
                    else if (first[r][b] != NULL &&
                             memcmp(first[r][b], jobs[r].host[b], jobs[r].bytes[b]) != 0) {
                        fprintf(stderr, "%s: rank %d buffer %d: the sender side's bytes differ\n",
                                what, r, b);
                        failed++;
                    }
                }
        }
        for (int r = 0; r < n; r++)
            for (int32_t b = 0; b < jobs[r].ndst; b++)
                if (mode == 1 || r < d0 || !ok)
                    free(jobs[r].host[b]);
        reshard_layout_destroy(src);
        reshard_layout_destroy(dst);
    }
    for (int r = 0; r < WORLD; r++)
        for (int b = 0; b < MAXB; b++)
            free(first[r][b]);
    return failed;
}

int main(int argc, char **argv)
{
    const int gpu = argc > 1 && strcmp(argv[1], "--gpu") == 0;
    if (argc > 2 || (argc == 2 && !gpu)) {
        fprintf(stderr, "usage: %s [--gpu]   (--gpu: one rank on a CUDA device)\n", argv[0]);
        return 2;
    }
    int ndev = 0;
    if (gpu && reshard_nccl_device_count(&ndev) != RESHARD_OK) {
        printf("SKIPPED: %s\n", reshard_last_error());
        return SKIP;
    }
    reshard_tensors_t *T = NULL;
    if (reshard_tensors_create(&T) != RESHARD_OK)
        return 1;
    for (int i = 0; i < NQ; i++)
        make_tensor(T, &tensors_under_test[i]);
    int failed = gpu ? 0 : run_world(T, WORLD);
    failed += run_world(T, 1);
    for (int i = 0; i < NQ; i++) {
        free(tensors_under_test[i].x);
        free(tensors_under_test[i].q);
        free(tensors_under_test[i].s);
    }
    reshard_tensors_destroy(T);
    printf("%s\n", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
