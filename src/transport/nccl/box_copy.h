/*
 * Strided box copies: the one primitive behind the NCCL transport's pack, unpack and
 * local copy. Shared by the CUDA kernel (kernels.cu), the host code that prepares a copy
 * (box_copy.c) and a CPU emulation of the kernel used by the tests, so the index
 * arithmetic that runs on the GPU is the arithmetic the CPU tests check.
 *
 * A copy moves elements [first, first+count) (row-major order) of a box from a source
 * to a destination; each side stores element i (a point of the box, 0-based) at element
 * position base + sum_d i[d] * stride[d] of its buffer. A packed (contiguous) side is the
 * row-major layout of the box with base -first, so element `first` lands at position 0.
 *
 * Work split: after merging dims that are contiguous on both sides and dropping
 * extent-1 dims, the last dim is a "row" of ext[nd-1] elements. Each row is cut into
 * tiles of `tile` elements; a unit is (row, tile), clipped to [first, first+count).
 * One CUDA block copies one unit at a time (grid-stride over units); when the row is
 * contiguous on both sides (inner strides 1) the block copies its bytes with the widest
 * vector both pointers allow, else element by element.
 */
#ifndef RS_NCCL_BOX_COPY_H
#define RS_NCCL_BOX_COPY_H

#include <stdint.h>
#include <string.h>

#include "reshard/reshard.h"
#include "exec/comm.h"

#ifdef __CUDACC__
#define RS_HD static __host__ __device__ __forceinline__
#else
#define RS_HD static inline
#endif

/** Target bytes of one unit (a tile of a row). */
#define RS_BOX_TILE_BYTES 16384

/** Most blocks of one copy's grid; block b copies units b, b + grid, b + 2*grid, ... */
#define RS_BOX_COPY_MAX_BLOCKS ((int64_t)1 << 20)

/** A prepared copy; plain data, passed to the kernel by value. */
typedef struct {
    int32_t nd;                     /**< dims after merging, 1..RESHARD_MAX_DIMS */
    uint32_t elem_size;             /**< bytes per element */
    int32_t contiguous;             /**< inner strides are 1 on both sides: copy rows as bytes */
    int32_t aligned;                /**< both base pointers are elem_size-aligned (element path) */
    int64_t ext[RESHARD_MAX_DIMS];  /**< extents; ext[nd-1] is the row length */
    int64_t sstr[RESHARD_MAX_DIMS]; /**< source strides, elements */
    int64_t dstr[RESHARD_MAX_DIMS]; /**< destination strides, elements */
    int64_t sbase, dbase;           /**< positions of box element 0 (may be < 0) */
    int64_t first, count;           /**< linear range of the box to copy */
    int64_t tile;                   /**< elements of a row per unit, >= 1 */
    int64_t tiles_per_row;          /**< ceil(row length / tile) */
    int64_t row0;                   /**< row holding element `first` */
    int64_t units;                  /**< rows touched * tiles_per_row; 0 when count == 0 */
} rs_box_copy_t;

/**
 * Unit @p u of copy @p d: false when the unit lies outside [first, first+count);
 * else the segment's length in elements and the element positions of its first
 * element on the source and destination side.
 */
RS_HD int rs_box_copy_segment(const rs_box_copy_t *d, int64_t u, int64_t *n, int64_t *spos,
                              int64_t *dpos)
{
    const int inner = d->nd - 1;
    const int64_t len = d->ext[inner];
    /* Divisions are slow on the GPU: none for one tile per row (runs up to 16 KiB). */
    const int64_t q = d->tiles_per_row == 1 ? u : u / d->tiles_per_row;
    const int64_t t = u - q * d->tiles_per_row;
    const int64_t r = d->row0 + q;
    const int64_t row_first = r * len; /* linear index of the row's element 0 */
    int64_t a = t * d->tile;           /* [a, b): in-row range of the tile */
    int64_t b = a + d->tile < len ? a + d->tile : len;
    const int64_t lo = d->first - row_first; /* in-row range of [first, first+count) */
    const int64_t hi = d->first + d->count - row_first;
    if (a < lo)
        a = lo;
    if (b > hi)
        b = hi;
    if (a >= b)
        return 0;
    /* Row r's index in the outer dims; the outermost needs no division (r < rows, so what
     * remains after the inner dims is already < ext[0]): none at all for 2-d copies. */
    int64_t sp = d->sbase, dp = d->dbase, rem = r;
    for (int k = inner - 1; k > 0; k--) {
        const int64_t c = rem % d->ext[k];
        rem /= d->ext[k];
        sp += c * d->sstr[k];
        dp += c * d->dstr[k];
    }
    if (inner > 0) {
        sp += rem * d->sstr[0];
        dp += rem * d->dstr[0];
    }
    *n = b - a;
    *spos = sp + a * d->sstr[inner];
    *dpos = dp + a * d->dstr[inner];
    return 1;
}

/* Moves of 1, 2, 4, 8 and 16 bytes between suitably aligned addresses. On the device they
 * are single typed loads/stores; on the host (emulation) memcpy. */
#ifdef __CUDA_ARCH__
#define RS_MOVE(T, dst, src) (*(T *)(dst) = *(const T *)(src))
typedef uint4 rs_vec16_t;
#define RS_LOAD16(src) (*(const uint4 *)(src))
#define RS_STORE16(dst, v) (*(uint4 *)(dst) = (v))
#else
#define RS_MOVE(T, dst, src) memcpy((dst), (src), sizeof(T))
typedef struct {
    uint64_t lo, hi;
} rs_vec16_t;
#define RS_LOAD16(src) rs_load16(src)
#define RS_STORE16(dst, v) memcpy((dst), &(v), 16)
static inline rs_vec16_t rs_load16(const char *src)
{
    rs_vec16_t v;
    memcpy(&v, src, 16);
    return v;
}
#endif

/**
 * Thread @p tid of @p nthr copies its share of @p n bytes from @p s to @p d (no overlap).
 * Width w = the largest of 16, 8, 4, 2, 1 with d and s equal modulo w; bytes before the
 * first w-aligned destination address and after the last whole vector go one by one.
 */
RS_HD void rs_copy_bytes_part(char *d, const char *s, int64_t n, int64_t tid, int64_t nthr)
{
    const uintptr_t mis = (uintptr_t)d ^ (uintptr_t)s;
    const int64_t w = (mis & 15u) == 0  ? 16
                      : (mis & 7u) == 0 ? 8
                      : (mis & 3u) == 0 ? 4
                      : (mis & 1u) == 0 ? 2
                                        : 1;
    int64_t head =
        (int64_t)(((uintptr_t)w - ((uintptr_t)d & (uintptr_t)(w - 1))) & (uintptr_t)(w - 1));
    if (head > n)
        head = n;
    const int64_t nvec = (n - head) / w;
    const int64_t tail = head + nvec * w;
    for (int64_t i = tid; i < head; i += nthr)
        d[i] = s[i];
    char *db = d + head;
    const char *sb = s + head;
    int64_t k = tid;
    switch (w) {
    case 16:
        /* Four independent 16-byte loads in flight per thread before the stores. */
        for (; k + 3 * nthr < nvec; k += 4 * nthr) {
            const rs_vec16_t v0 = RS_LOAD16(sb + 16 * k);
            const rs_vec16_t v1 = RS_LOAD16(sb + 16 * (k + nthr));
            const rs_vec16_t v2 = RS_LOAD16(sb + 16 * (k + 2 * nthr));
            const rs_vec16_t v3 = RS_LOAD16(sb + 16 * (k + 3 * nthr));
            RS_STORE16(db + 16 * k, v0);
            RS_STORE16(db + 16 * (k + nthr), v1);
            RS_STORE16(db + 16 * (k + 2 * nthr), v2);
            RS_STORE16(db + 16 * (k + 3 * nthr), v3);
        }
        for (; k < nvec; k += nthr) {
            const rs_vec16_t v = RS_LOAD16(sb + 16 * k);
            RS_STORE16(db + 16 * k, v);
        }
        break;
    case 8:
        for (; k < nvec; k += nthr)
            RS_MOVE(uint64_t, db + 8 * k, sb + 8 * k);
        break;
    case 4:
        for (; k < nvec; k += nthr)
            RS_MOVE(uint32_t, db + 4 * k, sb + 4 * k);
        break;
    case 2:
        for (; k < nvec; k += nthr)
            RS_MOVE(uint16_t, db + 2 * k, sb + 2 * k);
        break;
    default:
        for (; k < nvec; k += nthr)
            db[k] = sb[k];
        break;
    }
    for (int64_t i = tail + tid; i < n; i += nthr)
        d[i] = s[i];
}

/**
 * Thread @p tid of @p nthr copies its share of @p n elements of @p es bytes; element i is
 * at d + i*dstride*es and s + i*sstride*es. @p aligned: both bases are es-aligned, so
 * elements of 2, 4 or 8 bytes move as one typed access; otherwise byte by byte.
 */
RS_HD void rs_copy_elems_part(char *d, int64_t dstride, const char *s, int64_t sstride, int64_t n,
                              uint32_t es, int aligned, int64_t tid, int64_t nthr)
{
    const int64_t db = dstride * (int64_t)es, sb = sstride * (int64_t)es;
    const uint32_t w = aligned ? es : 0;
    for (int64_t i = tid; i < n; i += nthr) {
        char *dp = d + i * db;
        const char *sp = s + i * sb;
        switch (w) {
        case 1:
            *dp = *sp;
            break;
        case 2:
            RS_MOVE(uint16_t, dp, sp);
            break;
        case 4:
            RS_MOVE(uint32_t, dp, sp);
            break;
        case 8:
            RS_MOVE(uint64_t, dp, sp);
            break;
        default:
            for (uint32_t j = 0; j < es; j++)
                dp[j] = sp[j];
            break;
        }
    }
}

/** Thread @p tid of @p nthr copies its share of unit @p u of @p d (the kernel's body). */
RS_HD void rs_box_copy_unit(const rs_box_copy_t *d, char *dst, const char *src, int64_t u,
                            int64_t tid, int64_t nthr)
{
    int64_t n, sp, dp;
    if (!rs_box_copy_segment(d, u, &n, &sp, &dp))
        return;
    const int64_t es = d->elem_size;
    if (d->contiguous)
        rs_copy_bytes_part(dst + dp * es, src + sp * es, n * es, tid, nthr);
    else
        rs_copy_elems_part(dst + dp * es, d->dstr[d->nd - 1], src + sp * es, d->sstr[d->nd - 1], n,
                           d->elem_size, d->aligned, tid, nthr);
}

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Prepare a copy of elements [first, first+count) of a box of @p ndim dims and extents
 * @p ext from (source base @p sbase, strides @p sstr) to (@p dbase, @p dstr); positions
 * and strides in elements of @p elem_size bytes. @p src and @p dst are the buffers'
 * base pointers (only their alignment is read). Merges dims contiguous on both sides,
 * drops extent-1 dims, chooses the tiling. Errors: INVALID_ARG (ndim, extents, range,
 * elem_size 0).
 */
reshard_status_t rs_box_copy_init(rs_box_copy_t *d, int ndim, const int64_t *ext,
                                  const int64_t *sstr, int64_t sbase, const int64_t *dstr,
                                  int64_t dbase, int64_t first, int64_t count, uint32_t elem_size,
                                  const void *dst, const void *src);

/** Prepare the copy that packs @p span from fragment buffer @p buf into @p out (element
 *  `span->first` lands at out[0]). Errors: INVALID_ARG. */
reshard_status_t rs_box_copy_for_pack(rs_box_copy_t *d, const reshard_span_t *span, void *out,
                                      const void *buf);
/** Prepare the copy that unpacks @p span from @p in into fragment buffer @p buf. */
reshard_status_t rs_box_copy_for_unpack(rs_box_copy_t *d, const reshard_span_t *span, void *buf,
                                        const void *in);
/** Prepare the copy of @p box from (src_frag in src) to (dst_frag in dst). */
reshard_status_t rs_box_copy_for_local(rs_box_copy_t *d, void *dst,
                                       const reshard_fragment_t *dst_frag, const void *src,
                                       const reshard_fragment_t *src_frag, const reshard_box_t *box,
                                       uint32_t elem_size);

/** Row-major strides of a box with extents @p ext (the packed side). */
void rs_box_packed_strides(int ndim, const int64_t *ext, int64_t *strides);

/** Threads per block for @p d: enough 64-byte (or 1-element) shares to cover one unit,
 *  a power of two in [32, 256]. */
int rs_box_copy_threads(const rs_box_copy_t *d);

/** Blocks of the kernel's grid for @p d: min(units, RS_BOX_COPY_MAX_BLOCKS). */
int64_t rs_box_copy_blocks(const rs_box_copy_t *d);

/** Copy @p d on the CPU exactly as the kernel would with its grid (rs_box_copy_blocks) and
 *  @p nthr threads per block; for tests. */
void rs_box_copy_emulate(const rs_box_copy_t *d, void *dst, const void *src, int nthr);

/** As rs_box_copy_emulate with a grid of @p blocks blocks (>= 1), each walking its units
 *  grid-stride (b, b + blocks, ...): tests run the second and later passes with few units. */
void rs_box_copy_emulate_grid(const rs_box_copy_t *d, void *dst, const void *src, int nthr,
                              int64_t blocks);

#ifdef __cplusplus
}
#endif

#endif
