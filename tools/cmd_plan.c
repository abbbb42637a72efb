/* reshard plan: build the refit plan of a model and print its byte counts
 * next to those of gather+broadcast. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_sim.h"

typedef struct {
    const char *model, *train, *infer, *system, *dtype, *infer_dtype, *fp8_scale, *eplb_map;
    int json, mtp;
    long layers, domain_size, rank;
    double staging_mb, relay_mb;
} plan_args_t;

static void plan_usage(FILE *out)
{
    fprintf(
        out,
        "usage: reshard plan --model M --train SPEC --infer SPEC [options]\n"
        "  --model M          shipped model name or path to a HF config.json\n"
        "  --train SPEC       Megatron sizes, e.g. tp=4,pp=8,ep=16,dp=4 (+ cp=, etp=\n"
        "                     (default tp), vpp=, first=, last= (first/last stage\n"
        "                     layers; needed when pp does not divide the layers),\n"
        "                     convention=megatron-lm|megatron-bridge)\n"
        "  --infer SPEC       vLLM sizes, e.g. tp=8,engines=16 (+ dp= (vLLM's own data\n"
        "                     parallelism inside an engine), ep=on, vllm=0.24|0.25,\n"
        "                     redundant=N: EPLB's redundant experts)\n" CLI_INFER_SGLANG_HELP
        "  --eplb-map FILE    EPLB physical-to-logical map, JSON: a list (every MoE\n"
        "                     layer) or a list of per-layer lists (the first of {\"maps\"})\n"
        "  --json             print one JSON object instead of the summary\n"
        "  --layers K         keep only the first K decoder layers\n"
        "  --mtp              include the multi-token-prediction layers\n"
        "  --dtype bf16|fp8   weight form (fp8: e4m3 + 128x128 block scales)\n" CLI_INFER_DTYPE_HELP
        "  --domain-size N    ranks per NVLink domain (default 1: every rank its own);\n"
        "                     each side starts at a domain boundary, so inference\n"
        "                     ranks start at the first boundary after training\n"
        "                     (reshard run, bound to its MPI world, starts them\n"
        "                     right after the training ranks)\n"
        "  --system S         h100 (8 ranks per domain) or gb200 (72)\n"
        "  --rank R           build only rank R's own plan, as rank R would (from\n"
        "                     its part of the layouts), and\n"
        "                     print its own counters and planning time\n"
        "  --staging-mb S     staging memory bound per rank in MiB (default 256)\n"
        "  --relay-mb S       relay scratch bound per rank in MiB (default: none;\n"
        "                     less relaying may leave a busier NIC)\n");
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "reshard plan: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see 'reshard plan --help')\n");
    va_end(ap);
    return 2;
}

static int parse_args(int argc, char **argv, plan_args_t *a)
{
    *a = (plan_args_t){.dtype = "bf16",
                       .rank = RESHARD_ALL_RANKS,
                       .domain_size = -1,
                       .staging_mb = -1,
                       .relay_mb = -1};
    const cli_opt_t opts[] = {{"--model", CLI_STRING, &a->model, 0, 0},
                              {"--train", CLI_STRING, &a->train, 0, 0},
                              {"--infer", CLI_STRING, &a->infer, 0, 0},
                              {"--dtype", CLI_STRING, &a->dtype, 0, 0},
                              {"--infer-dtype", CLI_STRING, &a->infer_dtype, 0, 0},
                              {"--fp8-scale", CLI_STRING, &a->fp8_scale, 0, 0},
                              {"--eplb-map", CLI_STRING, &a->eplb_map, 0, 0},
                              {"--system", CLI_STRING, &a->system, 0, 0},
                              {"--json", CLI_FLAG, &a->json, 0, 0},
                              {"--mtp", CLI_FLAG, &a->mtp, 0, 0},
                              {"--layers", CLI_INT, &a->layers, 1, 0},
                              {"--domain-size", CLI_INT, &a->domain_size, 1, 0},
                              {"--rank", CLI_INT, &a->rank, 0, 0},
                              {"--staging-mb", CLI_NUMBER, &a->staging_mb, STAGING_MB_MIN, 1 << 20},
                              {"--relay-mb", CLI_NUMBER, &a->relay_mb, 0, 1 << 30}};
    char err[512];
    int rc = cli_parse(argc, argv, opts, sizeof opts / sizeof *opts, err, sizeof err);
    if (rc == 1)
        plan_usage(stdout);
    if (rc)
        return rc == 1 ? 1 : bad("%s", err);
    if (!a->model || !a->train || !a->infer)
        return bad("--model, --train and --infer are required");
    if (strcmp(a->dtype, "bf16") && strcmp(a->dtype, "fp8"))
        return bad("--dtype '%s' must be bf16 or fp8", a->dtype);
    reshard_model_options_t probe = {0};
    if (cli_infer_dtype(a->infer_dtype, a->fp8_scale, &probe, err, sizeof err))
        return bad("%s", err);
    if (a->system) {
        if (a->domain_size > 0)
            return bad("give --system or --domain-size, not both");
        a->domain_size = cli_system_domain_size(a->system);
        if (a->domain_size < 0)
            return bad("--system '%s' is not h100 or gb200", a->system);
    }
    if (a->domain_size < 0)
        a->domain_size = 1;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what, reshard_status_t s)
{
    fprintf(stderr, "reshard plan: %s: %s: %s\n", what, reshard_status_string(s),
            reshard_last_error());
    return 1;
}

static json_t *counts_json(const reshard_plan_stats_t *s, const reshard_plan_stats_t *bounds)
{
    json_t *o = json_object();
    json_object_set_new(o, "transfers", json_integer(s->transfers));
    json_object_set_new(o, "bytes_total", json_integer((json_int_t)s->bytes_total));
    json_object_set_new(o, "bytes_network", json_integer((json_int_t)s->bytes_network));
    json_object_set_new(o, "bytes_nvlink", json_integer((json_int_t)s->bytes_nvlink));
    json_object_set_new(o, "bytes_lower_bound",
                        json_integer((json_int_t)bounds->bytes_lower_bound));
    json_object_set_new(o, "max_nic_send_bytes", json_integer((json_int_t)s->max_nic_send_bytes));
    json_object_set_new(o, "max_nic_recv_bytes", json_integer((json_int_t)s->max_nic_recv_bytes));
    json_object_set_new(o, "nic_send_bound_bytes",
                        json_integer((json_int_t)bounds->nic_send_bound_bytes));
    json_object_set_new(o, "nic_recv_bound_bytes",
                        json_integer((json_int_t)bounds->nic_recv_bound_bytes));
    return o;
}

/* One rank's own plan: its counters (reshard_plan_stats_t), not global ones. */
static void print_rank(const plan_args_t *a, int32_t world, int32_t infer_offset,
                       const reshard_plan_stats_t *st, double plan_s, double layout_s)
{
    if (a->json) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(a->model));
        json_object_set_new(o, "domain_size", json_integer(a->domain_size));
        json_object_set_new(o, "rank", json_integer(a->rank));
        json_object_set_new(o, "world", json_integer(world));
        json_object_set_new(o, "infer_offset", json_integer(infer_offset));
        json_object_set_new(o, "rank_bytes_sent_network",
                            json_integer((json_int_t)st->bytes_network));
        json_object_set_new(o, "rank_bytes_sent_nvlink",
                            json_integer((json_int_t)st->bytes_nvlink));
        json_object_set_new(o, "rank_bytes_local", json_integer((json_int_t)st->bytes_local));
        json_object_set_new(o, "rank_bytes_recv_network",
                            json_integer((json_int_t)st->max_nic_recv_bytes));
        json_object_set_new(o, "rank_bytes_written", json_integer((json_int_t)st->bytes_total));
        json_object_set_new(o, "rank_send_streams", json_integer(st->transfers));
        json_object_set_new(o, "rank_pieces_sent", json_integer(st->pieces));
        json_object_set_new(o, "rank_relay_bytes", json_integer((json_int_t)st->max_relay_bytes));
        json_object_set_new(o, "plan_seconds", json_real(plan_s));
        json_object_set_new(o, "layout_seconds", json_real(layout_s));
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("\n");
        json_decref(o);
        return;
    }
    printf("plan     rank %ld only: %.3f s (layouts %.3f s)\n", a->rank, plan_s, layout_s);
    printf("  sends    %.3f GB over the network, %.3f GB over NVLink, in %lld streams "
           "(%lld pieces); copies %.3f GB locally\n",
           (double)st->bytes_network / 1e9, (double)st->bytes_nvlink / 1e9,
           (long long)st->transfers, (long long)st->pieces, (double)st->bytes_local / 1e9);
    printf("  receives %.3f GB over the network; writes %.3f GB into its buffers; relays "
           "%.3f GB\n",
           (double)st->max_nic_recv_bytes / 1e9, (double)st->bytes_total / 1e9,
           (double)st->max_relay_bytes / 1e9);
}

static void row(const char *what, uint64_t a, uint64_t b)
{
    printf("  %-22s %14.3f GB %14.3f GB %8.2fx\n", what, (double)a / 1e9, (double)b / 1e9,
           a ? (double)b / (double)a : 0.0);
}

int cmd_plan(int argc, char **argv)
{
    plan_args_t a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc == 1 ? 0 : rc;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_status_t s = reshard_train_spec_parse(a.train, &ts);
    if (s != RESHARD_OK)
        return bad("%s", reshard_last_error());
    s = reshard_infer_spec_parse(a.infer, &is);
    if (s != RESHARD_OK)
        return bad("%s", reshard_last_error());
    int32_t tw = reshard_train_world(&ts), iw = reshard_infer_world(&is);
    if (!a.system && a.domain_size > (tw > iw ? tw : iw))
        return bad("--domain-size %ld is larger than either side (%d training, %d inference "
                   "ranks): each side starts at a domain boundary, so a larger domain only adds "
                   "empty ranks",
                   a.domain_size, tw, iw);
    reshard_model_options_t mo = {.mtp = a.mtp,
                                  .dtype = strcmp(a.dtype, "fp8") ? RESHARD_BF16 : RESHARD_FP8_E4M3,
                                  .layers = (int32_t)a.layers};
    char qerr[256];
    cli_infer_dtype(a.infer_dtype, a.fp8_scale, &mo, qerr, sizeof qerr);
    reshard_model_t *model = NULL;
    s = reshard_model_load(a.model, &mo, &model);
    if (s != RESHARD_OK)
        return fail("model", s);

    double t0 = now_s();
    reshard_model_refit_t refit;
    /* with NVLink domains each side fills its own domains */
    int32_t offset = a.domain_size > 1 ? reshard_sim_infer_offset(tw, (int32_t)a.domain_size) : -1;
    int32_t world = (offset >= 0 ? offset : tw) + iw;
    if (a.rank >= world) {
        fprintf(stderr, "reshard plan: --rank %ld is outside [0, %d)\n", a.rank, world);
        reshard_model_destroy(model);
        return 2;
    }
    cli_eplb_maps_t maps = {0};
    char merr[512];
    if (a.eplb_map && cli_eplb_maps(a.eplb_map, &maps, merr, sizeof merr)) {
        reshard_model_destroy(model);
        return bad("%s", merr);
    }
    cli_eplb_use(&maps, 0, &is);
    /* a rank's own plan needs only its part of the layouts (what it sends,
     * and what its domain receives) */
    s = a.rank == RESHARD_ALL_RANKS
            ? reshard_model_refit_create_at(model, &ts, &is, offset, &refit)
            : reshard_model_refit_create_scoped(model, &ts, &is, offset, (int32_t)a.rank,
                                                (int32_t)a.domain_size, &refit);
    if (s != RESHARD_OK) {
        reshard_model_destroy(model);
        cli_eplb_free(&maps);
        return fail("layouts", s);
    }
    double t1 = now_s();
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                .world_size = world,
                                .my_rank = (int32_t)a.rank,
                                .domain_size = (int32_t)a.domain_size};
    if (a.rank == RESHARD_ALL_RANKS) { /* counters only: no pieces held */
        pp.field_mask |= RESHARD_PLAN_PARAM_SUMMARY;
        pp.summary = 1;
    }
    if (a.staging_mb >= 0) {
        pp.field_mask |= RESHARD_PLAN_PARAM_STAGING_BYTES;
        pp.staging_bytes = (uint64_t)(a.staging_mb * 1048576.0);
    }
    if (a.relay_mb >= 0) {
        pp.field_mask |= RESHARD_PLAN_PARAM_RELAY_BYTES;
        pp.relay_bytes = (uint64_t)(a.relay_mb * 1048576.0);
    }
    reshard_plan_t *plan = NULL;
    s = reshard_plan_create(refit.train, refit.infer, &pp, &plan);
    double t2 = now_s();
    reshard_plan_stats_t st, bl;
    if (s == RESHARD_OK)
        s = reshard_plan_get_stats(plan, &st);
    if (s == RESHARD_OK && a.rank != RESHARD_ALL_RANKS) {
        print_rank(&a, world, refit.infer_offset, &st, t2 - t1, t1 - t0);
        rc = 0;
        goto out;
    }
    if (s == RESHARD_OK)
        s = reshard_model_baseline(model, &refit, (int32_t)a.domain_size, &bl);
    if (s != RESHARD_OK) {
        rc = fail("plan", s);
        goto out;
    }
    uint64_t model_bytes = reshard_tensors_bytes(refit.tensors);
    reshard_model_info_t mi;
    reshard_model_info(model, &mi);
    if (a.json) {
        json_t *o = json_object();
        char buf[192];
        json_object_set_new(o, "model", json_string(a.model));
        json_object_set_new(o, "train", json_string(reshard_train_spec_str(&ts, buf, sizeof buf)));
        json_object_set_new(o, "infer", json_string(reshard_infer_spec_str(&is, buf, sizeof buf)));
        json_object_set_new(o, "dtype", json_string(a.dtype));
        json_object_set_new(o, "infer_dtype", json_string(a.infer_dtype ? a.infer_dtype : "bf16"));
        json_object_set_new(o, "domain_size", json_integer(a.domain_size));
        json_object_set_new(o, "model_bytes", json_integer((json_int_t)model_bytes));
        json_object_set_new(o, "params", json_integer((json_int_t)mi.params));
        json_object_set_new(o, "train_world", json_integer(refit.train_world));
        json_object_set_new(o, "infer_world", json_integer(refit.infer_world));
        json_object_set_new(o, "infer_offset", json_integer(refit.infer_offset));
        json_t *counts = counts_json(&st, &st);
        json_object_update(o, counts);
        json_decref(counts);
        json_object_set_new(o, "pieces", json_integer(st.pieces));
        json_object_set_new(o, "bytes_local", json_integer((json_int_t)st.bytes_local));
        json_object_set_new(o, "max_relay_bytes", json_integer((json_int_t)st.max_relay_bytes));
        json_object_set_new(o, "plan_seconds", json_real(t2 - t1));
        json_object_set_new(o, "layout_seconds", json_real(t1 - t0));
        json_object_set_new(o, "baseline", counts_json(&bl, &st));
        char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(o);
        if (!text) {
            rc = 1;
            goto out;
        }
        printf("%s\n", text);
        free(text);
    } else {
        char b1[192], b2[128];
        printf("model    %s (%s, %d layers%s, %s): %.2f G params, %.3f GB\n", a.model, mi.family,
               mi.layers, mi.mtp_layers ? " + MTP" : "", a.dtype, (double)mi.params / 1e9,
               (double)model_bytes / 1e9);
        printf("train    %s: %d ranks, %lld fragments\n",
               reshard_train_spec_str(&ts, b1, sizeof b1), refit.train_world,
               (long long)reshard_layout_count(refit.train));
        printf("infer    %s: %d ranks from rank %d, %lld fragments\n",
               reshard_infer_spec_str(&is, b2, sizeof b2), refit.infer_world, refit.infer_offset,
               (long long)reshard_layout_count(refit.infer));
        if (a.domain_size > 1)
            printf("domains  %ld ranks per NVLink domain\n", a.domain_size);
        else
            printf("domains  every rank its own domain\n");
        printf("plan     all ranks: %.3f s (layouts %.3f s), %lld pieces\n", t2 - t1, t1 - t0,
               (long long)st.pieces);
        printf("\n  %-22s %17s %17s %9s\n", "", "reshard", "gather+bcast", "ratio");
        row("bytes network", st.bytes_network, bl.bytes_network);
        row("bytes nvlink", st.bytes_nvlink, bl.bytes_nvlink);
        row("max NIC send", st.max_nic_send_bytes, bl.max_nic_send_bytes);
        row("max NIC receive", st.max_nic_recv_bytes, bl.max_nic_recv_bytes);
        printf("  %-22s %17lld %17lld\n", "transfers", (long long)st.transfers,
               (long long)bl.transfers);
        printf("\n  lower bound: %.3f GB across domains; NIC send >= %.3f GB, receive >= %.3f GB\n",
               (double)st.bytes_lower_bound / 1e9, (double)st.nic_send_bound_bytes / 1e9,
               (double)st.nic_recv_bound_bytes / 1e9);
        printf("  relay scratch: %.3f GB on the rank that needs the most\n",
               (double)st.max_relay_bytes / 1e9);
    }
    rc = 0;
out:
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&refit);
    reshard_model_destroy(model);
    cli_eplb_free(&maps);
    return rc;
}
