/*
 * Quantized destinations (reshard_tensors_set_quant) turned into plain
 * layouts the planner moves bytes for: the "wire" catalogue and layouts.
 *
 * For each quantized tensor T (bf16 at the source, e4m3 + scales S at the
 * destination) the wire catalogue adds three tensors in global coordinates
 * ([E?] rows cols, no view): T's e4m3 data, T's bf16 data and S. Every
 * fragment of T or S is first rewritten in global coordinates (a view
 * fragment becomes one global fragment per run of contiguous rows).
 *   - Source: each bf16 fragment of T stays (as the bf16 wire tensor); the
 *     whole blocks it holds (its region) are also offered as e4m3 data and
 *     scales in a scratch buffer of its rank, quantized there before sending
 *     (a pre step).
 *   - Destination: each fragment of T is cut along the regions' block bounds.
 *     A cell some source region holds is sender-side: the destination's own
 *     e4m3 buffer and scale buffer receive e4m3 data and scales. Any other
 *     cell is receiver-side: it must consist of whole blocks of the
 *     destination fragment; its bf16 lands in a scratch buffer of the
 *     receiver, which quantizes it into its buffers afterwards (a post step).
 * Every decision depends only on the layouts, so every rank makes the same
 * ones, whether it plans for itself or for all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"
#include "plan/quant_wire.h"
#include "util/error.h"

typedef struct {
    reshard_fragment_t *f;
    int64_t n, cap;
} fvec_t;

static int fpush(fvec_t *v, const reshard_fragment_t *f)
{
    if (rs_grow(&v->f, &v->cap, v->n, sizeof *v->f) != 0)
        return -1;
    v->f[v->n++] = *f;
    return 0;
}

typedef struct {
    reshard_box_t *b;
    int64_t n, cap;
} bvec_t;

static int bpush(bvec_t *v, const reshard_box_t *b)
{
    if (rs_grow(&v->b, &v->cap, v->n, sizeof *v->b) != 0)
        return -1;
    v->b[v->n++] = *b;
    return 0;
}

/* *@p out (emptied first) = box @p a minus the boxes @p sub[0, @p n), as
 * disjoint boxes. */
static int minus(bvec_t *out, const reshard_box_t *a, const reshard_box_t *sub, int64_t n)
{
    out->n = 0;
    if (bpush(out, a) != 0)
        return -1;
    bvec_t next = {0};
    for (int64_t k = 0; k < n && out->n; k++) {
        next.n = 0;
        for (int64_t i = 0; i < out->n; i++) {
            reshard_box_t x, rest = out->b[i];
            if (!rs_box_intersect(&rest, &sub[k], &x)) {
                if (bpush(&next, &rest) != 0)
                    goto nomem;
                continue;
            }
            /* the slabs of rest outside x, dim by dim */
            for (int d = 0; d < rest.ndim; d++) {
                int64_t rhi = rest.offset[d] + rest.extent[d], xhi = x.offset[d] + x.extent[d];
                reshard_box_t lo = rest, hi = rest;
                lo.extent[d] = x.offset[d] - rest.offset[d];
                hi.offset[d] = xhi;
                hi.extent[d] = rhi - xhi;
                if ((lo.extent[d] > 0 && bpush(&next, &lo) != 0) ||
                    (hi.extent[d] > 0 && bpush(&next, &hi) != 0))
                    goto nomem;
                rest.offset[d] = x.offset[d];
                rest.extent[d] = x.extent[d];
            }
        }
        bvec_t t = *out;
        *out = next;
        next = t;
    }
    free(next.b);
    return 0;
nomem:
    free(next.b);
    return -1;
}

static int64_t bnumel(const bvec_t *v)
{
    int64_t n = 0;
    for (int64_t i = 0; i < v->n; i++)
        n += rs_box_numel(&v->b[i]);
    return n;
}

/* A quantized tensor: its ids, global shape and block extents per global dim. */
typedef struct {
    int32_t t, s;       /* catalogue ids */
    int32_t wq, wb, ws; /* wire ids: e4m3 data, bf16 data, scales */
    int nd;
    int64_t dims[3], blk[3];
    rs_quant_t q;
    uint32_t ssize;
    fvec_t dst_t, dst_s; /* destination fragments of T and S, global */
    bvec_t *written;     /* per fragment of dst_s: the blocks given a writer so far */
    int64_t pre0, pre1;  /* its pre steps: [pre0, pre1) of qp->pre */
} qt_t;

/* The fragments, in global coordinates ([E?] rows cols) and of wire tensor
 * @p id, holding the elements of fragment @p f of tensor @p t: the view's
 * row dims are merged into runs of rows with one stride. */
static reshard_status_t to_global(const rs_tensor_t *t, const reshard_fragment_t *f, int32_t id,
                                  fvec_t *out)
{
    int vn = t->vndim, ne = t->ndim == 3 ? 1 : 0, last = vn - 2, cd = vn - 1;
    const int64_t *V = t->vshape;
    const reshard_box_t *b = &f->box;
    int64_t P[RESHARD_MAX_DIMS];
    P[last] = 1;
    for (int d = last - 1; d >= ne; d--)
        P[d] = P[d + 1] * V[d + 1];
    int d0 = last;
    int64_t rs = b->extent[last] > 1 ? f->stride[last] : -1;
    while (d0 > ne) {
        bool full = true;
        for (int d = d0; d <= last; d++)
            full = full && b->offset[d] == 0 && b->extent[d] == V[d];
        int d = d0 - 1;
        if (!full || (b->extent[d] > 1 && rs >= 0 && f->stride[d] != rs * P[d]))
            break;
        if (b->extent[d] > 1 && rs < 0)
            rs = f->stride[d] / P[d];
        d0--;
    }
    int64_t idx[RESHARD_MAX_DIMS];
    for (int d = 0; d < vn; d++)
        idx[d] = b->offset[d];
    for (;;) {
        reshard_fragment_t g = {.tensor = id, .rank = f->rank, .buffer = f->buffer};
        g.base = rs_frag_pos(f, idx);
        int k = 0;
        if (ne) {
            g.box.offset[0] = b->offset[0];
            g.box.extent[0] = b->extent[0];
            g.stride[0] = f->stride[0];
            k = 1;
        }
        int64_t row0 = 0;
        for (int d = ne; d <= last; d++)
            row0 += idx[d] * P[d];
        g.box.offset[k] = row0;
        g.box.extent[k] = b->extent[d0] * P[d0];
        g.stride[k] = rs > 0 ? rs : 0;
        g.box.offset[k + 1] = b->offset[cd];
        g.box.extent[k + 1] = b->extent[cd];
        g.stride[k + 1] = f->stride[cd];
        g.box.ndim = k + 2;
        if (fpush(out, &g) != 0)
            return rs_error(RESHARD_ERR_NOMEM, "plan: out of memory quantizing");
        int d = d0 - 1;
        for (; d >= ne; d--) {
            if (++idx[d] < b->offset[d] + b->extent[d])
                break;
            idx[d] = b->offset[d];
        }
        if (d < ne)
            return RESHARD_OK;
    }
}

/* The whole blocks inside element box @p b (false when none). */
static bool region_of(const qt_t *q, const reshard_box_t *b, reshard_box_t *r)
{
    *r = *b;
    for (int d = 0; d < q->nd; d++) {
        int64_t B = q->blk[d], lo = b->offset[d], hi = lo + b->extent[d];
        int64_t a = (lo + B - 1) / B * B, z = hi == q->dims[d] ? hi : hi / B * B;
        if (z <= a)
            return false;
        r->offset[d] = a;
        r->extent[d] = z - a;
    }
    return true;
}

/* The blocks element box @p b touches. */
static reshard_box_t blocks_of(const qt_t *q, const reshard_box_t *b)
{
    reshard_box_t r = *b;
    for (int d = 0; d < q->nd; d++) {
        int64_t B = q->blk[d], lo = b->offset[d] / B,
                hi = (b->offset[d] + b->extent[d] + B - 1) / B;
        r.offset[d] = lo;
        r.extent[d] = hi - lo;
    }
    return r;
}

/* The elements of block box @p b (clipped to the tensor). */
static reshard_box_t elems_of(const qt_t *q, const reshard_box_t *b)
{
    reshard_box_t r = *b;
    for (int d = 0; d < q->nd; d++) {
        int64_t B = q->blk[d], lo = b->offset[d] * B, hi = (b->offset[d] + b->extent[d]) * B;
        r.offset[d] = lo;
        r.extent[d] = (hi < q->dims[d] ? hi : q->dims[d]) - lo;
    }
    return r;
}

/* @p b with the dims past its ndim zeroed: fragments are compared whole
 * (plans made by different ranks must be equal byte for byte). */
static reshard_box_t clean(const reshard_box_t *b)
{
    reshard_box_t r = {.ndim = b->ndim};
    for (int d = 0; d < b->ndim; d++) {
        r.offset[d] = b->offset[d];
        r.extent[d] = b->extent[d];
    }
    return r;
}

/* Fragment @p f restricted to @p box (inside its box), as tensor @p id. */
static reshard_fragment_t sub(const reshard_fragment_t *f, const reshard_box_t *box, int32_t id)
{
    reshard_fragment_t g = *f;
    g.tensor = id;
    g.base = rs_frag_pos(f, box->offset);
    g.box = clean(box);
    return g;
}

/* A dense row-major fragment of @p box at element @p base of @p buffer. */
static reshard_fragment_t dense(int32_t id, int32_t rank, int32_t buffer, const reshard_box_t *box,
                                int64_t base)
{
    reshard_fragment_t g = {
        .tensor = id, .rank = rank, .buffer = buffer, .box = clean(box), .base = base};
    int64_t st = 1;
    for (int d = box->ndim - 1; d >= 0; d--) {
        g.stride[d] = st;
        st *= box->extent[d];
    }
    return g;
}

static int push_step(rs_qstep_t **v, int64_t *n, int64_t *cap, const rs_qstep_t *s)
{
    if (rs_grow(v, cap, *n, sizeof **v) != 0)
        return -1;
    (*v)[(*n)++] = *s;
    return 0;
}

#define NOMEM() rs_error(RESHARD_ERR_NOMEM, "plan: out of memory quantizing")

/* Source side: T's fragments in global coordinates, their regions offered
 * as e4m3 data and scales in the rank's scratch. */
static reshard_status_t wire_source(rs_qplan_t *qp, const rs_tensor_t *t, qt_t *q,
                                    const reshard_fragment_t *f)
{
    fvec_t g = {0};
    reshard_status_t st = to_global(t, f, q->wb, &g);
    for (int64_t i = 0; st == RESHARD_OK && i < g.n; i++) {
        st = reshard_layout_add_fragment(qp->src, &g.f[i]);
        reshard_box_t r;
        if (st != RESHARD_OK || !region_of(q, &g.f[i].box, &r))
            continue;
        int32_t rank = f->rank;
        reshard_box_t rb = blocks_of(q, &r);
        rs_qstep_t s = {.rank = rank,
                        .tensor = q->t,
                        .qtensor = q->wq,
                        .stensor = q->ws,
                        .q = q->q,
                        .src = g.f[i],
                        .box = r};
        s.src.tensor = q->t;
        /* scales of every kind share one scratch: keep fp32 ones aligned */
        qp->src_s_bytes[rank] = (qp->src_s_bytes[rank] + q->ssize - 1) / q->ssize * q->ssize;
        s.dst = dense(q->wq, rank, qp->src_scratch[rank], &r, (int64_t)qp->src_q_bytes[rank]);
        s.scale = dense(q->ws, rank, qp->src_scratch[rank] + 1, &rb,
                        (int64_t)(qp->src_s_bytes[rank] / q->ssize));
        qp->src_q_bytes[rank] += (uint64_t)rs_box_numel(&r);
        qp->src_s_bytes[rank] += (uint64_t)rs_box_numel(&rb) * q->ssize;
        st = reshard_layout_add_fragment(qp->src, &s.dst);
        if (st == RESHARD_OK)
            st = reshard_layout_add_fragment(qp->src, &s.scale);
        if (st == RESHARD_OK && push_step(&qp->pre, &qp->npre, &qp->cpre, &s) != 0)
            st = NOMEM();
    }
    free(g.f);
    return st;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorted distinct cut points of dim @p d inside [lo, hi): the bounds of
 * @p regions' block boxes (and lo, hi). */
static int64_t *cuts(const qt_t *q, const rs_qplan_t *qp, int d, int64_t lo, int64_t hi,
                     int64_t *np)
{
    int64_t n = 0, cap = 2 * (q->pre1 - q->pre0) + 2;
    int64_t *c = malloc((size_t)cap * sizeof *c);
    if (!c)
        return NULL;
    c[n++] = lo;
    c[n++] = hi;
    for (int64_t i = q->pre0; i < q->pre1; i++) {
        reshard_box_t rb = blocks_of(q, &qp->pre[i].box);
        int64_t a = rb.offset[d], z = a + rb.extent[d];
        if (a > lo && a < hi)
            c[n++] = a;
        if (z > lo && z < hi)
            c[n++] = z;
    }
    qsort(c, (size_t)n, sizeof *c, cmp_i64);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (m == 0 || c[i] != c[m - 1])
            c[m++] = c[i];
    *np = m;
    return c;
}

/* Is block box @p cell inside some region of @p q? */
static bool sender_side(const qt_t *q, const rs_qplan_t *qp, const reshard_box_t *cell)
{
    for (int64_t i = q->pre0; i < q->pre1; i++) {
        reshard_box_t rb = blocks_of(q, &qp->pre[i].box);
        if (rs_box_contains(&rb, cell))
            return true;
    }
    return false;
}

/* A post step of @p q: quantize the landed bf16 @p bf over the blocks
 * @p blocks into destination fragment @p g and scale fragment @p s. */
static reshard_status_t post_step(rs_qplan_t *qp, const qt_t *q, const reshard_fragment_t *bf,
                                  const reshard_fragment_t *g, const reshard_fragment_t *s,
                                  const reshard_box_t *blocks)
{
    rs_qstep_t p = {.rank = g->rank,
                    .tensor = q->t,
                    .qtensor = q->wq,
                    .stensor = q->ws,
                    .q = q->q,
                    .src = *bf,
                    .dst = *g,
                    .scale = *s,
                    .box = elems_of(q, blocks)};
    return push_step(&qp->post, &qp->npost, &qp->cpost, &p) != 0 ? NOMEM() : RESHARD_OK;
}

/* One cell (block box @p cell) of destination fragment @p g of T. */
static reshard_status_t wire_cell(rs_qplan_t *qp, const reshard_tensors_t *T, qt_t *q,
                                  const reshard_fragment_t *g, const reshard_box_t *cell)
{
    reshard_box_t whole = elems_of(q, cell), e;
    rs_box_intersect(&whole, &g->box, &e);
    bool snd = sender_side(q, qp, cell);
    int32_t rank = g->rank;
    char bs[256], cs[256];
    if (!snd && !rs_box_contains(&g->box, &whole))
        return rs_error(RESHARD_ERR_CONFIG,
                        "tensor %s, rank %d, box %s: the destination holds part of the blocks %s "
                        "(global [%srows, cols]) and no source fragment holds them whole, so "
                        "neither side can quantize them",
                        T->t[q->t].name, rank, rs_box_str(&g->box, bs, sizeof bs),
                        rs_box_str(&whole, cs, sizeof cs), q->nd == 3 ? "experts, " : "");
    reshard_status_t st = RESHARD_OK;
    reshard_fragment_t bf;
    if (snd) {
        reshard_fragment_t d = sub(g, &e, q->wq);
        st = reshard_layout_add_fragment(qp->dst, &d);
    } else {
        bf = dense(q->wb, rank, qp->dst_scratch[rank], &e, (int64_t)(qp->dst_bf_bytes[rank] / 2));
        qp->dst_bf_bytes[rank] += (uint64_t)rs_box_numel(&e) * 2;
        st = reshard_layout_add_fragment(qp->dst, &bf);
    }
    /* The scale fragments of the rank over the cell (two or more where the
     * rank holds replicas, e.g. DP replicas in one process): together they
     * must cover the cell; each block of each of them is written once,
     * whichever of the rank's fragments of T reaches it first. */
    int64_t covered = 0;
    bvec_t seen = {0}, part = {0}, fresh = {0}, extra = {0};
    for (int64_t i = 0; st == RESHARD_OK && i < q->dst_s.n; i++) {
        const reshard_fragment_t *s = &q->dst_s.f[i];
        reshard_box_t x;
        if (s->rank != rank || !rs_box_intersect(&s->box, cell, &x))
            continue;
        bvec_t *w = &q->written[i];
        if (minus(&part, &x, seen.b, seen.n) != 0 || minus(&fresh, &x, w->b, w->n) != 0 ||
            bpush(&seen, &x) != 0) {
            st = NOMEM();
            break;
        }
        covered += bnumel(&part);
        if (snd) {
            for (int64_t k = 0; st == RESHARD_OK && k < fresh.n; k++) {
                reshard_fragment_t d = sub(s, &fresh.b[k], q->ws);
                st = reshard_layout_add_fragment(qp->dst, &d);
            }
        } else {
            /* the blocks of the cell first reached through s (this fragment of
             * T and s get them), then those of s no step writes yet (this
             * fragment of T gets the same bytes again there) */
            for (int64_t k = 0; st == RESHARD_OK && k < part.n; k++)
                st = post_step(qp, q, &bf, g, s, &part.b[k]);
            for (int64_t k = 0; st == RESHARD_OK && k < fresh.n; k++) {
                if (minus(&extra, &fresh.b[k], part.b, part.n) != 0)
                    st = NOMEM();
                for (int64_t m = 0; st == RESHARD_OK && m < extra.n; m++)
                    st = post_step(qp, q, &bf, g, s, &extra.b[m]);
            }
        }
        for (int64_t k = 0; st == RESHARD_OK && k < fresh.n; k++)
            if (bpush(w, &fresh.b[k]) != 0)
                st = NOMEM();
    }
    free(seen.b);
    free(part.b);
    free(fresh.b);
    free(extra.b);
    if (st == RESHARD_OK && covered != rs_box_numel(cell))
        return rs_error(RESHARD_ERR_UNCOVERED,
                        "tensor %s, rank %d, box %s: the scale tensor %s has no destination "
                        "fragment on rank %d for every block of %s (blocks %s)",
                        T->t[q->t].name, rank, rs_box_str(&g->box, bs, sizeof bs), T->t[q->s].name,
                        rank, rs_box_str(&e, cs, sizeof cs), rs_box_str(cell, (char[256]){0}, 256));
    return st;
}

/* Destination fragment @p g of T (global) cut into cells along the regions. */
static reshard_status_t wire_dest(rs_qplan_t *qp, const reshard_tensors_t *T, qt_t *q,
                                  const reshard_fragment_t *g)
{
    reshard_box_t bb = blocks_of(q, &g->box);
    int64_t *c[3] = {NULL, NULL, NULL}, n[3] = {0, 0, 0};
    reshard_status_t st = RESHARD_OK;
    for (int d = 0; d < q->nd && st == RESHARD_OK; d++)
        if (!(c[d] = cuts(q, qp, d, bb.offset[d], bb.offset[d] + bb.extent[d], &n[d])))
            st = NOMEM();
    int64_t i[3] = {0, 0, 0};
    while (st == RESHARD_OK) {
        reshard_box_t cell = bb;
        for (int d = 0; d < q->nd; d++) {
            cell.offset[d] = c[d][i[d]];
            cell.extent[d] = c[d][i[d] + 1] - c[d][i[d]];
        }
        st = wire_cell(qp, T, q, g, &cell);
        int d = q->nd - 1;
        for (; d >= 0; d--) {
            if (++i[d] < n[d] - 1)
                break;
            i[d] = 0;
        }
        if (d < 0)
            break;
    }
    for (int d = 0; d < 3; d++)
        free(c[d]);
    return st;
}

/* One more than the largest buffer id of each rank (fragments and declarations). */
static void next_ids(const reshard_layout_t *l, int32_t world, int32_t *ids)
{
    for (int64_t i = 0; i < l->n; i++)
        if (l->f[i].buffer + 1 > ids[l->f[i].rank])
            ids[l->f[i].rank] = l->f[i].buffer + 1;
    for (int64_t i = 0; i < l->decls.n; i++) {
        const rs_decl_t *e = &l->decls.e[i];
        if (e->rank < world && e->buffer + 1 > ids[e->rank])
            ids[e->rank] = e->buffer + 1;
    }
}

static reshard_status_t copy_decls(const reshard_layout_t *from, reshard_layout_t *to)
{
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; st == RESHARD_OK && i < from->decls.n; i++) {
        const rs_decl_t *e = &from->decls.e[i];
        st = rs_decl_copy(to, e);
    }
    return st;
}

static const char *mode_name(const reshard_quant_t *m)
{
    if (m->kind == RESHARD_QUANT_MXFP8)
        return "mxfp8 1x32 e8m0";
    return m->pow2_scale ? "fp8 128x128 ue8m0" : "fp8 128x128";
}

/* The wire catalogue: the caller's tensors, then three per quantized one. */
static reshard_status_t wire_catalogue(rs_qplan_t *qp, const reshard_tensors_t *T, qt_t *qs,
                                       int32_t nq)
{
    reshard_status_t st = reshard_tensors_create(&qp->tensors);
    for (int32_t i = 0; st == RESHARD_OK && i < T->n; i++) {
        const rs_tensor_t *t = &T->t[i];
        st = reshard_tensors_add(qp->tensors, t->name, t->dtype, t->ndim, t->shape, t->vndim,
                                 t->vshape, NULL);
    }
    char name[1024];
    for (int32_t k = 0; st == RESHARD_OK && k < nq; k++) {
        qt_t *q = &qs[k];
        const rs_tensor_t *t = &T->t[q->t], *s = &T->t[q->s];
        snprintf(name, sizeof name, "%s [%s]", t->name, mode_name(&t->quant));
        st = reshard_tensors_add(qp->tensors, name, RESHARD_FP8_E4M3, t->ndim, t->shape, 0, NULL,
                                 &q->wq);
        snprintf(name, sizeof name, "%s [bf16 to quantize]", t->name);
        if (st == RESHARD_OK)
            st = reshard_tensors_add(qp->tensors, name, RESHARD_BF16, t->ndim, t->shape, 0, NULL,
                                     &q->wb);
        snprintf(name, sizeof name, "%s [%s]", s->name, mode_name(&t->quant));
        if (st == RESHARD_OK)
            st = reshard_tensors_add(qp->tensors, name, s->dtype, s->ndim, s->shape, 0, NULL,
                                     &q->ws);
    }
    return st;
}

static reshard_status_t build(rs_qplan_t *qp, const reshard_layout_t *src,
                              const reshard_layout_t *dst, qt_t *qs, int32_t nq, const int32_t *qof,
                              const int32_t *sof)
{
    const reshard_tensors_t *T = dst->tensors;
    reshard_status_t st = wire_catalogue(qp, T, qs, nq);
    if (st == RESHARD_OK)
        st = reshard_layout_create(qp->tensors, &qp->src);
    if (st == RESHARD_OK)
        st = reshard_layout_create(qp->tensors, &qp->dst);
    if (st == RESHARD_OK)
        st = copy_decls(src, qp->src);
    if (st == RESHARD_OK)
        st = copy_decls(dst, qp->dst);
    /* source fragments, tensor by tensor so that each one's pre steps are together */
    for (int32_t k = 0; st == RESHARD_OK && k < nq; k++) {
        qs[k].pre0 = qp->npre;
        for (int64_t i = 0; st == RESHARD_OK && i < src->n; i++)
            if (src->f[i].tensor == qs[k].t)
                st = wire_source(qp, &T->t[qs[k].t], &qs[k], &src->f[i]);
        qs[k].pre1 = qp->npre;
    }
    char bs[256];
    for (int64_t i = 0; st == RESHARD_OK && i < src->n; i++) {
        const reshard_fragment_t *f = &src->f[i];
        if (sof[f->tensor] >= 0)
            st = rs_error(RESHARD_ERR_INVALID_ARG,
                          "tensor %s, rank %d, box %s: a source fragment of a scale tensor; "
                          "scales are made by quantizing %s",
                          T->t[f->tensor].name, f->rank, rs_box_str(&f->box, bs, sizeof bs),
                          T->t[qs[sof[f->tensor]].t].name);
        else if (qof[f->tensor] < 0)
            st = reshard_layout_add_fragment(qp->src, f);
    }
    /* destination fragments: the others as they are, T and S collected */
    for (int64_t i = 0; st == RESHARD_OK && i < dst->n; i++) {
        const reshard_fragment_t *f = &dst->f[i];
        int32_t t = f->tensor;
        if (qof[t] >= 0)
            st = to_global(&T->t[t], f, qs[qof[t]].wq, &qs[qof[t]].dst_t);
        else if (sof[t] >= 0)
            st = to_global(&T->t[t], f, qs[sof[t]].ws, &qs[sof[t]].dst_s);
        else
            st = reshard_layout_add_fragment(qp->dst, f);
    }
    for (int32_t k = 0; st == RESHARD_OK && k < nq; k++)
        if (!(qs[k].written = calloc((size_t)qs[k].dst_s.n + 1, sizeof *qs[k].written)))
            st = NOMEM();
    for (int32_t k = 0; st == RESHARD_OK && k < nq; k++)
        for (int64_t i = 0; st == RESHARD_OK && i < qs[k].dst_t.n; i++)
            st = wire_dest(qp, T, &qs[k], &qs[k].dst_t.f[i]);
    /* Scales are made from the weight's blocks on the same rank: a scale
     * element whose block no fragment of the weight holds on that rank would
     * never be written, so it is refused rather than left stale. */
    for (int32_t k = 0; st == RESHARD_OK && k < nq; k++)
        for (int64_t i = 0; st == RESHARD_OK && i < qs[k].dst_s.n; i++) {
            const reshard_fragment_t *f = &qs[k].dst_s.f[i];
            if (bnumel(&qs[k].written[i]) == rs_box_numel(&f->box))
                continue;
            char sb[256];
            st = rs_error(RESHARD_ERR_UNCOVERED,
                          "tensor %s, rank %d, buffer %d, box %s: scale blocks whose weight "
                          "blocks of %s the rank does not hold; a destination holds the "
                          "scales of its own weight blocks only",
                          T->t[qs[k].s].name, f->rank, f->buffer,
                          rs_box_str(&f->box, sb, sizeof sb), T->t[qs[k].t].name);
        }
    return st;
}

reshard_status_t rs_quant_wire(const reshard_layout_t *src, const reshard_layout_t *dst,
                               int32_t world, rs_qplan_t **out)
{
    *out = NULL;
    const reshard_tensors_t *T = dst->tensors;
    int32_t nq = 0;
    for (int32_t i = 0; i < T->n; i++)
        nq += T->t[i].quant.kind != RESHARD_QUANT_NONE;
    if (nq == 0)
        return RESHARD_OK;
    reshard_status_t st = rs_check_catalogues(src->tensors, T);
    if (st == RESHARD_OK)
        st = rs_check_ranks(src, world, "source");
    if (st == RESHARD_OK)
        st = rs_check_ranks(dst, world, "destination");
    if (st != RESHARD_OK)
        return st;
    rs_qplan_t *qp = calloc(1, sizeof *qp);
    qt_t *qs = calloc((size_t)nq, sizeof *qs);
    int32_t *qof = malloc((size_t)T->n * sizeof *qof), *sof = malloc((size_t)T->n * sizeof *sof);
    size_t w = (size_t)world;
    if (qp) {
        qp->world = world;
        qp->src_scratch = calloc(w, sizeof *qp->src_scratch);
        qp->dst_scratch = calloc(w, sizeof *qp->dst_scratch);
        qp->src_q_bytes = calloc(w, sizeof *qp->src_q_bytes);
        qp->src_s_bytes = calloc(w, sizeof *qp->src_s_bytes);
        qp->dst_bf_bytes = calloc(w, sizeof *qp->dst_bf_bytes);
    }
    if (!qp || !qs || !qof || !sof || !qp->src_scratch || !qp->dst_scratch || !qp->src_q_bytes ||
        !qp->src_s_bytes || !qp->dst_bf_bytes)
        st = NOMEM();
    for (int32_t i = 0; st == RESHARD_OK && i < T->n; i++)
        qof[i] = sof[i] = -1;
    for (int32_t i = 0, k = 0; st == RESHARD_OK && i < T->n; i++) {
        const rs_tensor_t *t = &T->t[i];
        if (t->quant.kind == RESHARD_QUANT_NONE)
            continue;
        bool mx = t->quant.kind == RESHARD_QUANT_MXFP8;
        qt_t *q = &qs[k];
        q->t = i;
        q->s = t->quant.scale_tensor;
        q->nd = t->ndim;
        int e = t->ndim == 3;
        for (int d = 0; d < t->ndim; d++)
            q->dims[d] = t->shape[d];
        q->blk[0] = 1;
        q->blk[e] = mx ? 1 : 128;
        q->blk[e + 1] = mx ? 32 : 128;
        q->q = (rs_quant_t){mx ? RS_QUANT_MXFP8 : RS_QUANT_FP8_BLOCK, q->blk[e], q->blk[e + 1],
                            t->quant.pow2_scale != 0};
        q->ssize = rs_quant_scale_size(&q->q);
        qof[i] = k;
        if (sof[q->s] >= 0 || qof[q->s] >= 0)
            st = rs_error(RESHARD_ERR_INVALID_ARG,
                          "tensor %s: its scale tensor %s is also "
                          "quantized or the scale of another tensor",
                          t->name, T->t[q->s].name);
        sof[q->s] = k++;
    }
    if (st == RESHARD_OK) {
        next_ids(src, world, qp->src_scratch);
        next_ids(dst, world, qp->dst_scratch);
        st = build(qp, src, dst, qs, nq, qof, sof);
    }
    for (int32_t k = 0; qs && k < nq; k++) {
        free(qs[k].dst_t.f);
        for (int64_t i = 0; qs[k].written && i < qs[k].dst_s.n; i++)
            free(qs[k].written[i].b);
        free(qs[k].written);
        free(qs[k].dst_s.f);
    }
    free(qs);
    free(qof);
    free(sof);
    if (st != RESHARD_OK) {
        rs_qplan_free(qp);
        return st;
    }
    *out = qp;
    return RESHARD_OK;
}

void rs_qplan_drop_inputs(rs_qplan_t *qp)
{
    if (!qp)
        return;
    reshard_layout_destroy(qp->src);
    reshard_layout_destroy(qp->dst);
    reshard_tensors_destroy(qp->tensors);
    qp->src = qp->dst = NULL;
    qp->tensors = NULL;
}

static int64_t keep_rank(rs_qstep_t *v, int64_t n, int32_t rank)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (v[i].rank == rank)
            v[m++] = v[i];
    return m;
}

void rs_qplan_keep_rank(rs_qplan_t *qp, int32_t rank)
{
    qp->npre = keep_rank(qp->pre, qp->npre, rank);
    qp->npost = keep_rank(qp->post, qp->npost, rank);
}

/* Scratch position of a pre step: rank, then e4m3 or scale offset. */
typedef struct {
    int32_t rank;
    int64_t base;
    int64_t step;
} spos_t;

static int cmp_spos(const void *a, const void *b)
{
    const spos_t *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->base < y->base ? -1 : x->base > y->base;
}

/* The pre step whose scratch fragment is @p f (e4m3 data or scales), or -1. */
static int64_t step_of(const rs_qplan_t *qp, const spos_t *pos[2], const reshard_fragment_t *f)
{
    int32_t id = qp->src_scratch[f->rank];
    if (f->buffer != id && f->buffer != id + 1)
        return -1;
    spos_t key = {f->rank, f->base, 0};
    const spos_t *h = bsearch(&key, pos[f->buffer - id], (size_t)qp->npre, sizeof key, cmp_spos);
    return h ? h->step : -1;
}

reshard_status_t rs_qplan_pack_scratch(reshard_plan_t *plan)
{
    rs_qplan_t *qp = plan->quant;
    reshard_layout_t *src = plan->own_src;
    int64_t np = qp->npre;
    spos_t *pos[2] = {malloc((size_t)(np + 1) * sizeof(spos_t)),
                      malloc((size_t)(np + 1) * sizeof(spos_t))};
    uint8_t *used = calloc((size_t)np + 1, 1);
    int32_t *map = malloc((size_t)(src->n + 1) * sizeof *map);
    if (!pos[0] || !pos[1] || !used || !map) {
        free(pos[0]);
        free(pos[1]);
        free(used);
        free(map);
        return NOMEM();
    }
    for (int64_t i = 0; i < np; i++) {
        pos[0][i] = (spos_t){qp->pre[i].rank, qp->pre[i].dst.base, i};
        pos[1][i] = (spos_t){qp->pre[i].rank, qp->pre[i].scale.base, i};
    }
    qsort(pos[0], (size_t)np, sizeof(spos_t), cmp_spos);
    qsort(pos[1], (size_t)np, sizeof(spos_t), cmp_spos);
    const spos_t *cpos[2] = {pos[0], pos[1]};
    /* a region is used when a piece sends (or copies) its e4m3 data or scales */
    for (int64_t i = 0; i < plan->npieces; i++) {
        const rs_piece_t *p = &plan->pieces[i];
        int64_t k = p->stage == RS_STAGE_DIRECT ? step_of(qp, cpos, &src->f[p->from_frag]) : -1;
        if (k >= 0)
            used[k] = 1;
    }
    /* the used regions packed in step order (each rank's offsets ascend) */
    for (int32_t r = 0; r < qp->world; r++)
        qp->src_q_bytes[r] = qp->src_s_bytes[r] = 0;
    int64_t *nq = malloc((size_t)(np + 1) * sizeof *nq),
            *ns = malloc((size_t)(np + 1) * sizeof *ns);
    reshard_status_t st = nq && ns ? RESHARD_OK : NOMEM();
    for (int64_t i = 0; st == RESHARD_OK && i < np; i++) {
        const rs_qstep_t *s = &qp->pre[i];
        if (!used[i])
            continue;
        uint32_t z = rs_quant_scale_size(&s->q);
        uint64_t *qb = &qp->src_q_bytes[s->rank], *sb = &qp->src_s_bytes[s->rank];
        *sb = (*sb + z - 1) / z * z;
        nq[i] = (int64_t)*qb;
        ns[i] = (int64_t)(*sb / z);
        *qb += (uint64_t)rs_box_numel(&s->box);
        *sb += (uint64_t)rs_box_numel(&s->scale.box) * z;
    }
    /* the scratch fragments: used ones moved, the others dropped */
    int64_t m = 0;
    for (int64_t i = 0; st == RESHARD_OK && i < src->n; i++) {
        reshard_fragment_t f = src->f[i];
        int64_t k = step_of(qp, cpos, &f);
        map[i] = -1;
        if (k >= 0 && !used[k])
            continue;
        if (k >= 0)
            f.base = f.buffer == qp->src_scratch[f.rank] ? nq[k] : ns[k];
        map[i] = (int32_t)m;
        src->f[m++] = f;
    }
    if (st == RESHARD_OK) {
        src->n = m;
        for (int64_t i = 0; i < plan->npieces; i++)
            if (plan->pieces[i].stage == RS_STAGE_DIRECT)
                plan->pieces[i].from_frag = map[plan->pieces[i].from_frag];
        int64_t n = 0;
        for (int64_t i = 0; i < np; i++) {
            if (!used[i])
                continue;
            rs_qstep_t s = qp->pre[i];
            s.dst.base = nq[i];
            s.scale.base = ns[i];
            qp->pre[n++] = s;
        }
        qp->npre = n;
    }
    free(nq);
    free(ns);
    free(pos[0]);
    free(pos[1]);
    free(used);
    free(map);
    return st;
}

void rs_qplan_free(rs_qplan_t *qp)
{
    if (!qp)
        return;
    rs_qplan_drop_inputs(qp);
    free(qp->pre);
    free(qp->post);
    free(qp->src_scratch);
    free(qp->dst_scratch);
    free(qp->src_q_bytes);
    free(qp->src_s_bytes);
    free(qp->dst_bf_bytes);
    free(qp);
}
