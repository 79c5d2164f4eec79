/* A training mode (src/train/mode.c): how a run builds, links, steps, evaluates, saves and
 * loads its model, as a table of calls plus the mode's own state, in the style of a device
 * backend. The loop (loop.c) chooses the mode once and then calls only the thin wrappers
 * below; it never asks which mode runs. Three implementations, a file each:
 *   zt__mode_data_parallel  data_parallel_train.c  one process, DDP, or FSDP with any sharding
 *                                                  (states in RAM or, ZeRO-Infinity, in the tier)
 *   zt__mode_pipeline       pipeline_train.c       P-rank pipelines, D replicas of them
 *   zt__mode_offload        offload_train.c        OffloadModel, its states in RAM or in the tier
 * A mode borrows what the run owns (train/run.h) and fills in what its lifecycle makes.
 * docs/training-modes.md says how to add one.
 * Included by: src/train. */
#ifndef ZT_TRAIN_MODE_H
#define ZT_TRAIN_MODE_H

#include "train/run.h"

typedef struct zt__mode zt__mode;

/* The calls, in lifecycle order. Required members are called as they are; an optional one may
 * be NULL, and its wrapper then does what the comment says. */
typedef struct zt__mode_i {
  /* --- facts */
  const char *unit; /* required: what one data share is called in messages ("ranks", "replicas") */
  bool own_stream;  /* each rank reads its own rows and draws its own random stream (seed + rank),
                     * which a resume continues at rank 0's saved offset; false: the ranks of a
                     * replica read its rows, and a resume takes rank 0's stream on every rank */
  /* --- lifecycle */
  /* required: the name in the metrics ("single", "ddp", "full", "offload", "pipeline+ddp", ...) */
  const char *(*name)(zt__mode *m);
  /* required: options that do not go with this mode. Local, before any collective. */
  zt_status (*check)(zt__mode *m);
  /* optional (NULL: nothing): the mode's groups of ranks, once the ranks agree on their options.
   * Collective over the world. */
  zt_status (*open)(zt__mode *m);
  /* required: run->model from run->g, in RAM or into the run's tier (zt__run_build), and what
   * the mode cuts it into. The random stream is the run's seed's (every rank builds the same
   * model). Local: a bad option fails here, before the ranks agree. */
  zt_status (*build)(zt__mode *m);
  /* required: after the weights are final but for a resume (init-from loaded): the strategy
   * attached, run->params (what the optimizer updates), run->opt over them (zt__run_optim) and
   * its state where the mode keeps it. Collective. */
  zt_status (*link)(zt__mode *m);
  /* required: a checkpoint written into run->c->checkpoint.save / read from .resume (st: the
   * training state written / read back). Collective. */
  zt_status (*save)(zt__mode *m, const zt_train_state *st);
  zt_status (*load)(zt__mode *m, zt_train_state *st);
  /* optional (NULL: nothing): after a resume's load (or after link when none), the parameters
   * final for step 1. */
  zt_status (*ready)(zt__mode *m);
  /* optional (NULL: none): the OffloadModel whose slices the activation trial times. */
  zt_offload_model *(*offload_model)(zt__mode *m);
  /* --- a step */
  /* required: one optimizer step over so->microbatches microbatches from run->next (out as
   * zt_train_step's; out->interrupted when the ranks agreed to stop inside it). */
  zt_status (*step)(zt__mode *m, const zt_train_step_options *so, zt_train_step_result *out);
  /* required: the loss of one validation batch (grad off), and the mean of a value over the
   * ranks that evaluate different rows. Collective. */
  zt_status (*loss)(zt__mode *m, zt_tensor *x, zt_tensor *y, double *loss);
  zt_status (*mean)(zt__mode *m, double *v);
  /* optional (NULL: nothing): the mode's figures of the step just done (communication, the
   * pipeline's timings) into info. May be collective. */
  zt_status (*stats)(zt__mode *m, zt_train_step_info *info);
  /* --- the end */
  /* optional (NULL: ZT_STATUS_INVALID_ARG): the last step's measured timeline as an SVG at path. */
  zt_status (*timeline)(zt__mode *m, const char *path);
  /* optional (NULL: nothing): the run is over; the mode's figures of the run into res, and the
   * model's parameters in RAM again where the mode held them elsewhere. */
  void (*end)(zt__mode *m, zt_train_result *res);
  /* optional (NULL: the model is whole already): usable full parameters in the model, for a
   * caller that takes it. Collective. */
  zt_status (*gather)(zt__mode *m);
  /* required: frees what the mode made (after the optimizer, before the model and the tier). */
  void (*close)(zt__mode *m);
} zt__mode_i;

struct zt__mode {
  const zt__mode_i *iface;
  void *ctx;    /* the implementation's state */
  zt__run *run; /* borrowed: what the run owns */
};

/* The implementations: each makes its state (freed by zt__mode_close) over run (borrowed). */
ZT_NODISCARD zt_status zt__mode_data_parallel(zt__run *run, zt__mode *out);
ZT_NODISCARD zt_status zt__mode_pipeline(zt__run *run, zt__mode *out);
ZT_NODISCARD zt_status zt__mode_offload(zt__run *run, zt__mode *out);
/* Whether c asks for a pipeline (parallel.pp > 1), for OffloadModel (memory.offload_model, unless
 * FSDP holds the states: zt__train_fsdp_stores). */
bool zt__train_pp_wanted(const zt_train_config *c);
bool zt__train_om_wanted(const zt_train_config *c);

/* The wrappers: what the loop calls. */
const char *zt__mode_unit(const zt__mode *m);
const char *zt__mode_name(zt__mode *m);
ZT_NODISCARD zt_status zt__mode_check(zt__mode *m);
ZT_NODISCARD zt_status zt__mode_open(zt__mode *m);
ZT_NODISCARD zt_status zt__mode_build(zt__mode *m);
ZT_NODISCARD zt_status zt__mode_link(zt__mode *m);
ZT_NODISCARD zt_status zt__mode_save(zt__mode *m, const zt_train_state *st);
/* The mode's load, then st->rng made this rank's (own_stream: seed + rank). */
ZT_NODISCARD zt_status zt__mode_load(zt__mode *m, zt_train_state *st);
ZT_NODISCARD zt_status zt__mode_ready(zt__mode *m);
zt_offload_model *zt__mode_offload_model(zt__mode *m);
ZT_NODISCARD zt_status zt__mode_step(zt__mode *m, const zt_train_step_options *so, zt_train_step_result *out);
ZT_NODISCARD zt_status zt__mode_loss(zt__mode *m, zt_tensor *x, zt_tensor *y, double *loss);
ZT_NODISCARD zt_status zt__mode_mean(zt__mode *m, double *v);
ZT_NODISCARD zt_status zt__mode_stats(zt__mode *m, zt_train_step_info *info);
ZT_NODISCARD zt_status zt__mode_timeline(zt__mode *m, const char *path);
void zt__mode_end(zt__mode *m, zt_train_result *res);
ZT_NODISCARD zt_status zt__mode_gather(zt__mode *m);
void zt__mode_close(zt__mode *m); /* NULL iface (never made) is a no-op; zeroes *m */

/* For implementations: the options that only a pipeline takes are errors (a check member). */
ZT_NODISCARD zt_status zt__mode_check_no_pipeline(const zt_train_config *c);

#endif
