/* The options that define a training run (src/train/run_options.c): built from a config as
 * name/value strings, compared between ranks at start-up, partly recorded in checkpoints.
 * Included by: src/train. */
#ifndef ZT_TRAIN_RUN_OPTIONS_H
#define ZT_TRAIN_RUN_OPTIONS_H

#include "zt/train.h"

#define ZT__RUN_OPTS_MAX 64
#define ZT__RUN_OPT_VALUE 528 /* a path of up to 511 bytes, and some */
typedef struct zt__run_opts {
  int n;          /* entries */
  int n_recorded; /* the first n_recorded are the ones a checkpoint keeps */
  const char *name[ZT__RUN_OPTS_MAX];
  char value[ZT__RUN_OPTS_MAX][ZT__RUN_OPT_VALUE];
} zt__run_opts;

/* Every option of c (with g, the model config it resolves to) that must agree between ranks;
 * resumed: the checkpoint the run continues (NULL: none), whose resolved warm-up an unset one keeps. */
void zt__run_options(const zt_train_config *c, const zt_lm_config *g, int world, const zt_train_state *resumed,
                     zt__run_opts *o);
/* The learning-rate schedule a run uses: the warm-up and floor it was given, else (warm-up) the
 * one the resumed checkpoint's run resolved (st may be NULL), else the defaults
 * (min(100, steps / 10) and lr / 10). */
void zt__run_schedule(const zt_train_config *c, const zt_train_state *st, int64_t *warmup, double *min_lr);
/* Adds the token counts and a hash of the data, so ranks reading different files are told. */
void zt__run_options_add_data(zt__run_opts *o, const zt_tokens *train, const zt_tokens *val);
/* The recorded entries as "name=value\n" lines (for zt_train_state.options). */
void zt__run_options_record(const zt__run_opts *o, char *buf, size_t cap);

#endif
