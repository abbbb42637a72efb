/* The refit cost model of reshard_sim.h applied to what a plan's pieces add
 * up to (its tally, plan/tally.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/rounds.h"
#include "plan/tally.h"
#include "reshard/reshard_sim.h"
#include "util/error.h"

/* Hardware facts (data sheets) for h100 and gb200; "emulated" is the cluster
 * of bench/cluster/refit.sh on a 2-core machine: its NIC rate is the tc rate
 * the script sets (--nic-gbps gives it), its link and copy rates and
 * latencies were measured there (the gather over a namespace's loopback; raw
 * MPI against the lower bound). */
static const reshard_system_t systems[] = {
    {.name = "h100",
     .domain_size = 8,
     .nic_bytes_per_s = 50e9,
     .nic_latency_s = 5e-6,
     .nvlink_bytes_per_s = 450e9,
     .nvlink_latency_s = 2e-6,
     .copy_bytes_per_s = 1.5e12},
    {.name = "gb200",
     .domain_size = 72,
     .nic_bytes_per_s = 50e9,
     .nic_latency_s = 5e-6,
     .nvlink_bytes_per_s = 900e9,
     .nvlink_latency_s = 2e-6,
     .copy_bytes_per_s = 3e12},
    {.name = "emulated",
     .domain_size = 2,
     .nic_bytes_per_s = 800e6 / 8,
     .nic_latency_s = 1e-4,
     .nvlink_bytes_per_s = 400e6,
     .nvlink_latency_s = 1e-4,
     .copy_bytes_per_s = 1e9},
};

reshard_status_t reshard_system_lookup(const char *name, reshard_system_t *out)
{
    rs_error_clear();
    if (!name || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_system_lookup: NULL argument");
    for (size_t i = 0; i < sizeof systems / sizeof *systems; i++) {
        if (!strcmp(name, systems[i].name)) {
            *out = systems[i];
            return RESHARD_OK;
        }
    }
    return rs_error(RESHARD_ERR_INVALID_ARG, "unknown system '%s' (known: h100, gb200, emulated)",
                    name);
}

int32_t reshard_sim_infer_offset(int32_t train_world, int32_t domain_size)
{
    if (domain_size <= 1)
        return train_world;
    int64_t off = ((int64_t)train_world + domain_size - 1) / domain_size * domain_size;
    return off > INT32_MAX ? -1 : (int32_t)off;
}

/* The baseline's broadcast segment (RS_CHAIN_SEGMENT of the MPI baseline). */
#define SIM_CHAIN_SEGMENT ((double)(1 << 20))

reshard_status_t reshard_sim_baseline(const reshard_model_refit_t *r, const reshard_plan_stats_t *b,
                                      const reshard_system_t *sys, reshard_sim_baseline_t *out)
{
    if (!r || !b || !sys || !out || !(sys->nic_bytes_per_s > 0) || !(sys->nvlink_bytes_per_s > 0) ||
        !(sys->copy_bytes_per_s > 0))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_sim_baseline: NULL argument or a "
                                                 "bandwidth that is not positive");
    memset(out, 0, sizeof *out);
    const int32_t K = sys->domain_size > 1 ? sys->domain_size : 1;
    const int32_t O = r->infer_offset > 0 ? r->infer_offset : r->train_world, I = r->infer_world;
    const int32_t pp = r->train_spec.pp > 0 ? r->train_spec.pp : 1;
    const double M = (double)reshard_tensors_bytes(r->tensors);
    /* the chain of the first root; every root sits on the training side */
    out->chain_links = I;
    out->chain_network_links = O / K != 0;
    for (int32_t i = 0; i + 1 < I; i++)
        out->chain_network_links += (O + i) / K != (O + i + 1) / K;
    double chain_net = M * out->chain_network_links;
    double chain_nvl = M * (out->chain_links - out->chain_network_links);
    double g_net = (double)b->bytes_network - chain_net,
           g_nvl = (double)b->bytes_nvlink - chain_nvl;
    g_net = g_net > 0 ? g_net : 0;
    g_nvl = g_nvl > 0 ? g_nvl : 0;
    double rate = out->chain_network_links ? sys->nic_bytes_per_s : sys->nvlink_bytes_per_s;
    double t_gn = g_net / sys->nic_bytes_per_s, t_gv = g_nvl / sys->nvlink_bytes_per_s;
    out->gather_s = t_gn > t_gv ? t_gn : t_gv;
    out->chain_s = M / rate;
    int32_t tp = r->infer_spec.tp > 0 ? r->infer_spec.tp : 1;
    out->copy_s = (M + M / tp) / sys->copy_bytes_per_s;
    double bucket =
        (double)(sys->staging_bytes ? sys->staging_bytes : RESHARD_DEFAULT_STAGING_BYTES);
    out->buckets = (int64_t)((M + bucket - 1) / bucket) + pp - 1;
    double seg =
        M / (double)out->buckets < SIM_CHAIN_SEGMENT ? M / (double)out->buckets : SIM_CHAIN_SEGMENT;
    out->fill_s = (double)out->buckets *
                  ((out->chain_links - 1) * seg / rate + out->chain_links * sys->nic_latency_s);
    out->seconds = out->gather_s + out->chain_s + out->copy_s + out->fill_s;
    return RESHARD_OK;
}

/* Per-rank counters of one link class. */
typedef struct {
    const uint64_t *sent, *recv; /* the plan's tally */
    int64_t *rounds;
    double *sq_out, *sq_in; /* sums of squared stream bytes, sent and received */
} rs_link_t;

static int link_alloc(rs_link_t *l, int32_t w, const uint64_t *sent, const uint64_t *recv)
{
    l->sent = sent;
    l->recv = recv;
    l->rounds = calloc((size_t)w, sizeof *l->rounds);
    l->sq_out = calloc((size_t)w, sizeof *l->sq_out);
    l->sq_in = calloc((size_t)w, sizeof *l->sq_in);
    return l->rounds && l->sq_out && l->sq_in ? 0 : -1;
}

static void link_free(rs_link_t *l)
{
    free(l->rounds);
    free(l->sq_out);
    free(l->sq_in);
}

/* Busiest rank's time on a link class; its round count in *rounds_out. */
static double link_time(const rs_link_t *l, int32_t w, double bw, double lat, int64_t *rounds_out,
                        uint64_t *bytes_out)
{
    double worst = 0;
    int64_t rounds = 0;
    uint64_t bytes = 0;
    for (int32_t r = 0; r < w; r++) {
        uint64_t b = l->sent[r] > l->recv[r] ? l->sent[r] : l->recv[r];
        double t = (double)b / bw + (double)l->rounds[r] * lat;
        if (t > worst)
            worst = t;
        if (l->rounds[r] > rounds)
            rounds = l->rounds[r];
        if (b > bytes)
            bytes = b;
    }
    *rounds_out = rounds;
    if (bytes_out)
        *bytes_out = bytes;
    return worst;
}

/* A stream from @p sender to @p receiver of @p bytes on the wire: charge its
 * rounds to both ends. */
static void add_stream(const reshard_plan_t *plan, int32_t sender, int32_t receiver, uint64_t bytes,
                       rs_link_t *net, rs_link_t *nvl)
{
    if (sender == receiver || bytes == 0)
        return;
    uint64_t a = plan->chunk_cap[sender], b = plan->chunk_cap[receiver];
    rs_rounds_t sched = {bytes, a < b ? a : b, rs_plan_dense_rounds(plan)};
    int64_t rounds = sched.chunk ? rs_rounds_count(&sched) : 1;
    bool same = rs_domain_of(&plan->p, sender) == rs_domain_of(&plan->p, receiver);
    rs_link_t *l = same ? nvl : net;
    if (rounds > l->rounds[sender])
        l->rounds[sender] = rounds;
    if (rounds > l->rounds[receiver])
        l->rounds[receiver] = rounds;
    l->sq_out[sender] += (double)bytes * (double)bytes;
    l->sq_in[receiver] += (double)bytes * (double)bytes;
}

reshard_status_t reshard_sim_plan(const reshard_plan_t *plan, const reshard_system_t *sys,
                                  reshard_sim_t *out)
{
    rs_error_clear();
    if (!plan || !sys || !out || !(sys->nic_bytes_per_s > 0) || !(sys->nvlink_bytes_per_s > 0) ||
        !(sys->copy_bytes_per_s > 0))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_sim_plan: NULL argument or a "
                                                 "bandwidth that is not positive");
    memset(out, 0, sizeof *out);
    int32_t W = plan->p.world_size;
    const rs_tally_t *tl = plan->tally;
    rs_link_t net = {0}, nvl = {0};
    if (plan->p.my_rank != RESHARD_ALL_RANKS)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_sim_plan: the plan is rank %d's own; simulation needs a global "
                        "plan (RESHARD_ALL_RANKS)",
                        plan->p.my_rank);
    if (link_alloc(&net, W, tl->nic_send, tl->nic_recv) != 0 ||
        link_alloc(&nvl, W, tl->nvl_send, tl->nvl_recv) != 0) {
        link_free(&net);
        link_free(&nvl);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_sim_plan: out of memory");
    }
    for (int64_t i = 0; i < tl->cap; i++)
        if (tl->streams[i].key)
            add_stream(plan, rs_tally_sender(tl->streams[i].key),
                       rs_tally_receiver(tl->streams[i].key), tl->streams[i].padded, &net, &nvl);
    const uint64_t *local = tl->local, *fwd = tl->fwd, *copied = tl->copied;
    out->max_relay_bytes = plan->stats.max_relay_bytes;
    out->network_s =
        link_time(&net, W, sys->nic_bytes_per_s, sys->nic_latency_s, &out->network_rounds, NULL);
    out->nvlink_s = link_time(&nvl, W, sys->nvlink_bytes_per_s, sys->nvlink_latency_s,
                              &out->nvlink_rounds, &out->max_nvlink_bytes);
    uint64_t most_local = 0, most_copied = 0;
    for (int32_t r = 0; r < W; r++) {
        if (local[r] > most_local)
            most_local = local[r];
        if (copied[r] > most_copied)
            most_copied = copied[r];
        int32_t ranks = rs_domain_ranks(&plan->p, r); /* r as a domain */
        if (ranks > 0 && fwd[r]) {
            uint64_t b = (fwd[r] + (uint64_t)ranks - 1) / (uint64_t)ranks;
            if (b > out->nvlink_bound_bytes)
                out->nvlink_bound_bytes = b;
        }
    }
    out->local_s = (double)most_local / sys->copy_bytes_per_s;
    /* The last round's tail: a NIC shared by f streams does not finish them
     * together (TCP shares it unevenly) and no later round fills the gap; up
     * to (1 - 1/f) of the rank's round time is lost. f is the effective
     * number of streams, (sum of bytes)^2 / sum of squared bytes (two equal
     * streams: 2; one big and a few tiny: about 1). Fitted on the emulated
     * cluster (bench/cluster/refit.sh). */
    double tail = 0;
    for (int32_t r = 0; r < W; r++) {
        for (int dir = 0; dir < 2; dir++) {
            double b = (double)(dir ? net.recv[r] : net.sent[r]),
                   sq = dir ? net.sq_in[r] : net.sq_out[r];
            if (b <= 0 || sq <= 0 || net.rounds[r] <= 0)
                continue;
            double f = b * b / sq;
            double t = (1.0 - 1.0 / f) * (b / sys->nic_bytes_per_s) / (double)net.rounds[r];
            if (t > tail) {
                tail = t;
                out->network_streams = f;
            }
        }
    }
    /* Two-stage pipeline over R network rounds: the forward of chunk k goes
     * out with round k+2, so the NVLink stage trails by up to two network
     * rounds and the last chunk's forward follows the last arrival. */
    double tn = out->network_s, tv = out->nvlink_s, pipelined = tn > tv ? tn : tv;
    if (tn > 0 && tv > 0) {
        double R = (double)(out->network_rounds ? out->network_rounds : 1);
        double lag = (R < 2 ? R : 2) * tn / R;
        pipelined = tn + tv / R > tv + lag ? tn + tv / R : tv + lag;
    }
    /* Packing and unpacking overlap the transfers (chunk k+1 is packed while
     * chunk k moves) but not the first pack and the last unpack. */
    out->copy_s = (double)most_copied / sys->copy_bytes_per_s;
    double R = (double)(out->network_rounds  ? out->network_rounds
                        : out->nvlink_rounds ? out->nvlink_rounds
                                             : 1);
    double moving = pipelined > out->copy_s ? pipelined : out->copy_s;
    out->tail_s = tail;
    out->fill_s = moving + out->copy_s / R + tail - (tn > tv ? tn : tv);
    out->seconds = out->local_s + moving + out->copy_s / R + tail;
    const reshard_plan_stats_t *s = &plan->stats;
    uint64_t nic = s->nic_send_bound_bytes > s->nic_recv_bound_bytes ? s->nic_send_bound_bytes
                                                                     : s->nic_recv_bound_bytes;
    out->nic_bound_s = (double)nic / sys->nic_bytes_per_s;
    out->nvlink_bound_s = (double)out->nvlink_bound_bytes / sys->nvlink_bytes_per_s;
    out->bound_s = out->nic_bound_s > out->nvlink_bound_s ? out->nic_bound_s : out->nvlink_bound_s;
    link_free(&net);
    link_free(&nvl);
    return RESHARD_OK;
}
