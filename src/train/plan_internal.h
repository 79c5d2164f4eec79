/* The planner's internals shared by its files (src/train/plan*.c): the cost model every
 * family's prediction uses (plan_cost.c) and one predictor per training mode:
 *   plan_dp.c        one process, DDP, FSDP (full, grad_op, opt, hybrid), with recompute and
 *                    activation offload
 *   plan_pipeline.c  P-stage pipelines of every schedule family, D replicas (DDP or FSDP of each stage)
 *   plan_offload.c   OffloadModel and every state in the tier (the --mem-limit planner's predictor,
 *                    zt_offload_plan_predict)
 * plan.c enumerates and ranks; plan_file.c reads and writes plans; plan_calib.c measures.
 * Included by: src/train (and the planner's tests). */
#ifndef ZT_TRAIN_PLAN_INTERNAL_H
#define ZT_TRAIN_PLAN_INTERNAL_H

#include "zt/plan.h"

/* What every predictor starts from: the space, the calibration, the model's sizes. */
typedef struct zt__plan_in {
  const zt_plan_space *sp;
  const zt_plan_calibration *cal;
  zt_lm_dims d;
} zt__plan_in;

/* ---- the cost model (plan_cost.c) */
/* Seconds of forward + backward of `tokens` tokens (rows x seq, at seq tokens a row) through
 * blocks [b0, b1) of the model, with the embedding when embed, the final norm, head and loss
 * when head; every block in mode recompute (its forward's recomputed share added). */
double zt__plan_compute_s(const zt__plan_in *in, int64_t rows, int b0, int b1, bool embed, bool head,
                          zt_recompute recompute);
/* Forward alone, backward's input grads (B) and weight grads (W) of the same span (split
 * backward: b + w is the backward of zt__plan_compute_s less its recompute). */
void zt__plan_compute_fbw(const zt__plan_in *in, int64_t rows, int b0, int b1, bool embed, bool head, double *f,
                          double *b, double *w);
/* Seconds of the optimizer's update of n parameters (AdamW: memory bound). */
double zt__plan_optim_s(const zt__plan_in *in, int64_t n);
/* Seconds of an all-reduce / all-gather / reduce-scatter of bytes (the whole buffer's) over n ranks,
 * and of one point-to-point message. */
double zt__plan_allreduce_s(const zt__plan_in *in, int n, int64_t bytes);
double zt__plan_allgather_s(const zt__plan_in *in, int n, int64_t bytes);
double zt__plan_p2p_s(const zt__plan_in *in, int64_t bytes);
/* Seconds of data-parallel communication c's step leaves exposed beside compute_s seconds of
 * compute (DDP's bucketed all-reduce behind backward, FSDP's gathers behind prefetch and its
 * reduce-scatters behind backward, ZeRO-1's all-gather after the update), for Pb bytes of
 * parameters, blk of a block (an FSDP unit) and root of the root unit. */
double zt__plan_dp_comm_s(const zt__plan_in *in, const zt_plan_config *c, double Pb, double blk, double root,
                          double compute_s);
/* Seconds of disk traffic (read and written bytes a step) not hidden behind compute_s. */
double zt__plan_io_s(const zt__plan_in *in, double read, double written, double compute_s);
/* Parameters of blocks [b0, b1) with the embedding / head parts. */
int64_t zt__plan_params(const zt__plan_in *in, int b0, int b1, bool embed, bool head);
/* The process's RAM besides the accounting: the calibration's base, plus the allocator's cache
 * that a run of `live` accounted bytes at most keeps (zt_mem_cache_limit's rule), into p. Sums
 * p->rss from p->accounted. */
void zt__plan_finish(const zt__plan_in *in, zt_plan_prediction *p);

/* ---- the predictors: c is valid for sp (plan.c checks pp x dp = world, the schedule, ...) */
ZT_NODISCARD zt_status zt__plan_predict_dp(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out);
ZT_NODISCARD zt_status zt__plan_predict_pipeline(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out);
ZT_NODISCARD zt_status zt__plan_predict_offload(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out);

#endif
