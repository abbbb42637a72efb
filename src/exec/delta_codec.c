/* The delta chunk encoding: dense, bitmap+values, runs+values (docs/delta-reference.md). */
#include "exec/delta_codec.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

/* One word of @p w bytes (fixed-size copies: plain moves, no call). */
static inline void copy_word(uint8_t *d, const uint8_t *s, uint32_t w)
{
    switch (w) {
    case 2:
        memcpy(d, s, 2);
        break;
    case 4:
        memcpy(d, s, 4);
        break;
    case 8:
        memcpy(d, s, 8);
        break;
    default:
        *d = *s;
    }
}

/* The @p nw words of @p w bytes at @p s to @p d: fixed-size copies for a whole block. */
static inline void copy_block(uint8_t *d, const uint8_t *s, uint32_t w, uint64_t nw)
{
    if (nw == 64)
        switch (w) {
        case 1:
            memcpy(d, s, 64);
            return;
        case 2:
            memcpy(d, s, 128);
            return;
        case 4:
            memcpy(d, s, 256);
            return;
        case 8:
            memcpy(d, s, 512);
            return;
        }
    memcpy(d, s, (size_t)(nw * w));
}

/* Bytes of @p x as a LEB128 varint (7 bits a byte, low first, top bit: more). */
static inline uint64_t varint_len(uint64_t x)
{
    uint64_t n = 1;
    while (x >= 0x80) {
        x >>= 7;
        n++;
    }
    return n;
}

/* Set bits of @p x, inline (without -mpopcnt the builtin is a library call). */
static inline uint64_t pop64(uint64_t x)
{
#if defined(__POPCNT__)
    return (uint64_t)__builtin_popcountll(x);
#else
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (x * 0x0101010101010101ull) >> 56;
#endif
}

/* varint_len without a branch below 2^35 (any chunk of under 32 GiB). */
static inline uint64_t varint_len_nb(uint64_t x)
{
    uint64_t n = 1 + (uint64_t)(x > 0x7f) + (uint64_t)(x > 0x3fff) + (uint64_t)(x > 0x1fffff) +
                 (uint64_t)(x > 0xfffffff);
    return x >> 35 ? n + varint_len(x >> 35) : n;
}

static inline uint64_t load8(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

/* Per word of the 8-byte lane difference @p d (words of @p w bytes): one bit, word k
 * of the lane at bit k. */
static inline uint64_t lane_words(uint64_t d, uint32_t w)
{
    if (w == 8)
        return d != 0;
    if (w == 2) { /* the top bit of each 16-bit word: set when the word is not 0 */
        const uint64_t lo = 0x7fff7fff7fff7fffull;
        uint64_t t = (((d & lo) + lo) | d) & ~lo;
        t >>= 15;
        return (t | t >> 15 | t >> 30 | t >> 45) & 0xf;
    }
    uint64_t m = 0;
    uint32_t per = 8 / w;
    uint64_t wmask = ((uint64_t)1 << (8 * w)) - 1;
    for (uint32_t k = 0; k < per; k++)
        if ((d >> (k * 8 * w)) & wmask)
            m |= (uint64_t)1 << k;
    return m;
}

/* Bit i of the result: word i of the @p nw (<= 64) words at @p a differs from @p b's.
 * Compared 8 bytes at a time; a block with no difference costs one pass of XORs. */
static uint64_t block_mask_scalar(const uint8_t *a, const uint8_t *b, uint32_t w, uint64_t nw)
{
    uint64_t m = 0, lanes = nw * w / 8, acc = 0;
    uint32_t per = 8 / w;
    for (uint64_t l = 0; l < lanes; l++)
        acc |= load8(a + 8 * l) ^ load8(b + 8 * l);
    if (acc)
        for (uint64_t l = 0; l < lanes; l++) {
            uint64_t d = load8(a + 8 * l) ^ load8(b + 8 * l);
            if (d)
                m |= lane_words(d, w) << (l * per);
        }
    for (uint64_t i = lanes * per; i < nw; i++)
        if (memcmp(a + i * w, b + i * w, w) != 0)
            m |= (uint64_t)1 << i;
    return m;
}

#if defined(__SSE2__)
/* The same for a whole block of 64 words, 16 bytes at a time (SSE2 compares; the
 * equality masks of 16 words packed into one movemask). */
static inline __m128i eq16(const uint8_t *a, const uint8_t *b, uint32_t w)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)a),
            y = _mm_loadu_si128((const __m128i *)(const void *)b);
    switch (w) {
    case 2:
        return _mm_cmpeq_epi16(x, y);
    case 4:
        return _mm_cmpeq_epi32(x, y);
    case 8: {
        __m128i e = _mm_cmpeq_epi32(x, y);
        return _mm_and_si128(e, _mm_shuffle_epi32(e, _MM_SHUFFLE(2, 3, 0, 1)));
    }
    default:
        return _mm_cmpeq_epi8(x, y);
    }
}

static inline uint64_t block_mask_full(const uint8_t *a, const uint8_t *b, uint32_t w)
{
    uint64_t eq = 0;
    switch (w) {
    case 2: /* 8 words a vector: two vectors, packed to bytes, make 16 bits */
        for (int k = 0; k < 4; k++) {
            const uint8_t *p = a + 32 * k, *q = b + 32 * k;
            __m128i e = _mm_packs_epi16(eq16(p, q, 2), eq16(p + 16, q + 16, 2));
            eq |= (uint64_t)(uint16_t)_mm_movemask_epi8(e) << (16 * k);
        }
        break;
    case 4: /* 4 words a vector: four vectors make 16 bits */
        for (int k = 0; k < 4; k++) {
            const uint8_t *p = a + 64 * k, *q = b + 64 * k;
            __m128i lo = _mm_packs_epi32(eq16(p, q, 4), eq16(p + 16, q + 16, 4));
            __m128i hi = _mm_packs_epi32(eq16(p + 32, q + 32, 4), eq16(p + 48, q + 48, 4));
            eq |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_packs_epi16(lo, hi)) << (16 * k);
        }
        break;
    case 8: /* 2 words a vector */
        for (int k = 0; k < 32; k++)
            eq |= (uint64_t)_mm_movemask_pd(_mm_castsi128_pd(eq16(a + 16 * k, b + 16 * k, 8)))
                  << (2 * k);
        break;
    default: /* 16 words a vector */
        for (int k = 0; k < 4; k++)
            eq |= (uint64_t)(uint16_t)_mm_movemask_epi8(eq16(a + 16 * k, b + 16 * k, 1))
                  << (16 * k);
    }
    return ~eq;
}
#endif

static inline uint64_t block_mask(const uint8_t *a, const uint8_t *b, uint32_t w, uint64_t nw)
{
#if defined(__SSE2__)
    if (nw == 64)
        return block_mask_full(a, b, w);
#endif
    return block_mask_scalar(a, b, w, nw);
}

uint64_t rs_delta_encode(const uint8_t *cur, uint8_t *prev, uint64_t len, uint32_t word,
                         uint8_t *out, uint64_t *changed)
{
    uint64_t n = len / word, nb = (n + 7) / 8, c = 0, runs = 0, gap_bytes = 0, next = 0;
    uint8_t *body = out + RS_DELTA_HEADER_BYTES;
    if (!prev) {
        if (changed)
            *changed = n;
        put_header(out, RS_DELTA_DENSE, word, 0, len);
        memcpy(body, cur, len);
        return RS_DELTA_HEADER_BYTES + len;
    }
    /* One pass: the change bitmap, built at the end of the body (nb <= len), its counts. */
    uint8_t *bm = body + len - nb;
    uint64_t carry = 0; /* the last word of the previous block changed */
    bool gaps_live = true;
    /* The gaps encoding is written in the same pass, from the front of the body, while it
     * stays clear of the bitmap (it is the usual winner: no second pass then). */
    uint8_t *g = body;
    bool gaps_written = true;
    for (uint64_t i = 0; i < n; i += 64) {
        uint64_t nw = n - i < 64 ? n - i : 64;
        uint64_t m = block_mask(cur + i * word, prev + i * word, word, nw);
        if (nw == 64) /* little-endian: bit i of byte i / 8 */
            memcpy(bm + i / 8, &m, 8);
        else
            memcpy(bm + i / 8, &m, (nw + 7) / 8);
        if (m) {
            /* the snapshot takes the block's new bytes now, while they are in cache */
            copy_block(prev + i * word, cur + i * word, word, nw);
            c += pop64(m);
            runs += pop64(m & ~((m << 1) | carry));
            if (gaps_live && c >= nb)
                gaps_live = false; /* >= 1 byte a gap: gaps can no longer beat the bitmap */
            if (gaps_live) {       /* inside a block every gap but the first is < 64: one byte */
                gap_bytes += varint_len_nb(i + (uint64_t)__builtin_ctzll(m) - next) + pop64(m) - 1;
                if (gaps_written && (2 * c >= nb || pop64(m) >= 32))
                    gaps_written = false; /* gaps will hardly win: a second pass if they do */
            }
            for (uint64_t b = gaps_live && gaps_written ? m : 0; b; b &= b - 1) {
                uint64_t j = i + (uint64_t)__builtin_ctzll(b), d = j - next;
                next = j + 1;
                if (g + 10 + word > bm)
                    gaps_written = false;
                if (gaps_written) {
                    while (d >= 0x80) {
                        *g++ = (uint8_t)(d | 0x80);
                        d >>= 7;
                    }
                    *g++ = (uint8_t)d;
                    copy_word(g, cur + j * word, word);
                    g += word;
                }
            }
            next = i + 64 - (uint64_t)__builtin_clzll(m); /* after the block's last change */
        }
        carry = (m >> (nw - 1)) & 1;
    }
    if (changed)
        *changed = c;
    uint64_t bitmap = nb + c * word, run = runs * 8 + c * word, gaps = gap_bytes + c * word;
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
    if (gaps_live && n <= UINT32_MAX && gaps < best) {
        kind = RS_DELTA_GAPS;
        best = gaps;
    }
    if (kind == RS_DELTA_GAPS && gaps_written) {
        put_header(out, RS_DELTA_GAPS, word, (uint32_t)c, gaps);
        return RS_DELTA_HEADER_BYTES + gaps;
    }
    if (kind == RS_DELTA_DENSE) {
        put_header(out, RS_DELTA_DENSE, word, 0, len);
        memcpy(body, cur, len);
        return RS_DELTA_HEADER_BYTES + len;
    }
    if (kind == RS_DELTA_BITMAP) { /* bitmap to the front, then the changed words */
        memmove(body, bm, nb);
        uint8_t *v = body + nb;
        for (uint64_t i = 0; i < n; i += 64) {
            uint64_t m = 0;
            if (n - i >= 64)
                memcpy(&m, body + i / 8, 8);
            else
                memcpy(&m, body + i / 8, (n - i + 7) / 8);
            while (m) {
                uint64_t j = i + (uint64_t)__builtin_ctzll(m);
                m &= m - 1;
                copy_word(v, cur + j * word, word);
                v += word;
            }
        }
        put_header(out, RS_DELTA_BITMAP, word, 0, bitmap);
        return RS_DELTA_HEADER_BYTES + bitmap;
    }
    /* Runs and values are written from the front while the bitmap is read from the
     * back; when the two could meet, the bitmap is read from a copy. */
    const uint8_t *rb = bm;
    uint8_t *copy = NULL;
    if (best + nb > len) {
        if (!(copy = malloc((size_t)nb))) { /* no memory: dense is always right */
            put_header(out, RS_DELTA_DENSE, word, 0, len);
            memcpy(body, cur, len);
            return RS_DELTA_HEADER_BYTES + len;
        }
        memcpy(copy, bm, nb);
        rb = copy;
    }
    if (kind == RS_DELTA_GAPS) { /* per changed word: the varint of its gap, its value */
        uint8_t *gw = body;
        next = 0;
        for (uint64_t i = 0; i < n; i += 64) {
            uint64_t m = 0;
            if (n - i >= 64)
                memcpy(&m, rb + i / 8, 8);
            else
                memcpy(&m, rb + i / 8, (n - i + 7) / 8), m &= ((uint64_t)1 << (n - i)) - 1;
            for (; m; m &= m - 1) {
                uint64_t j = i + (uint64_t)__builtin_ctzll(m), d = j - next;
                while (d >= 0x80) {
                    *gw++ = (uint8_t)(d | 0x80);
                    d >>= 7;
                }
                *gw++ = (uint8_t)d;
                copy_word(gw, cur + j * word, word);
                gw += word;
                next = j + 1;
            }
        }
        free(copy);
        put_header(out, RS_DELTA_GAPS, word, (uint32_t)c, gaps);
        return RS_DELTA_HEADER_BYTES + gaps;
    }
    uint8_t *r = body, *v = body + runs * 8;
    uint64_t start = 0;
    bool open = false;
    for (uint64_t i = 0; i < n; i += 64) {
        uint64_t nw = n - i < 64 ? n - i : 64, m = 0, k = 0;
        if (nw == 64) {
            memcpy(&m, rb + i / 8, 8);
        } else {
            memcpy(&m, rb + i / 8, (nw + 7) / 8);
            m &= ((uint64_t)1 << nw) - 1;
        }
        if (!m && !open)
            continue;
        while (k < nw) {
            uint64_t rest = (open ? ~m : m) >> k;
            if (!rest)
                break; /* the state holds to the end of the block */
            k += (uint64_t)__builtin_ctzll(rest);
            if (k >= nw)
                break;
            if (!open) {
                start = i + k;
                open = true;
                continue;
            }
            uint32_t s32 = (uint32_t)start, n32 = (uint32_t)(i + k - start);
            memcpy(r, &s32, 4);
            memcpy(r + 4, &n32, 4);
            r += 8;
            memcpy(v, cur + start * word, (size_t)n32 * word);
            v += (size_t)n32 * word;
            open = false;
        }
    }
    free(copy);
    if (open) {
        uint32_t s32 = (uint32_t)start, n32 = (uint32_t)(n - start);
        memcpy(r, &s32, 4);
        memcpy(r + 4, &n32, 4);
        memcpy(v, cur + start * word, (size_t)n32 * word);
    }
    put_header(out, RS_DELTA_RUNS, word, (uint32_t)runs, run);
    return RS_DELTA_HEADER_BYTES + run;
}

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
        ok = h->nruns == 0 && h->body >= (n + 7) / 8 && h->body <= (n + 7) / 8 + len &&
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
        uint64_t nb = (n + 7) / 8, nv = (h->body - nb) / w, k = 0;
        const uint8_t *v = body + nb;
        for (uint64_t b = 0; b < nb; b += 8) { /* 64 words of the bitmap at a time */
            uint64_t m = 0;
            memcpy(&m, body + b, nb - b < 8 ? (size_t)(nb - b) : 8);
            uint64_t pop = pop64(m);
            if (pop && (k + pop > nv || b * 8 + 64 - (uint64_t)__builtin_clzll(m) > n)) {
                while (m) { /* name the first word out of range or without a value */
                    uint64_t i = b * 8 + (uint64_t)__builtin_ctzll(m);
                    m &= m - 1;
                    if (i >= n || k >= nv)
                        return rs_error(RESHARD_ERR_INVALID_ARG,
                                        "%s: delta bitmap marks word %llu of %llu with %llu values",
                                        what, (unsigned long long)i, (unsigned long long)n,
                                        (unsigned long long)nv);
                    k++;
                }
            }
            uint8_t *c = chunk + b * 8 * w;
            for (; m; m &= m - 1, v += w)
                copy_word(c + (uint64_t)__builtin_ctzll(m) * w, v, w);
            k += pop;
        }
        if (k != nv)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "%s: delta bitmap marks %llu words but carries %llu values", what,
                            (unsigned long long)k, (unsigned long long)nv);
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
            copy_word(chunk + j * w, g, w);
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
