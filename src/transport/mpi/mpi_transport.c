/*
 * The MPI transport: nonblocking point-to-point rounds on a duplicate of the
 * caller's communicator, waits that poll with a deadline and yield the CPU,
 * an abort message that stops blocked peers early, and a nonblocking
 * agreement on the outcome of every execution.
 */
#include "transport/mpi/mpi_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/elastic.h"
#include "util/error.h"
#include "util/timeout.h"

uint64_t rs_mpi_max_message_bytes = (uint64_t)1 << 30;

/* Memory that MPI may still read or write (buffers of requests left in flight by a failed
 * execution): kept reachable from here until the process ends, never freed. */
typedef struct rs_kept {
    struct rs_kept *next;
    void *p;
} rs_kept_t;
static rs_kept_t *rs_mpi_kept;
static pthread_mutex_t rs_mpi_kept_mu = PTHREAD_MUTEX_INITIALIZER;

void rs_mpi_keep(void *p)
{
    rs_kept_t *k = malloc(sizeof *k);
    if (!p || !k) {
        free(k);
        return; /* without memory for the note, the block simply leaks */
    }
    k->p = p;
    pthread_mutex_lock(&rs_mpi_kept_mu);
    k->next = rs_mpi_kept;
    rs_mpi_kept = k;
    pthread_mutex_unlock(&rs_mpi_kept_mu);
}

/* ---- helpers ------------------------------------------------------------ */

reshard_status_t rs_mpi_error(rs_mpi_t *m, int mpi_rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(mpi_rc, msg, &len);
    return rs_error(RESHARD_ERR_TRANSPORT, "rank %d: %s failed: %s", m ? rs_mpi_pr(m, m->rank) : -1,
                    what, msg);
}

reshard_status_t rs_mpi_broken_error(const rs_mpi_t *m)
{
    if (m->broken_after_ok)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: a peer stopped answering right after an agreement was "
                        "decided (every rank had reached it: an execution it ended completed "
                        "everywhere); this MPI comm cannot be used again: shrink it "
                        "(reshard_elastic.h) or destroy it",
                        rs_mpi_pr(m, m->rank));
    return rs_error(RESHARD_ERR_TRANSPORT,
                    "rank %d: this MPI comm failed in an earlier execution; destroy it and "
                    "create a new one",
                    rs_mpi_pr(m, m->rank));
}

reshard_status_t rs_mpi_reqs_push(rs_mpi_reqs_t *l, MPI_Request r, int32_t peer)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        MPI_Request *req = realloc(l->req, (size_t)cap * sizeof *req);
        if (!req)
            return rs_error(RESHARD_ERR_NOMEM, "out of memory for MPI requests");
        l->req = req;
        int32_t *peer_arr = realloc(l->peer, (size_t)cap * sizeof *peer_arr);
        if (!peer_arr)
            return rs_error(RESHARD_ERR_NOMEM, "out of memory for MPI requests");
        l->peer = peer_arr;
        int *idx = realloc(l->idx, (size_t)cap * sizeof *idx);
        if (!idx)
            return rs_error(RESHARD_ERR_NOMEM, "out of memory for MPI requests");
        l->idx = idx;
        l->cap = cap;
    }
    l->req[l->n] = r;
    l->peer[l->n] = peer;
    l->n++;
    return RESHARD_OK;
}

void rs_mpi_reqs_free(rs_mpi_reqs_t *l)
{
    free(l->req);
    free(l->peer);
    free(l->idx);
    memset(l, 0, sizeof *l);
}

reshard_status_t rs_mpi_post(rs_mpi_t *m, rs_mpi_reqs_t *l, bool send, int32_t peer, void *buf,
                             uint64_t bytes, int tag)
{
    if (m->broken)
        return rs_mpi_broken_error(m);
    if (peer < 0 || peer >= m->size)
        return rs_error(RESHARD_ERR_RANK, "rank %d: MPI peer %d outside [0, %d)",
                        rs_mpi_pr(m, m->rank), peer, m->size);
    if (bytes > 0 && !buf)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rank %d: NULL buffer for %llu bytes",
                        rs_mpi_pr(m, m->rank), (unsigned long long)bytes);
    uint64_t max = rs_mpi_max_message_bytes;
    if (max == 0 || max > INT_MAX)
        max = (uint64_t)INT_MAX;
    char *p = buf;
    for (uint64_t off = 0; off < bytes; off += max) {
        uint64_t n = bytes - off < max ? bytes - off : max;
        MPI_Request r;
        int rc = send ? MPI_Isend(p + off, (int)n, MPI_BYTE, peer, tag, m->comm, &r)
                      : MPI_Irecv(p + off, (int)n, MPI_BYTE, peer, tag, m->comm, &r);
        if (rc != MPI_SUCCESS)
            return rs_mpi_error(m, rc, send ? "MPI_Isend" : "MPI_Irecv");
        reshard_status_t st = rs_mpi_reqs_push(l, r, peer);
        if (st != RESHARD_OK)
            return st;
    }
    return RESHARD_OK;
}

/* Give the CPU away between polls: spin a little, then sched_yield, then
 * sleep with a growing interval (ranks are often oversubscribed). */
static void backoff(int idle)
{
    if (idle < 8)
        return;
    if (idle < 256) {
        sched_yield();
        return;
    }
    long us = 20L << ((idle - 256) / 64 < 6 ? (idle - 256) / 64 : 6); /* 20 us .. 1.28 ms */
    struct timespec ts = {0, us * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* (Re)post the receive of the abort channel. */
static reshard_status_t post_abort_recv(rs_mpi_t *m)
{
    int rc = MPI_Irecv(m->abort_msg, 4, MPI_INT, MPI_ANY_SOURCE, RS_MPI_TAG_ABORT, m->comm,
                       &m->abort_recv);
    if (rc != MPI_SUCCESS) {
        m->abort_recv = MPI_REQUEST_NULL;
        return rs_mpi_error(m, rc, "MPI_Irecv (abort channel)");
    }
    return RESHARD_OK;
}

/* Has a peer's abort of this epoch arrived? Late ones of earlier epochs are
 * dropped. */
static reshard_status_t check_abort(rs_mpi_t *m, bool *got)
{
    while (!m->abort_received && m->abort_recv != MPI_REQUEST_NULL) {
        int flag = 0;
        int rc = MPI_Test(&m->abort_recv, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return rs_mpi_error(m, rc, "MPI_Test (abort channel)");
        if (!flag)
            break;
        /* while confirming, a notice of the next epoch too: its sender completed the
         * confirmation and failed in the next agreement (confirm_wait) */
        if (m->abort_msg[2] == m->epoch || (m->confirming && m->abort_msg[2] == m->epoch + 1)) {
            m->abort_received = true;
            break;
        }
        reshard_status_t st = post_abort_recv(m);
        if (st != RESHARD_OK)
            return st;
    }
    *got = m->abort_received;
    return RESHARD_OK;
}

static void describe_peers(const rs_mpi_t *m, const rs_mpi_reqs_t *l, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < l->n && n + 16 < size; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = l->peer[j] == l->peer[i];
        if (!seen)
            n += (size_t)snprintf(out + n, size - n, "%s%d", n ? ", " : "",
                                  rs_mpi_pr(m, (int)l->peer[i]));
    }
}

reshard_status_t rs_mpi_wait(rs_mpi_t *m, rs_mpi_reqs_t *l, double timeout_s, bool want_abort,
                             const char *what)
{
    timeout_s = rs_timeout_s(timeout_s);
    double start = rs_now_s();
    double deadline = start + timeout_s;
    int idle = 0;
    while (l->n > 0) {
        int outcount = 0;
        int rc = MPI_Testsome(l->n, l->req, &outcount, l->idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return rs_mpi_error(m, rc, what);
        if (outcount == MPI_UNDEFINED) { /* every request is null */
            l->n = 0;
            break;
        }
        if (outcount > 0) {
            int k = 0;
            for (int i = 0; i < l->n; i++) {
                if (l->req[i] != MPI_REQUEST_NULL) {
                    l->req[k] = l->req[i];
                    l->peer[k] = l->peer[i];
                    k++;
                }
            }
            l->n = k;
            idle = 0;
            deadline = rs_now_s() + timeout_s;
            continue;
        }
        if (want_abort) {
            bool got = false;
            reshard_status_t st = check_abort(m, &got);
            if (st != RESHARD_OK)
                return st;
            if (got) {
                m->abort_reported = true;
                reshard_status_t peer_st = (reshard_status_t)m->abort_msg[0];
                if (peer_st >= RESHARD_OK)
                    peer_st = RESHARD_ERR_TRANSPORT;
                if (m->abort_msg[3] >= 0 && m->abort_msg[3] < m->size)
                    return rs_error(peer_st,
                                    "rank %d: %s stopped: rank %d stalled or died (rank %d "
                                    "found it unresponsive: %s)",
                                    rs_mpi_pr(m, m->rank), what, rs_mpi_pr(m, m->abort_msg[3]),
                                    rs_mpi_pr(m, m->abort_msg[1]), reshard_status_string(peer_st));
                return rs_error(peer_st, "rank %d: %s stopped: rank %d failed with %s",
                                rs_mpi_pr(m, m->rank), what, rs_mpi_pr(m, m->abort_msg[1]),
                                reshard_status_string(peer_st));
            }
        }
        double now = rs_now_s();
        if (now > deadline) {
            char peers[256];
            describe_peers(m, l, peers, sizeof peers);
            for (int i = 0; m->lost && i < l->n; i++)
                if (l->peer[i] >= 0 && l->peer[i] < m->size)
                    m->lost[l->peer[i]] = 1;
            return rs_error(RESHARD_ERR_TIMEOUT,
                            "rank %d: %s: no transfer completed for %.1f s; %d outstanding, "
                            "waiting for rank(s) %s (dead or stalled peer?)",
                            rs_mpi_pr(m, m->rank), what, timeout_s, l->n, peers);
        }
        backoff(idle++);
    }
    return RESHARD_OK;
}

/* Tell every peer that this rank failed (once per epoch). Never waits: each notice has a
 * payload of its own, and one whose sends do not complete at once (a stopped peer) is
 * kept for the process's life with its requests (rs_mpi_keep), so that a second notice,
 * in a later epoch, does not wait for the first. */
void rs_mpi_release(rs_mpi_t *m, reshard_status_t st)
{
    if (m->abort_sent)
        return;
    m->abort_sent = true;
    int *payload = malloc(4 * sizeof *payload);
    if (!payload)
        return; /* best effort: the agreement still reports the failure */
    payload[0] = (int)st;
    payload[1] = m->rank;
    payload[2] = m->epoch;
    payload[3] = -1; /* the peer this rank timed out on: named by every rank */
    for (int p = 0; m->lost && p < m->size && payload[3] < 0; p++)
        if (m->lost[p])
            payload[3] = p;
    int first = m->abort_sends.n;
    for (int p = 0; p < m->size; p++) {
        if (p == m->rank)
            continue;
        MPI_Request r;
        if (MPI_Isend(payload, 4, MPI_INT, p, RS_MPI_TAG_ABORT, m->comm, &r) != MPI_SUCCESS)
            continue;
        if (rs_mpi_reqs_push(&m->abort_sends, r, p) != RESHARD_OK) {
            MPI_Request_free(&r);
            break;
        }
    }
    bool done = true;
    for (int i = first; i < m->abort_sends.n && done; i++) {
        int flag = 0;
        MPI_Test(&m->abort_sends.req[i], &flag, MPI_STATUS_IGNORE);
        done = flag != 0;
    }
    if (done) {
        m->abort_sends.n = first; /* every request of this notice completed (and is null) */
        free(payload);
    } else {
        rs_mpi_keep(payload); /* MPI may still read it */
    }
}

/* How long the outcome agreement of an execution that failed by a timeout
 * waits for the other ranks: some rank stopped answering, so the collective
 * completes only if that rank was merely slow, and every rank returns an error
 * either way; a short wait lets the survivors leave together (reshard_elastic.h). */
#define RS_MPI_LOST_GRACE_S 0.05

/* Wait for the outcome agreement's request. A rank whose own failure is a
 * timeout (@p hurry) waits RS_MPI_LOST_GRACE_S at most; the others wait
 * @p timeout_s, cut to the grace when a peer's TIMEOUT abort arrives. On its
 * own timeout a rank tells every peer (abort), so the first rank to give up
 * releases all. */
static reshard_status_t agree_wait(rs_mpi_t *m, MPI_Request *req, double timeout_s, bool hurry)
{
    double grace = timeout_s < RS_MPI_LOST_GRACE_S ? timeout_s : RS_MPI_LOST_GRACE_S;
    double deadline = rs_now_s() + (hurry ? grace : timeout_s);
    for (int idle = 0;; idle++) {
        int flag = 0;
        int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return rs_mpi_error(m, rc, "outcome agreement");
        if (flag)
            return RESHARD_OK;
        bool got = false;
        if (!hurry && check_abort(m, &got) == RESHARD_OK && got &&
            m->abort_msg[0] == (int)RESHARD_ERR_TIMEOUT) {
            hurry = true;
            if (rs_now_s() + grace < deadline)
                deadline = rs_now_s() + grace;
        }
        if (rs_now_s() > deadline) {
            rs_mpi_release(m, RESHARD_ERR_TIMEOUT);
            return RESHARD_ERR_TIMEOUT;
        }
        backoff(idle);
    }
}

/* How long a rank whose confirmation round timed out still listens for a peer's notice
 * that it gave up on the decision round: a notice sent at the peer's deadline (never
 * later than this rank's own, see rs_mpi_agree) can still be on its way, or the peer was
 * descheduled at its deadline on a loaded host. */
#define RS_MPI_CONFIRM_GRACE_S 0.25

/* Test hook (tests only; NULL in production): called at each point of an agreement. */
void (*rs_mpi_agree_hook)(const rs_mpi_t *m, rs_mpi_agree_point_t point);

static void hook(const rs_mpi_t *m, rs_mpi_agree_point_t point)
{
    if (rs_mpi_agree_hook)
        rs_mpi_agree_hook(m, point);
}

/* The confirmation round of an agreement whose decision was OK (see rs_mpi_agree): wait
 * for the barrier @p req; a peer's abort of this epoch, which only a rank that gave up on
 * the decision round sends, makes the outcome a failure. Returns OK when the barrier
 * completed (*@p done) or when it did not, but no such notice came by the deadline plus
 * the grace (every rank then completed the decision round: the decision stands), or when
 * a notice of the next epoch arrives (its sender completed the confirmation, so the
 * decision stands, and then failed in its next agreement: this rank leaves now, together
 * with it, instead of a grace later); else TIMEOUT naming the rank that gave up. */
static reshard_status_t confirm_wait(rs_mpi_t *m, MPI_Request *req, double timeout_s, bool *done)
{
    double grace = timeout_s < RS_MPI_CONFIRM_GRACE_S ? timeout_s : RS_MPI_CONFIRM_GRACE_S;
    double deadline = rs_now_s() + timeout_s, start = rs_now_s();
    *done = false;
    for (int idle = 0;; idle++) {
        int flag = 0;
        if (!*done) {
            int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS)
                return rs_mpi_error(m, rc, "confirmation of the agreement");
            if (flag) {
                *done = true;
                return RESHARD_OK;
            }
        }
        bool got = false;
        bool ok = check_abort(m, &got) == RESHARD_OK;
        if (ok && got && m->abort_msg[2] == m->epoch + 1) {
            /* a peer's confirmation completed: the decision stands. A timeout of its next
             * agreement means a peer is lost: leave now. Another failure there (a rejected
             * buffer) says nothing of this barrier: keep waiting for it (the notice is kept
             * for the next agreement). */
            if (m->abort_msg[0] == (int)RESHARD_ERR_TIMEOUT)
                return RESHARD_OK;
        } else if (got) {
            int who = m->abort_msg[1], suspect = m->abort_msg[3];
            if (suspect >= 0 && suspect < m->size)
                return rs_error(RESHARD_ERR_TIMEOUT,
                                "rank %d: rank %d stalled or died (rank %d gave up waiting for "
                                "it in the agreement, %.2f s after this rank reached it): "
                                "every rank fails this execution",
                                rs_mpi_pr(m, m->rank), rs_mpi_pr(m, suspect), rs_mpi_pr(m, who),
                                rs_now_s() - start);
            return rs_error(RESHARD_ERR_TIMEOUT,
                            "rank %d: rank %d gave up waiting for the agreement (a peer stalled "
                            "or died): every rank fails this execution",
                            rs_mpi_pr(m, m->rank), rs_mpi_pr(m, who));
        }
        if (rs_now_s() > deadline + grace)
            return RESHARD_OK;
        backoff(idle);
    }
}

/* Status order of the agreement: a rank's own failure (0) before a reaction
 * to a peer's abort (1) before success (2); then the more negative status;
 * then the lower rank. */
enum { KEY_OWN = 0, KEY_REACTION = 1, KEY_OK = 2, KEY_SCALE = 1024, KEY_BIAS = 512 };

reshard_status_t rs_mpi_agree(rs_mpi_t *m, reshard_status_t local, const int64_t *words,
                              int64_t *min_words, double timeout_s)
{
    if (m->broken) {
        /* Peers that carry on (their confirmation completed) are in this agreement now:
         * release them at once instead of leaving them to time out (a no-op when this
         * rank already told them in this epoch). */
        rs_mpi_release(m, RESHARD_ERR_TIMEOUT);
        return rs_mpi_broken_error(m);
    }
    timeout_s = rs_timeout_s(timeout_s);
    /* Keep the local message: the wait below may overwrite it. */
    char local_msg[1024];
    snprintf(local_msg, sizeof local_msg, "%s", reshard_last_error());
    bool in_flight = m->slot[0].n > 0 || m->slot[1].n > 0;

    int prio = KEY_OK;
    if (local != RESHARD_OK) {
        prio = m->abort_reported ? KEY_REACTION : KEY_OWN;
        if (prio == KEY_OWN)
            rs_mpi_release(m, local);
    }
    /* [key << 32 | rank] (MIN: the first failure), [-in_flight] (MIN: any), the words.
     * On the heap: when the wait gives up, MPI may still write them, so they are then
     * kept (rs_mpi_keep) with the broken comm's request. */
    enum { N = 2 + RESHARD_AGREE_WORDS };
    int64_t *in = malloc(2 * N * sizeof *in), *out = in + N;
    if (!in)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory for the agreement",
                        rs_mpi_pr(m, m->rank));
    in[0] = ((int64_t)(prio * KEY_SCALE + ((int)local + KEY_BIAS)) << 32) | m->rank;
    in[1] = in_flight ? -1 : 0;
    for (int i = 0; i < RESHARD_AGREE_WORDS; i++)
        in[2 + i] = words ? words[i] : INT64_MAX;
    hook(m, RS_MPI_AGREE_ENTER);
    MPI_Request req;
    int rc = MPI_Iallreduce(in, out, N, MPI_INT64_T, MPI_MIN, m->comm, &req);
    if (rc != MPI_SUCCESS) {
        free(in);
        m->broken = true;
        return rs_mpi_error(m, rc, "MPI_Iallreduce (outcome agreement)");
    }
    hook(m, RS_MPI_AGREE_POSTED);
    reshard_status_t st = agree_wait(m, &req, timeout_s, local == RESHARD_ERR_TIMEOUT);
    if (st != RESHARD_OK) {
        m->broken = true;
        rs_mpi_keep(in); /* MPI may still touch it */
        int suspect = m->abort_received ? m->abort_msg[3] : -1;
        if (st == RESHARD_ERR_TIMEOUT && suspect < 0)
            for (int p = 0; m->lost && p < m->size && suspect < 0; p++)
                if (m->lost[p])
                    suspect = p;
        if (st == RESHARD_ERR_TIMEOUT && suspect >= 0 && suspect < m->size)
            return rs_error(RESHARD_ERR_TIMEOUT,
                            "rank %d: rank %d stalled or died (rank %d found it unresponsive); "
                            "not every rank reached the end of the execution (waited up to "
                            "%.1f s)%s%s",
                            rs_mpi_pr(m, m->rank), rs_mpi_pr(m, suspect),
                            rs_mpi_pr(m, m->abort_received ? m->abort_msg[1] : m->rank), timeout_s,
                            local != RESHARD_OK ? "; this rank: " : "",
                            local != RESHARD_OK ? local_msg : "");
        if (st == RESHARD_ERR_TIMEOUT)
            return rs_error(RESHARD_ERR_TIMEOUT,
                            "rank %d: not every rank reached the end of the execution "
                            "(waited up to %.1f s; dead or stalled peer)%s%s",
                            rs_mpi_pr(m, m->rank), timeout_s,
                            local != RESHARD_OK ? "; this rank: " : "",
                            local != RESHARD_OK ? local_msg : "");
        return st;
    }
    int key = (int)(out[0] >> 32);
    int who = (int)(out[0] & 0xffffffff);
    bool flight = out[1] < 0;
    if (min_words)
        memcpy(min_words, out + 2, RESHARD_AGREE_WORDS * sizeof *out);
    free(in);
    reshard_status_t global = (reshard_status_t)(key % KEY_SCALE - KEY_BIAS);
    if (flight)
        m->broken = true; /* transfers in flight somewhere: state unknown */
    hook(m, RS_MPI_AGREE_DECIDED);
    if (global == RESHARD_OK && !flight) {
        /* Confirmation: a decision of OK stands only if no rank gave up on the decision
         * round (it returns TIMEOUT and tells every peer). The decision round completed
         * here, so every rank had entered it before now, and one that gives up does so by
         * its deadline, no later than this rank's deadline below. So: the barrier
         * completes (every rank completed the decision round), or a notice of this
         * epoch arrives (fail), or neither by the deadline and the grace (every rank
         * completed the decision round and one stopped after it: OK, and the comm is
         * broken, its barrier left pending). */
        MPI_Request bar;
        bool done = false;
        rc = MPI_Ibarrier(m->comm, &bar);
        if (rc != MPI_SUCCESS) {
            m->broken = true;
            return rs_mpi_error(m, rc, "MPI_Ibarrier (confirmation of the agreement)");
        }
        hook(m, RS_MPI_AGREE_CONFIRM_POSTED);
        m->confirming = true;
        st = confirm_wait(m, &bar, timeout_s, &done);
        m->confirming = false;
        if (!done) {
            m->broken = true; /* the barrier stays pending inside MPI */
            m->broken_after_ok = st == RESHARD_OK;
        }
        if (st != RESHARD_OK)
            return st;
        hook(m, RS_MPI_AGREE_CONFIRMED);
    }
    /* next epoch: forget this one's aborts */
    m->epoch++;
    m->abort_sent = false;
    m->abort_reported = false;
    if (m->abort_received && !m->broken && m->abort_msg[2] != m->epoch) {
        m->abort_received = false; /* (one of the new epoch, taken while confirming, stays) */
        st = post_abort_recv(m);
        if (st != RESHARD_OK) {
            m->broken = true;
            return st;
        }
    }
    if (global == RESHARD_OK)
        return RESHARD_OK;
    if (who == m->rank && global == local)
        return local_msg[0] ? rs_error(local, "%s", local_msg)
                            : rs_error(local, "rank %d failed with %s", rs_mpi_pr(m, m->rank),
                                       reshard_status_string(local));
    if (local != RESHARD_OK && prio == KEY_OWN)
        return rs_error(global, "rank %d failed with %s; this rank also failed: %s",
                        rs_mpi_pr(m, who), reshard_status_string(global), local_msg);
    return rs_error(global, "rank %d: execution failed: rank %d reported %s", rs_mpi_pr(m, m->rank),
                    rs_mpi_pr(m, who), reshard_status_string(global));
}

/* ---- the ops ------------------------------------------------------------- */

static rs_mpi_t *impl(reshard_comm_t *c)
{
    return (rs_mpi_t *)c->impl;
}

static reshard_status_t mpi_alloc_staging(reshard_comm_t *c, uint64_t bytes, void **out)
{
    rs_mpi_t *m = impl(c);
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "alloc_staging: out is NULL");
    *out = NULL;
    if (bytes > SIZE_MAX - 4096)
        return rs_error(RESHARD_ERR_OVERFLOW, "rank %d: staging of %llu bytes",
                        rs_mpi_pr(m, m->rank), (unsigned long long)bytes);
    /* reuse the kept block when it is free and large enough */
    if (m->staging && !m->staging_used && m->staging_bytes >= bytes) {
        m->staging_used = true;
        *out = m->staging;
        return RESHARD_OK;
    }
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes ? (size_t)bytes : 1) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: cannot allocate %llu bytes of staging",
                        rs_mpi_pr(m, m->rank), (unsigned long long)bytes);
    if (!m->staging_used) { /* keep the new block instead of the smaller free one */
        free(m->staging);
        m->staging = p;
        m->staging_bytes = bytes;
        m->staging_used = true;
    }
    *out = p;
    return RESHARD_OK;
}

static void mpi_free_staging(reshard_comm_t *c, void *p)
{
    rs_mpi_t *m = impl(c);
    if (!p)
        return;
    /* Requests of a failing execution may still read or write staging: keep
     * it (leaked on purpose; the comm can only be destroyed afterwards). */
    if (m->slot[0].n > 0 || m->slot[1].n > 0) {
        if (p == m->staging)
            m->staging = NULL;
        rs_mpi_keep(p);
        return;
    }
    if (p == m->staging)
        m->staging_used = false; /* kept for the next execution */
    else
        free(p);
}

static reshard_status_t check_slot(rs_mpi_t *m, int slot)
{
    if (slot != 0 && slot != 1)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rank %d: slot %d is not 0 or 1",
                        rs_mpi_pr(m, m->rank), slot);
    if (m->broken)
        return rs_mpi_broken_error(m);
    return RESHARD_OK;
}

static reshard_status_t mpi_round_begin(reshard_comm_t *c, int slot)
{
    rs_mpi_t *m = impl(c);
    reshard_status_t st = check_slot(m, slot);
    if (st != RESHARD_OK)
        return st;
    if (m->slot[slot].n > 0)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "rank %d: round_begin on slot %d with %d transfers outstanding",
                        rs_mpi_pr(m, m->rank), slot, m->slot[slot].n);
    return RESHARD_OK;
}

static reshard_status_t mpi_post_send(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                      uint64_t bytes)
{
    rs_mpi_t *m = impl(c);
    reshard_status_t st = check_slot(m, slot);
    if (st != RESHARD_OK)
        return st;
    /* MPI_Isend takes a non-const pointer in old MPI headers; it never writes. */
    void *p;
    memcpy(&p, &buf, sizeof p);
    return rs_mpi_post(m, &m->slot[slot], true, peer, p, bytes, RS_MPI_TAG_SLOT0 + slot);
}

static reshard_status_t mpi_post_recv(reshard_comm_t *c, int slot, int32_t peer, void *buf,
                                      uint64_t bytes)
{
    rs_mpi_t *m = impl(c);
    reshard_status_t st = check_slot(m, slot);
    if (st != RESHARD_OK)
        return st;
    return rs_mpi_post(m, &m->slot[slot], false, peer, buf, bytes, RS_MPI_TAG_SLOT0 + slot);
}

static reshard_status_t mpi_round_end(reshard_comm_t *c, int slot)
{
    /* Operations start when posted (receives as early as possible). */
    return check_slot(impl(c), slot);
}

static reshard_status_t mpi_round_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    rs_mpi_t *m = impl(c);
    reshard_status_t st = check_slot(m, slot);
    if (st != RESHARD_OK)
        return st;
    char what[64];
    snprintf(what, sizeof what, "round wait (slot %d)", slot);
    return rs_mpi_wait(m, &m->slot[slot], timeout_s, true, what);
}

static reshard_status_t mpi_finish(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                                   int64_t *min_words, double timeout_s)
{
    rs_mpi_t *m = impl(c);
    if (local == RESHARD_OK && (m->slot[0].n > 0 || m->slot[1].n > 0))
        local = rs_error(RESHARD_ERR_INVALID_ARG,
                         "rank %d: agreement reached with %d transfers in flight",
                         rs_mpi_pr(m, m->rank), m->slot[0].n + m->slot[1].n);
    return rs_mpi_agree(m, local, words, min_words, timeout_s);
}

static void mpi_destroy(reshard_comm_t *c)
{
    rs_mpi_t *m = impl(c);
    if (!m)
        return;
    if (!m->broken) {
        if (m->abort_recv != MPI_REQUEST_NULL) {
            MPI_Cancel(&m->abort_recv);
            MPI_Wait(&m->abort_recv, MPI_STATUS_IGNORE);
        }
        if (m->abort_sends.n > 0 &&
            rs_mpi_wait(m, &m->abort_sends, 1.0, false, "abort notice") != RESHARD_OK) {
            free(m); /* MPI may still read the payload: leak it with the comm */
            c->impl = NULL;
            return;
        }
        MPI_Comm_free(&m->comm);
    }
    if (!m->staging_used)
        free(m->staging);
    /* A broken comm keeps its requests and communicator alive inside MPI:
     * freeing them could let MPI touch memory we no longer own. */
    rs_mpi_reqs_free(&m->slot[0]);
    rs_mpi_reqs_free(&m->slot[1]);
    rs_mpi_reqs_free(&m->abort_sends);
    free(m->lost);
    free(m->plan_of);
    m->lost = NULL;
    if (m->broken)
        rs_mpi_keep(m); /* the abort channel's receive may still land in abort_msg */
    else
        free(m);
    c->impl = NULL;
}

static const reshard_transport_ops_t rs_mpi_ops = {
    .version = RESHARD_TRANSPORT_VERSION,
    .name = "mpi",
    .device_memory = false,
    .alloc_staging = mpi_alloc_staging,
    .free_staging = mpi_free_staging,
    .round_begin = mpi_round_begin,
    .post_send = mpi_post_send,
    .post_recv = mpi_post_recv,
    .round_end = mpi_round_end,
    .round_wait = mpi_round_wait,
    .pack = NULL,
    .unpack = NULL,
    .local_copy = NULL,
    .quantize = NULL,
    .finish = mpi_finish,
    .unresponsive = rs_mpi_unresponsive,
    .agree_exchange = rs_mpi_agree_exchange,
    .destroy = mpi_destroy,
};

rs_mpi_t *rs_mpi_of(reshard_comm_t *c)
{
    return c && c->ops == &rs_mpi_ops ? (rs_mpi_t *)c->impl : NULL;
}

MPI_Comm reshard_comm_mpi_comm(const reshard_comm_t *comm)
{
    if (rs_comm_is_view(comm)) /* a membership's view: its members' communicator */
        comm = rs_view_inner(comm);
    return comm && comm->ops == &rs_mpi_ops ? ((const rs_mpi_t *)comm->impl)->comm : MPI_COMM_NULL;
}

reshard_status_t reshard_comm_create_mpi(MPI_Comm comm, reshard_comm_t **out)
{
    rs_error_clear();
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_mpi: out is NULL");
    *out = NULL;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_create_mpi: MPI is not initialized (or already finalized)");
    if (comm == MPI_COMM_NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_mpi: MPI_COMM_NULL");

    rs_mpi_t *m = calloc(1, sizeof *m);
    reshard_comm_t *c = calloc(1, sizeof *c);
    if (!m || !c) {
        free(m);
        free(c);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_create_mpi: out of memory");
    }
    m->abort_recv = MPI_REQUEST_NULL;
    int rc = MPI_Comm_dup(comm, &m->comm);
    if (rc != MPI_SUCCESS) {
        free(m);
        free(c);
        return rs_mpi_error(NULL, rc, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    m->lost = calloc((size_t)m->size, 1);
    if (!m->lost) {
        MPI_Comm_free(&m->comm);
        free(m);
        free(c);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_create_mpi: out of memory");
    }
    reshard_status_t st = post_abort_recv(m);
    if (st != RESHARD_OK) {
        MPI_Comm_free(&m->comm);
        free(m->lost);
        free(m);
        free(c);
        return st;
    }
    c->ops = &rs_mpi_ops;
    c->rank = m->rank;
    c->size = m->size;
    c->impl = m;
    *out = c;
    return RESHARD_OK;
}
