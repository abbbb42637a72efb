/*
 * reshard sim: predict how long a refit takes on a modelled cluster, before
 * running it.
 *
 *   1. A system (reshard_system_t): ranks per NVLink domain and, per link
 *      class (network, NVLink, local copy), a bandwidth and a per-message
 *      latency. "h100" and "gb200" are built in.
 *   2. reshard_sim_plan: the cost model applied to a global plan's pieces
 *      (what they add up to: a summary plan does as well).
 *   3. reshard_sim_model: plan a model refit for a system (each side fills
 *      its own domains) and predict it, the gather+broadcast baseline and the
 *      lower bound.
 *
 * The cost model (every rank runs the executor's round loop):
 *   - Per rank and link class c: t_c = max(sent_c, received_c) / bw_c +
 *     rounds_c * latency_c, where rounds_c is the most chunk rounds of any of
 *     the rank's streams of class c (the messages of one round are in flight
 *     together, so a round pays one latency).
 *   - Stage 1 (network) takes T_net = max over ranks of t_network; stage 2
 *     (forwards inside a domain, and any other NVLink traffic) T_nvl = max
 *     over ranks of t_nvlink. The stages are pipelined over the R rounds of
 *     stage 1: the forward of chunk k goes out with round k+2, so
 *       predicted = T_local + max(T_net + T_nvl / R, T_nvl + min(R, 2) * T_net / R)
 *     (just max(T_net, T_nvl) when one stage is empty). Packing and
 *     unpacking (T_copy: the busiest rank's bytes that do not move straight
 *     from/to the user buffer, packed or unpacked, / copy bandwidth) overlap
 *     the transfers except for the first pack and the last unpack:
 *     and the last network round ends with a tail: a NIC shared by f streams
 *     does not finish them together, and no later round fills the gap:
 *       tail = max over ranks and directions of (1 - 1/f) x t / R
 *     with t the rank's network bytes / NIC bandwidth, R its rounds and f
 *     its effective number of streams, (sum of bytes)^2 / sum of squares
 *       predicted = T_local + max(pipelined, T_copy) + T_copy / R + tail
 *     fill is what this adds to max(T_net, T_nvl). T_local = max over ranks
 *     of the bytes copied within the rank / copy bandwidth (before the loop).
 *   - Lower bound: max(NIC bound, NVLink bound), the NIC bound being
 *     max(nic_send_bound_bytes, nic_recv_bound_bytes) / NIC bandwidth (no plan
 *     can have a less busy NIC), the NVLink bound the forwarded bytes of the
 *     busiest domain spread evenly over its ranks / NVLink bandwidth (every
 *     plan that lands each byte on a rank needing it forwards that volume).
 *   - Baseline: what reshard_baseline_execute runs (reshard_mpi.h). Bucket
 *     after bucket, with no overlap between them: the root gathers the
 *     bucket, then passes it down the chain root -> inference ranks in
 *     order (pipelined segments), then every inference rank copies its part
 *     out. Hence a sum, not a max:
 *       T_gather = max(gathered network bytes / NIC bandwidth,
 *                      gathered NVLink bytes / NVLink bandwidth)
 *                  (each root's NIC takes its stage's gather; roots in turn)
 *       T_chain  = model bytes / the chain's slowest link (the NIC when
 *                  any link of the chain crosses domains)
 *       T_copy   = (model bytes + model bytes / infer tp) / copy bandwidth
 *                  (the root assembles every bucket; the slowest inference
 *                  rank copies its part out of it)
 *       T_fill   = buckets x chain links x one segment / the chain's rate
 *       predicted = T_gather + T_chain + T_copy + T_fill
 *     with the gathered bytes from reshard_model_baseline's counts less the
 *     chain's.
 * These are predictions from bandwidths and byte counts. Which parameters
 * were measured on an emulated cluster (bench/cluster/refit.sh) and which
 * are hardware facts: see reshard_system_lookup.
 */
#ifndef RESHARD_SIM_H
#define RESHARD_SIM_H

#include "reshard/reshard.h"
#include "reshard/reshard_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A modelled cluster. Bandwidths in bytes per second per rank and direction. */
typedef struct {
    const char *name;          /**< "h100", "gb200" or the caller's */
    int32_t domain_size;       /**< ranks per NVLink domain (ranks fill domains in order) */
    double nic_bytes_per_s;    /**< network, per rank (one NIC per GPU) */
    double nic_latency_s;      /**< network, per message round */
    double nvlink_bytes_per_s; /**< NVLink, per rank */
    double nvlink_latency_s;   /**< NVLink, per message round */
    double copy_bytes_per_s;   /**< copies within a rank (device memory) */
    uint64_t staging_bytes;    /**< staging per rank of the refit modelled (its chunk
                                    size; the baseline's bucket size); 0 = the default,
                                    RESHARD_DEFAULT_STAGING_BYTES */
} reshard_system_t;

/**
 * The built-in systems:
 *   "h100":  DGX H100, 8 GPUs per NVLink domain, one 400 Gb/s NIC per GPU
 *            (50e9 B/s, 5 us), NVLink 4 450e9 B/s per direction (2 us),
 *            copies 1.5e12 B/s.
 *   "gb200": GB200 NVL72, 72 GPUs per NVLink domain, one 400 Gb/s NIC per GPU
 *            (50e9 B/s, 5 us), NVLink 5 900e9 B/s per direction (2 us),
 *            copies 3e12 B/s.
 *   (hardware facts from the data sheets)
 *   "emulated": the emulated cluster of bench/cluster/refit.sh on a 2-core
 *            machine: 2 ranks per domain, an 800 Mbit/s NIC (1e8 B/s, the tc
 *            rate; the script passes its own), loopback 4e8 B/s per rank,
 *            copies 1e9 B/s, 100 us per message round (measured there).
 * Errors: INVALID_ARG (NULL or an unknown name; the message lists the names).
 */
reshard_status_t reshard_system_lookup(const char *name, reshard_system_t *out);

/** A prediction, in seconds (and the byte counts behind it). */
typedef struct {
    double seconds;   /**< predicted refit time */
    double network_s; /**< stage 1 alone: T_net */
    double nvlink_s;  /**< stage 2 alone: T_nvl */
    double local_s;   /**< copies within a rank: T_local */
    double copy_s;    /**< packing and unpacking of the busiest rank: T_copy */
    double tail_s;    /**< the last network round's tail */
    double fill_s;    /**< pipeline fill and drain */
    double bound_s;   /**< lower bound: max(nic_bound_s, nvlink_bound_s) */
    double nic_bound_s;
    double nvlink_bound_s;
    int64_t network_rounds;      /**< R_net */
    int64_t nvlink_rounds;       /**< R_nvl */
    double network_streams;      /**< f of the rank with the longest tail (see above) */
    uint64_t max_nvlink_bytes;   /**< busiest rank's NVLink bytes (sent or received) */
    uint64_t nvlink_bound_bytes; /**< forwarded bytes of the busiest domain / its ranks */
    uint64_t max_relay_bytes;    /**< most relay scratch one rank needs (bytes it lands
                                      for other ranks of its domain), beside staging */
    /* reshard_sim_delta_plan only (0 otherwise): */
    double delta_wire_ratio; /**< wire bytes per stream byte (the encoding's size model) */
    double codec_s;          /**< the CPU work of the busiest rank (copies, encode, apply,
                                  hash; in copy_s too) */
} reshard_sim_t;

/**
 * Apply the cost model to @p plan, a RESHARD_ALL_RANKS plan (full or
 * summary), on @p sys. The plan's own domain_size is used for link classes;
 * @p sys gives the speeds. Errors: INVALID_ARG (NULL, a bandwidth <= 0, a
 * rank's own plan), NOMEM.
 */
reshard_status_t reshard_sim_plan(const reshard_plan_t *plan, const reshard_system_t *sys,
                                  reshard_sim_t *out);

/** What a delta refit is predicted for (reshard_sim_delta_plan). Zero fields take
 *  the defaults. */
typedef struct {
    double change_fraction;    /**< fraction of the words that changed, [0, 1] */
    uint32_t word;             /**< bytes per compared word (default 2: bf16) */
    double encode_bytes_per_s; /**< one rank's encode, stream bytes per second (default
                                    RESHARD_SIM_DELTA_ENCODE_BYTES_PER_S) */
    double apply_bytes_per_s;  /**< one rank's apply (default ..._APPLY_BYTES_PER_S) */
    double copy_bytes_per_s;   /**< one rank's copies of stream bytes: the sender's pack,
                                    the receiver's read of the previous bytes and its write
                                    back (default ..._COPY_BYTES_PER_S) */
    double hash_bytes_per_s;   /**< one rank's verification hash (default
                                    ..._HASH_BYTES_PER_S) */
    int32_t no_verify;         /**< nonzero: a plan without verification (delta_checksum
                                    0); zero: verified, the default of delta plans */
} reshard_sim_delta_params_t;

/** CPU rates assumed unless given or measured (reshard_sim_delta_measure): a 2-core x86-64
 *  machine, 1 MiB chunks of bf16 at 1% changed, from DRAM (docs/benchmarks.md), rounded
 *  down. The device kernels have never run: on device memory give rates
 *  (docs/delta-verification.md says what is assumed there). */
#define RESHARD_SIM_DELTA_ENCODE_BYTES_PER_S 3e9
#define RESHARD_SIM_DELTA_APPLY_BYTES_PER_S 10e9
#define RESHARD_SIM_DELTA_COPY_BYTES_PER_S 5e9
#define RESHARD_SIM_DELTA_HASH_BYTES_PER_S 8e9

/** Most ranks reshard_sim_delta_measure runs at once. */
#define RESHARD_SIM_MEASURE_MAX_RANKS 64

/**
 * Measure the CPU rates of a delta round on this machine into @p out (change_fraction,
 * word and the four rates set, the rest zero): memcpy, rs_delta_encode, rs_delta_apply
 * and the verification hash (XXH3), each over 64 MiB in @p chunk-byte chunks (the plan's
 * chunk: 1 MiB is typical) of @p word-byte words of which @p change_fraction changed,
 * scattered. @p ranks threads (1 to RESHARD_SIM_MEASURE_MAX_RANKS) measure at once, each
 * with its own memory, every pass started together: the rate of a rank when that many
 * ranks of one machine work at once (the emulated cluster runs every rank on one
 * machine; a real one gives each GPU's rank its own cores: 1). Each rate is the slowest
 * rank's fastest of three passes. Takes about a second per rank per core and 320 MiB per
 * rank. Any thread, local. Errors: INVALID_ARG (a fraction outside [0, 1], a word other
 * than 1, 2, 4 or 8, a chunk under one word, ranks out of range, NULL), NOMEM, VERIFY
 * (the codec's round trip was wrong).
 */
reshard_status_t reshard_sim_delta_measure(double change_fraction, uint32_t word, uint64_t chunk,
                                           int32_t ranks, reshard_sim_delta_params_t *out);

/**
 * The expected bytes on the wire (its 16-byte header included) of one delta chunk of
 * @p len bytes of @p word-byte words (1, 2, 4 or 8; other values count as 1) when each
 * word changed with probability @p change_fraction, independently (scattered changes,
 * as RL updates make them): the smallest of the expected sizes of the four kinds of
 * docs/delta-reference.md "Chunk format" (gaps: c (E[varint of a geometric gap] + word) for c
 * changed words). The encoder writes the smallest kind of each chunk, so its expected
 * size is at most this: the encoding's own bound for that changed fraction. Pure.
 */
double reshard_sim_delta_chunk_bytes(uint64_t len, uint32_t word, double change_fraction);

/**
 * The cost model for a delta refit of @p plan (a RESHARD_ALL_RANKS plan, as
 * reshard_sim_plan) at @p dp's changed fraction, every destination at the senders'
 * version: reshard_sim_plan with every stream's bytes scaled by the wire bytes per
 * stream byte of the plan's smallest chunk (reshard_sim_delta_chunk_bytes;
 * delta_wire_ratio), two exchanges per round (headers, then bodies: twice the
 * latency), plus the CPU work the delta round loop does not overlap with the transfers
 * (codec_s), that of the busiest rank: per stream byte it sends a pack (copy), an encode
 * and a hash, per stream byte it receives a read of the previous bytes, an apply, a hash
 * and a write back (two copies); chunks of the dense kind (where the size model expects
 * it) skip the hash and the read (src/exec/exec.c run_rounds_delta). Receivers apply a
 * round while senders encode the next, so distinct senders' and receivers' work overlap.
 * The hash is left out with no_verify. bound_s is the dense bound scaled the same way.
 * Errors: INVALID_ARG (NULL, a fraction outside [0, 1], a rank's own plan, a bandwidth
 * <= 0), NOMEM.
 */
reshard_status_t reshard_sim_delta_plan(const reshard_plan_t *plan, const reshard_system_t *sys,
                                        const reshard_sim_delta_params_t *dp, reshard_sim_t *out);

/** The baseline's prediction, in seconds (see the cost model above). */
typedef struct {
    double seconds;
    double gather_s, chain_s, copy_s, fill_s;
    int64_t buckets;     /**< buckets of at most staging_bytes (per root, in turn) */
    int32_t chain_links; /**< links of one chain; chain_network_links cross domains */
    int32_t chain_network_links;
} reshard_sim_baseline_t;

/**
 * Predict the gather+broadcast baseline of @p refit on @p sys from its byte
 * counts @p counts (reshard_model_baseline with the system's domain size).
 * Roots are the first ranks of the pipeline stages, the chain runs through
 * the inference ranks from refit->infer_offset (or train_world when 0).
 * Errors: INVALID_ARG (NULL, a bandwidth that is not positive).
 */
reshard_status_t reshard_sim_baseline(const reshard_model_refit_t *refit,
                                      const reshard_plan_stats_t *counts,
                                      const reshard_system_t *sys, reshard_sim_baseline_t *out);

/** First inference rank when each side fills its own domains: the training
 *  world rounded up to a whole number of domains; -1 past INT32_MAX. */
int32_t reshard_sim_infer_offset(int32_t train_world, int32_t domain_size);

/** Everything reshard_sim_model predicts for one refit. */
typedef struct {
    int32_t train_world, infer_world;
    int32_t infer_offset; /**< first inference rank (reshard_sim_infer_offset) */
    uint64_t model_bytes;
    double plan_seconds;           /**< wall time spent planning */
    reshard_plan_stats_t stats;    /**< the plan's counters */
    reshard_plan_stats_t baseline; /**< gather+broadcast byte counts */
    reshard_sim_t sim;             /**< the plan's prediction and the lower bound */
    double baseline_s;             /**< predicted baseline seconds */
    reshard_sim_baseline_t base;   /**< the baseline's prediction, part by part */
} reshard_sim_refit_t;

/**
 * Build the model's catalogue and layouts (training ranks [0, T), inference
 * ranks from reshard_sim_infer_offset(T, domain size)), plan the refit for
 * every rank with the system's domain size, and predict it.
 * Errors: INVALID_ARG (negative domain size, or inference ranks placed past
 * RESHARD_MAX_WORLD_SIZE), those of reshard_model_* and reshard_plan_create.
 * Local.
 */
reshard_status_t reshard_sim_model(const reshard_model_t *model, const reshard_train_spec_t *train,
                                   const reshard_infer_spec_t *infer, const reshard_system_t *sys,
                                   reshard_sim_refit_t *out);

/**
 * reshard_sim_model, and from the same plan a delta refit's prediction
 * (reshard_sim_delta_plan with @p dp) into *@p delta. Errors: those of
 * reshard_sim_model and reshard_sim_delta_plan. Local.
 */
reshard_status_t reshard_sim_model_delta(const reshard_model_t *model,
                                         const reshard_train_spec_t *train,
                                         const reshard_infer_spec_t *infer,
                                         const reshard_system_t *sys,
                                         const reshard_sim_delta_params_t *dp,
                                         reshard_sim_refit_t *out, reshard_sim_t *delta);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_SIM_H */
