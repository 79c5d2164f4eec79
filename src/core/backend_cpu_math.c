/* The cpu backend's numeric helpers for code outside the kernels: gradient accumulation,
 * scaling, sum-to-shape (broadcast grads), the grad-norm sum of squares and the optimizer
 * updates. Every loop gives the same bits for any thread count. */
#include "core/tensor_internal.h"
#include "backend.h"
#include "tensor_internal.h"

/* Offset in elements of row-major logical index i of t. */
static int64_t strided_offset(const zt_tensor *t, int64_t i) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (i % t->shape[d]) * t->stride[d];
    i /= t->shape[d];
  }
  return off;
}

/* dst += src, same shape; any strides and float dtypes (fast paths: contiguous f32/f64). */
void zt__cpu_add_into(void *ctx, zt_tensor *dst, const zt_tensor *src) {
  (void)ctx;
  int64_t n = zt_tensor_numel(dst);
  if (n == 0) return;
  void *d = zt__tensor_ptr(dst);
  const void *s = zt__tensor_ptr(src);
  bool contig = zt_tensor_is_contiguous(dst) && zt_tensor_is_contiguous(src);
  if (contig && dst->dtype == ZT_DTYPE_F32 && src->dtype == ZT_DTYPE_F32) {
    float *restrict df = d;
    const float *restrict sf = s;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) df[i] += sf[i];
  } else if (contig && dst->dtype == ZT_DTYPE_F64 && src->dtype == ZT_DTYPE_F64) {
    double *restrict dd = d;
    const double *restrict sd = s;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dd[i] += sd[i];
  } else {
    for (int64_t i = 0; i < n; i++) {
      int64_t od = strided_offset(dst, i), os = strided_offset(src, i);
      zt__store(dst->dtype, d, od, zt__load(dst->dtype, d, od) + zt__load(src->dtype, s, os));
    }
  }
}

/* dst (f32) += (float)(widen(src) / div), elementwise: the same bits for any thread count. */
void zt__cpu_add_div(void *ctx, zt_tensor *dst, const zt_tensor *src, double div) {
  (void)ctx;
  float *d = zt__tensor_ptr(dst);
  const void *o = zt__tensor_ptr(src);
  int64_t n = zt_tensor_numel(dst);
  zt_dtype dt = src->dtype;
#pragma omp parallel for schedule(static) if (n > ZT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float v = dt == ZT_DTYPE_F32   ? ((const float *)o)[i]
              : dt == ZT_DTYPE_BF16 ? zt_bf16_to_f32(((const uint16_t *)o)[i])
                                    : zt_f16_to_f32(((const uint16_t *)o)[i]);
    d[i] += (float)(v / div);
  }
}

/* g has the broadcast shape; sum it down to out's shape (right-aligned against g). */
void zt__cpu_sum_to_shape(void *ctx, const zt_tensor *g, zt_tensor *out) {
  (void)ctx;
  int nd = g->ndim, off = nd - out->ndim;
  ZT_ASSERT(off >= 0);
  int64_t ostride[ZT_MAX_DIMS] = {0};
  int64_t s = 1;
  for (int d = out->ndim - 1; d >= 0; d--) {
    ostride[d + off] = out->shape[d] == 1 ? 0 : s;
    s *= out->shape[d];
  }
  int64_t n = zt_tensor_numel(g);
  if (n == 0) return;
  int64_t inner = nd ? g->shape[nd - 1] : 1, rows = n / inner;
  int64_t istr = nd ? ostride[nd - 1] : 0;
  const void *gp = zt__tensor_ptr(g);
  void *op = zt__tensor_ptr(out);
  for (int64_t r = 0; r < rows; r++) {
    int64_t o = 0, rem = r;
    for (int d = nd - 2; d >= 0; d--) {
      o += (rem % g->shape[d]) * ostride[d];
      rem /= g->shape[d];
    }
    if (g->dtype == ZT_DTYPE_F32) {
      const float *src = (const float *)gp + r * inner;
      float *dst = (float *)op + o;
      if (istr)
        for (int64_t j = 0; j < inner; j++) dst[j] += src[j];
      else {
        float acc = 0;
        for (int64_t j = 0; j < inner; j++) acc += src[j];
        dst[0] += acc;
      }
    } else {
      ZT_ASSERT(g->dtype == ZT_DTYPE_F64);
      const double *src = (const double *)gp + r * inner;
      double *dst = (double *)op + o;
      if (istr)
        for (int64_t j = 0; j < inner; j++) dst[j] += src[j];
      else {
        double acc = 0;
        for (int64_t j = 0; j < inner; j++) acc += src[j];
        dst[0] += acc;
      }
    }
  }
}

/* ------------------------------------------------ grad-norm clipping */
#define BLOCK 8192 /* elements per partial sum */
#define GROUP 64   /* blocks per parallel region (partials live on the stack) */

/* Sum of squares of one block, in double, with 8 independent lanes (vectorisable, and a
 * fixed order). */
#define DEFINE_SUMSQ(T, SUF)                                                            \
  static double sumsq_##SUF(const T *restrict g, int64_t n) {                           \
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                           \
    int64_t i = 0;                                                                      \
    for (; i + 8 <= n; i += 8)                                                          \
      for (int j = 0; j < 8; j++) {                                                     \
        double x = (double)g[i + j];                                                    \
        acc[j] += x * x;                                                                \
      }                                                                                 \
    double tail = 0;                                                                    \
    for (; i < n; i++) {                                                                \
      double x = (double)g[i];                                                          \
      tail += x * x;                                                                    \
    }                                                                                   \
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail; \
  }                                                                                     \
  /* Sum of squares of g (n): blocks in parallel, partials added in block order. */     \
  static double tensor_sumsq_##SUF(const T *g, int64_t n) {                             \
    double total = 0;                                                                   \
    for (int64_t start = 0; start < n; start += (int64_t)BLOCK * GROUP) {               \
      int64_t len = n - start < (int64_t)BLOCK * GROUP ? n - start : (int64_t)BLOCK * GROUP; \
      int nb = (int)((len + BLOCK - 1) / BLOCK);                                        \
      double part[GROUP];                                                               \
      _Pragma("omp parallel for schedule(static) if (len > ZT_PAR_MIN)")                \
      for (int b = 0; b < nb; b++) {                                                    \
        int64_t lo = (int64_t)b * BLOCK, hi = lo + BLOCK < len ? lo + BLOCK : len;      \
        part[b] = sumsq_##SUF(g + start + lo, hi - lo);                                 \
      }                                                                                 \
      for (int b = 0; b < nb; b++) total += part[b];                                    \
    }                                                                                   \
    return total;                                                                       \
  }                                                                                     \
  /* g (n) *= s */                                                                      \
  static void scale_##SUF(T *restrict g, int64_t n, T s) {                              \
    _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)")               \
    for (int64_t i = 0; i < n; i++) g[i] *= s;                                          \
  }

DEFINE_SUMSQ(float, f32)
DEFINE_SUMSQ(double, f64)

double zt__cpu_sum_squares(void *ctx, const zt_tensor *t, int64_t lo, int64_t n) {
  (void)ctx;
  if (n <= 0) return 0;
  if (t->dtype == ZT_DTYPE_F32) return tensor_sumsq_f32((const float *)zt__tensor_ptr(t) + lo, n);
  ZT_ASSERT(t->dtype == ZT_DTYPE_F64);
  return tensor_sumsq_f64((const double *)zt__tensor_ptr(t) + lo, n);
}

void zt__cpu_scale_tensor(void *ctx, zt_tensor *t, double s) {
  (void)ctx;
  int64_t n = zt_tensor_numel(t);
  if (n == 0) return;
  if (t->dtype == ZT_DTYPE_F32)
    scale_f32(zt__tensor_ptr(t), n, (float)s);
  else {
    ZT_ASSERT(t->dtype == ZT_DTYPE_F64);
    scale_f64(zt__tensor_ptr(t), n, s);
  }
}

/* ------------------------------------------------ optimizer updates */
/* AdamW on one parameter, one pass (memory-bound: w, g, m, v read once; w, m, v written
 * once). Constants are f32, computed once per step in double. Each element's arithmetic
 * is the same whatever the thread count or where a thread's chunk starts. GCC vectorises
 * the loop only under -fno-math-errno (else sqrtf keeps an errno branch): ~3x faster.
 *   w (n) =, g (n), m (n) =, v (n) = */
static void adamw_f32(float *restrict w, const float *restrict g, float *restrict m, float *restrict v, int64_t n,
                      float decay, float b1, float omb1, float b2, float omb2, float step_size, float bc2_sqrt,
                      float eps) {
#pragma omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i];
    float mi = b1 * m[i] + omb1 * gi;
    float vi = b2 * v[i] + omb2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    float denom = __builtin_sqrtf(vi) / bc2_sqrt + eps;
    w[i] = w[i] * decay - step_size * (mi / denom);
  }
}

/* SGD with momentum: buf = momentum buf + g (the buffer starts at zero, so the first
 * step gives buf = g exactly, as torch's), w -= lr buf.
 *   w (n) =, g (n), buf (n) = */
static void sgd_momentum_f32(float *restrict w, const float *restrict g, float *restrict buf, int64_t n, float decay,
                             float mom, float lr) {
#pragma omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float bi = mom * buf[i] + g[i];
    buf[i] = bi;
    w[i] = w[i] * decay - lr * bi;
  }
}

/* Plain SGD (momentum 0: no state, like torch).   w (n) =, g (n) */
static void sgd_f32(float *restrict w, const float *restrict g, int64_t n, float decay, float lr) {
#pragma omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) w[i] = w[i] * decay - lr * g[i];
}

void zt__cpu_adamw(void *ctx, zt_tensor *w, const zt_tensor *g, zt_tensor *m, zt_tensor *v,
                   const zt__optim_update *u) {
  (void)ctx;
  adamw_f32(zt__tensor_ptr(w), zt__tensor_ptr(g), zt__tensor_ptr(m), zt__tensor_ptr(v), zt_tensor_numel(w), u->decay,
            u->beta1, u->omb1, u->beta2, u->omb2, u->step_size, u->bc2_sqrt, u->eps);
}

void zt__cpu_sgd(void *ctx, zt_tensor *w, const zt_tensor *g, zt_tensor *buf, const zt__optim_update *u) {
  (void)ctx;
  if (buf)
    sgd_momentum_f32(zt__tensor_ptr(w), zt__tensor_ptr(g), zt__tensor_ptr(buf), zt_tensor_numel(w), u->decay,
                     u->momentum, u->lr);
  else
    sgd_f32(zt__tensor_ptr(w), zt__tensor_ptr(g), zt_tensor_numel(w), u->decay, u->lr);
}
