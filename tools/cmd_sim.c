/* reshard sim: predicted refit times on modelled clusters, next to the
 * published figures of data/cases/refit-cases.json. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_sim.h"

typedef struct {
    const char *cases, *only, *model, *train, *infer, *system, *dtype, *infer_dtype, *fp8_scale;
    long layers, domain_size, codec_ranks;
    double nic_gbps, link_gbps, staging_mb, change_fraction, encode_gbps, apply_gbps, copy_gbps,
        hash_gbps;
    int json, mtp, delta, no_verify, measure_codec;
    reshard_sim_delta_params_t dp; /* --delta: the rates in use (codec_rates) */
    const char *rates_from;        /* where they come from, for the header */
} sim_args_t;

static void sim_usage(FILE *out)
{
    fprintf(out,
            "usage: reshard sim [--case ID | --model M --train SPEC --infer SPEC --system S]\n"
            "                   [system and model options] [--json] [--cases FILE]\n"
            "  (no arguments)     predict every case of the shipped table\n"
            "  --case ID          one case of the table\n"
            "  --model M --train SPEC --infer SPEC --system h100|gb200|emulated\n"
            "                     one configuration of your own\n"
            "  --json             one JSON object: {\"cases\": [...]}\n"
            "  --cases FILE       the case table (default <data dir>/cases/refit-cases.json,\n"
            "                     data dir %s; RESHARD_DATA_DIR overrides it)\n"
            "system options (override the system's own figures):\n"
            "  --domain-size N    ranks per NVLink domain\n"
            "  --nic-gbps G       each rank's NIC, Gbit/s per direction\n"
            "  --link-gbps G      each rank's link inside a domain, Gbit/s per direction\n"
            "  --staging-mb S     staging per rank of the refit, MiB (default 256)\n"
            "delta refit (docs/delta.md), predicted beside the dense one:\n"
            "  --delta            also predict a delta refit (pred.delta, every destination at\n"
            "                     the senders' version)\n"
            "  --change-fraction F  fraction of the words that changed (default 0.01)\n"
            "  --measure-codec    measure this machine's CPU rates of a delta round (memcpy,\n"
            "                     encode, apply, hash at the change fraction, from DRAM) and\n"
            "                     predict with them (about a second)\n"
            "  --codec-ranks N    with --measure-codec: N ranks measure at once on this\n"
            "                     machine (default 1: each rank has cores of its own; the\n"
            "                     emulated cluster runs all its ranks here)\n"
            "  --encode-gbps G, --apply-gbps G, --copy-gbps G, --hash-gbps G  one rank's\n"
            "                     rate, GB/s of stream bytes (override the measured or the\n"
            "                     default rates: 3, 10, 5 and 8, a 2-core x86-64 at 1%%)\n"
            "  --no-verify        a delta plan without verification (no hash)\n"
            "model options (as reshard run): --layers K, --dtype bf16|fp8, --mtp,\n"
            "  --infer-dtype bf16|fp8|mxfp8, --fp8-scale fp32|ue8m0\n"
            "Published figures are the vendors' measurements on their own clusters; the\n"
            "predicted figures come from reshard's cost model (see reshard_sim.h).\n",
            reshard_data_dir() ? reshard_data_dir() : "not found");
}

static int sim_bad(const char *msg, const char *arg)
{
    fprintf(stderr, "reshard sim: %s%s%s\n(see 'reshard sim --help')\n", msg, arg ? " " : "",
            arg ? arg : "");
    return 2;
}

static int parse_args(int argc, char **argv, sim_args_t *a)
{
    memset(a, 0, sizeof *a);
    a->change_fraction = -1;
    static char cases[4200];
    const char *data = reshard_data_dir();
    snprintf(cases, sizeof cases, "%s/cases/refit-cases.json", data ? data : ".");
    a->cases = cases;
    const cli_opt_t opts[] = {
        {"--case", CLI_STRING, &a->only, 0, 0},
        {"--cases", CLI_STRING, &a->cases, 0, 0},
        {"--model", CLI_STRING, &a->model, 0, 0},
        {"--train", CLI_STRING, &a->train, 0, 0},
        {"--infer", CLI_STRING, &a->infer, 0, 0},
        {"--system", CLI_STRING, &a->system, 0, 0},
        {"--json", CLI_FLAG, &a->json, 0, 0},
        {"--mtp", CLI_FLAG, &a->mtp, 0, 0},
        {"--dtype", CLI_STRING, &a->dtype, 0, 0},
        {"--infer-dtype", CLI_STRING, &a->infer_dtype, 0, 0},
        {"--fp8-scale", CLI_STRING, &a->fp8_scale, 0, 0},
        {"--layers", CLI_INT, &a->layers, 1, 0},
        {"--domain-size", CLI_INT, &a->domain_size, 1, 0},
        {"--nic-gbps", CLI_NUMBER, &a->nic_gbps, 1e-6, 1e9},
        {"--link-gbps", CLI_NUMBER, &a->link_gbps, 1e-6, 1e9},
        {"--staging-mb", CLI_NUMBER, &a->staging_mb, STAGING_MB_MIN, 1 << 20},
        {"--delta", CLI_FLAG, &a->delta, 0, 0},
        {"--change-fraction", CLI_NUMBER, &a->change_fraction, 0, 1},
        {"--encode-gbps", CLI_NUMBER, &a->encode_gbps, 1e-6, 1e9},
        {"--apply-gbps", CLI_NUMBER, &a->apply_gbps, 1e-6, 1e9},
        {"--copy-gbps", CLI_NUMBER, &a->copy_gbps, 1e-6, 1e9},
        {"--hash-gbps", CLI_NUMBER, &a->hash_gbps, 1e-6, 1e9},
        {"--no-verify", CLI_FLAG, &a->no_verify, 0, 0},
        {"--measure-codec", CLI_FLAG, &a->measure_codec, 0, 0},
        {"--codec-ranks", CLI_INT, &a->codec_ranks, 1, RESHARD_SIM_MEASURE_MAX_RANKS}};
    char err[512];
    int rc = cli_parse(argc, argv, opts, sizeof opts / sizeof *opts, err, sizeof err);
    if (rc == 1)
        sim_usage(stdout);
    if (rc)
        return rc == 1 ? 1 : sim_bad(err, NULL);
    if (a->dtype && strcmp(a->dtype, "bf16") && strcmp(a->dtype, "fp8"))
        return sim_bad("--dtype: not bf16 or fp8:", a->dtype);
    reshard_model_options_t probe = {0};
    char qerr[256];
    if (cli_infer_dtype(a->infer_dtype, a->fp8_scale, &probe, qerr, sizeof qerr))
        return sim_bad(qerr, NULL);
    if (!a->delta && (a->change_fraction >= 0 || a->encode_gbps > 0 || a->apply_gbps > 0 ||
                      a->copy_gbps > 0 || a->hash_gbps > 0 || a->no_verify || a->measure_codec))
        return sim_bad("--change-fraction, --measure-codec, --no-verify and the --*-gbps rates of "
                       "a delta round are for --delta",
                       NULL);
    if (a->codec_ranks && !a->measure_codec)
        return sim_bad("--codec-ranks is for --measure-codec", NULL);
    if (!a->codec_ranks)
        a->codec_ranks = 1;
    if (a->change_fraction < 0)
        a->change_fraction = 0.01;
    bool custom = a->model || a->train || a->infer || a->system;
    if (custom && (!a->model || !a->train || !a->infer || !a->system))
        return sim_bad("give all of --model, --train, --infer and --system", NULL);
    if (custom && a->only)
        return sim_bad("give --case or a configuration, not both", NULL);
    return 0;
}

/* One row of the table: the configuration, the published figures, and the
 * prediction (or why there is none). */
typedef struct {
    char id[128], system[32], model[160], train[128], infer[96];
    json_t *published;    /* object: published key -> number or [lo, hi] */
    json_t *approx;       /* list of strings: where the model differs from what ran (NULL or
                             empty: modelled as run); NULL for a configuration of your own */
    char reason[512];     /* non-empty: no prediction */
    reshard_system_t sys; /* as modelled, options applied */
    reshard_sim_refit_t r;
    reshard_sim_t delta; /* --delta */
} sim_row_t;

static int64_t get_int(json_t *o, const char *key, int64_t dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

/* Published sizes -> specs. A training world left implicit follows from
 * "world" or, failing that, equals the inference world. */
static const char *case_specs(json_t *c, reshard_train_spec_t *ts, reshard_infer_spec_t *is)
{
    json_t *t = json_object_get(c, "train"), *n = json_object_get(c, "infer");
    is->tp = (int32_t)get_int(n, "tp", 1);
    is->dp = (int32_t)get_int(n, "dp", 1);
    is->engines = (int32_t)get_int(n, "engines", 1);
    /* the named values through the spec parsers: their names and errors */
    const char *conv = json_string_value(json_object_get(t, "convention"));
    const char *vllm = json_string_value(json_object_get(n, "vllm"));
    char item[96];
    reshard_train_spec_t tn;
    reshard_infer_spec_t in;
    snprintf(item, sizeof item, "convention=%.60s", conv ? conv : "megatron-lm");
    if (reshard_train_spec_parse(item, &tn) != RESHARD_OK)
        return reshard_last_error();
    snprintf(item, sizeof item, "vllm=%.60s", vllm ? vllm : "0.25");
    if (reshard_infer_spec_parse(item, &in) != RESHARD_OK)
        return reshard_last_error();
    ts->convention = tn.convention;
    is->vllm = in.vllm;
    json_t *ep = json_object_get(n, "ep");
    is->ep = json_is_true(ep) || (json_is_string(ep) && !strcmp(json_string_value(ep), "on"));
    ts->tp = (int32_t)get_int(t, "tp", 1);
    ts->pp = (int32_t)get_int(t, "pp", 1);
    ts->cp = (int32_t)get_int(t, "cp", 1);
    ts->ep = (int32_t)get_int(t, "ep", 1);
    ts->etp = (int32_t)get_int(t, "etp", 0); /* 0: the convention's default */
    ts->vpp = (int32_t)get_int(t, "vpp", 1);
    ts->first = (int32_t)get_int(t, "first", 0);
    ts->last = (int32_t)get_int(t, "last", 0);
    int64_t per_dp = (int64_t)ts->tp * ts->cp * ts->pp;
    int64_t world = get_int(t, "world", 0);
    if (world > 0)
        ts->dp = (int32_t)(world / per_dp);
    else if (json_object_get(t, "dp"))
        ts->dp = (int32_t)get_int(t, "dp", 1);
    else
        ts->dp = (int32_t)((int64_t)reshard_infer_world(is) / per_dp);
    if (ts->dp < 1)
        ts->dp = 1;
    return NULL;
}

/* @p dtype: the checkpoint's ("bf16", "fp8"), a case's own unless --dtype gave one. */
static void predict(sim_row_t *row, const char *model_name, const reshard_train_spec_t *ts,
                    const reshard_infer_spec_t *is, const sim_args_t *a, const char *dtype)
{
    reshard_train_spec_str(ts, row->train, sizeof row->train);
    reshard_infer_spec_str(is, row->infer, sizeof row->infer);
    reshard_system_t sys;
    reshard_model_t *m = NULL;
    reshard_model_options_t mo = {.mtp = a->mtp,
                                  .layers = (int32_t)a->layers,
                                  .dtype = dtype && !strcmp(dtype, "fp8") ? RESHARD_FP8_E4M3
                                                                          : RESHARD_BF16};
    char qerr[256];
    cli_infer_dtype(a->infer_dtype, a->fp8_scale, &mo, qerr, sizeof qerr);
    reshard_status_t st = reshard_system_lookup(row->system, &sys);
    if (a->domain_size > 0)
        sys.domain_size = (int32_t)a->domain_size;
    if (a->nic_gbps > 0)
        sys.nic_bytes_per_s = a->nic_gbps * 1e9 / 8;
    if (a->link_gbps > 0)
        sys.nvlink_bytes_per_s = a->link_gbps * 1e9 / 8;
    if (a->staging_mb > 0)
        sys.staging_bytes = (uint64_t)(a->staging_mb * 1048576.0);
    row->sys = sys;
    if (st == RESHARD_OK)
        st = reshard_model_load(model_name, &mo, &m);
    if (st == RESHARD_ERR_IO) {
        snprintf(row->reason, sizeof row->reason,
                 "config not available: no shipped config or file for '%s'", model_name);
        return;
    }
    if (st != RESHARD_OK) {
        snprintf(row->reason, sizeof row->reason, "%s", reshard_last_error());
        return;
    }
    st = a->delta ? reshard_sim_model_delta(m, ts, is, &sys, &a->dp, &row->r, &row->delta)
                  : reshard_sim_model(m, ts, is, &sys, &row->r);
    if (st != RESHARD_OK)
        snprintf(row->reason, sizeof row->reason, "%s", reshard_last_error());
    reshard_model_destroy(m);
}

static void case_row(json_t *c, sim_row_t *row, const sim_args_t *a)
{
    memset(row, 0, sizeof *row);
    const char *id = json_string_value(json_object_get(c, "id"));
    const char *sys = json_string_value(json_object_get(c, "system"));
    const char *model = json_string_value(json_object_get(c, "model"));
    snprintf(row->id, sizeof row->id, "%s", id ? id : "?");
    snprintf(row->system, sizeof row->system, "%s", sys ? sys : "?");
    snprintf(row->model, sizeof row->model, "%s", model ? model : "?");
    row->published = json_object();
    const char *keys[] = {"baseline_s", "reshard_s", "direct_p2p_s"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        json_t *v = json_object_get(c, keys[k]);
        if (v)
            json_object_set(row->published, keys[k], v);
    }
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    memset(&ts, 0, sizeof ts);
    memset(&is, 0, sizeof is);
    json_t *ap = json_object_get(c, "approximations");
    row->approx = json_is_array(ap) ? json_incref(ap) : json_array();
    const char *bad = case_specs(c, &ts, &is);
    if (bad) {
        snprintf(row->reason, sizeof row->reason, "%s", bad);
        return;
    }
    const char *dtype = json_string_value(json_object_get(c, "dtype"));
    if (dtype && strcmp(dtype, "bf16") && strcmp(dtype, "fp8")) {
        snprintf(row->reason, sizeof row->reason, "case dtype \"%.40s\" is not bf16 or fp8", dtype);
        return;
    }
    predict(row, row->model, &ts, &is, a, a->dtype ? a->dtype : dtype);
}

/* "6.4", "0.74-1.00" or "-" for a published figure. */
static const char *fig(json_t *pub, const char *key, char *buf, size_t n)
{
    json_t *v = json_object_get(pub, key);
    if (json_is_number(v))
        snprintf(buf, n, "%.2f", json_number_value(v));
    else if (json_is_array(v) && json_array_size(v) == 2)
        snprintf(buf, n, "%.2f-%.2f", json_number_value(json_array_get(v, 0)),
                 json_number_value(json_array_get(v, 1)));
    else
        snprintf(buf, n, "-");
    return buf;
}

/* The header, printed before the predictions are computed. */
static void print_header(const sim_args_t *a)
{
    printf("reshard sim: refit time, published vs predicted\n"
           "Published figures are measurements on the vendors' own clusters (we did not "
           "reproduce them);\n"
           "predicted figures are reshard's cost model for the same configuration on the "
           "modelled system.\n"
           "Hardware facts (data sheets): h100 8 GPUs/domain, gb200 72; one 400 Gb/s NIC per "
           "GPU; NVLink 450 (h100)\n"
           "or 900 (gb200) GB/s per GPU and direction. From measurement (bench/cluster/refit.sh, "
           "an emulated\n"
           "cluster): the model's form -- the baseline as run (gather, then a chain, bucket after "
           "bucket),\n"
           "packing outside the transfers' overlap, the last round's tail of a shared NIC -- "
           "checked against\n"
           "measured reshard and baseline times; see reshard_sim.h.\n"
           "Each case is modelled as it ran: inference data parallelism as independent engines "
           "(each a whole\nmodel), the training convention of the source; 'as run' = nothing "
           "modelled differently, 'approx'\n= the differences listed below the table.\n\n");
    if (a->delta) {
        char hash[32] = "none (--no-verify)";
        if (!a->dp.no_verify)
            snprintf(hash, sizeof hash, "%.2f", a->dp.hash_bytes_per_s / 1e9);
        printf("pred.delta: a delta refit at %g of the words changed (the encoding's size model, "
               "headers then bodies\nper round; per rank, GB/s of stream bytes, %s: copy %.2f, "
               "encode %.2f, apply %.2f, hash %s;\nnot overlapped with the transfers); wire/dns: "
               "its bytes per dense byte.\n\n",
               a->change_fraction, a->rates_from, a->dp.copy_bytes_per_s / 1e9,
               a->dp.encode_bytes_per_s / 1e9, a->dp.apply_bytes_per_s / 1e9, hash);
    }
    printf("%-27s %-6s %-16s | %9s %9s %9s | %9s %9s %9s %7s", "case", "system", "model",
           "pub.base", "pub.resh", "pub.p2p", "pred.base", "pred.resh", "bound", "pred/lb");
    if (a->delta)
        printf(" %10s %9s", "pred.delta", "wire/dns");
    printf(" | %s\n", "modelled");
    fflush(stdout);
}

/* One row, printed as soon as it is predicted. */
static void print_row(const sim_row_t *r, const sim_args_t *args)
{
    char a[32], b[32], c[32];
    printf("%-27s %-6s %-16.16s | %9s %9s %9s | ", r->id, r->system, r->model,
           fig(r->published, "baseline_s", a, sizeof a),
           fig(r->published, "reshard_s", b, sizeof b),
           fig(r->published, "direct_p2p_s", c, sizeof c));
    const char *how = !r->approx ? "as given" : json_array_size(r->approx) ? "approx" : "as run";
    if (r->reason[0])
        printf("not predicted: %s\n", r->reason);
    else {
        printf("%9.2f %9.2f %9.2f %7.3f", r->r.baseline_s, r->r.sim.seconds, r->r.sim.bound_s,
               r->r.sim.seconds / r->r.sim.bound_s);
        if (args->delta)
            printf(" %10.3f %9.4f", r->delta.seconds, r->delta.delta_wire_ratio);
        printf(" | %s\n", how);
    }
    fflush(stdout);
}

/* What follows the rows. */
static void print_footer(const sim_row_t *rows, size_t n)
{
    printf("\nseconds; pub.* = published, pred.* = predicted, bound = lower bound of any plan "
           "(busiest NIC at its bound, NVLink stage at its bound).\n"
           "pred.base is reshard's built-in baseline as it runs (reshard run --baseline: the "
           "stage roots one after\nanother, each gathering, then broadcasting down a chain); "
           "the vendors' baselines overlap their stages.\n");
    for (size_t i = 0; i < n; i++) {
        const sim_row_t *r = &rows[i];
        if (r->reason[0])
            continue;
        printf("%-27s train %s -> infer %s (infer ranks from %d); network %.1f GB = lower bound "
               "%.1f GB; busiest NIC %.3fx its bound; relay scratch %.2f GB\n",
               r->id, r->train, r->infer, r->r.infer_offset, (double)r->r.stats.bytes_network / 1e9,
               (double)r->r.stats.bytes_lower_bound / 1e9,
               (double)(r->r.stats.max_nic_send_bytes > r->r.stats.max_nic_recv_bytes
                            ? r->r.stats.max_nic_send_bytes
                            : r->r.stats.max_nic_recv_bytes) /
                   (double)(r->r.stats.nic_send_bound_bytes > r->r.stats.nic_recv_bound_bytes
                                ? r->r.stats.nic_send_bound_bytes
                                : r->r.stats.nic_recv_bound_bytes),
               (double)r->r.sim.max_relay_bytes / 1e9);
    }
    printf("\nmodelled as run or approximated:\n");
    for (size_t i = 0; i < n; i++) {
        const sim_row_t *r = &rows[i];
        if (!r->approx) {
            printf("%-27s as given on the command line\n", r->id);
            continue;
        }
        if (!json_array_size(r->approx))
            printf("%-27s as run\n", r->id);
        for (size_t k = 0; k < json_array_size(r->approx); k++)
            printf("%-27s %s %s\n", k ? "" : r->id,
                   k ? " " : "approx:", json_string_value(json_array_get(r->approx, k)));
    }
}

static json_t *row_json(const sim_row_t *r, const sim_args_t *a)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "system", json_string(r->system));
    json_object_set_new(o, "model", json_string(r->model));
    json_object_set_new(o, "train", json_string(r->train));
    json_object_set_new(o, "infer", json_string(r->infer));
    const char *keys[] = {"baseline_s", "reshard_s", "direct_p2p_s"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        json_t *v = json_object_get(r->published, keys[k]);
        char key[64];
        snprintf(key, sizeof key, "published_%s", keys[k]);
        json_object_set(o, key, v ? v : json_null());
    }
    json_object_set_new(o, "published_note",
                        json_string("vendor measurements on their own clusters, not reproduced"));
    json_object_set_new(o, "modelled_as_run",
                        r->approx ? json_boolean(json_array_size(r->approx) == 0) : json_null());
    json_object_set_new(o, "approximations", r->approx ? json_incref(r->approx) : json_array());
    if (r->reason[0]) {
        json_object_set_new(o, "predicted_s", json_null());
        json_object_set_new(o, "baseline_predicted_s", json_null());
        json_object_set_new(o, "bound_s", json_null());
        json_object_set_new(o, "reason", json_string(r->reason));
        return o;
    }
    const reshard_sim_refit_t *x = &r->r;
    const struct {
        const char *key;
        double v;
    } reals[] = {{"predicted_s", x->sim.seconds},
                 {"baseline_predicted_s", x->baseline_s},
                 {"bound_s", x->sim.bound_s},
                 {"network_s", x->sim.network_s},
                 {"nvlink_s", x->sim.nvlink_s},
                 {"fill_s", x->sim.fill_s},
                 {"copy_s", x->sim.copy_s},
                 {"tail_s", x->sim.tail_s},
                 {"network_streams", x->sim.network_streams},
                 {"network_rounds", (double)x->sim.network_rounds},
                 {"nvlink_rounds", (double)x->sim.nvlink_rounds},
                 {"baseline_gather_s", x->base.gather_s},
                 {"baseline_chain_s", x->base.chain_s},
                 {"baseline_copy_s", x->base.copy_s},
                 {"baseline_fill_s", x->base.fill_s}};
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
        json_object_set_new(o, reals[i].key, json_real(reals[i].v));
    json_object_set_new(o, "max_relay_bytes", json_integer((json_int_t)x->sim.max_relay_bytes));
    json_object_set_new(o, "train_world", json_integer(x->train_world));
    json_object_set_new(o, "infer_world", json_integer(x->infer_world));
    json_object_set_new(o, "infer_offset", json_integer(x->infer_offset));
    json_object_set_new(o, "model_bytes", json_integer((json_int_t)x->model_bytes));
    json_object_set_new(o, "bytes_network", json_integer((json_int_t)x->stats.bytes_network));
    json_object_set_new(o, "bytes_nvlink", json_integer((json_int_t)x->stats.bytes_nvlink));
    json_object_set_new(o, "bytes_lower_bound",
                        json_integer((json_int_t)x->stats.bytes_lower_bound));
    json_object_set_new(o, "max_nic_send_bytes",
                        json_integer((json_int_t)x->stats.max_nic_send_bytes));
    json_object_set_new(o, "max_nic_recv_bytes",
                        json_integer((json_int_t)x->stats.max_nic_recv_bytes));
    json_object_set_new(o, "nic_send_bound_bytes",
                        json_integer((json_int_t)x->stats.nic_send_bound_bytes));
    json_object_set_new(o, "nic_recv_bound_bytes",
                        json_integer((json_int_t)x->stats.nic_recv_bound_bytes));
    json_object_set_new(o, "plan_seconds", json_real(x->plan_seconds));
    if (a->delta) {
        json_t *d = json_object();
        json_object_set_new(d, "change_fraction", json_real(a->change_fraction));
        json_object_set_new(d, "predicted_s", json_real(r->delta.seconds));
        json_object_set_new(d, "wire_ratio", json_real(r->delta.delta_wire_ratio));
        json_object_set_new(d, "bytes_network",
                            json_real((double)x->stats.bytes_network * r->delta.delta_wire_ratio));
        json_object_set_new(d, "network_s", json_real(r->delta.network_s));
        json_object_set_new(d, "nvlink_s", json_real(r->delta.nvlink_s));
        json_object_set_new(d, "codec_s", json_real(r->delta.codec_s));
        json_t *rates = json_object();
        json_object_set_new(rates, "from", json_string(a->rates_from));
        json_object_set_new(rates, "copy_gbps", json_real(a->dp.copy_bytes_per_s / 1e9));
        json_object_set_new(rates, "encode_gbps", json_real(a->dp.encode_bytes_per_s / 1e9));
        json_object_set_new(rates, "apply_gbps", json_real(a->dp.apply_bytes_per_s / 1e9));
        json_object_set_new(rates, "hash_gbps",
                            a->dp.no_verify ? json_null()
                                            : json_real(a->dp.hash_bytes_per_s / 1e9));
        json_object_set_new(d, "rates", rates);
        json_object_set_new(d, "bound_s", json_real(r->delta.bound_s));
        json_object_set_new(
            d, "speedup_vs_dense",
            json_real(r->delta.seconds > 0 ? x->sim.seconds / r->delta.seconds : 0));
        json_object_set_new(o, "delta", d);
    }
    return o;
}

/* The rates of a delta round (--delta): measured here (--measure-codec) or the defaults,
 * each --*-gbps given overriding. Returns 0, or 1 with the error printed. */
static int codec_rates(sim_args_t *a)
{
    reshard_sim_delta_params_t *dp = &a->dp;
    memset(dp, 0, sizeof *dp);
    dp->change_fraction = a->change_fraction;
    dp->word = 2;
    a->rates_from = "defaults";
    if (a->measure_codec) {
        if (reshard_sim_delta_measure(a->change_fraction, 2, 1u << 20, (int32_t)a->codec_ranks,
                                      dp) != RESHARD_OK) {
            fprintf(stderr, "reshard sim: %s\n", reshard_last_error());
            return 1;
        }
        static char from[96];
        snprintf(from, sizeof from,
                 "measured here (bf16, 1 MiB chunks, from DRAM, %ld rank%s at once)",
                 a->codec_ranks, a->codec_ranks > 1 ? "s" : "");
        a->rates_from = from;
    } else {
        dp->encode_bytes_per_s = RESHARD_SIM_DELTA_ENCODE_BYTES_PER_S;
        dp->apply_bytes_per_s = RESHARD_SIM_DELTA_APPLY_BYTES_PER_S;
        dp->copy_bytes_per_s = RESHARD_SIM_DELTA_COPY_BYTES_PER_S;
        dp->hash_bytes_per_s = RESHARD_SIM_DELTA_HASH_BYTES_PER_S;
    }
    const struct {
        double gbps, *rate;
    } given[] = {{a->encode_gbps, &dp->encode_bytes_per_s},
                 {a->apply_gbps, &dp->apply_bytes_per_s},
                 {a->copy_gbps, &dp->copy_bytes_per_s},
                 {a->hash_gbps, &dp->hash_bytes_per_s}};
    for (size_t i = 0; i < sizeof given / sizeof *given; i++)
        if (given[i].gbps > 0) {
            *given[i].rate = given[i].gbps * 1e9;
            a->rates_from = a->measure_codec ? "measured here, some given" : "given";
        }
    dp->no_verify = a->no_verify;
    return 0;
}

int cmd_sim(int argc, char **argv)
{
    sim_args_t a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (a.delta && codec_rates(&a))
        return 1;
    sim_row_t *rows = NULL;
    size_t n = 0;
    json_t *root = NULL;
    if (a.model) {
        rows = calloc(1, sizeof *rows);
        if (!rows)
            return 1;
        reshard_train_spec_t ts;
        reshard_infer_spec_t is;
        if (reshard_train_spec_parse(a.train, &ts) != RESHARD_OK ||
            reshard_infer_spec_parse(a.infer, &is) != RESHARD_OK) {
            fprintf(stderr, "reshard sim: %s\n", reshard_last_error());
            free(rows);
            return 2;
        }
        snprintf(rows[0].id, sizeof rows[0].id, "custom");
        snprintf(rows[0].system, sizeof rows[0].system, "%s", a.system);
        snprintf(rows[0].model, sizeof rows[0].model, "%s", a.model);
        rows[0].published = json_object();
        if (!a.json)
            print_header(&a);
        predict(&rows[0], a.model, &ts, &is, &a, a.dtype);
        n = 1;
        if (!a.json)
            print_row(&rows[0], &a);
    } else {
        json_error_t err;
        root = json_load_file(a.cases, 0, &err);
        json_t *cases = json_object_get(root, "cases");
        if (!json_is_array(cases)) {
            fprintf(stderr, "reshard sim: cannot read the case table %s: %s\n", a.cases,
                    root ? "no \"cases\" list" : err.text);
            json_decref(root);
            return 1;
        }
        rows = calloc(json_array_size(cases) + 1, sizeof *rows);
        if (!rows) {
            json_decref(root);
            return 1;
        }
        for (size_t i = 0; i < json_array_size(cases); i++) {
            json_t *c = json_array_get(cases, i);
            const char *id = json_string_value(json_object_get(c, "id"));
            if (a.only && (!id || strcmp(id, a.only)))
                continue;
            if (n == 0 && !a.json)
                print_header(&a);
            case_row(c, &rows[n], &a);
            if (!a.json)
                print_row(&rows[n], &a);
            n++;
        }
        if (a.only && n == 0) {
            fprintf(stderr, "reshard sim: no case '%s' in %s\n", a.only, a.cases);
            free(rows);
            json_decref(root);
            return 2;
        }
    }
    if (a.json) {
        json_t *o = json_object(), *list = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(list, row_json(&rows[i], &a));
        json_object_set_new(o, "cases", list);
        json_object_set_new(o, "note",
                            json_string("published_* are vendor measurements on their "
                                        "own clusters; predicted_s, "
                                        "baseline_predicted_s and bound_s are "
                                        "reshard's cost-model predictions"));
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        printf("\n");
        json_decref(o);
    } else if (n > 0) {
        print_footer(rows, n);
    }
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        json_decref(rows[i].published);
        json_decref(rows[i].approx);
        failed |= a.model && rows[i].reason[0];
    }
    if (failed)
        fprintf(stderr, "reshard sim: %s\n", rows[0].reason);
    free(rows);
    json_decref(root);
    return failed ? 1 : 0;
}
