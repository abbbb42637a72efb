/* Delta refit predictions (reshard_sim.h): the dense cost model with the bytes a delta
 * plan puts on the wire (the encoding's size model, exec/delta_codec.h), two exchanges
 * per round, and the CPU work (copies, encode, apply, hash) the round loop does not
 * overlap. */
#include <math.h>
#include <string.h>

#include "exec/delta_codec.h"
#include "plan/tally.h"
#include "reshard/reshard_sim.h"
#include "util/error.h"

double reshard_sim_delta_chunk_bytes(uint64_t len, uint32_t word, double change_fraction)
{
    return rs_delta_expected_bytes(len, word, change_fraction);
}

reshard_status_t reshard_sim_delta_plan(const reshard_plan_t *plan, const reshard_system_t *sys,
                                        const reshard_sim_delta_params_t *dp, reshard_sim_t *out)
{
    rs_error_clear();
    if (!plan || !sys || !dp || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_sim_delta_plan: NULL argument");
    if (!(dp->change_fraction >= 0 && dp->change_fraction <= 1))
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_sim_delta_plan: change_fraction %g is outside [0, 1]",
                        dp->change_fraction);
    if (plan->p.my_rank != RESHARD_ALL_RANKS)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_sim_delta_plan: the plan is rank %d's own; simulation needs a "
                        "global plan (RESHARD_ALL_RANKS)",
                        plan->p.my_rank);
#define RATE(f, d) (dp->f > 0 ? dp->f : (d))
    const double enc = RATE(encode_bytes_per_s, RESHARD_SIM_DELTA_ENCODE_BYTES_PER_S),
                 app = RATE(apply_bytes_per_s, RESHARD_SIM_DELTA_APPLY_BYTES_PER_S),
                 cpy = RATE(copy_bytes_per_s, RESHARD_SIM_DELTA_COPY_BYTES_PER_S),
                 hsh = dp->no_verify ? INFINITY
                                     : RATE(hash_bytes_per_s, RESHARD_SIM_DELTA_HASH_BYTES_PER_S);
#undef RATE
    const uint32_t word = dp->word ? dp->word : 2;
    /* the wire bytes per stream byte for the plan's chunk (the smallest any rank stages:
     * the most header bytes per chunk) */
    const int32_t W = plan->p.world_size;
    uint64_t chunk = 0;
    for (int32_t r = 0; r < W; r++)
        if (plan->chunk_cap[r] && (!chunk || plan->chunk_cap[r] < chunk))
            chunk = plan->chunk_cap[r];
    chunk = chunk < word ? word : chunk;
    double ratio = rs_delta_expected_bytes(chunk, word, dp->change_fraction) / (double)chunk;
    reshard_system_t s = *sys;
    s.nic_bytes_per_s /= ratio;
    s.nvlink_bytes_per_s /= ratio;
    s.nic_latency_s *= 2; /* a round: the headers, then the bodies */
    s.nvlink_latency_s *= 2;
    reshard_status_t st = reshard_sim_plan(plan, &s, out);
    if (st != RESHARD_OK)
        return st;
    /* A rank's CPU work per stream byte: a sender packs, encodes and (verified) hashes; a
     * receiver reads the previous bytes back, applies, hashes and writes back. A dense
     * chunk (the kind the size model expects at this fraction) is neither hashed nor read
     * back. Within a round every encode precedes the exchanges and every apply follows
     * them, but receivers apply round k while senders encode round k + 1: the round loop
     * takes the busiest rank's work, not the sum of the busiest sender's and receiver's. */
    const bool dense = ratio * (double)chunk >= (double)(chunk + RS_DELTA_HEADER_BYTES) - 0.5;
    const double per_send = 1 / cpy + 1 / enc + (dense ? 0 : 1 / hsh),
                 per_recv = (dense ? 1 : 2) / cpy + 1 / app + (dense ? 0 : 1 / hsh);
    const rs_tally_t *tl = plan->tally;
    double codec = 0;
    for (int32_t r = 0; r < W; r++) {
        double t = (double)(tl->nic_send[r] + tl->nvl_send[r]) * per_send +
                   (double)(tl->nic_recv[r] + tl->nvl_recv[r]) * per_recv;
        codec = t > codec ? t : codec;
    }
    out->copy_s += codec;
    out->fill_s += codec;
    out->seconds += codec;
    out->delta_wire_ratio = ratio;
    out->codec_s = codec;
    return RESHARD_OK;
}
