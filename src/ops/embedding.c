/* Registry entry for embedding: weight (V, C) float, ids (...) i32/i64 -> (..., C).
 * ids are input 1, never differentiable; every id is checked against V before any row is
 * read. Backward saves only ids and scatter-adds the grad rows into a zeroed dweight. */
#include <stdio.h>

#include "core/status_internal.h"
#include "op.h"

#define K(x) ((const zt__embedding_kernels *)(x)->kernels)

static zt_status emb_shape(zt__op_call *c) {
  zt_tensor *w = c->in[0], *ids = c->in[1];
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "weight is NULL");
  if (!ids) return ZT_ERR(ZT_STATUS_INVALID_ARG, "ids is NULL");
  ZT_TRY(zt__check_float("embedding", w, "weight"));
  if (ids->dtype != ZT_DTYPE_I32 && ids->dtype != ZT_DTYPE_I64)
    return ZT_ERR(ZT_STATUS_DTYPE, "ids have dtype %s; they must be i32 or i64", zt_dtype_name(ids->dtype));
  if (w->ndim != 2) {
    char sw[128];
    return ZT_ERR(ZT_STATUS_SHAPE, "weight has shape %s; it must be 2-d (V, C)",
                  zt_shape_str(w->ndim, w->shape, sw));
  }
  if (ids->ndim + 1 > ZT_MAX_DIMS)
    return ZT_ERR(ZT_STATUS_SHAPE, "ids have %d dims; the output adds one and may have at most %d",
                  ids->ndim, ZT_MAX_DIMS);
  zt__tensor_meta *m = &c->out_meta[0];
  m->ndim = ids->ndim + 1;
  for (int d = 0; d < ids->ndim; d++) m->shape[d] = ids->shape[d];
  m->shape[ids->ndim] = w->shape[1];
  m->dtype = w->dtype;
  c->n_out = 1;
  return ZT_OK;
}

/* "(1, 3)": the multi-index of flat position pos in ids (0-d: "()"). */
static const char *position_str(const zt_tensor *ids, int64_t pos, char *buf, size_t cap) {
  int64_t idx[ZT_MAX_DIMS];
  for (int d = ids->ndim - 1; d >= 0; d--) {
    idx[d] = pos % ids->shape[d];
    pos /= ids->shape[d];
  }
  size_t k = (size_t)snprintf(buf, cap, "(");
  for (int d = 0; d < ids->ndim && k < cap; d++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)idx[d]);
  if (k < cap) snprintf(buf + k, cap - k, ")");
  return buf;
}

static zt_status emb_forward(zt__op_call *c) {
  zt_tensor *w = c->in[0], *ids = c->in[1];
  int64_t V = w->shape[0], bad = 0;
  int64_t pos = K(c)->find_bad_id(ids, V, &bad);
  if (pos >= 0) {
    char at[256];
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "id %lld at position %s of ids is out of range for a weight of V = %lld rows "
                  "(ids must be in [0, %lld))",
                  (long long)bad, position_str(ids, pos, at, sizeof at), (long long)V, (long long)V);
  }
  K(c)->embedding(w, ids, c->out[0]);
  return zt__op_save(c, ids);
}

static zt_status emb_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  zt_tensor *ids;
  ZT_TRY(zt__op_saved(b, 0, &ids));
  ZT_TRY(zt__op_grad_like_input(b, 0, true, &b->grad_in[0]));
  K(b)->embedding_backward(b->grad_out[0], ids, b->grad_in[0]);
  return ZT_OK;
}

/* nondiff_inputs bit 1: ids get no edge and no grad */
static const zt__op op_embedding = {"embedding", "EmbeddingBackward", 2, 0, 1u << 1, emb_shape, emb_forward,
                                   emb_backward, {[ZT_DEVICE_CPU] = &zt__cpu_embedding_kernels}, NULL};

zt_status zt_embedding(zt_tensor *weight, zt_tensor *ids, zt_tensor **out) {
  return zt__op_run(&op_embedding, 2, (zt_tensor *[]){weight, ids}, NULL, out);
}
