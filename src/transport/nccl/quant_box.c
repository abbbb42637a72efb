/* Host side of the block quantization: checking a box against its fragments, the job's
 * positions and thread split, and the CPU emulation of the kernel. No CUDA calls here, so
 * the tests can run all of it on a machine without a GPU. */
#include "transport/nccl/quant_box.h"

#include <inttypes.h>

#include "util/error.h"

/* Element position, in @p f's buffer, of point @p idx (tensor coordinates). */
static int64_t frag_pos(const reshard_fragment_t *f, const int64_t *idx)
{
    int64_t p = f->base;
    for (int k = 0; k < f->box.ndim; k++)
        p += (idx[k] - f->box.offset[k]) * f->stride[k];
    return p;
}

/* Is box (@p off, @p ext, @p nd dims) inside fragment @p f? */
static reshard_status_t inside(const char *what, const reshard_fragment_t *f, int nd,
                               const int64_t *off, const int64_t *ext)
{
    if (f == NULL || f->box.ndim != nd)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "quantize: the %s fragment has %d dims, the box %d", what,
                        f != NULL ? f->box.ndim : -1, nd);
    for (int k = 0; k < nd; k++)
        if (off[k] < f->box.offset[k] || off[k] + ext[k] > f->box.offset[k] + f->box.extent[k] ||
            f->stride[k] < 0) {
            reshard_box_t b = {.ndim = nd};
            for (int d = 0; d < nd; d++) {
                b.offset[d] = off[d];
                b.extent[d] = ext[d];
            }
            char a[256], c[256];
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "quantize: box %s is not inside tensor %d's %s fragment %s on rank %d",
                            rs_box_str(&b, a, sizeof a), f->tensor, what,
                            rs_box_str(&f->box, c, sizeof c), f->rank);
        }
    return RESHARD_OK;
}

reshard_status_t rs_quant_job_init(rs_quant_job_t *j, int mx, int64_t br, int64_t bc, int pow2,
                                   const void *dst, const reshard_fragment_t *dst_frag,
                                   const void *scale, const reshard_fragment_t *scale_frag,
                                   const void *src, const reshard_fragment_t *src_frag,
                                   const reshard_box_t *box)
{
    if (j == NULL || box == NULL || src_frag == NULL || dst_frag == NULL || scale_frag == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "quantize: NULL job, box or fragment");
    memset(j, 0, sizeof *j);
    const int nd = box->ndim;
    if (nd != 2 && nd != 3)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "quantize: tensor %d: a box of %d dims (2: rows, cols; 3: experts, rows, "
                        "cols)",
                        src_frag->tensor, nd);
    if (br < 1 || bc < 1 || br > (1 << 16) || bc > (1 << 16))
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "quantize: tensor %d: bad block %" PRId64 "x%" PRId64, src_frag->tensor, br,
                        bc);
    const int64_t *off = box->offset, *ext = box->extent;
    const int r = nd - 2, c = nd - 1;
    for (int k = 0; k < nd; k++) {
        if (ext[k] < 0 || off[k] < 0)
            return rs_error(RESHARD_ERR_INVALID_ARG, "quantize: tensor %d: a negative box",
                            src_frag->tensor);
        if (ext[k] == 0)
            return RESHARD_OK; /* nothing to quantize: blocks = 0 */
    }
    if (off[r] % br != 0 || off[c] % bc != 0) {
        char a[256];
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "quantize: tensor %d on rank %d: box %s does not start on a %" PRId64
                        "x%" PRId64 " block bound",
                        src_frag->tensor, src_frag->rank, rs_box_str(box, a, sizeof a), br, bc);
    }
    if (!mx && (uintptr_t)scale % 4 != 0)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "quantize: tensor %d on rank %d: the fp32 scale buffer is not 4-byte "
                        "aligned",
                        src_frag->tensor, src_frag->rank);
    if ((uintptr_t)src % 2 != 0)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "quantize: tensor %d on rank %d: the bf16 source buffer is not 2-byte "
                        "aligned",
                        src_frag->tensor, src_frag->rank);
    reshard_status_t st = inside("source", src_frag, nd, off, ext);
    if (st == RESHARD_OK)
        st = inside("destination", dst_frag, nd, off, ext);
    if (st != RESHARD_OK)
        return st;
    j->mx = mx != 0;
    j->pow2 = mx || pow2;
    j->br = br;
    j->bc = bc;
    j->ne = nd == 3 ? ext[0] : 1;
    j->nr = ext[r];
    j->nc = ext[c];
    j->nbr = (j->nr + br - 1) / br;
    j->nbc = (j->nc + bc - 1) / bc;
    j->blocks = j->ne * j->nbr * j->nbc;

    int64_t goff[RESHARD_MAX_DIMS] = {0}, gext[RESHARD_MAX_DIMS] = {0};
    if (nd == 3) {
        goff[0] = off[0];
        gext[0] = ext[0];
    }
    goff[r] = off[r] / br;
    goff[c] = off[c] / bc;
    gext[r] = j->nbr;
    gext[c] = j->nbc;
    st = inside("scale", scale_frag, nd, goff, gext);
    if (st != RESHARD_OK)
        return st;

    j->sbase = frag_pos(src_frag, off);
    j->dbase = frag_pos(dst_frag, off);
    j->gbase = frag_pos(scale_frag, goff);
    j->se = nd == 3 ? src_frag->stride[0] : 0;
    j->de = nd == 3 ? dst_frag->stride[0] : 0;
    j->ge = nd == 3 ? scale_frag->stride[0] : 0;
    j->sr = src_frag->stride[r];
    j->sc = src_frag->stride[c];
    j->dr = dst_frag->stride[r];
    j->dc = dst_frag->stride[c];
    j->gr = scale_frag->stride[r];
    j->gc = scale_frag->stride[c];
    j->vpr = (bc + RS_QB_VEC - 1) / RS_QB_VEC;
    j->nv = br * j->vpr;
    j->vpr_shift = -1;
    for (int k = 0; k < 31; k++)
        if (j->vpr == (int64_t)1 << k)
            j->vpr_shift = k;

    /* A vector is one 16-byte load when every vector of a block starts 16-byte aligned:
     * unit column stride, and the base, row, expert and block-column steps all multiples
     * of 8 elements. Likewise an 8-byte store of 8 e4m3 bytes. */
    const uintptr_t s0 = (uintptr_t)src + 2 * (uintptr_t)j->sbase;
    const uintptr_t d0 = (uintptr_t)dst + (uintptr_t)j->dbase;
    j->svec = j->sc == 1 && s0 % 16 == 0 && j->sr % 8 == 0 && j->se % 8 == 0 && bc % 8 == 0;
    j->dvec = j->dc == 1 && d0 % 8 == 0 && j->dr % 8 == 0 && j->de % 8 == 0 && bc % 8 == 0;

    /* Threads: one vector each for small blocks, up to 256 per block (RS_QB_REGS vectors
     * each for 128x128). */
    int g = 1;
    while (g < 256 && g < j->nv)
        g *= 2;
    j->group = g;
    j->threads = 256;
    return RESHARD_OK;
}

void rs_quant_emulate(const rs_quant_job_t *j, void *dst, void *scale, const void *src)
{
    rs_qvec_t v;
    for (int64_t b = 0; b < j->blocks; b++) {
        rs_quant_block_t blk;
        rs_qb_block(j, b, &blk);
        /* pass 1: each thread's maximum key over its vectors, then the group's maximum */
        uint32_t key = 0;
        for (int t = 0; t < j->group; t++) {
            uint32_t kt = 0;
            for (int64_t x = t; x < j->nv; x += j->group) {
                const uint32_t k = rs_qb_load(j, &blk, x, (const uint16_t *)src, &v);
                kt = k > kt ? k : kt;
            }
            key = kt > key ? kt : key;
        }
        const float s = rs_fp8_scale(key, j->pow2), inv = rs_fp8_inverse(s);
        /* pass 2: every vector's bytes, then the scale */
        for (int64_t x = 0; x < j->nv; x++) {
            rs_qb_load(j, &blk, x, (const uint16_t *)src, &v);
            rs_qb_store(j, &blk, x, &v, inv, (uint8_t *)dst);
        }
        rs_qb_store_scale(j, &blk, s, scale);
    }
}
