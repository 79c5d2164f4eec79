/* The training loop's data-parallel part (src/train/parallel.c): which strategy a config
 * asks for (none, DDP, FSDP), what the optimizer steps over, and the per-step collectives
 * of the loop (global loss, clipping, after-step, per-rank figures). Internal. */
#ifndef ZT_TRAIN_PARALLEL_H
#define ZT_TRAIN_PARALLEL_H

#include "zt/train.h"

typedef struct zt__train_dp {
  zt_comm *comm; /* the data-parallel group */
  bool own_comm; /* made by setup (freed by zt__train_dp_free) */
  int rank, world;
  int data_rank, data_world; /* the loader's share: rank / world, or with a pipeline of P ranks the
                              * replica (rank / P) of world / P (every rank of a pipeline reads its rows) */
  zt_data_parallel *strategy; /* attached to the model (NULL: plain training) */
  zt_ddp *ddp;   /* its DDP: --shard none on N > 1 ranks */
  zt_fsdp *fsdp; /* its FSDP: any other --shard */
  zt_param *params; /* what the optimizer updates: the model's parameters or FSDP's pieces */
  int n_params;
  zt_dp_stats last; /* strategy counters at the end of the previous step */
} zt__train_dp;

/* Pick the group (comm NULL: zt_comm_world) and check the batch divides by its replicas. */
ZT_NODISCARD zt_status zt__train_dp_open(zt__train_dp *dp, const zt_train_config *c, zt_comm *comm);
/* Wrap m as c asks (after the model's weights are final: init-from loaded); FSDP keeps its
 * states in state_store (borrowed; NULL: in RAM). */
ZT_NODISCARD zt_status zt__train_dp_wrap(zt__train_dp *dp, const zt_train_config *c, zt_gpt2 *m, zt_store *state_store);
void zt__train_dp_free(zt__train_dp *dp);
/* *v = mean of *v over the ranks (every rank gets it). */
ZT_NODISCARD zt_status zt__train_dp_mean(zt__train_dp *dp, double *v);
/* Global grad-norm clipping over what the optimizer sees. */
ZT_NODISCARD zt_status zt__train_dp_clip(zt__train_dp *dp, double max_norm, double *norm);
/* Multiply the grads by factor (undoing loss scaling). */
ZT_NODISCARD zt_status zt__train_dp_scale_grads(zt__train_dp *dp, double factor);
/* After the optimizer step: FSDP's after-step, then zero the grads. */
ZT_NODISCARD zt_status zt__train_dp_after_step(zt__train_dp *dp, zt_optim *o);
/* dp as the training step sees it (zt_train_step), borrowed. */
zt_dp_strategy zt__train_dp_strategy(zt__train_dp *dp);
/* This step's communication (counter delta since the last call). */
void zt__train_dp_step_stats(zt__train_dp *dp, zt_dp_stats *out);
/* Per-rank figures for the metrics line: every rank sends n values, rank 0 gets
 * world * n in rank order in all (others may pass NULL). Collective. */
ZT_NODISCARD zt_status zt__train_dp_gather(zt__train_dp *dp, const double *mine, int n, double *all);
/* Checkpoints: DDP / plain: rank 0 writes; FSDP: sharded (or full with save_full). */
ZT_NODISCARD zt_status zt__train_dp_save(zt__train_dp *dp, const zt_train_config *c, const char *dir, zt_gpt2 *m, zt_optim *o,
                            const zt_train_state *st);
ZT_NODISCARD zt_status zt__train_dp_load(zt__train_dp *dp, const char *dir, zt_gpt2 *m, zt_optim *o, zt_train_state *st);
/* Before eval/sampling outside training and before handing the model out: FSDP gathers the
 * full parameters (release undoes it). No-ops otherwise. */
ZT_NODISCARD zt_status zt__train_dp_gather_full(zt__train_dp *dp);
ZT_NODISCARD zt_status zt__train_dp_release_full(zt__train_dp *dp);

#endif
