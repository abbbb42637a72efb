/*
 * Property test: hundreds of random layout pairs (random meshes of 1-3 dims,
 * random placements, uneven sizes, every dtype, replicas on both sides, fused
 * buffers) planned and executed in-process; every destination element and
 * padding byte is checked against the pattern filled at its source.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "inproc_refit.h"

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* A random mesh over distinct random ranks of [0, world) and random placements. */
static void random_dtensor(reshard_layout_t *l, int32_t tensor, int vndim, int32_t world,
                           int32_t buffer, int64_t base, int allow_strided)
{
    reshard_mesh_t mesh = {.ndim = 1 + (int)rnd(3)};
    int32_t perm[16], n = 1;
    reshard_placement_t pl[3];
    for (int m = 0; m < mesh.ndim; m++) {
        mesh.shape[m] = 1 + rnd(3);
        if (n * mesh.shape[m] > world)
            mesh.shape[m] = 1;
        n *= (int32_t)mesh.shape[m];
        uint32_t k = rnd(allow_strided ? 5 : 4);
        pl[m] = k == 0  ? (reshard_placement_t){RESHARD_REPLICATE, 0, 0}
                : k < 4 ? (reshard_placement_t){RESHARD_SHARD, (int)rnd((uint32_t)vndim), 0}
                        : (reshard_placement_t){RESHARD_STRIDED_SHARD, (int)rnd((uint32_t)vndim),
                                                1 + (int)rnd(3)};
    }
    for (int32_t i = 0; i < world; i++)
        perm[i] = i;
    for (int32_t i = world - 1; i > 0; i--) {
        int32_t j = (int32_t)rnd((uint32_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    mesh.ranks = perm;
    assert_int_equal(reshard_layout_add_dtensor(l, tensor, &mesh, pl, buffer, base), RESHARD_OK);
}

static void one_case(int c)
{
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
    assert_int_equal(reshard_tensors_create(&ts), RESHARD_OK);
    int32_t world = 1 + (int32_t)rnd(12);
    int nt = 1 + (int)rnd(3);
    uint64_t prefix = 0, dst_bytes = 0;
    int64_t bases[4];
    for (int t = 0; t < nt; t++) {
        char name[32];
        snprintf(name, sizeof name, "case%d.t%d", c, t);
        int ndim = 1 + (int)rnd(3);
        int64_t shape[3];
        for (int d = 0; d < ndim; d++)
            shape[d] = 1 + rnd(17);
        /* sometimes a finer view: split dim 0 into [2, n/2] when even */
        int64_t view[4];
        int vnd = 0;
        if (shape[0] % 2 == 0 && rnd(2)) {
            view[0] = 2;
            view[1] = shape[0] / 2;
            for (int d = 1; d < ndim; d++)
                view[d + 1] = shape[d];
            vnd = ndim + 1;
        }
        reshard_dtype_t dt = (reshard_dtype_t)rnd(RESHARD_DTYPE_COUNT);
        int32_t id;
        assert_int_equal(reshard_tensors_add(ts, name, dt, ndim, shape, vnd, view, &id),
                         RESHARD_OK);
        reshard_tensor_info_t info;
        reshard_tensors_info(ts, id, &info);
        size_t es = reshard_dtype_size(dt);
        bases[t] = (int64_t)((prefix + es - 1) / es); /* fused buffer: tensors one after another */
        prefix = (uint64_t)bases[t] * es + info.bytes + 8;
    }
    assert_int_equal(reshard_layout_create(ts, &src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(ts, &dst), RESHARD_OK);
    for (int t = 0; t < nt; t++) {
        reshard_tensor_info_t info;
        reshard_tensors_info(ts, t, &info);
        /* source: one full replica guarantees coverage, plus random sharded replicas */
        int32_t full_rank = (int32_t)rnd((uint32_t)world);
        reshard_mesh_t one = {.ndim = 1, .shape = {1}, .ranks = &full_rank};
        reshard_placement_t rep = {RESHARD_REPLICATE, 0, 0};
        /* source: every DTensor covers its whole tensor; add replicas at random */
        random_dtensor(src, t, info.view_ndim, world, 0, bases[t], 1);
        if (rnd(2))
            random_dtensor(src, t, info.view_ndim, world, 1, bases[t], 1);
        if (rnd(3) == 0)
            assert_int_equal(reshard_layout_add_dtensor(src, t, &one, &rep, 2 + t, 0), RESHARD_OK);
        random_dtensor(dst, t, info.view_ndim, world, 0, bases[t], 1);
    }
    for (int64_t i = 0; i < reshard_layout_count(dst); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(dst, i, &f);
        reshard_tensor_info_t info;
        reshard_tensors_info(ts, f.tensor, &info);
        int64_t n = 1;
        for (int d = 0; d < f.box.ndim; d++)
            n *= f.box.extent[d];
        dst_bytes += (uint64_t)n * reshard_dtype_size(info.dtype);
    }
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES,
                               .world_size = world,
                               .staging_bytes = 4096u << rnd(6)};
    int iters = 1 + (int)rnd(2);
    rs_test_refit_t r = rs_test_inproc_refit(src, dst, &p, iters, (int)rnd(2));
    if (r.status != RESHARD_OK)
        fail_msg("case %d: %s: %s", c, reshard_status_string(r.status), r.message);
    assert_int_equal(r.verified_bytes, (uint64_t)iters * dst_bytes);
    assert_int_equal(r.recv_bytes + r.local_bytes, (uint64_t)iters * dst_bytes);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

static void test_random_layout_pairs(void **state)
{
    (void)state;
    rng_state = 20261129;
    for (int c = 0; c < 400; c++)
        one_case(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_random_layout_pairs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
