/* Option parsing shared by the subcommands: one table per command. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const cli_opt_t *find(const cli_opt_t *opts, size_t n, const char *name)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(opts[k].name, name))
            return &opts[k];
    return NULL;
}

/* Store @p val into @p o's destination; 0, or 2 with a message in @p err. */
static int store(const cli_opt_t *o, const char *val, char *err, size_t err_size)
{
    if (o->kind == CLI_STRING) {
        *(const char **)o->dst = val;
        return 0;
    }
    char *end;
    /* decimal only: strtod would also take hex floats, "inf" and "nan" */
    bool decimal = val[strspn(val, "0123456789+-.eE")] == '\0';
    errno = 0;
    double x = strtod(val, &end);
    if (!*val || *end || !decimal || isnan(x) || (o->kind == CLI_INT && x != floor(x))) {
        snprintf(err, err_size, "%s: '%s' is not a valid %s", o->name, val,
                 o->kind == CLI_INT ? "whole number" : "decimal number");
        return 2;
    }
    if (errno == ERANGE) { /* over- or underflow: not the value written */
        snprintf(err, err_size, "%s: '%s' is out of the range of a double", o->name, val);
        return 2;
    }
    if (!(x >= o->min)) {
        snprintf(err, err_size, "%s: %s is below the minimum %.15g", o->name, val, o->min);
        return 2;
    }
    double max = o->max > 0 ? o->max : o->kind == CLI_INT ? (double)INT32_MAX : INFINITY;
    if (!(x <= max)) {
        snprintf(err, err_size, "%s: %s is above the maximum %.15g", o->name, val, max);
        return 2;
    }
    if (o->kind == CLI_INT)
        *(long *)o->dst = (long)x;
    else
        *(double *)o->dst = x;
    return 0;
}

int cli_parse(int argc, char **argv, const cli_opt_t *opts, size_t n, char *err, size_t err_size)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        if (!strcmp(name, "-h") || !strcmp(name, "--help"))
            return 1;
        const cli_opt_t *o = find(opts, n, name);
        if (!o) {
            snprintf(err, err_size, "unknown option '%s'", arg);
            return 2;
        }
        if (o->kind == CLI_FLAG) {
            if (eq) {
                snprintf(err, err_size, "%s takes no value", name);
                return 2;
            }
            *(int *)o->dst = 1;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) {
            snprintf(err, err_size, "%s needs a value", name);
            return 2;
        }
        int rc = store(o, val, err, err_size);
        if (rc)
            return rc;
    }
    return 0;
}

int cli_infer_dtype(const char *infer_dtype, const char *fp8_scale, reshard_model_options_t *mo,
                    char *err, size_t err_size)
{
    const char *d = infer_dtype ? infer_dtype : "bf16";
    if (!strcmp(d, "bf16"))
        mo->infer_quant = RESHARD_QUANT_NONE;
    else if (!strcmp(d, "fp8"))
        mo->infer_quant = RESHARD_QUANT_FP8_BLOCK;
    else if (!strcmp(d, "mxfp8"))
        mo->infer_quant = RESHARD_QUANT_MXFP8;
    else if (!strcmp(d, "mxfp4")) {
        snprintf(err, err_size,
                 "--infer-dtype mxfp4: vLLM's MXFP4 expert form (gpt-oss's released "
                 "checkpoints) is not produced by the refit; refit into an engine that loaded "
                 "bf16 weights (--infer-dtype bf16)");
        return 2;
    } else {
        snprintf(err, err_size, "--infer-dtype '%s' is not bf16, fp8 or mxfp8", d);
        return 2;
    }
    if (fp8_scale && strcmp(fp8_scale, "fp32") && strcmp(fp8_scale, "ue8m0")) {
        snprintf(err, err_size, "--fp8-scale '%s' is not fp32 or ue8m0", fp8_scale);
        return 2;
    }
    if (fp8_scale && mo->infer_quant != RESHARD_QUANT_FP8_BLOCK) {
        snprintf(err, err_size, "--fp8-scale applies to --infer-dtype fp8 only");
        return 2;
    }
    mo->pow2_scale = fp8_scale && !strcmp(fp8_scale, "ue8m0");
    return 0;
}

/* Entries of one map (a list of ints, or a list of lists of ints) appended to
 * @p m; -1 with a message on a bad shape. */
static int64_t eplb_flatten(json_t *map, cli_eplb_maps_t *m, int64_t *cap, char *err,
                            size_t err_size, int which)
{
    int64_t n0 = m->off[m->n];
    size_t rows = json_is_array(map) ? json_array_size(map) : 0;
    if (!rows) {
        snprintf(err, err_size, "--eplb-map: map %d is not a non-empty list", which);
        return -1;
    }
    bool nested = json_is_array(json_array_get(map, 0));
    int64_t count = 0;
    for (size_t r = 0; r < rows; r++) {
        json_t *row = json_array_get(map, r);
        size_t k = nested ? (json_is_array(row) ? json_array_size(row) : 0) : 1;
        if (nested && !json_is_array(row)) {
            snprintf(err, err_size, "--eplb-map: map %d row %zu is not a list", which, r);
            return -1;
        }
        for (size_t j = 0; j < k; j++) {
            json_t *x = nested ? json_array_get(row, j) : row;
            if (!json_is_integer(x) || json_integer_value(x) < INT32_MIN ||
                json_integer_value(x) > INT32_MAX) {
                snprintf(err, err_size, "--eplb-map: map %d entry %lld is not an integer", which,
                         (long long)count);
                return -1;
            }
            if (n0 + count >= *cap) {
                int64_t nc = *cap ? 2 * *cap : 1024;
                int32_t *v = realloc(m->v, (size_t)nc * sizeof *v);
                if (!v) {
                    snprintf(err, err_size, "--eplb-map: out of memory");
                    return -1;
                }
                m->v = v;
                *cap = nc;
            }
            m->v[n0 + count++] = (int32_t)json_integer_value(x);
        }
    }
    return count;
}

int cli_eplb_maps(const char *path, cli_eplb_maps_t *out, char *err, size_t err_size)
{
    *out = (cli_eplb_maps_t){0};
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, err_size, "--eplb-map %s: %s (line %d)", path, je.text, je.line);
        return 2;
    }
    json_t *maps = json_is_object(root) ? json_object_get(root, "maps") : NULL;
    if (json_is_object(root) && !json_is_array(maps)) {
        snprintf(err, err_size, "--eplb-map %s: an object needs \"maps\": a list of maps", path);
        json_decref(root);
        return 2;
    }
    size_t n = maps ? json_array_size(maps) : 1;
    int64_t cap = 0;
    int rc = 0;
    if (!n || n > CLI_EPLB_MAX_MAPS) {
        snprintf(err, err_size, "--eplb-map %s: \"maps\" holds %zu maps (1..%d)", path, n,
                 CLI_EPLB_MAX_MAPS);
        rc = 2;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        int64_t c =
            eplb_flatten(maps ? json_array_get(maps, i) : root, out, &cap, err, err_size, (int)i);
        if (c < 0)
            rc = 2;
        else {
            out->off[out->n + 1] = out->off[out->n] + c;
            out->n++;
        }
    }
    json_decref(root);
    if (rc)
        cli_eplb_free(out);
    return rc;
}

void cli_eplb_free(cli_eplb_maps_t *m)
{
    free(m->v);
    *m = (cli_eplb_maps_t){0};
}

void cli_eplb_use(const cli_eplb_maps_t *m, long i, reshard_infer_spec_t *is)
{
    if (!m->n)
        return;
    is->eplb_map = m->v + m->off[i % m->n];
    is->eplb_map_len = m->off[i % m->n + 1] - m->off[i % m->n];
}
