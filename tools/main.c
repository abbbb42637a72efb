/* `reshard`: dispatch to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "reshard/reshard.h"

/* Subcommands built from other files may be absent from a build (no MPI):
 * weak references resolve to NULL then. */
#pragma weak cmd_run
#pragma weak cmd_sim

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
            "\n"
            "M: a shipped model name (deepseek-v3, kimi-k2, qwen3-235b-a22b, qwen3-30b-a3b,\n"
            "   qwen3-0.6b, qwen2.5-7b-instruct, qwen2.5-72b-instruct, qwen2-57b-a14b,\n"
            "   mixtral-8x7b, llama-3.1-8b, llama-3.3-70b) or a path to a HF config.json.\n"
            "train SPEC: tp=4,pp=8,ep=16,dp=4 (+ cp=, etp= (default tp), vpp=, first=, last=);\n"
            "infer SPEC: tp=8,dp=16 (+ ep=on).\n"
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
