/* Learning-rate schedules. Pure functions of the step, so a resumed run gets the same
 * rates as an uninterrupted one. */
#include <math.h>

#include "zt/optim.h"

/* nanoGPT's get_lr, with step counted from 0:
 *   step < warmup:          max_lr * (step + 1) / warmup  (step 0 is max_lr / warmup,
 *                           step warmup-1 is max_lr: no step runs at lr 0)
 *   warmup <= step < total: min_lr + 0.5 (1 + cos(pi r)) (max_lr - min_lr),
 *                           r = (step - warmup) / (total - warmup)  (r = 0 gives max_lr)
 *   step >= total:          min_lr
 * warmup <= 0 means no warm-up; a negative step is treated as 0. */
double zt_lr_cosine(int64_t step, int64_t warmup, int64_t total, double max_lr, double min_lr) {
  if (step < 0) step = 0;
  if (warmup > 0 && step < warmup) return max_lr * (double)(step + 1) / (double)warmup;
  if (warmup < 0) warmup = 0;
  if (step >= total) return min_lr;
  double r = (double)(step - warmup) / (double)(total - warmup);
  return min_lr + 0.5 * (1.0 + cos(M_PI * r)) * (max_lr - min_lr);
}
