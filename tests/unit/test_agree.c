/* The first agreement of an execution, in-process: buffers checked exactly
 * against the declared table (the swapped-norm case), plans made from
 * different layouts (a mesh built in another rank order), a rank whose plan
 * failed telling its peers, and plans that outlive their layouts. Every
 * failing case checks that no destination byte was written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "mesh_pair.h"
#include "reshard/reshard_model.h"

/* ---- threads, one per rank ------------------------------------------------------------ */

typedef struct job job_t;
struct job {
    int32_t rank, world;
    reshard_inproc_group_t *g;
    void (*fn)(job_t *j, reshard_comm_t *c);
    const void *arg;
    reshard_status_t st;
    char msg[1024];
    int untouched; /* destination ranks: every byte still the sentinel */
};

static void *job_main(void *a)
{
    job_t *j = a;
    reshard_comm_t *c = NULL;
    if (reshard_comm_create_inproc(j->g, j->rank, &c) != RESHARD_OK)
        abort();
    j->fn(j, c);
    snprintf(j->msg, sizeof j->msg, "%s", reshard_last_error());
    reshard_comm_destroy(c);
    return NULL;
}

static void run_ranks(job_t *jobs, int32_t world, void (*fn)(job_t *, reshard_comm_t *),
                      const void *arg)
{
    reshard_inproc_group_t *g;
    assert_int_equal(reshard_inproc_group_create(world, &g), RESHARD_OK);
    pthread_t th[16];
    for (int32_t r = 0; r < world; r++) {
        jobs[r] = (job_t){.rank = r, .world = world, .g = g, .fn = fn, .arg = arg};
        pthread_create(&th[r], NULL, job_main, &jobs[r]);
    }
    for (int32_t r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    reshard_inproc_group_destroy(g);
}

static int all_sentinel(const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != RESHARD_SENTINEL_BYTE)
            return 0;
    return 1;
}

/* ---- the mesh pair: ranks 0, 1 hold w by rows, ranks 2, 3 receive it ---------------------- */

enum { SHARD_BYTES = RS_MESH_PAIR_ROWS / 2 * RS_MESH_PAIR_COLS * 4 };

typedef struct {
    int swapped_rank;  /* this rank builds its destination mesh as {3, 2}; -1 none */
    int failed_rank;   /* this rank's plan fails (staging bound too small); -1 none */
    int destroy_first; /* destroy the layouts and catalogue before executing */
} pair_case_t;

/* One rank of a mesh-pair refit: build, plan its own plan, execute once. */
static void pair_rank(job_t *j, reshard_comm_t *c)
{
    const pair_case_t *pc = j->arg;
    rs_mesh_pair_t p;
    rs_mesh_pair_make(&p, j->rank == pc->swapped_rank);
    reshard_plan_params_t prm = {.field_mask =
                                     RESHARD_PLAN_PARAM_TIMEOUT | RESHARD_PLAN_PARAM_STAGING_BYTES,
                                 .world_size = 4,
                                 .my_rank = j->rank,
                                 .timeout_s = 60.0,
                                 .staging_bytes = j->rank == pc->failed_rank ? 100 : 1 << 20};
    reshard_plan_t *plan = NULL;
    reshard_status_t st = reshard_plan_create(p.src, p.dst, &prm, &plan);
    if (st != RESHARD_OK) {
        rs_mesh_pair_free(&p);
        j->st = reshard_plan_fail(c, st, 60.0);
        return;
    }
    uint8_t *buf = malloc(SHARD_BYTES);
    reshard_buffer_t b = {.ptr = buf, .bytes = SHARD_BYTES};
    int src = j->rank < 2;
    if (src)
        assert_int_equal(reshard_fill_pattern(p.src, j->rank, &b, 1), RESHARD_OK);
    else
        memset(buf, RESHARD_SENTINEL_BYTE, SHARD_BYTES);
    if (pc->destroy_first)
        rs_mesh_pair_free(&p);
    j->st = reshard_plan_execute(plan, c, src ? &b : NULL, src, src ? NULL : &b, !src, NULL);
    reshard_plan_destroy(plan);
    if (pc->destroy_first)
        rs_mesh_pair_make(&p, 0);
    if (!src) {
        j->untouched = all_sentinel(buf, SHARD_BYTES);
        if (j->st == RESHARD_OK) {
            uint64_t v = 0;
            j->st = reshard_verify_pattern(p.dst, j->rank, &b, 1, &v);
            if (v != SHARD_BYTES)
                j->st = RESHARD_ERR_VERIFY;
        }
    }
    free(buf);
    rs_mesh_pair_free(&p);
}

/* Rank 3 built its destination mesh as {3, 2}, the others {2, 3}: every rank
 * fails with MISMATCH naming rank 3 (not TIMEOUT: the timeout is 60 s), the layouts
 * as what differs and "w" as the first tensor, and no destination byte is written. */
static void test_mesh_order_mismatch(void **state)
{
    (void)state;
    job_t jobs[4];
    pair_case_t pc = {.swapped_rank = 3, .failed_rank = -1};
    run_ranks(jobs, 4, pair_rank, &pc);
    for (int r = 0; r < 4; r++) {
        if (jobs[r].st != RESHARD_ERR_MISMATCH)
            fail_msg("rank %d: %s: %s", r, reshard_status_string(jobs[r].st), jobs[r].msg);
        char want[128];
        snprintf(want, sizeof want,
                 "rank %d: ranks 0 and 3 planned from different inputs (the layouts differ; "
                 "the first tensor where they do: 0 ('w' on this rank))",
                 r);
        if (!strstr(jobs[r].msg, want))
            fail_msg("rank %d: message '%s' lacks '%s'", r, jobs[r].msg, want);
    }
    assert_true(jobs[2].untouched);
    assert_true(jobs[3].untouched);
}

/* The same layouts on every rank: the refit runs and verifies (the control). */
static void test_same_layouts_run(void **state)
{
    (void)state;
    job_t jobs[4];
    pair_case_t pc = {.swapped_rank = -1, .failed_rank = -1};
    run_ranks(jobs, 4, pair_rank, &pc);
    for (int r = 0; r < 4; r++)
        if (jobs[r].st != RESHARD_OK)
            fail_msg("rank %d: %s: %s", r, reshard_status_string(jobs[r].st), jobs[r].msg);
}

/* Rank 2's plan fails: it calls reshard_plan_fail, every other rank's execute
 * returns its status naming rank 2, nothing is written. */
static void test_plan_fail_tells_peers(void **state)
{
    (void)state;
    job_t jobs[4];
    pair_case_t pc = {.swapped_rank = -1, .failed_rank = 2};
    run_ranks(jobs, 4, pair_rank, &pc);
    if (jobs[2].st != RESHARD_OK)
        fail_msg("plan_fail: %s: %s", reshard_status_string(jobs[2].st), jobs[2].msg);
    for (int r = 0; r < 4; r++) {
        if (r == 2)
            continue;
        if (jobs[r].st != RESHARD_ERR_STAGING)
            fail_msg("rank %d: %s: %s", r, reshard_status_string(jobs[r].st), jobs[r].msg);
        /* the peers name the rank and its own first problem (its message, carried over
         * the agreement) */
        char want[256];
        snprintf(want, sizeof want,
                 "rank %d: rank 2 could not create its plan or bind its buffers "
                 "(RESHARD_ERR_STAGING: staging bound 100 bytes is under the minimum 4096); "
                 "nothing was sent",
                 r);
        assert_string_equal(jobs[r].msg, want);
    }
    assert_true(jobs[3].untouched);
}

static void test_plan_fail_bad_args(void **state)
{
    (void)state;
    assert_int_equal(reshard_plan_fail(NULL, RESHARD_ERR_UNCOVERED, 1.0), RESHARD_ERR_INVALID_ARG);
    reshard_inproc_group_t *g;
    reshard_comm_t *c;
    assert_int_equal(reshard_inproc_group_create(1, &g), RESHARD_OK);
    assert_int_equal(reshard_comm_create_inproc(g, 0, &c), RESHARD_OK);
    assert_int_equal(reshard_plan_fail(c, RESHARD_OK, 1.0), RESHARD_ERR_INVALID_ARG);
    /* a group of one: the agreement completes at once */
    assert_int_equal(reshard_plan_fail(c, RESHARD_ERR_UNCOVERED, 1.0), RESHARD_OK);
    reshard_comm_destroy(c);
    reshard_inproc_group_destroy(g);
}

/* Layouts and catalogue destroyed between planning and executing (each rank's
 * own plan): the refit runs and every element verifies against rebuilt layouts. */
static void test_destroy_layouts_then_execute(void **state)
{
    (void)state;
    job_t jobs[4];
    pair_case_t pc = {.swapped_rank = -1, .failed_rank = -1, .destroy_first = 1};
    run_ranks(jobs, 4, pair_rank, &pc);
    for (int r = 0; r < 4; r++)
        if (jobs[r].st != RESHARD_OK)
            fail_msg("rank %d: %s: %s", r, reshard_status_string(jobs[r].st), jobs[r].msg);
}

/* ---- a model refit whose layouts die before execution ------------------------------------- */

typedef struct {
    const reshard_model_t *m;
    int shared;                 /* one RESHARD_ALL_RANKS plan for every rank */
    const reshard_plan_t *plan; /* the shared plan */
} model_case_t;

static reshard_plan_params_t model_params(int32_t rank)
{
    return (reshard_plan_params_t){.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE |
                                                 RESHARD_PLAN_PARAM_STAGING_BYTES,
                                   .world_size = 4,
                                   .my_rank = rank,
                                   .domain_size = 2,
                                   .staging_bytes = 64 << 10};
}

static void model_refit(const reshard_model_t *m, reshard_model_refit_t *r)
{
    reshard_train_spec_t ts = {.tp = 2, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 1};
    reshard_infer_spec_t is = {.tp = 1, .dp = 2};
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, r), RESHARD_OK);
}

/* Qwen3-0.6B, 1 layer, Megatron tp=2 -> vLLM tp=1 dp=2 in domains of 2: the
 * inference ranks forward inside their domain. */
static void model_rank(job_t *j, reshard_comm_t *c)
{
    const model_case_t *mc = j->arg;
    reshard_model_refit_t r;
    model_refit(mc->m, &r);
    reshard_plan_t *own = NULL;
    if (!mc->shared) {
        reshard_plan_params_t prm = model_params(j->rank);
        assert_int_equal(reshard_plan_create(r.train, r.infer, &prm, &own), RESHARD_OK);
    }
    int src = j->rank < r.train_world;
    const reshard_layout_t *l = src ? r.train : r.infer;
    int32_t n = reshard_layout_buffer_count(l, j->rank);
    reshard_buffer_t *b = calloc((size_t)n, sizeof *b);
    for (int32_t i = 0; i < n; i++) {
        b[i].bytes = reshard_layout_buffer_bytes(l, j->rank, i);
        b[i].ptr = malloc(b[i].bytes);
        memset(b[i].ptr, RESHARD_SENTINEL_BYTE, b[i].bytes);
    }
    if (src)
        assert_int_equal(reshard_fill_pattern(l, j->rank, b, n), RESHARD_OK);
    reshard_model_refit_destroy(&r);
    j->st = reshard_plan_execute(mc->shared ? mc->plan : own, c, src ? b : NULL, src ? n : 0,
                                 src ? NULL : b, src ? 0 : n, NULL);
    reshard_plan_destroy(own);
    if (j->st == RESHARD_OK && !src) {
        model_refit(mc->m, &r);
        uint64_t v = 0;
        j->st = reshard_verify_pattern(r.infer, j->rank, b, n, &v);
        if (j->st == RESHARD_OK && v == 0)
            j->st = RESHARD_ERR_VERIFY;
        reshard_model_refit_destroy(&r);
    }
    for (int32_t i = 0; i < n; i++)
        free(b[i].ptr);
    free(b);
}

static void test_model_plans_outlive_layouts(void **state)
{
    (void)state;
    reshard_model_options_t mo = {.layers = 1};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("qwen3-0.6b", &mo, &m), RESHARD_OK);
    for (int shared = 0; shared < 2; shared++) {
        model_case_t mc = {.m = m, .shared = shared};
        reshard_plan_t *plan = NULL;
        if (shared) {
            reshard_model_refit_t r;
            model_refit(m, &r);
            reshard_plan_params_t prm = model_params(RESHARD_ALL_RANKS);
            assert_int_equal(reshard_plan_create(r.train, r.infer, &prm, &plan), RESHARD_OK);
            reshard_model_refit_destroy(&r);
            mc.plan = plan;
        }
        job_t jobs[4];
        run_ranks(jobs, 4, model_rank, &mc);
        for (int rk = 0; rk < 4; rk++)
            if (jobs[rk].st != RESHARD_OK)
                fail_msg("shared %d, rank %d: %s: %s", shared, rk,
                         reshard_status_string(jobs[rk].st), jobs[rk].msg);
        reshard_plan_destroy(plan);
    }
    reshard_model_destroy(m);
}

/* ---- buffers checked against the declared table ------------------------------------------ */

/* Two norms of 1024 bf16 each: rank 0 holds both (buffers 0, 1), rank 1
 * receives both (buffers 0, 1); all four buffers declared. */
typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
    reshard_plan_t *plan;
} norms_t;

enum { NORM = 1024, NORM_BYTES = NORM * 2 };

static void norms_make(norms_t *x)
{
    const int64_t shape[1] = {NORM};
    const char *names[2] = {"model.layers.0.input_layernorm.weight",
                            "model.layers.0.post_attention_layernorm.weight"};
    assert_int_equal(reshard_tensors_create(&x->ts), RESHARD_OK);
    assert_int_equal(reshard_layout_create(x->ts, &x->src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(x->ts, &x->dst), RESHARD_OK);
    for (int32_t t = 0; t < 2; t++) {
        assert_int_equal(
            reshard_tensors_add(x->ts, names[t], RESHARD_BF16, 1, shape, 0, NULL, NULL),
            RESHARD_OK);
        for (int32_t rank = 0; rank < 2; rank++) {
            reshard_layout_t *l = rank ? x->dst : x->src;
            reshard_fragment_t f = {
                .tensor = t, .rank = rank, .buffer = t, .box = {1, {0}, {NORM}}, .stride = {1}};
            assert_int_equal(reshard_layout_add_fragment(l, &f), RESHARD_OK);
            assert_int_equal(
                reshard_layout_declare_buffer(l, rank, t, names[t], RESHARD_BF16, 1, shape),
                RESHARD_OK);
        }
    }
    reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_TIMEOUT,
                                 .world_size = 2,
                                 .my_rank = RESHARD_ALL_RANKS,
                                 .timeout_s = 60.0};
    assert_int_equal(reshard_plan_create(x->src, x->dst, &prm, &x->plan), RESHARD_OK);
}

static void norms_free(norms_t *x)
{
    reshard_plan_destroy(x->plan);
    reshard_layout_destroy(x->src);
    reshard_layout_destroy(x->dst);
    reshard_tensors_destroy(x->ts);
}

/* How rank 1 binds its two destination buffers in one case. */
typedef struct {
    const norms_t *x;
    reshard_buffer_t bind[2]; /* ptr filled in by the rank */
} norms_case_t;

static void norms_rank(job_t *j, reshard_comm_t *c)
{
    const norms_case_t *nc = j->arg;
    const norms_t *x = nc->x;
    static _Thread_local uint8_t mem[2][NORM_BYTES + 8];
    reshard_buffer_t b[2];
    for (int i = 0; i < 2; i++) {
        b[i] = nc->bind[i];
        if (j->rank == 0)
            b[i] = (reshard_buffer_t){.ptr = mem[i], .bytes = NORM_BYTES};
        else
            b[i].ptr = mem[i];
    }
    memset(mem, RESHARD_SENTINEL_BYTE, sizeof mem);
    if (j->rank == 0)
        assert_int_equal(reshard_fill_pattern(x->src, 0, b, 2), RESHARD_OK);
    j->st = reshard_plan_execute(x->plan, c, j->rank ? NULL : b, j->rank ? 0 : 2,
                                 j->rank ? b : NULL, j->rank ? 2 : 0, NULL);
    if (j->rank == 1) {
        j->untouched = all_sentinel(mem[0], sizeof mem);
        if (j->st == RESHARD_OK)
            j->st = reshard_verify_pattern(x->dst, 1, b, 2, NULL);
    }
}

/* Run one binding; expect @p want on both ranks and, on error, @p msg in
 * rank 1's message and nothing written. */
static void norms_expect(const norms_case_t *nc, reshard_status_t want, const char *msg)
{
    job_t jobs[2];
    run_ranks(jobs, 2, norms_rank, nc);
    for (int r = 0; r < 2; r++)
        if (jobs[r].st != want)
            fail_msg("rank %d: %s, want %s: %s", r, reshard_status_string(jobs[r].st),
                     reshard_status_string(want), jobs[r].msg);
    if (want == RESHARD_OK)
        return;
    assert_true(jobs[1].untouched);
    if (!strstr(jobs[1].msg, msg))
        fail_msg("rank 1: '%s' lacks '%s'", jobs[1].msg, msg);
    /* rank 0 names rank 1 and rank 1's own first problem */
    if (!strstr(jobs[0].msg, "rank 0: rank 1 rejected its buffers (RESHARD_ERR_BUFFER: rank 1, ") ||
        !strstr(jobs[0].msg, msg))
        fail_msg("rank 0: '%s'", jobs[0].msg);
}

static void test_swapped_norms(void **state)
{
    (void)state;
    norms_t x;
    norms_make(&x);
    const char *n0 = "model.layers.0.input_layernorm.weight";
    const char *n1 = "model.layers.0.post_attention_layernorm.weight";
    /* named as what they hold: the caller bound the arrays the wrong way round */
    norms_case_t nc = {
        .x = &x, .bind = {{.bytes = NORM_BYTES, .name = n1}, {.bytes = NORM_BYTES, .name = n0}}};
    norms_expect(&nc, RESHARD_ERR_BUFFER,
                 "rank 1, destination buffer 0: given as "
                 "model.layers.0.post_attention_layernorm.weight, declared "
                 "model.layers.0.input_layernorm.weight (2048 bytes both)");
    /* named as declared: the refit runs and verifies */
    nc = (norms_case_t){
        .x = &x, .bind = {{.bytes = NORM_BYTES, .name = n0}, {.bytes = NORM_BYTES, .name = n1}}};
    norms_expect(&nc, RESHARD_OK, NULL);
    norms_free(&x);
}

static void test_exact_size_and_dtype(void **state)
{
    (void)state;
    norms_t x;
    norms_make(&x);
    /* two bytes too many: undeclared buffers would take it, declared ones do not */
    norms_case_t nc = {.x = &x, .bind = {{.bytes = NORM_BYTES}, {.bytes = NORM_BYTES + 2}}};
    norms_expect(&nc, RESHARD_ERR_BUFFER,
                 "rank 1, destination buffer 1 (model.layers.0.post_attention_layernorm.weight): "
                 "given 2050 bytes, declared 2048 bytes (1024 bf16 elements)");
    nc.bind[1].bytes = NORM_BYTES - 2;
    norms_expect(&nc, RESHARD_ERR_BUFFER, "given 2046 bytes, declared 2048 bytes");
    /* a dtype given and wrong */
    nc = (norms_case_t){
        .x = &x,
        .bind = {{.bytes = NORM_BYTES},
                 {.bytes = NORM_BYTES, .flags = RESHARD_BUFFER_DTYPE, .dtype = RESHARD_FP16}}};
    norms_expect(&nc, RESHARD_ERR_BUFFER,
                 "rank 1, destination buffer 1 (model.layers.0.post_attention_layernorm.weight): "
                 "given as fp16, declared bf16");
    /* RESHARD_BF16 is 0: given with the flag it is checked and right */
    nc.bind[1].dtype = RESHARD_BF16;
    norms_expect(&nc, RESHARD_OK, NULL);
    /* without the flag the dtype field is not read */
    nc.bind[1].flags = 0;
    nc.bind[1].dtype = RESHARD_FP32;
    norms_expect(&nc, RESHARD_OK, NULL);
    norms_free(&x);
}

/* ---- a comm that timed out is not reused --------------------------------------------- */

/* Rank 0 stalls past the 0.3 s timeout in step 0 while ranks 1..3 execute;
 * then every rank executes step 1 on the same comm. Step 1 must not succeed
 * anywhere (it could pair a late rank's step-0 messages with step-1 ones):
 * every rank that saw the timeout gets TRANSPORT at once, naming the earlier
 * failure, and no destination byte of step 1 is written. */
typedef struct {
    reshard_status_t st[2];
    char msg[2][512];
    int untouched[2];
} reuse_t;
static reuse_t reuse[4];

static void reuse_rank(job_t *j, reshard_comm_t *c)
{
    rs_mesh_pair_t p;
    rs_mesh_pair_make(&p, 0);
    reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_TIMEOUT,
                                 .world_size = 4,
                                 .my_rank = j->rank,
                                 .timeout_s = 0.3};
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &prm, &plan), RESHARD_OK);
    uint8_t *buf = malloc(SHARD_BYTES);
    reshard_buffer_t b = {.ptr = buf, .bytes = SHARD_BYTES};
    int src = j->rank < 2;
    for (int step = 0; step < 2; step++) {
        if (src)
            assert_int_equal(reshard_fill_pattern(p.src, j->rank, &b, 1), RESHARD_OK);
        else
            memset(buf, RESHARD_SENTINEL_BYTE, SHARD_BYTES);
        if (step == 0 && j->rank == 0) {
            struct timespec ts = {.tv_sec = 1, .tv_nsec = 0};
            nanosleep(&ts, NULL);
        }
        reuse_t *u = &reuse[j->rank];
        u->st[step] =
            reshard_plan_execute(plan, c, src ? &b : NULL, src, src ? NULL : &b, !src, NULL);
        snprintf(u->msg[step], sizeof u->msg[step], "%s", reshard_last_error());
        u->untouched[step] = src || all_sentinel(buf, SHARD_BYTES);
    }
    reshard_plan_destroy(plan);
    free(buf);
    rs_mesh_pair_free(&p);
}

static void test_timed_out_comm_not_reused(void **state)
{
    (void)state;
    job_t jobs[4];
    memset(reuse, 0, sizeof reuse);
    run_ranks(jobs, 4, reuse_rank, NULL);
    for (int r = 0; r < 4; r++) {
        /* the stalled rank finds its peers gone: TRANSPORT; the others TIMEOUT */
        if (reuse[r].st[0] != (r == 0 ? RESHARD_ERR_TRANSPORT : RESHARD_ERR_TIMEOUT))
            fail_msg("rank %d step 0: %s: %s", r, reshard_status_string(reuse[r].st[0]),
                     reuse[r].msg[0]);
        assert_true(reuse[r].msg[0][0] != '\0');
        if (reuse[r].st[1] != RESHARD_ERR_TRANSPORT)
            fail_msg("rank %d step 1: %s: %s", r, reshard_status_string(reuse[r].st[1]),
                     reuse[r].msg[1]);
        assert_non_null(strstr(reuse[r].msg[1], "ended an earlier execution with a timeout"));
        assert_true(reuse[r].untouched[1]);
    }
}

/* ---- reshard_comm_agree_values ------------------------------------------------------- */

/* Values per rank of the agreement cases: rank r gives the infer spec infer[r] and the
 * staging value staging[r]; n[r] keys. */
typedef struct {
    const char *infer[6];
    const char *staging[6];
    int32_t n[6];
} values_case_t;

static void values_rank(job_t *j, reshard_comm_t *c)
{
    const values_case_t *vc = j->arg;
    const char *keys[3] = {"train", "infer", "staging_mb"};
    const char *vals[3] = {"tp=2", vc->infer[j->rank], vc->staging[j->rank]};
    j->st = reshard_comm_agree_values(c, vc->n[j->rank] ? vc->n[j->rank] : 3, keys, vals, 10.0);
}

static void test_agree_values(void **state)
{
    (void)state;
    job_t jobs[6];
    /* equal everywhere: OK on every rank */
    values_case_t same = {.infer = {"tp=2", "tp=2", "tp=2", "tp=2"},
                          .staging = {"64", "64", "64", "64"}};
    run_ranks(jobs, 4, values_rank, &same);
    for (int r = 0; r < 4; r++)
        assert_int_equal(jobs[r].st, RESHARD_OK);
    /* one odd rank on one key: each rank names the key, both values, both groups */
    values_case_t one = {.infer = {"tp=2", "tp=2", "tp=2", "tp=1,dp=2"},
                         .staging = {"64", "64", "64", "64"}};
    run_ranks(jobs, 4, values_rank, &one);
    for (int r = 0; r < 4; r++) {
        char want[256];
        snprintf(want, sizeof want,
                 "rank %d: the ranks were given different inputs (nothing was planned): infer: "
                 "'tp=2' on ranks 0, 1, 2; 'tp=1,dp=2' on rank 3",
                 r);
        assert_int_equal(jobs[r].st, RESHARD_ERR_MISMATCH);
        assert_string_equal(jobs[r].msg, want);
    }
    /* rank 0 odd on two keys, the others mixed on one: groups by rank 0's value, the
     * others' first value named; more than 4 ranks listed as "and more" */
    values_case_t two = {.infer = {"tp=4", "tp=2", "tp=2", "tp=1", "tp=2", "tp=2"},
                         .staging = {"32", "64", "64", "64", "64", "64"}};
    run_ranks(jobs, 6, values_rank, &two);
    for (int r = 0; r < 6; r++) {
        assert_int_equal(jobs[r].st, RESHARD_ERR_MISMATCH);
        const char *want[] = {"infer: 'tp=4' on rank 0; other values on ranks 1, 2, 3, 4 and "
                              "more (rank 1: 'tp=2')",
                              "; staging_mb: '32' on rank 0; '64' on ranks 1, 2, 3, 4 and more"};
        for (int k = 0; k < 2; k++)
            if (!strstr(jobs[r].msg, want[k]))
                fail_msg("rank %d: '%s' lacks '%s'", r, jobs[r].msg, want[k]);
    }
    /* a rank giving another number of keys */
    values_case_t count = {
        .infer = {"tp=2", "tp=2", "tp=2"}, .staging = {"64", "64", "64"}, .n = {3, 2, 3}};
    run_ranks(jobs, 3, values_rank, &count);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(jobs[r].st, RESHARD_ERR_MISMATCH);
        assert_non_null(strstr(jobs[r].msg, "different numbers of values"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_order_mismatch),
        cmocka_unit_test(test_same_layouts_run),
        cmocka_unit_test(test_plan_fail_tells_peers),
        cmocka_unit_test(test_plan_fail_bad_args),
        cmocka_unit_test(test_destroy_layouts_then_execute),
        cmocka_unit_test(test_model_plans_outlive_layouts),
        cmocka_unit_test(test_swapped_norms),
        cmocka_unit_test(test_exact_size_and_dtype),
        cmocka_unit_test(test_timed_out_comm_not_reused),
        cmocka_unit_test(test_agree_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
