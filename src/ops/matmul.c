/* Registry entries for matmul (broadcast-batched, optional transposes), linear and
 * linear_io (linear on the (in, out) weight layout). All run on OpenBLAS GEMMs with
 * beta=0 writes; backward runs one GEMM per input that needs a grad, and each op saves
 * only what those GEMMs read (a for dB, b for dA), so frozen weights cost neither a
 * saved activation nor a weight-grad GEMM. */
#include <limits.h>

#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__matmul_kernels *)(x)->kernels)

/* attrs.i slots. Save slots hold the saved-tensor index, or -1 when nothing was saved;
 * LIN_LAYOUT holds the weight's lin_layout. */
enum { MM_TA, MM_TB, MM_SAVE_A, MM_SAVE_B };
enum { LIN_SAVE_X, LIN_SAVE_W, LIN_LAYOUT };

/* Which of (first, second) must be saved, decided before the node exists (the dispatcher
 * copies attrs into the node right after the shape rule): the grad of one input reads
 * the other, so `first` is needed exactly when `second` will get a grad. */
static void plan_saves(zt__op_call *c, const zt_tensor *first, const zt_tensor *second, int slot_first,
                       int slot_second) {
  bool rec = zt_grad_enabled();
  bool need_first = rec && second && second->requires_grad;
  bool need_second = rec && first && first->requires_grad;
  c->attrs.i[slot_first] = need_first ? 0 : -1;
  c->attrs.i[slot_second] = need_second ? (need_first ? 1 : 0) : -1;
}

static zt_status check_blas_size(const char *what, int64_t v) {
  if (v > INT_MAX)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "%s is %lld, more than the %d that BLAS (32-bit int) takes; split the work",
                  what, (long long)v, INT_MAX);
  return ZT_OK;
}

/* Saved tensor i (-1: not saved, a broken invariant). Unpacked saved tensors are
 * contiguous (the engine copies a strided result of an unpack hook). */
static zt_status saved(zt__op_bwd *bw, int64_t i, zt_tensor **out) {
  ZT_ASSERT(i >= 0);
  ZT_TRY(zt__op_saved(bw, (int)i, out));
  ZT_ASSERT(zt_tensor_is_contiguous(*out));
  return ZT_OK;
}

/* ------------------------------------------------------------------ matmul geometry */

/* The batch layout of a broadcasting matmul: out batch shape, element strides of each
 * contiguous operand along it (0 where broadcast), and the matrix sizes. */
typedef struct mm_geom {
  int nbd;
  int64_t bshape[ZT_MAX_DIMS], as[ZT_MAX_DIMS], bs[ZT_MAX_DIMS], cs[ZT_MAX_DIMS];
  int64_t M, N, K, lda, ldb;
  int64_t nb, nb_b; /* batch counts of the output and of b */
} mm_geom;

/* Strides of a contiguous operand's batch dims (shape[0..nd-2), matrices of mat
 * elements) seen from the out batch shape of nbd dims, 0 on dims the operand broadcasts;
 * *count (if not NULL) gets the operand's own batch count. */
static void batch_strides(int nd, const int64_t *shape, int64_t mat, int nbd, int64_t *st, int64_t *count) {
  int off = nbd - (nd - 2);
  int64_t s = mat, k = 1;
  for (int d = nbd - 1; d >= 0; d--) {
    int td = d - off;
    int64_t n = td >= 0 ? shape[td] : 1;
    st[d] = n == 1 ? 0 : s;
    s *= n;
    k *= n;
  }
  if (count) *count = k;
}

/* Fills g from the two operand shapes; on a mismatch returns an error naming both. */
static zt_status mm_geom_of(int na, const int64_t *sa, int nb, const int64_t *sb, bool ta, bool tb, mm_geom *g) {
  char s1[128], s2[128];
  if (na < 2 || nb < 2)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "a %s and b %s: both need at least 2 dims (..., rows, cols); reshape a vector to (1, n) or (n, 1)",
                  zt_shape_str(na, sa, s1), zt_shape_str(nb, sb, s2));
  g->M = ta ? sa[na - 1] : sa[na - 2];
  g->K = ta ? sa[na - 2] : sa[na - 1];
  g->N = tb ? sb[nb - 2] : sb[nb - 1];
  int64_t kb = tb ? sb[nb - 1] : sb[nb - 2];
  if (kb != g->K)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "a %s%s and b %s%s do not fit: the inner dims differ (K = %lld from a, %lld from b)",
                  zt_shape_str(na, sa, s1), ta ? " (transposed)" : "", zt_shape_str(nb, sb, s2),
                  tb ? " (transposed)" : "", (long long)g->K, (long long)kb);
  g->nbd = (na > nb ? na : nb) - 2;
  for (int d = 0; d < g->nbd; d++) {
    int da = d - (g->nbd - (na - 2)), db = d - (g->nbd - (nb - 2));
    int64_t x = da >= 0 ? sa[da] : 1, y = db >= 0 ? sb[db] : 1;
    if (x != y && x != 1 && y != 1)
      return ZT_ERR(ZT_STATUS_SHAPE,
                    "a %s and b %s: batch dims cannot be broadcast together (batch dim %d: %lld vs %lld)",
                    zt_shape_str(na, sa, s1), zt_shape_str(nb, sb, s2), d, (long long)x, (long long)y);
    g->bshape[d] = x == 1 ? y : x;
  }
  g->lda = ta ? g->M : g->K;
  g->ldb = tb ? g->K : g->N;
  batch_strides(na, sa, g->M * g->K, g->nbd, g->as, NULL);
  batch_strides(nb, sb, g->K * g->N, g->nbd, g->bs, &g->nb_b);
  g->nb = 1;
  for (int d = 0; d < g->nbd; d++) g->nb *= g->bshape[d];
  int64_t s = g->M * g->N;
  for (int d = g->nbd - 1; d >= 0; d--) {
    g->cs[d] = g->bshape[d] == 1 ? 0 : s;
    s *= g->bshape[d];
  }
  return ZT_OK;
}

/* b is one matrix shared by the whole batch and a is not transposed: the batch folds
 * into the rows of a single GEMM (a's batch then equals the out batch, contiguous). */
static bool mm_folds(const mm_geom *g, bool ta) { return !ta && g->nb_b == 1 && g->nb * g->M <= INT_MAX; }

static zt__gemm_batch mm_batch(const mm_geom *g, const int64_t *xs, const int64_t *ys, const int64_t *zs) {
  return (zt__gemm_batch){g->nbd, g->bshape, xs, ys, zs};
}

/* ------------------------------------------------------------------ matmul */

static zt_status matmul_shape(zt__op_call *c) {
  zt_tensor *a = c->in[0], *b = c->in[1];
  if (!a || !b) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input %s is NULL", a ? "b" : "a");
  ZT_TRY(zt__check_float(c->op->name, a, "input a"));
  ZT_TRY(zt__check_same_dtype(c->op->name, a, b));
  bool ta = c->attrs.i[MM_TA], tb = c->attrs.i[MM_TB];
  mm_geom g;
  ZT_TRY(mm_geom_of(a->ndim, a->shape, b->ndim, b->shape, ta, tb, &g));
  ZT_TRY(check_blas_size("M", g.M));
  ZT_TRY(check_blas_size("N", g.N));
  ZT_TRY(check_blas_size("K", g.K));
  zt__tensor_meta *m = &c->out_meta[0];
  m->ndim = g.nbd + 2;
  m->dtype = a->dtype;
  for (int d = 0; d < g.nbd; d++) m->shape[d] = g.bshape[d];
  m->shape[g.nbd] = g.M;
  m->shape[g.nbd + 1] = g.N;
  c->n_out = 1;
  plan_saves(c, a, b, MM_SAVE_A, MM_SAVE_B);
  return ZT_OK;
}

static zt_status matmul_forward(zt__op_call *c) {
  zt_tensor *a = c->in[0], *b = c->in[1], *y = c->out[0];
  bool ta = c->attrs.i[MM_TA], tb = c->attrs.i[MM_TB];
  mm_geom g;
  ZT_TRY(mm_geom_of(a->ndim, a->shape, b->ndim, b->shape, ta, tb, &g));
  const void *pa = zt__tensor_ptr(a), *pb = zt__tensor_ptr(b);
  void *py = zt__tensor_ptr(y);
  // saved before the GEMM: a recomputation that stops early at this save skips it
  if (c->attrs.i[MM_SAVE_A] >= 0) ZT_TRY(zt__op_save(c, a));
  if (c->attrs.i[MM_SAVE_B] >= 0) ZT_TRY(zt__op_save(c, b));
  if (mm_folds(&g, ta)) {
    // y (nb*M, N) = a (nb*M, K) . op(b) (K, N)
    K(c)->gemm(y->dtype, false, tb, g.nb * g.M, g.N, g.K, pa, g.lda, pb, g.ldb, 0.0, py, g.N);
  } else {
    // y[i] (M, N) = op(a[i]) (M, K) . op(b[i]) (K, N), every y slice written once (=)
    zt__gemm_batch bt = mm_batch(&g, g.as, g.bs, g.cs);
    K(c)->gemm_batched(y->dtype, &bt, ta, tb, g.M, g.N, g.K, pa, g.lda, pb, g.ldb, py, g.N);
  }
  return ZT_OK;
}

/* dA = g . op(b)^T (stored transposed when ta), summed over the batch dims a broadcasts. */
static zt_status matmul_grad_a(zt__op_bwd *bw, const mm_geom *g, bool ta, bool tb, const zt_tensor *b,
                               const zt_tensor *gy) {
  ZT_TRY(zt__op_grad_like_input(bw, 0, g->nb == 0, &bw->grad_in[0]));
  zt_dtype dt = gy->dtype;
  const void *pg = zt__tensor_ptr(gy), *pb = zt__tensor_ptr(b);
  void *pda = zt__tensor_ptr(bw->grad_in[0]);
  if (mm_folds(g, ta)) {
    // dA (nb*M, K) = g (nb*M, N) . op(b)^T (N, K)
    K(bw)->gemm(dt, false, !tb, g->nb * g->M, g->K, g->N, pg, g->N, pb, g->ldb, 0.0, pda, g->K);
  } else if (!ta) {
    // dA[i] (M, K) = g[i] (M, N) . op(b[i])^T (N, K); (=) first visit, (+=) after
    zt__gemm_batch bt = mm_batch(g, g->cs, g->bs, g->as);
    K(bw)->gemm_batched(dt, &bt, false, !tb, g->M, g->K, g->N, pg, g->N, pb, g->ldb, pda, g->K);
  } else {
    // dA[i] stored (K, M) = op(b[i]) (K, N) . g[i]^T (N, M)
    zt__gemm_batch bt = mm_batch(g, g->bs, g->cs, g->as);
    K(bw)->gemm_batched(dt, &bt, tb, true, g->K, g->M, g->N, pb, g->ldb, pg, g->N, pda, g->M);
  }
  return ZT_OK;
}

/* dB = op(a)^T . g (stored transposed when tb), summed over the batch dims b broadcasts. */
static zt_status matmul_grad_b(zt__op_bwd *bw, const mm_geom *g, bool ta, bool tb, const zt_tensor *a,
                               const zt_tensor *gy) {
  ZT_TRY(zt__op_grad_like_input(bw, 1, g->nb == 0, &bw->grad_in[1]));
  zt_dtype dt = gy->dtype;
  const void *pg = zt__tensor_ptr(gy), *pa = zt__tensor_ptr(a);
  void *pdb = zt__tensor_ptr(bw->grad_in[1]);
  bool fold = mm_folds(g, ta);
  int64_t rows = fold ? g->nb * g->M : g->M; /* the reduction length of one GEMM */
  if (fold && !tb) {
    // dB (K, N) = a^T (K, nb*M) . g (nb*M, N): the batch sum is the GEMM's own sum
    K(bw)->gemm(dt, true, false, g->K, g->N, rows, pa, g->K, pg, g->N, 0.0, pdb, g->N);
  } else if (fold) {
    // dB stored (N, K) = g^T (N, nb*M) . a (nb*M, K)
    K(bw)->gemm(dt, true, false, g->N, g->K, rows, pg, g->N, pa, g->K, 0.0, pdb, g->K);
  } else if (!tb) {
    // dB[i] (K, N) = op(a[i])^T (K, M) . g[i] (M, N); (=) first visit, (+=) after
    zt__gemm_batch bt = mm_batch(g, g->as, g->cs, g->bs);
    K(bw)->gemm_batched(dt, &bt, !ta, false, g->K, g->N, g->M, pa, g->lda, pg, g->N, pdb, g->N);
  } else {
    // dB[i] stored (N, K) = g[i]^T (N, M) . op(a[i]) (M, K)
    zt__gemm_batch bt = mm_batch(g, g->cs, g->as, g->bs);
    K(bw)->gemm_batched(dt, &bt, true, ta, g->N, g->K, g->M, pg, g->N, pa, g->lda, pdb, g->K);
  }
  return ZT_OK;
}

static zt_status matmul_backward(zt__op_bwd *bw) {
  bool ta = bw->attrs->i[MM_TA], tb = bw->attrs->i[MM_TB];
  const zt__tensor_meta *ma = &bw->in_meta[0], *mb = &bw->in_meta[1];
  mm_geom g;
  ZT_TRY(mm_geom_of(ma->ndim, ma->shape, mb->ndim, mb->shape, ta, tb, &g));
  zt_tensor *a = NULL, *b = NULL;
  if (bw->needs_input_grad[0]) {
    ZT_TRY(saved(bw, bw->attrs->i[MM_SAVE_B], &b));
    ZT_TRY(matmul_grad_a(bw, &g, ta, tb, b, bw->grad_out[0]));
  }
  if (bw->needs_input_grad[1]) {
    ZT_TRY(saved(bw, bw->attrs->i[MM_SAVE_A], &a));
    ZT_TRY(matmul_grad_b(bw, &g, ta, tb, a, bw->grad_out[0]));
  }
  return ZT_OK;
}

/* The slot of saved index i as a mask (none when not saved). */
static uint64_t slot_bit(int64_t i) { return i >= 0 && i < 64 ? (uint64_t)1 << i : 0; }
/* da reads b, db reads a. */
static uint64_t matmul_saves_read(const zt__op_attrs *a, int input) {
  return slot_bit(a->i[input == 0 ? MM_SAVE_B : MM_SAVE_A]);
}

static const zt__op op_matmul = {"matmul", "MatmulBackward", 2, 0, 0, matmul_shape, matmul_forward, matmul_backward, {[ZT_DEVICE_CPU] = &zt__cpu_matmul_kernels}, matmul_saves_read};

zt_status zt_matmul(zt_tensor *a, zt_tensor *b, bool trans_a, bool trans_b, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[MM_TA] = trans_a;
  at.i[MM_TB] = trans_b;
  return zt__op_run(&op_matmul, 2, (zt_tensor *[]){a, b}, &at, out);
}

/* ------------------------------------------------------------------ linear, linear_io */

/* linear and linear_io are one op over two weight layouts: W (out, in), applied
 * transposed (torch.nn.Linear), or W (in, out), applied as stored (GPT-2's Conv1D, so HF
 * weights need no conversion). All rows of x form one GEMM in forward and in each
 * backward GEMM; the layout only picks each GEMM's transposes and leading dims. */
typedef enum lin_layout { LIN_LAYOUT_OUT_IN, LIN_LAYOUT_IN_OUT } lin_layout;

/* Rows of x (..., in) seen as a matrix (R, in). */
static int64_t lin_rows(int ndim, const int64_t *shape) {
  int64_t r = 1;
  for (int d = 0; d < ndim - 1; d++) r *= shape[d];
  return r;
}

/* in and out of a 2-D weight of the given layout. */
static void lin_dims(lin_layout lay, const int64_t *wshape, int64_t *nin, int64_t *nout) {
  bool oi = lay == LIN_LAYOUT_OUT_IN;
  *nin = wshape[oi ? 1 : 0];
  *nout = wshape[oi ? 0 : 1];
}

static zt_status linear_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0], *w = c->in[1], *bias = c->in[2];
  lin_layout lay = (lin_layout)c->attrs.i[LIN_LAYOUT];
  if (!x || !w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input %s is NULL (only bias may be NULL)", x ? "weight" : "x");
  ZT_TRY(zt__check_float(c->op->name, x, "input x"));
  ZT_TRY(zt__check_same_dtype(c->op->name, x, w));
  if (bias) ZT_TRY(zt__check_same_dtype(c->op->name, x, bias));
  char s1[128], s2[128];
  int64_t nin = 0, nout = 0;
  if (w->ndim == 2) lin_dims(lay, w->shape, &nin, &nout);
  if (x->ndim < 1 || w->ndim != 2 || nin != x->shape[x->ndim - 1])
    return ZT_ERR(ZT_STATUS_SHAPE, "x %s and weight %s do not fit: x must be (..., in) and weight %s with the same in",
                  zt_shape_str(x->ndim, x->shape, s1), zt_shape_str(w->ndim, w->shape, s2),
                  lay == LIN_LAYOUT_OUT_IN ? "(out, in)" : "(in, out)");
  if (bias && (bias->ndim != 1 || bias->shape[0] != nout))
    return ZT_ERR(ZT_STATUS_SHAPE, "bias %s does not fit weight %s: bias must be (%lld,) (one per output)",
                  zt_shape_str(bias->ndim, bias->shape, s1), zt_shape_str(w->ndim, w->shape, s2), (long long)nout);
  ZT_TRY(check_blas_size("the row count of x", lin_rows(x->ndim, x->shape)));
  ZT_TRY(check_blas_size("in", nin));
  ZT_TRY(check_blas_size("out", nout));
  zt__tensor_meta *m = &c->out_meta[0];
  zt__meta_of(x, m);
  m->shape[m->ndim - 1] = nout;
  c->n_out = 1;
  plan_saves(c, x, w, LIN_SAVE_X, LIN_SAVE_W);
  return ZT_OK;
}

static zt_status linear_forward(zt__op_call *c) {
  zt_tensor *x = c->in[0], *w = c->in[1], *bias = c->in[2], *y = c->out[0];
  bool oi = c->attrs.i[LIN_LAYOUT] == LIN_LAYOUT_OUT_IN;
  int64_t R = lin_rows(x->ndim, x->shape), nin, nout;
  lin_dims((lin_layout)c->attrs.i[LIN_LAYOUT], w->shape, &nin, &nout);
  void *py = zt__tensor_ptr(y);
  // y (R, out) = bias (out) per row (=), then y += x (R, in) . W^T (in, out) [W (out, in)]
  //                                      or  y += x (R, in) . W (in, out)   [W (in, out)]
  // saved before the GEMM: a recomputation that stops early at this save skips it
  if (c->attrs.i[LIN_SAVE_X] >= 0) ZT_TRY(zt__op_save(c, x));
  if (c->attrs.i[LIN_SAVE_W] >= 0) ZT_TRY(zt__op_save(c, w));
  if (bias) K(c)->fill_rows(y->dtype, R, nout, zt__tensor_ptr(bias), py);
  K(c)->gemm(y->dtype, false, oi, R, nout, nin, zt__tensor_ptr(x), nin, zt__tensor_ptr(w), w->shape[1],
             bias ? 1.0 : 0.0, py, nout);
  return ZT_OK;
}

static zt_status linear_backward(zt__op_bwd *bw) {
  const zt__tensor_meta *mx = &bw->in_meta[0], *mw = &bw->in_meta[1];
  bool oi = bw->attrs->i[LIN_LAYOUT] == LIN_LAYOUT_OUT_IN;
  int64_t R = lin_rows(mx->ndim, mx->shape), nin, nout;
  lin_dims((lin_layout)bw->attrs->i[LIN_LAYOUT], mw->shape, &nin, &nout);
  const zt_tensor *gy = bw->grad_out[0];
  zt_dtype dt = gy->dtype;
  const void *pg = zt__tensor_ptr(gy);
  if (bw->needs_input_grad[0]) {
    zt_tensor *w;
    ZT_TRY(saved(bw, bw->attrs->i[LIN_SAVE_W], &w));
    ZT_TRY(zt__op_grad_like_input(bw, 0, false, &bw->grad_in[0]));
    // dx (R, in) = g (R, out) . W (out, in)   [W (out, in)]
    //           or g (R, out) . W^T (out, in) [W (in, out)]
    K(bw)->gemm(dt, false, !oi, R, nin, nout, pg, nout, zt__tensor_ptr(w), mw->shape[1], 0.0,
                zt__tensor_ptr(bw->grad_in[0]), nin);
  }
  if (bw->needs_input_grad[1]) {
    zt_tensor *x;
    ZT_TRY(saved(bw, bw->attrs->i[LIN_SAVE_X], &x));
    ZT_TRY(zt__op_grad_like_input(bw, 1, false, &bw->grad_in[1]));
    const void *px = zt__tensor_ptr(x);
    void *pdw = zt__tensor_ptr(bw->grad_in[1]);
    // one GEMM over every row of the batch
    if (oi) // dW (out, in) = g^T (out, R) . x (R, in)
      K(bw)->gemm(dt, true, false, nout, nin, R, pg, nout, px, nin, 0.0, pdw, nin);
    else // dW (in, out) = x^T (in, R) . g (R, out)
      K(bw)->gemm(dt, true, false, nin, nout, R, px, nin, pg, nout, 0.0, pdw, nout);
  }
  if (bw->needs_input_grad[2]) {
    ZT_TRY(zt__op_grad_like_input(bw, 2, false, &bw->grad_in[2]));
    // db (out) = column sums of g (R, out)
    K(bw)->col_sum(dt, R, nout, pg, zt__tensor_ptr(bw->grad_in[2]));
  }
  return ZT_OK;
}

/* dx reads W, dW reads x, db only the output grad. */
static uint64_t linear_saves_read(const zt__op_attrs *a, int input) {
  return input == 0 ? slot_bit(a->i[LIN_SAVE_W]) : input == 1 ? slot_bit(a->i[LIN_SAVE_X]) : 0;
}

static const zt__op op_linear = {"linear", "LinearBackward", 3, 0, 0, linear_shape, linear_forward, linear_backward, {[ZT_DEVICE_CPU] = &zt__cpu_matmul_kernels}, linear_saves_read};
static const zt__op op_linear_io = {"linear_io", "LinearIoBackward", 3, 0, 0, linear_shape, linear_forward,
                                   linear_backward, {[ZT_DEVICE_CPU] = &zt__cpu_matmul_kernels}, linear_saves_read};

static zt_status linear_run(const zt__op *op, lin_layout lay, zt_tensor *x, zt_tensor *weight, zt_tensor *bias,
                            zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[LIN_LAYOUT] = lay;
  return zt__op_run(op, 3, (zt_tensor *[]){x, weight, bias}, &at, out);
}

zt_status zt_linear(zt_tensor *x, zt_tensor *weight, zt_tensor *bias, zt_tensor **out) {
  return linear_run(&op_linear, LIN_LAYOUT_OUT_IN, x, weight, bias, out);
}

zt_status zt_linear_io(zt_tensor *x, zt_tensor *weight, zt_tensor *bias, zt_tensor **out) {
  return linear_run(&op_linear_io, LIN_LAYOUT_IN_OUT, x, weight, bias, out);
}
