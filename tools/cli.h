/* The `reshard` command line: one function per subcommand. Each takes the
 * arguments after the subcommand name (argv[0] is the subcommand) and returns
 * the process exit status: 0 success, 1 a failed operation, 2 bad usage. */
#ifndef RESHARD_CLI_H
#define RESHARD_CLI_H

#include <stddef.h>

#include "reshard/reshard_model.h"

/** reshard plan: build the global plan of a model refit and print its counts. */
int cmd_plan(int argc, char **argv);
/** reshard run: execute a refit under MPI (tools/cmd_run.c; needs MPI). */
int cmd_run(int argc, char **argv);
/** reshard run --lose-rank R: the elastic-refit demonstration (tools/run_elastic.c),
 *  called by cmd_run with MPI initialized; @p finalize: it initialized MPI, so
 *  MPI_Finalize is this function's to call. */
int cmd_run_elastic(int rank, int size, int finalize, int argc, char **argv);
/** reshard sim: predict refit times of published cases (tools/cmd_sim.c). */
int cmd_sim(int argc, char **argv);

/** One option of a subcommand: "--name value" or "--name=value"; a flag
 *  takes no value. */
typedef struct {
    const char *name; /**< e.g. "--model" */
    enum { CLI_FLAG, CLI_STRING, CLI_INT, CLI_NUMBER } kind;
    /** int * (FLAG: set to 1), const char ** (STRING), long * (INT), double * (NUMBER) */
    void *dst;
    double min; /**< INT and NUMBER: the smallest value accepted */
    double max; /**< INT and NUMBER: the largest (0: INT32_MAX for INT, none for NUMBER) */
} cli_opt_t;

/** Smallest --staging-mb the option parser takes (MiB): a zero or negative
 *  bound is bad usage (exit 2); one over it but under the plan's 4 KiB
 *  minimum is a plan error (STAGING, exit 1). */
#define STAGING_MB_MIN 0.001

/** Parse argv[1..argc) against the @p n options @p opts, storing each value.
 *  Returns 0; 1 when -h or --help was given; 2 on a usage error (unknown
 *  option, flag given a value, missing value, unparsable number or one out of
 *  its range) with the message in @p err. */
int cli_parse(int argc, char **argv, const cli_opt_t *opts, size_t n, char *err, size_t err_size);

/** The inference side's form: --infer-dtype bf16|fp8|mxfp8 (NULL: bf16) and
 *  --fp8-scale fp32|ue8m0 (NULL: fp32; ue8m0 = power-of-two scales, as
 *  DeepGEMM wants; mxfp8 always has e8m0 scales) into @p mo. Returns 0, or 2
 *  with a message in @p err for a value not listed. */
int cli_infer_dtype(const char *infer_dtype, const char *fp8_scale, reshard_model_options_t *mo,
                    char *err, size_t err_size);

/** Help text of --infer-dtype and --fp8-scale (two lines). */
#define CLI_INFER_DTYPE_HELP                                                                       \
    "  --infer-dtype bf16|fp8|mxfp8  inference weights: bf16, or quantized from the training\n"    \
    "                     side's bf16 into e4m3 with 128x128 fp32 block scales (fp8) or 1x32\n"    \
    "                     e8m0 scales (mxfp8); embedding, output layer, norms, router stay bf16\n" \
    "  --fp8-scale fp32|ue8m0  fp8 block scales exact (fp32) or powers of two (ue8m0, DeepGEMM)\n"

/** The SGLang keys of --infer (reshard_infer_spec_parse), for the usage texts. */
#define CLI_INFER_SGLANG_HELP                                                                      \
    "                     SGLang servers: engine=sglang,tp=N (--tp-size; + engines=K\n"            \
    "                     servers, dp=D,dp_attention=on, ep=on|N (--ep-size), dp_lm_head=on,\n"    \
    "                     moe_dense_tp=1, a2a=none|deepep, moe_runner=auto|triton,\n"              \
    "                     shared_fusion=auto|off; docs/sglang-layouts.md)\n"

/** Most maps one --eplb-map file may hold. */
#define CLI_EPLB_MAX_MAPS 64

/** EPLB maps read by --eplb-map FILE (cli_eplb_maps): @p n maps back to
 *  back in @p v, map i the entries [off[i], off[i+1]). */
typedef struct {
    int32_t *v;
    int64_t off[CLI_EPLB_MAX_MAPS + 1];
    int32_t n;
} cli_eplb_maps_t;

/** Read the JSON file @p path: a physical_to_logical map (a list of integers,
 *  one map for every MoE layer), a list of per-MoE-layer lists, or
 *  {"maps": [M0, M1, ...]} with several maps of either form (one per refit,
 *  in turn; at most CLI_EPLB_MAX_MAPS). The library checks each against the
 *  model. Returns 0, or 2 with a message in @p err
 *  (file, JSON, shape). cli_eplb_free frees. */
int cli_eplb_maps(const char *path, cli_eplb_maps_t *out, char *err, size_t err_size);
void cli_eplb_free(cli_eplb_maps_t *m);
/** Map @p i of @p m (i modulo the maps) into @p is (eplb_map, eplb_map_len). */
void cli_eplb_use(const cli_eplb_maps_t *m, long i, reshard_infer_spec_t *is);

/** Ranks per NVLink domain of a named system ("h100": 8, "gb200": 72), or -1. */
int cli_system_domain_size(const char *system);

#endif
