/*
 * One endpoint, one call at a time (issue 25, items 3 and 5), in-process:
 *   - two threads of rank 0 execute on rank 0's one comm: the second is refused
 *     (INVALID_ARG naming the rank, nothing sent) and the one in flight fails at
 *     its outcome agreement, so rank 1 fails too: no rank returns OK from an
 *     execution whose peers may have run the other thread's plan; the next
 *     execution on the comm runs;
 *   - rank 0's comm is destroyed while a thread executes on it: the destroy
 *     waits for that execution to return (OK) before freeing (under ASan this
 *     was a heap-use-after-free in the in-process transport).
 * Layout: "w" fp32 [64, 64] on rank 0, needed whole by rank 1; rank 1 starts
 * its execution 0.5 s late, so rank 0's execution waits for it in the first
 * agreement while the second call comes.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "refit_once.h"
#include "exec/comm.h"
#include "util/timeout.h"

typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
    reshard_plan_params_t pp;
    reshard_inproc_group_t *g;
    reshard_comm_t *c0, *c1; /* ranks 0 and 1 */
} fixture_t;

static void build(fixture_t *f)
{
    assert_int_equal(reshard_tensors_create(&f->ts), RESHARD_OK);
    int64_t shape[2] = {64, 64};
    int32_t w, r0 = 0, r1 = 1;
    assert_int_equal(reshard_tensors_add(f->ts, "w", RESHARD_FP32, 2, shape, 0, NULL, &w),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_create(f->ts, &f->src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(f->ts, &f->dst), RESHARD_OK);
    reshard_mesh_t m0 = {.ndim = 1, .shape = {1}, .ranks = &r0};
    reshard_mesh_t m1 = {.ndim = 1, .shape = {1}, .ranks = &r1};
    reshard_placement_t rep[1] = {{RESHARD_REPLICATE, 0, 0}};
    assert_int_equal(reshard_layout_add_dtensor(f->src, w, &m0, rep, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(f->dst, w, &m1, rep, 0, 0), RESHARD_OK);
    f->pp = (reshard_plan_params_t){.field_mask = RESHARD_PLAN_PARAM_TIMEOUT,
                                    .world_size = 2,
                                    .my_rank = RESHARD_ALL_RANKS,
                                    .timeout_s = 5.0};
    assert_int_equal(reshard_inproc_group_create(2, &f->g), RESHARD_OK);
    assert_int_equal(reshard_comm_create_inproc(f->g, 0, &f->c0), RESHARD_OK);
    assert_int_equal(reshard_comm_create_inproc(f->g, 1, &f->c1), RESHARD_OK);
}

static void release(fixture_t *f)
{
    reshard_comm_destroy(f->c0);
    reshard_comm_destroy(f->c1);
    reshard_inproc_group_destroy(f->g);
    reshard_layout_destroy(f->src);
    reshard_layout_destroy(f->dst);
    reshard_tensors_destroy(f->ts);
}

typedef struct {
    const fixture_t *f;
    reshard_comm_t *comm;
    int32_t rank;
    double delay_s;
    reshard_status_t st;
    uint64_t verified;
    char msg[512];
    int done; /* set (atomically) once its execution returned */
} job_t;

static void *run(void *arg)
{
    job_t *j = arg;
    if (j->delay_s > 0)
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = (long)(j->delay_s * 1e9)}, NULL);
    j->st =
        rs_test_refit_once(j->f->src, j->f->dst, &j->f->pp, j->comm, j->rank, &j->verified, NULL);
    snprintf(j->msg, sizeof j->msg, "%s", reshard_last_error());
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Until a thread executes on @p c (at most 5 s). */
static void wait_busy(const reshard_comm_t *c)
{
    double t0 = rs_now_s();
    while (!(__atomic_load_n(&c->use, __ATOMIC_ACQUIRE) & RS_COMM_BUSY) && rs_now_s() - t0 < 5)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    assert_true(__atomic_load_n(&c->use, __ATOMIC_ACQUIRE) & RS_COMM_BUSY);
}

/* Rank 1 (0.5 s late) and rank 0's execution *@p a on threads; returns once *@p a
 * executes (waits in the first agreement for rank 1). */
static void start(fixture_t *f, job_t *a, job_t *r1, pthread_t *ta, pthread_t *tr)
{
    *a = (job_t){.f = f, .comm = f->c0, .rank = 0};
    *r1 = (job_t){.f = f, .comm = f->c1, .rank = 1, .delay_s = 0.5};
    assert_int_equal(pthread_create(tr, NULL, run, r1), 0);
    assert_int_equal(pthread_create(ta, NULL, run, a), 0);
    wait_busy(f->c0);
}

/* Join both threads of start(): both executions OK, rank 1 verified every element. */
static void finish(job_t *a, job_t *r1, pthread_t ta, pthread_t tr)
{
    pthread_join(ta, NULL);
    pthread_join(tr, NULL);
    assert_int_equal(a->st, RESHARD_OK);
    assert_int_equal(r1->st, RESHARD_OK);
    assert_int_equal(r1->verified, 64 * 64 * 4);
}

static void test_two_threads_one_comm(void **state)
{
    (void)state;
    fixture_t f;
    build(&f);
    job_t a, r1;
    pthread_t ta, tr;
    start(&f, &a, &r1, &ta, &tr);
    job_t b = a;
    run(&b); /* the second thread on rank 0's comm */
    pthread_join(ta, NULL);
    pthread_join(tr, NULL);
    assert_int_equal(b.st, RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(b.msg, "rank 0: another thread is executing on this comm"));
    /* refused on every rank: the execution in flight fails too, and so does its peer's
     * (rank 1 might have been running the other thread's plan with it) */
    assert_int_equal(a.st, RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(a.msg, "another thread called this comm during the execution"));
    assert_int_not_equal(r1.st, RESHARD_OK);
    /* and every later execution on it fails on every rank, before anything moves: the
     * ranks may have kept different threads' plans since (equal layouts look alike) */
    for (int step = 0; step < 2; step++) {
        r1.delay_s = 0;
        assert_int_equal(pthread_create(&tr, NULL, run, &r1), 0);
        run(&a);
        pthread_join(tr, NULL);
        assert_int_equal(a.st, RESHARD_ERR_INVALID_ARG);
        assert_non_null(strstr(a.msg, "rank 0: two threads called this comm at once"));
        assert_int_equal(r1.st, RESHARD_ERR_INVALID_ARG);
        assert_non_null(strstr(r1.msg, "rank 0: two threads called this comm at once"));
        assert_int_equal(r1.verified, 0);
    }
    release(&f);
}

static void test_destroy_waits_for_execution(void **state)
{
    (void)state;
    fixture_t f;
    build(&f);
    job_t a, r1;
    pthread_t ta, tr;
    start(&f, &a, &r1, &ta, &tr);
    reshard_comm_destroy(f.c0); /* while rank 0 waits for rank 1 in the first agreement */
    f.c0 = NULL;
    int done = __atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
    finish(&a, &r1, ta, tr);
    assert_int_equal(done, 1); /* the execution returned before the endpoint was freed */
    release(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_threads_one_comm),
        cmocka_unit_test(test_destroy_waits_for_execution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
