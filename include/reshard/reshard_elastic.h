/*
 * Elastic refit: ranks are lost, the survivors go on; restarted ranks rejoin.
 *
 * A plan is for a membership. The steps after an execution failed with
 * RESHARD_ERR_TIMEOUT or RESHARD_ERR_TRANSPORT because a peer stopped:
 *
 *   1. who is gone: reshard_comm_agree_gone — every survivor ends with the
 *      same set of lost ranks (or an error);
 *   2. a communicator without them: reshard_comm_shrink_inproc here,
 *      reshard_comm_shrink_mpi (reshard_mpi.h), reshard_comm_shrink_nccl
 *      (reshard_nccl.h); the lost ranks take no part;
 *   3. replan: reshard_membership_layouts derives the layouts of the new
 *      membership, then reshard_plan_create as usual;
 *   4. go on: reshard_plan_execute on the new comm.
 * A restarted rank rejoins through a new communicator and a plan of the
 * original layouts (or of any membership that includes it). Its buffers are
 * refit completely on its first execution: a plan writes every destination
 * element. The new communicator: over MPI, reshard_comm_grow_mpi on the
 * members and reshard_comm_join_mpi on the new processes (reshard_mpi.h),
 * through an intercommunicator from MPI_Comm_spawn or connect/accept; any
 * other one (a new in-process group, a fresh NCCL unique id through a
 * key-value store, as reshard.elastic.rejoin_nccl in Python) wrapped by
 * reshard_comm_create_view.
 *
 * Recovery time: the failed execution ends about the plan's timeout_s after
 * the last progress (the first rank to time out releases all), the
 * agreement takes 2 x its timeout (RESHARD_AGREE_GONE_TIMEOUT_S: 0.1 s),
 * shrink and replan take milliseconds; then the next refit runs.
 *
 * Rank numbering. Plans keep the ORIGINAL layout ranks ("plan ranks") and the
 * world size of the original layouts: a lost rank simply holds no fragment
 * any more. A comm of a new membership is a view that maps plan ranks to the
 * ranks of the underlying communicator; its reshard_comm_rank/size are the
 * plan rank and the plan world size. The underlying communicator numbers the
 * members in increasing order of plan rank (the order MPI_Comm_create_group
 * and ncclCommShrink keep). So a survivor keeps its NVLink domain: with
 * RESHARD_PLAN_PARAM_DOMAIN_SIZE, domains follow the plan rank (rank /
 * domain_size), never the rank in the shrunken communicator.
 */
#ifndef RESHARD_ELASTIC_H
#define RESHARD_ELASTIC_H

#include "reshard/reshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Plans over a membership                                             */
/* ------------------------------------------------------------------ */

/**
 * The layouts of a membership: copies of @p src and @p dst without the
 * fragments and declared buffers of the @p n_gone ranks in @p gone (plan
 * ranks; duplicates allowed; ranks of no fragment allowed). Plan them with
 * reshard_plan_create and the original world_size: lost destinations receive
 * nothing, lost sources are never chosen, and a survivor's own plan is its
 * part of the global plan of the new membership (planning is local and
 * deterministic as always).
 *
 * Checked here, on every rank alike: every element of a surviving
 * destination fragment that a lost source fragment held is still held by a
 * surviving source fragment. If not, UNCOVERED, and the message names the
 * tensor, the destination box, the first uncovered box and the lost ranks
 * that held it: a refit that lost every replica of a tensor must not be
 * reported as a success.
 * Local, no communication. @p src_out and @p dst_out are created over the
 * same catalogues and must be destroyed by the caller (after their plans).
 * Errors: INVALID_ARG (NULL, n_gone < 0, a gone rank < 0), UNCOVERED, NOMEM.
 */
reshard_status_t reshard_membership_layouts(const reshard_layout_t *src,
                                            const reshard_layout_t *dst, const int32_t *gone,
                                            int32_t n_gone, reshard_layout_t **src_out,
                                            reshard_layout_t **dst_out);

/* ------------------------------------------------------------------ */
/* Who is gone                                                         */
/* ------------------------------------------------------------------ */

/**
 * The peers this rank found unresponsive: plan ranks whose transfers were
 * still outstanding when a wait of an execution on @p comm timed out (a peer
 * that told us it failed is not counted: it is alive), plus, on a view, the
 * ranks outside its membership. Sorted, at most @p max written to @p ranks;
 * @p n_out receives the full count. Local.
 * Errors: INVALID_ARG (NULL comm or n_out, max < 0, ranks NULL with max > 0).
 */
reshard_status_t reshard_comm_unresponsive(const reshard_comm_t *comm, int32_t *ranks, int32_t max,
                                           int32_t *n_out);

/** A timeout for reshard_comm_agree_gone (seconds) that suits survivors
 *  released together by their failed execution (see its limits). */
#define RESHARD_AGREE_GONE_TIMEOUT_S 0.05

/**
 * Agree with the other survivors on the set of lost ranks. Called by every
 * survivor of @p comm after a failed execution (the comm must not be used for
 * execution afterwards: build the new one from the result). Messages travel
 * on a channel of their own, apart from the round data of the failed
 * execution.
 *
 * Rule: liveness is decided by the exchange itself. A survivor starts from
 * the ranks already outside @p comm's membership (a view's lost ranks). In
 * round r (r = 0, 1, ...) it sends its set to every rank not in it and waits,
 * until start + 2 (r + 1) @p timeout_s, for the round-r sets of those ranks;
 * it adds every rank that did not answer and every rank in a set it
 * received. It stops after a round in which its set did not change and every
 * set it received equalled its own: then every survivor that answered it
 * holds the same set. At most comm size + 1 rounds: bounded by
 * 2 (size + 1) timeout_s; 2 timeout_s + one round trip when peers stopped
 * before the agreement (round 0 waits out its deadline for them, round 1
 * confirms among the survivors). reshard_comm_unresponsive is NOT used as evidence: a
 * rank waiting on a forward of a peer that itself waits on the stopped rank
 * finds that live peer unresponsive too; the agreement's own exchange tells
 * the stopped from the merely delayed.
 *
 * Limits (by design; no consensus is possible with timeouts alone):
 *   - survivors must enter the agreement within 2 @p timeout_s of each
 *     other. A failed execution releases them together: the first rank to
 *     time out (in a round wait or the outcome agreement, after the plan's
 *     timeout_s) releases every other at once (in-process: the group is
 *     abandoned; MPI: an abort notice, after which the outcome agreement
 *     waits at most 0.05 s more). So the survivors leave within a message's
 *     latency plus 0.05 s of each other, and a short timeout works:
 *     RESHARD_AGREE_GONE_TIMEOUT_S. The agreement then takes 2 @p timeout_s
 *     plus one round trip, and a lost rank costs the plan's timeout_s
 *     (detection) + 2 @p timeout_s + shrink + replan before the next refit.
 *     Pass more on a host so loaded that a live rank may not run for
 *     @p timeout_s: it would be taken for a lost one;
 *   - a slow but alive rank that does not answer within the deadline is
 *     excluded (it must not use the old comm again: its next execution on it
 *     fails);
 *   - a rank that stops or resumes during the agreement, or a partition,
 *     can leave survivors with different sets: a survivor that finds itself
 *     in another's set, or does not converge, returns an error;
 *   - a rank that is excluded but still alive gets TRANSPORT here when it
 *     learns it (it must rejoin as a restarted rank);
 *   - after an error here the ranks may disagree on who is left, and a
 *     shrink among them could block (MPI_Comm_create_group has no timeout):
 *     end the job instead (MPI_Abort).
 * @p gone (capacity @p max) receives the agreed lost ranks, sorted, plan
 * ranks (a view's earlier lost ranks included); @p n_gone the count.
 * Errors: INVALID_ARG, TRANSPORT (this rank was excluded by a peer; an MPI
 * error), TIMEOUT (no agreement within the bound), NOMEM, UNSUPPORTED (the
 * transport has no agreement channel).
 */
reshard_status_t reshard_comm_agree_gone(reshard_comm_t *comm, double timeout_s, int32_t *gone,
                                         int32_t max, int32_t *n_gone);

/* ------------------------------------------------------------------ */
/* A communicator for a membership                                     */
/* ------------------------------------------------------------------ */

/**
 * Wrap @p inner (any transport; ownership passes to the view, also on error)
 * as a comm of @p world_size plan ranks: @p rank_map[p] (world_size entries)
 * is the inner rank of plan rank p, or -1 when p is not a member. Every inner rank must appear
 * exactly once. The view's reshard_comm_rank is the plan rank whose inner rank is the inner comm's
 * rank; its size is @p world_size. Executing a plan that moves bytes to or
 * from a non-member returns RANK. Local.
 * Errors: INVALID_ARG (NULL, world_size < 1, a map entry out of range or
 * repeated, an inner rank missing), NOMEM.
 */
reshard_status_t reshard_comm_create_view(reshard_comm_t *inner, int32_t world_size,
                                          const int32_t *rank_map, reshard_comm_t **out);

/**
 * In-process shrink (for tests and single-process tools): the survivors of
 * @p comm (an in-process comm or a view of one) build a comm without the
 * @p n_gone plan ranks in @p gone. Each survivor calls it with the same gone
 * set and the same new group @p survivors, made by the caller with
 * reshard_inproc_group_create(size - number of members lost); members are
 * numbered in increasing plan-rank order. Returns a view (see above). The
 * lost ranks take no part. Local to the caller's thread.
 * Errors: INVALID_ARG (NULL, group of the wrong size, this rank is in gone,
 * not an in-process comm), NOMEM.
 */
reshard_status_t reshard_comm_shrink_inproc(reshard_comm_t *comm, const int32_t *gone,
                                            int32_t n_gone, reshard_inproc_group_t *survivors,
                                            reshard_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_ELASTIC_H */
