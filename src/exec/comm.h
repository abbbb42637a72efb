/*
 * The endpoint object behind reshard_comm_t: a transport's operations (the public
 * reshard_transport.h) and its state. Owned by exec (comm.c); the built-in transports
 * fill it in when they make an endpoint.
 */
#ifndef RS_EXEC_COMM_H
#define RS_EXEC_COMM_H

#include <stdbool.h>

#include "reshard/reshard_transport.h"

struct reshard_comm {
    const reshard_transport_ops_t *ops;
    int32_t rank;
    int32_t size;
    void *impl;
    /** The delta codec on this endpoint's device memory (exec/delta_dev_ops.h), or NULL. */
    const struct rs_delta_dev_ops *delta_dev;
    /** Set when an execution on this endpoint ended in TIMEOUT or TRANSPORT:
     *  the peers' progress is unknown, so a later execution could pair this
     *  rank's messages with another step's. reshard_plan_execute and
     *  reshard_plan_fail refuse a broken endpoint; it can still be shrunk
     *  (reshard_elastic.h) or destroyed. */
    bool broken;
    /** RS_COMM_BUSY while a call uses the endpoint (an execution, an
     *  agreement), RS_COMM_CLOSING once reshard_comm_destroy began,
     *  RS_COMM_CONTENDED once a call was refused while another ran (cleared by
     *  the next call that takes the endpoint), RS_COMM_TWO_THREADS for good once
     *  a call was refused that way (threads whose calls raced may have started
     *  pairing one thread's plan on this rank with another's on its peers, and
     *  nothing in the messages tells two plans of equal layouts apart, so every
     *  later execution fails at its preflight, on every rank); read and written
     *  with __atomic builtins only (exec/comm.c). */
    int use;
};

enum { RS_COMM_BUSY = 1, RS_COMM_CLOSING = 2, RS_COMM_CONTENDED = 4, RS_COMM_TWO_THREADS = 8 };

/** Whether a call on @p comm was refused (another thread's) since this thread took it:
 *  the running execution then fails at its outcome agreement, so that no rank returns OK
 *  from an execution whose peers may have run another thread's plan. */
bool rs_comm_contended(const reshard_comm_t *comm);

/** Whether two threads ever called @p comm at once (RS_COMM_TWO_THREADS): its executions
 *  are refused from then on (the rank's local failure at preflight, so its peers fail too). */
bool rs_comm_two_threads(const reshard_comm_t *comm);

/** Take @p comm for one call @p what (a function name) of this thread: INVALID_ARG naming
 *  the rank when another thread is using it (two threads on one endpoint would
 *  interleave their messages, and peers would take one's bytes for the other's) or it is
 *  being destroyed; nothing is sent then. Release with rs_comm_leave. */
reshard_status_t rs_comm_enter(reshard_comm_t *comm, const char *what);
void rs_comm_leave(reshard_comm_t *comm);

#endif
