/*
 * The simulator: built-in systems, side-by-side domain placement, the cost
 * model on a small plan computed by hand, and a shipped model predicted
 * within 1.15x of its lower bound with network bytes at the lower bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <math.h>

#include "reshard/reshard_sim.h"

static void test_systems(void **state)
{
    (void)state;
    reshard_system_t s;
    assert_int_equal(reshard_system_lookup("h100", &s), RESHARD_OK);
    assert_int_equal(s.domain_size, 8);
    assert_true(s.nic_bytes_per_s == 50e9);
    assert_true(s.nvlink_bytes_per_s == 450e9);
    assert_int_equal(reshard_system_lookup("gb200", &s), RESHARD_OK);
    assert_int_equal(s.domain_size, 72);
    assert_true(s.nvlink_bytes_per_s == 900e9);
    assert_int_equal(reshard_system_lookup("tpu", &s), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "h100"));
    assert_int_equal(reshard_sim_infer_offset(128, 72), 144);
    assert_int_equal(reshard_sim_infer_offset(256, 8), 256);
    assert_int_equal(reshard_sim_infer_offset(10, 0), 10);
    assert_int_equal(reshard_sim_infer_offset(10, 4), 12);
}

/* 4 source ranks Shard(0) of W [64, 32] bf16 -> 2 domains x 4 ranks, each two TP2
 * replicas (domains of 4, a global plan). The plan owns copies of its inputs. */
static reshard_plan_t *toy_plan(void)
{
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
    assert_int_equal(reshard_tensors_create(&ts), RESHARD_OK);
    int32_t w;
    assert_int_equal(
        reshard_tensors_add(ts, "w", RESHARD_BF16, 2, (int64_t[]){64, 32}, 0, NULL, &w),
        RESHARD_OK);
    assert_int_equal(reshard_layout_create(ts, &src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(ts, &dst), RESHARD_OK);
    int32_t rs[4] = {0, 1, 2, 3}, rd[8] = {4, 5, 6, 7, 8, 9, 10, 11};
    reshard_placement_t sh = {RESHARD_SHARD, 0, 0}, rep = {RESHARD_REPLICATE, 0, 0};
    reshard_mesh_t ms = {.ndim = 1, .shape = {4}, .ranks = rs};
    assert_int_equal(reshard_layout_add_dtensor(src, w, &ms, &sh, 0, 0), RESHARD_OK);
    reshard_mesh_t md = {.ndim = 3, .shape = {2, 2, 2}, .ranks = rd};
    reshard_placement_t pd[3] = {rep, rep, sh};
    assert_int_equal(reshard_layout_add_dtensor(dst, w, &md, pd, 0, 0), RESHARD_OK);
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                               .world_size = 12,
                               .my_rank = RESHARD_ALL_RANKS,
                               .domain_size = 4};
    reshard_plan_t *plan;
    assert_int_equal(reshard_plan_create(src, dst, &p, &plan), RESHARD_OK);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
    return plan;
}

/* The toy plan. Per source rank 2048 B over the network, per landing
 * rank 1024 B in and 1024 B forwarded (one round each: default staging). */
static void test_cost_model_by_hand(void **state)
{
    (void)state;
    reshard_plan_t *plan = toy_plan();
    reshard_system_t sys = {"toy", 4, 1e6, 0, 1e7, 0, 1e9, 0};
    reshard_sim_t r;
    assert_int_equal(reshard_sim_plan(plan, &sys, &r), RESHARD_OK);
    assert_int_equal(r.network_rounds, 1);
    assert_true(r.network_s > 2.047e-3 && r.network_s < 2.049e-3); /* 2048 B / 1e6 */
    assert_true(r.nvlink_s > 1.023e-4 && r.nvlink_s < 1.025e-4);   /* 1024 B / 1e7 */
    /* pieces under 64 KiB are packed and unpacked: a landing rank unpacks
     * 1024 B from the network, packs 1024 B to forward and unpacks the 1024 B
     * forwarded to it: 3072 B at 1e9 B/s */
    assert_true(r.copy_s > 3.0719e-6 && r.copy_s < 3.0721e-6);
    /* each source rank sends two equal streams (one per domain) in one round:
     * f = 2, a tail of (1 - 1/2) x 2048 B / 1e6 */
    assert_true(r.network_streams > 1.999 && r.network_streams < 2.001);
    assert_true(r.tail_s > 1.0239e-3 && r.tail_s < 1.0241e-3);
    /* R = 1: max(T_net + T_nvl, T_nvl + T_net) + the one round's copies + tail */
    assert_true(r.seconds > 2.1503e-3 + r.copy_s + r.tail_s &&
                r.seconds < 2.1505e-3 + r.copy_s + r.tail_s);
    assert_int_equal(r.nvlink_bound_bytes, 1024); /* 4096 B forwarded per domain / 4 */
    assert_true(r.bound_s > 2.047e-3 && r.bound_s < 2.049e-3);
    assert_true(r.local_s == 0);
    /* latency: one round per link class */
    sys.nic_latency_s = 1e-3;
    assert_int_equal(reshard_sim_plan(plan, &sys, &r), RESHARD_OK);
    assert_true(r.network_s > 3.047e-3 && r.network_s < 3.049e-3);
    sys.nic_bytes_per_s = 0;
    assert_int_equal(reshard_sim_plan(plan, &sys, &r), RESHARD_ERR_INVALID_ARG);
    reshard_plan_destroy(plan);
}

/* The delta model's CPU work by hand, on the plan of test_cost_model_by_hand: a source
 * rank sends 2048 B (network); a destination rank receives 1024 B from the network,
 * forwards them (1024 B sent) and receives its peer's 1024 B (NVLink). Per stream byte
 * a sender copies, encodes and hashes, a receiver reads back, applies, hashes and writes
 * back; a dense chunk (everything changed) skips hash and read-back; the busiest rank
 * (a destination) sets codec_s. Every rate 1e9 B/s. */
static void test_delta_cpu_by_hand(void **state)
{
    (void)state;
    reshard_plan_t *plan = toy_plan();
    reshard_system_t sys = {"toy", 4, 1e6, 0, 1e7, 0, 1e9, 0};
    reshard_sim_delta_params_t dp = {.change_fraction = 0.01,
                                     .encode_bytes_per_s = 1e9,
                                     .apply_bytes_per_s = 1e9,
                                     .copy_bytes_per_s = 1e9,
                                     .hash_bytes_per_s = 1e9};
    reshard_sim_t r;
    assert_int_equal(reshard_sim_delta_plan(plan, &sys, &dp, &r), RESHARD_OK);
    /* a destination: 1024 B x 3 (copy, encode, hash) + 2048 B x 4 (two copies, apply,
     * hash) = 11264 ns; a source: 2048 B x 3 = 6144 ns */
    assert_true(fabs(r.codec_s - 11264e-9) < 1e-12);
    dp.no_verify = 1; /* 1024 x 2 + 2048 x 3 */
    assert_int_equal(reshard_sim_delta_plan(plan, &sys, &dp, &r), RESHARD_OK);
    assert_true(fabs(r.codec_s - 8192e-9) < 1e-12);
    dp.no_verify = 0;
    dp.change_fraction = 1; /* dense chunks: 1024 x 2 + 2048 x 2 */
    assert_int_equal(reshard_sim_delta_plan(plan, &sys, &dp, &r), RESHARD_OK);
    assert_true(fabs(r.codec_s - 6144e-9) < 1e-12);
    reshard_plan_destroy(plan);
}

/* Rates measured here: positive and finite with two ranks at once; bad arguments named. */
static void test_delta_measure(void **state)
{
    (void)state;
    reshard_sim_delta_params_t dp;
    assert_int_equal(reshard_sim_delta_measure(0.05, 2, 1 << 20, 2, &dp), RESHARD_OK);
    const double rates[4] = {dp.copy_bytes_per_s, dp.encode_bytes_per_s, dp.apply_bytes_per_s,
                             dp.hash_bytes_per_s};
    for (int i = 0; i < 4; i++)
        assert_true(isfinite(rates[i]) && rates[i] > 1e6);
    assert_true(dp.change_fraction == 0.05 && dp.word == 2 && !dp.no_verify);
    assert_int_equal(reshard_sim_delta_measure(1.5, 2, 1 << 20, 1, &dp), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_sim_delta_measure(0.1, 3, 1 << 20, 1, &dp), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_sim_delta_measure(0.1, 2, 1 << 20, 0, &dp), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(
        reshard_sim_delta_measure(0.1, 2, 1 << 20, RESHARD_SIM_MEASURE_MAX_RANKS + 1, &dp),
        RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "ranks"));
}

/* The baseline's model by hand: one bf16 tensor of 4 MiB, train tp=2 on
 * ranks 0-1 (domain 0), infer tp=2 on ranks 2-5 (domains 1, 2) with
 * domains of 2, a chain 0 -> 2 -> 3 -> 4 -> 5 (0->2 and 3->4 cross domains).
 * Counts: gather 2 MiB from rank 1 over NVLink; the chain carries 4 MiB
 * over 2 network links and 2 NVLink links. NIC 1e6 B/s, NVLink 1e7 B/s,
 * copies 1e8 B/s, staging 1 MiB: 4 buckets of 1 MiB. */
static void test_baseline_by_hand(void **state)
{
    (void)state;
    const double M = 4 << 20;
    reshard_tensors_t *ts;
    assert_int_equal(reshard_tensors_create(&ts), RESHARD_OK);
    int32_t w;
    assert_int_equal(
        reshard_tensors_add(ts, "w", RESHARD_BF16, 2, (int64_t[]){1024, 2048}, 0, NULL, &w),
        RESHARD_OK);
    reshard_model_refit_t r = {
        .tensors = ts,
        .train_spec = {.tp = 2, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 1},
        .infer_spec = {.tp = 2, .dp = 2},
        .train_world = 2,
        .infer_world = 4,
        .infer_offset = 2};
    reshard_plan_stats_t counts = {.bytes_network = (uint64_t)(2 * M),
                                   .bytes_nvlink = (uint64_t)(2 * M + M / 2)};
    reshard_system_t sys = {"toy", 2, 1e6, 0, 1e7, 0, 1e8, 1 << 20};
    reshard_sim_baseline_t b;
    assert_int_equal(reshard_sim_baseline(&r, &counts, &sys, &b), RESHARD_OK);
    assert_int_equal(b.chain_links, 4);
    assert_int_equal(b.chain_network_links, 2);
    assert_int_equal(b.buckets, 4);
    assert_true(fabs(b.gather_s - M / 2 / 1e7) < 1e-9);
    assert_true(fabs(b.chain_s - M / 1e6) < 1e-9);
    assert_true(fabs(b.copy_s - (M + M / 2) / 1e8) < 1e-9);
    assert_true(fabs(b.fill_s - 4 * 3 * (1 << 20) / 1e6) < 1e-9); /* 4 buckets x 3 links x 1 MiB */
    assert_true(fabs(b.seconds - (b.gather_s + b.chain_s + b.copy_s + b.fill_s)) < 1e-12);
    /* one domain for the whole inference side: the chain's one network link is
     * its root's, the rest is NVLink; gathered bytes are what is left */
    sys.domain_size = 4;
    r.infer_offset = 4;
    counts.bytes_network = (uint64_t)M;
    counts.bytes_nvlink = (uint64_t)(3 * M + M / 2);
    assert_int_equal(reshard_sim_baseline(&r, &counts, &sys, &b), RESHARD_OK);
    assert_int_equal(b.chain_network_links, 1);
    assert_true(fabs(b.gather_s - M / 2 / 1e7) < 1e-9);
    sys.copy_bytes_per_s = 0;
    assert_int_equal(reshard_sim_baseline(&r, &counts, &sys, &b), RESHARD_ERR_INVALID_ARG);
    reshard_tensors_destroy(ts);
}

/* A shipped MoE model on H100: network bytes at the lower bound, busiest NIC
 * within 1.05x its bound, prediction within 1.15x of the bound. */
static void test_shipped_model(void **state)
{
    (void)state;
    reshard_model_t *m;
    reshard_model_options_t o = {.layers = 4};
    assert_int_equal(reshard_model_load("qwen3-30b-a3b", &o, &m), RESHARD_OK);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse("ep=8,pp=2,dp=8", &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=8,dp=2", &is), RESHARD_OK);
    reshard_system_t sys;
    assert_int_equal(reshard_system_lookup("h100", &sys), RESHARD_OK);
    reshard_sim_refit_t r;
    assert_int_equal(reshard_sim_model(m, &ts, &is, &sys, &r), RESHARD_OK);
    assert_int_equal(r.infer_offset, 16);
    assert_int_equal(r.stats.bytes_network, r.stats.bytes_lower_bound);
    assert_true(r.stats.max_nic_send_bytes <= r.stats.nic_send_bound_bytes * 105 / 100);
    assert_true(r.stats.max_nic_recv_bytes <= r.stats.nic_recv_bound_bytes * 105 / 100);
    assert_true(r.sim.seconds >= r.sim.bound_s);
    assert_true(r.sim.seconds <= 1.15 * r.sim.bound_s);
    assert_true(r.baseline_s > r.sim.seconds);
    /* gb200: the training side fills 1 domain of 72, inference starts at 72 */
    assert_int_equal(reshard_system_lookup("gb200", &sys), RESHARD_OK);
    assert_int_equal(reshard_sim_model(m, &ts, &is, &sys, &r), RESHARD_OK);
    assert_int_equal(r.infer_offset, 72);
    assert_int_equal(r.stats.bytes_network, r.stats.bytes_lower_bound);
    reshard_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_systems),          cmocka_unit_test(test_cost_model_by_hand),
        cmocka_unit_test(test_baseline_by_hand), cmocka_unit_test(test_delta_cpu_by_hand),
        cmocka_unit_test(test_delta_measure),    cmocka_unit_test(test_shipped_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
