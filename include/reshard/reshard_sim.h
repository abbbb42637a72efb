/*
 * reshard sim: predict how long a refit takes on a modelled cluster, before
 * running it.
 *
 *   1. A system (reshard_system_t): ranks per NVLink domain and, per link
 *      class (network, NVLink, local copy), a bandwidth and a per-message
 *      latency. "h100" and "gb200" are built in.
 *   2. reshard_sim_plan: the cost model applied to a plan's pieces.
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
 *     (just max(T_net, T_nvl) when one stage is empty); fill is what this
 *     adds to max(T_net, T_nvl). T_local = max over ranks of the bytes copied
 *     within the rank / copy bandwidth (before the loop).
 *   - Lower bound: max(NIC bound, NVLink bound), the NIC bound being
 *     max(nic_send_bound_bytes, nic_recv_bound_bytes) / NIC bandwidth (no plan
 *     can have a less busy NIC), the NVLink bound the forwarded bytes of the
 *     busiest domain spread evenly over its ranks / NVLink bandwidth (every
 *     plan that lands each byte on a rank needing it forwards that volume).
 *   - Baseline (gather + broadcast, reshard_model_baseline's byte counts):
 *     pipelined chains, so the busiest link sets the pace:
 *       max(max_nic_send, max_nic_recv) / NIC bandwidth, or
 *       model bytes / NVLink bandwidth (every inference rank receives the
 *       whole model), whichever is larger.
 * These are predictions from bandwidths and byte counts, not measurements.
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
} reshard_system_t;

/**
 * The built-in systems:
 *   "h100":  DGX H100, 8 GPUs per NVLink domain, one 400 Gb/s NIC per GPU
 *            (50e9 B/s, 5 us), NVLink 4 450e9 B/s per direction (2 us),
 *            copies 1.5e12 B/s.
 *   "gb200": GB200 NVL72, 72 GPUs per NVLink domain, one 400 Gb/s NIC per GPU
 *            (50e9 B/s, 5 us), NVLink 5 900e9 B/s per direction (2 us),
 *            copies 3e12 B/s.
 * Errors: INVALID_ARG (NULL or an unknown name; the message lists the names).
 */
reshard_status_t reshard_system_lookup(const char *name, reshard_system_t *out);

/** A prediction, in seconds (and the byte counts behind it). */
typedef struct {
    double seconds;   /**< predicted refit time */
    double network_s; /**< stage 1 alone: T_net */
    double nvlink_s;  /**< stage 2 alone: T_nvl */
    double local_s;   /**< copies within a rank: T_local */
    double fill_s;    /**< pipeline fill and drain */
    double bound_s;   /**< lower bound: max(nic_bound_s, nvlink_bound_s) */
    double nic_bound_s;
    double nvlink_bound_s;
    int64_t network_rounds;      /**< R_net */
    int64_t nvlink_rounds;       /**< R_nvl */
    uint64_t max_nvlink_bytes;   /**< busiest rank's NVLink bytes (sent or received) */
    uint64_t nvlink_bound_bytes; /**< forwarded bytes of the busiest domain / its ranks */
    uint64_t max_relay_bytes;    /**< most relay scratch one rank needs (bytes it lands
                                      for other ranks of its domain), beside staging */
} reshard_sim_t;

/**
 * Apply the cost model to @p plan (any plan: its pieces are global) on
 * @p sys. The plan's own domain_size is used for link classes; @p sys gives
 * the speeds. Errors: INVALID_ARG (NULL, a bandwidth <= 0), NOMEM.
 */
reshard_status_t reshard_sim_plan(const reshard_plan_t *plan, const reshard_system_t *sys,
                                  reshard_sim_t *out);

/** Predicted seconds of the gather+broadcast baseline from its byte counts
 *  (reshard_model_baseline) and the model's bytes. */
double reshard_sim_baseline_seconds(const reshard_plan_stats_t *baseline, uint64_t model_bytes,
                                    const reshard_system_t *sys);

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

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_SIM_H */
