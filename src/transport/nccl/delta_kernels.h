/*
 * The delta chunk encoding (docs/delta-reference.md, the format of src/exec/delta_codec.c) on
 * device memory: the NCCL transport's encode and apply. The per-word, per-group, per-tile and
 * per-segment steps live here as host/device functions, shared by the CUDA kernels
 * (delta_kernels.cu, which map them to lanes, warps and blocks) and the CPU emulation the fake
 * device and the tests run (delta_kernels.c, which runs the same steps in order), so the logic
 * that runs on the GPU is the logic the CPU tests check byte for byte against rs_delta_encode.
 *
 * Words are grouped by RS_DK_GROUP (64: one mask bit each), groups by RS_DK_TILE_GROUPS into
 * tiles (one CUDA block each). Every count the encoding needs is a sum of rs_dk_sum_t, an
 * associative combine (rs_dk_sum_add): changed words, runs, the first and last changed word
 * and the gaps bytes between them, so any grouping of the additions gives the same totals.
 *
 * Encode, four launches on one stream, no host round trip:
 *   1. tiles:  per tile, warps compare 16-byte units lane by lane into group masks (an OR
 *              across the group's lanes), one thread per group sums its mask, the block
 *              reduces the groups: the masks and the tile's sum.
 *   2. scan:   one block of RS_DK_SCAN threads: the tiles' exclusive prefixes (each thread a
 *              contiguous segment, a block scan over the threads), the total, the kind (the
 *              smallest, ties to the earlier: the CPU codec's rule) and the header.
 *   3. body:   per tile, a block scan of the groups' sums from the tile's prefix; then one
 *              thread per word writes its part of the chosen kind at the scanned offsets
 *              (a value, a bitmap byte, a run's start or end, a gap and its value) and the
 *              snapshot takes the changed words.
 *   4. runs:   one thread per run turns the run's end (written in 3) into its length.
 * Apply (the header on the host, so the kind is known at launch):
 *   dense:   one device copy.
 *   bitmap:  per tile the groups' marked words summed, the scan, per tile a block scan of the
 *            groups and one thread per word copies its value.
 *   runs:    per tile of RS_DK_TILE runs the lengths summed, the scan, per tile a block scan
 *            into each run's first value; one thread per value finds its run (binary search).
 *   gaps:    the body cut into segments; one thread per (segment, entry offset into it < E)
 *            parses the entries starting in the segment from that offset (where the next
 *            segment's first entry starts, entries, index advance); these maps compose:
 *            per block of RS_DK_GBLK segments a log-step scan in shared memory, then one
 *            block scans the blocks' maps the same way and checks the whole body; one
 *            thread per segment composes its block's prefix with its own and writes.
 * Inconsistent bodies are recorded in an error record before any word is written; the host
 * reads it after the stream.
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

#ifdef __cplusplus
extern "C" {
#endif
/** The emulation's strict checks (delta_kernels.c): a failed one names itself and aborts. */
void rs_dk_check_failed(const char *what, const char *file, int line);
#ifdef __cplusplus
}
#endif

/* RS_DK_CHECK(cond): on the CPU (the emulation the fake device and the tests run) every
 * scratch index inside its region, every chunk, snapshot and body access inside its buffer,
 * every wide access aligned to its size, every launch's grid within CUDA's limits; a failure
 * aborts naming the condition. On the device it compiles to nothing: the same source the
 * emulation checked is what runs. */
#if defined(__CUDA_ARCH__)
#define RS_DK_CHECK(c) ((void)0)
#else
#define RS_DK_CHECK(c) ((c) ? (void)0 : rs_dk_check_failed(#c, __FILE__, __LINE__))
#endif

/** Words per group (one bit each in a 64-bit mask). */
#define RS_DK_GROUP 64
/** Groups per tile. */
#define RS_DK_TILE_GROUPS 64
/** Words per tile (runs per tile in a runs apply). */
#define RS_DK_TILE (RS_DK_GROUP * RS_DK_TILE_GROUPS)
/** Threads of a tile's block. */
#define RS_DK_THREADS 256
/** Threads of the scan block. */
#define RS_DK_SCAN 1024
/** Gaps apply: segments per resolve block (its threads, a power of two), and so blocks at
 *  most (segments at most RS_DK_GBLK^2); the smallest segment in bytes (>= RS_DK_MAX_ENTRY:
 *  an entry never passes over a whole segment). */
#define RS_DK_GBLK 128
#define RS_DK_GBLK_ROUNDS 7
#define RS_DK_SEG_MIN 32
/** Gaps apply: entry offsets into a segment (10 varint bytes + the largest word). */
#define RS_DK_MAX_ENTRY 18

/** A sum of words (a group, a tile, a prefix): changed words, run starts, 1 + the first and
 *  1 + the last changed word (0: none) and the gaps bytes of its changed words but the first
 *  (whose gap depends on what came before). Apply uses c only. */
typedef struct {
    uint64_t c, runs, first, last, gbi;
} rs_dk_sum_t;

/** The total and the choice of one encode (the scan's last step). */
typedef struct {
    rs_dk_sum_t s;
    uint32_t kind;
    uint64_t body;
} rs_dk_total_t;

/** Gaps apply: the parse of a segment from one entry offset, or a composition of them (12
 *  bytes: a resolve block's 128 tables of 18 fit in 27 KiB of shared memory). adv and cnt
 *  fit 32 bits: a gaps chunk has n < 2^32 words, an advance past n is an error (err 2), and
 *  every entry advances at least one word (cnt <= adv). */
typedef struct {
    uint32_t adv; /**< index advance: the entries' gaps plus their count (<= n) */
    uint32_t cnt; /**< entries */
    uint8_t exit; /**< the next entry's offset into the segment after (< RS_DK_MAX_ENTRY) */
    uint8_t err;  /**< 0, else 1 (past the body) or 2 (a gap past the chunk) */
    uint8_t pad[2];
} rs_dk_gs_t;

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
    RS_DK_ERR_GAP = 5,          /* a: entries, b: 1 past its body, 2 past the chunk, 3 count */
};

/** One encode or apply: plain data, passed to the kernels by value. */
typedef struct {
    uint64_t len, n, groups, tiles; /**< bytes, words, groups, tiles of the chunk */
    uint32_t word;
    uint32_t apply; /**< 0 encode, 1 apply */
    /* apply: the header */
    uint32_t kind, nruns;
    uint64_t body;
    uint64_t items;     /**< tiles the scan runs over: word tiles, or run tiles (runs apply) */
    uint64_t seg, segs; /**< gaps apply: bytes per segment, segments */
    /* scratch (device memory; rs_delta_dev_scratch_bytes) */
    rs_dk_total_t *total;
    rs_dk_err_t *err;
    rs_dk_sum_t *tile; /**< per scan item: its sum, then its exclusive prefix */
    uint64_t *mask;    /**< encode: per group */
    uint64_t *cnt;     /**< runs apply: per run, its first value */
    rs_dk_gs_t *gtab;  /**< gaps apply: per segment, RS_DK_MAX_ENTRY parses; after the block
                            resolve, each segment's table composed from its block's first */
    rs_dk_gs_t *gblk;  /**< gaps apply: per resolve block, its table; then composed from the
                            first block's */
    /* the regions' capacities in entries (rs_delta_dev_scratch_bytes's layout): what the
     * emulation's checks hold every index to */
    uint64_t cap_tile, cap_mask, cap_cnt, cap_gtab, cap_gblk;
    uint64_t scratch_bytes; /**< the layout's total */
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

/** Bits below bit @p b (b < 64). */
RS_DHD uint64_t rs_dk_below(uint64_t b)
{
    return ((uint64_t)1 << b) - 1;
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

/** One word of @p w bytes (1, 2, 4 or 8): a single access when both ends are aligned. */
RS_DHD void rs_dk_copy_word(uint8_t *d, const uint8_t *s, uint32_t w)
{
    const uintptr_t a = (uintptr_t)d | (uintptr_t)s;
    RS_DK_CHECK(d != NULL && s != NULL && (w == 1 || w == 2 || w == 4 || w == 8));
    if (w == 8 && a % 8 == 0)
        *(uint64_t *)(void *)d = *(const uint64_t *)(const void *)s;
    else if (w == 4 && a % 4 == 0)
        *(uint32_t *)(void *)d = *(const uint32_t *)(const void *)s;
    else if (w == 2 && a % 2 == 0)
        *(uint16_t *)(void *)d = *(const uint16_t *)(const void *)s;
    else
        rs_dk_copy(d, s, w);
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

/** Items [*lo, *hi) of thread @p t of @p nt over @p items (contiguous, balanced). */
RS_DHD void rs_dk_segment(uint64_t items, int t, int nt, uint64_t *lo, uint64_t *hi)
{
    const uint64_t per = (items + (uint64_t)nt - 1) / (uint64_t)nt;
    *lo = per * (uint64_t)t < items ? per * (uint64_t)t : items;
    *hi = *lo + per < items ? *lo + per : items;
}

/* ---- launch sizes (delta_kernels.cu launches these; the emulation checks them) ----------- */

/** CUDA's limit on gridDim.x (every launch here is one-dimensional). */
#define RS_DK_MAX_GRID_X 2147483647ull

/** Blocks of RS_DK_THREADS for @p items threads of a grid-stride loop (at least 1, at most
 *  2^20: the loops take the rest). */
RS_DHD uint64_t rs_dk_grid_of(uint64_t items)
{
    const uint64_t b = (items + RS_DK_THREADS - 1) / RS_DK_THREADS, most = (uint64_t)1 << 20;
    return b < most ? (b ? b : 1) : most;
}

/** Blocks of encode's run-length launch (grid-stride over the runs; most runs exit at once). */
RS_DHD uint64_t rs_dk_grid_runs(const rs_dk_job_t *j)
{
    const uint64_t b = rs_dk_grid_of(j->n / 2 + 1);
    return b < 1024 ? b : 1024;
}

/* ---- the sum ---------------------------------------------------------------------------- */

/** @p a then @p b (a before b in the chunk): associative, the zero sum its identity. */
RS_DHD rs_dk_sum_t rs_dk_sum_add(rs_dk_sum_t a, rs_dk_sum_t b)
{
    rs_dk_sum_t r;
    r.c = a.c + b.c;
    r.runs = a.runs + b.runs;
    r.first = a.first ? a.first : b.first;
    r.last = b.last ? b.last : a.last;
    r.gbi = a.gbi + b.gbi + (a.last && b.first ? rs_dk_varint_len(b.first - 1 - a.last) : 0);
    return r;
}

/** Gaps bytes of the changed words of a prefix @p p (the first one's gap from word 0). */
RS_DHD uint64_t rs_dk_sum_gb(rs_dk_sum_t p)
{
    return p.gbi + (p.first ? rs_dk_varint_len(p.first - 1) : 0);
}

/** The sum of group @p g with mask @p m, @p carry the word before it changed (0 or 1). */
RS_DHD rs_dk_sum_t rs_dk_group_sum(uint64_t g, uint64_t m, uint64_t carry)
{
    rs_dk_sum_t s;
    const uint64_t base = g * RS_DK_GROUP;
    s.c = (uint64_t)rs_dk_pop(m);
    s.runs = (uint64_t)rs_dk_pop(m & ~((m << 1) | carry));
    s.first = m ? base + (uint64_t)rs_dk_ctz(m) + 1 : 0;
    s.last = m ? base + 64 - (uint64_t)rs_dk_clz(m) : 0;
    s.gbi = m ? s.c - 1 : 0; /* gaps inside a group are < 64: one byte */
    return s;
}

/** Groups [*lo, *hi) of tile @p t. */
RS_DHD void rs_dk_tile_groups(const rs_dk_job_t *j, uint64_t t, uint64_t *lo, uint64_t *hi)
{
    *lo = t * RS_DK_TILE_GROUPS;
    *hi = *lo + RS_DK_TILE_GROUPS < j->groups ? *lo + RS_DK_TILE_GROUPS : j->groups;
}

/* ---- encode --------------------------------------------------------------------------- */

/** Step 1, one lane: the change bits of the 16/w words of 16-byte unit @p u (bit k: word
 *  16u/w + k; words past the chunk 0; every word without a snapshot @p prev). */
RS_DHD uint32_t rs_dk_unit_bits(const rs_dk_job_t *j, const uint8_t *cur, const uint8_t *prev,
                                uint64_t u)
{
    const uint32_t w = j->word, per = 16 / w;
    const uint64_t bytes = j->n * w, at = u * 16;
    if (at >= bytes)
        return 0;
    const uint64_t words = (bytes - at) / w < per ? (bytes - at) / w : per;
    const uint32_t all = (uint32_t)(((uint64_t)1 << words) - 1);
    if (!prev)
        return all;
    /* the 16 bytes' differences in x0 (bytes 0-7) and x1 (8-15), little-endian, read in
     * the widest accesses both bases allow: a chunk starts at any word of its tensor, so
     * cur and prev are 16-byte aligned only by chance (bf16: one chunk in eight) */
    uint64_t x0 = 0, x1 = 0;
    const uintptr_t al = ((uintptr_t)cur | (uintptr_t)prev) & 15;
    const uint8_t *c = cur + at, *q = prev + at;
    if (bytes - at >= 16 && al % 8 == 0) {
        RS_DK_CHECK(((uintptr_t)c | (uintptr_t)q) % 8 == 0 && at + 16 <= j->len);
        const uint64_t *a = (const uint64_t *)(const void *)c,
                       *b = (const uint64_t *)(const void *)q;
        x0 = a[0] ^ b[0];
        x1 = a[1] ^ b[1];
    } else if (bytes - at >= 16 && al % 4 == 0) {
        RS_DK_CHECK(((uintptr_t)c | (uintptr_t)q) % 4 == 0 && at + 16 <= j->len);
        const uint32_t *a = (const uint32_t *)(const void *)c,
                       *b = (const uint32_t *)(const void *)q;
        x0 = (uint64_t)(a[0] ^ b[0]) | (uint64_t)(a[1] ^ b[1]) << 32;
        x1 = (uint64_t)(a[2] ^ b[2]) | (uint64_t)(a[3] ^ b[3]) << 32;
    } else if (bytes - at >= 16 && al % 2 == 0) {
        RS_DK_CHECK(((uintptr_t)c | (uintptr_t)q) % 2 == 0 && at + 16 <= j->len);
        const uint16_t *a = (const uint16_t *)(const void *)c,
                       *b = (const uint16_t *)(const void *)q;
        for (int k = 0; k < 4; k++) {
            x0 |= (uint64_t)(uint16_t)(a[k] ^ b[k]) << (16 * k);
            x1 |= (uint64_t)(uint16_t)(a[k + 4] ^ b[k + 4]) << (16 * k);
        }
    } else {
        RS_DK_CHECK(at + words * w <= j->len);
        for (uint64_t k = 0; k < words * w; k++) {
            const uint64_t d = (uint64_t)(c[k] ^ q[k]);
            if (k < 8)
                x0 |= d << (8 * k);
            else
                x1 |= d << (8 * (k - 8));
        }
    }
    const uint64_t wm = w == 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * w)) - 1;
    uint32_t bits = 0;
    for (uint32_t k = 0; k < per; k++) {
        const uint32_t o = k * w; /* the word's byte offset in the unit */
        const uint64_t x = o < 8 ? x0 >> (8 * o) : x1 >> (8 * (o - 8));
        bits |= (uint32_t)((x & wm) != 0) << k;
    }
    return bits & all;
}

/** Units (16 bytes) per group, and the mask bits of unit @p u within its group. */
RS_DHD uint64_t rs_dk_group_units(const rs_dk_job_t *j)
{
    return (uint64_t)RS_DK_GROUP * j->word / 16;
}

RS_DHD uint64_t rs_dk_unit_mask(const rs_dk_job_t *j, uint64_t u, uint32_t bits)
{
    return (uint64_t)bits << ((u % rs_dk_group_units(j)) * (16 / j->word));
}

/** Whether word @p i changed (bytewise; every word without a snapshot). */
RS_DHD uint64_t rs_dk_word_changed(const rs_dk_job_t *j, const uint8_t *cur, const uint8_t *prev,
                                   uint64_t i)
{
    uint32_t d = prev ? 0 : 1;
    RS_DK_CHECK(i < j->n);
    for (uint32_t k = 0; prev && k < j->word; k++)
        d |= (uint32_t)(cur[i * j->word + k] ^ prev[i * j->word + k]);
    return d != 0;
}

/** Step 2, the scan's last step, one thread: the kind of total @p s (the smallest, ties to
 *  the earlier; runs and gaps only for n < 2^32) into *@p T and the header at @p out. */
RS_DHD void rs_dk_enc_choose(const rs_dk_job_t *j, rs_dk_sum_t s, rs_dk_total_t *T, uint8_t *out)
{
    T->s = s;
    const uint64_t w = j->word, nb = (j->n + 7) / 8, gb = rs_dk_sum_gb(s);
    const uint64_t bitmap = nb + s.c * w, run = s.runs * 8 + s.c * w, gaps = gb + s.c * w;
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
    const uint32_t nruns = kind == RS_DELTA_RUNS   ? (uint32_t)s.runs
                           : kind == RS_DELTA_GAPS ? (uint32_t)s.c
                                                   : 0;
    out[0] = (uint8_t)kind;
    out[1] = (uint8_t)w;
    out[2] = out[3] = 0;
    rs_dk_put_u32(out + 4, nruns);
    rs_dk_put_u32(out + 8, (uint32_t)best);
    rs_dk_put_u32(out + 12, (uint32_t)(best >> 32));
}

/** Step 3, one thread per word: word @p i's part of the body at @p out + 16 and of the
 *  snapshot @p prev. @p P: the sum of the words before its group; @p m: the group's mask;
 *  @p carry, @p next0: whether the words just before and just after the group changed. A run
 *  gets its start at its first word and its end (exclusive) at its last: step 4 subtracts. */
RS_DHD void rs_dk_enc_word(const rs_dk_job_t *j, const rs_dk_total_t *T, rs_dk_sum_t P, uint64_t m,
                           uint64_t carry, uint64_t next0, const uint8_t *cur, uint8_t *prev,
                           uint8_t *out, uint64_t i)
{
    const uint32_t w = j->word;
    const uint64_t b = i % RS_DK_GROUP, g = i / RS_DK_GROUP, base = g * RS_DK_GROUP;
    uint8_t *body = out + RS_DELTA_HEADER_BYTES;
    const uint64_t changed = m >> b & 1, k = (uint64_t)rs_dk_pop(m & rs_dk_below(b));
    RS_DK_CHECK(i < j->n && T->body <= j->len);
    if (T->kind == RS_DELTA_DENSE) {
        RS_DK_CHECK((i + 1) * w <= T->body);
        rs_dk_copy_word(body + i * w, cur + i * w, w);
    } else if (T->kind == RS_DELTA_BITMAP) {
        RS_DK_CHECK(i / 8 < (j->n + 7) / 8 && (j->n + 7) / 8 + (P.c + k + changed) * w <= T->body);
        if (b % 8 == 0)
            body[i / 8] = (uint8_t)(m >> b);
        if (changed)
            rs_dk_copy_word(body + (j->n + 7) / 8 + (P.c + k) * w, cur + i * w, w);
    } else if (T->kind == RS_DELTA_RUNS) {
        if (changed) {
            RS_DK_CHECK(T->s.runs * 8 + (P.c + k + 1) * w <= T->body && i < UINT32_MAX);
            rs_dk_copy_word(body + T->s.runs * 8 + (P.c + k) * w, cur + i * w, w);
            const uint64_t starts = m & ~((m << 1) | carry);
            const uint64_t r = P.runs + (uint64_t)rs_dk_pop(starts & rs_dk_below(b)) +
                               (starts >> b & 1) - 1; /* the run holding word i */
            RS_DK_CHECK(P.runs + (uint64_t)rs_dk_pop(starts & rs_dk_below(b)) + (starts >> b & 1) >=
                            1 &&
                        r < T->s.runs);
            if (starts >> b & 1)
                rs_dk_put_u32(body + r * 8, (uint32_t)i);
            if (!(b < 63 ? m >> (b + 1) & 1 : next0))
                rs_dk_put_u32(body + r * 8 + 4, (uint32_t)(i + 1));
        }
    } else if (changed) { /* gaps */
        const uint64_t f = (uint64_t)rs_dk_ctz(m);
        const uint64_t gap0 = base + f - P.last;
        uint64_t d = k ? b - (63 - (uint64_t)rs_dk_clz(m & rs_dk_below(b))) - 1 : gap0;
        uint8_t *p =
            body + rs_dk_sum_gb(P) + (k ? rs_dk_varint_len(gap0) + k - 1 : 0) + (P.c + k) * w;
        RS_DK_CHECK(base + f >= P.last && i < j->n &&
                    (uint64_t)(p - body) + rs_dk_varint_len(d) + w <= T->body);
        while (d >= 0x80) {
            *p++ = (uint8_t)(d | 0x80);
            d >>= 7;
        }
        *p++ = (uint8_t)d;
        rs_dk_copy_word(p, cur + i * w, w);
    }
    if (prev && changed)
        rs_dk_copy_word(prev + i * w, cur + i * w, w);
}

/** Step 4, one thread per run @p r < T->s.runs of a runs encoding: its end into its length. */
RS_DHD void rs_dk_enc_run_len(const rs_dk_total_t *T, uint8_t *out, uint64_t r)
{
    if (T->kind != RS_DELTA_RUNS || r >= T->s.runs)
        return;
    RS_DK_CHECK(r * 8 + 8 <= T->body);
    uint8_t *rec = out + RS_DELTA_HEADER_BYTES + r * 8;
    rs_dk_put_u32(rec + 4, rs_dk_get_u32(rec + 4) - rs_dk_get_u32(rec));
}

/* ---- apply ---------------------------------------------------------------------------- */

RS_DHD void rs_dk_fail(const rs_dk_job_t *j, uint32_t code, uint64_t a, uint64_t b)
{
    if (j->err->code == RS_DK_ERR_NONE) { /* racy between threads: any one is reported */
        j->err->code = code;
        j->err->a = a;
        j->err->b = b;
    }
}

/** The mask of bitmap group @p g of the body @p body, bits past the chunk cleared (one
 *  marked is an error). */
RS_DHD uint64_t rs_dk_bitmap_mask(const rs_dk_job_t *j, const uint8_t *body, uint64_t g)
{
    const uint64_t nb = (j->n + 7) / 8, bytes = nb - g * 8 < 8 ? nb - g * 8 : 8;
    const uint64_t nw = j->n - g * RS_DK_GROUP < 64 ? j->n - g * RS_DK_GROUP : 64;
    RS_DK_CHECK(g < j->groups && g * 8 + bytes <= j->body);
    uint64_t m = 0;
    for (uint64_t k = 0; k < bytes; k++)
        m |= (uint64_t)body[g * 8 + k] << (8 * k);
    if (nw < 64 && (m >> nw))
        rs_dk_fail(j, RS_DK_ERR_BITMAP_RANGE, g * RS_DK_GROUP + nw + (uint64_t)rs_dk_ctz(m >> nw),
                   0);
    return nw < 64 ? m & rs_dk_below(nw) : m;
}

/** Apply step 1, one thread per item @p i (a bitmap group, or a run): its count (marked
 *  words, or the run's length); a run that leaves the chunk is an error. */
RS_DHD rs_dk_sum_t rs_dk_apply_count(const rs_dk_job_t *j, const uint8_t *body, uint64_t i)
{
    rs_dk_sum_t s = {0, 0, 0, 0, 0};
    if (j->kind == RS_DELTA_BITMAP) {
        s.c = (uint64_t)rs_dk_pop(rs_dk_bitmap_mask(j, body, i));
    } else {
        RS_DK_CHECK(i < j->nruns && i * 8 + 8 <= j->body);
        const uint64_t start = rs_dk_get_u32(body + i * 8);
        s.c = rs_dk_get_u32(body + i * 8 + 4);
        if (start + s.c > j->n)
            rs_dk_fail(j, RS_DK_ERR_RUN_RANGE, i, 0);
    }
    return s;
}

/** Apply: the items of the count step (bitmap groups, or runs). */
RS_DHD uint64_t rs_dk_apply_items(const rs_dk_job_t *j)
{
    return j->kind == RS_DELTA_BITMAP ? j->groups : j->nruns;
}

/** Apply, the scan's last step, one thread: the total @p s of counts against the values the
 *  body carries. */
RS_DHD void rs_dk_apply_check(const rs_dk_job_t *j, rs_dk_sum_t s)
{
    j->total->s = s;
    const uint64_t head = j->kind == RS_DELTA_BITMAP ? (j->n + 7) / 8 : (uint64_t)j->nruns * 8;
    RS_DK_CHECK(head <= j->body); /* rs_delta_header's check */
    const uint64_t nv = (j->body - head) / j->word;
    if (s.c != nv)
        rs_dk_fail(j, j->kind == RS_DELTA_BITMAP ? RS_DK_ERR_BITMAP_COUNT : RS_DK_ERR_RUN_COUNT,
                   s.c, nv);
}

/** Apply step 3 of a bitmap, one thread per word @p i: its value, if marked, onto @p chunk;
 *  @p P the marked words before its group, @p m the group's mask. */
RS_DHD void rs_dk_apply_bitmap_word(const rs_dk_job_t *j, const uint8_t *body, uint8_t *chunk,
                                    rs_dk_sum_t P, uint64_t m, uint64_t i)
{
    const uint64_t b = i % RS_DK_GROUP;
    RS_DK_CHECK(i < j->n &&
                (!(m >> b & 1) ||
                 (j->n + 7) / 8 + (P.c + (uint64_t)rs_dk_pop(m & rs_dk_below(b)) + 1) * j->word <=
                     j->body));
    if (m >> b & 1)
        rs_dk_copy_word(chunk + i * j->word,
                        body + (j->n + 7) / 8 +
                            (P.c + (uint64_t)rs_dk_pop(m & rs_dk_below(b))) * j->word,
                        j->word);
}

/** Apply step 4 of runs, one thread per value @p v < the total: the run holding it (the last
 *  run whose first value is <= v: runs of length 0 never hold one) and its word. */
RS_DHD void rs_dk_apply_run_value(const rs_dk_job_t *j, const uint8_t *body, uint8_t *chunk,
                                  uint64_t v)
{
    uint64_t lo = 0, hi = j->nruns; /* cnt[lo] <= v < cnt[hi] (cnt[nruns]: the total) */
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        RS_DK_CHECK(mid < j->cap_cnt);
        if (j->cnt[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    RS_DK_CHECK(lo < j->nruns && lo < j->cap_cnt && j->cnt[lo] <= v);
    const uint64_t word = rs_dk_get_u32(body + lo * 8) + (v - j->cnt[lo]);
    RS_DK_CHECK(word < j->n && (uint64_t)j->nruns * 8 + (v + 1) * j->word <= j->body);
    rs_dk_copy_word(chunk + word * j->word, body + (uint64_t)j->nruns * 8 + v * j->word, j->word);
}

/* ---- apply of gaps ---------------------------------------------------------------------
 * The body is cut into segments; for each segment and each offset e < RS_DK_MAX_ENTRY at
 * which an entry may start in it, a parse gives a table entry (words advanced, entries, the
 * offset into the next segment where the parse leaves off). Tables compose (a then b: b's
 * entry at a's exit), associatively, so a scan gives every segment's true start: per block
 * of RS_DK_GBLK segments a log-step scan in shared memory, then the same over the blocks'
 * tables in one block, then one thread per segment composes the two and writes. */

/** The bytes [*lo, *hi) of gaps segment @p s. */
RS_DHD void rs_dk_gseg_range(const rs_dk_job_t *j, uint64_t s, uint64_t *lo, uint64_t *hi)
{
    RS_DK_CHECK(s < j->segs && j->segs * RS_DK_MAX_ENTRY <= j->cap_gtab);
    *lo = s * j->seg;
    *hi = *lo + j->seg < j->body ? *lo + j->seg : j->body;
}

/** One entry at body offset *@p at: its gap into *@p d, *@p at past it; 1 when it runs past
 *  the body, 2 when its gap points past the chunk, else 0. */
RS_DHD uint32_t rs_dk_gaps_entry(const rs_dk_job_t *j, const uint8_t *body, uint64_t *at,
                                 uint64_t *d)
{
    uint64_t g = *at, x = 0;
    int shift = 0;
    uint8_t b = 0x80;
    while (b & 0x80) {
        if (g >= j->body || shift > 63)
            return 1;
        b = body[g++];
        x |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    }
    if (j->body - g < j->word)
        return 1;
    if (x >= j->n)
        return 2;
    *at = g + j->word;
    *d = x;
    return 0;
}

/** The identity table's entry @p e (no segments: the offset passes through). */
RS_DHD rs_dk_gs_t rs_dk_gs_id(uint32_t e)
{
    rs_dk_gs_t x = {0, 0, (uint8_t)e, 0, {0, 0}};
    return x;
}

/** Entry @p x then entry @p y (y taken at x's exit): words past @p n are an error. */
RS_DHD rs_dk_gs_t rs_dk_gs_add(rs_dk_gs_t x, rs_dk_gs_t y, uint64_t n)
{
    if (x.err)
        return x;
    if ((uint64_t)x.adv + y.adv > n) {
        x.err = 2;
        return x;
    }
    x.adv += y.adv;
    x.cnt += y.cnt;
    x.exit = y.exit;
    x.err = y.err;
    return x;
}

/** Table @p a then table @p b, entry @p e. */
RS_DHD rs_dk_gs_t rs_dk_gs_then(const rs_dk_job_t *j, const rs_dk_gs_t *a, const rs_dk_gs_t *b,
                                uint32_t e)
{
    RS_DK_CHECK(e < RS_DK_MAX_ENTRY);
    const rs_dk_gs_t x = a[e];
    if (x.err)
        return x;
    RS_DK_CHECK(x.exit < RS_DK_MAX_ENTRY);
    return rs_dk_gs_add(x, b[x.exit], j->n);
}

/** Gaps step 1, one thread per segment @p s and entry offset @p e into it: the entries that
 *  start in the segment from there. */
RS_DHD rs_dk_gs_t rs_dk_gaps_parse(const rs_dk_job_t *j, const uint8_t *body, uint64_t s,
                                   uint32_t e)
{
    uint64_t lo, hi;
    rs_dk_gseg_range(j, s, &lo, &hi);
    rs_dk_gs_t r = rs_dk_gs_id(0);
    uint64_t at = lo + e, adv = 0;
    while (at < hi) {
        uint64_t d = 0;
        r.err = (uint8_t)rs_dk_gaps_entry(j, body, &at, &d);
        if (!r.err && adv + d + 1 > j->n)
            r.err = 2;
        if (r.err)
            return r;
        adv += d + 1;
        r.cnt++;
    }
    RS_DK_CHECK(at - hi < RS_DK_MAX_ENTRY && adv <= j->n);
    r.adv = (uint32_t)adv;
    r.exit = (uint8_t)(at - hi);
    return r;
}

/** Resolve blocks of a gaps apply (RS_DK_GBLK segments each). */
RS_DHD uint64_t rs_dk_gaps_blocks(const rs_dk_job_t *j)
{
    return (j->segs + RS_DK_GBLK - 1) / RS_DK_GBLK;
}

/** Round @p k of a log-step inclusive scan over @p count tables at @p tab (shared memory in
 *  a kernel), item @p t: its new table into @p out (a thread's registers; written back after
 *  a barrier). */
RS_DHD void rs_dk_gs_scan_round(const rs_dk_job_t *j, const rs_dk_gs_t *tab, uint64_t count, int k,
                                uint64_t t, rs_dk_gs_t *out)
{
    const uint64_t o = (uint64_t)1 << k;
    RS_DK_CHECK(t < count && count <= RS_DK_GBLK);
    for (uint32_t e = 0; e < RS_DK_MAX_ENTRY; e++)
        out[e] =
            t >= o ? rs_dk_gs_then(j, tab + (t - o) * RS_DK_MAX_ENTRY, tab + t * RS_DK_MAX_ENTRY, e)
                   : tab[t * RS_DK_MAX_ENTRY + e];
}

/** Gaps step 3 (one block, after the blocks' scan), on the tables of every segment composed:
 *  the whole body checked (ends at its end, nruns entries, inside the chunk). */
RS_DHD void rs_dk_gaps_check(const rs_dk_job_t *j, rs_dk_gs_t x)
{
    if (x.err)
        rs_dk_fail(j, RS_DK_ERR_GAP, x.cnt, x.err);
    else if (x.exit != 0 || x.cnt != j->nruns)
        rs_dk_fail(j, RS_DK_ERR_GAP, x.cnt, 3);
}

/** Gaps step 4, one thread per segment @p s (a consistent body only): its true start (the
 *  blocks before it, then its own block's segments before it, from offset 0) and its
 *  entries' words. */
RS_DHD void rs_dk_gaps_write(const rs_dk_job_t *j, const uint8_t *body, uint8_t *chunk, uint64_t s)
{
    uint64_t lo, hi;
    rs_dk_gseg_range(j, s, &lo, &hi);
    const uint64_t b = s / RS_DK_GBLK;
    RS_DK_CHECK(b < j->cap_gblk && b < rs_dk_gaps_blocks(j));
    rs_dk_gs_t x = b ? j->gblk[(b - 1) * RS_DK_MAX_ENTRY] : rs_dk_gs_id(0);
    if (s % RS_DK_GBLK)
        x = rs_dk_gs_then(j, &x, j->gtab + (s - 1) * RS_DK_MAX_ENTRY, 0);
    if (x.err)
        return; /* not on a consistent body */
    uint64_t at = lo + x.exit, next = x.adv;
    while (at < hi) {
        uint64_t d = 0;
        if (rs_dk_gaps_entry(j, body, &at, &d))
            return; /* not on a consistent body */
        const uint64_t i = next + d;
        RS_DK_CHECK(i < j->n && at <= j->body);
        rs_dk_copy_word(chunk + i * j->word, body + at - j->word, j->word);
        next = i + 1;
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

/** A sender's header message takes its hash here (docs/delta-verification.md): the hash of
 *  the @p len bytes whose terms sum to @p sum, as 8 little-endian bytes at @p out, or 0 when
 *  the encoded chunk's header at @p header says dense (a dense chunk is not hashed). Byte by
 *  byte: a message slot has any alignment. */
RS_DHD void rs_dk_hash_put(uint64_t sum, uint64_t len, const uint8_t *header, uint8_t *out)
{
    const uint64_t h = header[0] == RS_DELTA_DENSE ? 0 : rs_dk_hash_final(sum, len);
    for (int b = 0; b < 8; b++)
        out[b] = (uint8_t)(h >> (8 * b));
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

/** The error of an apply's record @p e (a host copy) of the chunk of @p len bytes with
 *  header @p h, naming @p what: OK when none. */
reshard_status_t rs_delta_apply_status(const rs_dk_err_t *e, const rs_delta_header_t *h,
                                       uint64_t len, const char *what);

#ifdef __cplusplus
}
#endif

#endif
