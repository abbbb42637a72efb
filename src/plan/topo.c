/*
 * Step 3 of planning: domain dedup, landing, striping, forwarding.
 *
 *   1. Needs: every cell no rank of its receiver's domain holds, keyed by
 *      (destination domain, tensor, box).
 *   2. Refine: inside one (domain, tensor) group, boxes that overlap without
 *      being equal are cut along each other's boundaries, so every element a
 *      domain needs belongs to exactly one distinct box (a unit).
 *   3. Land: per (domain, tensor) group, units needed by one rank land
 *      there; the others go, biggest first, to the needer with the fewest
 *      bytes landed in the group, large ones striped across their needers.
 *      A rank left above the group's per-rank share (parts only it needs)
 *      relays stripes through the ranks of the domain with the fewest: they
 *      land in that rank's relay scratch and are forwarded from there.
 *   4. Send: over all groups of the tensor at once, each holder set's
 *      deliveries are shared among its ranks by water-filling on the bytes
 *      each already sends of the tensor (to every domain), cut at the shares.
 *   5. Forward: the landing rank passes each delivery to every other
 *      fragment of its domain that needs it (stage 1).
 * Landing loads are counted per group; send loads per tensor, over all of
 * its groups, with ties broken in an order rotated per tensor: a rank's own
 * plan computes every group of a tensor with replicas (rs_scope_build) and
 * still makes the global plan's choices.
 * Every order is a total order on plan data, so every rank computes the same
 * pieces.
 */
#include <stdlib.h>
#include <string.h>

#include "plan/topo.h"
#include "util/error.h"

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

/* Leading key of cmp_item: (domain, tensor). */
static uint64_t key_item(const void *p)
{
    const rs_item_t *it = p;
    return ((uint64_t)(uint32_t)it->domain << 32) | (uint32_t)it->tensor;
}

/* Second key of cmp_item: the box's first offset. */
static uint64_t key2_item(const void *p)
{
    const rs_item_t *it = p;
    return it->box.ndim > 0 ? (uint64_t)it->box.offset[0] : 0;
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
            lo[d] = rs_lower_bound(pts[d], np[d], it[i].box.offset[d]);
            hi[d] = rs_lower_bound(pts[d], np[d], it[i].box.offset[d] + it[i].box.extent[d]);
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
            if (!rs_grid_next(nd, k, lo, hi))
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
    if (rs_sort_records(raw.v, (size_t)raw.n, sizeof *raw.v, cmp_item, key_item, key2_item) != 0)
        goto oom;
    /* usually no two boxes of a group overlap and raw is the result; from
     * the first group that does, out takes the items over */
    bool refined = false;
    for (int64_t i = 0; i < raw.n;) {
        int64_t j = i + 1;
        while (j < raw.n && raw.v[j].domain == raw.v[i].domain &&
               raw.v[j].tensor == raw.v[i].tensor)
            j++;
        if (group_overlaps(&raw.v[i], j - i)) {
            for (int64_t q = 0; !refined && q < i; q++)
                if (items_push(out, &raw.v[q]) != 0)
                    goto oom;
            refined = true;
            int64_t start = out->n;
            if (refine_group(&raw.v[i], j - i, out) != 0)
                goto oom;
            if (rs_sort_records(out->v + start, (size_t)(out->n - start), sizeof *out->v, cmp_item,
                                NULL, NULL) != 0)
                goto oom;
        } else {
            for (int64_t q = i; refined && q < j; q++)
                if (items_push(out, &raw.v[q]) != 0)
                    goto oom;
        }
        i = j;
    }
    if (!refined) {
        *out = raw;
        return RESHARD_OK;
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

struct rs_topo {
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
    uint64_t *relay_used; /* per rank: relay scratch taken in the current group */
    uint64_t *dom_bytes;  /* per domain: bytes of its destination fragments (with a
                             relay scratch bound) */
};

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

/* True when h[0..n) ascends (holders come in layout order, so they usually
 * do: no sort needed). */
static bool ascending(const int32_t *h, int64_t n)
{
    for (int64_t q = 1; q < n; q++)
        if (h[q - 1] > h[q])
            return false;
    return true;
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
        /* replicas in the domain need the same box from the same holders:
         * one copy of the list is the union */
        const rs_cell_t *c0 = &t->cells->c[it->v[i].cell];
        bool same = true;
        for (int64_t q = i + 1; q < j && same; q++) {
            const rs_cell_t *c = &t->cells->c[it->v[q].cell];
            same = c->nholders == c0->nholders &&
                   !memcmp(t->cells->h + c->holders, t->cells->h + c0->holders,
                           (size_t)c0->nholders * sizeof *h);
        }
        for (int64_t q = i; q < (same ? i + 1 : j); q++) {
            const rs_cell_t *c = &t->cells->c[it->v[q].cell];
            memcpy(h + k, t->cells->h + c->holders, (size_t)c->nholders * sizeof *h);
            k += c->nholders;
        }
        if (!ascending(h, k)) /* a cell lists each holder once: sorted, no duplicate is apart */
            qsort(h, (size_t)k, sizeof *h, cmp_i32);
        int64_t w = 0;
        for (int64_t q = 0; q < k; q++)
            if (w == 0 || h[q] != h[w - 1])
                h[w++] = h[q];
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

/* The group of units [u0, u1): one (domain, tensor). */
typedef struct {
    int64_t u0, u1;
    int32_t domain, tensor;
    int32_t lo, R; /* the domain's ranks: [lo, lo + R) */
    uint64_t total, thr;
} rs_group_t;

/* Relays (a piece may land on a rank that does not need it): while a rank
 * of the domain lands more than the group's share (the parts only it
 * needs), the most loaded such rank hands a stripe of its landings, from the
 * end, to the least loaded rank of the domain with room in its relay
 * scratch (its part of the bound), which forwards it. Taking turns between
 * the overloaded ranks spreads a tight scratch bound over all of them.
 * Deliveries [d0, nd) are the group's. */
static int relay_group(rs_topo_t *t, const rs_group_t *g, int64_t d0, reshard_box_t *parts)
{
    int64_t n = t->nd - d0;
    if (g->R < 2 || n == 0)
        return 0;
    uint64_t target = (g->total + (uint64_t)g->R - 1) / (uint64_t)g->R,
             limit = rs_group_relay_limit(g->total, g->R);
    /* the relay scratch bound, shared by the domain's groups in proportion
     * to their bytes (their sum is at most the domain's fragment bytes) */
    uint64_t cap = t->plan->p.relay_bytes, budget = UINT64_MAX;
    if (cap != UINT64_MAX)
        budget = t->dom_bytes[g->domain]
                     ? (uint64_t)((unsigned __int128)cap * g->total / t->dom_bytes[g->domain])
                     : 0;
    int32_t rot = rs_group_rotation(g->domain, g->tensor, 1, g->R);
    /* per delivery: its stripes and how many it keeps; per rank: its last
     * delivery with stripes left, the earlier ones chained by prev */
    int32_t *m = malloc((size_t)n * sizeof *m), *keep = malloc((size_t)n * sizeof *keep);
    int64_t *prev = malloc((size_t)n * sizeof *prev), *last = malloc((size_t)g->R * sizeof *last);
    int32_t *moved_to = malloc((size_t)n * sizeof *moved_to);
    int rc = m && keep && prev && last && moved_to ? 0 : -1;
    for (int32_t q = 0; rc == 0 && q < g->R; q++)
        last[q] = -1;
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        const rs_dlv_t *d = &t->d[d0 + i];
        uint64_t want = (d->bytes + g->thr - 1) / g->thr;
        m[i] = keep[i] = stripe_box(
            &d->box, want < RS_RELAY_MAX_STRIPES ? (int)want : RS_RELAY_MAX_STRIPES, parts);
        moved_to[i] = -1;
        int32_t x = d->land_rank - g->lo;
        prev[i] = last[x];
        last[x] = i;
    }
    while (rc == 0) {
        int32_t xq = -1; /* the most loaded rank over the share with stripes left */
        for (int32_t q = 0; q < g->R; q++) {
            int32_t r = (rot + q) % g->R;
            if (last[r] >= 0 && t->recv_load[g->lo + r] > limit &&
                (xq < 0 || t->recv_load[g->lo + r] > t->recv_load[g->lo + xq]))
                xq = r;
        }
        if (xq < 0)
            break;
        int32_t x = g->lo + xq;
        int64_t i = last[xq];
        stripe_box(&t->d[d0 + i].box, m[i], parts);
        uint64_t sb = box_bytes(t->plan, g->tensor, &parts[keep[i] - 1]);
        uint64_t scratch = (sb + 7u) & ~(uint64_t)7u; /* as the stream holds it */
        int32_t y = -1; /* the least loaded rank with room; ties rotated */
        for (int32_t q = 0; q < g->R; q++) {
            int32_t r = g->lo + (rot + q) % g->R;
            if (r != x && !(t->plan->gone && t->plan->gone[r]) &&
                t->relay_used[r] + scratch <= budget &&
                (y < 0 || t->recv_load[r] < t->recv_load[y]))
                y = r;
        }
        if (y < 0 || t->recv_load[y] + sb > target) {
            last[xq] = -1; /* nowhere to go: this rank relays no more */
            continue;
        }
        keep[i]--;
        t->recv_load[x] -= sb;
        t->recv_load[y] += sb;
        t->relay_used[y] += scratch;
        if (keep[i] == 0) {
            moved_to[i] = y;    /* the whole landing moves: it is reused below */
            last[xq] = prev[i]; /* on to the rank's previous landing */
        } else {
            int32_t frag = t->d[d0 + i].land_frag;
            if (dlv_push(t, &parts[keep[i]], t->d[d0 + i].unit, y, frag, false) != 0)
                rc = -1;
        }
    }
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        if (keep[i] == m[i])
            continue;
        rs_dlv_t *d = &t->d[d0 + i];
        stripe_box(&d->box, m[i], parts);
        if (moved_to[i] >= 0) {
            d->box = parts[0];
            d->land_rank = moved_to[i];
        } else {
            d->box = box_hull(parts, keep[i]);
        }
        d->bytes = box_bytes(t->plan, g->tensor, &d->box);
    }
    free(m);
    free(keep);
    free(prev);
    free(last);
    free(moved_to);
    return rc;
}

/* Scratch for landing one group. */
typedef struct {
    rs_order_t *ord, *nord;
    int32_t *rk, *fr;
    reshard_box_t *parts, *relay_parts;
} rs_land_scratch_t;

/* Landings of one group. */
static int land_group(rs_topo_t *t, const rs_group_t *g, rs_land_scratch_t *s)
{
    const rs_item_t *it = t->items.v;
    int64_t no = 0, d0 = t->nd;
    for (int64_t u = g->u0; u < g->u1; u++) {
        const rs_item_t *f = &it[t->u[u].first];
        if (t->u[u].nranks == 1) {
            if (dlv_push(t, &f->box, u, f->receiver, f->to_frag, true) != 0)
                return -1;
        } else {
            s->ord[no++] = (rs_order_t){t->u[u].bytes, u};
        }
    }
    if (no > 1)
        qsort(s->ord, (size_t)no, sizeof *s->ord, cmp_order);
    for (int64_t q = 0; q < no; q++) {
        const rs_unit_t *u = &t->u[s->ord[q].idx];
        int32_t k = 0;
        for (int32_t i = 0; i < u->n; i++) {
            const rs_item_t *x = &it[u->first + i];
            if (i == 0 || x->receiver != it[u->first + i - 1].receiver) {
                s->rk[k] = x->receiver;
                s->fr[k++] = x->to_frag;
            }
        }
        int m = 1;
        if (u->bytes > g->thr) {
            uint64_t want = (u->bytes + g->thr - 1) / g->thr;
            m = want < (uint64_t)k ? (int)want : k;
        }
        m = stripe_box(&it[u->first].box, m, s->parts);
        /* stripes go to distinct needers, least landed first (ties in the
         * rotated order): their loads do not change until chosen */
        int32_t rot = rs_group_rotation(g->domain, g->tensor, no, k);
        for (int32_t q2 = 0; q2 < k; q2++)
            s->nord[q2] = (rs_order_t){UINT64_MAX - t->recv_load[s->rk[(rot + q2) % k]], q2};
        if (k > 1)
            qsort(s->nord, (size_t)k, sizeof *s->nord, cmp_order);
        for (int p = 0; p < m; p++) {
            int32_t best = (int32_t)((rot + s->nord[p].idx) % k);
            if (dlv_push(t, &s->parts[p], s->ord[q].idx, s->rk[best], s->fr[best], true) != 0)
                return -1;
        }
    }
    /* a group computed for its senders only relays nothing (rs_scope_build) */
    if (rs_scope_sends_only(&t->plan->scope, g->domain, g->tensor))
        return 0;
    return relay_group(t, g, d0, s->relay_parts);
}

/* Senders of one tensor, chosen over all its groups at once (every rank
 * that computes a group of a tensor with replicas computes all of its
 * groups: rs_scope_build), so the load of a replica counts what it sends to
 * every domain. Deliveries are taken a holder set at a time (smallest sets
 * first: a sole holder's load is fixed), and each set's bytes are shared
 * among its ranks by water-filling on their loads: the least loaded ranks
 * (ties in an order rotated per tensor) are raised to one level, and the
 * set's deliveries, laid end to end, are cut at the ranks' shares (along
 * their outermost dim of extent > 1). A set too small to share over all of
 * its ranks goes to as many as get RS_SEND_SHARE_MIN_BYTES each. */
#define RS_SEND_SHARE_MIN_BYTES ((uint64_t)256)

typedef struct {
    const int32_t *h;
    int32_t nh;
    int64_t idx;
    uint64_t bytes;
} rs_dset_t;

static int cmp_dset(const void *pa, const void *pb)
{
    const rs_dset_t *a = pa, *b = pb;
    if (a->nh != b->nh)
        return a->nh < b->nh ? -1 : 1;
    for (int32_t j = 0; j < a->nh; j++)
        if (a->h[j] != b->h[j])
            return a->h[j] < b->h[j] ? -1 : 1;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* A candidate sender of one holder set. */
typedef struct {
    uint64_t load;
    int32_t order, rank, frag;
} rs_cand_t;

static int cmp_cand(const void *pa, const void *pb)
{
    const rs_cand_t *a = pa, *b = pb;
    if (a->load != b->load)
        return a->load < b->load ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* Split delivery @p i after its first @p rows rows along dim @p dim: the
 * rest becomes a new delivery (appended); returns its index, -1 when out of
 * memory. */
static int64_t split_dlv(rs_topo_t *t, int64_t i, int dim, int64_t rows)
{
    reshard_box_t rest = t->d[i].box;
    rest.offset[dim] += rows;
    rest.extent[dim] -= rows;
    if (rs_grow(&t->d, &t->dcap, t->nd, sizeof *t->d) != 0)
        return -1;
    rs_dlv_t *d = &t->d[i], *r = &t->d[t->nd];
    *r = *d;
    r->box = rest;
    d->box.extent[dim] = rows;
    int32_t tensor = t->items.v[t->u[d->unit].first].tensor;
    d->bytes = box_bytes(t->plan, tensor, &d->box);
    r->bytes = box_bytes(t->plan, tensor, &r->box);
    return t->nd++;
}

/* Share the deliveries set[0..n) (one holder set, biggest first) among its
 * candidate ranks. */
static int share_set(rs_topo_t *t, int32_t tensor, const rs_dset_t *set, int64_t n, rs_cand_t *cand)
{
    const reshard_layout_t *src = t->plan->src;
    const int32_t *h = set[0].h;
    int32_t nc = 0;
    for (int32_t j = 0; j < set[0].nh; j++) { /* distinct ranks, first fragment each */
        int32_t r = src->f[h[j]].rank, k = 0;
        while (k < nc && cand[k].rank != r)
            k++;
        if (k == nc)
            cand[nc++] = (rs_cand_t){0, 0, r, h[j]};
    }
    uint64_t total = 0;
    for (int64_t q = 0; q < n; q++)
        total += t->d[set[q].idx].bytes;
    int32_t rot = rs_group_rotation(0, tensor, 1, nc);
    for (int32_t k = 0; k < nc; k++) {
        cand[k].load = t->send_load[cand[k].rank];
        cand[k].order = (k - rot + nc) % nc;
    }
    if (nc > 1)
        qsort(cand, (size_t)nc, sizeof *cand, cmp_cand);
    /* how many share it, and the level they are raised to */
    int32_t m = nc;
    if ((uint64_t)m > total / RS_SEND_SHARE_MIN_BYTES)
        m = total / RS_SEND_SHARE_MIN_BYTES > 0 ? (int32_t)(total / RS_SEND_SHARE_MIN_BYTES) : 1;
    uint64_t sum = 0;
    int32_t k = 0;
    for (; k < m; k++) {
        sum += cand[k].load;
        /* the level with k+1 ranks; stop when the next rank is above it */
        unsigned __int128 lvl = ((unsigned __int128)sum + total) / (uint64_t)(k + 1);
        if (k + 1 == m || (unsigned __int128)cand[k + 1].load >= lvl)
            break;
    }
    m = k + 1;
    uint64_t level = (uint64_t)(((unsigned __int128)sum + total + (uint64_t)m - 1) / (uint64_t)m);
    /* lay the deliveries end to end over the m ranks' shares: rank c's
     * share ends at end (cumulative), so cuts to the nearest row do not add
     * up on the last rank */
    int32_t c = 0;
    uint64_t pos = 0, end = level > cand[0].load ? level - cand[0].load : 0;
    for (int64_t q = 0; q < n; q++) {
        int64_t i = set[q].idx;
        for (;;) {
            rs_dlv_t *d = &t->d[i];
            uint64_t room = end > pos ? end - pos : 0;
            bool whole = c == m - 1 || d->bytes <= room;
            int dim = 0;
            int64_t rows = 0;
            if (!whole) { /* cut at the share, to the nearest row; within half a row: whole */
                while (dim + 1 < d->box.ndim && d->box.extent[dim] < 2)
                    dim++;
                uint64_t row = d->bytes / (uint64_t)d->box.extent[dim];
                rows = row ? (int64_t)((room + row / 2) / row) : 0;
                whole = rows >= d->box.extent[dim];
            }
            if (whole || rows > 0) {
                int64_t rest = whole ? -1 : split_dlv(t, i, dim, rows);
                if (!whole && rest < 0)
                    return -1;
                d = &t->d[i];
                d->sender = cand[c].rank;
                d->from_frag = cand[c].frag;
                t->send_load[d->sender] += d->bytes;
                pos += d->bytes;
                if (whole && (c == m - 1 || end > pos))
                    break;
                i = rest;
            }
            c++; /* this rank's share is full */
            end += level > cand[c].load ? level - cand[c].load : 0;
            if (i < 0)
                break;
        }
    }
    return 0;
}

/* Choose a sender for every delivery [0, nd) of one tensor (see above). */
static int choose_senders(rs_topo_t *t, int32_t tensor)
{
    int64_t n = t->nd;
    int32_t maxh = 1;
    rs_dset_t *set = malloc((size_t)(n ? n : 1) * sizeof *set);
    int rc = set ? 0 : -1;
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        const rs_unit_t *u = &t->u[t->d[i].unit];
        set[i] = (rs_dset_t){t->hold + u->h, u->nh, i, t->d[i].bytes};
        if (u->nh > maxh)
            maxh = u->nh;
    }
    rs_cand_t *cand = rc == 0 ? malloc((size_t)maxh * sizeof *cand) : NULL;
    rc = cand ? rc : -1;
    if (rc == 0 && n > 1)
        qsort(set, (size_t)n, sizeof *set, cmp_dset);
    for (int64_t a = 0; rc == 0 && a < n;) {
        int64_t b = a + 1;
        while (b < n && set[b].nh == set[a].nh &&
               !memcmp(set[b].h, set[a].h, (size_t)set[a].nh * sizeof *set[a].h))
            b++;
        rc = share_set(t, tensor, set + a, b - a, cand);
        a = b;
    }
    /* loads are per tensor: clear what this one added */
    for (int64_t i = 0; i < t->nd; i++)
        t->send_load[t->d[i].sender] = 0;
    free(set);
    free(cand);
    return rc;
}

/* Land and send every group, one (domain, tensor) at a time. */
static int land_all(rs_topo_t *t)
{
    const reshard_plan_params_t *p = &t->plan->p;
    int32_t maxn = 1, maxh = 1;
    for (int64_t u = 0; u < t->nu; u++) {
        if (t->u[u].n > maxn)
            maxn = t->u[u].n;
        if (t->u[u].nh > maxh)
            maxh = t->u[u].nh;
    }
    rs_land_scratch_t s = {
        .ord = malloc((size_t)(t->nu ? t->nu : 1) * sizeof *s.ord),
        .rk = malloc((size_t)maxn * sizeof *s.rk),
        .fr = malloc((size_t)maxn * sizeof *s.fr),
        .nord = malloc((size_t)maxn * sizeof *s.nord),
        .parts = malloc((size_t)maxn * sizeof *s.parts),
        .relay_parts = malloc(RS_RELAY_MAX_STRIPES * sizeof *s.relay_parts),
    };
    int rc = s.ord && s.nord && s.rk && s.fr && s.parts && s.relay_parts ? 0 : -1;
    int32_t tensor = t->nu ? t->items.v[t->u[0].first].tensor : 0;
    for (int64_t u0 = 0; rc == 0 && u0 < t->nu;) {
        const rs_item_t *f = &t->items.v[t->u[u0].first];
        rs_group_t g = {.u0 = u0, .u1 = u0 + 1, .domain = f->domain, .tensor = f->tensor};
        while (g.u1 < t->nu && t->items.v[t->u[g.u1].first].domain == g.domain &&
               t->items.v[t->u[g.u1].first].tensor == g.tensor)
            g.u1++;
        g.R = rs_domain_ranks(p, g.domain);
        g.lo = p->domain_size > 1 ? g.domain * p->domain_size : g.domain;
        for (int64_t u = u0; u < g.u1; u++)
            g.total += t->u[u].bytes;
        g.thr = rs_group_stripe_bytes(g.total, g.R);
        rc = land_group(t, &g, &s);
        /* landing loads are per group: clear the domain's */
        for (int32_t i = 0; i < g.R; i++)
            t->recv_load[g.lo + i] = t->relay_used[g.lo + i] = 0;
        u0 = g.u1;
    }
    /* senders: over every group of the tensor */
    if (rc == 0)
        rc = choose_senders(t, tensor);
    free(s.ord);
    free(s.rk);
    free(s.fr);
    free(s.nord);
    free(s.parts);
    free(s.relay_parts);
    return rc;
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
        if (rs_piece_vec_push(t->plan, out, &p) != 0)
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
            if (rs_piece_vec_push(t->plan, out, &p) != 0)
                return -1;
        }
    }
    return 0;
}

reshard_status_t rs_topo_create(const reshard_plan_t *plan, rs_topo_t **out)
{
    rs_topo_t *t = calloc(1, sizeof *t);
    if (!t)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory placing network pieces");
    t->plan = plan;
    t->recv_load = calloc((size_t)plan->p.world_size, sizeof *t->recv_load);
    t->send_load = calloc((size_t)plan->p.world_size, sizeof *t->send_load);
    t->relay_used = calloc((size_t)plan->p.world_size, sizeof *t->relay_used);
    t->dom_bytes = calloc((size_t)rs_domain_count(&plan->p), sizeof *t->dom_bytes);
    if (!t->recv_load || !t->send_load || !t->relay_used || !t->dom_bytes) {
        rs_topo_free(t);
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory placing network pieces");
    }
    /* for a relay scratch bound only; every rank sums the same fragments,
     * whatever its plan's scope */
    for (int64_t i = 0; plan->p.relay_bytes != UINT64_MAX && i < plan->dst->n; i++) {
        const reshard_fragment_t *f = &plan->dst->f[i];
        t->dom_bytes[rs_domain_of(&plan->p, f->rank)] += box_bytes(plan, f->tensor, &f->box);
    }
    *out = t;
    return RESHARD_OK;
}

/* Drop what one call of rs_topo_pieces built (the loads are clear already). */
static void topo_reset(rs_topo_t *t)
{
    free(t->items.v);
    free(t->u);
    free(t->hold);
    free(t->d);
    memset(&t->items, 0, sizeof t->items);
    t->u = NULL;
    t->hold = NULL;
    t->d = NULL;
    t->nu = t->nhold = t->nd = t->dcap = 0;
    t->cells = NULL;
}

void rs_topo_free(rs_topo_t *t)
{
    if (!t)
        return;
    topo_reset(t);
    free(t->recv_load);
    free(t->send_load);
    free(t->relay_used);
    free(t->dom_bytes);
    free(t);
}

reshard_status_t rs_topo_pieces(rs_topo_t *t, const rs_cells_t *cells, rs_piece_vec_t *out)
{
    t->cells = cells;
    reshard_status_t st = collect_needs(t->plan, cells, &t->items);
    if (st != RESHARD_OK)
        return st;
    int rc = build_units(t);
    if (rc == 0)
        rc = land_all(t);
    if (rc == 0)
        rc = emit(t, out);
    topo_reset(t);
    if (rc != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory placing network pieces");
    return RESHARD_OK;
}
