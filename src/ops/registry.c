/* The op dispatcher: the one path every op takes. It checks the inputs (NULL, released
 * storage, device), runs the op's shape rule, gives the kernels contiguous inputs and
 * freshly allocated outputs, records a node when a grad will be needed, and turns any
 * failure into a message that names the op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "op.h"
#include "sac.h"

typedef struct op_payload {
  const zt__op *op;
  zt__op_attrs attrs;
  zt_device device;     /* where forward ran: backward runs the same device's kernels */
  const void *kernels;
} op_payload;

static zt_status op_apply(zt_node *n, zt_tensor *const *grad_outputs, const bool *needs, zt_tensor **grad_inputs) {
  op_payload *p = n->payload;
  zt__op_bwd b = {n, &p->attrs, n->n_inputs, n->in_meta, needs, grad_inputs, n->n_outputs, grad_outputs, p->kernels};
  zt__dev_enter(p->device);
  zt_status s = p->op->backward(&b);
  zt__dev_exit(p->device);
  if (s) return zt__error_prefix(s, "in backward of op '%s'", p->op->name);
  return ZT_OK;
}

/* The op's kernel table for dev: through dev's backend (which may run another device
 * type's kernels), with an error naming the op and the device when there is none. */
static zt_status pick_kernels(const zt__op *op, zt_device dev, const void **out) {
  const zt__backend *b = zt__backend_get(dev.type);
  const void *k = b ? op->kernels[b->kernel_type] : NULL;
  if (!k) {
    char d[16];
    return ZT_ERR(ZT_STATUS_DEVICE, "op '%s' has no kernel for device %s in this build", op->name,
                  zt_device_str(dev, d));
  }
  *out = k;
  return ZT_OK;
}
static void op_destroy(zt_node *n) { free(n->payload); }
/* The saved slots the grads of the inputs in needs read: the union of the op's per-input
 * sets (an op without saves_read reads them all). */
static uint64_t op_saved_read(const zt_node *n, const bool *needs) {
  const op_payload *p = n->payload;
  if (!p->op->saves_read) return ~(uint64_t)0;
  uint64_t m = 0;
  for (int i = 0; i < n->n_inputs; i++)
    if (needs[i]) m |= p->op->saves_read(&p->attrs, i);
  return m;
}
static const zt__node_vtable op_vt = {"OpBackward", op_apply, op_destroy, op_saved_read};

zt_status zt__make_contiguous(const zt_tensor *t, zt_tensor **out) {
  return zt_tensor_clone_data(t, ZT_MEM_TAG_TEMP, out);
}

zt_status zt__tensor_from_meta(const zt__tensor_meta *m, bool zero, zt_tensor **out) {
  return zero ? zt_tensor_zeros(m->ndim, m->shape, m->dtype, m->device, out)
              : zt_tensor_empty(m->ndim, m->shape, m->dtype, m->device, out);
}

zt_status zt__op_grad_like_input(zt__op_bwd *b, int i, bool zero, zt_tensor **out) {
  return zt__tensor_from_meta(&b->in_meta[i], zero, out);
}

zt_status zt__op_save(zt__op_call *c, const zt_tensor *t) {
  if (!c->node) return ZT_OK;
  if (c->sac_capture) ZT_TRY(zt__sac_capture_save(c, c->sac_capture, t));
  return zt_node_save(c->node, t, NULL);
}

zt_status zt__op_saved(zt__op_bwd *b, int i, zt_tensor **out) { return zt_node_saved(b->node, i, out); }

zt_status zt__norm_dim(const char *op, int dim, int ndim, int *out) {
  int n = ndim ? ndim : 1; /* a 0-d tensor takes dim 0 and -1, as in PyTorch */
  int d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n)
    return ZT_ERR(ZT_STATUS_SHAPE, "%s: dim %d is out of range for a tensor with %d dims", op, dim, ndim);
  *out = d;
  return ZT_OK;
}

zt_status zt__check_float(const char *op, const zt_tensor *t, const char *what) {
  if (t->dtype != ZT_DTYPE_F32 && t->dtype != ZT_DTYPE_F64)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s: %s has dtype %s; this op computes in f32 or f64 (cast with zt_cast)", op, what,
                  zt_dtype_name(t->dtype));
  return ZT_OK;
}

zt_status zt__check_same_dtype(const char *op, const zt_tensor *a, const zt_tensor *b) {
  if (a->dtype != b->dtype)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s: inputs have different dtypes (%s and %s); cast one with zt_cast", op,
                  zt_dtype_name(a->dtype), zt_dtype_name(b->dtype));
  return ZT_OK;
}

/* g has the broadcast shape; sum it down to m's shape (m right-aligned against g). */
zt_status zt__sum_to_shape(const zt_tensor *g, const zt__tensor_meta *m, zt_tensor **out) {
  ZT_TRY(zt__tensor_from_meta(m, true, out));
  zt__dev_sum_to_shape(g, *out);
  return ZT_OK;
}

static bool nondiff(const zt__op *op, int i) { return i < 32 && ((op->nondiff_inputs >> i) & 1u); }

zt_status zt__op_run(const zt__op *op, int n_in, zt_tensor *const *in, const zt__op_attrs *attrs, zt_tensor **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "op '%s': the output pointer is NULL", op->name);
  if (op->n_in >= 0 && n_in != op->n_in)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "op '%s' takes %d inputs, got %d", op->name, op->n_in, n_in);
  zt_device dev = ZT_CPU;
  bool have_dev = false;
  for (int i = 0; i < n_in; i++) {
    if (!in[i]) continue;
    if (in[i]->storage->evicted) {
      char where[96];
      snprintf(where, sizeof where, "op '%s': input %d", op->name, i);
      return zt__storage_evicted_error(in[i], where);
    }
    if (in[i]->storage->released)
      return ZT_ERR(ZT_STATUS_RELEASED,
                    "op '%s': input %d has released storage (freed by a reshard or an offload); re-materialise it "
                    "before use",
                    op->name, i);
    zt_device d = zt_tensor_device(in[i]);
    if (have_dev && !zt_device_equal(d, dev)) {
      char a[16], b[16];
      return ZT_ERR(ZT_STATUS_DEVICE, "op '%s': inputs are on different devices (%s and %s); move them to one device",
                    op->name, zt_device_str(dev, a), zt_device_str(d, b));
    }
    dev = d;
    have_dev = true;
  }
  const void *kernels = NULL;
  ZT_TRY(pick_kernels(op, dev, &kernels));

  zt__op_call c = {0};
  c.op = op;
  c.n_in = n_in;
  c.orig = in;
  c.kernels = kernels;
  if (attrs) c.attrs = *attrs;
  zt_tensor *in_buf[16];
  c.in = n_in <= 16 ? in_buf : malloc(sizeof *c.in * (size_t)n_in);
  bool *copied = calloc((size_t)(n_in ? n_in : 1), sizeof *copied);
  if (!c.in || !copied) {
    if (c.in != in_buf) free(c.in);
    free(copied);
    return ZT_ERR(ZT_STATUS_OOM, "op '%s': out of host memory for the list of its %d inputs", op->name, n_in);
  }
  zt_tensor *out_buf[ZT_OP_MAX_ATTRS] = {0};
  c.out = out_buf;
  zt_status s = ZT_OK;
  for (int i = 0; i < n_in; i++) c.in[i] = in[i];

  s = op->shape(&c);
  if (s) {
    zt__error_prefix(s, "op '%s'", op->name);
    goto cleanup;
  }
  ZT_ASSERT(c.n_out >= 1 && c.n_out <= ZT_OP_MAX_ATTRS);
  if (!(op->flags & ZT_OP_FLAG_VIEW))
    for (int i = 0; i < n_in && s == ZT_OK; i++)
      if (in[i] && !zt_tensor_is_contiguous(in[i])) {
        s = zt__make_contiguous(in[i], &c.in[i]);
        copied[i] = s == ZT_OK;
      }
  if (s) goto cleanup;

  bool record = false;
  if (zt_grad_enabled())
    for (int i = 0; i < n_in; i++)
      if (in[i] && in[i]->requires_grad && !nondiff(op, i)) record = true;
  if (record) {
    c.node = zt__node_new(&op_vt, n_in, c.n_out);
    op_payload *p = c.node ? malloc(sizeof *p) : NULL;
    if (!p) {
      s = c.node ? ZT_ERR(ZT_STATUS_OOM, "out of host memory for a graph node's payload") : ZT_STATUS_OOM;
      zt__error_prefix(s, "op '%s'", op->name);
      goto cleanup;
    }
    c.node->name = op->node_name;
    p->op = op;
    p->attrs = c.attrs;
    p->device = dev;
    p->kernels = kernels;
    c.node->payload = p;
    for (int i = 0; i < n_in && s == ZT_OK; i++)
      if (in[i]) s = nondiff(op, i) ? (zt__meta_of(in[i], &c.node->in_meta[i]), ZT_OK)
                                                      : zt__node_set_edge_from(c.node, i, in[i]);
    if (s) goto cleanup;
  }
  /* selective checkpointing: the policy keeps this op's outputs (capture), or they were
   * kept in the forward of the region being recomputed (replay: the op does not run) */
  zt__sac_entry *sac = NULL;
  bool replay = false;
  if (c.node && !(op->flags & ZT_OP_FLAG_VIEW)) {
    s = zt__sac_before(&c, &sac, &replay);
    if (s) goto cleanup;
  }
  if (!(op->flags & ZT_OP_FLAG_VIEW) && !replay)
    for (int k = 0; k < c.n_out && s == ZT_OK; k++) {
      c.out_meta[k].device = dev;
      s = zt__tensor_from_meta(&c.out_meta[k], false, &c.out[k]);
    }
  if (s) goto cleanup;

  if (replay) {
    s = zt__sac_replay(&c, sac);
  } else {
    c.sac_capture = sac;
    bool prev = zt_set_grad_enabled(false);
    zt__dev_enter(dev);
    s = op->forward(&c);
    zt__dev_exit(dev);
    zt_set_grad_enabled(prev);
    c.sac_capture = NULL;
    if (s == ZT_OK && sac) s = zt__sac_capture_done(&c, sac);
  }
  if (s) {
    zt__error_prefix(s, "op '%s'", op->name);
    goto cleanup;
  }
  /* forward may record attrs for backward (e.g. a reserved RNG offset) */
  if (c.node) ((op_payload *)c.node->payload)->attrs = c.attrs;
  for (int k = 0; k < c.n_out; k++) {
    ZT_ASSERT(c.out[k]);
    if (op->flags & ZT_OP_FLAG_VIEW) c.out[k]->is_view = true;
    if (c.node) {
      if (zt_dtype_is_float(c.out[k]->dtype))
        zt__node_attach_output(c.node, k, c.out[k]);
      else
        zt__node_set_out_meta(c.node, k, c.out[k]);
    }
    out[k] = c.out[k];
    c.out[k] = NULL;
  }

cleanup:
  for (int k = 0; k < ZT_OP_MAX_ATTRS; k++) zt_tensor_free(c.out[k]);
  if (c.node) zt__node_release(c.node);
  for (int i = 0; i < n_in; i++)
    if (copied[i]) zt_tensor_free(c.in[i]);
  if (c.in != in_buf) free(c.in);
  free(copied);
  return s;
}
