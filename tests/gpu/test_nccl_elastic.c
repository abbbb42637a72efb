/*
 * Elastic refit through the NCCL transport's code with the fake CUDA runtime and NCCL
 * (fake_cuda_nccl.c; ranks are threads; its revoke, shrink and split complete later, from a
 * background job, as NCCL's nonblocking ones do). Train tp=2 (ranks 0-1) -> infer tp=1, dp=2
 * (ranks 2-3) of a small Qwen3 config; refit 1 runs on every rank, then (--case):
 *   lost   in refit 2 inference rank 3 stops answering; the others fail with TIMEOUT (their
 *          communicator is revoked, not freed), agree on the lost rank over an in-process
 *          side channel, shrink the revoked communicator (ncclCommShrink, NCCL_SHRINK_ABORT:
 *          only once the revoke is quiescent), replan for the membership and refit verified:
 *          rank 2 gets every byte it owns, nothing goes to rank 3.
 *   leave  rank 3 leaves by agreement, with no failure: the others shrink the LIVE
 *          communicator (the new one is filled in asynchronously) and refit verified.
 *   none   nobody is gone (an empty agreement): every rank makes a new communicator of the
 *          same members (NCCL refuses a shrink with no excluded rank) and refits verified.
 * In every case a delta plan then refits twice on the shrunk comm (a view over the new
 * communicator), verified: the view passes the device delta codec through.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device_bufs.h"
#include "reshard/reshard_elastic.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_nccl.h"
#include "util/timeout.h"

#define NRANKS 4
#define VICTIM 3

static const char *tiny_dense =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\","
    " \"hidden_size\": 256, \"intermediate_size\": 512, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 128,"
    " \"vocab_size\": 1000, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\"}";

enum { CASE_LOST, CASE_LEAVE, CASE_NONE };

typedef struct {
    int rank, kase;
    const char *id;
    reshard_inproc_group_t *side; /* CPU side channel for the agreement */
    pthread_barrier_t *done;
    pthread_barrier_t *start2; /* the survivors start refit 2 together (see main) */
    int ok;
    double t_detect, t_agree, t_shrink;
    char msg[512];
} job_t;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(j->msg, sizeof j->msg, __VA_ARGS__);                                              \
        goto out;                                                                                  \
    } while (0)

/* Plan src -> dst for this rank, execute on @p comm (the endpoint @p ep allocates and
 * checks device buffers), and on an inference rank verify every byte. With @p delta a delta
 * plan, executed twice (dense, then a delta of nothing changed: its device codec and hash
 * kernel run through @p comm, a view after a shrink), verified after the second. */
static reshard_status_t refit(reshard_comm_t *ep, reshard_comm_t *comm, const reshard_layout_t *src,
                              const reshard_layout_t *dst, const bufs_t *sb, const bufs_t *db,
                              int rank, bool delta, uint64_t *verified)
{
    reshard_plan_params_t p = {.field_mask =
                                   RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT,
                               .world_size = NRANKS,
                               .my_rank = rank,
                               .staging_bytes = 64 << 10,
                               .timeout_s = 1.0};
    if (delta) {
        p.field_mask |= RESHARD_PLAN_PARAM_DELTA;
        p.delta = 1;
    }
    reshard_plan_t *plan = NULL;
    reshard_status_t st = reshard_plan_create(src, dst, &p, &plan);
    for (int32_t i = 0; st == RESHARD_OK && i < db->n; i++)
        st = reshard_nccl_memset(ep, db->b[i].ptr, RESHARD_SENTINEL_BYTE, db->b[i].bytes);
    if (st == RESHARD_OK)
        st = reshard_plan_execute(plan, comm, sb->b, sb->n, db->b, db->n, NULL);
    if (st == RESHARD_OK && delta)
        st = reshard_plan_execute(plan, comm, sb->b, sb->n, db->b, db->n, NULL);
    *verified = 0;
    if (st == RESHARD_OK && db->n > 0)
        st = reshard_nccl_verify_pattern(ep, dst, rank, db->b, db->n, verified);
    reshard_plan_destroy(plan);
    return st;
}

static void *rank_main(void *arg)
{
    job_t *j = arg;
    reshard_comm_t *c = NULL, *side = NULL, *next = NULL;
    reshard_model_t *m = NULL;
    reshard_model_refit_t r;
    reshard_layout_t *s = NULL, *d = NULL;
    bufs_t sb = {0, NULL}, db = {0, NULL};
    memset(&r, 0, sizeof r);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    uint64_t v = 0;
    int waited = 0, started2 = 0;
    reshard_status_t st = reshard_comm_create_nccl_from_id(j->id, j->rank, NRANKS, 0, NULL, &c);
    if (st == RESHARD_OK)
        st = reshard_comm_create_inproc(j->side, j->rank, &side);
    if (st == RESHARD_OK)
        st = reshard_model_load_json(tiny_dense, NULL, &m);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse("tp=2", &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse("tp=1,dp=2", &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(m, &ts, &is, &r);
    const int trainer = j->rank < 2;
    if (st == RESHARD_OK)
        st = trainer ? alloc_bufs(c, r.train_buffers, j->rank, &sb)
                     : alloc_bufs(c, r.infer_buffers, j->rank, &db);
    if (st == RESHARD_OK && trainer)
        st = reshard_nccl_fill_pattern(c, r.train, j->rank, sb.b, sb.n);
    if (st != RESHARD_OK)
        FAIL("setup: %s", reshard_last_error());
    const uint64_t want = trainer ? 0 : layout_rank_bytes(r.infer, r.tensors, j->rank);
    st = refit(c, c, r.train, r.infer, &sb, &db, j->rank, false, &v);
    if (st != RESHARD_OK || v != want)
        FAIL("refit 1: %s, verified %" PRIu64 " of %" PRIu64 ": %s", reshard_status_string(st), v,
             want, reshard_last_error());
    if (j->rank == VICTIM && j->kase != CASE_NONE) { /* gone until the others are done */
        pthread_barrier_wait(j->done);
        waited = 1;
        j->ok = 1;
        goto out;
    }
    double t0 = rs_now_s();
    int32_t gone[NRANKS], n_gone = 0;
    if (j->kase == CASE_LOST) {
        pthread_barrier_wait(j->start2);
        started2 = 1;
        st = refit(c, c, r.train, r.infer, &sb, &db, j->rank, false, &v);
        if (st != RESHARD_ERR_TIMEOUT && st != RESHARD_ERR_TRANSPORT)
            FAIL("refit 2 without rank %d: %s, want TIMEOUT", VICTIM, reshard_status_string(st));
    }
    double t1 = rs_now_s();
    if (j->kase == CASE_LOST) {
        st = reshard_comm_agree_gone(side, RESHARD_AGREE_GONE_TIMEOUT_S, gone, NRANKS, &n_gone);
        if (st != RESHARD_OK || n_gone != 1 || gone[0] != VICTIM)
            FAIL("agree: %s, %d gone: %s", reshard_status_string(st), (int)n_gone,
                 reshard_last_error());
    } else if (j->kase == CASE_LEAVE) {
        gone[n_gone++] = VICTIM;
    }
    double t2 = rs_now_s();
    st = reshard_comm_shrink_nccl(c, gone, n_gone, &next);
    double t3 = rs_now_s();
    if (st != RESHARD_OK)
        FAIL("shrink: %s", reshard_last_error());
    if (reshard_comm_rank(next) != j->rank || reshard_comm_size(next) != NRANKS)
        FAIL("shrunk comm: rank %d size %d, want plan rank %d of %d", reshard_comm_rank(next),
             reshard_comm_size(next), j->rank, NRANKS);
    if (n_gone > 0) {
        st = reshard_membership_layouts(r.train, r.infer, gone, n_gone, &s, &d);
        if (st == RESHARD_OK)
            st = refit(c, next, s, d, &sb, &db, j->rank, false, &v);
    } else {
        st = refit(c, next, r.train, r.infer, &sb, &db, j->rank, false, &v);
    }
    if (st != RESHARD_OK || v != want)
        FAIL("refit after shrink: %s, verified %" PRIu64 " of %" PRIu64 ": %s",
             reshard_status_string(st), v, want, reshard_last_error());
    st = refit(c, next, n_gone > 0 ? s : r.train, n_gone > 0 ? d : r.infer, &sb, &db, j->rank, true,
               &v);
    if (st != RESHARD_OK || v != want)
        FAIL("delta refit after shrink: %s, verified %" PRIu64 " of %" PRIu64 ": %s",
             reshard_status_string(st), v, want, reshard_last_error());
    j->t_detect = t1 - t0;
    j->t_agree = t2 - t1;
    j->t_shrink = t3 - t2;
    j->ok = 1;
out:
    if (j->kase == CASE_LOST && j->rank != VICTIM && !started2)
        pthread_barrier_wait(j->start2); /* failed before it: do not leave the others there */
    if (!waited)
        pthread_barrier_wait(j->done);
    reshard_layout_destroy(s);
    reshard_layout_destroy(d);
    reshard_comm_destroy(next);
    free_bufs(c, &sb);
    free_bufs(c, &db);
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(m);
    reshard_comm_destroy(side);
    reshard_comm_destroy(c);
    return NULL;
}

int main(int argc, char **argv)
{
    static const char *names[] = {"lost", "leave", "none"};
    int kase = -1;
    for (int k = 0; k < 3; k++)
        if (argc == 3 && strcmp(argv[1], "--case") == 0 && strcmp(argv[2], names[k]) == 0)
            kase = k;
    if (kase < 0) {
        fprintf(stderr, "usage: %s --case lost|leave|none\n", argv[0]);
        return 2;
    }
    char id[128];
    if (reshard_nccl_get_unique_id(id) != RESHARD_OK) {
        printf("FAIL: unique id: %s\n", reshard_last_error());
        return 1;
    }
    reshard_inproc_group_t *side = NULL;
    reshard_inproc_group_create(NRANKS, &side);
    pthread_barrier_t done, start2;
    pthread_barrier_init(&done, NULL, NRANKS);
    /* The survivors detect the loss one timeout after they start refit 2; started together,
     * they reach the gone-agreement within its window (RESHARD_AGREE_GONE_TIMEOUT_S) even
     * when rank 2's verification of refit 1 ran long on a loaded machine. */
    pthread_barrier_init(&start2, NULL, NRANKS - 1);
    job_t jobs[NRANKS];
    pthread_t th[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        jobs[r] = (job_t){
            .rank = r, .kase = kase, .id = id, .side = side, .done = &done, .start2 = &start2};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    int bad = 0;
    double detect = 0, agree = 0, shrink = 0;
    for (int r = 0; r < NRANKS; r++) {
        pthread_join(th[r], NULL);
        if (!jobs[r].ok) {
            printf("FAIL rank %d: %s\n", r, jobs[r].msg);
            bad = 1;
        }
        detect = jobs[r].t_detect > detect ? jobs[r].t_detect : detect;
        agree = jobs[r].t_agree > agree ? jobs[r].t_agree : agree;
        shrink = jobs[r].t_shrink > shrink ? jobs[r].t_shrink : shrink;
    }
    pthread_barrier_destroy(&done);
    pthread_barrier_destroy(&start2);
    reshard_inproc_group_destroy(side);
    printf("%s: NCCL %s (%s): detect %.3f s, agree %.3f s, shrink %.4f s\n",
           bad ? "FAILED" : "passed", kase == CASE_NONE ? "split" : "shrink", names[kase], detect,
           agree, shrink);
    return bad;
}
