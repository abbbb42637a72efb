/* Internal representation of the tensor catalogue and of layouts. */
#ifndef RS_LAYOUT_INTERNAL_H
#define RS_LAYOUT_INTERNAL_H

#include <stdbool.h>

#include "reshard/reshard.h"
#include "util/strpool.h"

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
    const char *name; /**< pooled (rs_decls_t.names) */
    reshard_dtype_t dtype;
    int ndim;
    int64_t shape[RESHARD_MAX_DIMS];
    int64_t numel;
    uint64_t bytes;
    bool zero; /**< reshard_layout_zero_buffer: every execute writes it with zeros */
} rs_decl_t;

/** The declarations of one parameter name: entry indices, by rank. */
typedef struct {
    int64_t *i;
    int64_t n, cap;
    int32_t last_rank; /**< rank of entry i[n - 1] (n > 0): declarations come rank by rank */
} rs_name_decls_t;

/** The declared buffers of a layout: entries in order of declaration, an
 *  index sorted by (rank, buffer) (found by binary search), and the names,
 *  each stored once however many ranks declare it (every rank of a model
 *  declares the same parameter names), with the entries that declare each,
 *  by rank. */
typedef struct {
    rs_decl_t *e;
    int64_t n, cap;
    int64_t *order;          /**< n entry indices sorted by (rank, buffer) */
    rs_strpool_t names;      /**< the declared names, each once */
    rs_name_decls_t *byname; /**< per name id (rs_strpool_t): its entries */
    int64_t byname_cap;
} rs_decls_t;

/** What planning asks of every fragment of a layout, kept as fragments are
 *  added (layout/facts.c). */
typedef struct {
    int64_t n;        /**< fragments covered: valid while n == the layout's n; -1: no longer kept */
    uint64_t hash;    /**< rs_fragment_hash of each, chained with rs_hash_mix in order */
    int32_t max_rank; /**< greatest rank of a fragment (-1: none) */
    int64_t strided;  /**< fragments whose strides do not show distinct elements at
                           distinct positions (rs_strides_injective false) */
    int64_t unfit;    /**< fragments not shown, when added, to lie in a declared buffer of
                           their dtype (rs_fragment_fits; none declared yet, or not fitting):
                           0 means every fragment fits its declaration, as declarations are
                           never changed */
    int64_t decl_pos; /**< where the last declaration was found (rs_decl_find_near) */
} rs_layout_facts_t;

/** A layout's fragments by tensor, kept as fragments are added
 *  (layout/by_tensor.c): per tensor its first and last fragment and its
 *  count, per fragment the next of its tensor (-1: none). */
typedef struct {
    int64_t n; /**< fragments covered: kept while n == the layout's n; -1: no longer kept */
    int64_t *next;
    int64_t ncap;
    int64_t *head, *tail, *count;
    int64_t tcap; /**< entries of head, tail and count */
} rs_tensor_lists_t;

/** Where a layout built by a generator (a model's, model/emit.c) came from,
 *  and, for a scoped layout, what it leaves out. Kept while the layout has
 *  exactly the fragments and declarations it was built with (rs_origin_of).
 *
 *  A scoped layout holds, of every rank, only the fragments of the tensors
 *  one rank's own plan needs (plan/scope.h: those the rank holds as a
 *  source, and those its own domain's ranks hold as destinations), and only
 *  that rank's declared buffers; the holders record who holds what of the
 *  whole layout, so the plan's chunk sizes (plan/chunk_caps.c) come out as
 *  from the whole layout. */
typedef struct {
    uint64_t hash;     /**< of the generator's inputs; 0: none (not generated, or changed) */
    int64_t n, ndecls; /**< the fragments and declarations it was built with */
    int32_t ntensors;  /**< and the catalogue's tensor count */
    int32_t rank;      /**< RESHARD_ALL_RANKS: whole; else scoped to this rank's own plan */
    uint64_t pair;     /**< scoped: the hash of both sides' origins, the rank and domain:
                            the same in the two layouts of one scoped build */
    int32_t side;      /**< scoped: 0 built as the source (training) side, 1 as the
                            destination (inference) side */
    int32_t lo, hi;    /**< scoped: the ranks [lo, hi) of that rank's domain */
    int32_t world;     /**< scoped: ranks the holder sets cover */
    int64_t words;     /**< scoped: 64-bit words of one holder set */
    uint64_t *holders; /**< scoped: per tensor, the ranks with a fragment of it
                            in the whole layout (words each) */
} rs_layout_origin_t;

struct reshard_layout {
    const reshard_tensors_t *tensors;
    reshard_fragment_t *f;
    int64_t n, cap;
    rs_decls_t decls;
    rs_layout_facts_t facts;   /**< of f[0..facts.n), while only appended to */
    rs_tensor_lists_t lists;   /**< of f[0..lists.n), while only appended to */
    rs_layout_origin_t origin; /**< set by the generator that built it */
    /** Ranks lost from the membership this layout is for (set by
     *  reshard_membership_layouts, sorted, unique): they hold no fragment and
     *  a plan gives them no work, not even as a landing or relay rank. */
    int32_t *gone;
    int32_t ngone;
};

/** The layout's origin while it is unchanged since it was built, else NULL. */
static inline const rs_layout_origin_t *rs_origin_of(const reshard_layout_t *l)
{
    const rs_layout_origin_t *o = &l->origin;
    return o->hash && o->n == l->n && o->ndecls == l->decls.n && o->ntensors == l->tensors->n
               ? o
               : NULL;
}

/** Link the fragment just appended (l->f[l->n - 1]) into l->lists, or stop
 *  keeping them (fragments changed otherwise, or out of memory). */
void rs_tensor_lists_add(reshard_layout_t *l);
void rs_tensor_lists_free(rs_tensor_lists_t *k);

/** Indices of @p l's fragments of the tensors t with @p want[t] (NULL:
 *  every tensor), grouped by tensor, in layout order within each: CSR,
 *  tensor t's at idx[start[t]..start[t+1]) (*@p start_out, catalogue size
 *  + 1 entries). From the kept lists, touching only the wanted tensors'
 *  fragments; else by two passes over the fragments. NULL when out of
 *  memory; the caller frees both arrays. */
int64_t *rs_layout_by_tensor(const reshard_layout_t *l, const uint8_t *want, int64_t **start_out);

/** Fold word @p w into @p h: a bijection of h for each w, so a change in
 *  one word of a record always changes the record's fold. */
static inline uint64_t rs_hash_fold(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

/** Mix word @p w into the running hash @p h (splitmix64 finaliser). */
static inline uint64_t rs_hash_mix(uint64_t h, uint64_t w)
{
    uint64_t x = h ^ (w + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/** Start of the chain of fragment hashes (rs_layout_facts_t.hash). */
#define RS_FRAGMENTS_SEED 0x467261676d656e74ULL

/** Hash of one fragment record: tensor, rank, buffer, ndim, base, and each
 *  dim's offset, extent and stride. */
uint64_t rs_fragment_hash(const reshard_fragment_t *f);

/** Sufficient condition for distinct elements of @p f's box to have
 *  distinct positions: with dims sorted by stride, each stride exceeds the
 *  span of the dims before it. */
bool rs_strides_injective(const reshard_fragment_t *f);

/** True when fragment @p f lies inside the bytes of its declared buffer
 *  @p b and has its dtype. */
bool rs_fragment_fits(const reshard_layout_t *l, const reshard_fragment_t *f, const rs_decl_t *b);

/** Fold the fragment just appended (l->f[l->n - 1]) into l->facts, or mark
 *  the facts no longer kept when the fragments changed otherwise. */
void rs_layout_facts_add(reshard_layout_t *l);

/** The facts of every fragment of @p l: the kept ones when they cover it,
 *  else computed by one pass (a layout whose fragments were written
 *  directly, as a plan's own copies are). */
void rs_layout_facts_of(const reshard_layout_t *l, rs_layout_facts_t *out);

/** reshard_layout_declare_buffer with the name's hash @p hash
 *  (rs_str_hash) already known: a model layout's caller pools the name too.
 *  @p layout, @p name and @p shape are not NULL. */
reshard_status_t rs_layout_declare(reshard_layout_t *layout, int32_t rank, int32_t buffer,
                                   const char *name, uint64_t hash, reshard_dtype_t dtype, int ndim,
                                   const int64_t *shape);

/** The largest zero-filled buffer (reshard_layout_zero_buffer) of @p rank in @p l, in
 *  bytes (0: none). */
uint64_t rs_layout_zero_most(const reshard_layout_t *l, int32_t rank);
/** Writes @p bytes of zeros at @p dst (device memory: the caller's way). */
typedef reshard_status_t (*rs_zero_put_fn)(void *ctx, void *dst, uint64_t bytes);
/** Write zeros into every zero-filled buffer of @p rank (@p bufs: its buffers, checked
 *  present by rs_layout_check_buffers): through @p put, or memset when NULL. Returns
 *  the first error of @p put. */
reshard_status_t rs_layout_zero_fill(const reshard_layout_t *l, int32_t rank,
                                     const reshard_buffer_t *bufs, rs_zero_put_fn put, void *ctx);
/** Declare @p e (of another layout) in @p to, with its zero-filled mark
 *  (reshard_layout_declare_buffer's errors). */
reshard_status_t rs_decl_copy(reshard_layout_t *to, const rs_decl_t *e);
/** The declared buffer (rank, buffer), or NULL (a binary search). */
const rs_decl_t *rs_decl_find(const rs_decls_t *d, int32_t rank, int32_t buffer);
/** As rs_decl_find, looking first at position *@p pos of d->order and the
 *  one after it, and leaving the position found in *@p pos: lookups in
 *  (rank, buffer) order, as a model layout's fragments come, cost O(1). */
const rs_decl_t *rs_decl_find_near(const rs_decls_t *d, int32_t rank, int32_t buffer, int64_t *pos);
/** Number of declared buffers of @p rank; *first receives the position in
 *  d->order of the first of them. */
int64_t rs_decls_of_rank(const rs_decls_t *d, int32_t rank, int64_t *first);
/** Free the declared buffers. */
void rs_decls_free(rs_decls_t *d);

/** Elements in a box (0 if any extent is 0). */
int64_t rs_box_numel(const reshard_box_t *b);
/** Intersection of a and b (same ndim); false when empty. */
bool rs_box_intersect(const reshard_box_t *a, const reshard_box_t *b, reshard_box_t *out);

/** Chunks at least this large that lie inside one piece's data, dense in the
 *  user buffer, move straight from/to it: no pack, no unpack. */
#define RS_DIRECT_MIN_BYTES (64u << 10)

/** Is every element of box @p b at consecutive positions of fragment @p f? */
static inline bool rs_box_dense(const reshard_box_t *b, const reshard_fragment_t *f)
{
    int64_t expect = 1;
    for (int d = b->ndim - 1; d >= 0; d--) {
        if (b->extent[d] == 1)
            continue;
        if (f->stride[d] != expect)
            return false;
        expect *= b->extent[d];
    }
    return true;
}

/** Do fragments @p a and @p b put the same elements of the same tensor at the same
 *  element offsets of their buffers (tensor, box, base and strides; not the buffer id)? */
static inline bool rs_fragment_same_place(const reshard_fragment_t *a, const reshard_fragment_t *b)
{
    if (a->tensor != b->tensor || a->base != b->base || a->box.ndim != b->box.ndim)
        return false;
    for (int d = 0; d < a->box.ndim; d++)
        if (a->box.offset[d] != b->box.offset[d] || a->box.extent[d] != b->box.extent[d] ||
            a->stride[d] != b->stride[d])
            return false;
    return true;
}

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

/** No two of @p rank's buffers in @p bufs (@p n of them) share a byte that @p rank's
 *  fragments of @p l write, except a buffer given twice (same pointer and size) whose
 *  fragments are the same (a tied weight bound under both names). BUFFER naming the rank,
 *  @p side, both buffers (id and declared name) and a shared byte of each; NOMEM.
 *  Called on destinations at every execution, before anything moves. */
reshard_status_t rs_layout_check_aliases(const reshard_layout_t *l, int32_t rank,
                                         const reshard_buffer_t *bufs, int32_t n, const char *side);
/** No byte that @p rank's fragments of @p src read in @p sb (@p ns buffers) lies in the
 *  span its fragments of @p dst write in @p db (@p nd buffers): a refit writes
 *  destinations while it still reads sources (an in-place reshard read its own output).
 *  BUFFER naming the rank, both buffers (id and declared name) and a shared byte; NOMEM.
 *  Called at every execution, before anything moves. */
reshard_status_t rs_layout_check_src_dst(const reshard_layout_t *src, const reshard_buffer_t *sb,
                                         int32_t ns, const reshard_layout_t *dst,
                                         const reshard_buffer_t *db, int32_t nd, int32_t rank);
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
