/* CPU kernels of the fused output layer + cross-entropy (lm_head_cross_entropy): the
 * per-row loss of one chunk of logits and, in place, its gradient. Contiguous f32 or
 * f64 buffers; targets i32 or i64 (already checked to be in range or ignored).
 * Included by: src/ops only (and its test). */
#ifndef ZT_OPS_CPU_LM_HEAD_H
#define ZT_OPS_CPU_LM_HEAD_H

#include "zt/tensor.h"

/* logits (n, V) of one chunk, targets (n) (i32 when tgt_i32, else i64).
 * loss (n) = logsumexp(row) - row[target] (=), 0 on rows whose target is ignore.
 * When grad: logits (=) scale * (softmax(row) - onehot(target)) in place, and 0 on
 * ignored rows (so they add nothing to the GEMMs that follow). Rows are independent:
 * OpenMP splits them; results do not depend on the thread count. */
void zt__cpu_lm_head_chunk(zt_dtype dt, void *logits, const void *targets, bool tgt_i32, int64_t n, int64_t V,
                           int64_t ignore, bool grad, double scale, double *loss);

/* y (n) = s * x (n) (=). */
void zt__cpu_scale(zt_dtype dt, int64_t n, double s, const void *x, void *y);

/* Rows per chunk of lm_head_cross_entropy (0: automatic, a few tens of MB of logits).
 * For tests of the multi-chunk path; not thread-safe. Defined in src/ops/lm_head.c. */
void zt__lm_head_set_chunk_rows(int64_t rows);

#endif
