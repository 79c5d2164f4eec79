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

/* What every predictor starts from: the space, the calibration, the model's sizes, the limit (what
 * a run's allocator cache is bounded by). */
typedef struct zt__plan_in {
  const zt_plan_space *sp;
  const zt_plan_calibration *cal;
  zt_lm_dims d;
  int64_t limit; /* the memory a rank is planned for (sp->mem_limit, else the memory available) */
} zt__plan_in;

/* FSDP with its states in the tier (ZeRO-Infinity over ranks: zt_fsdp_options.state_store), which
 * the data-parallel predictor counts; OffloadModel otherwise when a tier holds the model. */
static inline bool zt__plan_fsdp_states(const zt_plan_config *c) {
  return c->offload_model && c->offload_states && c->shard != ZT_SHARD_NONE;
}

/* DDP's gradient bucket (zt_ddp's default, and pipeline_step.c's BUCKET_BYTES over a pipeline's
 * replicas): what one all-reduce carries. */
#define ZT__PLAN_DDP_BUCKET (25.0 * 1048576.0)

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
/* How much faster a rank computes when k of the world's ranks compute at once than when all do: the
 * calibration times every rank computing together, and where the ranks' threads outnumber this
 * machine's cores (ranks x threads > cores, all ranks on it) a rank that waits gives its cores to
 * the others. 1 where the cores are not shared or the calibration was not made at the world. */
double zt__plan_shared_speedup(const zt__plan_in *in, double k);
/* Whether the ranks' threads outnumber the cores (the collectives then progress on the cores the
 * compute needs, and hide behind none of it). */
bool zt__plan_cores_shared(const zt__plan_in *in);
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
/* The fused head's chunk of logits over rows tokens of a V-entry vocabulary, in rows (lm_head.c's
 * chunk_rows: at most 100 MiB of logits, 16 to 512 rows, equal chunks rounded up to 16 rows). */
double zt__plan_head_rows(double rows, double V);
/* Parameters of blocks [b0, b1) with the embedding / head parts. */
int64_t zt__plan_params(const zt__plan_in *in, int b0, int b1, bool embed, bool head);
/* The calibration's base into p, and p->rss summed from p->accounted, p->cache (the predictor's
 * own: plan_cost.c's pool rule) and p->io. */
void zt__plan_finish(const zt__plan_in *in, zt_plan_prediction *p);

/* ---- the calibration as a JSON object into b (plan_calib.c: a calibration file's, and a plan's) */
struct zt__buf;
void zt__plan_put_calibration(struct zt__buf *b, const zt_plan_calibration *c);

/* ---- what the calibration measures with, shared with the --mem-limit planner (plan_calib.c) */
/* One GEMM shaped like the widest weight gradient of a step of m on `tokens` tokens a microbatch,
 * so that OpenBLAS's per-thread buffers, resident for the process's life, are in the RSS read
 * after it. Out of memory is ignored (the run will say so). */
void zt__plan_warm_blas(const zt_lm_config *m, int64_t tokens);
/* The read and write bytes/s of a store of tier (DISK: a spill file in dir, NULL $TMPDIR or /tmp;
 * any other tier: RAM), bytes (at least 1 MiB, rounded down to pages) put and got back once
 * through a page-aligned buffer outside the allocator's cache (accounted TEMP while it lives). A
 * store that cannot be made or fails is its status (the dir named), *rd = *wr = 0. */
ZT_NODISCARD zt_status zt__plan_store_rate(zt_offload_tier tier, const char *dir, size_t bytes, double *rd, double *wr);

/* ---- the predictors: c is valid for sp (plan.c checks pp x dp = world, the schedule, ...) */
ZT_NODISCARD zt_status zt__plan_predict_dp(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out);
ZT_NODISCARD zt_status zt__plan_predict_pipeline(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out);
ZT_NODISCARD zt_status zt__plan_predict_offload(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out);

#endif
