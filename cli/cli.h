/* The `zt` command's subcommands. Only cli/ prints and exits. */
#ifndef ZT_CLI_H
#define ZT_CLI_H

#include "zt/train.h"

int zt_cmd_train(int argc, char **argv);
int zt_cmd_sample(int argc, char **argv);
int zt_cmd_tokenize(int argc, char **argv);
int zt_cmd_plot(int argc, char **argv);
/* zt plot --recompute BENCH.jsonl --out PLOT.svg (cli/plot_recompute.c) */
int zt_cli_plot_recompute(const char *in, const char *out);
int zt_cmd_bench(int argc, char **argv);
/* zt bench dp (cli/bench_dp.c): data-parallel steps under mpirun, one JSON object */
int zt_cli_bench_dp(int argc, char **argv);
/* zt consolidate SHARDED_DIR OUT_DIR (cli/consolidate_cmd.c) */
int zt_cmd_consolidate(int argc, char **argv);

/* "1.5 GiB" style; buf of 32 bytes. */
const char *zt_cli_bytes(double b, char *buf);
/* Print zt_last_error() after "zt CMD: " and return the exit code 1. */
int zt_cli_fail(const char *cmd);

#endif
