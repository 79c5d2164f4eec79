/* What a training run owns and its mode borrows (src/train/run.c): the ranks and the data's
 * share of them, the storage tier, the model, the optimizer and what it updates, and the
 * training microbatches. The loop (loop.c) makes it and frees it; a training mode
 * (train/mode.h) fills in what its lifecycle makes (the model, the parameters the optimizer
 * updates, the optimizer). The tier is the run's, not one mode's: FSDP keeps its states there
 * as OffloadModel does, and the loop reads its I/O.
 * Included by: src/train. */
#ifndef ZT_TRAIN_RUN_H
#define ZT_TRAIN_RUN_H

#include "zt/train.h"

typedef struct zt__run {
  const zt_train_config *c;   /* the run's options (the planner's, when it planned) */
  zt_lm_config g;             /* the model's family and shape */
  zt_comm *comm;              /* the world: every rank of the run */
  bool own_comm;              /* made by zt__run_open (freed by zt__run_close) */
  int rank, world;
  int data_rank, data_world;  /* the loader's share: rank / world, or with a pipeline of P ranks the
                               * replica (rank / P) of world / P (every rank of a pipeline reads its rows) */
  zt_store *tier;             /* the storage tier (NULL: none yet; zt__run_tier makes it) */
  zt_store_io_stats io_last;  /* the tier's I/O at the last step's end */
  zt_model model;             /* owned (zt_lm_new's); zeroed until built */
  zt_optim_config oc;
  zt_optim *opt;
  zt_param *params;           /* what the optimizer updates (the mode's link sets them) */
  int n_params;
  zt_batch_fn next;           /* the training microbatches */
  void *next_data;
} zt__run;

/* The world (comm NULL: zt_comm_world) and the data's share of it; checks that the batch divides
 * over the replicas and the options that need several ranks or FSDP. Local. */
ZT_NODISCARD zt_status zt__run_open(zt__run *r, const zt_train_config *c, zt_comm *comm);
void zt__run_close(zt__run *r); /* the world, when zt__run_open made it */
/* *v = mean of *v over the world (every rank gets it). Collective. */
ZT_NODISCARD zt_status zt__run_mean(zt__run *r, double *v);
/* Every rank sends n values, rank 0 gets world * n in rank order in all (others may pass NULL).
 * Collective. */
ZT_NODISCARD zt_status zt__run_gather(zt__run *r, const double *mine, int n, double *all);

/* A caller that takes the model after the run wants it whole in RAM: c must not keep every
 * state in the tier. */
ZT_NODISCARD zt_status zt__run_check_model_out(const zt_train_config *c);
/* Whether c asks for every state in the tier held by FSDP (offload_states with a shard strategy:
 * ZeRO-Infinity). */
bool zt__train_fsdp_stores(const zt_train_config *c);
/* Makes the tier c asks for (zt_train_config.memory.offload_model's kind), once, after checking
 * what it composes with. */
ZT_NODISCARD zt_status zt__run_tier(zt__run *r);
/* The tier's I/O since the last call (bytes and busy time per direction) into info; without a
 * tier, nothing. */
void zt__run_tier_io(zt__run *r, zt_train_step_info *info);
/* The tier's I/O since the last call is no step's (the set-up's, an evaluation's). */
void zt__run_tier_io_skip(zt__run *r);
void zt__run_tier_close(zt__run *r); /* last: the model and the optimizer may have had bytes in it */

/* r->model from r->g: in RAM, or into_tier built straight into the tier (made now), so that the
 * whole model is never in RAM. */
ZT_NODISCARD zt_status zt__run_build(zt__run *r, bool into_tier);
/* r->opt (r->oc) over r->params. */
ZT_NODISCARD zt_status zt__run_optim(zt__run *r);
/* A checkpoint of a run whose ranks hold the same values (one process, DDP, OffloadModel): rank
 * 0 writes, the others wait for it. */
ZT_NODISCARD zt_status zt__run_save_replicated(zt__run *r, const zt_train_state *st);

#endif
