/* Internal representation of the tensor catalogue and of layouts. */
#ifndef RS_LAYOUT_INTERNAL_H
#define RS_LAYOUT_INTERNAL_H

#include <stdbool.h>

#include "reshard/reshard.h"

typedef struct {
    char *name;
    reshard_dtype_t dtype;
    int ndim;
    int64_t shape[RESHARD_MAX_DIMS];
    int vndim;
    int64_t vshape[RESHARD_MAX_DIMS];
    int64_t numel;
    uint64_t bytes;
    reshard_quant_t quant; /**< destination form (kind NONE: as the dtype) */
} rs_tensor_t;

struct reshard_tensors {
    rs_tensor_t *t;
    int32_t n, cap;
};

/** A declared buffer (reshard_layout_declare_buffer). */
typedef struct {
    int32_t rank, buffer;
    char *name;
    reshard_dtype_t dtype;
    int ndim;
    int64_t shape[RESHARD_MAX_DIMS];
    int64_t numel;
    uint64_t bytes;
} rs_decl_t;

/** The declared buffers of a layout: entries in order of declaration, an
 *  index sorted by (rank, buffer), and two hash indexes (open addressing,
 *  -1 = empty slot) on (rank, buffer) and on (rank, name). */
typedef struct {
    rs_decl_t *e;
    int64_t n, cap;
    int64_t *order;   /**< n entry indices sorted by (rank, buffer) */
    int64_t *by_id;   /**< hcap slots */
    int64_t *by_name; /**< hcap slots */
    int64_t hcap;     /**< power of two, > 2n */
} rs_decls_t;

struct reshard_layout {
    const reshard_tensors_t *tensors;
    reshard_fragment_t *f;
    int64_t n, cap;
    rs_decls_t decls;
};

/** The declared buffer (rank, buffer), or NULL. */
const rs_decl_t *rs_decl_find(const rs_decls_t *d, int32_t rank, int32_t buffer);
/** Number of declared buffers of @p rank; *first receives the position in
 *  d->order of the first of them. */
int64_t rs_decls_of_rank(const rs_decls_t *d, int32_t rank, int64_t *first);
/** Free the declared buffers. */
void rs_decls_free(rs_decls_t *d);

/** Elements in a box (0 if any extent is 0). */
int64_t rs_box_numel(const reshard_box_t *b);
/** Intersection of a and b (same ndim); false when empty. */
bool rs_box_intersect(const reshard_box_t *a, const reshard_box_t *b, reshard_box_t *out);
/** True when @p inner lies inside @p outer. */
bool rs_box_contains(const reshard_box_t *outer, const reshard_box_t *inner);
/** Row-major flat index of point @p idx in a view shape. */
int64_t rs_flat_index(int ndim, const int64_t *shape, const int64_t *idx);
/** Element position in the fragment's buffer of global view point @p idx. */
int64_t rs_frag_pos(const reshard_fragment_t *f, const int64_t *idx);

/** Bytes of one element of fragment @p f: its tensor's dtype, or 1 for a
 *  quantized tensor (reshard_tensors_set_quant) in a buffer declared e4m3. */
size_t rs_frag_elem_size(const reshard_layout_t *layout, const reshard_fragment_t *f);

/** Bytes of the fragment's buffer up to and including its last element. */
uint64_t rs_fragment_end_bytes(const reshard_layout_t *layout, const reshard_fragment_t *f);

/** Advance @p idx (a point of @p box) to the start of the next innermost row:
 *  dims 0..ndim-2 count like an odometer, the last dim is reset to its
 *  offset. False after the last row. */
bool rs_box_next_row(const reshard_box_t *box, int64_t *idx);

/** A fragment as contiguous runs of bytes: dims whose stride equals the span
 *  of the dims inside them are merged, so only the outer dims enumerate runs. */
typedef struct {
    int nouter;                       /**< dims enumerated */
    int64_t ext[RESHARD_MAX_DIMS];    /**< their extents */
    int64_t stride[RESHARD_MAX_DIMS]; /**< their strides (elements) */
    uint64_t run_bytes;               /**< bytes of one run */
    int64_t runs;                     /**< number of runs: product of ext */
} rs_runs_t;

/** One contiguous byte range [lo, hi) of fragment @c frag in its buffer. */
typedef struct {
    uint64_t lo, hi;
    int64_t frag;
} rs_run_t;

void rs_fragment_runs(const reshard_layout_t *l, const reshard_fragment_t *f, rs_runs_t *r);
/** Write the runs of @p f (tagged @p frag) to @p out; returns how many. */
int64_t rs_fragment_run_list(const reshard_layout_t *l, const reshard_fragment_t *f, int64_t frag,
                             rs_run_t *out);
/** qsort comparator of rs_run_t by lo (then fragment). */
int rs_run_cmp(const void *a, const void *b);
/** Sort @p n runs as qsort with rs_run_cmp would, in linear time when they
 *  are a few ascending stretches (a few fragments' runs interleaved). */
void rs_run_sort(rs_run_t *r, int64_t n);

/** Every declared buffer of @p rank in @p l that is given (non-NULL) has
 *  exactly the declared bytes, and the declared name and dtype where the
 *  caller gave them; every fragment of @p rank has its buffer given and at
 *  least as large as it needs. BUFFER naming the rank, @p side ("source",
 *  "destination"), the buffer (id and name) and both sizes, or the tensor
 *  and box, otherwise. */
reshard_status_t rs_layout_check_buffers(const reshard_layout_t *l, int32_t rank,
                                         const reshard_buffer_t *bufs, int32_t n, const char *side);

/** The pattern value of element @p flat of tensor @p tensor (all 8 bytes). */
uint64_t rs_pattern_value(int32_t tensor, int64_t flat);
/** Check destination fragment @p f of quantized tensor @p T (@p scale
 *  false: its e4m3 bytes) or of T's scale tensor (@p scale true) against
 *  the rule applied to T's bf16 pattern (layout/quant_pattern.c): the number
 *  of wrong elements, the first one's flat index in *@p first_bad. */
int64_t rs_quant_pattern_check(const reshard_layout_t *l, const reshard_fragment_t *f,
                               const uint8_t *buf, int32_t T, bool scale, int64_t *first_bad);

#endif
