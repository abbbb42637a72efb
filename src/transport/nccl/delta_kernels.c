/* Host side of the device delta codec: the job and its scratch, the CPU emulation of the
 * kernels (each launch's blocks and threads in turn, a block's phases in order, over the
 * steps of delta_kernels.h) and the messages of apply's error record. No CUDA calls here. */
#include "transport/nccl/delta_kernels.h"

#include <string.h>

#include "util/error.h"

static uint64_t align64(uint64_t x)
{
    return (x + 63) / 64 * 64;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

/* Gaps apply: bytes per segment for a body of @p body bytes (at least RS_DK_SEG_MIN, at most
 * RS_DK_SEGS_PER_THREAD segments per resolve thread). */
static uint64_t gaps_seg(uint64_t body)
{
    const uint64_t s = ceil_div(body, (uint64_t)RS_DK_SCAN * RS_DK_SEGS_PER_THREAD);
    return s > RS_DK_SEG_MIN ? s : RS_DK_SEG_MIN;
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
    const uint64_t segs = ceil_div(len, gaps_seg(len)), e = RS_DK_MAX_ENTRY;
    const uint64_t gthr = align64((uint64_t)RS_DK_SCAN * e * sizeof(rs_dk_gs_t));
    const uint64_t gaps =
        align64(segs * e * sizeof(rs_dk_gs_t)) + 2 * gthr + align64(segs * sizeof(rs_dk_gs_t));
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
        j->gthr[0] = (rs_dk_gs_t *)(void *)(r + align64(segs * e * sizeof(rs_dk_gs_t)));
        j->gthr[1] = (rs_dk_gs_t *)(void *)((uint8_t *)j->gthr[0] + gthr);
        j->gseg = (rs_dk_gs_t *)(void *)((uint8_t *)j->gthr[1] + gthr);
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
 * A block scan or reduce of rs_dk_sum_t is a sequential one here (the sum is associative). */

/* The masks of tile @p t's groups from the chunk (the lanes' unit bits ORed) into j->mask,
 * and the tile's sum into j->tile[t] (kernel 1). */
static void emu_enc_tile(const rs_dk_job_t *j, const uint8_t *cur, const uint8_t *prev, uint64_t t)
{
    uint64_t lo, hi;
    rs_dk_tile_groups(j, t, &lo, &hi);
    const uint64_t units = rs_dk_group_units(j);
    rs_dk_sum_t sum = {0, 0, 0, 0, 0};
    for (uint64_t g = lo; g < hi; g++) {
        uint64_t m = 0;
        for (uint64_t u = g * units; u < (g + 1) * units; u++)
            m |= rs_dk_unit_mask(j, u, rs_dk_unit_bits(j, cur, prev, u));
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
    for (uint64_t t = 0; t < j->tiles; t++)
        emu_enc_tile(j, cur, prev, t);
    emu_scan(j, out);
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

/* Apply of a gaps body: the parses, the resolve block's steps, the writes. */
static void emu_apply_gaps(const rs_dk_job_t *j, const uint8_t *body, uint8_t *chunk)
{
    for (uint64_t s = 0; s < j->segs; s++)
        for (uint32_t e = 0; e < RS_DK_MAX_ENTRY; e++)
            j->gtab[s * RS_DK_MAX_ENTRY + e] = rs_dk_gaps_parse(j, body, s, e);
    for (int t = 0; t < RS_DK_SCAN; t++)
        rs_dk_gaps_thread_table(j, t);
    for (int k = 0; k < RS_DK_SCAN_ROUNDS; k++)
        for (int t = 0; t < RS_DK_SCAN; t++)
            rs_dk_gaps_scan_step(j, k, t);
    for (int t = 0; t < RS_DK_SCAN; t++)
        rs_dk_gaps_starts(j, t);
    if (j->err->code != RS_DK_ERR_NONE)
        return;
    for (uint64_t s = 0; s < j->segs; s++)
        rs_dk_gaps_write(j, body, chunk, s);
}

void rs_delta_apply_emulate(const rs_dk_job_t *j, const uint8_t *in, uint8_t *chunk)
{
    const uint8_t *body = in + RS_DELTA_HEADER_BYTES;
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

reshard_status_t rs_delta_apply_status(const rs_dk_err_t *e, const rs_dk_job_t *j, const char *what)
{
    const unsigned long long a = (unsigned long long)e->a, b = (unsigned long long)e->b,
                             n = (unsigned long long)j->n;
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
                        j->nruns, n);
    case RS_DK_ERR_RUN_COUNT:
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: delta runs cover %llu words but carry %llu values", what, a, b);
    default:
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: delta gaps body of %u words inconsistent (%s, at %llu)", what,
                        j->nruns,
                        b == 1   ? "a gap runs past the body"
                        : b == 2 ? "a gap points past the chunk"
                                 : "its entries do not end with its body as its header counts",
                        a);
    }
}
