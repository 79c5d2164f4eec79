/* The options that define a training run (src/train/run_options.c): built from a config as
 * name/value strings, compared between ranks at start-up, partly recorded in checkpoints.
 * Internal. */
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

/* Every option of c (with g, the model config it resolves to) that must agree between ranks. */
void zt__run_options(const zt_train_config *c, const zt_gpt2_config *g, int world, zt__run_opts *o);
/* Adds the token counts and a hash of the data, so ranks reading different files are told. */
void zt__run_options_add_data(zt__run_opts *o, const zt_tokens *train, const zt_tokens *val);
/* The recorded entries as "name=value\n" lines (for zt_train_state.options). */
void zt__run_options_record(const zt__run_opts *o, char *buf, size_t cap);

#endif
