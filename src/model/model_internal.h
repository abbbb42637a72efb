/* Internal form of a model and of the shared machinery that turns the two
 * frameworks' conventions into fragments. */
#ifndef RS_MODEL_INTERNAL_H
#define RS_MODEL_INTERNAL_H

#include <stdbool.h>

#include "reshard/reshard_model.h"
#include "util/strpool.h"

/** FP8 block edge (rows and columns) of the scale tensors. */
#define RS_FP8_BLOCK 128

struct reshard_model;
/** Rows and columns of a scale block: 128x128, or 1x32 for MXFP8. */
int64_t rs_scale_block_rows(const struct reshard_model *m);
int64_t rs_scale_block_cols(const struct reshard_model *m);
/* Most decoder + MTP layers a config may have. */
#define RS_MAX_LAYERS (1 << 16)

typedef enum {
    RS_FAM_DENSE = 0,
    RS_FAM_QWEN3_MOE,
    RS_FAM_DSV3,
    RS_FAM_QWEN2_MOE,
    RS_FAM_MIXTRAL,
    RS_FAM_NEMOTRON_H,
    RS_FAM_GLM4_MOE,
    RS_FAM_GPT_OSS,
    RS_FAM_QWEN3_NEXT
} rs_family_t;

/** qwen3_next: the Gated DeltaNet mixer (src/model/qwen3_next.c). */
typedef struct {
    int32_t nk, nv;   /**< linear_num_key_heads, linear_num_value_heads */
    int32_t kd, vd;   /**< linear_key_head_dim, linear_value_head_dim */
    int32_t K;        /**< linear_conv_kernel_dim */
    int32_t interval; /**< full_attention_interval: layer i is full attention iff (i+1) % it == 0 */
} rs_gdn_t;

/** nemotron_h: the hybrid stack and its Mamba-2 mixer (src/model/mamba.c). */
typedef struct {
    char *kind;       /**< per kept layer: 'M' Mamba, '*' attention, '-' MLP, 'E' MoE */
    int32_t *stage0;  /**< first layer of each '|' segment of the pattern (stage0[0] = 0) */
    int32_t segments; /**< '|' segments of the kept layers (1: no '|') */
    int32_t mh, mhd;  /**< mamba heads Hm, head dim; I = mh * mhd */
    int32_t G, N, K;  /**< n_groups, ssm_state_size, conv_kernel */
    int64_t latent;   /**< moe_latent_size (0: none): routed experts work in it */
} rs_hybrid_t;

struct reshard_model {
    char *name;
    rs_family_t fam;
    int64_t H, I, Im, V;      /**< hidden, dense intermediate, expert intermediate, vocab */
    int32_t nh, kv, hd;       /**< heads, kv heads (query groups), head dim */
    int32_t E, nshared, topk; /**< routed experts, shared experts */
    int32_t q_lora, kv_lora, nope, rope, vhd; /**< MLA */
    int tied, qk_norm;
    int qkv_bias;          /**< q/k/v projections have biases (qwen2, qwen2_moe) */
    int router_bias;       /**< MoE router has e_score_correction_bias (fp32; noaux_tc routing) */
    int64_t Is;            /**< shared-expert intermediate size (0: none) */
    int shared_gate;       /**< shared expert has a sigmoid gate [1, H] (qwen2_moe) */
    const char *moe_block; /**< HF/vLLM MoE module: "mlp" or "block_sparse_moe" (mixtral) */
    const char *shared;    /**< HF/vLLM shared-expert module: "shared_experts" or "shared_expert" */
    int32_t L;             /**< decoder layers kept */
    int32_t Lcfg;          /**< num_hidden_layers of the config (MTP layers are numbered from it) */
    int32_t nmtp;          /**< MTP layers included */
    reshard_dtype_t dtype;
    reshard_quant_kind_t quant; /**< inference side quantized from bf16 (or NONE) */
    int pow2;                   /**< FP8_BLOCK scales rounded up to powers of two */
    bool *moe;                  /**< per layer 0..L+nmtp-1: MoE MLP */
    uint64_t origin;            /**< hash of the config (canonical JSON) and load options */
    rs_hybrid_t hy;             /**< nemotron_h only */
    rs_gdn_t gdn;               /**< qwen3_next only */
    int attn_gate;              /**< q_proj holds [q_h; gate_h] per head (qwen3_next) */
};

/** Tensor ids of one decoder (or MTP) layer; -1 where absent. */
typedef struct {
    int32_t in_norm, post_norm;
    int32_t q, k, v, o, q_norm, k_norm;                /* GQA (q also MLA without q_lora) */
    int32_t q_bias, k_bias, v_bias;                    /* qwen2 */
    int32_t q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b; /* MLA */
    int32_t gate, up, down;                            /* dense MLP */
    int32_t router, router_bias;
    int32_t e_gate, e_up, e_down;             /* stacked routed experts */
    int32_t s_gate, s_up, s_down;             /* shared experts */
    int32_t s_sigmoid;                        /* shared_expert_gate [1, H] */
    int32_t enorm, hnorm, eh_proj, head_norm; /* MTP */
    int32_t m_in, m_conv_w, m_conv_b, m_A_log, m_D, m_dt_bias, m_norm, m_out; /* Mamba mixer */
    int32_t gdn_qkvz, gdn_ba; /* qwen3_next Gated DeltaNet (with m_conv_w, m_A_log, m_dt_bias,
                                 m_norm, m_out) */
    int32_t lat1, lat2;       /* MoE latent projections */
    int32_t o_bias, sinks, router_b;    /* gpt_oss: o_proj bias, attention sinks, router bias */
    int32_t e_gate_b, e_up_b, e_down_b; /* gpt_oss: stacked expert biases */
    int32_t hf_index;                   /**< layer number in HF names */
} rs_layer_ids_t;

/** The catalogue's structure: which id plays which role. */
typedef struct {
    int32_t n;                    /**< tensors in the catalogue */
    int32_t embed, lm_head, norm; /**< lm_head == embed when tied */
    int32_t nlayers;              /**< L + nmtp */
    rs_layer_ids_t *layer;
    int32_t *scale;  /**< per tensor: its FP8 scale tensor id, or -1 */
    uint8_t *expert; /**< per tensor: 1 for routed-expert tensors (and their scales) */
    int8_t *scale_j; /**< per weight tensor: first view dim merged into the scale row dim */
} rs_model_ids_t;

/** Build the ids; with @p tensors non-NULL also add the tensors to it. */
reshard_status_t rs_model_catalogue(const reshard_model_t *m, reshard_tensors_t *tensors,
                                    rs_model_ids_t *ids);
void rs_model_ids_free(rs_model_ids_t *ids);
/** Ids for a layout over @p tensors: checks the catalogue matches the model. */
reshard_status_t rs_model_ids_for(const reshard_model_t *m, const reshard_tensors_t *tensors,
                                  rs_model_ids_t *ids);

/* --- catalogue building (catalogue.c) ------------------------------------- */

/** A catalogue being built (catalogue.c). */
typedef struct rs_cat rs_cat_t;
const reshard_model_t *rs_cat_model(const rs_cat_t *c);
rs_model_ids_t *rs_cat_ids(rs_cat_t *c);
/** Add tensor "<fmt>" (printf) of dtype @p dt, shape @p shape and planning
 *  view @p view (@p vnd dims; 0 = the shape) to the catalogue; its id goes
 *  to @p id. Tensors whose name has ".experts." are routed-expert tensors.
 *  No FP8 scale tensor. */
reshard_status_t rs_cat_add(rs_cat_t *c, int32_t *id, reshard_dtype_t dt, int nd,
                            const int64_t *shape, int vnd, const int64_t *view, const char *fmt,
                            ...) __attribute__((format(printf, 8, 9)));

/* --- nemotron_h hooks (mamba.c) ------------------------------------------- */
struct json_t;
/** Read the hybrid fields of a nemotron_h config (after the common ones). */
reshard_status_t rs_hybrid_parse(struct json_t *root, const reshard_model_options_t *o,
                                 reshard_model_t *m);
void rs_hybrid_free(rs_hybrid_t *hy);
reshard_status_t rs_hybrid_catalogue(rs_cat_t *c);
reshard_status_t rs_hybrid_check_train(const reshard_model_t *m, const reshard_train_spec_t *s);
reshard_status_t rs_hybrid_check_infer(const reshard_model_t *m, const reshard_infer_spec_t *s);
/** Megatron layers of model chunk @p chunk of stage @p p: the '|' segments
 *  of the pattern, else rs_stage_layers. */
void rs_hybrid_stage_layers(const reshard_model_t *m, const reshard_train_spec_t *s, int32_t p,
                            int32_t chunk, int32_t *first, int32_t *count);
/** An integer config field (config.c): required when @p def < 0; null = absent. */
reshard_status_t rs_config_int(struct json_t *root, const char *key, int64_t def, int64_t min,
                               int64_t *out);
/* A boolean field: JSON true or false; absent or null reads as @p def;
 * anything else is CONFIG naming the field. */
reshard_status_t rs_config_bool(struct json_t *root, const char *key, int def, int *out);

/* --- qwen3_next hooks (qwen3_next.c) -------------------------------------- */
/** Read the Gated DeltaNet fields of a qwen3_next config into m->gdn. */
reshard_status_t rs_gdn_parse(struct json_t *root, reshard_model_t *m);
/** Layer @p i (0-based HF index) is a Gated DeltaNet layer. */
bool rs_gdn_layer(const reshard_model_t *m, int32_t i);
/** Add the Gated DeltaNet tensors of a layer ("<prefix>linear_attn.*") to
 *  @p c, their ids into @p l. */
reshard_status_t rs_gdn_catalogue(rs_cat_t *c, rs_layer_ids_t *l, const char *prefix);
/** The spec rules of the Gated DeltaNet: tp divides both head counts. */
reshard_status_t rs_gdn_check_tp(const reshard_model_t *m, int32_t tp, const char *side);

/* --- spec rules ----------------------------------------------------------- */
reshard_status_t rs_check_train(const reshard_model_t *m, const reshard_train_spec_t *s);
reshard_status_t rs_check_infer(const reshard_model_t *m, const reshard_infer_spec_t *s);
/* The rules the layout builders apply while emitting fragments (FP8: every
 * shard on 128x128 block bounds, vLLM fp8_utils): both layouts are built
 * and dropped; CONFIG names the side and the rule. */
reshard_status_t rs_check_layouts(const reshard_model_t *m, const reshard_train_spec_t *train,
                                  const reshard_infer_spec_t *infer);
/** Megatron layers of model chunk @p chunk of stage @p p: global decoder
 *  layers [first, first+count) (spec checked by rs_check_train). */
void rs_stage_layers(int32_t L, const reshard_train_spec_t *s, int32_t p, int32_t chunk,
                     int32_t *first, int32_t *count);
/** The training convention with its default applied (reshard_model.h). */
static inline int32_t rs_convention(const reshard_train_spec_t *s)
{
    return s->convention == RESHARD_TRAIN_DEFAULT ? RESHARD_TRAIN_MEGATRON_LM : s->convention;
}
/** The spec follows FSDP2 over the HF module (fsdp.c). */
static inline bool rs_fsdp(const reshard_train_spec_t *s)
{
    return s->convention == RESHARD_TRAIN_FSDP;
}
/** The transformers release of an FSDP2 spec with its default applied. */
static inline int32_t rs_transformers(const reshard_train_spec_t *s)
{
    return s->transformers == RESHARD_TRANSFORMERS_4 ? RESHARD_TRANSFORMERS_4
                                                     : RESHARD_TRANSFORMERS_5;
}
/** FSDP2's rules for @p m (fsdp.c): the families and forms modelled,
 *  torch.chunk needs nothing to divide. */
reshard_status_t rs_fsdp_check(const reshard_model_t *m, const reshard_train_spec_t *s);
/** Expert tensor-parallel size (0: the convention's default: tp under
 *  Megatron-LM, arguments.py 587-588; 1 with ep > 1 under Megatron-Bridge,
 *  transformer_config.py _set_moe_expert_tensor_parallel_default at 067f987)
 *  and model chunks per stage. */
static inline int32_t rs_etp(const reshard_train_spec_t *s)
{
    if (s->etp > 0)
        return s->etp;
    return rs_convention(s) == RESHARD_TRAIN_MEGATRON_BRIDGE && s->ep > 1 ? 1 : s->tp;
}
static inline int32_t rs_vpp(const reshard_train_spec_t *s)
{
    return s->vpp > 1 ? s->vpp : 1;
}
/** Independent inference engines (0 means one) and the vLLM version with
 *  their defaults applied (reshard_model.h). */
static inline int32_t rs_engines(const reshard_infer_spec_t *s)
{
    return s->engines > 1 ? s->engines : 1;
}
static inline int32_t rs_vllm(const reshard_infer_spec_t *s)
{
    return s->vllm == RESHARD_VLLM_DEFAULT ? RESHARD_VLLM_0_25 : s->vllm;
}
static inline bool rs_vllm_version_ok(int32_t v)
{
    return v >= RESHARD_VLLM_DEFAULT && v <= RESHARD_VLLM_0_25;
}
/** With the hybrid '|' pattern: vpp = segments / pp, as Megatron derives it
 *  (spec checked by rs_check_train first). */
void rs_train_effective(const reshard_model_t *m, reshard_train_spec_t *s);
/** Ranks of one inference engine (tp*dp; an SGLang server: tp). */
static inline int32_t rs_engine_world(const reshard_infer_spec_t *s)
{
    return s->engine == RESHARD_ENGINE_SGLANG ? s->tp : s->tp * s->dp;
}
/** vLLM's use_sequence_parallel_moe (config/parallel.py): with the default
 *  all2all backend (allgather_reducescatter), expert parallelism, tp > 1 and
 *  dp > 1 inside one engine. NemotronH and DeepSeek then build the shared
 *  experts with disable_tp: every rank holds them whole. */
static inline bool rs_vllm_sequence_parallel_moe(const reshard_infer_spec_t *s)
{
    return s->ep && s->tp > 1 && s->dp > 1;
}
/** The names that differ between vLLM releases (vllm.c): one table. */
typedef enum { RS_VN_W13, RS_VN_W2, RS_VN_W13_BIAS, RS_VN_W2_BIAS, RS_VN_N } rs_vllm_name_t;
/** The name suffix of @p which under the spec's vLLM version, after the MoE
 *  module's "experts." (e.g. "w13_weight" or "routed_experts.w13_weight"). */
const char *rs_vllm_name(const reshard_infer_spec_t *s, rs_vllm_name_t which);

/** @p a then @p b into @p buf of @p size bytes (cut to fit, as snprintf
 *  "%s%s"); returns @p buf. Parameter names are a layer prefix and a name. */
const char *rs_nm(char *buf, size_t size, const char *a, const char *b);
/** @p a, @p b, then @p index in decimal (none when negative), then @p c into
 *  @p buf of @p size bytes (cut to fit); returns @p buf. A layer's name
 *  prefix ("decoder.layers.3."), without a printf per layer and rank. */
const char *rs_name_join(char *buf, size_t size, const char *a, const char *b, int64_t index,
                         const char *c);

/* --- emission ------------------------------------------------------------- */

typedef struct {
    int32_t rank, buffer;
    uint64_t bytes;
    const char *name;  /**< pooled (reshard_model_buffers.names) */
    int module_buffer; /**< reshard_model_buffer_t.module_buffer */
} rs_buf_entry_t;

struct reshard_model_buffers {
    rs_buf_entry_t *e;
    int64_t n, cap;
    rs_strpool_t names; /**< each parameter name once, however many ranks hold it */
};

/** Which fragments of a tensor a scoped build keeps (rs_emit_scope_t.want):
 *  every rank's, or those of the ranks [near_lo, near_hi) only. */
enum { RS_KEEP_ALL = 1, RS_KEEP_NEAR = 2 };

/** What of one side a build writes (model/scoped.c): every rank's
 *  parameters are still worked out, in the same order, but only some are
 *  kept. */
typedef struct {
    int32_t lo, hi;           /**< ranks visited: [lo, hi) of the side's (global rank numbers) */
    const uint8_t *want;      /**< NULL: every fragment; else per tensor RS_KEEP_* bits: which of
                                   its fragments are kept */
    int32_t near_lo, near_hi; /**< the ranks RS_KEEP_NEAR keeps: [near_lo, near_hi) */
    int32_t declare_rank;     /**< RESHARD_ALL_RANKS: every visited rank's buffers; else only this
                                   rank's (one that no rank has: none) */
    uint64_t *holders;        /**< NULL, or per tensor a set of ranks (@p words 64-bit words
                                   each): the rank of every fragment worked out is added */
    int64_t words;
} rs_emit_scope_t;

/** State while one side's layout is written: the current rank and its next
 *  buffer id. */
typedef struct {
    const reshard_model_t *m;
    const reshard_tensors_t *T;
    const rs_model_ids_t *ids;
    reshard_layout_t *layout;
    reshard_model_buffers_t *bufs; /**< NULL: no table wanted */
    const rs_emit_scope_t *scope;  /**< NULL: every rank, fragment and buffer */
    int32_t rank;
    int32_t side_rank; /**< rank - the side's rank offset */
    int32_t next_buf;
    bool train; /**< the training side (bf16 and no scales when the model has infer_quant) */
} rs_emit_t;

/** Writes the parameters of side rank @p r (0-based on its side) into @p e. */
typedef reshard_status_t (*rs_rank_params_fn)(rs_emit_t *e, int32_t r, const void *spec);

/**
 * Build one side's layout (and buffer table when @p buffers is not NULL):
 * for every side rank r in [0, world) (those @p scope visits; NULL: all),
 * with e->rank = rank_offset + r and its buffer ids from 0, call @p fn. The
 * layout's origin records @p origin (rs_side_origin) and what it was built
 * with. On error nothing is left allocated.
 */
reshard_status_t rs_emit_side(const reshard_model_t *model, const reshard_tensors_t *tensors,
                              bool train, int32_t world, int32_t rank_offset, rs_rank_params_fn fn,
                              const void *spec, const rs_emit_scope_t *scope, uint64_t origin,
                              reshard_layout_t **out, reshard_model_buffers_t **buffers);

/** Hash of what one side's layout is built from: the model (config and
 *  load options), the side, its spec as text (reshard_*_spec_str) and its
 *  first rank. Never 0. */
uint64_t rs_side_origin(const reshard_model_t *m, bool train, const char *spec_text,
                        int32_t rank_offset);

/** The Megatron (megatron.c) and vLLM (vllm.c) layouts, of the ranks and
 *  fragments @p scope keeps (NULL: all): the spec checked, then
 *  rs_emit_side. */
reshard_status_t rs_train_emit(const reshard_model_t *model, const reshard_tensors_t *tensors,
                               const reshard_train_spec_t *spec, int32_t rank_offset,
                               const rs_emit_scope_t *scope, reshard_layout_t **out,
                               reshard_model_buffers_t **buffers);
/** The FSDP2 training layout (fsdp.c), as rs_train_emit. */
reshard_status_t rs_fsdp_emit(const reshard_model_t *model, const reshard_tensors_t *tensors,
                              const reshard_train_spec_t *spec, int32_t rank_offset,
                              const rs_emit_scope_t *scope, reshard_layout_t **out,
                              reshard_model_buffers_t **buffers);
reshard_status_t rs_infer_emit(const reshard_model_t *model, const reshard_tensors_t *tensors,
                               const reshard_infer_spec_t *spec, int32_t rank_offset,
                               const rs_emit_scope_t *scope, reshard_layout_t **out,
                               reshard_model_buffers_t **buffers);

/** The start of every refit build (refit.c): the arguments checked
 *  (INVALID_ARG naming @p fn, the public function), @p out zeroed, the specs
 *  checked, the sizes and offset set (@p infer_offset < 0: the train world)
 *  and the catalogue built. On error nothing is left allocated. */
reshard_status_t rs_refit_begin(const char *fn, const reshard_model_t *model,
                                const reshard_train_spec_t *train,
                                const reshard_infer_spec_t *infer, int32_t infer_offset,
                                reshard_model_refit_t *out);
/** Re-raise a layout builder's CONFIG error with the side (@p side) it came from. */
reshard_status_t rs_layout_rule(reshard_status_t s, const char *side);

/**
 * Open the next buffer of the current rank: a matrix of @p experts x @p rows
 * x @p width elements of tensor @p like's dtype (a tensor id that will live
 * in it), declared [experts, rows, width] when @p like is a stacked expert
 * tensor, [rows, width] for a matrix (@p experts 0: one expert's own
 * parameter, a matrix), [rows * width] for a vector. When @p like has an FP8 scale tensor, the
 * following buffer id is its scale buffer (experts x ceil(rows/128) x ceil(width/128) fp32).
 * @p fmt names the buffer (printf). Returns the buffer id or a negative status.
 */
int32_t rs_emit_buffer(rs_emit_t *e, int32_t like, int64_t experts, int64_t rows, int64_t width,
                       const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/** As rs_emit_buffer, of the framework's own shape @p shape (@p ndim dims)
 *  for a tensor without an FP8 scale. */
int32_t rs_emit_buffer_shaped(rs_emit_t *e, int32_t like, int ndim, const int64_t *shape,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/** Buffer @p buf of the current rank, just declared (rs_emit_buffer*), is written
 *  with zeros by every refit and by no fragment (reshard_layout_zero_buffer); nothing
 *  when the scope does not declare this rank's buffers. */
reshard_status_t rs_emit_zero(rs_emit_t *e, int32_t buf);

/** Add a fragment of tensor @p t (box in its view: offsets @p off, extents
 *  @p ext, strides @p st, base @p base) in buffer @p buf of the current rank,
 *  and its scale fragment in buffer buf+1 when @p t has one. */
reshard_status_t rs_emit(rs_emit_t *e, int32_t t, int32_t buf, const int64_t *off,
                         const int64_t *ext, int64_t base, const int64_t *st);

/** The whole tensor, contiguous row-major from @p base. */
reshard_status_t rs_emit_full(rs_emit_t *e, int32_t t, int32_t buf, int64_t base);
/** View dim 0 range [o, o+n) with every other dim whole, contiguous from @p base. */
reshard_status_t rs_emit_dim0(rs_emit_t *e, int32_t t, int32_t buf, int64_t base, int64_t o,
                              int64_t n);
/** Column range [c0, c0+n) of a 2-d [R, C] tensor into an [R, n] buffer. */
reshard_status_t rs_emit_cols(rs_emit_t *e, int32_t t, int32_t buf, int64_t c0, int64_t n);
/** A column-parallel tensor: view dim 0 (heads or rows; a vector's entries)
 *  split over @p tp, rank @p rank_tp's part in a buffer of its own named
 *  @p name. */
reshard_status_t rs_emit_column(rs_emit_t *e, int32_t t, int32_t tp, int32_t rank_tp,
                                const char *name);
/** A row-parallel [R, C] tensor: columns split over @p tp, likewise. */
reshard_status_t rs_emit_row(rs_emit_t *e, int32_t t, int32_t tp, int32_t rank_tp,
                             const char *name);
/** A replicated or whole tensor in a buffer of its own (opened here). */
reshard_status_t rs_emit_own(rs_emit_t *e, int32_t t, const char *name);
/** A gated MLP: a buffer [gate rows i0..i0+n; up rows i0..i0+n] x H and a
 *  buffer [H, n] for the down projection's columns i0..i0+n. */
reshard_status_t rs_emit_mlp(rs_emit_t *e, int32_t gate, int32_t up, int32_t down, int64_t i0,
                             int64_t n, const char *fc1_name, const char *fc2_name);
/** Experts e0..e0+ne, intermediate rows i0..i0+n of each. Stacked
 *  (@p per_expert false, vLLM w13/w2): one buffer [ne, 2n, H] (per expert gate
 *  then up) named @p fc1_name and one [ne, H, n]. Per expert (Megatron
 *  TEGroupedMLP): buffers "<fc1_name>k" [2n, H] for k = 0..ne-1, then
 *  "<fc2_name>k" [H, n]. Without a gate tensor (l->e_gate < 0) fc1 is the up
 *  rows alone ([ne, n, H]); H is the experts' input width (down_proj's rows). */
reshard_status_t rs_emit_experts(rs_emit_t *e, const rs_layer_ids_t *l, int64_t e0, int64_t ne,
                                 int64_t i0, int64_t n, bool per_expert, const char *fc1_name,
                                 const char *fc2_name);
/** As rs_emit_experts stacked (vLLM w13/w2), stack row k holding logical
 *  expert @p logical[k] (k = 0..ne-1; runs of consecutive experts are one
 *  fragment): EPLB's physical slots, a logical expert possibly in several. */
reshard_status_t rs_emit_expert_slots(rs_emit_t *e, const rs_layer_ids_t *l, const int32_t *logical,
                                      int64_t ne, int64_t i0, int64_t n, const char *fc1_name,
                                      const char *fc2_name);
/** A vocabulary-parallel [V, H] tensor: rank part @p part of @p parts equal
 *  ranges of the padded vocabulary @p vpad; padding rows have no fragment. */
reshard_status_t rs_emit_vocab(rs_emit_t *e, int32_t t, int64_t vpad, int32_t parts, int32_t part,
                               const char *name);

reshard_status_t rs_buffers_new(reshard_model_buffers_t **out);

/** Ceiling division and round-up for positive values. */
static inline int64_t rs_cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}
static inline int64_t rs_roundup(int64_t a, int64_t b)
{
    return rs_cdiv(a, b) * b;
}

/** Return the status of @p x from the calling function unless it is RESHARD_OK. */
#define TRY(x)                                                                                     \
    do {                                                                                           \
        reshard_status_t s_ = (x);                                                                 \
        if (s_ != RESHARD_OK)                                                                      \
            return s_;                                                                             \
    } while (0)

/** Return a CONFIG error with the printf message unless @p cond holds. */
#define RULE(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return rs_error(RESHARD_ERR_CONFIG, __VA_ARGS__);                                      \
    } while (0)

/* --- fused attention of each side, shared with the hybrid stack ----------- */
/** Megatron linear_qkv of TP rank @p t (megatron.c). */
reshard_status_t rs_megatron_qkv(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                                 const char *name);
/** vLLM FusedMoE w13/w2 of inference side rank @p r (vllm.c): with EP whole
 *  experts (remainder to the first ranks), else every expert's intermediate
 *  rows split over all tp*dp ranks. */
reshard_status_t rs_vllm_experts(rs_emit_t *e, const rs_layer_ids_t *l,
                                 const reshard_infer_spec_t *s, int32_t r, const char *w13,
                                 const char *w2);
/* --- EPLB (eplb.c) -------------------------------------------------------- */
/** The spec asks for vLLM's expert load balancer (redundant > 0 or a map). */
bool rs_eplb_on(const reshard_infer_spec_t *s);
/** MoE layers of the model (decoder, then MTP): the rows of a per-layer map. */
int32_t rs_eplb_moe_layers(const reshard_model_t *m);
/** The map row of catalogue layer @p layer (a MoE layer): MoE layers before it. */
int32_t rs_eplb_row(const reshard_model_t *m, int32_t layer);
/** The logical expert physical slot @p slot of map row @p row of engine @p engine holds
 *  (spec checked by rs_eplb_check). */
int32_t rs_eplb_slot(const reshard_model_t *m, const reshard_infer_spec_t *s, int32_t engine,
                     int32_t row, int64_t slot);
/** vLLM's EPLB rules and the map's (length, range, every expert held):
 *  CONFIG naming the layer, slot or expert. OK when EPLB is off. */
reshard_status_t rs_eplb_check(const reshard_model_t *m, const reshard_infer_spec_t *s);
/** @p h chained with the map's entries (the layout's fingerprint); @p h without a map. */
uint64_t rs_eplb_hash(const reshard_model_t *m, const reshard_infer_spec_t *s, uint64_t h);

/** vLLM qkv_proj bias of TP rank @p t (vllm.c). */
reshard_status_t rs_vllm_qkv_bias(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                                  const char *name);
/** gpt_oss (gpt_oss.c): decoder layer @p i as vLLM's GptOssModel holds it on
 *  inference side rank @p r; the biases of local experts e0..e0+ne as
 *  Megatron's TEGroupedMLP holds them (linear_fc1.biasK [gate; up] rows
 *  i0..i0+n, linear_fc2.biasK whole). */
reshard_status_t rs_gpt_oss_vllm_layer(rs_emit_t *e, const reshard_infer_spec_t *s, int32_t r,
                                       int32_t i);
reshard_status_t rs_gpt_oss_megatron_expert_biases(rs_emit_t *e, const rs_layer_ids_t *l,
                                                   int64_t e0, int64_t ne, int64_t i0, int64_t n,
                                                   const char *prefix);
/* --- SGLang (sglang.c) ---------------------------------------------------- */
/** SGLang's rules that need no model (dp without DP attention, ep and dp
 *  dividing tp, dp_lm_head without DP attention, a2a=deepep with ep < tp):
 *  @p code (INVALID_ARG while parsing, CONFIG in a check) with the message. */
reshard_status_t rs_sglang_spec_rules(const reshard_infer_spec_t *s, reshard_status_t code);
/** SGLang's rules for @p m (families and modes modelled, the divisions its
 *  layers assert): CONFIG naming the rule. */
reshard_status_t rs_sglang_check(const reshard_model_t *m, const reshard_infer_spec_t *s);
/** reshard_infer_spec_str of an engine=sglang spec. */
const char *rs_sglang_spec_str(const reshard_infer_spec_t *s, char *out, size_t size);
/** The parameters SGLang TP rank @p t of one server holds (spec checked). */
reshard_status_t rs_sglang_rank_params(rs_emit_t *e, const reshard_infer_spec_t *s, int32_t t);
/** vLLM fused_qkv_a_proj (SGLang fused_qkv_a_proj_with_mqa): replicated
 *  [q_a_proj rows; kv_a_proj_with_mqa rows] x H (vllm.c). */
reshard_status_t rs_vllm_qkv_a(rs_emit_t *e, const rs_layer_ids_t *l, const char *name);
/** As rs_emit_experts stacked, with one more stack row after the @p ne
 *  routed experts: the shared expert (l->s_gate, s_up, s_down; its
 *  intermediate rows i0..i0+n), as SGLang's fused shared experts hold it. */
reshard_status_t rs_emit_experts_fused_shared(rs_emit_t *e, const rs_layer_ids_t *l, int64_t e0,
                                              int64_t ne, int64_t i0, int64_t n,
                                              const char *fc1_name, const char *fc2_name);
/** vLLM qkv_proj of TP rank @p t (vllm.c). */
reshard_status_t rs_vllm_qkv(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                             const char *name);
/** nemotron_h (mamba.c): decoder layer @p i as Megatron's HybridStack holds
 *  it on a rank of TP rank @p t, expert-TP rank @p et and EP rank @p epr
 *  (names "<pfx>decoder.layers.<local>."), and as vLLM's NemotronH holds it
 *  on inference side rank @p r. */
reshard_status_t rs_hybrid_megatron_layer(rs_emit_t *e, const reshard_train_spec_t *s, int32_t t,
                                          int32_t et, int32_t epr, const char *pfx, int32_t i,
                                          int32_t local);
reshard_status_t rs_hybrid_vllm_layer(rs_emit_t *e, const reshard_infer_spec_t *s, int32_t r,
                                      int32_t i);

/** The Gated DeltaNet of TP rank @p t of @p tp as Megatron's GatedDeltaNet
 *  (names "<p>self_attention.") or vLLM's QwenGatedDeltaNetAttention (names
 *  "<p>linear_attn.") holds it, with its input norm. */
reshard_status_t rs_gdn_megatron(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                                 const char *p);
reshard_status_t rs_gdn_vllm(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                             const char *p);

#endif
