/* reshard_plan_create and the plan's public accessors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/placement.h"
#include "exec/delta.h"
#include "exec/peer.h"
#include "exec/writers.h"
#include "plan/quant_wire.h"
#include "plan/tally.h"
#include "plan/topo.h"
#include "util/error.h"
#include "util/timeout.h"

/* Minimum staging bound: a chunk per stream and slot must be worth a message. */
#define RS_MIN_STAGING_BYTES 4096u

/* Steps 1-4 for one tensor (every decision is made inside one (domain,
 * tensor) group): its pieces are appended to @p v, merged, tallied and, in a
 * summary plan, dropped unless kept. */
static reshard_status_t plan_tensor(reshard_plan_t *plan, int32_t t, rs_cutter_t *cut,
                                    rs_direct_t *direct, rs_topo_t *topo, rs_cells_t *cells,
                                    rs_piece_vec_t *v, rs_bounds_t *bounds)
{
    int64_t from = v->n;
    bool all = plan->p.my_rank == RESHARD_ALL_RANKS;
    reshard_status_t st = rs_cells_build(plan, cut, t, cells);
    if (st == RESHARD_OK && all && bounds)
        rs_placement_bounds_add(plan, cells, bounds->path);
    if (st == RESHARD_OK)
        st = rs_direct_take(plan, direct, cut, t, cells, v, all ? bounds : NULL);
    if (st == RESHARD_OK)
        st = rs_assign_senders(&plan->p, plan->src, cells);
    if (st == RESHARD_OK)
        st = rs_pieces_add(plan, cells, topo, v);
    if (st == RESHARD_OK)
        st = rs_pieces_merge(plan, v, from);
    if (st == RESHARD_OK)
        st = rs_tally_add(plan->tally, plan, v->n > from ? v->p + from : NULL, v->n - from);
    if (st == RESHARD_OK && plan->p.summary)
        rs_pieces_keep(plan, v, from);
    if (st == RESHARD_OK && all)
        st = rs_bounds_add(plan, cells, bounds);
    return st;
}

/* Every tensor of the plan's scope, one at a time, so only one tensor's
 * cells are held at once; then the pieces of all tensors are sorted into
 * streams. */
static reshard_status_t plan_tensors(reshard_plan_t *plan, rs_bounds_t *bounds)
{
    rs_cutter_t *cut = NULL;
    rs_direct_t *direct = NULL;
    rs_topo_t *topo = NULL;
    rs_cells_t cells = {0};
    rs_piece_vec_t v = {0};
    reshard_status_t st = rs_cutter_create(plan, &cut);
    if (st == RESHARD_OK)
        st = rs_direct_create(plan, &direct);
    if (st == RESHARD_OK)
        st = rs_topo_create(plan, &topo);
    for (int32_t t = 0; st == RESHARD_OK && t < plan->dst->tensors->n; t++)
        if (rs_scope_tensor(&plan->scope, t))
            st = plan_tensor(plan, t, cut, direct, topo, &cells, &v, bounds);
    rs_cells_free(&cells);
    rs_topo_free(topo);
    rs_direct_free(direct);
    rs_cutter_free(cut);
    if (st == RESHARD_OK)
        return rs_pieces_finish(plan, &v);
    free(v.p);
    return st;
}

/* The ranks gone from the membership of @p src and @p dst (plan->gone). */
static reshard_status_t set_gone(reshard_plan_t *plan, const reshard_layout_t *src,
                                 const reshard_layout_t *dst)
{
    if (!src->ngone && !dst->ngone)
        return RESHARD_OK;
    plan->gone = calloc((size_t)plan->p.world_size, 1);
    if (!plan->gone)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_plan_create: out of memory");
    const reshard_layout_t *side[2] = {src, dst};
    for (int s = 0; s < 2; s++)
        for (int32_t i = 0; i < side[s]->ngone; i++)
            if (side[s]->gone[i] < plan->p.world_size)
                plan->gone[side[s]->gone[i]] = 1;
    return RESHARD_OK;
}

/* The fingerprint with the gone ranks folded in: plans for different
 * memberships never agree. */
static uint64_t fold_gone(const reshard_plan_t *plan, uint64_t fp)
{
    for (int32_t r = 0; plan->gone && r < plan->p.world_size; r++)
        if (plan->gone[r])
            fp = (fp ^ ((uint64_t)(uint32_t)r + 0x676f6e6500000000ULL)) * 0x9e3779b97f4a7c15ULL;
    return fp;
}

/* A summary plan's kept ranks and their domains. */
static reshard_status_t set_keep(reshard_plan_t *plan, const int32_t *keep, int32_t nkeep)
{
    if (nkeep <= 0)
        return RESHARD_OK;
    plan->keep_rank = calloc((size_t)plan->p.world_size, 1);
    plan->keep_domain = calloc((size_t)rs_domain_count(&plan->p), 1);
    if (!plan->keep_rank || !plan->keep_domain)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_plan_create: out of memory");
    for (int32_t i = 0; i < nkeep; i++) {
        if (keep[i] < 0 || keep[i] >= plan->p.world_size)
            return rs_error(RESHARD_ERR_RANK, "reshard_plan_create: kept rank %d outside [0, %d)",
                            keep[i], plan->p.world_size);
        plan->keep_rank[keep[i]] = 1;
        plan->keep_domain[rs_domain_of(&plan->p, keep[i])] = 1;
    }
    return RESHARD_OK;
}

/* Delta refit of quantized destinations is refused: the FP8 bytes and scales are
 * produced per block by the sender each refit, and a delta of them is not implemented. */
static reshard_status_t delta_refuses_quant(const reshard_layout_t *dst, int32_t my_rank)
{
    const reshard_tensors_t *ts = dst->tensors;
    for (int32_t t = 0; t < ts->n; t++) {
        reshard_quant_t q;
        if (reshard_tensors_get_quant(ts, t, &q) == RESHARD_OK && q.kind != RESHARD_QUANT_NONE)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "rank %d: delta refit of quantized destinations is not supported: "
                            "tensor %s is held quantized (FP8); plan it without delta",
                            my_rank, ts->t[t].name);
    }
    return RESHARD_OK;
}

reshard_status_t reshard_plan_create(const reshard_layout_t *src, const reshard_layout_t *dst,
                                     const reshard_plan_params_t *params, reshard_plan_t **out)
{
    return rs_plan_create_keeping(src, dst, params, NULL, 0, out);
}

reshard_status_t rs_plan_create_keeping(const reshard_layout_t *src, const reshard_layout_t *dst,
                                        const reshard_plan_params_t *params, const int32_t *keep,
                                        int32_t nkeep, reshard_plan_t **out)
{
    rs_error_clear();
    if (!src || !dst || !params || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_plan_create: NULL argument");
    *out = NULL;
    if (params->field_mask & ~RESHARD_PLAN_PARAM_ALL)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_create: field_mask bits 0x%llx are not RESHARD_PLAN_PARAM_* "
                        "bits (known: 0x%llx)",
                        (unsigned long long)(params->field_mask & ~RESHARD_PLAN_PARAM_ALL),
                        (unsigned long long)RESHARD_PLAN_PARAM_ALL);
    if (params->world_size < 1 || params->world_size > RESHARD_MAX_WORLD_SIZE)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_create: world_size %d outside [1, %d]", params->world_size,
                        RESHARD_MAX_WORLD_SIZE);
    if (params->my_rank != RESHARD_ALL_RANKS &&
        (params->my_rank < 0 || params->my_rank >= params->world_size))
        return rs_error(RESHARD_ERR_RANK, "reshard_plan_create: my_rank %d outside [0, %d)",
                        params->my_rank, params->world_size);
    if ((params->field_mask & RESHARD_PLAN_PARAM_SUMMARY) && params->summary &&
        params->my_rank != RESHARD_ALL_RANKS)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_create: a summary plan is a global plan (my_rank "
                        "RESHARD_ALL_RANKS), not rank %d's own",
                        params->my_rank);
    reshard_plan_t *plan = calloc(1, sizeof *plan);
    if (!plan)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_plan_create: out of memory");
    plan->p = *params;
    if (!(params->field_mask & RESHARD_PLAN_PARAM_STAGING_BYTES))
        plan->p.staging_bytes = RESHARD_DEFAULT_STAGING_BYTES;
    if (!(params->field_mask & RESHARD_PLAN_PARAM_DOMAIN_SIZE))
        plan->p.domain_size = 0;
    if (!(params->field_mask & RESHARD_PLAN_PARAM_TIMEOUT))
        plan->p.timeout_s = RESHARD_DEFAULT_TIMEOUT_S;
    if (!(params->field_mask & RESHARD_PLAN_PARAM_RELAY_BYTES))
        plan->p.relay_bytes = UINT64_MAX;
    plan->p.summary = (params->field_mask & RESHARD_PLAN_PARAM_SUMMARY) && params->summary;
    plan->p.delta = (params->field_mask & RESHARD_PLAN_PARAM_DELTA) && params->delta;
    /* delta verification is on unless the caller turns it off (delta_checksum = 0 with
     * its bit); asked for without delta it is refused below */
    const bool ck_given = params->field_mask & RESHARD_PLAN_PARAM_DELTA_CHECKSUM;
    plan->p.delta_checksum = ck_given ? params->delta_checksum != 0 : plan->p.delta;
    plan->src = src;
    plan->dst = dst;
    reshard_status_t st = RESHARD_OK;
    if (plan->p.staging_bytes < RS_MIN_STAGING_BYTES)
        st = rs_error(RESHARD_ERR_STAGING, "staging bound %llu bytes is under the minimum %u",
                      (unsigned long long)plan->p.staging_bytes, RS_MIN_STAGING_BYTES);
    else if (plan->p.domain_size < 0)
        st = rs_error(RESHARD_ERR_INVALID_ARG, "reshard_plan_create: domain_size %d is negative",
                      plan->p.domain_size);
    else if (!isfinite(plan->p.timeout_s) || !(plan->p.timeout_s >= RESHARD_MIN_TIMEOUT_S))
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "reshard_plan_create: timeout %g s is not a finite number >= %g s (at "
                      "most %g s is waited)",
                      plan->p.timeout_s, RESHARD_MIN_TIMEOUT_S, RESHARD_MAX_TIMEOUT_S);
    plan->p.timeout_s = rs_timeout_s(plan->p.timeout_s);
    if (plan->p.domain_size > plan->p.world_size) /* one domain holds every rank */
        plan->p.domain_size = plan->p.world_size;
    if (st == RESHARD_OK)
        st = rs_placement_own(plan);
    if (st == RESHARD_OK)
        st = rs_validate_scope(&plan->p, src, dst);
    if (st == RESHARD_OK)
        st = set_gone(plan, src, dst);
    if (st == RESHARD_OK && src->origin.holders) { /* checked: both scoped alike */
        plan->holders_src = &src->origin;
        plan->holders_dst = &dst->origin;
    }
    /* Quantized destinations: plan the wire layouts instead (quant_wire.c). */
    if (st == RESHARD_OK)
        st = rs_quant_wire(src, dst, plan->p.world_size, &plan->quant);
    if (st == RESHARD_OK && plan->quant && plan->holders_src)
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "rank %d: its layouts are scoped to its own plan, but the catalogue has "
                      "quantized destinations, planned on wire layouts made from the whole "
                      "ones: build the whole layouts",
                      plan->p.my_rank);
    if (st == RESHARD_OK && plan->quant && plan->p.colocated)
        st = rs_error(RESHARD_ERR_UNSUPPORTED,
                      "reshard_plan_create: colocated reads do not quantize on the wire: plan "
                      "quantized destinations without colocated reads");
    if (st == RESHARD_OK && plan->p.delta_checksum && !plan->p.delta)
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "reshard_plan_create: rank %d: delta_checksum checks delta chunks: set "
                      "delta too (RESHARD_PLAN_PARAM_DELTA)",
                      plan->p.my_rank);
    if (st == RESHARD_OK && plan->p.delta && plan->p.colocated)
        st = rs_error(RESHARD_ERR_UNSUPPORTED,
                      "reshard_plan_create: rank %d: a delta plan sends encoded chunks; colocated "
                      "reads copy whole pieces: plan with delta or with colocated reads",
                      plan->p.my_rank);
    if (st == RESHARD_OK && plan->quant && plan->p.delta)
        st = delta_refuses_quant(dst, plan->p.my_rank);
    if (st == RESHARD_OK && plan->p.delta && !plan->p.summary &&
        !(plan->delta = rs_delta_create(plan->p.my_rank, plan->p.world_size)))
        st = rs_error(RESHARD_ERR_NOMEM, "reshard_plan_create: out of memory");
    if (st == RESHARD_OK && plan->quant) {
        plan->src = src = plan->quant->src;
        plan->dst = dst = plan->quant->dst;
    }
    if (st == RESHARD_OK)
        st = rs_validate(src, dst, params->world_size, params->my_rank);
    if (st == RESHARD_OK)
        st = rs_scope_build(&plan->p, src, dst, &plan->scope);
    if (st == RESHARD_OK && plan->p.summary)
        st = set_keep(plan, keep, nkeep);
    if (st == RESHARD_OK && !(plan->tally = calloc(1, sizeof *plan->tally)))
        st = rs_error(RESHARD_ERR_NOMEM, "reshard_plan_create: out of memory");
    if (st == RESHARD_OK)
        st = rs_tally_init(plan->tally, &plan->p);
    rs_bounds_t bounds = {0};
    if (st == RESHARD_OK)
        st = rs_bounds_create(plan, &bounds);
    if (st == RESHARD_OK)
        st = plan_tensors(plan, &bounds);
    if (st == RESHARD_OK)
        st = rs_stats_compute(plan, &bounds);
    rs_bounds_free(&bounds);
    if (st == RESHARD_OK)
        st = rs_chunk_caps(plan);
    if (st == RESHARD_OK && plan->p.my_rank != RESHARD_ALL_RANKS)
        st = rs_rank_plan_build(plan, plan->p.my_rank, &plan->mine);
    if (st == RESHARD_OK) {
        plan->fingerprint = fold_gone(plan, rs_fingerprint(&plan->p, src, dst));
        rs_fingerprint_parts(&plan->p, src, dst, plan->fp_part);
        plan->fp_tensor = rs_fingerprint_tensors(src, dst, &plan->fp_ntensors);
        st = plan->fp_tensor ? rs_plan_own_inputs(plan)
                             : rs_error(RESHARD_ERR_NOMEM, "reshard_plan_create: out of memory");
    }
    plan->holders_src = plan->holders_dst = NULL; /* the caller's, read while planning */
    if (st == RESHARD_OK && plan->quant) {
        rs_qplan_drop_inputs(plan->quant);
        if (plan->p.my_rank != RESHARD_ALL_RANKS)
            rs_qplan_keep_rank(plan->quant, plan->p.my_rank);
        if (!plan->p.summary) /* a summary plan is not executed */
            st = rs_qplan_pack_scratch(plan);
    }
    if (st == RESHARD_OK)
        st = rs_identity_add(plan);
    if (st != RESHARD_OK) {
        reshard_plan_destroy(plan);
        return st;
    }
    *out = plan;
    return RESHARD_OK;
}

void reshard_plan_destroy(reshard_plan_t *plan)
{
    if (!plan)
        return;
    rs_identity_remove(plan);
    rs_rank_plan_free(plan->mine);
    rs_scope_free(&plan->scope);
    rs_plan_own_free(plan);
    rs_qplan_free(plan->quant);
    rs_delta_free(plan->delta);
    rs_writers_forget(plan);
    free(plan->pieces);
    free(plan->chunk_cap);
    if (plan->tally)
        rs_tally_free(plan->tally);
    free(plan->tally);
    free(plan->keep_rank);
    free(plan->keep_domain);
    free(plan->fp_tensor);
    free(plan->gone);
    rs_placement_free(plan);
    rs_peer_maps_free(plan->peer_maps);
    free(plan);
}

reshard_status_t reshard_plan_get_stats(const reshard_plan_t *plan, reshard_plan_stats_t *stats)
{
    rs_error_clear();
    if (!plan || !stats)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_plan_get_stats: NULL argument");
    *stats = plan->stats;
    return RESHARD_OK;
}

uint64_t reshard_plan_pair_bytes(const reshard_plan_t *plan, int32_t src, int32_t dst)
{
    uint64_t b = 0;
    if (plan && plan->p.my_rank == RESHARD_ALL_RANKS) { /* every stream is tallied */
        if (src < 0 || dst < 0 || src >= plan->p.world_size || dst >= plan->p.world_size)
            return 0;
        for (int32_t stage = 0; stage < RS_NSTAGES; stage++) {
            const rs_stream_total_t *s =
                rs_tally_stream(plan->tally, rs_tally_key(stage, src, dst));
            b += s ? s->bytes : 0;
        }
        return b;
    }
    for (int64_t i = 0; plan && i < plan->npieces; i++)
        if (plan->pieces[i].sender == src && plan->pieces[i].receiver == dst)
            b += plan->pieces[i].bytes;
    return b;
}
