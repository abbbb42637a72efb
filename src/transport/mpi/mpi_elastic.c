/*
 * Elastic refit over MPI: the peers found unresponsive, the survivors'
 * agreement exchange (point-to-point on a tag of its own, so it works on a
 * comm broken by the failed execution), and the shrink through
 * MPI_Comm_create_group, in which the lost ranks take no part.
 */
#include <errno.h>
#include <sched.h>
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

reshard_status_t rs_mpi_agree_exchange(reshard_comm_t *c, int round, const int32_t *peers,
                                       int32_t n, const void *msg, uint64_t bytes, void *recv,
                                       unsigned char *got, double deadline)
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
    int left = n;
    while (st == RESHARD_OK && left > 0 && rs_now_s() < deadline) {
        for (int32_t i = 0; i < n; i++) {
            int flag = 0;
            if (got[i] || req[i] == MPI_REQUEST_NULL)
                continue;
            int rc = MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) {
                st = rs_mpi_error(m, rc, "agreement exchange");
                break;
            }
            if (flag) {
                got[i] = 1;
                left--;
            }
        }
        if (left > 0)
            nap();
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
        rc = MPI_Comm_create_group(m->comm, survivors, RS_MPI_TAG_SHRINK, &sub);
    if (rc != MPI_SUCCESS)
        st = rs_mpi_error(m, rc, "MPI_Comm_create_group (shrink)");
    if (survivors != MPI_GROUP_NULL)
        MPI_Group_free(&survivors);
    if (all != MPI_GROUP_NULL)
        MPI_Group_free(&all);
    reshard_comm_t *inner = NULL;
    if (st == RESHARD_OK)
        st = reshard_comm_create_mpi(sub, &inner);
    if (sub != MPI_COMM_NULL)
        MPI_Comm_free(&sub);
    if (st == RESHARD_OK)
        st = reshard_comm_create_view(inner, comm->size, map, out);
    free(ranks);
    free(map);
    return st;
}
