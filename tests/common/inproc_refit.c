/* Test helper: run a refit in-process, one thread per rank, and verify it. */
#include "inproc_refit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const reshard_layout_t *src, *dst;
    reshard_plan_params_t params;
    const reshard_plan_t *shared;
    reshard_inproc_group_t *group;
    int32_t rank;
    int iters;
    rs_test_check_fn check;
    void *ctx;
    reshard_status_t st;
    char msg[1024];
    uint64_t verified, recv, local;
} rs_rank_job_t;

static reshard_buffer_t *alloc_bufs(const reshard_layout_t *l, int32_t rank, int32_t *n, int fill)
{
    *n = reshard_layout_buffer_count(l, rank);
    reshard_buffer_t *b = calloc((size_t)*n + 1, sizeof *b);
    for (int32_t i = 0; b && i < *n; i++) {
        b[i].bytes = reshard_layout_buffer_bytes(l, rank, i);
        b[i].ptr = malloc(b[i].bytes ? b[i].bytes : 1);
        memset(b[i].ptr, fill, b[i].bytes);
    }
    return b;
}

static void free_bufs(reshard_buffer_t *b, int32_t n)
{
    for (int32_t i = 0; b && i < n; i++)
        free(b[i].ptr);
    free(b);
}

/* Run the oracle on one side's buffers; a wrong byte fails the rank. */
static reshard_status_t oracle(rs_rank_job_t *j, int dst, const reshard_buffer_t *b, int32_t n)
{
    if (!j->check)
        return RESHARD_OK;
    char msg[512] = "";
    int64_t bad = j->check(j->ctx, j->rank, dst, b, n, msg, sizeof msg);
    if (!bad)
        return RESHARD_OK;
    snprintf(j->msg, sizeof j->msg, "rank %d: the oracle finds %lld wrong bytes: %s", j->rank,
             (long long)bad, msg);
    return RESHARD_ERR_VERIFY;
}

static void *rank_main(void *arg)
{
    rs_rank_job_t *j = arg;
    reshard_plan_t *own = NULL;
    reshard_comm_t *comm = NULL;
    int32_t ns = 0, nd = 0;
    reshard_buffer_t *sb = NULL, *db = NULL;
    reshard_status_t st = reshard_comm_create_inproc(j->group, j->rank, &comm);
    const reshard_plan_t *plan = j->shared;
    if (st == RESHARD_OK && !plan) {
        reshard_plan_params_t p = j->params;
        p.my_rank = j->rank;
        st = reshard_plan_create(j->src, j->dst, &p, &own);
        plan = own;
    }
    if (st == RESHARD_OK) {
        sb = alloc_bufs(j->src, j->rank, &ns, 0);
        st = reshard_fill_pattern(j->src, j->rank, sb, ns);
        if (st == RESHARD_OK)
            st = oracle(j, 0, sb, ns);
    }
    for (int it = 0; st == RESHARD_OK && it < j->iters; it++) {
        db = alloc_bufs(j->dst, j->rank, &nd, RESHARD_SENTINEL_BYTE);
        reshard_exec_stats_t es;
        st = reshard_plan_execute(plan, comm, sb, ns, db, nd, &es);
        uint64_t v = 0;
        if (st == RESHARD_OK)
            st = oracle(j, 1, db, nd);
        if (st == RESHARD_OK)
            st = reshard_verify_pattern(j->dst, j->rank, db, nd, &v);
        j->verified += v;
        j->recv += es.bytes_recv;
        j->local += es.bytes_local;
        free_bufs(db, nd);
        db = NULL;
    }
    j->st = st;
    if (st != RESHARD_OK && !j->msg[0])
        snprintf(j->msg, sizeof j->msg, "%s", reshard_last_error());
    free_bufs(sb, ns);
    reshard_plan_destroy(own);
    reshard_comm_destroy(comm);
    return NULL;
}

rs_test_refit_t rs_test_inproc_refit(const reshard_layout_t *src, const reshard_layout_t *dst,
                                     const reshard_plan_params_t *params, int iters,
                                     int shared_plan)
{
    return rs_test_inproc_refit_check(src, dst, params, iters, shared_plan, NULL, NULL);
}

rs_test_refit_t rs_test_inproc_refit_check(const reshard_layout_t *src, const reshard_layout_t *dst,
                                           const reshard_plan_params_t *params, int iters,
                                           int shared_plan, rs_test_check_fn check, void *ctx)
{
    rs_test_refit_t r;
    memset(&r, 0, sizeof r);
    int32_t n = params->world_size;
    reshard_plan_t *shared = NULL;
    if (shared_plan) {
        reshard_plan_params_t p = *params;
        p.my_rank = RESHARD_ALL_RANKS;
        r.status = reshard_plan_create(src, dst, &p, &shared);
        if (r.status != RESHARD_OK) {
            snprintf(r.message, sizeof r.message, "%s", reshard_last_error());
            return r;
        }
    }
    reshard_inproc_group_t *g = NULL;
    reshard_inproc_group_create(n, &g);
    rs_rank_job_t *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    for (int32_t i = 0; i < n; i++) {
        jobs[i] = (rs_rank_job_t){.src = src,
                                  .dst = dst,
                                  .params = *params,
                                  .shared = shared,
                                  .group = g,
                                  .rank = i,
                                  .iters = iters,
                                  .check = check,
                                  .ctx = ctx};
        pthread_create(&th[i], NULL, rank_main, &jobs[i]);
    }
    for (int32_t i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].st != RESHARD_OK && r.status == RESHARD_OK) {
            r.status = jobs[i].st;
            snprintf(r.message, sizeof r.message, "%s", jobs[i].msg);
        }
        r.verified_bytes += jobs[i].verified;
        r.recv_bytes += jobs[i].recv;
        r.local_bytes += jobs[i].local;
    }
    free(jobs);
    free(th);
    reshard_inproc_group_destroy(g);
    reshard_plan_destroy(shared);
    return r;
}
