/*
 * The delta codec's block passes: the work of encode and apply per block of 64 words, in a
 * portable implementation (delta_blocks_portable.c) and a vector one for x86-64 CPUs with
 * AVX-512 F/BW/VBMI2 (delta_blocks_avx512.c), chosen at run time by rs_delta_encode and
 * rs_delta_apply (delta_codec.c). Each implementation instantiates the loops below with its
 * own per-block step, so the bookkeeping between blocks is written once.
 */
#ifndef RS_EXEC_DELTA_BLOCKS_H
#define RS_EXEC_DELTA_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/** What a scan of a chunk found, as the kind choice needs it (all counts in words). */
typedef struct {
    uint64_t changed;   /**< changed words */
    uint64_t runs;      /**< maximal runs of changed words */
    uint64_t gap_bytes; /**< bytes of the gaps encoding's varints (its values excluded) */
    uint64_t next;      /**< the word after the last changed word so far (0: none yet) */
    uint64_t carry;     /**< 1 when the last word scanned changed */
    uint64_t copied;    /**< bytes of the chunk copied to the dense body, from its start */
} rs_delta_scan_t;

/** One implementation of the block passes. Chunks are n words of w (1, 2, 4, 8) bytes;
 *  a change bitmap has bit i % 8 of byte i / 8 set when word i changed (ceil(n / 8) bytes). */
typedef struct {
    const char *name; /**< "portable", "avx512" */
    /** Compare @p cur with @p prev word by word: the change bitmap to @p bm, the changed words
     *  into @p prev, the counts to *@p s (zeroed by the caller). While every word so far but
     *  1 in 16 changed (the chunk will likely be dense), whole blocks of @p cur are also copied
     *  to @p dense (NULL: never) below byte @p room; s->copied says how far. */
    void (*scan)(const uint8_t *cur, uint8_t *prev, uint64_t n, uint32_t w, uint8_t *bm,
                 uint8_t *dense, uint64_t room, rs_delta_scan_t *s);
    /** The words of @p cur that @p bm marks, in order, to @p v; nothing at or past @p end is
     *  written. Returns the end of what was written. */
    uint8_t *(*gather)(const uint8_t *cur, const uint8_t *bm, uint64_t n, uint32_t w, uint8_t *v,
                       const uint8_t *end);
    /** The inverse: the @p nv words at @p v to the words of @p chunk that @p bm marks. False
     *  (@p chunk partly written, nothing read past the nv words) when @p bm marks a word past
     *  n or other than nv words. */
    bool (*scatter)(uint8_t *chunk, const uint8_t *bm, uint64_t n, uint32_t w, const uint8_t *v,
                    uint64_t nv);
} rs_delta_blocks_t;

/** The portable implementation; the AVX-512 one, or NULL when this build has none. */
const rs_delta_blocks_t *rs_delta_blocks_portable(void);
const rs_delta_blocks_t *rs_delta_blocks_avx512(void);

/* ---- shared by the implementations: inline, compiled with each file's target ---------- */

/* Set bits of @p x, inline (without -mpopcnt the builtin is a library call). */
static inline uint64_t rs_pop64(uint64_t x)
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

/* Bytes of @p x as a LEB128 varint (7 bits a byte, low first, top bit: more). */
static inline uint64_t rs_varint_len(uint64_t x)
{
    uint64_t n = 1 + (uint64_t)(x > 0x7f) + (uint64_t)(x > 0x3fff) + (uint64_t)(x > 0x1fffff) +
                 (uint64_t)(x > 0xfffffff);
    for (x >>= 35; x; x >>= 7) /* past 2^35: chunks of 32 GiB and more */
        n++;
    return n;
}

/* One word of @p w bytes (fixed-size copies: plain moves, no call). */
static inline void rs_copy_word(uint8_t *d, const uint8_t *s, uint32_t w)
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

/* The change mask of the @p nw (<= 64) words at @p a against @p b, word by word: bit i set
 * when word i differs. For a chunk's last, partial block. */
static inline uint64_t rs_mask_words(const uint8_t *a, const uint8_t *b, uint32_t w, uint64_t nw)
{
    uint64_t m = 0;
    for (uint64_t i = 0; i < nw; i++)
        if (memcmp(a + i * w, b + i * w, w) != 0)
            m |= (uint64_t)1 << i;
    return m;
}

/* Add the block of @p nw words starting at word @p i, change mask @p m, to *@p s. Without
 * a branch on m: half the blocks of a chunk with 1% changed words have a change. */
static inline void rs_delta_count(rs_delta_scan_t *s, uint64_t m, uint64_t i, uint64_t nw)
{
    uint64_t p = rs_pop64(m), any = m != 0;
    uint64_t first = i + (uint64_t)__builtin_ctzll(m | (uint64_t)1 << 63);
    uint64_t last = i + 63 - (uint64_t)__builtin_clzll(m | 1);
    s->changed += p;
    s->runs += rs_pop64(m & ~((m << 1) | s->carry));
    /* the first change's gap from the previous block; inside a block every gap is < 64 */
    s->gap_bytes += any ? rs_varint_len(first - s->next) + p - 1 : 0;
    s->next = any ? last + 1 : s->next;
    s->carry = (m >> (nw - 1)) & 1;
}

/* The step of a scan over one whole block of 64 words: returns its change mask, writes its
 * changed words into @p prev, copies it to @p dense unless NULL. */
typedef uint64_t (*rs_delta_scan_step)(const uint8_t *cur, uint8_t *prev, uint8_t *dense,
                                       uint32_t w);

/* rs_delta_blocks_t.scan with @p step for whole blocks, for one word size @p w. */
static inline __attribute__((always_inline)) void
rs_delta_scan_loop(rs_delta_scan_step step, const uint8_t *cur, uint8_t *prev, uint64_t n,
                   uint32_t w, uint8_t *bm, uint8_t *dense, uint64_t room, rs_delta_scan_t *s)
{
    uint64_t whole = n / 64 * 64;
    for (uint64_t i = 0; i < whole; i += 64) {
        uint8_t *d = dense && (i + 64) * w <= room ? dense + i * w : NULL;
        uint64_t m = step(cur + i * w, prev + i * w, d, w);
        memcpy(bm + i / 8, &m, 8); /* little-endian: bit i of byte i / 8 */
        rs_delta_count(s, m, i, 64);
        s->copied = d ? (i + 64) * w : s->copied;
        dense = d && s->changed * 16 >= (i + 64) * 15 ? dense : NULL;
    }
    if (whole < n) {
        uint64_t nw = n - whole, m = rs_mask_words(cur + whole * w, prev + whole * w, w, nw);
        memcpy(bm + whole / 8, &m, (nw + 7) / 8);
        if (m)
            memcpy(prev + whole * w, cur + whole * w, (size_t)(nw * w));
        rs_delta_count(s, m, whole, nw);
    }
}

/* The change mask of the block of @p nw words at word @p i of the bitmap @p bm. */
static inline uint64_t rs_bitmap_block(const uint8_t *bm, uint64_t i, uint64_t nw)
{
    uint64_t m = 0;
    memcpy(&m, bm + i / 8, nw == 64 ? 8 : (size_t)(nw + 7) / 8);
    return nw == 64 ? m : m & (((uint64_t)1 << nw) - 1);
}

/* The step of a gather over one whole block: the words of @p cur that @p m marks to @p v;
 * returns the end of what it wrote (it may write up to 64 w bytes from @p v). */
typedef uint8_t *(*rs_delta_gather_step)(const uint8_t *cur, uint64_t m, uint32_t w, uint8_t *v);

/* rs_delta_blocks_t.gather with @p step for whole blocks that have room for its writes, for one
 * word size @p w. */
static inline __attribute__((always_inline)) uint8_t *
rs_delta_gather_loop(rs_delta_gather_step step, const uint8_t *cur, const uint8_t *bm, uint64_t n,
                     uint32_t w, uint8_t *v, const uint8_t *end)
{
    for (uint64_t i = 0; i < n; i += 64) {
        uint64_t nw = n - i < 64 ? n - i : 64, m = rs_bitmap_block(bm, i, nw);
        if (nw == 64 && end - v >= 64 * (int64_t)w) {
            v = step(cur + i * w, m, w, v);
            continue;
        }
        for (; m; m &= m - 1, v += w)
            rs_copy_word(v, cur + (i + (uint64_t)__builtin_ctzll(m)) * w, w);
    }
    return v;
}

/* The step of a scatter over one whole block: the words at @p v to the words of @p chunk that
 * @p m marks; reads exactly popcount(m) words. */
typedef void (*rs_delta_scatter_step)(uint8_t *chunk, uint64_t m, uint32_t w, const uint8_t *v);

/* rs_delta_blocks_t.scatter with @p step for whole blocks, for one word size @p w. */
static inline __attribute__((always_inline)) bool
rs_delta_scatter_loop(rs_delta_scatter_step step, uint8_t *chunk, const uint8_t *bm, uint64_t n,
                      uint32_t w, const uint8_t *v, uint64_t nv)
{
    uint64_t k = 0, nb = (n + 7) / 8;
    if (n % 8 && bm[nb - 1] >> (n % 8))
        return false; /* a bit past the last word */
    for (uint64_t i = 0; i < n; i += 64) {
        uint64_t nw = n - i < 64 ? n - i : 64, m = rs_bitmap_block(bm, i, nw), p = rs_pop64(m);
        if (k + p > nv)
            return false;
        if (nw == 64)
            step(chunk + i * w, m, w, v + k * w);
        else
            for (const uint8_t *s = v + k * w; m; m &= m - 1, s += w)
                rs_copy_word(chunk + (i + (uint64_t)__builtin_ctzll(m)) * w, s, w);
        k += p;
    }
    return k == nv;
}

/* The passes of an implementation from its steps: each loop instantiated per word size, so
 * that the steps' switches on w fold away. */
static inline __attribute__((always_inline)) void
rs_delta_scan_with(rs_delta_scan_step step, const uint8_t *cur, uint8_t *prev, uint64_t n,
                   uint32_t w, uint8_t *bm, uint8_t *dense, uint64_t room, rs_delta_scan_t *s)
{
    switch (w) {
    case 2:
        rs_delta_scan_loop(step, cur, prev, n, 2, bm, dense, room, s);
        break;
    case 4:
        rs_delta_scan_loop(step, cur, prev, n, 4, bm, dense, room, s);
        break;
    case 8:
        rs_delta_scan_loop(step, cur, prev, n, 8, bm, dense, room, s);
        break;
    default:
        rs_delta_scan_loop(step, cur, prev, n, 1, bm, dense, room, s);
    }
}

static inline __attribute__((always_inline)) uint8_t *
rs_delta_gather_with(rs_delta_gather_step step, const uint8_t *cur, const uint8_t *bm, uint64_t n,
                     uint32_t w, uint8_t *v, const uint8_t *end)
{
    switch (w) {
    case 2:
        return rs_delta_gather_loop(step, cur, bm, n, 2, v, end);
    case 4:
        return rs_delta_gather_loop(step, cur, bm, n, 4, v, end);
    case 8:
        return rs_delta_gather_loop(step, cur, bm, n, 8, v, end);
    default:
        return rs_delta_gather_loop(step, cur, bm, n, 1, v, end);
    }
}

static inline __attribute__((always_inline)) bool
rs_delta_scatter_with(rs_delta_scatter_step step, uint8_t *chunk, const uint8_t *bm, uint64_t n,
                      uint32_t w, const uint8_t *v, uint64_t nv)
{
    switch (w) {
    case 2:
        return rs_delta_scatter_loop(step, chunk, bm, n, 2, v, nv);
    case 4:
        return rs_delta_scatter_loop(step, chunk, bm, n, 4, v, nv);
    case 8:
        return rs_delta_scatter_loop(step, chunk, bm, n, 8, v, nv);
    default:
        return rs_delta_scatter_loop(step, chunk, bm, n, 1, v, nv);
    }
}

/* Defines `const rs_delta_blocks_t *fn(void)`, the implementation called @p label whose
 * steps are the file's static scan_step, gather_step and scatter_step. */
#define RS_DELTA_BLOCKS_DEFINE(fn, label)                                                          \
    static void fn##_scan(const uint8_t *cur, uint8_t *prev, uint64_t n, uint32_t w, uint8_t *bm,  \
                          uint8_t *dense, uint64_t room, rs_delta_scan_t *s)                       \
    {                                                                                              \
        rs_delta_scan_with(scan_step, cur, prev, n, w, bm, dense, room, s);                        \
    }                                                                                              \
    static uint8_t *fn##_gather(const uint8_t *cur, const uint8_t *bm, uint64_t n, uint32_t w,     \
                                uint8_t *v, const uint8_t *end)                                    \
    {                                                                                              \
        return rs_delta_gather_with(gather_step, cur, bm, n, w, v, end);                           \
    }                                                                                              \
    static bool fn##_scatter(uint8_t *chunk, const uint8_t *bm, uint64_t n, uint32_t w,            \
                             const uint8_t *v, uint64_t nv)                                        \
    {                                                                                              \
        return rs_delta_scatter_with(scatter_step, chunk, bm, n, w, v, nv);                        \
    }                                                                                              \
    const rs_delta_blocks_t *fn(void)                                                              \
    {                                                                                              \
        static const rs_delta_blocks_t ops = {label, fn##_scan, fn##_gather, fn##_scatter};        \
        return &ops;                                                                               \
    }

#endif
