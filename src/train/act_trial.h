/* The activation trial of zt train (src/train/act_trial.c; zt_train_config.memory.
 * activation_trial): under OffloadModel's keep-graph mode with activation offload, the run's
 * third step (ZT_ACT_TRIAL_FIRST) offloads every slice's activations, its fourth recomputes
 * every slice's blocks, and from its fifth each slice keeps the way its forward + backward took
 * less time in.
 * Included by: src/train (and its tests). */
#ifndef ZT_TRAIN_ACT_TRIAL_H
#define ZT_TRAIN_ACT_TRIAL_H

#include "zt/offload_model.h"
#include "zt/strategy.h"
#include "zt/train.h"

typedef struct zt__act_trial {
  zt_offload_model *om;     /* borrowed (NULL: no trial) */
  zt_recompute_plan *plan;  /* borrowed: the blocks' recompute plan the trial sets */
  int L;                    /* the model's blocks */
  int64_t first;            /* the step (1-based) that offloads every slice's; first + 1 recomputes them */
  double *t0;               /* [slices]: the slice times (forward + backward) when the trial's step began */
  zt_act_choice *out;       /* the run's result, filled as the trial goes */
} zt__act_trial;

/* A trial for this run when c asks for one (activation_trial ON; the planner turns AUTO into ON
 * where it chose activation offload) and start + ZT_ACT_TRIAL_FIRST + 2 <= c->steps (start: the steps done before
 * this run); otherwise t stays off. ON without OffloadModel's keep-graph mode and activation
 * offload (om NULL, or not that mode): ZT_STATUS_INVALID_ARG saying so. */
ZT_NODISCARD zt_status zt__act_trial_open(zt__act_trial *t, const zt_train_config *c, zt_offload_model *om,
                                          zt_recompute_plan *plan, int L, int64_t start, zt_act_choice *out);
/* Before step (1-based): on a trial step, every block offloaded (*kind OFFLOAD) or recomputed
 * (RECOMPUTE); else *kind NONE. */
ZT_NODISCARD zt_status zt__act_trial_before(zt__act_trial *t, int64_t step, zt_act_trial_step *kind);
/* After step (step_s seconds): the slices' times taken; after the trial's second step the choice
 * made (zt__act_choose) and set, *chosen true. */
ZT_NODISCARD zt_status zt__act_trial_after(zt__act_trial *t, int64_t step, double step_s, bool *chosen);
void zt__act_trial_close(zt__act_trial *t);

/* The choice from c's slices, blocks and times: each slice with blocks recomputes them when its
 * recompute_s is below its offload_s (a tie offloads: no compute added); writes c->plan (L
 * letters) and c->recomputed_slices. */
void zt__act_choose(zt_act_choice *c, int L);

#endif
