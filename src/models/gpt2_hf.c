/* GPT-2 as Hugging Face files: GPT2LMHeadModel's model.safetensors (zerotrain keeps its names and
 * Conv1D layouts, so nothing is transposed; the output layer is tied to wte) and GPT2Config's
 * config.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "core/backend.h"
#include "core/tensor_internal.h"
#include "io/atomic_file.h"
#include "io/bounce.h"
#include "io/safetensors.h"
#include "models/gpt2_internal.h"
#include "models/lm_internal.h"

/* An HF GPT2Config: GELU with the tanh approximation is "gelu_new"; positions and context
 * are the block size; the output layer is tied to wte. */
void zt__gpt2_hf_config_json(const zt_lm_config *lc, zt_dtype dt, zt__buf *b) {
  const zt_gpt2_config *c = &lc->gpt2;
  char p[32];
  zt__fmt_double(p, c->dropout);
  zt__buf_printf(b,
                 "{\n"
                 "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                 "  \"model_type\": \"gpt2\",\n"
                 "  \"vocab_size\": %d,\n"
                 "  \"n_positions\": %d,\n"
                 "  \"n_ctx\": %d,\n"
                 "  \"n_embd\": %d,\n"
                 "  \"n_layer\": %d,\n"
                 "  \"n_head\": %d,\n"
                 "  \"n_inner\": null,\n"
                 "  \"activation_function\": \"gelu_new\",\n"
                 "  \"resid_pdrop\": %s,\n"
                 "  \"embd_pdrop\": %s,\n"
                 "  \"attn_pdrop\": %s,\n"
                 "  \"layer_norm_epsilon\": 1e-05,\n"
                 "  \"initializer_range\": 0.02,\n"
                 "  \"scale_attn_weights\": true,\n"
                 "  \"use_cache\": true,\n"
                 "  \"tie_word_embeddings\": true,\n",
                 c->vocab_size, c->block_size, c->block_size, c->n_embd, c->n_layer, c->n_head, p, p, p);
  /* GPT-2's <|endoftext|> id where the vocabulary has it; null otherwise (GPT2Config's
   * default 50256 would lie outside a small vocabulary). */
  if (c->vocab_size > 50256)
    zt__buf_printf(b, "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n");
  else
    zt__buf_printf(b, "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n");
  zt__buf_printf(b, "  \"torch_dtype\": \"%s\"\n}\n", zt__lm_torch_dtype(dt));
}

zt_status zt_gpt2_save_hf(zt_gpt2 *m, const char *path) {
  if (!m || !path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_save_hf: NULL model or empty path");
  const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path, *ext = ".safetensors";
  size_t n = strlen(name), e = strlen(ext);
  if (n <= e || strcmp(name + n - e, ext))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_save_hf: '%s': name the weights file NAME.safetensors", path);
  char dir[4096], base[256], cfg[4096];
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == path ? 1 : slash - path) : 1, slash ? path : ".");
  snprintf(base, sizeof base, "%.*s", (int)(n - e), name);
  ZT_TRY(zt__path_join(cfg, sizeof cfg, dir, "config.json"));
  zt_model model = zt_gpt2_model(m);
  ZT_TRY(zt__lm_save_weights(&model, dir, base, NULL, INT64_MAX));
  return zt__lm_write_hf_config(&model, cfg);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

/* Largest block index + 1 among names "h.N." (with or without "transformer."). */
static int count_layers(int n, char *const *names) {
  int layers = 0;
  for (int i = 0; i < n; i++) {
    const char *s = names[i];
    if (!strncmp(s, "transformer.", 12)) s += 12;
    int k;
    if (sscanf(s, "h.%d.", &k) == 1 && k + 1 > layers) layers = k + 1;
  }
  return layers;
}

zt_status zt_gpt2_load_hf(zt_gpt2 *m, const char *path) {
  if (!m || !path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_load_hf: NULL model or path");
  int nf = 0;
  char **fnames = NULL;
  ZT_TRY(zt_safetensors_names(path, &nf, &fnames));
  zt_param *params;
  int np = zt_gpt2_params(m, &params);
  const zt_gpt2_config *cfg = zt_gpt2_get_config(m);
  const char **map = calloc((size_t)np + 1, sizeof *map);
  bool *used = calloc((size_t)nf + 1, sizeof *used);
  zt_tensor *lm = NULL, *wte_host = NULL;
  zt__bounce stage = {0};
  zt_status s = ZT_OK;
  if (!map || !used) {
    s = ZT_ERR(ZT_STATUS_OOM, "loading '%s': out of memory", path);
    goto out;
  }
  /* transformers writes "transformer.h.0..." for GPT2LMHeadModel and "h.0..." for a bare
   * GPT2Model export: accept either spelling of each name. */
  int lm_idx = -1;
  for (int i = 0; i < np && !s; i++) {
    const char *full = params[i].name;
    const char *bare = strncmp(full, "transformer.", 12) ? NULL : full + 12;
    for (int k = 0; k < nf && !map[i]; k++)
      if (!strcmp(fnames[k], full) || (bare && !strcmp(fnames[k], bare))) {
        map[i] = fnames[k];
        used[k] = true;
      }
    if (!map[i]) {
      int fl = count_layers(nf, fnames);
      char hint[160] = "";
      if (fl != cfg->n_layer)
        snprintf(hint, sizeof hint, " (the file has %d layers, the model %d)", fl, cfg->n_layer);
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' has no tensor '%s'%s%s%s: it is not a GPT-2 model of this shape%s", path,
                 full, bare ? " (nor '" : "", bare ? bare : "", bare ? "')" : "", hint);
    }
  }
  for (int k = 0; k < nf && !s; k++) {
    if (used[k]) continue;
    const char *f = fnames[k];
    if (!strcmp(f, "lm_head.weight")) {
      lm_idx = k;
    } else if (!ends_with(f, ".attn.bias") && !ends_with(f, ".attn.masked_bias")) {
      /* attn.bias / masked_bias are the causal-mask buffers of older exports. */
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' holds tensor '%s', which is not a parameter of a GPT-2 model", path, f);
    }
  }
  if (s) goto out;
  zt_tensor **ts = malloc(sizeof *ts * (size_t)np);
  if (!ts) {
    s = ZT_ERR(ZT_STATUS_OOM, "loading '%s': out of memory", path);
    goto out;
  }
  for (int i = 0; i < np; i++) ts[i] = params[i].tensor;
  s = zt_safetensors_load_into(path, np, map, ts, false);
  free(ts);
  if (s || lm_idx < 0) goto out;
  /* The output layer is tied to wte here; a file whose lm_head differs is another model. */
  zt_tensor *wte = NULL;
  for (int i = 0; i < np; i++)
    if (!strcmp(params[i].name, "transformer.wte.weight")) wte = params[i].tensor;
  if (!wte) goto out;
  if ((s = zt_tensor_empty_tagged(wte->ndim, wte->shape, wte->dtype, ZT_CPU, ZT_MEM_TAG_TEMP, &lm))) goto out;
  const char *lm_name = "lm_head.weight";
  if ((s = zt_safetensors_load_into(path, 1, &lm_name, &lm, false))) goto out;
  int64_t ne = zt_tensor_numel(wte);
  /* compared on the host: wte's own bytes, a copy of an evicted one's (staged, not restored),
   * or a cpu copy of a device's */
  if (zt_storage_is_evicted(wte->storage)) {
    if ((s = zt__bounce_init(&stage, 1, &wte)) || (s = zt__bounce_view(&stage, wte, true, &wte_host))) goto out;
    wte = wte_host;
  } else if (!zt__tensor_host_ptr(wte)) {
    if ((s = zt__tensor_to_device(wte, ZT_CPU, ZT_MEM_TAG_TEMP, &wte_host))) goto out;
    wte = wte_host;
  }
  /* both are host memory now */
  if (zt_tensor_is_contiguous(wte) && !memcmp(zt__tensor_ptr(wte), zt__tensor_ptr(lm), zt_tensor_nbytes(wte)))
    goto out;
  for (int64_t i = 0; i < ne; i++) {
    double a = zt_tensor_get(wte, i), b = zt_tensor_get(lm, i);
    if (a != b && !(a != a && b != b)) {
      s = ZT_ERR(ZT_STATUS_INVALID_ARG,
                 "'%s': lm_head.weight differs from the embedding wte (element %lld: %g vs %g); zerotrain's GPT-2 ties "
                 "them, so this untied model cannot be loaded",
                 path, (long long)i, b, a);
      break;
    }
  }
out:
  free(map);
  free(used);
  free(fnames);
  zt_tensor_free(lm);
  zt_tensor_free(wte_host);
  zt__bounce_free(&stage);
  return s;
}

