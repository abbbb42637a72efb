/*
 * Property test of topology-aware planning: random explicit fragments (row
 * ranges with replicas on the source side; arbitrary, partially overlapping
 * boxes, several per rank, some stored transposed, on the destination side)
 * under random domain sizes. Every plan must cross the network with exactly
 * the lower bound, give every rank the same pieces, and execute in-process
 * with every destination element verified and measured bytes == planned.
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

static uint64_t seed;

static int64_t pick(int64_t n)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (int64_t)(seed % (uint64_t)n);
}

typedef struct {
    reshard_layout_t *l;
    int32_t next_buf[16];
} side_t;

/* A fragment of rows [r0, r0+nr) x cols [c0, c0+nc) in a fresh buffer of
 * @p rank, row-major or (when @p transposed) column-major. */
static void add_box(side_t *s, int32_t tensor, int32_t rank, int64_t r0, int64_t nr, int64_t c0,
                    int64_t nc, int transposed)
{
    reshard_fragment_t f = {.tensor = tensor, .rank = rank, .buffer = s->next_buf[rank]++};
    f.box.ndim = 2;
    f.box.offset[0] = r0;
    f.box.extent[0] = nr;
    f.box.offset[1] = c0;
    f.box.extent[1] = nc;
    f.stride[0] = transposed ? 1 : nc;
    f.stride[1] = transposed ? nr : 1;
    assert_int_equal(reshard_layout_add_fragment(s->l, &f), RESHARD_OK);
}

/* Relay pieces in the plans of the large cases (they must occur). */
static int64_t relays_seen;

static void one_case(int c, int64_t max_rows, int64_t max_cols)
{
    int32_t world = 2 + (int32_t)pick(11);
    int32_t domain = (int32_t)pick(6);
    reshard_tensors_t *ts;
    assert_int_equal(reshard_tensors_create(&ts), RESHARD_OK);
    side_t src = {0}, dst = {0};
    assert_int_equal(reshard_layout_create(ts, &src.l), RESHARD_OK);
    assert_int_equal(reshard_layout_create(ts, &dst.l), RESHARD_OK);
    const reshard_dtype_t dts[3] = {RESHARD_BF16, RESHARD_FP32, RESHARD_INT8};
    int nt = 1 + (int)pick(2);
    for (int t = 0; t < nt; t++) {
        char name[32];
        snprintf(name, sizeof name, "c%d.t%d", c, t);
        int64_t rows = 1 + pick(max_rows), cols = 1 + pick(max_cols);
        int32_t id;
        assert_int_equal(
            reshard_tensors_add(ts, name, dts[pick(3)], 2, (int64_t[]){rows, cols}, 0, NULL, &id),
            RESHARD_OK);
        /* source: row ranges, each on 1-3 random ranks */
        for (int64_t r = 0; r < rows;) {
            int64_t nr = 1 + pick(rows - r);
            int reps = 1 + (int)pick(3);
            for (int k = 0; k < reps; k++)
                add_box(&src, id, (int32_t)pick(world), r, nr, 0, cols, 0);
            r += nr;
        }
        /* destination: random boxes on random ranks, several per rank */
        int nd = 1 + (int)pick(6);
        for (int k = 0; k < nd; k++) {
            int64_t r0 = pick(rows), c0 = pick(cols);
            add_box(&dst, id, (int32_t)pick(world), r0, 1 + pick(rows - r0), c0,
                    1 + pick(cols - c0), (int)pick(2));
        }
    }
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE |
                                             RESHARD_PLAN_PARAM_STAGING_BYTES,
                               .world_size = world,
                               .my_rank = RESHARD_ALL_RANKS,
                               .domain_size = domain,
                               .staging_bytes = 4096u << pick(4)};
    if (pick(3) == 0) { /* a relay scratch bound, sometimes none at all */
        p.field_mask |= RESHARD_PLAN_PARAM_RELAY_BYTES;
        p.relay_bytes = pick(2) ? 0 : (uint64_t)pick(1 << 20);
    }
    reshard_plan_t *all;
    assert_int_equal(reshard_plan_create(src.l, dst.l, &p, &all), RESHARD_OK);
    reshard_plan_stats_t s;
    reshard_plan_get_stats(all, &s);
    if ((p.field_mask & RESHARD_PLAN_PARAM_RELAY_BYTES) && s.max_relay_bytes > p.relay_bytes)
        fail_msg("case %d: relay scratch %llu over the bound %llu", c,
                 (unsigned long long)s.max_relay_bytes, (unsigned long long)p.relay_bytes);
    if (s.bytes_network != s.bytes_lower_bound)
        fail_msg("case %d: network %llu != lower bound %llu", c,
                 (unsigned long long)s.bytes_network, (unsigned long long)s.bytes_lower_bound);
    if (s.max_nic_send_bytes < s.nic_send_bound_bytes ||
        s.max_nic_recv_bytes < s.nic_recv_bound_bytes)
        fail_msg(
            "case %d: NIC send %llu < bound %llu or receive %llu < bound %llu", c,
            (unsigned long long)s.max_nic_send_bytes, (unsigned long long)s.nic_send_bound_bytes,
            (unsigned long long)s.max_nic_recv_bytes, (unsigned long long)s.nic_recv_bound_bytes);
    for (int32_t r = 0; r < world; r++) {
        char why[512];
        if (rs_test_check_rank_plan(src.l, dst.l, &p, all, r, why, sizeof why) != 0)
            fail_msg("case %d: %s", c, why);
    }
    for (int64_t i = 0; i < all->npieces; i++) {
        const rs_piece_t *q = &all->pieces[i];
        relays_seen += q->stage == RS_STAGE_DIRECT && dst.l->f[q->to_frag].rank != q->receiver;
    }
    reshard_plan_destroy(all);
    p.my_rank = RESHARD_ALL_RANKS;
    rs_test_refit_t x = rs_test_inproc_refit(src.l, dst.l, &p, 1, (int)pick(2));
    if (x.status != RESHARD_OK)
        fail_msg("case %d: %s: %s", c, reshard_status_string(x.status), x.message);
    assert_int_equal(x.verified_bytes, s.bytes_total);
    assert_int_equal(x.recv_bytes, s.bytes_network + s.bytes_nvlink);
    assert_int_equal(x.local_bytes, s.bytes_local);
    reshard_layout_destroy(src.l);
    reshard_layout_destroy(dst.l);
    reshard_tensors_destroy(ts);
}

static void test_random_topologies(void **state)
{
    (void)state;
    seed = 0x9E3779B97F4A7C15ull;
    for (int c = 0; c < 300; c++)
        one_case(c, 24, 40);
}

/* Tensors of up to 1 MiB: striping and relays (64 KiB stripes). */
static void test_random_large(void **state)
{
    (void)state;
    seed = 0x2545F4914F6CDD1Dull;
    relays_seen = 0;
    for (int c = 0; c < 60; c++)
        one_case(c, 128, 2048);
    assert_true(relays_seen > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_random_topologies),
                                       cmocka_unit_test(test_random_large)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
