/* Option parsing shared by the subcommands: one table per command. */
#include <stdint.h>
#include <math.h>
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
    double x = strtod(val, &end);
    if (!*val || *end || isnan(x) || (o->kind == CLI_INT && x != floor(x))) {
        snprintf(err, err_size, "%s: '%s' is not a valid %s", o->name, val,
                 o->kind == CLI_INT ? "whole number" : "number");
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
    else {
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
