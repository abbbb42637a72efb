/* `reshard`: dispatch to the subcommands. */
#define _DEFAULT_SOURCE /* scandir, alphasort */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "reshard/reshard.h"
#include "reshard/reshard_model.h"

/* Subcommands built from other files may be absent from a build (no MPI):
 * weak references resolve to NULL then. */
#pragma weak cmd_run
#pragma weak cmd_sim

/* "M: ..." with the models shipped in reshard_data_dir()/models (NAME.json), read
 * now, so that the list is what this installation has. */
static void print_models(FILE *out)
{
    const char *data = reshard_data_dir();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models", data ? data : "");
    struct dirent **ents = NULL;
    int n = data ? scandir(dir, &ents, NULL, alphasort) : -1, column = 0, listed = 0;
    fprintf(out, "M: a path to a HF config.json or a shipped model name:\n");
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        int len = (int)strlen(name);
        if (len > 5 && !strcmp(name + len - 5, ".json")) {
            if (column && column + len - 3 > 78) {
                fprintf(out, ",\n");
                column = 0;
            }
            column += fprintf(out, "%s%.*s", column ? ", " : "   ", len - 5, name);
            listed++;
        }
        free(ents[i]);
    }
    free(ents);
    if (listed)
        fprintf(out, "\n");
    else
        fprintf(out, "   (none found: no data directory; set RESHARD_DATA_DIR)\n");
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: reshard <command> [options]\n"
            "\n"
            "commands:\n"
            "  plan  --model M --train SPEC --infer SPEC [--json] [--layers K] [--mtp]\n"
            "        [--dtype bf16|fp8] [--domain-size N | --system h100|gb200] [--rank R]\n"
            "        [--staging-mb S]   build the refit plan of every rank (or rank R's own)\n"
            "        and print its byte counts\n"
            "  sim   [--case ID | --model M --train SPEC --infer SPEC --system S] [--json]\n"
            "        predict refit times on a modelled cluster\n"
            "  run   --model M --train SPEC --infer SPEC [--layers K] [--baseline] [--iters I]\n"
            "        [--json]   execute a refit under mpirun (ranks [0, train world) train)\n"
            "\n");
    print_models(out);
    fprintf(out,
            "train SPEC: tp=4,pp=8,ep=16,dp=4 (+ cp=, etp= (default tp), vpp=, first=, last=,\n"
            "            convention=megatron-lm (default) | megatron-bridge);\n"
            "infer SPEC: tp=8,engines=16 (+ dp= (vLLM's own, inside each engine), ep=on,\n"
            "            vllm=0.25 (default) | 0.24).\n"
            "'reshard <command> --help' describes a command's options.\n");
}

int cli_system_domain_size(const char *system)
{
    if (!strcmp(system, "h100"))
        return 8;
    if (!strcmp(system, "gb200"))
        return 72;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("reshard %d.%d.%d\n", RESHARD_VERSION_MAJOR, RESHARD_VERSION_MINOR,
               RESHARD_VERSION_PATCH);
        return 0;
    }
    int (*fn)(int, char **) = NULL;
    if (!strcmp(cmd, "plan"))
        fn = cmd_plan;
    else if (!strcmp(cmd, "run"))
        fn = cmd_run;
    else if (!strcmp(cmd, "sim"))
        fn = cmd_sim;
    else {
        fprintf(stderr, "reshard: unknown command '%s'\n\n", cmd);
        usage(stderr);
        return 2;
    }
    if (!fn) {
        fprintf(stderr, "reshard: command '%s' is not built in this binary%s\n", cmd,
                !strcmp(cmd, "run") ? " (it needs MPI)" : "");
        return 2;
    }
    return fn(argc - 1, argv + 1);
}
