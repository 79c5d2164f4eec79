/* GPT-2 as OffloadModel's unit sequence (zt/offload_model.h): unit 0 the embeddings (wte,
 * wpe), units 1..L the blocks, unit L + 1 the final layer norm and the fused lm-head loss
 * (which uses the tied wte again); a span of units runs as zt_gpt2_forward_stage. */
#include <stdio.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/train.h"

static bool name_is(const char *name, const char *prefix) { return strncmp(name, prefix, strlen(prefix)) == 0; }

static bool gpt2_uses(void *ctx, int unit, int param) {
  zt_gpt2 *m = ctx;
  zt_param *ps = NULL;
  int n = zt_gpt2_params(m, &ps), L = zt_gpt2_get_config(m)->n_layer;
  if (param < 0 || param >= n) return false;
  const char *name = ps[param].name;
  if (unit == 0) return !strcmp(name, "transformer.wte.weight") || !strcmp(name, "transformer.wpe.weight");
  if (unit == L + 1) return !strcmp(name, "transformer.wte.weight") || name_is(name, "transformer.ln_f.");
  char prefix[48];
  snprintf(prefix, sizeof prefix, "transformer.h.%d.", unit - 1);
  return name_is(name, prefix);
}

static zt_status gpt2_run(void *ctx, int first, int count, zt_tensor *targets, zt_tensor *in, zt_tensor **out) {
  zt_gpt2 *m = ctx;
  int L = zt_gpt2_get_config(m)->n_layer, last = first + count;
  bool head = last == L + 2;
  int b0 = first > 0 ? first - 1 : 0, b1 = last - 1 < L ? last - 1 : L;
  if (head && !targets)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2's last unit (the loss) needs targets (B, T)");
  return zt_gpt2_forward_stage(m, first == 0, b0, b1 > b0 ? b1 - b0 : 0, head ? targets : NULL, in, out);
}

zt_status zt_gpt2_offload_units(zt_gpt2 *m, zt_offload_units *out) {
  if (!m || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_offload_units: model and out are required");
  zt_param *ps = NULL;
  int n = zt_gpt2_params(m, &ps);
  *out = (zt_offload_units){zt_gpt2_get_config(m)->n_layer + 2, n, ps, gpt2_uses, gpt2_run, m};
  return ZT_OK;
}
