/* Transport-independent accessors of reshard_comm_t, and endpoints over a caller's
 * transport (reshard_transport.h). */
#include <stdlib.h>
#include <time.h>

#include "exec/comm.h"
#include "util/error.h"

/* An endpoint over a caller's transport, with its own copy of the operations. */
typedef struct {
    struct reshard_comm c; /* first: reshard_comm_destroy frees this block */
    reshard_transport_ops_t ops;
} rs_user_comm_t;

reshard_status_t rs_comm_enter(reshard_comm_t *comm, const char *what)
{
    int v = __atomic_load_n(&comm->use, __ATOMIC_ACQUIRE);
    for (int tries = 0; tries < 1000000 && !(v & (RS_COMM_BUSY | RS_COMM_CLOSING)); tries++)
        if (__atomic_compare_exchange_n(&comm->use, &v, RS_COMM_BUSY | (v & RS_COMM_TWO_THREADS),
                                        false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return RESHARD_OK; /* taken; a mark of an earlier contention cleared */
    /* refused: the call in flight fails at its outcome agreement, on every rank, and
     * every later execution on this comm fails too (RS_COMM_TWO_THREADS) */
    __atomic_fetch_or(&comm->use, RS_COMM_CONTENDED | RS_COMM_TWO_THREADS, __ATOMIC_ACQ_REL);
    return rs_error(RESHARD_ERR_INVALID_ARG,
                    "%s: rank %d: %s; nothing was sent (one endpoint serves one call at a time: "
                    "give each thread its own comm; the call in flight fails on every rank)",
                    what, comm->rank,
                    (v & RS_COMM_CLOSING) ? "the comm is being destroyed"
                                          : "another thread is executing on this comm");
}

bool rs_comm_contended(const reshard_comm_t *comm)
{
    return __atomic_load_n(&comm->use, __ATOMIC_ACQUIRE) & RS_COMM_CONTENDED;
}

bool rs_comm_two_threads(const reshard_comm_t *comm)
{
    return __atomic_load_n(&comm->use, __ATOMIC_ACQUIRE) & RS_COMM_TWO_THREADS;
}

void rs_comm_leave(reshard_comm_t *comm)
{
    __atomic_fetch_and(&comm->use, ~(RS_COMM_BUSY | RS_COMM_CONTENDED), __ATOMIC_RELEASE);
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

void *reshard_comm_transport_ctx(const reshard_comm_t *comm)
{
    return comm ? comm->impl : NULL;
}

const char *reshard_comm_transport_name(const reshard_comm_t *comm)
{
    return comm && comm->ops && comm->ops->name ? comm->ops->name : "";
}

reshard_status_t reshard_transport_error(reshard_status_t status, const char *message)
{
    return rs_error(status, "%s", message ? message : reshard_status_string(status));
}

reshard_status_t reshard_comm_create_transport(const reshard_transport_ops_t *ops, void *ctx,
                                               int32_t rank, int32_t size, reshard_comm_t **out)
{
    rs_error_clear();
    if (!out || !ops)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_transport: NULL %s",
                        out ? "ops" : "out");
    *out = NULL;
    if (ops->version != RESHARD_TRANSPORT_VERSION)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_create_transport: ops version %u, this library knows "
                        "version %d (RESHARD_TRANSPORT_VERSION)",
                        (unsigned)ops->version, RESHARD_TRANSPORT_VERSION);
    const char *missing = !ops->name            ? "name"
                          : !ops->alloc_staging ? "alloc_staging"
                          : !ops->free_staging  ? "free_staging"
                          : !ops->round_begin   ? "round_begin"
                          : !ops->post_send     ? "post_send"
                          : !ops->post_recv     ? "post_recv"
                          : !ops->round_end     ? "round_end"
                          : !ops->round_wait    ? "round_wait"
                          : !ops->finish        ? "finish"
                                                : NULL;
    if (!missing && ops->device_memory)
        missing = !ops->pack         ? "pack (device memory)"
                  : !ops->unpack     ? "unpack (device memory)"
                  : !ops->local_copy ? "local_copy (device memory)"
                                     : NULL;
    if (missing)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_create_transport: the %s transport's ops lack %s",
                        ops->name ? ops->name : "unnamed", missing);
    if (size < 1)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_transport: size %d < 1",
                        (int)size);
    if (rank < 0 || rank >= size)
        return rs_error(RESHARD_ERR_RANK, "reshard_comm_create_transport: rank %d outside [0, %d)",
                        (int)rank, (int)size);
    rs_user_comm_t *u = calloc(1, sizeof *u);
    if (!u)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_create_transport: out of memory");
    u->ops = *ops;
    u->c.ops = &u->ops;
    u->c.rank = rank;
    u->c.size = size;
    u->c.impl = ctx;
    *out = &u->c;
    return RESHARD_OK;
}
