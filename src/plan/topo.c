/*
 * Step 3 of planning: domain dedup, landing, striping, forwarding.
 *
 *   1. Needs: every cell no rank of its receiver's domain holds, keyed by
 *      (destination domain, tensor, box).
 *   2. Refine: inside one (domain, tensor) group, boxes that overlap without
 *      being equal are cut along each other's boundaries, so every element a
 *      domain needs belongs to exactly one distinct box (a unit).
 *   3. Land: per domain, units needed by one rank land there; the others go,
 *      biggest first, to the needer with the fewest received bytes, large
 *      ones striped across their needers. A rank left above the domain's
 *      share (parts only it needs) relays stripes through the least-loaded
 *      ranks of the domain: they land in that rank's relay scratch and are
 *      forwarded from there.
 *   4. Send: each landing (delivery) is sent by the least-loaded rank holding
 *      it; deliveries only one rank holds first, then biggest first.
 *   5. Forward: the landing rank passes each delivery to every other
 *      fragment of its domain that needs it (stage 1).
 * Every order is a total order on plan data, so every rank computes the same
 * pieces.
 */
#include <stdlib.h>
#include <string.h>

#include "plan/topo.h"
#include "util/error.h"

/* Smallest unit worth striping, and the stripe size relative to a domain's
 * per-rank share of its unique bytes. */
#define RS_STRIPE_MIN_BYTES ((uint64_t)64 << 10)
#define RS_STRIPE_PER_SHARE 64

int rs_piece_vec_push(rs_piece_vec_t *v, const rs_piece_t *piece)
{
    if (rs_grow(&v->p, &v->cap, v->n, sizeof *v->p) != 0)
        return -1;
    v->p[v->n++] = *piece;
    return 0;
}

bool rs_cell_in_domain(const reshard_plan_params_t *p, const reshard_layout_t *src,
                       const rs_cells_t *cells, const rs_cell_t *c)
{
    int32_t dom = rs_domain_of(p, c->receiver);
    for (int32_t j = 0; j < c->nholders; j++)
        if (rs_domain_of(p, src->f[cells->h[c->holders + j]].rank) == dom)
            return true;
    return false;
}

int32_t rs_domain_ranks(const reshard_plan_params_t *p, int32_t domain)
{
    if (p->domain_size <= 1)
        return 1;
    int64_t lo = (int64_t)domain * p->domain_size, hi = lo + p->domain_size;
    if (hi > p->world_size)
        hi = p->world_size;
    return hi > lo ? (int32_t)(hi - lo) : 0;
}

/* ------------------------------------------------------------------ */
/* Needs and their refinement                                          */
/* ------------------------------------------------------------------ */

typedef struct {
    reshard_box_t box;
    int64_t cell;
    int32_t domain, tensor, receiver, to_frag;
} rs_item_t;

typedef struct {
    rs_item_t *v;
    int64_t n, cap;
} rs_items_t;

static int items_push(rs_items_t *a, const rs_item_t *it)
{
    if (rs_grow(&a->v, &a->cap, a->n, sizeof *a->v) != 0)
        return -1;
    a->v[a->n++] = *it;
    return 0;
}

static int cmp_item(const void *pa, const void *pb)
{
    const rs_item_t *a = pa, *b = pb;
    if (a->domain != b->domain)
        return a->domain < b->domain ? -1 : 1;
    if (a->tensor != b->tensor)
        return a->tensor < b->tensor ? -1 : 1;
    int c = rs_box_cmp(&a->box, &b->box);
    if (c)
        return c;
    if (a->receiver != b->receiver)
        return a->receiver < b->receiver ? -1 : 1;
    if (a->to_frag != b->to_frag)
        return a->to_frag < b->to_frag ? -1 : 1;
    return a->cell < b->cell ? -1 : a->cell > b->cell;
}

/* True when two distinct boxes of the sorted group it[0..n) overlap. */
static bool group_overlaps(const rs_item_t *it, int64_t n)
{
    for (int64_t a = 0; a < n; a++) {
        if (a > 0 && rs_box_cmp(&it[a].box, &it[a - 1].box) == 0)
            continue;
        int64_t end0 = it[a].box.offset[0] + it[a].box.extent[0];
        for (int64_t b = a + 1; b < n && it[b].box.offset[0] < end0; b++) {
            reshard_box_t x;
            if (rs_box_cmp(&it[a].box, &it[b].box) != 0 &&
                rs_box_intersect(&it[a].box, &it[b].box, &x))
                return true;
        }
    }
    return false;
}

/* Index of the first point >= x in sorted pts[0..n). */
static int64_t lower_bound(const int64_t *pts, int64_t n, int64_t x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pts[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Cut every box of the group it[0..n) along every boundary of the group, so
 * that any two resulting boxes are equal or disjoint; append to @p out. */
static int refine_group(const rs_item_t *it, int64_t n, rs_items_t *out)
{
    int nd = it[0].box.ndim;
    int64_t *pts[RESHARD_MAX_DIMS] = {0}, np[RESHARD_MAX_DIMS] = {0};
    int rc = 0;
    for (int d = 0; d < nd && rc == 0; d++)
        if (!(pts[d] = rs_box_cuts(&it[0].box, sizeof *it, n, d, &np[d])))
            rc = -1;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        int64_t lo[RESHARD_MAX_DIMS], hi[RESHARD_MAX_DIMS], k[RESHARD_MAX_DIMS];
        for (int d = 0; d < nd; d++) {
            lo[d] = lower_bound(pts[d], np[d], it[i].box.offset[d]);
            hi[d] = lower_bound(pts[d], np[d], it[i].box.offset[d] + it[i].box.extent[d]);
            k[d] = lo[d];
        }
        for (;;) {
            rs_item_t sub = it[i];
            for (int d = 0; d < nd; d++) {
                sub.box.offset[d] = pts[d][k[d]];
                sub.box.extent[d] = pts[d][k[d] + 1] - pts[d][k[d]];
            }
            if (items_push(out, &sub) != 0) {
                rc = -1;
                break;
            }
            int d = nd - 1;
            for (; d >= 0; d--) {
                if (++k[d] < hi[d])
                    break;
                k[d] = lo[d];
            }
            if (d < 0)
                break;
        }
    }
    for (int d = 0; d < nd; d++)
        free(pts[d]);
    return rc;
}

/* The needs of every network cell, sorted, refined where boxes overlap. */
static reshard_status_t collect_needs(const reshard_plan_t *plan, const rs_cells_t *cells,
                                      rs_items_t *out)
{
    rs_items_t raw = {0};
    memset(out, 0, sizeof *out);
    for (int64_t i = 0; i < cells->n; i++) {
        const rs_cell_t *c = &cells->c[i];
        if (c->chosen >= 0)
            continue;
        rs_item_t it = {c->box,    i,           rs_domain_of(&plan->p, c->receiver),
                        c->tensor, c->receiver, c->to_frag};
        if (items_push(&raw, &it) != 0)
            goto oom;
    }
    if (rs_sort_records(raw.v, (size_t)raw.n, sizeof *raw.v, cmp_item) != 0)
        goto oom;
    for (int64_t i = 0; i < raw.n;) {
        int64_t j = i + 1;
        while (j < raw.n && raw.v[j].domain == raw.v[i].domain &&
               raw.v[j].tensor == raw.v[i].tensor)
            j++;
        if (group_overlaps(&raw.v[i], j - i)) {
            int64_t start = out->n;
            if (refine_group(&raw.v[i], j - i, out) != 0)
                goto oom;
            if (rs_sort_records(out->v + start, (size_t)(out->n - start), sizeof *out->v,
                                cmp_item) != 0)
                goto oom;
        } else {
            for (int64_t q = i; q < j; q++)
                if (items_push(out, &raw.v[q]) != 0)
                    goto oom;
        }
        i = j;
    }
    free(raw.v);
    return RESHARD_OK;
oom:
    free(raw.v);
    free(out->v);
    memset(out, 0, sizeof *out);
    return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory deduplicating domain needs");
}

/* ------------------------------------------------------------------ */
/* Units, landings, senders                                            */
/* ------------------------------------------------------------------ */

/* One distinct box a domain needs: its needers are items[first .. first+n)
 * (sorted by receiver, to_frag); its holders hold[h .. h+nh) (fragment
 * indices, ascending). */
typedef struct {
    int64_t first, h;
    int32_t n, nh, nranks;
    bool sole; /* every holder lives on one rank */
    uint64_t bytes;
} rs_unit_t;

/* One landing: box (the unit's, or a stripe of it) goes to land_frag on
 * land_rank, sent from from_frag on sender. */
typedef struct {
    reshard_box_t box;
    int64_t unit;
    uint64_t bytes;
    int32_t land_rank, land_frag;
    int32_t sender, from_frag;
} rs_dlv_t;

typedef struct {
    const reshard_plan_t *plan;
    const rs_cells_t *cells;
    rs_items_t items;
    rs_unit_t *u;
    int64_t nu;
    int32_t *hold;
    int64_t nhold;
    rs_dlv_t *d;
    int64_t nd, dcap;
    uint64_t *recv_load, *send_load;
} rs_topo_t;

static uint64_t box_bytes(const reshard_plan_t *plan, int32_t tensor, const reshard_box_t *b)
{
    return (uint64_t)rs_box_numel(b) *
           (uint64_t)reshard_dtype_size(plan->dst->tensors->t[tensor].dtype);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Group the sorted needs into units and gather each unit's holders. */
static int build_units(rs_topo_t *t)
{
    const rs_items_t *it = &t->items;
    const reshard_layout_t *src = t->plan->src;
    t->u = malloc((size_t)(it->n ? it->n : 1) * sizeof *t->u);
    if (!t->u)
        return -1;
    int64_t hcap = 0;
    for (int64_t i = 0; i < it->n;) {
        int64_t j = i + 1;
        while (j < it->n && it->v[j].domain == it->v[i].domain &&
               it->v[j].tensor == it->v[i].tensor && rs_box_cmp(&it->v[j].box, &it->v[i].box) == 0)
            j++;
        rs_unit_t *u = &t->u[t->nu++];
        memset(u, 0, sizeof *u);
        u->first = i;
        u->n = (int32_t)(j - i);
        u->bytes = box_bytes(t->plan, it->v[i].tensor, &it->v[i].box);
        for (int64_t q = i; q < j; q++)
            u->nranks += q == i || it->v[q].receiver != it->v[q - 1].receiver;
        /* holders: the union over the member cells (equal for unrefined boxes) */
        int64_t need = 0;
        for (int64_t q = i; q < j; q++)
            need += t->cells->c[it->v[q].cell].nholders;
        if (t->nhold + need > hcap) {
            int64_t cap = 2 * (t->nhold + need) + 1024;
            int32_t *nh = realloc(t->hold, (size_t)cap * sizeof *nh);
            if (!nh)
                return -1;
            t->hold = nh;
            hcap = cap;
        }
        int32_t *h = t->hold + t->nhold;
        int64_t k = 0;
        for (int64_t q = i; q < j; q++) {
            const rs_cell_t *c = &t->cells->c[it->v[q].cell];
            memcpy(h + k, t->cells->h + c->holders, (size_t)c->nholders * sizeof *h);
            k += c->nholders;
        }
        if (j - i > 1)
            qsort(h, (size_t)k, sizeof *h, cmp_i32);
        int64_t w = 0;
        for (int64_t q = 0; q < k; q++)
            if (w == 0 || h[q] != h[w - 1])
                h[w++] = h[q];
        if (j - i == 1 && w > 1)
            qsort(h, (size_t)w, sizeof *h, cmp_i32);
        u->h = t->nhold;
        u->nh = (int32_t)w;
        u->sole = true;
        for (int64_t q = 1; q < w; q++)
            u->sole = u->sole && src->f[h[q]].rank == src->f[h[0]].rank;
        t->nhold += w;
        i = j;
    }
    return 0;
}

static int dlv_push(rs_topo_t *t, const reshard_box_t *box, int64_t unit, int32_t rank,
                    int32_t frag, bool count)
{
    if (rs_grow(&t->d, &t->dcap, t->nd, sizeof *t->d) != 0)
        return -1;
    rs_dlv_t *d = &t->d[t->nd++];
    memset(d, 0, sizeof *d);
    d->box = *box;
    d->unit = unit;
    d->bytes = box_bytes(t->plan, t->items.v[t->u[unit].first].tensor, box);
    d->land_rank = rank;
    d->land_frag = frag;
    if (count)
        t->recv_load[rank] += d->bytes;
    return 0;
}

/* Cut @p b into at most @p m stripes along its outermost dim of extent >= m
 * (or its longest dim), sizes as torch.chunk; returns the stripe count. */
static int stripe_box(const reshard_box_t *b, int m, reshard_box_t *out)
{
    int d = -1;
    for (int q = 0; q < b->ndim && d < 0; q++)
        if (b->extent[q] >= m)
            d = q;
    if (d < 0) {
        d = 0;
        for (int q = 1; q < b->ndim; q++)
            if (b->extent[q] > b->extent[d])
                d = q;
        m = (int)b->extent[d];
    }
    int64_t base = b->extent[d] / m, rem = b->extent[d] % m, off = b->offset[d];
    for (int i = 0; i < m; i++) {
        out[i] = *b;
        out[i].offset[d] = off;
        out[i].extent[d] = base + (i < rem);
        off += out[i].extent[d];
    }
    return m;
}

/* Sort helper: unit or delivery indices by a key array, descending, ties by index. */
typedef struct {
    uint64_t key; /* larger first */
    int64_t idx;
} rs_order_t;

static int cmp_order(const void *pa, const void *pb)
{
    const rs_order_t *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key > b->key ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Most stripes one landing is cut into when relaying part of it. */
#define RS_RELAY_MAX_STRIPES 256

/* The smallest box holding parts[0..n) (consecutive stripes of one box). */
static reshard_box_t box_hull(const reshard_box_t *parts, int n)
{
    reshard_box_t h = parts[0];
    for (int i = 1; i < n; i++)
        for (int d = 0; d < h.ndim; d++) {
            int64_t end = parts[i].offset[d] + parts[i].extent[d];
            if (end > h.offset[d] + h.extent[d])
                h.extent[d] = end - h.offset[d];
        }
    return h;
}

/* Relays (a piece may land on a rank that does not need it):
 * a rank of the domain that must land more than the domain's share (the
 * parts only it needs) hands stripes of its landings, from the end, to the
 * least-loaded ranks of the domain, which forward them. Deliveries
 * [d0, nd) are this domain's. */
static int relay_domain(rs_topo_t *t, int64_t d0, int32_t domain, uint64_t total, uint64_t thr,
                        reshard_box_t *parts)
{
    const reshard_plan_params_t *p = &t->plan->p;
    int32_t R = rs_domain_ranks(p, domain);
    if (R < 2)
        return 0;
    int32_t lo = p->domain_size > 1 ? domain * p->domain_size : domain;
    uint64_t target = (total + (uint64_t)R - 1) / (uint64_t)R, slack = thr / 4;
    int64_t d1 = t->nd;
    for (int64_t i = d0; i < d1; i++) {
        int32_t x = t->d[i].land_rank;
        if (t->recv_load[x] <= target + slack)
            continue;
        uint64_t b = t->d[i].bytes;
        uint64_t want = (b + thr - 1) / thr;
        int m = stripe_box(&t->d[i].box,
                           want < RS_RELAY_MAX_STRIPES ? (int)want : RS_RELAY_MAX_STRIPES, parts);
        int keep = m;
        int32_t first_y = -1;
        while (keep > 0 && t->recv_load[x] > target + slack) {
            uint64_t sb =
                box_bytes(t->plan, t->items.v[t->u[t->d[i].unit].first].tensor, &parts[keep - 1]);
            int32_t y = -1;
            for (int32_t r = lo; r < lo + R; r++)
                if (r != x && (y < 0 || t->recv_load[r] < t->recv_load[y]))
                    y = r;
            if (t->recv_load[y] + sb > target)
                break;
            keep--;
            t->recv_load[x] -= sb;
            t->recv_load[y] += sb;
            if (keep == 0) {
                first_y = y; /* the whole landing moves: reuse it below */
                break;
            }
            if (dlv_push(t, &parts[keep], t->d[i].unit, y, t->d[i].land_frag, false) != 0)
                return -1;
        }
        if (keep == m)
            continue;
        rs_dlv_t *d = &t->d[i];
        if (first_y >= 0) {
            d->box = parts[0];
            d->land_rank = first_y;
        } else {
            d->box = box_hull(parts, keep);
        }
        d->bytes = box_bytes(t->plan, t->items.v[t->u[d->unit].first].tensor, &d->box);
    }
    return 0;
}

/* Landings of the units [u0, u1) of one domain. */
static int land_domain(rs_topo_t *t, int64_t u0, int64_t u1, rs_order_t *ord, int32_t *rk,
                       int32_t *fr, bool *used, reshard_box_t *parts, reshard_box_t *relay_parts)
{
    const rs_item_t *it = t->items.v;
    uint64_t total = 0;
    for (int64_t u = u0; u < u1; u++)
        total += t->u[u].bytes;
    int32_t R = rs_domain_ranks(&t->plan->p, it[t->u[u0].first].domain);
    uint64_t thr = total / (uint64_t)(R > 0 ? R : 1) / RS_STRIPE_PER_SHARE;
    if (thr < RS_STRIPE_MIN_BYTES)
        thr = RS_STRIPE_MIN_BYTES;
    int64_t no = 0, d0 = t->nd;
    for (int64_t u = u0; u < u1; u++) {
        const rs_item_t *f = &it[t->u[u].first];
        if (t->u[u].nranks == 1) {
            if (dlv_push(t, &f->box, u, f->receiver, f->to_frag, true) != 0)
                return -1;
        } else {
            ord[no++] = (rs_order_t){t->u[u].bytes, u};
        }
    }
    if (no > 1)
        qsort(ord, (size_t)no, sizeof *ord, cmp_order);
    for (int64_t q = 0; q < no; q++) {
        const rs_unit_t *u = &t->u[ord[q].idx];
        int32_t k = 0;
        for (int32_t i = 0; i < u->n; i++) {
            const rs_item_t *x = &it[u->first + i];
            if (i == 0 || x->receiver != it[u->first + i - 1].receiver) {
                rk[k] = x->receiver;
                fr[k] = x->to_frag;
                used[k++] = false;
            }
        }
        int m = 1;
        if (u->bytes > thr) {
            uint64_t want = (u->bytes + thr - 1) / thr;
            m = want < (uint64_t)k ? (int)want : k;
        }
        m = stripe_box(&it[u->first].box, m, parts);
        int32_t nused = 0;
        for (int s = 0; s < m; s++) {
            if (nused == k) {
                for (int32_t i = 0; i < k; i++)
                    used[i] = false;
                nused = 0;
            }
            int32_t best = -1;
            for (int32_t i = 0; i < k; i++)
                if (!used[i] && (best < 0 || t->recv_load[rk[i]] < t->recv_load[rk[best]]))
                    best = i;
            used[best] = true;
            nused++;
            if (dlv_push(t, &parts[s], ord[q].idx, rk[best], fr[best], true) != 0)
                return -1;
        }
    }
    return relay_domain(t, d0, it[t->u[u0].first].domain, total, thr, relay_parts);
}

static int land_all(rs_topo_t *t)
{
    int32_t maxn = 1;
    for (int64_t u = 0; u < t->nu; u++)
        if (t->u[u].n > maxn)
            maxn = t->u[u].n;
    rs_order_t *ord = malloc((size_t)(t->nu ? t->nu : 1) * sizeof *ord);
    int32_t *rk = malloc((size_t)maxn * sizeof *rk);
    int32_t *fr = malloc((size_t)maxn * sizeof *fr);
    bool *used = malloc((size_t)maxn * sizeof *used);
    reshard_box_t *parts = malloc((size_t)maxn * sizeof *parts);
    reshard_box_t *relay_parts = malloc(RS_RELAY_MAX_STRIPES * sizeof *relay_parts);
    int rc = ord && rk && fr && used && parts && relay_parts ? 0 : -1;
    for (int64_t u0 = 0; rc == 0 && u0 < t->nu;) {
        int64_t u1 = u0 + 1;
        int32_t dom = t->items.v[t->u[u0].first].domain;
        while (u1 < t->nu && t->items.v[t->u[u1].first].domain == dom)
            u1++;
        rc = land_domain(t, u0, u1, ord, rk, fr, used, parts, relay_parts);
        u0 = u1;
    }
    free(ord);
    free(rk);
    free(fr);
    free(used);
    free(parts);
    free(relay_parts);
    return rc;
}

/* Choose a sender per delivery: sole-holder deliveries first (their load is
 * fixed), then the rest biggest first to the least-loaded holder. */
static int choose_senders(rs_topo_t *t)
{
    const reshard_layout_t *src = t->plan->src;
    rs_order_t *ord = malloc((size_t)(t->nd ? t->nd : 1) * sizeof *ord);
    if (!ord)
        return -1;
    for (int64_t i = 0; i < t->nd; i++) {
        const rs_unit_t *u = &t->u[t->d[i].unit];
        /* sole first: put them above every byte count */
        ord[i] = (rs_order_t){u->sole ? UINT64_MAX : t->d[i].bytes, i};
    }
    if (t->nd > 1)
        qsort(ord, (size_t)t->nd, sizeof *ord, cmp_order);
    for (int64_t q = 0; q < t->nd; q++) {
        rs_dlv_t *d = &t->d[ord[q].idx];
        const rs_unit_t *u = &t->u[d->unit];
        const int32_t *h = t->hold + u->h;
        int32_t best = -1;
        for (int32_t j = 0; j < u->nh; j++) {
            int32_t r = src->f[h[j]].rank;
            if (best < 0 || t->send_load[r] < t->send_load[src->f[h[best]].rank] ||
                (t->send_load[r] == t->send_load[src->f[h[best]].rank] && r < src->f[h[best]].rank))
                best = j; /* holders ascend by fragment: the first of a rank wins */
        }
        d->sender = src->f[h[best]].rank;
        d->from_frag = h[best];
        t->send_load[d->sender] += d->bytes;
    }
    free(ord);
    return 0;
}

/* Stage-0 piece per delivery, stage-1 piece per other needer of its unit. */
static int emit(const rs_topo_t *t, rs_piece_vec_t *out)
{
    for (int64_t i = 0; i < t->nd; i++) {
        const rs_dlv_t *d = &t->d[i];
        const rs_unit_t *u = &t->u[d->unit];
        const rs_item_t *f = &t->items.v[u->first];
        rs_piece_t p = rs_direct_piece(t->plan, &d->box, f->tensor, d->from_frag, d->land_frag,
                                       d->land_rank, d->bytes);
        if (rs_piece_vec_push(out, &p) != 0)
            return -1;
        p.stage = RS_STAGE_FORWARD;
        p.from_frag = d->land_frag;
        p.sender = d->land_rank;
        for (int32_t k = 0; k < u->n; k++) {
            const rs_item_t *x = &f[k];
            if (x->to_frag == d->land_frag && x->receiver == d->land_rank)
                continue; /* landed there (a relay rank needs none of it) */
            p.to_frag = x->to_frag;
            p.receiver = x->receiver;
            if (rs_piece_vec_push(out, &p) != 0)
                return -1;
        }
    }
    return 0;
}

reshard_status_t rs_topo_pieces(const reshard_plan_t *plan, const rs_cells_t *cells,
                                rs_piece_vec_t *out)
{
    rs_topo_t t;
    memset(&t, 0, sizeof t);
    t.plan = plan;
    t.cells = cells;
    reshard_status_t st = collect_needs(plan, cells, &t.items);
    if (st != RESHARD_OK)
        return st;
    t.recv_load = calloc((size_t)plan->p.world_size, sizeof *t.recv_load);
    t.send_load = calloc((size_t)plan->p.world_size, sizeof *t.send_load);
    int rc = t.recv_load && t.send_load ? 0 : -1;
    if (rc == 0)
        rc = build_units(&t);
    if (rc == 0)
        rc = land_all(&t);
    if (rc == 0)
        rc = choose_senders(&t);
    if (rc == 0)
        rc = emit(&t, out);
    free(t.items.v);
    free(t.u);
    free(t.hold);
    free(t.d);
    free(t.recv_load);
    free(t.send_load);
    if (rc != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory placing network pieces");
    return RESHARD_OK;
}
