/* The quantization steps of an execution (quant_steps.h). */
#include "exec/quant_steps.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

reshard_status_t rs_qbufs_setup(const reshard_plan_t *plan, reshard_comm_t *c,
                                const reshard_buffer_t *src, int32_t nsrc,
                                const reshard_buffer_t *dst, int32_t ndst, rs_qbufs_t *out)
{
    const rs_qplan_t *qp = plan->quant;
    int32_t r = c->rank;
    memset(out, 0, sizeof *out);
    int32_t sid = qp->src_scratch[r], did = qp->dst_scratch[r];
    out->nsrc = nsrc > sid + 2 ? nsrc : sid + 2;
    out->ndst = ndst > did + 1 ? ndst : did + 1;
    out->src = calloc((size_t)out->nsrc, sizeof *out->src);
    out->dst = calloc((size_t)out->ndst, sizeof *out->dst);
    if (!out->src || !out->dst)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory for quantization", r);
    if (nsrc)
        memcpy(out->src, src, (size_t)nsrc * sizeof *src);
    if (ndst)
        memcpy(out->dst, dst, (size_t)ndst * sizeof *dst);
    out->mine = malloc((size_t)(qp->npre ? qp->npre : 1) * sizeof *out->mine);
    if (!out->mine)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory for quantization", r);
    for (int64_t i = 0; i < qp->npre; i++)
        if (qp->pre[i].rank == r)
            out->mine[out->nmine++] = i;
    uint64_t bytes[3] = {qp->src_q_bytes[r], qp->src_s_bytes[r], qp->dst_bf_bytes[r]};
    reshard_buffer_t *slot[3] = {&out->src[sid], &out->src[sid + 1], &out->dst[did]};
    for (int i = 0; i < 3; i++) {
        *slot[i] = (reshard_buffer_t){0};
        if (!bytes[i])
            continue;
        reshard_status_t st = c->ops->alloc_staging(c, bytes[i], &out->mem[i]);
        if (st != RESHARD_OK)
            return st;
        slot[i]->ptr = out->mem[i];
        slot[i]->bytes = bytes[i];
    }
    return RESHARD_OK;
}

void rs_qbufs_free(reshard_comm_t *c, rs_qbufs_t *b)
{
    for (int i = 0; i < 3; i++)
        if (b->mem[i])
            c->ops->free_staging(c, b->mem[i]);
    free(b->src);
    free(b->dst);
    free(b->mine);
    memset(b, 0, sizeof *b);
}

static reshard_status_t quantize(reshard_comm_t *c, const rs_qstep_t *s, void *d, void *sc,
                                 const void *x, const reshard_box_t *box)
{
    if (c->ops->quantize)
        return c->ops->quantize(c, &s->q, d, &s->dst, sc, &s->scale, x, &s->src, box);
    rs_quant_box_cpu(&s->q, d, &s->dst, sc, &s->scale, x, &s->src, box);
    return RESHARD_OK;
}

/* Byte offset in its scratch of step @p s's e4m3 data, or of its scales. */
static int64_t scratch_at(const rs_qstep_t *s, bool scale)
{
    return scale ? s->scale.base * (int64_t)rs_quant_scale_size(&s->q) : s->dst.base;
}

/* The pre step of this rank whose scratch fragment (e4m3 data when
 * @p scale is false, else scales) starts at byte @p at; its steps are in
 * increasing scratch order. */
static const rs_qstep_t *find_pre(const rs_qplan_t *qp, const int64_t *mine, int64_t n, int64_t at,
                                  bool scale)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const rs_qstep_t *s = &qp->pre[mine[mid]];
        if (scratch_at(s, scale) < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == n)
        return NULL;
    const rs_qstep_t *s = &qp->pre[mine[lo]];
    return scratch_at(s, scale) == at ? s : NULL;
}

/* The elements to quantize for piece @p p of step @p s: its whole blocks
 * (a scale piece: the blocks it holds), inside the step's region. */
static reshard_box_t piece_blocks(const rs_qstep_t *s, const rs_piece_t *p, bool scale)
{
    reshard_box_t b = p->box;
    int nd = b.ndim;
    for (int d = 0; d < nd; d++) {
        int64_t B = d == nd - 1 ? s->q.block_cols : d == nd - 2 ? s->q.block_rows : 1;
        int64_t lo = b.offset[d], hi = lo + b.extent[d];
        if (scale) {
            lo *= B;
            hi *= B;
        } else {
            lo = lo / B * B;
            hi = (hi + B - 1) / B * B;
        }
        int64_t rlo = s->box.offset[d], rhi = rlo + s->box.extent[d];
        lo = lo > rlo ? lo : rlo;
        hi = hi < rhi ? hi : rhi;
        b.offset[d] = lo;
        b.extent[d] = hi - lo;
    }
    return b;
}

reshard_status_t rs_quant_piece(const reshard_plan_t *plan, reshard_comm_t *c, const rs_qbufs_t *b,
                                const rs_piece_t *p)
{
    const rs_qplan_t *qp = plan->quant;
    if (!qp || p->stage != RS_STAGE_DIRECT || p->sender != c->rank)
        return RESHARD_OK;
    const reshard_fragment_t *f = &plan->src->f[p->from_frag];
    bool q = f->buffer == qp->src_scratch[c->rank], s = f->buffer == qp->src_scratch[c->rank] + 1;
    if (!q && !s)
        return RESHARD_OK;
    const rs_qstep_t *st = find_pre(qp, b->mine, b->nmine, f->base * (int64_t)p->elem_size, s);
    if (!st)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rank %d: plan sends quantized data of no region",
                        c->rank);
    reshard_box_t box = piece_blocks(st, p, s);
    return quantize(c, st, b->src[st->dst.buffer].ptr, b->src[st->scale.buffer].ptr,
                    b->src[st->src.buffer].ptr, &box);
}

reshard_status_t rs_quant_post(const reshard_plan_t *plan, reshard_comm_t *c, const rs_qbufs_t *b)
{
    const rs_qplan_t *qp = plan->quant;
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; st == RESHARD_OK && i < qp->npost; i++) {
        const rs_qstep_t *s = &qp->post[i];
        if (s->rank == c->rank)
            st = quantize(c, s, b->dst[s->dst.buffer].ptr, b->dst[s->scale.buffer].ptr,
                          b->dst[s->src.buffer].ptr, &s->box);
    }
    return st;
}
