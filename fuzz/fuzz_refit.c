/*
 * Fuzz target (structure-aware): bytes decode into a small catalogue and two
 * layouts (DTensor meshes and placements, raw fragments with any strides),
 * which are planned globally and per rank and executed in-process, one thread
 * per rank. Every destination element is then checked against a value the
 * target computes itself from (tensor id, flat index) — not with the
 * library's verifier — and every destination byte no fragment covers must
 * still hold the sentinel.
 *
 * Invariants checked (abort = finding):
 *   - a refused plan or add has a message;
 *   - when the global plan succeeds, every rank's own plan succeeds;
 *   - execution returns OK on every rank;
 *   - every destination element is right, every other byte untouched.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_WORLD 4
#define MAX_TENSORS 3
#define MAX_BUFS 8
#define MAX_BUF_BYTES (1u << 16)

typedef struct {
    const uint8_t *p;
    size_t n, i;
} rd_t;

static unsigned u8(rd_t *r)
{
    return r->i < r->n ? r->p[r->i++] : 0;
}

static int64_t pick(rd_t *r, int64_t k)
{
    return k > 0 ? (int64_t)(u8(r) % (unsigned)k) : 0;
}

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_refit: %s (last error: %s)\n", what, reshard_last_error());
    abort();
}

/* The value of element @p flat of tensor @p t: a 64-bit mix, truncated. */
static uint64_t value(int32_t t, int64_t flat)
{
    uint64_t x = (uint64_t)flat * 0x9E3779B97F4A7C15ull + (uint64_t)t * 0xD1B54A32D192ED03ull + 1;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 29);
}

/* Position of element idx of fragment f (elements), or -1 past the cap. */
static int64_t position(const reshard_fragment_t *f, const int64_t *idx)
{
    int64_t p = f->base;
    for (int d = 0; d < f->box.ndim; d++) {
        int64_t i = idx[d] - f->box.offset[d];
        if (i && f->stride[d] > (INT64_MAX / 4) / i)
            return -1;
        p += i * f->stride[d];
        if (p > INT64_MAX / 4)
            return -1;
    }
    return p;
}

/* Advance idx through the box in row-major order; false when done. */
static int next_index(const reshard_box_t *b, int64_t *idx)
{
    for (int d = b->ndim - 1; d >= 0; d--) {
        if (++idx[d] < b->offset[d] + b->extent[d])
            return 1;
        idx[d] = b->offset[d];
    }
    return 0;
}

typedef struct {
    int n;
    reshard_tensor_info_t info[MAX_TENSORS];
} cat_t;

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Whether two elements of one fragment share a position (its strides alias). */
static int self_aliasing(const reshard_fragment_t *f)
{
    int64_t n = 1;
    for (int d = 0; d < f->box.ndim; d++)
        n *= f->box.extent[d];
    int64_t *pos = malloc((size_t)n * sizeof *pos), k = 0, idx[RESHARD_MAX_DIMS];
    if (!pos)
        fail("out of memory");
    memcpy(idx, f->box.offset, sizeof idx);
    do
        pos[k++] = position(f, idx);
    while (next_index(&f->box, idx));
    qsort(pos, (size_t)n, sizeof *pos, cmp64);
    int alias = 0;
    for (k = 1; k < n && !alias; k++)
        alias = pos[k] == pos[k - 1] && pos[k] >= 0;
    free(pos);
    return alias;
}

static void check_no_aliasing(const reshard_layout_t *l, const char *side)
{
    for (int64_t i = 0; i < reshard_layout_count(l); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(l, i, &f);
        if (self_aliasing(&f)) {
            fprintf(stderr, "%s fragment %lld (tensor %d, rank %d)\n", side, (long long)i, f.tensor,
                    f.rank);
            fail("a plan accepted a fragment whose strides make two elements share a position");
        }
    }
}

static int64_t flat_index(const reshard_tensor_info_t *t, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < t->view_ndim; d++)
        f = f * t->view_shape[d] + idx[d];
    return f;
}

static void add_dtensor(rd_t *r, reshard_layout_t *l, int32_t t, const reshard_tensor_info_t *ti,
                        int32_t world)
{
    reshard_mesh_t mesh = {0};
    int32_t perm[MAX_WORLD];
    for (int i = 0; i < world; i++)
        perm[i] = i;
    for (int i = world - 1; i > 0; i--) {
        int j = (int)pick(r, i + 1);
        int32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    mesh.ndim = 1 + (int)pick(r, 2);
    int64_t prod = 1;
    for (int d = 0; d < mesh.ndim; d++) {
        mesh.shape[d] = 1 + pick(r, world);
        if (prod * mesh.shape[d] > world)
            mesh.shape[d] = 1;
        prod *= mesh.shape[d];
    }
    mesh.ranks = perm;
    reshard_placement_t pl[RESHARD_MAX_DIMS];
    for (int d = 0; d < mesh.ndim; d++) {
        pl[d].kind = (reshard_placement_kind_t)pick(r, 3);
        pl[d].dim = (int)pick(r, ti->view_ndim);
        pl[d].split_factor = 1 + (int)pick(r, 3);
    }
    unsigned sel = u8(r);
    int32_t buffer = sel < 200 ? t : (int32_t)pick(r, MAX_BUFS);
    int64_t base = sel < 200 ? 0 : pick(r, 64);
    if (reshard_layout_add_dtensor(l, t, &mesh, pl, buffer, base) != RESHARD_OK &&
        !*reshard_last_error())
        fail("add_dtensor refused without a message");
}

static void add_raw(rd_t *r, reshard_layout_t *l, int32_t t, const reshard_tensor_info_t *ti,
                    int32_t world)
{
    static const int64_t huge[] = {INT64_MAX, INT64_MAX / 16, (int64_t)1 << 40, (int64_t)1 << 20};
    int nf = 1 + (int)pick(r, 4);
    for (int k = 0; k < nf; k++) {
        reshard_fragment_t f;
        memset(&f, 0, sizeof f);
        f.tensor = t;
        f.rank = (int32_t)pick(r, world + (u8(r) == 0xFF)); /* rarely out of range */
        f.buffer = (int32_t)pick(r, MAX_BUFS);
        f.base = pick(r, 64);
        f.box.ndim = ti->view_ndim;
        for (int d = 0; d < f.box.ndim; d++) {
            f.box.offset[d] = pick(r, ti->view_shape[d]);
            f.box.extent[d] = 1 + pick(r, ti->view_shape[d] - f.box.offset[d]);
        }
        unsigned mode = (unsigned)pick(r, 4);
        int64_t s = 1;
        for (int d = f.box.ndim - 1; d >= 0; d--) {
            if (mode == 2)
                f.stride[d] = pick(r, 16);
            else if (mode == 3)
                f.stride[d] = (u8(r) & 1) ? huge[pick(r, 4)] : pick(r, 16);
            else {
                f.stride[d] = s;
                s *= f.box.extent[d] + (mode == 1 ? pick(r, 3) : 0);
            }
        }
        if (reshard_layout_add_fragment(l, &f) != RESHARD_OK && !*reshard_last_error())
            fail("add_fragment refused without a message");
    }
}

/* Dim 0 cut into pieces at random ranks, each in its own contiguous buffer. */
static void add_cover(rd_t *r, reshard_layout_t *l, int32_t t, const reshard_tensor_info_t *ti,
                      int32_t world)
{
    int64_t lo = 0, n0 = ti->view_shape[0];
    while (lo < n0) {
        reshard_fragment_t f;
        memset(&f, 0, sizeof f);
        f.tensor = t;
        f.rank = (int32_t)pick(r, world);
        f.buffer = MAX_BUFS + t;
        f.box.ndim = ti->view_ndim;
        f.box.offset[0] = lo;
        f.box.extent[0] = 1 + pick(r, n0 - lo);
        for (int d = 1; d < f.box.ndim; d++)
            f.box.extent[d] = ti->view_shape[d];
        int64_t s = 1;
        for (int d = f.box.ndim - 1; d >= 0; d--) {
            f.stride[d] = s;
            s *= f.box.extent[d];
        }
        f.base = lo * (s / f.box.extent[0]); /* where a whole tensor would keep it */
        lo += f.box.extent[0];
        if (reshard_layout_add_fragment(l, &f) != RESHARD_OK)
            fail("a plain row block was refused");
    }
}

static reshard_layout_t *decode_layout(rd_t *r, const reshard_tensors_t *ts, const cat_t *cat,
                                       int32_t world)
{
    reshard_layout_t *l = NULL;
    if (reshard_layout_create(ts, &l) != RESHARD_OK)
        fail("reshard_layout_create");
    for (int32_t t = 0; t < cat->n; t++) {
        switch (pick(r, 4)) {
        case 0:
        case 1:
            add_dtensor(r, l, t, &cat->info[t], world);
            break;
        case 2:
            add_raw(r, l, t, &cat->info[t], world);
            break;
        default:
            add_cover(r, l, t, &cat->info[t], world);
        }
    }
    return l;
}

/* Per rank and buffer id, the bytes a layout's fragments reach (computed here). */
typedef struct {
    uint64_t bytes[MAX_WORLD][MAX_BUFS + MAX_TENSORS];
    int32_t nbuf[MAX_WORLD];
} sizes_t;

static int layout_sizes(const reshard_layout_t *l, const cat_t *cat, sizes_t *s)
{
    memset(s, 0, sizeof *s);
    for (int64_t i = 0; i < reshard_layout_count(l); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(l, i, &f);
        int64_t last[RESHARD_MAX_DIMS];
        for (int d = 0; d < f.box.ndim; d++)
            last[d] = f.box.offset[d] + f.box.extent[d] - 1;
        int64_t p = position(&f, last);
        size_t es = reshard_dtype_size(cat->info[f.tensor].dtype);
        if (p < 0 || (uint64_t)(p + 1) * es > MAX_BUF_BYTES || f.rank >= MAX_WORLD)
            return 0;
        uint64_t end = (uint64_t)(p + 1) * es;
        if (end > s->bytes[f.rank][f.buffer])
            s->bytes[f.rank][f.buffer] = end;
        if (f.buffer + 1 > s->nbuf[f.rank])
            s->nbuf[f.rank] = f.buffer + 1;
    }
    return 1;
}

typedef struct {
    const reshard_plan_t *plan;
    reshard_inproc_group_t *group;
    int32_t rank;
    reshard_buffer_t *src, *dst;
    int32_t nsrc, ndst;
    reshard_status_t st;
    char err[512];
} job_t;

static void *run_rank(void *arg)
{
    job_t *j = arg;
    reshard_comm_t *c = NULL;
    j->st = reshard_comm_create_inproc(j->group, j->rank, &c);
    if (j->st == RESHARD_OK)
        j->st = reshard_plan_execute(j->plan, c, j->src, j->nsrc, j->dst, j->ndst, NULL);
    snprintf(j->err, sizeof j->err, "%s", reshard_last_error());
    reshard_comm_destroy(c);
    return NULL;
}

static void store(uint8_t *p, uint64_t v, size_t es)
{
    for (size_t b = 0; b < es; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static int holds(const uint8_t *p, uint64_t v, size_t es)
{
    for (size_t b = 0; b < es; b++)
        if (p[b] != (uint8_t)(v >> (8 * b)))
            return 0;
    return 1;
}

/* Write (or check, when @p check) every element of @p rank's fragments; on
 * check, mark the bytes covered in @p cover. Returns the wrong elements. */
static int64_t walk(const reshard_layout_t *l, const cat_t *cat, int32_t rank,
                    reshard_buffer_t *bufs, int check, uint8_t **cover)
{
    int64_t wrong = 0;
    for (int64_t i = 0; i < reshard_layout_count(l); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(l, i, &f);
        if (f.rank != rank)
            continue;
        const reshard_tensor_info_t *ti = &cat->info[f.tensor];
        size_t es = reshard_dtype_size(ti->dtype);
        int64_t idx[RESHARD_MAX_DIMS];
        memcpy(idx, f.box.offset, sizeof idx);
        do {
            uint8_t *at = (uint8_t *)bufs[f.buffer].ptr + (size_t)position(&f, idx) * es;
            uint64_t v = value(f.tensor, flat_index(ti, idx));
            if (!check)
                store(at, v, es);
            else {
                wrong += !holds(at, v, es);
                if (cover)
                    memset(cover[f.buffer] + (at - (uint8_t *)bufs[f.buffer].ptr), 1, es);
            }
        } while (next_index(&f.box, idx));
    }
    return wrong;
}

static void alloc_bufs(const sizes_t *s, int32_t rank, reshard_buffer_t *b, uint8_t fill)
{
    for (int32_t i = 0; i < s->nbuf[rank]; i++) {
        b[i].bytes = s->bytes[rank][i];
        b[i].ptr = b[i].bytes ? malloc(b[i].bytes) : NULL;
        if (b[i].ptr)
            memset(b[i].ptr, fill, b[i].bytes);
    }
}

static void execute_and_check(const reshard_layout_t *src, const reshard_layout_t *dst,
                              const cat_t *cat, int32_t world, reshard_plan_t *global,
                              reshard_plan_t **mine, int use_global)
{
    sizes_t ss, ds;
    if (!layout_sizes(src, cat, &ss) || !layout_sizes(dst, cat, &ds))
        return; /* too large to run here */
    reshard_buffer_t sb[MAX_WORLD][MAX_BUFS + MAX_TENSORS], db[MAX_WORLD][MAX_BUFS + MAX_TENSORS];
    memset(sb, 0, sizeof sb);
    memset(db, 0, sizeof db);
    int consistent = 1;
    for (int32_t r = 0; r < world; r++) {
        alloc_bufs(&ss, r, sb[r], 0x5A);
        alloc_bufs(&ds, r, db[r], RESHARD_SENTINEL_BYTE);
        walk(src, cat, r, sb[r], 0, NULL);
    }
    /* Two source fragments sharing a position with different elements leave
     * the sources ambiguous; such inputs only have to run without a fault. */
    for (int32_t r = 0; r < world; r++)
        consistent &= walk(src, cat, r, sb[r], 1, NULL) == 0;

    reshard_inproc_group_t *g = NULL;
    if (reshard_inproc_group_create(world, &g) != RESHARD_OK)
        fail("reshard_inproc_group_create");
    job_t jobs[MAX_WORLD];
    pthread_t th[MAX_WORLD];
    for (int32_t r = 0; r < world; r++) {
        jobs[r] = (job_t){.plan = use_global ? global : mine[r],
                          .group = g,
                          .rank = r,
                          .src = sb[r],
                          .nsrc = ss.nbuf[r],
                          .dst = db[r],
                          .ndst = ds.nbuf[r]};
        if (pthread_create(&th[r], NULL, run_rank, &jobs[r]))
            fail("pthread_create");
    }
    for (int32_t r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    reshard_inproc_group_destroy(g);
    for (int32_t r = 0; r < world; r++)
        if (jobs[r].st != RESHARD_OK) {
            fprintf(stderr, "rank %d: %s: %s\n", r, reshard_status_string(jobs[r].st), jobs[r].err);
            fail("execute failed after a successful plan");
        }
    for (int32_t r = 0; r < world && consistent; r++) {
        uint8_t *cover[MAX_BUFS + MAX_TENSORS] = {0};
        for (int32_t b = 0; b < ds.nbuf[r]; b++)
            cover[b] = calloc(1, db[r][b].bytes + 1);
        if (walk(dst, cat, r, db[r], 1, cover)) {
            fprintf(stderr, "rank %d: wrong destination elements\n", r);
            fail("wrong element after a successful execute");
        }
        for (int32_t b = 0; b < ds.nbuf[r]; b++)
            for (uint64_t k = 0; k < db[r][b].bytes; k++)
                if (!cover[b][k] && ((uint8_t *)db[r][b].ptr)[k] != RESHARD_SENTINEL_BYTE) {
                    fprintf(stderr, "rank %d buffer %d byte %llu\n", r, b, (unsigned long long)k);
                    fail("a byte no destination fragment covers was written");
                }
        for (int32_t b = 0; b < ds.nbuf[r]; b++)
            free(cover[b]);
    }
    for (int32_t r = 0; r < world; r++)
        for (int32_t b = 0; b < MAX_BUFS + MAX_TENSORS; b++) {
            free(sb[r][b].ptr);
            free(db[r][b].ptr);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd_t r = {data, size, 0};
    reshard_tensors_t *ts = NULL;
    if (reshard_tensors_create(&ts) != RESHARD_OK)
        fail("reshard_tensors_create");
    cat_t cat = {0};
    cat.n = 1 + (int)pick(&r, MAX_TENSORS);
    for (int t = 0; t < cat.n; t++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", t);
        reshard_dtype_t dt = (reshard_dtype_t)pick(&r, RESHARD_DTYPE_COUNT);
        int ndim = 1 + (int)pick(&r, 3);
        int64_t shape[RESHARD_MAX_DIMS], view[RESHARD_MAX_DIMS];
        for (int d = 0; d < ndim; d++)
            shape[d] = 1 + pick(&r, 6);
        int vndim = 0;
        if ((u8(&r) & 3) == 0 && ndim < 3 && shape[0] % 2 == 0) { /* [2, n/2, ...] view */
            view[0] = 2;
            view[1] = shape[0] / 2;
            for (int d = 1; d < ndim; d++)
                view[d + 1] = shape[d];
            vndim = ndim + 1;
        }
        if (reshard_tensors_add(ts, name, dt, ndim, shape, vndim, view, NULL) != RESHARD_OK)
            fail("reshard_tensors_add");
        reshard_tensors_info(ts, t, &cat.info[t]);
    }
    int32_t world = 1 + (int32_t)pick(&r, MAX_WORLD);
    reshard_layout_t *src = decode_layout(&r, ts, &cat, world);
    reshard_layout_t *dst = decode_layout(&r, ts, &cat, world);

    static const uint64_t staging[] = {4096, 8192, 65536, 1u << 20};
    static const uint64_t relay[] = {0, 256, 4096, UINT64_MAX};
    reshard_plan_params_t pp = {0};
    unsigned opt = u8(&r);
    pp.world_size = world;
    pp.my_rank = RESHARD_ALL_RANKS;
    pp.field_mask = RESHARD_PLAN_PARAM_TIMEOUT | RESHARD_PLAN_PARAM_DOMAIN_SIZE;
    pp.timeout_s = 30;
    pp.domain_size = (int32_t)pick(&r, world + 1);
    if (opt & 1) {
        pp.field_mask |= RESHARD_PLAN_PARAM_STAGING_BYTES;
        pp.staging_bytes = staging[pick(&r, 4)];
    }
    if (opt & 2) {
        pp.field_mask |= RESHARD_PLAN_PARAM_RELAY_BYTES;
        pp.relay_bytes = relay[pick(&r, 4)];
    }
    reshard_plan_t *global = NULL, *mine[MAX_WORLD] = {0};
    reshard_status_t st = reshard_plan_create(src, dst, &pp, &global);
    if (st != RESHARD_OK && !*reshard_last_error())
        fail("plan refused without a message");
    if (st == RESHARD_OK) {
        check_no_aliasing(src, "source");
        check_no_aliasing(dst, "destination");
        for (int32_t k = 0; k < world; k++) {
            pp.my_rank = k;
            if (reshard_plan_create(src, dst, &pp, &mine[k]) != RESHARD_OK)
                fail("a rank's own plan fails where the global plan succeeds");
        }
        execute_and_check(src, dst, &cat, world, global, mine, opt >> 2 & 1);
    }
    for (int32_t k = 0; k < world; k++)
        reshard_plan_destroy(mine[k]);
    reshard_plan_destroy(global);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
    return 0;
}
