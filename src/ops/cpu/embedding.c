/* Embedding kernels: a row gather in forward, a scatter-add in backward. The scatter is
 * deterministic without atomics: threads own disjoint column ranges of dw and each walks
 * every id in order, so every element sums its rows in increasing n whatever the thread
 * count. */
#include <omp.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "kernels.h"
#include "nn.h"

static inline int64_t load_id(const void *ids, bool i64, int64_t n) {
  return i64 ? ((const int64_t *)ids)[n] : (int64_t)((const int32_t *)ids)[n];
}

int64_t zt__cpu_embedding_find_bad_id(const zt_tensor *ids, int64_t V, int64_t *bad) {
  int64_t N = zt_tensor_numel(ids);
  const void *p = N ? zt__tensor_ptr(ids) : NULL;
  bool i64 = ids->dtype == ZT_DTYPE_I64;
  for (int64_t n = 0; n < N; n++) {
    int64_t id = load_id(p, i64, n);
    if (id < 0 || id >= V) {
      *bad = id;
      return n;
    }
  }
  return -1;
}

/* w (V, C), ids (N) -> out (N, C) = */
void zt__cpu_embedding(const zt_tensor *w, const zt_tensor *ids, zt_tensor *out) {
  int64_t N = zt_tensor_numel(ids), C = w->shape[1];
  if (N == 0 || C == 0) return;
  size_t row = (size_t)C * zt_dtype_size(w->dtype);
  const char *wp = zt__tensor_ptr(w);
  const void *ip = zt__tensor_ptr(ids);
  char *op = zt__tensor_ptr(out);
  bool i64 = ids->dtype == ZT_DTYPE_I64;
#pragma omp parallel for schedule(static) if (N * C > ZT_PAR_MIN)
  for (int64_t n = 0; n < N; n++) memcpy(op + (size_t)n * row, wp + (size_t)load_id(ip, i64, n) * row, row);
}

/* Columns per unit of the split: 16 f32 = one 64-byte line, so two threads never write
 * one cache line (for f64 it is two lines). */
#define EMB_COL_ALIGN 16

#define ZT_DEFINE_EMBEDDING_BWD(T, SUF)                                                                      \
  /* g (N, C), ids (N) -> dw (V, C) += by rows; columns [c0, c1) only */                                      \
  static void emb_bwd_cols_##SUF(const T *restrict g, const void *ids, bool i64, T *restrict dw, int64_t N,   \
                                 int64_t C, int64_t c0, int64_t c1) {                                         \
    for (int64_t n = 0; n < N; n++) {                                                                         \
      const T *restrict gr = g + n * C;                                                                       \
      T *restrict d = dw + load_id(ids, i64, n) * C;                                                          \
      for (int64_t c = c0; c < c1; c++) d[c] += gr[c];                                                        \
    }                                                                                                         \
  }

ZT_DEFINE_EMBEDDING_BWD(float, f32)
ZT_DEFINE_EMBEDDING_BWD(double, f64)

void zt__cpu_embedding_backward(const zt_tensor *g, const zt_tensor *ids, zt_tensor *dw) {
  int64_t N = zt_tensor_numel(ids), C = dw->shape[1];
  if (N == 0 || C == 0) return;
  const void *gp = zt__tensor_ptr(g), *ip = zt__tensor_ptr(ids);
  void *dp = zt__tensor_ptr(dw);
  bool i64 = ids->dtype == ZT_DTYPE_I64, f32 = dw->dtype == ZT_DTYPE_F32;
  int64_t units = (C + EMB_COL_ALIGN - 1) / EMB_COL_ALIGN;
#pragma omp parallel if (N * C > ZT_PAR_MIN)
  {
    /* an even split of the column units; the order within each element is n order */
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t c0 = units * t / nt * EMB_COL_ALIGN, c1 = units * (t + 1) / nt * EMB_COL_ALIGN;
    if (c1 > C) c1 = C;
    if (c0 < c1) {
      if (f32)
        emb_bwd_cols_f32(gp, ip, i64, dp, N, C, c0, c1);
      else
        emb_bwd_cols_f64(gp, ip, i64, dp, N, C, c0, c1);
    }
  }
}
