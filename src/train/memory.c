/* A run's activation memory options attached to its model (memory.h): the recompute plan (a
 * mode for every block, a letter per block, or one planned for a byte budget) and the
 * activation offload, as strategies in that order; and the plan's figures for the summary. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/memory.h"
#include "train/offload_plan.h"

/* "f", "s", "n" per block ("..." when it does not fit). */
static void plan_string(const zt_recompute *modes, int L, char *out, size_t cap) {
  size_t n = 0;
  for (int i = 0; i < L; i++) {
    if (n + 4 >= cap) {
      strcpy(out + n, "...");
      n += 3;
      break;
    }
    out[n++] = modes[i] == ZT_RECOMPUTE_FULL ? 'f' : modes[i] == ZT_RECOMPUTE_SELECTIVE ? 's' : 'n';
  }
  out[n] = 0;
}

/* res's recompute_plan and act_peak_predicted from the plan now attached (rows: a microbatch). */
void zt__train_plan_result(const zt_model *m, const zt_train_memory *mem, int64_t rows, int64_t seq,
                           zt_train_result *res) {
  const zt_lm_config *lc = zt_model_config(m);
  int L = zt_lm_config_dims(lc).n_layer, every = 1;
  zt_recompute *modes = calloc((size_t)L, sizeof *modes);
  if (!modes) return; /* out of host memory: the figures stay as they were */
  zt_recompute_plan_modes(mem->recompute, L, modes);
  zt_recompute_plan_mode(mem->recompute, &every);
  plan_string(modes, L, res->recompute_plan, sizeof res->recompute_plan);
  res->act_peak_predicted = zt_lm_predict_activation_peak(lc, rows, seq, modes, every,
                                                          zt_recompute_plan_policy(mem->recompute));
  free(modes);
}

zt_status zt_train_memory_attach(const zt_model *m, const zt_train_config *c, int64_t rows, zt_train_memory *mem,
                                 zt_train_result *res) {
  if (!m || !c || !mem) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_memory_attach: model, config or out is NULL");
  if (rows < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_memory_attach: %lld rows", (long long)rows);
  *mem = (zt_train_memory){0};
  const zt_lm_config *lc = zt_model_config(m);
  if (!lc) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_memory_attach: the model is not a language model of a family");
  int L = zt_lm_config_dims(lc).n_layer;
  zt_recompute *modes = calloc((size_t)L, sizeof *modes);
  if (!modes) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  zt_recompute_options ro = zt_recompute_options_default();
  ro.policy = (zt_checkpoint_policy){c->memory.selective_policy, NULL};
  ro.mode = c->memory.recompute;
  ro.every = c->memory.checkpoint_every;
  zt_status s = ZT_OK;
  if (c->memory.recompute_plan[0]) { /* a letter per block */
    if (strlen(c->memory.recompute_plan) != (size_t)L)
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.memory.recompute_plan '%s' has %zu letters; the model has %d "
                                        "blocks: give one letter (n, s or f) per block",
                 c->memory.recompute_plan, strlen(c->memory.recompute_plan), L);
    for (int i = 0; i < L && !s; i++) {
      char ch = c->memory.recompute_plan[i];
      if (ch != 'n' && ch != 's' && ch != 'f')
        s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.memory.recompute_plan '%s': block %d's letter '%c' is not "
                                          "n (none), s (selective) or f (full)",
                   c->memory.recompute_plan, i, ch);
      modes[i] = ch == 'f' ? ZT_RECOMPUTE_FULL : ch == 's' ? ZT_RECOMPUTE_SELECTIVE : ZT_RECOMPUTE_NONE;
    }
    ro.modes = modes, ro.n_modes = L, ro.every = 1;
  } else if (c->memory.recompute_budget > 0) {
    s = zt_lm_plan_recompute(lc, rows, c->data.seq, c->memory.recompute_budget, ro.policy, modes, NULL);
    if (s) zt__error_prefix(s, "zt_train_config.memory.recompute_budget=%lld", (long long)c->memory.recompute_budget);
    ro.modes = modes, ro.n_modes = L, ro.every = 1;
  }
  if (!s) s = zt_recompute_plan_new(&ro, &mem->recompute);
  if (!s && c->memory.offload_activations) {
    zt_offload_options o = zt_offload_options_default((zt_offload_tier)c->memory.offload_activations);
    if (c->memory.offload_dir[0]) o.dir = c->memory.offload_dir;
    o.write_cap = zt__train_act_write_cap(lc, rows * c->data.seq); /* what the planner counts */
    s = zt_offload_new(&o, &mem->offload);
  }
  zt_strategy st[2] = {zt_recompute_plan_strategy(mem->recompute), zt_offload_strategy(mem->offload)};
  if (!s) s = zt_strategies_attach(mem->offload ? 2 : 1, st, m);
  free(modes);
  if (!s && res) zt__train_plan_result(m, mem, rows, c->data.seq, res);
  if (s) zt_train_memory_free(mem);
  return s;
}

void zt_train_memory_free(zt_train_memory *mem) {
  if (!mem) return;
  zt_recompute_plan_free(mem->recompute); /* each detaches itself first */
  zt_offload_free(mem->offload);
  *mem = (zt_train_memory){0};
}
