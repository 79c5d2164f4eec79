/* zerotrain batching: windows of seq+1 tokens starting at multiples of seq, in an order
 * shuffled per epoch by a Philox permutation of (seed, epoch) alone, so the data order never
 * depends on other RNG use. The stream of windows runs on across epochs; each step takes
 * world*batch consecutive windows of it, and rank r the rows [r*batch, (r+1)*batch). */
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "zt/data.h"

struct zt_loader {
  const zt_tokens *tokens; /* borrowed */
  zt_loader_config c;
  int64_t n_windows;
  zt_loader_pos pos; /* first window of the next global batch */
  int64_t *perm;     /* order of windows in epoch perm_epoch */
  uint64_t perm_epoch;
  bool perm_valid;
};

/* The loader's Philox streams use counter_hi = epoch ^ this tag; the default generator uses
 * counter_hi = 0, so the two never share blocks even with the same seed. */
#define ZT_LOADER_STREAM 0x5A544C4F41444552ull /* "ZTLOADER" */

/* Fisher-Yates with 64-bit Philox draws (two per block); the modulo bias is below
 * n / 2^64, far under anything observable. */
static void make_perm(zt_loader *l, uint64_t epoch) {
  int64_t n = l->n_windows;
  for (int64_t i = 0; i < n; i++) l->perm[i] = i;
  uint32_t w[4];
  for (int64_t i = n - 1, draw = 0; i > 0; i--, draw++) {
    if (draw % 2 == 0) zt_philox4x32(l->c.seed, (uint64_t)draw / 2, epoch ^ ZT_LOADER_STREAM, w);
    const uint32_t *r = w + 2 * (draw % 2);
    uint64_t x = (uint64_t)r[0] << 32 | r[1];
    int64_t j = (int64_t)(x % (uint64_t)(i + 1));
    int64_t tmp = l->perm[i];
    l->perm[i] = l->perm[j], l->perm[j] = tmp;
  }
  l->perm_epoch = epoch;
  l->perm_valid = true;
}

zt_status zt_loader_new(const zt_tokens *tokens, const zt_loader_config *c, zt_loader **out) {
  if (!tokens || !c || !out || (!tokens->ids && tokens->count > 0))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_loader_new: NULL tokens, config or out");
  *out = NULL;
  if (c->batch < 1 || c->seq < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_loader_new: batch %lld and seq %lld must both be >= 1",
                  (long long)c->batch, (long long)c->seq);
  if (c->world < 1 || c->rank < 0 || c->rank >= c->world)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_loader_new: rank %d is not in [0, world = %d)", c->rank, c->world);
  if (tokens->count < c->seq + 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "the dataset has %lld tokens, fewer than one window of seq + 1 = %lld tokens: use a shorter sequence "
                  "(zt_train_config.data.seq) or more data",
                  (long long)tokens->count, (long long)c->seq + 1);
  zt_loader *l = calloc(1, sizeof *l);
  if (!l) return ZT_ERR(ZT_STATUS_OOM, "zt_loader_new: out of host memory");
  l->tokens = tokens;
  l->c = *c;
  l->n_windows = (tokens->count - 1) / c->seq; /* window w covers [w*seq, w*seq + seq] */
  l->perm = malloc((size_t)l->n_windows * sizeof *l->perm);
  if (!l->perm) {
    int64_t n = l->n_windows;
    free(l);
    return ZT_ERR(ZT_STATUS_OOM, "zt_loader_new: out of host memory for %lld windows", (long long)n);
  }
  *out = l;
  return ZT_OK;
}

void zt_loader_free(zt_loader *l) {
  if (!l) return;
  free(l->perm);
  free(l);
}

static zt_loader_pos advance(zt_loader_pos p, int64_t k, int64_t n) {
  p.index += k % n;
  p.epoch += (uint64_t)(k / n);
  if (p.index >= n) p.index -= n, p.epoch++;
  return p;
}

static zt_status check_out(const zt_loader *l, const char *name, const zt_tensor *t, int32_t **data) {
  if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_loader_next: %s is NULL", name);
  if (t->dtype != ZT_DTYPE_I32)
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_loader_next: %s must be i32, got %s", name, zt_dtype_name(t->dtype));
  int64_t want[2] = {l->c.batch, l->c.seq};
  if (!zt_shape_equal(t->ndim, t->shape, 2, want)) {
    char a[128], b[128];
    return ZT_ERR(ZT_STATUS_SHAPE, "zt_loader_next: %s must be (batch, seq) = %s, got %s", name,
                  zt_shape_str(2, want, a), zt_shape_str(t->ndim, t->shape, b));
  }
  if (!zt_tensor_is_contiguous(t))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_loader_next: %s must be a contiguous tensor", name);
  void *p = NULL;
  ZT_TRY(zt_tensor_data(t, &p)); /* refuses released storage */
  *data = zt__tensor_host_ptr(t); /* NULL on a device the host cannot address: staged */
  return ZT_OK;
}

zt_status zt_loader_next(zt_loader *l, zt_tensor *x, zt_tensor *y) {
  if (!l) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_loader_next: loader is NULL");
  int32_t *xd = NULL, *yd = NULL;
  ZT_TRY(check_out(l, "x", x, &xd));
  ZT_TRY(check_out(l, "y", y, &yd));
  if (x->storage == y->storage) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_loader_next: x and y share storage");
  const int64_t B = l->c.batch, T = l->c.seq, n = l->n_windows;
  /* host tensors are written in place; others get a host batch their backend writes */
  size_t bytes = (size_t)(B * T) * sizeof(int32_t);
  int32_t *stage = NULL;
  if (!xd || !yd) ZT_TRY(zt_mem_alloc(2 * bytes, ZT_CPU, ZT_MEM_TAG_TEMP, (void **)&stage));
  int32_t *xw = xd ? xd : stage, *yw = yd ? yd : stage + B * T;
  const int32_t *ids = l->tokens->ids;
  for (int64_t r = 0; r < B; r++) {
    zt_loader_pos p = advance(l->pos, (int64_t)l->c.rank * B + r, n);
    if (!l->perm_valid || l->perm_epoch != p.epoch) make_perm(l, p.epoch);
    const int32_t *w = ids + l->perm[p.index] * T; /* w[0..T] */
    memcpy(xw + r * T, w, (size_t)T * sizeof *w);
    memcpy(yw + r * T, w + 1, (size_t)T * sizeof *w);
  }
  if (!xd) zt__dev_write(x, xw, bytes);
  if (!yd) zt__dev_write(y, yw, bytes);
  if (stage) zt_mem_free(stage, 2 * bytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  zt_tensor_bump_version(x);
  zt_tensor_bump_version(y);
  l->pos = advance(l->pos, (int64_t)l->c.world * B, n);
  return ZT_OK;
}

zt_loader_pos zt_loader_get_pos(const zt_loader *l) { return l ? l->pos : (zt_loader_pos){0, 0}; }

zt_status zt_loader_set_pos(zt_loader *l, zt_loader_pos pos) {
  if (!l) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_loader_set_pos: loader is NULL");
  if (pos.index < 0 || pos.index >= l->n_windows)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "data position %lld is outside the %lld windows of an epoch (was the checkpoint made with other "
                  "data or another sequence length (zt_train_config.data.seq)?)",
                  (long long)pos.index, (long long)l->n_windows);
  l->pos = pos;
  return ZT_OK;
}

int64_t zt_loader_windows_per_epoch(const zt_loader *l) { return l ? l->n_windows : 0; }
