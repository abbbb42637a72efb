/*
 * Byte counters of a plan and the lower bounds it is judged against.
 *
 * Lower bound: every destination domain must receive, over its own
 * NICs, the unique elements its ranks need that no rank of the domain holds;
 * the source NICs must send the sum of those. Unique = the union of the
 * needed boxes of one tensor within one domain, so replicas inside a domain
 * count once.
 */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"
#include "plan/placement.h"
#include "plan/tally.h"
#include "util/error.h"

typedef struct {
    int32_t domain;
    int32_t tensor;
    int32_t sole_holder; /* rank of the only holder, or -1 when several hold it */
    reshard_box_t box;
} rs_need_t;

static int cmp_need(const void *pa, const void *pb)
{
    const rs_need_t *a = pa, *b = pb;
    if (a->domain != b->domain)
        return a->domain < b->domain ? -1 : 1;
    if (a->tensor != b->tensor)
        return a->tensor < b->tensor ? -1 : 1;
    return rs_box_cmp(&a->box, &b->box);
}

/* Leading key of both orders: (domain, tensor). */
static uint64_t key_need(const void *p)
{
    const rs_need_t *n = p;
    return ((uint64_t)(uint32_t)n->domain << 32) | (uint32_t)n->tensor;
}

/* Second keys: the box's first offset (cmp_need), the sole holder (cmp_need_sole). */
static uint64_t key2_need(const void *p)
{
    const rs_need_t *n = p;
    return n->box.ndim > 0 ? (uint64_t)n->box.offset[0] : 0;
}

static uint64_t key2_need_sole(const void *p)
{
    return (uint64_t)(int64_t)((const rs_need_t *)p)->sole_holder + 1;
}

/* Order by (domain, tensor, sole holder, box). */
static int cmp_need_sole(const void *pa, const void *pb)
{
    const rs_need_t *a = pa, *b = pb;
    if (a->domain != b->domain || a->tensor != b->tensor)
        return cmp_need(pa, pb);
    if (a->sole_holder != b->sole_holder)
        return a->sole_holder < b->sole_holder ? -1 : 1;
    return cmp_need(pa, pb);
}

/* Element count of the union of boxes n[0..k) (sorted, distinct). Disjoint
 * boxes (the common case) are summed; otherwise a coordinate-compressed grid
 * counts each covered cell once. Returns -1 on allocation failure. */
static int64_t union_numel(const rs_need_t *n, int64_t k)
{
    bool disjoint = true;
    for (int64_t i = 0; i < k && disjoint; i++)
        for (int64_t j = i + 1; j < k; j++) {
            if (n[j].box.offset[0] >= n[i].box.offset[0] + n[i].box.extent[0])
                break; /* sorted by dim-0 offset: later boxes start even further */
            reshard_box_t x;
            if (rs_box_intersect(&n[i].box, &n[j].box, &x)) {
                disjoint = false;
                break;
            }
        }
    int64_t total = 0;
    if (disjoint) {
        for (int64_t i = 0; i < k; i++)
            total += rs_box_numel(&n[i].box);
        return total;
    }
    int nd = n[0].box.ndim;
    int64_t *pts[RESHARD_MAX_DIMS] = {0}, np[RESHARD_MAX_DIMS], it[RESHARD_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++)
        if (!(pts[d] = rs_box_cuts(&n[0].box, sizeof *n, k, d, &np[d]))) {
            for (int q = 0; q < d; q++)
                free(pts[q]);
            return -1;
        }
    for (;;) {
        reshard_box_t c = {.ndim = nd};
        for (int d = 0; d < nd; d++) {
            c.offset[d] = pts[d][it[d]];
            c.extent[d] = pts[d][it[d] + 1] - pts[d][it[d]];
        }
        for (int64_t i = 0; i < k; i++)
            if (rs_box_contains(&n[i].box, &c)) {
                total += rs_box_numel(&c);
                break;
            }
        int d = nd - 1;
        for (; d >= 0; d--) {
            if (++it[d] < np[d] - 1)
                break;
            it[d] = 0;
        }
        if (d < 0)
            break;
    }
    for (int d = 0; d < nd; d++)
        free(pts[d]);
    return total;
}

reshard_status_t rs_bounds_create(const reshard_plan_t *plan, rs_bounds_t *b)
{
    b->dom_need = calloc((size_t)plan->p.world_size, sizeof *b->dom_need);
    b->sole_load = calloc((size_t)plan->p.world_size, sizeof *b->sole_load);
    if (!b->dom_need || !b->sole_load) {
        rs_bounds_free(b);
        return rs_error(RESHARD_ERR_NOMEM, "plan statistics: out of memory");
    }
    return RESHARD_OK;
}

void rs_bounds_free(rs_bounds_t *b)
{
    free(b->dom_need);
    free(b->sole_load);
    b->dom_need = b->sole_load = NULL;
}

reshard_status_t rs_bounds_add(const reshard_plan_t *plan, const rs_cells_t *cells, rs_bounds_t *b)
{
    const reshard_plan_params_t *p = &plan->p;
    uint64_t *dom_need = b->dom_need, *sole_load = b->sole_load;
    rs_need_t *need = malloc((size_t)(cells->n ? cells->n : 1) * sizeof *need);
    if (!need)
        return rs_error(RESHARD_ERR_NOMEM, "plan statistics: out of memory");
    int64_t nn = 0;
    for (int64_t i = 0; i < cells->n; i++) {
        const rs_cell_t *c = &cells->c[i];
        int32_t dom = rs_domain_of(p, c->receiver), sole = -1;
        bool inside = false;
        for (int32_t j = 0; j < c->nholders && !inside; j++) {
            int32_t r = plan->src->f[cells->h[c->holders + j]].rank;
            inside = rs_domain_of(p, r) == dom;
            sole = j == 0 ? r : (sole == r ? r : -2);
        }
        if (!inside)
            need[nn++] = (rs_need_t){dom, c->tensor, sole >= 0 ? sole : -1, c->box};
    }
    if (rs_sort_records(need, (size_t)nn, sizeof *need, cmp_need, key_need, key2_need) != 0) {
        free(need);
        return rs_error(RESHARD_ERR_NOMEM, "plan statistics: out of memory");
    }
    /* drop exact duplicates (replicas of one box in one domain) */
    int64_t w = 0;
    for (int64_t i = 0; i < nn; i++)
        if (w == 0 || cmp_need(&need[w - 1], &need[i]) != 0)
            need[w++] = need[i];
    nn = w;
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; i < nn && st == RESHARD_OK;) {
        int64_t j = i;
        while (j < nn && need[j].domain == need[i].domain && need[j].tensor == need[i].tensor)
            j++;
        int64_t el = union_numel(&need[i], j - i);
        if (el < 0) {
            st = rs_error(RESHARD_ERR_NOMEM, "plan statistics: out of memory");
            break;
        }
        const rs_tensor_t *t = &plan->dst->tensors->t[need[i].tensor];
        uint64_t es = reshard_dtype_size(t->dtype);
        dom_need[need[i].domain] += (uint64_t)el * es;
        i = j;
    }
    /* what only one rank holds: the union per (domain, tensor, holder), since
     * needed boxes of one domain may overlap */
    if (st == RESHARD_OK && rs_sort_records(need, (size_t)nn, sizeof *need, cmp_need_sole, key_need,
                                            key2_need_sole) != 0)
        st = rs_error(RESHARD_ERR_NOMEM, "plan statistics: out of memory");
    for (int64_t i = 0; i < nn && st == RESHARD_OK;) {
        int64_t j = i;
        while (j < nn && need[j].domain == need[i].domain && need[j].tensor == need[i].tensor &&
               need[j].sole_holder == need[i].sole_holder)
            j++;
        if (need[i].sole_holder >= 0) {
            int64_t el = union_numel(&need[i], j - i);
            if (el < 0)
                st = rs_error(RESHARD_ERR_NOMEM, "plan statistics: out of memory");
            else
                sole_load[need[i].sole_holder] +=
                    (uint64_t)el * reshard_dtype_size(plan->dst->tensors->t[need[i].tensor].dtype);
        }
        i = j;
    }
    free(need);
    return st;
}

reshard_status_t rs_stats_compute(reshard_plan_t *plan, const rs_bounds_t *b)
{
    const reshard_plan_params_t *p = &plan->p;
    int32_t W = p->world_size;
    reshard_plan_stats_t *s = &plan->stats;
    memset(s, 0, sizeof *s);
    const rs_tally_t *t = plan->tally;
    const uint64_t *nic_send = t->nic_send, *nic_recv = t->nic_recv, *relay = t->relay;
    const uint64_t *dom_need = b->dom_need, *sole_load = b->sole_load;
    int32_t *dom_ranks = calloc((size_t)W, sizeof *dom_ranks);
    bool *is_src = calloc((size_t)W, sizeof *is_src);
    reshard_status_t st = RESHARD_OK;
    if (!dom_ranks || !is_src)
        st = rs_error(RESHARD_ERR_NOMEM, "plan statistics: out of memory");
    s->bytes_total = t->bytes_total;
    s->bytes_local = t->bytes_local;
    s->bytes_nvlink = t->bytes_nvlink;
    s->bytes_network = t->bytes_network;
    s->pieces = t->pieces;
    s->bytes_same_device = t->bytes_path[RS_PATH_DEVICE];
    s->bytes_same_host = t->bytes_path[RS_PATH_HOST];
    s->bytes_cross_host = rs_has_placement(p) ? t->bytes_path[RS_PATH_NETWORK] : 0;
    s->bytes_peer_read = t->bytes_peer_read;
    /* streams between distinct ranks the counted rank sends */
    for (int64_t i = 0; i < t->cap; i++) {
        uint64_t k = t->streams[i].key;
        int32_t snd = rs_tally_sender(k);
        if (k && snd != rs_tally_receiver(k) && (t->rank == RESHARD_ALL_RANKS || snd == t->rank))
            s->transfers++;
    }
    for (int32_t r = 0; st == RESHARD_OK && r < W; r++) {
        if (nic_send[r] > s->max_nic_send_bytes)
            s->max_nic_send_bytes = nic_send[r];
        if (nic_recv[r] > s->max_nic_recv_bytes)
            s->max_nic_recv_bytes = nic_recv[r];
        if (relay[r] > s->max_relay_bytes)
            s->max_relay_bytes = relay[r];
    }
    /* the bounds need every group: global plans only */
    if (st == RESHARD_OK && plan->p.my_rank == RESHARD_ALL_RANKS) {
        for (int64_t i = 0; i < plan->src->n; i++)
            is_src[plan->src->f[i].rank] = true;
        int32_t nsrc = 0;
        for (int32_t r = 0; r < W; r++) {
            nsrc += is_src[r];
            if (sole_load[r] > s->nic_send_bound_bytes)
                s->nic_send_bound_bytes = sole_load[r];
            dom_ranks[rs_domain_of(p, r)]++;
        }
        for (int32_t d = 0; d < W; d++) {
            s->bytes_lower_bound += dom_need[d];
            if (dom_ranks[d]) {
                uint64_t share =
                    (dom_need[d] + (uint64_t)dom_ranks[d] - 1) / (uint64_t)dom_ranks[d];
                if (share > s->nic_recv_bound_bytes)
                    s->nic_recv_bound_bytes = share;
            }
        }
        if (rs_has_placement(p)) {
            s->bound_same_device_bytes = b->path[RS_PATH_DEVICE];
            s->bound_same_host_bytes = b->path[RS_PATH_HOST];
            s->bound_cross_host_bytes = b->path[RS_PATH_NETWORK];
        }
        uint64_t mean = nsrc ? (s->bytes_lower_bound + (uint64_t)nsrc - 1) / (uint64_t)nsrc : 0;
        if (mean > s->nic_send_bound_bytes)
            s->nic_send_bound_bytes = mean;
    }
    free(dom_ranks);
    free(is_src);
    return st;
}
