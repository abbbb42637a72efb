/* Internal form of a plan: its pieces (all, or those of one rank's own plan)
 * and per-rank streams. */
#ifndef RS_PLAN_INTERNAL_H
#define RS_PLAN_INTERNAL_H

#include "plan/scope.h"

/** Stage of a piece: moved from a source fragment (stage 0: direct, or a
 *  network landing), or forwarded inside a domain (stage 1) from the
 *  destination fragment a landing filled — or from the relay scratch when the
 *  landing rank does not need the piece itself (rs_piece_is_relay). */
enum { RS_STAGE_DIRECT = 0, RS_STAGE_FORWARD = 1, RS_NSTAGES = 2 };

/** One box moved from one fragment to another. */
typedef struct {
    reshard_box_t box;
    int32_t tensor;
    int32_t from_frag; /**< src layout index (stage 0) or dst layout index (stage 1) */
    int32_t to_frag;   /**< dst layout index */
    int32_t sender;
    int32_t receiver;
    int32_t stage;
    uint32_t elem_size;
    uint64_t bytes;
} rs_piece_t;

/** Bytes a piece takes in a stream: padded to 8 so chunk cuts never split an element. */
static inline uint64_t rs_piece_stream_bytes(const rs_piece_t *p)
{
    return (p->bytes + 7u) & ~(uint64_t)7u;
}

/** All pieces between one pair of ranks in one stage, in stream order. */
typedef struct {
    int32_t peer;
    int32_t stage;
    int64_t *idx; /**< indices into plan->pieces, in stream order */
    int64_t n;
    uint64_t bytes; /**< padded stream bytes */
    uint64_t chunk; /**< bytes per round, multiple of 8 */
} rs_stream_t;

/** What one rank executes. */
typedef struct {
    int32_t rank;
    rs_stream_t *send[RS_NSTAGES], *recv[RS_NSTAGES];
    int32_t nsend[RS_NSTAGES], nrecv[RS_NSTAGES];
    int64_t *local; /**< stage-0 pieces with sender == receiver == rank */
    int64_t nlocal;
} rs_rank_plan_t;

struct reshard_plan {
    reshard_plan_params_t p;
    rs_scope_t scope;
    /** The layouts planned from: the caller's while planning, then the
     *  plan's own copies (own_src, own_dst, see rs_plan_own_inputs). */
    const reshard_layout_t *src;
    const reshard_layout_t *dst;
    reshard_tensors_t *own_tensors;
    reshard_layout_t *own_src, *own_dst;
    uint64_t fingerprint; /**< of the inputs (rs_fingerprint) */
    rs_piece_t *pieces;   /**< sorted by (stage, sender, receiver, tensor, to_frag, box) */
    int64_t npieces;
    uint64_t *chunk_cap; /**< per rank: bytes per stream per round it can stage */
    reshard_plan_stats_t stats;
    rs_rank_plan_t *mine; /**< for my_rank, or NULL for RESHARD_ALL_RANKS plans */
};

/** True for a relay piece: a stage-0 piece landing on a rank that does not
 *  own its destination fragment (it lands in that rank's relay scratch), or
 *  a stage-1 piece forwarding from such scratch. */
static inline bool rs_piece_is_relay(const reshard_layout_t *dst, const rs_piece_t *p)
{
    return p->stage == RS_STAGE_DIRECT ? dst->f[p->to_frag].rank != p->receiver
                                       : dst->f[p->from_frag].rank != p->sender;
}

/** True when a piece of stream (@p stage, @p sender, @p receiver) belongs in
 *  the plan: every piece of a global plan; for a rank's own plan, the pieces
 *  it sends or receives, and the stage-0 pieces landing in its domain (their
 *  rounds time the forwards it receives). */
static inline bool rs_scope_keeps(const reshard_plan_t *plan, int32_t stage, int32_t sender,
                                  int32_t receiver)
{
    int32_t r = plan->p.my_rank;
    return r == RESHARD_ALL_RANKS || sender == r || receiver == r ||
           (stage == RS_STAGE_DIRECT &&
            rs_domain_of(&plan->p, receiver) == rs_domain_of(&plan->p, r));
}

/** Build @p rank's streams from the plan's pieces. */
reshard_status_t rs_rank_plan_build(const reshard_plan_t *plan, int32_t rank, rs_rank_plan_t **out);
void rs_rank_plan_free(rs_rank_plan_t *rp);

#endif
