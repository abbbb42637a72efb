/*
 * Topology-aware planning: each element crosses into a destination domain
 * once, lands on a rank that needs it (large shared boxes striped), and is
 * forwarded inside the domain. Byte counts below are computed by hand; every
 * plan is also executed in-process (shared and per-rank plans) with every
 * destination element verified.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "inproc_refit.h"
#include "plan_check.h"
#include "plan/plan_internal.h"

typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
} fx_t;

static void fx_make(fx_t *f)
{
    assert_int_equal(reshard_tensors_create(&f->ts), RESHARD_OK);
    assert_int_equal(reshard_layout_create(f->ts, &f->src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(f->ts, &f->dst), RESHARD_OK);
}

static void fx_free(fx_t *f)
{
    reshard_layout_destroy(f->src);
    reshard_layout_destroy(f->dst);
    reshard_tensors_destroy(f->ts);
}

static int32_t add_tensor(fx_t *f, const char *name, reshard_dtype_t dt, int ndim,
                          const int64_t *shape)
{
    int32_t id;
    assert_int_equal(reshard_tensors_add(f->ts, name, dt, ndim, shape, 0, NULL, &id), RESHARD_OK);
    return id;
}

/* A 2-d mesh [rows, cols] of consecutive ranks from @p first, placements p0, p1. */
static void dtensor2(reshard_layout_t *l, int32_t t, int32_t first, int rows, int cols,
                     reshard_placement_t p0, reshard_placement_t p1, int32_t buffer)
{
    int32_t ranks[64];
    for (int i = 0; i < rows * cols; i++)
        ranks[i] = first + i;
    reshard_mesh_t m = {.ndim = 2, .shape = {rows, cols}, .ranks = ranks};
    reshard_placement_t pl[2] = {p0, p1};
    assert_int_equal(reshard_layout_add_dtensor(l, t, &m, pl, buffer, 0), RESHARD_OK);
}

static const reshard_placement_t REP = {RESHARD_REPLICATE, 0, 0};
static const reshard_placement_t SH0 = {RESHARD_SHARD, 0, 0};

static reshard_plan_params_t params(int32_t world, int32_t domain)
{
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                               .world_size = world,
                               .my_rank = RESHARD_ALL_RANKS,
                               .domain_size = domain};
    return p;
}

static reshard_plan_stats_t plan_stats(const fx_t *f, const reshard_plan_params_t *p)
{
    reshard_plan_t *plan;
    assert_int_equal(reshard_plan_create(f->src, f->dst, p, &plan), RESHARD_OK);
    reshard_plan_stats_t s;
    assert_int_equal(reshard_plan_get_stats(plan, &s), RESHARD_OK);
    reshard_plan_destroy(plan);
    return s;
}

/* Per-rank plans hold exactly the pieces of the global plan; executed with
 * shared and per-rank plans, every byte verified, measured == planned. */
static void check_exec(const fx_t *f, const reshard_plan_params_t *p, const reshard_plan_stats_t *s)
{
    reshard_plan_t *all;
    assert_int_equal(reshard_plan_create(f->src, f->dst, p, &all), RESHARD_OK);
    for (int32_t r = 0; r < p->world_size; r++) {
        char why[512];
        if (rs_test_check_rank_plan(f->src, f->dst, p, all, r, why, sizeof why) != 0)
            fail_msg("%s", why);
    }
    reshard_plan_destroy(all);
    for (int shared = 0; shared < 2; shared++) {
        rs_test_refit_t r = rs_test_inproc_refit(f->src, f->dst, p, 2, shared);
        if (r.status != RESHARD_OK)
            fail_msg("refit failed: %s", r.message);
        assert_int_equal(r.verified_bytes, 2 * s->bytes_total);
        assert_int_equal(r.recv_bytes, 2 * (s->bytes_network + s->bytes_nvlink));
        assert_int_equal(r.local_bytes, 2 * s->bytes_local);
    }
}

/* 4 source ranks (domain 0, Shard(0)) -> 2 domains x 4 ranks, each domain
 * two TP2 replicas of W [64, 32] bf16 (4096 bytes). Each domain needs W once:
 * 4 source cells of 1024 bytes, each needed by 2 ranks of the domain. */
static void test_two_domains_tp2_replicas(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    int32_t w = add_tensor(&f, "w", RESHARD_BF16, 2, (int64_t[]){64, 32});
    int32_t r0[4] = {0, 1, 2, 3};
    reshard_mesh_t m = {.ndim = 1, .shape = {4}, .ranks = r0};
    assert_int_equal(reshard_layout_add_dtensor(f.src, w, &m, &SH0, 0, 0), RESHARD_OK);
    dtensor2(f.dst, w, 4, 2, 2, REP, SH0, 0); /* domain 1: ranks 4..7 */
    dtensor2(f.dst, w, 8, 2, 2, REP, SH0, 0); /* domain 2: ranks 8..11 */
    reshard_plan_params_t p = params(12, 4);
    reshard_plan_stats_t s = plan_stats(&f, &p);
    assert_int_equal(s.bytes_total, 4 * 4096);
    assert_int_equal(s.bytes_lower_bound, 2 * 4096);
    assert_int_equal(s.bytes_network, 2 * 4096);
    assert_int_equal(s.bytes_nvlink, 2 * 4096); /* every cell forwarded once per domain */
    assert_int_equal(s.bytes_local, 0);
    /* each source rank sends its 1024 bytes to two domains */
    assert_int_equal(s.max_nic_send_bytes, 2048);
    assert_int_equal(s.nic_send_bound_bytes, 2048);
    /* 4 cells over 4 ranks: one each */
    assert_int_equal(s.max_nic_recv_bytes, 1024);
    assert_int_equal(s.nic_recv_bound_bytes, 1024);
    check_exec(&f, &p, &s);
    /* without a topology every rank fetches its own half */
    p = params(12, 0);
    s = plan_stats(&f, &p);
    assert_int_equal(s.bytes_network, 4 * 4096);
    assert_int_equal(s.bytes_nvlink, 0);
    assert_int_equal(s.bytes_lower_bound, 4 * 4096);
    check_exec(&f, &p, &s);
    fx_free(&f);
}

/* A replicated 256 KiB tensor needed by all 4 ranks of each of 2 domains,
 * from one source rank: striped into 4 x 64 KiB landings per domain, each
 * forwarded to the 3 other ranks. */
static void test_stripe_replicated(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    int32_t n = add_tensor(&f, "norm", RESHARD_FP32, 1, (int64_t[]){65536});
    int32_t r0 = 0;
    reshard_mesh_t m = {.ndim = 1, .shape = {1}, .ranks = &r0};
    assert_int_equal(reshard_layout_add_dtensor(f.src, n, &m, &REP, 0, 0), RESHARD_OK);
    int32_t rd[8] = {4, 5, 6, 7, 8, 9, 10, 11};
    reshard_mesh_t md = {.ndim = 1, .shape = {8}, .ranks = rd};
    assert_int_equal(reshard_layout_add_dtensor(f.dst, n, &md, &REP, 0, 0), RESHARD_OK);
    reshard_plan_params_t p = params(12, 4);
    reshard_plan_stats_t s = plan_stats(&f, &p);
    const uint64_t T = 262144;
    assert_int_equal(s.bytes_total, 8 * T);
    assert_int_equal(s.bytes_network, 2 * T);
    assert_int_equal(s.bytes_lower_bound, 2 * T);
    assert_int_equal(s.bytes_nvlink, 2 * 3 * T);
    assert_int_equal(s.max_nic_recv_bytes, T / 4);
    assert_int_equal(s.nic_recv_bound_bytes, T / 4);
    assert_int_equal(s.max_nic_send_bytes, 2 * T); /* the only holder */
    assert_int_equal(s.nic_send_bound_bytes, 2 * T);
    check_exec(&f, &p, &s);
    /* a small staging bound: many rounds, forwards overlap later arrivals */
    p.field_mask |= RESHARD_PLAN_PARAM_STAGING_BYTES;
    p.staging_bytes = 8192;
    check_exec(&f, &p, &s);
    fx_free(&f);
}

/* Forward streams mixing pieces that move straight between the user buffers (256 KiB,
 * dense on both ends) with small ones packed through the slot (4 KiB each), all replicated
 * from rank 0 onto the 4 ranks of domain 1: a forward round posts several messages to one
 * peer, direct and packed in stream order, and (under a small staging bound) forwards a
 * landing's prefix while the rest of it is still arriving. */
static void test_forward_messages(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    const int64_t len[4] = {65536, 1024, 65536, 1024}; /* fp32: 256 KiB, 4 KiB, ... */
    int32_t r0 = 0, rd[4] = {4, 5, 6, 7};
    reshard_mesh_t m = {.ndim = 1, .shape = {1}, .ranks = &r0};
    reshard_mesh_t md = {.ndim = 1, .shape = {4}, .ranks = rd};
    uint64_t T = 0;
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        int32_t t = add_tensor(&f, name, RESHARD_FP32, 1, &len[i]);
        assert_int_equal(reshard_layout_add_dtensor(f.src, t, &m, &REP, i, 0), RESHARD_OK);
        assert_int_equal(reshard_layout_add_dtensor(f.dst, t, &md, &REP, i, 0), RESHARD_OK);
        T += (uint64_t)len[i] * 4;
    }
    reshard_plan_params_t p = params(8, 4);
    reshard_plan_stats_t s = plan_stats(&f, &p);
    assert_int_equal(s.bytes_total, 4 * T);
    assert_int_equal(s.bytes_network, T);
    assert_int_equal(s.bytes_nvlink, 3 * T);
    check_exec(&f, &p, &s);
    p.field_mask |= RESHARD_PLAN_PARAM_STAGING_BYTES;
    for (uint64_t staging = 4096; staging <= 65536; staging *= 4) {
        p.staging_bytes = staging;
        check_exec(&f, &p, &s);
    }
    fx_free(&f);
}

/* Domain size 3 over TP2 replicas (ranks 0..5 = replicas (0,1) (2,3) (4,5)),
 * sources on ranks 6, 7 (the short last domain). W [8, 65536] bf16 = 1 MiB,
 * halves A (rows 0..3) and B (rows 4..7) of 512 KiB, one per source rank.
 * Domain 0 = {0:A, 1:B, 2:A}: B must reach rank 1 alone, A is striped over
 * ranks 0 and 2 (256 KiB each) and each stripe forwarded to the other. Rank
 * 1 (512 KiB) is over the domain's share (1 MiB / 3): it relays 64 KiB
 * stripes of B through ranks 0 and 2 (least loaded first) while it stays
 * over share + 16 KiB and they stay under the share: 0 takes one, 2 takes
 * one, a third would put 0 over the share. Loads: 384, 320, 320 KiB.
 * Domain 1 = {3:B, 4:A, 5:B} likewise. */
static void test_domain_straddles_replicas(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    int32_t w = add_tensor(&f, "w", RESHARD_BF16, 2, (int64_t[]){8, 65536});
    dtensor2(f.src, w, 6, 1, 2, REP, SH0, 0);
    dtensor2(f.dst, w, 0, 3, 2, REP, SH0, 0);
    reshard_plan_params_t p = params(8, 3);
    reshard_plan_stats_t s = plan_stats(&f, &p);
    const uint64_t H = 524288;
    assert_int_equal(s.bytes_total, 6 * H);
    assert_int_equal(s.bytes_lower_bound, 4 * H);
    assert_int_equal(s.bytes_network, 4 * H);
    assert_int_equal(s.bytes_nvlink, 2 * H + 2 * 2 * 65536); /* A stripes + relayed stripes */
    assert_int_equal(s.max_nic_recv_bytes, 384 * 1024);
    assert_int_equal(s.nic_recv_bound_bytes, (2 * H + 2) / 3); /* 1 MiB over 3 ranks */
    assert_int_equal(s.max_nic_send_bytes, 2 * H);             /* each half to two domains */
    assert_int_equal(s.nic_send_bound_bytes, 2 * H);
    assert_int_equal(s.max_relay_bytes, 65536); /* ranks 0 and 2 hold one stripe each */
    check_exec(&f, &p, &s);
    p.field_mask |= RESHARD_PLAN_PARAM_STAGING_BYTES; /* relays over many rounds */
    p.staging_bytes = 16384;
    check_exec(&f, &p, &s);
    /* a relay scratch bound: the group (1 MiB of the domain's 1.5 MiB of
     * fragments) gets 2/3 of it; 96 KiB leaves room for a stripe per rank,
     * 64 KiB for none: rank 1 then lands all of B itself */
    p.field_mask |= RESHARD_PLAN_PARAM_RELAY_BYTES;
    p.relay_bytes = 96 * 1024;
    reshard_plan_stats_t r = plan_stats(&f, &p);
    assert_int_equal(r.max_relay_bytes, 65536);
    assert_int_equal(r.max_nic_recv_bytes, 384 * 1024);
    p.relay_bytes = 64 * 1024;
    r = plan_stats(&f, &p);
    assert_int_equal(r.max_relay_bytes, 0);
    assert_int_equal(r.bytes_nvlink, 2 * H);
    assert_int_equal(r.max_nic_recv_bytes, H);
    assert_int_equal(r.bytes_network, 4 * H);
    check_exec(&f, &p, &r);
    fx_free(&f);
}

/* Uneven last domain: domain size 4 over 10 ranks, sources 0..3 (Shard(0)
 * of 8 rows), destinations 4..9 all replicate W [8, 16384] fp32 (512 KiB):
 * domain 1 = {4..7} and domain 2 = {8, 9}. Each domain receives W once;
 * per source rank 128 KiB to 2 domains. Each 128 KiB cell is striped in two
 * 64 KiB rows: domain 1 lands 128 KiB per rank and forwards every stripe 3
 * times, domain 2 lands 256 KiB per rank and forwards every stripe once. */
static void test_uneven_last_domain(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    int32_t w = add_tensor(&f, "w", RESHARD_FP32, 2, (int64_t[]){8, 16384});
    int32_t rs[4] = {0, 1, 2, 3};
    reshard_mesh_t m = {.ndim = 1, .shape = {4}, .ranks = rs};
    assert_int_equal(reshard_layout_add_dtensor(f.src, w, &m, &SH0, 0, 0), RESHARD_OK);
    int32_t rd[6] = {4, 5, 6, 7, 8, 9};
    reshard_mesh_t md = {.ndim = 1, .shape = {6}, .ranks = rd};
    assert_int_equal(reshard_layout_add_dtensor(f.dst, w, &md, &REP, 0, 0), RESHARD_OK);
    reshard_plan_params_t p = params(10, 4);
    reshard_plan_stats_t s = plan_stats(&f, &p);
    const uint64_t W = 524288;
    assert_int_equal(s.bytes_total, 6 * W);
    assert_int_equal(s.bytes_network, 2 * W);
    assert_int_equal(s.bytes_lower_bound, 2 * W);
    assert_int_equal(s.bytes_nvlink, 3 * W + 1 * W);
    assert_int_equal(s.nic_recv_bound_bytes, W / 2); /* domain 2: 512 KiB over 2 ranks */
    assert_int_equal(s.max_nic_recv_bytes, W / 2);
    assert_int_equal(s.max_nic_send_bytes, W / 4 * 2);
    assert_int_equal(s.nic_send_bound_bytes, W / 4 * 2);
    check_exec(&f, &p, &s);
    p.field_mask |= RESHARD_PLAN_PARAM_STAGING_BYTES;
    p.staging_bytes = 4096;
    check_exec(&f, &p, &s);
    fx_free(&f);
}

/* Tied weights inside one rank: two destination fragments of one tensor on
 * rank 1 (buffers 0 and 1) cross the network once and are copied locally. */
static void test_tied_in_one_rank(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    int32_t e = add_tensor(&f, "embed", RESHARD_BF16, 2, (int64_t[]){16, 64});
    int32_t r0 = 0, r1 = 1;
    reshard_mesh_t m0 = {.ndim = 1, .shape = {1}, .ranks = &r0};
    reshard_mesh_t m1 = {.ndim = 1, .shape = {1}, .ranks = &r1};
    assert_int_equal(reshard_layout_add_dtensor(f.src, e, &m0, &REP, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(f.dst, e, &m1, &REP, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(f.dst, e, &m1, &REP, 1, 0), RESHARD_OK);
    for (int32_t dom = 0; dom <= 1; dom++) {
        reshard_plan_params_t p = params(2, dom);
        reshard_plan_stats_t s = plan_stats(&f, &p);
        assert_int_equal(s.bytes_total, 2 * 2048);
        assert_int_equal(s.bytes_network, 2048);
        assert_int_equal(s.bytes_lower_bound, 2048);
        assert_int_equal(s.bytes_local, 2048);
        assert_int_equal(s.bytes_nvlink, 0);
        check_exec(&f, &p, &s);
    }
    fx_free(&f);
}

/* Partially overlapping needs inside one domain are refined so every element
 * crosses once: rank 2 needs rows [0, 6), rank 3 rows [4, 8) of W [8, 4096]
 * bf16 (8 KiB a row); the domain needs 8 rows = 64 KiB. */
static void test_partial_overlap(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    int32_t w = add_tensor(&f, "w", RESHARD_BF16, 2, (int64_t[]){8, 4096});
    int32_t r0 = 0;
    reshard_mesh_t m0 = {.ndim = 1, .shape = {1}, .ranks = &r0};
    assert_int_equal(reshard_layout_add_dtensor(f.src, w, &m0, &REP, 0, 0), RESHARD_OK);
    reshard_fragment_t a = {.tensor = w,
                            .rank = 2,
                            .buffer = 0,
                            .box = {.ndim = 2, .offset = {0, 0}, .extent = {6, 4096}},
                            .stride = {4096, 1}};
    reshard_fragment_t b = a;
    b.rank = 3;
    b.box.offset[0] = 4;
    b.box.extent[0] = 4;
    assert_int_equal(reshard_layout_add_fragment(f.dst, &a), RESHARD_OK);
    assert_int_equal(reshard_layout_add_fragment(f.dst, &b), RESHARD_OK);
    reshard_plan_params_t p = params(4, 2);
    reshard_plan_stats_t s = plan_stats(&f, &p);
    assert_int_equal(s.bytes_total, 10 * 8192);
    assert_int_equal(s.bytes_network, 8 * 8192);
    assert_int_equal(s.bytes_lower_bound, 8 * 8192);
    assert_int_equal(s.bytes_nvlink, 2 * 8192);
    check_exec(&f, &p, &s);
    fx_free(&f);
}

/* A held-in-domain element never crosses the network: sources and
 * destinations share a domain for half of the tensor. */
static void test_in_domain_holder(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    int32_t w = add_tensor(&f, "w", RESHARD_BF16, 2, (int64_t[]){8, 512});
    dtensor2(f.src, w, 0, 1, 2, REP, SH0, 0); /* rank 0 rows 0..3, rank 1 rows 4..7 */
    int32_t rd[2] = {1, 3};
    reshard_mesh_t md = {.ndim = 1, .shape = {2}, .ranks = rd};
    assert_int_equal(reshard_layout_add_dtensor(f.dst, w, &md, &REP, 0, 0), RESHARD_OK);
    reshard_plan_params_t p = params(4, 2); /* domains {0,1} {2,3} */
    reshard_plan_stats_t s = plan_stats(&f, &p);
    /* rank 1 copies its own rows 4..7 and gets rows 0..3 from rank 0 over
     * NVLink; only rank 3 (domain 1) needs the network, for all of W */
    assert_int_equal(s.bytes_total, 2 * 8192);
    assert_int_equal(s.bytes_lower_bound, 8192);
    assert_int_equal(s.bytes_network, 8192);
    assert_int_equal(s.bytes_nvlink, 4096);
    assert_int_equal(s.bytes_local, 4096);
    check_exec(&f, &p, &s);
    fx_free(&f);
}

/* A rank that needs a whole tensor relays half of it through a domain peer
 * that needs none, even when every source element has one holder: W [64,
 * 4096] bf16 (8 KiB a row) in two sole halves on ranks 0 and 1, all of it
 * needed by rank 2 of domain {2, 3}. Rank 2 would land 512 KiB, over the
 * group's share of 256 KiB (plus 16 KiB slack); stripes of 64 KiB move from
 * the end of its landings to rank 3 until it is at its share: the rows rank 1
 * holds land on rank 3, which forwards them to rank 2. Each sender's own
 * plan must see the relay too. */
static void test_relay_from_sole_holders(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    int32_t w = add_tensor(&f, "w", RESHARD_BF16, 2, (int64_t[]){64, 4096});
    int32_t rs[2] = {0, 1}, rd = 2;
    reshard_mesh_t ms = {.ndim = 1, .shape = {2}, .ranks = rs};
    reshard_mesh_t md = {.ndim = 1, .shape = {1}, .ranks = &rd};
    assert_int_equal(reshard_layout_add_dtensor(f.src, w, &ms, &SH0, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(f.dst, w, &md, &REP, 0, 0), RESHARD_OK);
    reshard_plan_params_t p = params(4, 2);
    reshard_plan_stats_t s = plan_stats(&f, &p);
    assert_int_equal(s.bytes_total, 64 * 8192);
    assert_int_equal(s.bytes_network, 64 * 8192);
    assert_int_equal(s.bytes_nvlink, 32 * 8192);
    assert_int_equal(s.max_nic_recv_bytes, 32 * 8192);
    reshard_plan_t *all;
    assert_int_equal(reshard_plan_create(f.src, f.dst, &p, &all), RESHARD_OK);
    assert_int_equal(reshard_plan_pair_bytes(all, 0, 2), 32 * 8192);
    assert_int_equal(reshard_plan_pair_bytes(all, 1, 3), 32 * 8192);
    assert_int_equal(reshard_plan_pair_bytes(all, 1, 2), 0);
    reshard_plan_destroy(all);
    check_exec(&f, &p, &s);
    fx_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_domains_tp2_replicas),
        cmocka_unit_test(test_stripe_replicated),
        cmocka_unit_test(test_forward_messages),
        cmocka_unit_test(test_domain_straddles_replicas),
        cmocka_unit_test(test_uneven_last_domain),
        cmocka_unit_test(test_tied_in_one_rank),
        cmocka_unit_test(test_partial_overlap),
        cmocka_unit_test(test_in_domain_holder),
        cmocka_unit_test(test_relay_from_sole_holders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
