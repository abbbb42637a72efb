/* Parallel specs: parsing, world sizes and the rules a model imposes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/error.h"

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

static reshard_status_t parse_pairs(const char *side, const char *text, void *spec, spec_set_fn set)
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
                            text);
        memcpy(item, p, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        if (!eq)
            return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec \"%s\": item \"%s\" is not key=value",
                            side, text, item);
        *eq = '\0';
        reshard_status_t s = set(spec, side, trim(item), trim(eq + 1), &seen);
        if (s != RESHARD_OK)
            return s;
        p = end ? end + 1 : p + len;
        if (end && !*p)
            return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec \"%s\": trailing comma", side, text);
    }
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
    static const char *const keys[] = {"tp", "pp", "dp", "cp", "ep", "etp"};
    int32_t *dst[] = {&s->tp, &s->pp, &s->dp, &s->cp, &s->ep, &s->etp};
    for (unsigned i = 0; i < 6; i++)
        if (!strcmp(key, keys[i])) {
            reshard_status_t st = mark(side, key, 1u << i, seen);
            return st != RESHARD_OK ? st : positive(side, key, val, dst[i]);
        }
    return rs_error(RESHARD_ERR_INVALID_ARG,
                    "%s spec: unknown key '%s' (known: tp, pp, dp, cp, ep, etp)", side, key);
}

static reshard_status_t infer_set(void *spec, const char *side, const char *key, const char *val,
                                  unsigned *seen)
{
    reshard_infer_spec_t *s = spec;
    if (!strcmp(key, "tp") || !strcmp(key, "dp")) {
        reshard_status_t st = mark(side, key, key[0] == 't' ? 1u : 2u, seen);
        return st != RESHARD_OK ? st : positive(side, key, val, key[0] == 't' ? &s->tp : &s->dp);
    }
    if (!strcmp(key, "ep")) {
        reshard_status_t st = mark(side, key, 4u, seen);
        if (st != RESHARD_OK)
            return st;
        if (!strcmp(val, "on"))
            s->ep = 1;
        else if (!strcmp(val, "off"))
            s->ep = 0;
        else
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "%s spec: ep=%s must be on or off (vLLM's expert parallelism spans "
                            "all tp*dp ranks)",
                            side, val);
        return RESHARD_OK;
    }
    return rs_error(RESHARD_ERR_INVALID_ARG, "%s spec: unknown key '%s' (known: tp, dp, ep)", side,
                    key);
}

reshard_status_t reshard_train_spec_parse(const char *text, reshard_train_spec_t *out)
{
    rs_error_clear();
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_train_spec_parse: NULL out");
    reshard_train_spec_t s = {1, 1, 1, 1, 1, 1};
    reshard_status_t st = parse_pairs("train", text, &s, train_set);
    if (st == RESHARD_OK && reshard_train_world(&s) < 0)
        st = rs_error(RESHARD_ERR_INVALID_ARG, "train spec \"%s\": world size overflows", text);
    if (st == RESHARD_OK)
        *out = s;
    return st;
}

reshard_status_t reshard_infer_spec_parse(const char *text, reshard_infer_spec_t *out)
{
    rs_error_clear();
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_infer_spec_parse: NULL out");
    reshard_infer_spec_t s = {1, 1, 0};
    reshard_status_t st = parse_pairs("infer", text, &s, infer_set);
    if (st == RESHARD_OK && reshard_infer_world(&s) < 0)
        st = rs_error(RESHARD_ERR_INVALID_ARG, "infer spec \"%s\": world size overflows", text);
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
    if (!s)
        return -1;
    int32_t v[4] = {s->tp, s->cp, s->dp, s->pp};
    return product(v, 4);
}

int32_t reshard_infer_world(const reshard_infer_spec_t *s)
{
    if (!s)
        return -1;
    int32_t v[2] = {s->tp, s->dp};
    return product(v, 2);
}

const char *reshard_train_spec_str(const reshard_train_spec_t *s, char *out, size_t size)
{
    snprintf(out, size, "tp=%d,pp=%d,dp=%d,cp=%d,ep=%d,etp=%d", s->tp, s->pp, s->dp, s->cp, s->ep,
             s->etp);
    return out;
}

const char *reshard_infer_spec_str(const reshard_infer_spec_t *s, char *out, size_t size)
{
    snprintf(out, size, "tp=%d,dp=%d,ep=%s", s->tp, s->dp, s->ep ? "on" : "off");
    return out;
}

void rs_stage_layers(int32_t L, int32_t pp, int32_t p, int32_t *first, int32_t *count)
{
    int32_t base = L / pp, rem = L % pp;
    *count = base + (p < rem);
    *first = p * base + (p < rem ? p : rem);
}

static bool has_moe(const reshard_model_t *m)
{
    for (int32_t i = 0; i < m->L + m->nmtp; i++)
        if (m->moe[i])
            return true;
    return false;
}

#define RULE(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return rs_error(RESHARD_ERR_CONFIG, __VA_ARGS__);                                      \
    } while (0)

reshard_status_t rs_check_train(const reshard_model_t *m, const reshard_train_spec_t *s)
{
    RULE(reshard_train_world(s) > 0, "train: sizes must be >= 1 and the world fit in int32");
    RULE(s->pp <= m->L, "train: pp=%d is more than the %d layers (every stage needs a layer)",
         s->pp, m->L);
    RULE(m->nh % s->tp == 0, "train: tp=%d does not divide the %d attention heads", s->tp, m->nh);
    if (m->fam != RS_FAM_DSV3)
        RULE(m->kv % s->tp == 0,
             "train: tp=%d does not divide the %d query groups (kv heads); Megatron splits whole "
             "groups",
             s->tp, m->kv);
    RULE(m->I % s->tp == 0, "train: tp=%d does not divide the MLP intermediate size %lld", s->tp,
         (long long)m->I);
    if (m->nshared)
        RULE((m->Im * m->nshared) % s->tp == 0,
             "train: tp=%d does not divide the shared-expert intermediate size %lld", s->tp,
             (long long)(m->Im * m->nshared));
    if (m->nmtp)
        RULE(m->H % s->tp == 0, "train: tp=%d does not divide the hidden size %lld (MTP eh_proj)",
             s->tp, (long long)m->H);
    if (!has_moe(m)) {
        RULE(s->ep == 1 && s->etp == 1, "train: ep=%d etp=%d: the model has no experts", s->ep,
             s->etp);
        return RESHARD_OK;
    }
    RULE(m->E % s->ep == 0, "train: ep=%d does not divide the %d experts", s->ep, m->E);
    RULE(m->Im % s->etp == 0, "train: etp=%d does not divide the expert intermediate size %lld",
         s->etp, (long long)m->Im);
    int64_t stage = (int64_t)s->tp * s->cp * s->dp;
    RULE(stage % ((int64_t)s->etp * s->ep) == 0,
         "train: etp*ep=%d does not divide tp*cp*dp=%lld (the expert grid etp,ep,edp must fill "
         "each pipeline stage)",
         s->etp * s->ep, (long long)stage);
    return RESHARD_OK;
}

reshard_status_t rs_check_infer(const reshard_model_t *m, const reshard_infer_spec_t *s)
{
    RULE(reshard_infer_world(s) > 0, "infer: sizes must be >= 1 and the world fit in int32");
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
    if (m->nshared)
        RULE((m->Im * m->nshared) % tp == 0,
             "infer: tp=%d does not divide the shared-expert intermediate size %lld", tp,
             (long long)(m->Im * m->nshared));
    if (!has_moe(m)) {
        RULE(!s->ep, "infer: ep=on: the model has no experts");
        return RESHARD_OK;
    }
    if (!s->ep)
        RULE(m->Im % tp == 0,
             "infer: tp=%d does not divide the expert intermediate size %lld (without EP every "
             "expert is TP-split)",
             tp, (long long)m->Im);
    else
        RULE((int64_t)tp * s->dp <= m->E,
             "infer: EP size tp*dp=%d is more than the %d experts (every EP rank needs one)",
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
