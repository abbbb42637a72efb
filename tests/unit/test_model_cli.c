/*
 * The `reshard plan` command: its JSON keys (DESIGN §7) and their
 * consistency, the summary, and clear non-zero exits on bad arguments.
 * Runs the built binary next to the tests directory (../reshard).
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "reshard/reshard_model.h"

static char cli[4096];

/* Run `reshard <args>`; returns the exit status, stdout (and stderr) in @p out. */
static int run(const char *args, char *out, size_t size)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", cli, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static uint64_t key(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v))
        fail_msg("key '%s' missing or not an integer", k);
    return (uint64_t)json_integer_value(v);
}

/* Every shipped model: `plan --json` reports the parameters of the
 * catalogue (reshard_model_info; test_model_config checks those against
 * counts computed from each config's fields and the published totals). */
static void test_plan_json_params(void **state)
{
    (void)state;
    static const char *const models[] = {
        "deepseek-v3",  "kimi-k2",         "llama-3.1-8b",         "llama-3.3-70b",
        "mixtral-8x7b", "qwen2-57b-a14b",  "qwen2.5-72b-instruct", "qwen2.5-7b-instruct",
        "qwen3-0.6b",   "qwen3-235b-a22b", "qwen3-30b-a3b"};
    static char out[1 << 16];
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        char args[256];
        snprintf(args, sizeof args, "plan --model %s --train tp=1 --infer tp=1 --json", models[k]);
        int rc = run(args, out, sizeof out);
        if (rc != 0)
            fail_msg("%s: exit %d: %s", models[k], rc, out);
        json_error_t err;
        json_t *o = json_loads(out, 0, &err);
        if (!o)
            fail_msg("not JSON (%s): %s", err.text, out);
        reshard_model_t *m;
        assert_int_equal(reshard_model_load(models[k], NULL, &m), RESHARD_OK);
        reshard_model_info_t info;
        assert_int_equal(reshard_model_info(m, &info), RESHARD_OK);
        if (key(o, "params") != (uint64_t)info.params)
            fail_msg("%s: plan --json params %llu, the model %lld", models[k],
                     (unsigned long long)key(o, "params"), (long long)info.params);
        reshard_model_destroy(m);
        json_decref(o);
    }
}

static void test_plan_json(void **state)
{
    (void)state;
    static char out[1 << 16];
    int rc = run("plan --model qwen3-30b-a3b --layers 2 --train tp=2,pp=2,ep=2,etp=1 "
                 "--infer tp=4,dp=2,ep=on --json",
                 out, sizeof out);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, out);
    json_error_t err;
    json_t *o = json_loads(out, 0, &err);
    if (!o)
        fail_msg("not JSON (%s): %s", err.text, out);
    static const char *const keys[] = {
        "model_bytes",        "train_world",          "infer_world",         "transfers",
        "bytes_network",      "bytes_nvlink",         "bytes_lower_bound",   "max_nic_send_bytes",
        "max_nic_recv_bytes", "nic_send_bound_bytes", "nic_recv_bound_bytes"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        key(o, keys[k]);
    assert_true(json_is_real(json_object_get(o, "plan_seconds")));
    json_t *b = json_object_get(o, "baseline");
    assert_true(json_is_object(b));
    for (size_t k = 3; k < sizeof keys / sizeof *keys; k++)
        key(b, keys[k]);

    /* the model bytes are the catalogue's */
    reshard_model_options_t mo = {.layers = 2};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("qwen3-30b-a3b", &mo, &m), RESHARD_OK);
    reshard_tensors_t *t;
    assert_int_equal(reshard_model_tensors(m, &t), RESHARD_OK);
    assert_int_equal(key(o, "model_bytes"), reshard_tensors_bytes(t));
    reshard_tensors_destroy(t);
    reshard_model_destroy(m);

    assert_int_equal(key(o, "train_world"), 4);
    assert_int_equal(key(o, "infer_world"), 8);
    /* every rank its own domain: what leaves a rank is network traffic, and
     * a plan never moves fewer bytes than the bound; the baseline more */
    assert_int_equal(key(o, "bytes_nvlink"), 0);
    assert_true(key(o, "bytes_network") >= key(o, "bytes_lower_bound"));
    assert_true(key(o, "max_nic_send_bytes") >= key(o, "nic_send_bound_bytes"));
    assert_true(key(o, "max_nic_recv_bytes") >= key(o, "nic_recv_bound_bytes"));
    assert_true(key(b, "bytes_network") > key(o, "bytes_network"));
    /* the baseline lands the whole model on each of the 8 inference ranks */
    assert_true(key(b, "max_nic_recv_bytes") == key(o, "model_bytes"));
    json_decref(o);
}

static void test_plan_summary_and_domains(void **state)
{
    (void)state;
    static char out[1 << 16];
    int rc = run("plan --model llama-3.1-8b --layers 2 --train tp=2,pp=2 --infer tp=2,dp=2 "
                 "--system h100",
                 out, sizeof out);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, out);
    assert_non_null(strstr(out, "8 ranks per NVLink domain"));
    assert_non_null(strstr(out, "gather+bcast"));
}

/* Each rank's own plan (--rank R) counts what that rank sends and writes:
 * over every rank of a two-domain layout they add up to the global plan's. */
static void test_plan_rank_counters_add_up(void **state)
{
    (void)state;
    static char out[1 << 16];
    const char *cfg = "plan --model qwen3-30b-a3b --layers 2 --train tp=2,pp=2,ep=2,etp=1 "
                      "--infer tp=2,dp=2 --domain-size 4 --json";
    int rc = run(cfg, out, sizeof out);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, out);
    json_t *all = json_loads(out, 0, NULL);
    assert_non_null(all);
    uint64_t net = 0, nvl = 0, written = 0, streams = 0;
    int32_t world = (int32_t)(key(all, "infer_offset") + key(all, "infer_world"));
    for (int32_t r = 0; r < world; r++) {
        char args[512];
        snprintf(args, sizeof args, "%s --rank %d", cfg, r);
        rc = run(args, out, sizeof out);
        if (rc != 0)
            fail_msg("rank %d: exit %d: %s", r, rc, out);
        json_t *o = json_loads(out, 0, NULL);
        if (!o)
            fail_msg("rank %d: not JSON: %s", r, out);
        assert_int_equal(key(o, "rank"), (uint64_t)r);
        net += key(o, "rank_bytes_sent_network");
        nvl += key(o, "rank_bytes_sent_nvlink");
        written += key(o, "rank_bytes_written");
        streams += key(o, "rank_send_streams");
        json_decref(o);
    }
    assert_true(key(all, "bytes_network") > 0 && key(all, "bytes_nvlink") > 0);
    assert_int_equal(net, key(all, "bytes_network"));
    assert_int_equal(nvl, key(all, "bytes_nvlink"));
    assert_int_equal(written, key(all, "bytes_total"));
    assert_int_equal(streams, key(all, "transfers"));
    json_decref(all);
}

static void test_plan_bad_arguments(void **state)
{
    (void)state;
    static char out[1 << 14];
    static const struct {
        const char *args, *says;
        int rc;
    } cases[] = {
        {"plan --train tp=1 --infer tp=1", "--model, --train and --infer are required", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --bogus", "unknown option", 2},
        {"plan --model qwen3-0.6b --train tp=x --infer tp=1", "not a positive integer", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --dtype int4", "bf16 or fp8", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --system tpu", "h100 or gb200", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --system h100 --domain-size 4",
         "not both", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --rank 2", "outside [0, 2)", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --layers", "needs a value", 2},
        {"plan --model nosuch --train tp=1 --infer tp=1", "RESHARD_ERR_IO", 1},
        {"plan --model qwen3-0.6b --train tp=3 --infer tp=1", "tp=3 does not divide", 1},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --layers 1.5", "not a valid whole", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --json=1", "takes no value", 2},
        /* a zero staging bound is bad usage, named by the option parser */
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --staging-mb 0",
         "--staging-mb: 0 is below the minimum", 2},
        {"sim --staging-mb 0", "--staging-mb: 0 is below the minimum", 2},
        /* a bound over zero but under the plan's 4 KiB: a plan error */
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --staging-mb 0.001",
         "under the minimum 4096", 1},
        {"sim --case", "--case needs a value", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --staging-mb 1e300",
         "above the maximum", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=1 --staging-mb inf",
         "'inf' is not a valid decimal number", 2},
        {"sim --delta --change-fraction 0x1p-3", "'0x1p-3' is not a valid decimal number", 2},
        {"sim --delta --change-fraction 1e-400", "'1e-400' is out of the range of a double", 2},
        {"plan --model qwen3-0.6b --train tp=1 --infer tp=2 --domain-size 3", "larger than either",
         2},
        {"sim --system=h100 --bogus", "unknown option '--bogus'", 2},
        {"frobnicate", "unknown command", 2},
    };
    /* a long spec is not echoed whole: its first 64 characters, then "..." */
    char args[1200];
    int n = snprintf(args, sizeof args, "plan --model qwen3-0.6b --infer tp=1 --train '");
    memset(args + n, ' ', 1000);
    snprintf(args + n + 1000, sizeof args - (size_t)n - 1000, "tp=x'");
    assert_int_equal(run(args, out, sizeof out), 2);
    if (!strstr(
            out,
            "train spec \"                                                                ...\"") ||
        strlen(out) > 400)
        fail_msg("long spec echoed: %zu bytes: %.300s", strlen(out), out);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int rc = run(cases[k].args, out, sizeof out);
        if (rc != cases[k].rc || !strstr(out, cases[k].says))
            fail_msg("'%s': exit %d, wanted %d with \"%s\"; got: %s", cases[k].args, rc,
                     cases[k].rc, cases[k].says, out);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *slash = strrchr(argv[0], '/');
    snprintf(cli, sizeof cli, "%.*s/../reshard", slash ? (int)(slash - argv[0]) : 1,
             slash ? argv[0] : ".");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_json),
        cmocka_unit_test(test_plan_json_params),
        cmocka_unit_test(test_plan_summary_and_domains),
        cmocka_unit_test(test_plan_rank_counters_add_up),
        cmocka_unit_test(test_plan_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
