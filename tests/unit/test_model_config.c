/*
 * Model configs, catalogues, spec parsing, configuration rules, buffer
 * tables and the gather+broadcast counts.
 *
 * Parameter counts are recomputed here by formula from the config numbers
 * (not from the catalogue) and checked against model_bytes = params x 2 and
 * against the published totals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>

#include "reshard/reshard_model.h"

static reshard_model_t *load(const char *name, int mtp, reshard_dtype_t dt)
{
    reshard_model_options_t o = {.mtp = mtp, .dtype = dt};
    reshard_model_t *m = NULL;
    if (reshard_model_load(name, &o, &m) != RESHARD_OK)
        fail_msg("load %s: %s", name, reshard_last_error());
    return m;
}

static uint64_t model_bytes(const reshard_model_t *m)
{
    reshard_tensors_t *t;
    assert_int_equal(reshard_model_tensors(m, &t), RESHARD_OK);
    uint64_t b = reshard_tensors_bytes(t);
    reshard_tensors_destroy(t);
    return b;
}

/* Llama / Qwen3 dense: embeddings, per layer 2 norms + q,k,v,o (+ q/k norms) + 3 MLP. */
static int64_t dense_params(int64_t H, int64_t I, int64_t L, int64_t nh, int64_t kv, int64_t hd,
                            int64_t V, int tied, int qk_norm)
{
    int64_t attn = H * nh * hd * 2 + H * kv * hd * 2 + (qk_norm ? 2 * hd : 0);
    return V * H * (tied ? 1 : 2) + H + L * (2 * H + attn + 3 * H * I);
}

/* Qwen2 adds q/k/v biases (nh*hd + 2*kv*hd per layer). */
static int64_t qwen2_params(int64_t H, int64_t I, int64_t L, int64_t nh, int64_t kv, int64_t hd,
                            int64_t V)
{
    return dense_params(H, I, L, nh, kv, hd, V, 0, 0) + L * (nh * hd + 2 * kv * hd);
}

/* Qwen2-MoE, every layer sparse: q/k/v biases, router [E, H], E experts of
 * 3*Im*H, a shared expert of 3*Is*H and its sigmoid gate [1, H]. */
static int64_t qwen2_moe_params(int64_t H, int64_t Im, int64_t Is, int64_t L, int64_t nh,
                                int64_t kv, int64_t hd, int64_t V, int64_t E)
{
    int64_t attn = H * nh * hd * 2 + H * kv * hd * 2 + nh * hd + 2 * kv * hd;
    return 2 * V * H + H + L * (2 * H + attn + E * H + 3 * E * Im * H + 3 * Is * H + H);
}

/* Mixtral: every layer E experts of 3*I*H (w1, w3, w2) and a router. */
static int64_t mixtral_params(int64_t H, int64_t I, int64_t L, int64_t nh, int64_t kv, int64_t hd,
                              int64_t V, int64_t E)
{
    int64_t attn = H * nh * hd * 2 + H * kv * hd * 2;
    return 2 * V * H + H + L * (2 * H + attn + E * H + 3 * E * I * H);
}

static int64_t qwen3_moe_params(int64_t H, int64_t Im, int64_t L, int64_t nh, int64_t kv,
                                int64_t hd, int64_t V, int64_t E)
{
    int64_t attn = H * nh * hd * 2 + H * kv * hd * 2 + 2 * hd;
    return 2 * V * H + H + L * (2 * H + attn + E * H + 3 * E * Im * H);
}

/* GLM-4.5 (glm4_moe, vLLM glm4_moe.py): GQA with q/k/v biases (attention_bias),
 * no q/k norms; layers below first_k dense, the rest MoE: router [E, H], its
 * fp32 score-correction bias [E], E experts of 3*Im*H and nshared shared
 * experts of 3*Im*H. The MTP layer is not counted. */
static int64_t glm4_moe_params(int64_t H, int64_t I, int64_t Im, int64_t L, int64_t nh, int64_t kv,
                               int64_t hd, int64_t V, int64_t E, int64_t nshared, int64_t first_k)
{
    int64_t attn = H * nh * hd * 2 + H * kv * hd * 2 + nh * hd + 2 * kv * hd;
    int64_t moe = E * H + E + 3 * E * Im * H + 3 * nshared * Im * H;
    return 2 * V * H + H + L * (2 * H + attn) + first_k * 3 * H * I + (L - first_k) * moe;
}

/* gpt-oss (HF GptOss, vLLM gpt_oss.py): q/k/v/o with biases, sinks [heads];
 * every layer MoE: router [E, H] + bias [E], E experts of 3*I*H with biases
 * gate_up [2I] and down [H]. */
static int64_t gpt_oss_params(int64_t H, int64_t I, int64_t L, int64_t nh, int64_t kv, int64_t hd,
                              int64_t V, int64_t E)
{
    int64_t attn = H * nh * hd * 2 + H * kv * hd * 2 + nh * hd + 2 * kv * hd + H + nh;
    int64_t moe = E * H + E + 3 * E * I * H + E * (2 * I + H);
    return 2 * V * H + H + L * (2 * H + attn + moe);
}

/* Qwen3-Next (HF Qwen3Next, vLLM qwen3_next.py): every full_attention_interval-th
 * layer gated attention (q_proj 2 x heads: q and its gate; k, v, o; q/k
 * norms [hd]), the others Gated DeltaNet (in_proj_qkvz [2*nk*kd + 2*nv*vd, H],
 * in_proj_ba [2*nv, H], conv1d [2*nk*kd + nv*vd, 1, K], A_log and dt_bias
 * [nv], norm [vd], out_proj [H, nv*vd]); every layer MoE: router [E, H], E
 * experts of 3*Im*H, a shared expert of 3*Is*H and its gate [1, H]. */
static int64_t qwen3_next_params(int64_t H, int64_t L, int64_t every, int64_t nh, int64_t kv,
                                 int64_t hd, int64_t nk, int64_t nv, int64_t kd, int64_t vd,
                                 int64_t K, int64_t V, int64_t E, int64_t Im, int64_t Is)
{
    int64_t attn = H * nh * hd * 2 + H * kv * hd * 2 + H * nh * hd + 2 * hd;
    int64_t conv = 2 * nk * kd + nv * vd;
    int64_t gdn =
        H * (2 * nk * kd + 2 * nv * vd) + H * 2 * nv + conv * K + 2 * nv + vd + H * nv * vd;
    int64_t moe = E * H + 3 * E * Im * H + 3 * Is * H + H;
    int64_t full = L / every;
    return 2 * V * H + H + L * (2 * H + moe) + full * attn + (L - full) * gdn;
}

typedef struct {
    int64_t H, I, Im, L, nh, q_lora, kv_lora, nope, rope, vhd, V, E, nshared, first_k;
} mla_cfg_t;

static int64_t mla_attn(const mla_cfg_t *c)
{
    return c->q_lora * c->H + c->q_lora + c->nh * (c->nope + c->rope) * c->q_lora +
           (c->kv_lora + c->rope) * c->H + c->kv_lora + c->nh * (c->nope + c->vhd) * c->kv_lora +
           c->H * c->nh * c->vhd;
}

static int64_t mla_moe(const mla_cfg_t *c)
{
    return c->E * c->H + c->E + 3 * c->E * c->Im * c->H + 3 * c->nshared * c->Im * c->H;
}

static int64_t dsv3_params(const mla_cfg_t *c)
{
    int64_t dense = c->first_k * 3 * c->H * c->I, moe = (c->L - c->first_k) * mla_moe(c);
    return 2 * c->V * c->H + c->H + c->L * (2 * c->H + mla_attn(c)) + dense + moe;
}

/* @p fp32 of the parameters are fp32 (router score-correction biases), the
 * rest bf16. */
static void expect_params(const char *name, int64_t want, int64_t fp32, double published,
                          double tol)
{
    reshard_model_t *m = load(name, 0, RESHARD_BF16);
    reshard_model_info_t info;
    assert_int_equal(reshard_model_info(m, &info), RESHARD_OK);
    assert_int_equal(info.params, want);
    assert_int_equal(model_bytes(m), 2 * (uint64_t)want + 2 * (uint64_t)fp32);
    if (published > 0 && (double)want < published * (1 - tol))
        fail_msg("%s: %lld params, published %.4g", name, (long long)want, published);
    if (published > 0 && (double)want > published * (1 + tol))
        fail_msg("%s: %lld params, published %.4g", name, (long long)want, published);
    reshard_model_destroy(m);
}

static const mla_cfg_t dsv3 = {7168, 18432, 2048, 61,     128, 1536, 512,
                               128,  64,    128,  129280, 256, 1,    3};

static void test_shipped_model_bytes(void **state)
{
    (void)state;
    /* noaux_tc routing: one fp32 e_score_correction_bias [E] per MoE layer */
    expect_params("deepseek-v3", dsv3_params(&dsv3), (61 - 3) * 256, 671.0e9, 0.001);
    mla_cfg_t kimi = dsv3;
    kimi.nh = 64;
    kimi.E = 384;
    kimi.first_k = 1;
    kimi.V = 163840;
    expect_params("kimi-k2", dsv3_params(&kimi), (61 - 1) * 384, 1.0e12,
                  0.05); /* "1T total parameters" */
    expect_params("qwen3-235b-a22b", qwen3_moe_params(4096, 1536, 94, 64, 4, 128, 151936, 128), 0,
                  235.1e9, 0.001);
    expect_params("qwen3-30b-a3b", qwen3_moe_params(2048, 768, 48, 32, 4, 128, 151936, 128), 0,
                  30.5e9, 0.002);
    expect_params("llama-3.1-8b", dense_params(4096, 14336, 32, 32, 8, 128, 128256, 0, 0), 0,
                  8.03e9, 0.001);
    expect_params("qwen3-0.6b", dense_params(1024, 3072, 28, 16, 8, 128, 151936, 1, 1), 0, 0.596e9,
                  0.001);
    /* published: 70.6B, 7.61B, 72.7B, 57.4B (card: "57B"), 46.7B */
    expect_params("llama-3.3-70b", dense_params(8192, 28672, 80, 64, 8, 128, 128256, 0, 0), 0,
                  70.6e9, 0.001);
    expect_params("qwen2.5-7b-instruct", qwen2_params(3584, 18944, 28, 28, 4, 128, 152064), 0,
                  7.61e9, 0.001);
    expect_params("qwen2.5-72b-instruct", qwen2_params(8192, 29568, 80, 64, 8, 128, 152064), 0,
                  72.7e9, 0.001);
    expect_params("qwen2-57b-a14b", qwen2_moe_params(3584, 2560, 20480, 28, 28, 4, 128, 151936, 64),
                  0, 57.4e9, 0.001);
    expect_params("mixtral-8x7b", mixtral_params(4096, 14336, 32, 32, 8, 128, 32000, 8), 0, 46.7e9,
                  0.001);
    /* gpt-oss: 20.9B and 116.8B (model card, "21B" / "117B" parameters) */
    expect_params("gpt-oss-20b", gpt_oss_params(2880, 2880, 24, 64, 8, 64, 201088, 32), 0, 20.9e9,
                  0.001);
    /* Qwen3-Next-80B-A3B: "80B total" (model card); 79.67 G computed without its MTP layer */
    expect_params(
        "qwen3-next-80b-a3b-instruct",
        qwen3_next_params(2048, 48, 4, 16, 2, 256, 16, 32, 128, 128, 4, 151936, 512, 512, 512), 0,
        80e9, 0.005);
    expect_params("gpt-oss-120b", gpt_oss_params(2880, 2880, 36, 64, 8, 64, 201088, 128), 0,
                  116.8e9, 0.001);
    /* GLM-4.5-Air: "106B total parameters" (model card); 106.85 G without the
     * MTP layer; one fp32 e_score_correction_bias [128] per MoE layer */
    expect_params("glm-4.5-air",
                  glm4_moe_params(4096, 10944, 1408, 46, 96, 8, 128, 151552, 128, 1, 1), 45 * 128,
                  106e9, 0.01);
}

static void test_mtp_and_fp8(void **state)
{
    (void)state;
    /* MTP: enorm, hnorm, eh_proj [H, 2H], a MoE decoder layer, shared_head.norm */
    reshard_model_t *m = load("deepseek-v3", 1, RESHARD_BF16);
    reshard_model_info_t info;
    reshard_model_info(m, &info);
    int64_t H = dsv3.H, mtp = 2 * H + 2 * H * H + 2 * H + mla_attn(&dsv3) + mla_moe(&dsv3) + H;
    assert_int_equal(info.mtp_layers, 1);
    assert_int_equal(info.params, dsv3_params(&dsv3) + mtp);
    reshard_tensors_t *t;
    reshard_model_tensors(m, &t);
    /* the router score-correction bias is fp32 (vLLM deepseek_v2.py, Megatron router.py) */
    int32_t bid = reshard_tensors_find(t, "model.layers.60.mlp.gate.e_score_correction_bias");
    reshard_tensor_info_t bi;
    assert_int_equal(reshard_tensors_info(t, bid, &bi), RESHARD_OK);
    assert_int_equal(bi.dtype, RESHARD_FP32);
    assert_int_equal(bi.shape[0], 256);
    /* the router weight is bf16 in both frameworks (see reshard_model.h) */
    assert_int_equal(reshard_tensors_info(t, bid - 1, &bi), RESHARD_OK);
    assert_string_equal(bi.name, "model.layers.60.mlp.gate.weight");
    assert_int_equal(bi.dtype, RESHARD_BF16);
    assert_true(reshard_tensors_find(t, "model.layers.61.eh_proj.weight") >= 0);
    assert_true(reshard_tensors_find(t, "model.layers.61.mlp.experts.gate_proj.weight") >= 0);
    assert_true(reshard_tensors_find(t, "model.layers.60.mlp.gate.e_score_correction_bias") >= 0);
    assert_true(reshard_tensors_find(t, "model.layers.2.mlp.gate_proj.weight") >= 0);
    assert_true(reshard_tensors_find(t, "model.layers.3.mlp.shared_experts.up_proj.weight") >= 0);
    reshard_tensors_destroy(t);
    reshard_model_destroy(m);

    /* FP8 Llama: every linear weight 1 byte + fp32 128x128 block scales;
     * embeddings and norms stay BF16. */
    m = load("llama-3.1-8b", 0, RESHARD_FP8_E4M3);
    int64_t Hl = 4096, I = 14336, V = 128256, L = 32;
#define BLK(r, c) ((((r) + 127) / 128) * (((c) + 127) / 128) * 4)
    int64_t lin = 2 * (Hl * Hl + BLK(Hl, Hl)) + 2 * (1024 * Hl + BLK(1024, Hl)) +
                  2 * (I * Hl + BLK(I, Hl)) + (Hl * I + BLK(Hl, I));
    uint64_t want = (uint64_t)(2 * (2 * V * Hl + Hl + L * 2 * Hl) + L * lin);
    assert_int_equal(model_bytes(m), want);
    reshard_model_tensors(m, &t);
    int32_t id = reshard_tensors_find(t, "model.layers.0.self_attn.q_proj.weight_scale_inv");
    reshard_tensor_info_t ti;
    assert_int_equal(reshard_tensors_info(t, id, &ti), RESHARD_OK);
    assert_int_equal(ti.dtype, RESHARD_FP32);
    assert_int_equal(ti.shape[0], 32);
    assert_int_equal(ti.shape[1], 32);
    reshard_tensors_destroy(t);
    reshard_model_destroy(m);

    /* FP8 DeepSeek-V3 with MTP: vLLM's deepseek_mtp.py builds eh_proj as a plain
     * nn.Linear (no quant config), so it stays bf16 with no block scales. */
    m = load("deepseek-v3", 1, RESHARD_FP8_E4M3);
    reshard_model_tensors(m, &t);
    id = reshard_tensors_find(t, "model.layers.61.eh_proj.weight");
    assert_int_equal(reshard_tensors_info(t, id, &ti), RESHARD_OK);
    assert_int_equal(ti.dtype, RESHARD_BF16);
    assert_true(reshard_tensors_find(t, "model.layers.61.eh_proj.weight_scale_inv") < 0);
    id = reshard_tensors_find(t, "model.layers.61.self_attn.o_proj.weight");
    assert_int_equal(reshard_tensors_info(t, id, &ti), RESHARD_OK);
    assert_int_equal(ti.dtype, RESHARD_FP8_E4M3);
    reshard_tensors_destroy(t);
    reshard_model_destroy(m);
}

static void test_spec_parse(void **state)
{
    (void)state;
    reshard_train_spec_t t;
    reshard_infer_spec_t i;
    assert_int_equal(reshard_train_spec_parse("tp=4,pp=8,ep=16,dp=4", &t), RESHARD_OK);
    assert_int_equal(t.tp, 4);
    assert_int_equal(t.pp, 8);
    assert_int_equal(t.ep, 16);
    assert_int_equal(t.dp, 4);
    assert_int_equal(t.cp, 1);
    assert_int_equal(t.etp, 4); /* Megatron: --expert-tensor-parallel-size defaults to tp */
    assert_int_equal(t.vpp, 1);
    assert_int_equal(t.first, 0);
    assert_int_equal(t.last, 0);
    assert_int_equal(reshard_train_world(&t), 128);
    assert_int_equal(reshard_train_spec_parse("tp=2,pp=4,vpp=2,first=3,last=5,etp=1", &t),
                     RESHARD_OK);
    assert_int_equal(t.etp, 1);
    assert_int_equal(t.vpp, 2);
    assert_int_equal(t.first, 3);
    assert_int_equal(t.last, 5);
    char text[96];
    assert_string_equal(reshard_train_spec_str(&t, text, sizeof text),
                        "tp=2,pp=4,dp=1,cp=1,ep=1,etp=1,vpp=2,first=3,last=5");
    /* NULL spec: "" written to out; NULL out or size 0: a static "" (never a crash) */
    memset(text, 'x', sizeof text);
    assert_ptr_equal(reshard_train_spec_str(NULL, text, sizeof text), text);
    assert_string_equal(text, "");
    memset(text, 'x', sizeof text);
    assert_ptr_equal(reshard_infer_spec_str(NULL, text, sizeof text), text);
    assert_string_equal(text, "");
    assert_string_equal(reshard_train_spec_str(&t, NULL, 0), "");
    assert_string_equal(reshard_train_spec_str(&t, NULL, sizeof text), "");
    assert_string_equal(reshard_infer_spec_str(&i, NULL, 64), "");
    assert_string_equal(reshard_infer_spec_str(NULL, NULL, 0), "");
    text[0] = 'x';
    assert_ptr_not_equal(reshard_train_spec_str(&t, text, 0), text); /* size 0: out untouched */
    assert_int_equal(text[0], 'x');
    assert_int_equal(reshard_infer_spec_parse("tp=8,dp=16,ep=on", &i), RESHARD_OK);
    assert_int_equal(reshard_infer_world(&i), 128);
    assert_int_equal(i.ep, 1);
    static const char *const bad_train[] = {"",      "tp",   "tp=0",          "tp=-2",
                                            "tp=4x", "xp=2", "tp=2,tp=4",     "tp=2,",
                                            ",tp=2", "tp=",  "tp=99999999999"};
    for (size_t k = 0; k < sizeof bad_train / sizeof *bad_train; k++) {
        assert_int_equal(reshard_train_spec_parse(bad_train[k], &t), RESHARD_ERR_INVALID_ARG);
        assert_true(strlen(reshard_last_error()) > 0);
    }
    assert_int_equal(reshard_infer_spec_parse("tp=8,ep=maybe", &i), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "on or off"));
    assert_int_equal(reshard_infer_spec_parse("tp=8,pp=2", &i), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "unknown key 'pp'"));
    assert_int_equal(reshard_train_spec_parse("tp=65536,pp=65536", &t), RESHARD_ERR_INVALID_ARG);
    /* a long spec is echoed as its first 64 characters and "...", not whole */
    size_t big = (size_t)1 << 20;
    char *spaces = malloc(big + 8);
    assert_non_null(spaces);
    memset(spaces, ' ', big);
    strcpy(spaces + big, "tp=1");
    for (int side = 0; side < 2; side++) {
        assert_int_equal(side ? reshard_infer_spec_parse(spaces, &i)
                              : reshard_train_spec_parse(spaces, &t),
                         RESHARD_ERR_INVALID_ARG);
        const char *msg = reshard_last_error();
        char want[160];
        snprintf(want, sizeof want, "%s spec \"%64s...\": empty or too long item",
                 side ? "infer" : "train", "");
        if (!strstr(msg, want) || strlen(msg) > 200)
            fail_msg("%zu bytes: %.300s", strlen(msg), msg);
    }
    free(spaces);
}

/* A rule violation: CONFIG with a message containing @p words. */
static void expect_rule(const char *model, reshard_dtype_t dt, const char *train, const char *infer,
                        int32_t world, const char *words)
{
    reshard_model_t *m = load(model, 0, dt);
    reshard_train_spec_t t;
    reshard_infer_spec_t i;
    assert_int_equal(reshard_train_spec_parse(train, &t), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse(infer, &i), RESHARD_OK);
    reshard_status_t s = reshard_model_check(m, &t, &i, world);
    if (s == RESHARD_OK) {
        reshard_model_refit_t f;
        s = reshard_model_refit_create(m, &t, &i, &f);
        if (s == RESHARD_OK)
            reshard_model_refit_destroy(&f);
    }
    if (s != RESHARD_ERR_CONFIG || !strstr(reshard_last_error(), words))
        fail_msg("%s %s -> %s: got %s \"%s\", wanted CONFIG naming \"%s\"", model, train, infer,
                 reshard_status_string(s), reshard_last_error(), words);
    reshard_model_destroy(m);
}

/* engine=sglang specs: the text round-trips, the SGLang keys and modes it
 * does not model are refused by name, and the model rules name the family,
 * MTP, FP8 and DP attention of a llama. */
static void test_sglang_specs(void **state)
{
    (void)state;
    static const char *const same[][2] = {
        {"engine=sglang,tp=4", "engine=sglang,tp=4"},
        {"tp=4,engine=sglang,dp=2,dp_attention=on", "engine=sglang,tp=4,dp=2,dp_attention=on"},
        {"engine=sglang,ep=4,tp=4", "engine=sglang,tp=4,ep=on"},
        {"engine=sglang,tp=8,ep=2,engines=3", "engine=sglang,tp=8,ep=2,engines=3"},
        {"engine=sglang,tp=4,ep=1", "engine=sglang,tp=4"},
        {"engine=sglang,tp=4,dp=4,dp_attention=on,dp_lm_head=on,moe_dense_tp=1,ep=on,a2a=deepep,"
         "shared_fusion=off,moe_runner=triton",
         "engine=sglang,tp=4,dp=4,dp_attention=on,ep=on,dp_lm_head=on,moe_dense_tp=1,a2a=deepep,"
         "shared_fusion=off"},
        {"engine=vllm,tp=2,dp=2", "tp=2,dp=2,ep=off"},
    };
    for (size_t k = 0; k < sizeof same / sizeof *same; k++) {
        reshard_infer_spec_t i, j;
        char a[160], b[160];
        if (reshard_infer_spec_parse(same[k][0], &i) != RESHARD_OK)
            fail_msg("%s: %s", same[k][0], reshard_last_error());
        assert_string_equal(reshard_infer_spec_str(&i, a, sizeof a), same[k][1]);
        assert_int_equal(reshard_infer_spec_parse(a, &j), RESHARD_OK);
        assert_string_equal(reshard_infer_spec_str(&j, b, sizeof b), a);
    }
    reshard_infer_spec_t i;
    assert_int_equal(reshard_infer_spec_parse("engine=sglang,tp=4,dp=2,dp_attention=on", &i),
                     RESHARD_OK);
    assert_int_equal(reshard_infer_world(&i), 4); /* a server is tp ranks */
    assert_int_equal(reshard_infer_spec_parse("engine=sglang,tp=4,engines=3", &i), RESHARD_OK);
    assert_int_equal(reshard_infer_world(&i), 12);
    static const char *const bad[][2] = {
        {"engine=sglang,tp=4,dp=2", "runs 2 independent replicas of the model; give engines=2"},
        {"engine=sglang,tp=4,dp=3,dp_attention=on", "dp=3 does not divide tp=4"},
        {"engine=sglang,tp=4,ep=3", "ep=3 does not divide tp=4"},
        {"tp=4,ep=2", "a numeric ep is SGLang's --ep-size"},
        {"tp=4,dp_attention=on", "dp_attention= is an SGLang key"},
        {"engine=sglang,tp=4,vllm=0.24", "vllm= is a vLLM key"},
        {"engine=sglang,tp=4,redundant=1", "redundant= is a vLLM key"},
        {"engine=tgi,tp=4", "engine=tgi is not a modelled inference engine"},
        {"engine=sglang,tp=4,a2a=mooncake", "--moe-a2a-backend mooncake is not modelled"},
        {"engine=sglang,tp=4,moe_runner=flashinfer_trtllm",
         "--moe-runner-backend flashinfer_trtllm is not modelled"},
        {"engine=sglang,tp=4,moe_runner=flashinfer_cutlass",
         "--moe-runner-backend flashinfer_cutlass is not modelled"},
        {"engine=sglang,tp=4,a2a=deepep,ep=2", "a2a=deepep sets --ep-size to tp"},
        {"engine=sglang,tp=4,dp_lm_head=on", "dp_lm_head=on needs dp_attention=on"},
        {"engine=sglang,tp=4,moe_dense_tp=2", "moe_dense_tp=2: only 1 is modelled"},
        {"engine=sglang,tp=4,shared_fusion=on", "shared_fusion=on must be auto"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        reshard_status_t s = reshard_infer_spec_parse(bad[k][0], &i);
        if (s != RESHARD_ERR_INVALID_ARG || !strstr(reshard_last_error(), bad[k][1]))
            fail_msg("%s: got %s \"%s\", wanted INVALID_ARG naming \"%s\"", bad[k][0],
                     reshard_status_string(s), reshard_last_error(), bad[k][1]);
    }
    /* a spec built in C is held to the same rule (CONFIG) */
    reshard_model_t *m = load("qwen3-0.6b", 0, RESHARD_BF16);
    reshard_infer_spec_t direct = {.tp = 4, .dp = 2, .engines = 1, .engine = RESHARD_ENGINE_SGLANG};
    assert_int_equal(
        reshard_model_check(
            m, &(reshard_train_spec_t){.tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .vpp = 1},
            &direct, 0),
        RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "give engines=2"));
    reshard_model_destroy(m);
    /* DeepSeek's MTP layer is SGLang's separate draft model: refused */
    m = load("deepseek-v3", 1, RESHARD_BF16);
    direct =
        (reshard_infer_spec_t){.tp = 8, .dp = 1, .engines = 1, .engine = RESHARD_ENGINE_SGLANG};
    assert_int_equal(
        reshard_model_check(m,
                            &(reshard_train_spec_t){
                                .tp = 8, .pp = 1, .dp = 1, .cp = 1, .ep = 8, .etp = 1, .vpp = 1},
                            &direct, 0),
        RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "separate draft model"));
    reshard_model_destroy(m);
    expect_rule("mixtral-8x7b", RESHARD_BF16, "tp=2", "engine=sglang,tp=2", 0,
                "the model's family is not modelled under engine=sglang");
    expect_rule("qwen3-next-80b-a3b-instruct", RESHARD_BF16, "tp=2", "engine=sglang,tp=2", 0,
                "the model's family is not modelled under engine=sglang");
    expect_rule("llama-3.1-8b", RESHARD_BF16, "tp=2", "engine=sglang,tp=4,dp=2,dp_attention=on", 0,
                "SGLang's llama.py and qwen2.py attention uses the whole TP group");
    expect_rule("deepseek-v3", RESHARD_FP8_E4M3, "tp=8,ep=8,etp=1", "engine=sglang,tp=8", 0,
                "only bf16 weights are modelled under engine=sglang");
    expect_rule("qwen3-30b-a3b", RESHARD_BF16, "tp=2", "engine=sglang,tp=6,dp=2,dp_attention=on", 0,
                "attention TP 3 (tp/dp) does not divide the 32 heads");
    expect_rule("qwen3-0.6b", RESHARD_BF16, "tp=1", "engine=sglang,tp=4,engines=2", 8,
                "world size 8 != train world 1 + infer world 8");
}

static void test_config_rules(void **state)
{
    (void)state;
    const reshard_dtype_t B = RESHARD_BF16;
    expect_rule("llama-3.1-8b", B, "tp=3", "tp=1", 0,
                "tp=3 does not divide the 32 attention heads");
    /* Megatron: tp a multiple of the query groups is legal, tp=14 over 4 groups is not */
    expect_rule("qwen2.5-7b-instruct", B, "tp=14", "tp=1", 0,
                "tp=14 does not divide the 4 query groups (kv heads) nor is a multiple");
    /* Megatron: pp divides the layers unless first/last stage counts are given */
    expect_rule("llama-3.1-8b", B, "pp=33", "tp=1", 0, "pp=33 does not divide the 32 layers");
    expect_rule("llama-3.1-8b", B, "pp=3", "tp=1", 0, "--decoder-first-pipeline-num-layers");
    expect_rule("llama-3.1-8b", B, "pp=4,first=4", "tp=1", 0,
                "28 layers left after first=4, last=0 do not split evenly over the 3");
    expect_rule("llama-3.1-8b", B, "pp=2,first=5,last=5", "tp=1", 0,
                "must be the 32 layers when pp=2 has no middle stages");
    expect_rule("llama-3.1-8b", B, "pp=1,first=5", "tp=1", 0, "need pp > 1");
    expect_rule("llama-3.1-8b", B, "pp=1,vpp=2", "tp=1", 0, "needs pp > 1");
    expect_rule("llama-3.1-8b", B, "pp=4,vpp=3", "tp=1", 0,
                "vpp=3 does not divide the 8 layers of pipeline stage 0");
    expect_rule("llama-3.1-8b", B, "pp=3,first=2,last=15,vpp=2", "tp=1", 0,
                "vpp=2 does not divide the 15 layers of pipeline stage 1");
    expect_rule("llama-3.1-8b", B, "tp=2,ep=2,dp=2", "tp=1", 0, "has no experts");
    expect_rule("llama-3.1-8b", B, "tp=1", "tp=1,ep=on", 0, "ep=on: the model has no experts");
    expect_rule("llama-3.1-8b", B, "tp=1", "tp=3", 0, "tp=3 does not divide the 32 attention");
    expect_rule("qwen3-30b-a3b", B, "dp=7,ep=7", "tp=1", 0, "ep=7 does not divide the 128 experts");
    expect_rule("qwen3-30b-a3b", B, "tp=2,ep=4,etp=1", "tp=1", 0,
                "etp*ep=4 does not divide tp*cp*dp=2");
    /* etp defaults to tp (Megatron): TP2 EP2 on 2 ranks per stage needs etp=1 */
    expect_rule("qwen3-30b-a3b", B, "tp=2,pp=2,ep=2", "tp=4", 0,
                "etp*ep=4 does not divide tp*cp*dp=2");
    expect_rule("qwen3-30b-a3b", B, "tp=2,pp=2,ep=2", "tp=4", 0, "give etp=1");
    expect_rule("qwen3-30b-a3b", B, "dp=4,ep=4,etp=5", "tp=1", 0, "etp=5 does not divide");
    expect_rule("qwen3-30b-a3b", B, "tp=1", "tp=32,dp=8,ep=on", 0, "EP size tp*dp=256 is more");
    /* vLLM without EP splits each expert over tp*dp ranks: 768 / (32*16) */
    expect_rule("qwen3-30b-a3b", B, "tp=1", "tp=32,dp=16", 0,
                "tp*dp=512 does not divide the expert intermediate size 768");
    expect_rule("qwen3-30b-a3b", B, "tp=1", "tp=32,dp=16", 0, "--enable-expert-parallel");
    expect_rule("deepseek-v3", B, "tp=1", "tp=256", 0, "tp=256 does not divide the 128 attention");
    expect_rule("llama-3.1-8b", B, "tp=2", "tp=4", 7, "world size 7 != train world 2 + infer");
    /* FP8: shards must be whole 128x128 blocks: 768/32 = 24 expert rows per rank */
    expect_rule("qwen3-30b-a3b", RESHARD_FP8_E4M3, "tp=1", "tp=32", 0,
                "not sharded at 128x128 block granularity");
}

/* vLLM: tp must divide the kv heads or be a multiple of them (12 heads, 4
 * kv heads, tp=6 is neither). */
static void test_kv_head_rule(void **state)
{
    (void)state;
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json("{\"model_type\": \"llama\", \"hidden_size\": 48, "
                                             "\"intermediate_size\": 36, \"num_hidden_layers\": 2, "
                                             "\"num_attention_heads\": 12, "
                                             "\"num_key_value_heads\": 4, \"vocab_size\": 640}",
                                             NULL, &m),
                     RESHARD_OK);
    reshard_train_spec_t t = {.tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 1};
    reshard_infer_spec_t i = {.tp = 6, .dp = 1};
    assert_int_equal(reshard_model_check(m, &t, &i, 0), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "tp=6 does not divide the 4 kv heads nor"));
    i.tp = 2;
    assert_int_equal(reshard_model_check(m, &t, &i, 0), RESHARD_OK);
    reshard_model_destroy(m);
}

/* DeepSeek-V2-Lite shape: no q_lora (q_proj), greedy routing (no router
 * bias); V3's noaux_tc routing has one. */
static void test_deepseek_v2_shapes(void **state)
{
    (void)state;
    const char *cfg = "{\"model_type\": \"deepseek_v2\", \"hidden_size\": 64, "
                      "\"intermediate_size\": 96, \"moe_intermediate_size\": 16, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                      "\"q_lora_rank\": null, \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 8, "
                      "\"qk_rope_head_dim\": 4, \"v_head_dim\": 8, \"n_routed_experts\": 4, "
                      "\"n_shared_experts\": 2, \"first_k_dense_replace\": 1, "
                      "\"vocab_size\": 100";
    char text[1024];
    for (int v3 = 0; v3 < 2; v3++) {
        snprintf(text, sizeof text, "%s%s}", cfg, v3 ? ", \"topk_method\": \"noaux_tc\"" : "");
        reshard_model_t *m;
        assert_int_equal(reshard_model_load_json(text, NULL, &m), RESHARD_OK);
        reshard_tensors_t *t;
        assert_int_equal(reshard_model_tensors(m, &t), RESHARD_OK);
        assert_int_equal(
            reshard_tensors_find(t, "model.layers.1.mlp.gate.e_score_correction_bias") >= 0, v3);
        assert_true(reshard_tensors_find(t, "model.layers.0.self_attn.q_proj.weight") >= 0);
        assert_true(reshard_tensors_find(t, "model.layers.0.self_attn.q_a_proj.weight") < 0);
        int32_t id = reshard_tensors_find(t, "model.layers.1.mlp.shared_experts.gate_proj.weight");
        reshard_tensor_info_t info;
        assert_int_equal(reshard_tensors_info(t, id, &info), RESHARD_OK);
        assert_int_equal(info.shape[0], 32); /* 2 shared experts x 16 */
        reshard_tensors_destroy(t);
        reshard_model_destroy(m);
    }
    /* vLLM creates the bias only with topk_method "noaux_tc", whatever the
     * model_type: a deepseek_v3 config without it, or with greedy routing, has none */
    static const char *const v3[] = {"", ", \"topk_method\": \"greedy\"",
                                     ", \"topk_method\": \"noaux_tc\""};
    for (int k = 0; k < 3; k++) {
        snprintf(text, sizeof text, "%s%s}", cfg, v3[k]);
        memcpy(strstr(text, "deepseek_v2"), "deepseek_v3", 11);
        reshard_model_t *m;
        assert_int_equal(reshard_model_load_json(text, NULL, &m), RESHARD_OK);
        reshard_tensors_t *t;
        assert_int_equal(reshard_model_tensors(m, &t), RESHARD_OK);
        int32_t id = reshard_tensors_find(t, "model.layers.1.mlp.gate.e_score_correction_bias");
        assert_int_equal(id >= 0, k == 2);
        reshard_tensors_destroy(t);
        reshard_model_destroy(m);
    }
}

static void test_load_errors(void **state)
{
    (void)state;
    reshard_model_t *m = NULL;
    assert_int_equal(reshard_model_load("no-such-model", NULL, &m), RESHARD_ERR_IO);
    assert_non_null(strstr(reshard_last_error(), "no-such-model"));
    /* the message lists what is shipped */
    assert_non_null(strstr(reshard_last_error(), "deepseek-v3"));
    assert_non_null(strstr(reshard_last_error(), "qwen3-235b-a22b"));
    /* a file that is JSON but not an object says so */
    char path[] = "/tmp/reshard-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "[1, 2]\n", 7), 7);
    close(fd);
    assert_int_equal(reshard_model_load(path, NULL, &m), RESHARD_ERR_IO);
    assert_non_null(strstr(reshard_last_error(), "not an object"));
    unlink(path);
    assert_int_equal(reshard_model_load_json("{", NULL, &m), RESHARD_ERR_IO);
    assert_int_equal(reshard_model_load_json("{\"model_type\": \"gpt2\"}", NULL, &m),
                     RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "unknown model family"));
    /* an unknown model_type is refused even when the architecture looks known */
    assert_int_equal(reshard_model_load_json("{\"model_type\": \"mamba\", \"architectures\": "
                                             "[\"Qwen3ForCausalLM\"]}",
                                             NULL, &m),
                     RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "model_type 'mamba'"));
    /* qwen3_next: what is not modelled is refused by name (a dense MLP
     * layer, explicit layer_types, the MTP layer) */
    static const char *const next =
        "{\"model_type\": \"qwen3_next\", \"hidden_size\": 32, \"intermediate_size\": 64, "
        "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
        "\"head_dim\": 8, \"vocab_size\": 96, \"moe_intermediate_size\": 16, "
        "\"num_experts\": 4, \"shared_expert_intermediate_size\": 16, "
        "\"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, "
        "\"linear_key_head_dim\": 4, \"linear_value_head_dim\": 8, "
        "\"linear_conv_kernel_dim\": 4, \"full_attention_interval\": 2";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s}", next);
    assert_int_equal(reshard_model_load_json(buf, NULL, &m), RESHARD_OK);
    reshard_model_destroy(m);
    snprintf(buf, sizeof buf, "%s, \"mlp_only_layers\": [1]}", next);
    assert_int_equal(reshard_model_load_json(buf, NULL, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "dense MLP in layer 1"));
    snprintf(buf, sizeof buf, "%s, \"layer_types\": [\"full_attention\"]}", next);
    assert_int_equal(reshard_model_load_json(buf, NULL, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "explicit layer_types"));
    snprintf(buf, sizeof buf, "%s, \"layer_scale\": true}", next);
    assert_int_equal(reshard_model_load_json(buf, NULL, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "layer_scale true"));
    snprintf(buf, sizeof buf, "%s}", next);
    reshard_model_options_t mo = {.mtp = 1};
    assert_int_equal(reshard_model_load_json(buf, &mo, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "'qwen3_next' with the mtp option"));
    /* a dense family with experts would silently drop them */
    assert_int_equal(
        reshard_model_load_json("{\"model_type\": \"llama\", \"num_experts\": 128}", NULL, &m),
        RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "num_experts set: routed experts"));
    /* fields implying tensors the family does not build: refused by name */
    static const struct {
        const char *json, *words;
    } unbuilt[] = {
        {"{\"model_type\": \"llama\", \"attention_bias\": true}", "attention_bias set: q/k/v/o"},
        {"{\"model_type\": \"llama\", \"mlp_bias\": true}", "mlp_bias set: MLP projection"},
        {"{\"model_type\": \"qwen3_moe\", \"shared_expert_intermediate_size\": 512}",
         "shared_expert_intermediate_size set: shared experts"},
        {"{\"model_type\": \"mistral\", \"num_local_experts\": 8}",
         "num_local_experts set: routed experts"},
    };
    for (size_t k = 0; k < sizeof unbuilt / sizeof *unbuilt; k++) {
        assert_int_equal(reshard_model_load_json(unbuilt[k].json, NULL, &m), RESHARD_ERR_CONFIG);
        if (!strstr(reshard_last_error(), unbuilt[k].words))
            fail_msg("%s: %s", unbuilt[k].json, reshard_last_error());
    }
    /* shared experts on a family without them: refused by name */
    assert_int_equal(
        reshard_model_load_json("{\"model_type\": \"llama\", \"n_shared_experts\": 1}", NULL, &m),
        RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "n_shared_experts set: shared experts"));
    /* booleans are JSON true or false: "yes" is not read as false */
    static const char *const base = "{\"model_type\": \"llama\", \"hidden_size\": 8, "
                                    "\"intermediate_size\": 8, \"num_hidden_layers\": 1, "
                                    "\"num_attention_heads\": 2, \"vocab_size\": 10, ";
    static const struct {
        const char *tail, *words;
        reshard_status_t st;
    } typed[] = {
        {"\"tie_word_embeddings\": \"yes\"}", "'tie_word_embeddings' is not a boolean",
         RESHARD_ERR_CONFIG},
        {"\"tie_word_embeddings\": 1}", "'tie_word_embeddings' is not a boolean",
         RESHARD_ERR_CONFIG},
        {"\"attention_bias\": \"no\"}", "'attention_bias' is not a boolean", RESHARD_ERR_CONFIG},
        /* a duplicate key is refused (jansson would keep the later value) */
        {"\"hidden_size\": 16}", "duplicate object key", RESHARD_ERR_IO},
    };
    for (size_t k = 0; k < sizeof typed / sizeof *typed; k++) {
        char json[512];
        snprintf(json, sizeof json, "%s%s", base, typed[k].tail);
        reshard_status_t st = reshard_model_load_json(json, NULL, &m);
        if (st != typed[k].st || !strstr(reshard_last_error(), typed[k].words))
            fail_msg("%s: %s \"%s\"", typed[k].tail, reshard_status_string(st),
                     reshard_last_error());
    }
    char dup[] = "/tmp/reshard-config-XXXXXX";
    fd = mkstemp(dup);
    assert_true(fd >= 0);
    static const char two[] = "{\"model_type\": \"llama\", \"vocab_size\": 1, \"vocab_size\": 2}";
    assert_int_equal(write(fd, two, sizeof two - 1), (ssize_t)(sizeof two - 1));
    close(fd);
    assert_int_equal(reshard_model_load(dup, NULL, &m), RESHARD_ERR_IO);
    assert_non_null(strstr(reshard_last_error(), "duplicate object key"));
    assert_non_null(strstr(reshard_last_error(), "vocab_size"));
    unlink(dup);
    /* false biases are the default: accepted */
    assert_int_equal(reshard_model_load_json("{\"model_type\": \"llama\", \"attention_bias\": "
                                             "false, \"mlp_bias\": false, \"hidden_size\": 8, "
                                             "\"intermediate_size\": 8, \"num_hidden_layers\": 1, "
                                             "\"num_attention_heads\": 2, \"vocab_size\": 10}",
                                             NULL, &m),
                     RESHARD_OK);
    reshard_model_destroy(m);
    m = NULL;
    assert_int_equal(
        reshard_model_load_json("{\"model_type\": \"llama\", \"hidden_size\": 8}", NULL, &m),
        RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "'intermediate_size'"));
    reshard_model_options_t o = {.layers = 99};
    assert_int_equal(reshard_model_load("qwen3-0.6b", &o, &m), RESHARD_ERR_INVALID_ARG);
    o = (reshard_model_options_t){.dtype = RESHARD_FP16};
    assert_int_equal(reshard_model_load("qwen3-0.6b", &o, &m), RESHARD_ERR_INVALID_ARG);
    assert_null(m);
}

/* Buffers: the table covers every fragment, full sizes include the padding. */
static void test_buffer_table(void **state)
{
    (void)state;
    reshard_model_options_t o = {.layers = 2};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("qwen3-30b-a3b", &o, &m), RESHARD_OK);
    reshard_train_spec_t t;
    reshard_infer_spec_t i;
    reshard_train_spec_parse("tp=2,pp=2,ep=2,etp=1", &t);
    reshard_infer_spec_parse("tp=4,dp=2,ep=on", &i);
    reshard_model_refit_t f;
    assert_int_equal(reshard_model_refit_create(m, &t, &i, &f), RESHARD_OK);
    assert_int_equal(f.train_world, 4);
    assert_int_equal(f.infer_world, 8);
    const reshard_layout_t *lay[2] = {f.train, f.infer};
    const reshard_model_buffers_t *tab[2] = {f.train_buffers, f.infer_buffers};
    for (int side = 0; side < 2; side++) {
        int32_t lo = side ? f.train_world : 0, hi = side ? f.train_world + f.infer_world : 4;
        for (int32_t r = lo; r < hi; r++) {
            int32_t n = reshard_layout_buffer_count(lay[side], r);
            assert_int_equal(reshard_model_buffer_count(tab[side], r), n);
            for (int32_t b = 0; b < n; b++)
                assert_true(reshard_model_buffer_bytes(tab[side], r, b) >=
                            reshard_layout_buffer_bytes(lay[side], r, b));
        }
    }
    /* Megatron pads the vocabulary 151936 to a multiple of 128*tp = 152064:
     * TP rank 1's embedding holds 128 padding rows past its fragment, and the
     * layout declares the whole padded parameter */
    assert_int_equal(reshard_model_buffer_bytes(f.train_buffers, 1, 0), 152064 / 2 * 2048 * 2);
    assert_int_equal(reshard_layout_buffer_bytes(f.train, 1, 0), 152064 / 2 * 2048 * 2);
    reshard_fragment_t fr;
    for (int64_t k = 0; k < reshard_layout_count(f.train); k++)
        if (reshard_layout_fragment(f.train, k, &fr) == RESHARD_OK && fr.rank == 1 &&
            fr.buffer == 0)
            assert_int_equal(fr.box.extent[0], 152064 / 2 - 128);
    reshard_model_buffer_t e;
    assert_int_equal(reshard_model_buffers_get(f.infer_buffers, 0, &e), RESHARD_OK);
    assert_string_equal(e.name, "model.embed_tokens.weight");
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
}

/* The exact parameter list of one rank, in order. */
static void expect_names(const reshard_model_buffers_t *tab, int32_t rank, const char *const *names,
                         int32_t n)
{
    assert_int_equal(reshard_model_buffer_count(tab, rank), n);
    int32_t k = 0;
    for (int64_t i = 0; i < reshard_model_buffers_count(tab); i++) {
        reshard_model_buffer_t b;
        reshard_model_buffers_get(tab, i, &b);
        if (b.rank != rank)
            continue;
        if (strcmp(b.name, names[k]))
            fail_msg("rank %d parameter %d: %s, Megatron/vLLM name it %s", rank, k, b.name,
                     names[k]);
        k++;
    }
}

/* Names as named_parameters() gives them. Megatron stage 1 of a 2-layer
 * Qwen2-MoE (pp=2, ep=2): its one layer is decoder.layers.0, EP rank 0's two
 * experts are TEGroupedMLP weight0/weight1, the shared expert has its gate;
 * vLLM: qkv_proj.bias, shared_expert (singular) and shared_expert_gate. */
static void test_parameter_names(void **state)
{
    (void)state;
    const char *cfg = "{\"model_type\": \"qwen2_moe\", \"hidden_size\": 64, "
                      "\"intermediate_size\": 96, \"moe_intermediate_size\": 16, "
                      "\"shared_expert_intermediate_size\": 32, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                      "\"num_experts\": 4, \"vocab_size\": 100}";
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json(cfg, NULL, &m), RESHARD_OK);
    reshard_train_spec_t t;
    reshard_infer_spec_t i;
    assert_int_equal(reshard_train_spec_parse("pp=2,ep=2,dp=2", &t), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=2", &i), RESHARD_OK);
    reshard_model_refit_t f;
    assert_int_equal(reshard_model_refit_create(m, &t, &i, &f), RESHARD_OK);
    static const char *const mg[] = {"decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
                                     "decoder.layers.0.self_attention.linear_qkv.weight",
                                     "decoder.layers.0.self_attention.linear_qkv.bias",
                                     "decoder.layers.0.self_attention.linear_proj.weight",
                                     "decoder.layers.0.pre_mlp_layernorm.weight",
                                     "decoder.layers.0.mlp.router.weight",
                                     "decoder.layers.0.mlp.experts.linear_fc1.weight0",
                                     "decoder.layers.0.mlp.experts.linear_fc1.weight1",
                                     "decoder.layers.0.mlp.experts.linear_fc2.weight0",
                                     "decoder.layers.0.mlp.experts.linear_fc2.weight1",
                                     "decoder.layers.0.mlp.shared_experts.linear_fc1.weight",
                                     "decoder.layers.0.mlp.shared_experts.linear_fc2.weight",
                                     "decoder.layers.0.mlp.shared_experts.gate_weight",
                                     "decoder.final_layernorm.weight",
                                     "output_layer.weight"};
    expect_names(f.train_buffers, 2, mg, sizeof mg / sizeof *mg);
    /* Megatron's router weight: params_dtype (bf16; router.py reset_parameters) */
    reshard_buffer_info_t bi;
    int32_t b = reshard_layout_find_buffer(f.train, 2, "decoder.layers.0.mlp.router.weight");
    assert_int_equal(reshard_layout_declared_buffer(f.train, 2, b, &bi), RESHARD_OK);
    assert_int_equal(bi.dtype, RESHARD_BF16);
    /* one expert's parameter: [2 * I / etp, H] */
    b = reshard_layout_find_buffer(f.train, 2, "decoder.layers.0.mlp.experts.linear_fc1.weight1");
    assert_int_equal(reshard_layout_declared_buffer(f.train, 2, b, &bi), RESHARD_OK);
    assert_int_equal(bi.ndim, 2);
    assert_int_equal(bi.shape[0], 32);
    assert_int_equal(bi.shape[1], 64);
    static const char *const vl[] = {
        "model.layers.1.input_layernorm.weight", "model.layers.1.self_attn.qkv_proj.weight",
        "model.layers.1.self_attn.qkv_proj.bias", "model.layers.1.self_attn.o_proj.weight",
        "model.layers.1.post_attention_layernorm.weight", "model.layers.1.mlp.gate.weight",
        /* vLLM >= 0.25 (PR #41184), the default */
        "model.layers.1.mlp.experts.routed_experts.w13_weight",
        "model.layers.1.mlp.experts.routed_experts.w2_weight",
        "model.layers.1.mlp.shared_expert.gate_up_proj.weight",
        "model.layers.1.mlp.shared_expert.down_proj.weight",
        "model.layers.1.mlp.shared_expert_gate.weight"};
    int32_t r = f.train_world + 1; /* vLLM TP rank 1 */
    for (size_t k = 0; k < sizeof vl / sizeof *vl; k++)
        if (reshard_layout_find_buffer(f.infer, r, vl[k]) < 0)
            fail_msg("vLLM rank 1 lacks %s", vl[k]);
    assert_int_equal(
        reshard_layout_find_buffer(f.infer, r, "model.layers.1.mlp.experts.w13_weight"), -1);
    reshard_model_refit_destroy(&f);
    /* vLLM up to 0.24: FusedMoE holds w13_weight / w2_weight itself; nothing else differs */
    assert_int_equal(reshard_infer_spec_parse("tp=2,vllm=0.24", &i), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &t, &i, &f), RESHARD_OK);
    for (size_t k = 0; k < sizeof vl / sizeof *vl; k++) {
        char old[160];
        const char *nest = strstr(vl[k], "routed_experts.");
        if (nest)
            snprintf(old, sizeof old, "%.*s%s", (int)(nest - vl[k]), vl[k],
                     nest + strlen("routed_experts."));
        else
            snprintf(old, sizeof old, "%s", vl[k]);
        if (reshard_layout_find_buffer(f.infer, r, old) < 0)
            fail_msg("vLLM 0.24 rank 1 lacks %s", old);
    }
    assert_int_equal(reshard_layout_find_buffer(
                         f.infer, r, "model.layers.1.mlp.experts.routed_experts.w13_weight"),
                     -1);
    /* Megatron's router.expert_bias would be a module buffer; router.weight is a parameter */
    for (int64_t k = 0; k < reshard_model_buffers_count(f.train_buffers); k++) {
        reshard_model_buffer_t mb;
        assert_int_equal(reshard_model_buffers_get(f.train_buffers, k, &mb), RESHARD_OK);
        assert_int_equal(mb.module_buffer, 0); /* qwen2_moe has no expert_bias */
    }
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);

    /* DeepSeek-V3 MTP at pp=2: the last stage holds its own embedding copy,
     * the MTP inner layer is mtp_model_layer */
    m = load("deepseek-v3", 1, RESHARD_BF16);
    assert_int_equal(reshard_train_spec_parse("pp=2,first=31,last=30", &t), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=1", &i), RESHARD_OK);
    reshard_tensors_t *T;
    reshard_layout_t *L;
    assert_int_equal(reshard_model_tensors(m, &T), RESHARD_OK);
    assert_int_equal(reshard_model_train_layout(m, T, &t, 0, &L, NULL), RESHARD_OK);
    static const char *const last[] = {
        "embedding.word_embeddings.weight",
        "decoder.layers.29.mlp.experts.linear_fc1.weight255",
        "decoder.final_layernorm.weight",
        "mtp.layers.0.eh_proj.weight",
        "mtp.layers.0.mtp_model_layer.mlp.experts.linear_fc2.weight0",
        "mtp.layers.0.final_layernorm.weight",
        "output_layer.weight"};
    for (size_t k = 0; k < sizeof last / sizeof *last; k++)
        if (reshard_layout_find_buffer(L, 1, last[k]) < 0)
            fail_msg("Megatron stage 1 lacks %s", last[k]);
    assert_true(reshard_layout_find_buffer(L, 1, "decoder.layers.30.input_layernorm.weight") < 0);
    assert_true(reshard_layout_find_buffer(L, 0, "decoder.layers.30.input_layernorm.weight") >= 0);
    reshard_layout_destroy(L);
    reshard_tensors_destroy(T);
    reshard_model_destroy(m);
}

/* Gather+broadcast: per stage the root gathers the stage's tensors from its
 * TP (and EP) peers, then every inference rank receives the whole model. */
static void test_baseline_counts(void **state)
{
    (void)state;
    reshard_model_options_t o = {.layers = 4};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("llama-3.1-8b", &o, &m), RESHARD_OK);
    reshard_train_spec_t t;
    reshard_infer_spec_t i;
    reshard_train_spec_parse("tp=2,pp=2,dp=2", &t);
    reshard_infer_spec_parse("tp=2,dp=2", &i);
    reshard_model_refit_t f;
    assert_int_equal(reshard_model_refit_create(m, &t, &i, &f), RESHARD_OK);
    uint64_t mb = reshard_tensors_bytes(f.tensors);
    reshard_plan_stats_t s;
    assert_int_equal(reshard_model_baseline(m, &f, 1, &s), RESHARD_OK);
    /* gathered: every TP-split tensor's half from TP rank 1; norms are
     * replicated and already on the root */
    uint64_t H = 4096, norms = (2 * 4 + 1) * H * 2;
    uint64_t gathered = (mb - norms) / 2;
    assert_int_equal(s.bytes_network, gathered + 4 * mb);
    assert_int_equal(s.bytes_total, 4 * mb);
    assert_int_equal(s.max_nic_recv_bytes, mb);
    assert_int_equal(s.bytes_nvlink, 0);
    /* transfers: tp1 -> root per stage, 2 roots -> infer 0, 3 chain hops */
    assert_int_equal(s.transfers, 2 + 2 + 3);
    /* one domain for everything: nothing crosses the network */
    assert_int_equal(reshard_model_baseline(m, &f, 16, &s), RESHARD_OK);
    assert_int_equal(s.bytes_network, 0);
    assert_int_equal(s.bytes_nvlink, gathered + 4 * mb);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
}

/* Declared shape [rows, cols] of buffer @p name of @p rank (fails when absent). */
static void declared_2d(const reshard_layout_t *l, int32_t rank, const char *name, int64_t rows,
                        int64_t cols)
{
    int32_t b = reshard_layout_find_buffer(l, rank, name);
    if (b < 0)
        fail_msg("rank %d has no %s", rank, name);
    reshard_buffer_info_t bi;
    assert_int_equal(reshard_layout_declared_buffer(l, rank, b, &bi), RESHARD_OK);
    if (bi.ndim != 2 || bi.shape[0] != rows || bi.shape[1] != cols)
        fail_msg("rank %d %s: [%lld, %lld], the framework holds [%lld, %lld]", rank, name,
                 (long long)bi.shape[0], (long long)bi.shape[1], (long long)rows, (long long)cols);
}

/* The shipped models as the audit found them. Vocabulary rows per
 * Megatron TP rank: Megatron-LM roundup(V, 128*tp)/tp, Megatron-Bridge V/tp
 * (Qwen2-57B differs from tp=2, Qwen2.5 from tp=8, Mixtral from tp=4).
 * Nemotron 3 Nano under vLLM tp=2,dp=2,ep=on (sequence-parallel MoE): the
 * shared expert's up_proj whole, (3712, 2688); in engines of dp=1 TP-split. */
static void test_audit_shipped(void **state)
{
    (void)state;
    static const struct {
        const char *model;
        int64_t V, H;
        int32_t tp;
    } v[] = {{"qwen2-57b-a14b", 151936, 3584, 2},
             {"qwen2.5-72b-instruct", 152064, 8192, 8},
             {"mixtral-8x7b", 32000, 4096, 4},
             {"qwen2.5-7b-instruct", 152064, 3584, 4}};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        reshard_model_options_t o = {.layers = 1};
        reshard_model_t *m;
        assert_int_equal(reshard_model_load(v[k].model, &o, &m), RESHARD_OK);
        for (int bridge = 0; bridge < 2; bridge++) {
            char spec[96];
            snprintf(spec, sizeof spec, "tp=%d%s", v[k].tp,
                     bridge ? ",convention=megatron-bridge" : "");
            reshard_train_spec_t t;
            reshard_infer_spec_t i;
            assert_int_equal(reshard_train_spec_parse(spec, &t), RESHARD_OK);
            assert_int_equal(reshard_infer_spec_parse("tp=1", &i), RESHARD_OK);
            reshard_model_refit_t f;
            if (reshard_model_refit_create(m, &t, &i, &f) != RESHARD_OK)
                fail_msg("%s %s: %s", v[k].model, spec, reshard_last_error());
            int64_t pad = 128 * (int64_t)v[k].tp;
            int64_t rows = bridge ? v[k].V / v[k].tp : (v[k].V + pad - 1) / pad * pad / v[k].tp;
            declared_2d(f.train, v[k].tp - 1, "embedding.word_embeddings.weight", rows, v[k].H);
            reshard_model_refit_destroy(&f);
        }
        reshard_model_destroy(m);
    }
    reshard_model_options_t o = {.layers = 2};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("nemotron-3-nano-30b-a3b", &o, &m), RESHARD_OK);
    static const struct {
        const char *infer;
        int64_t rows;
    } n[] = {{"tp=2,dp=2,ep=on", 3712}, {"tp=2,ep=on,engines=2", 1856}, {"tp=2,dp=2", 1856}};
    for (size_t k = 0; k < sizeof n / sizeof *n; k++) {
        reshard_train_spec_t t;
        reshard_infer_spec_t i;
        assert_int_equal(reshard_train_spec_parse("tp=2,ep=2,etp=1", &t), RESHARD_OK);
        assert_int_equal(reshard_infer_spec_parse(n[k].infer, &i), RESHARD_OK);
        reshard_model_refit_t f;
        if (reshard_model_refit_create(m, &t, &i, &f) != RESHARD_OK)
            fail_msg("%s: %s", n[k].infer, reshard_last_error());
        for (int32_t r = 0; r < f.infer_world; r++)
            declared_2d(f.infer, f.infer_offset + r,
                        "model.layers.1.mixer.shared_experts.up_proj.weight", n[k].rows, 2688);
        /* A_log: bf16 on both sides */
        reshard_buffer_info_t bi;
        int32_t b = reshard_layout_find_buffer(f.train, 0, "decoder.layers.0.mixer.A_log");
        assert_int_equal(reshard_layout_declared_buffer(f.train, 0, b, &bi), RESHARD_OK);
        assert_int_equal(bi.dtype, RESHARD_BF16);
        b = reshard_layout_find_buffer(f.infer, f.infer_offset, "model.layers.0.mixer.A_log");
        assert_int_equal(reshard_layout_declared_buffer(f.infer, f.infer_offset, b, &bi),
                         RESHARD_OK);
        assert_int_equal(bi.dtype, RESHARD_BF16);
        /* router.expert_bias: fp32, a module buffer */
        b = reshard_layout_find_buffer(f.train, 0, "decoder.layers.1.mlp.router.expert_bias");
        assert_int_equal(reshard_layout_declared_buffer(f.train, 0, b, &bi), RESHARD_OK);
        assert_int_equal(bi.dtype, RESHARD_FP32);
        int found = 0;
        for (int64_t q = 0; q < reshard_model_buffers_count(f.train_buffers); q++) {
            reshard_model_buffer_t mb;
            assert_int_equal(reshard_model_buffers_get(f.train_buffers, q, &mb), RESHARD_OK);
            int bias = strstr(mb.name, ".router.expert_bias") != NULL;
            assert_int_equal(mb.module_buffer, bias);
            found += bias;
        }
        assert_int_equal(found, f.train_world); /* one MoE layer, every rank */
        reshard_model_refit_destroy(&f);
    }
    reshard_model_destroy(m);
    /* Qwen3-Next (shipped, 2 layers) under vLLM tp=2,dp=2,ep=on (sequence-parallel
     * MoE): qwen3_next.py builds the shared expert with disable_tp: gate_up_proj
     * (2 x 512, 2048) and down_proj (2048, 512) whole on every rank; TP-split
     * (512, 2048) / (2048, 256) in engines of dp=1 */
    assert_int_equal(reshard_model_load("qwen3-next-80b-a3b-instruct", &o, &m), RESHARD_OK);
    static const struct {
        const char *infer;
        int64_t is;
    } q[] = {{"tp=2,dp=2,ep=on", 512}, {"tp=2,ep=on,engines=2", 256}};
    for (size_t k = 0; k < sizeof q / sizeof *q; k++) {
        reshard_train_spec_t t;
        reshard_infer_spec_t i;
        assert_int_equal(reshard_train_spec_parse("tp=2,ep=2,etp=1", &t), RESHARD_OK);
        assert_int_equal(reshard_infer_spec_parse(q[k].infer, &i), RESHARD_OK);
        reshard_model_refit_t f;
        if (reshard_model_refit_create(m, &t, &i, &f) != RESHARD_OK)
            fail_msg("qwen3-next %s: %s", q[k].infer, reshard_last_error());
        for (int32_t r = 0; r < f.infer_world; r++) {
            declared_2d(f.infer, f.infer_offset + r,
                        "model.layers.1.mlp.shared_expert.gate_up_proj.weight", 2 * q[k].is, 2048);
            declared_2d(f.infer, f.infer_offset + r,
                        "model.layers.1.mlp.shared_expert.down_proj.weight", 2048, q[k].is);
        }
        reshard_model_refit_destroy(&f);
    }
    reshard_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_model_bytes), cmocka_unit_test(test_mtp_and_fp8),
        cmocka_unit_test(test_spec_parse),          cmocka_unit_test(test_config_rules),
        cmocka_unit_test(test_load_errors),         cmocka_unit_test(test_deepseek_v2_shapes),
        cmocka_unit_test(test_kv_head_rule),        cmocka_unit_test(test_buffer_table),
        cmocka_unit_test(test_parameter_names),     cmocka_unit_test(test_audit_shipped),
        cmocka_unit_test(test_baseline_counts),     cmocka_unit_test(test_sglang_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
