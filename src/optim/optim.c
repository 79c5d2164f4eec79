/* AdamW and SGD with momentum over borrowed, named f32 parameters. State tensors (tag
 * OPTIM, zero-filled) are created lazily, per parameter, the first time it is updated or
 * when zt_optim_state asks for them; a step validates everything before writing anything,
 * so a failed step leaves parameters, state and the step count as they were. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "zt/autograd.h"
#include "zt/optim.h"

#define STATE_NAME_MAX 128

struct zt_optim {
  zt_optim_config cfg;
  int n_params;
  const zt_param *params; /* borrowed */
  int per_param;          /* state tensors per parameter: 2 AdamW, 1 SGD+momentum, 0 plain SGD */
  int n_state;            /* n_params * per_param */
  char (*names)[STATE_NAME_MAX];
  const char **name_ptrs;
  zt_tensor **state; /* [param * per_param + j]; NULL until created */
  int64_t step;
};

zt_optim_config zt_optim_default(zt_optim_kind kind) {
  zt_optim_config c = {.kind = kind, .lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                       .momentum = 0.0};
  if (kind == ZT_OPTIM_SGD) {
    /* torch.optim.SGD has no default lr; these are a common starting point. */
    c.lr = 1e-2;
    c.momentum = 0.9;
    c.weight_decay = 0.0;
  }
  return c;
}

static zt_status check_lr(const char *fn, double lr) {
  if (!(lr >= 0) || !isfinite(lr))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: invalid learning rate %g: it must be finite and >= 0", fn, lr);
  return ZT_OK;
}

static zt_status check_config(const zt_optim_config *c) {
  const char *fn = "zt_optim_new";
  if (c->kind != ZT_OPTIM_ADAMW && c->kind != ZT_OPTIM_SGD)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: unknown optimizer kind %d: use ZT_OPTIM_ADAMW or ZT_OPTIM_SGD", fn,
                  (int)c->kind);
  ZT_TRY(check_lr(fn, c->lr));
  if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: invalid weight decay %g: it must be finite and >= 0", fn,
                  c->weight_decay);
  if (c->kind == ZT_OPTIM_ADAMW) {
    if (!(c->beta1 >= 0 && c->beta1 < 1))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: invalid AdamW beta1 %g: it must be in [0, 1)", fn, c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: invalid AdamW beta2 %g: it must be in [0, 1)", fn, c->beta2);
    if (!(c->eps > 0) || !isfinite(c->eps))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: invalid AdamW eps %g: it must be finite and > 0", fn, c->eps);
  } else if (!(c->momentum >= 0) || !isfinite(c->momentum)) {
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: invalid SGD momentum %g: it must be finite and >= 0", fn,
                  c->momentum);
  }
  return ZT_OK;
}

/* A parameter the fused loops can update in place: a contiguous f32 cpu leaf. */
static zt_status check_param(const zt_param *p, int i) {
  const char *fn = "zt_optim_new";
  if (!p->tensor)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: parameter %d ('%s') has a NULL tensor", fn, i, p->name);
  const zt_tensor *t = p->tensor;
  if (t->dtype != ZT_DTYPE_F32)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s: parameter '%s' is %s: the optimizer updates f32 parameters only", fn,
                  p->name, zt_dtype_name(t->dtype));
  if (!zt_tensor_is_leaf(t))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s: parameter '%s' is not a leaf (it has a grad_fn): optimize the leaf tensor it was computed "
                  "from",
                  fn, p->name);
  if (!zt__backend_get(zt_tensor_device(t).type)) { /* the update loops are the device backend's */
    char d[16];
    return ZT_ERR(ZT_STATUS_DEVICE, "%s: parameter '%s' is on %s, which has no backend in this build", fn, p->name,
                  zt_device_str(zt_tensor_device(t), d));
  }
  if (!zt_tensor_is_contiguous(t))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: parameter '%s' is not contiguous: pass a contiguous tensor", fn,
                  p->name);
  return ZT_OK;
}

/* Whether two contiguous tensors share elements. */
static bool overlap(const zt_tensor *a, const zt_tensor *b) {
  if (a == b) return true;
  if (a->storage != b->storage) return false;
  int64_t na = zt_tensor_numel(a), nb = zt_tensor_numel(b);
  return na > 0 && nb > 0 && a->offset < b->offset + nb && b->offset < a->offset + na;
}

zt_status zt_optim_new(const zt_optim_config *c, int n_params, const zt_param *params, zt_optim **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_optim_new: out is NULL");
  *out = NULL;
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_optim_new: config is NULL (start from zt_optim_default)");
  if (n_params < 0 || (n_params > 0 && !params))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_optim_new: %d parameters with %s array: pass n_params >= 0 and an "
                                         "array of that many",
                  n_params, params ? "an" : "a NULL");
  ZT_TRY(check_config(c));
  for (int i = 0; i < n_params; i++) {
    ZT_TRY(check_param(&params[i], i));
    /* Elements listed twice would be updated twice per step. */
    for (int j = 0; j < i; j++)
      if (overlap(params[j].tensor, params[i].tensor))
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "zt_optim_new: parameters '%s' and '%s' overlap in memory: list each parameter once (tied "
                      "weights once)",
                      params[j].name, params[i].name);
  }
  zt_optim *o = calloc(1, sizeof *o);
  if (!o) return ZT_ERR(ZT_STATUS_OOM, "zt_optim_new: out of host memory");
  o->cfg = *c;
  o->n_params = n_params;
  o->params = params;
  o->per_param = c->kind == ZT_OPTIM_ADAMW ? 2 : (c->momentum != 0 ? 1 : 0);
  o->n_state = n_params * o->per_param;
  if (o->n_state > 0) {
    o->names = calloc((size_t)o->n_state, sizeof *o->names);
    o->name_ptrs = calloc((size_t)o->n_state, sizeof *o->name_ptrs);
    o->state = calloc((size_t)o->n_state, sizeof *o->state);
    if (!o->names || !o->name_ptrs || !o->state) {
      zt_optim_free(o);
      return ZT_ERR(ZT_STATUS_OOM, "zt_optim_new: out of host memory");
    }
    static const char *const adamw_prefix[2] = {"exp_avg", "exp_avg_sq"};
    for (int i = 0; i < n_params; i++)
      for (int j = 0; j < o->per_param; j++) {
        int k = i * o->per_param + j;
        const char *pre = c->kind == ZT_OPTIM_ADAMW ? adamw_prefix[j] : "momentum_buffer";
        snprintf(o->names[k], STATE_NAME_MAX, "%s.%.*s", pre, (int)sizeof params[i].name, params[i].name);
        o->name_ptrs[k] = o->names[k];
      }
  }
  *out = o;
  return ZT_OK;
}

void zt_optim_free(zt_optim *o) {
  if (!o) return;
  if (o->state)
    for (int k = 0; k < o->n_state; k++) zt_tensor_free(o->state[k]);
  free(o->state);
  free(o->names);
  free(o->name_ptrs);
  free(o);
}

int64_t zt_optim_step_count(const zt_optim *o) { return o ? o->step : 0; }

void zt_optim_set_step_count(zt_optim *o, int64_t step) {
  ZT_ASSERT(o && step >= 0);
  o->step = step;
}

/* Zero-filled state tensors of parameter i, same shape as it, tag OPTIM. */
static zt_status ensure_state(zt_optim *o, int i) {
  const zt_tensor *p = o->params[i].tensor;
  for (int j = 0; j < o->per_param; j++) {
    int k = i * o->per_param + j;
    if (o->state[k]) continue;
    zt_tensor *t;
    zt_status s = zt_tensor_empty_tagged(p->ndim, p->shape, ZT_DTYPE_F32, zt_tensor_device(p), ZT_MEM_TAG_OPTIM, &t);
    if (s) return zt__error_prefix(s, "optimizer state '%s'", o->names[k]);
    zt__dev_fill(t, 0.0);
    o->state[k] = t;
  }
  return ZT_OK;
}

zt_status zt_optim_state(zt_optim *o, int *n, const char *const **names, zt_tensor *const **tensors) {
  if (!o || !n || !names || !tensors)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_optim_state: NULL optimizer or output pointer");
  for (int i = 0; i < o->n_params; i++) ZT_TRY(ensure_state(o, i));
  *n = o->n_state;
  *names = o->name_ptrs;
  *tensors = o->state;
  return ZT_OK;
}

const char *zt_optim_state_name(const zt_optim *o, int i, int j) {
  ZT_ASSERT(o && i >= 0 && i < o->n_params && j >= 0 && j < o->per_param);
  return o->names[i * o->per_param + j];
}

zt_status zt_optim_param_state(zt_optim *o, int i, bool create, int *n, zt_tensor *const **tensors) {
  if (!o || !n || !tensors) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_optim_param_state: NULL optimizer or output");
  if (i < 0 || i >= o->n_params)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_optim_param_state: index %d is outside the optimizer's %d parameters", i,
                  o->n_params);
  *n = o->per_param;
  *tensors = NULL;
  if (!o->per_param) return ZT_OK;
  if (create) ZT_TRY(ensure_state(o, i));
  zt_tensor **st = o->state + (size_t)i * (size_t)o->per_param;
  bool all = true; /* made together, or one by one (zt_optim_param_state_one) */
  for (int j = 0; j < o->per_param; j++) all = all && st[j];
  if (all) *tensors = st;
  return ZT_OK;
}

zt_status zt_optim_param_state_one(zt_optim *o, int i, int j, zt_tensor **out) {
  const char *fn = "zt_optim_param_state_one";
  if (!o || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: NULL optimizer or output", fn);
  *out = NULL;
  if (i < 0 || i >= o->n_params || j < 0 || j >= o->per_param)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: state %d of parameter %d: the optimizer has %d parameters with %d each",
                  fn, j, i, o->n_params, o->per_param);
  zt_tensor **st = &o->state[(size_t)i * (size_t)o->per_param + (size_t)j];
  if (!*st) {
    const zt_tensor *p = o->params[i].tensor;
    zt_tensor *t;
    zt_status s = zt_tensor_empty_tagged(p->ndim, p->shape, ZT_DTYPE_F32, zt_tensor_device(p), ZT_MEM_TAG_OPTIM, &t);
    if (s) return zt__error_prefix(s, "optimizer state '%s'", o->names[i * o->per_param + j]);
    zt__dev_fill(t, 0.0);
    *st = t;
  }
  *out = *st;
  return ZT_OK;
}

void zt_optim_zero_grad(zt_optim *o) {
  if (!o) return;
  for (int i = 0; i < o->n_params; i++) {
    zt_tensor *t = o->params[i].tensor;
    zt_tensor_free(t->grad);
    t->grad = NULL;
  }
}

/* Whether parameter i takes part in this step; errors for grads the loops cannot read. */
static zt_status check_grad(const zt_optim *o, int i, bool *use) {
  const zt_param *p = &o->params[i];
  const zt_tensor *t = p->tensor, *g = t->grad;
  *use = false;
  if (!g) return ZT_OK;
  char a[128], b[128];
  if (!zt_shape_equal(g->ndim, g->shape, t->ndim, t->shape))
    return ZT_ERR(ZT_STATUS_SHAPE, "zt_optim_step: parameter '%s' has shape %s but its grad has shape %s", p->name,
                  zt_shape_str(t->ndim, t->shape, a), zt_shape_str(g->ndim, g->shape, b));
  if (g->dtype != ZT_DTYPE_F32)
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_optim_step: the grad of parameter '%s' is %s: it must be f32", p->name,
                  zt_dtype_name(g->dtype));
  if (!zt_tensor_is_contiguous(g))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_optim_step: the grad of parameter '%s' is not contiguous", p->name);
  void *d; /* unused: zt_tensor_data only checks that the bytes exist (not released) */
  zt_status s = zt_tensor_data(g, &d);
  if (!s) s = zt_tensor_data(t, &d);
  if (s) return zt__error_prefix(s, "zt_optim_step: parameter '%s'", p->name);
  *use = true;
  return ZT_OK;
}

/* The constants of parameter i's update at lr and step t = count + 1 (one home: the whole and
 * the range updates use the same, so each element's arithmetic is the same). */
static void update_consts(const zt_optim *o, double lr, int i, zt__optim_update *u) {
  const zt_optim_config *c = &o->cfg;
  int64_t t = o->step + 1;
  *u = (zt__optim_update){0};
  /* Decoupled weight decay, w *= 1 - lr wd, as torch.optim.AdamW's param.mul_(). */
  float decay_on = (float)(1.0 - lr * c->weight_decay);
  u->decay = o->params[i].decay ? decay_on : 1.0f;
  if (c->kind == ZT_OPTIM_ADAMW) {
    /* Bias corrections as torch: step_size = lr / (1 - b1^t); sqrt(v) / sqrt(1 - b2^t). */
    double step_size = lr / (1.0 - pow(c->beta1, (double)t));
    u->beta1 = (float)c->beta1;
    u->omb1 = (float)(1.0 - c->beta1);
    u->beta2 = (float)c->beta2;
    u->omb2 = (float)(1.0 - c->beta2);
    u->step_size = (float)step_size;
    u->bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)t));
    u->eps = (float)c->eps;
  } else {
    u->momentum = (float)c->momentum;
    u->lr = (float)lr;
  }
}

/* One update of the parameters sel marks (NULL: all) at step t = count + 1; the count is
 * the caller's to advance. */
static zt_status step_selected(zt_optim *o, double lr, const bool *sel, const char *fn) {
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: optimizer is NULL", fn);
  ZT_TRY(check_lr(fn, lr));
  /* Validate every grad and create every state tensor first: no partial update. */
  bool *use = calloc((size_t)(o->n_params > 0 ? o->n_params : 1), sizeof *use);
  if (!use) return ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory", fn);
  for (int i = 0; i < o->n_params; i++) {
    if (sel && !sel[i]) continue;
    zt_status s = check_grad(o, i, &use[i]);
    if (!s && use[i]) s = ensure_state(o, i);
    for (int j = 0; !s && use[i] && j < o->per_param; j++) { /* e.g. evicted to a store and not restored */
      void *d;
      zt_tensor *st = o->state[(size_t)i * (size_t)o->per_param + (size_t)j];
      if ((s = zt_tensor_data(st, &d))) s = zt__error_prefix(s, "%s: optimizer state '%s'", fn, o->names[i * o->per_param + j]);
    }
    if (s) {
      free(use);
      return s;
    }
  }
  bool prev = zt_set_grad_enabled(false);
  /* The loops (AdamW, SGD) are the backend's of each parameter's device. */
  for (int i = 0; i < o->n_params; i++) {
    if (!use[i]) continue;
    zt_tensor *p = o->params[i].tensor;
    zt__optim_update u;
    update_consts(o, lr, i, &u);
    zt_tensor **st = o->state + (size_t)i * (size_t)o->per_param;
    if (o->cfg.kind == ZT_OPTIM_ADAMW) zt__dev_adamw(p, p->grad, st[0], st[1], &u);
    else zt__dev_sgd(p, p->grad, o->per_param == 1 ? st[0] : NULL, &u);
    zt_tensor_bump_version(p);
    for (int j = 0; j < o->per_param; j++) zt_tensor_bump_version(st[j]);
  }
  zt_set_grad_enabled(prev);
  free(use);
  return ZT_OK;
}

zt_status zt_optim_step(zt_optim *o, double lr) {
  ZT_TRY(step_selected(o, lr, NULL, "zt_optim_step"));
  o->step++;
  return ZT_OK;
}

zt_status zt_optim_step_params(zt_optim *o, double lr, int n, const int *idx) {
  const char *fn = "zt_optim_step_params";
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: optimizer is NULL", fn);
  if (n < 0 || (n > 0 && !idx))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %d indices with %s array", fn, n, idx ? "an" : "a NULL");
  bool *sel = calloc((size_t)(o->n_params > 0 ? o->n_params : 1), sizeof *sel);
  if (!sel) return ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory", fn);
  for (int j = 0; j < n; j++) {
    if (idx[j] < 0 || idx[j] >= o->n_params) {
      free(sel);
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: index %d is outside the optimizer's %d parameters", fn, idx[j],
                    o->n_params);
    }
    sel[idx[j]] = true;
  }
  zt_status s = step_selected(o, lr, sel, fn);
  free(sel);
  return s;
}

/* A contiguous 1-d view of n elements of t from element off (t contiguous). */
static zt_status flat_view(zt_tensor *t, int64_t off, int64_t n, zt_tensor **out) {
  int64_t one = 1;
  return zt__tensor_new_view(t->storage, t->offset + off, 1, &n, &one, t->dtype, out);
}

zt_status zt_optim_step_param_range(zt_optim *o, double lr, int i, int64_t elem_off, int64_t n_elem, int n_state,
                                    zt_tensor *const *state) {
  const char *fn = "zt_optim_step_param_range";
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: optimizer is NULL", fn);
  ZT_TRY(check_lr(fn, lr));
  if (i < 0 || i >= o->n_params)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: index %d is outside the optimizer's %d parameters", fn, i, o->n_params);
  const zt_param *pp = &o->params[i];
  zt_tensor *p = pp->tensor;
  int64_t numel = zt_tensor_numel(p);
  if (elem_off < 0 || n_elem < 0 || elem_off > numel || n_elem > numel - elem_off)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: elements [%lld, %lld) are outside parameter '%s' of %lld elements", fn,
                  (long long)elem_off, (long long)(elem_off + n_elem), pp->name, (long long)numel);
  if (n_state != o->per_param || (n_state > 0 && !state))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %d state buffers for parameter '%s': this optimizer keeps %d (%s)", fn,
                  n_state, pp->name, o->per_param,
                  o->cfg.kind == ZT_OPTIM_ADAMW ? "exp_avg, exp_avg_sq" : o->per_param ? "momentum_buffer" : "none");
  bool use;
  ZT_TRY(check_grad(o, i, &use));
  if (!use || n_elem == 0) return ZT_OK; /* no grad: skipped, as the whole update skips it */
  for (int j = 0; j < n_state; j++) {
    const zt_tensor *b = state[j];
    void *d;
    if (!b || b->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(b) || zt_tensor_numel(b) != n_elem ||
        zt_tensor_device(b).type != zt_tensor_device(p).type || zt_tensor_device(b).index != zt_tensor_device(p).index)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "%s: state buffer %d of parameter '%s' must be a contiguous f32 tensor of %lld elements on the "
                    "parameter's device",
                    fn, j, pp->name, (long long)n_elem);
    if (overlap(b, p) || overlap(b, p->grad))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: state buffer %d of parameter '%s' overlaps the parameter or its grad",
                    fn, j, pp->name);
    for (int k = 0; k < j; k++)
      if (overlap(b, state[k]))
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: state buffers %d and %d of parameter '%s' overlap", fn, k, j,
                      pp->name);
    zt_status s = zt_tensor_data(b, &d);
    if (s) return zt__error_prefix(s, "%s: state buffer %d of parameter '%s'", fn, j, pp->name);
  }
  zt_tensor *w = NULL, *g = NULL;
  zt_status s = flat_view(p, elem_off, n_elem, &w);
  if (!s) s = flat_view(p->grad, elem_off, n_elem, &g);
  if (s) {
    zt_tensor_free(w);
    return s;
  }
  bool prev = zt_set_grad_enabled(false);
  zt__optim_update u;
  update_consts(o, lr, i, &u);
  if (o->cfg.kind == ZT_OPTIM_ADAMW) zt__dev_adamw(w, g, state[0], state[1], &u);
  else zt__dev_sgd(w, g, n_state == 1 ? state[0] : NULL, &u);
  zt_set_grad_enabled(prev);
  zt_tensor_free(w);
  zt_tensor_free(g);
  zt_tensor_bump_version(p);
  for (int j = 0; j < n_state; j++) zt_tensor_bump_version(state[j]);
  return ZT_OK;
}

void zt_optim_step_finish(zt_optim *o) {
  ZT_ASSERT(o);
  o->step++;
}

int zt_optim_params(const zt_optim *o, const zt_param **params) {
  if (params) *params = o ? o->params : NULL;
  return o ? o->n_params : 0;
}
