/* CPU kernels for reductions: sum/mean over any set of dims and max over one dim, with
 * their backward. Tensors are contiguous, f32 or f64 (one dtype per call; max indices
 * are i64). Results do not depend on the thread count: the summation order is fixed by
 * the shapes alone.
 * Included by: src/ops only. */
#ifndef ZT_OPS_CPU_REDUCE_H
#define ZT_OPS_CPU_REDUCE_H

#include "zt/tensor.h"

/* out (kept dims of a) = scale * sum of a over the dims whose bit is set in mask.
 * f32 input is accumulated in f64. Fails only when a temporary buffer cannot be had. */
ZT_NODISCARD zt_status zt__cpu_sum(const zt_tensor *a, uint32_t mask, double scale, zt_tensor *out);
/* gx (shape of a) = scale * g broadcast along the dims in mask (g: kept dims of gx). */
void zt__cpu_sum_backward(const zt_tensor *g, uint32_t mask, double scale, zt_tensor *gx);

/* a (outer, n, inner), n >= 1 -> values (outer, inner) =, indices (outer, inner) i64 =.
 * The index is the first maximal element; NaN counts as larger than every number. */
void zt__cpu_max(const zt_tensor *a, int64_t outer, int64_t n, int64_t inner, zt_tensor *values,
                 zt_tensor *indices);
/* gx (outer, n, inner) = 0 except gx[o, idx[o, i], i] = g[o, i]. */
void zt__cpu_max_backward(const zt_tensor *g, const zt_tensor *indices, int64_t outer, int64_t n, int64_t inner,
                          zt_tensor *gx);

#endif
