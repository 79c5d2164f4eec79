/* zerotrain optim: AdamW and SGD with momentum over a list of named parameters, global
 * grad-norm clipping, a cosine learning-rate schedule with warm-up. Optimizer state
 * tensors carry the OPTIM tag. Updates run with grad mode off and bump versions. */
#ifndef ZT_OPTIM_H
#define ZT_OPTIM_H

#include "zt/model.h"

typedef enum zt_optim_kind { ZT_OPTIM_ADAMW = 0, ZT_OPTIM_SGD } zt_optim_kind;

typedef struct zt_optim_config {
  zt_optim_kind kind;
  double lr;
  double beta1, beta2, eps; /* AdamW */
  double weight_decay;      /* decoupled (AdamW) / L2-free for SGD: applied as w -= lr*wd*w */
  double momentum;          /* SGD */
} zt_optim_config;
/* AdamW defaults: lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1. */
ZT_API zt_optim_config zt_optim_default(zt_optim_kind kind);

typedef struct zt_optim zt_optim;

/* params: borrowed; must outlive the optimizer. State is created lazily at first step. */
ZT_API ZT_NODISCARD zt_status zt_optim_new(const zt_optim_config *c, int n_params, const zt_param *params, zt_optim **out);
ZT_API void zt_optim_free(zt_optim *o);
/* One update with learning rate lr (the schedule's value for this step). Parameters
 * whose .grad is NULL are skipped. Runs with grad mode off; bumps each updated
 * parameter's version. Every grad is checked before anything is written, so a failing
 * step changes nothing. AdamW (as torch.optim.AdamW): w *= 1 - lr*wd (decay params only),
 * m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2, w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t)
 * + eps), with t = step count + 1 for every parameter (one global count, unlike torch's
 * per-parameter counts, which differ only for parameters that missed a step). SGD: the
 * same decoupled decay, then buf = momentum buf + g (buf starts at 0, so buf = g at first),
 * w -= lr buf; momentum 0 keeps no state; no dampening or Nesterov. */
ZT_API ZT_NODISCARD zt_status zt_optim_step(zt_optim *o, double lr);
/* The same update for some parameters only (idx: n indices into the optimizer's list; a
 * parameter without a grad is skipped), at the step count zt_optim_step would use now,
 * which this does not advance: several calls cover a step (OffloadModel updates one slice of
 * parameters at a time, each in RAM only then), then zt_optim_step_finish counts it. Per
 * parameter exactly zt_optim_step's update; a failing call changes nothing. */
ZT_API ZT_NODISCARD zt_status zt_optim_step_params(zt_optim *o, double lr, int n, const int *idx);
ZT_API void zt_optim_step_finish(zt_optim *o); /* the step count + 1 */
/* The same update for elements [elem_off, elem_off + n_elem) of parameter i (in its flat,
 * contiguous order), with state buffers the caller supplies instead of the optimizer's own:
 * n_state contiguous f32 tensors of n_elem elements on the parameter's device (AdamW: 2, the
 * range of exp_avg then exp_avg_sq; SGD with momentum: 1, momentum_buffer's; plain SGD: 0,
 * state NULL), read and updated in place. At the step count zt_optim_step would use now, not
 * advanced (zt_optim_step_finish counts the step). Every element is updated bitwise as
 * zt_optim_step_params updates it (the loops are elementwise and the constants the same), so
 * ranges covering a parameter once are its whole update: OffloadModel updates a parameter
 * whose moments are larger than its update chunk a range at a time, the moments of that range
 * alone in RAM. The optimizer's own state tensors of parameter i are neither used nor made.
 * A parameter without a grad is skipped (ZT_OK, nothing written), as the whole update skips
 * it. The grad is checked as zt_optim_step checks it, the buffers, the range and i as said
 * (ZT_STATUS_INVALID_ARG naming them), all before anything is written: a failing call changes
 * nothing. Bumps the versions of the parameter and the buffers. */
ZT_API ZT_NODISCARD zt_status zt_optim_step_param_range(zt_optim *o, double lr, int i, int64_t elem_off, int64_t n_elem,
                                                       int n_state, zt_tensor *const *state);
/* The parameters the optimizer updates (borrowed, in its order); returns their count. */
ZT_API int zt_optim_params(const zt_optim *o, const zt_param **params);
/* Free every parameter's .grad (set_to_none semantics). */
ZT_API void zt_optim_zero_grad(zt_optim *o);
ZT_API int64_t zt_optim_step_count(const zt_optim *o);

/* State for checkpoints: n named tensors (e.g. "exp_avg.transformer.wte.weight"),
 * owned by the optimizer (created if missing), plus the step count. Loading copies values
 * into them. Order: per parameter, "exp_avg.<name>", "exp_avg_sq.<name>" (AdamW) or
 * "momentum_buffer.<name>" (SGD with momentum); f32, shaped like the parameter, tag
 * OPTIM, zero until the first update. The arrays stay valid until zt_optim_free. */
ZT_API ZT_NODISCARD zt_status zt_optim_state(zt_optim *o, int *n, const char *const **names, zt_tensor *const **tensors);
ZT_API void zt_optim_set_step_count(zt_optim *o, int64_t step);
/* The name zt_optim_state gives parameter i's j-th state tensor ("exp_avg.<name>"). */
ZT_API const char *zt_optim_state_name(const zt_optim *o, int i, int j);
/* Parameter i's state tensors (the same objects zt_optim_state lists; AdamW: exp_avg then
 * exp_avg_sq), for code that moves them between RAM and a store one parameter at a time
 * (OffloadModel's optimizer states on disk): *tensors gets per-parameter-count tensors, or
 * NULL when they do not all exist yet and create is false (create: made, zero-filled, as the
 * first update would make them). Returns how many a parameter has (0: plain SGD, none). */
ZT_API ZT_NODISCARD zt_status zt_optim_param_state(zt_optim *o, int i, bool create, int *n, zt_tensor *const **tensors);
/* Parameter i's j-th state tensor alone (*out, the optimizer's), made zero-filled if missing,
 * for code that moves each to a store before it makes the next, so that a parameter's states
 * are never in RAM together (OffloadModel's chunked updates). zt_optim_param_state lists a
 * parameter's states once all are made. */
ZT_API ZT_NODISCARD zt_status zt_optim_param_state_one(zt_optim *o, int i, int j, zt_tensor **out);

/* Global L2 norm of all grads; if max_norm > 0 and the norm exceeds it, scale every grad
 * by max_norm / (norm + 1e-6). Returns the norm before clipping in *norm. Parameters
 * without a grad are skipped. The norm is summed in double in a fixed order (the same
 * bits for any thread count). A non-finite norm is returned with ZT_OK and the grads left
 * as they are: the caller decides (e.g. skip the step). */
ZT_API ZT_NODISCARD zt_status zt_clip_grad_norm(int n_params, const zt_param *params, double max_norm, double *norm);
/* The two halves of zt_clip_grad_norm, for norms summed over ranks (each rank's part, then
 * an all-reduce): *ss = the sum of squares of the grads (same order and checks), and every
 * grad times coef. */
ZT_API ZT_NODISCARD zt_status zt_grad_sum_squares(int n_params, const zt_param *params, double *ss);
ZT_API ZT_NODISCARD zt_status zt_grads_scale(int n_params, const zt_param *params, double coef);

/* Dynamic loss scaling for f16 gradients (torch.cuda.amp.GradScaler's rule): the loss is
 * multiplied by `scale` before backward, the grads divided by it after; a step whose grads
 * hold an inf or NaN (on any rank) is skipped and the scale multiplied by backoff_factor;
 * after growth_interval finite steps in a row it is multiplied by growth_factor. */
typedef struct zt_loss_scaler {
  double scale;            /* default 65536 */
  double growth_factor;    /* default 2 */
  double backoff_factor;   /* default 0.5 */
  int64_t growth_interval; /* default 2000 */
  int64_t good_steps;      /* finite steps since the scale last changed */
  int64_t skipped;         /* steps skipped so far */
} zt_loss_scaler;
ZT_API zt_loss_scaler zt_loss_scaler_default(void);
/* Record one step's outcome (finite: no inf/NaN in any grad after unscaling) and adjust
 * the scale; returns whether to take the optimizer step. */
ZT_API bool zt_loss_scaler_update(zt_loss_scaler *s, bool finite);

/* Cosine schedule (nanoGPT's), step counting from 0:
 *   step < warmup:          max_lr * (step + 1) / warmup (linear; step warmup-1 has max_lr)
 *   warmup <= step < total: min_lr + 0.5 (1 + cos(pi (step - warmup) / (total - warmup)))
 *                           * (max_lr - min_lr)  (max_lr at step == warmup)
 *   step >= total:          min_lr
 * warmup <= 0: no warm-up; a negative step counts as 0. */
ZT_API double zt_lr_cosine(int64_t step, int64_t warmup, int64_t total, double max_lr, double min_lr);

#endif
