/* BF16 sources into FP8 destinations through reshard_plan_create and
 * reshard_plan_execute (in-process threads): every destination e4m3 byte
 * and scale equals the tests' independent reference quantizer
 * (tests/common/quant_ref.c) of the source values, for sender-side blocks
 * (a source fragment holds the block whole), receiver-side blocks (it does
 * not; the destination does), both mixed, a view that splits the rows, an
 * expert stack, MXFP8 and power-of-two scales; the sender-side and
 * receiver-side paths give the same bytes; own-rank plans and one shared
 * plan agree; only e4m3 bytes and scales cross for sender-side blocks; and
 * bad layouts are refused before anything moves. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "plan/plan_internal.h"
#include "quant_ref.h"
#include "reshard/reshard.h"

#define WORLD 4
#define MAXB 16

static unsigned seed = 7;

static uint16_t rand_bf16(void)
{
    uint32_t e = (uint32_t)(rand_r(&seed) % 24) + 115u; /* 2^-12 .. 2^11 */
    return (uint16_t)((((uint32_t)rand_r(&seed) & 1u) << 15) | (e << 7) |
                      ((uint32_t)rand_r(&seed) & 0x7Fu));
}

/* One quantized tensor of the test catalogue and its reference. */
typedef struct {
    int32_t id, sid;
    int64_t E, R, C, br, bc;
    bool pow2, mx;
    uint16_t *x; /* E*R*C source values, row-major */
    uint8_t *q;  /* reference e4m3 */
    uint8_t *s;  /* reference scales */
} qt_t;

typedef struct {
    reshard_tensors_t *T;
    qt_t w, e, m, v; /* 2-d fp8, expert stack, mxfp8, viewed rows (pow2) */
    int32_t norm;
    uint16_t *normx;
} cat_t;

static void make_qt(reshard_tensors_t *T, qt_t *q, const char *name, int64_t E, int64_t R,
                    int64_t C, bool mx, bool pow2, int vnd, const int64_t *view)
{
    q->E = E;
    q->R = R;
    q->C = C;
    q->mx = mx;
    q->pow2 = pow2 || mx;
    q->br = mx ? 1 : 128;
    q->bc = mx ? 32 : 128;
    int64_t shape[3] = {E, R, C}, RB = (R + q->br - 1) / q->br, CB = (C + q->bc - 1) / q->bc;
    int64_t sshape[3] = {E, RB, CB};
    int nd = E > 1 ? 3 : 2;
    char sname[128];
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    assert_int_equal(
        reshard_tensors_add(T, name, RESHARD_BF16, nd, shape + 3 - nd, vnd, view, &q->id),
        RESHARD_OK);
    assert_int_equal(reshard_tensors_add(T, sname, mx ? RESHARD_UINT8 : RESHARD_FP32, nd,
                                         sshape + 3 - nd, 0, NULL, &q->sid),
                     RESHARD_OK);
    reshard_quant_t m = {mx ? RESHARD_QUANT_MXFP8 : RESHARD_QUANT_FP8_BLOCK, q->sid, pow2};
    assert_int_equal(reshard_tensors_set_quant(T, q->id, &m), RESHARD_OK);
    int64_t n = E * R * C, ns = E * RB * CB;
    q->x = malloc((size_t)n * 2);
    q->q = malloc((size_t)n);
    q->s = malloc((size_t)ns * 4);
    for (int64_t i = 0; i < n; i++)
        q->x[i] = rand_bf16();
    /* a zero block, a huge value, NaN and Inf */
    for (int64_t r = 0; r < q->br && r < R; r++)
        for (int64_t c = 0; c < q->bc && c < C; c++)
            q->x[r * C + c] = 0;
    q->x[n / 2] = 0x7F00; /* 2^127 */
    q->x[n - 1] = 0x7FC0;
    q->x[n - 5] = 0xFF80;
    ref_quantize(q->x, E, R, C, q->br, q->bc, q->pow2, mx, q->q, q->s);
}

static void cat_init(cat_t *c)
{
    memset(c, 0, sizeof *c);
    assert_int_equal(reshard_tensors_create(&c->T), RESHARD_OK);
    make_qt(c->T, &c->w, "w", 1, 300, 260, false, false, 0, NULL);
    make_qt(c->T, &c->e, "experts.w13", 4, 256, 192, false, false, 0, NULL);
    make_qt(c->T, &c->m, "m", 1, 6, 100, true, true, 0, NULL);
    int64_t view[3] = {4, 128, 256};
    make_qt(c->T, &c->v, "q_proj", 1, 512, 256, false, true, 3, view);
    int64_t nshape[1] = {64};
    assert_int_equal(reshard_tensors_add(c->T, "norm", RESHARD_BF16, 1, nshape, 0, NULL, &c->norm),
                     RESHARD_OK);
    c->normx = malloc(64 * 2);
    for (int i = 0; i < 64; i++)
        c->normx[i] = rand_bf16();
}

static void qt_free(qt_t *q)
{
    free(q->x);
    free(q->q);
    free(q->s);
}

static void cat_free(cat_t *c)
{
    qt_free(&c->w);
    qt_free(&c->e);
    qt_free(&c->m);
    qt_free(&c->v);
    free(c->normx);
    reshard_tensors_destroy(c->T);
}

/* Per rank: next buffer id and the buffers' dtypes and sizes. */
typedef struct {
    reshard_layout_t *l;
    int32_t next[WORLD];
} side_t;

#define UNDECLARED ((reshard_dtype_t)-1)

/* A dense [E?] x rows x cols fragment of box (e0:e1, r0:r1, c0:c1) in a new
 * buffer of @p rank, declared as @p dt (unless UNDECLARED); returns its id. */
static int32_t add_dense(side_t *s, int32_t t, int32_t rank, reshard_dtype_t dt, int nd,
                         const int64_t *off, const int64_t *ext)
{
    int32_t b = s->next[rank]++;
    reshard_fragment_t f = {.tensor = t, .rank = rank, .buffer = b};
    f.box.ndim = nd;
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) {
        f.box.offset[d] = off[d];
        f.box.extent[d] = ext[d];
        f.stride[d] = st;
        st *= ext[d];
    }
    assert_int_equal(reshard_layout_add_fragment(s->l, &f), RESHARD_OK);
    if (dt == UNDECLARED)
        return b;
    char name[64];
    snprintf(name, sizeof name, "t%d.r%d.b%d", t, rank, b);
    assert_int_equal(reshard_layout_declare_buffer(s->l, rank, b, name, dt, nd, ext), RESHARD_OK);
    return b;
}

static void src_rows(side_t *s, const qt_t *q, int32_t rank, int64_t r0, int64_t r1, int64_t c0,
                     int64_t c1)
{
    int nd = q->E > 1 ? 3 : 2;
    int64_t off[3] = {0, r0, c0}, ext[3] = {q->E, r1 - r0, c1 - c0};
    add_dense(s, q->id, rank, RESHARD_BF16, nd, off + 3 - nd, ext + 3 - nd);
}

/* A destination fragment of q and its scale fragment (blocks of the box). */
static void dst_rows(side_t *s, const qt_t *q, int32_t rank, int64_t e0, int64_t e1, int64_t r0,
                     int64_t r1, int64_t c0, int64_t c1)
{
    int nd = q->E > 1 ? 3 : 2;
    int64_t off[3] = {e0, r0, c0}, ext[3] = {e1 - e0, r1 - r0, c1 - c0};
    add_dense(s, q->id, rank, RESHARD_FP8_E4M3, nd, off + 3 - nd, ext + 3 - nd);
    int64_t b0 = r0 / q->br, b1 = (r1 + q->br - 1) / q->br, k0 = c0 / q->bc,
            k1 = (c1 + q->bc - 1) / q->bc;
    int64_t so[3] = {e0, b0, k0}, se[3] = {e1 - e0, b1 - b0, k1 - k0};
    add_dense(s, q->sid, rank, q->mx ? RESHARD_UINT8 : RESHARD_FP32, nd, so + 3 - nd, se + 3 - nd);
}

/* The view tensor q_proj [4 heads, 128, 256] on the source: rank r holds
 * heads 2r, 2r+1 interleaved with 64 rows of something else per head
 * (stride of a head: 192 rows), so its rows are two runs. */
static void src_viewed(side_t *s, const qt_t *q, int32_t rank)
{
    int32_t b = s->next[rank]++;
    reshard_fragment_t f = {.tensor = q->id, .rank = rank, .buffer = b};
    f.box.ndim = 3;
    f.box.offset[0] = 2 * rank;
    f.box.extent[0] = 2;
    f.box.extent[1] = 128;
    f.box.extent[2] = 256;
    f.stride[0] = 192 * 256;
    f.stride[1] = 256;
    f.stride[2] = 1;
    assert_int_equal(reshard_layout_add_fragment(s->l, &f), RESHARD_OK);
    int64_t shape[2] = {384, 256};
    assert_int_equal(reshard_layout_declare_buffer(s->l, rank, b, "qkv", RESHARD_BF16, 2, shape),
                     RESHARD_OK);
}

/* q_proj on a destination: every head, columns [c0, c1), and its scales. */
static void dst_viewed(side_t *s, const qt_t *q, int32_t rank, int64_t c0, int64_t c1)
{
    int64_t off[3] = {0, 0, c0}, ext[3] = {4, 128, c1 - c0};
    add_dense(s, q->id, rank, RESHARD_FP8_E4M3, 3, off, ext);
    int64_t so[2] = {0, c0 / 128}, se[2] = {4, (c1 - c0) / 128};
    add_dense(s, q->sid, rank, RESHARD_FP32, 2, so, se);
}

/* Layout pairs: mode 0 sender-side everywhere, 1 receiver-side where it can,
 * 2 mixed (column cuts). */
static void layouts(const cat_t *c, int mode, reshard_layout_t **src, reshard_layout_t **dst)
{
    side_t s = {0}, d = {0};
    assert_int_equal(reshard_layout_create(c->T, &s.l), RESHARD_OK);
    assert_int_equal(reshard_layout_create(c->T, &d.l), RESHARD_OK);
    /* sources on ranks 0, 1 */
    int64_t cut = mode == 0 ? 256 : 200;
    src_rows(&s, &c->w, 0, 0, cut, 0, 260);
    src_rows(&s, &c->w, 1, cut, 300, 0, 260);
    if (mode == 2) {
        src_rows(&s, &c->e, 0, 0, 256, 0, 100);
        src_rows(&s, &c->e, 1, 0, 256, 100, 192);
    } else {
        src_rows(&s, &c->e, 0, 0, mode == 0 ? 128 : 100, 0, 192);
        src_rows(&s, &c->e, 1, mode == 0 ? 128 : 100, 256, 0, 192);
    }
    src_rows(&s, &c->m, 0, 0, 6, 0, mode == 0 ? 64 : 50);
    src_rows(&s, &c->m, 1, 0, 6, mode == 0 ? 64 : 50, 100);
    src_viewed(&s, &c->v, 0);
    src_viewed(&s, &c->v, 1);
    int64_t z = 0, n64 = 64;
    add_dense(&s, c->norm, 0, RESHARD_BF16, 1, &z, &n64);
    /* destinations on ranks 2, 3 (vLLM-like: block-aligned) */
    dst_rows(&d, &c->w, 2, 0, 1, 0, 128, 0, 260);
    dst_rows(&d, &c->w, 3, 0, 1, 128, 300, 0, 260);
    dst_rows(&d, &c->e, 2, 0, 2, 0, 256, 0, 192);
    dst_rows(&d, &c->e, 3, 2, 4, 0, 256, 0, 192);
    dst_rows(&d, &c->m, 2, 0, 1, 0, 3, 0, 100);
    dst_rows(&d, &c->m, 3, 0, 1, 3, 6, 0, 100);
    dst_viewed(&d, &c->v, 2, 0, 128);
    dst_viewed(&d, &c->v, 3, 128, 256);
    add_dense(&d, c->norm, 2, RESHARD_BF16, 1, &z, &n64);
    add_dense(&d, c->norm, 3, RESHARD_BF16, 1, &z, &n64);
    *src = s.l;
    *dst = d.l;
}

/* ---- running it ---------------------------------------------------------- */

typedef struct {
    int32_t rank;
    const reshard_layout_t *src, *dst;
    const reshard_plan_t *shared;
    reshard_inproc_group_t *g;
    reshard_buffer_t sb[MAXB], db[MAXB];
    int32_t nsb, ndb;
    reshard_status_t st;
    char msg[512];
    reshard_exec_stats_t stats;
} job_t;

static void *rank_main(void *arg)
{
    job_t *j = arg;
    reshard_comm_t *comm = NULL;
    reshard_plan_t *plan = NULL;
    j->st = reshard_comm_create_inproc(j->g, j->rank, &comm);
    if (j->st == RESHARD_OK && !j->shared) {
        reshard_plan_params_t p = {.field_mask = 0, .world_size = WORLD, .my_rank = j->rank};
        j->st = reshard_plan_create(j->src, j->dst, &p, &plan);
        if (j->st != RESHARD_OK) {
            snprintf(j->msg, sizeof j->msg, "%s", reshard_last_error());
            reshard_plan_fail(comm, j->st, 10);
            reshard_comm_destroy(comm);
            return NULL;
        }
    }
    if (j->st == RESHARD_OK)
        j->st = reshard_plan_execute(j->shared ? j->shared : plan, comm, j->sb, j->nsb, j->db,
                                     j->ndb, &j->stats);
    if (j->st != RESHARD_OK)
        snprintf(j->msg, sizeof j->msg, "%s", reshard_last_error());
    reshard_plan_destroy(plan);
    reshard_comm_destroy(comm);
    return NULL;
}

static int64_t pos(const reshard_fragment_t *f, const int64_t *idx)
{
    int64_t p = f->base;
    for (int d = 0; d < f->box.ndim; d++)
        p += (idx[d] - f->box.offset[d]) * f->stride[d];
    return p;
}

static bool next_idx(const reshard_box_t *b, int64_t *idx)
{
    for (int d = b->ndim - 1; d >= 0; d--) {
        if (++idx[d] < b->offset[d] + b->extent[d])
            return true;
        idx[d] = b->offset[d];
    }
    return false;
}

static const qt_t *qt_of(const cat_t *c, int32_t t, bool *scale)
{
    const qt_t *all[4] = {&c->w, &c->e, &c->m, &c->v};
    for (int i = 0; i < 4; i++) {
        if (all[i]->id == t || all[i]->sid == t) {
            *scale = all[i]->sid == t;
            return all[i];
        }
    }
    return NULL;
}

/* Flat row-major index of view point idx of tensor t. */
static int64_t flat(const reshard_tensors_t *T, int32_t t, const int64_t *idx)
{
    reshard_tensor_info_t in;
    reshard_tensors_info(T, t, &in);
    int64_t f = 0;
    for (int d = 0; d < in.view_ndim; d++)
        f = f * in.view_shape[d] + idx[d];
    return f;
}

/* Run: fill the sources, execute, compare every destination element and
 * scale with the reference; the destination bytes of ranks 2, 3 are kept in
 * @p keep (concatenated) when not NULL. Returns the summed exec stats. */
static reshard_exec_stats_t run(const cat_t *c, const reshard_layout_t *src,
                                const reshard_layout_t *dst, bool shared, uint8_t **keep,
                                size_t *keep_n)
{
    job_t jobs[WORLD];
    memset(jobs, 0, sizeof jobs);
    reshard_inproc_group_t *g = NULL;
    assert_int_equal(reshard_inproc_group_create(WORLD, &g), RESHARD_OK);
    reshard_plan_t *plan = NULL;
    if (shared) {
        reshard_plan_params_t p = {.world_size = WORLD, .my_rank = RESHARD_ALL_RANKS};
        assert_int_equal(reshard_plan_create(src, dst, &p, &plan), RESHARD_OK);
    }
    for (int32_t r = 0; r < WORLD; r++) {
        job_t *j = &jobs[r];
        *j = (job_t){.rank = r, .src = src, .dst = dst, .shared = plan, .g = g};
        const reshard_layout_t *ls[2] = {src, dst};
        for (int side = 0; side < 2; side++) {
            reshard_buffer_t *bufs = side ? j->db : j->sb;
            int32_t n = reshard_layout_buffer_count(ls[side], r);
            assert_true(n <= MAXB);
            for (int32_t b = 0; b < n; b++) {
                uint64_t bytes = reshard_layout_buffer_bytes(ls[side], r, b);
                bufs[b].ptr = malloc(bytes);
                bufs[b].bytes = bytes;
                memset(bufs[b].ptr, 0xA5, bytes);
            }
            *(side ? &j->ndb : &j->nsb) = n;
        }
    }
    /* fill the sources from the tensors' values */
    for (int64_t i = 0; i < reshard_layout_count(src); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(src, i, &f);
        bool sc;
        const qt_t *q = qt_of(c, f.tensor, &sc);
        const uint16_t *x = q ? q->x : c->normx;
        uint16_t *buf = jobs[f.rank].sb[f.buffer].ptr;
        int64_t idx[RESHARD_MAX_DIMS];
        memcpy(idx, f.box.offset, sizeof idx);
        do
            buf[pos(&f, idx)] = x[flat(c->T, f.tensor, idx)];
        while (next_idx(&f.box, idx));
    }
    pthread_t th[WORLD];
    for (int r = 0; r < WORLD; r++)
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    for (int r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < WORLD; r++)
        if (jobs[r].st != RESHARD_OK)
            print_error("rank %d: %s\n", r, jobs[r].msg);
    for (int r = 0; r < WORLD; r++)
        assert_int_equal(jobs[r].st, RESHARD_OK);
    /* every destination element and scale against the reference */
    int64_t wrong = 0, checked = 0;
    for (int64_t i = 0; i < reshard_layout_count(dst); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(dst, i, &f);
        bool sc = false;
        const qt_t *q = qt_of(c, f.tensor, &sc);
        uint8_t *buf = jobs[f.rank].db[f.buffer].ptr;
        int64_t idx[RESHARD_MAX_DIMS];
        memcpy(idx, f.box.offset, sizeof idx);
        do {
            int64_t k = flat(c->T, f.tensor, idx), p = pos(&f, idx);
            checked++;
            if (!q)
                wrong += ((uint16_t *)(void *)buf)[p] != c->normx[k];
            else if (!sc)
                wrong += buf[p] != q->q[k];
            else if (q->mx)
                wrong += buf[p] != q->s[k];
            else
                wrong += memcmp(buf + 4 * p, q->s + 4 * k, 4) != 0;
        } while (next_idx(&f.box, idx));
    }
    assert_true(checked > 0);
    assert_int_equal(wrong, 0);
    reshard_exec_stats_t sum = {0};
    size_t total = 0;
    for (int r = 0; r < WORLD; r++) {
        sum.bytes_sent_network += jobs[r].stats.bytes_sent_network;
        sum.bytes_recv += jobs[r].stats.bytes_recv;
        sum.bytes_local += jobs[r].stats.bytes_local;
        for (int32_t b = 0; b < jobs[r].ndb; b++)
            total += jobs[r].db[b].bytes;
    }
    if (keep) {
        *keep = malloc(total);
        size_t o = 0;
        for (int r = 0; r < WORLD; r++)
            for (int32_t b = 0; b < jobs[r].ndb; b++) {
                memcpy(*keep + o, jobs[r].db[b].ptr, jobs[r].db[b].bytes);
                o += jobs[r].db[b].bytes;
            }
        *keep_n = total;
    }
    for (int r = 0; r < WORLD; r++) {
        for (int32_t b = 0; b < jobs[r].nsb; b++)
            free(jobs[r].sb[b].ptr);
        for (int32_t b = 0; b < jobs[r].ndb; b++)
            free(jobs[r].db[b].ptr);
    }
    reshard_plan_destroy(plan);
    reshard_inproc_group_destroy(g);
    return sum;
}

static void each_mode(void **state)
{
    (void)state;
    cat_t c;
    cat_init(&c);
    uint8_t *out[3] = {NULL, NULL, NULL};
    size_t n[3] = {0, 0, 0};
    uint64_t net[3];
    for (int mode = 0; mode < 3; mode++) {
        reshard_layout_t *s, *d;
        layouts(&c, mode, &s, &d);
        reshard_plan_t *plan = NULL;
        reshard_plan_params_t p = {.world_size = WORLD, .my_rank = RESHARD_ALL_RANKS};
        assert_int_equal(reshard_plan_create(s, d, &p, &plan), RESHARD_OK);
        reshard_plan_stats_t ps;
        reshard_plan_get_stats(plan, &ps);
        net[mode] = ps.bytes_network;
        reshard_plan_destroy(plan);
        run(&c, s, d, false, &out[mode], &n[mode]);
        run(&c, s, d, true, NULL, NULL);
        reshard_layout_destroy(s);
        reshard_layout_destroy(d);
    }
    /* modes 1 and 2 quantize some blocks on the receiver: bf16 crosses for them */
    assert_true(net[1] > net[0]);
    assert_true(net[2] > net[0]);
    /* the same destination buffers whichever side quantized */
    assert_int_equal(n[0], n[1]);
    assert_int_equal(n[0], n[2]);
    assert_memory_equal(out[0], out[1], n[0]);
    assert_memory_equal(out[0], out[2], n[0]);
    for (int i = 0; i < 3; i++)
        free(out[i]);
    cat_free(&c);
}

/* Sender-side everywhere: the network carries e4m3 bytes and scales, not
 * bf16: the plan's and the measured bytes equal the destination bytes. */
static void wire_bytes(void **state)
{
    (void)state;
    cat_t c;
    cat_init(&c);
    reshard_layout_t *s, *d;
    layouts(&c, 0, &s, &d);
    reshard_plan_t *plan = NULL;
    reshard_plan_params_t p = {.world_size = WORLD, .my_rank = RESHARD_ALL_RANKS};
    assert_int_equal(reshard_plan_create(s, d, &p, &plan), RESHARD_OK);
    reshard_plan_stats_t ps;
    reshard_plan_get_stats(plan, &ps);
    uint64_t want = 0;
    const qt_t *all[4] = {&c.w, &c.e, &c.m, &c.v};
    for (int i = 0; i < 4; i++) {
        int64_t RB = (all[i]->R + all[i]->br - 1) / all[i]->br,
                CB = (all[i]->C + all[i]->bc - 1) / all[i]->bc;
        want += (uint64_t)(all[i]->E * all[i]->R * all[i]->C) +
                (uint64_t)(all[i]->E * RB * CB) * (all[i]->mx ? 1u : 4u);
    }
    want += 2 * 64 * 2; /* norm, bf16, to both */
    assert_int_equal(ps.bytes_network, want);
    reshard_plan_destroy(plan); /* an unnamed plan runs alone of its inputs */
    reshard_exec_stats_t st = run(&c, s, d, true, NULL, NULL);
    assert_int_equal(st.bytes_sent_network, want);
    reshard_layout_destroy(s);
    reshard_layout_destroy(d);
    cat_free(&c);
}

static void expect_refused(const cat_t *c, reshard_layout_t *s, reshard_layout_t *d,
                           reshard_status_t want, const char *needle)
{
    (void)c;
    reshard_plan_t *plan = NULL;
    reshard_plan_params_t p = {.world_size = WORLD, .my_rank = RESHARD_ALL_RANKS};
    reshard_status_t st = reshard_plan_create(s, d, &p, &plan);
    if (st != want || !strstr(reshard_last_error(), needle))
        print_error("got %s: %s\n", reshard_status_string(st), reshard_last_error());
    assert_int_equal(st, want);
    assert_non_null(strstr(reshard_last_error(), needle));
    assert_null(plan);
    reshard_layout_destroy(s);
    reshard_layout_destroy(d);
}

/* Empty source and destination layouts over the catalogue. */
static void fresh(const cat_t *c, side_t *s, side_t *d)
{
    memset(s, 0, sizeof *s);
    memset(d, 0, sizeof *d);
    assert_int_equal(reshard_layout_create(c->T, &s->l), RESHARD_OK);
    assert_int_equal(reshard_layout_create(c->T, &d->l), RESHARD_OK);
}

static void refused(void **state)
{
    (void)state;
    cat_t c;
    cat_init(&c);
    /* both sides cut the block rows [128, 256) of w */
    side_t s, d;
    fresh(&c, &s, &d);
    src_rows(&s, &c.w, 0, 0, 200, 0, 260);
    src_rows(&s, &c.w, 1, 200, 300, 0, 260);
    dst_rows(&d, &c.w, 2, 0, 1, 0, 192, 0, 260);
    dst_rows(&d, &c.w, 3, 0, 1, 192, 300, 0, 260);
    expect_refused(&c, s.l, d.l, RESHARD_ERR_CONFIG, "tensor w, rank 2, box [0:192, 0:260]");
    /* a destination block without its scale on that rank */
    fresh(&c, &s, &d);
    src_rows(&s, &c.w, 0, 0, 300, 0, 260);
    int64_t off[2] = {0, 0}, ext[2] = {300, 260}, so[2] = {0, 0}, se[2] = {2, 3};
    add_dense(&d, c.w.id, 2, RESHARD_FP8_E4M3, 2, off, ext);
    add_dense(&d, c.w.sid, 2, RESHARD_FP32, 2, so, se); /* block row 2 missing */
    expect_refused(&c, s.l, d.l, RESHARD_ERR_UNCOVERED, "scale tensor w_scale_inv");
    /* a source fragment of a scale tensor */
    fresh(&c, &s, &d);
    src_rows(&s, &c.w, 0, 0, 300, 0, 260);
    int64_t se3[2] = {3, 3};
    add_dense(&s, c.w.sid, 0, RESHARD_FP32, 2, so, se3);
    dst_rows(&d, &c.w, 2, 0, 1, 0, 300, 0, 260);
    expect_refused(&c, s.l, d.l, RESHARD_ERR_INVALID_ARG, "a source fragment of a scale tensor");
    /* wrong scale shape and dtype at marking */
    int64_t bad[2] = {2, 3};
    int32_t id1, id2, id3;
    int64_t shape[2] = {300, 260};
    assert_int_equal(reshard_tensors_add(c.T, "x", RESHARD_BF16, 2, shape, 0, NULL, &id1),
                     RESHARD_OK);
    assert_int_equal(reshard_tensors_add(c.T, "x_s", RESHARD_FP32, 2, bad, 0, NULL, &id2),
                     RESHARD_OK);
    assert_int_equal(reshard_tensors_add(c.T, "x_s16", RESHARD_BF16, 2, se3, 0, NULL, &id3),
                     RESHARD_OK);
    reshard_quant_t m = {RESHARD_QUANT_FP8_BLOCK, id2, 0};
    assert_int_equal(reshard_tensors_set_quant(c.T, id1, &m), RESHARD_ERR_SHAPE);
    assert_non_null(strstr(reshard_last_error(), "x_s does not have the shape [3, 3]"));
    m.scale_tensor = id3;
    assert_int_equal(reshard_tensors_set_quant(c.T, id1, &m), RESHARD_ERR_DTYPE);
    assert_non_null(strstr(reshard_last_error(), "is bf16, not fp32"));
    cat_free(&c);
}

/* Run with own-rank plans and with one shared plan, then free the layouts. */
static void run_both(const cat_t *c, side_t *s, side_t *d)
{
    run(c, s->l, d->l, false, NULL, NULL);
    run(c, s->l, d->l, true, NULL, NULL);
    reshard_layout_destroy(s->l);
    reshard_layout_destroy(d->l);
}

/* Two destination replicas of w on one rank (two buffers each for the data
 * and the scales, as two vLLM DP replicas placed on rank 2), sender-side
 * (mode 0) and with receiver-side block rows (mode 1): every buffer of both
 * replicas gets its e4m3 bytes and scales. */
static void replicas_one_rank(void **state)
{
    (void)state;
    cat_t c;
    cat_init(&c);
    for (int mode = 0; mode < 2; mode++) {
        side_t s, d;
        fresh(&c, &s, &d);
        int64_t cut = mode == 0 ? 256 : 200;
        src_rows(&s, &c.w, 0, 0, cut, 0, 260);
        src_rows(&s, &c.w, 1, cut, 300, 0, 260);
        dst_rows(&d, &c.w, 2, 0, 1, 0, 300, 0, 260);
        dst_rows(&d, &c.w, 2, 0, 1, 0, 300, 0, 260);
        dst_rows(&d, &c.w, 3, 0, 1, 0, 128, 0, 260);
        dst_rows(&d, &c.w, 3, 0, 1, 128, 300, 0, 260);
        assert_int_equal(reshard_layout_buffer_count(d.l, 2), 4);
        run_both(&c, &s, &d);
    }
    cat_free(&c);
}

/* A destination rank holding the rows of w in two buffers cut inside a
 * block row ([0, 64) and [64, 300)) with one scale buffer for all blocks:
 * the blocks of row 0 are sender-side (rank 0 holds w whole) and their
 * scales are written once, not declared twice. */
static void dest_cuts_sender_block(void **state)
{
    (void)state;
    cat_t c;
    cat_init(&c);
    side_t s, d;
    fresh(&c, &s, &d);
    src_rows(&s, &c.w, 0, 0, 300, 0, 260);
    int64_t o1[2] = {0, 0}, e1[2] = {64, 260}, o2[2] = {64, 0}, e2[2] = {236, 260};
    int64_t so[2] = {0, 0}, se[2] = {3, 3};
    add_dense(&d, c.w.id, 2, RESHARD_FP8_E4M3, 2, o1, e1);
    add_dense(&d, c.w.id, 2, RESHARD_FP8_E4M3, 2, o2, e2);
    add_dense(&d, c.w.sid, 2, RESHARD_FP32, 2, so, se);
    dst_rows(&d, &c.w, 3, 0, 1, 0, 300, 0, 260);
    run_both(&c, &s, &d);
    cat_free(&c);
}

/* Undeclared buffers: a destination buffer of w (its layout holds w's
 * scales) is sized as e4m3, 1 byte an element; a source buffer of w as
 * bf16; and the refit into buffers of exactly those sizes is right. */
static void undeclared_sizes(void **state)
{
    (void)state;
    cat_t c;
    cat_init(&c);
    side_t s, d;
    fresh(&c, &s, &d);
    int64_t o[2] = {0, 0}, e[2] = {300, 260}, se[2] = {3, 3}, e1[2] = {128, 260}, o2[2] = {128, 0},
            e2[2] = {172, 260};
    int32_t sb = add_dense(&s, c.w.id, 0, UNDECLARED, 2, o, e);
    int32_t db = add_dense(&d, c.w.id, 2, UNDECLARED, 2, o, e);
    int32_t ds = add_dense(&d, c.w.sid, 2, UNDECLARED, 2, o, se);
    add_dense(&d, c.w.id, 3, UNDECLARED, 2, o, e1);
    add_dense(&d, c.w.id, 3, UNDECLARED, 2, o2, e2);
    add_dense(&d, c.w.sid, 3, UNDECLARED, 2, o, se);
    assert_int_equal(reshard_layout_buffer_bytes(s.l, 0, sb), 300 * 260 * 2);
    assert_int_equal(reshard_layout_buffer_bytes(d.l, 2, db), 300 * 260);
    assert_int_equal(reshard_layout_buffer_bytes(d.l, 2, ds), 9 * 4);
    assert_int_equal(reshard_layout_buffer_bytes(d.l, 3, 1), 172 * 260);
    run(&c, s.l, d.l, false, NULL, NULL);
    reshard_layout_destroy(s.l);
    reshard_layout_destroy(d.l);
    cat_free(&c);
}

/* Source scratch holds only what the rank's plan quantizes: rank 0 holds a
 * replica of w it never sends (rank 2 holds w itself and copies it
 * locally) and experts.w13, which it sends to rank 3. Rank 0's scratch is
 * e's e4m3 bytes and scales alone, in its own plan and in the shared one,
 * and the refit (e's scratch moved to offset 0) is right. */
static void scratch_what_is_sent(void **state)
{
    (void)state;
    cat_t c;
    cat_init(&c);
    side_t s, d;
    fresh(&c, &s, &d);
    src_rows(&s, &c.w, 0, 0, 300, 0, 260);
    src_rows(&s, &c.e, 0, 0, 256, 0, 192);
    src_rows(&s, &c.w, 2, 0, 300, 0, 260);
    dst_rows(&d, &c.w, 2, 0, 1, 0, 300, 0, 260);
    dst_rows(&d, &c.e, 3, 0, 4, 0, 256, 0, 192);
    uint64_t eq = 4 * 256 * 192, es = 4 * 2 * 2 * 4;
    int32_t mes[3] = {RESHARD_ALL_RANKS, 0, 2};
    for (int i = 0; i < 3; i++) {
        int32_t me = mes[i];
        reshard_plan_params_t p = {.world_size = WORLD, .my_rank = me};
        reshard_plan_t *plan = NULL;
        assert_int_equal(reshard_plan_create(s.l, d.l, &p, &plan), RESHARD_OK);
        if (me != 2) {
            assert_int_equal(reshard_plan_pair_bytes(plan, 0, 2), 0);
            assert_int_equal(plan->quant->src_q_bytes[0], eq);
            assert_int_equal(plan->quant->src_s_bytes[0], es);
        }
        if (me != 0) {
            assert_int_equal(plan->quant->src_q_bytes[2], 300 * 260);
            assert_int_equal(plan->quant->src_s_bytes[2], 9 * 4);
        }
        assert_int_equal(plan->quant->src_q_bytes[1], 0);
        reshard_plan_destroy(plan);
    }
    run_both(&c, &s, &d);
    cat_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_mode),
        cmocka_unit_test(wire_bytes),
        cmocka_unit_test(refused),
        cmocka_unit_test(replicas_one_rank),
        cmocka_unit_test(dest_cuts_sender_block),
        cmocka_unit_test(undeclared_sizes),
        cmocka_unit_test(scratch_what_is_sent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
