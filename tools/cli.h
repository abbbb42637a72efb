/* The `reshard` command line: one function per subcommand. Each takes the
 * arguments after the subcommand name (argv[0] is the subcommand) and returns
 * the process exit status: 0 success, 1 a failed operation, 2 bad usage. */
#ifndef RESHARD_CLI_H
#define RESHARD_CLI_H

/** reshard plan: build the global plan of a model refit and print its counts. */
int cmd_plan(int argc, char **argv);
/** reshard run: execute a refit under MPI (tools/cmd_run.c; needs MPI). */
int cmd_run(int argc, char **argv);
/** reshard sim: predict refit times of published cases (tools/cmd_sim.c). */
int cmd_sim(int argc, char **argv);

/** Ranks per NVLink domain of a named system ("h100": 8, "gb200": 72), or -1. */
int cli_system_domain_size(const char *system);

#endif
