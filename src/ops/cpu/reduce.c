/* Reduction kernels. A sum over any set of dims is first rewritten on "groups": runs of
 * adjacent dims that are all reduced or all kept (size-1 dims dropped), so every case
 * becomes either "inner group kept" (accumulate whole rows: vectorises across columns)
 * or "inner group reduced" (contiguous dot-free sums). Work is split by shape only, so
 * results are bitwise independent of the thread count. */
#include <math.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "kernels.h"
#include "reduce.h"

/* Column chunk for "inner kept" sums: the f64 accumulator row lives on the stack. */
#define COLS 256
/* Elements per task when one output needs splitting into partial sums. */
#define BLK 16384
/* Split an output's reduction into blocks only when there are fewer tasks than this. */
#define FEW_TASKS 64

/* Groups of a contiguous tensor: size, element stride, reduced flag, stride in the
 * output (0 for reduced groups). n == 0 means one element. */
typedef struct geom {
  int n;
  int64_t size[ZT_MAX_DIMS];
  int64_t stride[ZT_MAX_DIMS];
  int64_t ostride[ZT_MAX_DIMS];
  bool red[ZT_MAX_DIMS];
} geom;

static void geom_build(int ndim, const int64_t *shape, uint32_t mask, geom *g) {
  g->n = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] == 1) continue;
    bool r = (mask >> d) & 1u;
    if (g->n && g->red[g->n - 1] == r) {
      g->size[g->n - 1] *= shape[d];
    } else {
      g->size[g->n] = shape[d];
      g->red[g->n] = r;
      g->n++;
    }
  }
  if (g->n == 0) { /* a single element: one kept group of size 1 */
    g->size[0] = 1;
    g->red[0] = false;
    g->n = 1;
  }
  int64_t s = 1, os = 1;
  for (int k = g->n - 1; k >= 0; k--) {
    g->stride[k] = s;
    s *= g->size[k];
    g->ostride[k] = g->red[k] ? 0 : os;
    if (!g->red[k]) os *= g->size[k];
  }
}

/* Row-major odometer over a few groups, tracking one offset. */
typedef struct odo {
  int n;
  int64_t size[ZT_MAX_DIMS], stride[ZT_MAX_DIMS], idx[ZT_MAX_DIMS];
  int64_t off;
} odo;

static void odo_init(odo *o, int n, const int64_t *size, const int64_t *stride, int64_t start) {
  o->n = n;
  o->off = 0;
  for (int d = n - 1; d >= 0; d--) {
    o->size[d] = size[d];
    o->stride[d] = stride[d];
    o->idx[d] = start % size[d];
    start /= size[d];
    o->off += o->idx[d] * stride[d];
  }
}

static inline void odo_next(odo *o) {
  for (int d = o->n - 1; d >= 0; d--) {
    o->off += o->stride[d];
    if (++o->idx[d] < o->size[d]) return;
    o->off -= o->size[d] * o->stride[d];
    o->idx[d] = 0;
  }
}

/* Pick the groups of one kind (reduced or kept) among the first n groups of g. */
static int pick(const geom *g, int n, bool red, int64_t *size, int64_t *stride, int64_t *count) {
  int k = 0;
  *count = 1;
  for (int i = 0; i < n; i++)
    if (g->red[i] == red) {
      size[k] = g->size[i];
      stride[k] = g->stride[i];
      *count *= g->size[i];
      k++;
    }
  return k;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#define ZT_DEFINE_SUM(T, SUF)                                                                                        \
  /* inner group kept, width I: out (rows, I) = scale * sum over reduced outer groups of in rows. */                 \
  static zt_status sum_inner_kept_##SUF(const geom *g, const T *restrict in, double scale, T *restrict out) {        \
    int m = g->n - 1;                                                                                                \
    int64_t I = g->size[m];                                                                                          \
    int64_t ksize[ZT_MAX_DIMS], kstr[ZT_MAX_DIMS], rsize[ZT_MAX_DIMS], rstr[ZT_MAX_DIMS], nrows, nred;               \
    int nk = pick(g, m, false, ksize, kstr, &nrows);                                                                 \
    int nr = pick(g, m, true, rsize, rstr, &nred);                                                                   \
    int64_t nchunks = ceil_div(I, COLS), w0 = I < COLS ? I : COLS;                                                   \
    int64_t rb = nred, nblocks = 1;                                                                                  \
    if (nrows * nchunks < FEW_TASKS && nred * w0 > BLK) {                                                            \
      rb = BLK / w0 > 1 ? BLK / w0 : 1;                                                                              \
      nblocks = ceil_div(nred, rb);                                                                                  \
    }                                                                                                                \
    double *part = NULL;                                                                                             \
    size_t pbytes = (size_t)(nrows * nblocks * I) * sizeof(double);                                                  \
    if (nblocks > 1) ZT_TRY(zt_mem_alloc(pbytes, ZT_CPU, ZT_MEM_TAG_TEMP, (void **)&part));                          \
    int64_t ntasks = nrows * nchunks * nblocks;                                                                      \
    _Pragma("omp parallel for schedule(static) if (nrows * nred * I > ZT_PAR_MIN)")                                  \
    for (int64_t t = 0; t < ntasks; t++) {                                                                           \
      int64_t b = t % nblocks, c = (t / nblocks) % nchunks, o = t / (nblocks * nchunks);                             \
      int64_t c0 = c * COLS, w = I - c0 < COLS ? I - c0 : COLS;                                                      \
      odo ko;                                                                                                        \
      odo_init(&ko, nk, ksize, kstr, o);                                                                             \
      int64_t base = ko.off;                                                                                         \
      double acc[COLS];                                                                                              \
      for (int64_t j = 0; j < w; j++) acc[j] = 0;                                                                    \
      int64_t r0 = b * rb, r1 = r0 + rb < nred ? r0 + rb : nred;                                                     \
      odo ro;                                                                                                        \
      odo_init(&ro, nr, rsize, rstr, r0);                                                                            \
      for (int64_t r = r0; r < r1; r++) {                                                                            \
        const T *src = in + base + ro.off + c0;                                                                      \
        _Pragma("omp simd") for (int64_t j = 0; j < w; j++) acc[j] += (double)src[j];                                \
        odo_next(&ro);                                                                                               \
      }                                                                                                              \
      if (part) {                                                                                                    \
        double *dst = part + (o * nblocks + b) * I + c0;                                                             \
        for (int64_t j = 0; j < w; j++) dst[j] = acc[j];                                                             \
      } else {                                                                                                       \
        T *dst = out + o * I + c0;                                                                                   \
        for (int64_t j = 0; j < w; j++) dst[j] = (T)(scale * acc[j]);                                                \
      }                                                                                                              \
    }                                                                                                                \
    if (part) {                                                                                                      \
      for (int64_t o = 0; o < nrows; o++)                                                                            \
        for (int64_t j = 0; j < I; j++) {                                                                            \
          double s = 0;                                                                                              \
          for (int64_t b = 0; b < nblocks; b++) s += part[(o * nblocks + b) * I + j];                                \
          out[o * I + j] = (T)(scale * s);                                                                           \
        }                                                                                                            \
      zt_mem_free(part, pbytes, ZT_CPU, ZT_MEM_TAG_TEMP);                                                            \
    }                                                                                                                \
    return ZT_OK;                                                                                                    \
  }                                                                                                                  \
  /* inner group reduced, length L: out (n) = scale * sum over reduced outer groups x L contiguous. */               \
  static zt_status sum_inner_red_##SUF(const geom *g, const T *restrict in, double scale, T *restrict out) {         \
    int m = g->n - 1;                                                                                                \
    int64_t L = g->size[m];                                                                                          \
    int64_t ksize[ZT_MAX_DIMS], kstr[ZT_MAX_DIMS], rsize[ZT_MAX_DIMS], rstr[ZT_MAX_DIMS], nout, nred;                \
    int nk = pick(g, m, false, ksize, kstr, &nout);                                                                  \
    int nr = pick(g, m, true, rsize, rstr, &nred);                                                                   \
    int64_t E = nred * L, nblocks = 1, eb = E;                                                                       \
    if (nout < FEW_TASKS && E > BLK) {                                                                               \
      eb = BLK;                                                                                                      \
      nblocks = ceil_div(E, BLK);                                                                                    \
    }                                                                                                                \
    double *part = NULL;                                                                                             \
    size_t pbytes = (size_t)(nout * nblocks) * sizeof(double);                                                       \
    if (nblocks > 1) ZT_TRY(zt_mem_alloc(pbytes, ZT_CPU, ZT_MEM_TAG_TEMP, (void **)&part));                          \
    int64_t ntasks = nout * nblocks;                                                                                 \
    _Pragma("omp parallel for schedule(static) if (nout * E > ZT_PAR_MIN)")                                          \
    for (int64_t t = 0; t < ntasks; t++) {                                                                           \
      int64_t b = t % nblocks, o = t / nblocks;                                                                      \
      odo ko;                                                                                                        \
      odo_init(&ko, nk, ksize, kstr, o);                                                                             \
      int64_t base = ko.off;                                                                                         \
      int64_t e = b * eb, e1 = e + eb < E ? e + eb : E;                                                              \
      odo ro;                                                                                                        \
      odo_init(&ro, nr, rsize, rstr, e / L);                                                                         \
      double acc = 0;                                                                                                \
      while (e < e1) {                                                                                               \
        int64_t j = e % L, len = L - j < e1 - e ? L - j : e1 - e;                                                    \
        const T *src = in + base + ro.off + j;                                                                       \
        double s = 0;                                                                                                \
        _Pragma("omp simd reduction(+ : s)") for (int64_t q = 0; q < len; q++) s += (double)src[q];                  \
        acc += s;                                                                                                    \
        e += len;                                                                                                    \
        if (j + len == L) odo_next(&ro);                                                                             \
      }                                                                                                              \
      if (part)                                                                                                      \
        part[t] = acc;                                                                                               \
      else                                                                                                           \
        out[o] = (T)(scale * acc);                                                                                   \
    }                                                                                                                \
    if (part) {                                                                                                      \
      for (int64_t o = 0; o < nout; o++) {                                                                           \
        double s = 0;                                                                                                \
        for (int64_t b = 0; b < nblocks; b++) s += part[o * nblocks + b];                                            \
        out[o] = (T)(scale * s);                                                                                     \
      }                                                                                                              \
      zt_mem_free(part, pbytes, ZT_CPU, ZT_MEM_TAG_TEMP);                                                            \
    }                                                                                                                \
    return ZT_OK;                                                                                                    \
  }                                                                                                                  \
  /* gx (rows, L) = scale * g at each row's output offset (a row when the inner group is kept). */                   \
  static void sum_bwd_##SUF(const geom *g, const T *restrict go, T s, T *restrict gx) {                              \
    int m = g->n - 1;                                                                                                \
    int64_t L = g->size[m], nrows = 1;                                                                               \
    for (int k = 0; k < m; k++) nrows *= g->size[k];                                                                 \
    bool kept = !g->red[m];                                                                                          \
    int64_t rb = BLK / L > 1 ? BLK / L : 1, nblocks = ceil_div(nrows, rb);                                           \
    _Pragma("omp parallel for schedule(static) if (nrows * L > ZT_PAR_MIN)")                                         \
    for (int64_t b = 0; b < nblocks; b++) {                                                                          \
      int64_t q0 = b * rb, q1 = q0 + rb < nrows ? q0 + rb : nrows;                                                   \
      odo oo;                                                                                                        \
      odo_init(&oo, m, g->size, g->ostride, q0);                                                                     \
      for (int64_t q = q0; q < q1; q++) {                                                                            \
        int64_t off = oo.off;                                                                                        \
        T *dst = gx + q * L;                                                                                         \
        if (kept) {                                                                                                  \
          const T *src = go + off;                                                                                   \
          _Pragma("omp simd") for (int64_t j = 0; j < L; j++) dst[j] = s * src[j];                                   \
        } else {                                                                                                     \
          T v = s * go[off];                                                                                         \
          _Pragma("omp simd") for (int64_t j = 0; j < L; j++) dst[j] = v;                                            \
        }                                                                                                            \
        odo_next(&oo);                                                                                               \
      }                                                                                                              \
    }                                                                                                                \
  }

ZT_DEFINE_SUM(float, f32)
ZT_DEFINE_SUM(double, f64)

zt_status zt__cpu_sum(const zt_tensor *a, uint32_t mask, double scale, zt_tensor *out) {
  int64_t nout = zt_tensor_numel(out);
  if (nout == 0) return ZT_OK;
  if (zt_tensor_numel(a) == 0) { /* reducing an empty dim: sum 0, mean 0 * inf = NaN */
    return zt_tensor_fill_(out, 0.0 * scale);
  }
  geom g;
  geom_build(a->ndim, a->shape, mask, &g);
  bool kept = !g.red[g.n - 1];
  if (a->dtype == ZT_DTYPE_F32)
    return kept ? sum_inner_kept_f32(&g, zt__tensor_ptr(a), scale, zt__tensor_ptr(out))
                : sum_inner_red_f32(&g, zt__tensor_ptr(a), scale, zt__tensor_ptr(out));
  return kept ? sum_inner_kept_f64(&g, zt__tensor_ptr(a), scale, zt__tensor_ptr(out))
              : sum_inner_red_f64(&g, zt__tensor_ptr(a), scale, zt__tensor_ptr(out));
}

void zt__cpu_sum_backward(const zt_tensor *g, uint32_t mask, double scale, zt_tensor *gx) {
  if (zt_tensor_numel(gx) == 0) return;
  geom gm;
  geom_build(gx->ndim, gx->shape, mask, &gm);
  if (gx->dtype == ZT_DTYPE_F32)
    sum_bwd_f32(&gm, zt__tensor_ptr(g), (float)scale, zt__tensor_ptr(gx));
  else
    sum_bwd_f64(&gm, zt__tensor_ptr(g), scale, zt__tensor_ptr(gx));
}

/* ------------------------------------------------------------------ max over one dim */

/* x beats the current best v: strictly larger, or the first NaN. */
#define BEATS(x, v) ((x) > (v) || ((x) != (x) && (v) == (v)))

#define ZT_DEFINE_MAX(T, SUF)                                                                                        \
  static void max_##SUF(const T *restrict a, int64_t outer, int64_t n, int64_t inner, T *restrict v,                 \
                        int64_t *restrict idx) {                                                                     \
    if (inner == 1) {                                                                                                \
      _Pragma("omp parallel for schedule(static) if (outer * n > ZT_PAR_MIN)")                                       \
      for (int64_t o = 0; o < outer; o++) {                                                                          \
        const T *row = a + o * n;                                                                                    \
        T best = row[0];                                                                                             \
        int64_t bi = 0;                                                                                              \
        for (int64_t k = 1; k < n; k++)                                                                              \
          if (BEATS(row[k], best)) {                                                                                 \
            best = row[k];                                                                                           \
            bi = k;                                                                                                  \
          }                                                                                                          \
        v[o] = best;                                                                                                 \
        idx[o] = bi;                                                                                                 \
      }                                                                                                              \
      return;                                                                                                        \
    }                                                                                                                \
    /* columns: compare whole rows k against the best so far (vectorises across inner) */                            \
    int64_t nchunks = ceil_div(inner, COLS), ntasks = outer * nchunks;                                               \
    _Pragma("omp parallel for schedule(static) if (outer * n * inner > ZT_PAR_MIN)")                                 \
    for (int64_t t = 0; t < ntasks; t++) {                                                                           \
      int64_t o = t / nchunks, c0 = (t % nchunks) * COLS, w = inner - c0 < COLS ? inner - c0 : COLS;                 \
      const T *src = a + o * n * inner + c0;                                                                         \
      T *bv = v + o * inner + c0;                                                                                    \
      int64_t *bi = idx + o * inner + c0;                                                                            \
      for (int64_t j = 0; j < w; j++) {                                                                              \
        bv[j] = src[j];                                                                                              \
        bi[j] = 0;                                                                                                   \
      }                                                                                                              \
      for (int64_t k = 1; k < n; k++) {                                                                              \
        const T *row = src + k * inner;                                                                              \
        for (int64_t j = 0; j < w; j++)                                                                              \
          if (BEATS(row[j], bv[j])) {                                                                                \
            bv[j] = row[j];                                                                                          \
            bi[j] = k;                                                                                               \
          }                                                                                                          \
      }                                                                                                              \
    }                                                                                                                \
  }                                                                                                                  \
  static void max_bwd_##SUF(const T *restrict g, const int64_t *restrict idx, int64_t outer, int64_t n,              \
                            int64_t inner, T *restrict gx) {                                                         \
    _Pragma("omp parallel for schedule(static) if (outer * n * inner > ZT_PAR_MIN)")                                 \
    for (int64_t o = 0; o < outer; o++) {                                                                            \
      T *dst = gx + o * n * inner;                                                                                   \
      memset(dst, 0, sizeof(T) * (size_t)(n * inner));                                                               \
      for (int64_t i = 0; i < inner; i++) dst[idx[o * inner + i] * inner + i] = g[o * inner + i];                    \
    }                                                                                                                \
  }

ZT_DEFINE_MAX(float, f32)
ZT_DEFINE_MAX(double, f64)

void zt__cpu_max(const zt_tensor *a, int64_t outer, int64_t n, int64_t inner, zt_tensor *values,
                 zt_tensor *indices) {
  if (outer * inner == 0) return;
  if (a->dtype == ZT_DTYPE_F32)
    max_f32(zt__tensor_ptr(a), outer, n, inner, zt__tensor_ptr(values), zt__tensor_ptr(indices));
  else
    max_f64(zt__tensor_ptr(a), outer, n, inner, zt__tensor_ptr(values), zt__tensor_ptr(indices));
}

void zt__cpu_max_backward(const zt_tensor *g, const zt_tensor *indices, int64_t outer, int64_t n, int64_t inner,
                          zt_tensor *gx) {
  if (outer * n * inner == 0) return;
  if (g->dtype == ZT_DTYPE_F32)
    max_bwd_f32(zt__tensor_ptr(g), zt__tensor_ptr(indices), outer, n, inner, zt__tensor_ptr(gx));
  else
    max_bwd_f64(zt__tensor_ptr(g), zt__tensor_ptr(indices), outer, n, inner, zt__tensor_ptr(gx));
}
