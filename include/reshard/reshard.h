/*
 * reshard — move distributed tensors from one layout to another.
 *
 * The public C API. Read it top to bottom once:
 *
 *   1. Status codes and the last-error message.
 *   2. Data types.
 *   3. Logical tensors (reshard_tensors_t): name, dtype, global shape and an
 *      optional finer view shape in which every box is expressed.
 *   4. Layouts (reshard_layout_t): fragments, i.e. "this box of tensor T lives
 *      in buffer B of rank R at base offset o with strides s", given directly
 *      or compiled from a DTensor-style mesh + placements.
 *   5. Plans (reshard_plan_t): computed once from a source and a destination
 *      layout (pure computation, no communication), executed many times.
 *   6. Communicators (reshard_comm_t): the transport that moves the bytes
 *      (in-process threads here; MPI in reshard_mpi.h, NCCL in reshard_nccl.h).
 *   7. The verification pattern used by the tools and tests.
 *
 * Units: shapes, boxes, offsets and strides are in ELEMENTS of the tensor's
 * dtype, in view-shape coordinates; buffer sizes and byte counters are in
 * BYTES. All counts are 64-bit: tensors over 2^31 elements are normal.
 *
 * Placement semantics follow PyTorch DTensor (torch.distributed.tensor):
 * Shard(d) splits like torch.chunk, several mesh dims on one tensor dim
 * apply left to right, _StridedShard(d, split_factor) takes the i-th chunk of
 * each of split_factor blocks.
 *
 * Thread safety: distinct handles may be used from distinct threads; the
 * last-error message is per thread.
 */
#ifndef RESHARD_H
#define RESHARD_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/reshard_config.h" /* generated: RESHARD_HAVE_MPI, RESHARD_HAVE_NCCL */

#ifdef __cplusplus
extern "C" {
#endif

#define RESHARD_VERSION_MAJOR 0
#define RESHARD_VERSION_MINOR 1
#define RESHARD_VERSION_PATCH 0

/** Most dims of a global or view shape. */
#define RESHARD_MAX_DIMS 8

/* ------------------------------------------------------------------ */
/* 1. Status                                                           */
/* ------------------------------------------------------------------ */

/** 0 is success; every error is negative and distinct. */
typedef enum {
    RESHARD_OK = 0,
    RESHARD_ERR_INVALID_ARG = -1,  /**< NULL handle, bad enum, bad count */
    RESHARD_ERR_NOMEM = -2,        /**< allocation failed */
    RESHARD_ERR_SHAPE = -3,        /**< shapes disagree (view vs global, src vs dst) */
    RESHARD_ERR_DTYPE = -4,        /**< dtypes disagree */
    RESHARD_ERR_BOX = -5,          /**< box outside the tensor's view shape */
    RESHARD_ERR_UNCOVERED = -6,    /**< a destination element has no source */
    RESHARD_ERR_OVERLAP = -7,      /**< two destination fragments write the same bytes */
    RESHARD_ERR_RANK = -8,         /**< rank outside [0, world_size) */
    RESHARD_ERR_OVERFLOW = -9,     /**< a size does not fit in 64 bits */
    RESHARD_ERR_BUFFER = -10,      /**< buffer missing or smaller than its fragments need */
    RESHARD_ERR_CONFIG = -11,      /**< model / parallel configuration violates a rule */
    RESHARD_ERR_TRANSPORT = -12,   /**< the transport (MPI, NCCL) reported an error */
    RESHARD_ERR_TIMEOUT = -13,     /**< a peer did not answer within the timeout */
    RESHARD_ERR_UNSUPPORTED = -14, /**< not built in, or no device at run time */
    RESHARD_ERR_IO = -15,          /**< a file could not be read or parsed */
    RESHARD_ERR_VERIFY = -16,      /**< verification found a wrong or unwritten element */
    RESHARD_ERR_STAGING = -17,     /**< staging bound too small for the plan */
    RESHARD_ERR_MISMATCH = -18,    /**< ranks planned from different inputs (plan
                                        fingerprints differ) */
} reshard_status_t;

/** Static English name of a status ("RESHARD_ERR_UNCOVERED"). Never NULL. */
const char *reshard_status_string(reshard_status_t status);

/**
 * The message of the last error returned on the calling thread, naming the
 * tensor, rank and box involved where there is one. Empty string when the
 * last call succeeded. The pointer stays valid until the next reshard call on
 * this thread. Never NULL.
 */
const char *reshard_last_error(void);

/* ------------------------------------------------------------------ */
/* 2. Data types                                                       */
/* ------------------------------------------------------------------ */

typedef enum {
    RESHARD_BF16 = 0,
    RESHARD_FP16,
    RESHARD_FP32,
    RESHARD_FP64,
    RESHARD_FP8_E4M3,
    RESHARD_FP8_E5M2,
    RESHARD_INT8,
    RESHARD_UINT8,
    RESHARD_INT32,
    RESHARD_INT64,
    RESHARD_DTYPE_COUNT
} reshard_dtype_t;

/** Size of one element in bytes; 0 for an invalid dtype. */
size_t reshard_dtype_size(reshard_dtype_t dtype);
/** Lower-case name ("bf16", "fp8_e4m3", ...); "?" for an invalid dtype. */
const char *reshard_dtype_name(reshard_dtype_t dtype);

/* ------------------------------------------------------------------ */
/* 3. Logical tensors                                                  */
/* ------------------------------------------------------------------ */

/** An ordered catalogue of logical tensors; ids are 0, 1, 2, ... in order of
 *  addition. Both sides of a refit use the same catalogue. */
typedef struct reshard_tensors reshard_tensors_t;

/** Create an empty catalogue. Errors: INVALID_ARG (out NULL), NOMEM. Local. */
reshard_status_t reshard_tensors_create(reshard_tensors_t **out);
/** Free a catalogue; layouts made over it must be destroyed first. NULL ok. */
void reshard_tensors_destroy(reshard_tensors_t *tensors);

/**
 * Add a logical tensor.
 * @param name        unique name, e.g. HF "model.layers.0.self_attn.q_proj.weight"
 * @param dtype       element type
 * @param ndim        1..RESHARD_MAX_DIMS dims of the global (row-major) shape
 * @param shape       global shape in elements; every extent >= 1
 * @param view_ndim   0 for "view = global shape", else 1..RESHARD_MAX_DIMS
 * @param view_shape  a finer reshape (same element count, same row-major
 *                    order) in which boxes of this tensor are expressed,
 *                    e.g. [heads, head_dim, hidden] for [heads*head_dim, hidden]
 * @param id_out      receives the tensor id (may be NULL)
 * Errors: INVALID_ARG (NULL, empty name, ndim out of range, duplicate name), SHAPE (an
 * extent < 1, or the view's element count differs), OVERFLOW (element count
 * or byte size over 2^63), NOMEM. Local; no communication.
 */
reshard_status_t reshard_tensors_add(reshard_tensors_t *tensors, const char *name,
                                     reshard_dtype_t dtype, int ndim, const int64_t *shape,
                                     int view_ndim, const int64_t *view_shape, int32_t *id_out);

/** Number of tensors. */
int32_t reshard_tensors_count(const reshard_tensors_t *tensors);
/** Id of the tensor with this name, or -1. */
int32_t reshard_tensors_find(const reshard_tensors_t *tensors, const char *name);

/** What a catalogue says about one tensor (pointers into the catalogue). */
typedef struct {
    const char *name;
    reshard_dtype_t dtype;
    int ndim;
    int64_t shape[RESHARD_MAX_DIMS];
    int view_ndim; /**< always >= 1: equals ndim when no view was given */
    int64_t view_shape[RESHARD_MAX_DIMS];
    int64_t numel; /**< elements */
    uint64_t bytes;
} reshard_tensor_info_t;

/** Describe tensor @p id. Errors: INVALID_ARG (NULL or id out of range). */
reshard_status_t reshard_tensors_info(const reshard_tensors_t *tensors, int32_t id,
                                      reshard_tensor_info_t *info);

/** Sum of the bytes of every tensor once. */
uint64_t reshard_tensors_bytes(const reshard_tensors_t *tensors);

/*
 * Quantized destination form. A destination may hold a tensor quantized
 * from the source's bf16 into fp8 e4m3 with one scale per block, the scales
 * being a logical tensor of their own:
 *   RESHARD_QUANT_FP8_BLOCK  128x128 blocks of the last two dims, fp32 scales
 *     (vLLM / DeepSeek-V3 "weight_scale_inv", shape [E?] x ceil(rows/128) x
 *     ceil(cols/128)); pow2_scale rounds each scale up to a power of two
 *     (UE8M0, as DeepGEMM wants).
 *   RESHARD_QUANT_MXFP8      1x32 blocks along the last (input) dim, e8m0 scales
 *     (RESHARD_UINT8, shape [E?] x rows x ceil(cols/32); OCP MX v1.0), always
 *     powers of two.
 * The rule, per block: amax = max |x| over the block's finite source values,
 * at least 1e-4; scale = amax / 448 (rounded up to a power of two when
 * pow2); element = e4m3(x * (1 / scale)), round to nearest even, saturating
 * at +-448, NaN kept as NaN, +-Inf saturated to +-448 (DeepGEMM
 * per_block_cast_to_fp8; the product's rule for non-finite values).
 * The quantized tensor keeps its source dtype (bf16) in the catalogue; its
 * destination fragments hold e4m3 bytes (positions count 1-byte elements) in
 * buffers declared RESHARD_FP8_E4M3 (or undeclared: reshard_layout_buffer_bytes
 * counts 1 byte an element there); the source holds bf16 and never the
 * scale tensor. The tensor is 2-d [rows, cols] or 3-d [experts, rows, cols];
 * its view may split the rows (not the cols, nor the expert dim).
 * reshard_plan_create decides per destination block where it is quantized:
 * on a sender when one source fragment holds the whole block (then only
 * e4m3 bytes and scales cross the network), otherwise on the receiver, which
 * must then hold the whole block (vLLM's block-aligned partitions,
 * fp8_utils.py); a block neither side holds whole is refused (CONFIG,
 * naming tensor, rank and box).
 */
typedef enum {
    RESHARD_QUANT_NONE = 0,
    RESHARD_QUANT_FP8_BLOCK = 1,
    RESHARD_QUANT_MXFP8 = 2,
} reshard_quant_kind_t;

typedef struct {
    reshard_quant_kind_t kind;
    int32_t scale_tensor; /**< id of the scale tensor in the same catalogue */
    int pow2_scale;       /**< FP8_BLOCK: non-zero rounds scales up to powers of two */
} reshard_quant_t;

/**
 * Mark tensor @p tensor as held quantized by destinations, per @p q (kind
 * NONE removes the mark). Checked: the tensor is bf16, 2-d or 3-d, its view
 * keeps the last dim (and the expert dim) whole; the scale tensor has the
 * shape above, dtype fp32 (FP8_BLOCK) or uint8 (MXFP8) and a view that keeps
 * its last dim whole. Errors: INVALID_ARG (NULL, bad id or kind), DTYPE,
 * SHAPE — naming both tensors. Local.
 */
reshard_status_t reshard_tensors_set_quant(reshard_tensors_t *tensors, int32_t tensor,
                                           const reshard_quant_t *q);
/** The mark of @p tensor (kind RESHARD_QUANT_NONE when unmarked).
 *  Errors: INVALID_ARG. */
reshard_status_t reshard_tensors_get_quant(const reshard_tensors_t *tensors, int32_t tensor,
                                           reshard_quant_t *q);

/* ------------------------------------------------------------------ */
/* 4. Layouts                                                          */
/* ------------------------------------------------------------------ */

/** A box: per view dim an offset and an extent, in elements. */
typedef struct {
    int ndim;
    int64_t offset[RESHARD_MAX_DIMS];
    int64_t extent[RESHARD_MAX_DIMS];
} reshard_box_t;

/**
 * A fragment: the elements of tensor @c tensor inside @c box live in buffer
 * @c buffer of rank @c rank; element (box.offset + i) is stored at element
 * position base + sum_d i[d] * stride[d] of the buffer (positions counted in
 * elements of the tensor's dtype). Strides may be any non-negative values
 * that do not make two elements of the box share a position.
 */
typedef struct {
    int32_t tensor;
    int32_t rank;
    int32_t buffer; /**< caller's buffer id on that rank, in [0, INT32_MAX) */
    reshard_box_t box;
    int64_t base;
    int64_t stride[RESHARD_MAX_DIMS];
} reshard_fragment_t;

/** All fragments of one side (source or destination) of a refit. */
typedef struct reshard_layout reshard_layout_t;

/** Create an empty layout over @p tensors (kept by pointer: it must outlive
 *  the layout; plans made from the layout need neither). Errors:
 *  INVALID_ARG, NOMEM. Local. */
reshard_status_t reshard_layout_create(const reshard_tensors_t *tensors, reshard_layout_t **out);
/** Free a layout; NULL ok. */
void reshard_layout_destroy(reshard_layout_t *layout);

/**
 * Add one fragment (copied). Whether fragments overlap (two elements at one
 * position) is checked by reshard_plan_create: a fragment with itself on
 * both sides, two fragments with each other for destination layouts.
 * Checked here: tensor id exists, box.ndim equals
 * the tensor's view ndim, the box lies inside the view shape with extents
 * >= 1, rank >= 0, 0 <= buffer < INT32_MAX (so every buffer count fits an
 * int32), base >= 0, strides >= 0, the last element's position fits in 64
 * bits.
 * Errors: INVALID_ARG, BOX, RANK, OVERFLOW, NOMEM — the message names the
 * tensor, the rank and the box. Local.
 */
reshard_status_t reshard_layout_add_fragment(reshard_layout_t *layout,
                                             const reshard_fragment_t *fragment);

/** A DTensor placement on one mesh dim. */
typedef enum {
    RESHARD_REPLICATE = 0,     /**< every rank on this mesh dim holds the same elements */
    RESHARD_SHARD = 1,         /**< Shard(dim): torch.chunk over the mesh dim */
    RESHARD_STRIDED_SHARD = 2, /**< _StridedShard(dim, split_factor) */
} reshard_placement_kind_t;

typedef struct {
    reshard_placement_kind_t kind;
    int dim;          /**< view dim, for SHARD and STRIDED_SHARD */
    int split_factor; /**< >= 1, for STRIDED_SHARD */
} reshard_placement_t;

/** An N-d array of ranks, row-major: ranks[i0*shape[1]*... + ...]. */
typedef struct {
    int ndim; /**< 1..RESHARD_MAX_DIMS */
    int64_t shape[RESHARD_MAX_DIMS];
    const int32_t *ranks; /**< prod(shape) distinct rank ids */
} reshard_mesh_t;

/**
 * Compile a DTensor (mesh + one placement per mesh dim) into fragments of
 * tensor @p tensor, one or more per mesh rank. Each rank stores its local
 * shard as a contiguous row-major array of the local shape, starting at
 * element @p base of its buffer @p buffer; a rank whose shard is empty gets
 * no fragment.
 *   Shard(d) over k ranks: chunk c = ceil(N/k); rank i holds
 *     [i*c, min((i+1)*c, N)) of the current local extent (5 over 4: 2,2,1,0).
 *   StridedShard(d, sf): the current local extent is cut into sf blocks by
 *     torch.chunk and rank i holds the i-th torch.chunk of each block.
 *   Mesh dims are applied left to right.
 * Errors: INVALID_ARG (NULL, placement dim out of range, split_factor < 1,
 * duplicate rank in the mesh), RANK, NOMEM. Local.
 */
reshard_status_t reshard_layout_add_dtensor(reshard_layout_t *layout, int32_t tensor,
                                            const reshard_mesh_t *mesh,
                                            const reshard_placement_t *placements, int32_t buffer,
                                            int64_t base);

/** Number of fragments. */
int64_t reshard_layout_count(const reshard_layout_t *layout);
/** Copy fragment @p i out. Errors: INVALID_ARG. */
reshard_status_t reshard_layout_fragment(const reshard_layout_t *layout, int64_t i,
                                         reshard_fragment_t *out);

/**
 * Bytes buffer @p buffer of rank @p rank must have: its declared bytes when
 * it is declared (reshard_layout_declare_buffer below), else enough to hold
 * every fragment of this layout placed in it (one past the last element any
 * fragment touches; an element of a quantized tensor counts 1 byte, e4m3,
 * in a layout that holds fragments of its scale tensor, i.e. a destination
 * layout, see reshard_tensors_set_quant). 0 when neither.
 */
uint64_t reshard_layout_buffer_bytes(const reshard_layout_t *layout, int32_t rank, int32_t buffer);
/** One more than the largest buffer id used by @p rank's fragments (0 if none). */
int32_t reshard_layout_buffer_count(const reshard_layout_t *layout, int32_t rank);

/*
 * Declared buffers. A layout may say, per (rank, buffer id), what the buffer
 * is: the framework's parameter name (what that rank's
 * module.named_parameters() calls it, e.g.
 * "decoder.layers.0.self_attention.linear_qkv.weight"), its dtype and its
 * shape (row-major, as torch.Tensor.shape). Its size is then exact:
 * numel(shape) * dtype size bytes. Model layouts (reshard_model.h) declare
 * every buffer they use; a hand-written layout may declare some, all or none.
 *
 * What a declaration changes:
 *   - reshard_plan_create: every fragment in a declared buffer must lie
 *     inside the declared bytes (BUFFER) and its tensor's dtype must be the
 *     buffer's dtype (DTYPE);
 *   - reshard_plan_execute: a declared buffer must be given with exactly the
 *     declared bytes (and, when the caller names its buffers, the declared
 *     name and dtype); an undeclared buffer only needs to be at least
 *     reshard_layout_buffer_bytes large.
 */

/** One declared buffer (name points into the layout: valid while it lives). */
typedef struct {
    int32_t rank;
    int32_t buffer;
    const char *name;                /**< framework parameter name */
    reshard_dtype_t dtype;           /**< element type */
    int ndim;                        /**< 1..RESHARD_MAX_DIMS */
    int64_t shape[RESHARD_MAX_DIMS]; /**< row-major shape in elements (dims >= ndim are 0) */
    int64_t numel;                   /**< product of shape */
    uint64_t bytes;                  /**< numel * reshard_dtype_size(dtype) */
} reshard_buffer_info_t;

/**
 * Declare buffer @p buffer of rank @p rank: parameter @p name (copied),
 * @p dtype, shape @p shape of @p ndim dims (every extent >= 1).
 * Errors: INVALID_ARG (NULL layout/name/shape, empty name, rank or buffer
 * < 0, ndim outside 1..RESHARD_MAX_DIMS, invalid dtype, (rank, buffer)
 * already declared, or @p name already declared on @p rank — the message
 * names the rank, buffer and name), SHAPE (an extent < 1), OVERFLOW (bytes
 * over 2^63), NOMEM. Local.
 */
reshard_status_t reshard_layout_declare_buffer(reshard_layout_t *layout, int32_t rank,
                                               int32_t buffer, const char *name,
                                               reshard_dtype_t dtype, int ndim,
                                               const int64_t *shape);

/** Number of declared buffers of @p rank, or of every rank with
 *  RESHARD_ALL_RANKS (-1). 0 for a NULL layout. */
int64_t reshard_layout_declared_count(const reshard_layout_t *layout, int32_t rank);

/**
 * Describe the @p i-th declared buffer of @p rank (or of all ranks with
 * RESHARD_ALL_RANKS), in order of (rank, buffer id),
 * 0 <= i < reshard_layout_declared_count(layout, rank).
 * Errors: INVALID_ARG (NULL, i out of range). Local.
 */
reshard_status_t reshard_layout_buffer_info(const reshard_layout_t *layout, int32_t rank, int64_t i,
                                            reshard_buffer_info_t *info);

/** Buffer id that @p rank declared under @p name, or -1 when none. */
int32_t reshard_layout_find_buffer(const reshard_layout_t *layout, int32_t rank, const char *name);

/** Describe buffer @p buffer of @p rank. Errors: INVALID_ARG (NULL, or that
 *  buffer is not declared). Local. */
reshard_status_t reshard_layout_declared_buffer(const reshard_layout_t *layout, int32_t rank,
                                                int32_t buffer, reshard_buffer_info_t *info);

/**
 * Mark destination buffer @p buffer of @p rank, already declared, as written
 * with zeros by every execution: a parameter the engine holds at zero on that
 * rank that no source sends (vLLM's gpt-oss w2_bias without EP on every rank but
 * the first of the flattened expert-TP group: every rank's bias enters the MoE
 * reduction). No fragment may lie in it (reshard_plan_create: INVALID_ARG naming
 * the tensor, rank and buffer). reshard_plan_execute then requires the buffer
 * (BUFFER before anything moves, on every rank, as for any missing buffer) and,
 * once every rank agreed, writes all its declared bytes with zeros on this rank
 * (host memset; device memory through the transport's device operations: a
 * device transport without them is UNSUPPORTED on every rank before anything
 * moves). Idempotent. In a source layout a mark only requires the buffer.
 * Errors: INVALID_ARG (NULL layout, or (rank, buffer) not declared, naming
 * both). Local.
 */
reshard_status_t reshard_layout_zero_buffer(reshard_layout_t *layout, int32_t rank, int32_t buffer);

/* ------------------------------------------------------------------ */
/* 5. Plans                                                            */
/* ------------------------------------------------------------------ */

/** Plan for every rank (global statistics, simulation). */
#define RESHARD_ALL_RANKS (-1)

/** Which optional fields of reshard_plan_params_t are set. */
enum {
    RESHARD_PLAN_PARAM_STAGING_BYTES = 1u << 0,
    RESHARD_PLAN_PARAM_DOMAIN_SIZE = 1u << 1,
    RESHARD_PLAN_PARAM_TIMEOUT = 1u << 2,
    RESHARD_PLAN_PARAM_RELAY_BYTES = 1u << 3,
    RESHARD_PLAN_PARAM_SUMMARY = 1u << 4,
    RESHARD_PLAN_PARAM_PLACEMENT = 1u << 5,
    RESHARD_PLAN_PARAM_COLOCATED = 1u << 6,
    RESHARD_PLAN_PARAM_DELTA = 1u << 7,
    RESHARD_PLAN_PARAM_DELTA_CHECKSUM = 1u << 8,
};
/** Every RESHARD_PLAN_PARAM_* bit: any other bit set is INVALID_ARG. */
#define RESHARD_PLAN_PARAM_ALL ((uint64_t)0x1ff)
/** reshard_plan_params_t.device of a rank whose buffers are host (CPU) memory. */
#define RESHARD_DEVICE_CPU (-1)

/** Default staging memory per rank: 256 MiB. */
#define RESHARD_DEFAULT_STAGING_BYTES ((uint64_t)256 << 20)
/** Default time after which a silent peer is declared dead: 60 s. */
#define RESHARD_DEFAULT_TIMEOUT_S 60.0
/** Most ranks a plan takes (2^14 = 16384). Planning cost grows with
 *  world_size^2 whatever the layout: the chunk schedule keeps, per rank, a
 *  bit set over the world's ranks and domains (world_size^2 / 8 bytes with
 *  one rank per domain) and scans it for every rank. At 16384 ranks a
 *  one-tensor plan takes ~0.3 s and 32 MiB; at 2^20 it needed 128 GiB. A
 *  larger world_size is refused (INVALID_ARG) rather than allocated. */
#define RESHARD_MAX_WORLD_SIZE (1 << 14)
/** Shortest peer timeout, seconds (1 ms): a smaller timeout_s is
 *  INVALID_ARG (a denormal one would time every execution out). */
#define RESHARD_MIN_TIMEOUT_S 1e-3
/** Longest peer timeout, seconds (about 31 years): a larger finite timeout_s
 *  is taken as this bound ("wait as long as it takes"). */
#define RESHARD_MAX_TIMEOUT_S 1e9

typedef struct {
    uint64_t field_mask;    /**< RESHARD_PLAN_PARAM_* bits of the fields below; other
                                 bits: INVALID_ARG */
    int32_t world_size;     /**< required: ranks of both sides are in [0, world_size),
                                 1 <= world_size <= RESHARD_MAX_WORLD_SIZE */
    int32_t my_rank;        /**< required: the calling rank, or RESHARD_ALL_RANKS */
    uint64_t staging_bytes; /**< staging memory bound per rank, bytes */
    int32_t domain_size;    /**< ranks per NVLink domain (ranks fill domains in
                                 order); 0 or 1 = every rank its own domain;
                                 >= world_size = one domain; < 0: INVALID_ARG */
    double timeout_s;       /**< peer timeout for execution, seconds: finite and
                                 >= RESHARD_MIN_TIMEOUT_S (INVALID_ARG otherwise);
                                 values over RESHARD_MAX_TIMEOUT_S wait that long */
    uint64_t relay_bytes;   /**< relay scratch bound per rank, bytes (default: none).
                                 Relays balance a domain's NICs by landing pieces on
                                 ranks that do not need them; a smaller bound relays
                                 less and may leave a busier NIC */
    int32_t summary;        /**< nonzero: a summary plan (RESHARD_ALL_RANKS only,
                                 INVALID_ARG otherwise), which keeps its counters and
                                 per-stream totals but not its pieces; see
                                 reshard_plan_create */
    /** RESHARD_PLAN_PARAM_PLACEMENT: where ranks live. host[r] (world_size entries,
     *  >= 0) names rank r's host: ranks with equal ids share a machine (and can read
     *  each other's memory). device[r] (world_size entries, or NULL: every rank its own
     *  device) is rank r's GPU on its host, or RESHARD_DEVICE_CPU. Copied by
     *  reshard_plan_create. With a placement the planner takes each piece from the
     *  nearest holder (the receiver, then its device, then its host, then the
     *  least-loaded one) and the statistics count bytes by path. Derive it from the
     *  launch with reshard_mpi_placement (reshard_mpi.h) or give it. */
    const int32_t *host;
    const int32_t *device;
    /** RESHARD_PLAN_PARAM_COLOCATED, nonzero (needs a placement): pieces between
     *  distinct ranks of one host are one-sided reads: the receiver copies each piece
     *  straight from the sender's buffer with the box's strides (no staging, no send,
     *  no copy on the sender); pieces between hosts use the comm's transport. Every
     *  rank is then its own domain (domain_size > 1: INVALID_ARG). See
     *  docs/colocated-reference.md for what each side promises. */
    int32_t colocated;
    int32_t delta; /**< nonzero: a delta refit plan (reshard_delta.h,
                        docs/delta.md): each execution sends only the words
                        that changed since the version a destination holds */
    /** Verification of delta refits, ON BY DEFAULT for every delta plan: every chunk
     *  carries the sender's 64-bit hash of its new bytes (host memory: XXH3_64bits;
     *  device memory: the NCCL transport's hash kernel) and the receiver compares it
     *  with the hash of the chunk it holds after apply. A mismatch (a destination
     *  changed behind reshard's back) fails the refit on every rank with
     *  RESHARD_ERR_VERIFY naming tensor, rank and box; that destination is then torn
     *  and the next refit rewrites it dense (reshard_delta.h).
     *  With RESHARD_PLAN_PARAM_DELTA_CHECKSUM: 0 turns it off (the opt-out; the caller
     *  then promises that between executions every destination buffer holds exactly
     *  what this plan's last committed execution wrote: no reallocation, even at the
     *  same address, no other writer, no in-place rewrite by the engine), nonzero keeps
     *  it on (INVALID_ARG without delta). Without the bit: on for delta plans. */
    int32_t delta_checksum;
} reshard_plan_params_t;

typedef struct reshard_plan reshard_plan_t;

/**
 * Validate both layouts and compute the plan. Pure computation: nothing is
 * sent; every rank gets the same decisions from the same inputs (each rank
 * may call it independently; it is not a collective).
 *
 * With my_rank = R, only rank R's own plan is computed: every decision of
 * planning is made per (destination domain, tensor) group from that group's
 * fragments alone, so rank R computes its own domain's groups and, for each
 * tensor it holds as a source, that tensor's groups in every domain; what it
 * executes is exactly what the RESHARD_ALL_RANKS plan gives it. Chunk sizes
 * come from a bound on each rank's streams computed from the layouts alone.
 * With RESHARD_ALL_RANKS, every group (global statistics, simulation).
 *
 * A summary plan (params->summary, RESHARD_ALL_RANKS) makes every decision
 * of the global plan but keeps, of its pieces, only what they add up to: the
 * statistics, per-rank link loads and per-stream byte totals, tallied one
 * tensor at a time. Its memory grows with the world and the streams, not
 * with the pieces (a 1024 + 1024-rank MoE refit has some 70 million pieces,
 * about 12 GB held, and a million streams). reshard_plan_get_stats,
 * reshard_sim_plan and reshard_plan_pair_bytes give what they give for the
 * full plan; reshard_plan_execute refuses it (INVALID_ARG).
 *
 * Validation, before anything else: both layouts describe the same tensors
 * (the same catalogue, or catalogues with equal names, dtypes and view
 * shapes: SHAPE or DTYPE otherwise), every destination element is covered by
 * a source fragment (UNCOVERED), no fragment of either side, on any rank,
 * has strides that make two of its elements share a position (OVERLAP: "the
 * source fragment overlaps itself"), no two destination fragments of a rank
 * share buffer bytes (OVERLAP), every rank is below world_size (RANK),
 * fragments in declared buffers lie inside them and have their dtype
 * (BUFFER, DTYPE). A rank's own plan checks coverage within its groups and
 * overlap between fragments within its own buffers: a rank whose plan fails
 * must not execute; it calls reshard_plan_fail instead, so that its peers'
 * executions fail at once, naming it.
 *
 * The plan owns what it executes with: it copies the catalogue and the
 * fragments and declared buffers it needs, so @p src, @p dst and their
 * catalogue may be destroyed (or changed) as soon as this returns. It also
 * records a fingerprint of its inputs — the catalogue, both layouts'
 * fragments and declared buffers, world_size, domain_size, staging, relay
 * and timeout (not my_rank) — which reshard_plan_execute compares across
 * ranks. For a layout a model built (reshard_model.h) and nobody changed
 * since, what it was built from stands for its fragments and buffers: the
 * model's config and load options, the spec, the first rank and the
 * library's layout generators; so a rank's scoped layouts
 * (reshard_model_refit_create_scoped) and the whole ones agree.
 * Quantized destinations (reshard_tensors_set_quant): each destination block
 * is quantized by a sender when one source fragment holds it whole (stats and
 * pieces then count e4m3 bytes and scales), else by its receiver, which must
 * hold it whole (CONFIG otherwise, naming tensor, rank and box); every
 * destination block needs a scale fragment on its rank (UNCOVERED); a source
 * fragment of a scale tensor is INVALID_ARG. Execution then allocates, per
 * rank, scratch for the e4m3 bytes and scales it sends and the bf16 blocks it
 * quantizes itself.
 * Errors: INVALID_ARG (also: field_mask bits outside RESHARD_PLAN_PARAM_ALL,
 * named in hex; a set timeout_s that is NaN, infinite or under
 * RESHARD_MIN_TIMEOUT_S; a negative domain_size; world_size outside
 * 1..RESHARD_MAX_WORLD_SIZE; summary with a my_rank), SHAPE, DTYPE, RANK, UNCOVERED, OVERLAP,
 * OVERFLOW, STAGING (bound under 4 KiB, or too small for a rank's streams),
 * BUFFER, NOMEM — the message names the tensor, rank and box (and buffer).
 */
reshard_status_t reshard_plan_create(const reshard_layout_t *src, const reshard_layout_t *dst,
                                     const reshard_plan_params_t *params, reshard_plan_t **out);
/** Free a plan; NULL ok. */
void reshard_plan_destroy(reshard_plan_t *plan);

/**
 * Name @p plan, so that its executions pair with the plans of the same name on the other
 * ranks. Needed only where one rank holds several live plans made from the same inputs
 * (equal fingerprints: a policy and a reference model of one architecture, two engines'
 * plans of equal layouts) and the ranks do not make them in one order. Every execution's
 * preflight agreement carries the plan's identity beside its fingerprint: the name's
 * hash where one was given, else the plan's number, fixed when it was made: the smallest
 * number that no unnamed, not retired plan of those inputs the same thread of the rank
 * then held (two live plans never share one; it never moves afterwards). Retired plans:
 * the old plan of reshard_plan_delta_adopt (the new plan takes its name, or else its
 * number) and a plan whose execution lost its peers (TIMEOUT, TRANSPORT); they no longer
 * take numbers or names from plans made after them, and executed again a retired plan
 * carries an identity of the retired plans' own, so it pairs with the same retired plan
 * on its peers, never with a plan that is not (one retired on some ranks only pairs with
 * nothing: destroy it). Plans made on other threads (one per engine or model) are
 * numbered apart, and nothing tells two such plans apart when they share a comm: name
 * them. Ranks that execute different such plans at once fail preflight on every rank
 * (MISMATCH, "execute different plans made from the same inputs") and nothing moves,
 * where they would otherwise have paired one plan's sources with another's destinations.
 * Every rank names its plan alike, right after making it. Any rank, local. Errors:
 * INVALID_ARG (NULL, an empty name or one of 64 bytes or more, a name another live, not
 * retired plan of the same inputs on this rank holds).
 */
reshard_status_t reshard_plan_set_name(reshard_plan_t *plan, const char *name);

/**
 * Byte counters of a plan. Bytes throughout. For a RESHARD_ALL_RANKS plan,
 * over all ranks, with the lower bounds. For a rank's own plan, that rank's
 * counters, which summed over every rank give the global ones: bytes_total =
 * bytes written into its destination buffers; bytes_local, bytes_network,
 * bytes_nvlink, transfers and pieces = what it sends (copies); max_nic_send
 * and max_nic_recv_bytes = its own network send and receive bytes; the
 * bytes_lower_bound and nic_*_bound_bytes fields are 0 (they need every
 * group).
 */
typedef struct {
    uint64_t bytes_total;          /**< bytes written into destination buffers (a relayed
                                        landing is counted by its forwards only) */
    uint64_t bytes_local;          /**< of which copied within one rank */
    uint64_t bytes_network;        /**< bytes crossing a domain boundary */
    uint64_t bytes_nvlink;         /**< bytes between distinct ranks of one domain */
    uint64_t bytes_lower_bound;    /**< sum over destination domains of unique bytes needed
                                        from outside the domain */
    uint64_t max_nic_send_bytes;   /**< busiest rank's network send bytes */
    uint64_t max_nic_recv_bytes;   /**< busiest rank's network receive bytes */
    uint64_t nic_send_bound_bytes; /**< no plan can have a smaller max send */
    uint64_t nic_recv_bound_bytes; /**< no plan can have a smaller max receive */
    int64_t transfers;             /**< (sender, receiver) streams between distinct ranks */
    int64_t pieces;                /**< boxes moved (before coalescing into streams) */
    uint64_t max_relay_bytes;      /**< relay scratch of the rank that needs the most,
                                        bytes (reshard_plan_execute allocates it) */
    /** With a placement (RESHARD_PLAN_PARAM_PLACEMENT; 0 without): the bytes between
     *  distinct ranks by path, sent side like bytes_network. */
    uint64_t bytes_same_device; /**< between ranks on one device of one host */
    uint64_t bytes_same_host;   /**< between ranks on different devices of one host */
    uint64_t bytes_cross_host;  /**< between ranks of different hosts */
    /** Global plans with a placement: no plan moves fewer bytes over a path than its
     *  bound, counted per receiver: bytes a receiver needs that it does not hold and
     *  whose nearest holder is on its device (bound_same_device_bytes), on its host
     *  but another device (bound_same_host_bytes), or on another host only
     *  (bound_cross_host_bytes). A plan meets all three when each piece comes from a
     *  nearest holder. */
    uint64_t bound_same_device_bytes;
    uint64_t bound_same_host_bytes;
    uint64_t bound_cross_host_bytes;
    /** Of bytes_same_device + bytes_same_host: those a colocated plan moves by
     *  one-sided reads (RESHARD_PLAN_PARAM_COLOCATED). */
    uint64_t bytes_peer_read;
} reshard_plan_stats_t;

/** Fill @p stats. Errors: INVALID_ARG. */
reshard_status_t reshard_plan_get_stats(const reshard_plan_t *plan, reshard_plan_stats_t *stats);

/** Bytes the plan sends from rank @p src to rank @p dst (local copies when
 *  equal); 0 for ranks out of range. */
uint64_t reshard_plan_pair_bytes(const reshard_plan_t *plan, int32_t src, int32_t dst);

/* ------------------------------------------------------------------ */
/* 6. Communicators and execution                                      */
/* ------------------------------------------------------------------ */

/** A transport endpoint of one rank (in-process, MPI or NCCL). */
typedef struct reshard_comm reshard_comm_t;

/** Shared state of an in-process group of @p nranks threads. */
typedef struct reshard_inproc_group reshard_inproc_group_t;

/** Create a group for @p nranks threads. Errors: INVALID_ARG, NOMEM. */
reshard_status_t reshard_inproc_group_create(int32_t nranks, reshard_inproc_group_t **out);
/** Free a group after every comm made from it is destroyed. NULL ok. */
void reshard_inproc_group_destroy(reshard_inproc_group_t *group);
/** Endpoint of rank @p rank in @p group; one per thread. Errors: INVALID_ARG, RANK, NOMEM. */
reshard_status_t reshard_comm_create_inproc(reshard_inproc_group_t *group, int32_t rank,
                                            reshard_comm_t **out);
/** Free an endpoint of any transport; NULL ok. Local. When another thread is
 *  executing on it (reshard_plan_execute, reshard_plan_fail), waits for that
 *  call to return (at most about the plan's timeout) before freeing; calls
 *  that start once the destroy began return INVALID_ARG. The handle is
 *  invalid once this returns. */
void reshard_comm_destroy(reshard_comm_t *comm);
/** Rank and size of an endpoint. */
int32_t reshard_comm_rank(const reshard_comm_t *comm);
int32_t reshard_comm_size(const reshard_comm_t *comm);

/** reshard_buffer_t.flags: the dtype field is given. */
#define RESHARD_BUFFER_DTYPE 1u

/**
 * A caller's buffer: base pointer and size in bytes, and optionally what the
 * caller believes it is. Zero-initialise it: {ptr, bytes} alone is a valid
 * buffer; name NULL and flags 0 mean "not given".
 */
typedef struct {
    void *ptr;
    uint64_t bytes;
    const char *name;      /**< optional: the parameter this buffer holds (checked against
                                the layout's declared name) */
    uint32_t flags;        /**< RESHARD_BUFFER_DTYPE when dtype is given */
    reshard_dtype_t dtype; /**< element type, read only with RESHARD_BUFFER_DTYPE (so that
                                RESHARD_BF16 == 0 is never assumed) */
} reshard_buffer_t;

/** Link-class byte counters measured during one execution on one rank. */
typedef struct {
    uint64_t bytes_sent_network; /**< sent to ranks of other domains */
    uint64_t bytes_sent_nvlink;  /**< sent to other ranks of the own domain */
    uint64_t bytes_recv;         /**< received from other ranks */
    uint64_t bytes_local;        /**< copied within this rank */
    uint64_t bytes_peer_read;    /**< read one-sided from ranks of this host (colocated
                                      plans; not in bytes_recv) */
} reshard_exec_stats_t;

/**
 * Run the plan on the calling rank: send what this rank's source fragments
 * must send, receive and unpack into its destination fragments, forward
 * inside its domain, copy locally. Every rank named in either layout must
 * call it with a plan made from the same layouts and params, with
 * my_rank == reshard_comm_rank(comm) (or a RESHARD_ALL_RANKS plan).
 * Repeatable; buffers may differ between calls.
 * Memory: staging of at most the plan's staging bound (bytes), plus, on a
 * rank that relays (with a topology, a rank may land pieces it does not need
 * itself and forward them, to balance its domain's NICs), relay scratch the
 * size of the pieces it relays.
 * @param src_bufs  this rank's source buffers indexed by buffer id (n_src of them)
 * @param dst_bufs  this rank's destination buffers indexed by buffer id
 * @param stats     optional; receives this rank's measured byte counts
 * Checked before anything moves: the comm's rank/size agree with the plan
 * (INVALID_ARG, returned at once); each buffer a fragment of this rank uses
 * is non-NULL; a declared buffer (reshard_layout_declare_buffer) that is
 * given has exactly its declared bytes, and its declared name and dtype
 * where the caller set reshard_buffer_t.name / RESHARD_BUFFER_DTYPE; an
 * undeclared one is at least reshard_layout_buffer_bytes large (BUFFER,
 * naming the rank, the buffer's id and name, and both sizes).
 * Then the first agreement, before any byte moves, over all ranks: every
 * rank's plan exists (a rank whose plan failed calls reshard_plan_fail:
 * every rank returns that rank's status, naming it), every plan has the same
 * fingerprint (MISMATCH on every rank, naming a rank that planned from
 * different inputs), every rank's buffers passed (BUFFER on every rank). In
 * each case every rank returns at once and no destination byte anywhere is
 * written.
 * Colocated plans (RESHARD_PLAN_PARAM_COLOCATED): a source buffer that ranks of
 * this host read in place must be the allocation (pointer and bytes) it was at the
 * plan's first execution: another is BUFFER on every rank before anything moves,
 * naming the rank, buffer and both addresses; the owner must leave it untouched
 * until this call returns, and the readers' stats count bytes_peer_read (not
 * bytes_recv). A refused, failed or short read (a peer that is gone, an unmapped
 * buffer, no ptrace access) is TRANSPORT naming the peer, tensor and buffer; a
 * device-memory comm is UNSUPPORTED (docs/colocated.md).
 * One call at a time per endpoint: while one thread executes (or calls
 * reshard_plan_fail) on @p comm, a call on it from another thread returns
 * INVALID_ARG at once and sends nothing, and the execution in flight then fails
 * at its outcome agreement (INVALID_ARG "another thread called this comm") on
 * every rank: its peers may have run the other thread's plan in its place, so no
 * rank returns OK from it; from then on every execution on @p comm fails at its
 * preflight on every rank (INVALID_ARG "two threads called this comm at once",
 * nothing moved), since the ranks may have kept different threads' plans and
 * equal layouts look alike: destroy it and give each thread its own comm. A
 * call on a comm being destroyed is refused too. A
 * second call that comes only after the first's outcome agreement is sequential
 * use, in whatever order each rank's threads ran: calling plans in different
 * orders on different ranks is the caller's error, as with any collective
 * (plans with different inputs then fail MISMATCH; give each thread its own
 * comm).
 * Errors: INVALID_ARG, BUFFER, MISMATCH, a failed plan's status, TRANSPORT,
 * TIMEOUT (a peer silent past the plan's timeout), NOMEM. After a transport
 * error or timeout the peer state is undefined: the endpoint is marked
 * broken, and every later reshard_plan_execute or reshard_plan_fail on it
 * returns TRANSPORT at once (executing again could pair this rank's messages
 * with another step's); destroy it, or shrink it (reshard_elastic.h). Every
 * rank returns the verdict of one decision (all OK, or all an error); over MPI
 * an execution whose outcome was decided just before a peer stopped returns OK
 * and leaves the endpoint broken (reshard_mpi.h: one decision).
 */
reshard_status_t reshard_plan_execute(const reshard_plan_t *plan, reshard_comm_t *comm,
                                      const reshard_buffer_t *src_bufs, int32_t n_src,
                                      const reshard_buffer_t *dst_bufs, int32_t n_dst,
                                      reshard_exec_stats_t *stats);

/**
 * Tell the peers that this rank's reshard_plan_create failed with @p status,
 * instead of leaving them to time out: call it where reshard_plan_execute
 * would have been called. It takes part in the first agreement of the
 * peers' execution, so every peer's reshard_plan_execute returns @p status
 * at once, naming this rank and its last error, the first 240 bytes ("rank R could not
 * create its plan or bind its buffers (STATUS: message)"), and no destination byte
 * anywhere is written.
 * @param status     the failed status (negative) reshard_plan_create returned
 * @param timeout_s  how long to wait for the peers to arrive; <= 0: the
 *                   default RESHARD_DEFAULT_TIMEOUT_S
 * Returns OK once every peer was told. Errors: INVALID_ARG (NULL comm, status
 * not negative), TIMEOUT (a peer did not arrive), TRANSPORT; the comm must
 * then be destroyed.
 */
reshard_status_t reshard_plan_fail(reshard_comm_t *comm, reshard_status_t status, double timeout_s);

/**
 * reshard_plan_fail with the reason the peers are told: @p reason (NUL-terminated; NULL:
 * this thread's last error, as reshard_plan_fail). Every peer's error then names this
 * rank and the first 240 bytes of @p reason ("rank R could not create its plan or bind
 * its buffers (STATUS: reason)"). Errors: as reshard_plan_fail.
 */
reshard_status_t reshard_plan_fail_reason(reshard_comm_t *comm, reshard_status_t status,
                                          const char *reason, double timeout_s);

/**
 * Agree on the inputs of planning before any rank plans: every rank of @p comm calls
 * it (collective; between executions, never during one) with the same @p n (0..64)
 * names @p keys in the same order and its own @p values (NUL-terminated text each:
 * a model, a parallel spec, a parameter). Planning from different inputs fails only at
 * the first execution otherwise, and then as whatever the difference breaks first.
 * Returns OK on every rank when every rank gave equal values (one agreement of the
 * transport). Otherwise MISMATCH on every rank, the message naming up to 4 keys whose
 * values differ, each with the ranks holding rank 0's value and the ranks holding
 * another, up to 4 of each, and the values (first 120 bytes), e.g.
 * "infer: 'tp=2' on ranks 0, 1, 2; 'tp=1,dp=2' on rank 3" (a few more agreements,
 * the same on every rank). Values are compared by a 32-bit hash per key (XXH3) and a
 * 64-bit hash of all of them.
 * Errors: INVALID_ARG (NULL comm, keys or values; n out of range), MISMATCH (also when
 * ranks give different n), TIMEOUT (a peer did not arrive within @p timeout_s; <= 0:
 * RESHARD_DEFAULT_TIMEOUT_S), TRANSPORT (destroy the comm then).
 */
reshard_status_t reshard_comm_agree_values(reshard_comm_t *comm, int32_t n, const char *const *keys,
                                           const char *const *values, double timeout_s);

/* ------------------------------------------------------------------ */
/* 7. Verification pattern                                             */
/* ------------------------------------------------------------------ */

/**
 * Fill every element of @p rank's fragments in @p layout with the pattern
 * value of (tensor id, global flat index in the view shape): a 64-bit mix of
 * both, truncated to the element size. Buffers as in reshard_plan_execute.
 * Errors: INVALID_ARG, BUFFER.
 */
reshard_status_t reshard_fill_pattern(const reshard_layout_t *layout, int32_t rank,
                                      const reshard_buffer_t *bufs, int32_t n_bufs);

/** Byte that destination buffers hold before a refit; every byte no
 *  fragment covers (padding rows, gaps) must still hold it afterwards. */
#define RESHARD_SENTINEL_BYTE 0xA5

/**
 * Check every element of @p rank's fragments in @p layout against the
 * pattern, and that every byte of the given buffers (all bufs[b].bytes of
 * them, padding past the last fragment included) that no fragment covers
 * still holds RESHARD_SENTINEL_BYTE (the caller memsets destination buffers
 * to it before a refit), except in a zero-filled buffer
 * (reshard_layout_zero_buffer), whose every byte must be 0. @p verified_bytes
 * (optional) receives the bytes of fragment elements checked.
 * Errors: VERIFY (message names the tensor, rank, box, first wrong element
 * and how many are wrong, or the first touched padding byte, or the first
 * non-zero byte of a zero-filled buffer), INVALID_ARG,
 * BUFFER, NOMEM.
 */
reshard_status_t reshard_verify_pattern(const reshard_layout_t *layout, int32_t rank,
                                        const reshard_buffer_t *bufs, int32_t n_bufs,
                                        uint64_t *verified_bytes);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_H */
