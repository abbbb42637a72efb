/* Host side of the device delta codec: the job and its scratch, the CPU emulation of the
 * kernels (each launch's blocks and threads in turn, a block's phases in order, over the
 * steps of delta_kernels.h) and the messages of apply's error record. No CUDA calls here. */
#include "transport/nccl/delta_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void rs_dk_check_failed(const char *what, const char *file, int line)
{
    fprintf(stderr, "delta kernels (emulation): check failed at %s:%d: %s\n", file, line, what);
    abort();
}

static uint64_t align64(uint64_t x)
{
    return (x + 63) / 64 * 64;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

/* Gaps apply: bytes per segment for a body of @p body bytes (at least RS_DK_SEG_MIN, at most
 * RS_DK_GBLK^2 segments: RS_DK_GBLK resolve blocks of RS_DK_GBLK). */
static uint64_t gaps_seg(uint64_t body)
{
    const uint64_t s = ceil_div(body, (uint64_t)RS_DK_GBLK * RS_DK_GBLK);
    return s > RS_DK_SEG_MIN ? s : RS_DK_SEG_MIN;
}

/* The most segments of any gaps body a chunk of @p len bytes can carry (body <= len). Not
 * ceil(len / gaps_seg(len)): segments are cut from the body, and a shorter body can have more
 * of them (len 9830408: 16357 segments of 601 bytes; a body of 1114110: 16384 of 68), which
 * wrote the tables past their region into the resolve buffers and past the scratch. */
static uint64_t gaps_segs_most(uint64_t len)
{
    const uint64_t most = (uint64_t)RS_DK_GBLK * RS_DK_GBLK;
    const uint64_t small = ceil_div(len, RS_DK_SEG_MIN);
    return small < most ? small : most;
}

/* The scratch layout of a chunk of @p len bytes of @p word-byte words: the total, the error
 * record, then one region reused by encode (masks, tiles), the runs apply (tiles, per-run
 * offsets) and the gaps apply (the tables); with @p j, points j's scratch into @p s. */
static uint64_t layout(uint64_t len, uint32_t word, rs_dk_job_t *j, uint8_t *s)
{
    const uint64_t n = word ? len / word : len, groups = ceil_div(n, RS_DK_GROUP);
    const uint64_t tiles = ceil_div(groups, RS_DK_TILE_GROUPS), runs = len / 8 + 1;
    const uint64_t head = align64(sizeof(rs_dk_total_t)) + align64(sizeof(rs_dk_err_t));
    const uint64_t enc = align64(tiles * sizeof(rs_dk_sum_t)) + groups * 8;
    const uint64_t rtiles = ceil_div(runs, RS_DK_TILE);
    const uint64_t run = align64(rtiles * sizeof(rs_dk_sum_t)) + (runs + 1) * 8;
    const uint64_t segs = gaps_segs_most(len), e = RS_DK_MAX_ENTRY;
    const uint64_t gblk = (uint64_t)RS_DK_GBLK * e * sizeof(rs_dk_gs_t);
    const uint64_t gaps = align64(segs * e * sizeof(rs_dk_gs_t)) + gblk;
    uint64_t most = enc > run ? enc : run;
    most = most > gaps ? most : gaps;
    if (j) {
        j->total = (rs_dk_total_t *)(void *)s;
        j->err = (rs_dk_err_t *)(void *)(s + align64(sizeof(rs_dk_total_t)));
        uint8_t *r = s + head;
        j->tile = (rs_dk_sum_t *)(void *)r; /* encode and runs: per tile, then the rest */
        j->mask = (uint64_t *)(void *)(r + align64(tiles * sizeof(rs_dk_sum_t)));
        j->cnt = (uint64_t *)(void *)(r + align64(rtiles * sizeof(rs_dk_sum_t)));
        j->gtab = (rs_dk_gs_t *)(void *)r; /* gaps: the tables */
        j->gblk = (rs_dk_gs_t *)(void *)(r + align64(segs * e * sizeof(rs_dk_gs_t)));
        j->cap_tile = j->apply && j->kind == RS_DELTA_RUNS ? rtiles : tiles;
        j->cap_mask = groups;
        j->cap_cnt = runs + 1;
        j->cap_gtab = segs * e;
        j->cap_gblk = RS_DK_GBLK;
        j->scratch_bytes =
            head + (enc > run ? (enc > gaps ? enc : gaps) : (run > gaps ? run : gaps));
    }
    return head + most;
}

uint64_t rs_delta_dev_scratch_bytes(uint64_t len, uint32_t word)
{
    return layout(len, word, NULL, NULL);
}

void rs_dk_job_init(rs_dk_job_t *j, uint64_t len, uint32_t word, const rs_delta_header_t *h,
                    void *scratch)
{
    memset(j, 0, sizeof *j);
    j->len = len;
    j->word = word;
    j->n = len / word;
    j->groups = ceil_div(j->n, RS_DK_GROUP);
    j->tiles = ceil_div(j->groups, RS_DK_TILE_GROUPS);
    j->apply = h != NULL;
    j->kind = h ? h->kind : 0;
    j->nruns = h ? h->nruns : 0;
    j->body = h ? h->body : 0;
    j->items = h && h->kind == RS_DELTA_RUNS ? ceil_div(j->nruns, RS_DK_TILE) : j->tiles;
    if (h && h->kind == RS_DELTA_GAPS) {
        j->seg = gaps_seg(j->body);
        j->segs = ceil_div(j->body, j->seg);
    }
    (void)layout(len, word, j, scratch);
}

/* ---- the emulation: each launch's blocks and threads in turn, the block's phases in order.
 * A block scan or reduce of rs_dk_sum_t is a sequential one here (the sum is associative).
 * Strict: every launch's grid checked against CUDA's limits (the same sizes delta_kernels.cu
 * launches), the scratch filled with a pattern that changes from run to run before each
 * encode and apply (nothing a run reads may be left from an earlier one), and the steps'
 * RS_DK_CHECKs (indices inside their regions and buffers, wide accesses aligned). */

/* One launch of @p blocks x @p threads with @p shared bytes of static shared memory. */
static void emu_launch(uint64_t blocks, uint64_t threads, uint64_t shared)
{
    RS_DK_CHECK(blocks >= 1 && blocks <= RS_DK_MAX_GRID_X);
    RS_DK_CHECK(threads >= 1 && threads <= 1024 && threads % 32 == 0);
    RS_DK_CHECK(shared <= 48 * 1024);
}

/* The scratch of @p j filled with a pattern of this run's own. */
static void emu_poison(const rs_dk_job_t *j)
{
    static unsigned run;
    const uint8_t x = (uint8_t)(0x5a + 37 * ++run);
    RS_DK_CHECK(j->scratch_bytes > 0);
    memset((void *)j->total, x, (size_t)j->scratch_bytes);
}

/* The masks of tile @p t's groups from the chunk (the lanes' unit bits ORed) into j->mask,
 * and the tile's sum into j->tile[t] (kernel 1). */
static void emu_enc_tile(const rs_dk_job_t *j, const uint8_t *cur, const uint8_t *prev, uint64_t t)
{
    uint64_t lo, hi, sm[RS_DK_TILE_GROUPS];
    rs_dk_tile_groups(j, t, &lo, &hi);
    RS_DK_CHECK(t < j->tiles && t < j->cap_tile && hi <= j->cap_mask &&
                hi - lo <= RS_DK_TILE_GROUPS);
    const uint64_t units = rs_dk_group_units(j);
    /* the kernel's lanes: unit u0 + x + pass * threads; a group's lanes ORed by shuffles, so
     * they must lie in one warp and every lane of the block take the same passes */
    const uint64_t u0 = lo * units, u1 = u0 + RS_DK_TILE_GROUPS * units;
    RS_DK_CHECK(units >= 1 && units <= 32 && 32 % units == 0 && (u1 - u0) % RS_DK_THREADS == 0);
    for (uint64_t u = u0; u < u1; u += units) {
        uint64_t m = 0;
        for (uint64_t l = u; l < u + units; l++) {
            RS_DK_CHECK((l - u0) / 32 == (u - u0) / 32);
            m |= rs_dk_unit_mask(j, l, rs_dk_unit_bits(j, cur, prev, l));
        }
        if (u / units < hi)
            sm[u / units - lo] = m;
    }
    rs_dk_sum_t sum = {0, 0, 0, 0, 0};
    for (uint64_t g = lo; g < hi; g++) {
        const uint64_t m = sm[g - lo];
        j->mask[g] = m;
        const uint64_t carry =
            g == lo ? (g ? rs_dk_word_changed(j, cur, prev, g * 64 - 1) : 0) : j->mask[g - 1] >> 63;
        sum = rs_dk_sum_add(sum, rs_dk_group_sum(g, m, carry));
    }
    j->tile[t] = sum;
}

/* The scan (kernel 2): the items' exclusive prefixes and the total; then the kind and the
 * header at @p out (encode) or the check of the values (apply). */
static void emu_scan(const rs_dk_job_t *j, uint8_t *out)
{
    emu_launch(1, RS_DK_SCAN, RS_DK_SCAN / 32 * sizeof(rs_dk_sum_t));
    RS_DK_CHECK(j->items <= j->cap_tile);
    rs_dk_sum_t s = {0, 0, 0, 0, 0};
    for (uint64_t t = 0; t < j->items; t++) {
        const rs_dk_sum_t x = j->tile[t];
        j->tile[t] = s;
        s = rs_dk_sum_add(s, x);
    }
    if (j->apply)
        rs_dk_apply_check(j, s);
    else
        rs_dk_enc_choose(j, s, j->total, out);
}

/* Tile @p t's words (kernel 3). */
static void emu_enc_body(const rs_dk_job_t *j, const uint8_t *cur, uint8_t *prev, uint8_t *out,
                         uint64_t t)
{
    uint64_t lo, hi;
    rs_dk_tile_groups(j, t, &lo, &hi);
    RS_DK_CHECK(t < j->cap_tile && hi <= j->cap_mask);
    rs_dk_sum_t P = j->tile[t];
    for (uint64_t g = lo; g < hi; g++) {
        const uint64_t m = j->mask[g], carry = g ? j->mask[g - 1] >> 63 : 0;
        const uint64_t next0 = g + 1 < j->groups ? j->mask[g + 1] & 1 : 0;
        const uint64_t end = (g + 1) * RS_DK_GROUP < j->n ? (g + 1) * RS_DK_GROUP : j->n;
        for (uint64_t i = g * RS_DK_GROUP; i < end; i++)
            rs_dk_enc_word(j, j->total, P, m, carry, next0, cur, prev, out, i);
        P = rs_dk_sum_add(P, rs_dk_group_sum(g, m, carry));
    }
}

void rs_delta_encode_emulate(const rs_dk_job_t *j, const uint8_t *cur, uint8_t *prev, uint8_t *out)
{
    RS_DK_CHECK(j->groups > 0 && !j->apply);
    emu_poison(j);
    emu_launch(j->tiles, RS_DK_THREADS,
               RS_DK_TILE_GROUPS * 8 + RS_DK_THREADS / 32 * sizeof(rs_dk_sum_t));
    emu_launch(j->tiles, RS_DK_THREADS,
               RS_DK_TILE_GROUPS * (sizeof(rs_dk_sum_t) + 24) +
                   RS_DK_THREADS / 32 * sizeof(rs_dk_sum_t));
    emu_launch(rs_dk_grid_runs(j), RS_DK_THREADS, 0);
    for (uint64_t t = 0; t < j->tiles; t++)
        emu_enc_tile(j, cur, prev, t);
    emu_scan(j, out);
    /* every body byte is written by this run (nothing left from an earlier encode counts) */
    memset(out + RS_DELTA_HEADER_BYTES, 0xc3 ^ (int)(j->total->body & 0xff),
           (size_t)j->total->body);
    for (uint64_t t = 0; t < j->tiles; t++)
        emu_enc_body(j, cur, prev, out, t);
    for (uint64_t r = 0; r < j->total->s.runs; r++)
        rs_dk_enc_run_len(j->total, out, r);
}

/* Apply of a bitmap or runs body: the counts per tile, the scan, per tile the items'
 * prefixes, then the words. */
static void emu_apply_counted(const rs_dk_job_t *j, const uint8_t *body, uint8_t *chunk)
{
    const uint64_t items = rs_dk_apply_items(j);
    const uint64_t sum_sh = RS_DK_THREADS / 32 * sizeof(rs_dk_sum_t);
    RS_DK_CHECK(j->items <= j->cap_tile && (j->kind == RS_DELTA_BITMAP || items < j->cap_cnt));
    if (j->items)
        emu_launch(j->items, RS_DK_THREADS, sum_sh);
    for (uint64_t t = 0; t < j->items; t++) {
        rs_dk_sum_t s = {0, 0, 0, 0, 0};
        for (uint64_t i = t * RS_DK_TILE_GROUPS;
             j->kind == RS_DELTA_BITMAP && i < items && i < (t + 1) * RS_DK_TILE_GROUPS; i++)
            s = rs_dk_sum_add(s, rs_dk_apply_count(j, body, i));
        for (uint64_t i = t * RS_DK_TILE;
             j->kind == RS_DELTA_RUNS && i < items && i < (t + 1) * RS_DK_TILE; i++)
            s = rs_dk_sum_add(s, rs_dk_apply_count(j, body, i));
        j->tile[t] = s;
    }
    emu_scan(j, NULL);
    if (j->err->code != RS_DK_ERR_NONE)
        return;
    if (j->kind == RS_DELTA_BITMAP) {
        emu_launch(j->items, RS_DK_THREADS, RS_DK_TILE_GROUPS * (sizeof(rs_dk_sum_t) + 8) + sum_sh);
        for (uint64_t t = 0; t < j->tiles; t++) {
            uint64_t lo, hi;
            rs_dk_tile_groups(j, t, &lo, &hi);
            rs_dk_sum_t P = j->tile[t];
            for (uint64_t g = lo; g < hi; g++) {
                const uint64_t m = rs_dk_bitmap_mask(j, body, g);
                const uint64_t end = (g + 1) * RS_DK_GROUP < j->n ? (g + 1) * RS_DK_GROUP : j->n;
                for (uint64_t i = g * RS_DK_GROUP; i < end; i++)
                    rs_dk_apply_bitmap_word(j, body, chunk, P, m, i);
                P.c += (uint64_t)rs_dk_pop(m);
            }
        }
        return;
    }
    const uint64_t values = (j->body - (uint64_t)j->nruns * 8) / j->word;
    RS_DK_CHECK(values == j->total->s.c);
    if (j->items)
        emu_launch(j->items, RS_DK_THREADS, sum_sh);
    if (values)
        emu_launch(rs_dk_grid_of(values), RS_DK_THREADS, 0);
    for (uint64_t t = 0; t < j->items; t++) {
        uint64_t P = j->tile[t].c;
        for (uint64_t r = t * RS_DK_TILE; r < items && r < (t + 1) * RS_DK_TILE; r++) {
            j->cnt[r] = P;
            P += rs_dk_get_u32(body + r * 8 + 4);
        }
    }
    for (uint64_t v = 0; v < j->total->s.c; v++)
        rs_dk_apply_run_value(j, body, chunk, v);
}

/* A log-step inclusive scan over the @p count tables at @p tab, as a resolve block runs it:
 * each round every item's new table from the old ones (registers), then written back. */
static void emu_gs_scan(const rs_dk_job_t *j, rs_dk_gs_t *tab, rs_dk_gs_t *next, uint64_t count)
{
    for (int k = 0; k < RS_DK_GBLK_ROUNDS; k++) {
        for (uint64_t t = 0; t < count; t++)
            rs_dk_gs_scan_round(j, tab, count, k, t, next + t * RS_DK_MAX_ENTRY);
        memcpy(tab, next, (size_t)count * RS_DK_MAX_ENTRY * sizeof *tab);
    }
}

/* Apply of a gaps body: the parses, the blocks' scans, the scan over the blocks and the
 * check, the writes. */
static void emu_apply_gaps(const rs_dk_job_t *j, const uint8_t *body, uint8_t *chunk)
{
    const uint64_t blocks = rs_dk_gaps_blocks(j), tab = RS_DK_MAX_ENTRY * sizeof(rs_dk_gs_t);
    RS_DK_CHECK(j->segs * RS_DK_MAX_ENTRY <= j->cap_gtab && blocks <= j->cap_gblk);
    RS_DK_CHECK((1u << RS_DK_GBLK_ROUNDS) == RS_DK_GBLK && RS_DK_SEG_MIN >= RS_DK_MAX_ENTRY);
    if (j->segs) {
        emu_launch(rs_dk_grid_of(j->segs * RS_DK_MAX_ENTRY), RS_DK_THREADS, 0);
        emu_launch(blocks, RS_DK_GBLK, RS_DK_GBLK * tab);
        emu_launch(1, RS_DK_GBLK, RS_DK_GBLK * tab);
        emu_launch(rs_dk_grid_of(j->segs), RS_DK_THREADS, 0);
    }
    for (uint64_t s = 0; s < j->segs; s++)
        for (uint32_t e = 0; e < RS_DK_MAX_ENTRY; e++)
            j->gtab[s * RS_DK_MAX_ENTRY + e] = rs_dk_gaps_parse(j, body, s, e);
    /* a block's shared memory, and its threads' registers (the fake's ranks are threads) */
    rs_dk_gs_t *sh = malloc(2 * RS_DK_GBLK * tab), *next = sh + RS_DK_GBLK * RS_DK_MAX_ENTRY;
    RS_DK_CHECK(sh != NULL);
    for (uint64_t b = 0; b < blocks; b++) {
        const uint64_t s0 = b * RS_DK_GBLK,
                       count = j->segs - s0 < RS_DK_GBLK ? j->segs - s0 : RS_DK_GBLK;
        memcpy(sh, j->gtab + s0 * RS_DK_MAX_ENTRY, (size_t)(count * tab));
        emu_gs_scan(j, sh, next, count);
        memcpy(j->gtab + s0 * RS_DK_MAX_ENTRY, sh, (size_t)(count * tab));
        memcpy(j->gblk + b * RS_DK_MAX_ENTRY, sh + (count - 1) * RS_DK_MAX_ENTRY, (size_t)tab);
    }
    if (blocks) {
        memcpy(sh, j->gblk, (size_t)(blocks * tab));
        emu_gs_scan(j, sh, next, blocks);
        memcpy(j->gblk, sh, (size_t)(blocks * tab));
    }
    rs_dk_gaps_check(j, blocks ? sh[(blocks - 1) * RS_DK_MAX_ENTRY] : rs_dk_gs_id(0));
    free(sh);
    if (j->err->code != RS_DK_ERR_NONE)
        return;
    for (uint64_t s = 0; s < j->segs; s++)
        rs_dk_gaps_write(j, body, chunk, s);
}

void rs_delta_apply_emulate(const rs_dk_job_t *j, const uint8_t *in, uint8_t *chunk)
{
    const uint8_t *body = in + RS_DELTA_HEADER_BYTES;
    RS_DK_CHECK(j->apply && j->body <= j->len + (j->n + 7) / 8);
    emu_poison(j);
    j->err->code = RS_DK_ERR_NONE;
    if (j->kind == RS_DELTA_DENSE)
        rs_dk_copy(chunk, body, j->len);
    else if (j->kind == RS_DELTA_GAPS)
        emu_apply_gaps(j, body, chunk);
    else
        emu_apply_counted(j, body, chunk);
}

void rs_delta_hash_emulate(const uint8_t *chunk, uint64_t len, uint64_t *sum)
{
    uint64_t h = 0;
    for (uint64_t i = 0; i < (len + 7) / 8; i++)
        h += rs_dk_hash_term(chunk, len, i);
    *sum = h;
}

reshard_status_t rs_delta_apply_status(const rs_dk_err_t *e, const rs_delta_header_t *h,
                                       uint64_t len, const char *what)
{
    const unsigned long long a = (unsigned long long)e->a, b = (unsigned long long)e->b,
                             n = (unsigned long long)(len / h->word);
    switch (e->code) {
    case RS_DK_ERR_NONE:
        return RESHARD_OK;
    case RS_DK_ERR_BITMAP_RANGE:
        return rs_error(RESHARD_ERR_INVALID_ARG, "%s: delta bitmap marks word %llu of %llu", what,
                        a, n);
    case RS_DK_ERR_BITMAP_COUNT:
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: delta bitmap marks %llu words but carries %llu values", what, a, b);
    case RS_DK_ERR_RUN_RANGE:
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: delta run %llu of %u leaves the chunk of %llu words", what, a,
                        h->nruns, n);
    case RS_DK_ERR_RUN_COUNT:
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: delta runs cover %llu words but carry %llu values", what, a, b);
    default:
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: delta gaps body of %u words inconsistent (%s, at %llu)", what,
                        h->nruns,
                        b == 1   ? "a gap runs past the body"
                        : b == 2 ? "a gap points past the chunk"
                                 : "its entries do not end with its body as its header counts",
                        a);
    }
}
