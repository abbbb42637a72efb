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
 * agreement takes 2 x its timeout plus a round trip (see its rule),
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
 * deterministic as always). A lost rank takes no part in any plan of the
 * new membership: not as a source, destination, landing or relay rank (the
 * layouts record the gone ranks, and their plans' fingerprints include them).
 * From a rank's scoped layouts (reshard_model_refit_create_scoped) the
 * results are that rank's scoped layouts of the membership: its own plan
 * from them equals its part of the global plan of the whole membership
 * layouts (same fingerprint), and they are refused, as scoped layouts
 * always are, for a global plan or another rank's plan.
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
 * Rule (two rounds; T = @p timeout_s, t0 = this rank's start; "members" are the ranks of
 * @p comm's membership: all of its ranks, or a view's members):
 *   round 0: send this rank's prior set (a view's earlier lost ranks) to every other
 *            member; wait until t0 + 2T for theirs. The set S = the prior sets received
 *            plus every member whose round-0 message did not arrive in time;
 *   round 1: send S to every other member, those in S included (a live one learns it
 *            was counted lost); wait until t0 + 4T for the round-1 sets of the members
 *            not in S. This rank accepts S only when
 *              (a) no set it received (from any member) contains this rank,
 *              (b) every member not in S sent its set in time and it equals S, and
 *              (c) the members not in S are a quorum of the members: more than half,
 *                  or exactly half including the lowest member;
 *            otherwise it returns an error. reshard_comm_unresponsive is NOT used as
 *            evidence (a rank waiting on a forward of a peer that itself waits on the
 *            stopped rank finds that live peer unresponsive too).
 * Guarantee: two ranks that both accept hold the same set, and neither is in it. Their
 * groups (members not in their sets) are quorums, so they share a rank R; by (b) both
 * received R's one round-1 set and it equalled theirs. A live rank that others counted
 * lost cannot accept (its group would share a rank with theirs, whose set contains it):
 * it returns an error, by (a) as soon as their round-1 set reaches it, else by (b) or (c).
 * So there is never a second group carrying on. Bounded: returns by t0 + 4T plus the
 * cost of the calls; when peers stopped before the agreement it takes 2T (round 0 waits
 * them out) plus one round trip among the others.
 *
 * Limits (by design; no consensus is possible with timeouts alone):
 *   - survivors must enter the agreement within 2T of each other. A failed execution
 *     releases them together: the first rank to time out (in a round wait or the outcome
 *     agreement, after the plan's timeout_s) releases every other at once (in-process:
 *     the group is abandoned; MPI: an abort notice, after which the outcome agreement
 *     waits at most 0.05 s more), and over MPI the first survivor to enter this
 *     agreement sends the notice again, releasing any survivor still waiting in the
 *     failed execution (reshard_mpi.h: one decision). RESHARD_AGREE_GONE_TIMEOUT_S suits an idle
 * host; pass more on a loaded one (the CLI defaults to 0.5 s): a live rank that does not run for T
 * is taken for a lost one;
 *   - the guarantee is safety only: a rank that stops or resumes during the agreement,
 *     a slow rank or a partition can make some or all survivors return an error (never
 *     two different accepted sets). After such an error the ranks may disagree on who is
 *     left, and a shrink among them could block: end the job (MPI_Abort);
 *   - losing half of the members without the lowest one, or more than half, always
 *     ends in an error here (no quorum): the survivors cannot tell it from a partition;
 *   - a rank that is excluded but still alive must not use the old comm again (its next
 *     execution on it fails); it leaves and rejoins as a restarted rank. It learns it was
 *     excluded here: TRANSPORT with @p gone holding this rank. Over MPI without ULFM
 *     (Open MPI 4.1) leaving is all it can do, and how matters: MPI_Abort ends every
 *     process of the job, the survivors too, and exiting without MPI_Finalize makes
 *     mpirun end the job (unless mpirun --enable-recovery); so it stops using MPI and
 *     calls MPI_Finalize, which returns once the survivors finalize too (a rejoin needs
 *     a new process: reshard_comm_grow_mpi / reshard_comm_join_mpi);
 *   - the agreement may be repeated on the comm of a membership after a further loss:
 *     its members are the members of that view.
 * @p gone (capacity @p max) receives the agreed lost ranks, sorted, plan
 * ranks (a view's earlier lost ranks included); @p n_gone the count.
 * Errors: INVALID_ARG (NULL, max < 0, timeout_s not in (0, 1e9)), TRANSPORT (a member
 * counts this rank as lost: then, alone among the errors, @p gone / @p n_gone receive
 * that member's set, which holds this rank: it was excluded, and the survivors go on
 * without it; no quorum; an MPI error), TIMEOUT (a member did not confirm
 * in time, or confirmed another set), NOMEM, UNSUPPORTED (the transport has no
 * agreement channel).
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
