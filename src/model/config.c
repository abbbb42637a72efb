/* HF config.json -> struct reshard_model. */
#include <dirent.h>
#include <jansson.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "model/model_internal.h"
#include "util/error.h"

/* An integer field in [min, INT32_MAX]: required (def < 0 means required) or
 * defaulted (a default below min, e.g. head_dim = hidden_size / heads = 0,
 * is an error too). A JSON null counts as absent. */
static reshard_status_t get_int(json_t *root, const char *key, int64_t def, int64_t min,
                                int64_t *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < 0)
            return rs_error(RESHARD_ERR_CONFIG, "config: required field '%s' is missing", key);
        if (def < min)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: field '%s' is missing and its default %lld is below %lld", key,
                            (long long)def, (long long)min);
        *out = def;
        return RESHARD_OK;
    }
    if (!json_is_integer(v))
        return rs_error(RESHARD_ERR_CONFIG, "config: field '%s' is not an integer", key);
    *out = json_integer_value(v);
    if (*out < min || *out > INT32_MAX)
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: field '%s' = %lld is out of range [%lld, 2^31-1]", key,
                        (long long)*out, (long long)min);
    return RESHARD_OK;
}

reshard_status_t rs_config_int(json_t *root, const char *key, int64_t def, int64_t min,
                               int64_t *out)
{
    return get_int(root, key, def, min, out);
}

reshard_status_t rs_config_bool(json_t *root, const char *key, int def, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        *out = def;
    else if (json_is_boolean(v))
        *out = json_is_true(v);
    else
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: field '%s' is not a boolean (JSON true or false)", key);
    return RESHARD_OK;
}

#define GET(key, def, min, dst)                                                                    \
    do {                                                                                           \
        int64_t v_;                                                                                \
        reshard_status_t s_ = get_int(root, key, def, min, &v_);                                   \
        if (s_ != RESHARD_OK)                                                                      \
            return s_;                                                                             \
        dst = v_;                                                                                  \
    } while (0)

/* Families by model_type; the architecture decides only when model_type is absent. */
static const struct {
    const char *model_type, *arch;
    rs_family_t fam;
} families[] = {
    {"llama", "Llama", RS_FAM_DENSE},
    {"mistral", "Mistral", RS_FAM_DENSE},
    {"qwen2", "Qwen2ForCausalLM", RS_FAM_DENSE},
    {"qwen3", "Qwen3ForCausalLM", RS_FAM_DENSE},
    {"qwen3_moe", "Qwen3Moe", RS_FAM_QWEN3_MOE},
    {"qwen2_moe", "Qwen2Moe", RS_FAM_QWEN2_MOE},
    {"mixtral", "Mixtral", RS_FAM_MIXTRAL},
    {"deepseek_v3", "DeepseekV3", RS_FAM_DSV3},
    {"deepseek_v2", "DeepseekV2", RS_FAM_DSV3},
    {"kimi_k2", NULL, RS_FAM_DSV3},
    {"nemotron_h", "NemotronH", RS_FAM_NEMOTRON_H},
    {"glm4_moe", "Glm4Moe", RS_FAM_GLM4_MOE},
    {"gpt_oss", "GptOss", RS_FAM_GPT_OSS},
    {"qwen3_next", "Qwen3Next", RS_FAM_QWEN3_NEXT},
};

static reshard_status_t detect_family(json_t *root, rs_family_t *fam, const char **type)
{
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    const char *arch = json_string_value(json_array_get(json_object_get(root, "architectures"), 0));
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (mt ? !strcmp(mt, families[i].model_type)
               : arch && families[i].arch && strstr(arch, families[i].arch)) {
            *fam = families[i].fam;
            *type = families[i].model_type;
            return RESHARD_OK;
        }
    /* a model_type we do not know is refused, whatever the architecture says */
    return rs_error(RESHARD_ERR_CONFIG,
                    "config: unknown model family (model_type '%s', architecture '%s'); known: "
                    "llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, mixtral, deepseek_v2, "
                    "deepseek_v3, kimi_k2, nemotron_h, glm4_moe, gpt_oss, qwen3_next",
                    mt ? mt : "?", arch ? arch : "?");
}

/* A field whose true or positive value implies tensors the family's model
 * does not build is refused by name (never planned without them). */
static reshard_status_t refuse_field(json_t *root, const char *type, const char *key,
                                     const char *what)
{
    json_t *v = json_object_get(root, key);
    if (v && !json_is_null(v) && !json_is_boolean(v) && !json_is_integer(v))
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: field '%s' is not a boolean or an integer (model_type '%s')", key,
                        type);
    if (json_is_true(v) || (json_is_integer(v) && json_integer_value(v) > 0))
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: model_type '%s' with %s set: %s are not modelled (refused rather "
                        "than refit without them)",
                        type, key, what);
    return RESHARD_OK;
}

static reshard_status_t parse(json_t *root, const reshard_model_options_t *o, reshard_model_t *m)
{
    const char *mt = "";
    TRY(detect_family(root, &m->fam, &mt));
    bool dense = m->fam == RS_FAM_DENSE;
    /* fields implying tensors this model does not build */
    if (dense) {
        TRY(refuse_field(root, mt, "num_experts", "routed experts"));
        TRY(refuse_field(root, mt, "n_routed_experts", "routed experts"));
        TRY(refuse_field(root, mt, "num_local_experts", "routed experts"));
    }
    bool next = m->fam == RS_FAM_QWEN3_NEXT;
    if (m->fam != RS_FAM_QWEN2_MOE && !next)
        TRY(refuse_field(root, mt, "shared_expert_intermediate_size", "shared experts"));
    bool glm = m->fam == RS_FAM_GLM4_MOE, oss = m->fam == RS_FAM_GPT_OSS;
    if (m->fam != RS_FAM_DSV3 && m->fam != RS_FAM_NEMOTRON_H && !glm)
        TRY(refuse_field(root, mt, "n_shared_experts", "shared experts"));
    if (!glm && !oss) /* glm4_moe.py: attention_bias is the q/k/v biases (o_proj has none) */
        TRY(refuse_field(root, mt, "attention_bias", "q/k/v/o projection biases"));
    TRY(refuse_field(root, mt, "mlp_bias", "MLP projection biases"));
    m->qkv_bias = !strcmp(mt, "qwen2") || m->fam == RS_FAM_QWEN2_MOE;
    if (glm)
        TRY(rs_config_bool(root, "attention_bias", 0, &m->qkv_bias));
    if (oss) { /* gpt_oss.py: QKVParallelLinear and RowParallelLinear always with biases */
        TRY(rs_config_bool(root, "attention_bias", 1, &m->qkv_bias));
        if (!m->qkv_bias)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: model_type 'gpt_oss' with attention_bias false: vLLM's "
                            "gpt-oss always has q/k/v/o biases (not modelled without them)");
        if (o->dtype != RESHARD_BF16 || o->infer_quant != RESHARD_QUANT_NONE)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: model_type 'gpt_oss': only the bf16 form is modelled (vLLM's "
                            "MXFP4 experts, and FP8, are not produced by the refit: refit into "
                            "an engine that loaded bf16 weights)");
    }
    m->moe_block = m->fam == RS_FAM_MIXTRAL ? "block_sparse_moe" : "mlp";
    m->shared = m->fam == RS_FAM_QWEN2_MOE || next ? "shared_expert" : "shared_experts";
    GET("hidden_size", -1, 1, m->H);
    GET("intermediate_size", -1, 1, m->I);
    GET("num_hidden_layers", -1, 1, m->Lcfg);
    if (m->Lcfg > RS_MAX_LAYERS)
        return rs_error(RESHARD_ERR_CONFIG, "config: num_hidden_layers %d is over %d", m->Lcfg,
                        RS_MAX_LAYERS);
    GET("num_attention_heads", -1, 1, m->nh);
    GET("num_key_value_heads", m->nh, 1, m->kv);
    GET("head_dim", m->H / m->nh, 1, m->hd);
    GET("vocab_size", -1, 1, m->V);
    TRY(rs_config_bool(root, "tie_word_embeddings", 0, &m->tied));
    m->qk_norm = m->fam == RS_FAM_QWEN3_MOE || !strcmp(mt, "qwen3") || next;
    m->attn_gate = next; /* Qwen3NextAttention: q_proj [q_h; gate_h] per head */
    if (glm)             /* glm4_moe.py Glm4MoeAttention: q_norm/k_norm only with use_qk_norm */
        TRY(rs_config_bool(root, "use_qk_norm", 0, &m->qk_norm));
    if (m->kv > m->nh || m->nh % m->kv)
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: num_key_value_heads %d does not divide num_attention_heads %d",
                        m->kv, m->nh);

    int32_t L = m->Lcfg;
    if (o->layers < 0 || o->layers > L)
        return rs_error(RESHARD_ERR_INVALID_ARG, "layers option %d is outside [0, %d]", o->layers,
                        L);
    if (o->layers > 0)
        L = o->layers;
    m->L = L;
    if (m->fam == RS_FAM_NEMOTRON_H)
        return rs_hybrid_parse(root, o, m);

    int64_t step = 1, first_k = 0, freq = 1;
    json_t *mlp_only = NULL;
    if (next) {
        TRY(rs_gdn_parse(root, m));
        if (o->mtp)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: model_type 'qwen3_next' with the mtp option: its MTP layer "
                            "(vLLM's separate drafter) is not modelled; load without mtp");
        if (o->dtype != RESHARD_BF16 || o->infer_quant != RESHARD_QUANT_NONE)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: model_type 'qwen3_next': only the bf16 form is modelled");
    }
    if (m->fam == RS_FAM_QWEN3_MOE || m->fam == RS_FAM_QWEN2_MOE || next) {
        GET("moe_intermediate_size", -1, 1, m->Im);
        GET("num_experts", -1, 1, m->E);
        GET("num_experts_per_tok", 1, 1, m->topk);
        GET("decoder_sparse_step", 1, 1, step);
        mlp_only = json_object_get(root, "mlp_only_layers");
        if (m->fam == RS_FAM_QWEN2_MOE || next) {
            GET("shared_expert_intermediate_size", next ? -1 : 0, next ? 1 : 0, m->Is);
            m->shared_gate = m->Is > 0; /* Qwen2MoeSparseMoeBlock.shared_expert_gate */
        }
    } else if (m->fam == RS_FAM_MIXTRAL) {
        m->Im = m->I;
        GET("num_local_experts", -1, 1, m->E);
        GET("num_experts_per_tok", 1, 1, m->topk);
    } else if (oss) {
        /* gpt_oss.py MLPBlock: every layer MoE, experts of intermediate_size */
        GET("intermediate_size", -1, 1, m->Im);
        GET("num_local_experts", -1, 1, m->E);
        GET("num_experts_per_tok", 1, 1, m->topk);
    } else if (glm) {
        /* vLLM glm4_moe.py (002d607): layers from first_k_dense_replace on are
         * Glm4MoE (gate [E, H], e_score_correction_bias [E] fp32 always,
         * FusedMoE experts, shared experts of moe_intermediate_size *
         * n_shared_experts); the MTP layers are vLLM's separate drafter
         * (glm4_moe_mtp.py), not modelled */
        GET("moe_intermediate_size", -1, 1, m->Im);
        GET("n_routed_experts", -1, 1, m->E);
        GET("n_shared_experts", 0, 0, m->nshared);
        GET("num_experts_per_tok", 1, 1, m->topk);
        GET("first_k_dense_replace", 0, 0, first_k);
        int64_t nmtp;
        GET("num_nextn_predict_layers", 0, 0, nmtp);
        if (o->mtp && nmtp > 0)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: model_type 'glm4_moe' with the mtp option: its "
                            "num_nextn_predict_layers %lld MTP layers (vLLM's glm4_moe_mtp "
                            "drafter) are not modelled; load without mtp",
                            (long long)nmtp);
        m->Is = m->Im * m->nshared;
        m->router_bias = 1;
    } else if (m->fam == RS_FAM_DSV3) {
        GET("moe_intermediate_size", -1, 1, m->Im);
        GET("n_routed_experts", 0, 0, m->E);
        GET("n_shared_experts", 0, 0, m->nshared);
        GET("num_experts_per_tok", 1, 1, m->topk);
        GET("first_k_dense_replace", 0, 0, first_k);
        GET("moe_layer_freq", 1, 1, freq);
        GET("q_lora_rank", 0, 0, m->q_lora);
        GET("kv_lora_rank", -1, 1, m->kv_lora);
        GET("qk_nope_head_dim", -1, 1, m->nope);
        GET("qk_rope_head_dim", -1, 1, m->rope);
        GET("v_head_dim", -1, 1, m->vhd);
        int64_t nmtp;
        GET("num_nextn_predict_layers", 0, 0, nmtp);
        if (nmtp > RS_MAX_LAYERS - m->Lcfg)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: num_hidden_layers %d + num_nextn_predict_layers %lld is "
                            "over %d layers",
                            m->Lcfg, (long long)nmtp, RS_MAX_LAYERS);
        m->nmtp = o->mtp ? (int32_t)nmtp : 0;
        m->Is = m->Im * m->nshared;
        /* vLLM deepseek_v2.py creates the score-correction bias only with
         * topk_method "noaux_tc" (DeepSeek-V3, Kimi-K2 configs), not with
         * greedy routing or when the field is absent. */
        const char *topk = json_string_value(json_object_get(root, "topk_method"));
        m->router_bias = topk && !strcmp(topk, "noaux_tc");
        m->kv = m->nh; /* MLA: every head has its own latent up-projection */
        m->hd = m->nope + m->rope;
    }
    m->moe = calloc((size_t)(m->L + m->nmtp) + 1, sizeof *m->moe);
    if (!m->moe)
        return rs_error(RESHARD_ERR_NOMEM, "model: out of memory");
    for (int32_t i = 0; i < m->L + m->nmtp; i++) {
        int32_t hf = i < m->L ? i : m->Lcfg + (i - m->L);
        bool moe = false;
        if (m->fam == RS_FAM_QWEN3_MOE || m->fam == RS_FAM_QWEN2_MOE || next) {
            moe = (hf + 1) % step == 0;
            size_t k;
            json_t *x;
            json_array_foreach(mlp_only, k, x)
            {
                if (json_is_integer(x) && json_integer_value(x) == hf)
                    moe = false;
            }
        } else if (m->fam == RS_FAM_DSV3) {
            moe = m->E > 0 && hf >= first_k && hf % freq == 0;
        } else if (glm) {
            moe = hf >= first_k;
        } else if (oss) {
            moe = true;
        } else if (m->fam == RS_FAM_MIXTRAL) {
            moe = true;
        }
        m->moe[i] = moe;
        /* Megatron's GDN layer spec is built for MoE MLPs here: a dense
         * layer (mlp_only_layers, decoder_sparse_step) is not modelled */
        if (next && !moe)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: model_type 'qwen3_next' with a dense MLP in layer %d "
                            "(mlp_only_layers / decoder_sparse_step) is not modelled",
                            hf);
    }
    return RESHARD_OK;
}

/* Every tensor of the model, and all of them together, fit in 2^62 bytes:
 * refused here (CONFIG, naming the tensor) rather than by a later step. */
static reshard_status_t check_sizes(const reshard_model_t *m)
{
    rs_model_ids_t ids;
    reshard_tensors_t *t = NULL;
    reshard_status_t s = reshard_tensors_create(&t);
    if (s == RESHARD_OK)
        s = rs_model_catalogue(m, t, &ids);
    if (s == RESHARD_OK) {
        rs_model_ids_free(&ids);
        uint64_t total = 0;
        for (int32_t i = 0; i < reshard_tensors_count(t) && s == RESHARD_OK; i++) {
            reshard_tensor_info_t info;
            reshard_tensors_info(t, i, &info);
            total += info.bytes; /* each under 2^63: the sum cannot wrap before the check */
            if (total > ((uint64_t)1 << 62))
                s = rs_error(RESHARD_ERR_OVERFLOW, "the model's tensors total over 2^62 bytes");
        }
    }
    reshard_tensors_destroy(t);
    if (s == RESHARD_ERR_OVERFLOW || s == RESHARD_ERR_SHAPE) {
        char why[512];
        snprintf(why, sizeof why, "%s", reshard_last_error());
        s = rs_error(RESHARD_ERR_CONFIG, "config: the sizes give a tensor out of range: %s", why);
    }
    return s;
}

/* Digest of the layout generators' sources (CMakeLists.txt): builds that
 * generate layouts differently give models different origins. */
#ifndef RESHARD_MODEL_DIGEST
#define RESHARD_MODEL_DIGEST "unknown"
#endif

/* The model's origin: its config as canonical JSON (keys sorted, compact),
 * the load options and the library that turns them into layouts, which
 * together fix every layout built from it. */
static reshard_status_t set_origin(json_t *root, const reshard_model_options_t *o,
                                   reshard_model_t *m)
{
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        return rs_error(RESHARD_ERR_NOMEM, "model: out of memory");
    uint64_t h = rs_hash_mix(rs_str_hash(text), rs_str_hash(RESHARD_MODEL_DIGEST));
    free(text);
    h = rs_hash_mix(h, ((uint64_t)RESHARD_VERSION_MAJOR << 32) |
                           ((uint64_t)RESHARD_VERSION_MINOR << 16) | RESHARD_VERSION_PATCH);
    const int64_t opt[] = {o->mtp != 0, o->dtype, o->layers, o->infer_quant, m->pow2};
    for (size_t i = 0; i < sizeof opt / sizeof *opt; i++)
        h = rs_hash_mix(h, (uint64_t)opt[i]);
    m->origin = h;
    return RESHARD_OK;
}

static reshard_status_t load_root(json_t *root, const char *name,
                                  const reshard_model_options_t *opts, reshard_model_t **out)
{
    reshard_model_options_t o = {0};
    if (opts)
        o = *opts;
    if (o.dtype != RESHARD_BF16 && o.dtype != RESHARD_FP8_E4M3)
        return rs_error(RESHARD_ERR_INVALID_ARG, "model dtype must be bf16 or fp8_e4m3, not %s",
                        reshard_dtype_name(o.dtype));
    if (o.infer_quant != RESHARD_QUANT_NONE &&
        (o.dtype != RESHARD_BF16 ||
         (o.infer_quant != RESHARD_QUANT_FP8_BLOCK && o.infer_quant != RESHARD_QUANT_MXFP8)))
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "model: infer_quant %d needs dtype bf16 and kind FP8_BLOCK or MXFP8",
                        (int)o.infer_quant);
    reshard_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return rs_error(RESHARD_ERR_NOMEM, "model: out of memory");
    m->dtype = o.dtype;
    m->quant = o.infer_quant;
    m->pow2 = o.infer_quant == RESHARD_QUANT_MXFP8 || o.pow2_scale;
    m->name = strdup(name);
    reshard_status_t s = m->name ? parse(root, &o, m) : RESHARD_ERR_NOMEM;
    if (s == RESHARD_OK)
        s = check_sizes(m);
    if (s == RESHARD_OK)
        s = set_origin(root, &o, m);
    if (s != RESHARD_OK) {
        reshard_model_destroy(m);
        return s;
    }
    *out = m;
    return RESHARD_OK;
}

reshard_status_t reshard_model_load_json(const char *json_text, const reshard_model_options_t *opts,
                                         reshard_model_t **out)
{
    rs_error_clear();
    if (!json_text || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_load_json: NULL argument");
    json_error_t err;
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return rs_error(RESHARD_ERR_IO, "config: not a JSON object (line %d: %s)", err.line,
                        err.text);
    }
    reshard_status_t s = load_root(root, "(json)", opts, out);
    json_decref(root);
    return s;
}

/* The shipped model names in @p dir (files NAME.json), sorted, comma-separated. */
static void shipped_names(const char *dir, char *out, size_t size)
{
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = strlen(ents[i]->d_name);
        if (len > 5 && !strcmp(ents[i]->d_name + len - 5, ".json") && used < size) {
            int w = snprintf(out + used, size - used, "%s%.*s", used ? ", " : "", (int)(len - 5),
                             ents[i]->d_name);
            used += w > 0 ? (size_t)w : 0;
        }
        free(ents[i]);
    }
    free(ents);
    if (!out[0])
        snprintf(out, size, "none found in %.900s", dir);
}

reshard_status_t reshard_model_load(const char *name_or_path, const reshard_model_options_t *opts,
                                    reshard_model_t **out)
{
    rs_error_clear();
    if (!name_or_path || !*name_or_path || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_load: NULL or empty argument");
    char path[4200], dir[4096];
    size_t len = strlen(name_or_path);
    bool is_path =
        strchr(name_or_path, '/') || (len > 5 && !strcmp(name_or_path + len - 5, ".json"));
    const char *data = reshard_data_dir();
    snprintf(dir, sizeof dir, "%s/models",
             data ? data : "(no data directory: set RESHARD_DATA_DIR)");
    if (is_path)
        snprintf(path, sizeof path, "%s", name_or_path);
    else
        snprintf(path, sizeof path, "%s/%s.json", dir, name_or_path);
    if (!is_path && access(path, F_OK) != 0) {
        char names[1024];
        shipped_names(dir, names, sizeof names);
        return rs_error(RESHARD_ERR_IO,
                        "model '%s': no such shipped model (shipped: %s); or give the path of a "
                        "HF config.json",
                        name_or_path, names);
    }
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return rs_error(RESHARD_ERR_IO, "model '%s': cannot read %s: %s", name_or_path, path,
                        err.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return rs_error(RESHARD_ERR_IO,
                        "model '%s': %s is JSON but not an object (a HF config.json is one "
                        "object of fields such as model_type and hidden_size)",
                        name_or_path, path);
    }
    reshard_status_t s = load_root(root, name_or_path, opts, out);
    json_decref(root);
    if (s != RESHARD_OK && s != RESHARD_ERR_NOMEM) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", reshard_last_error());
        rs_error(s, "model '%s': %s", name_or_path, msg);
    }
    return s;
}

void reshard_model_destroy(reshard_model_t *model)
{
    if (!model)
        return;
    free(model->moe);
    rs_hybrid_free(&model->hy);
    free(model->name);
    free(model);
}

static int64_t params_of(const reshard_model_t *m)
{
    rs_model_ids_t ids;
    reshard_tensors_t *t = NULL;
    int64_t n = 0;
    if (reshard_tensors_create(&t) == RESHARD_OK && rs_model_catalogue(m, t, &ids) == RESHARD_OK) {
        for (int32_t i = 0; i < ids.n; i++) {
            reshard_tensor_info_t info;
            if (reshard_tensors_info(t, i, &info) == RESHARD_OK)
                n += info.numel;
            if (ids.scale[i] >= 0)
                i++; /* a weight's scale tensor follows it */
        }
        rs_model_ids_free(&ids);
    }
    reshard_tensors_destroy(t);
    return n;
}

reshard_status_t reshard_model_info(const reshard_model_t *m, reshard_model_info_t *info)
{
    rs_error_clear();
    if (!m || !info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_info: NULL argument");
    static const char *const fam[] = {"dense",     "qwen3_moe", "deepseek_v3",
                                      "qwen2_moe", "mixtral",   "nemotron_h",
                                      "glm4_moe",  "gpt_oss",   "qwen3_next"};
    *info = (reshard_model_info_t){
        .name = m->name,
        .family = fam[m->fam],
        .layers = m->L,
        .mtp_layers = m->nmtp,
        .hidden = m->H,
        .intermediate = m->I,
        .moe_intermediate = m->Im,
        .vocab = m->V,
        .heads = m->nh,
        .kv_heads = m->kv,
        .head_dim = m->hd,
        .experts = m->E,
        .shared_experts = m->nshared,
        .q_lora_rank = m->q_lora,
        .kv_lora_rank = m->kv_lora,
        .qk_nope_head_dim = m->nope,
        .qk_rope_head_dim = m->rope,
        .v_head_dim = m->vhd,
        .tied_embeddings = m->tied,
        .qk_norm = m->qk_norm,
        .dtype = m->dtype,
    };
    for (int32_t i = 0; i < m->L + m->nmtp; i++)
        if (!m->moe[i])
            info->first_dense = i + 1;
        else
            break;
    info->params = params_of(m);
    return RESHARD_OK;
}
