/* Broadcasting binary kernels: out (shape S, contiguous) = a op b, a and b contiguous and
 * broadcastable to S. The shape is first simplified (size-1 dims dropped, adjacent dims
 * merged where both inputs are contiguous across them), so a same-shape op becomes one
 * flat run, a (B*T, C) + (C) bias add becomes rows of C, and every inner run has unit or
 * zero stride per input: three vectorisable loops (vec-vec, vec-scalar, scalar-vec).
 * Work is split by flat element ranges; each element's value does not depend on the split. */
#include <omp.h>

#include "core/tensor_internal.h"
#include "kernels.h"

/* The simplified problem: nd >= 1 dims, per-input element strides (0 = broadcast). The
 * innermost stride of each input is 0 or 1 (the innermost dim of a contiguous input that
 * is not broadcast has stride 1). */
typedef struct bplan {
  int nd;
  int64_t shape[ZT_MAX_DIMS];
  int64_t sa[ZT_MAX_DIMS];
  int64_t sb[ZT_MAX_DIMS];
} bplan;

/* Strides of t (contiguous) seen from a broadcast shape of nd dims (0 on broadcast dims). */
static void bcast_strides(const zt_tensor *t, int nd, int64_t *st) {
  int off = nd - t->ndim;
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) {
    int td = d - off;
    if (td < 0) {
      st[d] = 0;
      continue;
    }
    st[d] = t->shape[td] == 1 ? 0 : s;
    s *= t->shape[td];
  }
}

static void plan_build(const zt_tensor *a, const zt_tensor *b, const zt_tensor *out, bplan *p) {
  int64_t sa[ZT_MAX_DIMS], sb[ZT_MAX_DIMS];
  bcast_strides(a, out->ndim, sa);
  bcast_strides(b, out->ndim, sb);
  p->nd = 0;
  for (int d = 0; d < out->ndim; d++) {
    int64_t n = out->shape[d];
    if (n == 1) continue;
    int k = p->nd;
    /* merge into the previous dim when both inputs step through it contiguously */
    if (k && p->sa[k - 1] == sa[d] * n && p->sb[k - 1] == sb[d] * n) {
      p->shape[k - 1] *= n;
      p->sa[k - 1] = sa[d];
      p->sb[k - 1] = sb[d];
      continue;
    }
    p->shape[k] = n;
    p->sa[k] = sa[d];
    p->sb[k] = sb[d];
    p->nd++;
  }
  if (p->nd == 0) { /* one element */
    p->nd = 1;
    p->shape[0] = 1;
    p->sa[0] = p->sb[0] = 1;
  }
}

/* One inner run of len elements: o (len) = a op b, where ia / ib (0 or 1) say whether an
 * input steps or stays on one element. Each (op, strides) pair is its own loop so the
 * compiler vectorises all of them. */
#define RUN_LOOPS(T, OPER)                                                               \
  do {                                                                                   \
    if (ia && ib)                                                                        \
      for (int64_t j = 0; j < len; j++) o[j] = a[j] OPER b[j];                           \
    else if (ia) {                                                                       \
      T y = b[0];                                                                        \
      for (int64_t j = 0; j < len; j++) o[j] = a[j] OPER y;                              \
    } else {                                                                             \
      T x = a[0];                                                                        \
      for (int64_t j = 0; j < len; j++) o[j] = x OPER b[j];                              \
    }                                                                                    \
  } while (0)

#define ZT_DEFINE_BINARY(T, SUF)                                                                       \
  static void run_##SUF(zt__binop op, const T *restrict a, int64_t ia, const T *restrict b, int64_t ib,  \
                        T *restrict o, int64_t len) {                                                  \
    switch (op) {                                                                                      \
    case ZT_BINOP_ADD: RUN_LOOPS(T, +); break;                                                         \
    case ZT_BINOP_SUB: RUN_LOOPS(T, -); break;                                                         \
    case ZT_BINOP_MUL: RUN_LOOPS(T, *); break;                                                         \
    default: RUN_LOOPS(T, /); break;                                                                   \
    }                                                                                                  \
  }                                                                                                    \
  /* o[lo, hi) of the plan's flat output: find where lo falls, then walk inner runs with   \
   * an odometer over the outer dims (no division per run). */                                         \
  static void range_##SUF(zt__binop op, const T *a, const T *b, T *o, const bplan *p, int64_t lo,       \
                          int64_t hi) {                                                                \
    int nd = p->nd, last = nd - 1;                                                                     \
    int64_t idx[ZT_MAX_DIMS], oa = 0, ob = 0, rem = lo;                                                \
    for (int d = last; d >= 0; d--) {                                                                  \
      idx[d] = rem % p->shape[d];                                                                      \
      rem /= p->shape[d];                                                                              \
      oa += idx[d] * p->sa[d];                                                                         \
      ob += idx[d] * p->sb[d];                                                                         \
    }                                                                                                  \
    int64_t inner = p->shape[last], ia = p->sa[last], ib = p->sb[last];                                \
    for (int64_t pos = lo; pos < hi;) {                                                                \
      int64_t len = inner - idx[last];                                                                 \
      if (len > hi - pos) len = hi - pos;                                                              \
      run_##SUF(op, a + oa, ia, b + ob, ib, o + pos, len);                                             \
      pos += len;                                                                                      \
      /* back to the start of the row, then step the outer dims */                                     \
      oa -= idx[last] * ia;                                                                            \
      ob -= idx[last] * ib;                                                                            \
      idx[last] = 0;                                                                                   \
      for (int d = last - 1; d >= 0; d--) {                                                            \
        oa += p->sa[d];                                                                                \
        ob += p->sb[d];                                                                                \
        if (++idx[d] < p->shape[d]) break;                                                             \
        oa -= p->shape[d] * p->sa[d];                                                                  \
        ob -= p->shape[d] * p->sb[d];                                                                  \
        idx[d] = 0;                                                                                    \
      }                                                                                                \
    }                                                                                                  \
  }                                                                                                    \
  static void binary_##SUF(zt__binop op, const T *a, const T *b, T *o, const bplan *p, int64_t n) {     \
    _Pragma("omp parallel if (n > ZT_PAR_MIN)") {                                                      \
      int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();                                    \
      /* split on 16-element boundaries: whole cache lines per thread */                               \
      int64_t blocks = (n + 15) / 16, lo = blocks * t / nt * 16, hi = blocks * (t + 1) / nt * 16;      \
      if (hi > n) hi = n;                                                                              \
      if (lo < hi) range_##SUF(op, a, b, o, p, lo, hi);                                                \
    }                                                                                                  \
  }

ZT_DEFINE_BINARY(float, f32)
ZT_DEFINE_BINARY(double, f64)

/* out (S) = a (broadcastable to S) op b (broadcastable to S); all contiguous, one dtype. */
void zt__cpu_binary(zt__binop op, const zt_tensor *a, const zt_tensor *b, zt_tensor *out) {
  int64_t n = zt_tensor_numel(out);
  if (n == 0) return;
  bplan p;
  plan_build(a, b, out, &p);
  if (out->dtype == ZT_DTYPE_F32) {
    binary_f32(op, zt__tensor_ptr(a), zt__tensor_ptr(b), zt__tensor_ptr(out), &p, n);
  } else {
    ZT_ASSERT(out->dtype == ZT_DTYPE_F64);
    binary_f64(op, zt__tensor_ptr(a), zt__tensor_ptr(b), zt__tensor_ptr(out), &p, n);
  }
}
