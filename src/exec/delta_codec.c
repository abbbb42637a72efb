/* The delta chunk encoding: dense, bitmap+values, runs+values (docs/delta.md). */
#include "exec/delta_codec.h"

#include <stdbool.h>
#include <string.h>

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

static inline int word_differs(const uint8_t *a, const uint8_t *b, uint32_t w)
{
    switch (w) {
    case 2: {
        uint16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        return x != y;
    }
    case 4: {
        uint32_t x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        return x != y;
    }
    case 8: {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        return x != y;
    }
    default:
        return *a != *b;
    }
}

/* Number of the first word at or after @p i that differs, or @p n: whole 8-byte blocks
 * that are equal are skipped with one compare (most of a chunk is unchanged). */
static uint64_t next_diff(const uint8_t *cur, const uint8_t *prev, uint64_t i, uint64_t n,
                          uint32_t w)
{
    while (i < n) {
        uint64_t byte = i * w;
        if (byte % 8 == 0 && (n - i) * w >= 32) {
            uint64_t a[4], b[4];
            memcpy(a, cur + byte, 32);
            memcpy(b, prev + byte, 32);
            if (a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3]) {
                i += 32 / w;
                continue;
            }
        }
        if (word_differs(cur + byte, prev + byte, w))
            return i;
        i++;
    }
    return n;
}

uint64_t rs_delta_encode(const uint8_t *cur, const uint8_t *prev, uint64_t len, uint32_t word,
                         uint8_t *out, uint64_t *changed)
{
    uint64_t n = len / word, c = 0, runs = 0;
    if (prev) { /* count changed words and runs of them */
        for (uint64_t i = next_diff(cur, prev, 0, n, word); i < n;) {
            runs++;
            uint64_t j = i + 1;
            while (j < n && word_differs(cur + j * word, prev + j * word, word))
                j++;
            c += j - i;
            i = next_diff(cur, prev, j, n, word);
        }
    } else {
        c = n;
    }
    if (changed)
        *changed = c;
    uint64_t dense = len, bitmap = (n + 7) / 8 + c * word, run = runs * 8 + c * word;
    bool runs_fit = n <= UINT32_MAX && runs <= UINT32_MAX;
    uint8_t *body = out + RS_DELTA_HEADER_BYTES;
    if (!prev || (dense <= bitmap && (!runs_fit || dense <= run))) {
        put_header(out, RS_DELTA_DENSE, word, 0, len);
        memcpy(body, cur, len);
        return RS_DELTA_HEADER_BYTES + len;
    }
    if (!runs_fit || bitmap <= run) {
        uint64_t nb = (n + 7) / 8;
        memset(body, 0, nb);
        uint8_t *v = body + nb;
        for (uint64_t i = next_diff(cur, prev, 0, n, word); i < n;
             i = next_diff(cur, prev, i + 1, n, word)) {
            body[i / 8] |= (uint8_t)(1u << (i % 8));
            memcpy(v, cur + i * word, word);
            v += word;
        }
        put_header(out, RS_DELTA_BITMAP, word, 0, bitmap);
        return RS_DELTA_HEADER_BYTES + bitmap;
    }
    uint8_t *r = body, *v = body + runs * 8;
    for (uint64_t i = next_diff(cur, prev, 0, n, word); i < n;) {
        uint64_t j = i + 1;
        while (j < n && word_differs(cur + j * word, prev + j * word, word))
            j++;
        uint32_t start = (uint32_t)i, count = (uint32_t)(j - i);
        memcpy(r, &start, 4);
        memcpy(r + 4, &count, 4);
        r += 8;
        memcpy(v, cur + i * word, (size_t)(j - i) * word);
        v += (j - i) * word;
        i = next_diff(cur, prev, j, n, word);
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
        for (uint64_t b = 0; b < nb; b++) {
            uint8_t m = body[b];
            while (m) {
                uint64_t i = b * 8 + (uint64_t)__builtin_ctz(m);
                m &= (uint8_t)(m - 1);
                if (i >= n || k >= nv)
                    return rs_error(RESHARD_ERR_INVALID_ARG,
                                    "%s: delta bitmap marks word %llu of %llu with %llu values",
                                    what, (unsigned long long)i, (unsigned long long)n,
                                    (unsigned long long)nv);
                memcpy(chunk + i * w, v + k * w, w);
                k++;
            }
        }
        if (k != nv)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "%s: delta bitmap marks %llu words but carries %llu values", what,
                            (unsigned long long)k, (unsigned long long)nv);
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
