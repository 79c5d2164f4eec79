/* GPT-2 (pre-LN, GELU tanh, learned positions, tied input/output embedding) built from
 * the nn modules, with Hugging Face GPT2LMHeadModel's parameter names, order and Conv1D
 * layouts. The loss path never holds B*T*V logits: the output layer and cross-entropy
 * run fused and chunked (zt_lm_head_cross_entropy) against the tied wte. With recompute
 * FULL or SELECTIVE, groups of blocks run inside zt_checkpoint regions (zt_gpt2_set_recompute). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/checkpoint.h"
#include "core/backend.h"
#include "zt/nn.h"
#include "zt/offload.h"

/* Layering: the model calls zt_checkpoint (src/strategies) directly rather than through a
 * runner hook set by the training layer. checkpoint.c depends only on the autograd layer
 * (its header includes zt/autograd.h alone, it knows nothing of nn or models), so this
 * adds no cycle and no upward call; a hook would only move the same call into train/
 * and make every other user of the model (bench, tests) re-install it. */

/* One checkpoint region: blocks [first, first + count). Its address is the region's
 * user_data, so it must outlive backward: the model owns one per group. */
typedef struct block_group {
  zt_gpt2 *m;
  int first, count;
  zt_recompute mode; /* NONE, FULL or SELECTIVE */
} block_group;

struct zt_gpt2 {
  zt_module *root; /* "" -> "transformer" -> wte, wpe, drop, h (0..L-1), ln_f */
  zt_gpt2_config cfg;
  zt_dtype dtype;
  zt_nn_embedding *wte, *wpe;
  zt_nn_dropout *drop;
  zt_nn_block **blocks;
  zt_nn_layer_norm *ln_f;
  zt_param *params; /* full HF names, state_dict order */
  int n_params;
  zt_recompute *block_mode; /* per block: NONE, FULL or SELECTIVE */
  int checkpoint_every;
  zt_checkpoint_policy policy; /* of SELECTIVE regions */
  block_group *groups; /* n_layer entries (at most that many groups), filled by set_recompute */
  int n_groups;
  zt_offload *offload; /* activation offload of the blocks (NULL: none), owned */
};

/* ------------------------------------------------------------------ configs */

typedef struct preset {
  const char *name;
  zt_gpt2_config cfg;
} preset;

/* Dropout 0 everywhere: the presets are for training from scratch, where it only slows
 * learning down (nanoGPT's choice); set config.dropout for more. gpt2-tiny is byte-level
 * (vocab 256) and small enough to learn the default data in a minute or two on 2 cores. */
static const preset presets[] = {
    {"gpt2-tiny", {4, 4, 128, 256, 256, 0.0}},
    {"gpt2-124m", {12, 12, 768, 50257, 1024, 0.0}},
    {"gpt2-350m", {24, 16, 1024, 50257, 1024, 0.0}},
    {"gpt2-774m", {36, 20, 1280, 50257, 1024, 0.0}},
    {"gpt2-1558m", {48, 25, 1600, 50257, 1024, 0.0}},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

zt_status zt_gpt2_preset(const char *name, zt_gpt2_config *out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_preset: out is NULL");
  for (int i = 0; name && i < N_PRESETS; i++)
    if (!strcmp(name, presets[i].name)) {
      *out = presets[i].cfg;
      return ZT_OK;
    }
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "unknown model preset \"%s\"; the presets are gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m",
                name ? name : "(null)");
}

zt_status zt_gpt2_config_validate(const zt_gpt2_config *c) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config is NULL");
  if (c->n_layer < 1 || c->n_layer > 9999)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: n_layer is %d; it must be in [1, 9999]", c->n_layer);
  if (c->n_head < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: n_head is %d; it must be positive", c->n_head);
  if (c->n_embd < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: n_embd is %d; it must be positive", c->n_embd);
  if (c->n_embd % c->n_head)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "GPT-2 config: n_embd = %d is not divisible by n_head = %d (each head gets n_embd / n_head dims)",
                  c->n_embd, c->n_head);
  if (c->n_embd > INT_MAX / 4)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: n_embd = %d is too large (4 * n_embd must fit an int)",
                  c->n_embd);
  if (c->vocab_size < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: vocab_size is %d; it must be positive", c->vocab_size);
  if (c->block_size < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: block_size (context length) is %d; it must be positive",
                  c->block_size);
  if (!(c->dropout >= 0 && c->dropout < 1))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: dropout is %g; it must be in [0, 1)", c->dropout);
  return ZT_OK;
}

int64_t zt_gpt2_config_num_params(const zt_gpt2_config *c) {
  int64_t C = c->n_embd, L = c->n_layer;
  int64_t per_layer = 2 * 2 * C            /* ln_1, ln_2 */
                      + C * 3 * C + 3 * C  /* c_attn */
                      + C * C + C          /* attn c_proj */
                      + C * 4 * C + 4 * C  /* c_fc */
                      + 4 * C * C + C;     /* mlp c_proj */
  return (int64_t)c->vocab_size * C + (int64_t)c->block_size * C + L * per_layer + 2 * C;
}

/* ------------------------------------------------------------------ building */

void zt_gpt2_free(zt_gpt2 *m) {
  if (!m) return;
  zt_module_free(m->root);
  free(m->blocks);
  free(m->groups);
  free(m->block_mode);
  zt_offload_free(m->offload);
  free(m->params);
  free(m);
}

static zt_status add(zt_module *parent, void *child) { return zt_module_add_child(parent, (zt_module *)child); }

/* Modules are made in state_dict order, so the Philox draws of the initialisation follow
 * that order too (reproducible from the seed alone). */
static zt_status build(zt_gpt2 *m) {
  const zt_gpt2_config *c = &m->cfg;
  zt_dtype dt = m->dtype;
  double std = 0.02, proj_std = 0.02 / sqrt(2.0 * c->n_layer);
  zt_module *tr = NULL, *h = NULL;
  ZT_TRY(zt_module_new("GPT2LMHeadModel", "", &m->root));
  ZT_TRY(zt_module_new("GPT2Model", "transformer", &tr));
  ZT_TRY(add(m->root, tr));
  ZT_TRY(zt_nn_embedding_new("wte", c->vocab_size, c->n_embd, dt, std, &m->wte));
  ZT_TRY(add(tr, m->wte));
  ZT_TRY(zt_nn_embedding_new("wpe", c->block_size, c->n_embd, dt, std, &m->wpe));
  ZT_TRY(add(tr, m->wpe));
  ZT_TRY(zt_nn_dropout_new("drop", c->dropout, &m->drop));
  ZT_TRY(add(tr, m->drop));
  ZT_TRY(zt_module_new("ModuleList", "h", &h));
  ZT_TRY(add(tr, h));
  m->blocks = calloc((size_t)c->n_layer, sizeof *m->blocks);
  m->groups = calloc((size_t)c->n_layer, sizeof *m->groups);
  m->block_mode = calloc((size_t)c->n_layer, sizeof *m->block_mode);
  m->policy = (zt_checkpoint_policy){zt_checkpoint_policy_save_wide_gemm, NULL};
  if (!m->blocks || !m->groups || !m->block_mode) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < c->n_layer; i++) {
    char name[16];
    snprintf(name, sizeof name, "%d", i);
    ZT_TRY(zt_nn_block_new(name, c->n_embd, c->n_head, c->dropout, dt, std, proj_std, &m->blocks[i]));
    ZT_TRY(add(h, m->blocks[i]));
  }
  ZT_TRY(zt_nn_layer_norm_new("ln_f", c->n_embd, 1e-5, dt, &m->ln_f));
  ZT_TRY(add(tr, m->ln_f));
  return zt_module_named_params(m->root, "", &m->n_params, &m->params);
}

zt_status zt_gpt2_new_dtype(const zt_gpt2_config *c, zt_dtype dt, zt_gpt2 **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_new: out is NULL");
  ZT_TRY(zt_gpt2_config_validate(c));
  if (dt != ZT_DTYPE_F32 && dt != ZT_DTYPE_F64)
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_gpt2_new: dtype %s is not supported; GPT-2 computes in f32 (or f64)",
                  zt_dtype_name(dt));
  zt_gpt2 *m = calloc(1, sizeof *m);
  if (!m) return ZT_ERR(ZT_STATUS_OOM, "zt_gpt2_new: out of host memory");
  m->cfg = *c;
  m->dtype = dt;
  zt_status s = build(m);
  if (!s) s = zt_gpt2_set_recompute(m, ZT_RECOMPUTE_NONE, 1);
  if (s) {
    zt_gpt2_free(m);
    return zt__error_prefix(s, "zt_gpt2_new");
  }
  *out = m;
  return ZT_OK;
}

zt_status zt_gpt2_new(const zt_gpt2_config *c, zt_gpt2 **out) { return zt_gpt2_new_dtype(c, ZT_DTYPE_F32, out); }

const zt_gpt2_config *zt_gpt2_get_config(const zt_gpt2 *m) { return m ? &m->cfg : NULL; }
zt_module *zt_gpt2_module(zt_gpt2 *m) { return m ? m->root : NULL; }

int zt_gpt2_params(zt_gpt2 *m, zt_param **params) {
  if (!m) return 0;
  if (params) *params = m->params;
  return m->n_params;
}

int64_t zt_gpt2_num_params(const zt_gpt2 *m) { return m ? zt_module_num_params(m->root) : 0; }

void zt_gpt2_set_training(zt_gpt2 *m, bool training) {
  if (m) zt_module_set_training(m->root, training);
}

const char *zt_recompute_name(zt_recompute mode) {
  switch (mode) {
  case ZT_RECOMPUTE_NONE: return "none";
  case ZT_RECOMPUTE_FULL: return "full";
  case ZT_RECOMPUTE_SELECTIVE: return "selective";
  case ZT_RECOMPUTE_PLAN: return "plan";
  }
  return "?";
}

zt_status zt_gpt2_set_recompute_blocks(zt_gpt2 *m, const zt_recompute *modes, int every) {
  if (!m || !modes) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_set_recompute_blocks: model or modes is NULL");
  int L = m->cfg.n_layer;
  for (int i = 0; i < L; i++)
    if (modes[i] != ZT_RECOMPUTE_NONE && modes[i] != ZT_RECOMPUTE_FULL && modes[i] != ZT_RECOMPUTE_SELECTIVE)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "zt_gpt2_set_recompute: block %d has mode %d; a block's mode is none, full or selective", i,
                    (int)modes[i]);
  if (every < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_set_recompute: checkpoint every %d blocks; it must be >= 1", every);
  if (every > L) every = L;
  memmove(m->block_mode, modes, sizeof *modes * (size_t)L);
  m->checkpoint_every = every;
  /* groups: runs of blocks with one mode, cut every `every` blocks */
  m->n_groups = 0;
  for (int i = 0; i < L;) {
    int n = 1;
    while (i + n < L && n < every && modes[i + n] == modes[i]) n++;
    m->groups[m->n_groups++] = (block_group){m, i, n, modes[i]};
    i += n;
  }
  return ZT_OK;
}

zt_status zt_gpt2_set_recompute(zt_gpt2 *m, zt_recompute mode, int every) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_set_recompute: model is NULL");
  if (mode != ZT_RECOMPUTE_NONE && mode != ZT_RECOMPUTE_FULL && mode != ZT_RECOMPUTE_SELECTIVE)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_gpt2_set_recompute: mode %d is not none, full or selective (per-block plans: "
                  "zt_gpt2_set_recompute_blocks)",
                  (int)mode);
  int L = m->cfg.n_layer;
  zt_recompute *modes = malloc(sizeof *modes * (size_t)L);
  if (!modes) return ZT_ERR(ZT_STATUS_OOM, "zt_gpt2_set_recompute: out of host memory");
  for (int i = 0; i < L; i++) modes[i] = mode;
  zt_status s = zt_gpt2_set_recompute_blocks(m, modes, every);
  free(modes);
  return s;
}

zt_recompute zt_gpt2_get_recompute(const zt_gpt2 *m, int *every) {
  if (every) *every = m ? m->checkpoint_every : 1;
  if (!m) return ZT_RECOMPUTE_NONE;
  for (int i = 1; i < m->cfg.n_layer; i++)
    if (m->block_mode[i] != m->block_mode[0]) return ZT_RECOMPUTE_PLAN;
  return m->block_mode[0];
}

void zt_gpt2_get_recompute_blocks(const zt_gpt2 *m, zt_recompute *modes) {
  if (m && modes) memcpy(modes, m->block_mode, sizeof *modes * (size_t)m->cfg.n_layer);
}

zt_status zt_gpt2_set_selective_policy(zt_gpt2 *m, zt_checkpoint_policy policy) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_set_selective_policy: model is NULL");
  m->policy = policy.fn ? policy : (zt_checkpoint_policy){zt_checkpoint_policy_save_wide_gemm, NULL};
  return ZT_OK;
}

zt_status zt_gpt2_set_activation_offload(zt_gpt2 *m, const zt_offload_options *o) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_set_activation_offload: model is NULL");
  zt_offload *next = NULL;
  if (o) ZT_TRY(zt_offload_new(o, &next));
  zt_offload_free(m->offload); /* graphs still holding its records keep it alive */
  m->offload = next;
  return ZT_OK;
}

zt_offload *zt_gpt2_activation_offload(const zt_gpt2 *m) { return m ? m->offload : NULL; }

zt_checkpoint_policy zt_gpt2_get_selective_policy(const zt_gpt2 *m) {
  return m ? m->policy : (zt_checkpoint_policy){zt_checkpoint_policy_save_wide_gemm, NULL};
}

double zt_gpt2_flops_per_step(const zt_gpt2 *m, int64_t B, int64_t T) {
  if (!m) return 0;
  double N = (double)zt_gpt2_num_params(m), L = m->cfg.n_layer, d = m->cfg.n_embd, bt = (double)B * (double)T;
  return 6.0 * N * bt + 12.0 * L * (double)T * d * bt;
}

/* ------------------------------------------------------------------ the model interface */

static zt_status model_forward_loss(void *ctx, zt_tensor *inputs, zt_tensor *targets, zt_tensor **loss) {
  return zt_gpt2_forward(ctx, inputs, targets, NULL, loss);
}
static int model_params(void *ctx, zt_param **params) { return zt_gpt2_params(ctx, params); }
static zt_module *model_module(void *ctx) { return zt_gpt2_module(ctx); }
static int model_n_blocks(void *ctx) { return ((zt_gpt2 *)ctx)->cfg.n_layer; }
static zt_module *model_block(void *ctx, int i) {
  zt_gpt2 *m = ctx;
  return i >= 0 && i < m->cfg.n_layer ? &m->blocks[i]->base : NULL;
}
static double model_flops(void *ctx, int64_t B, int64_t T) { return zt_gpt2_flops_per_step(ctx, B, T); }

zt_model zt_gpt2_model(zt_gpt2 *m) {
  return (zt_model){model_forward_loss, model_params, model_module, model_n_blocks, model_block, model_flops, m};
}

/* ------------------------------------------------------------------ forward */

static zt_status check_inputs(const zt_gpt2 *m, const zt_tensor *ids, const zt_tensor *targets,
                              zt_tensor **logits, zt_tensor **loss) {
  char s1[128], s2[128];
  if (!ids) return ZT_ERR(ZT_STATUS_INVALID_ARG, "ids is NULL");
  if (ids->dtype != ZT_DTYPE_I32)
    return ZT_ERR(ZT_STATUS_DTYPE, "ids have dtype %s; token ids must be i32", zt_dtype_name(ids->dtype));
  if (ids->ndim != 2 || ids->shape[0] < 1 || ids->shape[1] < 1)
    return ZT_ERR(ZT_STATUS_SHAPE, "ids have shape %s; they must be (B, T) with B, T >= 1",
                  zt_shape_str(ids->ndim, ids->shape, s1));
  if (ids->shape[1] > m->cfg.block_size)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "sequence length T = %lld is longer than the model's context (block_size = %d); use T <= %d",
                  (long long)ids->shape[1], m->cfg.block_size, m->cfg.block_size);
  if (targets) {
    if (targets->dtype != ZT_DTYPE_I32)
      return ZT_ERR(ZT_STATUS_DTYPE, "targets have dtype %s; they must be i32", zt_dtype_name(targets->dtype));
    if (!zt_shape_equal(targets->ndim, targets->shape, ids->ndim, ids->shape))
      return ZT_ERR(ZT_STATUS_SHAPE, "targets have shape %s but ids %s; they must have the same shape",
                    zt_shape_str(targets->ndim, targets->shape, s1), zt_shape_str(ids->ndim, ids->shape, s2));
    if (!loss) return ZT_ERR(ZT_STATUS_INVALID_ARG, "targets were given but loss is NULL");
  } else {
    if (loss) return ZT_ERR(ZT_STATUS_INVALID_ARG, "loss was asked for without targets; pass targets (B, T)");
    if (!logits) return ZT_ERR(ZT_STATUS_INVALID_ARG, "neither targets nor logits: nothing to compute");
  }
  return ZT_OK;
}

/* x (B, T, C) = wte[ids] + wpe[0..T), then dropout. */
static zt_status embed(zt_gpt2 *m, zt_tensor *ids, zt_tensor **out) {
  int64_t T = ids->shape[1];
  zt_tensor *pos = NULL, *tok = NULL, *pe = NULL;
  /* position ids made on the host and copied to the ids' device by its backend */
  int32_t *p = malloc(sizeof *p * (size_t)(T ? T : 1));
  if (!p) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for %lld position ids", (long long)T);
  for (int64_t t = 0; t < T; t++) p[t] = (int32_t)t;
  zt_status s = zt__tensor_from_host(1, &T, ZT_DTYPE_I32, zt_tensor_device(ids), zt_mem_tag_current(), p, &pos);
  free(p);
  if (!s) s = zt_nn_embedding_forward(m->wte, ids, &tok);
  if (!s) s = zt_nn_embedding_forward(m->wpe, pos, &pe);
  zt_tensor_free(pos);
  if (!s) s = zt_add(tok, pe, out); /* (B, T, C) + (T, C) */
  zt_tensor_free(tok);
  zt_tensor_free(pe);
  if (!s) s = zt_nn_dropout_forward(m->drop, out);
  return s;
}

/* Blocks [first, first + count) on x (borrowed); *out is new. */
static zt_status run_blocks(zt_gpt2 *m, int first, int count, zt_tensor *x, zt_tensor **out) {
  zt_tensor *cur = x;
  for (int i = first; i < first + count; i++) {
    zt_tensor *y = NULL;
    zt_status s = zt_nn_block_forward(m->blocks[i], cur, &y);
    if (cur != x) zt_tensor_free(cur);
    if (s) return s;
    cur = y;
  }
  *out = cur;
  return ZT_OK;
}

/* The checkpoint region of one group: a pure function of its input, the parameters and
 * the RNG (dropout), as zt_checkpoint requires. */
static zt_status group_region(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out;
  const block_group *g = ud;
  return run_blocks(g->m, g->first, g->count, in[0], out);
}

static zt_status forward(zt_gpt2 *m, zt_tensor *ids, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss) {
  ZT_TRY(check_inputs(m, ids, targets, logits, loss));
  zt_tensor *x = NULL, *h = NULL, *h2 = NULL, *t2 = NULL, *lg = NULL, *ls = NULL;
  zt_status s = embed(m, ids, &x);
  // the blocks' saved tensors go to the offload tier (a checkpoint region's own hooks sit
  // above it: only region inputs reach the tier); with grad mode off nothing is saved
  bool offloading = !s && m->offload && zt_grad_enabled();
  if (offloading) s = zt_offload_push(m->offload);
  // with grad mode off (eval, sampling) zt_checkpoint just runs the region
  for (int g = 0; s == ZT_OK && g < m->n_groups; g++) {
    block_group *grp = &m->groups[g];
    zt_tensor *y = NULL;
    if (grp->mode == ZT_RECOMPUTE_NONE) {
      s = run_blocks(m, grp->first, grp->count, x, &y);
    } else {
      zt_checkpoint_options o = zt_checkpoint_options_default();
      if (grp->mode == ZT_RECOMPUTE_SELECTIVE) o.policy = m->policy;
      s = zt_checkpoint(group_region, grp, 1, &x, 1, &y, &o);
    }
    zt_tensor_free(x);
    x = y;
  }
  if (offloading) {
    zt_status p = zt_offload_pop(m->offload);
    if (!s) s = p;
  }
  if (!s) s = zt_nn_layer_norm_forward(m->ln_f, x, &h);
  zt_tensor_free(x);
  int64_t B = ids->shape[0], T = ids->shape[1], C = m->cfg.n_embd;
  if (!s && targets) {
    // loss = mean CE of h (B*T, C) . wte^T against targets (B*T), chunked: no (B*T, V) tensor
    s = zt_reshape(h, 2, (int64_t[]){B * T, C}, &h2);
    if (!s) s = zt_reshape(targets, 1, (int64_t[]){B * T}, &t2);
    if (!s) s = zt_lm_head_cross_entropy(h2, m->wte->weight, t2, -1, &ls);
  }
  // logits (B, T, V) = h . wte^T (one GEMM over all B*T rows)
  if (!s && logits) s = zt_matmul(h, m->wte->weight, false, true, &lg);
  zt_tensor_free(h);
  zt_tensor_free(h2);
  zt_tensor_free(t2);
  if (s) {
    zt_tensor_free(lg);
    zt_tensor_free(ls);
    return s;
  }
  if (logits) *logits = lg;
  if (loss) *loss = ls;
  return ZT_OK;
}

zt_status zt_gpt2_forward(zt_gpt2 *m, zt_tensor *ids, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_forward: model is NULL");
  zt_status s = zt_module_pre_forward(m->root);
  if (!s) s = forward(m, ids, targets, logits, loss);
  if (!s) {
    // the root's outputs: the loss and/or the logits
    zt_tensor *o[2];
    int n = 0;
    if (loss) o[n++] = *loss;
    if (logits) o[n++] = *logits;
    s = zt_module_post_forward(m->root, n, o);
    if (s) {
      if (loss) zt_tensor_free(*loss), *loss = NULL;
      if (logits) zt_tensor_free(*logits), *logits = NULL;
    }
  }
  return s ? zt__error_prefix(s, "zt_gpt2_forward") : ZT_OK;
}
