/* Parallel specs: parsing, world sizes and the rules a model imposes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/error.h"

/* The supported names of the conventions and versions (reshard_model.h). */
static const char *const conventions[] = {"megatron-lm", "megatron-bridge", "megatron-lm", "fsdp"};
static const char *const vllm_versions[] = {"0.25", "0.24", "0.25"};

const char *reshard_train_convention_name(reshard_train_convention_t c)
{
    return (unsigned)c < sizeof conventions / sizeof *conventions ? conventions[c] : NULL;
}

const char *reshard_vllm_version_name(reshard_vllm_version_t v)
{
    return (unsigned)v < sizeof vllm_versions / sizeof *vllm_versions ? vllm_versions[v] : NULL;
}

/* A named value of @p key: its index in @p names [lo, hi] into *out, the
 * default's own name (@p dflt) stored as 0 (one spec, one text); else
 * INVALID_ARG with @p what (the known names). */
static reshard_status_t named(const char *side, const char *key, const char *val,
                              const char *const *names, int lo, int hi, int dflt, int32_t *out,
                              const char *what)
{
    for (int i = lo; i <= hi; i++)
        if (!strcmp(val, names[i])) {
            *out = i == dflt ? 0 : i;
            return RESHARD_OK;
        }
    return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec: %s=%s is not %s", side, key, val, what);
}

/* Drop the spaces and tabs around @p s (in place). */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* Split "k=v,k=v" (spaces around keys and values allowed) and call @p set for
 * each trimmed pair; errors name the text. */
typedef reshard_status_t (*spec_set_fn)(void *spec, const char *side, const char *key,
                                        const char *val, unsigned *seen);

/* A spec as error messages quote it: its first 64 characters, then "..."
 * when longer, so that a huge argument is not echoed whole. */
typedef struct {
    char s[72];
} spec_quote_t;

static spec_quote_t quote(const char *text)
{
    spec_quote_t q;
    snprintf(q.s, sizeof q.s, "%.64s%s", text, strlen(text) > 64 ? "..." : "");
    return q;
}

static reshard_status_t parse_pairs(const char *side, const char *text, void *spec, spec_set_fn set,
                                    unsigned *seen_out)
{
    if (!text || !*text)
        return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec is empty (expected e.g. \"tp=4,dp=2\")",
                        side);
    unsigned seen = 0;
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item)
            return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec \"%s\": empty or too long item", side,
                            quote(text).s);
        memcpy(item, p, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        if (!eq)
            return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec \"%s\": item \"%s\" is not key=value",
                            side, quote(text).s, item);
        *eq = '\0';
        reshard_status_t s = set(spec, side, trim(item), trim(eq + 1), &seen);
        if (s != RESHARD_OK)
            return s;
        p = end ? end + 1 : p + len;
        if (end && !*p)
            return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec \"%s\": trailing comma", side,
                            quote(text).s);
    }
    if (seen_out)
        *seen_out = seen;
    return RESHARD_OK;
}

/* A size: decimal digits, no sign, no leading zero, 1..2^24. */
static reshard_status_t positive(const char *side, const char *key, const char *val, int32_t *out)
{
    size_t n = strspn(val, "0123456789");
    long v = n >= 1 && n <= 8 && !val[n] && val[0] != '0' ? strtol(val, NULL, 10) : 0;
    if (v < 1 || v > (1L << 24))
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s spec: %s=%s is not a positive integer (1..16777216)", side, key, val);
    *out = (int32_t)v;
    return RESHARD_OK;
}

static reshard_status_t mark(const char *side, const char *key, unsigned bit, unsigned *seen)
{
    if (*seen & bit)
        return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec: key '%s' given twice", side, key);
    *seen |= bit;
    return RESHARD_OK;
}

static reshard_status_t train_set(void *spec, const char *side, const char *key, const char *val,
                                  unsigned *seen)
{
    reshard_train_spec_t *s = spec;
    if (!strcmp(key, "convention")) {
        reshard_status_t st = mark(side, key, 1u << 9, seen);
        return st != RESHARD_OK
                   ? st
                   : named(side, key, val, conventions, RESHARD_TRAIN_MEGATRON_BRIDGE,
                           RESHARD_TRAIN_FSDP, RESHARD_TRAIN_MEGATRON_LM, &s->convention,
                           "a modelled training convention (known: megatron-lm (the default), "
                           "megatron-bridge, fsdp)");
    }
    if (!strcmp(key, "transformers")) { /* the HF modeling release an FSDP2 trainer runs */
        reshard_status_t st = mark(side, key, 1u << 11, seen);
        if (st != RESHARD_OK)
            return st;
        if (!strcmp(val, "4") || !strcmp(val, "5")) {
            /* the default's own name stored as 0: one spec, one text */
            s->transformers = val[0] == '4' ? RESHARD_TRANSFORMERS_4 : 0;
            return RESHARD_OK;
        }
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s spec: transformers=%s is not a modelled transformers release (known: 4 "
                        "= per-expert MoE parameters, 5 = fused expert tensors (the default))",
                        side, val);
    }
    static const char *const keys[] = {"tp",  "pp",    "dp",   "cp", "ep",  "etp",
                                       "vpp", "first", "last", "",   "fsdp"};
    int32_t *dst[] = {&s->tp,  &s->pp,    &s->dp,   &s->cp, &s->ep,  &s->etp,
                      &s->vpp, &s->first, &s->last, NULL,   &s->fsdp};
    for (unsigned i = 0; i < sizeof keys / sizeof *keys; i++)
        if (dst[i] && !strcmp(key, keys[i])) {
            reshard_status_t st = mark(side, key, 1u << i, seen);
            return st != RESHARD_OK ? st : positive(side, key, val, dst[i]);
        }
    return rs_error(RESHARD_ERR_INVALID_ARG,
                    "%s spec: unknown key '%s' (known: tp, pp, dp, cp, ep, etp, vpp, first, last, "
                    "convention; FSDP2: fsdp, dp, tp, transformers)",
                    side, key);
}

/* on/off of @p key into *out. */
static reshard_status_t on_off(const char *side, const char *key, const char *val, int *out)
{
    if (strcmp(val, "on") && strcmp(val, "off"))
        return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec: %s=%s must be on or off", side, key,
                        val);
    *out = val[1] == 'n';
    return RESHARD_OK;
}

/* The SGLang keys of an infer spec (seen bits 64..4096; the engine's own
 * rules are checked once the whole text is read). Flags: SGLang server_args.py
 * (docs/sglang-layouts.md). */
static reshard_status_t sglang_set(reshard_infer_spec_t *s, const char *side, const char *key,
                                   const char *val, unsigned *seen)
{
    static const char *const keys[] = {"engine", "dp_attention", "dp_lm_head",   "moe_dense_tp",
                                       "a2a",    "moe_runner",   "shared_fusion"};
    unsigned i = 0;
    while (i < sizeof keys / sizeof *keys && strcmp(key, keys[i]))
        i++;
    if (i == sizeof keys / sizeof *keys)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s spec: unknown key '%s' (known: tp, dp, ep, engines, vllm, redundant; "
                        "engine=sglang: engine, dp_attention, dp_lm_head, moe_dense_tp, a2a, "
                        "moe_runner, shared_fusion)",
                        side, key);
    TRY(mark(side, key, 64u << i, seen));
    switch (i) {
    case 0:
        if (!strcmp(val, "vllm") || !strcmp(val, "sglang")) {
            s->engine = val[0] == 's' ? RESHARD_ENGINE_SGLANG : RESHARD_ENGINE_VLLM;
            return RESHARD_OK;
        }
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s spec: engine=%s is not a modelled inference engine (known: vllm "
                        "(the default), sglang)",
                        side, val);
    case 1:
        return on_off(side, key, val, &s->dp_attention);
    case 2:
        return on_off(side, key, val, &s->dp_lm_head);
    case 3:
        if (strcmp(val, "1"))
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "%s spec: moe_dense_tp=%s: only 1 is modelled (SGLang's "
                            "--moe-dense-tp-size 1 holds DeepSeek's dense MLPs whole; any other "
                            "size splits them over the whole TP group, as when it is not given)",
                            side, val);
        s->moe_dense_tp = 1;
        return RESHARD_OK;
    case 4:
        if (!strcmp(val, "none") || !strcmp(val, "deepep")) {
            s->a2a = val[0] == 'd' ? RESHARD_SGLANG_A2A_DEEPEP : RESHARD_SGLANG_A2A_NONE;
            return RESHARD_OK;
        }
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s spec: a2a=%s: SGLang's --moe-a2a-backend %s is not modelled "
                        "(modelled: none, deepep)",
                        side, val, val);
    case 5:
        if (!strcmp(val, "auto") || !strcmp(val, "triton"))
            return RESHARD_OK; /* the one form modelled: the default, not stored */
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s spec: moe_runner=%s: SGLang's --moe-runner-backend %s is not "
                        "modelled: its kernels hold w13_weight in another form (flashinfer_trtllm "
                        "reorders and pads it, flashinfer_cutlass and cutlass can load up before "
                        "gate, triton_kernel transposes it); modelled: auto, triton (bf16 on "
                        "Hopper: w13 = [gate; up])",
                        side, val, val);
    default:
        if (!strcmp(val, "auto") || !strcmp(val, "off")) {
            s->shared_fusion_off = val[0] == 'o';
            return RESHARD_OK;
        }
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s spec: shared_fusion=%s must be auto (SGLang's own rule) or off "
                        "(--disable-shared-experts-fusion)",
                        side, val);
    }
}

static reshard_status_t infer_set(void *spec, const char *side, const char *key, const char *val,
                                  unsigned *seen)
{
    reshard_infer_spec_t *s = spec;
    if (!strcmp(key, "tp") || !strcmp(key, "dp")) {
        reshard_status_t st = mark(side, key, key[0] == 't' ? 1u : 2u, seen);
        return st != RESHARD_OK ? st : positive(side, key, val, key[0] == 't' ? &s->tp : &s->dp);
    }
    if (!strcmp(key, "engines")) {
        reshard_status_t st = mark(side, key, 8u, seen);
        return st != RESHARD_OK ? st : positive(side, key, val, &s->engines);
    }
    if (!strcmp(key, "vllm")) {
        reshard_status_t st = mark(side, key, 16u, seen);
        return st != RESHARD_OK
                   ? st
                   : named(side, key, val, vllm_versions, RESHARD_VLLM_0_24, RESHARD_VLLM_0_25,
                           RESHARD_VLLM_0_25, &s->vllm,
                           "a supported vLLM version (supported: 0.24 = up to 0.24, 0.25 = 0.25 "
                           "and later (the default); the parameter names differ between them)");
    }
    if (!strcmp(key, "redundant")) { /* EPLB: vLLM's num_redundant_experts */
        reshard_status_t st = mark(side, key, 32u, seen);
        return st != RESHARD_OK ? st : positive(side, key, val, &s->redundant);
    }
    if (!strcmp(key, "ep")) {
        reshard_status_t st = mark(side, key, 4u, seen);
        if (st != RESHARD_OK)
            return st;
        s->ep_size = 0;
        if (!strcmp(val, "on"))
            s->ep = 1;
        else if (!strcmp(val, "off"))
            s->ep = 0;
        else if (val[0] >= '1' && val[0] <= '9') { /* SGLang --ep-size N (checked after) */
            TRY(positive(side, key, val, &s->ep_size));
            s->ep = 1;
        } else
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "%s spec: ep=%s must be on or off (vLLM's expert parallelism spans "
                            "all tp*dp ranks; under engine=sglang also a size N dividing tp: "
                            "--ep-size N)",
                            side, val);
        return RESHARD_OK;
    }
    return sglang_set(s, side, key, val, seen);
}

/* An FSDP2 spec (any fsdp= key, or convention=fsdp): mesh [dp_replicate=dp,
 * dp_shard=fsdp, tp]; the Megatron keys are refused by name. */
static reshard_status_t fsdp_spec(const char *text, unsigned seen, reshard_train_spec_t *s)
{
    /* train_set's key bits: tp 0, pp 1, dp 2, cp 3, ep 4, etp 5, vpp 6, first 7, last 8 */
    static const struct {
        const char *key;
        unsigned bit;
    } megatron_only[] = {{"pp", 1},  {"cp", 3},    {"ep", 4},  {"etp", 5},
                         {"vpp", 6}, {"first", 7}, {"last", 8}};
    for (unsigned i = 0; i < sizeof megatron_only / sizeof *megatron_only; i++)
        if (seen & (1u << megatron_only[i].bit))
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "train spec \"%s\": %s= is a Megatron size; an FSDP2 spec (fsdp=) "
                            "takes fsdp, dp (HSDP replicas), tp and transformers only",
                            quote(text).s, megatron_only[i].key);
    if (s->convention != 0 && s->convention != RESHARD_TRAIN_FSDP)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "train spec \"%s\": fsdp= needs convention=fsdp (or no convention), not "
                        "convention=%s",
                        quote(text).s, reshard_train_convention_name(s->convention));
    s->convention = RESHARD_TRAIN_FSDP;
    if (s->fsdp == 0)
        s->fsdp = 1;
    s->etp = 1;
    return RESHARD_OK;
}

reshard_status_t reshard_train_spec_parse(const char *text, reshard_train_spec_t *out)
{
    rs_error_clear();
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_train_spec_parse: NULL out");
    reshard_train_spec_t s = {.tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .vpp = 1};
    unsigned seen = 0;
    reshard_status_t st = parse_pairs("train", text, &s, train_set, &seen);
    bool fsdp = (seen & (1u << 10)) || s.convention == RESHARD_TRAIN_FSDP;
    if (st == RESHARD_OK && fsdp)
        st = fsdp_spec(text, seen, &s);
    else if (st == RESHARD_OK && (seen & (1u << 11)))
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "train spec \"%s\": transformers= belongs to an FSDP2 spec (fsdp=N)",
                      quote(text).s);
    if (s.etp == 0) /* the convention's default: tp (Megatron-LM) or 1 (Bridge with ep > 1) */
        s.etp = rs_etp(&s);
    if (st == RESHARD_OK && reshard_train_world(&s) < 0)
        st = rs_error(RESHARD_ERR_INVALID_ARG, "train spec \"%s\": world size overflows",
                      quote(text).s);
    if (st == RESHARD_OK)
        *out = s;
    return st;
}

/* The keys of the other engine refused by name; under SGLang a numeric ep
 * equal to tp read as ep=on and 1 as off (one spec, one text). */
static reshard_status_t engine_keys(const char *text, unsigned seen, reshard_infer_spec_t *s)
{
    bool sgl = s->engine == RESHARD_ENGINE_SGLANG;
    static const struct {
        const char *key;
        unsigned bit;
        bool sglang; /* the key belongs to SGLang (else to vLLM) */
    } own[] = {{"vllm", 16u, false},         {"redundant", 32u, false},
               {"dp_attention", 128u, true}, {"dp_lm_head", 256u, true},
               {"moe_dense_tp", 512u, true}, {"a2a", 1024u, true},
               {"moe_runner", 2048u, true},  {"shared_fusion", 4096u, true}};
    for (unsigned i = 0; i < sizeof own / sizeof *own; i++)
        if ((seen & own[i].bit) && own[i].sglang != sgl)
            return rs_error(RESHARD_ERR_INVALID_ARG, "infer spec \"%s\": %s= is %s (%s)",
                            quote(text).s, own[i].key,
                            own[i].sglang ? "an SGLang key" : "a vLLM key",
                            own[i].sglang ? "give engine=sglang" : "not under engine=sglang");
    if (!sgl) {
        if (s->ep_size > 0)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "infer spec \"%s\": ep=%d must be on or off under vLLM (a numeric "
                            "ep is SGLang's --ep-size: give engine=sglang)",
                            quote(text).s, s->ep_size);
        return RESHARD_OK;
    }
    if (s->ep_size == 1)
        s->ep = 0;
    if (s->ep_size == 1 || s->ep_size == s->tp)
        s->ep_size = 0;
    return rs_sglang_spec_rules(s, RESHARD_ERR_INVALID_ARG);
}

reshard_status_t reshard_infer_spec_parse(const char *text, reshard_infer_spec_t *out)
{
    rs_error_clear();
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_infer_spec_parse: NULL out");
    reshard_infer_spec_t s = {.tp = 1, .dp = 1, .engines = 1};
    unsigned seen = 0;
    reshard_status_t st = parse_pairs("infer", text, &s, infer_set, &seen);
    if (st == RESHARD_OK)
        st = engine_keys(text, seen, &s);
    if (st == RESHARD_OK && reshard_infer_world(&s) < 0)
        st = rs_error(RESHARD_ERR_INVALID_ARG, "infer spec \"%s\": world size overflows",
                      quote(text).s);
    if (st == RESHARD_OK)
        *out = s;
    return st;
}

static int32_t product(const int32_t *v, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (v[i] < 1)
            return -1;
        p *= v[i];
        if (p > INT32_MAX)
            return -1;
    }
    return (int32_t)p;
}

int32_t reshard_train_world(const reshard_train_spec_t *s)
{
    if (!s || (unsigned)s->convention > RESHARD_TRAIN_FSDP)
        return -1;
    if (rs_fsdp(s)) { /* mesh [dp_replicate, dp_shard, tp] */
        if (s->pp != 1 || s->cp != 1 || s->ep != 1 || s->transformers < 0 ||
            s->transformers > RESHARD_TRANSFORMERS_5)
            return -1;
        int32_t v[3] = {s->tp, s->dp, s->fsdp};
        return product(v, 3);
    }
    if (s->fsdp > 1) /* an FSDP size under a Megatron convention */
        return -1;
    int32_t v[4] = {s->tp, s->cp, s->dp, s->pp};
    return product(v, 4);
}

int32_t reshard_infer_world(const reshard_infer_spec_t *s)
{
    if (!s || s->engines < 0 || (unsigned)s->vllm > RESHARD_VLLM_0_25 ||
        (unsigned)s->engine > RESHARD_ENGINE_SGLANG)
        return -1;
    if (s->engine == RESHARD_ENGINE_SGLANG) { /* a server is tp ranks; dp lives inside it */
        int32_t v[3] = {s->tp, s->dp, rs_engines(s)};
        return product(v, 3) < 0 ? -1 : product((int32_t[2]){s->tp, rs_engines(s)}, 2);
    }
    int32_t v[3] = {s->tp, s->dp, rs_engines(s)};
    return product(v, 3);
}

const char *reshard_train_spec_str(const reshard_train_spec_t *s, char *out, size_t size)
{
    if (!out || !size)
        return "";
    out[0] = '\0';
    if (!s)
        return out;
    if (rs_fsdp(s)) { /* "fsdp=4,dp=1,tp=1", then ",transformers=4" when that is the release */
        int n = snprintf(out, size, "fsdp=%d,dp=%d,tp=%d", s->fsdp, s->dp, s->tp);
        if (n >= 0 && (size_t)n < size && s->transformers == RESHARD_TRANSFORMERS_4)
            snprintf(out + n, size - (size_t)n, ",transformers=4");
        return out;
    }
    int n = snprintf(out, size, "tp=%d,pp=%d,dp=%d,cp=%d,ep=%d,etp=%d", s->tp, s->pp, s->dp, s->cp,
                     s->ep, rs_etp(s));
    if (n >= 0 && (size_t)n < size && rs_vpp(s) > 1)
        n += snprintf(out + n, size - (size_t)n, ",vpp=%d", s->vpp);
    if (n >= 0 && (size_t)n < size && s->first > 0)
        n += snprintf(out + n, size - (size_t)n, ",first=%d", s->first);
    if (n >= 0 && (size_t)n < size && s->last > 0)
        n += snprintf(out + n, size - (size_t)n, ",last=%d", s->last);
    if (n >= 0 && (size_t)n < size && rs_convention(s) == RESHARD_TRAIN_MEGATRON_BRIDGE)
        snprintf(out + n, size - (size_t)n, ",convention=megatron-bridge");
    return out;
}

const char *reshard_infer_spec_str(const reshard_infer_spec_t *s, char *out, size_t size)
{
    if (!out || !size)
        return "";
    out[0] = '\0';
    if (!s)
        return out;
    if (s->engine == RESHARD_ENGINE_SGLANG)
        return rs_sglang_spec_str(s, out, size);
    int n = snprintf(out, size, "tp=%d,dp=%d,ep=%s", s->tp, s->dp, s->ep ? "on" : "off");
    if (n >= 0 && (size_t)n < size && rs_engines(s) > 1)
        n += snprintf(out + n, size - (size_t)n, ",engines=%d", s->engines);
    if (n >= 0 && (size_t)n < size && rs_vllm(s) == RESHARD_VLLM_0_24)
        n += snprintf(out + n, size - (size_t)n, ",vllm=0.24");
    if (n >= 0 && (size_t)n < size && s->redundant > 0)
        snprintf(out + n, size - (size_t)n, ",redundant=%d", s->redundant);
    return out;
}

/* Layers of pipeline stage @p p, all its model chunks together
 * (transformer_block.py get_num_layers_to_build): the given first/last
 * counts, the rest split evenly over the other stages. */
static int32_t stage_count(int32_t L, const reshard_train_spec_t *s, int32_t p)
{
    int32_t left = s->pp, rest = L;
    if (s->first > 0) {
        if (p == 0)
            return s->first;
        left--;
        rest -= s->first;
    }
    if (s->last > 0) {
        if (p == s->pp - 1)
            return s->last;
        left--;
        rest -= s->last;
    }
    return left > 0 ? rest / left : 0;
}

void rs_stage_layers(int32_t L, const reshard_train_spec_t *s, int32_t p, int32_t chunk,
                     int32_t *first, int32_t *count)
{
    /* Round c of the interleaved schedule holds L/vpp layers: each stage's
     * c-th chunk in stage order (get_transformer_layer_offset). */
    int32_t v = rs_vpp(s), off = chunk * (L / v);
    for (int32_t q = 0; q < p; q++)
        off += stage_count(L, s, q) / v;
    *first = off;
    *count = stage_count(L, s, p) / v;
}

static bool has_moe(const reshard_model_t *m)
{
    for (int32_t i = 0; i < m->L + m->nmtp; i++)
        if (m->moe[i])
            return true;
    return false;
}

/* Megatron's pipeline split rules (transformer_block.py 155-158,
 * get_num_layers_to_build; arguments.py for the virtual pipeline). */
static reshard_status_t check_stages(const reshard_model_t *m, const reshard_train_spec_t *s)
{
    int32_t pp = s->pp, v = rs_vpp(s), L = m->L;
    RULE(s->first >= 0 && s->last >= 0 && s->vpp >= 0, "train: vpp, first and last must be >= 1");
    RULE(pp > 1 || (s->first == 0 && s->last == 0),
         "train: first=/last= (--decoder-first/last-pipeline-num-layers) need pp > 1");
    RULE(pp > 1 || v == 1,
         "train: vpp=%d (--num-virtual-stages-per-pipeline-rank) needs pp > 1 (Megatron's "
         "virtual pipeline interleaves model chunks over the pipeline stages)",
         v);
    if (s->first == 0 && s->last == 0)
        RULE(L % pp == 0,
             "train: pp=%d does not divide the %d layers; Megatron requires it unless the "
             "first/last stage layer counts are given (first=, last=: "
             "--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers)",
             pp, L);
    int32_t left = pp - (s->first > 0) - (s->last > 0);
    int64_t rest = (int64_t)L - s->first - s->last;
    RULE(rest >= 0, "train: first=%d + last=%d is more than the %d layers", s->first, s->last, L);
    RULE(left > 0 || rest == 0,
         "train: first=%d + last=%d must be the %d layers when pp=%d has no middle stages",
         s->first, s->last, L, pp);
    RULE(left == 0 || rest % left == 0,
         "train: the %lld layers left after first=%d, last=%d do not split evenly over the %d "
         "middle stages (Megatron: uneven pipelining needs the rest divisible)",
         (long long)rest, s->first, s->last, left);
    for (int32_t p = 0; p < pp; p++) {
        int32_t n = stage_count(L, s, p);
        RULE(n >= 1, "train: pipeline stage %d of pp=%d gets no layer of the %d", p, pp, L);
        RULE(n % v == 0,
             "train: vpp=%d does not divide the %d layers of pipeline stage %d (Megatron: every "
             "model chunk holds the same number of layers; choose vpp dividing each stage's "
             "layers)",
             v, n, p);
    }
    return RESHARD_OK;
}

void rs_train_effective(const reshard_model_t *m, reshard_train_spec_t *s)
{
    /* arguments.py 840-862: with '|' in the hybrid pattern Megatron sets
     * virtual_pipeline_model_parallel_size = segments / pp itself */
    if (m->fam == RS_FAM_NEMOTRON_H && m->hy.segments > 1 && s->pp > 0 &&
        m->hy.segments % s->pp == 0)
        s->vpp = m->hy.segments / s->pp;
}

reshard_status_t rs_check_train(const reshard_model_t *m, const reshard_train_spec_t *s)
{
    if (s && rs_fsdp(s))
        return rs_fsdp_check(m, s); /* fsdp.c */
    RULE(reshard_train_world(s) > 0,
         "train: sizes must be >= 1, the world fit in int32 and the convention be "
         "megatron-lm or megatron-bridge");
    if (rs_convention(s) == RESHARD_TRAIN_MEGATRON_BRIDGE)
        /* Megatron-Bridge gpt_provider.py 184, 266-271 (067f987): a vocabulary from the
         * HF config is not padded; VocabParallelEmbedding divides it by tp */
        RULE(m->V % s->tp == 0,
             "train (megatron-bridge): tp=%d does not divide the vocabulary %lld (Megatron-Bridge "
             "does not pad a vocabulary read from the HF config, and Megatron's "
             "VocabParallelEmbedding splits it evenly; convention=megatron-lm pads it to a "
             "multiple of 128*tp)",
             s->tp, (long long)m->V);
    /* nemotron_h: '|' in the pattern sets the stages (rs_hybrid_check_train) */
    if (m->fam != RS_FAM_NEMOTRON_H || m->hy.segments == 1)
        TRY(check_stages(m, s));
    if (m->fam == RS_FAM_NEMOTRON_H)
        TRY(rs_hybrid_check_train(m, s));
    RULE(m->nh % s->tp == 0, "train: tp=%d does not divide the %d attention heads", s->tp, m->nh);
    if (m->fam != RS_FAM_DSV3) {
        /* attention.py: linear_qkv rows split evenly, whole query groups or
         * (tp a multiple of the groups) an equal part of one group's rows */
        RULE(m->kv % s->tp == 0 || s->tp % m->kv == 0,
             "train: tp=%d does not divide the %d query groups (kv heads) nor is a multiple of "
             "them (Megatron's linear_qkv split)",
             s->tp, m->kv);
        int64_t gs = ((m->attn_gate ? 2 : 1) * m->nh / m->kv + 2) * (int64_t)m->hd;
        RULE(s->tp <= m->kv || gs % (s->tp / m->kv) == 0,
             "train: tp=%d: the %lld linear_qkv rows of a query group do not split evenly over "
             "its %d ranks",
             s->tp, (long long)gs, s->tp / m->kv);
    }
    if (m->fam == RS_FAM_QWEN3_NEXT)
        TRY(rs_gdn_check_tp(m, s->tp, "train"));
    RULE(m->I % s->tp == 0, "train: tp=%d does not divide the MLP intermediate size %lld", s->tp,
         (long long)m->I);
    if (m->Is)
        RULE(m->Is % s->tp == 0,
             "train: tp=%d does not divide the shared-expert intermediate size %lld", s->tp,
             (long long)m->Is);
    if (m->nmtp)
        RULE(m->H % s->tp == 0, "train: tp=%d does not divide the hidden size %lld (MTP eh_proj)",
             s->tp, (long long)m->H);
    if (!has_moe(m)) {
        RULE(s->ep == 1, "train: ep=%d: the model has no experts", s->ep);
        return RESHARD_OK;
    }
    int32_t etp = rs_etp(s);
    RULE(m->E % s->ep == 0, "train: ep=%d does not divide the %d experts", s->ep, m->E);
    RULE(m->Im % etp == 0, "train: etp=%d does not divide the expert intermediate size %lld", etp,
         (long long)m->Im);
    int64_t stage = (int64_t)s->tp * s->cp * s->dp;
    RULE(stage % ((int64_t)etp * s->ep) == 0,
         "train: etp*ep=%d does not divide tp*cp*dp=%lld (the expert grid etp,ep,edp must fill "
         "each pipeline stage; %s)",
         etp * s->ep, (long long)stage,
         etp > 1 ? "etp defaults to tp as Megatron-LM's --expert-tensor-parallel-size does "
                   "(Megatron-Bridge: 1): give etp=1, a smaller ep or a larger dp"
                 : "give a smaller ep or a larger dp");
    return RESHARD_OK;
}

reshard_status_t rs_check_infer(const reshard_model_t *m, const reshard_infer_spec_t *s)
{
    RULE((unsigned)s->engine <= RESHARD_ENGINE_SGLANG,
         "infer: engine %d is not a modelled inference engine (RESHARD_ENGINE_VLLM, "
         "RESHARD_ENGINE_SGLANG)",
         s->engine);
    if (s->engine == RESHARD_ENGINE_SGLANG)
        return rs_sglang_check(m, s); /* sglang.c */
    RULE(!s->dp_attention && !s->dp_lm_head && !s->moe_dense_tp && !s->a2a &&
             !s->shared_fusion_off && !s->ep_size,
         "infer: dp_attention, dp_lm_head, moe_dense_tp, a2a, shared_fusion and a numeric ep "
         "are SGLang settings: they need engine=sglang");
    RULE(s->engines >= 0, "infer: engines=%d must be >= 1", s->engines);
    RULE(rs_vllm_version_ok(s->vllm),
         "infer: vllm version %d is not a supported vLLM version (RESHARD_VLLM_0_24, "
         "RESHARD_VLLM_0_25 or 0 for the default)",
         s->vllm);
    RULE(reshard_infer_world(s) > 0,
         "infer: sizes must be >= 1 and the world (engines*tp*dp) fit in int32");
    int32_t tp = s->tp;
    RULE(m->nh % tp == 0, "infer: tp=%d does not divide the %d attention heads", tp, m->nh);
    if (m->fam != RS_FAM_DSV3)
        RULE(m->kv % tp == 0 || tp % m->kv == 0,
             "infer: tp=%d does not divide the %d kv heads nor is a multiple of them", tp, m->kv);
    RULE(m->I % tp == 0, "infer: tp=%d does not divide the MLP intermediate size %lld", tp,
         (long long)m->I);
    RULE(rs_roundup(m->V, 64) % tp == 0,
         "infer: tp=%d does not divide the vocabulary padded to 64 (%lld)", tp,
         (long long)rs_roundup(m->V, 64));
    if (m->Is)
        RULE(m->Is % tp == 0,
             "infer: tp=%d does not divide the shared-expert intermediate size %lld", tp,
             (long long)m->Is);
    if (m->fam == RS_FAM_NEMOTRON_H)
        TRY(rs_hybrid_check_infer(m, s));
    if (m->fam == RS_FAM_QWEN3_NEXT) /* sequence-parallel MoE: shared expert whole (vllm.c) */
        TRY(rs_gdn_check_tp(m, tp, "infer"));
    if (!has_moe(m)) {
        RULE(!s->ep, "infer: ep=on: the model has no experts");
        RULE(!rs_eplb_on(s), "infer: EPLB (redundant=%d or a map): the model has no experts",
             s->redundant);
        return RESHARD_OK;
    }
    if (m->fam == RS_FAM_GPT_OSS) {
        /* gpt_oss.py: no EPLB (FusedMoE without enable_eplb); load_weights
         * gives EP rank r the experts [r*E/ep, (r+1)*E/ep) with no remainder */
        RULE(!rs_eplb_on(s),
             "infer: EPLB (redundant=%d or a map): vLLM's gpt-oss has no expert load balancer",
             s->redundant);
        /* OAIAttention: num_local_key_value_heads = kv / tp (no kv replication) */
        RULE(m->kv % tp == 0,
             "infer: gpt_oss: tp=%d does not divide the %d kv heads (vLLM's gpt-oss attention "
             "holds kv/tp kv heads per rank, without replication)",
             tp, m->kv);
        RULE(!s->ep || m->E % ((int64_t)tp * s->dp) == 0,
             "infer: gpt_oss: the EP size tp*dp=%d does not divide the %d experts (vLLM's "
             "gpt-oss loader gives every EP rank E/ep of them)",
             tp * s->dp, m->E);
    }
    TRY(rs_eplb_check(m, s));
    if (!s->ep)
        RULE(m->Im % ((int64_t)tp * s->dp) == 0,
             "infer: tp*dp=%lld does not divide the expert intermediate size %lld (vLLM without "
             "expert parallelism splits every expert over all tp*dp ranks; ep=on "
             "(--enable-expert-parallel) holds whole experts instead)",
             (long long)tp * s->dp, (long long)m->Im);
    else
        RULE((int64_t)tp * s->dp <= m->E,
             "infer: EP size tp*dp=%d is more than the %d experts (every EP rank of an engine "
             "needs one)",
             tp * s->dp, m->E);
    return RESHARD_OK;
}

reshard_status_t reshard_model_check(const reshard_model_t *model,
                                     const reshard_train_spec_t *train,
                                     const reshard_infer_spec_t *infer, int32_t world)
{
    rs_error_clear();
    if (!model || !train || !infer)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_check: NULL argument");
    reshard_status_t s = rs_check_train(model, train);
    if (s == RESHARD_OK)
        s = rs_check_infer(model, infer);
    if (s == RESHARD_OK)
        s = rs_check_layouts(model, train, infer);
    if (s == RESHARD_OK && world > 0) {
        int64_t tw = reshard_train_world(train), iw = reshard_infer_world(infer);
        RULE(tw + iw == world, "world size %d != train world %lld + infer world %lld", world,
             (long long)tw, (long long)iw);
    }
    return s;
}
