/* Writing fragments and buffers of one side, FP8 scale fragments derived from
 * the weight fragments, and the buffer table. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "model/model_internal.h"
#include "util/error.h"

reshard_status_t rs_buffers_new(reshard_model_buffers_t **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? RESHARD_OK : rs_error(RESHARD_ERR_NOMEM, "buffers: out of memory");
}

void reshard_model_buffers_destroy(reshard_model_buffers_t *b)
{
    if (!b)
        return;
    rs_strpool_free(&b->names);
    free(b->e);
    free(b);
}

int64_t reshard_model_buffers_count(const reshard_model_buffers_t *b)
{
    return b ? b->n : 0;
}

reshard_status_t reshard_model_buffers_get(const reshard_model_buffers_t *b, int64_t i,
                                           reshard_model_buffer_t *out)
{
    if (!b || !out || i < 0 || i >= b->n)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_buffers_get: bad argument");
    *out = (reshard_model_buffer_t){b->e[i].rank, b->e[i].buffer, b->e[i].bytes, b->e[i].name,
                                    b->e[i].module_buffer};
    return RESHARD_OK;
}

/* First entry of @p rank (entries are sorted by rank, then buffer). */
static int64_t first_of(const reshard_model_buffers_t *b, int32_t rank)
{
    int64_t lo = 0, hi = b->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (b->e[mid].rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int32_t reshard_model_buffer_count(const reshard_model_buffers_t *b, int32_t rank)
{
    if (!b)
        return 0;
    int64_t i = first_of(b, rank), n = 0;
    while (i + n < b->n && b->e[i + n].rank == rank)
        n++;
    return (int32_t)n;
}

uint64_t reshard_model_buffer_bytes(const reshard_model_buffers_t *b, int32_t rank, int32_t buffer)
{
    if (!b || buffer < 0)
        return 0;
    int64_t i = first_of(b, rank) + buffer;
    return i < b->n && b->e[i].rank == rank && b->e[i].buffer == buffer ? b->e[i].bytes : 0;
}

/* The scale tensor of @p t on this side, or -1: the training side of a
 * quantized inference form holds no scales. */
static int32_t scale_of(const rs_emit_t *e, int32_t t)
{
    return e->train && e->m->quant != RESHARD_QUANT_NONE ? -1 : e->ids->scale[t];
}

/* Declare buffer @p id of the current rank as parameter name+suffix of
 * @p dtype and @p shape, and list it in the buffer table when one is wanted. */
const char *rs_nm(char *buf, size_t size, const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (size == 0)
        return buf;
    if (na > size - 1)
        na = size - 1;
    if (nb > size - 1 - na)
        nb = size - 1 - na;
    memcpy(buf, a, na);
    memcpy(buf + na, b, nb);
    buf[na + nb] = 0;
    return buf;
}

const char *rs_name_join(char *buf, size_t size, const char *a, const char *b, int64_t index,
                         const char *c)
{
    char num[24], *q = num + sizeof num;
    *--q = '\0';
    for (int64_t v = index; index >= 0 && (v > 0 || q == num + sizeof num - 1); v /= 10)
        *--q = (char)('0' + v % 10);
    const char *part[4] = {a, b, q, c};
    size_t n = 0;
    for (int k = 0; k < 4 && size > 0; k++)
        for (const char *x = part[k]; *x && n + 1 < size; x++)
            buf[n++] = *x;
    if (size > 0)
        buf[n] = '\0';
    return buf;
}

/* vsnprintf, with "%s" (what most parameter names are formatted with) a copy. */
static void format_name(char *buf, size_t size, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void format_name(char *buf, size_t size, const char *fmt, va_list ap)
{
    if (strcmp(fmt, "%s") == 0)
        rs_nm(buf, size, va_arg(ap, const char *), "");
    else
        vsnprintf(buf, size, fmt, ap);
}

/* Whether the current rank's buffers are declared (the scope's rank only, in a scoped build). */
static bool declares(const rs_emit_t *e)
{
    return !e->scope || e->scope->declare_rank == RESHARD_ALL_RANKS ||
           e->scope->declare_rank == e->rank;
}

/* Whether the scope keeps the current rank's fragments of tensor @p t (and
 * records the rank among the tensor's holders). */
static bool keeps(rs_emit_t *e, int32_t t)
{
    const rs_emit_scope_t *sc = e->scope;
    if (!sc)
        return true;
    if (sc->holders)
        sc->holders[(int64_t)t * sc->words + (e->rank >> 6)] |= (uint64_t)1 << (e->rank & 63);
    if (!sc->want)
        return true;
    uint8_t w = sc->want[t];
    return (w & RS_KEEP_ALL) ||
           ((w & RS_KEEP_NEAR) && e->rank >= sc->near_lo && e->rank < sc->near_hi);
}

/* Add fragment @p f (of the current rank) if the scope keeps it. */
static reshard_status_t put(rs_emit_t *e, const reshard_fragment_t *f)
{
    return keeps(e, f->tensor) ? reshard_layout_add_fragment(e->layout, f) : RESHARD_OK;
}

static reshard_status_t open_one(rs_emit_t *e, int32_t id, const char *name, const char *suffix,
                                 reshard_dtype_t dtype, int ndim, const int64_t *shape)
{
    char full[320];
    rs_nm(full, sizeof full, name, suffix);
    uint64_t h = rs_str_hash(full); /* the layout and the buffer table pool the name alike */
    rs_error_clear();
    TRY(rs_layout_declare(e->layout, e->rank, id, full, h, dtype, ndim, shape));
    reshard_model_buffers_t *b = e->bufs;
    if (!b)
        return RESHARD_OK;
    if (b->n == b->cap) {
        int64_t cap = b->cap ? 2 * b->cap : 1024;
        rs_buf_entry_t *ne = realloc(b->e, (size_t)cap * sizeof *ne);
        if (!ne)
            return rs_error(RESHARD_ERR_NOMEM, "buffers: out of memory");
        b->e = ne;
        b->cap = cap;
    }
    const char *nm = rs_strpool_add(&b->names, full, h, NULL);
    if (!nm)
        return rs_error(RESHARD_ERR_NOMEM, "buffers: out of memory");
    /* the bytes it was just declared with (the declaration checked the shape) */
    uint64_t bytes = reshard_dtype_size(dtype);
    for (int k = 0; k < ndim; k++)
        bytes *= (uint64_t)shape[k];
    /* Megatron registers router.expert_bias with register_buffer (router.py
     * 182-197, d98e8a6): the module's named_buffers() has it, not its
     * named_parameters() */
    size_t nf = strlen(full), nb = sizeof ".router.expert_bias" - 1;
    int module_buffer = e->train && nf > nb && !strcmp(full + nf - nb, ".router.expert_bias");
    b->e[b->n++] = (rs_buf_entry_t){e->rank, id, bytes, nm, module_buffer};
    return RESHARD_OK;
}

/* Catalogue entry @p t, or NULL: read in place on the paths that run once
 * per fragment (reshard_tensors_info copies the whole record). */
static const rs_tensor_t *tensor_of(const rs_emit_t *e, int32_t t)
{
    return t >= 0 && t < e->T->n ? &e->T->t[t] : NULL;
}

int32_t rs_emit_buffer(rs_emit_t *e, int32_t like, int64_t experts, int64_t rows, int64_t width,
                       const char *fmt, ...)
{
    const rs_tensor_t *info = tensor_of(e, like);
    if (!info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit_buffer: bad tensor id %d", like);
    int32_t id = e->next_buf++;
    int32_t sid = scale_of(e, like);
    if (sid >= 0)
        e->next_buf++;
    if (!declares(e)) /* another rank's, in a scoped build: only the id */
        return id;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    format_name(name, sizeof name, fmt, ap);
    va_end(ap);
    /* The parameter's shape: a vector, a matrix, or stacked expert matrices. */
    int ndim = info->ndim == 3 && experts > 0 ? 3 : 2;
    if (experts < 1) /* one expert's own parameter: a matrix */
        experts = 1;
    int64_t shape[3] = {experts, rows, width}, vec = experts * rows * width;
    /* a quantized inference side holds e4m3 of a bf16 catalogue tensor */
    reshard_dtype_t dt = sid >= 0 && e->m->quant ? RESHARD_FP8_E4M3 : info->dtype;
    reshard_status_t s = info->ndim == 1 ? open_one(e, id, name, "", dt, 1, &vec)
                                         : open_one(e, id, name, "", dt, ndim, shape + 3 - ndim);
    if (s == RESHARD_OK && sid >= 0) {
        int64_t ss[3] = {experts, rs_cdiv(rows, rs_scale_block_rows(e->m)),
                         rs_cdiv(width, rs_scale_block_cols(e->m))};
        size_t len = strlen(name);
        bool dot_weight = len > 7 && !strcmp(name + len - 7, ".weight");
        if (dot_weight)
            name[len - 7] = '\0';
        reshard_tensor_info_t si;
        reshard_tensors_info(e->T, sid, &si);
        s = open_one(e, id + 1, name, dot_weight ? ".weight_scale_inv" : "_scale_inv", si.dtype,
                     ndim, ss + 3 - ndim);
    }
    return s == RESHARD_OK ? id : s;
}

int32_t rs_emit_buffer_shaped(rs_emit_t *e, int32_t like, int ndim, const int64_t *shape,
                              const char *fmt, ...)
{
    reshard_tensor_info_t info;
    if (reshard_tensors_info(e->T, like, &info) != RESHARD_OK || e->ids->scale[like] >= 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit_buffer_shaped: bad tensor %d", like);
    int32_t id = e->next_buf++;
    if (!declares(e))
        return id;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    format_name(name, sizeof name, fmt, ap);
    va_end(ap);
    reshard_status_t s = open_one(e, id, name, "", info.dtype, ndim, shape);
    return s == RESHARD_OK ? id : s;
}

reshard_status_t rs_emit_zero(rs_emit_t *e, int32_t buf)
{
    return declares(e) ? reshard_layout_zero_buffer(e->layout, e->rank, buf) : RESHARD_OK;
}

/* The FP8 scale fragment of weight fragment @p w: the same box in 128x128
 * blocks, in the scale buffer that mirrors the weight buffer's rows and
 * columns block by block. */
static reshard_status_t emit_scale(rs_emit_t *e, const reshard_fragment_t *w, int32_t sbuf)
{
    const int64_t B = rs_scale_block_rows(e->m), BC = rs_scale_block_cols(e->m);
    int32_t t = w->tensor, sid = e->ids->scale[t];
    int j = e->ids->scale_j[t];
    reshard_tensor_info_t tw;
    reshard_tensors_info(e->T, t, &tw);
    int vn = tw.view_ndim, ne = tw.ndim == 3 ? 1 : 0, col = vn - 1, last = vn - 2;
    const int64_t *vs = tw.view_shape;
    const reshard_box_t *b = &w->box;
    int64_t W = w->stride[last], C = vs[col];
    char why[160] = "";
    reshard_fragment_t s = {.tensor = sid, .rank = w->rank, .buffer = sbuf};
    s.box.ndim = 0;
    int64_t rows_per_expert = 0, scale_expert_stride = 0, CBW = rs_cdiv(W, BC);
    if (W <= 0 || (b->extent[col] > 1 && w->stride[col] != 1)) {
        snprintf(why, sizeof why, "columns are not contiguous rows of the buffer");
        goto bad;
    }
    if (ne) {
        rows_per_expert = w->stride[0] / W;
        if (w->stride[0] % W) {
            snprintf(why, sizeof why, "expert stride is not a whole number of rows");
            goto bad;
        }
        scale_expert_stride = rs_cdiv(rows_per_expert, B) * CBW;
        s.box.offset[0] = b->offset[0];
        s.box.extent[0] = b->extent[0];
        s.stride[0] = scale_expert_stride;
        s.box.ndim = 1;
    }
    for (int d = ne; d < j; d++) {
        int k = s.box.ndim++;
        s.box.offset[k] = b->offset[d];
        s.box.extent[k] = b->extent[d];
        s.stride[k] = 0;
        if (b->extent[d] > 1) {
            if (w->stride[d] % (W * B)) {
                snprintf(why, sizeof why, "view dim %d steps %lld buffer rows, not whole blocks", d,
                         (long long)(w->stride[d] / W));
                goto bad;
            }
            s.stride[k] = w->stride[d] / (W * B) * CBW;
        }
    }
    /* The merged row dims j..last: a contiguous run of rows [a, c). */
    int64_t inner = 1, total;
    for (int d = last; d > j; d--) {
        if (b->offset[d] != 0 || b->extent[d] != vs[d]) {
            snprintf(why, sizeof why, "rows are not one contiguous run (view dim %d)", d);
            goto bad;
        }
        if (b->extent[d - 1] > 1 && w->stride[d - 1] != W * inner * vs[d]) {
            snprintf(why, sizeof why, "rows are not contiguous in the buffer");
            goto bad;
        }
        inner *= vs[d];
    }
    total = vs[j] * inner;
    int64_t a = b->offset[j] * inner, c = (b->offset[j] + b->extent[j]) * inner;
    if (a % B || (c % B && c != total)) {
        snprintf(why, sizeof why, "rows [%lld, %lld) of %lld are not on %lld-row block bounds",
                 (long long)a, (long long)c, (long long)total, (long long)B);
        goto bad;
    }
    int k = s.box.ndim++;
    s.box.offset[k] = a / B;
    s.box.extent[k] = rs_cdiv(c, B) - a / B;
    s.stride[k] = CBW;
    int64_t c0 = b->offset[col], c1 = c0 + b->extent[col];
    if (c0 % BC || (c1 % BC && c1 != C)) {
        snprintf(why, sizeof why,
                 "columns [%lld, %lld) of %lld are not on %lld-column block bounds", (long long)c0,
                 (long long)c1, (long long)C, (long long)BC);
        goto bad;
    }
    k = s.box.ndim++;
    s.box.offset[k] = c0 / BC;
    s.box.extent[k] = rs_cdiv(c1, BC) - c0 / BC;
    s.stride[k] = 1;
    int64_t rem = w->base, eidx = 0;
    if (ne && w->stride[0] > 0) {
        eidx = rem / w->stride[0];
        rem -= eidx * w->stride[0];
    }
    int64_t brow = rem / W, bcol = rem % W;
    if (brow % B || bcol % BC) {
        snprintf(why, sizeof why, "it starts at buffer row %lld column %lld, inside a block",
                 (long long)brow, (long long)bcol);
        goto bad;
    }
    s.base = eidx * scale_expert_stride + brow / B * CBW + bcol / BC;
    return put(e, &s);
bad:
    return rs_error(RESHARD_ERR_CONFIG,
                    "%s: %s on rank %d is not sharded at %lldx%lld block granularity: %s",
                    B == 1 ? "mxfp8" : "fp8", tw.name, w->rank, (long long)B, (long long)BC, why);
}

reshard_status_t rs_emit(rs_emit_t *e, int32_t t, int32_t buf, const int64_t *off,
                         const int64_t *ext, int64_t base, const int64_t *st)
{
    const rs_tensor_t *info = tensor_of(e, t);
    if (!info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit: bad tensor id %d", t);
    /* a fragment a scoped build leaves out, with no scale fragment whose
     * block rules must still be checked: only its holder is recorded */
    if (e->scope && scale_of(e, t) < 0 && !keeps(e, t))
        return RESHARD_OK;
    reshard_fragment_t f = {.tensor = t, .rank = e->rank, .buffer = buf, .base = base};
    f.box.ndim = info->vndim;
    for (int d = 0; d < info->vndim; d++) {
        f.box.offset[d] = off[d];
        f.box.extent[d] = ext[d];
        f.stride[d] = st[d];
    }
    reshard_status_t s = put(e, &f);
    if (s == RESHARD_OK && scale_of(e, t) >= 0)
        s = emit_scale(e, &f, buf + 1);
    return s;
}

/* Row-major strides of a box whose dim 0 extent is @p n0 (the rest whole). */
static void dense_strides(const rs_tensor_t *info, int64_t *off, int64_t *ext, int64_t *st)
{
    int64_t acc = 1;
    for (int d = info->vndim - 1; d >= 0; d--) {
        st[d] = acc;
        off[d] = 0;
        ext[d] = info->vshape[d];
        acc *= info->vshape[d];
    }
}

/* Tensor @p t dense at @p base of buffer @p buf: all of it, or only rows
 * [rows[0], rows[0] + rows[1]) of dim 0 when @p rows is not NULL. */
static reshard_status_t emit_dense(rs_emit_t *e, int32_t t, int32_t buf, int64_t base,
                                   const int64_t *rows)
{
    const rs_tensor_t *info = tensor_of(e, t);
    if (!info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit: bad tensor id %d", t);
    int64_t off[RESHARD_MAX_DIMS], ext[RESHARD_MAX_DIMS], st[RESHARD_MAX_DIMS];
    dense_strides(info, off, ext, st);
    if (rows) {
        off[0] = rows[0];
        ext[0] = rows[1];
    }
    return rs_emit(e, t, buf, off, ext, base, st);
}

reshard_status_t rs_emit_full(rs_emit_t *e, int32_t t, int32_t buf, int64_t base)
{
    return emit_dense(e, t, buf, base, NULL);
}

reshard_status_t rs_emit_dim0(rs_emit_t *e, int32_t t, int32_t buf, int64_t base, int64_t o,
                              int64_t n)
{
    return emit_dense(e, t, buf, base, (const int64_t[2]){o, n});
}

reshard_status_t rs_emit_cols(rs_emit_t *e, int32_t t, int32_t buf, int64_t c0, int64_t n)
{
    const rs_tensor_t *info = tensor_of(e, t);
    if (!info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit_cols: bad tensor id %d", t);
    int64_t off[2] = {0, c0}, ext[2] = {info->shape[0], n}, st[2] = {n, 1};
    return rs_emit(e, t, buf, off, ext, 0, st);
}

reshard_status_t rs_emit_own(rs_emit_t *e, int32_t t, const char *name)
{
    const rs_tensor_t *info = tensor_of(e, t);
    if (!info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit_own: bad tensor id %d", t);
    int64_t rows = info->ndim >= 2 ? info->shape[info->ndim - 2] : 1;
    int64_t experts = info->ndim == 3 ? info->shape[0] : 1;
    int32_t buf = rs_emit_buffer(e, t, experts, rows, info->shape[info->ndim - 1], "%s", name);
    if (buf < 0)
        return (reshard_status_t)buf;
    return rs_emit_full(e, t, buf, 0);
}

reshard_status_t rs_emit_mlp(rs_emit_t *e, int32_t gate, int32_t up, int32_t down, int64_t i0,
                             int64_t n, const char *fc1_name, const char *fc2_name)
{
    int64_t H = e->m->H;
    int32_t b1 = rs_emit_buffer(e, gate, 1, 2 * n, H, "%s", fc1_name);
    if (b1 < 0)
        return (reshard_status_t)b1;
    int64_t off[2] = {i0, 0}, ext[2] = {n, H}, st[2] = {H, 1};
    reshard_status_t s = rs_emit(e, gate, b1, off, ext, 0, st);
    if (s == RESHARD_OK)
        s = rs_emit(e, up, b1, off, ext, n * H, st);
    if (s != RESHARD_OK)
        return s;
    int32_t b2 = rs_emit_buffer(e, down, 1, H, n, "%s", fc2_name);
    if (b2 < 0)
        return (reshard_status_t)b2;
    return rs_emit_cols(e, down, b2, i0, n);
}

/* The shared expert's gate rows i0..i0+n, then its up rows, at @p base of
 * buffer @p b ([2n, W]). */
static reshard_status_t emit_shared_fc1(rs_emit_t *e, const rs_layer_ids_t *l, int32_t b,
                                        int64_t base, int64_t i0, int64_t n, int64_t W)
{
    int64_t off[2] = {i0, 0}, ext[2] = {n, W}, st[2] = {W, 1};
    TRY(rs_emit(e, l->s_gate, b, off, ext, base, st));
    return rs_emit(e, l->s_up, b, off, ext, base + n * W, st);
}

/* The experts of one stacked (or per-expert) buffer pair: stack row k holds
 * logical expert @p logical[k] (NULL: e0 + k); runs of consecutive experts
 * are one fragment. */
static reshard_status_t experts_into(rs_emit_t *e, const rs_layer_ids_t *l, const int32_t *logical,
                                     int64_t e0, int64_t ne, int64_t i0, int64_t n, bool per_expert,
                                     bool shared, const char *fc1_name, const char *fc2_name)
{
    /* W: the experts' input width (H, or a latent size); gated: fc1 is
     * [gate; up], else up alone (nemotron_h's squared-ReLU experts) */
    const rs_tensor_t *down = tensor_of(e, l->e_down);
    if (!down)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit_experts: bad tensor id %d", l->e_down);
    int64_t W = down->shape[1], nb = per_expert ? ne : 1, per = nb ? ne / nb : 0;
    bool gated = l->e_gate >= 0;
    int64_t g = gated ? 2 : 1;
    /* pass 0: fc1 [per, g*n, W]; pass 1: fc2 [per, W, n] */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t k = 0; k < nb; k++) {
            const char *name = pass ? fc2_name : fc1_name;
            int32_t like = pass ? l->e_down : gated ? l->e_gate : l->e_up;
            int64_t rows = pass ? W : g * n, width = pass ? n : W;
            int32_t b = per_expert
                            ? rs_emit_buffer(e, like, 0, rows, width, "%s%lld", name, (long long)k)
                            : rs_emit_buffer(e, like, per + shared, rows, width, "%s", name);
            if (b < 0)
                return (reshard_status_t)b;
            if (shared) /* stack row per: the shared expert's matrices, sliced alike */
                TRY(pass ? rs_emit(e, l->s_down, b, (int64_t[2]){0, i0}, (int64_t[2]){W, n},
                                   per * W * n, (int64_t[2]){n, 1})
                         : emit_shared_fc1(e, l, b, per * g * n * W, i0, n, W));
            for (int64_t j = 0; j < per;) { /* stack rows j..j+run: experts ef..ef+run */
                int64_t ef = logical ? logical[k * per + j] : e0 + k * per + j, run = 1;
                while (j + run < per &&
                       (logical ? logical[k * per + j + run] : e0 + k * per + j + run) == ef + run)
                    run++;
                int64_t st0 = pass ? W * n : g * n * W, base = j * st0;
                if (pass) {
                    int64_t off[3] = {ef, 0, i0}, ext[3] = {run, W, n}, st[3] = {st0, n, 1};
                    TRY(rs_emit(e, l->e_down, b, off, ext, base, st));
                } else {
                    int64_t off[3] = {ef, i0, 0}, ext[3] = {run, n, W}, st[3] = {st0, W, 1};
                    TRY(rs_emit(e, like, b, off, ext, base, st));
                    if (gated)
                        TRY(rs_emit(e, l->e_up, b, off, ext, base + n * W, st));
                }
                j += run;
            }
        }
    return RESHARD_OK;
}

reshard_status_t rs_emit_experts(rs_emit_t *e, const rs_layer_ids_t *l, int64_t e0, int64_t ne,
                                 int64_t i0, int64_t n, bool per_expert, const char *fc1_name,
                                 const char *fc2_name)
{
    return experts_into(e, l, NULL, e0, ne, i0, n, per_expert, false, fc1_name, fc2_name);
}

reshard_status_t rs_emit_experts_fused_shared(rs_emit_t *e, const rs_layer_ids_t *l, int64_t e0,
                                              int64_t ne, int64_t i0, int64_t n,
                                              const char *fc1_name, const char *fc2_name)
{
    if (l->s_gate < 0 || l->e_gate < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit_experts_fused_shared: no shared expert");
    return experts_into(e, l, NULL, e0, ne, i0, n, false, true, fc1_name, fc2_name);
}

reshard_status_t rs_emit_expert_slots(rs_emit_t *e, const rs_layer_ids_t *l, const int32_t *logical,
                                      int64_t ne, int64_t i0, int64_t n, const char *fc1_name,
                                      const char *fc2_name)
{
    return experts_into(e, l, logical, 0, ne, i0, n, false, false, fc1_name, fc2_name);
}

reshard_status_t rs_emit_vocab(rs_emit_t *e, int32_t t, int64_t vpad, int32_t parts, int32_t part,
                               const char *name)
{
    int64_t V = e->m->V, H = e->m->H, per = vpad / parts, r0 = part * per;
    int32_t buf = rs_emit_buffer(e, t, 1, per, H, "%s", name);
    if (buf < 0)
        return (reshard_status_t)buf;
    int64_t rows = V - r0 < per ? V - r0 : per;
    return rows > 0 ? rs_emit_dim0(e, t, buf, 0, r0, rows) : RESHARD_OK;
}

uint64_t rs_side_origin(const reshard_model_t *m, bool train, const char *spec_text,
                        int32_t rank_offset)
{
    uint64_t h = rs_hash_mix(m->origin, train ? 0x747261696eULL : 0x696e666572ULL);
    h = rs_hash_mix(h, rs_str_hash(spec_text));
    h = rs_hash_mix(h, (uint64_t)(uint32_t)rank_offset);
    return h ? h : 1;
}

reshard_status_t rs_emit_side(const reshard_model_t *model, const reshard_tensors_t *tensors,
                              bool train, int32_t world, int32_t rank_offset, rs_rank_params_fn fn,
                              const void *spec, const rs_emit_scope_t *scope, uint64_t origin,
                              reshard_layout_t **out, reshard_model_buffers_t **buffers)
{
    rs_model_ids_t ids;
    reshard_status_t s = rs_model_ids_for(model, tensors, &ids);
    if (s != RESHARD_OK)
        return s;
    rs_emit_t e = {.m = model, .T = tensors, .ids = &ids, .train = train, .scope = scope};
    s = reshard_layout_create(tensors, &e.layout);
    if (s == RESHARD_OK && buffers)
        s = rs_buffers_new(&e.bufs);
    int32_t lo = 0, hi = world;
    if (scope) {
        lo = scope->lo - rank_offset > 0 ? scope->lo - rank_offset : 0;
        hi = scope->hi - rank_offset < world ? scope->hi - rank_offset : world;
    }
    for (int32_t r = lo; s == RESHARD_OK && r < hi; r++) {
        e.rank = rank_offset + r;
        e.side_rank = r;
        e.next_buf = 0;
        s = fn(&e, r, spec);
    }
    rs_model_ids_free(&ids);
    if (s == RESHARD_OK)
        e.layout->origin = (rs_layout_origin_t){.hash = origin,
                                                .n = e.layout->n,
                                                .ndecls = e.layout->decls.n,
                                                .ntensors = tensors->n,
                                                .rank = RESHARD_ALL_RANKS};
    if (s != RESHARD_OK) {
        reshard_layout_destroy(e.layout);
        reshard_model_buffers_destroy(e.bufs);
        return s;
    }
    *out = e.layout;
    if (buffers)
        *buffers = e.bufs;
    return RESHARD_OK;
}

reshard_status_t rs_emit_column(rs_emit_t *e, int32_t t, int32_t tp, int32_t rank_tp,
                                const char *name)
{
    const rs_tensor_t *info = tensor_of(e, t);
    if (!info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit_column: bad tensor id %d", t);
    int64_t n0 = info->vshape[0] / tp;
    /* a vector [n]: its n/tp entries */
    int64_t rows = info->shape[0] / tp, width = info->ndim == 1 ? 1 : info->shape[info->ndim - 1];
    int32_t b = rs_emit_buffer(e, t, 1, rows, width, "%s", name);
    if (b < 0)
        return (reshard_status_t)b;
    return rs_emit_dim0(e, t, b, 0, rank_tp * n0, n0);
}

reshard_status_t rs_emit_row(rs_emit_t *e, int32_t t, int32_t tp, int32_t rank_tp, const char *name)
{
    const rs_tensor_t *info = tensor_of(e, t);
    if (!info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rs_emit_row: bad tensor id %d", t);
    int64_t n = info->shape[1] / tp;
    int32_t b = rs_emit_buffer(e, t, 1, info->shape[0], n, "%s", name);
    if (b < 0)
        return (reshard_status_t)b;
    return rs_emit_cols(e, t, b, rank_tp * n, n);
}
