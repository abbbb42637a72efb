/* Host side of the device delta codec: the job and its scratch, the CPU emulation of the
 * kernels (each launch's threads in turn, the scan block's phases in order) and the
 * messages of apply's error record. No CUDA calls here. */
#include "transport/nccl/delta_kernels.h"

#include "util/error.h"

static uint64_t align64(uint64_t x)
{
    return (x + 63) / 64 * 64;
}

uint64_t rs_delta_dev_scratch_bytes(uint64_t len, uint32_t word)
{
    const uint64_t n = word ? len / word : len, groups = (n + RS_DK_GROUP - 1) / RS_DK_GROUP;
    /* runs: as many as a header rs_delta_header accepts (8 body bytes each, len / 8), more
     * than an encoder writes (n / 2 + 1) for 8-byte words: a corrupt header stays inside */
    const uint64_t most_runs = n / 2 + 1 > len / 8 ? n / 2 + 1 : len / 8;
    const uint64_t g = groups * sizeof(rs_dk_group_t), runs = most_runs * sizeof(uint64_t);
    return align64(sizeof(rs_dk_total_t)) + align64(sizeof(rs_dk_err_t)) +
           align64(RS_DK_SCAN * sizeof(rs_dk_part_t)) + align64(g > runs ? g : runs);
}

void rs_dk_job_init(rs_dk_job_t *j, uint64_t len, uint32_t word, const rs_delta_header_t *h,
                    void *scratch)
{
    uint8_t *s = scratch;
    j->len = len;
    j->word = word;
    j->n = len / word;
    j->groups = (j->n + RS_DK_GROUP - 1) / RS_DK_GROUP;
    j->kind = h ? h->kind : 0;
    j->nruns = h ? h->nruns : 0;
    j->body = h ? h->body : 0;
    j->total = (rs_dk_total_t *)s;
    s += align64(sizeof(rs_dk_total_t));
    j->err = (rs_dk_err_t *)s;
    s += align64(sizeof(rs_dk_err_t));
    j->part = (rs_dk_part_t *)s;
    s += align64(RS_DK_SCAN * sizeof(rs_dk_part_t));
    j->g = (rs_dk_group_t *)s; /* encode: per group; apply: per bitmap group or run */
    j->cnt = (uint64_t *)s;
}

void rs_delta_encode_emulate(const rs_dk_job_t *j, const uint8_t *cur, uint8_t *prev, uint8_t *out)
{
    for (uint64_t g = 0; g < j->groups; g++)
        rs_dk_enc_mask(j, cur, prev, g);
    for (int t = 0; t < RS_DK_SCAN; t++)
        rs_dk_enc_scan_a(j, t);
    rs_dk_enc_scan_b(j);
    for (int t = 0; t < RS_DK_SCAN; t++)
        rs_dk_enc_scan_c(j, t);
    rs_dk_enc_scan_d(j, out);
    for (int t = 0; t < RS_DK_SCAN; t++)
        rs_dk_enc_scan_e(j, t);
    for (uint64_t g = 0; g < j->groups; g++)
        rs_dk_enc_body(j, cur, prev, out, g);
}

void rs_delta_apply_emulate(const rs_dk_job_t *j, const uint8_t *in, uint8_t *chunk)
{
    const uint8_t *body = in + RS_DELTA_HEADER_BYTES;
    j->err->code = RS_DK_ERR_NONE;
    if (j->kind == RS_DELTA_GAPS) {
        rs_dk_apply_gaps(j, body, chunk);
        return;
    }
    const uint64_t items = j->kind == RS_DELTA_DENSE ? j->groups : rs_dk_apply_items(j);
    if (j->kind != RS_DELTA_DENSE) {
        for (uint64_t i = 0; i < items; i++)
            rs_dk_apply_count(j, body, i);
        for (int t = 0; t < RS_DK_SCAN; t++)
            rs_dk_apply_scan_a(j, t);
        rs_dk_apply_scan_b(j);
        for (int t = 0; t < RS_DK_SCAN; t++)
            rs_dk_apply_scan_c(j, t);
    }
    for (uint64_t i = 0; i < items; i++)
        rs_dk_apply_item(j, body, chunk, i);
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
                                 : "bytes left after the last gap",
                        a);
    }
}
