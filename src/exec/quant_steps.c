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
    /* one flag per block of each region: a block is quantized once per
     * execution, whether its e4m3 piece or its scale piece goes first */
    out->done_at = malloc((size_t)(out->nmine + 1) * sizeof *out->done_at);
    if (!out->done_at)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory for quantization", r);
    int64_t nblocks = 0;
    for (int64_t i = 0; i < out->nmine; i++) {
        out->done_at[i] = nblocks;
        nblocks += rs_box_numel(&qp->pre[out->mine[i]].scale.box);
    }
    out->done_at[out->nmine] = nblocks;
    out->done = calloc((size_t)(nblocks ? nblocks : 1), 1);
    if (!out->done)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory for quantization", r);
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
    free(b->done);
    free(b->done_at);
    memset(b, 0, sizeof *b);
}

static reshard_status_t quantize(reshard_comm_t *c, const rs_qstep_t *s, void *d, void *sc,
                                 const void *x, const reshard_box_t *box)
{
    if (c->ops->quantize)
        return c->ops->quantize(c, &s->q, d, &s->dst, sc, &s->scale, x, &s->src, box);
    if (c->ops->device_memory) /* a caller's device transport: no quantizer for its memory */
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "rank %d: the %s transport cannot quantize (device memory without a "
                        "quantize operation)",
                        c->rank, c->ops->name);
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
static int64_t find_pre(const rs_qplan_t *qp, const int64_t *mine, int64_t n, int64_t at,
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
    return lo < n && scratch_at(&qp->pre[mine[lo]], scale) == at ? lo : -1;
}

/* The blocks piece @p p of step @p s needs (a scale piece: the blocks it
 * holds; an e4m3 piece: those its elements touch), inside the step's region. */
static reshard_box_t piece_blocks(const rs_qstep_t *s, const rs_piece_t *p, bool scale)
{
    reshard_box_t b = p->box;
    const reshard_box_t *rb = &s->scale.box;
    int nd = b.ndim;
    for (int d = 0; d < nd; d++) {
        int64_t B = d == nd - 1 ? s->q.block_cols : d == nd - 2 ? s->q.block_rows : 1;
        int64_t lo = b.offset[d], hi = lo + b.extent[d];
        if (!scale) {
            lo /= B;
            hi = (hi + B - 1) / B;
        }
        int64_t rlo = rb->offset[d], rhi = rlo + rb->extent[d];
        lo = lo > rlo ? lo : rlo;
        hi = hi < rhi ? hi : rhi;
        b.offset[d] = lo;
        b.extent[d] = hi - lo;
    }
    return b;
}

/* Flag of block (e, i, j) of step @p st's region in its done flags. */
static int64_t flag_at(const rs_qstep_t *st, int nd, int64_t e, int64_t i, int64_t j)
{
    const reshard_box_t *rb = &st->scale.box; /* the region's blocks */
    int64_t ee = nd == 3 ? e - rb->offset[0] : 0;
    return (ee * rb->extent[nd - 2] + i - rb->offset[nd - 2]) * rb->extent[nd - 1] + j -
           rb->offset[nd - 1];
}

/* Quantize blocks [e0, e1) x [i0, i1) x [j0, j1) of step @p st's region
 * (the expert range only for 3-d boxes) and flag them done. */
static reshard_status_t quantize_blocks(reshard_comm_t *c, const rs_qbufs_t *b,
                                        const rs_qstep_t *st, uint8_t *done, int nd,
                                        const int64_t *lo, const int64_t *hi)
{
    reshard_box_t x = {.ndim = nd};
    int64_t B[3] = {1, st->q.block_rows, st->q.block_cols};
    for (int d = 0; d < nd; d++) {
        int64_t bs = B[d + 3 - nd], end = st->box.offset[d] + st->box.extent[d];
        x.offset[d] = lo[d] * bs;
        x.extent[d] = (hi[d] * bs < end ? hi[d] * bs : end) - x.offset[d];
    }
    for (int64_t e = nd == 3 ? lo[0] : 0; e < (nd == 3 ? hi[0] : 1); e++)
        for (int64_t i = lo[nd - 2]; i < hi[nd - 2]; i++)
            for (int64_t j = lo[nd - 1]; j < hi[nd - 1]; j++)
                done[flag_at(st, nd, e, i, j)] = 1;
    return quantize(c, st, b->src[st->dst.buffer].ptr, b->src[st->scale.buffer].ptr,
                    b->src[st->src.buffer].ptr, &x);
}

/* Quantize the blocks of block box @p bb (inside the region of this rank's
 * step @p k) not quantized yet in this execution: the whole box in one call
 * when none is, else block row by block row in runs of blocks not done. */
static reshard_status_t quantize_new(reshard_comm_t *c, const rs_qbufs_t *b, const rs_qplan_t *qp,
                                     int64_t k, const reshard_box_t *bb)
{
    const rs_qstep_t *st = &qp->pre[b->mine[k]];
    uint8_t *done = b->done + b->done_at[k];
    int nd = bb->ndim;
    int64_t lo[3], hi[3];
    for (int d = 0; d < nd; d++) {
        lo[d] = bb->offset[d];
        hi[d] = bb->offset[d] + bb->extent[d];
    }
    int64_t e0 = nd == 3 ? lo[0] : 0, e1 = nd == 3 ? hi[0] : 1, ndone = 0;
    for (int64_t e = e0; e < e1; e++)
        for (int64_t i = lo[nd - 2]; i < hi[nd - 2]; i++)
            for (int64_t j = lo[nd - 1]; j < hi[nd - 1]; j++)
                ndone += done[flag_at(st, nd, e, i, j)];
    if (ndone == rs_box_numel(bb))
        return RESHARD_OK;
    if (ndone == 0)
        return quantize_blocks(c, b, st, done, nd, lo, hi);
    reshard_status_t rc = RESHARD_OK;
    for (int64_t e = e0; rc == RESHARD_OK && e < e1; e++)
        for (int64_t i = lo[nd - 2]; rc == RESHARD_OK && i < hi[nd - 2]; i++)
            for (int64_t j = lo[nd - 1]; rc == RESHARD_OK && j < hi[nd - 1];) {
                if (done[flag_at(st, nd, e, i, j)]) {
                    j++;
                    continue;
                }
                int64_t a = j;
                while (j < hi[nd - 1] && !done[flag_at(st, nd, e, i, j)])
                    j++;
                int64_t rl[3] = {e, i, a}, rh[3] = {e + 1, i + 1, j};
                rc = quantize_blocks(c, b, st, done, nd, rl + 3 - nd, rh + 3 - nd);
            }
    return rc;
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
    int64_t k = find_pre(qp, b->mine, b->nmine, f->base * (int64_t)p->elem_size, s);
    if (k < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rank %d: plan sends quantized data of no region",
                        c->rank);
    reshard_box_t bb = piece_blocks(&qp->pre[b->mine[k]], p, s);
    return quantize_new(c, b, qp, k, &bb);
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
