/*
 * Delta refit (docs/delta.md) over the in-process transport, one thread per rank. The
 * oracle is the test's own copy of the whole tensor at every step: after each execution
 * every destination element must equal the new bytes of the step, every byte.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "exec/comm.h"
#include "exec/delta_codec.h"
#include "exec/writers.h"
#include "reshard/reshard.h"
#include "reshard/reshard_delta.h"
#include "reshard/reshard_elastic.h"

enum { ROWS = 256, COLS = 64, NSTEPS = 5, WORLD = 4 };

/* Deterministic generator (splitmix64). */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- the codec on its own ---------------------------------------------------------- */

static void codec_case(uint64_t len, uint32_t word, double frac, uint64_t seed)
{
    uint8_t *prev = malloc(len), *cur = malloc(len), *out = malloc(len + RS_DELTA_HEADER_BYTES);
    uint8_t *chunk = malloc(len);
    uint64_t s = seed;
    for (uint64_t i = 0; i < len; i++)
        prev[i] = (uint8_t)mix(&s);
    memcpy(cur, prev, len);
    uint64_t nchanged = 0;
    for (uint64_t w = 0; w < len / word; w++)
        if ((double)(mix(&s) % 1000000) < frac * 1e6) {
            cur[w * word] ^= 0x5a; /* a word whose bits change */
            nchanged++;
        }
    uint64_t changed = 0;
    uint8_t *snap = malloc(len);
    memcpy(snap, prev, len);
    uint64_t n = rs_delta_encode(cur, snap, len, word, out, &changed);
    assert_memory_equal(snap, cur, len); /* the snapshot now holds the new bytes */
    free(snap);
    assert_int_equal(changed, nchanged);
    assert_true(n <= len + RS_DELTA_HEADER_BYTES); /* never more than dense + header */
    /* at most the bitmap's size: one bit per word plus the changed words */
    assert_true(n <= RS_DELTA_HEADER_BYTES + (len / word + 7) / 8 + nchanged * word ||
                n == RS_DELTA_HEADER_BYTES + len);
    rs_delta_header_t h;
    assert_int_equal(rs_delta_header(out, len, &h, "test"), RESHARD_OK);
    memcpy(chunk, prev, len);
    assert_int_equal(rs_delta_apply(out, &h, chunk, len, "test"), RESHARD_OK);
    assert_memory_equal(chunk, cur, len);
    free(prev);
    free(cur);
    free(out);
    free(chunk);
}

static void test_codec_roundtrip(void **state)
{
    (void)state;
    const double fracs[] = {0.0, 1e-4, 0.01, 0.1, 0.5, 1.0};
    for (int f = 0; f < 6; f++) {
        codec_case(65536, 2, fracs[f], 1 + f);
        codec_case(4096, 4, fracs[f], 11 + f);
        codec_case(1000, 8, fracs[f], 21 + f);
        codec_case(777, 1, fracs[f], 31 + f);
    }
}

/* The encoding as docs/delta-reference.md "Chunk format" writes it, plainly, word by word: the
 * oracle for the encoder's vectorized passes. Returns the encoded size. */
static uint64_t ref_encode(const uint8_t *cur, const uint8_t *prev, uint64_t len, uint32_t w,
                           uint8_t *out)
{
    uint64_t n = len / w, c = 0, runs = 0, gaps = 0, last = 0;
    bool *ch = calloc(n ? n : 1, sizeof *ch);
    for (uint64_t i = 0; i < n; i++) {
        ch[i] = memcmp(cur + i * w, prev + i * w, w) != 0;
        if (!ch[i])
            continue;
        c++;
        runs += i == 0 || !ch[i - 1];
        uint64_t d = i - last, vb = 1;
        while (d >= 0x80)
            d >>= 7, vb++;
        gaps += vb + w;
        last = i + 1;
    }
    uint64_t size[4] = {len, (n + 7) / 8 + c * w, 8 * runs + c * w, gaps};
    uint32_t kind = 0;
    for (uint32_t k = 1; k < 4; k++)
        if (size[k] < size[kind])
            kind = k;
    memset(out, 0, RS_DELTA_HEADER_BYTES);
    out[0] = (uint8_t)kind;
    out[1] = (uint8_t)w;
    uint32_t count = kind == 2 ? (uint32_t)runs : kind == 3 ? (uint32_t)c : 0;
    for (int b = 0; b < 4; b++)
        out[4 + b] = (uint8_t)(count >> (8 * b));
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t)(size[kind] >> (8 * b));
    uint8_t *o = out + RS_DELTA_HEADER_BYTES;
    if (kind == 0)
        memcpy(o, cur, len);
    if (kind == 1) {
        memset(o, 0, (n + 7) / 8);
        uint8_t *v = o + (n + 7) / 8;
        for (uint64_t i = 0; i < n; i++)
            if (ch[i]) {
                o[i / 8] |= (uint8_t)(1u << (i % 8));
                memcpy(v, cur + i * w, w), v += w;
            }
    }
    if (kind == 2) {
        uint8_t *v = o + 8 * runs;
        for (uint64_t i = 0; i < n; i++) {
            if (!ch[i] || (i > 0 && ch[i - 1]))
                continue;
            uint64_t e = i;
            while (e < n && ch[e])
                e++;
            uint32_t f[2] = {(uint32_t)i, (uint32_t)(e - i)};
            for (int b = 0; b < 8; b++)
                *o++ = (uint8_t)(f[b / 4] >> (8 * (b % 4)));
            memcpy(v, cur + i * w, (e - i) * w), v += (e - i) * w;
        }
    }
    if (kind == 3) {
        last = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (!ch[i])
                continue;
            uint64_t d = i - last;
            for (; d >= 0x80; d >>= 7)
                *o++ = (uint8_t)(d | 0x80);
            *o++ = (uint8_t)d;
            memcpy(o, cur + i * w, w), o += w;
            last = i + 1;
        }
    }
    free(ch);
    return RS_DELTA_HEADER_BYTES + size[kind];
}

/* The encoder's bytes equal ref_encode's for random chunks: every word size, lengths that
 * are not whole 64-word blocks, changes scattered, in runs, in a burst (a quarter of the chunk)
 * amid scattered ones, and a first block all changed before scattered ones (the scan starts
 * writing the dense body or the gaps by the first block, and stops when the chunk turns out
 * otherwise, then writes the bitmap kind's values from there), and 64 words changed in the middle
 * amid scattered ones (gaps records of a block past 21 and 42 changed words); at the first and
 * last word. Apply
 * gives the new bytes back. */
static void bytes_match_the_format(void)
{
    const uint32_t words[] = {1, 2, 4, 8};
    const uint64_t lens[] = {8, 120, 1024, 1032, 4104, 65536};
    /* 0.85: with 1-byte words the bitmap kind, whose values the scan stops writing before they
     * reach the change bitmap at the body's end (the rest gathered afterwards) */
    const double fracs[] = {0.0, 0.002, 0.02, 0.15, 0.6, 0.85, 1.0};
    uint64_t s = 99;
    for (int wi = 0; wi < 4; wi++)
        for (int li = 0; li < 6; li++)
            for (int fi = 0; fi < 7; fi++)
                for (int shape = 0; shape < 5; shape++) {
                    uint32_t w = words[wi];
                    uint64_t len = lens[li] / w * w, n = len / w;
                    uint8_t *prev = malloc(len), *cur = malloc(len), *snap = malloc(len);
                    uint8_t *got = malloc(len + RS_DELTA_HEADER_BYTES);
                    uint8_t *want = malloc(len + RS_DELTA_HEADER_BYTES);
                    for (uint64_t i = 0; i < len; i++)
                        prev[i] = (uint8_t)mix(&s);
                    memcpy(cur, prev, len);
                    for (uint64_t i = 0; i < n; i++) {
                        bool hit = (double)(mix(&s) % 1000000) < fracs[fi] * 1e6 ||
                                   (shape == 2 && i >= n / 4 && i < n / 2) ||
                                   (shape == 3 && i < 64) ||
                                   (shape == 4 && i >= n / 2 && i < n / 2 + 64);
                        uint64_t span = shape == 1 ? 1 + mix(&s) % 9 : 1; /* runs of words */
                        for (uint64_t k = i; hit && k < i + span && k < n; k++)
                            cur[k * w + mix(&s) % w] ^= (uint8_t)(1 + mix(&s) % 255);
                        i += shape == 1 && hit ? span : 0;
                    }
                    if (fi == 2) { /* the first and the last word */
                        cur[0] ^= 1;
                        cur[len - 1] ^= 0x80;
                    }
                    memcpy(snap, prev, len);
                    uint64_t a = rs_delta_encode(cur, snap, len, w, got, NULL);
                    uint64_t b = ref_encode(cur, prev, len, w, want);
                    assert_int_equal(a, b);
                    assert_memory_equal(got, want, a);
                    assert_memory_equal(snap, cur, len);
                    /* the sender's form: a dense body is left in the snapshot, not copied */
                    bool kept = true;
                    memcpy(snap, prev, len);
                    memset(got, 0xa5, len + RS_DELTA_HEADER_BYTES); /* no stale bytes */
                    assert_int_equal(rs_delta_encode_keep(cur, snap, len, w, got, NULL, &kept), b);
                    assert_int_equal(kept, want[0] == RS_DELTA_DENSE);
                    assert_memory_equal(got, want, kept ? RS_DELTA_HEADER_BYTES : b);
                    if (kept) /* the body is the snapshot's bytes */
                        assert_memory_equal(snap, want + RS_DELTA_HEADER_BYTES, len);
                    assert_memory_equal(snap, cur, len);
                    rs_delta_header_t h; /* (want: the bytes both forms send) */
                    assert_int_equal(rs_delta_header(want, len, &h, "test"), RESHARD_OK);
                    assert_int_equal(rs_delta_apply(want, &h, prev, len, "test"), RESHARD_OK);
                    assert_memory_equal(prev, cur, len);
                    free(prev), free(cur), free(snap), free(got), free(want);
                }
}

/* A bitmap body whose bitmap marks more words than it carries, fewer, or a word past the
 * chunk is refused, naming the chunk. */
static void bitmap_errors(void)
{
    uint8_t cur[4096] = {0}, prev[4096] = {0}, out[4096 + RS_DELTA_HEADER_BYTES];
    for (int i = 0; i < 2048; i += 2) /* every other bf16 word: the bitmap kind */
        cur[2 * i] = 7;
    assert_int_equal(rs_delta_encode(cur, prev, 4096, 2, out, NULL),
                     RS_DELTA_HEADER_BYTES + 256 + 1024 * 2);
    rs_delta_header_t h;
    assert_int_equal(rs_delta_header(out, 4096, &h, "test"), RESHARD_OK);
    uint8_t *bm = out + RS_DELTA_HEADER_BYTES;
    bm[100] |= 2; /* one mark more than values */
    assert_int_equal(rs_delta_apply(out, &h, prev, 4096, "rank 4: chunk 2"),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "rank 4: chunk 2"));
    assert_non_null(strstr(reshard_last_error(), "marks word"));
    bm[100] &= (uint8_t)~2;
    bm[100] &= (uint8_t)~1; /* one mark fewer */
    assert_int_equal(rs_delta_apply(out, &h, prev, 4096, "rank 4: chunk 2"),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "but carries"));
    /* a chunk of 2047 words (4094 bytes): a mark on word 2047, past it */
    uint8_t cur2[4094] = {0}, prev2[4094] = {0};
    for (int i = 0; i < 2046; i += 2)
        cur2[2 * i] = 7;
    assert_int_equal(rs_delta_encode(cur2, prev2, 4094, 2, out, NULL),
                     RS_DELTA_HEADER_BYTES + 256 + 1023 * 2);
    assert_int_equal(rs_delta_header(out, 4094, &h, "test"), RESHARD_OK);
    bm[255] |= 0x80;
    assert_int_equal(rs_delta_apply(out, &h, prev2, 4094, "rank 4: chunk 3"),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "marks word 2047 of 2047"));
}

/* Every implementation of the block passes this build and CPU have (rs_delta_codec_use)
 * writes the format's bytes and applies them; the fastest is restored afterwards. */
static void test_codec_bytes_match_the_format(void **state)
{
    (void)state;
    const char *paths[] = {"portable", "avx2", "avx512"};
    int ran = 0;
    for (int p = 0; p < 3; p++) {
        if (!rs_delta_codec_use(paths[p]))
            continue;
        assert_string_equal(rs_delta_codec_path(), paths[p]);
        bytes_match_the_format();
        bitmap_errors();
        ran++;
    }
    assert_true(rs_delta_codec_use(NULL));
    assert_true(ran >= 1);
    assert_false(rs_delta_codec_use("no such path"));
    print_message("delta codec paths checked: %d (fastest here: %s)\n", ran, rs_delta_codec_path());
}

/* Encode @p cur (4096 bytes, bf16 words) against an all-zero previous version. */
static uint64_t encode_vs_zero(const uint8_t *cur, uint8_t *out)
{
    uint8_t prev[4096] = {0};
    return rs_delta_encode(cur, prev, 4096, 2, out, NULL);
}

static void test_codec_kinds_by_size(void **state)
{
    (void)state;
    uint8_t cur[4096] = {0}, out[4096 + RS_DELTA_HEADER_BYTES];
    /* nothing changed: a bare runs header */
    assert_int_equal(encode_vs_zero(cur, out), RS_DELTA_HEADER_BYTES);
    assert_int_equal(out[0], RS_DELTA_RUNS);
    /* one run of 100 words: runs+values, 8 + 200 bytes */
    memset(cur + 200, 1, 200);
    assert_int_equal(encode_vs_zero(cur, out), RS_DELTA_HEADER_BYTES + 8 + 200);
    assert_int_equal(out[0], RS_DELTA_RUNS);
    /* every other word: the bitmap (256 bytes) beats 1024 runs */
    memset(cur, 0, sizeof cur);
    for (int w = 0; w < 2048; w += 2)
        cur[2 * w] = 7;
    assert_int_equal(encode_vs_zero(cur, out), RS_DELTA_HEADER_BYTES + 256 + 1024 * 2);
    assert_int_equal(out[0], RS_DELTA_BITMAP);
    /* one word of 2048 changed (word 1000): its gap as a 2-byte varint and its value */
    memset(cur, 0, sizeof cur);
    cur[2000] = 1;
    assert_int_equal(encode_vs_zero(cur, out), RS_DELTA_HEADER_BYTES + 4);
    assert_int_equal(out[0], RS_DELTA_GAPS);
    assert_int_equal(out[RS_DELTA_HEADER_BYTES], 1000 % 128 + 128);
    assert_int_equal(out[RS_DELTA_HEADER_BYTES + 1], 1000 / 128);
    rs_delta_header_t hg;
    uint8_t back[4096] = {0};
    assert_int_equal(rs_delta_header(out, 4096, &hg, "test"), RESHARD_OK);
    out[RS_DELTA_HEADER_BYTES + 1] = 0x7f; /* a gap past the chunk */
    assert_int_equal(rs_delta_apply(out, &hg, back, 4096, "rank 7: chunk 3"),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "rank 7: chunk 3"));
    /* everything changed: dense */
    memset(cur, 9, sizeof cur);
    assert_int_equal(encode_vs_zero(cur, out), RS_DELTA_HEADER_BYTES + 4096);
    assert_int_equal(out[0], RS_DELTA_DENSE);
    /* a corrupt header is refused */
    out[1] = 3;
    rs_delta_header_t h;
    assert_int_equal(rs_delta_header(out, 4096, &h, "rank 9: chunk 0"), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "rank 9: chunk 0"));
    /* a bitmap body larger than the chunk is never written (dense wins at equal size and
     * below): refused, so that a corrupt header cannot size a receive past the slot's room
     * of 16 + len bytes; the largest a bitmap may be, the chunk's size, is accepted */
    memset(out, 0, RS_DELTA_HEADER_BYTES);
    out[0] = RS_DELTA_BITMAP;
    out[1] = 2;
    uint64_t body = 256 + 2048 * 2; /* all 2048 words marked, with their values */
    memcpy(out + 8, &body, 8);
    assert_int_equal(rs_delta_header(out, 4096, &h, "rank 9: chunk 1"), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "body 4352 bytes"));
    body = 256 + 1920 * 2;
    memcpy(out + 8, &body, 8);
    assert_int_equal(rs_delta_header(out, 4096, &h, "rank 9: chunk 1"), RESHARD_OK);
}

/* ---- refits ------------------------------------------------------------------------ */

/* Destination kinds: Shard(1) over ranks 2, 3, or Replicate over them (with one domain of
 * ranks 2, 3, every byte lands on one and is forwarded to the other). */
enum { DST_SHARD1 = 0, DST_REPLICATE = 1 };

typedef struct {
    int dst_kind;
    int32_t domain_size;
    double frac[NSTEPS]; /* fraction of elements changed before each step */
    int rebind_step;     /* step at which destination buffers are new ones, or -1 */
    int fail_step;       /* step at which rank 0 fails its 7th send, or -1 */
    int checksum;        /* 0: verification as by default (no param); 1: delta_checksum = 1;
                            -1: delta_checksum = 0 (the opt-out); 2: rank 3's only */
    int tamper_step;     /* > 0: before this step rank 2 changes one element of its
                            destination that the step does not change (behind reshard's back) */
    int64_t tamper_at;   /* that element's index in rank 2's destination buffer */
    char msg[WORLD][1024];
    reshard_status_t setup[WORLD]; /* elastic_main: the first failed setup call of a rank */
    int src_repl;                  /* sources Replicate over ranks 0, 1 (else Shard(0)) */
    int32_t lost;                  /* elastic_main: the rank gone at step 2 */
    int stale_rejoin;              /* elastic_main: it comes back at step 3 with its weights
                                      and state of step 1 (adopted from its old plan) */
    int adopt_twice;               /* elastic_main: at step 2 the survivors plan the shrunk
                                      membership twice, the second plan adopting the first
                                      before the first ever executes */
    int zeros;                     /* make_steps: half the changed elements become +0.0 */
    int uses_b[NSTEPS];            /* writers_main: the steps plan B executes (else A) */
    int b_delta;                   /* writers_main: B is a delta plan too (else dense) */
    uint16_t *g[NSTEPS];           /* the whole tensor at each step */
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
    reshard_status_t st[WORLD][NSTEPS];
    reshard_delta_info_t info[WORLD][NSTEPS];
    int64_t wrong[WORLD][NSTEPS];
    uint64_t sent_network[NSTEPS];
} job_t;

typedef struct {
    job_t *j;
    int32_t rank;
} rank_arg_t;

static const reshard_transport_ops_t *inproc_ops;
static reshard_transport_ops_t failing_ops;
static __thread int sends_left = -1;

static reshard_status_t failing_send(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                     uint64_t bytes)
{
    if (sends_left == 0)
        return RESHARD_ERR_TRANSPORT;
    if (sends_left > 0)
        sends_left--;
    return inproc_ops->post_send(c, slot, peer, buf, bytes);
}

static void make_layouts(job_t *j)
{
    const int64_t shape[2] = {ROWS, COLS};
    assert_int_equal(reshard_tensors_create(&j->ts), RESHARD_OK);
    assert_int_equal(reshard_tensors_add(j->ts, "w", RESHARD_BF16, 2, shape, 0, NULL, NULL),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_create(j->ts, &j->src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(j->ts, &j->dst), RESHARD_OK);
    const int32_t sr[2] = {0, 1}, dr[2] = {2, 3};
    const reshard_mesh_t ms = {.ndim = 1, .shape = {2}, .ranks = sr};
    const reshard_mesh_t md = {.ndim = 1, .shape = {2}, .ranks = dr};
    const reshard_placement_t shard0 = {.kind = RESHARD_SHARD, .dim = 0};
    const reshard_placement_t shard1 = {.kind = RESHARD_SHARD, .dim = 1};
    const reshard_placement_t repl = {.kind = RESHARD_REPLICATE};
    assert_int_equal(
        reshard_layout_add_dtensor(j->src, 0, &ms, j->src_repl ? &repl : &shard0, 0, 0),
        RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(j->dst, 0, &md,
                                                j->dst_kind == DST_SHARD1 ? &shard1 : &repl, 0, 0),
                     RESHARD_OK);
}

/* The element (row, col) of the tensor in rank @p rank's destination buffer, or -1. */
static int64_t dst_index(const job_t *j, int32_t rank, int64_t row, int64_t col)
{
    if (j->dst_kind == DST_REPLICATE)
        return row * COLS + col;
    int64_t half = COLS / 2, mine = rank - 2;
    if (col / half != mine)
        return -1;
    return row * half + (col - mine * half);
}

static reshard_inproc_group_t *groups[NSTEPS];

static void *rank_main(void *arg)
{
    rank_arg_t *a = arg;
    job_t *j = a->j;
    int32_t me = a->rank;
    reshard_plan_params_t p = {.field_mask =
                                   RESHARD_PLAN_PARAM_DELTA | RESHARD_PLAN_PARAM_STAGING_BYTES |
                                   RESHARD_PLAN_PARAM_DOMAIN_SIZE | RESHARD_PLAN_PARAM_TIMEOUT,
                               .world_size = WORLD,
                               .my_rank = me,
                               .staging_bytes = 4096,
                               .domain_size = j->domain_size,
                               .timeout_s = 0.5,
                               .delta = 1,
                               .delta_checksum = j->checksum == 1 || (j->checksum == 2 && me == 3)};
    if (j->checksum)
        p.field_mask |= RESHARD_PLAN_PARAM_DELTA_CHECKSUM;
    reshard_plan_t *plan = NULL;
    if (reshard_plan_create(j->src, j->dst, &p, &plan) != RESHARD_OK) {
        for (int s = 0; s < NSTEPS; s++)
            j->st[me][s] = RESHARD_ERR_INVALID_ARG;
        return NULL;
    }
    uint64_t sb = me < 2 ? ROWS / 2 * COLS * 2 : 0;
    uint64_t db = me >= 2 ? reshard_layout_buffer_bytes(j->dst, me, 0) : 0;
    uint16_t *src = calloc(1, sb + 2), *dst[2] = {calloc(1, db + 2), calloc(1, db + 2)};
    int cur = 0;
    for (int s = 0; s < NSTEPS; s++) {
        /* each step on its own group and endpoints: a failed step breaks its endpoint */
        reshard_comm_t *comm = NULL;
        reshard_comm_create_inproc(groups[s], me, &comm);
        if (s == j->fail_step && me == 0) {
            comm->ops = &failing_ops;
            sends_left = 6;
        } else {
            sends_left = -1;
        }
        if (me < 2)
            memcpy(src, j->g[s] + (size_t)me * ROWS / 2 * COLS, sb);
        if (s == j->rebind_step && me >= 2) { /* new buffers holding the old bytes */
            memcpy(dst[1 - cur], dst[cur], db);
            cur = 1 - cur;
        }
        if (s == j->tamper_step && me == 2)
            dst[cur][j->tamper_at] ^= 0x0101;
        reshard_buffer_t sbuf = {.ptr = src, .bytes = sb}, dbuf = {.ptr = dst[cur], .bytes = db};
        reshard_exec_stats_t es;
        memset(&es, 0, sizeof es);
        j->st[me][s] = reshard_plan_execute(plan, comm, &sbuf, me < 2, &dbuf, me >= 2, &es);
        if (s == j->tamper_step)
            snprintf(j->msg[me], sizeof j->msg[me], "%s", reshard_last_error());
        reshard_plan_delta_info(plan, me, &j->info[me][s]);
        __atomic_fetch_add(&j->sent_network[s], es.bytes_sent_network, __ATOMIC_RELAXED);
        if (me >= 2 && j->st[me][s] == RESHARD_OK) {
            int64_t bad = 0;
            for (int64_t r = 0; r < ROWS; r++)
                for (int64_t c = 0; c < COLS; c++) {
                    int64_t at = dst_index(j, me, r, c);
                    if (at >= 0 && dst[cur][at] != j->g[s][r * COLS + c])
                        bad++;
                }
            j->wrong[me][s] = bad;
        }
        reshard_comm_destroy(comm);
    }
    free(src);
    free(dst[0]);
    free(dst[1]);
    reshard_plan_destroy(plan);
    return NULL;
}

/* The whole tensor at every step: each from the previous with frac[s] of its elements
 * changed to other bits. */
static void make_steps(job_t *j, uint64_t seed)
{
    for (int s = 0; s < NSTEPS; s++) {
        j->g[s] = malloc(ROWS * COLS * 2);
        for (int64_t i = 0; i < ROWS * COLS; i++) {
            uint16_t old = s ? j->g[s - 1][i] : (uint16_t)mix(&seed);
            bool change = s && (double)(mix(&seed) % 1000000) < j->frac[s] * 1e6;
            bool zero = change && j->zeros && mix(&seed) % 2;
            j->g[s][i] = zero ? 0 : change ? (uint16_t)(old ^ (1 + mix(&seed) % 0xffff)) : old;
        }
    }
}

/* The layouts, the tensor at every step and the in-process groups and ops of a job. */
static void run_job_steps(job_t *j)
{
    make_layouts(j);
    make_steps(j, 42);
    for (int s = 0; s < NSTEPS; s++)
        assert_int_equal(reshard_inproc_group_create(WORLD, &groups[s]), RESHARD_OK);
    if (j->tamper_step > 0) { /* an element of rank 2's that this step keeps: row 100 */
        int64_t r = 100, c = 0;
        while (j->g[j->tamper_step][r * COLS + c] != j->g[j->tamper_step - 1][r * COLS + c])
            c++;
        assert_true(c < COLS / 2);
        j->tamper_at = dst_index(j, 2, r, c);
    }
    reshard_comm_t *probe = NULL;
    reshard_comm_create_inproc(groups[0], 0, &probe);
    inproc_ops = probe->ops;
    failing_ops = *inproc_ops;
    failing_ops.post_send = failing_send;
    reshard_comm_destroy(probe);
}

static void run_job(job_t *j)
{
    run_job_steps(j);
    pthread_t th[WORLD];
    rank_arg_t args[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        args[r] = (rank_arg_t){j, r};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    for (int s = 0; s < NSTEPS; s++)
        reshard_inproc_group_destroy(groups[s]);
}

static void free_job(job_t *j)
{
    for (int s = 0; s < NSTEPS; s++)
        free(j->g[s]);
    reshard_layout_destroy(j->src);
    reshard_layout_destroy(j->dst);
    reshard_tensors_destroy(j->ts);
}

static uint64_t dense_bytes(const job_t *j)
{
    return (uint64_t)ROWS * COLS * 2 * (j->dst_kind == DST_REPLICATE && j->domain_size < 2 ? 2 : 1);
}

/* Shard to shard: every step byte-exact; the first dense, then the wire carries about
 * what changed: at 1% of bf16 elements under a tenth of dense, at 100% at most 2% over. */
static void test_delta_exact_and_sparse(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1,
               .frac = {0, 0.01, 0.0, 1.0, 0.3},
               .rebind_step = -1,
               .fail_step = -1};
    run_job(&j);
    for (int s = 0; s < NSTEPS; s++)
        for (int r = 0; r < WORLD; r++) {
            assert_int_equal(j.st[r][s], RESHARD_OK);
            assert_int_equal(j.wrong[r][s], 0);
            assert_int_equal(j.info[r][s].version, s + 1);
            if (r >= 2)
                assert_int_equal(j.info[r][s].state, RESHARD_DELTA_COMMITTED);
        }
    uint64_t dense = dense_bytes(&j);
    assert_true(j.sent_network[0] >= dense); /* first refit: dense */
    assert_int_equal(j.info[0][0].snapshot_bytes, dense / 2);
    assert_true(j.sent_network[1] * 10 < dense);
    /* nothing changed: each chunk a bare header and its 8-byte hash (verification is on) */
    assert_int_equal(j.sent_network[2], 24 * (j.info[0][2].chunks[RS_DELTA_RUNS] +
                                              j.info[1][2].chunks[RS_DELTA_RUNS]));
    assert_true(j.sent_network[2] * 40 < dense);
    /* everything changed: every chunk dense, the chunk plus its header and hash */
    uint64_t chunks3 = 0;
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < RS_DELTA_NKINDS; k++)
            chunks3 += j.info[r][3].chunks[k];
    assert_int_equal(j.info[0][3].chunks[RS_DELTA_DENSE] + j.info[1][3].chunks[RS_DELTA_DENSE],
                     chunks3);
    assert_int_equal(j.sent_network[3], dense + 24 * chunks3);
    assert_true(j.sent_network[3] <= dense * 104 / 100);
    assert_true(j.sent_network[3] >= dense);
    free_job(&j);
}

/* One destination domain: each byte crosses once and is forwarded (delta-encoded) to the
 * other replica; both replicas exact at every step. */
static void test_delta_forwards(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_REPLICATE,
               .domain_size = 2,
               .frac = {0, 0.01, 0.05, 0.0, 1.0},
               .rebind_step = -1,
               .fail_step = -1};
    run_job(&j);
    for (int s = 0; s < NSTEPS; s++)
        for (int r = 0; r < WORLD; r++) {
            assert_int_equal(j.st[r][s], RESHARD_OK);
            assert_int_equal(j.wrong[r][s], 0);
        }
    uint64_t fwd_stream = j.info[2][1].stream_bytes + j.info[3][1].stream_bytes;
    assert_true(fwd_stream > 0); /* the landing ranks forwarded */
    assert_true((j.info[2][1].wire_bytes + j.info[3][1].wire_bytes) * 10 < fwd_stream);
    assert_true(j.sent_network[1] * 10 < dense_bytes(&j));
    free_job(&j);
}

/* New destination buffers (a rebinding) get their streams dense, and stay exact. */
static void test_delta_rebind_is_dense(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1,
               .frac = {0, 0.01, 0.01, 0.01, 0.01},
               .rebind_step = 2,
               .fail_step = -1};
    run_job(&j);
    for (int s = 0; s < NSTEPS; s++)
        for (int r = 2; r < WORLD; r++) {
            assert_int_equal(j.st[r][s], RESHARD_OK);
            assert_int_equal(j.wrong[r][s], 0);
        }
    assert_true(j.info[0][2].dense_streams > 0);
    assert_true(j.sent_network[2] >= dense_bytes(&j));
    assert_true(j.sent_network[3] * 10 < dense_bytes(&j));
    free_job(&j);
}

/* A sender that fails part way: every rank returns an error, a destination that was
 * written is torn (queryable), and the next refit is complete and exact. */
static void test_delta_torn_then_complete(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1,
               .frac = {0, 0.3, 0.3, 0.01, 0.01},
               .rebind_step = -1,
               .fail_step = 2};
    run_job(&j);
    for (int r = 0; r < WORLD; r++) {
        assert_int_not_equal(j.st[r][2], RESHARD_OK);
        assert_int_equal(j.info[r][2].version, 2); /* no commit */
        for (int s = 0; s < NSTEPS; s++)
            if (s != 2) {
                assert_int_equal(j.st[r][s], RESHARD_OK);
                assert_int_equal(j.wrong[r][s], 0);
            }
    }
    /* rank 0's 7th send comes after chunks that rank 2 applied: its weights are torn */
    assert_int_equal(j.info[2][2].state, RESHARD_DELTA_TORN);
    assert_int_equal(j.info[2][3].state, RESHARD_DELTA_COMMITTED);
    assert_int_equal(j.info[2][3].version, 3);
    assert_true(j.info[0][3].dense_streams > 0); /* the step after: dense */
    free_job(&j);
}

/* Checksum mode: a destination element changed behind reshard's back (one that the step
 * keeps, so a delta would never rewrite it) is caught: every rank fails, the receiver's
 * error names tensor, rank, sender and box, its weights are torn, and the next refit is
 * dense, complete and exact. Without checksum mode the same change goes unseen (the
 * assumption docs/delta-verification.md states): the step succeeds with that one element stale. */
static void test_delta_verification_by_default_catches_changed_destination(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1,
               .frac = {0, 0.01, 0.01, 0.01, 0.01},
               .rebind_step = -1,
               .fail_step = -1,
               .tamper_step = 2}; /* verification as it is by default: no param given */
    run_job(&j);
    for (int r = 0; r < WORLD; r++) {
        assert_int_not_equal(j.st[r][2], RESHARD_OK);
        assert_int_equal(j.info[r][2].version, 2); /* no commit */
        for (int s = 0; s < NSTEPS; s++)
            if (s != 2) {
                assert_int_equal(j.st[r][s], RESHARD_OK);
                assert_int_equal(j.wrong[r][s], 0);
                assert_int_equal(j.info[r][s].version, s < 2 ? s + 1 : s);
            }
    }
    assert_int_equal(j.st[2][2], RESHARD_ERR_VERIFY);
    assert_non_null(strstr(j.msg[2], "rank 2: delta checksum"));
    assert_non_null(strstr(j.msg[2], "from rank 0"));
    assert_non_null(strstr(j.msg[2], "tensor 'w' box [0:128, 0:32]"));
    /* the elements named (row-major in the box, which is rank 2's buffer) hold it */
    const char *el = strstr(j.msg[2], "(elements ");
    assert_non_null(el);
    long long lo = -1, hi = -1;
    assert_int_equal(sscanf(el, "(elements %lld..%lld", &lo, &hi), 2);
    assert_true(lo <= j.tamper_at && j.tamper_at <= hi && hi - lo < 4096);
    assert_int_equal(j.info[2][2].state, RESHARD_DELTA_TORN);
    assert_int_equal(j.info[2][3].state, RESHARD_DELTA_COMMITTED);
    assert_true(j.info[0][3].dense_streams > 0); /* the step after: dense */
    assert_true(j.sent_network[3] >= dense_bytes(&j));
    assert_true(j.sent_network[4] * 10 < dense_bytes(&j)); /* then delta again */
    free_job(&j);

    job_t u = {.dst_kind = DST_SHARD1,
               .frac = {0, 0.01, 0.01, 0.01, 0.01},
               .rebind_step = -1,
               .fail_step = -1,
               .checksum = -1, /* the opt-out (delta_checksum = 0): its assumption broken */
               .tamper_step = 2};
    run_job(&u);
    assert_int_equal(u.st[2][2], RESHARD_OK);
    assert_int_equal(u.wrong[2][2], 1); /* unseen without verification */
    free_job(&u);
}

/* Ranks that disagree on checksum mode (their header messages differ in size) fail at the
 * first agreement, every rank, before anything moves. */
static void test_delta_checksum_mixed_refused(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1, .rebind_step = -1, .fail_step = -1, .checksum = 2};
    run_job(&j);
    for (int r = 0; r < WORLD; r++) {
        assert_int_equal(j.st[r][0], RESHARD_ERR_MISMATCH);
        assert_int_equal(j.info[r][0].state, RESHARD_DELTA_NONE);
        assert_int_equal(j.info[r][0].version, 0);
    }
    free_job(&j);
}

/* Checksum mode needs delta. */
static void test_delta_checksum_needs_delta(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1};
    make_layouts(&j);
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DELTA_CHECKSUM,
                               .world_size = WORLD,
                               .my_rank = 0,
                               .delta_checksum = 1};
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(j.src, j.dst, &p, &plan), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "delta_checksum"));
    assert_null(plan);
    free_job(&j);
}

/* ---- elastic refit: survivors keep their versions ------------------------------------ */

/* Sources Shard(0) over ranks 0, 1; destinations Replicate over ranks 2, 3 (each its own
 * domain). Steps 0, 1: the whole membership (plan A). Step 2: rank 3 is gone (between
 * refits); the survivors plan the membership without it (plan B) and adopt A's state.
 * Step 3: rank 3 rejoins as a new process (a fresh plan, zeroed buffers); the survivors
 * plan the whole membership again (plan C) and adopt B's. Step 4: plan C again. */
typedef struct {
    job_t *j;
    int32_t rank;
    reshard_inproc_group_t *g[NSTEPS];
} el_arg_t;

/* A setup call of a rank's thread (cmocka asserts only on the main thread). */
static void note(job_t *j, int32_t me, reshard_status_t st)
{
    if (st != RESHARD_OK && j->setup[me] == RESHARD_OK) {
        j->setup[me] = st;
        snprintf(j->msg[me], sizeof j->msg[me], "%s", reshard_last_error());
    }
}

static void *elastic_main(void *arg)
{
    el_arg_t *a = arg;
    job_t *j = a->j;
    int32_t me = a->rank, lost = j->lost;
    const int32_t gone[1] = {lost};
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DELTA |
                                             RESHARD_PLAN_PARAM_STAGING_BYTES |
                                             RESHARD_PLAN_PARAM_TIMEOUT,
                               .world_size = WORLD,
                               .my_rank = me,
                               .staging_bytes = 4096,
                               .timeout_s = 0.5,
                               .delta = 1};
    if (j->adopt_twice) { /* checksum mode off, explicitly: the adoption itself must be exact */
        p.field_mask |= RESHARD_PLAN_PARAM_DELTA_CHECKSUM;
        p.delta_checksum = 0;
    }
    reshard_layout_t *ms = NULL, *md = NULL; /* the membership without the lost rank */
    if (me != lost)
        note(j, me, reshard_membership_layouts(j->src, j->dst, gone, 1, &ms, &md));
    reshard_plan_t *plan = NULL, *next = NULL;
    note(j, me, reshard_plan_create(j->src, j->dst, &p, &plan));
    uint64_t sb = me < 2 ? reshard_layout_buffer_bytes(j->src, me, 0) : 0;
    uint64_t db = me >= 2 ? reshard_layout_buffer_bytes(j->dst, me, 0) : 0;
    uint16_t *src = calloc(1, sb + 2), *dst = calloc(1, db + 2);
    for (int s = 0; s < NSTEPS; s++) {
        if (s == 2 && me == lost)
            continue;                           /* gone */
        if (s == 2 || (s == 3 && me != lost)) { /* replan; survivors keep their state */
            note(j, me, reshard_plan_create(s == 2 ? ms : j->src, s == 2 ? md : j->dst, &p, &next));
            note(j, me, reshard_plan_delta_adopt(next, plan, me));
            reshard_plan_destroy(plan);
            plan = next;
            if (s == 2 && j->adopt_twice) { /* replanned again before the first executes */
                note(j, me, reshard_plan_create(ms, md, &p, &next));
                note(j, me, reshard_plan_delta_adopt(next, plan, me));
                reshard_plan_destroy(plan);
                plan = next;
            }
        }
        if (s == 3 && me == lost && j->stale_rejoin) { /* back with step 1's weights */
            note(j, me, reshard_plan_create(j->src, j->dst, &p, &next));
            note(j, me, reshard_plan_delta_adopt(next, plan, me));
            reshard_plan_destroy(plan);
            plan = next;
        } else if (s == 3 && me == lost) { /* a new process: a new plan and buffers */
            reshard_plan_destroy(plan);
            note(j, me, reshard_plan_create(j->src, j->dst, &p, &plan));
            memset(dst, 0, db);
        }
        reshard_comm_t *inner = NULL, *comm = NULL;
        if (s == 2) { /* the survivors' group, numbered in plan-rank order, and its view */
            int32_t map[WORLD];
            for (int32_t r = 0, k = 0; r < WORLD; r++)
                map[r] = r == lost ? -1 : k++;
            note(j, me, reshard_comm_create_inproc(a->g[s], map[me], &inner));
            note(j, me, reshard_comm_create_view(inner, WORLD, map, &comm));
        } else {
            reshard_comm_create_inproc(a->g[s], me, &inner);
            comm = inner;
        }
        if (me < 2)
            memcpy(src, j->g[s] + (j->src_repl ? 0 : (size_t)me * ROWS / 2 * COLS), sb);
        reshard_buffer_t sbuf = {.ptr = src, .bytes = sb}, dbuf = {.ptr = dst, .bytes = db};
        reshard_exec_stats_t es;
        memset(&es, 0, sizeof es);
        j->st[me][s] = reshard_plan_execute(plan, comm, &sbuf, me < 2, &dbuf, me >= 2, &es);
        reshard_plan_delta_info(plan, me, &j->info[me][s]);
        __atomic_fetch_add(&j->sent_network[s], es.bytes_sent_network, __ATOMIC_RELAXED);
        for (int64_t r = 0; me >= 2 && j->st[me][s] == RESHARD_OK && r < ROWS; r++)
            for (int64_t c = 0; c < COLS; c++) {
                int64_t at = dst_index(j, me, r, c);
                j->wrong[me][s] += at >= 0 && dst[at] != j->g[s][r * COLS + c];
            }
        reshard_comm_destroy(comm);
    }
    free(src);
    free(dst);
    reshard_plan_destroy(plan);
    reshard_layout_destroy(ms);
    reshard_layout_destroy(md);
    return NULL;
}

/* Run elastic_main on every rank; every step of every present rank OK, every element of
 * every destination exact, versions 1..5 (the rejoined rank's first refit commits 4). */
static void run_elastic(job_t *j)
{
    make_layouts(j);
    make_steps(j, 7);
    el_arg_t args[WORLD];
    reshard_inproc_group_t *g[NSTEPS];
    for (int s = 0; s < NSTEPS; s++)
        assert_int_equal(reshard_inproc_group_create(s == 2 ? WORLD - 1 : WORLD, &g[s]),
                         RESHARD_OK);
    pthread_t th[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        args[r] = (el_arg_t){.j = j, .rank = r};
        memcpy(args[r].g, g, sizeof g);
        pthread_create(&th[r], NULL, elastic_main, &args[r]);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    for (int s = 0; s < NSTEPS; s++)
        reshard_inproc_group_destroy(g[s]);
    for (int r = 0; r < WORLD; r++) {
        if (j->setup[r] != RESHARD_OK)
            print_message("rank %d: %s\n", r, j->msg[r]);
        assert_int_equal(j->setup[r], RESHARD_OK);
    }
    for (int s = 0; s < NSTEPS; s++)
        for (int r = 0; r < WORLD; r++) {
            if (s == 2 && r == j->lost)
                continue;
            assert_int_equal(j->st[r][s], RESHARD_OK);
            assert_int_equal(j->wrong[r][s], 0); /* every element of every replica, every step */
            assert_int_equal(j->info[r][s].version, s + 1);
        }
}

/* A destination rank is gone: the survivors' streams are the same pieces, so the shrunk
 * membership's first refit is delta throughout; the rejoined rank is sent dense. */
static void test_delta_elastic_survivors_keep_versions(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_REPLICATE,
               .frac = {0, 0.01, 0.01, 0.01, 0.01},
               .rebind_step = -1,
               .fail_step = -1,
               .lost = 3};
    run_elastic(&j);
    uint64_t replica = (uint64_t)ROWS * COLS * 2; /* one replica's bytes, dense */
    assert_true(j.sent_network[0] >= 2 * replica);
    /* the shrunk membership's first refit: survivors kept their versions, no stream dense */
    assert_int_equal(j.info[0][2].dense_streams, 0);
    assert_int_equal(j.info[1][2].dense_streams, 0);
    assert_true(j.sent_network[2] * 10 < replica);
    /* the rejoined rank is sent dense, the survivor delta */
    assert_int_equal(j.info[0][3].dense_streams, 1);
    assert_int_equal(j.info[1][3].dense_streams, 1);
    assert_true(j.sent_network[3] >= replica && j.sent_network[3] < replica + replica / 10);
    assert_true(j.sent_network[4] * 10 < 2 * replica);
    free_job(&j);
}

/* A source rank (one of two replicas) is gone: the survivor now sends boxes it never sent,
 * so those streams go dense once (the snapshot has no base for them) and the rest delta;
 * every element exact throughout. */
static void test_delta_elastic_moved_boxes_dense(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1,
               .src_repl = 1,
               .frac = {0, 0.01, 0.01, 0.01, 0.01},
               .rebind_step = -1,
               .fail_step = -1,
               .lost = 1};
    run_elastic(&j);
    uint64_t half = (uint64_t)ROWS * COLS;           /* one destination rank's bytes, dense */
    assert_int_equal(j.info[0][2].dense_streams, 1); /* the box rank 1 sent: dense */
    assert_true(j.sent_network[2] >= half && j.sent_network[2] < half + half / 10);
    assert_int_equal(j.info[1][3].dense_streams, 1); /* rank 1 rejoined: no snapshot */
    assert_int_equal(j.info[0][3].dense_streams, 0); /* rank 0 still holds its box's */
    assert_true(j.sent_network[3] >= half && j.sent_network[3] < half + half / 10);
    assert_true(j.sent_network[4] * 10 < 2 * half);
    free_job(&j);
}

/* Adopting a plan that never executed (issue 39, item 1): a source replica is gone, so
 * the survivors' plan P2 adopts P1 with the boxes rank 0 never sent marked dense-once; P3
 * (the same membership, planned again) adopts P2 before P2 executes. Those boxes have no
 * base in the snapshot P3 inherits: they must still go dense. The step changes 30% of
 * the elements, half of them to +0.0 (which a delta against a zero base never sends). */
static void test_delta_adopt_unexecuted_plan(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1,
               .src_repl = 1,
               .frac = {0, 0.01, 0.3, 0.01, 0.01},
               .zeros = 1,
               .rebind_step = -1,
               .fail_step = -1,
               .lost = 1,
               .adopt_twice = 1};
    run_elastic(&j); /* every step OK, every element of every destination exact */
    assert_int_equal(j.info[0][2].dense_streams, 1); /* the box rank 1 sent: still dense */
    uint64_t half = (uint64_t)ROWS * COLS;
    assert_true(j.sent_network[2] >= half);
    assert_true(j.sent_network[4] * 10 < 2 * half);
    free_job(&j);
}

/* ---- another plan wrote the destination ----------------------------------------------- */

/* Two plans over the same layouts and buffers on every rank: delta plan A, and plan B
 * (dense, or delta when b_delta); each step executes the plan uses_b names. After B
 * writes the destination, A's next execution must not apply its delta onto B's bytes. */
static void *writers_main(void *arg)
{
    rank_arg_t *a = arg;
    job_t *j = a->j;
    int32_t me = a->rank;
    /* checksum mode off, explicitly: the version record itself must keep A exact */
    reshard_plan_params_t p = {.field_mask =
                                   RESHARD_PLAN_PARAM_DELTA | RESHARD_PLAN_PARAM_DELTA_CHECKSUM |
                                   RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT,
                               .world_size = WORLD,
                               .my_rank = me,
                               .staging_bytes = 4096,
                               .timeout_s = 0.5,
                               .delta = 1,
                               .delta_checksum = 0};
    reshard_plan_t *plan[2] = {NULL, NULL};
    note(j, me, reshard_plan_create(j->src, j->dst, &p, &plan[0]));
    p.delta = j->b_delta;
    note(j, me, reshard_plan_create(j->src, j->dst, &p, &plan[1]));
    /* two live plans of equal inputs (both delta): each is named, as they must be */
    if (plan[0] && plan[1] && j->b_delta) {
        note(j, me, reshard_plan_set_name(plan[0], "A"));
        note(j, me, reshard_plan_set_name(plan[1], "B"));
    }
    uint64_t sb = me < 2 ? reshard_layout_buffer_bytes(j->src, me, 0) : 0;
    uint64_t db = me >= 2 ? reshard_layout_buffer_bytes(j->dst, me, 0) : 0;
    uint16_t *src = calloc(1, sb + 2), *dst = calloc(1, db + 2);
    for (int s = 0; s < NSTEPS && j->setup[me] == RESHARD_OK; s++) {
        reshard_comm_t *comm = NULL;
        note(j, me, reshard_comm_create_inproc(groups[s], me, &comm));
        /* B moves other weights (another model's, or a rollback): every bit flipped */
        uint16_t flip = j->uses_b[s] ? 0xffff : 0;
        for (uint64_t i = 0; me < 2 && i < sb / 2; i++)
            src[i] = j->g[s][(size_t)me * ROWS / 2 * COLS + i] ^ flip;
        reshard_buffer_t sbuf = {.ptr = src, .bytes = sb}, dbuf = {.ptr = dst, .bytes = db};
        j->st[me][s] =
            reshard_plan_execute(plan[j->uses_b[s]], comm, &sbuf, me < 2, &dbuf, me >= 2, NULL);
        if (j->st[me][s] != RESHARD_OK)
            snprintf(j->msg[me], sizeof j->msg[me], "%s", reshard_last_error());
        if (!j->uses_b[s] || j->b_delta)
            reshard_plan_delta_info(plan[j->uses_b[s]], me, &j->info[me][s]);
        for (int64_t r = 0; me >= 2 && r < ROWS; r++)
            for (int64_t c = 0; c < COLS; c++) {
                int64_t at = dst_index(j, me, r, c);
                j->wrong[me][s] += at >= 0 && dst[at] != (j->g[s][r * COLS + c] ^ flip);
            }
        reshard_comm_destroy(comm);
    }
    free(src);
    free(dst);
    reshard_plan_destroy(plan[0]);
    reshard_plan_destroy(plan[1]);
    return NULL;
}

/* Run writers_main on every rank: every step OK and every element of every destination
 * exact; A's first execution after B's is dense on every stream. */
static void run_writers(job_t *j)
{
    run_job_steps(j);
    pthread_t th[WORLD];
    rank_arg_t args[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        args[r] = (rank_arg_t){j, r};
        pthread_create(&th[r], NULL, writers_main, &args[r]);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    for (int s = 0; s < NSTEPS; s++)
        reshard_inproc_group_destroy(groups[s]);
    for (int r = 0; r < WORLD; r++)
        if (j->setup[r] != RESHARD_OK)
            print_message("rank %d: %s\n", r, j->msg[r]);
    for (int s = 0; s < NSTEPS; s++)
        for (int r = 0; r < WORLD; r++) {
            if (j->st[r][s] != RESHARD_OK)
                print_message("step %d rank %d: %s\n", s, r, j->msg[r]);
            assert_int_equal(j->st[r][s], RESHARD_OK);
            if (j->wrong[r][s])
                print_message("step %d rank %d: %lld wrong elements\n", s, r,
                              (long long)j->wrong[r][s]);
            assert_int_equal(j->wrong[r][s], 0);
        }
    for (int s = 1; s < NSTEPS; s++)
        if (!j->uses_b[s] && j->uses_b[s - 1]) /* A after B: dense */
            for (int r = 0; r < 2; r++)
                assert_int_equal(j->info[r][s].dense_streams, 2);
}

static void test_delta_after_dense_plan_wrote(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1,
               .frac = {0, 0.01, 0.3, 0.3, 0.01},
               .zeros = 1,
               .rebind_step = -1,
               .fail_step = -1,
               .uses_b = {0, 0, 1, 0, 0}};
    run_writers(&j);
    assert_true(j.info[0][4].dense_streams == 0 && j.info[1][4].dense_streams == 0);
    free_job(&j);
}

static void test_delta_after_other_delta_plan_wrote(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1,
               .frac = {0, 0.01, 0.3, 0.3, 0.3},
               .zeros = 1,
               .rebind_step = -1,
               .fail_step = -1,
               .uses_b = {0, 0, 1, 1, 0},
               .b_delta = 1};
    run_writers(&j);
    /* B's second execution is delta: only A's writes came between (none) */
    assert_true(j.info[0][3].dense_streams == 0 && j.info[1][3].dense_streams == 0);
    free_job(&j);
}

/* The record of writers by address range: partial overlaps, splits, neighbours, a plan
 * destroyed, a new buffer set and adoption (plan identities are only compared). */
static void test_delta_writers_ranges(void **state)
{
    (void)state;
    static char a_id, b_id, c_id;
    const void *a = &a_id, *b = &b_id, *c = &c_id;
    reshard_buffer_t buf = {.ptr = (void *)0x10000, .bytes = 0x1000};
    reshard_buffer_t two[2] = {{.ptr = (void *)0x10000, .bytes = 0x1000},
                               {.ptr = (void *)0x30000, .bytes = 0x100}};
    uint64_t sa = rs_writers_stamp(a, 2, &buf, 1);
    assert_true(rs_writers_mine(a, 2, sa, &buf, 1));
    assert_false(rs_writers_mine(a, 3, sa, &buf, 1)); /* another rank of the plan */
    assert_false(rs_writers_mine(a, 2, sa, two, 2));  /* never stamped there */
    /* a neighbour [end, end + 0x100): no overlap */
    reshard_buffer_t next = {.ptr = (void *)0x11000, .bytes = 0x100};
    uint64_t sb = rs_writers_stamp(b, 2, &next, 1);
    assert_true(sb > sa);
    assert_true(rs_writers_mine(a, 2, sa, &buf, 1));
    /* the middle of it: split, then the same plan writes again */
    reshard_buffer_t mid = {.ptr = (void *)0x10800, .bytes = 0x10};
    rs_writers_stamp(c, 2, &mid, 1);
    assert_false(rs_writers_mine(a, 2, sa, &buf, 1));
    rs_writers_forget(c); /* destroyed: its bytes stay not A's */
    assert_false(rs_writers_mine(a, 2, sa, &buf, 1));
    sa = rs_writers_stamp(a, 2, &buf, 1);
    assert_true(rs_writers_mine(a, 2, sa, &buf, 1));
    assert_false(rs_writers_mine(a, 2, sa - 1, &buf, 1)); /* an older stamp of its own */
    /* a range over its start */
    reshard_buffer_t over = {.ptr = (void *)0xff00, .bytes = 0x200};
    rs_writers_stamp(b, 2, &over, 1); /* B's previous range is forgotten */
    assert_false(rs_writers_mine(a, 2, sa, &buf, 1));
    assert_false(rs_writers_mine(b, 2, sb, &next, 1));
    /* A moves to two buffers; then adopted by C */
    sa = rs_writers_stamp(a, 2, two, 2);
    assert_true(rs_writers_mine(a, 2, sa, two, 2));
    rs_writers_transfer(a, c, 2);
    assert_false(rs_writers_mine(a, 2, sa, two, 2));
    assert_true(rs_writers_mine(c, 2, sa, two, 2));
    rs_writers_forget(a);
    rs_writers_forget(b);
    rs_writers_forget(c);
    assert_false(rs_writers_mine(c, 2, sa, two, 2));
}

/* ---- a rank lost mid-delta ------------------------------------------------------------ */

/* Rank 3 (a destination replica) stops answering at its 4th round wait of step 2, after
 * round 0's chunks were applied. Every survivor fails within a bounded time; rank 2's
 * weights are torn; the survivors agree that rank 3 is gone, shrink, plan the membership
 * without it and adopt their state: the retry of step 2 is dense (no snapshot of a failed
 * execution is a base), committed and exact; step 3 is delta again. */
static reshard_transport_ops_t stalling_ops;
static pthread_barrier_t stall_until;
static __thread int waits;

static reshard_status_t stalling_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    if (++waits == 4)
        pthread_barrier_wait(&stall_until); /* until the survivors recovered */
    return inproc_ops->round_wait(c, slot, timeout_s);
}

typedef struct {
    job_t *j;
    int32_t rank;
    reshard_inproc_group_t *all[NSTEPS], *survivors[2];
    reshard_status_t failed, agreed, retried, after;
    double t_fail;
    uint64_t retry_sent, after_sent;
} lost_arg_t;

static void *lost_main(void *arg)
{
    lost_arg_t *a = arg;
    job_t *j = a->j;
    int32_t me = a->rank;
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DELTA |
                                             RESHARD_PLAN_PARAM_STAGING_BYTES |
                                             RESHARD_PLAN_PARAM_TIMEOUT,
                               .world_size = WORLD,
                               .my_rank = me,
                               .staging_bytes = 4096,
                               .timeout_s = 0.5,
                               .delta = 1};
    reshard_plan_t *plan = NULL, *next = NULL;
    note(j, me, reshard_plan_create(j->src, j->dst, &p, &plan));
    uint64_t sb = me < 2 ? reshard_layout_buffer_bytes(j->src, me, 0) : 0;
    uint64_t db = me >= 2 ? reshard_layout_buffer_bytes(j->dst, me, 0) : 0;
    uint16_t *src = calloc(1, sb + 2), *dst = calloc(1, db + 2);
    reshard_comm_t *comm = NULL, *shrunk = NULL;
    reshard_layout_t *ms = NULL, *md = NULL;
    for (int s = 0; s < 4; s++) {
        if (me < 2)
            memcpy(src, j->g[s] + (size_t)me * ROWS / 2 * COLS, sb);
        reshard_buffer_t sbuf = {.ptr = src, .bytes = sb}, dbuf = {.ptr = dst, .bytes = db};
        reshard_exec_stats_t es;
        memset(&es, 0, sizeof es);
        if (s < 3) {
            reshard_comm_create_inproc(a->all[s], me, &comm);
            if (s == 2 && me == 3) {
                stalling_ops = *comm->ops;
                stalling_ops.round_wait = stalling_wait;
                comm->ops = &stalling_ops;
                waits = 0;
            }
            struct timespec ts0, ts1;
            clock_gettime(CLOCK_MONOTONIC, &ts0);
            j->st[me][s] = reshard_plan_execute(plan, comm, &sbuf, me < 2, &dbuf, me >= 2, &es);
            clock_gettime(CLOCK_MONOTONIC, &ts1);
            reshard_plan_delta_info(plan, me, &j->info[me][s]);
            if (s < 2) {
                reshard_comm_destroy(comm);
                continue;
            }
            a->failed = j->st[me][s];
            a->t_fail =
                (double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec);
            if (me == 3) { /* woken after the recovery */
                reshard_comm_destroy(comm);
                break;
            }
            int32_t gone[WORLD], ngone = 0;
            a->agreed = reshard_comm_agree_gone(comm, 0.1, gone, WORLD, &ngone);
            if (a->agreed == RESHARD_OK && (ngone != 1 || gone[0] != 3))
                a->agreed = RESHARD_ERR_MISMATCH;
            note(j, me, a->agreed);
            note(j, me, reshard_comm_shrink_inproc(comm, gone, ngone, a->survivors[0], &shrunk));
            note(j, me, reshard_membership_layouts(j->src, j->dst, gone, ngone, &ms, &md));
            note(j, me, reshard_plan_create(ms, md, &p, &next));
            note(j, me, reshard_plan_delta_adopt(next, plan, me));
            reshard_plan_destroy(plan);
            plan = next;
            reshard_comm_destroy(comm);
            /* the retry of step 2 on the survivors */
            a->retried = reshard_plan_execute(plan, shrunk, &sbuf, me < 2, &dbuf, me >= 2, &es);
            a->retry_sent = es.bytes_sent_network;
            reshard_delta_info_t di;
            reshard_plan_delta_info(plan, me, &di);
            j->info[me][3] = di; /* the retry's */
            for (int64_t i = 0; me == 2 && a->retried == RESHARD_OK && i < ROWS * COLS; i++)
                j->wrong[me][2] += dst[i] != j->g[2][i];
            reshard_comm_destroy(shrunk);
            shrunk = NULL;
            pthread_barrier_wait(&stall_until); /* release the lost rank */
        } else {                                /* step 3 on the survivors' membership */
            reshard_comm_t *inner = NULL;
            const int32_t map[WORLD] = {0, 1, 2, -1};
            note(j, me, reshard_comm_create_inproc(a->survivors[1], me, &inner));
            note(j, me, reshard_comm_create_view(inner, WORLD, map, &comm));
            a->after = reshard_plan_execute(plan, comm, &sbuf, me < 2, &dbuf, me >= 2, &es);
            a->after_sent = es.bytes_sent_network;
            reshard_plan_delta_info(plan, me, &j->info[me][4]);
            for (int64_t i = 0; me == 2 && a->after == RESHARD_OK && i < ROWS * COLS; i++)
                j->wrong[me][3] += dst[i] != j->g[3][i];
            reshard_comm_destroy(comm);
        }
    }
    free(src);
    free(dst);
    reshard_plan_destroy(plan);
    reshard_layout_destroy(ms);
    reshard_layout_destroy(md);
    return NULL;
}

static void test_delta_rank_lost_mid_delta(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_REPLICATE,
               .frac = {0, 0.01, 0.3, 0.01, 0},
               .rebind_step = -1,
               .fail_step = -1};
    run_job_steps(&j); /* the tensor at each step, the in-process ops */
    lost_arg_t args[WORLD];
    reshard_inproc_group_t *sv[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(reshard_inproc_group_create(WORLD - 1, &sv[k]), RESHARD_OK);
    pthread_barrier_init(&stall_until, NULL, WORLD);
    pthread_t th[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        args[r] = (lost_arg_t){.j = &j, .rank = r, .survivors = {sv[0], sv[1]}};
        memcpy(args[r].all, groups, sizeof args[r].all);
        pthread_create(&th[r], NULL, lost_main, &args[r]);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&stall_until);
    for (int k = 0; k < 2; k++)
        reshard_inproc_group_destroy(sv[k]);
    for (int s = 0; s < NSTEPS; s++)
        reshard_inproc_group_destroy(groups[s]);
    uint64_t replica = (uint64_t)ROWS * COLS * 2, retry = 0, after = 0;
    for (int32_t r = 0; r < WORLD; r++) {
        assert_int_equal(j.setup[r], RESHARD_OK);
        for (int s = 0; s < 2; s++) {
            assert_int_equal(j.st[r][s], RESHARD_OK);
            assert_int_equal(j.wrong[r][s], 0);
        }
        /* the lost step: an error on every rank, in bounded time, no commit */
        assert_true(args[r].failed == RESHARD_ERR_TIMEOUT ||
                    args[r].failed == RESHARD_ERR_TRANSPORT);
        assert_int_equal(j.info[r][2].version, 2);
        if (r == 3)
            continue;
        assert_true(args[r].t_fail < 8 * 0.5 + 2.0);
        assert_int_equal(args[r].agreed, RESHARD_OK);
        /* the retry on the survivors: dense, committed, exact */
        assert_int_equal(args[r].retried, RESHARD_OK);
        assert_int_equal(j.info[r][3].version, 3);
        retry += args[r].retry_sent;
        /* and then delta again */
        assert_int_equal(args[r].after, RESHARD_OK);
        assert_int_equal(j.info[r][4].version, 4);
        after += args[r].after_sent;
    }
    assert_int_equal(j.info[2][2].state, RESHARD_DELTA_TORN);
    assert_int_equal(j.info[2][3].state, RESHARD_DELTA_COMMITTED);
    assert_int_equal(j.wrong[2][2], 0);
    assert_int_equal(j.wrong[2][3], 0);
    assert_int_equal(j.info[0][3].dense_streams, 1);
    assert_int_equal(j.info[1][3].dense_streams, 1);
    assert_true(retry >= replica);
    assert_true(after * 10 < replica);
    free_job(&j);
}

/* ---- a snapshot that does not fit ---------------------------------------------------- */

/* Under ASan a huge malloc must return NULL as it does in a release build. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

/* A tensor of 2^49 bytes (2^48 per sender, past any address space): each sender's snapshot
 * is NOMEM, named, before anything moves, and every rank fails the refit; no version or
 * state changes. The buffers are never touched: their addresses are not memory. */
typedef struct {
    reshard_layout_t *src, *dst;
    reshard_inproc_group_t *g;
    int32_t rank;
    reshard_status_t st;
    reshard_delta_info_t info;
    char msg[512];
} big_arg_t;

static void *big_main(void *arg)
{
    big_arg_t *a = arg;
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DELTA | RESHARD_PLAN_PARAM_TIMEOUT,
                               .world_size = WORLD,
                               .my_rank = a->rank,
                               .timeout_s = 2.0,
                               .delta = 1};
    reshard_plan_t *plan = NULL;
    a->st = reshard_plan_create(a->src, a->dst, &p, &plan);
    if (a->st != RESHARD_OK) {
        snprintf(a->msg, sizeof a->msg, "plan: %s", reshard_last_error());
        return NULL;
    }
    reshard_comm_t *comm = NULL;
    reshard_comm_create_inproc(a->g, a->rank, &comm);
    reshard_buffer_t b = {.ptr = (void *)(uintptr_t)0x10000, .bytes = (uint64_t)1 << 48};
    a->st = reshard_plan_execute(plan, comm, &b, a->rank < 2, &b, a->rank >= 2, NULL);
    snprintf(a->msg, sizeof a->msg, "%s", reshard_last_error());
    reshard_plan_delta_info(plan, a->rank, &a->info);
    reshard_comm_destroy(comm);
    reshard_plan_destroy(plan);
    return NULL;
}

static void test_delta_snapshot_nomem(void **state)
{
    (void)state;
    const int64_t shape[2] = {(int64_t)1 << 25, (int64_t)1 << 23};
    reshard_tensors_t *ts = NULL;
    reshard_layout_t *src = NULL, *dst = NULL;
    assert_int_equal(reshard_tensors_create(&ts), RESHARD_OK);
    assert_int_equal(reshard_tensors_add(ts, "big", RESHARD_BF16, 2, shape, 0, NULL, NULL),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_create(ts, &src), RESHARD_OK);
    assert_int_equal(reshard_layout_create(ts, &dst), RESHARD_OK);
    const int32_t sr[2] = {0, 1}, dr[2] = {2, 3};
    const reshard_mesh_t ms = {.ndim = 1, .shape = {2}, .ranks = sr};
    const reshard_mesh_t md = {.ndim = 1, .shape = {2}, .ranks = dr};
    const reshard_placement_t shard0 = {.kind = RESHARD_SHARD, .dim = 0};
    const reshard_placement_t shard1 = {.kind = RESHARD_SHARD, .dim = 1};
    assert_int_equal(reshard_layout_add_dtensor(src, 0, &ms, &shard0, 0, 0), RESHARD_OK);
    assert_int_equal(reshard_layout_add_dtensor(dst, 0, &md, &shard1, 0, 0), RESHARD_OK);
    reshard_inproc_group_t *g = NULL;
    assert_int_equal(reshard_inproc_group_create(WORLD, &g), RESHARD_OK);
    big_arg_t a[WORLD];
    pthread_t th[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        a[r] = (big_arg_t){.src = src, .dst = dst, .g = g, .rank = r};
        pthread_create(&th[r], NULL, big_main, &a[r]);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    for (int32_t r = 0; r < WORLD; r++) {
        if (r < 2) {
            assert_int_equal(a[r].st, RESHARD_ERR_NOMEM);
            char want[96];
            snprintf(want, sizeof want, "rank %d: delta refit: no host memory for its snapshot", r);
            assert_non_null(strstr(a[r].msg, want));
        } else {
            /* told by the first agreement: the sender's status, nothing sent */
            assert_int_equal(a[r].st, RESHARD_ERR_NOMEM);
            assert_true(strstr(a[r].msg, "rank 0 ") || strstr(a[r].msg, "rank 1 "));
            assert_non_null(strstr(a[r].msg, "nothing was sent"));
        }
        assert_int_equal(a[r].info.version, 0);
        assert_int_equal(a[r].info.state, RESHARD_DELTA_NONE);
    }
    reshard_inproc_group_destroy(g);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
}

/* Version mismatch: rank 3 comes back holding version 2 (step 1's weights, committed, the
 * same buffers) while the others are at 3. Its streams must come dense: a delta against
 * step 2 applied to step 1's weights would leave every element that changed at step 2
 * stale. Every element is checked. */
static void test_delta_version_mismatch_is_dense(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_REPLICATE,
               .frac = {0, 0.01, 0.2, 0.01, 0.01},
               .rebind_step = -1,
               .fail_step = -1,
               .lost = 3,
               .stale_rejoin = 1};
    run_elastic(&j);
    assert_int_equal(j.info[3][1].version, 2);
    assert_int_equal(j.info[0][2].version, 3);
    assert_int_equal(j.info[0][3].dense_streams, 1); /* to rank 3: not at version 3 */
    assert_int_equal(j.info[1][3].dense_streams, 1);
    assert_int_equal(j.wrong[3][3], 0);
    assert_int_equal(j.info[3][3].state, RESHARD_DELTA_COMMITTED);
    free_job(&j);
}

/* reshard_plan_delta_adopt refuses what it cannot carry, by name. */
static void test_delta_adopt_refuses(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1};
    make_layouts(&j);
    reshard_plan_params_t p = {
        .field_mask = RESHARD_PLAN_PARAM_DELTA, .world_size = WORLD, .my_rank = 0, .delta = 1};
    reshard_plan_t *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(reshard_plan_create(j.src, j.dst, &p, &a), RESHARD_OK);
    assert_int_equal(reshard_plan_create(j.src, j.dst, &p, &b), RESHARD_OK);
    p.field_mask = 0;
    assert_int_equal(reshard_plan_create(j.src, j.dst, &p, &c), RESHARD_OK);
    assert_int_equal(reshard_plan_delta_adopt(a, a, 0), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_plan_delta_adopt(c, a, 0), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "delta"));
    assert_int_equal(reshard_plan_delta_adopt(b, a, 1), RESHARD_ERR_RANK);
    assert_int_equal(reshard_plan_delta_adopt(b, a, 0), RESHARD_OK);
    reshard_delta_info_t info;
    assert_int_equal(reshard_plan_delta_info(b, 0, &info), RESHARD_OK);
    assert_int_equal(info.version, 0);
    assert_int_equal(info.state, RESHARD_DELTA_NONE);
    reshard_plan_destroy(a);
    reshard_plan_destroy(b);
    reshard_plan_destroy(c);
    free_job(&j);
}

/* Device-memory transports are refused by name on every rank before anything moves. */
static void test_delta_refuses_device_memory(void **state)
{
    (void)state;
    job_t j = {.dst_kind = DST_SHARD1, .rebind_step = -1, .fail_step = -1};
    make_layouts(&j);
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_DELTA,
                               .world_size = WORLD,
                               .my_rank = RESHARD_ALL_RANKS,
                               .delta = 1};
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(j.src, j.dst, &p, &plan), RESHARD_OK);
    reshard_delta_info_t info;
    assert_int_equal(reshard_plan_delta_info(plan, 2, &info), RESHARD_OK);
    assert_int_equal(info.state, RESHARD_DELTA_NONE);
    assert_int_equal(reshard_plan_delta_info(plan, WORLD, &info), RESHARD_ERR_RANK);
    reshard_inproc_group_t *g = NULL;
    reshard_comm_t *c = NULL;
    reshard_inproc_group_create(1, &g);
    reshard_comm_create_inproc(g, 0, &c);
    reshard_transport_ops_t dev = *c->ops;
    dev.device_memory = true;
    const reshard_transport_ops_t *keep = c->ops;
    c->ops = &dev;
    reshard_plan_params_t p1 = p;
    p1.world_size = 1;
    reshard_plan_t *plan1 = NULL;
    reshard_tensors_t *ts = NULL;
    reshard_layout_t *a = NULL, *b = NULL;
    const int64_t shape[1] = {64};
    reshard_tensors_create(&ts);
    reshard_tensors_add(ts, "v", RESHARD_BF16, 1, shape, 0, NULL, NULL);
    reshard_layout_create(ts, &a);
    reshard_layout_create(ts, &b);
    const int32_t r0 = 0;
    const reshard_mesh_t m = {.ndim = 1, .shape = {1}, .ranks = &r0};
    const reshard_placement_t repl = {.kind = RESHARD_REPLICATE};
    reshard_layout_add_dtensor(a, 0, &m, &repl, 0, 0);
    reshard_layout_add_dtensor(b, 0, &m, &repl, 0, 0);
    assert_int_equal(reshard_plan_create(a, b, &p1, &plan1), RESHARD_OK);
    uint16_t x[64] = {0}, y[64] = {0};
    reshard_buffer_t sb = {.ptr = x, .bytes = sizeof x}, db = {.ptr = y, .bytes = sizeof y};
    assert_int_equal(reshard_plan_execute(plan1, c, &sb, 1, &db, 1, NULL), RESHARD_ERR_UNSUPPORTED);
    assert_non_null(strstr(reshard_last_error(), "delta"));
    c->ops = keep;
    reshard_comm_destroy(c);
    reshard_inproc_group_destroy(g);
    reshard_plan_destroy(plan1);
    reshard_plan_destroy(plan);
    reshard_layout_destroy(a);
    reshard_layout_destroy(b);
    reshard_tensors_destroy(ts);
    free_job(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_codec_bytes_match_the_format),
        cmocka_unit_test(test_codec_kinds_by_size),
        cmocka_unit_test(test_delta_exact_and_sparse),
        cmocka_unit_test(test_delta_forwards),
        cmocka_unit_test(test_delta_rebind_is_dense),
        cmocka_unit_test(test_delta_torn_then_complete),
        cmocka_unit_test(test_delta_refuses_device_memory),
        cmocka_unit_test(test_delta_verification_by_default_catches_changed_destination),
        cmocka_unit_test(test_delta_checksum_needs_delta),
        cmocka_unit_test(test_delta_checksum_mixed_refused),
        cmocka_unit_test(test_delta_elastic_survivors_keep_versions),
        cmocka_unit_test(test_delta_elastic_moved_boxes_dense),
        cmocka_unit_test(test_delta_version_mismatch_is_dense),
        cmocka_unit_test(test_delta_adopt_refuses),
        cmocka_unit_test(test_delta_adopt_unexecuted_plan),
        cmocka_unit_test(test_delta_writers_ranges),
        cmocka_unit_test(test_delta_after_dense_plan_wrote),
        cmocka_unit_test(test_delta_after_other_delta_plan_wrote),
        cmocka_unit_test(test_delta_rank_lost_mid_delta),
        cmocka_unit_test(test_delta_snapshot_nomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
