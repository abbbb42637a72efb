/* A caller's transport through reshard_transport.h: reshard_comm_create_transport's
 * checks, and a refit over a transport made only of the public interface (each
 * operation checks the contract the header states, then hands the call to an
 * in-process endpoint), every destination element verified. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "exec/comm.h" /* the inner in-process endpoint's operations */
#include "mesh_pair.h"
#include "reshard/reshard_transport.h"

/* ---- the checking transport ------------------------------------------------------------ */

typedef struct {
    reshard_comm_t *inner; /* an in-process endpoint that moves the bytes */
    int open[2];           /* round_begin seen, round_wait not yet */
    int posted[2];         /* operations posted into the slot's open round */
    int finishes, rounds, destroyed, violations;
    char violation[256];
} chk_t;

static chk_t *ctx_of(reshard_comm_t *c)
{
    return reshard_comm_transport_ctx(c);
}

static void violate(chk_t *k, const char *what)
{
    if (!k->violations++)
        snprintf(k->violation, sizeof k->violation, "%s", what);
}

static reshard_status_t chk_alloc(reshard_comm_t *c, uint64_t bytes, void **out)
{
    reshard_comm_t *in = ctx_of(c)->inner;
    return in->ops->alloc_staging(in, bytes, out);
}

static void chk_free(reshard_comm_t *c, void *p)
{
    reshard_comm_t *in = ctx_of(c)->inner;
    in->ops->free_staging(in, p);
}

static reshard_status_t chk_begin(reshard_comm_t *c, int slot)
{
    chk_t *k = ctx_of(c);
    if (slot != 0 && slot != 1)
        violate(k, "slot outside {0, 1}");
    else if (k->open[slot])
        violate(k, "round_begin on a slot not waited for");
    else
        k->open[slot] = 1, k->posted[slot] = 0;
    return k->inner->ops->round_begin(k->inner, slot);
}

static void check_post(reshard_comm_t *c, int slot, int32_t peer, const void *buf, uint64_t bytes)
{
    chk_t *k = ctx_of(c);
    if (slot != 0 && slot != 1)
        violate(k, "post into a slot outside {0, 1}");
    else if (!k->open[slot])
        violate(k, "post outside round_begin .. round_wait");
    else
        k->posted[slot]++;
    if (peer < 0 || peer >= reshard_comm_size(c) || peer == reshard_comm_rank(c))
        violate(k, "post to this rank or outside the endpoint");
    if (!buf || bytes == 0)
        violate(k, "post of no bytes");
}

static reshard_status_t chk_send(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                 uint64_t bytes)
{
    check_post(c, slot, peer, buf, bytes);
    reshard_comm_t *in = ctx_of(c)->inner;
    return in->ops->post_send(in, slot, peer, buf, bytes);
}

static reshard_status_t chk_recv(reshard_comm_t *c, int slot, int32_t peer, void *buf,
                                 uint64_t bytes)
{
    check_post(c, slot, peer, buf, bytes);
    reshard_comm_t *in = ctx_of(c)->inner;
    return in->ops->post_recv(in, slot, peer, buf, bytes);
}

static reshard_status_t chk_end(reshard_comm_t *c, int slot)
{
    reshard_comm_t *in = ctx_of(c)->inner;
    return in->ops->round_end(in, slot);
}

static reshard_status_t chk_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    chk_t *k = ctx_of(c);
    if (slot == 0 || slot == 1) {
        if (!k->open[slot])
            violate(k, "round_wait without round_begin");
        k->open[slot] = 0;
        k->rounds++;
    }
    if (!(timeout_s > 0))
        violate(k, "round_wait without a positive timeout");
    return k->inner->ops->round_wait(k->inner, slot, timeout_s);
}

static reshard_status_t chk_finish(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                                   int64_t *min_words, double timeout_s)
{
    chk_t *k = ctx_of(c);
    k->finishes++;
    if (k->open[0] || k->open[1])
        violate(k, "finish with a round open");
    return k->inner->ops->finish(k->inner, local, words, min_words, timeout_s);
}

static void chk_destroy(reshard_comm_t *c)
{
    chk_t *k = ctx_of(c);
    k->destroyed++;
    reshard_comm_destroy(k->inner);
    k->inner = NULL;
}

static const reshard_transport_ops_t chk_ops = {
    .version = RESHARD_TRANSPORT_VERSION,
    .name = "checking",
    .alloc_staging = chk_alloc,
    .free_staging = chk_free,
    .round_begin = chk_begin,
    .post_send = chk_send,
    .post_recv = chk_recv,
    .round_end = chk_end,
    .round_wait = chk_wait,
    .finish = chk_finish,
    .destroy = chk_destroy,
};

/* ---- the constructor's checks ---------------------------------------------------------- */

static void test_create_checks(void **state)
{
    (void)state;
    chk_t k = {0};
    reshard_comm_t *c = (reshard_comm_t *)&k; /* must be reset to NULL on error */
    assert_int_equal(reshard_comm_create_transport(NULL, &k, 0, 1, &c), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_comm_create_transport(&chk_ops, &k, 0, 1, NULL),
                     RESHARD_ERR_INVALID_ARG);

    reshard_transport_ops_t ops = chk_ops;
    ops.version = RESHARD_TRANSPORT_VERSION + 1;
    assert_int_equal(reshard_comm_create_transport(&ops, &k, 0, 1, &c), RESHARD_ERR_INVALID_ARG);
    assert_null(c);
    assert_non_null(strstr(reshard_last_error(), "ops version 2"));

    ops = chk_ops;
    ops.post_recv = NULL;
    assert_int_equal(reshard_comm_create_transport(&ops, &k, 0, 1, &c), RESHARD_ERR_INVALID_ARG);
    assert_string_equal(reshard_last_error(),
                        "reshard_comm_create_transport: the checking transport's ops lack "
                        "post_recv");

    ops = chk_ops;
    ops.device_memory = true; /* CPU packing cannot reach device memory */
    assert_int_equal(reshard_comm_create_transport(&ops, &k, 0, 1, &c), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "lack pack (device memory)"));

    assert_int_equal(reshard_comm_create_transport(&chk_ops, &k, 0, 0, &c),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_comm_create_transport(&chk_ops, &k, 3, 3, &c), RESHARD_ERR_RANK);
    assert_int_equal(reshard_comm_create_transport(&chk_ops, &k, -1, 3, &c), RESHARD_ERR_RANK);

    /* the table is copied: the caller's may go away */
    ops = chk_ops;
    ops.destroy = NULL;
    assert_int_equal(reshard_comm_create_transport(&ops, &k, 1, 3, &c), RESHARD_OK);
    memset(&ops, 0, sizeof ops);
    assert_int_equal(reshard_comm_rank(c), 1);
    assert_int_equal(reshard_comm_size(c), 3);
    assert_ptr_equal(reshard_comm_transport_ctx(c), &k);
    assert_string_equal(reshard_comm_transport_name(c), "checking");
    reshard_comm_destroy(c);

    assert_int_equal(reshard_transport_error(RESHARD_ERR_TIMEOUT, "rank 2: no data from rank 5"),
                     RESHARD_ERR_TIMEOUT);
    assert_string_equal(reshard_last_error(), "rank 2: no data from rank 5");
    assert_int_equal(reshard_transport_error(RESHARD_ERR_TRANSPORT, NULL), RESHARD_ERR_TRANSPORT);
    assert_string_equal(reshard_last_error(), "RESHARD_ERR_TRANSPORT");
    assert_null(reshard_comm_transport_ctx(NULL));
    assert_string_equal(reshard_comm_transport_name(NULL), "");
}

/* ---- a refit over it ------------------------------------------------------------------- */

enum { WORLD = 4, SHARD_BYTES = RS_MESH_PAIR_ROWS / 2 * RS_MESH_PAIR_COLS * 4 };

typedef struct {
    int32_t rank;
    reshard_inproc_group_t *g;
    chk_t k;
    int fail_buffer; /* give a destination buffer one byte short */
    reshard_status_t st;
    uint64_t verified;
    int untouched;
    char msg[1024];
} job_t;

static void *job_main(void *a)
{
    job_t *j = a;
    reshard_comm_t *inner = NULL, *c = NULL;
    if (reshard_comm_create_inproc(j->g, j->rank, &inner) != RESHARD_OK)
        abort();
    j->k.inner = inner;
    if (reshard_comm_create_transport(&chk_ops, &j->k, j->rank, WORLD, &c) != RESHARD_OK)
        abort();
    rs_mesh_pair_t p;
    rs_mesh_pair_make(&p, 0);
    reshard_plan_params_t prm = {.field_mask =
                                     RESHARD_PLAN_PARAM_TIMEOUT | RESHARD_PLAN_PARAM_STAGING_BYTES,
                                 .world_size = WORLD,
                                 .my_rank = j->rank,
                                 .timeout_s = 60.0,
                                 .staging_bytes = 4096}; /* several rounds, both slots */
    reshard_plan_t *plan = NULL;
    if (reshard_plan_create(p.src, p.dst, &prm, &plan) != RESHARD_OK) {
        fprintf(stderr, "rank %d: %s\n", j->rank, reshard_last_error());
        abort();
    }
    uint8_t *buf = malloc(SHARD_BYTES);
    reshard_buffer_t b = {.ptr = buf, .bytes = SHARD_BYTES - (j->fail_buffer ? 1 : 0)};
    int src = j->rank < 2;
    if (src)
        assert_int_equal(reshard_fill_pattern(p.src, j->rank, &b, 1), RESHARD_OK);
    else
        memset(buf, RESHARD_SENTINEL_BYTE, SHARD_BYTES);
    j->st = reshard_plan_execute(plan, c, src ? &b : NULL, src, src ? NULL : &b, !src, NULL);
    snprintf(j->msg, sizeof j->msg, "%s", reshard_last_error());
    if (!src) {
        j->untouched = 1;
        for (int i = 0; i < SHARD_BYTES; i++)
            j->untouched &= buf[i] == RESHARD_SENTINEL_BYTE;
        if (j->st == RESHARD_OK) {
            b.bytes = SHARD_BYTES;
            j->st = reshard_verify_pattern(p.dst, j->rank, &b, 1, &j->verified);
        }
    }
    reshard_plan_destroy(plan);
    reshard_comm_destroy(c); /* destroys the inner endpoint too */
    free(buf);
    rs_mesh_pair_free(&p);
    return NULL;
}

static void run(job_t *jobs, int bad_rank)
{
    reshard_inproc_group_t *g;
    assert_int_equal(reshard_inproc_group_create(WORLD, &g), RESHARD_OK);
    pthread_t th[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        jobs[r] = (job_t){.rank = r, .g = g, .fail_buffer = r == bad_rank};
        pthread_create(&th[r], NULL, job_main, &jobs[r]);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    reshard_inproc_group_destroy(g);
}

static void test_refit_over_user_transport(void **state)
{
    (void)state;
    job_t jobs[WORLD];
    run(jobs, -1);
    for (int r = 0; r < WORLD; r++) {
        if (jobs[r].st != RESHARD_OK)
            fail_msg("rank %d: %s: %s", r, reshard_status_string(jobs[r].st), jobs[r].msg);
        if (jobs[r].k.violations)
            fail_msg("rank %d: %d contract violations, first: %s", r, jobs[r].k.violations,
                     jobs[r].k.violation);
        assert_int_equal(jobs[r].k.finishes, 2); /* the first agreement and the outcome */
        assert_int_equal(jobs[r].k.destroyed, 1);
    }
    /* 4 KiB to each destination rank through 4 KiB of staging (2 KiB a slot): 2 rounds */
    assert_true(jobs[2].k.rounds >= 2);
    assert_int_equal(jobs[2].verified, SHARD_BYTES);
    assert_int_equal(jobs[3].verified, SHARD_BYTES);
}

/* A rank whose buffer is short fails the first agreement on every rank, through the
 * caller's finish, naming that rank; nothing is sent or written. */
static void test_bad_buffer_over_user_transport(void **state)
{
    (void)state;
    job_t jobs[WORLD];
    run(jobs, 3);
    for (int r = 0; r < WORLD; r++) {
        if (jobs[r].st != RESHARD_ERR_BUFFER)
            fail_msg("rank %d: %s: %s", r, reshard_status_string(jobs[r].st), jobs[r].msg);
        assert_int_equal(jobs[r].k.rounds, 0);
        assert_int_equal(jobs[r].k.violations, 0);
        if (r != 3) {
            char want[64];
            snprintf(want, sizeof want, "rank %d: rank 3 rejected its buffers", r);
            if (!strstr(jobs[r].msg, want))
                fail_msg("rank %d: '%s' lacks '%s'", r, jobs[r].msg, want);
        }
    }
    assert_true(jobs[2].untouched);
    assert_true(jobs[3].untouched);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_checks),
        cmocka_unit_test(test_refit_over_user_transport),
        cmocka_unit_test(test_bad_buffer_over_user_transport),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
