/*
 * BF16 Megatron -> FP8/MXFP8 vLLM model refits (reshard_model_options_t
 * infer_quant) executed in-process:
 *   - the catalogue quantizes the linear weights and keeps the embedding,
 *     output layer, norms, router and biases bf16 (vLLM's FP8 checkpoints);
 *   - every rank's own plan equals its part of the global plan (with NVLink
 *     domains, so e4m3 bytes are also forwarded);
 *   - every destination e4m3 byte and scale equals the tests' independent
 *     reference quantizer (tests/common/quant_ref.c) of the source pattern,
 *     for sender-side and receiver-side blocks, fp32 and UE8M0 scales, MXFP8.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "inproc_refit.h"
#include "layout/layout_internal.h"
#include "plan_check.h"
#include "quant_ref.h"
#include "reshard/reshard_model.h"

static const char *MOE_JSON =
    "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 256, \"intermediate_size\": 512, "
    "\"moe_intermediate_size\": 384, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
    "\"num_key_value_heads\": 2, \"head_dim\": 128, \"num_experts\": 4, "
    "\"num_experts_per_tok\": 2, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], "
    "\"vocab_size\": 300, \"tie_word_embeddings\": false}";
static const char *MLA_JSON =
    "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, \"intermediate_size\": 512, "
    "\"moe_intermediate_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 4, \"q_lora_rank\": 256, \"kv_lora_rank\": 128, "
    "\"qk_nope_head_dim\": 64, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, "
    "\"n_routed_experts\": 4, \"n_shared_experts\": 1, \"num_experts_per_tok\": 1, "
    "\"first_k_dense_replace\": 1, \"moe_layer_freq\": 1, \"topk_method\": \"noaux_tc\", "
    "\"vocab_size\": 300, \"tie_word_embeddings\": false}";

/* The reference of every quantized tensor, made before the refit. */
typedef struct {
    const reshard_tensors_t *T;
    const reshard_layout_t *dst;
    uint8_t **q;   /* per tensor: reference e4m3 bytes, or NULL */
    uint8_t **s;   /* per scale tensor: reference scales, or NULL */
    size_t *ssize; /* per scale tensor: bytes per scale */
} oracle_t;

static void oracle_init(oracle_t *o, const reshard_tensors_t *T, const reshard_layout_t *dst)
{
    int32_t n = reshard_tensors_count(T);
    o->T = T;
    o->dst = dst;
    o->q = calloc((size_t)n, sizeof *o->q);
    o->s = calloc((size_t)n, sizeof *o->s);
    o->ssize = calloc((size_t)n, sizeof *o->ssize);
    for (int32_t t = 0; t < n; t++) {
        reshard_quant_t m;
        reshard_tensors_get_quant(T, t, &m);
        if (m.kind == RESHARD_QUANT_NONE)
            continue;
        reshard_tensor_info_t in, si;
        reshard_tensors_info(T, t, &in);
        reshard_tensors_info(T, m.scale_tensor, &si);
        bool mx = m.kind == RESHARD_QUANT_MXFP8;
        int nd = in.ndim;
        int64_t E = nd == 3 ? in.shape[0] : 1, R = in.shape[nd - 2], C = in.shape[nd - 1];
        uint16_t *x = malloc((size_t)in.numel * 2);
        for (int64_t i = 0; i < in.numel; i++)
            x[i] = (uint16_t)rs_pattern_value(t, i); /* the source's bf16 fill */
        o->q[t] = malloc((size_t)in.numel);
        o->s[m.scale_tensor] = malloc((size_t)si.numel * 4);
        o->ssize[m.scale_tensor] = mx ? 1 : 4;
        ref_quantize(x, E, R, C, mx ? 1 : 128, mx ? 32 : 128, m.pow2_scale != 0, mx, o->q[t],
                     o->s[m.scale_tensor]);
        free(x);
    }
}

static void oracle_free(oracle_t *o)
{
    int32_t n = reshard_tensors_count(o->T);
    for (int32_t t = 0; t < n; t++) {
        free(o->q[t]);
        free(o->s[t]);
    }
    free(o->q);
    free(o->s);
    free(o->ssize);
}

/* Every e4m3 byte and scale of @p rank's destination fragments. */
static int64_t check_rank(void *ctx, int32_t rank, int dst, const reshard_buffer_t *bufs, int32_t n,
                          char *msg, size_t size)
{
    oracle_t *o = ctx;
    if (!dst)
        return 0;
    int64_t bad = 0, checked = 0;
    for (int64_t i = 0; i < reshard_layout_count(o->dst); i++) {
        reshard_fragment_t f;
        reshard_layout_fragment(o->dst, i, &f);
        if (f.rank != rank || f.buffer >= n || (!o->q[f.tensor] && !o->s[f.tensor]))
            continue;
        reshard_tensor_info_t in;
        reshard_tensors_info(o->T, f.tensor, &in);
        size_t es = o->q[f.tensor] ? 1 : o->ssize[f.tensor];
        const uint8_t *ref = o->q[f.tensor] ? o->q[f.tensor] : o->s[f.tensor];
        const uint8_t *buf = bufs[f.buffer].ptr;
        int64_t idx[RESHARD_MAX_DIMS];
        memcpy(idx, f.box.offset, sizeof idx);
        for (;;) {
            int64_t flat = 0, pos = f.base;
            for (int d = 0; d < in.view_ndim; d++) {
                flat = flat * in.view_shape[d] + idx[d];
                pos += (idx[d] - f.box.offset[d]) * f.stride[d];
            }
            checked++;
            if (memcmp(buf + (size_t)pos * es, ref + (size_t)flat * es, es) != 0 && bad++ == 0)
                snprintf(msg, size, "tensor %s flat %lld", in.name, (long long)flat);
            int d = f.box.ndim - 1;
            for (; d >= 0; d--) {
                if (++idx[d] < f.box.offset[d] + f.box.extent[d])
                    break;
                idx[d] = f.box.offset[d];
            }
            if (d < 0)
                break;
        }
    }
    if (checked == 0 && !bad) {
        /* every inference rank holds quantized weights in these cases */
        int32_t first = INT32_MAX;
        for (int64_t i = 0; i < reshard_layout_count(o->dst); i++) {
            reshard_fragment_t f;
            reshard_layout_fragment(o->dst, i, &f);
            first = f.rank < first ? f.rank : first;
        }
        if (rank >= first) {
            snprintf(msg, size, "no quantized fragment checked");
            return 1;
        }
    }
    return bad;
}

/* The catalogue's quantized tensors: linear weights, not the embedding,
 * output layer, norms, router or biases; each with a "..._scale_inv". */
static void check_catalogue(const reshard_tensors_t *T, reshard_quant_kind_t kind)
{
    int32_t nq = 0;
    for (int32_t t = 0; t < reshard_tensors_count(T); t++) {
        reshard_tensor_info_t in;
        reshard_quant_t m;
        reshard_tensors_info(T, t, &in);
        reshard_tensors_get_quant(T, t, &m);
        const char *nm = in.name;
        bool keep = strstr(nm, "embed_tokens") || strstr(nm, "lm_head") || strstr(nm, "norm") ||
                    strstr(nm, "mlp.gate.") || strstr(nm, "bias") || strstr(nm, "_scale_inv");
        if (keep) {
            assert_int_equal(m.kind, RESHARD_QUANT_NONE);
            continue;
        }
        if (m.kind != kind)
            print_error("%s is not quantized\n", nm);
        assert_int_equal(m.kind, kind);
        assert_int_equal(in.dtype, RESHARD_BF16);
        reshard_tensor_info_t si;
        reshard_tensors_info(T, m.scale_tensor, &si);
        assert_non_null(strstr(si.name, "_scale_inv"));
        nq++;
    }
    assert_true(nq >= 5);
}

typedef struct {
    const char *json, *train, *infer;
    reshard_quant_kind_t kind;
    int pow2;
    int32_t domain;
} case_t;

static void run_case(const case_t *c)
{
    reshard_model_options_t mo = {.infer_quant = c->kind, .pow2_scale = c->pow2};
    reshard_model_t *m = NULL;
    assert_int_equal(reshard_model_load_json(c->json, &mo, &m), RESHARD_OK);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse(c->train, &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse(c->infer, &is), RESHARD_OK);
    reshard_model_refit_t f;
    reshard_status_t st = reshard_model_refit_create(m, &ts, &is, &f);
    if (st != RESHARD_OK)
        print_error("%s\n", reshard_last_error());
    assert_int_equal(st, RESHARD_OK);
    check_catalogue(f.tensors, c->kind);
    int32_t world = f.infer_offset + f.infer_world;
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                .world_size = world,
                                .my_rank = RESHARD_ALL_RANKS,
                                .domain_size = c->domain};
    reshard_plan_t *all = NULL;
    st = reshard_plan_create(f.train, f.infer, &pp, &all);
    if (st != RESHARD_OK)
        print_error("%s\n", reshard_last_error());
    assert_int_equal(st, RESHARD_OK);
    for (int32_t r = 0; r < world; r++) {
        char why[512];
        if (rs_test_check_rank_plan(f.train, f.infer, &pp, all, r, why, sizeof why) != 0)
            print_error("rank %d: %s\n", r, why);
        assert_int_equal(rs_test_check_rank_plan(f.train, f.infer, &pp, all, r, why, sizeof why),
                         0);
    }
    reshard_plan_destroy(all);
    oracle_t o;
    oracle_init(&o, f.tensors, f.infer);
    for (int shared = 0; shared < 2; shared++) {
        rs_test_refit_t r =
            rs_test_inproc_refit_check(f.train, f.infer, &pp, 1, shared, check_rank, &o);
        if (r.status != RESHARD_OK)
            print_error("%s\n", r.message);
        assert_int_equal(r.status, RESHARD_OK);
        assert_true(r.verified_bytes > 0);
    }
    oracle_free(&o);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
}

static void moe_sender_side(void **state)
{
    (void)state;
    case_t c = {MOE_JSON, "tp=2,ep=2,etp=1", "tp=2,ep=on", RESHARD_QUANT_FP8_BLOCK, 0, 2};
    run_case(&c);
}

static void moe_receiver_side_ue8m0(void **state)
{
    (void)state;
    /* etp=4: each expert's 384 gate rows in 96-row shards cut its blocks */
    case_t c = {MOE_JSON, "tp=2,etp=4,dp=2", "tp=2,ep=on", RESHARD_QUANT_FP8_BLOCK, 1, 0};
    run_case(&c);
}

static void mla_fp8_domains(void **state)
{
    (void)state;
    case_t c = {MLA_JSON, "tp=2,ep=2,etp=1", "tp=2,dp=2,ep=on", RESHARD_QUANT_FP8_BLOCK, 0, 2};
    run_case(&c);
}

static void mla_mxfp8(void **state)
{
    (void)state;
    case_t c = {MLA_JSON, "pp=2,ep=2,dp=2", "tp=2", RESHARD_QUANT_MXFP8, 1, 0};
    run_case(&c);
}

static void refused_rules(void **state)
{
    (void)state;
    /* infer_quant needs the bf16 form; vLLM refuses shards off block bounds */
    reshard_model_options_t mo = {.dtype = RESHARD_FP8_E4M3,
                                  .infer_quant = RESHARD_QUANT_FP8_BLOCK};
    reshard_model_t *m = NULL;
    assert_int_equal(reshard_model_load_json(MOE_JSON, &mo, &m), RESHARD_ERR_INVALID_ARG);
    mo.dtype = RESHARD_BF16;
    assert_int_equal(reshard_model_load_json(MOE_JSON, &mo, &m), RESHARD_OK);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_train_spec_parse("tp=2", &ts);
    reshard_infer_spec_parse("tp=2,dp=2", &is); /* no EP: 384 / 4 = 96-row expert shards */
    reshard_model_refit_t f;
    reshard_status_t st = reshard_model_refit_create(m, &ts, &is, &f);
    if (!strstr(reshard_last_error(), "block granularity"))
        print_error("%s\n", reshard_last_error());
    assert_int_equal(st, RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "block granularity"));
    reshard_model_destroy(m);
    /* MXFP8: 384 / 8 = 48-column down_proj shards cut 32-column blocks; the
     * refusal names the form, tensor, rank and columns */
    mo.infer_quant = RESHARD_QUANT_MXFP8;
    assert_int_equal(reshard_model_load_json(MOE_JSON, &mo, &m), RESHARD_OK);
    reshard_infer_spec_parse("tp=2,dp=4", &is);
    st = reshard_model_refit_create(m, &ts, &is, &f);
    if (!strstr(reshard_last_error(), "infer: mxfp8: "))
        print_error("%s\n", reshard_last_error());
    assert_int_equal(st, RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "infer: mxfp8: model.layers.0.mlp.experts."));
    assert_non_null(strstr(reshard_last_error(), "1x32 block granularity: columns [0, 48) of 384"));
    reshard_model_destroy(m);
    /* nemotron_h is modelled in bf16 only: the refusal names the form asked */
    reshard_model_options_t nq = {.dtype = RESHARD_BF16, .infer_quant = RESHARD_QUANT_MXFP8};
    m = NULL;
    assert_int_equal(reshard_model_load("nemotron-3-nano-30b-a3b", &nq, &m), RESHARD_ERR_CONFIG);
    assert_null(m);
    if (!strstr(reshard_last_error(), "not mxfp8"))
        print_error("%s\n", reshard_last_error());
    assert_non_null(strstr(reshard_last_error(), "only the bf16 form is modelled, not mxfp8"));
    nq.infer_quant = RESHARD_QUANT_FP8_BLOCK;
    assert_int_equal(reshard_model_load("nemotron-3-nano-30b-a3b", &nq, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "not fp8 128x128"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(moe_sender_side), cmocka_unit_test(moe_receiver_side_ue8m0),
        cmocka_unit_test(mla_fp8_domains), cmocka_unit_test(mla_mxfp8),
        cmocka_unit_test(refused_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
