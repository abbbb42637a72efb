/* Every validation error (DESIGN §8): distinct status, message naming tensor, rank and box. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <string.h>
#include <cmocka.h>

#include "inproc_refit.h"

typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
} pair_t;

/* Tensor "w" [8, 4] bf16: source on rank 0 whole, destination split on ranks 1, 2. */
static void make_pair(pair_t *p)
{
    int64_t shape[2] = {8, 4};
    assert_int_equal(reshard_tensors_create(&p->ts), RESHARD_OK);
    assert_int_equal(reshard_tensors_add(p->ts, "w", RESHARD_BF16, 2, shape, 0, NULL, NULL),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_create(p->ts, &p->src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(p->ts, &p->dst), RESHARD_OK);
    reshard_fragment_t f = {.tensor = 0,
                            .rank = 0,
                            .buffer = 0,
                            .box = {2, {0, 0}, {8, 4}},
                            .base = 0,
                            .stride = {4, 1}};
    assert_int_equal(reshard_layout_add_fragment(p->src, &f), RESHARD_OK);
}

static void free_pair(pair_t *p)
{
    reshard_layout_destroy(p->src);
    reshard_layout_destroy(p->dst);
    reshard_tensors_destroy(p->ts);
}

static reshard_status_t plan_status(pair_t *p, int32_t world)
{
    reshard_plan_params_t prm = {.world_size = world, .my_rank = RESHARD_ALL_RANKS};
    reshard_plan_t *plan = NULL;
    reshard_status_t st = reshard_plan_create(p->src, p->dst, &prm, &plan);
    reshard_plan_destroy(plan);
    return st;
}

/* Status of rank @p rank's own plan (timeout 0.2 s when it executes). */
static reshard_status_t rank_plan_status(pair_t *p, int32_t world, int32_t rank,
                                         reshard_plan_t **keep)
{
    reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_TIMEOUT,
                                 .world_size = world,
                                 .my_rank = rank,
                                 .timeout_s = 0.2};
    reshard_plan_t *plan = NULL;
    reshard_status_t st = reshard_plan_create(p->src, p->dst, &prm, &plan);
    if (keep)
        *keep = plan;
    else
        reshard_plan_destroy(plan);
    return st;
}

static void add_dst(pair_t *p, int32_t rank, int64_t row0, int64_t rows, int64_t base)
{
    reshard_fragment_t f = {.tensor = 0,
                            .rank = rank,
                            .buffer = 0,
                            .box = {2, {row0, 0}, {rows, 4}},
                            .base = base,
                            .stride = {4, 1}};
    assert_int_equal(reshard_layout_add_fragment(p->dst, &f), RESHARD_OK);
}

static void assert_msg(const char *want)
{
    const char *m = reshard_last_error();
    if (!strstr(m, want))
        fail_msg("message \"%s\" lacks \"%s\"", m, want);
}

static void test_ok_pair(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    add_dst(&p, 1, 0, 4, 0);
    add_dst(&p, 2, 4, 4, 0);
    assert_int_equal(plan_status(&p, 3), RESHARD_OK);
    reshard_plan_params_t prm = {.world_size = 3};
    rs_test_refit_t r = rs_test_inproc_refit(p.src, p.dst, &prm, 2, 0);
    assert_int_equal(r.status, RESHARD_OK);
    assert_int_equal(r.verified_bytes, 2 * 8 * 4 * 2);
    free_pair(&p);
}

static void test_uncovered(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    /* a source that only holds rows [0, 6): rows 6-7 of the destination have no source */
    reshard_layout_destroy(p.src);
    reshard_layout_create(p.ts, &p.src);
    reshard_fragment_t f = {.tensor = 0,
                            .rank = 0,
                            .buffer = 0,
                            .box = {2, {0, 0}, {6, 4}},
                            .base = 0,
                            .stride = {4, 1}};
    assert_int_equal(reshard_layout_add_fragment(p.src, &f), RESHARD_OK);
    add_dst(&p, 1, 4, 4, 0);
    assert_int_equal(plan_status(&p, 2), RESHARD_ERR_UNCOVERED);
    assert_msg("tensor w, rank 1, box [6:8, 0:4]");
    /* own plans: the rank missing rows and the source that would send them
     * fail; a rank whose rows are all held plans, and executing alone it
     * ends with TIMEOUT, not a hang */
    add_dst(&p, 2, 0, 4, 0);
    assert_int_equal(rank_plan_status(&p, 3, 1, NULL), RESHARD_ERR_UNCOVERED);
    assert_msg("tensor w, rank 1, box [6:8, 0:4]");
    assert_int_equal(rank_plan_status(&p, 3, 0, NULL), RESHARD_ERR_UNCOVERED);
    reshard_plan_t *plan;
    assert_int_equal(rank_plan_status(&p, 3, 2, &plan), RESHARD_OK);
    reshard_inproc_group_t *g;
    reshard_comm_t *c;
    assert_int_equal(reshard_inproc_group_create(3, &g), RESHARD_OK);
    assert_int_equal(reshard_comm_create_inproc(g, 2, &c), RESHARD_OK);
    uint16_t dbuf[16];
    reshard_buffer_t db = {.ptr = dbuf, .bytes = sizeof dbuf};
    assert_int_equal(reshard_plan_execute(plan, c, NULL, 0, &db, 1, NULL), RESHARD_ERR_TIMEOUT);
    reshard_comm_destroy(c);
    reshard_inproc_group_destroy(g);
    reshard_plan_destroy(plan);
    free_pair(&p);
}

static void test_overlap(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    add_dst(&p, 1, 0, 4, 0);
    add_dst(&p, 1, 4, 4, 8); /* rows 4-7 start at element 8: rows 2-3 of the first overlap */
    assert_int_equal(plan_status(&p, 2), RESHARD_ERR_OVERLAP);
    assert_msg("tensor w, rank 1");
    /* each rank checks the buffers it writes: rank 1's own plan fails */
    assert_int_equal(rank_plan_status(&p, 2, 1, NULL), RESHARD_ERR_OVERLAP);
    assert_msg("tensor w, rank 1");
    free_pair(&p);
    /* aliasing strides inside one fragment */
    make_pair(&p);
    reshard_fragment_t f = {.tensor = 0,
                            .rank = 1,
                            .buffer = 0,
                            .box = {2, {0, 0}, {8, 4}},
                            .base = 0,
                            .stride = {2, 1}};
    assert_int_equal(reshard_layout_add_fragment(p.dst, &f), RESHARD_OK);
    assert_int_equal(plan_status(&p, 2), RESHARD_ERR_OVERLAP);
    free_pair(&p);
}

static void test_rank_out_of_range(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    add_dst(&p, 5, 0, 8, 0);
    assert_int_equal(plan_status(&p, 3), RESHARD_ERR_RANK);
    assert_msg("tensor w, rank 5, box [0:8, 0:4]");
    reshard_fragment_t f = {.tensor = 0, .rank = -1, .box = {2, {0, 0}, {1, 1}}, .stride = {4, 1}};
    assert_int_equal(reshard_layout_add_fragment(p.dst, &f), RESHARD_ERR_RANK);
    free_pair(&p);
}

/* A destination fragment needing more bytes than its declared buffer is
 * refused whether the buffer was declared before the fragment was added
 * (checked as it is added) or after (checked when planning); one that fits
 * passes both ways. Rank 1's buffer holds w[0:4, :] (16 bf16 = 32 bytes);
 * rank 2's fits its fragment, so only rank 1's can raise the error. */
static void test_declared_before_or_after(void **state)
{
    (void)state;
    for (int after = 0; after < 2; after++)
        for (int64_t rows = 4; rows <= 5; rows++) {
            pair_t p;
            make_pair(&p);
            const int64_t shape[2] = {4, 4}, rest[2] = {8 - rows, 4};
            /* rank 2's buffer fits its fragment */
            assert_int_equal(
                reshard_layout_declare_buffer(p.dst, 2, 0, "w.dst", RESHARD_BF16, 2, rest),
                RESHARD_OK);
            if (!after)
                assert_int_equal(
                    reshard_layout_declare_buffer(p.dst, 1, 0, "w.dst", RESHARD_BF16, 2, shape),
                    RESHARD_OK);
            add_dst(&p, 1, 0, rows, 0);
            add_dst(&p, 2, rows, 8 - rows, 0);
            if (after)
                assert_int_equal(
                    reshard_layout_declare_buffer(p.dst, 1, 0, "w.dst", RESHARD_BF16, 2, shape),
                    RESHARD_OK);
            if (rows == 4) {
                assert_int_equal(plan_status(&p, 3), RESHARD_OK);
            } else {
                assert_int_equal(plan_status(&p, 3), RESHARD_ERR_BUFFER);
                assert_msg("tensor w, rank 1, box [0:5, 0:4]: needs 40 bytes of destination "
                           "buffer 0 (w.dst), declared 32 bytes");
            }
            free_pair(&p);
        }
}

static void test_box_errors(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    reshard_fragment_t f = {.tensor = 0, .rank = 1, .box = {2, {6, 0}, {4, 4}}, .stride = {4, 1}};
    assert_int_equal(reshard_layout_add_fragment(p.dst, &f), RESHARD_ERR_BOX);
    assert_msg("tensor w, rank 1: box [6:10, 0:4]");
    f.box = (reshard_box_t){1, {0}, {8}};
    assert_int_equal(reshard_layout_add_fragment(p.dst, &f), RESHARD_ERR_BOX);
    f.box = (reshard_box_t){2, {0, 0}, {0, 4}};
    assert_int_equal(reshard_layout_add_fragment(p.dst, &f), RESHARD_ERR_BOX);
    f.box = (reshard_box_t){2, {0, 0}, {8, 4}};
    f.tensor = 3;
    assert_int_equal(reshard_layout_add_fragment(p.dst, &f), RESHARD_ERR_INVALID_ARG);
    f.tensor = 0;
    f.stride[0] = INT64_MAX / 2;
    assert_int_equal(reshard_layout_add_fragment(p.dst, &f), RESHARD_ERR_OVERFLOW);
    free_pair(&p);
}

static void test_catalogue_mismatch(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    reshard_tensors_t *other;
    reshard_layout_t *dst;
    int64_t shape[2] = {8, 4}, bad[2] = {4, 8};
    reshard_tensors_create(&other);
    reshard_tensors_add(other, "w", RESHARD_FP32, 2, shape, 0, NULL, NULL);
    reshard_layout_create(other, &dst);
    reshard_plan_params_t prm = {.world_size = 2, .my_rank = RESHARD_ALL_RANKS};
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(p.src, dst, &prm, &plan), RESHARD_ERR_DTYPE);
    assert_msg("tensor w: dtype bf16 in the source, fp32");
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(other);
    reshard_tensors_create(&other);
    reshard_tensors_add(other, "w", RESHARD_BF16, 2, bad, 0, NULL, NULL);
    reshard_layout_create(other, &dst);
    assert_int_equal(reshard_plan_create(p.src, dst, &prm, &plan), RESHARD_ERR_SHAPE);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(other);
    free_pair(&p);
}

static void test_tensor_errors(void **state)
{
    (void)state;
    reshard_tensors_t *ts;
    reshard_tensors_create(&ts);
    int64_t big[2] = {INT64_MAX / 2, 4}, zero[1] = {0}, shape[2] = {6, 4}, view[3] = {2, 3, 5};
    assert_int_equal(reshard_tensors_add(ts, "big", RESHARD_BF16, 2, big, 0, NULL, NULL),
                     RESHARD_ERR_OVERFLOW);
    assert_int_equal(reshard_tensors_add(ts, "zero", RESHARD_BF16, 1, zero, 0, NULL, NULL),
                     RESHARD_ERR_SHAPE);
    assert_int_equal(reshard_tensors_add(ts, "view", RESHARD_BF16, 2, shape, 3, view, NULL),
                     RESHARD_ERR_SHAPE);
    assert_int_equal(reshard_tensors_add(ts, "x", RESHARD_DTYPE_COUNT, 2, shape, 0, NULL, NULL),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_tensors_add(ts, "x", RESHARD_BF16, 9, shape, 0, NULL, NULL),
                     RESHARD_ERR_INVALID_ARG);
    /* 3 * 2^31 elements is fine: 64-bit counts */
    int64_t large[2] = {3, (int64_t)1 << 31};
    assert_int_equal(reshard_tensors_add(ts, "large", RESHARD_BF16, 2, large, 0, NULL, NULL),
                     RESHARD_OK);
    assert_int_equal(reshard_tensors_add(ts, "large", RESHARD_BF16, 2, large, 0, NULL, NULL),
                     RESHARD_ERR_INVALID_ARG); /* duplicate name */
    assert_int_equal(reshard_tensors_bytes(ts), (uint64_t)3 << 32);
    reshard_tensors_destroy(ts);
}

/* A tensor over 2^31 elements plans with exact 64-bit byte counts. */
static void test_large_tensor_plan(void **state)
{
    (void)state;
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
    int64_t shape[2] = {(int64_t)1 << 20, (int64_t)1 << 13}; /* 2^33 elements */
    reshard_tensors_create(&ts);
    reshard_tensors_add(ts, "huge", RESHARD_BF16, 2, shape, 0, NULL, NULL);
    reshard_layout_create(ts, &src);
    reshard_layout_create(ts, &dst);
    int32_t sr[2] = {0, 1}, dr[4] = {2, 3, 4, 5};
    reshard_mesh_t sm = {.ndim = 1, .shape = {2}, .ranks = sr};
    reshard_mesh_t dm = {.ndim = 1, .shape = {4}, .ranks = dr};
    reshard_placement_t s0 = {RESHARD_SHARD, 0, 0}, s1 = {RESHARD_SHARD, 1, 0};
    assert_int_equal(reshard_layout_add_dtensor(src, 0, &sm, &s0, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(dst, 0, &dm, &s1, 0, 0), RESHARD_OK);
    reshard_plan_params_t prm = {.world_size = 6, .my_rank = RESHARD_ALL_RANKS};
    reshard_plan_t *plan;
    assert_int_equal(reshard_plan_create(src, dst, &prm, &plan), RESHARD_OK);
    reshard_plan_stats_t s;
    reshard_plan_get_stats(plan, &s);
    assert_int_equal(s.bytes_total, (uint64_t)1 << 34);
    assert_int_equal(s.bytes_network, (uint64_t)1 << 34);
    assert_int_equal(s.bytes_lower_bound, (uint64_t)1 << 34);
    assert_int_equal(s.transfers, 8);
    assert_int_equal(reshard_plan_pair_bytes(plan, 0, 2), (uint64_t)1 << 31);
    assert_int_equal(reshard_layout_buffer_bytes(dst, 2, 0), (uint64_t)1 << 32);
    reshard_plan_destroy(plan);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

static void test_staging_and_params(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    add_dst(&p, 1, 0, 8, 0);
    reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES,
                                 .world_size = 2,
                                 .my_rank = 0,
                                 .staging_bytes = 100};
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &prm, &plan), RESHARD_ERR_STAGING);
    prm.staging_bytes = 4096;
    prm.my_rank = 7;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &prm, &plan), RESHARD_ERR_RANK);
    prm.world_size = 0;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &prm, &plan), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_plan_create(NULL, p.dst, &prm, &plan), RESHARD_ERR_INVALID_ARG);
    free_pair(&p);
}

/* A missing or short buffer on one rank: every rank gets an error, nothing is written. */
static void test_bad_buffer_moves_nothing(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    add_dst(&p, 1, 0, 8, 0);
    /* rank 1 never calls execute here: a short timeout bounds rank 0's agreement wait */
    reshard_plan_params_t prm = {.field_mask = RESHARD_PLAN_PARAM_TIMEOUT,
                                 .world_size = 2,
                                 .my_rank = RESHARD_ALL_RANKS,
                                 .timeout_s = 0.2};
    reshard_plan_t *plan;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &prm, &plan), RESHARD_OK);
    reshard_inproc_group_t *g;
    reshard_inproc_group_create(1, &g);
    reshard_comm_t *c;
    reshard_comm_create_inproc(g, 0, &c);
    /* comm of the wrong size */
    uint16_t sbuf[32] = {0};
    reshard_buffer_t sb = {.ptr = sbuf, .bytes = 10}; /* under the 64 bytes the fragment needs */
    assert_int_equal(reshard_plan_execute(plan, c, &sb, 1, NULL, 0, NULL), RESHARD_ERR_INVALID_ARG);
    reshard_comm_destroy(c);
    reshard_inproc_group_destroy(g);
    reshard_inproc_group_create(2, &g);
    reshard_comm_create_inproc(g, 0, &c);
    assert_int_equal(reshard_plan_execute(plan, c, &sb, 1, NULL, 0, NULL), RESHARD_ERR_BUFFER);
    assert_msg("tensor w, rank 0, box [0:8, 0:4]: source buffer 0");
    reshard_comm_destroy(c);
    reshard_inproc_group_destroy(g);
    reshard_plan_destroy(plan);
    free_pair(&p);
}

typedef struct {
    const reshard_plan_t *plan;
    reshard_inproc_group_t *g;
    reshard_buffer_t buf;
    reshard_status_t st;
} dst_rank_t;

static void *dst_rank_main(void *arg)
{
    dst_rank_t *d = arg;
    reshard_comm_t *c;
    reshard_comm_create_inproc(d->g, 1, &c);
    d->st = reshard_plan_execute(d->plan, c, NULL, 0, &d->buf, 1, NULL);
    reshard_comm_destroy(c);
    return NULL;
}

/* Rank 0 passes a short source buffer while rank 1 is ready: both fail, and
 * rank 1's destination still holds the sentinel everywhere. */
static void test_bad_buffer_both_ranks_fail(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    add_dst(&p, 1, 0, 8, 0);
    reshard_plan_params_t prm = {.world_size = 2, .my_rank = RESHARD_ALL_RANKS};
    reshard_plan_t *plan;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &prm, &plan), RESHARD_OK);
    reshard_inproc_group_t *g;
    reshard_inproc_group_create(2, &g);
    uint8_t dbuf[64], sbuf[64];
    memset(dbuf, RESHARD_SENTINEL_BYTE, sizeof dbuf);
    dst_rank_t d = {plan, g, {.ptr = dbuf, .bytes = sizeof dbuf}, RESHARD_OK};
    pthread_t th;
    pthread_create(&th, NULL, dst_rank_main, &d);
    reshard_comm_t *c;
    reshard_comm_create_inproc(g, 0, &c);
    reshard_buffer_t sb = {.ptr = sbuf, .bytes = 32};
    assert_int_equal(reshard_plan_execute(plan, c, &sb, 1, NULL, 0, NULL), RESHARD_ERR_BUFFER);
    pthread_join(th, NULL);
    assert_int_equal(d.st, RESHARD_ERR_BUFFER);
    for (size_t i = 0; i < sizeof dbuf; i++)
        assert_int_equal(dbuf[i], RESHARD_SENTINEL_BYTE);
    reshard_comm_destroy(c);
    reshard_inproc_group_destroy(g);
    reshard_plan_destroy(plan);
    free_pair(&p);
}

/* Verification catches a wrong element, a written gap and written trailing padding. */
static void test_verify_detects(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p);
    /* rows 0-3 at element 0, rows 4-7 at element 20: a 4-element gap, plus trailing padding */
    add_dst(&p, 1, 0, 4, 0);
    add_dst(&p, 1, 4, 4, 20);
    uint8_t buf[128];
    reshard_buffer_t b = {.ptr = buf, .bytes = sizeof buf};
    memset(buf, RESHARD_SENTINEL_BYTE, sizeof buf);
    assert_int_equal(reshard_fill_pattern(p.dst, 1, &b, 1), RESHARD_OK);
    uint64_t v = 0;
    assert_int_equal(reshard_verify_pattern(p.dst, 1, &b, 1, &v), RESHARD_OK);
    assert_int_equal(v, 64);
    buf[3] ^= 1; /* element 1 of row 0 */
    assert_int_equal(reshard_verify_pattern(p.dst, 1, &b, 1, &v), RESHARD_ERR_VERIFY);
    assert_msg("tensor w, rank 1, box [0:4, 0:4]: 1 wrong elements, first at flat index 1");
    buf[3] ^= 1;
    buf[33] = 0; /* in the gap between the fragments */
    assert_int_equal(reshard_verify_pattern(p.dst, 1, &b, 1, &v), RESHARD_ERR_VERIFY);
    assert_msg("byte 33 belongs to no fragment");
    buf[33] = RESHARD_SENTINEL_BYTE;
    buf[127] = 0; /* trailing padding past the last fragment */
    assert_int_equal(reshard_verify_pattern(p.dst, 1, &b, 1, &v), RESHARD_ERR_VERIFY);
    assert_msg("byte 127 belongs to no fragment");
    free_pair(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_pair),
        cmocka_unit_test(test_uncovered),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_rank_out_of_range),
        cmocka_unit_test(test_declared_before_or_after),
        cmocka_unit_test(test_box_errors),
        cmocka_unit_test(test_catalogue_mismatch),
        cmocka_unit_test(test_tensor_errors),
        cmocka_unit_test(test_large_tensor_plan),
        cmocka_unit_test(test_staging_and_params),
        cmocka_unit_test(test_bad_buffer_moves_nothing),
        cmocka_unit_test(test_bad_buffer_both_ranks_fail),
        cmocka_unit_test(test_verify_detects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
