/* CPU kernels for softmax, log-softmax and fused cross-entropy. Tensors are contiguous,
 * f32 or f64 (targets i32 or i64). A reduced dim is seen as x (outer, n, inner); every
 * row's max and sum of exponentials are found in one streaming pass (online rescaling
 * per chunk). f32 uses a vectorisable exp (about 1 ulp); sums are accumulated in f64.
 * Included by: src/ops only. */
#ifndef ZT_OPS_CPU_SOFTMAX_H
#define ZT_OPS_CPU_SOFTMAX_H

#include "zt/tensor.h"

/* y (outer, n, inner) = softmax(x) or log_softmax(x) along n. y must not alias x. */
void zt__cpu_softmax(const zt_tensor *x, int64_t outer, int64_t n, int64_t inner, bool log, zt_tensor *y);
/* gx (outer, n, inner) = y * (g - sum_n(g * y))      (softmax, y its output)
 *                      = g - exp(y) * sum_n(g)        (log_softmax, y its output) */
void zt__cpu_softmax_backward(const zt_tensor *y, const zt_tensor *g, int64_t outer, int64_t n, int64_t inner,
                              bool log, zt_tensor *gx);

/* Scan targets (R) for values outside [0, V) other than ignore. Returns the first bad
 * position (its value in *bad_value), or -1 when all are fine; *count gets the number of
 * non-ignored targets (when every target is fine). */
int64_t zt__cpu_ce_check_targets(const zt_tensor *targets, int64_t V, int64_t ignore, int64_t *bad_value,
                                 int64_t *count);
/* logits (R, V), targets (R) (checked) -> *loss_sum = sum over non-ignored rows of
 * logsumexp(row) - row[target], accumulated in f64; lse (R) = logsumexp per row (left
 * unset on ignored rows) when not NULL. Fails only when a temporary cannot be had. */
ZT_NODISCARD zt_status zt__cpu_cross_entropy(const zt_tensor *logits, const zt_tensor *targets, int64_t ignore, zt_tensor *lse,
                                double *loss_sum);
/* gx (R, V) = scale * (softmax(row) - onehot(target)), recomputed from logits and the
 * saved lse; rows with an ignored target get 0. Writes (=) every element. */
void zt__cpu_cross_entropy_backward(const zt_tensor *logits, const zt_tensor *targets, const zt_tensor *lse,
                                    int64_t ignore, double scale, zt_tensor *gx);

#endif
