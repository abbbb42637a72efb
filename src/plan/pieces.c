/* Step 4: pieces from assigned cells (in-domain) and from the topology step
 * (network landings and forwards), kept when in the plan's scope (whole
 * streams: rs_piece_vec_push), one tensor's cells at a time; then merged
 * where boxes touch, in stream order. */
#include <stdlib.h>
#include <string.h>

#include "plan/topo.h"
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

/* Leading key of cmp_piece: (stage, sender, receiver), each below 2^31. */
static uint64_t key_piece(const void *pp)
{
    const rs_piece_t *p = pp;
    return ((uint64_t)p->stage << 62) | ((uint64_t)(uint32_t)p->sender << 31) |
           (uint64_t)(uint32_t)p->receiver;
}

/* Sort into stream order (stable), then merge neighbours until nothing
 * merges: a merge keeps the first piece's offsets, so the order stays
 * sorted and each further pass only rescans. */
static int sort_and_merge(const reshard_layout_t *dst, rs_piece_t *p, int64_t *n)
{
    if (rs_sort_records(p, (size_t)*n, sizeof *p, cmp_piece, key_piece) != 0)
        return -1;
    for (int pass = 0; pass <= RESHARD_MAX_DIMS && *n > 1; pass++) {
        int64_t w = 0;
        for (int64_t i = 0; i < *n; i++)
            if (w == 0 || !try_merge(dst, &p[w - 1], &p[i]))
                p[w++] = p[i];
        bool changed = w != *n;
        *n = w;
        if (!changed)
            return 0;
    }
    return 0;
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
    if (sort_and_merge(plan->dst, plan->pieces, &plan->npieces) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory sorting pieces");
    return RESHARD_OK;
}
