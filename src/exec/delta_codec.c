/* The delta chunk encoding: dense, bitmap+values, runs+values, gaps+values
 * (docs/delta-reference.md): the kind choice, the runs and gaps writers and readers, the
 * dispatch of the block passes (delta_blocks.h) to an implementation at run time. */
#include "exec/delta_codec.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "exec/delta_blocks.h"
#include "util/error.h"

uint32_t rs_delta_word(uint64_t len, uint32_t elem_size)
{
    if ((elem_size == 2 || elem_size == 4 || elem_size == 8) && len % elem_size == 0)
        return elem_size;
    return 1;
}

static void put_header(uint8_t *out, uint32_t kind, uint32_t word, uint32_t nruns, uint64_t body)
{
    memset(out, 0, RS_DELTA_HEADER_BYTES);
    out[0] = (uint8_t)kind;
    out[1] = (uint8_t)word;
    memcpy(out + 4, &nruns, sizeof nruns);
    memcpy(out + 8, &body, sizeof body);
}

void rs_delta_dense_header(uint8_t *out, uint64_t len, uint32_t word)
{
    put_header(out, RS_DELTA_DENSE, word, 0, len);
}

/* ---- which implementation of the block passes ------------------------------------ */

static _Atomic(const rs_delta_blocks_t *) chosen;

uint8_t rs_delta_lut_gather16[256][16], rs_delta_lut_expand16[256][16];

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
/* Fill the byte shuffles of delta_blocks.h for 2-byte words (built once, before the first use of
 * the implementation that reads them). */
static void luts_init(void)
{
    for (int b = 0; b < 256; b++) {
        int r = 0;
        memset(rs_delta_lut_gather16[b], 0x80, 16);
        for (int j = 0; j < 8; j++) {
            uint8_t *e = &rs_delta_lut_expand16[b][2 * j];
            e[0] = e[1] = 0x80;
            if (!(b >> j & 1))
                continue;
            rs_delta_lut_gather16[b][2 * r] = (uint8_t)(2 * j);
            rs_delta_lut_gather16[b][2 * r + 1] = (uint8_t)(2 * j + 1);
            e[0] = (uint8_t)(2 * r);
            e[1] = (uint8_t)(2 * r + 1);
            r++;
        }
    }
}
#endif

/* The implementation called @p name if this build and CPU have it, else NULL. */
static const rs_delta_blocks_t *by_name(const char *name)
{
    if (strcmp(name, "portable") == 0)
        return rs_delta_blocks_portable();
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    bool base = __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi");
    if (strcmp(name, "avx512") == 0 && base && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi") &&
        __builtin_cpu_supports("avx512vbmi2"))
        return rs_delta_blocks_avx512();
    static pthread_once_t luts_once = PTHREAD_ONCE_INIT;
    if (strcmp(name, "avx2") == 0 && base && __builtin_cpu_supports("avx2") &&
        rs_delta_blocks_avx2()) {
        pthread_once(&luts_once, luts_init);
        return rs_delta_blocks_avx2();
    }
#endif
    return NULL;
}

/* The fastest implementation this CPU runs. */
static const rs_delta_blocks_t *fastest(void)
{
    const rs_delta_blocks_t *b = by_name("avx512");
    if (!b)
        b = by_name("avx2");
    return b ? b : rs_delta_blocks_portable();
}

static const rs_delta_blocks_t *blocks(void)
{
    const rs_delta_blocks_t *b = atomic_load_explicit(&chosen, memory_order_acquire);
    if (!b) {
        const char *env = getenv("RESHARD_DELTA_CODEC");
        b = env ? by_name(env) : NULL; /* one this CPU lacks: the fastest */
        if (!b)
            b = fastest();
        atomic_store_explicit(&chosen, b, memory_order_release);
    }
    return b;
}

const char *rs_delta_codec_path(void)
{
    return blocks()->name;
}

bool rs_delta_codec_use(const char *name)
{
    const rs_delta_blocks_t *b = name ? by_name(name) : fastest();
    if (!b)
        return false;
    atomic_store_explicit(&chosen, b, memory_order_release);
    return true;
}

/* ---- encode ------------------------------------------------------------------------ */

static uint64_t put_dense(uint8_t *out, const uint8_t *cur, uint64_t len, uint32_t word,
                          uint64_t from)
{
    put_header(out, RS_DELTA_DENSE, word, 0, len);
    memcpy(out + RS_DELTA_HEADER_BYTES + from, cur + from, (size_t)(len - from));
    return RS_DELTA_HEADER_BYTES + len;
}

/* Per changed word that the bitmap @p bm of @p n words marks: the varint of its gap, its
 * value (of @p w bytes, from @p cur), to @p g. */
static void write_gaps(const uint8_t *cur, const uint8_t *bm, uint64_t n, uint32_t w, uint8_t *g)
{
    rs_gap_writer_t gw = {.g = g, .on = true};
    for (uint64_t i = 0; i < n; i += 64)
        rs_gaps_block(&gw, cur + i * w, rs_bitmap_block(bm, i, n - i < 64 ? n - i : 64), i, w);
}

/* The @p runs runs of changed words that the bitmap @p bm of @p n words marks: (u32 first word,
 * u32 count) each to @p r, then their words (of @p w bytes, from @p cur). */
static void write_runs(const uint8_t *cur, const uint8_t *bm, uint64_t n, uint32_t w, uint64_t runs,
                       uint8_t *r)
{
    uint8_t *v = r + runs * 8;
    uint64_t start = 0;
    bool open = false;
    for (uint64_t i = 0; i <= n; i += 64) {
        uint64_t nw = n - i < 64 ? n - i : 64, m = i < n ? rs_bitmap_block(bm, i, nw) : 0, k = 0;
        if (!m && !open)
            continue;
        while (k < 64) {
            uint64_t rest = (open ? ~m : m) >> k;
            if (!rest)
                break; /* the state holds to the end of the block */
            k += (uint64_t)__builtin_ctzll(rest);
            if (!open) {
                start = i + k;
                open = true;
                continue;
            }
            uint32_t s32 = (uint32_t)start, n32 = (uint32_t)(i + k - start);
            memcpy(r, &s32, 4);
            memcpy(r + 4, &n32, 4);
            r += 8;
            memcpy(v, cur + start * w, (size_t)n32 * w);
            v += (size_t)n32 * w;
            open = false;
        }
    }
}

uint64_t rs_delta_encode(const uint8_t *cur, uint8_t *prev, uint64_t len, uint32_t word,
                         uint8_t *out, uint64_t *changed)
{
    return rs_delta_encode_keep(cur, prev, len, word, out, changed, NULL);
}

uint64_t rs_delta_encode_keep(const uint8_t *cur, uint8_t *prev, uint64_t len, uint32_t word,
                              uint8_t *out, uint64_t *changed, bool *body_in_prev)
{
    uint64_t n = len / word, nb = (n + 7) / 8;
    if (body_in_prev)
        *body_in_prev = false;
    uint8_t *body = out + RS_DELTA_HEADER_BYTES;
    if (!prev) {
        if (changed)
            *changed = n;
        return put_dense(out, cur, len, word, 0);
    }
    /* The scan: the change bitmap at the end of the body (nb <= len), the counts that size
     * every kind; in the same pass, while the chunk looks dense, the dense body, while its
     * changes are scattered, the gaps encoding (the usual winner: no second pass then). */
    const rs_delta_blocks_t *ops = blocks();
    uint8_t *bm = body + len - nb;
    rs_delta_scan_t s = {.no_dense_body = body_in_prev != NULL};
    ops->scan(cur, prev, n, word, bm, body, len - nb, &s);
    uint64_t c = s.changed;
    if (changed)
        *changed = c;
    uint64_t bitmap = nb + c * word, run = s.runs * 8 + c * word, gaps = s.gap_bytes + c * word;
    uint32_t kind = RS_DELTA_DENSE;
    uint64_t best = len;
    if (bitmap < best) {
        kind = RS_DELTA_BITMAP;
        best = bitmap;
    }
    if (n <= UINT32_MAX && run < best) {
        kind = RS_DELTA_RUNS;
        best = run;
    }
    if (n <= UINT32_MAX && gaps < best) {
        kind = RS_DELTA_GAPS;
        best = gaps;
    }
    if (kind == RS_DELTA_DENSE && body_in_prev) { /* prev holds the body now */
        put_header(out, RS_DELTA_DENSE, word, 0, len);
        *body_in_prev = true;
        return RS_DELTA_HEADER_BYTES + len;
    }
    if (kind == RS_DELTA_DENSE)
        return put_dense(out, cur, len, word, s.copied);
    if (kind == RS_DELTA_GAPS && s.gaps_end) { /* written by the scan */
        put_header(out, RS_DELTA_GAPS, word, (uint32_t)c, gaps);
        return RS_DELTA_HEADER_BYTES + gaps;
    }
    if (kind == RS_DELTA_BITMAP) { /* bitmap to the front, then the changed words */
        memmove(body, bm, nb);
        /* those the scan did not write: of the words before s.vals_from */
        const uint8_t *end = s.vals_from < n ? body + nb + s.vals_before * word : body + len;
        ops->gather(cur, body, s.vals_from, word, body + nb, end);
        put_header(out, RS_DELTA_BITMAP, word, 0, bitmap);
        return RS_DELTA_HEADER_BYTES + bitmap;
    }
    /* Runs or gaps are written from the front while the bitmap is read from the back; when
     * the two could meet, the bitmap is read from a copy. */
    const uint8_t *rb = bm;
    uint8_t *copy = NULL;
    if (best + nb > len) {
        if (!(copy = malloc((size_t)nb))) /* no memory: dense is always right */
            return put_dense(out, cur, len, word, 0);
        memcpy(copy, bm, nb);
        rb = copy;
    }
    if (kind == RS_DELTA_GAPS)
        write_gaps(cur, rb, n, word, body);
    else
        write_runs(cur, rb, n, word, s.runs, body);
    free(copy);
    put_header(out, kind, word, kind == RS_DELTA_GAPS ? (uint32_t)c : (uint32_t)s.runs, best);
    return RS_DELTA_HEADER_BYTES + best;
}

/* ---- apply ------------------------------------------------------------------------- */

reshard_status_t rs_delta_header(const uint8_t *in, uint64_t len, rs_delta_header_t *h,
                                 const char *what)
{
    h->kind = in[0];
    h->word = in[1];
    memcpy(&h->nruns, in + 4, 4);
    memcpy(&h->body, in + 8, 8);
    bool word_ok =
        (h->word == 1 || h->word == 2 || h->word == 4 || h->word == 8) && len % h->word == 0;
    uint64_t n = word_ok ? len / h->word : 0;
    bool ok = word_ok && in[2] == 0 && in[3] == 0 && h->kind < RS_DELTA_NKINDS;
    if (ok && h->kind == RS_DELTA_DENSE)
        ok = h->nruns == 0 && h->body == len;
    else if (ok && h->kind == RS_DELTA_BITMAP)
        ok = h->nruns == 0 && h->body >= (n + 7) / 8 && h->body <= len &&
             (h->body - (n + 7) / 8) % h->word == 0;
    else if (ok && h->kind == RS_DELTA_GAPS)
        ok = h->body <= len && h->nruns <= n && (uint64_t)h->nruns * (1 + h->word) <= h->body &&
             h->body <= (uint64_t)h->nruns * (10 + h->word);
    else if (ok)
        ok = h->body <= len && (uint64_t)h->nruns * 8 <= h->body &&
             (h->body - (uint64_t)h->nruns * 8) % h->word == 0;
    if (!ok)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: delta chunk header (kind %u, word %u, runs %u, body %llu bytes) is "
                        "not valid for a chunk of %llu bytes",
                        what, h->kind, h->word, h->nruns, (unsigned long long)h->body,
                        (unsigned long long)len);
    return RESHARD_OK;
}

/* The error of a bitmap body whose bitmap @p bm of @p n words marks a word past n or other
 * than @p nv words (rs_delta_blocks_t.scatter said so). */
static reshard_status_t bitmap_error(const uint8_t *bm, uint64_t n, uint64_t nv, const char *what)
{
    uint64_t k = 0;
    for (uint64_t i = 0; i < (n + 7) / 8 * 8; i++) {
        if (!(bm[i / 8] >> (i % 8) & 1))
            continue;
        if (i >= n || k >= nv) /* the first word out of range or without a value */
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "%s: delta bitmap marks word %llu of %llu with %llu values", what,
                            (unsigned long long)i, (unsigned long long)n, (unsigned long long)nv);
        k++;
    }
    return rs_error(RESHARD_ERR_INVALID_ARG,
                    "%s: delta bitmap marks %llu words but carries %llu values", what,
                    (unsigned long long)k, (unsigned long long)nv);
}

reshard_status_t rs_delta_apply(const uint8_t *in, const rs_delta_header_t *h, uint8_t *chunk,
                                uint64_t len, const char *what)
{
    const uint8_t *body = in + RS_DELTA_HEADER_BYTES;
    uint32_t w = h->word;
    uint64_t n = len / w;
    if (h->kind == RS_DELTA_DENSE) {
        memcpy(chunk, body, len);
        return RESHARD_OK;
    }
    if (h->kind == RS_DELTA_BITMAP) {
        uint64_t nb = (n + 7) / 8, nv = (h->body - nb) / w;
        if (!blocks()->scatter(chunk, body, n, w, body + nb, nv))
            return bitmap_error(body, n, nv, what);
        return RESHARD_OK;
    }
    if (h->kind == RS_DELTA_GAPS) {
        const uint8_t *g = body, *end = body + h->body;
        uint64_t next = 0;
        for (uint32_t q = 0; q < h->nruns; q++) {
            uint64_t d = 0;
            int shift = 0;
            uint8_t b = 0x80;
            while (b & 0x80) {
                if (g >= end || shift > 63)
                    return rs_error(RESHARD_ERR_INVALID_ARG,
                                    "%s: delta gap %u of %u runs past its body", what, q, h->nruns);
                b = *g++;
                d |= (uint64_t)(b & 0x7f) << shift;
                shift += 7;
            }
            uint64_t j = next + d;
            if (end - g < (ptrdiff_t)w || d >= n || j >= n)
                return rs_error(RESHARD_ERR_INVALID_ARG,
                                "%s: delta gap %u of %u points past the chunk of %llu words or "
                                "its body",
                                what, q, h->nruns, (unsigned long long)n);
            rs_copy_word(chunk + j * w, g, w);
            g += w;
            next = j + 1;
        }
        if (g != end)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "%s: delta gaps end %lld bytes before their body", what,
                            (long long)(end - g));
        return RESHARD_OK;
    }
    const uint8_t *r = body, *v = body + (uint64_t)h->nruns * 8;
    uint64_t nv = (h->body - (uint64_t)h->nruns * 8) / w, k = 0;
    for (uint32_t q = 0; q < h->nruns; q++) {
        uint32_t start, count;
        memcpy(&start, r + (uint64_t)q * 8, 4);
        memcpy(&count, r + (uint64_t)q * 8 + 4, 4);
        if ((uint64_t)start + count > n || k + count > nv)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "%s: delta run %u (words %u..%llu) leaves the chunk of %llu words or "
                            "its %llu values",
                            what, q, start, (unsigned long long)start + count,
                            (unsigned long long)n, (unsigned long long)nv);
        memcpy(chunk + (uint64_t)start * w, v + k * w, (size_t)count * w);
        k += count;
    }
    if (k != nv)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: delta runs cover %llu words but carry %llu values", what,
                        (unsigned long long)k, (unsigned long long)nv);
    return RESHARD_OK;
}

double rs_delta_expected_bytes(uint64_t len, uint32_t word, double p)
{
    if (word != 1 && word != 2 && word != 4 && word != 8)
        word = 1;
    p = p < 0 ? 0 : p > 1 ? 1 : p;
    const double n = (double)(len / word), w = word, c = n * p;
    /* each word changed with probability p, independently: the gap before a changed word
     * is geometric, and its varint is k + 1 bytes when it is at least 128^k:
     * E[varint] = 1 + sum_k (1 - p)^(128^k) */
    double vlen = 1, q = 1 - p;
    for (double t = 128; t < 1e19 && q > 0; t *= 128) {
        double pk = pow(q, t);
        if (pk < 1e-12)
            break;
        vlen += pk;
    }
    double best = (double)len;
    double bitmap = ceil(n / 8) + c * w;
    double runs = 8 * (p + (n - 1) * p * (1 - p)) + c * w; /* a run starts at a changed word
                                                              whose predecessor did not */
    double gaps = c * (vlen + w);
    if (bitmap < best)
        best = bitmap;
    if (runs < best)
        best = runs;
    if (gaps < best)
        best = gaps;
    return RS_DELTA_HEADER_BYTES + best;
}
