/*
 * Hostile inputs found by fuzzing and adversarial API use: each case was a
 * hang, undefined behaviour, a silent wrong element or a wrong message.
 * Expected values come from the API contract (reshard.h) and the element
 * positions of reshard_fragment_t, computed here, never by the library.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_sim.h"

static void assert_msg(const char *want)
{
    const char *m = reshard_last_error();
    if (!strstr(m, want))
        fail_msg("message \"%s\" lacks \"%s\"", m, want);
}

static void assert_no_msg(const char *unwanted)
{
    const char *m = reshard_last_error();
    if (strstr(m, unwanted))
        fail_msg("message \"%s\" says \"%s\"", m, unwanted);
}

/* Catalogue of one int32 tensor "w" of @p n elements (1-d) or [n, 1] (2-d). */
static reshard_tensors_t *catalogue(int ndim, int64_t n)
{
    reshard_tensors_t *ts;
    int64_t shape[2] = {n, 1};
    assert_int_equal(reshard_tensors_create(&ts), RESHARD_OK);
    assert_int_equal(reshard_tensors_add(ts, "w", RESHARD_INT32, ndim, shape, 0, NULL, NULL),
                     RESHARD_OK);
    return ts;
}

static reshard_layout_t *layout(const reshard_tensors_t *ts, const reshard_fragment_t *f)
{
    reshard_layout_t *l;
    assert_int_equal(reshard_layout_create(ts, &l), RESHARD_OK);
    assert_int_equal(reshard_layout_add_fragment(l, f), RESHARD_OK);
    return l;
}

static reshard_status_t plan_with(const reshard_layout_t *src, const reshard_layout_t *dst,
                                  reshard_plan_params_t prm, reshard_plan_t **keep)
{
    reshard_plan_t *plan = NULL;
    reshard_status_t st = reshard_plan_create(src, dst, &prm, &plan);
    if (keep)
        *keep = plan;
    else
        reshard_plan_destroy(plan);
    return st;
}

/* ---- a two-rank refit run here, one thread per rank -------------------- */

typedef struct {
    const reshard_plan_t *plan;
    reshard_inproc_group_t *g;
    int32_t rank;
    reshard_buffer_t src, dst;
    reshard_status_t st;
} job_t;

static void *run_rank(void *arg)
{
    job_t *j = arg;
    reshard_comm_t *c = NULL;
    j->st = reshard_comm_create_inproc(j->g, j->rank, &c);
    if (j->st == RESHARD_OK)
        j->st = reshard_plan_execute(j->plan, c, &j->src, j->src.ptr ? 1 : 0, &j->dst,
                                     j->dst.ptr ? 1 : 0, NULL);
    reshard_comm_destroy(c);
    return NULL;
}

/* Execute @p plan on ranks 0 (source buffer @p s; destination @p d when
 * @p d_rank is 0) and 1 (destination @p d when @p d_rank is 1); a hang fails
 * the test through alarm(). */
static void run_two_ranks(const reshard_plan_t *plan, reshard_buffer_t s, reshard_buffer_t d,
                          int32_t d_rank)
{
    reshard_inproc_group_t *g;
    assert_int_equal(reshard_inproc_group_create(2, &g), RESHARD_OK);
    job_t j[2] = {{.plan = plan, .g = g, .rank = 0, .src = s}, {.plan = plan, .g = g, .rank = 1}};
    j[d_rank].dst = d;
    pthread_t th[2];
    alarm(60);
    for (int r = 0; r < 2; r++)
        assert_int_equal(pthread_create(&th[r], NULL, run_rank, &j[r]), 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    alarm(0);
    reshard_inproc_group_destroy(g);
    assert_int_equal(j[0].st, RESHARD_OK);
    assert_int_equal(j[1].st, RESHARD_OK);
}

/* ---- 2. peer timeouts --------------------------------------------------- */

/* timeout_s must be finite and > 0: NaN, infinities, zero and negatives
 * are refused at plan_create; the refusal names the timeout. */
static void test_timeout_not_finite_refused(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(1, 8);
    reshard_fragment_t f = {.tensor = 0, .rank = 0, .box = {1, {0}, {8}}, .stride = {1}};
    reshard_layout_t *src = layout(ts, &f);
    f.rank = 1;
    reshard_layout_t *dst = layout(ts, &f);
    /* and under RESHARD_MIN_TIMEOUT_S (a denormal made every execute TIMEOUT) */
    const double bad[] = {INFINITY, -INFINITY, NAN, 0.0, -1.0, 5e-324, 9.99e-4};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_TIMEOUT,
                                     .world_size = 2,
                                     .my_rank = RESHARD_ALL_RANKS,
                                     .timeout_s = bad[k]};
        assert_int_equal(plan_with(src, dst, prm, NULL), RESHARD_ERR_INVALID_ARG);
        assert_msg("timeout");
    }
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

/* API arguments found by a hostile tester: an empty tensor name, unknown
 * field_mask bits; and the minimum timeout itself is accepted. */
static void test_api_arguments_refused(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(1, 8);
    int64_t shape[1] = {4};
    assert_int_equal(reshard_tensors_add(ts, "", RESHARD_FP32, 1, shape, 0, NULL, NULL),
                     RESHARD_ERR_INVALID_ARG);
    assert_msg("empty");
    assert_int_equal(reshard_tensors_count(ts), 1);
    reshard_fragment_t f = {.tensor = 0, .rank = 0, .box = {1, {0}, {8}}, .stride = {1}};
    reshard_layout_t *src = layout(ts, &f);
    f.rank = 1;
    reshard_layout_t *dst = layout(ts, &f);
    const uint64_t unknown[] = {1u << 9, (uint64_t)1 << 63, 0xe00};
    for (size_t k = 0; k < sizeof unknown / sizeof *unknown; k++) {
        reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_TIMEOUT | unknown[k],
                                     .world_size = 2,
                                     .my_rank = RESHARD_ALL_RANKS,
                                     .timeout_s = 1.0};
        assert_int_equal(plan_with(src, dst, prm, NULL), RESHARD_ERR_INVALID_ARG);
        char want[64];
        snprintf(want, sizeof want, "0x%llx", (unsigned long long)unknown[k]);
        assert_msg(want);
    }
    reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_TIMEOUT,
                                 .world_size = 2,
                                 .my_rank = RESHARD_ALL_RANKS,
                                 .timeout_s = RESHARD_MIN_TIMEOUT_S};
    reshard_plan_t *plan = NULL;
    assert_int_equal(plan_with(src, dst, prm, &plan), RESHARD_OK);
    reshard_plan_destroy(plan);
    /* reshard_train_world: -1 for a size below 1 (tp=0) or an overflow */
    reshard_train_spec_t t = {.tp = 0, .pp = 1, .dp = 1, .cp = 1, .ep = 1};
    assert_int_equal(reshard_train_world(&t), -1);
    t.tp = 65536;
    t.pp = 65536;
    assert_int_equal(reshard_train_world(&t), -1);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

/* A huge finite timeout (past time_t, past what a timespec holds) waits as
 * long as needed: a healthy two-rank refit completes with every element. */
static void test_huge_timeout_completes(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(1, 8);
    reshard_fragment_t f = {.tensor = 0, .rank = 0, .box = {1, {0}, {8}}, .stride = {1}};
    reshard_layout_t *src = layout(ts, &f);
    f.rank = 1;
    reshard_layout_t *dst = layout(ts, &f);
    const double huge[] = {9.3e18, 1e300, RESHARD_MAX_TIMEOUT_S * 2};
    for (size_t k = 0; k < sizeof huge / sizeof *huge; k++) {
        reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_TIMEOUT,
                                     .world_size = 2,
                                     .my_rank = RESHARD_ALL_RANKS,
                                     .timeout_s = huge[k]};
        reshard_plan_t *plan;
        assert_int_equal(plan_with(src, dst, prm, &plan), RESHARD_OK);
        int32_t in[8], out[8];
        for (int i = 0; i < 8; i++)
            in[i] = 100 + i;
        memset(out, 0, sizeof out);
        run_two_ranks(plan, (reshard_buffer_t){.ptr = in, .bytes = sizeof in},
                      (reshard_buffer_t){.ptr = out, .bytes = sizeof out}, 1);
        for (int i = 0; i < 8; i++)
            assert_int_equal(out[i], 100 + i);
        reshard_plan_destroy(plan);
    }
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

/* ---- 4. aliasing source strides ------------------------------------------ */

/* A source fragment with stride 0 over extent 8 says one position holds 8
 * different elements: refused like a destination would be (OVERLAP, naming
 * tensor, rank and box), by the global plan and by every rank's own plan. */
static void test_source_aliasing_strides_refused(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(1, 8);
    reshard_fragment_t f = {.tensor = 0, .rank = 0, .box = {1, {0}, {8}}, .stride = {0}};
    reshard_layout_t *src = layout(ts, &f);
    f.rank = 1;
    f.stride[0] = 1;
    reshard_layout_t *dst = layout(ts, &f);
    for (int32_t me = RESHARD_ALL_RANKS; me < 2; me++) {
        reshard_plan_params_t prm = {.world_size = 2, .my_rank = me};
        assert_int_equal(plan_with(src, dst, prm, NULL), RESHARD_ERR_OVERLAP);
        assert_msg("tensor w, rank 0, box [0:8]: the source fragment overlaps itself");
    }
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

/* ---- 6. a destination fragment overlapping itself ---------------------------- */

static void test_self_overlap_message(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(2, 8);
    /* [8, 1] with strides {0, 1}: all 8 rows at position 0 */
    reshard_fragment_t f = {.tensor = 0, .rank = 0, .box = {2, {0, 0}, {8, 1}}, .stride = {1, 1}};
    reshard_layout_t *src = layout(ts, &f);
    f.rank = 1;
    f.stride[0] = 0;
    reshard_layout_t *dst = layout(ts, &f);
    reshard_plan_params_t prm = {.world_size = 2, .my_rank = RESHARD_ALL_RANKS};
    assert_int_equal(plan_with(src, dst, prm, NULL), RESHARD_ERR_OVERLAP);
    assert_msg("tensor w, rank 1, box [0:8, 0:1]: the destination fragment overlaps itself");
    assert_no_msg("another");
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

/* ---- 5. overflows ------------------------------------------------------------ */

/* Buffer ids are below INT32_MAX, so the count (largest id + 1) fits. */
static void test_buffer_id_int32_max(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(1, 8);
    reshard_layout_t *l;
    assert_int_equal(reshard_layout_create(ts, &l), RESHARD_OK);
    reshard_fragment_t f = {
        .tensor = 0, .rank = 3, .buffer = INT32_MAX, .box = {1, {0}, {8}}, .stride = {1}};
    assert_int_equal(reshard_layout_add_fragment(l, &f), RESHARD_ERR_INVALID_ARG);
    assert_msg("tensor w, rank 3, box [0:8]");
    assert_int_equal(reshard_layout_buffer_count(l, 3), 0);
    f.buffer = INT32_MAX - 1;
    assert_int_equal(reshard_layout_add_fragment(l, &f), RESHARD_OK);
    assert_int_equal(reshard_layout_buffer_count(l, 3), INT32_MAX);
    reshard_layout_destroy(l);
    reshard_tensors_destroy(ts);
}

/* A box reaching past INT64_MAX is refused with its true end in the text. */
static void test_box_message_near_int64_max(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(1, 8);
    reshard_layout_t *l;
    assert_int_equal(reshard_layout_create(ts, &l), RESHARD_OK);
    reshard_fragment_t f = {
        .tensor = 0, .rank = 0, .box = {1, {INT64_MAX - 1}, {4}}, .stride = {1}};
    assert_int_equal(reshard_layout_add_fragment(l, &f), RESHARD_ERR_BOX);
    assert_msg("box [9223372036854775806:9223372036854775810]");
    f.box.offset[0] = INT64_MIN;
    f.box.extent[0] = -4;
    assert_int_equal(reshard_layout_add_fragment(l, &f), RESHARD_ERR_BOX);
    assert_msg("box [-9223372036854775808:-9223372036854775808-4]");
    reshard_layout_destroy(l);
    reshard_tensors_destroy(ts);
}

/* Extent-1 dims may have any stride, INT64_MAX included: the copy forms no
 * pointer from it. w [4, 1]: the source holds its 4 elements at positions
 * 0..3 (strides {1, INT64_MAX}), the destination at 0, 2, 4, 6 (strides
 * {2, INT64_MAX}); sent to another rank (pack, unpack) and copied within
 * one rank (box copy). */
static void test_pack_huge_stride_extent_one(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(2, 4);
    for (int32_t to = 0; to < 2; to++) {
        reshard_fragment_t f = {
            .tensor = 0, .rank = 0, .box = {2, {0, 0}, {4, 1}}, .stride = {1, INT64_MAX}};
        reshard_layout_t *src = layout(ts, &f);
        f.rank = to;
        f.stride[0] = 2;
        reshard_layout_t *dst = layout(ts, &f);
        reshard_plan_params_t prm = {.world_size = 2, .my_rank = RESHARD_ALL_RANKS};
        reshard_plan_t *plan;
        assert_int_equal(plan_with(src, dst, prm, &plan), RESHARD_OK);
        int32_t in[4] = {11, 22, 33, 44}, out[7];
        memset(out, 0xA5, sizeof out);
        reshard_buffer_t sb = {.ptr = in, .bytes = sizeof in},
                         db = {.ptr = out, .bytes = sizeof out};
        run_two_ranks(plan, sb, db, to);
        for (int i = 0; i < 4; i++)
            assert_int_equal(out[2 * i], in[i]);
        for (int i = 0; i < 3; i++)
            assert_int_equal((uint32_t)out[2 * i + 1], 0xA5A5A5A5u);
        reshard_plan_destroy(plan);
        reshard_layout_destroy(src);
        reshard_layout_destroy(dst);
    }
    reshard_tensors_destroy(ts);
}

/* domain_size past the world (INT32_MAX) is one domain holding every rank:
 * the same plan as domain_size == world_size, not an allocation of -1; a
 * world_size past RESHARD_MAX_WORLD_SIZE is refused at once, not planned
 * for minutes over 2^31 ranks. */
static void test_plan_params_int32_max(void **state)
{
    (void)state;
    reshard_tensors_t *ts = catalogue(1, 8);
    reshard_fragment_t f = {.tensor = 0, .rank = 0, .box = {1, {0}, {8}}, .stride = {1}};
    reshard_layout_t *src = layout(ts, &f);
    f.rank = 2;
    reshard_layout_t *dst = layout(ts, &f);
    reshard_plan_stats_t a, b;
    int32_t sizes[2] = {INT32_MAX, 3};
    reshard_plan_stats_t *out[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                     .world_size = 3,
                                     .my_rank = RESHARD_ALL_RANKS,
                                     .domain_size = sizes[k]};
        reshard_plan_t *plan;
        assert_int_equal(plan_with(src, dst, prm, &plan), RESHARD_OK);
        assert_int_equal(reshard_plan_get_stats(plan, out[k]), RESHARD_OK);
        reshard_plan_destroy(plan);
    }
    /* one domain: the 32 bytes go over NVLink, none over the network */
    assert_int_equal(a.bytes_nvlink, 32);
    assert_int_equal(a.bytes_network, 0);
    assert_memory_equal(&a, &b, sizeof a);
    reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                 .world_size = 3,
                                 .my_rank = RESHARD_ALL_RANKS,
                                 .domain_size = -1};
    assert_int_equal(plan_with(src, dst, prm, NULL), RESHARD_ERR_INVALID_ARG);
    assert_msg("domain_size -1");
    /* the largest world plans a one-tensor layout, own plan and global (at
     * 2^20 ranks the chunk schedule's world^2 bit sets ran out of memory);
     * alarm only guards against a hang */
    for (int32_t me = RESHARD_ALL_RANKS; me < 3; me += 3) {
        prm = (reshard_plan_params_t){.world_size = RESHARD_MAX_WORLD_SIZE, .my_rank = me};
        reshard_plan_t *plan;
        alarm(60);
        assert_int_equal(plan_with(src, dst, prm, &plan), RESHARD_OK);
        alarm(0);
        reshard_plan_stats_t st;
        assert_int_equal(reshard_plan_get_stats(plan, &st), RESHARD_OK);
        if (me == RESHARD_ALL_RANKS)
            assert_int_equal(st.bytes_network, 32); /* 8 int32 from rank 0 to rank 2 */
        reshard_plan_destroy(plan);
    }
    const int32_t worlds[] = {INT32_MAX, RESHARD_MAX_WORLD_SIZE + 1, 0, -1};
    for (size_t k = 0; k < sizeof worlds / sizeof *worlds; k++)
        for (int32_t me = RESHARD_ALL_RANKS; me < 1; me++) {
            prm = (reshard_plan_params_t){.world_size = worlds[k], .my_rank = me};
            alarm(60);
            assert_int_equal(plan_with(src, dst, prm, NULL), RESHARD_ERR_INVALID_ARG);
            alarm(0);
            assert_msg("world_size");
        }
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

/* The simulator's system domain size goes through the same bounds: a domain
 * of INT32_MAX ranks would start the inference ranks at INT32_MAX. */
static void test_sim_domain_size_int32_max(void **state)
{
    (void)state;
    assert_int_equal(reshard_sim_infer_offset(8, INT32_MAX), INT32_MAX);
    assert_int_equal(reshard_sim_infer_offset(INT32_MAX, 2), -1);
    reshard_model_options_t o = {.layers = 1};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("qwen3-0.6b", &o, &m), RESHARD_OK);
    reshard_system_t sys;
    assert_int_equal(reshard_system_lookup("h100", &sys), RESHARD_OK);
    reshard_train_spec_t t = {.tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 1};
    reshard_infer_spec_t i = {.tp = 2, .dp = 1, .ep = 0};
    reshard_sim_refit_t out;
    const int32_t sizes[] = {INT32_MAX, -1};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        sys.domain_size = sizes[k];
        assert_int_equal(reshard_sim_model(m, &t, &i, &sys, &out), RESHARD_ERR_INVALID_ARG);
        assert_msg("domain");
    }
    reshard_model_destroy(m);
}

/* Config fields found by fuzzing the loader: a derived head_dim of 0
 * (hidden_size 1 over 64 heads), a field past int32, a tensor past 2^63
 * bytes; each is CONFIG at load, naming the field. */
static void test_config_sizes_refused(void **state)
{
    (void)state;
    static const struct {
        const char *fields, *words;
    } bad[] = {
        {"\"hidden_size\": 1, \"num_attention_heads\": 64",
         "'head_dim' is missing and its default 0"},
        {"\"hidden_size\": 64, \"num_attention_heads\": 4294967296", "'num_attention_heads'"},
        {"\"hidden_size\": 2147483647, \"num_attention_heads\": 1, \"head_dim\": 2147483647",
         "out of range"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"model_type\": \"llama\", %s, \"intermediate_size\": 8, "
                 "\"num_hidden_layers\": 2, \"vocab_size\": 2147483647}",
                 bad[k].fields);
        reshard_model_t *m = NULL;
        if (reshard_model_load_json(json, NULL, &m) != RESHARD_ERR_CONFIG)
            fail_msg("config %s accepted", json);
        assert_null(m);
        assert_msg(bad[k].words);
    }
}

/* ---- 6. the spec grammar -------------------------------------------------------- */

static void test_spec_grammar(void **state)
{
    (void)state;
    reshard_train_spec_t t;
    reshard_infer_spec_t i;
    /* sizes: digits only, no sign, no leading zero */
    static const char *const bad[] = {"tp=+4",  "tp=04",  "tp=0", "tp=-4",  "tp=4.0",
                                      "tp=0x4", "tp=4 4", "tp= ", "tp=1e2", "tp=16777217"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        if (reshard_train_spec_parse(bad[k], &t) != RESHARD_ERR_INVALID_ARG)
            fail_msg("train spec \"%s\" accepted", bad[k]);
        assert_msg("is not a positive integer");
        if (reshard_infer_spec_parse(bad[k], &i) != RESHARD_ERR_INVALID_ARG)
            fail_msg("infer spec \"%s\" accepted", bad[k]);
    }
    /* spaces around keys and values, anywhere around an item, are ignored */
    static const char *const spaced[] = {" tp=4,dp=2", "tp=4,dp=2 ", "tp = 4 , dp = 2",
                                         "\ttp=4,\tdp=2", "tp= 4,dp =2"};
    for (size_t k = 0; k < sizeof spaced / sizeof *spaced; k++) {
        if (reshard_train_spec_parse(spaced[k], &t) != RESHARD_OK)
            fail_msg("train spec \"%s\" refused: %s", spaced[k], reshard_last_error());
        assert_int_equal(t.tp, 4);
        assert_int_equal(t.dp, 2);
        assert_int_equal(t.pp, 1);
        if (reshard_infer_spec_parse(spaced[k], &i) != RESHARD_OK)
            fail_msg("infer spec \"%s\" refused: %s", spaced[k], reshard_last_error());
        assert_int_equal(i.tp, 4);
        assert_int_equal(i.dp, 2);
    }
    assert_int_equal(reshard_train_spec_parse("tp=16777216", &t), RESHARD_OK);
    assert_int_equal(t.tp, 16777216);
    /* ep of the inference spec is exactly on or off */
    static const char *const ep_bad[] = {"ep=1", "ep=0", "ep=true", "ep=false", "ep=ON"};
    for (size_t k = 0; k < sizeof ep_bad / sizeof *ep_bad; k++) {
        if (reshard_infer_spec_parse(ep_bad[k], &i) != RESHARD_ERR_INVALID_ARG)
            fail_msg("infer spec \"%s\" accepted", ep_bad[k]);
        assert_msg("must be on or off");
    }
    assert_int_equal(reshard_infer_spec_parse("tp=2, ep = on", &i), RESHARD_OK);
    assert_int_equal(i.ep, 1);
    assert_int_equal(reshard_infer_spec_parse("ep=off", &i), RESHARD_OK);
    assert_int_equal(i.ep, 0);
    /* what the formatters write parses back to the same spec */
    char buf[128];
    reshard_train_spec_t t0 = {.tp = 2,
                               .pp = 3,
                               .dp = 5,
                               .cp = 7,
                               .ep = 11,
                               .etp = 13,
                               .vpp = 2,
                               .first = 3,
                               .last = 4},
                         t1;
    assert_int_equal(reshard_train_spec_parse(reshard_train_spec_str(&t0, buf, sizeof buf), &t1),
                     RESHARD_OK);
    assert_memory_equal(&t0, &t1, sizeof t0);
}

/* ---- 6. one place refuses an FP8 config ---------------------------------------- */

/* vLLM fp8_utils: FP8 block-quantized partitions must be multiples of 128.
 * Qwen3-30B-A3B's expert intermediate 768 over tp=4 is 192 rows per rank:
 * reshard_model_check itself refuses it, naming the side and the rule. */
static void test_model_check_fp8_blocks(void **state)
{
    (void)state;
    reshard_model_options_t o = {.dtype = RESHARD_FP8_E4M3, .layers = 1};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("qwen3-30b-a3b", &o, &m), RESHARD_OK);
    reshard_train_spec_t t = {.tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 1};
    reshard_infer_spec_t i = {.tp = 4, .dp = 1};
    assert_int_equal(reshard_model_check(m, &t, &i, 0), RESHARD_ERR_CONFIG);
    assert_msg("infer: fp8:");
    assert_msg("not sharded at 128x128 block granularity");
    assert_msg("rows [0, 192) of 768 are not on 128-row block bounds");
    /* the same split on the training side (etp=4) */
    t = (reshard_train_spec_t){.tp = 4, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 4};
    i = (reshard_infer_spec_t){.tp = 1, .dp = 1};
    assert_int_equal(reshard_model_check(m, &t, &i, 0), RESHARD_ERR_CONFIG);
    assert_msg("train: fp8:");
    /* 768 / 2 = 384 = 3 blocks: accepted, and its layouts build */
    t = (reshard_train_spec_t){.tp = 2, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 2};
    i = (reshard_infer_spec_t){.tp = 2, .dp = 1};
    assert_int_equal(reshard_model_check(m, &t, &i, 0), RESHARD_OK);
    reshard_model_refit_t r;
    assert_int_equal(reshard_model_refit_create(m, &t, &i, &r), RESHARD_OK);
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(m);
}

/* argv[1], when given, runs only the tests whose names match it. */
int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeout_not_finite_refused),
        cmocka_unit_test(test_huge_timeout_completes),
        cmocka_unit_test(test_api_arguments_refused),
        cmocka_unit_test(test_source_aliasing_strides_refused),
        cmocka_unit_test(test_self_overlap_message),
        cmocka_unit_test(test_buffer_id_int32_max),
        cmocka_unit_test(test_box_message_near_int64_max),
        cmocka_unit_test(test_pack_huge_stride_extent_one),
        cmocka_unit_test(test_plan_params_int32_max),
        cmocka_unit_test(test_sim_domain_size_int32_max),
        cmocka_unit_test(test_config_sizes_refused),
        cmocka_unit_test(test_spec_grammar),
        cmocka_unit_test(test_model_check_fp8_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
