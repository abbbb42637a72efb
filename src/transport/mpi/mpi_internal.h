/*
 * Internal state of the MPI transport, shared by the round ops (mpi_transport.c)
 * and the gather+broadcast baseline (baseline.c).
 */
#ifndef RS_MPI_INTERNAL_H
#define RS_MPI_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>

#include "reshard/reshard_mpi.h"
#include "exec/comm.h"

/** Tags on the duplicated communicator. */
enum {
    RS_MPI_TAG_SLOT0 = 100,  /**< round data of slot 0; slot 1 uses TAG_SLOT0 + 1 */
    RS_MPI_TAG_ABORT = 110,  /**< "rank r failed with status s": {status, rank, epoch,
                                  the peer r found unresponsive or -1} */
    RS_MPI_TAG_GATHER = 120, /**< baseline gather messages */
    RS_MPI_TAG_CHAIN = 121,  /**< baseline broadcast segments along the chain */
    RS_MPI_TAG_SHRINK = 130, /**< MPI_Comm_create_group of a shrink */
    RS_MPI_TAG_AGREE = 140   /**< lost-rank agreement, round r uses TAG_AGREE + r */
};

/** A growable list of outstanding requests. */
typedef struct {
    MPI_Request *req;
    int32_t *peer; /**< the peer of each request, for messages */
    int *idx;      /**< scratch for MPI_Testsome */
    int n, cap;
} rs_mpi_reqs_t;

typedef struct {
    MPI_Comm comm; /**< our duplicate, MPI_ERRORS_RETURN */
    int rank, size;
    rs_mpi_reqs_t slot[2];
    /** Agreements completed on this comm (the same count on every rank);
     *  abort messages carry it so that late ones of an earlier execution are
     *  recognised and dropped. */
    int epoch;
    MPI_Request abort_recv; /**< posted ANY_SOURCE receive of TAG_ABORT */
    int abort_msg[4];       /**< {status, rank, epoch, suspect} of a received abort: suspect
                                 is the peer the failing rank found unresponsive, or -1 */
    bool abort_received;    /**< abort_msg holds a peer's failure of this epoch */
    bool abort_reported;    /**< a wait returned the peer's failure to the caller */
    bool abort_sent;        /**< we told every peer that we failed (this epoch) */
    rs_mpi_reqs_t abort_sends;
    /** Staging kept between executions (fresh pages cost a fault and a
     *  zeroing pass each): the block, its size, whether it is handed out. */
    void *staging;
    uint64_t staging_bytes;
    bool staging_used;
    /** Set when an agreement failed while some rank had transfers in
     *  flight, or timed out: the peer state is unknown, further operations
     *  are refused and outstanding requests are leaked (never freed under
     *  MPI's feet), as is staging freed while requests are outstanding. An
     *  agreement that fails with nothing in flight anywhere (a rejected
     *  buffer before any byte moved) leaves the comm usable. */
    bool broken;
    /** The comm broke after an agreement decided OK (a peer stopped answering during its
     *  confirmation): that execution succeeded, the next one is refused. */
    bool broken_after_ok;
    /** In the confirmation round of an agreement: a peer's abort of the next epoch
     *  counts (it completed the confirmation and failed after). */
    bool confirming;
    /** Peers whose requests were outstanding when a wait timed out
     *  (size entries; reshard_comm_unresponsive). */
    unsigned char *lost;
    /** The plan rank of each rank of comm when the comm is the members' communicator
     *  of a membership's view (size entries), else NULL: messages name plan ranks. */
    int32_t *plan_of;
} rs_mpi_t;

/** The rank messages name for rank @p r of @p m's communicator: its plan rank. */
static inline int rs_mpi_pr(const rs_mpi_t *m, int r)
{
    return m && m->plan_of && r >= 0 && r < m->size ? (int)m->plan_of[r] : r;
}

/** Largest single message; larger transfers are split into several messages
 *  of this size (MPI counts are int). Tests lower it to exercise splitting. */
extern uint64_t rs_mpi_max_message_bytes;

/** The MPI state of @p c, or NULL when @p c is not an MPI comm. */
rs_mpi_t *rs_mpi_of(reshard_comm_t *c);

/** Record an MPI error code as TRANSPORT with @p what and MPI's message. */
reshard_status_t rs_mpi_error(rs_mpi_t *m, int mpi_rc, const char *what);

/** Append a request with @p peer to a list. Errors: NOMEM. */
reshard_status_t rs_mpi_reqs_push(rs_mpi_reqs_t *l, MPI_Request r, int32_t peer);
/** Free a list's arrays (not its requests). */
void rs_mpi_reqs_free(rs_mpi_reqs_t *l);

/**
 * Post one logical transfer of @p bytes to/from @p peer with @p tag on
 * @p comm, split into messages of at most rs_mpi_max_message_bytes; the
 * requests are appended to @p l. Errors: TRANSPORT, NOMEM.
 */
reshard_status_t rs_mpi_post(rs_mpi_t *m, rs_mpi_reqs_t *l, bool send, int32_t peer, void *buf,
                             uint64_t bytes, int tag);

/**
 * Wait for every request of @p l, polling with MPI_Testsome and yielding the
 * CPU between polls. Returns TIMEOUT when @p timeout_s seconds pass without
 * any request completing, and the peer's status when a peer's abort message
 * arrives first. @p what names the wait in messages. On success @p l is empty.
 * @p check_abort: also stop on a peer's abort message.
 */
reshard_status_t rs_mpi_wait(rs_mpi_t *m, rs_mpi_reqs_t *l, double timeout_s, bool check_abort,
                             const char *what);

/**
 * Agree on an outcome: every rank of the comm passes its local status; all
 * get the failing status of the lowest failing rank whose error was its own
 * (not a reaction to a peer's abort), or TIMEOUT when some rank does not
 * arrive within @p timeout_s. A failing rank first tells every peer (abort
 * message) so that ranks blocked in a wait stop early. When this rank's
 * failure is a TIMEOUT, or a peer's TIMEOUT abort arrives while it waits, it
 * waits at most 0.05 s more (a stopped rank never arrives); a rank that gives
 * up here tells every peer too, so the first to time out releases all. A rank that still has
 * round transfers in flight counts as failed and breaks the comm. The
 * RESHARD_AGREE_WORDS @p words (NULL: all INT64_MAX) are reduced by MIN in the same
 * collective into @p min_words (may be NULL). A decision of OK is confirmed by a
 * barrier before it is returned (reshard_mpi.h: one decision): without the barrier and
 * without a peer's notice by the deadline plus RS_MPI_CONFIRM_GRACE_S it stands, and the
 * comm is broken (broken_after_ok).
 */
reshard_status_t rs_mpi_agree(rs_mpi_t *m, reshard_status_t local, const int64_t *words,
                              int64_t *min_words, double timeout_s);

/** The points of an agreement (rs_mpi_agree), for the test hook. */
typedef enum {
    RS_MPI_AGREE_ENTER,          /**< before the decision round is posted */
    RS_MPI_AGREE_POSTED,         /**< the decision round (MPI_Iallreduce) posted */
    RS_MPI_AGREE_DECIDED,        /**< the decision round completed here */
    RS_MPI_AGREE_CONFIRM_POSTED, /**< the confirmation round (MPI_Ibarrier) posted */
    RS_MPI_AGREE_CONFIRMED       /**< the confirmation round completed here */
} rs_mpi_agree_point_t;

/** Tests only (NULL otherwise): called at each point of every agreement, with the comm's
 *  epoch in m->epoch, e.g. to stop this rank there (SIGSTOP). */
extern void (*rs_mpi_agree_hook)(const rs_mpi_t *m, rs_mpi_agree_point_t point);

/** Tell every peer that this rank failed with @p st in this epoch (the abort channel), once
 *  per epoch; never waits. A peer waiting in a round or an agreement of this epoch stops. */
void rs_mpi_release(rs_mpi_t *m, reshard_status_t st);

/** The error returned by operations on a broken comm. */
reshard_status_t rs_mpi_broken_error(const rs_mpi_t *m);

/** Elastic refit (mpi_elastic.c): the unresponsive peers and the agreement
 *  exchange of the transport interface. */
void rs_mpi_unresponsive(const reshard_comm_t *c, unsigned char *flags);
reshard_status_t rs_mpi_agree_exchange(reshard_comm_t *c, int round, const int32_t *peers,
                                       int32_t n, int32_t n_need, const void *msg, uint64_t bytes,
                                       void *recv, unsigned char *got, double deadline);

/** Keep @p p (heap) reachable until the process ends, never freed: MPI may still read or
 *  write it (a buffer of a request left in flight by a failed execution). */
void rs_mpi_keep(void *p);

#endif
