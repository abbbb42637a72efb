/*
 * The in-process transport: N ranks as threads of one process. Sends are
 * eager (the bytes are copied into a message queued at the receiver, one
 * FIFO per sender), so a send completes at once and a receive waits for the
 * matching message. Used by unit tests and single-process tools.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/comm.h"
#include "util/error.h"
#include "util/timeout.h"

typedef struct rs_msg {
    struct rs_msg *next;
    uint64_t bytes;
    unsigned char data[];
} rs_msg_t;

typedef struct {
    rs_msg_t *head, *tail;
} rs_fifo_t;

struct reshard_inproc_group {
    int32_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rs_fifo_t *q; /* q[receiver * n + sender] */
    /* finish barrier */
    int32_t arrived;
    uint64_t generation;
    reshard_status_t worst, result;
    unsigned char *in_finish; /* n: arrived at the current finish barrier */
    bool abandoned;           /* a rank timed out (round wait or finish): the
                                 group's outcome is unknown from then on */
    /* lost-rank agreement board: (n + 2) rounds x n senders, one message each
     * (every round's message of a sender is the same for all its peers) */
    void **board;
    int32_t board_rounds;
    int64_t wmin[RESHARD_AGREE_WORDS], wresult[RESHARD_AGREE_WORDS];
};

typedef struct {
    int32_t peer;
    void *buf;
    uint64_t bytes;
} rs_pending_t;

typedef struct {
    reshard_inproc_group_t *g;
    rs_pending_t *pend[2];
    int32_t npend[2], cap[2];
    unsigned char *lost; /* n: peers found unresponsive at a timeout */
} rs_inproc_t;

reshard_status_t reshard_inproc_group_create(int32_t nranks, reshard_inproc_group_t **out)
{
    rs_error_clear();
    if (!out || nranks < 1)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_inproc_group_create: bad argument");
    reshard_inproc_group_t *g = calloc(1, sizeof *g);
    if (g) {
        g->q = calloc((size_t)nranks * (size_t)nranks, sizeof *g->q);
        g->in_finish = calloc((size_t)nranks, 1);
    }
    if (!g || !g->q || !g->in_finish) {
        if (g) {
            free(g->q);
            free(g->in_finish);
        }
        free(g);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_inproc_group_create: out of memory");
    }
    g->n = nranks;
    for (int i = 0; i < RESHARD_AGREE_WORDS; i++)
        g->wmin[i] = INT64_MAX;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
    return RESHARD_OK;
}

void reshard_inproc_group_destroy(reshard_inproc_group_t *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < (int64_t)g->n * g->n; i++)
        for (rs_msg_t *m = g->q[i].head, *nx; m; m = nx) {
            nx = m->next;
            free(m);
        }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    for (int64_t i = 0; g->board && i < (int64_t)g->board_rounds * g->n; i++)
        free(g->board[i]);
    free(g->board);
    free(g->in_finish);
    free(g->q);
    free(g);
}

static reshard_status_t ip_alloc(reshard_comm_t *c, uint64_t bytes, void **out)
{
    *out = malloc(bytes ? bytes : 1);
    return *out ? RESHARD_OK
                : rs_error(RESHARD_ERR_NOMEM, "rank %d: cannot allocate %llu bytes of staging",
                           c->rank, (unsigned long long)bytes);
}

static void ip_free(reshard_comm_t *c, void *p)
{
    (void)c;
    free(p);
}

static reshard_status_t ip_begin(reshard_comm_t *c, int slot)
{
    rs_inproc_t *ip = c->impl;
    ip->npend[slot] = 0;
    return RESHARD_OK;
}

static reshard_status_t ip_send(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                uint64_t bytes)
{
    (void)slot;
    rs_inproc_t *ip = c->impl;
    rs_msg_t *m = malloc(sizeof *m + bytes);
    if (!m)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory sending to %d", c->rank, peer);
    m->next = NULL;
    m->bytes = bytes;
    memcpy(m->data, buf, bytes);
    reshard_inproc_group_t *g = ip->g;
    pthread_mutex_lock(&g->mu);
    rs_fifo_t *f = &g->q[(int64_t)peer * g->n + c->rank];
    if (f->tail)
        f->tail->next = m;
    else
        f->head = m;
    f->tail = m;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return RESHARD_OK;
}

static reshard_status_t ip_recv(reshard_comm_t *c, int slot, int32_t peer, void *buf,
                                uint64_t bytes)
{
    rs_inproc_t *ip = c->impl;
    if (ip->npend[slot] == ip->cap[slot]) {
        int32_t cap = ip->cap[slot] ? 2 * ip->cap[slot] : 16;
        rs_pending_t *p = realloc(ip->pend[slot], (size_t)cap * sizeof *p);
        if (!p)
            return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory", c->rank);
        ip->pend[slot] = p;
        ip->cap[slot] = cap;
    }
    ip->pend[slot][ip->npend[slot]++] = (rs_pending_t){peer, buf, bytes};
    return RESHARD_OK;
}

static reshard_status_t ip_end(reshard_comm_t *c, int slot)
{
    (void)c;
    (void)slot;
    return RESHARD_OK;
}

/* The absolute time @p s seconds from now (clamped: it always fits a timespec). */
static struct timespec deadline_after(double s)
{
    s = rs_timeout_s(s);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)s;
    ts.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static reshard_status_t ip_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    rs_inproc_t *ip = c->impl;
    reshard_inproc_group_t *g = ip->g;
    struct timespec dl = deadline_after(timeout_s);
    reshard_status_t st = RESHARD_OK;
    pthread_mutex_lock(&g->mu);
    for (int32_t i = 0; i < ip->npend[slot] && st == RESHARD_OK; i++) {
        rs_pending_t *p = &ip->pend[slot][i];
        rs_fifo_t *f = &g->q[(int64_t)c->rank * g->n + p->peer];
        while (!f->head && st == RESHARD_OK) {
            if (g->abandoned) { /* a peer gave up: so do we, at once */
                ip->lost[p->peer] = 1;
                st = rs_error(RESHARD_ERR_TIMEOUT,
                              "rank %d: waiting for rank %d stopped: a peer timed out", c->rank,
                              p->peer);
                break;
            }
            int rc = pthread_cond_timedwait(&g->cv, &g->mu, &dl);
            if (rc == ETIMEDOUT && !f->head) {
                /* the outcome is unknown from now on: release every rank
                 * (the first to give up releases all, as MPI's abort) */
                ip->lost[p->peer] = 1;
                g->abandoned = true;
                pthread_cond_broadcast(&g->cv);
                st = rs_error(RESHARD_ERR_TIMEOUT, "rank %d: no data from rank %d within %g s",
                              c->rank, p->peer, rs_timeout_s(timeout_s));
            } else if (rc != 0 && rc != ETIMEDOUT)
                st = rs_error(RESHARD_ERR_TRANSPORT, "rank %d: waiting for rank %d failed (%d)",
                              c->rank, p->peer, rc);
        }
        if (st != RESHARD_OK)
            break;
        rs_msg_t *m = f->head;
        f->head = m->next;
        if (!f->head)
            f->tail = NULL;
        if (m->bytes != p->bytes)
            st = rs_error(RESHARD_ERR_TRANSPORT,
                          "rank %d: expected %llu bytes from rank %d, got %llu", c->rank,
                          (unsigned long long)p->bytes, p->peer, (unsigned long long)m->bytes);
        else
            memcpy(p->buf, m->data, m->bytes);
        free(m);
    }
    pthread_mutex_unlock(&g->mu);
    ip->npend[slot] = 0;
    return st;
}

static reshard_status_t ip_finish(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                                  int64_t *min_words, double timeout_s)
{
    rs_inproc_t *ip = c->impl;
    reshard_inproc_group_t *g = ip->g;
    struct timespec dl = deadline_after(timeout_s);
    pthread_mutex_lock(&g->mu);
    uint64_t gen = g->generation;
    if (local != RESHARD_OK && (g->worst == RESHARD_OK || local > g->worst))
        g->worst = local;
    for (int i = 0; words && i < RESHARD_AGREE_WORDS; i++)
        if (words[i] < g->wmin[i])
            g->wmin[i] = words[i];
    reshard_status_t st = RESHARD_OK;
    if (g->abandoned) {
        for (int32_t r = 0; r < g->n; r++) /* the ones not yet here are suspects */
            if (!g->in_finish[r] && r != c->rank)
                ip->lost[r] = 1;
        pthread_mutex_unlock(&g->mu);
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: a peer gave up waiting for this group earlier (timeout); "
                        "destroy the comm and rejoin",
                        c->rank);
    }
    g->in_finish[c->rank] = 1;
    if (++g->arrived == g->n) {
        g->result = g->worst;
        g->worst = RESHARD_OK;
        for (int i = 0; i < RESHARD_AGREE_WORDS; i++) {
            g->wresult[i] = g->wmin[i];
            g->wmin[i] = INT64_MAX;
        }
        g->arrived = 0;
        memset(g->in_finish, 0, (size_t)g->n);
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->generation == gen && st == RESHARD_OK && !g->abandoned) {
            int rc = pthread_cond_timedwait(&g->cv, &g->mu, &dl);
            if (rc == ETIMEDOUT && g->generation == gen) {
                g->abandoned = true;
                pthread_cond_broadcast(&g->cv);
                st = rs_error(RESHARD_ERR_TIMEOUT,
                              "rank %d: not every rank finished the refit within %g s", c->rank,
                              rs_timeout_s(timeout_s));
            } else if (rc != 0 && rc != ETIMEDOUT)
                st = rs_error(RESHARD_ERR_TRANSPORT, "rank %d: waiting for the others failed (%d)",
                              c->rank, rc);
        }
    }
    if (g->generation == gen && g->abandoned) { /* given up, by us or a peer */
        for (int32_t r = 0; r < g->n; r++)
            if (!g->in_finish[r])
                ip->lost[r] = 1;
        if (st == RESHARD_OK)
            st = rs_error(RESHARD_ERR_TIMEOUT,
                          "rank %d: a peer gave up waiting for a rank that did not finish the "
                          "refit within %g s",
                          c->rank, rs_timeout_s(timeout_s));
    }
    if (st == RESHARD_OK) {
        st = g->result;
        if (min_words)
            memcpy(min_words, g->wresult, sizeof g->wresult);
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

static void ip_unresponsive(const reshard_comm_t *c, unsigned char *flags)
{
    const rs_inproc_t *ip = c->impl;
    pthread_mutex_lock(&ip->g->mu);
    for (int32_t r = 0; r < c->size; r++)
        flags[r] |= ip->lost[r];
    pthread_mutex_unlock(&ip->g->mu);
}

/* The agreement board: a sender posts one message per round; receivers read
 * the slots of the peers they wait for. */
static reshard_status_t ip_agree_exchange(reshard_comm_t *c, int round, const int32_t *peers,
                                          int32_t n, int32_t n_need, const void *msg,
                                          uint64_t bytes, void *recv, unsigned char *got,
                                          double deadline)
{
    rs_inproc_t *ip = c->impl;
    reshard_inproc_group_t *g = ip->g;
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    double left = deadline - ((double)mono.tv_sec + 1e-9 * (double)mono.tv_nsec);
    struct timespec dl = deadline_after(left > 1e-9 ? left : 1e-9);
    reshard_status_t st = RESHARD_OK;
    void *mine = malloc(bytes ? bytes : 1);
    if (!mine)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory in the agreement", c->rank);
    memcpy(mine, msg, bytes);
    pthread_mutex_lock(&g->mu);
    if (!g->board) {
        g->board_rounds = g->n + 2;
        g->board = calloc((size_t)g->board_rounds * (size_t)g->n, sizeof *g->board);
    }
    if (!g->board || round < 0 || round >= g->board_rounds) {
        free(mine);
        st = rs_error(g->board ? RESHARD_ERR_INVALID_ARG : RESHARD_ERR_NOMEM,
                      "rank %d: agreement round %d outside the board", c->rank, round);
    } else {
        void **slot = &g->board[(int64_t)round * g->n + c->rank];
        free(*slot);
        *slot = mine;
        pthread_cond_broadcast(&g->cv);
    }
    for (int32_t i = 0; i < n && st == RESHARD_OK; i++) {
        void **slot = &g->board[(int64_t)round * g->n + peers[i]];
        int rc = 0;
        while (!*slot && rc != ETIMEDOUT && i < n_need)
            rc = pthread_cond_timedwait(&g->cv, &g->mu, &dl);
        got[i] = *slot != NULL;
        if (got[i])
            memcpy((char *)recv + (size_t)i * bytes, *slot, bytes);
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

static void ip_destroy(reshard_comm_t *c)
{
    rs_inproc_t *ip = c->impl;
    free(ip->lost);
    free(ip->pend[0]);
    free(ip->pend[1]);
    free(ip);
}

static const reshard_transport_ops_t rs_inproc_ops = {
    .version = RESHARD_TRANSPORT_VERSION,
    .name = "inproc",
    .device_memory = false,
    .alloc_staging = ip_alloc,
    .free_staging = ip_free,
    .round_begin = ip_begin,
    .post_send = ip_send,
    .post_recv = ip_recv,
    .round_end = ip_end,
    .round_wait = ip_wait,
    .finish = ip_finish,
    .unresponsive = ip_unresponsive,
    .agree_exchange = ip_agree_exchange,
    .destroy = ip_destroy,
};

reshard_status_t reshard_comm_create_inproc(reshard_inproc_group_t *group, int32_t rank,
                                            reshard_comm_t **out)
{
    rs_error_clear();
    if (!group || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_inproc: NULL argument");
    if (rank < 0 || rank >= group->n)
        return rs_error(RESHARD_ERR_RANK, "reshard_comm_create_inproc: rank %d outside [0, %d)",
                        rank, group->n);
    reshard_comm_t *c = calloc(1, sizeof *c);
    rs_inproc_t *ip = calloc(1, sizeof *ip);
    if (ip)
        ip->lost = calloc((size_t)group->n, 1);
    if (!c || !ip || !ip->lost) {
        free(c);
        if (ip)
            free(ip->lost);
        free(ip);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_create_inproc: out of memory");
    }
    ip->g = group;
    c->ops = &rs_inproc_ops;
    c->rank = rank;
    c->size = group->n;
    c->impl = ip;
    *out = c;
    return RESHARD_OK;
}
