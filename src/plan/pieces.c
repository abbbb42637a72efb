/* Step 4: pieces from assigned cells (in-domain) and from the topology step
 * (network landings and forwards), kept when in the plan's scope (whole
 * streams: rs_piece_vec_push), one tensor's cells at a time, merged where
 * boxes touch (a merge never joins two tensors); then all put in stream
 * order. */
#include <stdlib.h>
#include <string.h>

#include "plan/tally.h" /* rs_tally_key */
#include "plan/topo.h"  /* rs_topo_pieces */
#include "util/error.h"

static int cmp_piece(const void *pa, const void *pb)
{
    const rs_piece_t *a = pa, *b = pb;
#define RS_CMP(f)                                                                                  \
    if (a->f != b->f)                                                                              \
        return a->f < b->f ? -1 : 1;
    RS_CMP(stage)
    RS_CMP(sender)
    RS_CMP(receiver)
    RS_CMP(tensor)
    RS_CMP(to_frag)
    RS_CMP(from_frag)
#undef RS_CMP
    for (int d = 0; d < a->box.ndim; d++)
        if (a->box.offset[d] != b->box.offset[d])
            return a->box.offset[d] < b->box.offset[d] ? -1 : 1;
    return 0;
}

/* Merge b into a when they share every dim but one, where they touch. */
static bool try_merge(const reshard_layout_t *dst, rs_piece_t *a, const rs_piece_t *b)
{
    if (a->stage != b->stage || a->sender != b->sender || a->receiver != b->receiver ||
        a->to_frag != b->to_frag || a->from_frag != b->from_frag)
        return false;
    /* a relayed landing and its forwards keep equal boxes: never merged */
    if (rs_piece_is_relay(dst, a) || rs_piece_is_relay(dst, b))
        return false;
    int diff = -1;
    for (int d = 0; d < a->box.ndim; d++) {
        if (a->box.offset[d] == b->box.offset[d] && a->box.extent[d] == b->box.extent[d])
            continue;
        if (diff >= 0 || a->box.offset[d] + a->box.extent[d] != b->box.offset[d])
            return false;
        diff = d;
    }
    if (diff < 0)
        return false;
    a->box.extent[diff] += b->box.extent[diff];
    a->bytes += b->bytes;
    return true;
}

/* Stream order (cmp_piece, ties by position: stable) without comparing
 * most pairs: counting sorts by receiver, then by (stage, sender), give the
 * order of the leading fields; the pieces of one stream then keep the order
 * they were made in (tensor by tensor), and only streams found out of order
 * are sorted. */
static int sort_pieces(rs_piece_t *p, int64_t n, int32_t world)
{
    size_t nb = (size_t)RS_NSTAGES * (size_t)world + 1;
    size_t *cnt = calloc(nb, sizeof *cnt), *a = malloc((size_t)(n ? n : 1) * sizeof *a),
           *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    rs_ref_t *r = NULL;
    rs_piece_t tmp;
    int rc = cnt && a && b ? 0 : -1;
    if (rc == 0) {
        for (int64_t i = 0; i < n; i++)
            cnt[p[i].receiver + 1]++;
        for (int32_t k = 0; k < world; k++)
            cnt[k + 1] += cnt[k];
        for (int64_t i = 0; i < n; i++)
            a[cnt[p[i].receiver]++] = (size_t)i;
        memset(cnt, 0, nb * sizeof *cnt);
        for (int64_t i = 0; i < n; i++)
            cnt[(size_t)p[i].stage * (size_t)world + (size_t)p[i].sender + 1]++;
        for (size_t k = 0; k + 1 < nb; k++)
            cnt[k + 1] += cnt[k];
        for (int64_t i = 0; i < n; i++) {
            const rs_piece_t *q = &p[a[i]];
            b[cnt[(size_t)q->stage * (size_t)world + (size_t)q->sender]++] = a[i];
        }
    }
    /* streams (stage, sender, receiver) out of order: sort them */
    int64_t rcap = 0;
    for (int64_t i = 0; rc == 0 && i < n;) {
        const rs_piece_t *f = &p[b[i]];
        int64_t j = i + 1;
        bool sorted = true;
        while (j < n && p[b[j]].stage == f->stage && p[b[j]].sender == f->sender &&
               p[b[j]].receiver == f->receiver) {
            sorted = sorted && cmp_piece(&p[b[j - 1]], &p[b[j]]) <= 0;
            j++;
        }
        if (!sorted) {
            if (j - i > rcap) {
                rcap = 2 * (j - i);
                rs_ref_t *nr = realloc(r, (size_t)rcap * sizeof *nr);
                if (!nr) {
                    rc = -1;
                    break;
                }
                r = nr;
            }
            for (int64_t k = i; k < j; k++)
                r[k - i] = (rs_ref_t){0, 0, &p[b[k]], cmp_piece};
            rs_sort_refs(r, (size_t)(j - i));
            for (int64_t k = i; k < j; k++)
                b[k] = (size_t)((const rs_piece_t *)r[k - i].rec - p);
        }
        i = j;
    }
    if (rc == 0)
        rs_permute_records(p, (size_t)n, sizeof *p, b, &tmp);
    free(cnt);
    free(a);
    free(b);
    free(r);
    return rc;
}

/* Key of the leading fields of cmp_piece: the stream (stage, sender, receiver). */
static uint64_t key_piece(const void *pp)
{
    const rs_piece_t *p = pp;
    return rs_tally_key(p->stage, p->sender, p->receiver);
}

/* Do two of the @p n pieces share stage and fragments (so that they might
 * merge)? A hash set of (to_frag, from_frag, stage); -1 when out of memory. */
static int may_merge(const rs_piece_t *p, int64_t n)
{
    int64_t cap = 64;
    while (cap < 2 * n)
        cap *= 2;
    uint64_t *set = calloc((size_t)cap, sizeof *set);
    if (!set)
        return -1;
    int found = 0;
    for (int64_t i = 0; i < n && !found; i++) {
        uint64_t k = ((uint64_t)(uint32_t)p[i].to_frag << 33) |
                     ((uint64_t)(uint32_t)p[i].from_frag << 1) | (uint64_t)(p[i].stage & 1);
        k += 1; /* 0 marks a free slot */
        /* every key bit reaches the slot (a plain product leaves the high
         * bits, to_frag, out of a small table's index) */
        int64_t j = (int64_t)(rs_hash_mix(0, k) & (uint64_t)(cap - 1));
        while (set[j] && set[j] != k)
            j = (j + 1) & (cap - 1);
        found = set[j] == k;
        set[j] = k;
    }
    free(set);
    return found;
}

/* Second key of cmp_piece: (tensor, to_frag). */
static uint64_t key2_piece(const void *pp)
{
    const rs_piece_t *p = pp;
    return ((uint64_t)(uint32_t)p->tensor << 32) | (uint32_t)p->to_frag;
}

reshard_status_t rs_pieces_merge(const reshard_plan_t *plan, rs_piece_vec_t *v, int64_t from)
{
    int64_t n = v->n - from;
    if (n < 2)
        return RESHARD_OK;
    rs_piece_t *p = v->p + from;
    int m = may_merge(p, n);
    if (m < 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory merging pieces");
    if (!m) /* nothing merges; stream order comes with rs_pieces_finish */
        return RESHARD_OK;
    if (rs_sort_records(p, (size_t)n, sizeof *p, cmp_piece, key_piece, key2_piece) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory sorting pieces");
    /* a merge keeps the first piece's offsets, so the order stays sorted and
     * each further pass only rescans */
    for (int pass = 0; pass <= RESHARD_MAX_DIMS && n > 1; pass++) {
        int64_t w = 0;
        for (int64_t i = 0; i < n; i++)
            if (w == 0 || !try_merge(plan->dst, &p[w - 1], &p[i]))
                p[w++] = p[i];
        bool changed = w != n;
        n = w;
        if (!changed)
            break;
    }
    v->n = from + n;
    return RESHARD_OK;
}

void rs_pieces_keep(const reshard_plan_t *plan, rs_piece_vec_t *v, int64_t from)
{
    int64_t w = from;
    for (int64_t i = from; i < v->n; i++)
        if (rs_plan_keeps(plan, v->p[i].stage, v->p[i].sender, v->p[i].receiver))
            v->p[w++] = v->p[i];
    v->n = w;
}

reshard_status_t rs_pieces_add(const reshard_plan_t *plan, const rs_cells_t *cells, rs_topo_t *topo,
                               rs_piece_vec_t *v)
{
    for (int64_t i = 0; i < cells->n; i++) {
        const rs_cell_t *c = &cells->c[i];
        if (c->chosen < 0)
            continue;
        rs_piece_t p =
            rs_direct_piece(plan, &c->box, c->tensor, c->chosen, c->to_frag, c->receiver, c->bytes);
        if (rs_piece_vec_push(plan, v, &p) != 0)
            return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory for %lld pieces",
                            (long long)v->n);
    }
    return rs_topo_pieces(topo, cells, v);
}

reshard_status_t rs_pieces_finish(reshard_plan_t *plan, rs_piece_vec_t *v)
{
    if (!v->p && !(v->p = malloc(sizeof *v->p)))
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory for pieces");
    plan->pieces = v->p;
    plan->npieces = v->n;
    memset(v, 0, sizeof *v);
    if (sort_pieces(plan->pieces, plan->npieces, plan->p.world_size) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory sorting pieces");
    return RESHARD_OK;
}
