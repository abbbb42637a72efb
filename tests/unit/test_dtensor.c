/* DTensor placements compiled to fragments: torch.chunk semantics, nesting, StridedShard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "reshard/reshard.h"

typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *l;
} fixture_t;

static void make(fixture_t *f, int ndim, const int64_t *shape)
{
    assert_int_equal(reshard_tensors_create(&f->ts), RESHARD_OK);
    assert_int_equal(reshard_tensors_add(f->ts, "w", RESHARD_BF16, ndim, shape, 0, NULL, NULL),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_create(f->ts, &f->l), RESHARD_OK);
}

static void unmake(fixture_t *f)
{
    reshard_layout_destroy(f->l);
    reshard_tensors_destroy(f->ts);
}

/* Extents per rank of Shard(0) of N over k ranks (0 where the rank has no fragment). */
static void chunk_sizes(int64_t n, int k, int64_t *out)
{
    fixture_t f;
    make(&f, 1, &n);
    int32_t ranks[16];
    for (int i = 0; i < k; i++)
        ranks[i] = i;
    reshard_mesh_t mesh = {.ndim = 1, .shape = {k}, .ranks = ranks};
    reshard_placement_t pl = {RESHARD_SHARD, 0, 0};
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, &pl, 0, 0), RESHARD_OK);
    for (int i = 0; i < k; i++)
        out[i] = 0;
    for (int64_t i = 0; i < reshard_layout_count(f.l); i++) {
        reshard_fragment_t fr;
        assert_int_equal(reshard_layout_fragment(f.l, i, &fr), RESHARD_OK);
        out[fr.rank] = fr.box.extent[0];
        assert_int_equal(fr.base, 0);
        assert_int_equal(fr.stride[0], 1);
    }
    unmake(&f);
}

static void test_torch_chunk_table(void **state)
{
    (void)state;
    int64_t s[8];
    chunk_sizes(5, 4, s);
    assert_int_equal(s[0], 2);
    assert_int_equal(s[1], 2);
    assert_int_equal(s[2], 1);
    assert_int_equal(s[3], 0);
    chunk_sizes(7, 3, s);
    assert_int_equal(s[0], 3);
    assert_int_equal(s[1], 3);
    assert_int_equal(s[2], 1);
    chunk_sizes(2, 4, s);
    assert_int_equal(s[0], 1);
    assert_int_equal(s[1], 1);
    assert_int_equal(s[2], 0);
    assert_int_equal(s[3], 0);
    chunk_sizes(8, 4, s);
    for (int i = 0; i < 4; i++)
        assert_int_equal(s[i], 2);
}

/* Mesh [2,2] with (Shard(0), Shard(0)) on 10 rows: first split 5/5, then 3/2 each. */
static void test_nested_shard(void **state)
{
    (void)state;
    fixture_t f;
    int64_t shape[2] = {10, 3};
    make(&f, 2, shape);
    int32_t ranks[4] = {7, 8, 9, 10};
    reshard_mesh_t mesh = {.ndim = 2, .shape = {2, 2}, .ranks = ranks};
    reshard_placement_t pl[2] = {{RESHARD_SHARD, 0, 0}, {RESHARD_SHARD, 0, 0}};
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, pl, 3, 100), RESHARD_OK);
    assert_int_equal(reshard_layout_count(f.l), 4);
    const int64_t off[4] = {0, 3, 5, 8}, ext[4] = {3, 2, 3, 2};
    for (int i = 0; i < 4; i++) {
        reshard_fragment_t fr;
        reshard_layout_fragment(f.l, i, &fr);
        assert_int_equal(fr.rank, ranks[i]);
        assert_int_equal(fr.buffer, 3);
        assert_int_equal(fr.base, 100);
        assert_int_equal(fr.box.offset[0], off[i]);
        assert_int_equal(fr.box.extent[0], ext[i]);
        assert_int_equal(fr.box.extent[1], 3);
        assert_int_equal(fr.stride[0], 3);
        assert_int_equal(fr.stride[1], 1);
    }
    assert_int_equal(reshard_layout_buffer_bytes(f.l, 7, 3), (100 + 9) * 2);
    unmake(&f);
}

/* Shard on two dims and Replicate: mesh [2,3] (Shard(1), Replicate) on [4, 6]. */
static void test_shard_replicate(void **state)
{
    (void)state;
    fixture_t f;
    int64_t shape[2] = {4, 6};
    make(&f, 2, shape);
    int32_t ranks[6] = {0, 1, 2, 3, 4, 5};
    reshard_mesh_t mesh = {.ndim = 2, .shape = {2, 3}, .ranks = ranks};
    reshard_placement_t pl[2] = {{RESHARD_SHARD, 1, 0}, {RESHARD_REPLICATE, 0, 0}};
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, pl, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_count(f.l), 6);
    for (int i = 0; i < 6; i++) {
        reshard_fragment_t fr;
        reshard_layout_fragment(f.l, i, &fr);
        assert_int_equal(fr.box.offset[1], (i / 3) * 3);
        assert_int_equal(fr.box.extent[1], 3);
        assert_int_equal(fr.box.extent[0], 4);
        assert_int_equal(fr.stride[0], 3); /* local shape [4, 3] */
    }
    unmake(&f);
}

/* StridedShard(0, 2) over 2 ranks on 8 rows: blocks [0,4) [4,8); rank 0 holds
 * rows 0-1 and 4-5, rank 1 holds 2-3 and 6-7, stored contiguously. */
static void test_strided_shard(void **state)
{
    (void)state;
    fixture_t f;
    int64_t shape[2] = {8, 5};
    make(&f, 2, shape);
    int32_t ranks[2] = {0, 1};
    reshard_mesh_t mesh = {.ndim = 1, .shape = {2}, .ranks = ranks};
    reshard_placement_t pl = {RESHARD_STRIDED_SHARD, 0, 2};
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, &pl, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_count(f.l), 4);
    const int64_t rank[4] = {0, 0, 1, 1}, off[4] = {0, 4, 2, 6}, base[4] = {0, 10, 0, 10};
    for (int i = 0; i < 4; i++) {
        reshard_fragment_t fr;
        reshard_layout_fragment(f.l, i, &fr);
        assert_int_equal(fr.rank, rank[i]);
        assert_int_equal(fr.box.offset[0], off[i]);
        assert_int_equal(fr.box.extent[0], 2);
        assert_int_equal(fr.base, base[i]);
        assert_int_equal(fr.stride[0], 5);
    }
    unmake(&f);
}

/* StridedShard(0, 2) then Shard(0): the second split cuts the concatenated local rows. */
static void test_strided_then_shard(void **state)
{
    (void)state;
    fixture_t f;
    int64_t n = 8;
    make(&f, 1, &n);
    int32_t ranks[4] = {0, 1, 2, 3};
    reshard_mesh_t mesh = {.ndim = 2, .shape = {2, 2}, .ranks = ranks};
    reshard_placement_t pl[2] = {{RESHARD_STRIDED_SHARD, 0, 2}, {RESHARD_SHARD, 0, 0}};
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, pl, 0, 0), RESHARD_OK);
    /* mesh row 0 holds {0,1,4,5}: rank 0 gets {0,1}, rank 1 gets {4,5} */
    const int64_t want_off[4] = {0, 4, 2, 6};
    assert_int_equal(reshard_layout_count(f.l), 4);
    for (int i = 0; i < 4; i++) {
        reshard_fragment_t fr;
        reshard_layout_fragment(f.l, i, &fr);
        assert_int_equal(fr.rank, i);
        assert_int_equal(fr.box.offset[0], want_off[i]);
        assert_int_equal(fr.box.extent[0], 2);
    }
    unmake(&f);
}

static void test_bad_placements(void **state)
{
    (void)state;
    fixture_t f;
    int64_t n = 8;
    make(&f, 1, &n);
    int32_t ranks[2] = {0, 0};
    reshard_mesh_t mesh = {.ndim = 1, .shape = {2}, .ranks = ranks};
    reshard_placement_t pl = {RESHARD_SHARD, 0, 0};
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, &pl, 0, 0),
                     RESHARD_ERR_INVALID_ARG); /* duplicate rank */
    ranks[1] = 1;
    pl.dim = 1;
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, &pl, 0, 0), RESHARD_ERR_INVALID_ARG);
    pl = (reshard_placement_t){RESHARD_STRIDED_SHARD, 0, 0};
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, &pl, 0, 0), RESHARD_ERR_INVALID_ARG);
    ranks[1] = -3;
    pl = (reshard_placement_t){RESHARD_REPLICATE, 0, 0};
    assert_int_equal(reshard_layout_add_dtensor(f.l, 0, &mesh, &pl, 0, 0), RESHARD_ERR_RANK);
    unmake(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_chunk_table),  cmocka_unit_test(test_nested_shard),
        cmocka_unit_test(test_shard_replicate),    cmocka_unit_test(test_strided_shard),
        cmocka_unit_test(test_strided_then_shard), cmocka_unit_test(test_bad_placements),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
