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
    /** Set when an execution on this endpoint ended in TIMEOUT or TRANSPORT:
     *  the peers' progress is unknown, so a later execution could pair this
     *  rank's messages with another step's. reshard_plan_execute and
     *  reshard_plan_fail refuse a broken endpoint; it can still be shrunk
     *  (reshard_elastic.h) or destroyed. */
    bool broken;
};

#endif
