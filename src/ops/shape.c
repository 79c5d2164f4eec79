/* Registry entries for the shape ops. transpose, permute, narrow, split and reshape of a
 * contiguous tensor return views: they share the input's storage and so its version
 * counter. contiguous, cat and reshape of a non-contiguous tensor return new tensors.
 * Every backward hands the engine a contiguous grad shaped like the input (reshape and
 * contiguous alias the incoming grad's storage: the engine copies a buffer before
 * adding into it when its storage is shared). Shape ops take every dtype. */
#include <stdlib.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__shape_kernels *)(x)->kernels)
#include "core/tensor_internal.h"

static int64_t prod(int from, int to, const int64_t *shape) {
  int64_t p = 1;
  for (int d = from; d < to; d++) p *= shape[d];
  return p;
}

/* A contiguous tensor of view's shape holding view's values (no autograd). Used where a
 * forward or a backward must return a copy of a strided view. */
static zt_status copy_of_view(const zt__shape_kernels *k, const zt_tensor *view, zt_tensor **out) {
  ZT_TRY(zt_tensor_empty(view->ndim, view->shape, view->dtype, zt_tensor_device(view), out));
  k->to_contiguous(view, *out);
  return ZT_OK;
}

/* The same elements as the contiguous g, under another shape (no copy). */
static zt_status relabel(const zt_tensor *g, int ndim, const int64_t *shape, zt_tensor **out) {
  ZT_ASSERT(zt_tensor_is_contiguous(g));
  return zt__tensor_new_view(g->storage, g->offset, ndim, shape, NULL, g->dtype, out);
}

/* Ops below take every dtype and build their outputs themselves from the caller's
 * strided tensors (ZT_OP_FLAG_VIEW: the dispatcher neither copies inputs nor
 * allocates outputs). contiguous and the copy path of reshape use the flag for the same
 * reason, to copy straight from the strided input once, and then clear is_view. */
#define VIEW_FLAGS (ZT_OP_FLAG_VIEW | ZT_OP_FLAG_ANY_DTYPE)

static zt_status need_input(const zt__op_call *c) {
  for (int i = 0; i < c->n_in; i++)
    if (!c->in[i]) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input %d is NULL", i);
  return ZT_OK;
}

/* A new output that shares storage with its input is a view; a copy is not. */
static void fix_is_view(zt_tensor *out, const zt_tensor *in) { out->is_view = out->storage == in->storage; }

/* ------------------------------------------------ reshape
 * attrs: i[0] = ndim, i[1..ndim] = requested shape (one entry may be -1). */
static zt_status reshape_shape(zt__op_call *c) {
  ZT_TRY(need_input(c));
  const zt_tensor *a = c->in[0];
  int nd = (int)c->attrs.i[0];
  int64_t *req = &c->attrs.i[1];
  int infer = -1;
  int64_t known = 1;
  for (int d = 0; d < nd; d++) {
    if (req[d] == -1) {
      if (infer >= 0)
        return ZT_ERR(ZT_STATUS_SHAPE, "only one dim may be -1, but dims %d and %d are", infer, d);
      infer = d;
    } else if (req[d] < 0) {
      return ZT_ERR(ZT_STATUS_SHAPE, "size %lld in dim %d is negative (only -1, meaning 'infer', is allowed)",
                    (long long)req[d], d);
    } else {
      known *= req[d];
    }
  }
  int64_t n = zt_tensor_numel(a);
  char sa[128], sb[128];
  zt__tensor_meta *m = &c->out_meta[0];
  m->ndim = nd;
  m->dtype = a->dtype;
  memcpy(m->shape, req, sizeof(int64_t) * (size_t)nd);
  if (infer >= 0) {
    if (known == 0)
      return ZT_ERR(ZT_STATUS_SHAPE,
                    "cannot infer the -1 in shape %s of a tensor of shape %s: the other dims hold 0 elements",
                    zt_shape_str(nd, req, sb), zt_shape_str(a->ndim, a->shape, sa));
    if (n % known == 0) m->shape[infer] = n / known;
  }
  if (prod(0, nd, m->shape) != n || (infer >= 0 && n % known != 0))
    return ZT_ERR(ZT_STATUS_SHAPE, "cannot reshape a tensor of shape %s (%lld elements) into shape %s",
                  zt_shape_str(a->ndim, a->shape, sa), (long long)n, zt_shape_str(nd, req, sb));
  memcpy(req, m->shape, sizeof(int64_t) * (size_t)nd); /* backward sees the resolved shape */
  c->n_out = 1;
  return ZT_OK;
}

static zt_status reshape_forward(zt__op_call *c) {
  const zt_tensor *a = c->orig[0];
  const zt__tensor_meta *m = &c->out_meta[0];
  if (zt_tensor_is_contiguous(a))
    return zt__tensor_new_view(a->storage, a->offset, m->ndim, m->shape, NULL, a->dtype, &c->out[0]);
  /* not viewable: one copy in a's shape, relabelled */
  zt_tensor *t;
  ZT_TRY(copy_of_view(K(c), a, &t));
  zt_status s = relabel(t, m->ndim, m->shape, &c->out[0]);
  zt_tensor_free(t);
  return s;
}

static zt_status reshape_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  return relabel(b->grad_out[0], b->in_meta[0].ndim, b->in_meta[0].shape, &b->grad_in[0]);
}

static const zt__op op_reshape = {"reshape", "ReshapeBackward", 1, VIEW_FLAGS, 0,
                                 reshape_shape, reshape_forward, reshape_backward, {[ZT_DEVICE_CPU] = &zt__cpu_shape_kernels}, NULL};

zt_status zt_reshape(zt_tensor *a, int ndim, const int64_t *shape, zt_tensor **out) {
  if (ndim < 0 || ndim > ZT_MAX_DIMS)
    return ZT_ERR(ZT_STATUS_SHAPE, "reshape: %d dims requested; tensors have 0 to %d dims", ndim, ZT_MAX_DIMS);
  if (ndim > 0 && !shape) return ZT_ERR(ZT_STATUS_INVALID_ARG, "reshape: shape is NULL");
  zt__op_attrs at = {0};
  at.i[0] = ndim;
  for (int d = 0; d < ndim; d++) at.i[1 + d] = shape[d];
  ZT_TRY(zt__op_run(&op_reshape, 1, &a, &at, out));
  fix_is_view(*out, a);
  return ZT_OK;
}

/* ------------------------------------------------ permute and transpose
 * attrs: i[0..ndim-1] = the permutation (normalised): out dim k is input dim i[k]. */
static zt_status permute_shape(zt__op_call *c) {
  ZT_TRY(need_input(c));
  const zt_tensor *a = c->in[0];
  bool seen[ZT_MAX_DIMS] = {false};
  int64_t raw[ZT_MAX_DIMS];
  memcpy(raw, c->attrs.i, sizeof raw);
  for (int k = 0; k < a->ndim; k++) {
    int d;
    ZT_TRY(zt__norm_dim("permute", (int)c->attrs.i[k], a->ndim, &d));
    if (seen[d]) {
      char buf[128];
      return ZT_ERR(ZT_STATUS_SHAPE, "dims %s are not a permutation of the %d dims (dim %d appears twice)",
                    zt_shape_str(a->ndim, raw, buf), a->ndim, d);
    }
    seen[d] = true;
    c->attrs.i[k] = d;
  }
  zt__tensor_meta *m = &c->out_meta[0];
  m->ndim = a->ndim;
  m->dtype = a->dtype;
  for (int k = 0; k < a->ndim; k++) m->shape[k] = a->shape[c->attrs.i[k]];
  c->n_out = 1;
  return ZT_OK;
}

static zt_status permute_forward(zt__op_call *c) {
  const zt_tensor *a = c->orig[0];
  int64_t shape[ZT_MAX_DIMS], stride[ZT_MAX_DIMS];
  for (int k = 0; k < a->ndim; k++) {
    shape[k] = a->shape[c->attrs.i[k]];
    stride[k] = a->stride[c->attrs.i[k]];
  }
  return zt__tensor_new_view(a->storage, a->offset, a->ndim, shape, stride, a->dtype, &c->out[0]);
}

/* grad_in = permute(g, inverse), copied contiguous: input dim p[k] takes g's dim k. */
static zt_status permute_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  const zt_tensor *g = b->grad_out[0];
  const zt__tensor_meta *m = &b->in_meta[0];
  int64_t stride[ZT_MAX_DIMS];
  for (int k = 0; k < m->ndim; k++) stride[b->attrs->i[k]] = g->stride[k];
  zt_tensor *v;
  ZT_TRY(zt__tensor_new_view(g->storage, g->offset, m->ndim, m->shape, stride, g->dtype, &v));
  zt_status s = copy_of_view(K(b), v, &b->grad_in[0]);
  zt_tensor_free(v);
  return s;
}

static const zt__op op_permute = {"permute", "PermuteBackward", 1, VIEW_FLAGS, 0,
                                 permute_shape, permute_forward, permute_backward, {[ZT_DEVICE_CPU] = &zt__cpu_shape_kernels}, NULL};
/* transpose is a permutation swapping two dims: the same entry under its own names. */
static const zt__op op_transpose = {"transpose", "TransposeBackward", 1, VIEW_FLAGS, 0,
                                   permute_shape, permute_forward, permute_backward, {[ZT_DEVICE_CPU] = &zt__cpu_shape_kernels}, NULL};

zt_status zt_permute(zt_tensor *a, const int *dims, zt_tensor **out) {
  if (!a) return ZT_ERR(ZT_STATUS_INVALID_ARG, "permute: input is NULL");
  if (a->ndim > 0 && !dims) return ZT_ERR(ZT_STATUS_INVALID_ARG, "permute: dims is NULL");
  zt__op_attrs at = {0};
  for (int k = 0; k < a->ndim; k++) at.i[k] = dims[k];
  return zt__op_run(&op_permute, 1, &a, &at, out);
}

zt_status zt_transpose(zt_tensor *a, int dim0, int dim1, zt_tensor **out) {
  if (!a) return ZT_ERR(ZT_STATUS_INVALID_ARG, "transpose: input is NULL");
  int d0, d1;
  ZT_TRY(zt__norm_dim("transpose", dim0, a->ndim, &d0));
  ZT_TRY(zt__norm_dim("transpose", dim1, a->ndim, &d1));
  zt__op_attrs at = {0};
  for (int k = 0; k < a->ndim; k++) at.i[k] = k == d0 ? d1 : k == d1 ? d0 : k;
  return zt__op_run(&op_transpose, 1, &a, &at, out);
}

/* ------------------------------------------------ narrow
 * attrs: i[0] = dim, i[1] = start (both normalised), i[2] = length. */
static zt_status narrow_shape(zt__op_call *c) {
  ZT_TRY(need_input(c));
  const zt_tensor *a = c->in[0];
  char buf[128];
  if (a->ndim == 0) return ZT_ERR(ZT_STATUS_SHAPE, "cannot narrow a 0-d tensor");
  int d;
  ZT_TRY(zt__norm_dim("narrow", (int)c->attrs.i[0], a->ndim, &d));
  int64_t size = a->shape[d], start = c->attrs.i[1], len = c->attrs.i[2];
  if (start < -size || start > size)
    return ZT_ERR(ZT_STATUS_SHAPE, "start %lld is out of range for dim %d of size %lld (shape %s)",
                  (long long)start, d, (long long)size, zt_shape_str(a->ndim, a->shape, buf));
  if (start < 0) start += size;
  if (len < 0 || start + len > size)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "start %lld + length %lld is out of range for dim %d of size %lld (shape %s)",
                  (long long)start, (long long)len, d, (long long)size, zt_shape_str(a->ndim, a->shape, buf));
  c->attrs.i[0] = d;
  c->attrs.i[1] = start;
  zt__meta_of(a, &c->out_meta[0]);
  c->out_meta[0].shape[d] = len;
  c->n_out = 1;
  return ZT_OK;
}

static zt_status narrow_forward(zt__op_call *c) {
  const zt_tensor *a = c->orig[0];
  int d = (int)c->attrs.i[0];
  return zt__tensor_new_view(a->storage, a->offset + c->attrs.i[1] * a->stride[d], a->ndim, c->out_meta[0].shape,
                             a->stride, a->dtype, &c->out[0]);
}

/* grad_in = zeros, with g copied into the slice [start, start + length) of dim. */
static zt_status narrow_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  const zt__tensor_meta *m = &b->in_meta[0];
  const zt_tensor *g = b->grad_out[0];
  int d = (int)b->attrs->i[0];
  int64_t start = b->attrs->i[1], len = b->attrs->i[2];
  int64_t es = (int64_t)zt_dtype_size(m->dtype), inner = prod(d + 1, m->ndim, m->shape) * es;
  ZT_TRY(zt__op_grad_like_input(b, 0, true, &b->grad_in[0]));
  if (zt_tensor_numel(g) == 0) return ZT_OK; /* no data pointer to offset */
  K(b)->copy_rows((char *)zt__tensor_ptr(b->grad_in[0]) + start * inner, m->shape[d] * inner, zt__tensor_ptr(g),
                  len * inner, prod(0, d, m->shape), len * inner);
  return ZT_OK;
}

static const zt__op op_narrow = {"narrow", "NarrowBackward", 1, VIEW_FLAGS, 0,
                                narrow_shape, narrow_forward, narrow_backward, {[ZT_DEVICE_CPU] = &zt__cpu_shape_kernels}, NULL};

zt_status zt_narrow(zt_tensor *a, int dim, int64_t start, int64_t length, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[0] = dim;
  at.i[1] = start;
  at.i[2] = length;
  return zt__op_run(&op_narrow, 1, &a, &at, out);
}

/* ------------------------------------------------ contiguous */
static zt_status contiguous_shape(zt__op_call *c) {
  ZT_TRY(need_input(c));
  zt__meta_of(c->in[0], &c->out_meta[0]);
  c->n_out = 1;
  return ZT_OK;
}

static zt_status contiguous_forward(zt__op_call *c) { return copy_of_view(K(c), c->orig[0], &c->out[0]); }

static zt_status contiguous_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  return zt_tensor_alias(b->grad_out[0], &b->grad_in[0]);
}

static const zt__op op_contiguous = {"contiguous", "ContiguousBackward", 1, VIEW_FLAGS, 0,
                                    contiguous_shape, contiguous_forward, contiguous_backward, {[ZT_DEVICE_CPU] = &zt__cpu_shape_kernels}, NULL};

zt_status zt_contiguous(zt_tensor *a, zt_tensor **out) {
  ZT_TRY(zt__op_run(&op_contiguous, 1, &a, NULL, out));
  fix_is_view(*out, a);
  return ZT_OK;
}

/* ------------------------------------------------ cat
 * n inputs (contiguous, given by the dispatcher); attrs: i[0] = dim (normalised).
 * Along dim, input i occupies [off_i, off_i + size_i) of the output; with
 * rows = prod(shape[:dim]) and inner = prod(shape[dim+1:]), every op here is a block copy
 * of rows x (size_i * inner) elements. */
static zt_status cat_shape(zt__op_call *c) {
  if (c->n_in < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "no tensors given");
  ZT_TRY(need_input(c));
  const zt_tensor *a = c->in[0];
  if (a->ndim == 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "tensor 0 is 0-d; 0-d tensors cannot be concatenated (reshape them to 1 dim)");
  int d;
  ZT_TRY(zt__norm_dim("cat", (int)c->attrs.i[0], a->ndim, &d));
  zt__tensor_meta *m = &c->out_meta[0];
  zt__meta_of(a, m);
  m->shape[d] = 0;
  for (int i = 0; i < c->n_in; i++) {
    const zt_tensor *t = c->in[i];
    char sa[128], sb[128];
    if (t->dtype != a->dtype)
      return ZT_ERR(ZT_STATUS_DTYPE, "tensor %d has dtype %s but tensor 0 has dtype %s; cast them to one dtype", i,
                    zt_dtype_name(t->dtype), zt_dtype_name(a->dtype));
    bool ok = t->ndim == a->ndim;
    for (int k = 0; ok && k < a->ndim; k++) ok = k == d || t->shape[k] == a->shape[k];
    if (!ok)
      return ZT_ERR(ZT_STATUS_SHAPE, "tensor %d has shape %s but tensor 0 has shape %s; they must match in every "
                    "dim except dim %d",
                    i, zt_shape_str(t->ndim, t->shape, sa), zt_shape_str(a->ndim, a->shape, sb), d);
    m->shape[d] += t->shape[d];
  }
  c->attrs.i[0] = d;
  c->n_out = 1;
  return ZT_OK;
}

/* out (shape m) = the n parts concatenated along dim d (=). Used by cat's forward and by
 * split's backward (which concatenates its parts' grads). */
static void concat_into(const zt__shape_kernels *k, const zt__tensor_meta *m, int d, zt_tensor *out, int n,
                        zt_tensor *const *parts) {
  int64_t es = (int64_t)zt_dtype_size(m->dtype), inner = prod(d + 1, m->ndim, m->shape) * es;
  int64_t rows = prod(0, d, m->shape), pitch = m->shape[d] * inner, off = 0;
  if (zt_tensor_numel(out) == 0) return; /* no data pointer to offset */
  char *o = zt__tensor_ptr(out);
  for (int i = 0; i < n; i++) {
    int64_t w = parts[i]->shape[d] * inner;
    if (w) k->copy_rows(o + off, pitch, zt__tensor_ptr(parts[i]), w, rows, w);
    off += w;
  }
}

static zt_status cat_forward(zt__op_call *c) {
  concat_into(K(c), &c->out_meta[0], (int)c->attrs.i[0], c->out[0], c->n_in, c->in);
  return ZT_OK;
}

/* grad_in[i] = the slice of g that input i filled. */
static zt_status cat_backward(zt__op_bwd *b) {
  const zt_tensor *g = b->grad_out[0];
  int d = (int)b->attrs->i[0];
  int64_t es = (int64_t)zt_dtype_size(g->dtype), inner = prod(d + 1, g->ndim, g->shape) * es;
  int64_t rows = prod(0, d, g->shape), pitch = g->shape[d] * inner, off = 0;
  const char *gp = zt__tensor_ptr(g);
  for (int i = 0; i < b->n_in; i++) {
    int64_t w = b->in_meta[i].shape[d] * inner;
    if (b->needs_input_grad[i]) {
      ZT_TRY(zt__op_grad_like_input(b, i, false, &b->grad_in[i]));
      if (w && rows) K(b)->copy_rows(zt__tensor_ptr(b->grad_in[i]), w, gp + off, pitch, rows, w);
    }
    off += w;
  }
  return ZT_OK;
}

static const zt__op op_cat = {"cat", "CatBackward", -1, ZT_OP_FLAG_ANY_DTYPE, 0, cat_shape, cat_forward, cat_backward, {[ZT_DEVICE_CPU] = &zt__cpu_shape_kernels}, NULL};

zt_status zt_cat(int n, zt_tensor *const *xs, int dim, zt_tensor **out) {
  if (n < 1 || !xs) return ZT_ERR(ZT_STATUS_INVALID_ARG, "cat: no tensors given (n = %d)", n);
  zt__op_attrs at = {0};
  at.i[0] = dim;
  return zt__op_run(&op_cat, n, xs, &at, out);
}

/* ------------------------------------------------ split
 * One node makes up to SPLIT_MAX parts: attrs i[0] = dim (normalised), i[1..n] = the
 * sizes, and -1 after the last size (outputs are capped at ZT_OP_MAX_ATTRS anyway).
 * zt_split with more parts splits into groups first and splits the groups again (views
 * of views), so any n works; backward of each node concatenates its parts' grads. */
#define SPLIT_MAX (ZT_OP_MAX_ATTRS - 1)

static int split_count(const zt__op_attrs *at) {
  int n = 0;
  while (n < SPLIT_MAX && at->i[1 + n] >= 0) n++;
  return n;
}

static zt_status split_shape(zt__op_call *c) {
  ZT_TRY(need_input(c));
  const zt_tensor *a = c->in[0];
  int d = (int)c->attrs.i[0], n = split_count(&c->attrs);
  ZT_ASSERT(n >= 1 && d >= 0 && d < a->ndim); /* zt_split checked the arguments */
  int64_t sum = 0;
  for (int k = 0; k < n; k++) {
    zt__meta_of(a, &c->out_meta[k]);
    c->out_meta[k].shape[d] = c->attrs.i[1 + k];
    sum += c->attrs.i[1 + k];
  }
  ZT_ASSERT(sum == a->shape[d]);
  c->n_out = n;
  return ZT_OK;
}

static zt_status split_forward(zt__op_call *c) {
  const zt_tensor *a = c->orig[0];
  int d = (int)c->attrs.i[0];
  int64_t start = 0;
  for (int k = 0; k < c->n_out; k++) {
    ZT_TRY(zt__tensor_new_view(a->storage, a->offset + start * a->stride[d], a->ndim, c->out_meta[k].shape, a->stride,
                               a->dtype, &c->out[k]));
    start += c->out_meta[k].shape[d];
  }
  return ZT_OK;
}

/* grad_in = cat(grads of the parts) along dim (the engine gives zeros for parts that
 * got no grad). */
static zt_status split_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
  concat_into(K(b), &b->in_meta[0], (int)b->attrs->i[0], b->grad_in[0], b->n_out, b->grad_out);
  return ZT_OK;
}

static const zt__op op_split = {"split", "SplitBackward", 1, VIEW_FLAGS, 0, split_shape, split_forward, split_backward, {[ZT_DEVICE_CPU] = &zt__cpu_shape_kernels}, NULL};

/* One node: n <= SPLIT_MAX parts. */
static zt_status split_node(zt_tensor *a, int dim, int n, const int64_t *sizes, zt_tensor **outs) {
  zt__op_attrs at;
  for (int k = 0; k < ZT_OP_MAX_ATTRS; k++) at.i[k] = -1;
  at.i[0] = dim;
  for (int k = 0; k < n; k++) at.i[1 + k] = sizes[k];
  return zt__op_run(&op_split, 1, &a, &at, outs);
}

/* Any n: groups of up to `per` consecutive parts, then each group split again. On
 * failure nothing in outs[0..n) is left alive. */
static zt_status split_tree(zt_tensor *a, int dim, int n, const int64_t *sizes, zt_tensor **outs) {
  if (n <= SPLIT_MAX) return split_node(a, dim, n, sizes, outs);
  int per = (n + SPLIT_MAX - 1) / SPLIT_MAX, ng = (n + per - 1) / per;
  int64_t gsize[SPLIT_MAX] = {0};
  for (int k = 0; k < n; k++) gsize[k / per] += sizes[k];
  zt_tensor *groups[SPLIT_MAX] = {0};
  ZT_TRY(split_node(a, dim, ng, gsize, groups));
  zt_status s = ZT_OK;
  int done = 0;
  for (int g = 0; g < ng; g++) {
    int first = g * per, cnt = n - first < per ? n - first : per;
    if (s == ZT_OK) {
      if (cnt == 1) {
        outs[first] = groups[g];
        groups[g] = NULL;
      } else {
        s = split_tree(groups[g], dim, cnt, sizes + first, outs + first);
      }
      if (s == ZT_OK) done = first + cnt;
    }
    zt_tensor_free(groups[g]);
  }
  if (s)
    for (int k = 0; k < done; k++) {
      zt_tensor_free(outs[k]);
      outs[k] = NULL;
    }
  return s;
}

zt_status zt_split(zt_tensor *a, int dim, int n, const int64_t *sizes, zt_tensor **outs) {
  if (!a) return ZT_ERR(ZT_STATUS_INVALID_ARG, "split: input is NULL");
  if (!outs) return ZT_ERR(ZT_STATUS_INVALID_ARG, "split: the output array is NULL");
  if (n < 1 || !sizes) return ZT_ERR(ZT_STATUS_INVALID_ARG, "split: give at least one part size (n = %d)", n);
  if (a->ndim == 0) return ZT_ERR(ZT_STATUS_SHAPE, "split: cannot split a 0-d tensor");
  int d;
  ZT_TRY(zt__norm_dim("split", dim, a->ndim, &d));
  int64_t sum = 0;
  for (int k = 0; k < n; k++) {
    if (sizes[k] < 0)
      return ZT_ERR(ZT_STATUS_SHAPE, "split: part %d has negative size %lld", k, (long long)sizes[k]);
    sum += sizes[k];
  }
  if (sum != a->shape[d]) {
    char buf[128];
    return ZT_ERR(ZT_STATUS_SHAPE, "split: the %d part sizes sum to %lld but dim %d has size %lld (shape %s)", n,
                  (long long)sum, d, (long long)a->shape[d], zt_shape_str(a->ndim, a->shape, buf));
  }
  zt_tensor **tmp = calloc((size_t)n, sizeof *tmp);
  if (!tmp) return ZT_ERR(ZT_STATUS_OOM, "split: out of host memory for %d parts", n);
  zt_status s = split_tree(a, d, n, sizes, tmp);
  if (s == ZT_OK) memcpy(outs, tmp, sizeof *tmp * (size_t)n);
  free(tmp);
  return s;
}
