/* One optimizer step over accumulated microbatches (zt_train_step): the one definition of a
 * training step that `zt train`, `zt bench step` and the tests share. The model is seen only
 * through zt_model and the data-parallel strategy only through zt_dp_strategy; every decision
 * that could differ between ranks (a non-finite loss, the grad norm) is taken on values all
 * ranks share, so they stop or go on together. */
#include <math.h>

#include "core/status_internal.h"
#include "zt/train.h"

zt_train_step_options zt_train_step_options_default(void) {
  zt_train_step_options o = {0};
  o.microbatches = 1;
  o.lr = 6e-4;
  return o;
}

const char *zt_train_phase_name(zt_train_phase p) {
  static const char *const names[ZT_TRAIN_PHASE_COUNT] = {"forward", "backward", "optimizer", "evaluation",
                                                          "checkpoint"};
  return p >= 0 && p < ZT_TRAIN_PHASE_COUNT ? names[p] : "?";
}

static void phase(const zt_train_step_options *o, zt_train_phase p) {
  if (o->on_phase) o->on_phase(p, o->step, o->phase_user_data);
}

static zt_status dp_mean(const zt_dp_strategy *dp, double *v) {
  return dp && dp->mean ? dp->mean(dp->ctx, v) : ZT_OK;
}

static void dp_set_sync(const zt_dp_strategy *dp, bool sync) {
  if (dp && dp->set_sync) dp->set_sync(dp->ctx, sync);
}

/* Forward and backward of one microbatch; adds its global loss to *sum. */
static zt_status microbatch(const zt_model *m, const zt_dp_strategy *dp, zt_batch_fn next, void *ud,
                            const zt_train_step_options *opt, double factor, double *sum,
                            zt_train_step_result *out) {
  zt_tensor *x = NULL, *y = NULL, *loss = NULL, *scaled = NULL;
  phase(opt, ZT_TRAIN_PHASE_FORWARD);
  ZT_TRY(next(ud, &x, &y));
  ZT_TRY(zt_model_forward_loss(m, x, y, &loss));
  double lv = zt_tensor_get(loss, 0);
  if (opt->poison_loss) lv = NAN;
  // the global batch's loss (a mean of equal-sized row means); every rank decides on it
  zt_status s = dp_mean(dp, &lv);
  if (!s && !isfinite(lv)) {
    out->loss = lv, out->bad_loss = true;
    s = ZT_ERR(ZT_STATUS_STATE, "loss is %g at step %lld: the step stopped before its update", lv,
               (long long)opt->step);
  }
  if (!s && factor != 1) s = zt_mul_scalar(loss, factor, &scaled);
  if (!s) {
    phase(opt, ZT_TRAIN_PHASE_BACKWARD);
    s = zt_backward(1, scaled ? &scaled : &loss, NULL, false);
  }
  zt_tensor_free(loss);
  zt_tensor_free(scaled);
  if (!s) *sum += lv;
  return s;
}

zt_status zt_train_step(const zt_model *m, const zt_dp_strategy *dp, zt_optim *o, zt_batch_fn next,
                        void *user_data, const zt_train_step_options *opt, zt_train_step_result *out) {
  zt_train_step_result r = {0};
  r.grad_norm = NAN;
  if (out) *out = r;
  if (!m || !m->forward_loss || !m->params || !o || !next || !opt || !out)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_step: model (with forward_loss and params), optimizer, batch "
                                         "function, options and result are required");
  int64_t M = opt->microbatches;
  if (M < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_step: %lld microbatches; a step needs at least one",
                  (long long)M);
  bool scaling = opt->scaler != NULL;
  if (scaling && !(dp && dp->scale_grads))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_step: loss scaling needs a data-parallel strategy that can "
                                         "scale its gradients (FSDP)");
  double scale = scaling ? opt->scaler->scale : 0;
  r.loss_scale = scale;
  // one microbatch: the loss itself (times the scale); several: each one's share of the mean
  double factor = (scaling ? scale : 1.0) / (double)M;
  double sum = 0;
  zt_status s = ZT_OK;
  for (int64_t k = 0; k < M && !s; k++) {
    if (k > 0 && opt->stop_request) { /* the caller looked before the step; here, between microbatches */
      double v = *opt->stop_request ? 1 : 0;
      s = dp_mean(dp, &v); /* any rank's request stops every rank here */
      if (!s && v > 0) r.interrupted = true;
      if (r.interrupted) break;
    }
    if (M > 1) dp_set_sync(dp, k == M - 1);
    s = microbatch(m, dp, next, user_data, opt, factor, &sum, &r);
  }
  if (M > 1) dp_set_sync(dp, true);
  if (!s && r.interrupted) /* the step is dropped: its gradients go, nothing is updated */
    s = dp && dp->after_step ? dp->after_step(dp->ctx, o) : (zt_optim_zero_grad(o), ZT_OK);
  if (s || r.interrupted) {
    *out = r;
    return s;
  }
  r.loss = M == 1 ? sum : sum / (double)M;
  phase(opt, ZT_TRAIN_PHASE_OPTIMIZER);
  if (scaling) s = dp->scale_grads(dp->ctx, 1.0 / scale);
  if (!s && opt->grad_clip >= 0) {
    if (dp && dp->clip) {
      s = dp->clip(dp->ctx, opt->grad_clip, &r.grad_norm);
    } else {
      zt_param *ps = NULL;
      int n = zt_model_params(m, &ps);
      s = zt_clip_grad_norm(n, ps, opt->grad_clip, &r.grad_norm);
    }
  }
  // f16: an inf/NaN grad on any rank (the norm is global) skips the update and backs off
  if (!s) r.skipped = scaling && !zt_loss_scaler_update(opt->scaler, isfinite(r.grad_norm));
  if (!s && opt->grad_clip >= 0 && !isfinite(r.grad_norm) && !r.skipped) {
    r.bad_grad = true;
    s = ZT_ERR(ZT_STATUS_STATE, "gradient norm is %g at step %lld: the step stopped before its update", r.grad_norm,
               (long long)opt->step);
  }
  if (!s && !r.skipped) s = dp && dp->optim_step ? dp->optim_step(dp->ctx, o, opt->lr) : zt_optim_step(o, opt->lr);
  if (!s) {
    if (dp && dp->after_step)
      s = dp->after_step(dp->ctx, o);
    else
      zt_optim_zero_grad(o);
  }
  *out = r;
  return s;
}
