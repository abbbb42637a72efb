/*
 * reshard over MPI: the transport for host (CPU) memory on one or many hosts,
 * and the built-in gather+broadcast baseline that every speedup is measured
 * against.
 *
 * Include after <mpi.h> is available; link with MPI. Only built when CMake
 * found MPI (RESHARD_HAVE_MPI is then defined for users of the library).
 *
 * Failure model. Every wait inside an execution polls with a deadline: when
 * no transfer completes for the plan's timeout_s (params.timeout_s, default
 * RESHARD_DEFAULT_TIMEOUT_S = 60 s) the rank returns RESHARD_ERR_TIMEOUT. A
 * rank that fails (locally or by timeout) sends a small abort message to every
 * peer, so ranks blocked on it stop within one poll; every execution ends with
 * a nonblocking agreement (MPI_Iallreduce with the same deadline) so that all
 * ranks return the same status: the error of the lowest rank that failed on
 * its own account. A peer that is stalled therefore makes every other rank
 * return within about two timeouts.
 *
 * One decision. An agreement that decides OK is confirmed (MPI_Ibarrier, same
 * deadline) before any rank acts on it: a peer that stops while the decision
 * round is under way leaves some ranks with the result and others without it,
 * and those that give up tell every peer. So each survivor returns the same
 * verdict: the confirmation completes (OK everywhere); or a notice that some
 * rank gave up arrives (an error everywhere); or neither by the deadline plus
 * 0.25 s, which means every rank had completed the decision round and a peer
 * stopped after it: then the execution returns OK (its data arrived everywhere)
 * and the comm is broken: the next execution returns RESHARD_ERR_TRANSPORT at
 * once, releasing the peers that wait for it in that execution (abort notice);
 * and a peer whose confirmation completed and whose next agreement then timed
 * out releases the ranks still confirming, so that the survivors reach
 * reshard_comm_agree_gone together (within milliseconds, whatever its timeout). A rank entering
 * reshard_comm_agree_gone sends the same notice, so that survivors still waiting
 * inside the failed execution leave it at once. Limit: a rank descheduled for
 * longer than that grace at its deadline can still return a different verdict
 * (no consensus is possible with timeouts alone); tests/mpi/atomic_sweep.sh
 * stops each rank at each point of both agreements of a refit. A peer that dies is usually noticed
 * by the MPI runtime first (Open MPI's mpirun then ends the whole job). After any failed execution
 * the MPI comm is unusable (the state of messages in flight is unknown): every later operation
 * returns RESHARD_ERR_TRANSPORT and the comm must be destroyed; requests still in flight and their
 * staging memory are deliberately leaked rather than freed under MPI's feet. Callers that need to
 * end the job (the `reshard run` tool) call MPI_Abort.
 *
 * The timeout bounds each wait, not a whole execution: a rank that finishes
 * its share early waits at the final agreement for the slowest rank, so
 * timeout_s must exceed the longest expected refit.
 */
#ifndef RESHARD_MPI_H
#define RESHARD_MPI_H

#include <mpi.h>

#include "reshard/reshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Create the MPI endpoint of the calling rank. Collective over @p comm: every
 * rank of @p comm calls it. The endpoint works on an MPI_Comm_dup of @p comm
 * with MPI_ERRORS_RETURN (the caller's communicator and its error handler
 * are untouched); reshard_comm_rank/size are the rank and size in @p comm,
 * and plans executed on it must have world_size == that size. MPI must be
 * initialized (any thread level; the endpoint is used by one thread at a
 * time). Staging memory for executions (per rank at most the plan's
 * staging bound) is allocated by the first execution and kept for the next
 * ones (fresh pages would cost a page fault and a zeroing pass per refit).
 * Free the endpoint with reshard_comm_destroy before MPI_Finalize (local); it
 * frees the staging.
 * Errors: INVALID_ARG (out NULL, MPI not initialized, comm is MPI_COMM_NULL),
 * TRANSPORT (the duplicate failed), NOMEM.
 */
reshard_status_t reshard_comm_create_mpi(MPI_Comm comm, reshard_comm_t **out);

/** Longest host name reshard_mpi_placement compares (longer ones are cut). */
#define RESHARD_HOST_NAME_MAX 256

/**
 * Where the ranks of @p comm live, for RESHARD_PLAN_PARAM_PLACEMENT: host[r]
 * and device[r] for every rank r of @p comm (arrays of reshard_comm_size
 * entries, the caller's). Collective over @p comm. A rank's host is named by
 * the environment variable RESHARD_HOST when set (to fake hosts on one
 * machine, or to name them where MPI cannot tell), else by the MPI
 * shared-memory split (MPI_Comm_split_type MPI_COMM_TYPE_SHARED: ranks that
 * can share memory) together with the host name; host ids are numbered by the
 * lowest rank of each host, so every rank gets the same arrays. device[r] is
 * RESHARD_DEVICE from rank r's environment (a GPU index on its host) when set,
 * else RESHARD_DEVICE_CPU; @p device may be NULL.
 * Errors: INVALID_ARG (NULL host, MPI_COMM_NULL, an unparsable RESHARD_DEVICE),
 * TRANSPORT (an MPI call failed), NOMEM.
 */
reshard_status_t reshard_mpi_placement(MPI_Comm comm, int32_t *host, int32_t *device);

/** The communicator the endpoint uses (its duplicate), or MPI_COMM_NULL when
 *  @p comm is not an MPI endpoint. For a view of a membership (a shrink or a
 *  grow, reshard_elastic.h) it is the members' communicator, in plan-rank
 *  order. Do not free it; do not post on it. Collectives that make new
 *  communicators on it (MPI_Comm_spawn, MPI_Comm_accept for
 *  reshard_comm_grow_mpi) are fine between executions. */
MPI_Comm reshard_comm_mpi_comm(const reshard_comm_t *comm);

/**
 * Elastic refit (reshard_elastic.h): the survivors of @p comm (an MPI
 * endpoint, or a view of one from an earlier shrink) build the endpoint of
 * the membership without the @p n_gone plan ranks in @p gone, as agreed by
 * reshard_comm_agree_gone. Collective over the survivors only, through
 * MPI_Comm_create_group on @p comm's duplicate (which works while the lost
 * ranks are stopped: they take no part), then reshard_comm_create_mpi on
 * the result. Returns a view (reshard_comm_create_view): its rank and size
 * are the plan rank and the plan world size; the MPI ranks follow the
 * plan-rank order. @p comm stays valid (destroy it after the new one is
 * made; it cannot execute any more).
 * Bounded: MPI_Comm_create_group has no timeout, so a watchdog thread ends
 * the job with MPI_Abort (after printing "reshard_comm_shrink_mpi: rank R:
 * ... did not complete within S s") when it has not returned within
 * RESHARD_SHRINK_WATCHDOG_S seconds (the environment variable of that name,
 * a number of seconds > 0, overrides it; a value that is not one is ignored):
 * a survivor that stopped after the agreement would otherwise block the others forever. Once the
 * ranks disagree on who is left nothing better is possible (reshard_elastic.h). Process failure
 * under Open MPI 4.1 (no ULFM): a stopped (SIGSTOP) or hung rank is survivable; a rank that exits
 * or is killed normally makes mpirun end the whole job, unless the runtime is told otherwise.
 * Errors: INVALID_ARG (NULL, not an MPI comm, the caller is in gone),
 * TRANSPORT (MPI failed), NOMEM.
 */
/** The bound of reshard_comm_shrink_mpi's MPI_Comm_create_group (seconds; the environment
 *  variable RESHARD_SHRINK_WATCHDOG_S overrides it). */
#define RESHARD_SHRINK_WATCHDOG_S 30.0

reshard_status_t reshard_comm_shrink_mpi(reshard_comm_t *comm, const int32_t *gone, int32_t n_gone,
                                         reshard_comm_t **out);

/**
 * Growing back (reshard_elastic.h), the members' side: new processes take the
 * places of lost plan ranks. The members of @p comm (a view from
 * reshard_comm_shrink_mpi, or from an earlier grow) made @p intercomm with
 * the new processes, e.g. MPI_Comm_spawn over reshard_comm_mpi_comm(comm)
 * (the remote processes then call reshard_comm_join_mpi on
 * MPI_Comm_get_parent), or MPI_Comm_accept against their MPI_Comm_connect.
 * Remote process i becomes plan rank @p joining[i] (@p n_joining = the remote
 * group's size). Collective over the members and the new processes: every
 * member passes the same @p joining; MPI_Intercomm_merge, two broadcasts from
 * the lowest member, then MPI_Comm_split orders the new communicator by plan
 * rank. Returns a view of the same plan world whose membership adds the
 * joining ranks; @p comm stays valid (destroy it afterwards). Replan with the
 * layouts of the new membership (the original ones when nobody is missing any
 * more): a new rank's buffers are then refit completely on its first
 * execution, since a plan writes every destination element.
 * The collectives block and have no timeout: a process that dies during the
 * grow blocks the others (Open MPI 4.1 has no ULFM).
 * Errors: found before any collective: INVALID_ARG (NULL, n_joining < 1,
 * @p intercomm not an intercommunicator). Then, on the members and (the same
 * status) on the new processes: INVALID_ARG (not an MPI comm, a comm that
 * ended an execution with a timeout: grow the shrunken one; @p intercomm not
 * one of the members and n_joining processes; a joining rank outside the
 * plan world, already a member or given twice), TRANSPORT (MPI failed), NOMEM.
 */
reshard_status_t reshard_comm_grow_mpi(reshard_comm_t *comm, MPI_Comm intercomm,
                                       const int32_t *joining, int32_t n_joining,
                                       reshard_comm_t **out);

/**
 * Growing back, a new process's side: join the members at the other end of
 * @p intercomm (MPI_Comm_get_parent after MPI_Comm_spawn, or the result of
 * MPI_Comm_connect), who call reshard_comm_grow_mpi. Collective with them.
 * Returns a view: reshard_comm_rank is the plan rank this process takes,
 * reshard_comm_size the plan world; the plan ranks still outside the
 * membership are what reshard_comm_unresponsive reports on it (nothing has
 * timed out on a new comm). Plan for that membership
 * (reshard_membership_layouts, or the original layouts when it is complete)
 * and execute with fresh buffers: they are refit completely.
 * Errors: INVALID_ARG (NULL, not an intercommunicator, this process is on
 * the members' side), the members' refusal (their status, see
 * reshard_comm_grow_mpi), TRANSPORT (MPI failed), NOMEM.
 */
reshard_status_t reshard_comm_join_mpi(MPI_Comm intercomm, reshard_comm_t **out);

/* ------------------------------------------------------------------ */
/* The gather+broadcast baseline                                       */
/* ------------------------------------------------------------------ */

/**
 * The common practice of RL frameworks, built in so that every claim is a
 * ratio measured in one run. Each logical tensor has a root: a source rank
 * (typically the first rank of the tensor's pipeline stage). Per root, the
 * tensors are cut into buckets of at most params.staging_bytes (a tensor
 * larger than a bucket is cut along view dim 0 into row blocks); for each
 * bucket, in order:
 *   1. gather: every source rank holding part of the bucket packs its part
 *      (one replica of each element: of fragments whose boxes are contained
 *      in another fragment's box, the one on the lowest rank is used, the
 *      root's own first) and sends it to the root, which unpacks it into the
 *      bucket, i.e. full tensors in row-major view-shape order;
 *   2. broadcast: a pipelined chain, as NCCL's ring broadcast: the root sends
 *      the packed bucket to the lowest destination rank, each destination
 *      rank passes it on to the next one, in segments of 1 MiB with up to 8
 *      in flight per link, so every link of the chain is busy at once and
 *      each rank sends and receives the bucket at most once (MPI_Ibcast's
 *      algorithm depends on the MPI library: Open MPI 4.1 sends a whole
 *      bucket from the root to each of 4 ranks, or along a binomial tree);
 *   3. every destination rank copies its fragments' elements out of the full
 *      tensors and drops the rest.
 * Memory per rank, allocated by the first execution and kept until
 * reshard_baseline_destroy: the root holds the bucket plus the receive
 * staging of its gather (about one more bucket); destination ranks hold one
 * bucket; source ranks hold their packed part of one bucket. Buckets are
 * handled one after another (no overlap between gather and broadcast).
 */
typedef struct reshard_baseline reshard_baseline_t;

/**
 * Prepare the baseline for @p src -> @p dst on @p comm (an MPI endpoint).
 * Every rank of @p comm calls it with the same layouts, roots and params
 * (local: no message, no data moved).
 * @param roots   per logical tensor id, the root rank (it must hold a source
 *                fragment of the tensor); NULL = for each tensor, the lowest
 *                source rank holding it
 * @param params  world_size must equal the comm size; staging_bytes (when its
 *                mask bit is set, else RESHARD_DEFAULT_STAGING_BYTES) is the
 *                bucket size; timeout_s (mask bit, else the default) bounds
 *                every wait as in reshard_plan_execute; my_rank is ignored
 * Errors: INVALID_ARG (NULL, not an MPI comm, world size mismatch, a root
 * holding no fragment of its tensor), UNCOVERED (a tensor has a destination
 * but no source fragment), STAGING (one view-dim-0 row of a tensor is larger
 * than the bucket; the message names the tensor), TRANSPORT, NOMEM.
 */
reshard_status_t reshard_baseline_create_mpi(const reshard_layout_t *src,
                                             const reshard_layout_t *dst, const int32_t *roots,
                                             const reshard_plan_params_t *params,
                                             reshard_comm_t *comm, reshard_baseline_t **out);

/**
 * Run the baseline once. Every rank of the comm calls it (buffers as in
 * reshard_plan_execute; a rank with no role passes zero buffers). Destination
 * elements end up as after reshard_plan_execute; destination bytes outside
 * fragments are not touched. Repeatable; buffers may differ between calls.
 * @p stats (optional): bytes_recv = bytes this rank received (gather at a
 * root, broadcast payload at a destination); bytes_sent_network = bytes it
 * sent (its gather part, and the broadcast payload when it sends it on);
 * bytes_local = bytes copied within the rank.
 * Errors: INVALID_ARG, BUFFER (a buffer missing or too small), TRANSPORT,
 * TIMEOUT, NOMEM; all ranks return the same status (see the failure model).
 */
reshard_status_t reshard_baseline_execute(reshard_baseline_t *baseline,
                                          const reshard_buffer_t *src_bufs, int32_t n_src,
                                          const reshard_buffer_t *dst_bufs, int32_t n_dst,
                                          reshard_exec_stats_t *stats);

/** Payload bytes the baseline moves between distinct ranks per execution,
 *  over all ranks: gathered bytes plus broadcast bytes times receivers. */
uint64_t reshard_baseline_bytes_moved(const reshard_baseline_t *baseline);

/** Free the baseline and its broadcast communicators (local). NULL ok. */
void reshard_baseline_destroy(reshard_baseline_t *baseline);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_MPI_H */
