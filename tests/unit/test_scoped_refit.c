/* A rank's scoped refit (reshard_model_refit_create_scoped) on shipped
 * models: what it keeps, that its own plan is the rank's part of the global
 * plan, and every way of misusing it refused before planning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "plan/plan_internal.h" /* plan->fingerprint */
#include "plan_check.h"
#include "reshard/reshard.h"
#include "reshard/reshard_elastic.h"
#include "reshard/reshard_model.h"

static reshard_model_t *load(const char *name, int32_t layers, reshard_quant_kind_t quant)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s.json", RESHARD_DATA_DIR, name);
    reshard_model_options_t o = {.dtype = RESHARD_BF16, .layers = layers, .infer_quant = quant};
    reshard_model_t *m = NULL;
    if (reshard_model_load(path, &o, &m) != RESHARD_OK)
        fail_msg("load %s: %s", name, reshard_last_error());
    return m;
}

static void specs(const char *train, const char *infer, reshard_train_spec_t *ts,
                  reshard_infer_spec_t *is)
{
    assert_int_equal(reshard_train_spec_parse(train, ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse(infer, is), RESHARD_OK);
}

static reshard_plan_params_t params(int32_t world, int32_t rank, int32_t domain_size)
{
    return (reshard_plan_params_t){.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                   .world_size = world,
                                   .my_rank = rank,
                                   .domain_size = domain_size};
}

/* Tensors held by any rank of [lo, hi) in @p l. */
static void held_by(const reshard_layout_t *l, int32_t nt, int32_t lo, int32_t hi, uint8_t *out)
{
    memset(out, 0, (size_t)nt);
    for (int64_t i = 0; i < reshard_layout_count(l); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(l, i, &f);
        if (f.rank >= lo && f.rank < hi)
            out[f.tensor] = 1;
    }
}

/* For each of @p n ranks: its scoped refit keeps exactly the fragments the
 * planner's scope names (every fragment of the tensors it holds for
 * training; of those its domain holds for inference every source fragment
 * and the destination fragments inside the domain), only its own buffers,
 * and its own plan is its part of the global plan. */
static void scoped_case(const char *model, int32_t layers, const char *train, const char *infer,
                        int32_t ds, const int32_t *ranks, int n)
{
    reshard_model_t *m = load(model, layers, RESHARD_QUANT_NONE);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    specs(train, infer, &ts, &is);
    reshard_model_refit_t f;
    if (reshard_model_refit_create(m, &ts, &is, &f) != RESHARD_OK)
        fail_msg("%s: %s", model, reshard_last_error());
    int32_t world = f.train_world + f.infer_world, nt = reshard_tensors_count(f.tensors);
    reshard_plan_params_t pp = params(world, RESHARD_ALL_RANKS, ds);
    reshard_plan_t *all = NULL;
    if (reshard_plan_create(f.train, f.infer, &pp, &all) != RESHARD_OK)
        fail_msg("%s: global plan: %s", model, reshard_last_error());
    uint8_t *held = malloc((size_t)nt), *near = malloc((size_t)nt);
    for (int k = 0; k < n; k++) {
        int32_t r = ranks[k] < 0 ? world + ranks[k] : ranks[k];
        int32_t lo = ds > 1 ? r / ds * ds : r, hi = ds > 1 ? lo + ds : r + 1;
        held_by(f.train, nt, r, r + 1, held);
        held_by(f.infer, nt, lo, hi, near);
        reshard_model_refit_t g;
        if (reshard_model_refit_create_scoped(m, &ts, &is, -1, r, ds, &g) != RESHARD_OK)
            fail_msg("%s rank %d: %s", model, r, reshard_last_error());
        int64_t want_src = 0, want_dst = 0;
        for (int64_t i = 0; i < reshard_layout_count(f.train); i++) {
            reshard_fragment_t a;
            reshard_layout_fragment(f.train, i, &a);
            want_src += held[a.tensor] || near[a.tensor];
        }
        for (int64_t i = 0; i < reshard_layout_count(f.infer); i++) {
            reshard_fragment_t a;
            reshard_layout_fragment(f.infer, i, &a);
            /* every domain's fragments: senders are chosen over all groups of a tensor */
            want_dst += held[a.tensor] || near[a.tensor];
        }
        assert_int_equal(reshard_layout_count(g.train), want_src);
        assert_int_equal(reshard_layout_count(g.infer), want_dst);
        for (int64_t i = 0; i < reshard_layout_count(g.train); i++) {
            reshard_fragment_t a;
            reshard_layout_fragment(g.train, i, &a);
            assert_true(held[a.tensor] || near[a.tensor]);
        }
        for (int64_t i = 0; i < reshard_layout_count(g.infer); i++) {
            reshard_fragment_t a;
            reshard_layout_fragment(g.infer, i, &a);
            assert_true(held[a.tensor] || near[a.tensor]);
        }
        /* only its own buffers */
        const reshard_model_buffers_t *tb[2] = {g.train_buffers, g.infer_buffers};
        for (int s = 0; s < 2; s++)
            for (int64_t i = 0; i < reshard_model_buffers_count(tb[s]); i++) {
                reshard_model_buffer_t b;
                reshard_model_buffers_get(tb[s], i, &b);
                assert_int_equal(b.rank, r);
            }
        assert_int_equal(reshard_model_buffer_count(g.train_buffers, r),
                         reshard_model_buffer_count(f.train_buffers, r));
        assert_int_equal(reshard_model_buffer_count(g.infer_buffers, r),
                         reshard_model_buffer_count(f.infer_buffers, r));
        char why[512];
        if (rs_test_check_rank_plan(g.train, g.infer, &pp, all, r, why, sizeof why) != 0)
            fail_msg("%s %s -> %s, domain %d: %s", model, train, infer, ds, why);
        reshard_model_refit_destroy(&g);
    }
    free(held);
    free(near);
    reshard_plan_destroy(all);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
}

static void test_shipped_models(void **state)
{
    (void)state;
    const int32_t r[] = {0, 3, 9, 17, 31, 32, 35, 40, 47, -1};
    /* DeepSeek-V3 (MLA, 256 experts), first 4 layers: 32 training ranks, 16 inference */
    scoped_case("deepseek-v3", 4, "tp=2,pp=2,ep=8,dp=8,etp=1", "tp=8,dp=2", 8, r, 10);
    scoped_case("deepseek-v3", 4, "tp=2,pp=2,ep=8,dp=8,etp=1", "tp=4,dp=4,ep=on", 4, r, 10);
    /* Kimi-K2 (384 experts), no NVLink domains */
    scoped_case("kimi-k2", 4, "tp=1,pp=4,ep=8,dp=8,etp=1", "tp=8,dp=2", 0, r, 10);
    /* Nemotron-H hybrid (Mamba mixers, MoE): its own layouts */
    const int32_t rh[] = {0, 5, 8, 15, 16, 19, 23};
    scoped_case("nemotron-3-nano-30b-a3b", 0, "tp=2,pp=2,ep=4,dp=4,etp=1", "tp=4,dp=2", 4, rh, 7);
    /* dense Llama with vpp chunks */
    const int32_t rl[] = {0, 1, 7, 8, 11, 15};
    scoped_case("llama-3.1-8b", 0, "tp=2,pp=4,vpp=2", "tp=4,dp=2", 8, rl, 6);
}

typedef struct {
    reshard_model_t *m;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_refit_t g; /* rank 3's scoped refit, domain size 4 */
    int32_t world;
} fixture_t;

static void fixture(fixture_t *x)
{
    x->m = load("deepseek-v3", 4, RESHARD_QUANT_NONE);
    specs("tp=2,pp=2,ep=4,dp=4", "tp=4,dp=2", &x->ts, &x->is);
    if (reshard_model_refit_create_scoped(x->m, &x->ts, &x->is, -1, 3, 4, &x->g) != RESHARD_OK)
        fail_msg("scoped: %s", reshard_last_error());
    x->world = x->g.train_world + x->g.infer_world;
}

static void fixture_free(fixture_t *x)
{
    reshard_model_refit_destroy(&x->g);
    reshard_model_destroy(x->m);
}

/* Plan @p x's layouts with @p p: the status, and the message must hold @p what. */
static void refused(const reshard_layout_t *src, const reshard_layout_t *dst,
                    const reshard_plan_params_t *p, reshard_status_t want, const char *what)
{
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(src, dst, p, &plan), want);
    assert_null(plan);
    if (!strstr(reshard_last_error(), what))
        fail_msg("message \"%s\" lacks \"%s\"", reshard_last_error(), what);
}

static void test_misuse_refused(void **state)
{
    (void)state;
    fixture_t x;
    fixture(&x);
    reshard_plan_params_t p = params(x.world, 3, 4);
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(x.g.train, x.g.infer, &p, &plan), RESHARD_OK);
    reshard_plan_destroy(plan);
    /* another rank, a global plan, another domain size, a smaller world */
    p = params(x.world, 4, 4);
    refused(x.g.train, x.g.infer, &p, RESHARD_ERR_INVALID_ARG,
            "built for rank 3's own plan (domain ranks [0, 4)), not for rank 4's");
    p = params(x.world, RESHARD_ALL_RANKS, 4);
    refused(x.g.train, x.g.infer, &p, RESHARD_ERR_INVALID_ARG, "a global plan");
    p = params(x.world, 3, 8);
    refused(x.g.train, x.g.infer, &p, RESHARD_ERR_INVALID_ARG,
            "domain size 8 puts rank 3 in domain ranks [0, 8)");
    p = params(x.world - 1, 3, 4);
    refused(x.g.train, x.g.infer, &p, RESHARD_ERR_RANK, "world size 23 is smaller");
    /* one side scoped, the other whole */
    reshard_model_refit_t whole;
    assert_int_equal(reshard_model_refit_create(x.m, &x.ts, &x.is, &whole), RESHARD_OK);
    p = params(x.world, 3, 4);
    refused(x.g.train, whole.infer, &p, RESHARD_ERR_INVALID_ARG,
            "the destination layout for every rank's plan (whole)");
    /* whole layouts plan for any rank */
    p = params(x.world, 4, 8);
    assert_int_equal(reshard_plan_create(whole.train, whole.infer, &p, &plan), RESHARD_OK);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&whole);
    /* swapped sides, and two builds' layouts (another inference spec, the same ranks) */
    p = params(x.world, 3, 4);
    refused(x.g.infer, x.g.train, &p, RESHARD_ERR_INVALID_ARG,
            "a scoped build plans from training to inference");
    reshard_infer_spec_t is2;
    assert_int_equal(reshard_infer_spec_parse("tp=2,dp=4", &is2), RESHARD_OK);
    reshard_model_refit_t other;
    assert_int_equal(reshard_model_refit_create_scoped(x.m, &x.ts, &is2, -1, 3, 4, &other),
                     RESHARD_OK);
    refused(x.g.train, other.infer, &p, RESHARD_ERR_INVALID_ARG, "come from two different builds");
    reshard_model_refit_destroy(&other);
    /* changed after it was built: a fragment, then a buffer */
    reshard_fragment_t f;
    reshard_layout_fragment(x.g.infer, 0, &f);
    f.buffer = 999;
    assert_int_equal(reshard_layout_add_fragment(x.g.infer, &f), RESHARD_OK);
    p = params(x.world, 3, 4);
    refused(x.g.train, x.g.infer, &p, RESHARD_ERR_INVALID_ARG,
            "the destination layout was built for rank 3's own plan (domain ranks [0, 4)) and "
            "changed since");
    int64_t shape[1] = {16};
    assert_int_equal(
        reshard_layout_declare_buffer(x.g.train, 3, 999, "extra", RESHARD_BF16, 1, shape),
        RESHARD_OK);
    refused(x.g.train, x.g.infer, &p, RESHARD_ERR_INVALID_ARG, "the source layout was built");
    fixture_free(&x);
    /* a tensor added to the catalogue both layouts share */
    fixture(&x);
    int64_t two[2] = {4, 4};
    assert_int_equal(reshard_tensors_add(x.g.tensors, "extra", RESHARD_BF16, 2, two, 0, NULL, NULL),
                     RESHARD_OK);
    refused(x.g.train, x.g.infer, &p, RESHARD_ERR_INVALID_ARG, "changed since");
    /* the baseline needs every tensor */
    reshard_plan_stats_t st;
    assert_int_equal(reshard_model_baseline(x.m, &x.g, 4, &st), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "needs the whole refit"));
    fixture_free(&x);
}

/* A plan's world may be larger than the refit's: the ranks past it hold
 * nothing, so a domain that runs past the refit is the same scope. */
static void test_larger_world(void **state)
{
    (void)state;
    reshard_model_t *m = load("deepseek-v3", 4, RESHARD_QUANT_NONE);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    specs("tp=2,pp=2,ep=4,dp=4", "tp=4,dp=2", &ts, &is); /* 16 + 8 ranks */
    reshard_model_refit_t f;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_OK);
    reshard_plan_params_t pp = params(30, RESHARD_ALL_RANKS, 5);
    reshard_plan_t *all = NULL;
    assert_int_equal(reshard_plan_create(f.train, f.infer, &pp, &all), RESHARD_OK);
    for (int32_t r = 20; r < 24; r++) { /* domain [20, 25) of a 30-rank plan */
        reshard_model_refit_t g;
        assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, r, 5, &g), RESHARD_OK);
        char why[512];
        if (rs_test_check_rank_plan(g.train, g.infer, &pp, all, r, why, sizeof why) != 0)
            fail_msg("rank %d: %s", r, why);
        reshard_model_refit_destroy(&g);
    }
    reshard_plan_destroy(all);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
}

static void test_create_errors(void **state)
{
    (void)state;
    reshard_model_t *m = load("deepseek-v3", 2, RESHARD_QUANT_NONE);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    specs("tp=2,pp=2", "tp=4", &ts, &is);
    reshard_model_refit_t g;
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, 8, 0, &g),
                     RESHARD_ERR_RANK);
    assert_non_null(strstr(reshard_last_error(), "rank 8 outside the refit's 8 ranks"));
    assert_null(g.train);
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, -1, 0, &g),
                     RESHARD_ERR_RANK);
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, 0, -2, &g),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "domain_size -2 is negative"));
    assert_int_equal(reshard_model_refit_create_scoped(NULL, &ts, &is, -1, 0, 0, &g),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, 0, 0, NULL),
                     RESHARD_ERR_INVALID_ARG);
    /* inference ranks past the largest world: refused before anything is built */
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, 2147483000, 1, 0, &g),
                     RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "past the largest world"));
    /* a bad spec is the refit's error */
    specs("tp=3", "tp=4", &ts, &is);
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, 0, 0, &g),
                     RESHARD_ERR_CONFIG);
    reshard_model_destroy(m);
}

/* A quantized inference side is planned on wire layouts made from every
 * fragment: its "scoped" refit is the whole one, good for any rank. */
static void test_quantized_is_whole(void **state)
{
    (void)state;
    reshard_model_t *m = load("deepseek-v3", 2, RESHARD_QUANT_FP8_BLOCK);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    specs("tp=2,pp=2", "tp=4", &ts, &is);
    reshard_model_refit_t g, whole;
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, 8, 0, &g),
                     RESHARD_ERR_RANK);
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, 1, 0, &g), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &whole), RESHARD_OK);
    assert_int_equal(reshard_layout_count(g.train), reshard_layout_count(whole.train));
    assert_int_equal(reshard_layout_count(g.infer), reshard_layout_count(whole.infer));
    reshard_plan_params_t p = params(8, 6, 0);
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(g.train, g.infer, &p, &plan), RESHARD_OK);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&g);
    reshard_model_refit_destroy(&whole);
    reshard_model_destroy(m);
}

static uint64_t own_fingerprint(const reshard_model_refit_t *f, int32_t rank)
{
    reshard_plan_params_t p = params(f->train_world + f->infer_world, rank, 0);
    reshard_plan_t *plan = NULL;
    if (reshard_plan_create(f->train, f->infer, &p, &plan) != RESHARD_OK)
        fail_msg("plan: %s", reshard_last_error());
    uint64_t h = plan->fingerprint;
    reshard_plan_destroy(plan);
    return h;
}

/* Equal inputs give equal fingerprints, whole or scoped; other inputs,
 * or layouts changed after they were built, give others. */
static void test_fingerprints(void **state)
{
    (void)state;
    reshard_model_t *m = load("deepseek-v3", 2, RESHARD_QUANT_NONE);
    reshard_model_t *m4 = load("deepseek-v3", 4, RESHARD_QUANT_NONE);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is, is2;
    specs("tp=2,pp=2", "tp=4", &ts, &is);
    specs("tp=2,pp=2", "tp=2,dp=2", &ts, &is2);
    reshard_model_refit_t a, b, c, d, e;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &a), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &b), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, 5, 0, &c), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is2, &d), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m4, &ts, &is, &e), RESHARD_OK);
    uint64_t fa = own_fingerprint(&a, 5);
    assert_int_equal(own_fingerprint(&a, 2), fa);
    assert_int_equal(own_fingerprint(&b, 5), fa);
    assert_int_equal(own_fingerprint(&c, 5), fa);
    assert_int_not_equal(own_fingerprint(&d, 5), fa);
    assert_int_not_equal(own_fingerprint(&e, 5), fa);
    /* a buffer declared after the build: the fragments and buffers are hashed instead */
    int64_t shape[1] = {16};
    assert_int_equal(
        reshard_layout_declare_buffer(b.infer, 5, 999, "extra", RESHARD_BF16, 1, shape),
        RESHARD_OK);
    assert_int_not_equal(own_fingerprint(&b, 5), fa);
    reshard_model_refit_t *all[] = {&a, &b, &c, &d, &e};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        reshard_model_refit_destroy(all[i]);
    reshard_model_destroy(m);
    reshard_model_destroy(m4);
}

/* Scoped planning, then the documented recovery (issue 25, item 6): every
 * survivor derives its membership layouts from its scoped refit; its own
 * plan is its part of the global plan of the whole membership layouts (same
 * fingerprint, so no MISMATCH), and the scoped rules still hold after
 * reshard_membership_layouts (no global plan, no other rank's plan). Rank 5
 * relayed its domain's landings (domains of 4), so this is item 1's case too. */
static void test_scoped_recovery(void **state)
{
    (void)state;
    reshard_model_t *m = load("qwen3-0.6b", 2, RESHARD_QUANT_NONE);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    specs("tp=2,dp=2", "tp=2,dp=2", &ts, &is);
    reshard_model_refit_t f;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_OK);
    int32_t world = f.train_world + f.infer_world, gone[1] = {5};
    assert_int_equal(world, 8);
    reshard_layout_t *ws = NULL, *wd = NULL;
    assert_int_equal(reshard_membership_layouts(f.train, f.infer, gone, 1, &ws, &wd), RESHARD_OK);
    reshard_plan_params_t pp = params(world, RESHARD_ALL_RANKS, 4);
    reshard_plan_t *all = NULL;
    if (reshard_plan_create(ws, wd, &pp, &all) != RESHARD_OK)
        fail_msg("global plan of the membership: %s", reshard_last_error());
    for (int32_t r = 0; r < world; r++) {
        if (r == gone[0])
            continue;
        reshard_model_refit_t g;
        assert_int_equal(reshard_model_refit_create_scoped(m, &ts, &is, -1, r, 4, &g), RESHARD_OK);
        reshard_layout_t *gs = NULL, *gd = NULL;
        assert_int_equal(reshard_membership_layouts(g.train, g.infer, gone, 1, &gs, &gd),
                         RESHARD_OK);
        char why[512];
        if (rs_test_check_rank_plan(gs, gd, &pp, all, r, why, sizeof why) != 0)
            fail_msg("rank %d, scoped membership: %s", r, why);
        reshard_plan_t *bad = NULL;
        reshard_plan_params_t q = params(world, RESHARD_ALL_RANKS, 4);
        assert_int_equal(reshard_plan_create(gs, gd, &q, &bad), RESHARD_ERR_INVALID_ARG);
        assert_non_null(strstr(reshard_last_error(), "needs the whole layouts"));
        q.my_rank = (r + 1) % world;
        assert_int_equal(reshard_plan_create(gs, gd, &q, &bad), RESHARD_ERR_INVALID_ARG);
        assert_non_null(strstr(reshard_last_error(), "not for rank"));
        /* the scoped membership layouts with the whole ones: refused too */
        q.my_rank = r;
        assert_int_equal(reshard_plan_create(gs, wd, &q, &bad), RESHARD_ERR_INVALID_ARG);
        reshard_layout_destroy(gs);
        reshard_layout_destroy(gd);
        reshard_model_refit_destroy(&g);
    }
    reshard_plan_destroy(all);
    reshard_layout_destroy(ws);
    reshard_layout_destroy(wd);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_models),  cmocka_unit_test(test_misuse_refused),
        cmocka_unit_test(test_create_errors),   cmocka_unit_test(test_quantized_is_whole),
        cmocka_unit_test(test_fingerprints),    cmocka_unit_test(test_larger_world),
        cmocka_unit_test(test_scoped_recovery),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
