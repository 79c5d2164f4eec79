/* The `zt` command's subcommands. Only cli/ prints and exits. */
#ifndef ZT_CLI_H
#define ZT_CLI_H

#include <stdio.h>

#include "zt/plan.h"
#include "zt/train.h"

int zt_cmd_train(int argc, char **argv);
int zt_cmd_sample(int argc, char **argv);
int zt_cmd_tokenize(int argc, char **argv);
int zt_cmd_plot(int argc, char **argv);
/* zt plot --recompute BENCH.jsonl --out PLOT.svg (cli/plot_recompute.c) */
int zt_cli_plot_recompute(const char *in, const char *out);
/* zt plot --plan ACCURACY.jsonl --out PLOT.svg (cli/plot_plan.c): the planner's predicted
 * peak RSS and step time against measured ones */
int zt_cli_plot_plan(const char *in, const char *out);
int zt_cmd_bench(int argc, char **argv);
/* The options of zt bench step and dp: --steps, --warmup-steps and any zt train option. 0, or
 * the exit code after printing what was wrong. */
int zt_cli_bench_options(const char *cmd, int argc, char **argv, zt_train_config *c, int64_t *steps, int64_t *warm);
/* zt bench dp (cli/bench_dp.c): data-parallel steps under mpirun, one JSON object */
int zt_cli_bench_dp(int argc, char **argv);
/* zt consolidate SHARDED_DIR OUT_DIR (cli/consolidate_cmd.c) */
int zt_cmd_consolidate(int argc, char **argv);
/* zt schedule: pipeline schedules generated or read, validated, simulated, rendered (cli/schedule_cmd.c) */
int zt_cmd_schedule(int argc, char **argv);

/* zt plan (cli/plan_cmd.c): the planner's space, predictions and choice */
int zt_cmd_plan(int argc, char **argv);
/* The planner's figures as lines after prefix (cli/plan_print.c): a prediction by part; the
 * calibration with each figure's source; a prediction beside what a run measured. */
void zt_cli_plan_prediction(FILE *f, const char *prefix, const zt_plan_prediction *p);
void zt_cli_plan_calibration(FILE *f, const char *prefix, const zt_plan_calibration *c);
void zt_cli_plan_versus(FILE *f, const char *prefix, const zt_plan_prediction *p, const zt_train_result *r);
/* The same as one JSON object in path (written whole, then renamed over it): the configuration,
 * its flags, where it came from, the calibration, the prediction and the measured figures. */
int zt_cli_plan_report(const char *path, const zt_plan_run *pr, const zt_train_result *r);
/* --plan-report's path can be written at the run's end (its folder is there and writable, it is not
 * a folder): 0, or 1 after saying why (checked before step 1, so no run ends without its report). */
int zt_cli_plan_report_check(const char *path);

/* How the command was called (argv[0]: "build/zt"), for commands it prints. */
extern const char *zt_cli_program;
/* The candidate (a NULL-terminated list) closest to a misspelt name, or NULL when none is close
 * (a few letters off, by edit distance): for "did you mean ...?". */
const char *zt_cli_closest(const char *name, const char *const *candidates);
/* "1 step", "3 steps": n and the word, plural when n != 1; buf of 64 bytes. */
const char *zt_cli_count(int64_t n, const char *word, char buf[64]);
/* "1.5 GiB" style; buf of 32 bytes. */
const char *zt_cli_bytes(double b, char *buf);
/* Print zt_last_error() (fields written as flags: zt_cli_train_message) after "zt CMD: " and
 * return the exit code 1. */
int zt_cli_fail(const char *cmd);
/* Is "--help" or "-h" among the arguments? */
bool zt_cli_wants_help(int argc, char **argv);
/* The argument at argv[*i] (advances *i past it), the one `--key value` loop of every
 * command: an option "--name value" or "--name=value" (0 with name, no dashes, and *value
 * set), a flag named in `flags` ("recompute out": a space-separated list, or NULL) given as
 * "--name" (0 with name set and *value NULL), or a positional argument (0 with name "" and
 * *value the argument). 1 when *i is at the end; 2 after printing why the argument is wrong:
 * a single-dash option, a missing value, or a value that is itself an option ("--data
 * --config" is refused, not read as a file named --config). */
int zt_cli_arg(const char *cmd, int argc, char **argv, int *i, const char *flags, char name[64], const char **value);
/* zt_cli_arg for commands that take options only: a positional argument is refused (2). */
int zt_cli_option(const char *cmd, int argc, char **argv, int *i, char name[64], const char **value);
/* zt train's options (cli/train_options.c: the library's option table and the command's own
 * rows give --help, flags, config-file keys and the flag names in messages). The command's own
 * options, beside zt_train_config: */
typedef struct zt_cli_train_opts {
  int64_t log_every, sample_len;
  char plan_report[512]; /* the planner's prediction and the run's measured figures, as JSON ("" = none) */
} zt_cli_train_opts;
zt_cli_train_opts zt_cli_train_opts_default(void);
/* Set the option `name` (a flag without dashes, or a config-file key) from a string. */
zt_status zt_cli_train_set(zt_train_config *c, zt_cli_train_opts *own, const char *name, const char *value);
/* Every option with its default and help. */
void zt_cli_train_usage(FILE *f);
/* A library message with the zt_train_config fields it names ("zt_train_config.data.batch")
 * written as the flags that set them ("--batch"). */
void zt_cli_train_message(const char *msg, char *out, size_t cap);
/* An integer option in [lo, hi]: 0, or 2 after printing what was wrong. */
int zt_cli_i64(const char *cmd, const char *name, const char *value, int64_t lo, int64_t hi, int64_t *out);

#endif
