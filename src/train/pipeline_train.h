/* The training loop's pipeline part (src/train/pipeline_train.c): with --pp P the world is
 * P x D ranks, global rank = replica * P + stage rank; the GPT-2 is cut into the schedule's
 * stages (embedding on the first, final norm and fused lm-head loss on the last, the blocks
 * as --pp-balance says), each rank runs its stages through zt_pipeline_train_step, and
 * evaluation, checkpoints and the step's measured timeline go through the stages too.
 * Internal. */
#ifndef ZT_TRAIN_PIPELINE_TRAIN_H
#define ZT_TRAIN_PIPELINE_TRAIN_H

#include "zt/train.h"

typedef struct zt__train_pp {
  int P, D;                /* pipeline ranks, replicas (P == 0: no pipeline, everything below unset) */
  int p, d;                /* this rank's place: stage rank, replica */
  zt_comm *pp_comm;        /* this replica's P ranks */
  zt_comm *dp_comm;        /* the D ranks that hold this rank's stages (NULL when D == 1 without sharding) */
  zt_zero *zero;           /* --shard full|grad_op|opt: the stages' parameters sharded over dp_comm */
  zt_comm *tied_comm;      /* the ranks of the first and the last stage, when they differ (wte is on both) */
  zt_pipeline_schedule *sched; /* compute-only, validated */
  int S, M;                /* stages, microbatches */
  int *first, *count;      /* per stage: its blocks */
  zt_gpt2 *model;          /* borrowed */
  zt_param *own;           /* the parameters of this rank's stages (what its optimizer updates) */
  int n_own;
  bool *is_own;            /* per model parameter (zt_gpt2_params order) */
  zt_tensor *tied;         /* wte when tied_comm is set */
  int64_t rows, seq;       /* of a microbatch */
  zt_tensor **x, **y;      /* per microbatch: this step's inputs and targets */
  zt_pipeline_trace trace; /* the last step's actions on this rank */
  bool replan;             /* --schedule auto: planned again from the first step's measured costs */
  double *stage_costs;     /* the last step's measured F, B, W per stage (3 S) */
} zt__train_pp;

/* Whether c asks for a pipeline. */
bool zt__train_pp_wanted(const zt_train_config *c);
/* What a pipeline run does not support with c's other options (hybrid sharding, mixed precision,
 * activation offload, the NaN injection); local, before any collective. */
ZT_NODISCARD zt_status zt__train_pp_check(const zt_train_config *c);
/* Split world (rank, size) into the pipeline and replica groups and check the sizes (world a
 * multiple of P, the batch of D, each replica's rows of M). Collective over world. */
ZT_NODISCARD zt_status zt__train_pp_open(zt__train_pp *pp, const zt_train_config *c, zt_comm *world);
/* The schedule (generated or read, validated, checked against P and M), the stages' blocks and
 * this rank's parameters. m is borrowed. Local: a bad schedule or balance fails here, before
 * any collective. */
ZT_NODISCARD zt_status zt__train_pp_setup(zt__train_pp *pp, const zt_train_config *c, zt_gpt2 *m);
/* The group of the tied embedding's holders, the other stages' parameters released, and with
 * a shard strategy the stages' parameters sharded over the replicas. *params (n returned) is
 * what the optimizer updates: the stages' parameters, or their shards' pieces. Collective. */
ZT_NODISCARD zt_status zt__train_pp_link(zt__train_pp *pp, const zt_train_config *c, zt_param **params, int *n);
/* Every parameter on every rank of the replica (each broadcast from its holder): the model
 * whole again, for a caller that takes it after the run. Collective over the pipeline group. */
ZT_NODISCARD zt_status zt__train_pp_gather_full(zt__train_pp *pp);
void zt__train_pp_free(zt__train_pp *pp); /* zeroes *pp */
/* The other ranks' parameters: keep false releases their storage (after the weights are
 * loaded), true allocates it again (before loading weights into the whole model). */
ZT_NODISCARD zt_status zt__train_pp_hold_others(zt__train_pp *pp, bool keep);

/* One optimizer step: M microbatches from next, the schedule, the replicas' average, the tied
 * sum, clipping and the update of o (over pp->own). */
ZT_NODISCARD zt_status zt__train_pp_step(zt__train_pp *pp, zt_optim *o, zt_batch_fn next, void *user_data,
                                         const zt_train_step_options *so, zt_train_step_result *out);
/* The loss of one batch (x, y) through the stages, forward only (grad off), on every rank of
 * the replica. Collective over the pipeline group. */
ZT_NODISCARD zt_status zt__train_pp_loss(zt__train_pp *pp, zt_tensor *x, zt_tensor *y, double *loss);
/* *v = mean of *v over the replicas. */
ZT_NODISCARD zt_status zt__train_pp_replica_mean(zt__train_pp *pp, double *v);

/* Checkpoints, in the single-process format (they load at any P, D, or without a pipeline):
 * rank 0 gathers every parameter and its optimizer state from the rank that holds it (of
 * replica 0) and writes. oc: the optimizer's config. Collective over world. */
ZT_NODISCARD zt_status zt__train_pp_save(zt__train_pp *pp, zt_comm *world, const zt_optim_config *oc, const char *dir,
                                         zt_optim *o, const zt_train_state *st);
/* Every rank reads the parameters and the optimizer state of its own ones (o may be NULL). */
ZT_NODISCARD zt_status zt__train_pp_load(zt__train_pp *pp, const zt_optim_config *oc, const char *dir, zt_optim *o,
                                         zt_train_state *st);

/* The last step's figures: this rank's F, B, W (BW counted as B) and waiting seconds, and the
 * pipeline's measured bubble rate (1 - sum of the ranks' compute / (P x step time)) with the
 * simulator's prediction for the schedule from the step's measured mean costs. After the first
 * step of --schedule auto, the schedule is planned again from those costs (activations capped
 * at 1F1B's peak, P units). Collective over the pipeline group. */
typedef struct zt__pp_figures {
  double f_s, b_s, w_s, wait_s; /* this rank */
  double bubble, sim_bubble, step_s;
} zt__pp_figures;
ZT_NODISCARD zt_status zt__train_pp_figures(zt__train_pp *pp, zt__pp_figures *out);
/* The last step's measured timeline (every rank's) above the simulator's from the measured
 * costs, as an SVG written by the pipeline group's rank 0 to path (atomically). Collective
 * over the pipeline group. */
ZT_NODISCARD zt_status zt__train_pp_timeline(zt__train_pp *pp, const char *path);

#endif
