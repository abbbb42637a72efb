/* What a plan's pieces add up to, gathered one tensor at a time as they are
 * made: the byte counters of reshard_plan_stats_t, per-rank link loads, and
 * per stream (stage, sender, receiver) its bytes. The statistics (stats.c)
 * and the simulator (sim.c) read only this, so a summary plan
 * (RESHARD_PLAN_PARAM_SUMMARY), which keeps no pieces, still reports and
 * predicts exactly what the full plan would. Below the steps of planning:
 * it knows pieces, the params and the layouts only. */
#ifndef RS_PLAN_TALLY_H
#define RS_PLAN_TALLY_H

#include "plan/plan_internal.h"

/** One stream's totals; key 0 marks a free slot (rs_tally_key). */
typedef struct {
    uint64_t key;
    uint64_t bytes;  /**< sum of its pieces' bytes */
    uint64_t padded; /**< sum of rs_piece_stream_bytes: what moves on the wire */
} rs_stream_total_t;

struct rs_tally {
    int32_t world;
    int32_t rank; /**< the rank counted (RESHARD_ALL_RANKS: every rank) */
    /* counters of reshard_plan_stats_t: received side for bytes_total, sent side otherwise */
    uint64_t bytes_total, bytes_local, bytes_nvlink, bytes_network;
    uint64_t bytes_path[4];   /**< sent side, by rs_path_t (placement.h) */
    uint64_t bytes_peer_read; /**< sent side: one-sided reads of a colocated plan */
    int64_t pieces;
    /* per rank */
    uint64_t *nic_send, *nic_recv; /**< network bytes sent, received */
    uint64_t *nvl_send, *nvl_recv; /**< bytes to and from a peer of the same domain */
    uint64_t *local;               /**< bytes copied with sender == receiver */
    uint64_t *relay;               /**< relay scratch (landings it forwards) */
    uint64_t *copied;              /**< bytes packed or unpacked (not moved straight from or to
                                        the user buffer, as the executor decides) */
    uint64_t *fwd;                 /**< per domain: bytes forwarded inside it (stage 1) */
    rs_stream_total_t *streams;    /**< open addressing over cap slots */
    int64_t nstreams, cap;
};

/** Key of the stream (@p stage, @p sender, @p receiver); never 0. */
static inline uint64_t rs_tally_key(int32_t stage, int32_t sender, int32_t receiver)
{
    return ((uint64_t)(uint32_t)stage << 62) | ((uint64_t)(uint32_t)sender << 31) |
           (uint64_t)(uint32_t)receiver | ((uint64_t)1 << 61);
}

static inline int32_t rs_tally_sender(uint64_t key)
{
    return (int32_t)((key >> 31) & 0x3fffffffu);
}

static inline int32_t rs_tally_receiver(uint64_t key)
{
    return (int32_t)(key & 0x7fffffffu);
}

/** An empty tally of @p p's world counting p->my_rank's pieces (every
 *  rank's for RESHARD_ALL_RANKS). NOMEM. */
reshard_status_t rs_tally_init(rs_tally_t *t, const reshard_plan_params_t *p);
void rs_tally_free(rs_tally_t *t);

/** Add pieces @p v[0..n) of @p plan (merged: rs_pieces_merge): a piece is
 *  counted on its receiving side when t->rank receives it and on its sending
 *  side when t->rank sends it (both for RESHARD_ALL_RANKS). NOMEM. */
reshard_status_t rs_tally_add(rs_tally_t *t, const reshard_plan_t *plan, const rs_piece_t *v,
                              int64_t n);

/** The totals of stream @p key, or NULL when it has no piece. */
const rs_stream_total_t *rs_tally_stream(const rs_tally_t *t, uint64_t key);

#endif
