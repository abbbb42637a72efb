/* Step 1: cut each destination fragment along source fragment boundaries. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"
#include "util/error.h"

void rs_cells_free(rs_cells_t *cells)
{
    free(cells->c);
    free(cells->h);
    memset(cells, 0, sizeof *cells);
}

static int push_cell(rs_cells_t *cs, const rs_cell_t *c, const int32_t *holders, int32_t nh)
{
    if (cs->n == cs->cap) {
        int64_t cap = cs->cap ? cs->cap * 2 : 1024;
        rs_cell_t *p = realloc(cs->c, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        cs->c = p;
        cs->cap = cap;
    }
    while (cs->hn + nh > cs->hcap) {
        int64_t cap = cs->hcap ? cs->hcap * 2 : 4096;
        int32_t *p = realloc(cs->h, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        cs->h = p;
        cs->hcap = cap;
    }
    cs->c[cs->n] = *c;
    cs->c[cs->n].holders = cs->hn;
    cs->c[cs->n].nholders = nh;
    memcpy(cs->h + cs->hn, holders, (size_t)nh * sizeof *holders);
    cs->hn += nh;
    cs->n++;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorted unique cut points of dim d inside the destination box. A
 * candidate with the bounds of the one before adds nothing; candidates in
 * ascending, disjoint order along d leave the points sorted, with nothing
 * to sort. */
static int64_t cut_points(const reshard_box_t *dbox, const reshard_box_t *isect, int64_t ncand,
                          int d, int64_t *pts)
{
    int64_t n = 0;
    pts[n++] = dbox->offset[d];
    for (int64_t c = 0; c < ncand; c++) {
        if (c > 0 && isect[c].offset[d] == isect[c - 1].offset[d] &&
            isect[c].extent[d] == isect[c - 1].extent[d])
            continue;
        pts[n++] = isect[c].offset[d];
        pts[n++] = isect[c].offset[d] + isect[c].extent[d];
    }
    pts[n++] = dbox->offset[d] + dbox->extent[d];
    bool sorted = true;
    for (int64_t i = 1; i < n && sorted; i++)
        sorted = pts[i - 1] <= pts[i];
    if (sorted) {
        /* nothing to move */
    } else if (n > 64) {
        qsort(pts, (size_t)n, sizeof *pts, cmp_i64);
    } else {
        for (int64_t i = 1; i < n; i++) { /* usually a few points: insertion sort */
            int64_t x = pts[i], j = i;
            for (; j > 0 && pts[j - 1] > x; j--)
                pts[j] = pts[j - 1];
            pts[j] = x;
        }
    }
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++)
        if (u == 0 || pts[i] != pts[u - 1])
            pts[u++] = pts[i];
    return u;
}

/* Scratch reused across destination fragments. */
typedef struct {
    int32_t *cand;
    reshard_box_t *isect;
    int64_t *pts[RESHARD_MAX_DIMS];
    int64_t *span; /* per candidate: its grid span, lo[] then hi[] (grid_span) */
    int64_t cap;
    int64_t *start; /* per cell of the grid: first of its holders in grid_h */
    int64_t gcap;
    int32_t *grid_h; /* holders of every cell, cell by cell */
    int64_t hcap;
} rs_scratch_t;

static int scratch_reserve(rs_scratch_t *s, int64_t n)
{
    if (n <= s->cap)
        return 0;
    int64_t cap = n * 2;
    int32_t *cand = realloc(s->cand, (size_t)cap * sizeof *cand);
    if (cand)
        s->cand = cand;
    reshard_box_t *is = realloc(s->isect, (size_t)cap * sizeof *is);
    if (is)
        s->isect = is;
    int64_t *sp = realloc(s->span, (size_t)cap * 2 * RESHARD_MAX_DIMS * sizeof *sp);
    if (sp)
        s->span = sp;
    if (!cand || !is || !sp)
        return -1;
    for (int d = 0; d < RESHARD_MAX_DIMS; d++) {
        int64_t *p = realloc(s->pts[d], (size_t)(2 * cap + 2) * sizeof *p);
        if (!p)
            return -1;
        s->pts[d] = p;
    }
    s->cap = cap;
    return 0;
}

/* Room for a grid of @p cells cells, and @p holders holders in all. */
static int scratch_grid(rs_scratch_t *s, int64_t cells, int64_t holders)
{
    if (cells + 1 > s->gcap) {
        int64_t *p = realloc(s->start, (size_t)(2 * (cells + 1)) * sizeof *p);
        if (!p)
            return -1;
        s->start = p;
        s->gcap = 2 * (cells + 1);
    }
    if (holders > s->hcap) {
        int32_t *h = realloc(s->grid_h, (size_t)(2 * holders) * sizeof *h);
        if (!h)
            return -1;
        s->grid_h = h;
        s->hcap = 2 * holders;
    }
    return 0;
}

static void scratch_free(rs_scratch_t *s)
{
    free(s->start);
    free(s->grid_h);
    free(s->cand);
    free(s->isect);
    free(s->span);
    for (int d = 0; d < RESHARD_MAX_DIMS; d++)
        free(s->pts[d]);
}

/* Index of @p x among the @p n sorted points @p pts (every candidate bound
 * is one): at @p hint, where candidates in ascending order put it, else
 * found by binary search. */
static int64_t point_index(const int64_t *pts, int64_t n, int64_t x, int64_t hint)
{
    return hint >= 0 && hint < n && pts[hint] == x ? hint : rs_lower_bound(pts, n, x);
}

/* Grid span [lo, hi) per dim of box @p b (a candidate's intersection with
 * the destination box) in the cut points s->pts: a dim it spans whole needs
 * no search, and a candidate that starts where the one before (@p prev_hi)
 * ended is found there. */
static void grid_span(const rs_scratch_t *s, const int64_t *npts, int nd, const reshard_box_t *dbox,
                      const reshard_box_t *b, const int64_t *prev_hi, int64_t *lo, int64_t *hi)
{
    for (int d = 0; d < nd; d++) {
        if (b->offset[d] == dbox->offset[d] && b->extent[d] == dbox->extent[d]) {
            lo[d] = 0;
            hi[d] = npts[d] - 1;
        } else {
            lo[d] = point_index(s->pts[d], npts[d], b->offset[d], prev_hi ? prev_hi[d] : -1);
            hi[d] = point_index(s->pts[d], npts[d], b->offset[d] + b->extent[d], lo[d] + 1);
        }
    }
}

/* Row-major index of cell @p k of a grid of npts[d] - 1 cells per dim. */
static int64_t grid_index(const int64_t *npts, int nd, const int64_t *k)
{
    int64_t cell = 0;
    for (int d = 0; d < nd; d++)
        cell = cell * (npts[d] - 1) + k[d];
    return cell;
}

/* For every cell of the grid (s->pts, row-major) in the span [lo, hi):
 * count one more holder (@p fill false), or append @p cand to its holders
 * (@p fill true; s->start[cell] is the next free slot). */
static void cover(rs_scratch_t *s, const int64_t *npts, int nd, const int64_t *lo,
                  const int64_t *hi, bool fill, int32_t cand)
{
    int64_t k[RESHARD_MAX_DIMS];
    memcpy(k, lo, (size_t)nd * sizeof *k);
    do {
        int64_t cell = grid_index(npts, nd, k);
        if (fill)
            s->grid_h[s->start[cell]++] = cand;
        else
            s->start[cell + 1]++;
    } while (rs_grid_next(nd, k, lo, hi));
}

/* Cut destination fragment @p di into cells over the candidates in scratch.
 * Each candidate lists itself in the grid cells it covers, in candidate
 * order, so a cell's holders cost what they are, not a scan of every
 * candidate. With @p only a rank, only the cells it holds are kept (every
 * cell is still checked for a holder). */
static reshard_status_t cut_fragment(const reshard_layout_t *src, const reshard_layout_t *dst,
                                     int64_t di, rs_scratch_t *s, int64_t ncand, int32_t only,
                                     rs_cells_t *cells)
{
    const reshard_fragment_t *D = &dst->f[di];
    const rs_tensor_t *t = &dst->tensors->t[D->tensor];
    int nd = D->box.ndim;
    int64_t npts[RESHARD_MAX_DIMS], k[RESHARD_MAX_DIMS] = {0}, ncells = 1;
    for (int d = 0; d < nd; d++) {
        npts[d] = cut_points(&D->box, s->isect, ncand, d, s->pts[d]);
        ncells *= npts[d] - 1;
    }
    if (scratch_grid(s, ncells, 0) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning tensor %s: out of memory", t->name);
    memset(s->start, 0, (size_t)(ncells + 1) * sizeof *s->start);
    if (ncells == 1) { /* one cell, the whole box: every candidate holds it */
        if (ncand == 0) {
            char bs[256];
            return rs_error(RESHARD_ERR_UNCOVERED,
                            "tensor %s, rank %d, box %s: no source fragment holds these "
                            "destination elements",
                            t->name, D->rank, rs_box_str(&D->box, bs, sizeof bs));
        }
        bool keep = only == RESHARD_ALL_RANKS;
        for (int64_t q = 0; q < ncand && !keep; q++)
            keep = src->f[s->cand[q]].rank == only;
        rs_cell_t c;
        memset(&c, 0, sizeof c);
        c.box = D->box;
        c.tensor = D->tensor;
        c.to_frag = (int32_t)di;
        c.receiver = D->rank;
        c.bytes = (uint64_t)rs_box_numel(&c.box) * reshard_dtype_size(t->dtype);
        if (keep && push_cell(cells, &c, s->cand, (int32_t)ncand) != 0)
            return rs_error(RESHARD_ERR_NOMEM, "planning tensor %s: out of memory", t->name);
        return RESHARD_OK;
    }
    for (int64_t j = 0; j < ncand; j++) {
        grid_span(s, npts, nd, &D->box, &s->isect[j],
                  j ? s->span + (2 * j - 1) * RESHARD_MAX_DIMS : NULL,
                  s->span + 2 * j * RESHARD_MAX_DIMS, s->span + (2 * j + 1) * RESHARD_MAX_DIMS);
        cover(s, npts, nd, s->span + 2 * j * RESHARD_MAX_DIMS,
              s->span + (2 * j + 1) * RESHARD_MAX_DIMS, false, 0);
    }
    for (int64_t c = 0; c < ncells; c++)
        s->start[c + 1] += s->start[c];
    if (scratch_grid(s, ncells, s->start[ncells]) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning tensor %s: out of memory", t->name);
    for (int64_t j = 0; j < ncand; j++)
        cover(s, npts, nd, s->span + 2 * j * RESHARD_MAX_DIMS,
              s->span + (2 * j + 1) * RESHARD_MAX_DIMS, true, s->cand[j]);
    /* start[c] is now the end of cell c's holders: cell c is [start[c-1], start[c]) */
    for (int64_t cell = 0;; cell++) {
        rs_cell_t c;
        memset(&c, 0, sizeof c);
        c.box.ndim = nd;
        for (int d = 0; d < nd; d++) {
            c.box.offset[d] = s->pts[d][k[d]];
            c.box.extent[d] = s->pts[d][k[d] + 1] - s->pts[d][k[d]];
        }
        int64_t h0 = cell ? s->start[cell - 1] : 0;
        int32_t nh = (int32_t)(s->start[cell] - h0);
        if (nh == 0) {
            char bs[256];
            return rs_error(RESHARD_ERR_UNCOVERED,
                            "tensor %s, rank %d, box %s: no source fragment holds these "
                            "destination elements",
                            t->name, D->rank, rs_box_str(&c.box, bs, sizeof bs));
        }
        bool keep = only == RESHARD_ALL_RANKS;
        for (int32_t q = 0; q < nh && !keep; q++)
            keep = src->f[s->grid_h[h0 + q]].rank == only;
        c.tensor = D->tensor;
        c.to_frag = (int32_t)di;
        c.receiver = D->rank;
        c.bytes = (uint64_t)rs_box_numel(&c.box) * reshard_dtype_size(t->dtype);
        if (keep && push_cell(cells, &c, s->grid_h + h0, nh) != 0)
            return rs_error(RESHARD_ERR_NOMEM, "planning tensor %s: out of memory", t->name);
        int d = nd - 1;
        for (; d >= 0; d--) {
            if (++k[d] < npts[d] - 1)
                break;
            k[d] = 0;
        }
        if (d < 0)
            return RESHARD_OK;
    }
}

/* A cell of the grid (its row-major index) and its one holder. */
typedef struct {
    int64_t cell;
    int32_t holder;
} rs_owned_t;

static int cmp_owned(const void *pa, const void *pb)
{
    const rs_owned_t *a = pa, *b = pb;
    return a->cell < b->cell ? -1 : a->cell > b->cell;
}

/* As cut_fragment with @p only a rank, for a tensor no two of whose source
 * fragments share an element (rs_scope_t.sole): the candidates cover the
 * destination box when their volumes add up to it, and each cell has one
 * holder, so only the cells of @p only's candidates are enumerated, in the
 * grid's order. Anything else is left to cut_fragment (*@p done false),
 * which names an uncovered cell. */
static reshard_status_t cut_sole(const reshard_layout_t *src, const reshard_layout_t *dst,
                                 int64_t di, rs_scratch_t *s, int64_t ncand, int32_t only,
                                 rs_cells_t *cells, bool *done)
{
    const reshard_fragment_t *D = &dst->f[di];
    const rs_tensor_t *t = &dst->tensors->t[D->tensor];
    int nd = D->box.ndim;
    *done = false;
    int64_t vol = 0;
    for (int64_t j = 0; j < ncand; j++)
        vol += rs_box_numel(&s->isect[j]);
    if (vol != rs_box_numel(&D->box))
        return RESHARD_OK;
    int64_t npts[RESHARD_MAX_DIMS], lo[RESHARD_MAX_DIMS], hi[RESHARD_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        npts[d] = cut_points(&D->box, s->isect, ncand, d, s->pts[d]);
    int64_t n = 0, cap = 0;
    rs_owned_t *own = NULL;
    for (int64_t j = 0; j < ncand; j++) {
        if (src->f[s->cand[j]].rank != only)
            continue;
        grid_span(s, npts, nd, &D->box, &s->isect[j], NULL, lo, hi);
        int64_t k[RESHARD_MAX_DIMS], m = 1;
        for (int d = 0; d < nd; d++)
            m *= hi[d] - lo[d];
        if (n + m > cap) {
            cap = 2 * (n + m);
            rs_owned_t *o = realloc(own, (size_t)cap * sizeof *o);
            if (!o) {
                free(own);
                return rs_error(RESHARD_ERR_NOMEM, "planning tensor %s: out of memory", t->name);
            }
            own = o;
        }
        memcpy(k, lo, (size_t)nd * sizeof *k);
        do
            own[n++] = (rs_owned_t){grid_index(npts, nd, k), s->cand[j]};
        while (rs_grid_next(nd, k, lo, hi));
    }
    if (n > 1)
        qsort(own, (size_t)n, sizeof *own, cmp_owned);
    reshard_status_t st = RESHARD_OK;
    for (int64_t q = 0; q < n && st == RESHARD_OK; q++) {
        rs_cell_t c;
        memset(&c, 0, sizeof c);
        c.box.ndim = nd;
        int64_t rest = own[q].cell; /* row-major: the last dim fastest */
        for (int d = nd - 1; d >= 0; d--) {
            int64_t kd = rest % (npts[d] - 1);
            rest /= npts[d] - 1;
            c.box.offset[d] = s->pts[d][kd];
            c.box.extent[d] = s->pts[d][kd + 1] - s->pts[d][kd];
        }
        c.tensor = D->tensor;
        c.to_frag = (int32_t)di;
        c.receiver = D->rank;
        c.bytes = (uint64_t)rs_box_numel(&c.box) * reshard_dtype_size(t->dtype);
        if (push_cell(cells, &c, &own[q].holder, 1) != 0)
            st = rs_error(RESHARD_ERR_NOMEM, "planning tensor %s: out of memory", t->name);
    }
    free(own);
    *done = st == RESHARD_OK;
    return st;
}

struct rs_cutter {
    int64_t *sstart, *sidx, *dstart, *didx;
    rs_scratch_t s;
};

void rs_cutter_frags(const rs_cutter_t *c, int32_t t, const int64_t **src, int64_t *nsrc,
                     const int64_t **dst, int64_t *ndst)
{
    *src = c->sidx + c->sstart[t];
    *nsrc = c->sstart[t + 1] - c->sstart[t];
    *dst = c->didx + c->dstart[t];
    *ndst = c->dstart[t + 1] - c->dstart[t];
}

reshard_status_t rs_cutter_create(const reshard_plan_t *plan, rs_cutter_t **out)
{
    rs_cutter_t *c = calloc(1, sizeof *c);
    if (c) {
        /* the tensors the plan computes (a rank's own plan: a few) */
        c->sidx = rs_layout_by_tensor(plan->src, plan->scope.any, &c->sstart);
        c->didx = c->sidx ? rs_layout_by_tensor(plan->dst, plan->scope.any, &c->dstart) : NULL;
    }
    if (!c || !c->sidx || !c->didx) {
        rs_cutter_free(c);
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory");
    }
    *out = c;
    return RESHARD_OK;
}

void rs_cutter_free(rs_cutter_t *c)
{
    if (!c)
        return;
    scratch_free(&c->s);
    free(c->sstart);
    free(c->dstart);
    free(c->sidx);
    free(c->didx);
    free(c);
}

reshard_status_t rs_cells_build(const reshard_plan_t *plan, rs_cutter_t *cut, int32_t t,
                                rs_cells_t *cells)
{
    const reshard_layout_t *src = plan->src, *dst = plan->dst;
    cells->n = cells->hn = 0;
    rs_scratch_t *s = &cut->s;
    const int64_t *sidx = cut->sidx, *didx = cut->didx;
    int64_t s0 = cut->sstart[t], s1 = cut->sstart[t + 1];
    if (scratch_reserve(s, s1 - s0 + 1) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory");
    reshard_status_t st = RESHARD_OK;
    for (int64_t q = cut->dstart[t]; st == RESHARD_OK && q < cut->dstart[t + 1]; q++) {
        const reshard_fragment_t *D = &dst->f[didx[q]];
        int32_t dom = rs_domain_of(&plan->p, D->rank);
        if (!rs_scope_has(&plan->scope, dom, t))
            continue;
        /* a group computed for its senders: the cells this rank holds */
        int32_t only =
            rs_scope_sends_only(&plan->scope, dom, t) ? plan->p.my_rank : RESHARD_ALL_RANKS;
        int64_t nc = 0;
        for (int64_t j = s0; j < s1; j++)
            if (rs_box_intersect(&src->f[sidx[j]].box, &D->box, &s->isect[nc]))
                s->cand[nc++] = (int32_t)sidx[j];
        bool done = false;
        if (only != RESHARD_ALL_RANKS && plan->scope.sole && plan->scope.sole[t])
            st = cut_sole(src, dst, didx[q], s, nc, only, cells, &done);
        if (st == RESHARD_OK && !done)
            st = cut_fragment(src, dst, didx[q], s, nc, only, cells);
    }
    return st;
}
