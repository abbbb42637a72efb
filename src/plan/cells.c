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

/* The candidates of one destination box: the source fragments of its tensor
 * that meet it, their intersections with it, the cut points per dim
 * (cut_points), and for a rank's own plan which candidates are the rank's
 * and the volume they all cover. A view into scratch or into the cache. */
typedef struct {
    int32_t *cand;
    reshard_box_t *isect;
    int64_t ncand;
    int64_t npts[RESHARD_MAX_DIMS];
    int64_t *pts[RESHARD_MAX_DIMS];
    int64_t *mine; /* positions j of the candidates on the plan's rank */
    int64_t nmine;
    int64_t vol; /* elements of all intersections together */
} rs_cands_t;

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
    int64_t *mine; /* rs_cands_t.mine of the uncached candidates */
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
    int64_t *mine = realloc(s->mine, (size_t)cap * sizeof *mine);
    if (mine)
        s->mine = mine;
    if (!cand || !is || !sp || !mine)
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
    free(s->mine);
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
static void grid_span(const rs_cands_t *k, int nd, const reshard_box_t *dbox,
                      const reshard_box_t *b, const int64_t *prev_hi, int64_t *lo, int64_t *hi)
{
    const int64_t *npts = k->npts;
    for (int d = 0; d < nd; d++) {
        if (b->offset[d] == dbox->offset[d] && b->extent[d] == dbox->extent[d]) {
            lo[d] = 0;
            hi[d] = npts[d] - 1;
        } else {
            lo[d] = point_index(k->pts[d], npts[d], b->offset[d], prev_hi ? prev_hi[d] : -1);
            hi[d] = point_index(k->pts[d], npts[d], b->offset[d] + b->extent[d], lo[d] + 1);
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

/* Cut destination fragment @p di into cells over its candidates @p k.
 * Each candidate lists itself in the grid cells it covers, in candidate
 * order, so a cell's holders cost what they are, not a scan of every
 * candidate. With @p only a rank, only the cells it holds are kept (every
 * cell is still checked for a holder). */
static reshard_status_t cut_fragment(const reshard_layout_t *src, const reshard_layout_t *dst,
                                     int64_t di, const rs_cands_t *kc, rs_scratch_t *s,
                                     int32_t only, rs_cells_t *cells)
{
    const reshard_fragment_t *D = &dst->f[di];
    const rs_tensor_t *t = &dst->tensors->t[D->tensor];
    int nd = D->box.ndim;
    int64_t ncand = kc->ncand;
    const int64_t *npts = kc->npts;
    int64_t k[RESHARD_MAX_DIMS] = {0}, ncells = 1;
    for (int d = 0; d < nd; d++)
        ncells *= npts[d] - 1;
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
        bool keep = only == RESHARD_ALL_RANKS || kc->nmine > 0;
        rs_cell_t c;
        memset(&c, 0, sizeof c);
        c.box.ndim = nd; /* the box's dims alone: past ndim a cell holds 0 */
        for (int d = 0; d < nd; d++) {
            c.box.offset[d] = D->box.offset[d];
            c.box.extent[d] = D->box.extent[d];
        }
        c.tensor = D->tensor;
        c.to_frag = (int32_t)di;
        c.receiver = D->rank;
        c.bytes = (uint64_t)rs_box_numel(&c.box) * reshard_dtype_size(t->dtype);
        if (keep && push_cell(cells, &c, kc->cand, (int32_t)ncand) != 0)
            return rs_error(RESHARD_ERR_NOMEM, "planning tensor %s: out of memory", t->name);
        return RESHARD_OK;
    }
    for (int64_t j = 0; j < ncand; j++) {
        grid_span(kc, nd, &D->box, &kc->isect[j],
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
              s->span + (2 * j + 1) * RESHARD_MAX_DIMS, true, kc->cand[j]);
    /* start[c] is now the end of cell c's holders: cell c is [start[c-1], start[c]) */
    for (int64_t cell = 0;; cell++) {
        rs_cell_t c;
        memset(&c, 0, sizeof c);
        c.box.ndim = nd;
        for (int d = 0; d < nd; d++) {
            c.box.offset[d] = kc->pts[d][k[d]];
            c.box.extent[d] = kc->pts[d][k[d] + 1] - kc->pts[d][k[d]];
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
static reshard_status_t cut_sole(const reshard_layout_t *dst, int64_t di, const rs_cands_t *kc,
                                 rs_cells_t *cells, bool *done)
{
    const reshard_fragment_t *D = &dst->f[di];
    const rs_tensor_t *t = &dst->tensors->t[D->tensor];
    int nd = D->box.ndim;
    *done = false;
    if (kc->vol != rs_box_numel(&D->box))
        return RESHARD_OK;
    const int64_t *npts = kc->npts;
    int64_t lo[RESHARD_MAX_DIMS], hi[RESHARD_MAX_DIMS];
    int64_t n = 0, cap = 0;
    rs_owned_t *own = NULL;
    for (int64_t q = 0; q < kc->nmine; q++) {
        int64_t j = kc->mine[q];
        grid_span(kc, nd, &D->box, &kc->isect[j], NULL, lo, hi);
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
            own[n++] = (rs_owned_t){grid_index(npts, nd, k), kc->cand[j]};
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
            c.box.offset[d] = kc->pts[d][kd];
            c.box.extent[d] = kc->pts[d][kd + 1] - kc->pts[d][kd];
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

/* Candidates of the destination boxes of one tensor seen so far: the
 * replicas of a box (its fragments in every DP replica of the destination)
 * meet the same source fragments, so they are found and cut once. */
typedef struct {
    reshard_box_t box;
    rs_cands_t k; /* its own arrays */
} rs_cached_t;

typedef struct {
    int32_t tensor; /* whose boxes are held (-1: none) */
    rs_cached_t *e;
    int64_t n, cap;
    int64_t *slot; /* open addressing over box hashes: entry + 1, 0 free */
    int64_t nslot;
    int64_t held; /* candidates held by all entries */
} rs_cand_cache_t;

/* Candidates the cache holds at most (about 200 bytes each); past it, boxes
 * are worked out in scratch every time. */
#define RS_CAND_CACHE_MAX ((int64_t)1 << 17)

/* For a rank's own plan, of a tensor no two of whose source fragments share
 * an element: whether they tile it (their volumes add up to it, so every
 * destination box is covered), every source fragment bound per dim, and the
 * rank's own source fragments. */
typedef struct {
    int32_t tensor; /* -1: none */
    bool tiles;
    int64_t *bound[RESHARD_MAX_DIMS]; /* sorted, unique */
    int64_t nbound[RESHARD_MAX_DIMS];
    int64_t *own; /* fragment indices */
    int64_t nown;
} rs_sole_index_t;

struct rs_cutter {
    int64_t *sstart, *sidx, *dstart, *didx;
    rs_scratch_t s;
    rs_cand_cache_t cache;
    rs_sole_index_t sole;
};

static void sole_index_free(rs_sole_index_t *x)
{
    for (int d = 0; d < RESHARD_MAX_DIMS; d++) {
        free(x->bound[d]);
        x->bound[d] = NULL;
        x->nbound[d] = 0;
    }
    free(x->own);
    x->own = NULL;
    x->nown = 0;
    x->tensor = -1;
}

/* Build the index of tensor @p t (source fragments sf[0..n)); -1 when out of memory. */
static int sole_index(const reshard_plan_t *plan, const int64_t *sf, int64_t n, int32_t t,
                      rs_sole_index_t *x)
{
    const reshard_layout_t *src = plan->src;
    const rs_tensor_t *T = &src->tensors->t[t];
    sole_index_free(x);
    x->tensor = t;
    int64_t vol = 0;
    x->own = malloc((size_t)(n ? n : 1) * sizeof *x->own);
    if (!x->own)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        const reshard_fragment_t *f = &src->f[sf[i]];
        vol += rs_box_numel(&f->box);
        if (f->rank == plan->p.my_rank)
            x->own[x->nown++] = sf[i];
    }
    x->tiles = vol == T->numel;
    for (int d = 0; d < T->vndim; d++) {
        int64_t *b = malloc((size_t)(2 * n + 1) * sizeof *b), m = 0;
        if (!b)
            return -1;
        for (int64_t i = 0; i < n; i++) {
            const reshard_box_t *bx = &src->f[sf[i]].box;
            b[m++] = bx->offset[d];
            b[m++] = bx->offset[d] + bx->extent[d];
        }
        qsort(b, (size_t)m, sizeof *b, cmp_i64);
        int64_t u = 0;
        for (int64_t i = 0; i < m; i++)
            if (u == 0 || b[i] != b[u - 1])
                b[u++] = b[i];
        x->bound[d] = b;
        x->nbound[d] = u;
    }
    return 0;
}

/* True when some source bound of dim @p d lies strictly inside (lo, hi). */
static bool bound_inside(const rs_sole_index_t *x, int d, int64_t lo, int64_t hi)
{
    int64_t i = rs_lower_bound(x->bound[d], x->nbound[d], lo + 1);
    return i < x->nbound[d] && x->bound[d][i] < hi;
}

/* A cell and its one holder (sole_fast). */
typedef struct {
    rs_cell_t c;
    int32_t holder;
} rs_held_cell_t;

/* Grid order of distinct cells: row-major, i.e. by their boxes' offsets. */
static int cmp_held_cell(const void *pa, const void *pb)
{
    return rs_box_cmp(&((const rs_held_cell_t *)pa)->c.box, &((const rs_held_cell_t *)pb)->c.box);
}

/* cut_sole from the tensor's index alone, touching only the rank's own
 * source fragments: when they tile the tensor (every destination box is
 * covered) and no source bound falls inside any of the rank's
 * intersections with @p D (each intersection is one cell of the grid
 * cut_sole would make), the same cells in the same (grid) order. *@p done
 * false: not decided so, left to cut_sole. */
static reshard_status_t sole_fast(const reshard_plan_t *plan, const rs_sole_index_t *x, int64_t di,
                                  rs_cells_t *cells, bool *done)
{
    const reshard_layout_t *src = plan->src, *dst = plan->dst;
    const reshard_fragment_t *D = &dst->f[di];
    const rs_tensor_t *t = &dst->tensors->t[D->tensor];
    *done = false;
    if (!x->tiles)
        return RESHARD_OK;
    enum { FEW = 16 };
    rs_held_cell_t c[FEW];
    int64_t n = 0;
    for (int64_t i = 0; i < x->nown; i++) {
        reshard_box_t b;
        memset(&b, 0, sizeof b); /* dims past ndim stay 0, as in every cell */
        if (!rs_box_intersect(&src->f[x->own[i]].box, &D->box, &b))
            continue;
        if (n == FEW)
            return RESHARD_OK;
        for (int d = 0; d < b.ndim; d++)
            if (bound_inside(x, d, b.offset[d], b.offset[d] + b.extent[d]))
                return RESHARD_OK;
        memset(&c[n], 0, sizeof c[n]);
        c[n].c.box = b;
        c[n].c.tensor = D->tensor;
        c[n].c.to_frag = (int32_t)di;
        c[n].c.receiver = D->rank;
        c[n].c.bytes = (uint64_t)rs_box_numel(&b) * reshard_dtype_size(t->dtype);
        c[n].holder = (int32_t)x->own[i];
        n++;
    }
    if (n > 1)
        qsort(c, (size_t)n, sizeof *c, cmp_held_cell);
    for (int64_t i = 0; i < n; i++) {
        if (push_cell(cells, &c[i].c, &c[i].holder, 1) != 0)
            return rs_error(RESHARD_ERR_NOMEM, "planning tensor %s: out of memory", t->name);
    }
    *done = true;
    return RESHARD_OK;
}

static void cands_free(rs_cands_t *k)
{
    free(k->cand);
    free(k->isect);
    free(k->mine);
    for (int d = 0; d < RESHARD_MAX_DIMS; d++)
        free(k->pts[d]);
}

static void cache_clear(rs_cand_cache_t *c, int32_t tensor)
{
    for (int64_t i = 0; i < c->n; i++)
        cands_free(&c->e[i].k);
    c->n = c->held = 0;
    if (c->slot)
        memset(c->slot, 0, (size_t)c->nslot * sizeof *c->slot);
    c->tensor = tensor;
}

static void cache_free(rs_cand_cache_t *c)
{
    cache_clear(c, -1);
    free(c->e);
    free(c->slot);
}

static uint64_t box_hash(const reshard_box_t *b)
{
    uint64_t h = rs_hash_mix(0, (uint64_t)b->ndim);
    for (int d = 0; d < b->ndim; d++)
        h = rs_hash_mix(rs_hash_mix(h, (uint64_t)b->offset[d]), (uint64_t)b->extent[d]);
    return h;
}

/* Slot of @p box in the cache: its entry's, or the free one it would take
 * (the boxes held are one tensor's: the same dims, as rs_box_cmp compares). */
static int64_t cache_slot(const rs_cand_cache_t *c, const reshard_box_t *box)
{
    int64_t i = (int64_t)(box_hash(box) & (uint64_t)(c->nslot - 1));
    while (c->slot[i] && rs_box_cmp(&c->e[c->slot[i] - 1].box, box) != 0)
        i = (i + 1) & (c->nslot - 1);
    return i;
}

/* Copy the candidates @p k of @p box into the cache (nothing when full or
 * out of memory: the caller's view serves). */
static void cache_put(rs_cand_cache_t *c, const reshard_box_t *box, const rs_cands_t *k)
{
    if (c->held + k->ncand > RS_CAND_CACHE_MAX)
        return;
    if (2 * (c->n + 1) > c->nslot) { /* grow the table: entries rehashed */
        int64_t ns = c->nslot ? 2 * c->nslot : 64;
        int64_t *sl = calloc((size_t)ns, sizeof *sl);
        if (!sl)
            return;
        free(c->slot);
        c->slot = sl;
        c->nslot = ns;
        for (int64_t i = 0; i < c->n; i++)
            c->slot[cache_slot(c, &c->e[i].box)] = i + 1;
    }
    if (rs_grow(&c->e, &c->cap, c->n, sizeof *c->e) != 0)
        return;
    rs_cands_t m = *k;
    size_t n = (size_t)(k->ncand ? k->ncand : 1);
    m.cand = malloc(n * sizeof *m.cand);
    m.isect = malloc(n * sizeof *m.isect);
    m.mine = malloc((size_t)(k->nmine ? k->nmine : 1) * sizeof *m.mine);
    bool ok = m.cand && m.isect && m.mine;
    for (int d = 0; d < RESHARD_MAX_DIMS; d++) {
        m.pts[d] = d < box->ndim ? malloc((size_t)k->npts[d] * sizeof *m.pts[d]) : NULL;
        ok = ok && (d >= box->ndim || m.pts[d]);
    }
    if (!ok) {
        cands_free(&m);
        return;
    }
    memcpy(m.cand, k->cand, (size_t)k->ncand * sizeof *m.cand);
    memcpy(m.isect, k->isect, (size_t)k->ncand * sizeof *m.isect);
    memcpy(m.mine, k->mine, (size_t)k->nmine * sizeof *m.mine);
    for (int d = 0; d < box->ndim; d++)
        memcpy(m.pts[d], k->pts[d], (size_t)k->npts[d] * sizeof *m.pts[d]);
    c->e[c->n] = (rs_cached_t){*box, m};
    c->slot[cache_slot(c, box)] = c->n + 1;
    c->n++;
    c->held += k->ncand;
}

/* The candidates of destination box @p box of tensor @p t: from the cache,
 * else found (every source fragment of the tensor tested), cut and kept. */
static const rs_cands_t *cands_of(const reshard_plan_t *plan, rs_cutter_t *cut, int32_t t,
                                  const reshard_box_t *box, rs_cands_t *view)
{
    rs_cand_cache_t *c = &cut->cache;
    if (c->tensor != t)
        cache_clear(c, t);
    if (c->n > 0) {
        int64_t i = cache_slot(c, box);
        if (c->slot[i])
            return &c->e[c->slot[i] - 1].k;
    }
    const reshard_layout_t *src = plan->src;
    rs_scratch_t *s = &cut->s;
    *view = (rs_cands_t){.cand = s->cand, .isect = s->isect, .mine = s->mine};
    for (int64_t j = cut->sstart[t]; j < cut->sstart[t + 1]; j++) {
        const reshard_fragment_t *f = &src->f[cut->sidx[j]];
        if (!rs_box_intersect(&f->box, box, &s->isect[view->ncand]))
            continue;
        view->vol += rs_box_numel(&s->isect[view->ncand]);
        if (f->rank == plan->p.my_rank)
            view->mine[view->nmine++] = view->ncand;
        s->cand[view->ncand++] = (int32_t)cut->sidx[j];
    }
    for (int d = 0; d < box->ndim; d++) {
        view->pts[d] = s->pts[d];
        view->npts[d] = cut_points(box, s->isect, view->ncand, d, s->pts[d]);
    }
    cache_put(c, box, view);
    return view;
}

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
        c->cache.tensor = -1;
        c->sole.tensor = -1;
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
    cache_free(&c->cache);
    sole_index_free(&c->sole);
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
    const int64_t *didx = cut->didx;
    if (scratch_reserve(s, cut->sstart[t + 1] - cut->sstart[t] + 1) != 0)
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
        bool sole = only != RESHARD_ALL_RANKS && plan->scope.sole && plan->scope.sole[t];
        bool done = false;
        if (sole && cut->sole.tensor != t &&
            sole_index(plan, cut->sidx + cut->sstart[t], cut->sstart[t + 1] - cut->sstart[t], t,
                       &cut->sole) != 0)
            return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory");
        if (sole)
            st = sole_fast(plan, &cut->sole, didx[q], cells, &done);
        if (st != RESHARD_OK || done)
            continue;
        rs_cands_t view;
        const rs_cands_t *k = cands_of(plan, cut, t, &D->box, &view);
        if (sole)
            st = cut_sole(dst, didx[q], k, cells, &done);
        if (st == RESHARD_OK && !done)
            st = cut_fragment(src, dst, didx[q], k, s, only, cells);
    }
    return st;
}
