/*
 * A rank's part of a refit description (reshard_model_refit_create_scoped):
 * the fragments of the tensors the rank's own plan needs, every rank's, and
 * who holds what of the whole, so its own plan costs what the rank touches
 * and not the whole world. The scope is the planner's (plan/scope.h): the
 * tensors the rank holds as a source, whose groups it computes in every
 * domain (every fragment of them is kept), and those its domain's ranks hold
 * as destinations, whose group it computes in its own domain (every group
 * when the tensor has replicas, whose senders are chosen over all of its
 * groups: every fragment of them is kept too).
 */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "model/model_internal.h"
#include "util/error.h"

/* No rank declares: the scope's declare_rank for a build that keeps nothing. */
#define NO_RANK INT32_MIN

typedef struct {
    const reshard_model_t *m;
    reshard_model_refit_t *r;
    int64_t words;
    int32_t nt;
} scoped_t;

/* Set @p flag in want[t] for each tensor t the ranks [lo, hi) hold on one side. */
static reshard_status_t mark_held(const scoped_t *c, bool train, int32_t lo, int32_t hi,
                                  uint64_t *scratch, uint8_t flag, uint8_t *want)
{
    memset(scratch, 0, (size_t)c->nt * (size_t)c->words * sizeof *scratch);
    uint8_t *keep_none = calloc((size_t)c->nt, 1);
    if (!keep_none)
        return rs_error(RESHARD_ERR_NOMEM, "refit: out of memory scoping the layouts");
    rs_emit_scope_t sc = {.lo = lo,
                          .hi = hi,
                          .want = keep_none,
                          .declare_rank = NO_RANK,
                          .holders = scratch,
                          .words = c->words};
    reshard_layout_t *l = NULL;
    const reshard_model_refit_t *r = c->r;
    reshard_status_t s =
        train ? rs_train_emit(c->m, r->tensors, &r->train_spec, 0, &sc, &l, NULL)
              : rs_infer_emit(c->m, r->tensors, &r->infer_spec, r->infer_offset, &sc, &l, NULL);
    s = rs_layout_rule(s, train ? "train" : "infer");
    reshard_layout_destroy(l);
    free(keep_none);
    for (int32_t t = 0; s == RESHARD_OK && t < c->nt; t++)
        for (int64_t w = 0; w < c->words; w++)
            if (scratch[(int64_t)t * c->words + w]) {
                want[t] |= flag;
                break;
            }
    return s;
}

/* One side, every rank visited: the wanted fragments, @p rank's buffers, and
 * the holders of the whole side, recorded in the layout's origin. */
static reshard_status_t build_side(const scoped_t *c, bool train, const uint8_t *want, int32_t rank,
                                   int32_t lo, int32_t hi)
{
    reshard_model_refit_t *r = c->r;
    int32_t world = r->infer_offset + r->infer_world;
    uint64_t *holders = calloc((size_t)c->nt * (size_t)c->words, sizeof *holders);
    if (!holders)
        return rs_error(RESHARD_ERR_NOMEM, "refit: out of memory scoping the layouts");
    rs_emit_scope_t sc = {.lo = 0,
                          .hi = world,
                          .want = want,
                          .near_lo = lo,
                          .near_hi = hi,
                          .declare_rank = rank,
                          .holders = holders,
                          .words = c->words};
    reshard_layout_t **l = train ? &r->train : &r->infer;
    reshard_model_buffers_t **b = train ? &r->train_buffers : &r->infer_buffers;
    reshard_status_t s =
        train ? rs_train_emit(c->m, r->tensors, &r->train_spec, 0, &sc, l, b)
              : rs_infer_emit(c->m, r->tensors, &r->infer_spec, r->infer_offset, &sc, l, b);
    s = rs_layout_rule(s, train ? "train" : "infer");
    if (s != RESHARD_OK) {
        free(holders);
        return s;
    }
    rs_layout_origin_t *o = &(*l)->origin;
    o->side = train ? 0 : 1;
    o->rank = rank;
    o->lo = lo;
    o->hi = hi;
    o->world = world;
    o->words = c->words;
    o->holders = holders;
    return RESHARD_OK;
}

reshard_status_t reshard_model_refit_create_scoped(const reshard_model_t *model,
                                                   const reshard_train_spec_t *train,
                                                   const reshard_infer_spec_t *infer,
                                                   int32_t infer_offset, int32_t rank,
                                                   int32_t domain_size, reshard_model_refit_t *out)
{
    rs_error_clear();
    if (out)
        memset(out, 0, sizeof *out);
    if (domain_size < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_model_refit_create_scoped: domain_size %d is negative",
                        domain_size);
    reshard_status_t s =
        rs_refit_begin("reshard_model_refit_create_scoped", model, train, infer, infer_offset, out);
    if (s != RESHARD_OK)
        return s;
    int32_t world = out->infer_offset + out->infer_world;
    if (rank < 0 || rank >= world) {
        reshard_model_refit_destroy(out);
        return rs_error(RESHARD_ERR_RANK,
                        "reshard_model_refit_create_scoped: rank %d outside the refit's %d "
                        "ranks",
                        rank, world);
    }
    /* a quantized inference side is planned on wire layouts made from the
     * whole ones (plan/quant_wire.c) */
    if (model->quant != RESHARD_QUANT_NONE) {
        reshard_model_refit_destroy(out);
        return reshard_model_refit_create_at(model, train, infer, infer_offset, out);
    }
    /* the rank's domain, as the plan's params make it (plan/scope.h) */
    int32_t ds = domain_size > world ? world : domain_size, lo = rank, hi = rank + 1;
    if (ds > 1) {
        lo = rank / ds * ds;
        hi = lo + ds < world ? lo + ds : world;
    }
    scoped_t c = {.m = model, .r = out, .words = (world + 63) / 64, .nt = out->tensors->n};
    size_t nt = (size_t)(c.nt ? c.nt : 1);
    uint8_t *held = calloc(nt, 1), *want_src = calloc(nt, 1), *want_dst = calloc(nt, 1);
    uint64_t *scratch = calloc(nt * (size_t)c.words, sizeof *scratch);
    if (!held || !want_src || !want_dst || !scratch)
        s = rs_error(RESHARD_ERR_NOMEM, "refit: out of memory scoping the layouts");
    /* held: the tensors it sends (every domain's groups of them, so every
     * fragment); near: those its domain receives (its domain's group only:
     * every source fragment, the destination fragments in the domain) */
    if (s == RESHARD_OK)
        s = mark_held(&c, true, rank, rank + 1, scratch, RS_KEEP_ALL, held);
    if (s == RESHARD_OK)
        s = mark_held(&c, false, lo, hi, scratch, RS_KEEP_NEAR, want_dst);
    for (size_t t = 0; s == RESHARD_OK && t < (size_t)c.nt; t++) {
        want_src[t] = held[t] || want_dst[t] ? RS_KEEP_ALL : 0;
        /* a tensor with replicas has its senders chosen over every domain's
         * group (plan/topo.c): every destination fragment of it */
        want_dst[t] = held[t] || want_dst[t] ? RS_KEEP_ALL : 0;
    }
    free(scratch);
    free(held);
    if (s == RESHARD_OK)
        s = build_side(&c, true, want_src, rank, lo, hi);
    if (s == RESHARD_OK)
        s = build_side(&c, false, want_dst, rank, lo, hi);
    free(want_src);
    free(want_dst);
    if (s == RESHARD_OK) { /* the two layouts of this build, and no others, plan together */
        uint64_t pair = rs_hash_mix(out->train->origin.hash, out->infer->origin.hash);
        pair = rs_hash_mix(pair, ((uint64_t)(uint32_t)rank << 32) | (uint32_t)lo);
        pair = rs_hash_mix(pair, (uint64_t)(uint32_t)hi);
        out->train->origin.pair = out->infer->origin.pair = pair;
    }
    if (s != RESHARD_OK)
        reshard_model_refit_destroy(out);
    return s;
}
