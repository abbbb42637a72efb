/*
 * Elastic refit over MPI: the peers found unresponsive, the survivors'
 * agreement exchange (point-to-point on a tag of its own, so it works on a
 * comm broken by the failed execution), and the shrink through
 * MPI_Comm_create_group, in which the lost ranks take no part.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/elastic.h"
#include "transport/mpi/mpi_internal.h"
#include "util/error.h"
#include "util/timeout.h"

void rs_mpi_unresponsive(const reshard_comm_t *c, unsigned char *flags)
{
    const rs_mpi_t *m = c->impl;
    for (int p = 0; m && m->lost && p < m->size; p++)
        flags[p] |= m->lost[p];
}

static void nap(void)
{
    struct timespec ts = {0, 200000L}; /* 0.2 ms: ranks often share cores */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Test the receives of @p req not yet in @p got (the first @p n); returns how many of the
 * first @p n_need are still missing. */
static reshard_status_t test_recvs(rs_mpi_t *m, MPI_Request *req, int32_t n, int32_t n_need,
                                   unsigned char *got, int32_t *missing)
{
    *missing = 0;
    for (int32_t i = 0; i < n; i++) {
        int flag = 0;
        if (!got[i] && req[i] != MPI_REQUEST_NULL) {
            int rc = MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS)
                return rs_mpi_error(m, rc, "agreement exchange");
        }
        got[i] = got[i] || flag;
        *missing += i < n_need && !got[i];
    }
    return RESHARD_OK;
}

reshard_status_t rs_mpi_agree_exchange(reshard_comm_t *c, int round, const int32_t *peers,
                                       int32_t n, int32_t n_need, const void *msg, uint64_t bytes,
                                       void *recv, unsigned char *got, double deadline)
{
    rs_mpi_t *m = c->impl;
    if (bytes > (uint64_t)1 << 20)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rank %d: agreement message of %llu bytes",
                        m->rank, (unsigned long long)bytes);
    /* the send buffer lives on the heap: a send to a stopped peer may never
     * complete, and is then leaked with its request */
    char *out = malloc((size_t)bytes + 1);
    MPI_Request *req = calloc((size_t)(2 * n + 1), sizeof *req);
    if (!out || !req) {
        free(out);
        free(req);
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory in the agreement", m->rank);
    }
    memcpy(out, msg, (size_t)bytes);
    /* A survivor still inside the failed execution (waiting out a round or an agreement,
     * or about to enter the next one) is released at once, so that the survivors enter
     * this agreement together whatever their waits were (the rule needs them within 2T). */
    if (round == 0)
        rs_mpi_release(m, RESHARD_ERR_TIMEOUT);
    int tag = RS_MPI_TAG_AGREE + round;
    reshard_status_t st = RESHARD_OK;
    for (int32_t i = 0; i < n && st == RESHARD_OK; i++) {
        req[i] = req[n + i] = MPI_REQUEST_NULL;
        int rc = MPI_Irecv((char *)recv + (size_t)i * bytes, (int)bytes, MPI_BYTE, peers[i], tag,
                           m->comm, &req[i]);
        if (rc == MPI_SUCCESS)
            rc = MPI_Isend(out, (int)bytes, MPI_BYTE, peers[i], tag, m->comm, &req[n + i]);
        if (rc != MPI_SUCCESS)
            st = rs_mpi_error(m, rc, "agreement exchange");
    }
    int32_t left = n_need;
    if (st == RESHARD_OK)
        st = test_recvs(m, req, n, n_need, got, &left);
    while (st == RESHARD_OK && left > 0 && rs_now_s() < deadline) {
        nap();
        st = test_recvs(m, req, n, n_need, got, &left);
    }
    /* receives that did not arrive are cancelled (a late message then stays
     * unmatched on this tag); sends complete or are leaked */
    bool sends_done = true;
    for (int32_t i = 0; i < n; i++) {
        if (!got[i] && req[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&req[i]);
            MPI_Request_free(&req[i]);
        }
        int flag = 1;
        if (req[n + i] != MPI_REQUEST_NULL)
            MPI_Test(&req[n + i], &flag, MPI_STATUS_IGNORE);
        if (!flag) {
            MPI_Request_free(&req[n + i]);
            sends_done = false;
        }
    }
    if (sends_done)
        free(out);
    else
        rs_mpi_keep(out);
    free(req);
    return st;
}

/* The comm of a membership: the endpoint of the members' communicator @p *sub (freed
 * here; ours is a duplicate) seen as a view of @p world plan ranks through @p map. Does
 * nothing but free when @p st is an error already. */
static reshard_status_t membership_view(reshard_status_t st, MPI_Comm *sub, int32_t world,
                                        const int32_t *map, reshard_comm_t **out)
{
    reshard_comm_t *inner = NULL;
    if (st == RESHARD_OK)
        st = reshard_comm_create_mpi(*sub, &inner);
    if (*sub != MPI_COMM_NULL)
        MPI_Comm_free(sub);
    rs_mpi_t *m = st == RESHARD_OK ? rs_mpi_of(inner) : NULL;
    if (m) { /* its messages name plan ranks */
        m->plan_of = malloc((size_t)m->size * sizeof *m->plan_of);
        for (int32_t p = 0; m->plan_of && p < world; p++)
            if (map[p] >= 0 && map[p] < m->size)
                m->plan_of[map[p]] = p;
    }
    if (st == RESHARD_OK)
        st = reshard_comm_create_view(inner, world, map, out);
    return st;
}

/* The watchdog of a blocking MPI call (reshard_mpi.h: RESHARD_SHRINK_WATCHDOG_S). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int32_t rank;
    double seconds;
    const char *what;
} watchdog_t;

static void *watchdog_main(void *arg)
{
    watchdog_t *w = arg;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    const time_t whole = (time_t)w->seconds;
    dl.tv_sec += whole;
    dl.tv_nsec += (long)((w->seconds - (double)whole) * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w->cv, &w->mu, &dl);
    bool fire = !w->done;
    pthread_mutex_unlock(&w->mu);
    if (fire) {
        fprintf(stderr,
                "reshard_comm_shrink_mpi: rank %d: %s did not complete within %g s (a survivor "
                "stopped or left after the agreement); ending the job (MPI_Abort)\n",
                (int)w->rank, w->what, w->seconds);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return NULL;
}

/* The watchdog's bound: RESHARD_SHRINK_WATCHDOG_S, or the environment variable of that name
 * when it is a number of seconds > 0. */
static double watchdog_seconds(void)
{
    const char *env = getenv("RESHARD_SHRINK_WATCHDOG_S");
    char *end = NULL;
    double s = env ? strtod(env, &end) : 0.0;
    return env && end != env && *end == '\0' && s > 0.0 && s < 1e6 ? s : RESHARD_SHRINK_WATCHDOG_S;
}

/* MPI_Comm_create_group under the watchdog. */
static int create_group_bounded(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *out,
                                int32_t rank)
{
    watchdog_t w = {.rank = rank,
                    .seconds = watchdog_seconds(),
                    .what = "MPI_Comm_create_group over the survivors"};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_t th;
    bool watching = pthread_create(&th, NULL, watchdog_main, &w) == 0;
    int rc = MPI_Comm_create_group(comm, group, tag, out);
    pthread_mutex_lock(&w.mu);
    w.done = true;
    pthread_cond_signal(&w.cv);
    pthread_mutex_unlock(&w.mu);
    if (watching)
        pthread_join(th, NULL);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

reshard_status_t reshard_comm_shrink_mpi(reshard_comm_t *comm, const int32_t *gone, int32_t n_gone,
                                         reshard_comm_t **out)
{
    rs_error_clear();
    if (!comm || !out || n_gone < 0 || (n_gone > 0 && !gone))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_shrink_mpi: bad argument");
    *out = NULL;
    const int32_t *to_inner = NULL;
    rs_mpi_t *m = rs_mpi_of(rs_comm_inner(comm, &to_inner));
    if (!m)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_shrink_mpi: not an MPI comm");
    int32_t *map = NULL, k = 0;
    reshard_status_t st = rs_survivor_map(comm, gone, n_gone, &map, &k);
    if (st != RESHARD_OK)
        return st;
    int *ranks = malloc((size_t)(k ? k : 1) * sizeof *ranks);
    if (!ranks) {
        free(map);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_shrink_mpi: out of memory");
    }
    for (int32_t p = 0; p < comm->size; p++)
        if (map[p] >= 0)
            ranks[map[p]] = to_inner ? to_inner[p] : p;
    MPI_Group all = MPI_GROUP_NULL, survivors = MPI_GROUP_NULL;
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_group(m->comm, &all);
    if (rc == MPI_SUCCESS)
        rc = MPI_Group_incl(all, k, ranks, &survivors);
    /* collective over the survivors only: the lost ranks take no part */
    if (rc == MPI_SUCCESS)
        rc = create_group_bounded(m->comm, survivors, RS_MPI_TAG_SHRINK, &sub, comm->rank);
    if (rc != MPI_SUCCESS)
        st = rs_mpi_error(m, rc, "MPI_Comm_create_group (shrink)");
    if (survivors != MPI_GROUP_NULL)
        MPI_Group_free(&survivors);
    if (all != MPI_GROUP_NULL)
        MPI_Group_free(&all);
    st = membership_view(st, &sub, comm->size, map, out);
    free(ranks);
    free(map);
    return st;
}

/* ---- growing back ------------------------------------------------------------------ */

/* The header the survivors' first rank broadcasts over the merged communicator:
 * {status (0, or the survivors' refusal), plan world size, number joining}. */
enum { GROW_STATUS, GROW_WORLD, GROW_N, GROW_HEADER };

/* Both sides, after the header and the joining list: every process of @p merged gives
 * its plan rank @p me; the members are ordered by plan rank (MPI_Comm_split) and the
 * endpoint of the ordered communicator is wrapped as a view of @p world plan ranks. */
static reshard_status_t grow_view(MPI_Comm merged, int32_t world, int32_t me, reshard_comm_t **out)
{
    int n = 0, rc = MPI_Comm_size(merged, &n);
    int *plan = malloc((size_t)(n ? n : 1) * sizeof *plan);
    int32_t *map = malloc((size_t)world * sizeof *map);
    reshard_status_t st = RESHARD_OK;
    if (!plan || !map)
        st = rs_error(RESHARD_ERR_NOMEM, "grow: out of memory");
    int mine = me;
    if (st == RESHARD_OK && rc == MPI_SUCCESS)
        rc = MPI_Allgather(&mine, 1, MPI_INT, plan, 1, MPI_INT, merged);
    MPI_Comm ordered = MPI_COMM_NULL;
    if (st == RESHARD_OK && rc == MPI_SUCCESS)
        rc = MPI_Comm_split(merged, 0, me, &ordered); /* members in plan-rank order */
    if (st == RESHARD_OK && rc != MPI_SUCCESS)
        st =
            rs_error(RESHARD_ERR_TRANSPORT, "grow: MPI failed (error %d) ordering the members", rc);
    for (int32_t p = 0; st == RESHARD_OK && p < world; p++)
        map[p] = -1;
    for (int q = 0; st == RESHARD_OK && q < n; q++) {
        if (plan[q] < 0 || plan[q] >= world || map[plan[q]] != -1) {
            st = rs_error(RESHARD_ERR_INVALID_ARG,
                          "grow: plan rank %d is given twice or outside the world of %d", plan[q],
                          world);
            break;
        }
        map[plan[q]] = 0;
    }
    int32_t k = 0;
    for (int32_t p = 0; st == RESHARD_OK && p < world; p++)
        if (map[p] == 0)
            map[p] = k++;
    st = membership_view(st, &ordered, world, map, out);
    free(plan);
    free(map);
    return st;
}

/* Whether @p c is an intercommunicator (checked before any collective on it). */
static bool is_intercomm(MPI_Comm c)
{
    int inter = 0;
    return c != MPI_COMM_NULL && MPI_Comm_test_inter(c, &inter) == MPI_SUCCESS && inter;
}

/* The survivors' check of a grow: the plan ranks joining must be in the world, distinct
 * and not members; one per remote process; the local group is the membership. */
static reshard_status_t grow_check(reshard_comm_t *comm, MPI_Comm intercomm, const int32_t *joining,
                                   int32_t n_joining)
{
    const int32_t *to_inner = NULL;
    reshard_comm_t *inner = rs_comm_inner(comm, &to_inner);
    int remote = -1, local = -1;
    MPI_Comm_remote_size(intercomm, &remote);
    MPI_Comm_size(intercomm, &local);
    if (!rs_mpi_of(inner))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_grow_mpi: not an MPI comm");
    if (comm->broken || rs_mpi_of(inner)->broken)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_grow_mpi: rank %d: the comm ended an execution with a "
                        "timeout or transport error; grow the survivors' comm (shrink first)",
                        comm->rank);
    if (remote != n_joining || local != inner->size)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_grow_mpi: rank %d: need an intercommunicator of the %d "
                        "members with %d new processes (got %d local, %d remote)",
                        comm->rank, inner->size, n_joining, local, remote);
    for (int32_t i = 0; i < n_joining; i++) {
        int32_t p = joining[i];
        bool member = p >= 0 && p < comm->size && (!to_inner || to_inner[p] >= 0);
        bool twice = false;
        for (int32_t j = 0; j < i; j++)
            twice = twice || joining[j] == p;
        if (p < 0 || p >= comm->size || member || twice)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "reshard_comm_grow_mpi: rank %d: plan rank %d cannot join (%s)",
                            comm->rank, p,
                            p < 0 || p >= comm->size ? "outside the plan world"
                            : member                 ? "already a member"
                                                     : "given twice");
    }
    return RESHARD_OK;
}

reshard_status_t reshard_comm_grow_mpi(reshard_comm_t *comm, MPI_Comm intercomm,
                                       const int32_t *joining, int32_t n_joining,
                                       reshard_comm_t **out)
{
    rs_error_clear();
    if (!comm || !out || !is_intercomm(intercomm) || n_joining < 1 || !joining)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_grow_mpi: bad argument (NULL, not an intercommunicator, "
                        "n_joining < 1)");
    *out = NULL;
    reshard_status_t bad = grow_check(comm, intercomm, joining, n_joining);
    char why[512];
    snprintf(why, sizeof why, "%s", reshard_last_error());
    MPI_Comm merged = MPI_COMM_NULL;
    int rc = MPI_Intercomm_merge(intercomm, 0, &merged); /* the survivors first */
    if (rc != MPI_SUCCESS)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "reshard_comm_grow_mpi: MPI_Intercomm_merge "
                        "failed (error %d)",
                        rc);
    MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
    int h[GROW_HEADER] = {(int)bad, comm->size, n_joining};
    int32_t *list = malloc((size_t)n_joining * sizeof *list);
    if (!list) /* the others wait in the broadcast: an error ends the job */
        MPI_Abort(merged, 1);
    memcpy(list, joining, (size_t)n_joining * sizeof *list);
    rc = MPI_Bcast(h, GROW_HEADER, MPI_INT, 0, merged);
    if (rc == MPI_SUCCESS && h[GROW_STATUS] == 0)
        rc = MPI_Bcast(list, n_joining, MPI_INT32_T, 0, merged);
    free(list);
    reshard_status_t st = RESHARD_OK;
    if (rc != MPI_SUCCESS)
        st = rs_error(RESHARD_ERR_TRANSPORT, "reshard_comm_grow_mpi: MPI_Bcast failed (error %d)",
                      rc);
    else if (bad != RESHARD_OK)
        st = rs_error(bad, "%s", why);
    else if (h[GROW_STATUS] != 0)
        st = rs_error((reshard_status_t)h[GROW_STATUS],
                      "reshard_comm_grow_mpi: rank %d: the first survivor refused the grow (%s)",
                      comm->rank, reshard_status_string((reshard_status_t)h[GROW_STATUS]));
    if (st == RESHARD_OK)
        st = grow_view(merged, comm->size, comm->rank, out);
    MPI_Comm_free(&merged);
    return st;
}

reshard_status_t reshard_comm_join_mpi(MPI_Comm intercomm, reshard_comm_t **out)
{
    rs_error_clear();
    if (!out || !is_intercomm(intercomm))
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_join_mpi: bad argument (NULL, not an intercommunicator)");
    *out = NULL;
    MPI_Comm merged = MPI_COMM_NULL;
    int rc = MPI_Intercomm_merge(intercomm, 1, &merged); /* after the survivors */
    if (rc != MPI_SUCCESS)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "reshard_comm_join_mpi: MPI_Intercomm_merge failed (error %d)", rc);
    MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
    int h[GROW_HEADER] = {0, 0, 0}, me = 0, n = 0;
    int32_t *joining = NULL;
    reshard_status_t st = RESHARD_OK;
    rc = MPI_Bcast(h, GROW_HEADER, MPI_INT, 0, merged);
    if (rc == MPI_SUCCESS && h[GROW_STATUS] == 0) {
        joining = malloc((size_t)(h[GROW_N] > 0 ? h[GROW_N] : 1) * sizeof *joining);
        if (!joining) /* the survivors' broadcast still needs us: an error ends the job */
            MPI_Abort(merged, 1);
        rc = MPI_Bcast(joining, h[GROW_N], MPI_INT32_T, 0, merged);
    }
    if (rc == MPI_SUCCESS) {
        MPI_Comm_rank(merged, &me);
        MPI_Comm_size(merged, &n);
    }
    if (rc != MPI_SUCCESS)
        st = rs_error(RESHARD_ERR_TRANSPORT, "reshard_comm_join_mpi: MPI_Bcast failed (error %d)",
                      rc);
    else if (h[GROW_STATUS] != 0)
        st = rs_error((reshard_status_t)h[GROW_STATUS],
                      "reshard_comm_join_mpi: the survivors refused the join (%s)",
                      reshard_status_string((reshard_status_t)h[GROW_STATUS]));
    else if (me < n - h[GROW_N])
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "reshard_comm_join_mpi: this process is on the survivors' side of the "
                      "intercommunicator (call reshard_comm_grow_mpi there)");
    if (st == RESHARD_OK)
        st = grow_view(merged, h[GROW_WORLD], joining[me - (n - h[GROW_N])], out);
    free(joining);
    MPI_Comm_free(&merged);
    return st;
}
