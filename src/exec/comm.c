/* Transport-independent accessors of reshard_comm_t. */
#include <stdlib.h>
#include <time.h>

#include "transport/transport.h"
#include "util/error.h"

reshard_status_t rs_comm_enter(reshard_comm_t *comm, const char *what)
{
    int idle = 0;
    if (__atomic_compare_exchange_n(&comm->use, &idle, RS_COMM_BUSY, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return RESHARD_OK;
    return rs_error(RESHARD_ERR_INVALID_ARG,
                    "%s: rank %d: %s; nothing was sent (one endpoint serves one call at a time: "
                    "give each thread its own comm)",
                    what, comm->rank,
                    (idle & RS_COMM_CLOSING) ? "the comm is being destroyed"
                                             : "another thread is executing on this comm");
}

void rs_comm_leave(reshard_comm_t *comm)
{
    __atomic_fetch_and(&comm->use, ~RS_COMM_BUSY, __ATOMIC_RELEASE);
}

void reshard_comm_destroy(reshard_comm_t *comm)
{
    if (!comm)
        return;
    /* refuse new calls, then wait for the one in flight (bounded by its timeout) */
    int was = __atomic_fetch_or(&comm->use, RS_COMM_CLOSING, __ATOMIC_ACQ_REL);
    if (was & RS_COMM_CLOSING)
        return; /* another thread is destroying it */
    while (__atomic_load_n(&comm->use, __ATOMIC_ACQUIRE) & RS_COMM_BUSY)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    if (comm->ops && comm->ops->destroy)
        comm->ops->destroy(comm);
    free(comm);
}

int32_t reshard_comm_rank(const reshard_comm_t *comm)
{
    return comm ? comm->rank : -1;
}

int32_t reshard_comm_size(const reshard_comm_t *comm)
{
    return comm ? comm->size : 0;
}
