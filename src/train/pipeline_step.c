/* One optimizer step of a pipeline run (zt_pipeline_train_step): the schedule over the
 * microbatches (zt_pipeline_run), then what the ranks must agree on: the mean loss (computed
 * on the last stage's rank), the tied parameters' grads (summed over the ranks, so every
 * copy takes the same update and they stay identical), the global grad norm (each rank's
 * own parameters, a tied one counted once) and its clipping, and the update. */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "zt/train.h"

/* Whether t is one of the tied parameters. */
static bool is_tied(const zt_pipeline_step_options *o, const zt_tensor *t) {
  for (int i = 0; i < o->n_tied; i++)
    if (o->tied[i] == t) return true;
  return false;
}

/* The mean loss over the microbatches: the last stage's rank has them, the others zeros;
 * with replicas, each microbatch's loss averaged over them (zt_train_step's order under DDP). */
static zt_status mean_loss(const zt_pipeline_step_options *o, const double *losses, int M, double *out) {
  zt_tensor *t = NULL;
  ZT_TRY(zt_tensor_from_data(1, (int64_t[]){M}, ZT_DTYPE_F64, losses, &t));
  zt_status s = zt_all_reduce(o->comm, t, ZT_REDUCE_SUM);
  if (!s && o->dp_comm) s = zt_all_reduce(o->dp_comm, t, ZT_REDUCE_AVG);
  double sum = 0;
  for (int m = 0; !s && m < M; m++) sum += zt_tensor_get(t, m); /* zt_train_step's order */
  zt_tensor_free(t);
  *out = sum / M;
  return s;
}

/* Replicas: every grad of params averaged over dp_comm, in buckets of consecutive grads of up
 * to BUCKET_BYTES (DDP's default; a grad larger than that alone, in place), so the step holds at
 * most one bucket besides the grads. A parameter without a grad contributes zeros and gets the
 * average. */
enum { BUCKET_BYTES = 25 << 20 };
static zt_status average_replicas(zt_comm *dp, int n, const zt_param *ps) {
  zt_status s = ZT_OK;
  for (int i = 0; i < n && !s; i++) {
    zt_tensor *t = ps[i].tensor;
    if (!t->grad) s = zt_tensor_zeros(t->ndim, t->shape, ZT_DTYPE_F32, zt_tensor_device(t), &t->grad);
    if (!s && (t->grad->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(t->grad)))
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "averaging over replicas: the grad of parameter '%s' is %s or not contiguous; "
                 "the pipeline's data parallelism takes contiguous f32 grads", ps[i].name, zt_dtype_name(t->grad->dtype));
  }
  for (int i = 0, j; i < n && !s; i = j) {
    int64_t elems = zt_tensor_numel(ps[i].tensor);
    for (j = i + 1; j < n && (elems + zt_tensor_numel(ps[j].tensor)) * 4 <= BUCKET_BYTES; j++)
      elems += zt_tensor_numel(ps[j].tensor);
    if (j == i + 1) { /* alone: in place */
      s = zt_all_reduce(dp, ps[i].tensor->grad, ZT_REDUCE_AVG);
      continue;
    }
    zt_tensor *flat = NULL;
    if ((s = zt_tensor_empty_tagged(1, (int64_t[]){elems}, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_GRAD, &flat))) break;
    for (int64_t k = i, at = 0; k < j; at += zt_tensor_numel(ps[k].tensor), k++)
      zt__dev_copy_range(flat, at, ps[k].tensor->grad, 0, zt_tensor_numel(ps[k].tensor));
    s = zt_all_reduce(dp, flat, ZT_REDUCE_AVG);
    for (int64_t k = i, at = 0; !s && k < j; at += zt_tensor_numel(ps[k].tensor), k++) {
      zt__dev_copy_range(ps[k].tensor->grad, 0, flat, at, zt_tensor_numel(ps[k].tensor));
      zt_tensor_bump_version(ps[k].tensor->grad);
    }
    zt_tensor_free(flat);
  }
  return s;
}

/* Tied parameters: every holder adds its part (zeros where none), so all copies get one sum. */
static zt_status sum_tied(const zt_pipeline_step_options *o) {
  zt_comm *c = o->tied_comm ? o->tied_comm : o->comm;
  for (int i = 0; i < o->n_tied; i++) {
    zt_tensor *t = o->tied[i];
    if (!t->grad) ZT_TRY(zt_tensor_zeros(t->ndim, t->shape, t->dtype, zt_tensor_device(t), &t->grad));
    ZT_TRY(zt_all_reduce(c, t->grad, ZT_REDUCE_SUM));
  }
  return ZT_OK;
}

/* The global grad norm: this rank's own grads, a tied parameter on rank 0 only, summed over
 * the ranks (and over the replicas' shards under ZeRO); clipped on every rank by the same
 * factor. */
static zt_status clip(zt_comm *c, const zt_pipeline_step_options *o, int n, const zt_param *ps, double *norm) {
  zt_param *own = malloc(sizeof *own * (size_t)(n ? n : 1));
  if (!own) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!is_tied(o, o->zero ? zt_zero_piece_param(o->zero, i) : ps[i].tensor) || zt_comm_rank(c) == 0) own[k++] = ps[i];
  double ss = 0;
  zt_status s = zt_grad_sum_squares(k, own, &ss);
  free(own);
  zt_tensor *t = NULL;
  if (!s) s = zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_F64, &ss, &t);
  if (!s) s = zt_all_reduce(c, t, ZT_REDUCE_SUM);
  if (!s && o->zero) s = zt_all_reduce(o->dp_comm, t, ZT_REDUCE_SUM);
  if (!s) *norm = sqrt(zt_tensor_get(t, 0));
  zt_tensor_free(t);
  if (s || !(o->grad_clip > 0) || !isfinite(*norm) || !(*norm > o->grad_clip)) return s;
  return zt_grads_scale(n, ps, o->grad_clip / (*norm + 1e-6));
}

zt_status zt_pipeline_train_step(const zt_pipeline_stages *st, zt_optim *opt, int n_params, const zt_param *params,
                                 zt_tensor *const *inputs, const zt_pipeline_step_options *o,
                                 zt_train_step_result *out) {
  if (!st || !opt || !params || !inputs || !o || !o->schedule || !o->comm || !out)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_pipeline_train_step: stages, optimizer, parameters, inputs, options "
                                         "(with schedule and comm) and result are required");
  *out = (zt_train_step_result){0};
  out->grad_norm = NAN;
  int M = o->schedule->microbatches;
  double *losses = calloc((size_t)M, sizeof *losses);
  if (!losses) return ZT_ERR(ZT_STATUS_OOM, "zt_pipeline_train_step: out of host memory");
  if (o->zero && !o->dp_comm) {
    free(losses);
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_pipeline_train_step: zero needs the replicas' dp_comm");
  }
  zt_status s = o->zero ? zt_zero_gather(o->zero) : ZT_OK;
  if (!s) s = zt_pipeline_run(o->schedule, st, o->comm, &o->boundary, inputs, 1.0 / M, losses, o->trace);
  if (!s) s = mean_loss(o, losses, M, &out->loss);
  free(losses);
  if (!s && !isfinite(out->loss)) {
    out->bad_loss = true;
    s = ZT_ERR(ZT_STATUS_STATE, "loss is %g: the step stopped before its update", out->loss);
  }
  if (!s) s = sum_tied(o);
  if (!s && o->zero) s = zt_zero_reduce(o->zero);
  else if (!s && o->dp_comm) s = average_replicas(o->dp_comm, n_params, params);
  if (!s && o->grad_clip >= 0) s = clip(o->comm, o, n_params, params, &out->grad_norm);
  if (!s && o->grad_clip >= 0 && !isfinite(out->grad_norm)) {
    out->bad_grad = true;
    s = ZT_ERR(ZT_STATUS_STATE, "gradient norm is %g: the step stopped before its update", out->grad_norm);
  }
  if (!s) s = zt_optim_step(opt, o->lr);
  if (o->zero) {
    char *first = zt__error_hold(s); /* the step's failure is the one to report */
    zt_status a = zt_zero_after_step(o->zero); /* OPT: the updated shards into the parameters */
    if (!s) s = a;
    zt__error_restore(first);
  }
  zt_optim_zero_grad(opt);
  return s;
}
