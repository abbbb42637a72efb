/*
 * The delta codec's block passes: the work of encode and apply per block of 64 words, in a
 * portable implementation (delta_blocks_portable.c) and a vector one for x86-64 CPUs with
 * AVX-512 F/BW/VBMI/VBMI2 (delta_blocks_avx512.c), chosen at run time by rs_delta_encode and
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
    uint8_t *gaps_end;  /**< the end of the gaps encoding when it was written whole, else NULL */
} rs_delta_scan_t;

/** One implementation of the block passes. Chunks are n words of w (1, 2, 4, 8) bytes;
 *  a change bitmap has bit i % 8 of byte i / 8 set when word i changed (ceil(n / 8) bytes). */
typedef struct {
    const char *name; /**< "portable", "avx512" */
    /** Compare @p cur with @p prev word by word: the change bitmap to @p bm, the changed words
     *  into @p prev, the counts to *@p s (zeroed by the caller). Also written, to the body's
     *  front @p front (NULL: nothing) below @p bm (@p room bytes), while the chunk looks like
     *  it: the dense body (s->copied bytes of it) or the gaps encoding (s->gaps_end). */
    void (*scan)(const uint8_t *cur, uint8_t *prev, uint64_t n, uint32_t w, uint8_t *bm,
                 uint8_t *front, uint64_t room, rs_delta_scan_t *s);
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

/* Blocks a scan step may queue for their gaps records before they are written (drained). */
#define RS_GAP_QUEUE 64

/* Where the gaps encoding (docs/delta-reference.md) is being written: its end, the word after
 * the last changed word written, whether a scan step writes it; and the queue of vectors of
 * changed words whose records are not yet written (where the step batches them). */
typedef struct {
    uint8_t *g;
    uint64_t next;
    bool on;
    uint32_t nq;                     /* queued blocks */
    const uint8_t *qp[RS_GAP_QUEUE]; /* a block's words */
    uint64_t qi[RS_GAP_QUEUE];       /* the chunk's word index of its first word */
    uint64_t qm[RS_GAP_QUEUE];       /* its change mask */
} rs_gap_writer_t;

/* Bytes the records of a queued block may take: 64 words of @p w bytes, 1 byte of gap per word
 * and the first gap's varint of up to 10 bytes. */
#define RS_GAP_QUEUED_BYTES(w) (64 * ((uint64_t)(w) + 1) + 10)

/* Bytes a scan step may write past @p g when it writes a block's gaps: the block's records
 * (64 words, a varint of up to 10 bytes for the first, 1 byte for the others) and the slack of
 * whole-vector stores. */
#define RS_GAP_SLACK(w) (64 * ((uint64_t)(w) + 1) + 256)

/* Append to @p gw the gaps records of the words of the block at word @p i that @p m marks; the
 * block's words are at @p cur (@p w bytes each). */
static inline void rs_gaps_block(rs_gap_writer_t *gw, const uint8_t *cur, uint64_t m, uint64_t i,
                                 uint32_t w)
{
    uint8_t *g = gw->g;
    for (; m; m &= m - 1) {
        uint64_t k = (uint64_t)__builtin_ctzll(m), d = i + k - gw->next;
        while (d >= 0x80) {
            *g++ = (uint8_t)(d | 0x80);
            d >>= 7;
        }
        *g++ = (uint8_t)d;
        rs_copy_word(g, cur + k * w, w);
        g += w;
        gw->next = i + k + 1;
    }
    gw->g = g;
}

/* The step of a scan over one whole block of 64 words, word @p i of the chunk: returns its
 * change mask, writes its changed words into @p prev, appends its gaps records to @p gw when
 * gw->on, or queues the block for them (at most 8 queue entries a step). */
typedef uint64_t (*rs_delta_scan_step)(const uint8_t *cur, uint8_t *prev, rs_gap_writer_t *gw,
                                       uint64_t i, uint32_t w);

/* Words of a chunk copied to the dense body at a time while the scan finds it dense (the
 * segment just compared is still in cache). */
#define RS_DENSE_SEGMENT 2048u

/* Write the records of the vectors queued in @p gw, in order, and empty the queue. */
typedef void (*rs_delta_scan_drain)(rs_gap_writer_t *gw);

/* rs_delta_blocks_t.scan with @p step for whole blocks, for one word size @p w (a constant). What
 * the body's front gets is chosen by the first block: the dense copy when it has at least 15
 * changed words in 16, else the gaps encoding (scattered changes); either stops when the chunk
 * stops looking like it. */
static inline __attribute__((always_inline)) void
rs_delta_scan_loop(rs_delta_scan_step step, rs_delta_scan_drain drain, const uint8_t *cur,
                   uint8_t *prev, uint64_t n, uint32_t w, uint8_t *bm, uint8_t *front,
                   uint64_t room, rs_delta_scan_t *out)
{
    rs_delta_scan_t t = *out, *s = &t; /* in registers */
    uint64_t whole = n / 64 * 64, n0 = n < 64 ? n : 64;
    bool dense = front && rs_pop64(rs_mask_words(cur, prev, w, n0)) * 16 >= n0 * 15;
    rs_gap_writer_t gw;
    gw.g = front;
    gw.next = 0;
    gw.on = front && !dense;
    gw.nq = 0;
    for (uint64_t i = 0; i < whole; i += 64) {
        bool d = dense && (i + 64) * w <= room;
        if (gw.nq > RS_GAP_QUEUE - 8)
            drain(&gw);
        gw.on = gw.on && (uint64_t)(bm - gw.g) >= RS_GAP_SLACK(w) + gw.nq * RS_GAP_QUEUED_BYTES(w);
        uint64_t m = step(cur + i * w, prev + i * w, &gw, i, w);
        memcpy(bm + i / 8, &m, 8); /* little-endian: bit i of byte i / 8 */
        rs_delta_count(s, m, i, 64);
        if (d && (i + 64) % RS_DENSE_SEGMENT == 0) { /* while the segment is in cache */
            memcpy(front + s->copied, cur + s->copied, (size_t)((i + 64) * w - s->copied));
            s->copied = (i + 64) * w;
        }
        dense = d && s->changed * 16 >= (i + 64) * 15;
        /* gaps beat the bitmap only below 1 changed word in 8 (a varint is >= 1 byte) */
        gw.on = gw.on && s->changed * 10 <= i + 64;
    }
    if (whole < n) {
        uint64_t nw = n - whole, m = rs_mask_words(cur + whole * w, prev + whole * w, w, nw);
        memcpy(bm + whole / 8, &m, (nw + 7) / 8);
        if (gw.on)
            drain(&gw);
        gw.on = gw.on && (uint64_t)(bm - gw.g) >= RS_GAP_SLACK(w);
        if (gw.on)
            rs_gaps_block(&gw, cur + whole * w, m, whole, w);
        if (m)
            memcpy(prev + whole * w, cur + whole * w, (size_t)(nw * w));
        rs_delta_count(s, m, whole, nw);
    }
    if (gw.on)
        drain(&gw);
    s->gaps_end = gw.on ? gw.g : NULL;
    *out = t;
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
 * word size @p w (a constant). */
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

/* rs_delta_blocks_t.scatter with @p step for whole blocks, for one word size @p w (a constant).
 */
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

/* The statement @p stmt with W the word size @p w (1, 2, 4 or 8) as a constant: each loop is
 * instantiated per word size, so that the inlined steps' switches on it fold away. */
#define RS_DELTA_BY_WORD(w, stmt)                                                                  \
    do {                                                                                           \
        if ((w) == 2) {                                                                            \
            const uint32_t W = 2;                                                                  \
            stmt;                                                                                  \
        } else if ((w) == 4) {                                                                     \
            const uint32_t W = 4;                                                                  \
            stmt;                                                                                  \
        } else if ((w) == 8) {                                                                     \
            const uint32_t W = 8;                                                                  \
            stmt;                                                                                  \
        } else {                                                                                   \
            const uint32_t W = 1;                                                                  \
            stmt;                                                                                  \
        }                                                                                          \
    } while (0)

/* Defines `const rs_delta_blocks_t *fn(void)`, the implementation called @p label whose
 * steps are the file's static scan_step, scan_drain, gather_step and scatter_step. */
#define RS_DELTA_BLOCKS_DEFINE(fn, label)                                                          \
    static void fn##_scan(const uint8_t *cur, uint8_t *prev, uint64_t n, uint32_t w, uint8_t *bm,  \
                          uint8_t *front, uint64_t room, rs_delta_scan_t *s)                       \
    {                                                                                              \
        RS_DELTA_BY_WORD(                                                                          \
            w, rs_delta_scan_loop(scan_step, scan_drain, cur, prev, n, W, bm, front, room, s));    \
    }                                                                                              \
    static uint8_t *fn##_gather(const uint8_t *cur, const uint8_t *bm, uint64_t n, uint32_t w,     \
                                uint8_t *v, const uint8_t *end)                                    \
    {                                                                                              \
        RS_DELTA_BY_WORD(w, v = rs_delta_gather_loop(gather_step, cur, bm, n, W, v, end));         \
        return v;                                                                                  \
    }                                                                                              \
    static bool fn##_scatter(uint8_t *chunk, const uint8_t *bm, uint64_t n, uint32_t w,            \
                             const uint8_t *v, uint64_t nv)                                        \
    {                                                                                              \
        bool ok = false;                                                                           \
        RS_DELTA_BY_WORD(w, ok = rs_delta_scatter_loop(scatter_step, chunk, bm, n, W, v, nv));     \
        return ok;                                                                                 \
    }                                                                                              \
    const rs_delta_blocks_t *fn(void)                                                              \
    {                                                                                              \
        static const rs_delta_blocks_t ops = {label, fn##_scan, fn##_gather, fn##_scatter};        \
        return &ops;                                                                               \
    }

#endif
