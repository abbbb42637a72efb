/*
 * Multi-rank refits through the NCCL transport's code with the fake CUDA runtime and NCCL
 * (fake_cuda_nccl.c): ranks are threads, "device" memory is host memory, the copy kernel
 * runs as its CPU emulation. Checks everything of the transport except the GPU itself:
 * the executor's rounds over ncclSend/ncclRecv groups, nonblocking settle, the outcome
 * all-reduce (preflight and end), stage-2 forwarding, the staging cache across
 * executions, device-buffer fill/verify, a rejected buffer on one rank, a stalled
 * peer ending every other rank with TIMEOUT in bounded time, a rank whose pack kernel launch
 * fails in the middle of a round ending every rank with its error long before the timeout
 * (it posts the rest of its transfers without data), and BF16 training into FP8 /
 * MXFP8 inference forms (the executor's quantize steps through the transport's quantize
 * op; verified against the pattern's quantized values).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reshard/reshard_model.h"
#include "reshard/reshard_nccl.h"
#include "device_bufs.h"
#include "fake_ranks.h"
#include "fake_cuda_nccl.h"
#include "util/timeout.h"

/* Small configs of the real families, sized so FP8 shards fall on 128x128 blocks. */
static const char *tiny_dense =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\","
    " \"hidden_size\": 256, \"intermediate_size\": 512, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 128,"
    " \"vocab_size\": 1000, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\"}";
static const char *tiny_moe =
    "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\","
    " \"hidden_size\": 256, \"intermediate_size\": 512, \"moe_intermediate_size\": 192,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 2,"
    " \"head_dim\": 32, \"num_experts\": 8, \"num_experts_per_tok\": 2,"
    " \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"vocab_size\": 1000,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";
/* The MoE family with 128-row heads, so FP8 shards of the fused qkv fall on block bounds. */
static const char *tiny_moe_fp8 =
    "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\","
    " \"hidden_size\": 256, \"intermediate_size\": 512, \"moe_intermediate_size\": 128,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 128, \"num_experts\": 8, \"num_experts_per_tok\": 2,"
    " \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"vocab_size\": 1000,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";
static const char *tiny_mla =
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\","
    " \"hidden_size\": 256, \"intermediate_size\": 512, \"moe_intermediate_size\": 256,"
    " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
    " \"q_lora_rank\": 128, \"kv_lora_rank\": 128, \"qk_nope_head_dim\": 64,"
    " \"qk_rope_head_dim\": 64, \"v_head_dim\": 64, \"n_routed_experts\": 8,"
    " \"n_shared_experts\": 1, \"num_experts_per_tok\": 2, \"first_k_dense_replace\": 1,"
    " \"moe_layer_freq\": 1, \"n_group\": 1, \"topk_group\": 1, \"num_nextn_predict_layers\": 1,"
    " \"vocab_size\": 1000, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";

typedef struct {
    const char *name;
    const char *model; /* shipped name, or NULL for json */
    const char *json;
    reshard_dtype_t dtype;
    int mtp;
    int32_t layers;
    int nranks;
    const char *train, *infer;
    int32_t domain_size;
    uint64_t staging;
    int short_rank; /* >= 0: this rank passes a destination buffer one byte short first */
    int stall_rank; /* >= 0: this rank never executes; the others must time out */
    reshard_quant_kind_t infer_quant; /* bf16 training into this FP8 inference form */
    int fail_launch; /* > 0: rank 0's fail_launch-th kernel launch of the refit fails */
} scenario_t;

#define FAIL_TIMEOUT_S 20.0 /* the plan's timeout in the failed-launch scenario */
#define FAIL_BOUND_S 5.0    /* every rank must have its error by then */

typedef rank_job_t job_t;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(j->msg, sizeof j->msg, __VA_ARGS__);                                              \
        goto out;                                                                                  \
    } while (0)

static void *rank_main(void *arg)
{
    job_t *j = arg;
    const scenario_t *sc = j->sc;
    reshard_comm_t *c = NULL;
    reshard_model_t *m = NULL;
    reshard_model_refit_t refit;
    reshard_plan_t *plan = NULL;
    bufs_t sb = {0, NULL}, db = {0, NULL};
    memset(&refit, 0, sizeof refit);
    reshard_model_options_t o;
    memset(&o, 0, sizeof o);
    o.dtype = sc->dtype;
    o.layers = sc->layers;
    o.mtp = sc->mtp;
    o.infer_quant = sc->infer_quant;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    cudaStream_t stream = NULL; /* the failing rank's own stream, to arm the fake's hook */
    if (sc->fail_launch > 0 && j->rank == 0 &&
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
        FAIL("stream");
    reshard_status_t st =
        reshard_comm_create_nccl_from_id(j->id, j->rank, sc->nranks, 0, stream, &c);
    if (st != RESHARD_OK)
        FAIL("endpoint: %s", reshard_last_error());
    st = sc->model ? reshard_model_load(sc->model, &o, &m)
                   : reshard_model_load_json(sc->json, &o, &m);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse(sc->train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(sc->infer, &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(m, &ts, &is, &refit);
    reshard_plan_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT |
                   RESHARD_PLAN_PARAM_DOMAIN_SIZE;
    p.world_size = sc->nranks;
    p.my_rank = j->rank;
    p.staging_bytes = sc->staging;
    p.timeout_s = sc->stall_rank >= 0 ? 2.0 : sc->fail_launch > 0 ? FAIL_TIMEOUT_S : 30.0;
    p.domain_size = sc->domain_size;
    if (st == RESHARD_OK)
        st = reshard_plan_create(refit.train, refit.infer, &p, &plan);
    if (st != RESHARD_OK)
        FAIL("setup: %s", reshard_last_error());
    if (refit.train_world + refit.infer_world != sc->nranks)
        FAIL("scenario has %d ranks, the specs %d", sc->nranks,
             (int)(refit.train_world + refit.infer_world));
    const int trainer = j->rank < refit.train_world;
    st = trainer ? alloc_bufs(c, refit.train_buffers, j->rank, &sb)
                 : alloc_bufs(c, refit.infer_buffers, j->rank, &db);
    if (st == RESHARD_OK && trainer)
        st = reshard_nccl_fill_pattern(c, refit.train, j->rank, sb.b, sb.n);
    if (st != RESHARD_OK)
        FAIL("buffers: %s", reshard_last_error());

    if (j->rank == sc->stall_rank) { /* a stalled peer: never shows up */
        sleep(4);
        j->ok = 1;
        goto out;
    }
    if (sc->stall_rank >= 0) {
        const double t0 = rs_now_s();
        st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
        const double dt = rs_now_s() - t0;
        if ((st != RESHARD_ERR_TIMEOUT && st != RESHARD_ERR_TRANSPORT) || dt > 10.0)
            FAIL("with a stalled peer: %s after %.1f s: %s", reshard_status_string(st), dt,
                 reshard_last_error());
        st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
        if (st != RESHARD_ERR_TRANSPORT)
            FAIL("after the abort: %s, want TRANSPORT", reshard_status_string(st));
        j->ok = 1;
        goto out;
    }
    if (sc->fail_launch > 0) {
        if (stream != NULL)
            fake_cuda_fail_launch(stream, sc->fail_launch);
        const double t0 = rs_now_s();
        st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
        const double dt = rs_now_s() - t0;
        if (st != RESHARD_ERR_TRANSPORT || dt > FAIL_BOUND_S)
            FAIL("a failed launch on rank 0: %s after %.1f s (timeout %.0f s), want TRANSPORT "
                 "within %.0f s on every rank: %s",
                 reshard_status_string(st), dt, FAIL_TIMEOUT_S, FAIL_BOUND_S, reshard_last_error());
        if (j->rank == 0 && strstr(reshard_last_error(), "fake CUDA error") == NULL)
            FAIL("rank 0 lost its own reason: %s", reshard_last_error());
        j->ok = 1;
        goto out;
    }
    if (sc->short_rank >= 0) {
        reshard_buffer_t *use = trainer ? sb.b : db.b;
        const int32_t n = trainer ? sb.n : db.n;
        if (j->rank == sc->short_rank && n > 0)
            use[n - 1].bytes -= 1;
        st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
        if (j->rank == sc->short_rank && n > 0)
            use[n - 1].bytes += 1;
        if (st != RESHARD_ERR_BUFFER)
            FAIL("one short buffer: %s, want BUFFER on every rank", reshard_status_string(st));
    }
    const uint64_t want = trainer ? 0 : layout_rank_bytes(refit.infer, refit.tensors, j->rank);
    for (int it = 0; it < 2; it++) {
        for (int32_t i = 0; i < db.n && st != RESHARD_ERR_NOMEM; i++)
            reshard_nccl_memset(c, db.b[i].ptr, RESHARD_SENTINEL_BYTE, db.b[i].bytes);
        reshard_exec_stats_t es;
        st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, &es);
        if (st != RESHARD_OK)
            FAIL("execute %d: %s: %s", it, reshard_status_string(st), reshard_last_error());
        uint64_t verified = 0;
        if (!trainer) {
            st = reshard_nccl_verify_pattern(c, refit.infer, j->rank, db.b, db.n, &verified);
            if (st != RESHARD_OK)
                FAIL("verify %d: %s", it, reshard_last_error());
            if (verified != want || es.bytes_recv + es.bytes_local != want)
                FAIL("iteration %d: verified %" PRIu64 ", received %" PRIu64 " + local %" PRIu64
                     ", want %" PRIu64,
                     it, verified, es.bytes_recv, es.bytes_local, want);
        }
    }
    j->ok = 1;
out:
    free_bufs(c, &sb);
    free_bufs(c, &db);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&refit);
    reshard_model_destroy(m);
    reshard_comm_destroy(c);
    if (stream != NULL)
        cudaStreamDestroy(stream);
    return NULL;
}

static int run(const scenario_t *sc)
{
    const double t0 = rs_now_s();
    int bad = run_fake_ranks(sc->name, sc, sc->nranks, rank_main);
    if (!bad)
        printf("ok   %s (%d ranks, %.1f s)\n", sc->name, sc->nranks, rs_now_s() - t0);
    return bad;
}

int main(void)
{
    const scenario_t scenarios[] = {
        {"qwen3-0.6b (1 layer) tp2 -> tp2", "qwen3-0.6b", NULL, RESHARD_BF16, 0, 1, 4, "tp=2",
         "tp=2", 1, 64 << 20, -1, -1, RESHARD_QUANT_NONE, 0},
        {"tiny dense tp2 -> tp1 dp2, domains of 2 (forwarding), 64 KiB staging", NULL, tiny_dense,
         RESHARD_BF16, 0, 0, 4, "tp=2", "tp=1,dp=2", 2, 64 << 10, -1, -1, RESHARD_QUANT_NONE, 0},
        {"tiny dense fp8 pp2 -> tp2, 16 KiB staging", NULL, tiny_dense, RESHARD_FP8_E4M3, 0, 0, 4,
         "pp=2", "tp=2", 1, 16 << 10, -1, -1, RESHARD_QUANT_NONE, 0},
        {"tiny MoE ep2 -> tp2 ep=on", NULL, tiny_moe, RESHARD_BF16, 0, 0, 4, "ep=2,dp=2",
         "tp=2,ep=on", 1, 64 << 10, -1, -1, RESHARD_QUANT_NONE, 0},
        {"tiny MLA fp8 + MTP tp2 -> tp2, domains of 3", NULL, tiny_mla, RESHARD_FP8_E4M3, 1, 0, 4,
         "tp=2", "tp=2", 3, 32 << 10, -1, -1, RESHARD_QUANT_NONE, 0},
        {"tiny MoE bf16 -> fp8 ep2 -> tp1 dp2 ep=on (quantize steps on the fake device)", NULL,
         tiny_moe_fp8, RESHARD_BF16, 0, 0, 4, "ep=2,dp=2", "tp=1,dp=2,ep=on", 1, 64 << 10, -1, -1,
         RESHARD_QUANT_FP8_BLOCK, 0},
        {"tiny MLA bf16 -> mxfp8 tp2 -> tp2, domains of 3", NULL, tiny_mla, RESHARD_BF16, 1, 0, 4,
         "tp=2", "tp=2", 3, 32 << 10, -1, -1, RESHARD_QUANT_MXFP8, 0},
        {"tiny dense bf16 -> fp8 pp2 -> tp2, 16 KiB staging", NULL, tiny_dense, RESHARD_BF16, 0, 0,
         4, "pp=2", "tp=2", 1, 16 << 10, -1, -1, RESHARD_QUANT_FP8_BLOCK, 0},
        {"one rank short of buffer: BUFFER everywhere, then OK", NULL, tiny_dense, RESHARD_BF16, 0,
         0, 3, "tp=1", "tp=2", 1, 64 << 10, 2, -1, RESHARD_QUANT_NONE, 0},
        {"stalled peer: TIMEOUT everywhere else", NULL, tiny_dense, RESHARD_BF16, 0, 0, 3, "tp=1",
         "tp=2", 1, 64 << 10, -1, 1, RESHARD_QUANT_NONE, 0},
        {"rank 0's 3rd pack launch fails mid-round: its error everywhere, long before the "
         "timeout",
         NULL, tiny_dense, RESHARD_BF16, 0, 0, 3, "tp=1", "tp=2", 1, 16 << 10, -1, -1,
         RESHARD_QUANT_NONE, 3},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        bad += run(&scenarios[i]);
    printf("%s: %d scenario(s) failed\n", bad ? "FAILED" : "passed", bad);
    return bad ? 1 : 0;
}
