/*
 * Fuzz target: the config loader, the model rules, the layout builders and
 * a global plan.
 *
 * Input: the text of a config.json, optionally followed by a NUL byte and
 * parameter bytes (options, the two specs, the NVLink domain size, vpp). The
 * target checks one invariant of its own: a configuration that
 * reshard_model_check accepts must build both layouts (the check is
 * complete), and the refit those layouts describe must plan.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"
#include "reshard/reshard_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t param(const uint8_t *p, size_t n, size_t i)
{
    return i < n ? p[i] : 0;
}

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_config: %s: %s\n", what, reshard_last_error());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    const uint8_t *p = nul ? nul + 1 : NULL;
    size_t np = nul ? size - tlen - 1 : 0;
    char *text = malloc(tlen + 1);
    if (!text)
        return 0;
    memcpy(text, data, tlen);
    text[tlen] = '\0';

    /* Small models only: one or two decoder layers keep plans fast. */
    reshard_model_options_t opts = {0};
    opts.mtp = param(p, np, 0) & 1;
    opts.dtype = (param(p, np, 0) & 2) ? RESHARD_FP8_E4M3 : RESHARD_BF16;
    opts.layers = 1 + (param(p, np, 0) >> 2 & 1);
    reshard_model_t *model = NULL;
    reshard_status_t st = reshard_model_load_json(text, &opts, &model);
    if (st == RESHARD_ERR_INVALID_ARG) { /* fewer layers than asked for */
        opts.layers = 0;
        st = reshard_model_load_json(text, &opts, &model);
    }
    free(text);
    if (st != RESHARD_OK)
        return 0;
    reshard_model_info_t info;
    if (reshard_model_info(model, &info) != RESHARD_OK)
        fail("reshard_model_info");
    if (info.layers > 4 || info.mtp_layers > 2) { /* keep every input cheap */
        reshard_model_destroy(model);
        return 0;
    }

    static const int32_t sizes[] = {1, 2, 4, 8, 3, 1, 2, 1};
    uint8_t a = param(p, np, 1), b = param(p, np, 2), c = param(p, np, 3);
    reshard_train_spec_t train = {.tp = sizes[a & 7],
                                  .pp = 1 + (a >> 3 & 1),
                                  .dp = 1 + (a >> 4 & 1),
                                  .cp = 1,
                                  .ep = sizes[b & 7],
                                  .etp = sizes[b >> 3 & 7]};
    reshard_infer_spec_t infer = {.tp = sizes[c & 7], .dp = 1 + (c >> 3 & 1), .ep = c >> 4 & 1};
    train.vpp = param(p, np, 5) & 1 ? 2 : 0; /* interleaved pipeline: two chunks per stage */
    int32_t domain = param(p, np, 4) & 7;

    st = reshard_model_check(model, &train, &infer, 0);
    reshard_tensors_t *tensors = NULL;
    reshard_layout_t *tl = NULL, *il = NULL;
    if (reshard_model_tensors(model, &tensors) != RESHARD_OK)
        fail("reshard_model_tensors");
    reshard_status_t ts = reshard_model_train_layout(model, tensors, &train, 0, &tl, NULL);
    reshard_status_t is =
        reshard_model_infer_layout(model, tensors, &infer, reshard_train_world(&train), &il, NULL);
    if (st == RESHARD_OK && (ts != RESHARD_OK || is != RESHARD_OK))
        fail("reshard_model_check accepted specs a layout builder refuses");
    if (st == RESHARD_OK) {
        reshard_plan_params_t pp = {0};
        pp.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE;
        pp.world_size = reshard_train_world(&train) + reshard_infer_world(&infer);
        pp.my_rank = RESHARD_ALL_RANKS;
        pp.domain_size = domain;
        reshard_plan_t *plan = NULL;
        if (reshard_plan_create(tl, il, &pp, &plan) != RESHARD_OK)
            fail("a checked refit does not plan");
        reshard_plan_stats_t stats;
        if (reshard_plan_get_stats(plan, &stats) != RESHARD_OK)
            fail("reshard_plan_get_stats");
        reshard_plan_destroy(plan);

        reshard_model_refit_t refit;
        if (reshard_model_refit_create(model, &train, &infer, &refit) != RESHARD_OK)
            fail("reshard_model_refit_create after a passing check");
        reshard_plan_stats_t base;
        reshard_model_baseline(model, &refit, domain, &base);
        reshard_model_refit_destroy(&refit);
    }
    reshard_layout_destroy(tl);
    reshard_layout_destroy(il);
    reshard_tensors_destroy(tensors);
    reshard_model_destroy(model);
    return 0;
}
