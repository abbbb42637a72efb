/* Zero-filled destination buffers (reshard_layout_zero_buffer): a parameter the
 * engine holds at zero on a rank that no source sends (vLLM's gpt-oss w2_bias
 * without EP on every rank but the first). Every execution, dense or delta,
 * writes it with zeros; a fragment in it is refused at plan creation; a missing
 * one is BUFFER on every rank before anything moves. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "reshard/reshard.h"

enum { WORLD = 2, NW = 32, NB = 16 };

typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
} fix_t;

/* "w" [8, 4] bf16: rank 0's source buffer 0 -> rank 1's destination buffer 0;
 * rank 1's destination buffer 1 "bias" bf16 [2, 8], zero-filled. */
static void fix_make(fix_t *x)
{
    int64_t shape[2] = {8, 4}, s32[1] = {NW}, sb[2] = {2, 8};
    assert_int_equal(reshard_tensors_create(&x->ts), RESHARD_OK);
    assert_int_equal(reshard_tensors_add(x->ts, "w", RESHARD_BF16, 2, shape, 0, NULL, NULL),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_create(x->ts, &x->src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(x->ts, &x->dst), RESHARD_OK);
    reshard_fragment_t f = {.tensor = 0, .rank = 0, .box = {2, {0, 0}, {8, 4}}, .stride = {4, 1}};
    assert_int_equal(reshard_layout_add_fragment(x->src, &f), RESHARD_OK);
    f.rank = 1;
    assert_int_equal(reshard_layout_add_fragment(x->dst, &f), RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(x->dst, 1, 0, "w", RESHARD_BF16, 1, s32),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(x->dst, 1, 1, "bias", RESHARD_BF16, 2, sb),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_zero_buffer(x->dst, 1, 1), RESHARD_OK);
}

static void fix_free(fix_t *x)
{
    reshard_layout_destroy(x->src);
    reshard_layout_destroy(x->dst);
    reshard_tensors_destroy(x->ts);
}

static void test_api_and_plan_refusal(void **state)
{
    (void)state;
    fix_t x;
    fix_make(&x);
    assert_int_equal(reshard_layout_zero_buffer(x.dst, 1, 7), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "rank 1, buffer 7: not declared"));
    assert_int_equal(reshard_layout_zero_buffer(NULL, 1, 1), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_zero_buffer(x.dst, 1, 1), RESHARD_OK); /* idempotent */
    /* a fragment in the zero-filled buffer: refused by name */
    reshard_layout_t *bad;
    int64_t s32[1] = {NW};
    assert_int_equal(reshard_layout_create(x.ts, &bad), RESHARD_OK);
    reshard_fragment_t f = {.tensor = 0, .rank = 1, .box = {2, {0, 0}, {8, 4}}, .stride = {4, 1}};
    assert_int_equal(reshard_layout_add_fragment(bad, &f), RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(bad, 1, 0, "w", RESHARD_BF16, 1, s32),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_zero_buffer(bad, 1, 0), RESHARD_OK);
    reshard_plan_params_t prm = {.world_size = WORLD, .my_rank = RESHARD_ALL_RANKS};
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(x.src, bad, &prm, &plan), RESHARD_ERR_INVALID_ARG);
    assert_null(plan);
    assert_non_null(strstr(reshard_last_error(), "tensor w, rank 1, box [0:8, 0:4]: destination "
                                                 "buffer 0 (w) is declared zero-filled"));
    reshard_layout_destroy(bad);
    /* the mark enters the fingerprint: a plan without it differs */
    reshard_layout_t *plain;
    int64_t sb[2] = {2, 8};
    assert_int_equal(reshard_layout_create(x.ts, &plain), RESHARD_OK);
    assert_int_equal(reshard_layout_add_fragment(plain, &f), RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(plain, 1, 0, "w", RESHARD_BF16, 1, s32),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(plain, 1, 1, "bias", RESHARD_BF16, 2, sb),
                     RESHARD_OK);
    reshard_plan_t *a = NULL, *b = NULL;
    assert_int_equal(reshard_plan_create(x.src, plain, &prm, &a), RESHARD_OK);
    assert_int_equal(reshard_plan_create(x.src, x.dst, &prm, &b), RESHARD_OK);
    reshard_plan_stats_t sa, sb2;
    assert_int_equal(reshard_plan_get_stats(a, &sa), RESHARD_OK);
    assert_int_equal(reshard_plan_get_stats(b, &sb2), RESHARD_OK);
    assert_int_equal(sa.bytes_total, sb2.bytes_total); /* zeros are not moved bytes */
    reshard_plan_destroy(a);
    reshard_plan_destroy(b);
    reshard_layout_destroy(plain);
    fix_free(&x);
}

typedef struct {
    const fix_t *x;
    int32_t rank;
    int delta, missing, steps;
    reshard_inproc_group_t *g;
    reshard_status_t st[3];
    char msg[3][512];
    uint16_t src[NW], w[NW], bias[NB];
    int bias_zero[3], w_ok[3], w_untouched[3];
} job_t;

static void *rank_main(void *arg)
{
    job_t *j = arg;
    reshard_comm_t *c = NULL;
    if (reshard_comm_create_inproc(j->g, j->rank, &c) != RESHARD_OK)
        return NULL;
    reshard_plan_params_t p = {.field_mask = j->delta ? RESHARD_PLAN_PARAM_DELTA : 0,
                               .world_size = WORLD,
                               .my_rank = j->rank,
                               .delta = j->delta};
    reshard_plan_t *plan = NULL;
    if (reshard_plan_create(j->x->src, j->x->dst, &p, &plan) != RESHARD_OK) {
        reshard_comm_destroy(c);
        return NULL;
    }
    for (int s = 0; s < j->steps; s++) {
        for (int k = 0; k < NW; k++)
            j->src[k] = (uint16_t)(0x3f80 + 7 * k + 3 * s); /* changes every step */
        memset(j->w, 0xA5, sizeof j->w);                    /* garbage before every refit */
        memset(j->bias, 0xA5, sizeof j->bias);
        reshard_buffer_t sb = {.ptr = j->src, .bytes = sizeof j->src};
        reshard_buffer_t db[2] = {{.ptr = j->w, .bytes = sizeof j->w},
                                  {.ptr = j->bias, .bytes = sizeof j->bias}};
        if (s > 0 && j->delta) /* delta: w keeps what the last refit committed */
            for (int k = 0; k < NW; k++)
                j->w[k] = (uint16_t)(0x3f80 + 7 * k + 3 * (s - 1));
        int32_t nd = j->missing ? 1 : 2;
        j->st[s] = j->rank == 0 ? reshard_plan_execute(plan, c, &sb, 1, NULL, 0, NULL)
                                : reshard_plan_execute(plan, c, NULL, 0, db, nd, NULL);
        snprintf(j->msg[s], sizeof j->msg[s], "%s", reshard_last_error());
        int zero = 1, ok = 1, untouched = 1;
        for (int k = 0; k < NB; k++)
            zero &= j->bias[k] == 0;
        for (int k = 0; k < NW; k++) {
            ok &= j->w[k] == (uint16_t)(0x3f80 + 7 * k + 3 * s);
            untouched &= j->w[k] == 0xA5A5;
        }
        j->bias_zero[s] = zero;
        j->w_ok[s] = ok;
        j->w_untouched[s] = untouched;
    }
    reshard_plan_destroy(plan);
    reshard_comm_destroy(c);
    return NULL;
}

static void run(const fix_t *x, int delta, int missing, int steps, job_t *jobs)
{
    reshard_inproc_group_t *g;
    assert_int_equal(reshard_inproc_group_create(WORLD, &g), RESHARD_OK);
    pthread_t th[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].x = x;
        jobs[r].rank = r;
        jobs[r].delta = delta;
        jobs[r].missing = missing;
        jobs[r].steps = steps;
        jobs[r].g = g;
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    reshard_inproc_group_destroy(g);
}

/* Dense and delta, three refits each, the bias garbage before every one: after
 * every refit w holds the sent values and every bias element is 0. */
static void test_zeros_every_refit(void **state)
{
    (void)state;
    fix_t x;
    fix_make(&x);
    for (int delta = 0; delta < 2; delta++) {
        job_t jobs[WORLD];
        run(&x, delta, 0, 3, jobs);
        for (int s = 0; s < 3; s++) {
            for (int r = 0; r < WORLD; r++)
                if (jobs[r].st[s] != RESHARD_OK)
                    fail_msg("delta %d step %d rank %d: %s", delta, s, r, jobs[r].msg[s]);
            if (!jobs[1].w_ok[s] || !jobs[1].bias_zero[s])
                fail_msg("delta %d step %d: w %s, bias %s", delta, s,
                         jobs[1].w_ok[s] ? "right" : "WRONG",
                         jobs[1].bias_zero[s] ? "zeros" : "NOT ZERO");
        }
    }
    fix_free(&x);
}

/* The zero-filled buffer not given: BUFFER on every rank, naming it; nothing written. */
static void test_missing_is_refused_everywhere(void **state)
{
    (void)state;
    fix_t x;
    fix_make(&x);
    job_t jobs[WORLD];
    run(&x, 0, 1, 1, jobs);
    for (int r = 0; r < WORLD; r++) {
        assert_int_equal(jobs[r].st[0], RESHARD_ERR_BUFFER);
        assert_non_null(strstr(jobs[r].msg[0], "rank 1"));
    }
    assert_non_null(strstr(jobs[1].msg[0], "destination buffer 1 (bias, zero-filled by every "
                                           "execution): missing"));
    assert_true(jobs[1].w_untouched[0]);
    fix_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_and_plan_refusal),
        cmocka_unit_test(test_zeros_every_refit),
        cmocka_unit_test(test_missing_is_refused_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
