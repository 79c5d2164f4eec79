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

/* ------------------------------------------------ rms norm (Llama's RMSNorm) */
/* x (R, C) -> out (R, C) = (x * rstd) * w per row, rstd = 1 / sqrt(mean(x^2) + eps), in x's
 * dtype (f32 accumulates in f32, like LlamaRMSNorm on f32 input); w (C) may be NULL (1).
 * rstd (R) is written (=) when not NULL. */
void zt__cpu_rms_norm(const zt_tensor *x, const zt_tensor *w, double eps, zt_tensor *out, zt_tensor *rstd);
/* Elements of the scratch zt__cpu_rms_norm_backward needs for dw with R rows of C. */
int64_t zt__cpu_rms_norm_scratch_numel(int64_t rows, int64_t C);
/* g (R, C), x (R, C), rstd (R) saved by forward, w (C) or NULL. Writes (=) each non-NULL
 * output: dx (R, C), dw (C); scratch holds zt__cpu_rms_norm_scratch_numel elements when dw
 * is wanted (else NULL). dw sums chunks of rows in chunk order (thread-count independent). */
void zt__cpu_rms_norm_backward(const zt_tensor *g, const zt_tensor *x, const zt_tensor *w, const zt_tensor *rstd,
                               zt_tensor *dx, zt_tensor *dw, void *scratch);

/* ------------------------------------------------ rotary position embedding */
/* x (N, T, W), W a multiple of D = 2 * cos->shape[1]; cos, sin (P, D/2) with
 * pos_offset + T <= P. Row t of each of the first n_rot heads (D columns each) is rotated
 * in the rotate-half layout by the angles of position pos_offset + t:
 *   out[i] = x[i] cos[i] - x[i + D/2] sin[i],  out[i + D/2] = x[i + D/2] cos[i] + x[i] sin[i]
 * (i < D/2); the remaining columns are copied. inverse rotates by minus the angles (sin
 * negated): the backward of the forward rotation. out (N, T, W) (=); out != x. */
void zt__cpu_rope(const zt_tensor *x, const zt_tensor *cos, const zt_tensor *sin, int64_t pos_offset, int64_t n_rot,
                  bool inverse, zt_tensor *out);

/* ------------------------------------------------ SwiGLU */
/* gate, up (n) -> out (n) = silu(gate) * up (=), silu(a) = a * sigmoid(a) computed as
 * zt__cpu_unary's ZT_UNOP_SILU does, so out is bitwise mul(silu(gate), up). */
void zt__cpu_swiglu(const zt_tensor *gate, const zt_tensor *up, zt_tensor *out);
/* g (n) the grad of out -> dgate (n) = g up silu'(gate), dup (n) = g silu(gate) (=; each may
 * be NULL), bitwise what silu's and mul's backward give in sequence. */
void zt__cpu_swiglu_backward(const zt_tensor *g, const zt_tensor *gate, const zt_tensor *up, zt_tensor *dgate,
                             zt_tensor *dup);

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
