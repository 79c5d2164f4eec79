/* Registry entry for lm_head_cross_entropy: mean cross-entropy of x (N, C) . W (V, C)^T
 * without ever holding the N x V logits. Rows go through a chunk buffer of at most ~100 MB
 * (512 rows); when a grad is needed (known in forward from the node's edges) each chunk's
 * dlogits = (softmax - onehot) / n_valid is made in place and folded at once into
 * dx (=, per chunk) and dW (+=, over chunks) by GEMMs. Those grads are saved and backward
 * only scales them by the incoming grad: the same maths as matmul + cross_entropy, with
 * the logits computed once and no N x V tensor ever alive. */
#include <limits.h>

#include "core/backend.h"
#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__lm_head_kernels *)(x)->kernels)

/* attrs.i: ignore_index; saved-tensor index of dx and dW (-1: not computed). */
enum { LMH_IGNORE, LMH_SAVE_DX, LMH_SAVE_DW };

/* Bytes of logits a chunk may hold (512 rows of GPT-2's 50257). Every chunk re-packs W
 * for its two W GEMMs and re-reads dW for its += GEMM, so bigger chunks are faster: at
 * B*T = 1024, 512-row chunks make the op ~8% faster than 256-row ones; a cap keeps the
 * buffer far below N x V for long batches. */
#define CHUNK_BYTES ((int64_t)100 << 20)
#define CHUNK_MIN_ROWS 16
#define CHUNK_MAX_ROWS 512

/* dW's GEMM runs over at most this many of its V rows at a time: OpenBLAS packs dlogits^T into
 * its per-thread buffers, which stay resident for the process's life, about rows x min(chunk
 * rows, its K block) floats: 49.6 MiB for GPT-2's 50257 rows in 512-row chunks, about 4 MiB in
 * blocks of 4096 rows (test_ops_lm_head's test_lm_head_blas_buffer), RAM that no accounting
 * sees and the --mem-limit planner would have to guess. (OpenBLAS may order a block's sums
 * differently from the whole's: the last bit can differ from one GEMM over all rows, never
 * between runs.) */
#define DW_ROWS ((int64_t)4096)

/* Tests force small chunks to exercise the multi-chunk path (0: automatic). */
static int64_t chunk_rows_override = 0;
void zt__lm_head_set_chunk_rows(int64_t rows) { chunk_rows_override = rows > 0 ? rows : 0; }

static int64_t chunk_rows(int64_t N, int64_t V, size_t es) {
  if (N <= 0) return 1;
  if (chunk_rows_override) return chunk_rows_override < N ? chunk_rows_override : N;
  int64_t max = CHUNK_BYTES / (V * (int64_t)es);
  max = max < CHUNK_MIN_ROWS ? CHUNK_MIN_ROWS : max > CHUNK_MAX_ROWS ? CHUNK_MAX_ROWS : max;
  /* equal chunks (a multiple of 16 rows) rather than full ones and a small remainder:
   * every chunk's GEMMs keep the same, large shape */
  int64_t n_chunks = (N + max - 1) / max, rows = (N + n_chunks - 1) / n_chunks;
  rows = (rows + 15) / 16 * 16;
  return rows < N ? rows : N;
}

static zt_status lmh_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0], *w = c->in[1], *t = c->in[2];
  if (!x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "x is NULL");
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "weight is NULL");
  if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "targets is NULL");
  ZT_TRY(zt__check_float(c->op->name, x, "x"));
  ZT_TRY(zt__check_same_dtype(c->op->name, x, w));
  if (t->dtype != ZT_DTYPE_I32 && t->dtype != ZT_DTYPE_I64)
    return ZT_ERR(ZT_STATUS_DTYPE, "targets have dtype %s; they must be class indices of dtype i32 or i64",
                  zt_dtype_name(t->dtype));
  char sx[128], sw[128], st[128];
  if (x->ndim != 2 || w->ndim != 2 || x->shape[1] != w->shape[1])
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "x %s and weight %s do not fit: x must be (N, C) and weight (V, C) with the same C (reshape "
                  "(B, T, C) activations to (B*T, C))",
                  zt_shape_str(x->ndim, x->shape, sx), zt_shape_str(w->ndim, w->shape, sw));
  if (t->ndim != 1 || t->shape[0] != x->shape[0])
    return ZT_ERR(ZT_STATUS_SHAPE, "targets have shape %s but x %s needs targets of shape (%lld,) (one per row)",
                  zt_shape_str(t->ndim, t->shape, st), zt_shape_str(x->ndim, x->shape, sx), (long long)x->shape[0]);
  if (w->shape[0] == 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "weight %s has no classes (V = 0)", zt_shape_str(w->ndim, w->shape, sw));
  if (w->shape[0] > INT_MAX || w->shape[1] > INT_MAX)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "weight %s has a dim above the %d that BLAS (32-bit int) takes",
                  zt_shape_str(w->ndim, w->shape, sw), INT_MAX);
  c->out_meta[0].ndim = 0;
  c->out_meta[0].dtype = x->dtype;
  c->n_out = 1;
  return ZT_OK;
}

typedef struct lmh_work {
  const zt__lm_head_kernels *kt;
  zt_dtype dt;
  int64_t N, C, V, rows;
  const char *x, *w;
  const char *tg;
  bool i32;
  size_t es, ts;
} lmh_work;

/* Runs every chunk; dx / dW (contiguous, may be NULL) get the grads scaled by `scale`.
 * buf holds rows x V logits, loss rows doubles. Returns the sum of row losses. */
static double lmh_chunks(const lmh_work *k, int64_t ignore, double scale, char *buf, double *loss, zt_tensor *dx,
                         zt_tensor *dw) {
  bool grad = dx || dw;
  double sum = 0;
  for (int64_t r0 = 0; r0 < k->N; r0 += k->rows) {
    int64_t n = k->N - r0 < k->rows ? k->N - r0 : k->rows;
    const char *xc = k->x + (size_t)(r0 * k->C) * k->es;
    // logits (n, V) = x_chunk (n, C) . W^T (C, V)
    k->kt->gemm(k->dt, false, true, n, k->V, k->C, xc, k->C, k->w, k->C, 0.0, buf, k->V);
    // loss (n) = lse - logit[target]; grad: buf (=) scale * (softmax - onehot), in place
    k->kt->chunk(k->dt, buf, k->tg + (size_t)r0 * k->ts, k->i32, n, k->V, ignore, grad, scale, loss);
    for (int64_t r = 0; r < n; r++) sum += loss[r]; /* row order: independent of threads */
    if (dx) {
      // dx[r0:r0+n] (n, C) = dlogits (n, V) . W (V, C)
      k->kt->gemm(k->dt, false, false, n, k->C, k->V, buf, k->V, k->w, k->C, 0.0,
                  (char *)zt__tensor_ptr(dx) + (size_t)(r0 * k->C) * k->es, k->C);
    }
    // dW (V, C) (= first chunk, += later) dlogits^T (V, n) . x_chunk (n, C), DW_ROWS rows of it per GEMM
    for (int64_t v0 = 0; dw && v0 < k->V; v0 += DW_ROWS) {
      int64_t m = k->V - v0 < DW_ROWS ? k->V - v0 : DW_ROWS;
      k->kt->gemm(k->dt, true, false, m, k->C, n, buf + (size_t)v0 * k->es, k->V, xc, k->C, r0 == 0 ? 0.0 : 1.0,
                  (char *)zt__tensor_ptr(dw) + (size_t)(v0 * k->C) * k->es, k->C);
    }
  }
  return sum;
}

static zt_status bad_target(int64_t pos, int64_t val, int64_t V, int64_t ignore) {
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "target at position %lld is %lld, outside [0, %lld) and not ignore_index (%lld)", (long long)pos,
                (long long)val, (long long)V, (long long)ignore);
}

static zt_status lmh_forward(zt__op_call *c) {
  zt_tensor *x = c->in[0], *w = c->in[1], *t = c->in[2];
  int64_t ignore = c->attrs.i[LMH_IGNORE], N = x->shape[0], C = x->shape[1], V = w->shape[0];
  int64_t bad_val = 0, count = 0, bad = K(c)->check_targets(t, V, ignore, &bad_val, &count);
  if (bad >= 0) return bad_target(bad, bad_val, V, ignore);
  c->attrs.i[LMH_SAVE_DX] = c->attrs.i[LMH_SAVE_DW] = -1;

  /* Which grads backward can ask for is fixed now: the node's edges. */
  bool need_dx = c->node && c->node->next[0].node, need_dw = c->node && c->node->next[1].node;
  zt_device dev = zt_tensor_device(x);
  lmh_work k = {K(c), x->dtype, N, C, V, chunk_rows(N, V, zt_dtype_size(x->dtype)), zt__tensor_ptr(x),
                zt__tensor_ptr(w), zt__tensor_ptr(t), t->dtype == ZT_DTYPE_I32, zt_dtype_size(x->dtype),
                zt_dtype_size(t->dtype)};
  zt_tensor *dx = NULL, *dw = NULL;
  char *buf = NULL;
  double *loss = NULL;
  size_t buf_bytes = (size_t)(k.rows * V) * k.es, loss_bytes = sizeof(double) * (size_t)k.rows;
  zt_status s = ZT_OK;
  if (need_dx) s = zt_tensor_empty(2, (int64_t[]){N, C}, x->dtype, dev, &dx);
  /* dW is a weight gradient from birth (the leaf usually adopts these very bytes) */
  if (!s && need_dw)
    s = N ? zt_tensor_empty_tagged(2, (int64_t[]){V, C}, x->dtype, dev, ZT_MEM_TAG_GRAD, &dw)
          : zt_tensor_zeros(2, (int64_t[]){V, C}, x->dtype, dev, &dw);
  if (!s) s = zt_mem_alloc(buf_bytes, dev, ZT_MEM_TAG_TEMP, (void **)&buf);
  if (!s) s = zt_mem_alloc(loss_bytes, dev, ZT_MEM_TAG_TEMP, (void **)&loss);
  if (!s) {
    double scale = count ? 1.0 / (double)count : 0.0; /* all ignored: loss 0 and zero grads */
    double sum = lmh_chunks(&k, ignore, scale, buf, loss, dx, dw);
    double l = count ? sum / (double)count : 0.0;
    float lf = (float)l;
    zt__dev_write_range(c->out[0], 0, 1, x->dtype == ZT_DTYPE_F32 ? (const void *)&lf : (const void *)&l);
  }
  if (buf) zt_mem_free(buf, buf_bytes, dev, ZT_MEM_TAG_TEMP);
  if (loss) zt_mem_free(loss, loss_bytes, dev, ZT_MEM_TAG_TEMP);
  int idx = 0;
  if (!s && dx) {
    s = zt__op_save(c, dx);
    c->attrs.i[LMH_SAVE_DX] = idx++;
  }
  if (!s && dw) {
    s = zt__op_save(c, dw);
    c->attrs.i[LMH_SAVE_DW] = idx++;
  }
  zt_tensor_free(dx); /* the saved records hold their own references */
  zt_tensor_free(dw);
  return s;
}

/* grad_in = g * saved grad. For g == 1 (a loss's backward) it is an alias of the saved
 * bytes: no copy, and once the node drops its saved tensors after backward, the leaf's
 * accumulator can adopt them. Otherwise a new scaled tensor, so a retained graph still
 * holds the unscaled grad for the next backward. */
static zt_status scaled_grad(zt__op_bwd *b, int64_t idx, double g, zt_tensor **out) {
  ZT_ASSERT(idx >= 0); /* an input that needs a grad had an edge in forward */
  zt_tensor *sv;
  ZT_TRY(zt__op_saved(b, (int)idx, &sv));
  if (g == 1.0) return zt_tensor_alias(sv, out);
  ZT_TRY(zt_tensor_empty(sv->ndim, sv->shape, sv->dtype, zt_tensor_device(sv), out));
  K(b)->scale(sv->dtype, zt_tensor_numel(sv), g, zt__tensor_ptr(sv), zt__tensor_ptr(*out));
  return ZT_OK;
}

static zt_status lmh_backward(zt__op_bwd *b) {
  double g = zt_tensor_get(b->grad_out[0], 0);
  if (b->needs_input_grad[0]) ZT_TRY(scaled_grad(b, b->attrs->i[LMH_SAVE_DX], g, &b->grad_in[0]));
  if (b->needs_input_grad[1]) ZT_TRY(scaled_grad(b, b->attrs->i[LMH_SAVE_DW], g, &b->grad_in[1]));
  return ZT_OK;
}

/* Input 2 (targets) is integer: never a grad. */
/* dx and dW were made in forward: each grad reads its own slot. */
static uint64_t lmh_saves_read(const zt__op_attrs *a, int input) {
  int64_t i = input == 0 ? a->i[LMH_SAVE_DX] : input == 1 ? a->i[LMH_SAVE_DW] : -1;
  return i >= 0 && i < 64 ? (uint64_t)1 << i : 0;
}

static const zt__op op_lm_head_ce = {"lm_head_cross_entropy", "LmHeadCrossEntropyBackward", 3, ZT_OP_FLAG_ANY_DTYPE,
                                    1u << 2, lmh_shape, lmh_forward, lmh_backward, {[ZT_DEVICE_CPU] = &zt__cpu_lm_head_kernels}, lmh_saves_read};

zt_status zt_lm_head_cross_entropy(zt_tensor *x, zt_tensor *weight, zt_tensor *targets, int64_t ignore_index,
                                   zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[LMH_IGNORE] = ignore_index;
  return zt__op_run(&op_lm_head_ce, 3, (zt_tensor *[]){x, weight, targets}, &at, out);
}
