/* Colocated refits over the in-process transport: the ranks are threads of one process,
 * so the one-sided reads are process_vm_readv on the process itself, which needs no
 * ptrace permission (this test runs under any Yama ptrace_scope or seccomp sandbox).
 * Every destination element is checked (rs_test_inproc_refit: the pattern, and every
 * padding byte left alone); the measured receive bytes tell which path each piece took. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "inproc_refit.h"
#include "mesh_pair.h"

static const uint64_t W_BYTES = RS_MESH_PAIR_ROWS * RS_MESH_PAIR_COLS * 4;

static rs_test_refit_t refit(const int32_t host[4], int colocated)
{
    rs_mesh_pair_t p;
    rs_mesh_pair_make(&p, 0);
    const int32_t dev[4] = {0, 1, 0, 1};
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_PLACEMENT |
                                              (colocated ? RESHARD_PLAN_PARAM_COLOCATED : 0),
                                .world_size = 4,
                                .host = host,
                                .device = dev,
                                .colocated = colocated};
    rs_test_refit_t r = rs_test_inproc_refit(p.src, p.dst, &pp, 2, 0);
    rs_mesh_pair_free(&p);
    return r;
}

/* One host: every byte read one-sided, nothing received. */
static void one_host_reads_everything(void **state)
{
    (void)state;
    const int32_t host[4] = {0, 0, 0, 0};
    rs_test_refit_t r = refit(host, 1);
    assert_int_equal(r.status, RESHARD_OK);
    assert_int_equal(r.verified_bytes, 2 * W_BYTES);
    assert_int_equal(r.recv_bytes, 0);
    /* the same placement without colocated reads: everything is received */
    r = refit(host, 0);
    assert_int_equal(r.status, RESHARD_OK);
    assert_int_equal(r.recv_bytes, 2 * W_BYTES);
}

/* Training and inference ranks on different hosts: everything crosses over the
 * transport, nothing is read. */
static void other_hosts_use_the_transport(void **state)
{
    (void)state;
    const int32_t host[4] = {0, 0, 1, 1};
    rs_test_refit_t r = refit(host, 1);
    assert_int_equal(r.status, RESHARD_OK);
    assert_int_equal(r.verified_bytes, 2 * W_BYTES);
    assert_int_equal(r.recv_bytes, 2 * W_BYTES);
}

/* Bad placements are refused before planning, naming the rank. */
static void bad_placement_refused(void **state)
{
    (void)state;
    rs_mesh_pair_t p;
    rs_mesh_pair_make(&p, 0);
    const int32_t host[4] = {0, 0, -2, 0};
    reshard_plan_params_t pp = {
        .field_mask = RESHARD_PLAN_PARAM_PLACEMENT, .world_size = 4, .my_rank = 0, .host = host};
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &pp, &plan), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "rank 2 has host id -2"));
    pp.field_mask = RESHARD_PLAN_PARAM_COLOCATED;
    pp.colocated = 1;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &pp, &plan), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "need a placement"));
    const int32_t ok[4] = {0, 0, 0, 0};
    pp.field_mask = RESHARD_PLAN_PARAM_PLACEMENT | RESHARD_PLAN_PARAM_COLOCATED |
                    RESHARD_PLAN_PARAM_DOMAIN_SIZE;
    pp.host = ok;
    pp.domain_size = 2;
    assert_int_equal(reshard_plan_create(p.src, p.dst, &pp, &plan), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "domain_size is 2"));
    rs_mesh_pair_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(one_host_reads_everything),
                                       cmocka_unit_test(other_hosts_use_the_transport),
                                       cmocka_unit_test(bad_placement_refused)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
