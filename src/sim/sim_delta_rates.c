/* The CPU rates of a delta round measured on the machine that predicts it
 * (reshard_sim_delta_measure): memcpy, the codec's encode and apply, and the verification
 * hash, each over chunks of memory far larger than the caches, as a refit's weights are. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/delta.h"
#include "exec/delta_codec.h"
#include "reshard/reshard_sim.h"
#include "util/error.h"

/* Bytes walked per measurement: larger than any last-level cache, so every pass reads
 * DRAM as a refit's multi-GB weights do. */
#define REGION_BYTES (64u << 20)
#define REPEATS 3 /* the fastest of three passes is the rate (others share the cores) */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* xorshift64*: a fixed, portable sequence (the prediction must not vary with libc). */
static uint64_t next_random(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* cur = prev with each @p word-byte word changed with probability @p p (scattered, as an
 * optimizer step changes them). */
static void make_versions(uint8_t *prev, uint8_t *cur, uint64_t bytes, uint32_t word, double p)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (uint64_t i = 0; i < bytes; i += 8) {
        uint64_t v = next_random(&s);
        memcpy(prev + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
    memcpy(cur, prev, bytes);
    const uint64_t threshold = p >= 1 ? UINT64_MAX : (uint64_t)(p * 18446744073709551616.0);
    for (uint64_t w = 0; w + word <= bytes; w += word)
        if (p > 0 && next_random(&s) <= threshold)
            cur[w] ^= 0x5A; /* the low byte: a changed word */
}

typedef enum { M_COPY, M_ENCODE, M_APPLY, M_HASH } measure_t;

/* One pass of @p what over the region in @p chunk-byte chunks; returns seconds. */
static double pass(measure_t what, uint8_t *cur, uint8_t *prev, uint8_t *out, uint8_t *enc,
                   uint64_t *enc_off, uint64_t bytes, uint64_t chunk, uint32_t word)
{
    volatile uint64_t sink = 0;
    double t0 = now_s();
    for (uint64_t off = 0, k = 0; off < bytes; off += chunk, k++) {
        uint64_t len = bytes - off < chunk ? bytes - off : chunk;
        switch (what) {
        case M_COPY:
            memcpy(out + off, cur + off, len);
            break;
        case M_ENCODE: /* the snapshot is updated in place: re-encode against a copy */
            enc_off[k + 1] = enc_off[k] + rs_delta_encode(cur + off, prev + off, len, word,
                                                          enc + enc_off[k], NULL);
            break;
        case M_APPLY: {
            rs_delta_header_t h;
            if (rs_delta_header(enc + enc_off[k], len, &h, "rate") == RESHARD_OK)
                rs_delta_apply(enc + enc_off[k], &h, out + off, len, "rate");
            break;
        }
        case M_HASH:
            sink += rs_delta_hash(cur + off, len);
            break;
        }
    }
    (void)sink;
    return now_s() - t0;
}

/* The start signal: threads wait for it until the barrier knows how many started. */
struct go {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool set;
};

/* One rank's measurement: its own buffers, every pass between barriers so that all
 * ranks run the same operation at once, as the ranks of a round do. */
typedef struct {
    double change_fraction;
    uint32_t word;
    uint64_t chunk;
    pthread_barrier_t *barrier;
    struct go *go;
    double best[4]; /* seconds of the fastest pass of each measure_t */
    uint64_t bytes;
    reshard_status_t st;
} rank_job_t;

static void *measure_rank(void *arg)
{
    rank_job_t *j = arg;
    pthread_mutex_lock(&j->go->mu);
    while (!j->go->set)
        pthread_cond_wait(&j->go->cv, &j->go->mu);
    pthread_mutex_unlock(&j->go->mu);
    if (!j->barrier)
        return NULL;
    const uint64_t bytes = REGION_BYTES - REGION_BYTES % j->chunk, nchunks = bytes / j->chunk + 1;
    uint8_t *prev = malloc(bytes), *snap = malloc(bytes), *cur = malloc(bytes),
            *dst = malloc(bytes), *enc = malloc(bytes + nchunks * RS_DELTA_HEADER_BYTES);
    uint64_t *enc_off = calloc(nchunks + 1, sizeof *enc_off);
    const bool ok = prev && snap && cur && dst && enc && enc_off;
    j->bytes = bytes;
    j->st = ok ? RESHARD_OK : RESHARD_ERR_NOMEM;
    if (ok)
        make_versions(prev, cur, bytes, j->word, j->change_fraction);
    for (int r = 0; r < REPEATS; r++)
        for (measure_t m = M_COPY; m <= M_HASH; m++) {
            if (ok && m == M_ENCODE)
                memcpy(snap, prev, bytes);
            if (ok && m == M_APPLY)
                memcpy(dst, prev, bytes);
            pthread_barrier_wait(j->barrier); /* every rank waits, allocated or not */
            if (!ok)
                continue;
            double t = pass(m, cur, snap, dst, enc, enc_off, bytes, j->chunk, j->word);
            if (t > 0 && (j->best[m] == 0 || t < j->best[m]))
                j->best[m] = t;
        }
    if (ok && memcmp(dst, cur, bytes) != 0) /* the codec's own round trip */
        j->st = RESHARD_ERR_VERIFY;
    free(prev);
    free(snap);
    free(cur);
    free(dst);
    free(enc);
    free(enc_off);
    return NULL;
}

reshard_status_t reshard_sim_delta_measure(double change_fraction, uint32_t word, uint64_t chunk,
                                           int32_t ranks, reshard_sim_delta_params_t *out)
{
    rs_error_clear();
    if (!out || !(change_fraction >= 0 && change_fraction <= 1) ||
        (word != 1 && word != 2 && word != 4 && word != 8) || chunk < word || ranks < 1 ||
        ranks > RESHARD_SIM_MEASURE_MAX_RANKS)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_sim_delta_measure: a fraction in [0, 1], a word of 1, 2, 4 or "
                        "8 bytes, a chunk of at least one word, 1 to %d ranks and an output",
                        RESHARD_SIM_MEASURE_MAX_RANKS);
    pthread_barrier_t barrier;
    struct go go = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    rank_job_t jobs[RESHARD_SIM_MEASURE_MAX_RANKS];
    pthread_t threads[RESHARD_SIM_MEASURE_MAX_RANKS];
    for (int32_t i = 0; i < ranks; i++)
        jobs[i] = (rank_job_t){
            change_fraction, word, chunk - chunk % word, &barrier, &go, {0, 0, 0, 0}, 0,
            RESHARD_OK};
    int32_t started = 0; /* the caller's thread is the last rank */
    while (started < ranks - 1 &&
           pthread_create(&threads[started], NULL, measure_rank, &jobs[started]) == 0)
        started++;
    reshard_status_t st = RESHARD_OK;
    if (started < ranks - 1)
        st = rs_error(RESHARD_ERR_NOMEM, "reshard_sim_delta_measure: %d threads", ranks);
    else if (pthread_barrier_init(&barrier, NULL, (unsigned)ranks))
        st = rs_error(RESHARD_ERR_NOMEM, "reshard_sim_delta_measure: a barrier of %d", ranks);
    pthread_mutex_lock(&go.mu);
    go.set = true;
    if (st != RESHARD_OK) /* the started threads measure nothing: they see no barrier */
        for (int32_t i = 0; i < started; i++)
            jobs[i].barrier = NULL;
    pthread_cond_broadcast(&go.cv);
    pthread_mutex_unlock(&go.mu);
    if (st == RESHARD_OK)
        measure_rank(&jobs[ranks - 1]);
    for (int32_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    if (st == RESHARD_OK)
        pthread_barrier_destroy(&barrier);
    /* the slowest rank's fastest pass: the busiest rank sets a round's pace */
    double worst[4] = {0, 0, 0, 0};
    for (int32_t i = 0; i < ranks && st == RESHARD_OK; i++) {
        if (jobs[i].st == RESHARD_ERR_NOMEM)
            st = rs_error(RESHARD_ERR_NOMEM, "reshard_sim_delta_measure: %llu bytes of buffers",
                          (unsigned long long)(5 * jobs[i].bytes));
        else if (jobs[i].st != RESHARD_OK)
            st = rs_error(RESHARD_ERR_VERIFY,
                          "reshard_sim_delta_measure: the applied region differs from the "
                          "encoded one");
        for (int m = 0; m < 4; m++)
            worst[m] = jobs[i].best[m] > worst[m] ? jobs[i].best[m] : worst[m];
    }
    if (st != RESHARD_OK)
        return st;
    const double bytes = (double)jobs[0].bytes;
    memset(out, 0, sizeof *out);
    out->change_fraction = change_fraction;
    out->word = word;
    out->copy_bytes_per_s = bytes / worst[M_COPY];
    out->encode_bytes_per_s = bytes / worst[M_ENCODE];
    out->apply_bytes_per_s = bytes / worst[M_APPLY];
    out->hash_bytes_per_s = bytes / worst[M_HASH];
    return RESHARD_OK;
}
