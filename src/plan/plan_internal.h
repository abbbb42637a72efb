/* Internal form of a plan: its pieces (all, or those of one rank's own plan)
 * and per-rank streams. */
#ifndef RS_PLAN_INTERNAL_H
#define RS_PLAN_INTERNAL_H

#include "exec/quant.h"
#include "layout/layout_internal.h"
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
    /** Colocated plans: one-sided reads (rs_piece_is_peer_read), in piece order
     *  (grouped by sender): those this rank reads, and those read from it. */
    int64_t *reads, *exposed;
    int64_t nreads, nexposed;
} rs_rank_plan_t;

/** One quantization a rank does, in global coordinates ([E?] rows cols;
 *  scales [E?] row-blocks col-blocks): before sending (sender side: from its
 *  bf16 source buffer into its e4m3 and scale scratch) or after receiving
 *  (receiver side: from its bf16 scratch into its destination buffers). */
typedef struct {
    int32_t rank;
    int32_t tensor;           /**< catalogue id of the quantized tensor */
    int32_t qtensor, stensor; /**< wire tensors of its e4m3 data and scales */
    rs_quant_t q;
    reshard_fragment_t src, dst, scale;
    reshard_box_t box; /**< elements: the whole-block region (sender) or the cell (receiver) */
} rs_qstep_t;

/** What quantization adds to a plan (plan/quant_wire.c): the steps, and per
 *  rank the scratch buffers the wire layouts name beyond the caller's. */
typedef struct {
    rs_qstep_t *pre, *post;
    int64_t npre, npost, cpre, cpost;
    int32_t world;
    int32_t *src_scratch; /**< per rank: id of the e4m3 scratch (scales: id + 1) */
    int32_t *dst_scratch; /**< per rank: id of the bf16 scratch */
    uint64_t *src_q_bytes, *src_s_bytes, *dst_bf_bytes; /**< per rank: their sizes */
    reshard_tensors_t *tensors;                         /**< the wire catalogue (while planning) */
    reshard_layout_t *src, *dst;                        /**< the wire layouts (while planning) */
} rs_qplan_t;

typedef struct rs_tally rs_tally_t; /* plan/tally.h */

/** The parts of a plan fingerprint (rs_fingerprint_parts). */
enum { RS_FP_CATALOGUE, RS_FP_LAYOUTS, RS_FP_BUFFERS, RS_FP_PARAMS, RS_FP_PARTS };

struct reshard_plan {
    reshard_plan_params_t p;
    rs_scope_t scope;
    /** The layouts planned from: the caller's while planning, then the
     *  plan's own copies (own_src, own_dst, see rs_plan_own_inputs). */
    const reshard_layout_t *src;
    const reshard_layout_t *dst;
    reshard_tensors_t *own_tensors;
    reshard_layout_t *own_src, *own_dst;
    uint64_t fingerprint;          /**< of the inputs (rs_fingerprint) */
    uint64_t fp_part[RS_FP_PARTS]; /**< its parts (rs_fingerprint_parts) */
    uint64_t *fp_tensor;           /**< per tensor (rs_fingerprint_tensors), or NULL */
    int32_t fp_ntensors;
    rs_piece_t *pieces; /**< sorted by (stage, sender, receiver, tensor, to_frag, box);
                             a summary plan keeps those of its kept ranks only */
    int64_t npieces;
    uint64_t *chunk_cap; /**< per rank: bytes per stream per round it can stage */
    reshard_plan_stats_t stats;
    rs_tally_t *tally;    /**< what the pieces add up to (plan/tally.h) */
    uint8_t *keep_rank;   /**< summary plans: per rank, its pieces are kept (or NULL) */
    uint8_t *keep_domain; /**< per domain: it holds a kept rank (its landings are kept) */
    rs_rank_plan_t *mine; /**< for my_rank, or NULL for RESHARD_ALL_RANKS plans */
    rs_qplan_t *quant;    /**< quantized destinations, or NULL */
    /** Scoped layouts (reshard_model_refit_create_scoped): who holds each
     *  tensor in the whole source and destination layouts, while planning;
     *  NULL for whole layouts. */
    const rs_layout_origin_t *holders_src, *holders_dst;
    /** Per plan rank: 1 when it is gone from the membership the layouts are
     *  for (their gone sets, reshard_membership_layouts); NULL when none is.
     *  Such a rank is never chosen as a landing or relay rank. */
    uint8_t *gone;
    /** Colocated plans: this rank's source buffers that peers read, as bound at
     *  the first execution (a later binding of another allocation is refused),
     *  and the peers' allocations it mapped or opened as a reader, released at
     *  destroy (exec/peer.c). Written by execution; NULL before. */
    struct rs_peer_maps *peer_maps;
    /** Delta plans (params.delta): per executing rank its version, snapshot and
     *  relay scratch (exec/delta.h); NULL otherwise. Mutated by executions. */
    struct rs_delta *delta;
    /** Its name among a rank's plans of the same inputs (reshard_plan_set_name; "":
     *  none; plan/identity.c keeps the rest of its identity). */
    char id_name[64];
};

/** plan/identity.c: register a created @p plan (NOMEM), forget a destroyed one, retire
 *  one, @p why (static text: the old plan of reshard_plan_delta_adopt, a plan whose
 *  execution lost its peers): its name is free for a new plan, and rs_identity_retired
 *  says why (NULL: not retired). */
reshard_status_t rs_identity_add(const reshard_plan_t *plan);
void rs_identity_remove(const reshard_plan_t *plan);
void rs_identity_retire(const reshard_plan_t *plan, const char *why);
/** Retire @p from (reshard_plan_delta_adopt: @p plan took its state), and where both
 *  have the same inputs and @p plan has no name, give @p plan @p from's name, or else its
 *  number, as the plan that takes its place. */
void rs_identity_replace(reshard_plan_t *plan, const reshard_plan_t *from, const char *why);
const char *rs_identity_retired(const reshard_plan_t *plan);
/** The identity @p plan's executions agree on: the hash of its name (top bit set), or its
 *  number, fixed when it was made (the smallest no unnamed, not retired plan of the same
 *  inputs its thread then held); a retired plan's from a set of its own (that number
 *  into *@p ordinal when not NULL, -1 for a named plan; plan/identity.c). */
uint64_t rs_identity(const reshard_plan_t *plan, int32_t *ordinal);

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

/** reshard_plan_create, where a summary plan (params->summary) also keeps
 *  the pieces a rank's own plan keeps (rs_scope_keeps) for each of the
 *  @p nkeep ranks @p keep: to compare own plans with a global plan too large
 *  to hold whole. */
reshard_status_t rs_plan_create_keeping(const reshard_layout_t *src, const reshard_layout_t *dst,
                                        const reshard_plan_params_t *params, const int32_t *keep,
                                        int32_t nkeep, reshard_plan_t **out);

/** Does a summary plan keep a piece of this stream (rs_plan_create_keeping)? */
static inline bool rs_plan_keeps(const reshard_plan_t *plan, int32_t stage, int32_t sender,
                                 int32_t receiver)
{
    return plan->keep_rank &&
           (plan->keep_rank[sender] || plan->keep_rank[receiver] ||
            (stage == RS_STAGE_DIRECT && plan->keep_domain[rs_domain_of(&plan->p, receiver)]));
}

/** Build @p rank's streams from the plan's pieces. */
reshard_status_t rs_rank_plan_build(const reshard_plan_t *plan, int32_t rank, rs_rank_plan_t **out);
void rs_rank_plan_free(rs_rank_plan_t *rp);

#endif
