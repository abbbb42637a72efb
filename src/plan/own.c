/* What a plan keeps of its inputs: a copy of the catalogue and of the
 * fragments and declared buffers it executes with, so the caller may
 * destroy the layouts and the catalogue once the plan exists. A rank's own
 * plan keeps its own fragments and those its pieces name; a
 * RESHARD_ALL_RANKS plan keeps everything. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"
#include "util/error.h"

static reshard_status_t copy_catalogue(const reshard_tensors_t *from, reshard_tensors_t **out)
{
    reshard_status_t st = reshard_tensors_create(out);
    for (int32_t i = 0; st == RESHARD_OK && i < from->n; i++) {
        const rs_tensor_t *t = &from->t[i];
        st = reshard_tensors_add(*out, t->name, t->dtype, t->ndim, t->shape, t->vndim, t->vshape,
                                 NULL);
    }
    return st;
}

/* Copy the fragments of @p from with keep[i] into @p to (appended in order)
 * and this rank's (or every rank's) declared buffers; keep NULL: all. */
static reshard_status_t copy_layout(const reshard_layout_t *from, const uint8_t *keep, int32_t rank,
                                    reshard_layout_t *to)
{
    int64_t n = 0;
    for (int64_t i = 0; i < from->n; i++)
        n += !keep || keep[i];
    to->f = malloc((size_t)(n ? n : 1) * sizeof *to->f);
    if (!to->f)
        return rs_error(RESHARD_ERR_NOMEM, "plan: out of memory copying a layout");
    for (int64_t i = 0; i < from->n; i++)
        if (!keep || keep[i])
            to->f[to->n++] = from->f[i];
    to->cap = n;
    const rs_decls_t *d = &from->decls;
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; st == RESHARD_OK && i < d->n; i++) {
        const rs_decl_t *e = &d->e[d->order[i]];
        if (rank == RESHARD_ALL_RANKS || e->rank == rank)
            st = rs_decl_copy(to, e);
    }
    return st;
}

/* Mark this rank's fragments and those the pieces name; renumber the pieces
 * to the kept fragments (order kept, so piece order is unchanged). */
static reshard_status_t mark_and_renumber(reshard_plan_t *plan, uint8_t *ks, uint8_t *kd)
{
    const reshard_layout_t *src = plan->src, *dst = plan->dst;
    int32_t me = plan->p.my_rank;
    for (int64_t i = 0; i < src->n; i++)
        ks[i] = src->f[i].rank == me;
    for (int64_t i = 0; i < dst->n; i++)
        kd[i] = dst->f[i].rank == me;
    for (int64_t i = 0; i < plan->npieces; i++) {
        const rs_piece_t *p = &plan->pieces[i];
        (p->stage == RS_STAGE_DIRECT ? ks : kd)[p->from_frag] = 1;
        kd[p->to_frag] = 1;
    }
    int32_t *ns = malloc((size_t)(src->n ? src->n : 1) * sizeof *ns);
    int32_t *nd = malloc((size_t)(dst->n ? dst->n : 1) * sizeof *nd);
    if (!ns || !nd) {
        free(ns);
        free(nd);
        return rs_error(RESHARD_ERR_NOMEM, "plan: out of memory copying the layouts");
    }
    int32_t k = 0;
    for (int64_t i = 0; i < src->n; i++)
        ns[i] = ks[i] ? k++ : -1;
    k = 0;
    for (int64_t i = 0; i < dst->n; i++)
        nd[i] = kd[i] ? k++ : -1;
    for (int64_t i = 0; i < plan->npieces; i++) {
        rs_piece_t *p = &plan->pieces[i];
        p->from_frag = (p->stage == RS_STAGE_DIRECT ? ns : nd)[p->from_frag];
        p->to_frag = nd[p->to_frag];
    }
    free(ns);
    free(nd);
    return RESHARD_OK;
}

reshard_status_t rs_plan_own_inputs(reshard_plan_t *plan)
{
    const reshard_layout_t *src = plan->src, *dst = plan->dst;
    int32_t me = plan->p.my_rank;
    uint8_t *ks = NULL, *kd = NULL;
    reshard_status_t st = RESHARD_OK;
    if (me != RESHARD_ALL_RANKS) {
        ks = malloc((size_t)(src->n ? src->n : 1));
        kd = malloc((size_t)(dst->n ? dst->n : 1));
        st = ks && kd ? mark_and_renumber(plan, ks, kd)
                      : rs_error(RESHARD_ERR_NOMEM, "plan: out of memory copying the layouts");
    }
    if (st == RESHARD_OK)
        st = copy_catalogue(src->tensors, &plan->own_tensors);
    if (st == RESHARD_OK)
        st = reshard_layout_create(plan->own_tensors, &plan->own_src);
    if (st == RESHARD_OK)
        st = reshard_layout_create(plan->own_tensors, &plan->own_dst);
    if (st == RESHARD_OK)
        st = copy_layout(src, ks, me, plan->own_src);
    if (st == RESHARD_OK)
        st = copy_layout(dst, kd, me, plan->own_dst);
    free(ks);
    free(kd);
    if (st == RESHARD_OK) {
        plan->src = plan->own_src;
        plan->dst = plan->own_dst;
    }
    return st;
}

void rs_plan_own_free(reshard_plan_t *plan)
{
    reshard_layout_destroy(plan->own_src);
    reshard_layout_destroy(plan->own_dst);
    reshard_tensors_destroy(plan->own_tensors);
}
