/*
 * Elastic refit in-process: plans over a membership (lost destinations get
 * nothing, lost sources are never chosen, domains follow the plan rank, a
 * rank's own plan is its part of the global one), losing every replica is
 * UNCOVERED naming tensor, box and lost ranks, and the whole recovery: a
 * thread stops answering, the survivors agree on who is gone, shrink,
 * replan and refit verified; then the rank rejoins and is refit completely.
 *
 * Layouts (world 8): ranks 0-3 train, mesh [[0,1],[2,3]] with placements
 * (Replicate, Shard(0)) — DP replicas {0,2} and {1,3}; ranks 4-7 infer.
 *   "w"  fp32 [6, 8]: train Shard(0) (rows 0-2 on 0/2, rows 3-5 on 1/3);
 *        infer Shard(1) over 4..7: 2 columns each, 6*2*4 = 48 bytes a rank.
 *   "b"  bf16 [5]: train Shard(0) (3 and 2 elements); infer Replicate:
 *        10 bytes on each of 4..7.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "plan_check.h"
#include "refit_once.h"
#include "reshard/reshard_elastic.h"
#include "exec/comm.h"

#define WORLD 8

typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
} fixture_t;

static void build(fixture_t *f)
{
    assert_int_equal(reshard_tensors_create(&f->ts), RESHARD_OK);
    int64_t ws[2] = {6, 8}, bs[1] = {5};
    int32_t w, b;
    assert_int_equal(reshard_tensors_add(f->ts, "w", RESHARD_FP32, 2, ws, 0, NULL, &w), RESHARD_OK);
    assert_int_equal(reshard_tensors_add(f->ts, "b", RESHARD_BF16, 1, bs, 0, NULL, &b), RESHARD_OK);
    assert_int_equal(reshard_layout_create(f->ts, &f->src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(f->ts, &f->dst), RESHARD_OK);
    int32_t train[4] = {0, 1, 2, 3}, infer[4] = {4, 5, 6, 7};
    reshard_mesh_t tm = {.ndim = 2, .shape = {2, 2}, .ranks = train};
    reshard_mesh_t im = {.ndim = 1, .shape = {4}, .ranks = infer};
    reshard_placement_t tp[2] = {{RESHARD_REPLICATE, 0, 0}, {RESHARD_SHARD, 0, 0}};
    reshard_placement_t col[1] = {{RESHARD_SHARD, 1, 0}}, rep[1] = {{RESHARD_REPLICATE, 0, 0}};
    assert_int_equal(reshard_layout_add_dtensor(f->src, w, &tm, tp, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(f->src, b, &tm, tp, 1, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(f->dst, w, &im, col, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(f->dst, b, &im, rep, 1, 0), RESHARD_OK);
}

static void release(fixture_t *f)
{
    reshard_layout_destroy(f->src);
    reshard_layout_destroy(f->dst);
    reshard_tensors_destroy(f->ts);
}

static reshard_plan_params_t params(int32_t domain_size, double timeout_s)
{
    return (reshard_plan_params_t){.field_mask =
                                       RESHARD_PLAN_PARAM_DOMAIN_SIZE | RESHARD_PLAN_PARAM_TIMEOUT,
                                   .world_size = WORLD,
                                   .my_rank = RESHARD_ALL_RANKS,
                                   .domain_size = domain_size,
                                   .timeout_s = timeout_s};
}

static uint64_t bytes_into(const reshard_plan_t *p, int32_t dst)
{
    uint64_t b = 0;
    for (int32_t s = 0; s < WORLD; s++)
        b += reshard_plan_pair_bytes(p, s, dst);
    return b;
}

static uint64_t bytes_from(const reshard_plan_t *p, int32_t src)
{
    uint64_t b = 0;
    for (int32_t d = 0; d < WORLD; d++)
        b += reshard_plan_pair_bytes(p, src, d);
    return b;
}

/* Lost inference rank 6 and lost training rank 1: 6 receives nothing, 1
 * sends nothing (its replica 3 does), every other destination still gets
 * its 48 + 10 bytes, and each rank's own plan is its part of the global. */
static void test_membership_plan(void **state)
{
    (void)state;
    fixture_t f;
    build(&f);
    int32_t gone[2] = {6, 1};
    reshard_layout_t *s = NULL, *d = NULL;
    assert_int_equal(reshard_membership_layouts(f.src, f.dst, gone, 2, &s, &d), RESHARD_OK);
    for (int64_t i = 0; i < reshard_layout_count(s); i++) {
        reshard_fragment_t fr;
        reshard_layout_fragment(s, i, &fr);
        assert_int_not_equal(fr.rank, 1);
    }
    assert_int_equal(reshard_layout_count(s), reshard_layout_count(f.src) - 2);
    assert_int_equal(reshard_layout_count(d), reshard_layout_count(f.dst) - 2);
    for (int ds = 0; ds <= 2; ds += 2) {
        reshard_plan_params_t pp = params(ds, 5.0);
        reshard_plan_t *all = NULL;
        assert_int_equal(reshard_plan_create(s, d, &pp, &all), RESHARD_OK);
        assert_int_equal(bytes_into(all, 6), 0);
        assert_int_equal(bytes_from(all, 1), 0);
        for (int32_t r = 4; r < WORLD; r++)
            if (r != 6)
                assert_int_equal(bytes_into(all, r), 48 + 10);
        /* rows 3-5 of w (3*8*4 = 96 bytes) and b[3:5] (4 bytes) now come
         * from rank 3 alone; 4, 5, 7 need 2 columns of them each. */
        uint64_t from3 = bytes_from(all, 3);
        assert_true(from3 >= (uint64_t)(3 * 2 * 4) * 3 + 4);
        for (int32_t r = 0; r < WORLD; r++) {
            char why[512] = "";
            if (rs_test_check_rank_plan(s, d, &pp, all, r, why, sizeof why) != 0)
                fail_msg("domain_size %d: %s", ds, why);
        }
        reshard_plan_destroy(all);
    }
    reshard_layout_destroy(s);
    reshard_layout_destroy(d);
    release(&f);
}

/* Domains follow the plan rank: with domain_size 4 and train rank 2 lost,
 * inference ranks 4-7 stay one domain {4,5,6,7}: b (10 bytes) crosses into
 * it once and is forwarded to 3 peers; w crosses once per rank (192 bytes).
 * (Renumbering the survivors 0..6 would put old rank 4 into the training
 * domain and change both figures.) */
static void test_membership_domains(void **state)
{
    (void)state;
    fixture_t f;
    build(&f);
    int32_t gone[1] = {2};
    reshard_layout_t *s = NULL, *d = NULL;
    assert_int_equal(reshard_membership_layouts(f.src, f.dst, gone, 1, &s, &d), RESHARD_OK);
    reshard_plan_params_t pp = params(4, 5.0);
    reshard_plan_t *all = NULL;
    assert_int_equal(reshard_plan_create(s, d, &pp, &all), RESHARD_OK);
    reshard_plan_stats_t st;
    assert_int_equal(reshard_plan_get_stats(all, &st), RESHARD_OK);
    assert_int_equal(st.bytes_network, 192 + 10);
    assert_int_equal(st.bytes_nvlink, 3 * 10);
    assert_int_equal(bytes_from(all, 2), 0);
    reshard_plan_destroy(all);
    reshard_layout_destroy(s);
    reshard_layout_destroy(d);
    release(&f);
}

/* Both replicas of rows 3-5 (ranks 1 and 3) lost: UNCOVERED naming the
 * tensor, the box and both lost ranks, on every caller alike. */
static void test_membership_uncovered(void **state)
{
    (void)state;
    fixture_t f;
    build(&f);
    int32_t gone[3] = {3, 5, 1};
    reshard_layout_t *s = (reshard_layout_t *)&f, *d = (reshard_layout_t *)&f;
    assert_int_equal(reshard_membership_layouts(f.src, f.dst, gone, 3, &s, &d),
                     RESHARD_ERR_UNCOVERED);
    assert_null(s);
    assert_null(d);
    const char *m = reshard_last_error();
    assert_non_null(strstr(m, "tensor 'w'"));
    assert_non_null(strstr(m, "rank 4"));
    assert_non_null(strstr(m, "[3:6, 0:2]"));
    assert_non_null(strstr(m, "lost rank(s) 3, 1"));
    /* one replica left: fine */
    assert_int_equal(reshard_membership_layouts(f.src, f.dst, gone, 2, &s, &d), RESHARD_OK);
    reshard_layout_destroy(s);
    reshard_layout_destroy(d);
    release(&f);
}

/* A lost rank takes no part in the membership's plan, not even as a relay
 * (issue 25, item 1). "big" fp32 [256, 256] (256 KiB) is held by train rank
 * 0 and needed by inference rank 4 alone, in domain {4,5,6,7}: rank 4 lands
 * more than the group's share, so it relays stripes through 5, 6 and 7. With
 * 5 lost, the global plan and every survivor's own plan leave it out: no
 * byte to or from it, and rank 4 still receives all 256 KiB. */
static void test_membership_no_relay_through_lost(void **state)
{
    (void)state;
    reshard_tensors_t *ts = NULL;
    assert_int_equal(reshard_tensors_create(&ts), RESHARD_OK);
    int64_t shape[2] = {256, 256};
    int32_t big;
    assert_int_equal(reshard_tensors_add(ts, "big", RESHARD_FP32, 2, shape, 0, NULL, &big),
                     RESHARD_OK);
    reshard_layout_t *src = NULL, *dst = NULL;
    assert_int_equal(reshard_layout_create(ts, &src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(ts, &dst), RESHARD_OK);
    int32_t r0 = 0, r4 = 4;
    reshard_mesh_t m0 = {.ndim = 1, .shape = {1}, .ranks = &r0};
    reshard_mesh_t m4 = {.ndim = 1, .shape = {1}, .ranks = &r4};
    reshard_placement_t rep[1] = {{RESHARD_REPLICATE, 0, 0}};
    assert_int_equal(reshard_layout_add_dtensor(src, big, &m0, rep, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(dst, big, &m4, rep, 0, 0), RESHARD_OK);
    reshard_plan_params_t pp = params(4, 5.0);
    reshard_plan_t *before = NULL;
    assert_int_equal(reshard_plan_create(src, dst, &pp, &before), RESHARD_OK);
    assert_true(bytes_into(before, 5) > 0); /* the case relays through 5 */
    reshard_plan_destroy(before);
    int32_t gone[1] = {5};
    reshard_layout_t *s = NULL, *d = NULL;
    assert_int_equal(reshard_membership_layouts(src, dst, gone, 1, &s, &d), RESHARD_OK);
    reshard_plan_t *all = NULL;
    assert_int_equal(reshard_plan_create(s, d, &pp, &all), RESHARD_OK);
    assert_int_equal(bytes_into(all, 5), 0);
    assert_int_equal(bytes_from(all, 5), 0);
    assert_int_equal(reshard_plan_pair_bytes(all, 0, 4) + bytes_from(all, 6) + bytes_from(all, 7),
                     256 * 256 * 4);
    assert_true(bytes_into(all, 6) + bytes_into(all, 7) > 0); /* still relayed, elsewhere */
    for (int32_t r = 0; r < WORLD; r++) {
        if (r == 5)
            continue;
        char why[512] = "";
        if (rs_test_check_rank_plan(s, d, &pp, all, r, why, sizeof why) != 0)
            fail_msg("rank %d: %s", r, why);
    }
    reshard_plan_destroy(all);
    reshard_layout_destroy(s);
    reshard_layout_destroy(d);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

/* ---- the recovery, one thread per rank ---------------------------------- */

/* The peer timeout: 0.3 s, or RS_TEST_TIMEOUT_S (seconds) for slow runs such as
 * valgrind, where 0.3 s would take live threads for lost ones. */
static double timeout_s(void)
{
    const char *e = getenv("RS_TEST_TIMEOUT_S");
    double t = e ? atof(e) : 0;
    return t > 0 ? t : 0.3;
}
#define TIMEOUT_S timeout_s()
/* The agreement's timeout: short, as the failed refit releases the survivors
 * together (scaled with RS_TEST_TIMEOUT_S for slow runs). */
#define AGREE_S (TIMEOUT_S / 6)

typedef struct {
    fixture_t *f;
    int32_t rank, victim;
    reshard_inproc_group_t *all, *survivors, *rejoin;
    pthread_barrier_t *recovered; /* survivors done, victim may come back */
    reshard_status_t first, agree, after, rejoined;
    int32_t gone[WORLD], n_gone;
    uint64_t verified_after, verified_rejoin;
    bool suspects_victim; /* reshard_comm_unresponsive named the victim */
    double t_detect, t_agree, t_shrink, t_replan, t_refit;
    char msg[512];
} job_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Plan @p src -> @p dst for @p rank, execute once on @p comm, verify. */
static reshard_status_t refit_once(const reshard_layout_t *src, const reshard_layout_t *dst,
                                   reshard_comm_t *comm, int32_t rank, uint64_t *verified,
                                   double *t_plan)
{
    reshard_plan_params_t pp = params(2, TIMEOUT_S);
    uint64_t v = 0;
    reshard_status_t st = rs_test_refit_once(src, dst, &pp, comm, rank, &v, t_plan);
    if (verified)
        *verified = v;
    return st;
}

/* The victim's transport: at its first round wait, mid-refit, it stops
 * answering until the survivors have recovered (then its wait times out). */
static reshard_transport_ops_t stalling;
static reshard_status_t (*real_wait)(reshard_comm_t *, int, double);
static pthread_barrier_t *stall_until;
static int stalled;

static reshard_status_t stalling_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    if (!stalled++)
        pthread_barrier_wait(stall_until);
    return real_wait(c, slot, timeout_s);
}

static void *rank_main(void *arg)
{
    job_t *j = arg;
    reshard_comm_t *comm = NULL;
    if (reshard_comm_create_inproc(j->all, j->rank, &comm) != RESHARD_OK)
        return NULL;
    if (j->rank == j->victim) {
        stalling = *comm->ops;
        real_wait = stalling.round_wait;
        stalling.round_wait = stalling_wait;
        stall_until = j->recovered;
        stalled = 0;
        comm->ops = &stalling;
        j->first = refit_once(j->f->src, j->f->dst, comm, j->rank, NULL, NULL);
        if (!stalled) /* failed before its first round wait: still meet the survivors */
            pthread_barrier_wait(j->recovered);
    } else {
        double t0 = now();
        j->first = refit_once(j->f->src, j->f->dst, comm, j->rank, NULL, NULL);
        double t1 = now();
        int32_t sus[WORLD], ns = 0;
        if (reshard_comm_unresponsive(comm, sus, WORLD, &ns) == RESHARD_OK)
            for (int32_t i = 0; i < ns; i++)
                j->suspects_victim = j->suspects_victim || sus[i] == j->victim;
        j->agree = reshard_comm_agree_gone(comm, AGREE_S, j->gone, WORLD, &j->n_gone);
        double t2 = now();
        reshard_comm_t *next = NULL;
        reshard_layout_t *s = NULL, *d = NULL;
        j->after = j->agree;
        if (j->after == RESHARD_OK)
            j->after = reshard_comm_shrink_inproc(comm, j->gone, j->n_gone, j->survivors, &next);
        double t3 = now();
        if (j->after == RESHARD_OK)
            j->after = reshard_membership_layouts(j->f->src, j->f->dst, j->gone, j->n_gone, &s, &d);
        if (j->after == RESHARD_OK)
            j->after = refit_once(s, d, next, j->rank, &j->verified_after, &j->t_replan);
        if (j->after != RESHARD_OK)
            snprintf(j->msg, sizeof j->msg, "%s", reshard_last_error());
        j->t_detect = t1 - t0;
        j->t_agree = t2 - t1;
        j->t_shrink = t3 - t2;
        j->t_refit = now() - t0;
        reshard_layout_destroy(s);
        reshard_layout_destroy(d);
        reshard_comm_destroy(next);
        pthread_barrier_wait(j->recovered);
    }
    reshard_comm_destroy(comm);
    /* the rank restarts and rejoins: a new group of every rank, the original
     * layouts; its fresh buffers (sentinel only) are refit completely */
    reshard_comm_t *again = NULL;
    j->rejoined = reshard_comm_create_inproc(j->rejoin, j->rank, &again);
    if (j->rejoined == RESHARD_OK)
        j->rejoined = refit_once(j->f->src, j->f->dst, again, j->rank, &j->verified_rejoin, NULL);
    reshard_comm_destroy(again);
    return NULL;
}

static void run_recovery(int32_t victim)
{
    fixture_t f;
    build(&f);
    reshard_inproc_group_t *all, *surv, *rejoin;
    assert_int_equal(reshard_inproc_group_create(WORLD, &all), RESHARD_OK);
    assert_int_equal(reshard_inproc_group_create(WORLD - 1, &surv), RESHARD_OK);
    assert_int_equal(reshard_inproc_group_create(WORLD, &rejoin), RESHARD_OK);
    pthread_barrier_t recovered;
    pthread_barrier_init(&recovered, NULL, WORLD);
    job_t j[WORLD];
    pthread_t th[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        j[r] = (job_t){.f = &f,
                       .rank = r,
                       .victim = victim,
                       .all = all,
                       .survivors = surv,
                       .rejoin = rejoin,
                       .recovered = &recovered};
        pthread_create(&th[r], NULL, rank_main, &j[r]);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    double worst = 0, detect = 0, agree = 0, shrink = 0, replan = 0;
    uint64_t verified = 0, rejoined = 0;
    for (int32_t r = 0; r < WORLD; r++) {
        assert_int_equal(j[r].rejoined, RESHARD_OK);
        rejoined += j[r].verified_rejoin;
        if (r == victim) {
            /* woken after the recovery, it finds the old membership gone */
            assert_true(j[r].first == RESHARD_ERR_TIMEOUT || j[r].first == RESHARD_ERR_TRANSPORT);
            assert_true(stalled >= 1);
            continue;
        }
        /* TIMEOUT, or TRANSPORT for one that arrived after a peer gave up */
        assert_true(j[r].first == RESHARD_ERR_TIMEOUT || j[r].first == RESHARD_ERR_TRANSPORT);
        assert_true(j[r].suspects_victim);
        assert_int_equal(j[r].agree, RESHARD_OK);
        if (j[r].n_gone != 1)
            fail_msg("rank %d: %d gone: %d %d", r, j[r].n_gone, j[r].gone[0], j[r].gone[1]);
        assert_int_equal(j[r].gone[0], victim);
        if (j[r].after != RESHARD_OK)
            fail_msg("rank %d after recovery: %s: %s", r, reshard_status_string(j[r].after),
                     j[r].msg);
        verified += j[r].verified_after;
        if (j[r].t_refit > worst)
            worst = j[r].t_refit;
        detect = j[r].t_detect > detect ? j[r].t_detect : detect;
        agree = j[r].t_agree > agree ? j[r].t_agree : agree;
        shrink = j[r].t_shrink > shrink ? j[r].t_shrink : shrink;
        replan = j[r].t_replan > replan ? j[r].t_replan : replan;
    }
    /* every surviving destination got every element: 48 + 10 bytes each */
    uint64_t want = victim >= 4 ? 3 * 58 : 4 * 58;
    assert_int_equal(verified, want);
    assert_int_equal(rejoined, 4 * 58);
    assert_int_equal(j[victim].verified_rejoin, victim >= 4 ? 58 : 0);
    /* bounded: the failed refit's two timeouts, the agreement's two, a replan */
    assert_true(worst < 8 * TIMEOUT_S + 2.0);
    fprintf(stderr,
            "victim %d: detect %.3f s, agree %.3f s, shrink %.6f s, replan %.6f s, "
            "failed+recovered refit %.3f s (timeout %.1f s)\n",
            victim, detect, agree, shrink, replan, worst, TIMEOUT_S);
    pthread_barrier_destroy(&recovered);
    reshard_inproc_group_destroy(all);
    reshard_inproc_group_destroy(surv);
    reshard_inproc_group_destroy(rejoin);
    release(&f);
}

/* ---- the agreement with a slow but alive rank -------------------------------- */

#define AG_WORLD 4
/* The agreement's timeout here: long enough that live threads on a loaded host always
 * answer each other (0.25 s, scaled with RS_TEST_TIMEOUT_S) */
#define AG_S (TIMEOUT_S * 5 / 6)

typedef struct {
    reshard_inproc_group_t *g;
    int32_t rank;
    double delay_s; /* enters the agreement this late; < 0: never (stopped) */
    reshard_status_t st;
    int32_t gone[AG_WORLD], n_gone;
} ag_job_t;

static void *ag_main(void *arg)
{
    ag_job_t *j = arg;
    reshard_comm_t *c = NULL;
    j->st = reshard_comm_create_inproc(j->g, j->rank, &c);
    if (j->st != RESHARD_OK)
        return NULL;
    if (j->delay_s > 0) {
        struct timespec ts = {(time_t)j->delay_s,
                              (long)((j->delay_s - (double)(time_t)j->delay_s) * 1e9)};
        nanosleep(&ts, NULL);
    }
    j->st = reshard_comm_agree_gone(c, AG_S, j->gone, AG_WORLD, &j->n_gone);
    reshard_comm_destroy(c);
    return NULL;
}

/* Rank @p stopped never takes part, rank @p slow enters after the others' whole
 * agreement (4 x its timeout): whatever the outcome, two ranks that accept hold the same
 * set and neither is in it (never two groups carrying on); the stopped rank is in every
 * accepted set; the slow rank is counted lost by every accepting rank and errors. Returns
 * how many ranks accepted. */
static int agree_with_slow_rank(int32_t stopped, int32_t slow)
{
    reshard_inproc_group_t *g = NULL;
    assert_int_equal(reshard_inproc_group_create(AG_WORLD, &g), RESHARD_OK);
    ag_job_t j[AG_WORLD];
    pthread_t th[AG_WORLD];
    for (int32_t r = 0; r < AG_WORLD; r++) {
        j[r] = (ag_job_t){.g = g, .rank = r, .delay_s = r == slow ? 5 * AG_S : 0};
        if (r != stopped)
            assert_int_equal(pthread_create(&th[r], NULL, ag_main, &j[r]), 0);
    }
    for (int32_t r = 0; r < AG_WORLD; r++)
        if (r != stopped)
            pthread_join(th[r], NULL);
    int accepted = 0;
    for (int32_t r = 0; r < AG_WORLD; r++) {
        if (r == stopped || j[r].st != RESHARD_OK)
            continue;
        accepted++;
        bool has_stopped = false, has_slow = false;
        for (int32_t i = 0; i < j[r].n_gone; i++) {
            assert_int_not_equal(j[r].gone[i], r);
            has_stopped = has_stopped || j[r].gone[i] == stopped;
            has_slow = has_slow || j[r].gone[i] == slow;
        }
        assert_true(has_stopped);
        assert_true(has_slow);
        for (int32_t q = 0; q < AG_WORLD; q++) {
            if (q == stopped || j[q].st != RESHARD_OK)
                continue;
            assert_int_equal(j[q].n_gone, j[r].n_gone);
            assert_memory_equal(j[q].gone, j[r].gone, (size_t)j[r].n_gone * sizeof(int32_t));
        }
    }
    assert_int_not_equal(j[slow].st, RESHARD_OK);
    reshard_inproc_group_destroy(g);
    return accepted;
}

static void test_agree_slow_rank(void **state)
{
    (void)state;
    /* {0, 1} are half of the members with the lowest: they go on without 2 and 3, and the
     * slow rank 2 learns that it was counted lost */
    assert_int_equal(agree_with_slow_rank(3, 2), 2);
    /* {1, 2} are half without the lowest: nobody goes on */
    assert_int_equal(agree_with_slow_rank(3, 0), 0);
}

static void test_lost_inference_rank(void **state)
{
    (void)state;
    run_recovery(6);
}

static void test_lost_training_replica(void **state)
{
    (void)state;
    run_recovery(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_membership_plan),
        cmocka_unit_test(test_membership_domains),
        cmocka_unit_test(test_membership_uncovered),
        cmocka_unit_test(test_lost_inference_rank),
        cmocka_unit_test(test_membership_no_relay_through_lost),
        cmocka_unit_test(test_lost_training_replica),
        cmocka_unit_test(test_agree_slow_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
