/* Registry entry for inverted dropout. The mask is never stored: the op reserves
 * ceil(n / 4) Philox blocks of the default generator, keeps (seed, offset) in its attrs
 * and backward regenerates the same mask. !train or p == 0 is a differentiable copy that
 * draws nothing from the generator. */
#include <string.h>

#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__dropout_kernels *)(x)->kernels)

typedef enum dropout_mode { DROPOUT_MODE_COPY, DROPOUT_MODE_MASK } dropout_mode;
/* attrs.i: mode, seed, offset (uint64 stored as int64); attrs.f[0] = p, attrs.i[3] = train */
enum { ATTR_MODE, ATTR_SEED, ATTR_OFFSET, ATTR_TRAIN };

static zt_status dropout_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0];
  if (!x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "x is NULL");
  double p = c->attrs.f[0];
  if (!(p >= 0 && p < 1))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "p is %g; it must be in [0, 1) (the probability of zeroing)", p);
  ZT_TRY(zt__check_float("dropout", x, "x"));
  zt__meta_of(x, &c->out_meta[0]);
  c->n_out = 1;
  if (c->attrs.i[ATTR_TRAIN] && p > 0) {
    /* Reserved here, the last step of validation, not in forward: the dispatcher copies
     * attrs into the node before forward runs, and backward needs (seed, offset). */
    uint64_t n = (uint64_t)zt_tensor_numel(x);
    zt_rng_state s = zt_rng_reserve((n + 3) / 4);
    c->attrs.i[ATTR_MODE] = DROPOUT_MODE_MASK;
    c->attrs.i[ATTR_SEED] = (int64_t)s.seed;
    c->attrs.i[ATTR_OFFSET] = (int64_t)s.offset;
  } else {
    c->attrs.i[ATTR_MODE] = DROPOUT_MODE_COPY;
  }
  return ZT_OK;
}

static zt_rng_state attrs_state(const zt__op_attrs *a) {
  return (zt_rng_state){(uint64_t)a->i[ATTR_SEED], (uint64_t)a->i[ATTR_OFFSET]};
}

static zt_status dropout_forward(zt__op_call *c) {
  if (c->attrs.i[ATTR_MODE] == DROPOUT_MODE_MASK)
    K(c)->dropout(attrs_state(&c->attrs), c->attrs.f[0], c->in[0], c->out[0]);
  else if (zt_tensor_numel(c->in[0]) > 0)
    K(c)->copy_rows(zt__tensor_ptr(c->out[0]), 0, zt__tensor_ptr(c->in[0]), 0, 1, (int64_t)zt_tensor_nbytes(c->in[0]));
  return ZT_OK;
}

static zt_status dropout_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
  const zt_tensor *g = b->grad_out[0];
  if (b->attrs->i[ATTR_MODE] == DROPOUT_MODE_MASK)
    K(b)->dropout(attrs_state(b->attrs), b->attrs->f[0], g, b->grad_in[0]);
  else if (zt_tensor_numel(g) > 0)
    K(b)->copy_rows(zt__tensor_ptr(b->grad_in[0]), 0, zt__tensor_ptr(g), 0, 1, (int64_t)zt_tensor_nbytes(g));
  return ZT_OK;
}

static const zt__op op_dropout = {"dropout", "DropoutBackward", 1, 0, 0, dropout_shape, dropout_forward,
                                 dropout_backward, {[ZT_DEVICE_CPU] = &zt__cpu_dropout_kernels}, NULL};

zt_status zt_dropout(zt_tensor *x, double p, bool train, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.f[0] = p;
  at.i[ATTR_TRAIN] = train;
  return zt__op_run(&op_dropout, 1, &x, &at, out);
}
