/* The refit cost model of reshard_sim.h applied to a plan's pieces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/topo.h"
#include "reshard/reshard_sim.h"
#include "util/error.h"

reshard_status_t reshard_system_lookup(const char *name, reshard_system_t *out)
{
    rs_error_clear();
    if (!name || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_system_lookup: NULL argument");
    if (!strcmp(name, "h100")) {
        *out = (reshard_system_t){"h100", 8, 50e9, 5e-6, 450e9, 2e-6, 1.5e12};
        return RESHARD_OK;
    }
    if (!strcmp(name, "gb200")) {
        *out = (reshard_system_t){"gb200", 72, 50e9, 5e-6, 900e9, 2e-6, 3e12};
        return RESHARD_OK;
    }
    return rs_error(RESHARD_ERR_INVALID_ARG, "unknown system '%s' (known: h100, gb200)", name);
}

int32_t reshard_sim_infer_offset(int32_t train_world, int32_t domain_size)
{
    if (domain_size <= 1)
        return train_world;
    int64_t off = ((int64_t)train_world + domain_size - 1) / domain_size * domain_size;
    return off > INT32_MAX ? -1 : (int32_t)off;
}

double reshard_sim_baseline_seconds(const reshard_plan_stats_t *b, uint64_t model_bytes,
                                    const reshard_system_t *sys)
{
    if (!b || !sys || !(sys->nic_bytes_per_s > 0) || !(sys->nvlink_bytes_per_s > 0))
        return 0;
    uint64_t nic = b->max_nic_send_bytes > b->max_nic_recv_bytes ? b->max_nic_send_bytes
                                                                 : b->max_nic_recv_bytes;
    double t_nic = (double)nic / sys->nic_bytes_per_s;
    double t_nvl = (double)model_bytes / sys->nvlink_bytes_per_s;
    return t_nic > t_nvl ? t_nic : t_nvl;
}

/* Per-rank counters of one link class. */
typedef struct {
    uint64_t *sent, *recv;
    int64_t *rounds;
} rs_link_t;

static int link_alloc(rs_link_t *l, int32_t w)
{
    l->sent = calloc((size_t)w, sizeof *l->sent);
    l->recv = calloc((size_t)w, sizeof *l->recv);
    l->rounds = calloc((size_t)w, sizeof *l->rounds);
    return l->sent && l->recv && l->rounds ? 0 : -1;
}

static void link_free(rs_link_t *l)
{
    free(l->sent);
    free(l->recv);
    free(l->rounds);
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

/* A stream (one (stage, sender, receiver) run of pieces) ended: charge its
 * rounds to both ends. */
static void end_stream(const reshard_plan_t *plan, const rs_piece_t *p, uint64_t bytes,
                       rs_link_t *net, rs_link_t *nvl)
{
    if (p->sender == p->receiver || bytes == 0)
        return;
    uint64_t a = plan->chunk_cap[p->sender], b = plan->chunk_cap[p->receiver];
    uint64_t chunk = a < b ? a : b;
    int64_t rounds = chunk ? (int64_t)((bytes + chunk - 1) / chunk) : 1;
    bool same = rs_domain_of(&plan->p, p->sender) == rs_domain_of(&plan->p, p->receiver);
    rs_link_t *l = same ? nvl : net;
    if (rounds > l->rounds[p->sender])
        l->rounds[p->sender] = rounds;
    if (rounds > l->rounds[p->receiver])
        l->rounds[p->receiver] = rounds;
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
    rs_link_t net = {0}, nvl = {0};
    uint64_t *local = calloc((size_t)W, sizeof *local);
    uint64_t *fwd = calloc((size_t)W, sizeof *fwd); /* per domain */
    if (link_alloc(&net, W) != 0 || link_alloc(&nvl, W) != 0 || !local || !fwd) {
        link_free(&net);
        link_free(&nvl);
        free(local);
        free(fwd);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_sim_plan: out of memory");
    }
    uint64_t run = 0;
    for (int64_t i = 0; i < plan->npieces; i++) {
        const rs_piece_t *p = &plan->pieces[i];
        if (i > 0) {
            const rs_piece_t *q = &plan->pieces[i - 1];
            if (q->stage != p->stage || q->sender != p->sender || q->receiver != p->receiver) {
                end_stream(plan, q, run, &net, &nvl);
                run = 0;
            }
        }
        run += rs_piece_stream_bytes(p);
        int32_t ds = rs_domain_of(&plan->p, p->sender), dr = rs_domain_of(&plan->p, p->receiver);
        if (p->sender == p->receiver) {
            local[p->sender] += p->bytes;
        } else if (ds == dr) {
            nvl.sent[p->sender] += p->bytes;
            nvl.recv[p->receiver] += p->bytes;
            if (p->stage == RS_STAGE_FORWARD)
                fwd[dr] += p->bytes;
        } else {
            net.sent[p->sender] += p->bytes;
            net.recv[p->receiver] += p->bytes;
        }
    }
    if (plan->npieces > 0)
        end_stream(plan, &plan->pieces[plan->npieces - 1], run, &net, &nvl);
    out->max_relay_bytes = plan->stats.max_relay_bytes;
    out->network_s =
        link_time(&net, W, sys->nic_bytes_per_s, sys->nic_latency_s, &out->network_rounds, NULL);
    out->nvlink_s = link_time(&nvl, W, sys->nvlink_bytes_per_s, sys->nvlink_latency_s,
                              &out->nvlink_rounds, &out->max_nvlink_bytes);
    uint64_t most_local = 0;
    for (int32_t r = 0; r < W; r++) {
        if (local[r] > most_local)
            most_local = local[r];
        int32_t ranks = rs_domain_ranks(&plan->p, r); /* r as a domain */
        if (ranks > 0 && fwd[r]) {
            uint64_t b = (fwd[r] + (uint64_t)ranks - 1) / (uint64_t)ranks;
            if (b > out->nvlink_bound_bytes)
                out->nvlink_bound_bytes = b;
        }
    }
    out->local_s = (double)most_local / sys->copy_bytes_per_s;
    /* Two-stage pipeline over R network rounds: the forward of chunk k goes
     * out with round k+2, so the NVLink stage trails by up to two network
     * rounds and the last chunk's forward follows the last arrival. */
    double tn = out->network_s, tv = out->nvlink_s, pipelined = tn > tv ? tn : tv;
    if (tn > 0 && tv > 0) {
        double R = (double)(out->network_rounds ? out->network_rounds : 1);
        double lag = (R < 2 ? R : 2) * tn / R;
        pipelined = tn + tv / R > tv + lag ? tn + tv / R : tv + lag;
    }
    out->fill_s = pipelined - (tn > tv ? tn : tv);
    out->seconds = out->local_s + pipelined;
    const reshard_plan_stats_t *s = &plan->stats;
    uint64_t nic = s->nic_send_bound_bytes > s->nic_recv_bound_bytes ? s->nic_send_bound_bytes
                                                                     : s->nic_recv_bound_bytes;
    out->nic_bound_s = (double)nic / sys->nic_bytes_per_s;
    out->nvlink_bound_s = (double)out->nvlink_bound_bytes / sys->nvlink_bytes_per_s;
    out->bound_s = out->nic_bound_s > out->nvlink_bound_s ? out->nic_bound_s : out->nvlink_bound_s;
    link_free(&net);
    link_free(&nvl);
    free(local);
    free(fwd);
    return RESHARD_OK;
}
