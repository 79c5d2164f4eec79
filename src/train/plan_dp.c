/* The planner's prediction of data-parallel training (plan_internal.h): one process, DDP, and
 * FSDP with every sharding, each with recompute and activation offload. FIRST MODEL: states
 * and activations only; to be fitted against measured runs. */
#include <string.h>

#include "core/status_internal.h"
#include "train/plan_internal.h"

zt_status zt__plan_predict_dp(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out) {
  memset(out, 0, sizeof *out);
  const zt_plan_space *sp = in->sp;
  int64_t P = in->d.params, n = c->dp;
  int64_t rows = sp->batch / n / c->microbatches;
  double shard = c->shard == ZT_SHARD_NONE ? 1.0 : 1.0 / (double)n;
  out->tag[ZT_MEM_TAG_PARAM] = (int64_t)(4.0 * P * (c->shard == ZT_SHARD_FULL ? shard : 1.0));
  out->tag[ZT_MEM_TAG_GRAD] = (int64_t)(4.0 * P * (c->shard == ZT_SHARD_OPT || c->shard == ZT_SHARD_NONE ? 1.0 : shard));
  out->tag[ZT_MEM_TAG_OPTIM] = (int64_t)(8.0 * P * shard);
  zt_recompute modes[ZT_TRAIN_MAX_LAYERS];
  for (int i = 0; i < in->d.n_layer && i < ZT_TRAIN_MAX_LAYERS; i++) modes[i] = c->recompute;
  out->tag[ZT_MEM_TAG_ACTIVATION] =
      zt_lm_predict_activation_peak(&sp->model, rows, sp->seq, modes, 1, (zt_checkpoint_policy){0});
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) out->accounted += out->tag[t];
  out->compute_s = c->microbatches * zt__plan_compute_s(in, rows, 0, in->d.n_layer, true, true, c->recompute) +
                   zt__plan_optim_s(in, (int64_t)(P * shard));
  out->comm_s = n > 1 ? zt__plan_allreduce_s(in, (int)n, 4 * P) : 0;
  out->step_s = out->compute_s + out->comm_s;
  zt__plan_finish(in, out);
  return ZT_OK;
}
