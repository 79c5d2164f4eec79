/* Text generation: autoregressive sampling with temperature and top-k from a private
 * Philox stream, so sampling never moves the default generator (training stays
 * reproducible). Recomputes the whole (cropped) context per token: simple and exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/train.h"
#include "core/backend.h"

static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

zt_status zt_gpt2_sample(zt_gpt2 *m, const int32_t *prompt, int64_t n_prompt, int64_t n, double temperature,
                         int top_k, uint64_t seed, int32_t **out, int64_t *n_out) {
  if (!m || !out || !n_out || (n_prompt && !prompt))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_sample: NULL model, output or prompt");
  if (n_prompt < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_sample: the prompt needs at least one token");
  if (n < 0 || n > ZT_SAMPLE_MAX_LEN || n_prompt > ZT_SAMPLE_MAX_LEN)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_sample: %lld tokens after a prompt of %lld: each must be in [0, %d]",
                  (long long)n, (long long)n_prompt, ZT_SAMPLE_MAX_LEN);
  if (!(temperature >= 0 && temperature <= 100) || top_k < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_gpt2_sample: temperature must be a number in [0, 100] (0: greedy; got %g) and top-k >= 0", temperature);
  const zt_gpt2_config *c = zt_gpt2_get_config(m);
  int V = c->vocab_size;
  for (int64_t i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= V)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_sample: prompt token %lld is %d, outside [0, %d)", (long long)i,
                    prompt[i], V);
  int32_t *ids = malloc(sizeof *ids * (size_t)(n_prompt + n));
  float *row = malloc(sizeof *row * (size_t)V), *sorted = malloc(sizeof *sorted * (size_t)V);
  float *lp = malloc(sizeof *lp * (size_t)V); /* the last position's logits, read by their backend */
  if (!ids || !row || !sorted || !lp) {
    free(ids), free(row), free(sorted), free(lp);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for sampling");
  }
  memcpy(ids, prompt, sizeof *ids * (size_t)n_prompt);
  int64_t len = n_prompt;
  zt_param *ps;
  zt_device dev = zt_gpt2_params(m, &ps) > 0 ? zt_tensor_device(ps[0].tensor) : ZT_CPU; /* the model's */
  bool prev = zt_set_grad_enabled(false), was_training = zt_gpt2_module(m)->training;
  zt_gpt2_set_training(m, false);
  zt_status s = ZT_OK;
  zt_rng_state rs = {seed, 0};
  for (int64_t k = 0; k < n && s == ZT_OK; k++) {
    int64_t T = len < c->block_size ? len : c->block_size;
    int64_t shape[] = {1, T};
    zt_tensor *x = NULL, *logits = NULL;
    s = zt__tensor_from_host(2, shape, ZT_DTYPE_I32, dev, ZT_MEM_TAG_TEMP, ids + len - T, &x);
    if (!s) s = zt_gpt2_forward(m, x, NULL, &logits, NULL);
    if (!s) {
      ZT_ASSERT(logits->dtype == ZT_DTYPE_F32 && zt_tensor_is_contiguous(logits));
      zt__dev_read_range(logits, (T - 1) * V, V, lp);
      int32_t next = 0;
      if (temperature == 0) {
        for (int v = 1; v < V; v++)
          if (lp[v] > lp[next]) next = v;
      } else {
        /* (logit - max) / T in double: with the max subtracted first, a tiny T sends the others to
         * exp(-inf) = 0 instead of overflowing every term to inf (and NaN) */
        float lmax = lp[0];
        for (int v = 1; v < V; v++) lmax = lp[v] > lmax ? lp[v] : lmax;
        for (int v = 0; v < V; v++) row[v] = (float)(((double)lp[v] - lmax) / temperature);
        float cutoff = -INFINITY;
        if (top_k > 0 && top_k < V) {
          memcpy(sorted, row, sizeof *row * (size_t)V);
          qsort(sorted, (size_t)V, sizeof *sorted, cmp_desc);
          cutoff = sorted[top_k - 1];
        }
        double sum = 0;
        for (int v = 0; v < V; v++) sum += row[v] >= cutoff ? exp((double)row[v]) : 0;
        double u = zt_rng_uniform_at(rs, (uint64_t)k) * sum, acc = 0;
        next = -1;
        for (int v = 0; v < V; v++) {
          if (row[v] < cutoff) continue;
          acc += exp((double)row[v]);
          next = v;
          if (acc > u) break;
        }
        /* the max term alone gives exp(0) = 1: anything else means NaN/inf logits (a damaged model) */
        if (!(sum >= 1 && isfinite(sum))) {
          s = ZT_ERR(ZT_STATUS_STATE, "zt_gpt2_sample: the model's logits are not finite: its weights are damaged");
          next = 0;
        }
      }
      ids[len++] = next;
    }
    zt_tensor_free(x);
    zt_tensor_free(logits);
  }
  zt_gpt2_set_training(m, was_training);
  zt_set_grad_enabled(prev);
  free(row), free(sorted), free(lp);
  if (s) {
    free(ids);
    return s;
  }
  *out = ids;
  *n_out = len;
  return ZT_OK;
}
