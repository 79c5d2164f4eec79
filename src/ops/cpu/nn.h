/* CPU kernels of the nn ops: layer norm, embedding, dropout. Same rules as kernels.h:
 * contiguous f32 or f64 tensors (one float dtype per call; ids are i32 or i64), shapes
 * and write (=) / accumulate (+=) stated per kernel. Every result is independent of the
 * OpenMP thread count: reductions run in fixed-size chunks combined in a fixed order.
 * Included by: src/ops only. */
#ifndef ZT_OPS_CPU_NN_H
#define ZT_OPS_CPU_NN_H

#include "zt/tensor.h"

/* ------------------------------------------------ layer norm */
/* x (R, C) -> out (R, C) = (x - mean) * rstd * w + b, per row; w, b (C) may be NULL
 * (1 and 0). mean, rstd (R) are written (=) when not NULL (forward without a graph
 * skips them). rstd = 1 / sqrt(var + eps), var the biased variance. */
void zt__cpu_layer_norm(const zt_tensor *x, const zt_tensor *w, const zt_tensor *b, double eps, zt_tensor *out,
                        zt_tensor *mean, zt_tensor *rstd);
/* Elements (of x's dtype) of the scratch that zt__cpu_layer_norm_backward needs for
 * dw / db with R rows of C: per-chunk partial sums. */
int64_t zt__cpu_layer_norm_scratch_numel(int64_t rows, int64_t C);
/* g (R, C) the grad of out; x (R, C), mean and rstd (R) saved by forward; w (C) or NULL.
 * Writes (=) each non-NULL output: dx (R, C), dw (C), db (C). scratch holds
 * zt__cpu_layer_norm_scratch_numel elements when dw or db is wanted (else NULL). */
void zt__cpu_layer_norm_backward(const zt_tensor *g, const zt_tensor *x, const zt_tensor *w, const zt_tensor *mean,
                                 const zt_tensor *rstd, zt_tensor *dx, zt_tensor *dw, zt_tensor *db, void *scratch);

/* ------------------------------------------------ embedding */
/* The first position (row-major) of ids (N) holding a value outside [0, V), or -1 when
 * all are valid; *bad gets that value. */
int64_t zt__cpu_embedding_find_bad_id(const zt_tensor *ids, int64_t V, int64_t *bad);
/* w (V, C), ids (N) all in [0, V) -> out (N, C) = w[ids[n], :]. */
void zt__cpu_embedding(const zt_tensor *w, const zt_tensor *ids, zt_tensor *out);
/* g (N, C), ids (N) -> dw (V, C) += g[n, :] at row ids[n], in increasing n for every
 * element (columns are split between threads, so no two threads touch one element). */
void zt__cpu_embedding_backward(const zt_tensor *g, const zt_tensor *ids, zt_tensor *dw);

/* ------------------------------------------------ dropout */
/* x (n) -> out (n) = keep(i) ? x[i] / (1 - p) : 0, where keep(i) is
 * zt_rng_uniform_at(s, i) >= p: word i % 4 of Philox block s.offset + i / 4. The mask is
 * a pure function of (s, i), so backward regenerates it (x = grad). out may alias x. */
void zt__cpu_dropout(zt_rng_state s, double p, const zt_tensor *x, zt_tensor *out);

#endif
