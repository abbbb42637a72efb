/*
 * Summary plans (RESHARD_PLAN_PARAM_SUMMARY): the counters, pair bytes and
 * predicted times of a plan that keeps no pieces equal what the full global
 * plan's pieces add up to, summed here piece by piece; the pieces it keeps
 * for chosen ranks are those ranks' own plans; it cannot be executed, nor
 * asked of one rank.
 *
 * Refit: Qwen3-30B-A3B (2 layers) from Megatron TP2 PP2 EP2 ETP1 DP2 (8
 * ranks, 2 domains of 4) to vLLM TP2 DP2 (4 ranks, one domain): each
 * inference DP replica needs the same dense weights, so pieces cross the
 * network once per domain and are forwarded inside it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan/plan_internal.h"
#include "plan_check.h"
#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_sim.h"

enum { DOMAIN = 4 };

typedef struct {
    reshard_model_t *model;
    reshard_model_refit_t refit;
    int32_t world;
} fx_t;

static void fx_make(fx_t *f)
{
    reshard_model_options_t mo = {.dtype = RESHARD_BF16, .layers = 2};
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse("tp=2,pp=2,ep=2,etp=1,dp=2", &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=2,dp=2", &is), RESHARD_OK);
    assert_int_equal(reshard_model_load("qwen3-30b-a3b", &mo, &f->model), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create_at(f->model, &ts, &is, 8, &f->refit), RESHARD_OK);
    f->world = f->refit.infer_offset + f->refit.infer_world;
    assert_int_equal(f->world, 12);
}

static void fx_free(fx_t *f)
{
    reshard_model_refit_destroy(&f->refit);
    reshard_model_destroy(f->model);
}

static reshard_plan_params_t params(const fx_t *f, int summary)
{
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                               .world_size = f->world,
                               .my_rank = RESHARD_ALL_RANKS,
                               .domain_size = DOMAIN};
    if (summary) {
        p.field_mask |= RESHARD_PLAN_PARAM_SUMMARY;
        p.summary = 1;
    }
    return p;
}

/* The counters of reshard_plan_stats_t summed from a full plan's pieces. */
static void sum_pieces(const reshard_plan_t *all, reshard_plan_stats_t *s)
{
    memset(s, 0, sizeof *s);
    uint64_t send[64] = {0}, recv[64] = {0};
    for (int64_t i = 0; i < all->npieces; i++) {
        const rs_piece_t *q = &all->pieces[i];
        int net = q->sender / DOMAIN != q->receiver / DOMAIN;
        s->pieces++;
        /* a landing on a rank whose fragment it is not is relayed, not written */
        if (!(q->stage == RS_STAGE_DIRECT && all->dst->f[q->to_frag].rank != q->receiver))
            s->bytes_total += q->bytes;
        if (q->sender == q->receiver)
            s->bytes_local += q->bytes;
        else if (!net)
            s->bytes_nvlink += q->bytes;
        else {
            s->bytes_network += q->bytes;
            send[q->sender] += q->bytes;
            recv[q->receiver] += q->bytes;
        }
        const rs_piece_t *p = i ? &all->pieces[i - 1] : NULL;
        if (q->sender != q->receiver &&
            (!p || p->stage != q->stage || p->sender != q->sender || p->receiver != q->receiver))
            s->transfers++;
    }
    for (int r = 0; r < 64; r++) {
        s->max_nic_send_bytes = send[r] > s->max_nic_send_bytes ? send[r] : s->max_nic_send_bytes;
        s->max_nic_recv_bytes = recv[r] > s->max_nic_recv_bytes ? recv[r] : s->max_nic_recv_bytes;
    }
}

static void test_summary_adds_up_the_full_plan(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    reshard_plan_params_t pf = params(&f, 0), ps = params(&f, 1);
    reshard_plan_t *full = NULL, *sum = NULL;
    const int32_t keep[] = {0, 9};
    assert_int_equal(reshard_plan_create(f.refit.train, f.refit.infer, &pf, &full), RESHARD_OK);
    assert_int_equal(rs_plan_create_keeping(f.refit.train, f.refit.infer, &ps, keep, 2, &sum),
                     RESHARD_OK);
    reshard_plan_stats_t want, got, fs;
    sum_pieces(full, &want);
    assert_int_equal(reshard_plan_get_stats(sum, &got), RESHARD_OK);
    assert_int_equal(reshard_plan_get_stats(full, &fs), RESHARD_OK);
    assert_true(want.bytes_network > 0 && want.bytes_nvlink > 0 && want.transfers > 0);
    assert_int_equal(got.pieces, want.pieces);
    assert_int_equal(got.bytes_total, want.bytes_total);
    assert_int_equal(got.bytes_local, want.bytes_local);
    assert_int_equal(got.bytes_nvlink, want.bytes_nvlink);
    assert_int_equal(got.bytes_network, want.bytes_network);
    assert_int_equal(got.transfers, want.transfers);
    assert_int_equal(got.max_nic_send_bytes, want.max_nic_send_bytes);
    assert_int_equal(got.max_nic_recv_bytes, want.max_nic_recv_bytes);
    /* every destination element is written once */
    uint64_t dst_bytes = 0;
    for (int64_t i = 0; i < f.refit.infer->n; i++) {
        const reshard_fragment_t *d = &f.refit.infer->f[i];
        dst_bytes += (uint64_t)rs_box_numel(&d->box) *
                     reshard_dtype_size(f.refit.tensors->t[d->tensor].dtype);
    }
    assert_int_equal(got.bytes_total, dst_bytes);
    assert_memory_equal(&got, &fs, sizeof got); /* bounds and relay too */
    /* pair bytes from the pieces */
    for (int32_t s = 0; s < f.world; s++)
        for (int32_t r = 0; r < f.world; r++) {
            uint64_t b = 0;
            for (int64_t i = 0; i < full->npieces; i++)
                if (full->pieces[i].sender == s && full->pieces[i].receiver == r)
                    b += full->pieces[i].bytes;
            assert_int_equal(reshard_plan_pair_bytes(sum, s, r), b);
            assert_int_equal(reshard_plan_pair_bytes(full, s, r), b);
        }
    /* the simulator sees the same plan */
    reshard_system_t sys;
    reshard_sim_t a, b;
    assert_int_equal(reshard_system_lookup("h100", &sys), RESHARD_OK);
    assert_int_equal(reshard_sim_plan(full, &sys, &a), RESHARD_OK);
    assert_int_equal(reshard_sim_plan(sum, &sys, &b), RESHARD_OK);
    assert_true(a.seconds > 0 && a.network_rounds > 0);
    assert_memory_equal(&a, &b, sizeof a);
    /* the kept ranks' own plans are their part of it; the others' pieces are gone */
    for (int k = 0; k < 2; k++) {
        char why[512];
        if (rs_test_check_rank_plan(f.refit.train, f.refit.infer, &pf, sum, keep[k], why,
                                    sizeof why) != 0)
            fail_msg("%s", why);
    }
    assert_true(sum->npieces > 0 && sum->npieces < full->npieces);
    for (int64_t i = 0; i < sum->npieces; i++) {
        const rs_piece_t *q = &sum->pieces[i];
        assert_true(q->sender == 0 || q->receiver == 0 || q->sender == 9 || q->receiver == 9 ||
                    (q->stage == RS_STAGE_DIRECT && q->receiver / DOMAIN == 9 / DOMAIN));
    }
    reshard_plan_destroy(sum);
    reshard_plan_destroy(full);
    fx_free(&f);
}

static void test_summary_refused_for_a_rank_and_for_execution(void **state)
{
    (void)state;
    fx_t f;
    fx_make(&f);
    reshard_plan_params_t p = params(&f, 1);
    reshard_plan_t *plan = NULL;
    p.my_rank = 3;
    assert_int_equal(reshard_plan_create(f.refit.train, f.refit.infer, &p, &plan),
                     RESHARD_ERR_INVALID_ARG);
    assert_null(plan);
    assert_non_null(strstr(reshard_last_error(), "summary"));
    p.my_rank = RESHARD_ALL_RANKS;
    assert_int_equal(reshard_plan_create(f.refit.train, f.refit.infer, &p, &plan), RESHARD_OK);
    reshard_inproc_group_t *g = NULL;
    reshard_comm_t *c = NULL;
    assert_int_equal(reshard_inproc_group_create(f.world, &g), RESHARD_OK);
    assert_int_equal(reshard_comm_create_inproc(g, 9, &c), RESHARD_OK);
    assert_int_equal(reshard_plan_execute(plan, c, NULL, 0, NULL, 0, NULL),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "summary"));
    assert_non_null(strstr(reshard_last_error(), "rank 9"));
    reshard_comm_destroy(c);
    reshard_inproc_group_destroy(g);
    reshard_plan_destroy(plan);
    fx_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_summary_adds_up_the_full_plan),
        cmocka_unit_test(test_summary_refused_for_a_rank_and_for_execution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
