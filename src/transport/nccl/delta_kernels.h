/*
 * The delta chunk encoding (docs/delta-reference.md, the format of src/exec/delta_codec.c) on
 * device memory: the NCCL transport's encode and apply. The per-group and per-thread steps live
 * here as host/device functions, shared by the CUDA kernels (delta_kernels.cu) and the CPU
 * emulation the fake device and the tests run (delta_kernels.c), so the logic that runs on
 * the GPU is the logic the CPU tests check byte for byte against rs_delta_encode.
 *
 * Encode, three launches on one stream:
 *   1. mask:  one thread per group of RS_DK_GROUP words: the group's change mask.
 *   2. scan:  one block of RS_DK_SCAN threads, each over a contiguous segment of groups:
 *             exclusive prefixes of changed words, runs (a changed word whose predecessor
 *             is unchanged), the last changed word, then of the gaps bytes (LEB128 lengths),
 *             the totals, the kind (the smallest, ties to the earlier) and the header.
 *   3. body:  one thread per group writes its part of the body of the chosen kind at the
 *             positions the scan gave, and the snapshot takes the group's changed words.
 * Apply: dense and bitmap one thread per group (bitmap: the groups' popcounts scanned into
 * value positions), runs one thread per run (run lengths scanned into value positions),
 * gaps sequentially on one thread (gaps are only chosen for very sparse chunks).
 * Inconsistent bodies are recorded in an error record the host reads after the stream.
 */
#ifndef RS_NCCL_DELTA_KERNELS_H
#define RS_NCCL_DELTA_KERNELS_H

#include <stdint.h>

#include "reshard/reshard.h"
#include "exec/delta_codec.h"

#ifdef __CUDACC__
#define RS_DHD static __host__ __device__ __forceinline__
#else
#define RS_DHD static inline
#endif

/** Words per group (one bit each in a 64-bit mask). */
#define RS_DK_GROUP 64
/** Threads of the scan block. */
#define RS_DK_SCAN 256

/** Per group of the encode: its mask and the exclusive prefixes before it. */
typedef struct {
    uint64_t mask;
    uint64_t c_before;    /**< changed words before the group */
    uint64_t runs_before; /**< runs starting before the group */
    uint64_t last_before; /**< 1 + the last changed word before the group, 0 for none */
    uint64_t gb_before;   /**< gaps varint bytes before the group */
} rs_dk_group_t;

/** Per scan thread: its segment's sums, then their exclusive prefixes. */
typedef struct {
    uint64_t c, runs, last, gb;
} rs_dk_part_t;

/** The totals and the choice of one encode. */
typedef struct {
    uint64_t c, runs, gb;
    uint32_t kind;
    uint64_t body;
} rs_dk_total_t;

/** An inconsistent body found by apply: code 0 none, else RS_DK_ERR_*. */
typedef struct {
    uint32_t code;
    uint64_t a, b;
} rs_dk_err_t;

enum {
    RS_DK_ERR_NONE = 0,
    RS_DK_ERR_BITMAP_RANGE = 1, /* a: marked word past the chunk */
    RS_DK_ERR_BITMAP_COUNT = 2, /* a: marked words, b: values */
    RS_DK_ERR_RUN_RANGE = 3,    /* a: run index */
    RS_DK_ERR_RUN_COUNT = 4,    /* a: words covered, b: values */
    RS_DK_ERR_GAP = 5,          /* a: gap index, b: 1 past its body, 2 past the chunk, 3 short */
};

/** One encode or apply: plain data, passed to the kernels by value. */
typedef struct {
    uint64_t len, n, groups; /**< bytes, words, groups of the chunk */
    uint32_t word;
    /* apply: the header */
    uint32_t kind, nruns;
    uint64_t body;
    /* scratch (device memory; rs_delta_dev_scratch_bytes) */
    rs_dk_group_t *g;
    rs_dk_part_t *part;
    rs_dk_total_t *total;
    rs_dk_err_t *err;
    uint64_t *cnt; /**< apply: per bitmap group or per run */
} rs_dk_job_t;

/* ---- helpers -------------------------------------------------------------------------- */

RS_DHD int rs_dk_pop(uint64_t x)
{
#ifdef __CUDA_ARCH__
    return __popcll(x);
#else
    return __builtin_popcountll(x);
#endif
}

RS_DHD int rs_dk_ctz(uint64_t x)
{
#ifdef __CUDA_ARCH__
    return __ffsll((long long)x) - 1;
#else
    return __builtin_ctzll(x);
#endif
}

RS_DHD int rs_dk_clz(uint64_t x)
{
#ifdef __CUDA_ARCH__
    return __clzll((long long)x);
#else
    return __builtin_clzll(x);
#endif
}

RS_DHD uint64_t rs_dk_varint_len(uint64_t x)
{
    uint64_t k = 1;
    while (x >= 0x80) {
        x >>= 7;
        k++;
    }
    return k;
}

RS_DHD void rs_dk_copy(uint8_t *d, const uint8_t *s, uint64_t bytes)
{
    for (uint64_t k = 0; k < bytes; k++)
        d[k] = s[k];
}

RS_DHD void rs_dk_put_u32(uint8_t *d, uint32_t x)
{
    for (int k = 0; k < 4; k++)
        d[k] = (uint8_t)(x >> (8 * k));
}

RS_DHD uint32_t rs_dk_get_u32(const uint8_t *s)
{
    return (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
}

/** Words of group @p g. */
RS_DHD uint64_t rs_dk_group_words(const rs_dk_job_t *j, uint64_t g)
{
    const uint64_t first = g * RS_DK_GROUP;
    return j->n - first < RS_DK_GROUP ? j->n - first : RS_DK_GROUP;
}

/** Items [*lo, *hi) of scan thread @p t of @p nt over @p items. */
RS_DHD void rs_dk_segment(uint64_t items, int t, int nt, uint64_t *lo, uint64_t *hi)
{
    const uint64_t per = (items + (uint64_t)nt - 1) / (uint64_t)nt;
    *lo = per * (uint64_t)t < items ? per * (uint64_t)t : items;
    *hi = *lo + per < items ? *lo + per : items;
}

/* ---- encode --------------------------------------------------------------------------- */

/** Step 1: the change mask of group @p g (every word changed without a snapshot). */
RS_DHD void rs_dk_enc_mask(const rs_dk_job_t *j, const uint8_t *cur, const uint8_t *prev,
                           uint64_t g)
{
    const uint64_t nw = rs_dk_group_words(j, g), w = j->word;
    uint64_t m = 0;
    const uint8_t *a = cur + g * RS_DK_GROUP * w, *b = prev ? prev + g * RS_DK_GROUP * w : 0;
    for (uint64_t i = 0; i < nw; i++) {
        uint32_t d = b ? 0 : 1;
        for (uint64_t k = 0; b && k < w; k++)
            d |= (uint32_t)(a[i * w + k] ^ b[i * w + k]);
        if (d)
            m |= (uint64_t)1 << i;
    }
    j->g[g].mask = m;
}

/** Runs starting in group @p g's mask @p m (the previous group's last bit carried). */
RS_DHD uint64_t rs_dk_run_starts(const rs_dk_job_t *j, uint64_t g, uint64_t m)
{
    const uint64_t carry = g > 0 ? j->g[g - 1].mask >> 63 : 0; /* earlier groups are full */
    return m & ~((m << 1) | carry);
}

/** Step 2a, scan thread @p t: its segment's changed words, runs and last changed word. */
RS_DHD void rs_dk_enc_scan_a(const rs_dk_job_t *j, int t)
{
    uint64_t lo, hi, c = 0, runs = 0, last = 0;
    rs_dk_segment(j->groups, t, RS_DK_SCAN, &lo, &hi);
    for (uint64_t g = lo; g < hi; g++) {
        const uint64_t m = j->g[g].mask;
        c += (uint64_t)rs_dk_pop(m);
        runs += (uint64_t)rs_dk_pop(rs_dk_run_starts(j, g, m));
        if (m)
            last = g * RS_DK_GROUP + 64 - (uint64_t)rs_dk_clz(m);
    }
    j->part[t].c = c;
    j->part[t].runs = runs;
    j->part[t].last = last;
}

/** Step 2b, one thread: the parts' exclusive prefixes (sums; the last changed word: the
 *  latest one before). */
RS_DHD void rs_dk_enc_scan_b(const rs_dk_job_t *j)
{
    uint64_t c = 0, runs = 0, last = 0;
    for (int t = 0; t < RS_DK_SCAN; t++) {
        rs_dk_part_t *p = &j->part[t];
        const uint64_t pc = p->c, pr = p->runs, pl = p->last;
        p->c = c;
        p->runs = runs;
        p->last = last;
        c += pc;
        runs += pr;
        last = pl ? pl : last;
    }
    j->total->c = c;
    j->total->runs = runs;
}

/** Step 2c, scan thread @p t: the groups' prefixes and the segment's gaps bytes (the gap
 *  before a group's first changed word from the last one before it; the others inside a
 *  group are < 64: one byte each). */
RS_DHD void rs_dk_enc_scan_c(const rs_dk_job_t *j, int t)
{
    uint64_t lo, hi, gb = 0;
    rs_dk_segment(j->groups, t, RS_DK_SCAN, &lo, &hi);
    uint64_t c = j->part[t].c, runs = j->part[t].runs, last = j->part[t].last;
    for (uint64_t g = lo; g < hi; g++) {
        const uint64_t m = j->g[g].mask;
        j->g[g].c_before = c;
        j->g[g].runs_before = runs;
        j->g[g].last_before = last;
        c += (uint64_t)rs_dk_pop(m);
        runs += (uint64_t)rs_dk_pop(rs_dk_run_starts(j, g, m));
        if (m) {
            gb += rs_dk_varint_len(g * RS_DK_GROUP + (uint64_t)rs_dk_ctz(m) - last) +
                  (uint64_t)rs_dk_pop(m) - 1;
            last = g * RS_DK_GROUP + 64 - (uint64_t)rs_dk_clz(m);
        }
    }
    j->part[t].gb = gb;
}

/** Step 2d, one thread: the gaps prefixes, the sizes of the four kinds, the smallest (ties
 *  to the earlier; runs and gaps only for n < 2^32) and the header at @p out. */
RS_DHD void rs_dk_enc_scan_d(const rs_dk_job_t *j, uint8_t *out)
{
    uint64_t gb = 0;
    for (int t = 0; t < RS_DK_SCAN; t++) {
        const uint64_t x = j->part[t].gb;
        j->part[t].gb = gb;
        gb += x;
    }
    rs_dk_total_t *T = j->total;
    T->gb = gb;
    const uint64_t w = j->word, nb = (j->n + 7) / 8;
    const uint64_t bitmap = nb + T->c * w, run = T->runs * 8 + T->c * w, gaps = gb + T->c * w;
    uint32_t kind = RS_DELTA_DENSE;
    uint64_t best = j->len;
    if (bitmap < best) {
        kind = RS_DELTA_BITMAP;
        best = bitmap;
    }
    if (j->n <= UINT32_MAX && run < best) {
        kind = RS_DELTA_RUNS;
        best = run;
    }
    if (j->n <= UINT32_MAX && gaps < best) {
        kind = RS_DELTA_GAPS;
        best = gaps;
    }
    T->kind = kind;
    T->body = best;
    const uint32_t nruns = kind == RS_DELTA_RUNS   ? (uint32_t)T->runs
                           : kind == RS_DELTA_GAPS ? (uint32_t)T->c
                                                   : 0;
    out[0] = (uint8_t)kind;
    out[1] = (uint8_t)w;
    out[2] = out[3] = 0;
    rs_dk_put_u32(out + 4, nruns);
    rs_dk_put_u32(out + 8, (uint32_t)best);
    rs_dk_put_u32(out + 12, (uint32_t)(best >> 32));
}

/** Step 2e, scan thread @p t: the groups' gaps prefixes. */
RS_DHD void rs_dk_enc_scan_e(const rs_dk_job_t *j, int t)
{
    uint64_t lo, hi, gb = j->part[t].gb;
    rs_dk_segment(j->groups, t, RS_DK_SCAN, &lo, &hi);
    for (uint64_t g = lo; g < hi; g++) {
        const uint64_t m = j->g[g].mask;
        j->g[g].gb_before = gb;
        if (m)
            gb += rs_dk_varint_len(g * RS_DK_GROUP + (uint64_t)rs_dk_ctz(m) - j->g[g].last_before) +
                  (uint64_t)rs_dk_pop(m) - 1;
    }
}

/** Step 3: group @p g's part of the body at @p out + 16, and the snapshot update. */
RS_DHD void rs_dk_enc_body(const rs_dk_job_t *j, const uint8_t *cur, uint8_t *prev, uint8_t *out,
                           uint64_t g)
{
    const rs_dk_group_t *G = &j->g[g];
    const rs_dk_total_t *T = j->total;
    const uint64_t w = j->word, nw = rs_dk_group_words(j, g), nb = (j->n + 7) / 8;
    const uint64_t m = G->mask, base = g * RS_DK_GROUP;
    uint8_t *body = out + RS_DELTA_HEADER_BYTES;
    if (T->kind == RS_DELTA_DENSE) {
        rs_dk_copy(body + base * w, cur + base * w, nw * w);
    } else if (T->kind == RS_DELTA_BITMAP) {
        const uint64_t bytes = nb - g * 8 < 8 ? nb - g * 8 : 8;
        for (uint64_t k = 0; k < bytes; k++)
            body[g * 8 + k] = (uint8_t)(m >> (8 * k));
        uint8_t *v = body + nb + G->c_before * w;
        for (uint64_t b = m; b; b &= b - 1, v += w)
            rs_dk_copy(v, cur + (base + (uint64_t)rs_dk_ctz(b)) * w, w);
    } else if (T->kind == RS_DELTA_RUNS) {
        uint8_t *v = body + T->runs * 8 + G->c_before * w;
        for (uint64_t b = m; b; b &= b - 1, v += w)
            rs_dk_copy(v, cur + (base + (uint64_t)rs_dk_ctz(b)) * w, w);
        uint64_t r = G->runs_before;
        for (uint64_t s = rs_dk_run_starts(j, g, m); s; s &= s - 1, r++) {
            const uint64_t start = base + (uint64_t)rs_dk_ctz(s);
            uint64_t end = start, gg = g; /* the run's end: the first unchanged word */
            for (;;) {
                const uint64_t rest = ~j->g[gg].mask >> (end - gg * RS_DK_GROUP);
                const uint64_t left = gg * RS_DK_GROUP + rs_dk_group_words(j, gg) - end;
                if (rest) {
                    const uint64_t k = (uint64_t)rs_dk_ctz(rest);
                    if (k < left) {
                        end += k;
                        break;
                    }
                }
                end += left;
                if (++gg == j->groups)
                    break;
            }
            rs_dk_put_u32(body + r * 8, (uint32_t)start);
            rs_dk_put_u32(body + r * 8 + 4, (uint32_t)(end - start));
        }
    } else { /* gaps */
        uint8_t *p = body + G->gb_before + G->c_before * w;
        uint64_t next = G->last_before;
        for (uint64_t b = m; b; b &= b - 1) {
            const uint64_t i = base + (uint64_t)rs_dk_ctz(b);
            uint64_t d = i - next;
            while (d >= 0x80) {
                *p++ = (uint8_t)(d | 0x80);
                d >>= 7;
            }
            *p++ = (uint8_t)d;
            rs_dk_copy(p, cur + i * w, w);
            p += w;
            next = i + 1;
        }
    }
    if (prev)
        for (uint64_t b = m; b; b &= b - 1) {
            const uint64_t i = base + (uint64_t)rs_dk_ctz(b);
            rs_dk_copy(prev + i * w, cur + i * w, w);
        }
}

/* ---- apply ---------------------------------------------------------------------------- */

/** The mask of bitmap group @p g of the body @p body (bits past the chunk included). */
RS_DHD uint64_t rs_dk_bitmap_mask(const rs_dk_job_t *j, const uint8_t *body, uint64_t g)
{
    const uint64_t nb = (j->n + 7) / 8, bytes = nb - g * 8 < 8 ? nb - g * 8 : 8;
    uint64_t m = 0;
    for (uint64_t k = 0; k < bytes; k++)
        m |= (uint64_t)body[g * 8 + k] << (8 * k);
    return m;
}

RS_DHD void rs_dk_fail(const rs_dk_job_t *j, uint32_t code, uint64_t a, uint64_t b)
{
    if (j->err->code == RS_DK_ERR_NONE) { /* racy between threads: any one is reported */
        j->err->code = code;
        j->err->a = a;
        j->err->b = b;
    }
}

/** Items of apply's count scan: bitmap groups, or runs. */
RS_DHD uint64_t rs_dk_apply_items(const rs_dk_job_t *j)
{
    return j->kind == RS_DELTA_BITMAP ? j->groups : j->nruns;
}

/** Apply step 1, item @p i: its count (the group's marked words, or the run's length);
 *  a marked word past the chunk, or a run that leaves it, is an error. */
RS_DHD void rs_dk_apply_count(const rs_dk_job_t *j, const uint8_t *body, uint64_t i)
{
    if (j->kind == RS_DELTA_BITMAP) {
        const uint64_t m = rs_dk_bitmap_mask(j, body, i), nw = rs_dk_group_words(j, i);
        if (nw < 64 && (m >> nw))
            rs_dk_fail(j, RS_DK_ERR_BITMAP_RANGE,
                       i * RS_DK_GROUP + nw + (uint64_t)rs_dk_ctz(m >> nw), 0);
        j->cnt[i] = (uint64_t)rs_dk_pop(nw < 64 ? m & (((uint64_t)1 << nw) - 1) : m);
    } else {
        const uint64_t start = rs_dk_get_u32(body + i * 8);
        const uint64_t count = rs_dk_get_u32(body + i * 8 + 4);
        if (start + count > j->n)
            rs_dk_fail(j, RS_DK_ERR_RUN_RANGE, i, 0);
        j->cnt[i] = count;
    }
}

/** Apply step 2a, scan thread @p t: its segment's sum. */
RS_DHD void rs_dk_apply_scan_a(const rs_dk_job_t *j, int t)
{
    uint64_t lo, hi, s = 0;
    rs_dk_segment(rs_dk_apply_items(j), t, RS_DK_SCAN, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++)
        s += j->cnt[i];
    j->part[t].c = s;
}

/** Apply step 2b, one thread: the parts' prefixes; the total against the values. */
RS_DHD void rs_dk_apply_scan_b(const rs_dk_job_t *j)
{
    uint64_t s = 0;
    for (int t = 0; t < RS_DK_SCAN; t++) {
        const uint64_t x = j->part[t].c;
        j->part[t].c = s;
        s += x;
    }
    const uint64_t head = j->kind == RS_DELTA_BITMAP ? (j->n + 7) / 8 : (uint64_t)j->nruns * 8;
    const uint64_t nv = (j->body - head) / j->word;
    if (s != nv)
        rs_dk_fail(j, j->kind == RS_DELTA_BITMAP ? RS_DK_ERR_BITMAP_COUNT : RS_DK_ERR_RUN_COUNT, s,
                   nv);
}

/** Apply step 2c, scan thread @p t: the items' exclusive prefixes. */
RS_DHD void rs_dk_apply_scan_c(const rs_dk_job_t *j, int t)
{
    uint64_t lo, hi, s = j->part[t].c;
    rs_dk_segment(rs_dk_apply_items(j), t, RS_DK_SCAN, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++) {
        const uint64_t x = j->cnt[i];
        j->cnt[i] = s;
        s += x;
    }
}

/** Apply step 3, item @p i (a dense group, a bitmap group or a run) onto @p chunk; nothing
 *  is written once an error was found (the host reads it before the chunk is used). */
RS_DHD void rs_dk_apply_item(const rs_dk_job_t *j, const uint8_t *body, uint8_t *chunk, uint64_t i)
{
    const uint64_t w = j->word;
    if (j->kind == RS_DELTA_DENSE) {
        rs_dk_copy(chunk + i * RS_DK_GROUP * w, body + i * RS_DK_GROUP * w,
                   rs_dk_group_words(j, i) * w);
        return;
    }
    if (j->err->code != RS_DK_ERR_NONE)
        return;
    if (j->kind == RS_DELTA_BITMAP) {
        const uint64_t nw = rs_dk_group_words(j, i);
        uint64_t m = rs_dk_bitmap_mask(j, body, i);
        m = nw < 64 ? m & (((uint64_t)1 << nw) - 1) : m;
        const uint8_t *v = body + (j->n + 7) / 8 + j->cnt[i] * w;
        for (; m; m &= m - 1, v += w)
            rs_dk_copy(chunk + (i * RS_DK_GROUP + (uint64_t)rs_dk_ctz(m)) * w, v, w);
        return;
    }
    const uint64_t start = rs_dk_get_u32(body + i * 8), count = rs_dk_get_u32(body + i * 8 + 4);
    rs_dk_copy(chunk + start * w, body + (uint64_t)j->nruns * 8 + j->cnt[i] * w, count * w);
}

/** Apply of a gaps body, sequentially (one thread). Every gap is checked before any word is
 *  written; an inconsistent body writes nothing. */
RS_DHD void rs_dk_apply_gaps(const rs_dk_job_t *j, const uint8_t *body, uint8_t *chunk)
{
    const uint64_t w = j->word;
    for (int pass = 0; pass < 2; pass++) {
        const uint8_t *g = body, *end = body + j->body;
        uint64_t next = 0;
        for (uint32_t q = 0; q < j->nruns; q++) {
            uint64_t d = 0;
            int shift = 0;
            uint8_t b = 0x80;
            while (b & 0x80) {
                if (g >= end || shift > 63) {
                    rs_dk_fail(j, RS_DK_ERR_GAP, q, 1);
                    return;
                }
                b = *g++;
                d |= (uint64_t)(b & 0x7f) << shift;
                shift += 7;
            }
            const uint64_t i = next + d;
            if ((uint64_t)(end - g) < w || d >= j->n || i >= j->n) {
                rs_dk_fail(j, RS_DK_ERR_GAP, q, 2);
                return;
            }
            if (pass)
                rs_dk_copy(chunk + i * w, g, w);
            g += w;
            next = i + 1;
        }
        if (g != end) {
            rs_dk_fail(j, RS_DK_ERR_GAP, (uint64_t)(end - g), 3);
            return;
        }
    }
}

/* ---- the chunk hash of delta verification on device memory ------------------------------
 * hash(chunk) = rs_dk_hash_final(sum over the chunk's 8-byte words i of rs_dk_hash_term), the
 * sum taken mod 2^64: any order of additions gives the same value, so the kernel sums per
 * thread, per block and then with one atomic add per block, and the CPU emulation in order.
 * Each term mixes the word with its index (a moved word changes the hash); the mixer is
 * splitmix64's finalizer, a bijection, so a chunk that differs in one word always hashes
 * differently, and in several words collides with probability about 2^-64. */

/** splitmix64's finalizer. */
RS_DHD uint64_t rs_dk_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/** The term of 8-byte word @p i of the @p len bytes at @p chunk (little-endian; the last
 *  word's missing bytes read as zero). */
RS_DHD uint64_t rs_dk_hash_term(const uint8_t *chunk, uint64_t len, uint64_t i)
{
    uint64_t w = 0;
    const uint64_t at = i * 8, n = len - at < 8 ? len - at : 8;
    for (uint64_t b = 0; b < n; b++)
        w |= (uint64_t)chunk[at + b] << (8 * b);
    return rs_dk_mix64(w + (i + 1) * 0x9e3779b97f4a7c15ull);
}

/** The hash of a chunk of @p len bytes whose terms sum to @p sum. */
RS_DHD uint64_t rs_dk_hash_final(uint64_t sum, uint64_t len)
{
    return rs_dk_mix64(sum ^ rs_dk_mix64(len));
}

#ifdef __cplusplus
extern "C" {
#endif

/** Device scratch bytes an encode or an apply of a chunk of @p len bytes needs. */
uint64_t rs_delta_dev_scratch_bytes(uint64_t len, uint32_t word);

/** The job of a chunk of @p len bytes of @p word-byte words over @p scratch (device memory
 *  of rs_delta_dev_scratch_bytes); for apply, header @p h (checked by rs_delta_header), else
 *  NULL. */
void rs_dk_job_init(rs_dk_job_t *j, uint64_t len, uint32_t word, const rs_delta_header_t *h,
                    void *scratch);

/** Encode as rs_delta_encode, on the CPU exactly as the kernels would (tests, the fake
 *  device); the header at @p out gives the size. */
void rs_delta_encode_emulate(const rs_dk_job_t *j, const uint8_t *cur, uint8_t *prev, uint8_t *out);

/** Apply encoded chunk @p in (header and body) as the kernels would; afterwards j->err says
 *  whether the body was consistent. */
void rs_delta_apply_emulate(const rs_dk_job_t *j, const uint8_t *in, uint8_t *chunk);

/** The sum of rs_dk_hash_term over the @p len bytes at @p chunk into *@p sum, on the CPU
 *  (tests, the fake device): what rs_delta_hash_launch's kernel writes. */
void rs_delta_hash_emulate(const uint8_t *chunk, uint64_t len, uint64_t *sum);

/** The error of an apply's record @p e (a host copy), naming @p what: OK when none. */
reshard_status_t rs_delta_apply_status(const rs_dk_err_t *e, const rs_dk_job_t *j,
                                       const char *what);

#ifdef __cplusplus
}
#endif

#endif
