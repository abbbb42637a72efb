/*
 * Delta refits through the NCCL transport's code with the fake CUDA runtime and NCCL
 * (fake_cuda_nccl.c; ranks are threads, the delta kernels run as their CPU emulation):
 * the snapshot and the relay scratch in (fake) device memory, the two exchanges of every
 * round with the headers copied to the host. A few executions: the first dense, then
 * sparse changes, none, and all; after each, every destination byte is checked against the
 * pattern at its version (reshard_verify_pattern_version, sentinels outside fragments
 * included), and the versions and the delta counters against what the schedule implies.
 * Verification is on (the default): then a destination byte changed behind the plan's back
 * is caught by the hash kernel's emulation (VERIFY on every rank) and the next refit is exact.
 * Then a failed kernel launch on one rank fails the refit on every rank (TRANSPORT, not a
 * timeout), and the refit after is exact.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard_delta.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_nccl.h"
#include "device_bufs.h"
#include "fake_cuda_nccl.h"
#include "fake_ranks.h"
#include "util/timeout.h"

static const char *tiny_dense =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\","
    " \"hidden_size\": 256, \"intermediate_size\": 512, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 128,"
    " \"vocab_size\": 1000, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\"}";

/* Odd widths: most pieces are not a multiple of 8 bytes (a 51-element bf16 norm, rows of
 * 102 elements), so a stream pads them and the padding is zeroed on the device, in order
 * with the packs of the round (the chunks of a round are enqueued without a wait). */
static const char *tiny_odd =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\","
    " \"hidden_size\": 102, \"intermediate_size\": 206, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"head_dim\": 51,"
    " \"vocab_size\": 1001, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";

/* gpt-oss without EP: vLLM's w2_bias is real on the first rank of the flattened expert-TP
 * group and zeros on the others (zero-filled buffers, written through the device
 * operations; the verification checks every byte of them is 0, the buffers starting as
 * sentinels). */
static const char *tiny_gpt_oss =
    "{\"architectures\": [\"GptOssForCausalLM\"], \"model_type\": \"gpt_oss\","
    " \"attention_bias\": true, \"hidden_size\": 128, \"intermediate_size\": 64,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 2,"
    " \"head_dim\": 16, \"num_local_experts\": 4, \"num_experts_per_tok\": 2,"
    " \"vocab_size\": 517, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";

typedef struct {
    const char *name, *train, *infer;
    int nranks;
    int32_t domain_size;
    const char *config; /* NULL: tiny_dense */
    uint64_t staging;   /* staging bytes per rank (0: the default): tp1 -> tp1 x3 only */
} scenario_t;

typedef rank_job_t job_t;

/* The refits: the pattern version (reshard_fill_pattern_version) of the source and its change
 * fraction: the first dense, sparse, the same again (nothing changed), all, sparse. */
static const struct {
    int64_t version;
    double fraction;
} refits[] = {{0, 0.0}, {1, 0.002}, {2, 0.02}, {2, 0.02}, {3, 1.0}, {4, 0.01}};
#define NREFITS ((int)(sizeof refits / sizeof refits[0]))

/* The launch on rank 0's stream that fails in the last refit: the second (a pack's box copy
 * where the pieces are boxes; in tp1 -> tp1 x3, whose pieces are whole tensors packed by
 * copies, a delta kernel of the first chunk: there the peers timed out before failed encode
 * and hash launches were posted as lost chunks) */
#define FAIL_LAUNCH 2

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(j->msg, sizeof j->msg, __VA_ARGS__);                                              \
        goto out;                                                                                  \
    } while (0)

/* Host copies of device buffers @p d (same sizes). */
static reshard_buffer_t *host_twins(const bufs_t *d)
{
    reshard_buffer_t *h = calloc((size_t)d->n + 1, sizeof *h);
    for (int32_t i = 0; h && i < d->n; i++) {
        h[i].bytes = d->b[i].bytes;
        h[i].ptr = malloc(h[i].bytes ? h[i].bytes : 1);
    }
    return h;
}

static void free_twins(reshard_buffer_t *h, int32_t n)
{
    for (int32_t i = 0; h && i < n; i++)
        free(h[i].ptr);
    free(h);
}

static reshard_status_t copy_all(reshard_comm_t *c, const reshard_buffer_t *to,
                                 const reshard_buffer_t *from, int32_t n)
{
    reshard_status_t st = RESHARD_OK;
    for (int32_t i = 0; st == RESHARD_OK && i < n; i++)
        st = reshard_nccl_memcpy(c, to[i].ptr, from[i].ptr, to[i].bytes);
    return st;
}

static void *rank_main(void *arg)
{
    job_t *j = arg;
    const scenario_t *sc = j->sc;
    reshard_comm_t *c = NULL;
    reshard_model_t *m = NULL;
    reshard_model_refit_t refit;
    reshard_plan_t *plan = NULL;
    bufs_t sb = {0, NULL}, db = {0, NULL};
    reshard_buffer_t *hs = NULL, *hd = NULL;
    memset(&refit, 0, sizeof refit);
    reshard_model_options_t o;
    memset(&o, 0, sizeof o);
    o.dtype = RESHARD_BF16;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    cudaStream_t stream = NULL; /* rank 0's own stream, to arm the fake's failed launch */
    if (j->rank == 0 && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
        FAIL("stream");
    reshard_status_t st =
        reshard_comm_create_nccl_from_id(j->id, j->rank, sc->nranks, 0, stream, &c);
    if (st != RESHARD_OK)
        FAIL("endpoint: %s", reshard_last_error());
    st = reshard_model_load_json(sc->config ? sc->config : tiny_dense, &o, &m);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse(sc->train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(sc->infer, &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(m, &ts, &is, &refit);
    reshard_plan_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask =
        RESHARD_PLAN_PARAM_TIMEOUT | RESHARD_PLAN_PARAM_DELTA | RESHARD_PLAN_PARAM_DOMAIN_SIZE;
    p.world_size = sc->nranks;
    p.my_rank = j->rank;
    p.timeout_s = 10.0;
    p.delta = 1;
    p.domain_size = sc->domain_size;
    if (sc->staging) {
        p.field_mask |= RESHARD_PLAN_PARAM_STAGING_BYTES;
        p.staging_bytes = sc->staging;
    }
    if (st == RESHARD_OK)
        st = reshard_plan_create(refit.train, refit.infer, &p, &plan);
    if (st != RESHARD_OK)
        FAIL("setup: %s", reshard_last_error());
    const int trainer = j->rank < refit.train_world;
    st = trainer ? alloc_bufs(c, refit.train_buffers, j->rank, &sb)
                 : alloc_bufs(c, refit.infer_buffers, j->rank, &db);
    if (st != RESHARD_OK || !(hs = host_twins(&sb)) || !(hd = host_twins(&db)))
        FAIL("buffers: %s", reshard_last_error());
    for (int32_t i = 0; i < db.n; i++) /* outside fragments: sentinels, never written */
        reshard_nccl_memset(c, db.b[i].ptr, RESHARD_SENTINEL_BYTE, db.b[i].bytes);
    for (int k = 0; k < NREFITS; k++) {
        const double f = refits[k].fraction;
        const int64_t pv = refits[k].version;
        const bool same = k > 0 && pv == refits[k - 1].version;
        if (trainer) {
            st = copy_all(c, hs, sb.b, sb.n);
            if (st == RESHARD_OK)
                st = reshard_fill_pattern_version(refit.train, j->rank, hs, sb.n, pv, f);
            if (st == RESHARD_OK)
                st = copy_all(c, sb.b, hs, sb.n);
            if (st != RESHARD_OK)
                FAIL("fill %d: %s", k, reshard_last_error());
        }
        const unsigned long long waits0 = fake_cuda_host_waits();
        st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
        const unsigned long long waits = fake_cuda_host_waits() - waits0;
        if (st != RESHARD_OK)
            FAIL("execute %d: %s: %s", k, reshard_status_string(st), reshard_last_error());
        if (!trainer) {
            uint64_t verified = 0;
            st = copy_all(c, hd, db.b, db.n);
            if (st == RESHARD_OK)
                st = reshard_verify_pattern_version(refit.infer, j->rank, hd, db.n, pv, f,
                                                    &verified);
            const uint64_t want = layout_rank_bytes(refit.infer, refit.tensors, j->rank);
            if (st != RESHARD_OK || verified != want)
                FAIL("verify %d: %s (verified %" PRIu64 " of %" PRIu64 ")", k, reshard_last_error(),
                     verified, want);
        }
        reshard_delta_info_t info;
        st = reshard_plan_delta_info(plan, j->rank, &info);
        if (st != RESHARD_OK || info.version != k + 1 || info.state != RESHARD_DELTA_COMMITTED)
            FAIL("after refit %d: version %" PRId64 " (%s), want %d committed", k, info.version,
                 reshard_delta_state_string(info.state), k + 1);
        int64_t nchunks = 0;
        for (int t = 0; t < 4; t++)
            nchunks += info.chunks[t];
        /* no host wait per chunk: the sender of three chunks a round waits once a round
         * (the round's messages back), plus the version exchange and the agreement */
        if (trainer && sc->staging && waits > (unsigned long long)nchunks / 3 + 4)
            FAIL("refit %d: %llu host waits for %lld chunks sent three a round", k, waits,
                 (long long)nchunks);
        if (trainer && info.stream_bytes == 0)
            FAIL("refit %d: trainer rank sent no stream bytes", k);
        if (trainer && k == 0 && (info.dense_streams == 0 || info.chunks[0] == 0))
            FAIL("refit 0: %" PRId64 " dense streams, %" PRId64 " dense chunks; want all dense",
                 info.dense_streams, info.chunks[0]);
        if (trainer && k > 0 && info.dense_streams != 0)
            FAIL("refit %d: %" PRId64 " streams dense, want none", k, info.dense_streams);
        /* verification is on: each header carries its chunk's 8-byte hash */
        if (trainer && same && info.wire_bytes != 24 * (uint64_t)info.chunks[2])
            FAIL("refit %d (nothing changed): %" PRIu64 " wire bytes, want bare headers", k,
                 info.wire_bytes);
        if (trainer && f == 1.0 && info.chunks[0] == 0)
            FAIL("refit %d (all changed): no dense chunk", k);
        /* the changed counts (read back from the device once per round): none when nothing
         * changed; nearly every word on the first refit (no snapshot: every word counts)
         * and when all changed (a bf16 value redrawn equals the old one rarely) */
        if (trainer && same && info.changed_bytes != 0)
            FAIL("refit %d (nothing changed): %" PRIu64 " changed bytes counted", k,
                 info.changed_bytes);
        if (trainer && (k == 0 || f == 1.0) &&
            (info.changed_bytes > info.stream_bytes ||
             info.changed_bytes * 10 < info.stream_bytes * 9))
            FAIL("refit %d (all changed): %" PRIu64 " changed bytes counted of %" PRIu64, k,
                 info.changed_bytes, info.stream_bytes);
        /* refit 1 changes 0.2% of the elements of version 0; refit 2's version (2 at 2%)
         * differs from version 1 at 0.2% in about 4% (the pattern draws each fraction's
         * changes afresh); refit 5's (4 at 1%) from version 3 at 100% in nearly every word,
         * so it is dense by size, not by rule (no dense streams) */
        const uint64_t most = k == 1 ? info.stream_bytes / 100 : info.stream_bytes / 10;
        if (trainer && (k == 1 || k == 2) && info.wire_bytes > most)
            FAIL("refit %d (%.1f%% changed): %" PRIu64 " bytes on the wire for %" PRIu64
                 " stream bytes, want at most %" PRIu64,
                 k, 100 * f, info.wire_bytes, info.stream_bytes, most);
    }
    /* Verification (on by default) on device memory, the hash kernel's emulation: the first
     * engine rank's first written destination byte changed behind the plan's back; the
     * same version again (nothing changes) fails with VERIFY on every rank, naming it on
     * that rank; the refit after it is complete and exact (dense to that rank). */
    const int tamper = refit.train_world;
    const int64_t pv = refits[NREFITS - 1].version;
    const double f = refits[NREFITS - 1].fraction;
    if (j->rank == tamper) {
        st = copy_all(c, hd, db.b, db.n);
        uint8_t *b0 = hd[0].ptr;
        uint64_t at = 0;
        while (at < hd[0].bytes && b0[at] == RESHARD_SENTINEL_BYTE)
            at++;
        if (st != RESHARD_OK || at == hd[0].bytes)
            FAIL("tamper: no written byte in buffer 0: %s", reshard_last_error());
        b0[at] ^= 0x01;
        st = copy_all(c, db.b, hd, db.n);
        if (st != RESHARD_OK)
            FAIL("tamper: %s", reshard_last_error());
    }
    st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
    if (st == RESHARD_OK ||
        (j->rank == tamper &&
         (st != RESHARD_ERR_VERIFY || !strstr(reshard_last_error(), "differs after apply"))))
        FAIL("changed destination: %s: %s, want VERIFY on every rank", reshard_status_string(st),
             reshard_last_error());
    st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
    if (st != RESHARD_OK)
        FAIL("the refit after VERIFY: %s: %s", reshard_status_string(st), reshard_last_error());
    if (!trainer) {
        uint64_t verified = 0;
        st = copy_all(c, hd, db.b, db.n);
        if (st == RESHARD_OK)
            st = reshard_verify_pattern_version(refit.infer, j->rank, hd, db.n, pv, f, &verified);
        if (st != RESHARD_OK || verified != layout_rank_bytes(refit.infer, refit.tensors, j->rank))
            FAIL("verify after VERIFY: %s", reshard_last_error());
    }
    /* A failed kernel launch on rank 0's stream (FAIL_LAUNCH): TRANSPORT on every rank well within
     * the timeout (the failing rank posts the rest of its schedule, its lost chunk announced
     * dense, and every rank ends at the outcome agreement), not a timeout of its peers; rank
     * 0 names the launch. (A transport error ends the comm: nothing runs on it after.) */
    if (j->rank == 0)
        fake_cuda_fail_launch(stream, FAIL_LAUNCH);
    const double t0 = rs_now_s();
    st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
    const double dt = rs_now_s() - t0;
    if (st != RESHARD_ERR_TRANSPORT || dt > p.timeout_s / 2)
        FAIL("launch %d of rank 0 failed: %s after %.1f s (timeout %.0f s): %s", FAIL_LAUNCH,
             reshard_status_string(st), dt, p.timeout_s, reshard_last_error());
    if (j->rank == 0 && !strstr(reshard_last_error(), "fake CUDA error"))
        FAIL("launch %d of rank 0 failed: rank 0 does not say which: %s", FAIL_LAUNCH,
             reshard_last_error());
    j->ok = 1;
out:
    free_twins(hs, sb.n);
    free_twins(hd, db.n);
    free_bufs(c, &sb);
    free_bufs(c, &db);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&refit);
    reshard_model_destroy(m);
    reshard_comm_destroy(c);
    if (stream)
        cudaStreamDestroy(stream);
    return NULL;
}

static int run(const scenario_t *sc)
{
    int bad = run_fake_ranks(sc->name, sc, sc->nranks, rank_main);
    if (!bad)
        printf("ok   %s (%d ranks, %d refits)\n", sc->name, sc->nranks, NREFITS);
    return bad;
}

int main(void)
{
    const scenario_t scenarios[] = {
        {"delta tp2 -> tp2", "tp=2", "tp=2", 4, 1, NULL, 0},
        {"delta tp2 -> tp1 x2 (forwards in a domain)", "tp=2", "tp=1,dp=2", 4, 2, NULL, 0},
        {"delta gpt-oss tp2 -> tp1 x2 without EP (w2_bias zero-filled on rank 3)", "tp=2",
         "tp=1,dp=2", 4, 1, tiny_gpt_oss, 0},
        {"delta tp1 -> tp1 x3, small staging (many rounds of three chunks)", "tp=1", "tp=1,dp=3", 4,
         1, NULL, 96 << 10},
        {"delta odd widths tp2 -> tp1 x2 (padded pieces)", "tp=2", "tp=1,dp=2", 4, 1, tiny_odd, 0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        bad |= run(&scenarios[i]);
    return bad;
}
