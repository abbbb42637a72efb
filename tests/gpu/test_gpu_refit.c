/*
 * One-rank refits through the NCCL transport on one GPU (exit 77 = skipped without a CUDA
 * device).
 *
 *  1. Transport rounds: a box is packed chunk by chunk into device staging, sent to this
 *     rank itself with ncclSend/ncclRecv in alternating slots (two rounds in flight, as
 *     the executor does), unpacked into a transposed fragment, and compared with the CPU.
 *  2. reshard_plan_execute on real model layouts (Megatron tp=1 -> vLLM tp=1 on the same
 *     rank: fused QKV regrouped, gate/up fused, experts restacked, FP8 scales) with device
 *     buffers, twice; every destination element and every padding byte verified.
 *  3. The outcome agreement: a local error is returned by finish, a too-small buffer is
 *     rejected before anything moves, and the endpoint keeps working afterwards.
 *
 * A one-rank plan moves everything with local copies (the executor never sends to itself),
 * so part 1 is what exercises ncclSend/ncclRecv here; multi-rank refits over NCCL need
 * one GPU per rank (reshard run --transport nccl under mpirun).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/pack.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_nccl.h"
#include "device_bufs.h"
#include "transport/nccl/nccl_internal.h"
#include "util/timeout.h"

#define SKIP 77

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        reshard_status_t st_ = (expr);                                                             \
        CHECK(st_ == RESHARD_OK, "%s -> %s: %s", #expr, reshard_status_string(st_),                \
              reshard_last_error());                                                               \
    } while (0)

/* ---- 1. transport rounds ------------------------------------------------------------- */

/* Move an R x C box of @p es-byte elements from a row-major fragment with padded rows to a
 * column-major fragment, in chunks of @p chunk bytes through self send/recv. */
static void transport_rounds(reshard_comm_t *c, int64_t R, int64_t C, uint32_t es, uint64_t chunk)
{
    const reshard_transport_ops_t *ops = c->ops;
    reshard_box_t box = {2, {0, 0}, {R, C}};
    reshard_fragment_t sf = {0, 0, 0, box, 5, {C + 3, 1}}; /* row-major, padded rows */
    reshard_fragment_t df = {0, 0, 0, box, 0, {1, R}};     /* column-major */
    const size_t sbytes = (size_t)((R - 1) * (C + 3) + C + 5) * es, dbytes = (size_t)(R * C) * es;
    const int64_t numel = R * C, per = (int64_t)(chunk / es);
    const int64_t rounds = (numel + per - 1) / per;
    uint8_t *hs = malloc(sbytes), *hd = malloc(dbytes), *want = malloc(dbytes);
    void *ds = NULL, *dd = NULL;
    uint8_t *staging = NULL;
    CHECK(hs && hd && want, "malloc");
    for (size_t i = 0; i < sbytes; i++)
        hs[i] = (uint8_t)(i * 131 + 7);
    memset(want, 0xA5, dbytes);
    rs_copy_box_cpu(want, &df, hs, &sf, &box, es);
    CHECK_OK(reshard_nccl_alloc(c, sbytes, &ds));
    CHECK_OK(reshard_nccl_alloc(c, dbytes, &dd));
    CHECK_OK(reshard_nccl_memcpy(c, ds, hs, sbytes));
    CHECK_OK(reshard_nccl_memset(c, dd, 0xA5, dbytes));
    /* staging: per slot a send region and a receive region of `chunk` bytes */
    CHECK_OK(ops->alloc_staging(c, 4 * chunk, (void **)&staging));

    reshard_status_t st = RESHARD_OK;
    for (int64_t k = 0; st == RESHARD_OK && k <= rounds; k++) {
        if (k < rounds) { /* post round k */
            const int slot = (int)(k & 1);
            uint8_t *send = staging + (size_t)slot * 2 * chunk, *recv = send + chunk;
            const int64_t first = k * per, count = numel - first < per ? numel - first : per;
            reshard_span_t span = {&sf, &box, first, count, es};
            st = ops->round_begin(c, slot);
            if (st == RESHARD_OK)
                st = ops->post_recv(c, slot, 0, recv, (uint64_t)count * es);
            if (st == RESHARD_OK)
                st = ops->pack(c, send, ds, &span);
            if (st == RESHARD_OK)
                st = ops->post_send(c, slot, 0, send, (uint64_t)count * es);
            if (st == RESHARD_OK)
                st = ops->round_end(c, slot);
        }
        if (st == RESHARD_OK && k >= 1) { /* wait for round k-1 and unpack it */
            const int64_t j = k - 1;
            const int slot = (int)(j & 1);
            uint8_t *recv = staging + (size_t)slot * 2 * chunk + chunk;
            const int64_t first = j * per, count = numel - first < per ? numel - first : per;
            reshard_span_t span = {&df, &box, first, count, es};
            st = ops->round_wait(c, slot, 30.0);
            if (st == RESHARD_OK)
                st = ops->unpack(c, dd, recv, &span);
        }
    }
    st = ops->finish(c, st, NULL, NULL, 30.0);
    CHECK(st == RESHARD_OK, "rounds: %s: %s", reshard_status_string(st), reshard_last_error());
    CHECK_OK(reshard_nccl_memcpy(c, hd, dd, dbytes));
    for (size_t i = 0; i < dbytes; i++)
        CHECK(hd[i] == want[i],
              "rounds %" PRId64 "x%" PRId64 " es %u chunk %" PRIu64 ": byte %zu is %02x, want %02x",
              R, C, es, chunk, i, hd[i], want[i]);
    printf("ok   transport rounds: %" PRId64 "x%" PRId64 " x %u B in %" PRId64
           " rounds of <= %" PRIu64 " B\n",
           R, C, es, rounds, chunk);
out:
    if (staging)
        ops->free_staging(c, staging);
    reshard_nccl_free(c, ds);
    reshard_nccl_free(c, dd);
    free(hs);
    free(hd);
    free(want);
}

/* ---- 2. model refits ----------------------------------------------------------------- */

static reshard_status_t set_sentinel(reshard_comm_t *c, const bufs_t *b)
{
    for (int32_t i = 0; i < b->n; i++) {
        reshard_status_t st =
            reshard_nccl_memset(c, b->b[i].ptr, RESHARD_SENTINEL_BYTE, b->b[i].bytes);
        if (st != RESHARD_OK)
            return st;
    }
    return RESHARD_OK;
}

/* Two executions (the second reuses the endpoint's cached staging); @p verify_first: also
 * verify the first (host-side verification costs ~10 s per GB; the second is always). */
static void model_refit(reshard_comm_t *c, const char *name, reshard_dtype_t dtype, int32_t layers,
                        uint64_t staging, int verify_first)
{
    reshard_model_t *m = NULL;
    reshard_tensors_t *T = NULL;
    reshard_layout_t *src = NULL, *dst = NULL;
    reshard_model_buffers_t *sbt = NULL, *dbt = NULL;
    reshard_plan_t *plan = NULL;
    bufs_t sb = {0, NULL}, db = {0, NULL};
    reshard_model_options_t o;
    memset(&o, 0, sizeof o);
    o.dtype = dtype;
    o.layers = layers;
    const reshard_train_spec_t ts = {.tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 1};
    const reshard_infer_spec_t is = {.tp = 1, .dp = 1, .ep = 0};
    CHECK_OK(reshard_model_load(name, &o, &m));
    CHECK_OK(reshard_model_tensors(m, &T));
    CHECK_OK(reshard_model_train_layout(m, T, &ts, 0, &src, &sbt));
    CHECK_OK(reshard_model_infer_layout(m, T, &is, 0, &dst, &dbt));
    reshard_plan_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT;
    p.world_size = 1;
    p.my_rank = 0;
    p.staging_bytes = staging;
    p.timeout_s = 60.0;
    CHECK_OK(reshard_plan_create(src, dst, &p, &plan));
    CHECK_OK(alloc_bufs(c, sbt, 0, &sb));
    CHECK_OK(alloc_bufs(c, dbt, 0, &db));
    CHECK_OK(reshard_nccl_fill_pattern(c, src, 0, sb.b, sb.n));
    const uint64_t want = layout_rank_bytes(dst, T, RESHARD_ALL_RANKS);
    for (int it = 0; it < 2; it++) {
        CHECK_OK(set_sentinel(c, &db));
        reshard_exec_stats_t es;
        const double t0 = rs_now_s();
        CHECK_OK(reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, &es));
        const double secs = rs_now_s() - t0;
        uint64_t verified = 0;
        if (it == 0 && !verify_first) {
            printf("ok   refit %s (%s, %d layers) iteration 0: %.3f s, not verified\n", name,
                   reshard_dtype_name(dtype), (int)layers, secs);
            continue;
        }
        CHECK_OK(reshard_nccl_verify_pattern(c, dst, 0, db.b, db.n, &verified));
        CHECK(verified == want, "%s: verified %" PRIu64 " bytes, the layout has %" PRIu64, name,
              verified, want);
        CHECK(es.bytes_local == want && es.bytes_recv == 0,
              "%s: stats local %" PRIu64 " recv %" PRIu64 ", want local %" PRIu64, name,
              es.bytes_local, es.bytes_recv, want);
        printf("ok   refit %s (%s, %d layers) iteration %d: %" PRIu64
               " bytes verified, %.3f s (%.1f GB/s incl. agreement)\n",
               name, reshard_dtype_name(dtype), (int)layers, it, verified, secs,
               (double)want / secs / 1e9);
    }
out:
    free_bufs(c, &sb);
    free_bufs(c, &db);
    reshard_plan_destroy(plan);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_model_buffers_destroy(sbt);
    reshard_model_buffers_destroy(dbt);
    reshard_tensors_destroy(T);
    reshard_model_destroy(m);
}

/* ---- 3. outcome agreement ------------------------------------------------------------ */

/* A hand-made one-rank pair: a [96, 64] bf16 tensor stored transposed in one source
 * buffer, and as two row blocks with padded rows in two destination buffers. */
static void agreement(reshard_comm_t *c)
{
    reshard_tensors_t *T = NULL;
    reshard_layout_t *src = NULL, *dst = NULL;
    reshard_plan_t *plan = NULL;
    reshard_buffer_t sb = {0}, db[2] = {{0}, {0}};
    const int64_t shape[2] = {96, 64};
    int32_t t = -1;
    CHECK_OK(reshard_tensors_create(&T));
    CHECK_OK(reshard_tensors_add(T, "w", RESHARD_BF16, 2, shape, 0, NULL, &t));
    CHECK_OK(reshard_layout_create(T, &src));
    CHECK_OK(reshard_layout_create(T, &dst));
    reshard_fragment_t f = {t, 0, 0, {2, {0, 0}, {96, 64}}, 3, {1, 97}};
    CHECK_OK(reshard_layout_add_fragment(src, &f));
    reshard_fragment_t d0 = {t, 0, 0, {2, {0, 0}, {40, 64}}, 0, {70, 1}};
    reshard_fragment_t d1 = {t, 0, 1, {2, {40, 0}, {56, 64}}, 8, {64, 1}};
    CHECK_OK(reshard_layout_add_fragment(dst, &d0));
    CHECK_OK(reshard_layout_add_fragment(dst, &d1));
    reshard_plan_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = RESHARD_PLAN_PARAM_TIMEOUT;
    p.world_size = 1;
    p.my_rank = 0;
    p.timeout_s = 30.0;
    CHECK_OK(reshard_plan_create(src, dst, &p, &plan));
    sb.bytes = reshard_layout_buffer_bytes(src, 0, 0);
    CHECK_OK(reshard_nccl_alloc(c, sb.bytes, &sb.ptr));
    for (int i = 0; i < 2; i++) {
        db[i].bytes = reshard_layout_buffer_bytes(dst, 0, i);
        CHECK_OK(reshard_nccl_alloc(c, db[i].bytes, &db[i].ptr));
        CHECK_OK(reshard_nccl_memset(c, db[i].ptr, RESHARD_SENTINEL_BYTE, db[i].bytes));
    }
    CHECK_OK(reshard_nccl_fill_pattern(c, src, 0, &sb, 1));

    /* finish hands back this rank's own error, and the communicator stays usable */
    reshard_status_t st = c->ops->finish(c, RESHARD_ERR_BUFFER, NULL, NULL, 30.0);
    CHECK(st == RESHARD_ERR_BUFFER, "finish(BUFFER) -> %s", reshard_status_string(st));

    /* a destination buffer one byte short: rejected before anything moves */
    reshard_buffer_t short_db[2] = {db[0], db[1]};
    short_db[1].bytes -= 1;
    st = reshard_plan_execute(plan, c, &sb, 1, short_db, 2, NULL);
    CHECK(st == RESHARD_ERR_BUFFER, "short buffer -> %s: %s", reshard_status_string(st),
          reshard_last_error());
    uint64_t verified = 0;
    st = reshard_nccl_verify_pattern(c, dst, 0, db, 2, &verified);
    CHECK(st == RESHARD_ERR_VERIFY,
          "after a rejected execute the destination must be untouched "
          "(verify -> %s)",
          reshard_status_string(st));

    /* then a good execute on the same endpoint */
    CHECK_OK(reshard_plan_execute(plan, c, &sb, 1, db, 2, NULL));
    CHECK_OK(reshard_nccl_verify_pattern(c, dst, 0, db, 2, &verified));
    CHECK(verified == 96 * 64 * 2, "verified %" PRIu64, verified);
    printf("ok   agreement: local error returned, short buffer rejected, endpoint reusable\n");
out:
    reshard_nccl_free(c, sb.ptr);
    reshard_nccl_free(c, db[0].ptr);
    reshard_nccl_free(c, db[1].ptr);
    reshard_plan_destroy(plan);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(T);
}

int main(int argc, char **argv)
{
    /* --small: skip the 2.5 GB model (CPU runs against the fake CUDA/NCCL) */
    const int small = argc > 1 && strcmp(argv[1], "--small") == 0;
    int ndev = 0;
    if (reshard_nccl_device_count(&ndev) != RESHARD_OK) {
        printf("SKIPPED: %s\n", reshard_last_error());
        return SKIP;
    }
    char id[128];
    reshard_comm_t *c = NULL;
    if (reshard_nccl_unique_id_size() != sizeof id ||
        reshard_nccl_get_unique_id(id) != RESHARD_OK ||
        reshard_comm_create_nccl_from_id(id, 0, 1, 0, NULL, &c) != RESHARD_OK) {
        fprintf(stderr, "FAIL: NCCL endpoint: %s\n", reshard_last_error());
        return 1;
    }
    printf("NCCL endpoint: rank %d of %d on device 0 of %d\n", (int)reshard_comm_rank(c),
           (int)reshard_comm_size(c), ndev);

    transport_rounds(c, 1, 1, 4, 8);                  /* one element */
    transport_rounds(c, 37, 53, 2, 64);               /* many tiny rounds */
    transport_rounds(c, 300, 1000, 2, 64 << 10);      /* bf16, 64 KiB chunks */
    transport_rounds(c, 1024, 4096, 4, 4 << 20);      /* fp32, 16 MiB in 4 MiB chunks */
    transport_rounds(c, 129, 3001, 8, (1 << 20) + 8); /* fp64, odd chunk */

    /* real configs, first layers only (0.4 GB, 0.2 GB, 2.5 GB per side) */
    model_refit(c, "qwen3-0.6b", RESHARD_BF16, 2, 64 << 20, 1);
    model_refit(c, "qwen3-0.6b", RESHARD_FP8_E4M3, 2, 64 << 20, 1); /* e4m3 + fp32 scales */
    if (!small)
        model_refit(c, "qwen3-30b-a3b", RESHARD_BF16, 1, 256 << 20, 0); /* stacked experts */
    agreement(c);

    reshard_comm_destroy(c);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
