/* reshard_sim_model: plan a model refit on a modelled system and predict it. */
#include <string.h>
#include <time.h>

#include "reshard/reshard_sim.h"
#include "util/error.h"
#include "util/timeout.h"

static reshard_status_t sim_model(const reshard_model_t *model, const reshard_train_spec_t *train,
                                  const reshard_infer_spec_t *infer, const reshard_system_t *sys,
                                  const reshard_sim_delta_params_t *dp, reshard_sim_refit_t *out,
                                  reshard_sim_t *delta)
{
    rs_error_clear();
    if (!model || !train || !infer || !sys || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_sim_model: NULL argument");
    memset(out, 0, sizeof *out);
    if (sys->domain_size < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_sim_model: domain_size %d is negative",
                        sys->domain_size);
    int32_t off = reshard_sim_infer_offset(reshard_train_world(train), sys->domain_size);
    if ((int64_t)off + reshard_infer_world(infer) > RESHARD_MAX_WORLD_SIZE)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_sim_model: inference ranks from %d (domains of %d ranks) take "
                        "the world past %d ranks",
                        off, sys->domain_size, RESHARD_MAX_WORLD_SIZE);
    reshard_model_refit_t r;
    reshard_status_t st = reshard_model_refit_create_at(model, train, infer, off, &r);
    reshard_plan_t *plan = NULL;
    if (st == RESHARD_OK) {
        /* a summary plan: counters and stream totals are all the model needs */
        reshard_plan_params_t p = {.field_mask =
                                       RESHARD_PLAN_PARAM_DOMAIN_SIZE | RESHARD_PLAN_PARAM_SUMMARY,
                                   .world_size = off + r.infer_world,
                                   .my_rank = RESHARD_ALL_RANKS,
                                   .domain_size = sys->domain_size,
                                   .summary = 1};
        if (sys->staging_bytes) {
            p.field_mask |= RESHARD_PLAN_PARAM_STAGING_BYTES;
            p.staging_bytes = sys->staging_bytes;
        }
        double t0 = rs_now_s();
        st = reshard_plan_create(r.train, r.infer, &p, &plan);
        out->plan_seconds = rs_now_s() - t0;
    }
    if (st == RESHARD_OK)
        st = reshard_plan_get_stats(plan, &out->stats);
    if (st == RESHARD_OK)
        st = reshard_sim_plan(plan, sys, &out->sim);
    if (st == RESHARD_OK && dp)
        st = reshard_sim_delta_plan(plan, sys, dp, delta);
    reshard_plan_destroy(plan);
    /* The baseline's chain uses the same rank placement as the plan. */
    if (st == RESHARD_OK)
        st = reshard_model_baseline(model, &r, sys->domain_size, &out->baseline);
    if (st == RESHARD_OK) {
        out->train_world = r.train_world;
        out->infer_world = r.infer_world;
        out->infer_offset = off;
        out->model_bytes = reshard_tensors_bytes(r.tensors);
        st = reshard_sim_baseline(&r, &out->baseline, sys, &out->base);
        out->baseline_s = out->base.seconds;
    }
    reshard_model_refit_destroy(&r);
    return st;
}

reshard_status_t reshard_sim_model(const reshard_model_t *model, const reshard_train_spec_t *train,
                                   const reshard_infer_spec_t *infer, const reshard_system_t *sys,
                                   reshard_sim_refit_t *out)
{
    return sim_model(model, train, infer, sys, NULL, out, NULL);
}

reshard_status_t reshard_sim_model_delta(const reshard_model_t *model,
                                         const reshard_train_spec_t *train,
                                         const reshard_infer_spec_t *infer,
                                         const reshard_system_t *sys,
                                         const reshard_sim_delta_params_t *dp,
                                         reshard_sim_refit_t *out, reshard_sim_t *delta)
{
    if (!dp || !delta)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_sim_model_delta: NULL argument");
    memset(delta, 0, sizeof *delta);
    return sim_model(model, train, infer, sys, dp, out, delta);
}
