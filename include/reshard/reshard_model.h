/*
 * reshard model front end: published model configs and the parallel
 * conventions of Megatron (training) and vLLM (inference) turned into the
 * logical tensors and layouts of reshard.h.
 *
 *   1. Load a model: a shipped name ("deepseek-v3") or a HF config.json path.
 *   2. Parse the two parallel specs ("tp=4,pp=8,ep=16,dp=4" and "tp=8,dp=16,ep=on").
 *   3. Build the catalogue (HF names and shapes), the Megatron train layout and
 *      the vLLM inference layout; both describe their buffers as fragments of
 *      the same logical tensors.
 *   4. Count what the gather+broadcast baseline would move.
 *
 * Every function is local (no communication) and deterministic: every rank
 * that calls it with the same inputs gets the same catalogue and layouts, so
 * each rank may build them itself before reshard_plan_create.
 *
 * Units: shapes in elements, sizes in bytes, as in reshard.h.
 *
 * Families (by config "model_type"; "architectures" only when it is absent):
 *   llama, mistral, qwen3     dense, GQA (+ q/k norms for qwen3), tied or untied
 *                             embeddings
 *   qwen2                     dense with q/k/v biases (Qwen2.5)
 *   qwen3_moe                 + router "mlp.gate" and stacked experts
 *   qwen2_moe                 q/k/v biases, routed experts, a shared expert
 *                             "mlp.shared_expert.*" and its sigmoid gate
 *                             "mlp.shared_expert_gate.weight" [1, H]
 *   mixtral                   "block_sparse_moe.gate" and experts w1 (gate), w3 (up),
 *                             w2 (down) of intermediate_size
 *   deepseek_v3, kimi_k2,     MLA attention (q_lora_rank may be null), first_k_dense_replace
 *   deepseek_v2               dense layers, shared experts, router bias
 *                             "mlp.gate.e_score_correction_bias" (fp32; only with
 *                             topk_method "noaux_tc", as vLLM creates it), MTP layers
 *                             (num_nextn_predict_layers) only with the mtp option
 *   nemotron_h                hybrid by "hybrid_override_pattern" (M Mamba-2, * attention,
 *                             - squared-ReLU MLP, E MoE; '|' = Megatron stage boundary).
 *                             HF names "backbone.layers.N.norm.weight" and
 *                             "backbone.layers.N.mixer.*": Mamba in_proj [z; x; B; C; dt] x H,
 *                             conv1d.weight [x; B; C] x 1 x K and conv1d.bias, A_log,
 *                             D and dt_bias [Hm] (bf16), norm.weight [I],
 *                             out_proj [H, I]; MoE gate.weight (bf16) and
 *                             gate.e_score_correction_bias (fp32), stacked non-gated
 *                             experts "mixer.experts.up_proj.weight" [E, I, latent or H]
 *                             and down_proj, shared_experts up/down,
 *                             fc1/fc2_latent_proj (replicated). Megatron: HybridStack names
 *                             (mixer.in_proj.layer_norm_weight, mixer.conv1d_weight,
 *                             decoder.final_norm; '|' segment c*pp + p is model chunk c of
 *                             stage p, vpp = segments / pp as Megatron derives it, an empty
 *                             segment a stage or chunk without decoder layers); tp must
 *                             divide n_groups. vLLM: NemotronH names
 *                             (model.embed_tokens, model.norm_f); tp must divide n_groups or
 *                             n_groups be 1 (then every rank holds B and C whole).
 *                             vLLM's parameter mixer.A holds -exp(A_log): a post-load value
 *                             reshard does not compute; the vLLM layout has a buffer
 *                             "model.layers.N.mixer.A_log" ([Hm/tp] bf16) that receives the
 *                             rank's A_log slice, from which the worker sets A. One dtype
 *                             per tensor on both sides: A_log bf16 (Megatron creates it
 *                             fp32, but under bf16 training Float16Module casts every
 *                             floating parameter not marked keep_in_fp32, module.py
 *                             458-511), D and dt_bias bf16 (vLLM MambaMixer2 creates them
 *                             in the model dtype). Under vLLM's sequence-parallel MoE the
 *                             shared experts are whole on every rank. Refused: biases,
 *                             use_conv_bias false, the MTP layers, FP8.
 *   glm4_moe                  GLM-4.5 (vLLM glm4_moe.py, Megatron-Bridge glm45_bridge.py):
 *                             GQA with q/k/v biases (attention_bias; o_proj none), q/k norms
 *                             only with use_qk_norm, partial rotary (no tensors); layers below
 *                             first_k_dense_replace dense, the rest MoE: router
 *                             "mlp.gate.weight" (bf16) and "mlp.gate.e_score_correction_bias"
 *                             (fp32, always), stacked experts, shared experts
 *                             "mlp.shared_experts.*" (n_shared_experts x moe_intermediate_size,
 *                             TP-split in vLLM, also under sequence-parallel MoE). vLLM creates
 *                             gate.weight fp32 (nn.Linear(dtype=float32)); the refit moves no
 *                             dtype change, so its vLLM layout has a bf16 buffer
 *                             "model.layers.N.mlp.gate.weight_bf16" that receives the router,
 *                             from which the worker sets gate.weight (exact). The MTP layer
 *                             (vLLM's separate glm4_moe_mtp drafter) is refused with the mtp
 *                             option.
 *   gpt_oss                   gpt-oss (vLLM gpt_oss.py, Megatron-Bridge gpt_oss_bridge.py): GQA
 *                             with q/k/v and o_proj biases and attention sinks
 *                             "self_attn.sinks" [heads]; every layer MoE: "mlp.router.weight"
 *                             and "mlp.router.bias", stacked experts with biases
 *                             "mlp.experts.{gate,up}_proj.bias" [E, I] and
 *                             "mlp.experts.down_proj.bias" [E, H] (HF's gate_up_proj [E, H, 2I]
 *                             holds gate at even, up at odd columns: expert e's gate row i is
 *                             its column 2i); sliding-window layers have no tensors. vLLM names
 *                             "model.embedding.weight", "model.layers.N.attn.{qkv_proj,o_proj,
 *                             sinks}", "mlp.router", FusedMoE w13_weight / w13_bias with gate
 *                             and up rows interleaved, w2_weight, w2_bias (without EP on the
 *                             flattened rank 0 only; zero-filled on the others, as vLLM
 *                             zeroes it there); EP needs tp*dp to divide the experts; no
 *                             EPLB. Megatron: linear_proj.bias, core_attention.softmax_offset
 *                             (the sinks), mlp.router.bias, linear_fc1.biasK ([gate; up]),
 *                             linear_fc2.biasK. Only the bf16 form: vLLM's MXFP4 experts (the
 *                             released checkpoints' form) and FP8 are refused by name.
 *   qwen3_next                Qwen3-Next (vLLM qwen3_next.py and qwen_gdn_linear_attn.py,
 *                             Megatron-Core gated_delta_net, Megatron-Bridge
 *                             qwen3_next_bridge.py): every full_attention_interval-th layer
 *                             gated attention, the others Gated DeltaNet; every layer MoE with
 *                             a shared expert and its gate (as qwen2_moe). Gated attention: HF
 *                             q_proj [heads x [q_h; gate_h]]; Megatron linear_qkv per query
 *                             group [q heads; their gates; k; v]; vLLM qkv_proj keeps HF's
 *                             order. DeltaNet "linear_attn.{in_proj_qkvz, in_proj_ba,
 *                             conv1d, dt_bias, A_log, norm, out_proj}": vLLM holds a contiguous
 *                             1/tp of in_proj_qkvz / in_proj_ba (whole key-head groups);
 *                             Megatron's self_attention.in_proj.weight holds the rank's
 *                             [q; k; v; z; b; a] sections; conv1d.weight [channels/tp, 1, K]
 *                             the rank's slice of [q; k; v] on both sides. Two staged values:
 *                             Megatron's zero-centered out_norm.weight is HF's norm.weight
 *                             minus 1, delivered to vLLM's buffer
 *                             "model.layers.N.linear_attn.norm.weight_minus_1" (the worker
 *                             sets norm.weight to it + 1); A_log (bf16 in Megatron, fp32 in
 *                             vLLM) to "linear_attn.A_log_bf16" (the worker widens it). tp
 *                             must divide both linear head counts. Under vLLM's
 *                             sequence-parallel MoE the shared expert is whole on every
 *                             rank (qwen3_next.py: disable_tp). Refused: a dense MLP
 *                             layer, explicit layer_types, the MTP layer, FP8.
 * A config field that implies tensors a family does not build (attention_bias
 * outside glm4_moe and gpt_oss, mlp_bias, shared_expert_intermediate_size outside qwen2_moe
 * and qwen3_next,
 * n_shared_experts outside deepseek, nemotron_h and glm4_moe, experts on a dense
 * family) is refused naming
 * the field. Booleans must be JSON true or false; a duplicate key is refused (IO).
 *
 * Dtypes: weights bf16 (or the FP8 form below); router weights bf16 in both
 * frameworks (Megatron's router.py creates the weight fp32 and casts it to
 * params_dtype in reset_parameters; vLLM's gate is a bf16 ReplicatedLinear); the
 * router score-correction bias fp32 on both sides (vLLM deepseek_v2.py; Megatron's
 * expert_bias is fp32 under Megatron-Bridge from the start and under Megatron-LM
 * from the first forward, router.py _maintain_float32_expert_bias). Megatron's
 * mlp.router.expert_bias is a module buffer (register_buffer: named_buffers(),
 * not named_parameters()); reshard_model_buffer_t.module_buffer marks it.
 *
 * vLLM's expert load balancer (EPLB): redundant experts and the balancer's
 * physical-to-logical map (reshard_infer_spec_t.redundant, eplb_map), for
 * every MoE family, with expert parallelism (vLLM's EPLB needs it).
 *
 * SGLang servers (reshard_infer_spec_t.engine = RESHARD_ENGINE_SGLANG, spec
 * "engine=sglang"): dense (qwen3, qwen2, llama), qwen3_moe and deepseek_v3 in
 * bf16 under TP, DP attention, expert parallelism (--ep-size, DeepEP) and
 * DeepSeek's fused shared expert, as SGLang a17753e holds them
 * (docs/sglang-layouts.md); other families and modes are refused by name.
 *
 * Modelled engine versions and training conventions: vLLM 0.24 (up to it) and
 * 0.25 (and later; the default) by name (reshard_vllm_version_t); Megatron-LM
 * (the default) and Megatron-Bridge (reshard_train_convention_t). Inference
 * data parallelism as independent engines (reshard_infer_spec_t.engines) or as
 * vLLM's own dp, whose MoE layers span tp*dp. Under vLLM's sequence-parallel
 * MoE (EP, tp > 1, dp > 1 in one engine; the default all2all backend) DeepSeek,
 * NemotronH and Qwen3-Next hold their shared experts whole (deepseek_v2.py,
 * nemotron_h.py, qwen3_next.py: disable_tp); Qwen2-MoE's stays TP-split
 * (qwen2_moe.py).
 *
 * Not modelled (out of scope): other vLLM releases' names, all2all backends other
 * than allgather_reducescatter, EPLB's round_robin placement (linear, the default, is
 * modelled: reshard_infer_spec_t.redundant), vLLM kernel-specific post-load formats
 * (FlashInfer CUTLASS/TRTLLM MoE backends swap w13 to [up; gate] and re-block it; MLA's derived
 * W_UK_T / W_UV copies of kv_b_proj), vLLM pipeline parallelism, Megatron
 * SequentialMLP experts (local_experts.i.*), Megatron pipeline layout strings, LoRA
 * (added vocabulary), vLLM's fp32 router weight where its GateLinear has no SM90+ kernel
 * (nemotron_h: bf16 is modelled, as on H100/B200).
 *
 * Logical tensors carry the HF checkpoint names and shapes, with one exception:
 * the routed experts of a MoE layer are stacked into one tensor per projection,
 * "model.layers.L.mlp.experts.gate_proj.weight" [E, I, H] (up_proj [E, I, H],
 * down_proj [E, H, I]; mixtral "block_sparse_moe.experts.w1.weight" etc.); expert
 * e is row e of the HF tensor "...experts.e.gate_proj.weight".
 * In FP8 form every linear weight except the embedding, the output layer and
 * the router is e4m3 and has a companion "<name>_scale_inv" ("...weight_scale_inv")
 * of fp32, shape ceil(rows/128) x ceil(cols/128) (with the expert dim first
 * for stacked experts). Norms, biases and the router stay bf16 (fp32 where
 * noted), as in vLLM's FP8 checkpoints.
 * With reshard_model_options_t.infer_quant the same tensors are bf16 in the
 * catalogue and in the Megatron layout (no scale tensors there, no block
 * rule) and quantized on the vLLM side: the catalogue marks them
 * (reshard_tensors_set_quant), the vLLM layout declares their buffers e4m3 and
 * their scale buffers (fp32 [E?] x ceil(rows/128) x ceil(cols/128), or for
 * MXFP8 uint8 e8m0 [E?] x rows x ceil(cols/32)), and its shards must lie on
 * block bounds (vLLM fp8_utils.py).
 */
#ifndef RESHARD_MODEL_H
#define RESHARD_MODEL_H

#include "reshard/reshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* 1. Models                                                           */
/* ------------------------------------------------------------------ */

/** A parsed model config. Immutable after load; may be shared by threads. */
typedef struct reshard_model reshard_model_t;

/** Load options. Zero-initialise: every field's zero is its default. */
typedef struct {
    int mtp;                          /**< non-zero: include the multi-token-prediction layers */
    reshard_dtype_t dtype;            /**< RESHARD_BF16 (default, 0) or RESHARD_FP8_E4M3 (weights
                                           e4m3 + 128x128 fp32 block scales) */
    int32_t layers;                   /**< > 0: keep only the first K decoder layers (tests,
                                           small runs); 0 = all */
    reshard_quant_kind_t infer_quant; /**< with dtype bf16: the inference side holds the
                                FP8-form weights quantized from the training side's bf16
                                (reshard.h, reshard_tensors_set_quant): FP8_BLOCK (e4m3 +
                                128x128 fp32 "weight_scale_inv") or MXFP8 (e4m3 + 1x32
                                e8m0 scales); NONE (0): same dtype on both sides */
    int pow2_scale; /**< FP8_BLOCK: power-of-two (UE8M0) scales, as DeepGEMM wants */
} reshard_model_options_t;

/**
 * The directory of the shipped data (models/<name>.json, cases/), found at
 * run time, in this order:
 *   1. the environment variable RESHARD_DATA_DIR when set and not empty;
 *   2. <dir>/../share/reshard, where <dir> holds the file with this
 *      library's code (libreshard.so, or a program linking libreshard.a):
 *      the installed layout (<prefix>/lib and <prefix>/bin beside
 *      <prefix>/share/reshard);
 *   3. the reshard-data link CMake makes in a build directory (to the source
 *      tree's data/), next to <dir> or up to two directories above it.
 * No path is compiled into the library. Returns a thread-local string valid
 * until the next call on this thread, or NULL when none is found. Local.
 */
const char *reshard_data_dir(void);

/**
 * Load a model.
 * @param name_or_path  a shipped name (file <reshard_data_dir()>/models/<name>.json,
 *                      e.g. "qwen3-235b-a22b") or a path to a HF config.json
 * @param opts          NULL for defaults
 * Errors: INVALID_ARG (NULL name/out, bad option), IO (file missing or not
 * JSON; the message names the file), CONFIG (unknown family, a required field
 * missing or out of range; the message names the field: integer fields are in
 * [1 or 0, 2^31-1], defaults included (head_dim = hidden_size /
 * num_attention_heads must be >= 1), at most 65536 decoder + MTP layers, every
 * tensor and the whole model under 2^62 bytes), NOMEM. Local.
 */
reshard_status_t reshard_model_load(const char *name_or_path, const reshard_model_options_t *opts,
                                    reshard_model_t **out);

/** As reshard_model_load, from the text of a config.json. Same errors
 *  (IO when the text is not JSON). */
reshard_status_t reshard_model_load_json(const char *json_text, const reshard_model_options_t *opts,
                                         reshard_model_t **out);

/** Free a model; NULL ok. Catalogues and layouts built from it stay valid. */
void reshard_model_destroy(reshard_model_t *model);

/** What a model is. Counts in elements/parameters, sizes in bytes. */
typedef struct {
    const char *name;   /**< the name or path it was loaded from */
    const char *family; /**< "dense", "qwen3_moe", "deepseek_v3", "qwen2_moe", "mixtral",
                             "nemotron_h", "glm4_moe", "gpt_oss" or "qwen3_next" */
    int32_t layers;     /**< decoder layers kept (after the layers option) */
    int32_t mtp_layers; /**< MTP layers included (0 without the mtp option) */
    int64_t hidden, intermediate, moe_intermediate, vocab;
    int32_t heads, kv_heads, head_dim;
    int32_t experts, shared_experts, first_dense; /**< 0 experts for dense models */
    int32_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    int tied_embeddings;
    int qk_norm;
    reshard_dtype_t dtype; /**< the weight dtype of the loaded form */
    int64_t params;        /**< parameters of the weights (scales not counted) */
} reshard_model_info_t;

/** Describe @p model. Errors: INVALID_ARG (NULL). */
reshard_status_t reshard_model_info(const reshard_model_t *model, reshard_model_info_t *info);

/* ------------------------------------------------------------------ */
/* 2. Parallel specs                                                   */
/* ------------------------------------------------------------------ */

/** The training framework whose conventions the train layout follows.
 *  Both build Megatron-Core models (same parameter names, grids and fused
 *  buffers); they differ in what the HF->Megatron path sets up:
 *    vocabulary  Megatron-LM pads it to a multiple of 128*tp (vocab_utils.py
 *                58-59, --make-vocab-size-divisible-by 128); Megatron-Bridge
 *                does not pad a vocabulary read from the HF config
 *                (gpt_provider.py 184, 266-271; hybrid_provider.py 155, 297:
 *                should_pad_vocab False): each TP rank holds V/tp rows, so tp
 *                must divide V (VocabParallelEmbedding's divide).
 *    expert_bias fp32 from the start under Bridge (model_provider.py 74-76
 *                keeps it through the Float16Module cast); Megatron-LM creates
 *                it bf16 and makes it fp32 at the first forward (router.py
 *                _maintain_float32_expert_bias). The layout declares it fp32:
 *                a Megatron-LM trainer that refits before its first forward
 *                step holds bf16 and is refused by the dtype check.
 *    etp         Megatron-LM's --expert-tensor-parallel-size defaults to tp
 *                (arguments.py 587-588); Bridge sets it to 1 when ep > 1 and it
 *                is not given (transformer_config.py
 *                _set_moe_expert_tensor_parallel_default).
 *    hybrid vpp  Bridge's hybrid provider refuses a virtual pipeline
 *                (hybrid_provider.py 291), so nemotron_h with more '|'
 *                segments than pp is refused under Bridge.
 *  (Megatron-LM d98e8a6, Megatron-Bridge 067f987.)
 *  The default is Megatron-LM: it keeps the layouts (and fingerprints) of
 *  every earlier release, and a wrong choice is never silent: the two
 *  differ only in buffer shapes (the vocabulary rows) and dtypes, which
 *  binding by name checks before anything moves. NeMo RL's trainers, and
 *  the published refit cases (data/cases), are Megatron-Bridge:
 *  "convention=megatron-bridge". */
typedef enum {
    RESHARD_TRAIN_DEFAULT = 0,         /**< RESHARD_TRAIN_MEGATRON_LM */
    RESHARD_TRAIN_MEGATRON_BRIDGE = 1, /**< spec "convention=megatron-bridge" */
    RESHARD_TRAIN_MEGATRON_LM = 2,     /**< spec "convention=megatron-lm" */
    /** PyTorch FSDP2 (fully_shard) over the Hugging Face module: spec "fsdp=N"
     *  (any fsdp= key selects it; "convention=fsdp" spelled out is accepted).
     *  Parameters are the HF module's own named_parameters() (unfused), each a
     *  DTensor on the mesh [dp_replicate=dp, dp_shard=fsdp, tp]; see
     *  reshard_model_train_layout and docs/fsdp.md. */
    RESHARD_TRAIN_FSDP = 3
} reshard_train_convention_t;

/** The transformers release whose MoE parameter form an FSDP2 trainer holds
 *  (reshard_train_spec_t.transformers; spec "transformers=4" or "=5"):
 *    4  per-expert modules: "mlp.experts.N.{gate,up,down}_proj.weight"
 *       [I, H] / [H, I], each its own parameter sharded on its own dim 0
 *       (modeling_qwen3_moe.py at 16b6c53: Qwen3MoeSparseMoeBlock holds an
 *       nn.ModuleList of Qwen3MoeMLP; mixtral "block_sparse_moe.experts.N.
 *       {w1,w2,w3}.weight"; transformers up to v4.57.6)
 *    5  fused expert tensors: "mlp.experts.gate_up_proj" [E, 2I, H] (per
 *       expert [gate rows; up rows]: forward does
 *       linear(x, gate_up_proj[e]).chunk(2, dim=-1) -> gate, up) and
 *       "mlp.experts.down_proj" [E, H, I], no ".weight" suffix
 *       (transformers 5 Qwen3MoeExperts, @use_experts_implementation; the
 *       same for mixtral, renamed from block_sparse_moe, qwen2_moe,
 *       deepseek_v3, glm4_moe: docs/fsdp-reference.md, read at a597f974)
 *  The default is 5, the current release line. Dense families are the same
 *  in both. With tp > 1 the release also picks each MoE family's
 *  base_model_tp_plan (v4.57.6 or a597f974; docs/fsdp-reference.md). */
typedef enum {
    RESHARD_TRANSFORMERS_DEFAULT = 0, /**< RESHARD_TRANSFORMERS_5 */
    RESHARD_TRANSFORMERS_4 = 4,       /**< spec "transformers=4" */
    RESHARD_TRANSFORMERS_5 = 5        /**< spec "transformers=5" */
} reshard_transformers_t;

/** The vLLM release whose parameter names the inference layout uses. Every
 *  name that differs between releases is in one table (src/model/vllm.c,
 *  rs_vllm_name); the layouts are otherwise the same.
 *    0.24  vLLM up to 0.24 (facts at vLLM 9aaf83e): routed experts
 *          "...experts.w13_weight" / "...experts.w2_weight"
 *    0.25  vLLM 0.25 and later (PR #41184): the routed experts live on a
 *          nested module, "...experts.routed_experts.w13_weight" / "w2_weight"
 *  The default is 0.25, the current release line. A worker should check the
 *  names against its engine's named_parameters() at start-up (binding by name
 *  refuses a name the layout does not declare). */
typedef enum {
    RESHARD_VLLM_DEFAULT = 0, /**< RESHARD_VLLM_0_25 */
    RESHARD_VLLM_0_24 = 1,    /**< spec "vllm=0.24" */
    RESHARD_VLLM_0_25 = 2     /**< spec "vllm=0.25" */
} reshard_vllm_version_t;

/** The inference engine whose parameter layouts the inference side holds
 *  (reshard_infer_spec_t.engine; spec "engine=vllm|sglang"). */
typedef enum {
    RESHARD_ENGINE_VLLM = 0,  /**< vLLM (the default) */
    RESHARD_ENGINE_SGLANG = 1 /**< SGLang (docs/sglang-layouts.md) */
} reshard_infer_engine_t;

/** SGLang's MoE all-to-all backend (--moe-a2a-backend; spec "a2a=none|deepep"). */
typedef enum {
    RESHARD_SGLANG_A2A_NONE = 0,  /**< "none" (the default) */
    RESHARD_SGLANG_A2A_DEEPEP = 1 /**< "deepep": ep = tp, shared experts whole */
} reshard_sglang_a2a_t;

/** Name of a training convention ("megatron-bridge", "megatron-lm", "fsdp"; the
 *  default's name for 0), or NULL for a value that is none. Any thread. */
const char *reshard_train_convention_name(reshard_train_convention_t convention);
/** Name of a vLLM version ("0.24", "0.25"; the default's for 0), or NULL for
 *  a value that is none. Any thread. */
const char *reshard_vllm_version_name(reshard_vllm_version_t version);

/** Megatron sizes. world = tp*cp*dp*pp; experts use the grid
 *  etp (fastest), ep, edp, pp of the same world, edp = tp*cp*dp/(etp*ep).
 *  etp 0 means the convention's default: tp under Megatron-LM (its
 *  --expert-tensor-parallel-size defaults to the tensor-parallel size,
 *  parallel_state.py, arguments.py), so expert parallelism with tp > 1
 *  usually needs etp=1 given explicitly; 1 under Megatron-Bridge when ep > 1.
 *  Pipeline (transformer_block.py get_num_layers_to_build): without first and
 *  last, pp must divide the layers; first/last (> 0) fix the layers of the
 *  first/last stage (--decoder-first-pipeline-num-layers,
 *  --decoder-last-pipeline-num-layers) and the rest split evenly over the other
 *  stages. vpp (0 or 1: none) model chunks per stage
 *  (--num-virtual-stages-per-pipeline-rank, or layers per chunk with
 *  --num-layers-per-virtual-pipeline-stage; arguments.py 3114-3116):
 *  chunk c of stage p holds the
 *  c-th vpp-th of the stage's layers, which in layer order come after all
 *  stages' chunks c-1 and the chunks c of stages 0..p-1 (with an even split:
 *  the (c*pp + p)-th block of L/(pp*vpp) layers). nemotron_h with '|' in its
 *  pattern: Megatron derives vpp = segments / pp itself (arguments.py
 *  840-862); vpp may be left out or given equal to it. */
typedef struct {
    int32_t tp, pp, dp, cp, ep, etp;
    int32_t vpp;         /**< model chunks per pipeline stage; 0 or 1: none */
    int32_t first, last; /**< layers of the first / last stage; 0: not given */
    int32_t convention;  /**< reshard_train_convention_t; 0: the default (Megatron-LM) */
    /** RESHARD_TRAIN_FSDP: the dp_shard size N (FSDP2 Shard(0) over N ranks);
     *  0 under the Megatron conventions. With it dp is the HSDP replica count
     *  R and tp the tensor-parallel size T: world = R*N*T, rank =
     *  (r*N + s)*T + t; pp, cp, ep stay 1 and etp, vpp, first, last unused. */
    int32_t fsdp;
    /** RESHARD_TRAIN_FSDP: reshard_transformers_t (0: the default, 5). */
    int32_t transformers;
} reshard_train_spec_t;

/** vLLM sizes. @p engines independent engines (0 or 1: one), each holding the
 *  whole model on tp*dp ranks: tp ranks per DP replica and dp replicas of
 *  vLLM's own data parallelism (--data-parallel-size), whose MoE layers span
 *  all tp*dp ranks of the engine; ep non-zero = expert parallelism over the
 *  tp*dp ranks of each engine. world = engines*tp*dp; inference rank i is in
 *  engine i / (tp*dp) and is rank i % (tp*dp) of it.
 *  RL frameworks run inference data parallelism as independent engines
 *  (NeMo RL's generation DP: separate vLLM instances, each the whole model;
 *  with expert parallelism EP = TP inside an engine): "tp=8,engines=16,ep=on".
 *  "tp=8,dp=16" is one engine whose experts are split over 128 ranks: for a
 *  MoE model the two hold different things. Dense models hold the same in
 *  both. */
typedef struct {
    int32_t tp, dp;
    int ep;
    int32_t engines; /**< independent engines; 0 or 1: one */
    int32_t vllm;    /**< reshard_vllm_version_t; 0: the default (0.25) */
    /** EPLB (vLLM --enable-eplb): num_redundant_experts (spec "redundant=N";
     *  needs ep=on). EPLB is on when N > 0 or eplb_map is set (vLLM's balancer
     *  also permutes experts with no redundant ones); then every MoE layer has
     *  P = E + N physical expert slots; EP rank r of an
     *  engine holds slots [r*P/(tp*dp), (r+1)*P/(tp*dp)) as w13/w2 rows 0..
     *  (vLLM fused_moe/layer.py: EPLB needs tp*dp to divide P; linear
     *  placement), each slot holding the logical expert eplb_map gives it. */
    int32_t redundant;
    /** EPLB logical-to-physical map in vLLM's physical_to_logical form
     *  (EplbState.physical_to_logical_map): entry p is the logical expert in
     *  [0, E) that physical slot p holds; every logical expert must have at
     *  least one slot. Either one map of P entries for every MoE layer (of
     *  every engine), or one of P entries per MoE layer (rows in catalogue
     *  order: decoder MoE layers, then MTP), moe_layers*P entries; with
     *  engines > 1 each engine keeps its own EplbState, so per-layer rows are
     *  per engine too: engines*moe_layers*P entries, engine-major (a map of
     *  moe_layers*P entries is refused there). NULL: vLLM's initial map
     *  (build_initial_global_physical_to_logical_map: slot p < E holds p,
     *  slot E + i holds i % E). Read only while a layout is built (the
     *  refit's copy of the spec keeps the pointer, not the entries); the map
     *  enters the layout's fingerprint, so ranks built from different maps
     *  never plan together. A wrong length, an entry out of range or a
     *  logical expert with no slot is refused (CONFIG) naming the layer,
     *  slot or expert. */
    const int32_t *eplb_map;
    int64_t eplb_map_len; /**< entries of eplb_map */
    /** reshard_infer_engine_t (spec "engine=sglang"; 0: vLLM). Under SGLang
     *  (docs/sglang-layouts.md) one server is tp ranks (--tp-size): world =
     *  engines*tp; dp is --dp-size and needs dp_attention (SGLang's --dp-size
     *  without DP attention runs independent replicas: engines=). */
    int32_t engine;
    int dp_attention;      /**< SGLang --enable-dp-attention (spec "dp_attention=on"):
                                attention TP = tp/dp; dp must divide tp */
    int32_t ep_size;       /**< SGLang --ep-size given as a number (spec "ep=N", N dividing
                                tp; needs ep non-zero): moe_tp_size = tp/N; 0: ep=on means
                                --ep-size = tp */
    int dp_lm_head;        /**< SGLang --enable-dp-lm-head (spec "dp_lm_head=on"; needs
                                dp_attention): lm_head split over the attention TP group */
    int32_t moe_dense_tp;  /**< SGLang --moe-dense-tp-size (spec "moe_dense_tp=1"): 1 =
                                DeepSeek's dense-layer MLPs whole on every rank; 0: unset */
    int32_t a2a;           /**< reshard_sglang_a2a_t (spec "a2a=deepep"; needs ep = tp) */
    int shared_fusion_off; /**< SGLang --disable-shared-experts-fusion (spec
                                "shared_fusion=off"); 0: SGLang's own rule (DeepSeek-V3:
                                the shared expert is w13/w2 row E without EP) */
} reshard_infer_spec_t;

/**
 * Parse "tp=4,pp=8,ep=16,dp=4" (keys tp, pp, dp, cp, ep, etp, vpp, first,
 * last: sizes; convention: "megatron-lm", "megatron-bridge" or "fsdp"; missing keys
 * are 1 except etp, which is tp (Megatron-Bridge with ep > 1: 1), first/last,
 * which are not given (0), and
 * convention, the default (0; "megatron-lm" given by name also parses as 0);
 * order free). Grammar of both spec parsers:
 *   spec  := item ("," item)*          item := key "=" value
 *   value := size | "on" | "off" | name   size := [1-9][0-9]*, at most 2^24
 * Spaces and tabs around keys and values are ignored ("tp = 4, dp = 2");
 * a size has no sign and no leading zero ("+4", "04" and "4.0" are refused).
 * FSDP2 (PyTorch fully_shard over the HF module): "fsdp=N" (Shard(0) over N
 * ranks), "fsdp=N,dp=R" (HSDP: mesh [dp_replicate=R, dp_shard=N], rank =
 * r*N + s), "tp=T,fsdp=N[,dp=R]" (mesh [dp_replicate, dp_shard, tp], rank =
 * (r*N + s)*T + t), optionally "transformers=4|5" (reshard_transformers_t).
 * Any fsdp= key (or convention=fsdp, then fsdp defaults to 1) selects
 * RESHARD_TRAIN_FSDP; pp, cp, ep, etp, vpp, first and last with it are
 * INVALID_ARG naming the key, as is fsdp= under a Megatron convention.
 * Errors: INVALID_ARG with a message naming the offending text (unknown key,
 * missing '=', not a size, duplicate key, empty item or spec, a world
 * that overflows int32). Local.
 */
reshard_status_t reshard_train_spec_parse(const char *text, reshard_train_spec_t *out);

/** Parse "tp=8,dp=16,ep=on" (keys tp, dp, engines: sizes; ep: exactly "on"
 *  or "off"; vllm: a supported version name, "0.24" or "0.25"; redundant:
 *  EPLB's num_redundant_experts, a size; the map is set by the caller;
 *  engine: "vllm" (the default) or "sglang"). Under engine=sglang (SGLang's
 *  server flags): tp = --tp-size (ranks per server), dp=D with dp_attention=on =
 *  --dp-size D --enable-dp-attention (D divides tp; dp > 1 without it is refused:
 *  SGLang's --dp-size alone runs independent replicas, give engines=), ep=on =
 *  --ep-size tp, ep=N = --ep-size N, dp_lm_head=on = --enable-dp-lm-head,
 *  moe_dense_tp=1 = --moe-dense-tp-size 1, a2a=none|deepep = --moe-a2a-backend,
 *  moe_runner=auto|triton = --moe-runner-backend (other runners are refused by
 *  name: their kernels hold w13 in another form), shared_fusion=auto|off
 *  (off = --disable-shared-experts-fusion); vllm= and redundant= are refused
 *  there, and the SGLang keys and a numeric ep under vLLM. In the
 *  grammar of reshard_train_spec_parse (value also := a version name for
 *  vllm; "0.25", the default's name, parses as 0).
 *  Errors as reshard_train_spec_parse; an unknown vllm version is
 *  INVALID_ARG naming it and the supported ones. */
reshard_status_t reshard_infer_spec_parse(const char *text, reshard_infer_spec_t *out);

/** Ranks of a training spec (tp*cp*dp*pp; FSDP2: tp*dp*fsdp), or -1 for a NULL or invalid spec
 *  (a size below 1, e.g. tp=0) or a product that overflows int32. */
int32_t reshard_train_world(const reshard_train_spec_t *spec);
/** Ranks of an inference spec (engines*tp*dp; engine=sglang: engines*tp), or -1 as
 * reshard_train_world (also for a negative engines or an unknown vllm version). */
int32_t reshard_infer_world(const reshard_infer_spec_t *spec);

/** Format a spec back ("tp=4,pp=8,dp=4,cp=1,ep=16,etp=1", then ",vpp=2",
 *  ",first=3", ",last=2" when set and ",convention=megatron-bridge" when that
 *  is the convention; FSDP2: "fsdp=4,dp=1,tp=1", then ",transformers=4" when
 *  that is the release; infer: "tp=8,dp=16,ep=on", then ",engines=16" with more
 *  than one engine, ",vllm=0.24" when that is the version and
 *  ",redundant=N" with N > 0 (the EPLB map is not text); engine=sglang:
 *  "engine=sglang,tp=4", then ",dp=2,dp_attention=on", ",ep=on" or ",ep=N",
 *  ",engines=K", ",dp_lm_head=on", ",moe_dense_tp=1", ",a2a=deepep",
 *  ",shared_fusion=off" when set: a default
 *  written out or left out gives the same text) into @p out
 *  of @p size bytes, truncated to fit and always terminated. Any rank, any
 *  thread. Returns @p out; with a NULL @p spec, @p out holds "" and is
 *  returned; with a NULL @p out or @p size 0, a static "" is returned and
 *  nothing is written. No error is set. */
const char *reshard_train_spec_str(const reshard_train_spec_t *spec, char *out, size_t size);
const char *reshard_infer_spec_str(const reshard_infer_spec_t *spec, char *out, size_t size);

/**
 * Check that @p model can take both specs (the rules of Megatron and vLLM, or
 * SGLang under engine=sglang: src/model/sglang.c, docs/sglang-layouts.md),
 * and, when @p world > 0, that world == train world + infer world.
 * Errors: CONFIG with a message naming the rule, e.g. "train: tp=3 does not
 * divide the 32 attention heads", "train: ep=7 does not divide the 128
 * experts", "train: pp=40 is more than the 28 layers", "infer: tp=16 does not
 * divide the 8 kv heads nor is a multiple of them", "world size 12 != train
 * world 8 + infer world 8"; INVALID_ARG (NULL). Local.
 */
reshard_status_t reshard_model_check(const reshard_model_t *model,
                                     const reshard_train_spec_t *train,
                                     const reshard_infer_spec_t *infer, int32_t world);

/* ------------------------------------------------------------------ */
/* 3. Catalogue and layouts                                            */
/* ------------------------------------------------------------------ */

/**
 * Build the catalogue: every logical tensor once, HF names and shapes, in
 * order: embedding, per layer (attention, MLP or MoE), MTP layers, final norm,
 * output layer (absent when tied). Model bytes = reshard_tensors_bytes().
 * View shapes used for planning (boxes are in these):
 *   q_proj [kv, heads/kv, head_dim, H], k_proj/v_proj [kv, head_dim, H],
 *   MLA q_b_proj [heads, qk_nope+qk_rope, q_lora], kv_b_proj [heads, qk_nope+v, kv_lora].
 * Errors: INVALID_ARG, NOMEM. The caller destroys *out. Local.
 */
reshard_status_t reshard_model_tensors(const reshard_model_t *model, reshard_tensors_t **out);

/** The buffers a layout uses: per rank, buffer ids 0..n-1, one per framework
 *  parameter (fused ones included) of that rank, with names and full sizes
 *  (vocabulary padding included). The layouts themselves also declare every
 *  buffer with its name, dtype and shape (reshard_layout_declared_count,
 *  reshard_layout_buffer_info in reshard.h): matrices [rows, cols], stacked
 *  experts [experts, rows, cols], norms and biases [n], FP8 scales fp32
 *  [ceil(rows/128), ceil(cols/128)] (expert dim first when stacked). */
typedef struct reshard_model_buffers reshard_model_buffers_t;

typedef struct {
    int32_t rank;
    int32_t buffer;
    uint64_t bytes;    /**< full size, padding included (>= reshard_layout_buffer_bytes) */
    const char *name;  /**< framework parameter name as the rank's named_parameters()
                            gives it, e.g. "decoder.layers.3.self_attention.linear_qkv.weight"
                            (Megatron: layer numbers from 0 on each stage and model
                            chunk; with vpp > 1 chunk c's names start with "c.") or
                            "model.layers.3.self_attn.qkv_proj.weight" (vLLM: global
                            layer numbers) */
    int module_buffer; /**< 1: the module registers it as a buffer, so its
                           named_buffers() gives it, not its named_parameters()
                           (Megatron's "...mlp.router.expert_bias", router.py
                           182-197): bind a dict of both */
} reshard_model_buffer_t;

/** Number of buffers described. */
int64_t reshard_model_buffers_count(const reshard_model_buffers_t *buffers);
/** Copy entry @p i (ordered by rank, then buffer id). Errors: INVALID_ARG. */
reshard_status_t reshard_model_buffers_get(const reshard_model_buffers_t *buffers, int64_t i,
                                           reshard_model_buffer_t *out);
/** Full size of buffer @p buffer of rank @p rank; 0 when unknown. */
uint64_t reshard_model_buffer_bytes(const reshard_model_buffers_t *buffers, int32_t rank,
                                    int32_t buffer);
/** Buffers of rank @p rank (its ids are 0..n-1). */
int32_t reshard_model_buffer_count(const reshard_model_buffers_t *buffers, int32_t rank);
/** Free; NULL ok. */
void reshard_model_buffers_destroy(reshard_model_buffers_t *buffers);

/**
 * The Megatron training layout over @p tensors (made by reshard_model_tensors
 * of the same model), ranks [rank_offset, rank_offset + train world).
 * Dense grid: tp fastest, then cp, dp, pp; expert grid: etp, ep, edp, pp.
 * PP stages own contiguous layer blocks (reshard_train_spec_t: pp divides the
 * layers, or first/last counts; vpp model chunks per stage); embedding on the
 * first stage's first chunk, final norm, MTP layers and output layer on the last
 * stage's last chunk; with tied embeddings and pp > 1 the output layer is a
 * second copy, and with MTP and pp > 1 the last stage also holds
 * embedding.word_embeddings.weight (gpt_model.py).
 * Names are those of the unwrapped GPTModel's named_parameters() (no DDP or
 * Float16Module "module." prefix): decoder.layers.N.* with N from 0 in each
 * model chunk; with vpp > 1 the chunks are a list of models and chunk c's names
 * start with "c." (as nn.ModuleList names them), e.g. "1.decoder.layers.0.mlp.
 * linear_fc1.weight"; MTP layers mtp.layers.K.{enorm,hnorm,eh_proj,
 * mtp_model_layer.*,final_layernorm}.
 * Buffers per rank, one per parameter: embedding, per layer: input_layernorm,
 * linear_qkv weight and bias (fused per query group [q heads; k; v], rows split
 * evenly over tp: whole groups, or with tp a multiple of the groups an equal
 * part of one group) or the MLA projections, q/k layernorms, linear_proj,
 * pre_mlp_layernorm, linear_fc1 ([gate; up] per TP rank), linear_fc2, router
 * weight (bf16) (+ expert_bias, fp32), TEGroupedMLP experts
 * mlp.experts.linear_fc1.weightK [2I/etp, H] and linear_fc2.weightK [H, I/etp]
 * for local expert K, shared_experts.linear_fc1/fc2 (+ gate_weight [1, H]);
 * final layernorm, output_layer. Vocab padded to a multiple of 128*tp
 * (Megatron-LM) or not padded, V/tp rows per rank (Megatron-Bridge).
 * With spec->convention RESHARD_TRAIN_FSDP (spec "fsdp=N[,dp=R][,tp=T]") the
 * layout is instead FSDP2's over the HF module (src/model/fsdp.c, docs/fsdp.md):
 * buffers named as the HF module's named_parameters() ("model.layers.3.
 * self_attn.q_proj.weight", qwen3_moe experts "mlp.experts.N.gate_proj.weight"
 * (transformers=4) or "mlp.experts.gate_up_proj" [E, 2I, H] and
 * "mlp.experts.down_proj" [E, H, I] (transformers=5)); rank (r*N + s)*T + t
 * holds torch.chunk piece s (of N, on dim 0) of its TP piece t (of T: dim 0
 * for q/k/v/gate/up and lm_head, dim 1 for o_proj/down_proj, whole otherwise;
 * HF base_model_tp_plan); an empty piece has no buffer. Families: dense, and
 * with tp=1 qwen3_moe, mixtral ("block_sparse_moe.experts.N.w1/w2/w3" under
 * transformers=4, "mlp." under 5), qwen2_moe (+ shared_expert,
 * shared_expert_gate), deepseek_v3 / kimi_k2 (MLA, shared_experts, the router
 * buffer e_score_correction_bias whole on every rank) and glm4_moe; others
 * UNSUPPORTED naming the family, as is the FP8 checkpoint form (dtype fp8); a
 * MoE family with tp > 1 is CONFIG.
 * @param buffers  optional; receives the buffer table
 * Errors: CONFIG (see reshard_model_check), UNSUPPORTED (FSDP2: above),
 * INVALID_ARG, NOMEM. Local.
 */
reshard_status_t reshard_model_train_layout(const reshard_model_t *model,
                                            const reshard_tensors_t *tensors,
                                            const reshard_train_spec_t *spec, int32_t rank_offset,
                                            reshard_layout_t **out,
                                            reshard_model_buffers_t **buffers);

/**
 * The vLLM inference layout, ranks [rank_offset, rank_offset + engines*tp*dp);
 * infer rank i is in engine i/(tp*dp), and within it, with r = i%(tp*dp), DP
 * replica r/tp and TP rank r%tp: every engine holds the same. Buffers per rank: embed_tokens
 * (vocab padded to 64, contiguous equal ranges; with tied embeddings it is
 * also the lm_head), per layer: input_layernorm, qkv_proj ([q; k; v] rows of
 * the rank, kv heads replicated when tp > kv heads; qwen2: qkv_proj.bias likewise) or
 * MLA fused_qkv_a_proj
 * (replicated [q_a; kv_a]), q_a_layernorm, q_b_proj, kv_a_layernorm, kv_b_proj;
 * q_norm/k_norm; o_proj; post_attention_layernorm; gate_up_proj; down_proj;
 * gate (router, bf16) (+ e_score_correction_bias, fp32); experts.w13_weight and
 * experts.w2_weight (vLLM 0.24; from 0.25 experts.routed_experts.w13_weight and
 * experts.routed_experts.w2_weight) (EP: whole experts, contiguous blocks, remainder to the
 * first ranks, [E_local, 2I, H] and [E_local, H, I]; no EP: each expert's
 * intermediate dim split over all tp*dp ranks, rank r = dp_rank*tp + tp_rank holding
 * slice r (fused_moe/config.py), [E, 2I/(tp*dp), H] and
 * [E, H, I/(tp*dp)]); shared_experts (qwen2_moe: shared_expert) gate_up_proj/down_proj
 * (TP-split; DeepSeek's and Qwen3-Next's whole under sequence-parallel MoE: ep, tp > 1, dp > 1)
 * (+ shared_expert_gate [1, H], replicated; qwen2_moe declares it also without a
 * shared expert, written by no fragment: vLLM has it, no trainer does); norm;
 * lm_head (mixtral: block_sparse_moe.gate and block_sparse_moe.experts.*).
 * EPLB (reshard_infer_spec_t.redundant > 0 or eplb_map; vLLM --enable-eplb):
 * every MoE layer has P = E + redundant physical slots and EP rank r of an
 * engine holds slots [r*P/(tp*dp), (r+1)*P/(tp*dp)) as its w13/w2 rows
 * [P/(tp*dp), 2I, H] and [P/(tp*dp), H, I], slot p holding the logical
 * expert the map gives it (every logical expert is written into every slot
 * holding it; the shapes never change with the map, so a worker's buffers
 * stay bound). When the balancer moves experts, build the layouts again with
 * the new map (a rank's own: reshard_model_refit_create_scoped) and plan again.
 * Errors: CONFIG, INVALID_ARG, NOMEM. Local.
 */
reshard_status_t reshard_model_infer_layout(const reshard_model_t *model,
                                            const reshard_tensors_t *tensors,
                                            const reshard_infer_spec_t *spec, int32_t rank_offset,
                                            reshard_layout_t **out,
                                            reshard_model_buffers_t **buffers);

/** A whole refit description: the catalogue, the train layout on ranks
 *  [0, T) and the inference layout on ranks [O, O + I), O = infer_offset
 *  (T unless reshard_model_refit_create_at says otherwise). */
typedef struct {
    reshard_tensors_t *tensors;
    reshard_layout_t *train;
    reshard_layout_t *infer;
    reshard_model_buffers_t *train_buffers;
    reshard_model_buffers_t *infer_buffers;
    reshard_train_spec_t train_spec;
    reshard_infer_spec_t infer_spec;
    int32_t train_world;
    int32_t infer_world;
    int32_t infer_offset; /**< first inference rank; world = infer_offset + infer_world */
} reshard_model_refit_t;

/**
 * Check the specs (reshard_model_check with world 0) and build all of
 * reshard_model_refit_t. On error nothing is left allocated.
 * Errors: those of the functions above. Local.
 */
reshard_status_t reshard_model_refit_create(const reshard_model_t *model,
                                            const reshard_train_spec_t *train,
                                            const reshard_infer_spec_t *infer,
                                            reshard_model_refit_t *out);
/**
 * As reshard_model_refit_create, with the inference ranks starting at
 * @p infer_offset (>= the train world; -1 for the train world). With NVLink
 * domains each side fills its own domains, so the inference side starts at
 * the next domain boundary (reshard_sim_infer_offset).
 * Errors: CONFIG (offset inside the training ranks, or inference ranks past
 * RESHARD_MAX_WORLD_SIZE), and those above. Local.
 */
reshard_status_t reshard_model_refit_create_at(const reshard_model_t *model,
                                               const reshard_train_spec_t *train,
                                               const reshard_infer_spec_t *infer,
                                               int32_t infer_offset, reshard_model_refit_t *out);
/**
 * A rank's part of a refit description, for its own plan: as
 * reshard_model_refit_create_at, but each layout holds, of every rank, only
 * the fragments of the tensors rank @p rank's own plan needs (the tensors it
 * holds on the training side, and those the ranks of its NVLink domain hold
 * on the inference side), and only @p rank's declared buffers (the buffer
 * tables likewise). The layouts record what the plan needs of the rest
 * (which ranks hold each tensor, and where the whole came from, for the
 * fingerprint), so reshard_plan_create with my_rank = @p rank and the same
 * domain_size makes the same plan as from the whole layouts, at a cost that
 * grows with what the rank touches rather than with the world.
 * The layouts serve that plan only: reshard_plan_create refuses them
 * (INVALID_ARG) for another rank, another domain size, a global plan, or
 * once a fragment or buffer was added to them.
 * A model with a quantized inference side (infer_quant) gets the whole
 * layouts: its plan is made on wire layouts built from every fragment.
 * @param rank         the planning rank, in [0, infer_offset + infer world)
 * @param domain_size  ranks per NVLink domain, as the plan's domain_size
 *                     (0 or 1: every rank its own domain)
 * The two layouts of one call plan together only: a pair from two calls
 * (other specs, another rank or domain), or the two swapped, is refused.
 * Errors: INVALID_ARG (NULL, negative domain_size), RANK (rank outside the
 * refit's ranks), and those of reshard_model_refit_create_at. Local.
 */
reshard_status_t reshard_model_refit_create_scoped(const reshard_model_t *model,
                                                   const reshard_train_spec_t *train,
                                                   const reshard_infer_spec_t *infer,
                                                   int32_t infer_offset, int32_t rank,
                                                   int32_t domain_size, reshard_model_refit_t *out);
/** Free every member (layouts before the catalogue); NULL ok; zeroes *refit. */
void reshard_model_refit_destroy(reshard_model_refit_t *refit);

/* ------------------------------------------------------------------ */
/* 4. Gather + broadcast baseline                                      */
/* ------------------------------------------------------------------ */

/**
 * Byte counts of the usual refit for @p refit (built from @p model): per pipeline stage, every
 * tensor of the stage is gathered to the stage's first rank from the ranks of
 * the stage's first data-parallel replica that hold its pieces, then
 * broadcast (pipelined chain, as NCCL's ring) to every inference rank: the
 * stage root sends it once, inference rank i forwards it to rank i+1.
 * @param domain_size  ranks per NVLink domain (ranks fill domains in order);
 *                     0 or 1: every rank its own domain
 * @param stats        receives the counts in the fields of a plan's stats:
 *                     bytes_total (bytes landing on inference ranks),
 *                     bytes_network, bytes_nvlink, max_nic_send/recv_bytes,
 *                     transfers (distinct sender/receiver pairs), pieces
 *                     (tensor sends); bytes_lower_bound and the nic bounds
 *                     are left 0 (they belong to the problem: take the plan's).
 * Errors: INVALID_ARG (also for a scoped refit: the baseline moves every
 * tensor), NOMEM. Local.
 */
reshard_status_t reshard_model_baseline(const reshard_model_t *model,
                                        const reshard_model_refit_t *refit, int32_t domain_size,
                                        reshard_plan_stats_t *stats);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_MODEL_H */
