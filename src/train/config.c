/* Training configuration: defaults, one typed, range-checked setter by option name (zt
 * train's table of options, cli/train_options.c, calls it for flags and config files alike),
 * and the config-file reader (whole file, any line length, quoted values, a key once). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "zt/train.h"

void zt_train_config_default(zt_train_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->model.preset, sizeof c->model.preset, "gpt2-tiny");
  c->model.dropout = -1;
  c->data.batch = 8;
  c->data.seq = 256;
  c->data.microbatches = 1;
  c->steps = 600;
  c->optim.lr = 1e-3;
  c->optim.min_lr = -1;
  c->optim.warmup = -1;
  c->optim.kind = ZT_OPTIM_ADAMW;
  c->optim.weight_decay = 0.1;
  c->optim.beta1 = 0.9;
  c->optim.beta2 = 0.95;
  c->optim.momentum = 0.9;
  c->optim.grad_clip = 1.0;
  c->seed = 1337;
  c->log.eval_every = 100;
  c->log.eval_batches = 8;
  c->memory.recompute = ZT_RECOMPUTE_NONE;
  c->memory.checkpoint_every = 1;
  c->memory.offload_slices = 0;   /* the planner's (offload_states), else 2 */
  c->memory.offload_resident = 0;
  c->parallel.shard = ZT_SHARD_NONE;
  c->parallel.prefetch = true;
  c->parallel.mixed_precision = ZT_DTYPE_F32;
  c->checkpoint.keep_checkpoints = 2;
  c->parallel.comm_timeout = 600;
  c->parallel.pp = 1;
  snprintf(c->parallel.schedule, sizeof c->parallel.schedule, "1f1b");
  snprintf(c->parallel.pp_balance, sizeof c->parallel.pp_balance, "even");
}

static zt_status parse_bool(const char *key, const char *v, bool *out) {
  if (v && (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1"))) *out = true;
  else if (v && (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "0"))) *out = false;
  else return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' is on or off (got '%s')", key, v ? v : "");
  return ZT_OK;
}

zt_status zt_config_parse_i64(const char *key, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || x < lo || x > hi)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs an integer in [%lld, %lld] (got '%s')", key, (long long)lo,
                  (long long)hi, v ? v : "");
  *out = x;
  return ZT_OK;
}

/* Bounds that keep every size computed from the options far from int64 overflow. */
#define ZT_MAX_ROWS (1ll << 20)  /* batch, seq, eval batches */
#define ZT_MAX_STEPS (1ll << 40) /* step counts */
#define ZT_CONFIG_MAX_BYTES (1 << 20) /* a config file is a few lines */

static zt_status parse_int(const char *key, const char *v, int lo, int hi, int *out) {
  int64_t x = 0;
  ZT_TRY(zt_config_parse_i64(key, v, lo, hi, &x));
  *out = (int)x;
  return ZT_OK;
}

zt_status zt_config_parse_f64(const char *key, const char *v, double lo, double hi, double *out) {
  char *end;
  double x = v ? strtod(v, &end) : NAN;
  if (!v || !*v || *end || !(x >= lo && x <= hi)) /* NaN fails the range test too */
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs a number in [%g, %g] (got '%s')", key, lo, hi, v ? v : "");
  *out = x;
  return ZT_OK;
}

static zt_status parse_str(const char *key, const char *v, char *dst, size_t cap) {
  if (!v || !*v)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs a value (got an empty one); leave the option out for its "
                  "default", key);
  if (strlen(v) >= cap) return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s': value is longer than %zu bytes", key, cap - 1);
  snprintf(dst, cap, "%s", v);
  return ZT_OK;
}

/* A byte count: digits with an optional K, M or G suffix (powers of 1024; "KiB", "MB"...). */
static zt_status parse_bytes(const char *key, const char *v, int64_t *out) {
  char *end;
  errno = 0;
  double x = v ? strtod(v, &end) : 0;
  if (!v || end == v || errno || !(x > 0)) goto bad;
  double mult = 1;
  switch (*end) {
  case 'k': case 'K': mult = 1024.0; end++; break;
  case 'm': case 'M': mult = 1048576.0; end++; break;
  case 'g': case 'G': mult = 1073741824.0; end++; break;
  case 't': case 'T': mult = 1099511627776.0; end++; break;
  default: break;
  }
  if (mult > 1 && *end == 'i') end++;
  if (mult > 1 && (*end == 'B' || *end == 'b')) end++;
  if (*end) goto bad;
  if (x * mult >= 9.2e18) /* what an int64_t holds, with room */
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' is %s: a size must be below 8 EiB (8388608T)", key, v);
  *out = (int64_t)(x * mult);
  return ZT_OK;
bad:
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "option '%s' needs a positive size in bytes, e.g. 300M, 1.5G or 1T (K, M, G, T: powers of 1024) (got "
                "'%s')",
                key, v ? v : "");
}

static zt_status parse_recompute(zt_train_config *c, const char *v) {
  static const struct {
    const char *name;
    zt_recompute mode;
    zt_checkpoint_policy_fn policy;
  } modes[] = {{"none", ZT_RECOMPUTE_NONE, NULL},
               {"full", ZT_RECOMPUTE_FULL, NULL},
               {"selective", ZT_RECOMPUTE_SELECTIVE, NULL},
               {"selective:wide", ZT_RECOMPUTE_SELECTIVE, zt_checkpoint_policy_save_wide_gemm},
               {"selective:gemm", ZT_RECOMPUTE_SELECTIVE, zt_checkpoint_policy_save_gemm},
               {"selective:attention", ZT_RECOMPUTE_SELECTIVE, zt_checkpoint_policy_recompute_attention}};
  for (size_t i = 0; v && i < sizeof modes / sizeof modes[0]; i++)
    if (!strcmp(v, modes[i].name)) {
      c->memory.recompute = modes[i].mode;
      c->memory.selective_policy = modes[i].policy;
      c->memory.recompute_budget = 0;
      c->memory.recompute_plan[0] = '\0';
      return ZT_OK;
    }
  if (v && !strncmp(v, "budget=", 7)) {
    ZT_TRY(parse_bytes("recompute budget", v + 7, &c->memory.recompute_budget));
    c->memory.recompute = ZT_RECOMPUTE_NONE;
    c->memory.recompute_plan[0] = '\0';
    return ZT_OK;
  }
  if (v && !strncmp(v, "plan=", 5)) {
    size_t n = strlen(v + 5);
    if (n < 1 || n > ZT_TRAIN_MAX_LAYERS || strspn(v + 5, "nsf") != n)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "option 'recompute' plan=LETTERS takes a letter per block, n (none), s (selective) or f (full), "
                    "at most %d of them (got '%s')",
                    ZT_TRAIN_MAX_LAYERS, v + 5);
    memcpy(c->memory.recompute_plan, v + 5, n + 1);
    c->memory.recompute = ZT_RECOMPUTE_NONE;
    c->memory.recompute_budget = 0;
    return ZT_OK;
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "option 'recompute' is none, full, selective[:wide|:gemm|:attention], budget=SIZE or plan=LETTERS (got "
                "'%s')",
                v ? v : "");
}

static zt_status set_strategy_option(zt_train_config *c, const char *key, const char *v);

zt_status zt_train_config_set(zt_train_config *c, const char *key, const char *v) {
  if (!key) return ZT_ERR(ZT_STATUS_INVALID_ARG, "option name is NULL");
  if (!strcmp(key, "model")) {
    zt_gpt2_config g;
    ZT_TRY(parse_str(key, v, c->model.preset, sizeof c->model.preset));
    c->model.preset_set = true;
    return zt_gpt2_preset(c->model.preset, &g);
  }
  if (!strcmp(key, "layers")) return parse_int(key, v, 1, 4096, &c->model.n_layer);
  if (!strcmp(key, "heads")) return parse_int(key, v, 1, 4096, &c->model.n_head);
  if (!strcmp(key, "dim")) return parse_int(key, v, 1, 1 << 20, &c->model.n_embd);
  if (!strcmp(key, "vocab")) return parse_int(key, v, 1, 1 << 28, &c->model.vocab_size);
  if (!strcmp(key, "ctx")) return parse_int(key, v, 1, 1 << 24, &c->model.block_size);
  if (!strcmp(key, "dropout")) return zt_config_parse_f64(key, v, 0, 0.999, &c->model.dropout);
  if (!strcmp(key, "data")) return parse_str(key, v, c->data.path, sizeof c->data.path);
  if (!strcmp(key, "val-data")) return parse_str(key, v, c->data.val_path, sizeof c->data.val_path);
  if (!strcmp(key, "encoder")) return parse_str(key, v, c->data.encoder, sizeof c->data.encoder);
  if (!strcmp(key, "merges")) return parse_str(key, v, c->data.merges, sizeof c->data.merges);
  if (!strcmp(key, "batch")) return zt_config_parse_i64(key, v, 1, ZT_MAX_ROWS, &c->data.batch);
  if (!strcmp(key, "seq")) return zt_config_parse_i64(key, v, 1, ZT_MAX_ROWS, &c->data.seq);
  if (!strcmp(key, "microbatches")) return zt_config_parse_i64(key, v, 1, ZT_MAX_ROWS, &c->data.microbatches);
  if (!strcmp(key, "steps")) return zt_config_parse_i64(key, v, 1, ZT_MAX_STEPS, &c->steps);
  if (!strcmp(key, "lr")) return zt_config_parse_f64(key, v, 0, 10, &c->optim.lr);
  if (!strcmp(key, "min-lr")) return zt_config_parse_f64(key, v, 0, 10, &c->optim.min_lr);
  if (!strcmp(key, "warmup")) return zt_config_parse_i64(key, v, 0, ZT_MAX_STEPS, &c->optim.warmup);
  if (!strcmp(key, "optimizer")) {
    if (v && !strcmp(v, "adamw")) c->optim.kind = ZT_OPTIM_ADAMW;
    else if (v && !strcmp(v, "sgd")) c->optim.kind = ZT_OPTIM_SGD;
    else return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'optimizer' is adamw or sgd (got '%s')", v ? v : "");
    return ZT_OK;
  }
  if (!strcmp(key, "weight-decay")) return zt_config_parse_f64(key, v, 0, 10, &c->optim.weight_decay);
  if (!strcmp(key, "beta1")) return zt_config_parse_f64(key, v, 0, 0.999999, &c->optim.beta1);
  if (!strcmp(key, "beta2")) return zt_config_parse_f64(key, v, 0, 0.999999, &c->optim.beta2);
  if (!strcmp(key, "momentum")) return zt_config_parse_f64(key, v, 0, 0.999999, &c->optim.momentum);
  if (!strcmp(key, "grad-clip")) return zt_config_parse_f64(key, v, 0, 1e9, &c->optim.grad_clip);
  if (!strcmp(key, "seed")) {
    int64_t s = 0;
    ZT_TRY(zt_config_parse_i64(key, v, 0, INT64_MAX, &s));
    c->seed = (uint64_t)s;
    return ZT_OK;
  }
  if (!strcmp(key, "threads")) return parse_int(key, v, 0, 4096, &c->threads);
  if (!strcmp(key, "eval-every")) return zt_config_parse_i64(key, v, 0, ZT_MAX_STEPS, &c->log.eval_every);
  if (!strcmp(key, "eval-batches")) return zt_config_parse_i64(key, v, 1, ZT_MAX_ROWS, &c->log.eval_batches);
  if (!strcmp(key, "metrics")) return parse_str(key, v, c->log.metrics, sizeof c->log.metrics);
  if (!strcmp(key, "save")) return parse_str(key, v, c->checkpoint.save, sizeof c->checkpoint.save);
  if (!strcmp(key, "keep-checkpoints")) return parse_int(key, v, 1, 1000, &c->checkpoint.keep_checkpoints);
  if (!strcmp(key, "tensorboard")) return parse_str(key, v, c->log.tensorboard, sizeof c->log.tensorboard);
  if (!strcmp(key, "comm-timeout")) return zt_config_parse_f64(key, v, 0, 1e7, &c->parallel.comm_timeout);
  if (!strcmp(key, "allow-config-change")) return parse_bool(key, v, &c->checkpoint.allow_config_change);
  if (!strcmp(key, "save-every")) return zt_config_parse_i64(key, v, 0, ZT_MAX_STEPS, &c->checkpoint.save_every);
  if (!strcmp(key, "resume")) return parse_str(key, v, c->checkpoint.resume, sizeof c->checkpoint.resume);
  if (!strcmp(key, "init-from")) return parse_str(key, v, c->model.init_from, sizeof c->model.init_from);
  if (!strcmp(key, "stop-at")) return zt_config_parse_i64(key, v, 0, ZT_MAX_STEPS, &c->stop_at);
  if (!strcmp(key, "inject-nan-at")) return zt_config_parse_i64(key, v, 0, ZT_MAX_STEPS, &c->inject_nan_at);
  return set_strategy_option(c, key, v);
}

/* The memory and parallelism options (zt_train_config.memory, .parallel, and the formats and
 * figures that go with them); any other key is unknown. */
static zt_status set_strategy_option(zt_train_config *c, const char *key, const char *v) {
  if (!strcmp(key, "recompute")) return parse_recompute(c, v);
  if (!strcmp(key, "offload-activations")) {
    static const char *const names[] = {"none", "bf16", "disk", "host"};
    for (int i = 0; i < 4; i++)
      if (v && !strcmp(v, names[i])) {
        c->memory.offload_activations = i; /* 0 none, then ZT_OFFLOAD_BF16, _DISK, _HOST */
        return ZT_OK;
      }
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'offload-activations' is none, bf16, disk or host (got '%s')",
                  v ? v : "");
  }
  if (!strcmp(key, "offload-model")) {
    static const char *const names[] = {"none", "bf16", "disk", "host"};
    for (int i = 0; i < 4; i++)
      if (v && !strcmp(v, names[i])) {
        c->memory.offload_model = i; /* 0 none, then ZT_OFFLOAD_BF16, _DISK, _HOST */
        return ZT_OK;
      }
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'offload-model' is none, bf16, disk or host (got '%s')", v ? v : "");
  }
  if (!strcmp(key, "offload-states")) { /* the model offload's tier, every state in it */
    if (v && !strcmp(v, "none")) {
      c->memory.offload_states = false;
      c->memory.offload_model = 0;
      return ZT_OK;
    }
    zt_status s = zt_train_config_set(c, "offload-model", v);
    if (s) return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'offload-states' is none, disk, bf16 or host (got '%s')", v ? v : "");
    c->memory.offload_states = true;
    return ZT_OK;
  }
  if (!strcmp(key, "mem-limit")) return parse_bytes("mem-limit", v, &c->memory.mem_limit);
  if (!strcmp(key, "activation-trial")) {
    static const char *const names[] = {"off", "auto", "on"};
    for (int i = 0; i < 3; i++)
      if (v && !strcmp(v, names[i])) {
        c->memory.activation_trial = i - 1; /* ZT_ACT_TRIAL_OFF, _AUTO, _ON */
        return ZT_OK;
      }
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'activation-trial' is auto, on or off (got '%s')", v ? v : "");
  }
  if (!strcmp(key, "offload-slices")) return parse_int(key, v, 1, 1 << 20, &c->memory.offload_slices);
  if (!strcmp(key, "offload-resident")) return parse_int(key, v, 1, 1 << 20, &c->memory.offload_resident);
  if (!strcmp(key, "offload-mode")) {
    if (v && (!strcmp(v, "recompute") || !strcmp(v, "keep-graph"))) {
      c->memory.offload_mode = !strcmp(v, "keep-graph") ? ZT_OFFLOAD_MODEL_KEEP_GRAPH : ZT_OFFLOAD_MODEL_RECOMPUTE;
      return ZT_OK;
    }
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'offload-mode' is recompute or keep-graph (got '%s')", v ? v : "");
  }
  if (!strcmp(key, "offload-dir")) return parse_str(key, v, c->memory.offload_dir, sizeof c->memory.offload_dir);
  if (!strcmp(key, "checkpoint-every")) return parse_int(key, v, 1, 4096, &c->memory.checkpoint_every);
  if (!strcmp(key, "shard")) {
    zt_status s = zt_shard_strategy_parse(v ? v : "", &c->parallel.shard, &c->parallel.hybrid_group);
    return s ? zt__error_prefix(s, "option 'shard'") : ZT_OK;
  }
  if (!strcmp(key, "prefetch")) return parse_bool(key, v, &c->parallel.prefetch);
  if (!strcmp(key, "pp")) return parse_int(key, v, 1, 4096, &c->parallel.pp);
  if (!strcmp(key, "schedule")) return parse_str(key, v, c->parallel.schedule, sizeof c->parallel.schedule);
  if (!strcmp(key, "chunks")) return parse_int(key, v, 0, 64, &c->parallel.chunks);
  if (!strcmp(key, "pp-balance")) return parse_str(key, v, c->parallel.pp_balance, sizeof c->parallel.pp_balance);
  if (!strcmp(key, "timeline")) return parse_str(key, v, c->log.timeline, sizeof c->log.timeline);
  if (!strcmp(key, "save-format")) {
    if (v && (!strcmp(v, "sharded") || !strcmp(v, "full"))) {
      c->checkpoint.save_full = !strcmp(v, "full");
      return ZT_OK;
    }
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'save-format' is sharded or full (got '%s')", v ? v : "");
  }
  if (!strcmp(key, "mixed-precision")) {
    static const struct {
      const char *name;
      zt_dtype dt;
    } mp[] = {{"none", ZT_DTYPE_F32}, {"bf16", ZT_DTYPE_BF16}, {"fp16", ZT_DTYPE_F16}, {"f16", ZT_DTYPE_F16}};
    for (size_t i = 0; v && i < sizeof mp / sizeof mp[0]; i++)
      if (!strcmp(v, mp[i].name)) {
        c->parallel.mixed_precision = mp[i].dt;
        return ZT_OK;
      }
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'mixed-precision' is bf16, fp16 or none (got '%s')", v ? v : "");
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "unknown option '%s'", key);
}

/* ------------------------------------------------------------------ config files */

static bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f'; }

/* The value part of a line (after '='): a double-quoted string (\" and \\ escapes), or the
 * text up to a '#' that starts the line's comment (one preceded by a blank), trimmed. */
static zt_status line_value(char *v, const char *path, int lineno, char **out) {
  while (is_space(*v)) v++;
  if (*v == '"') {
    char *w = v, *r = v + 1;
    for (; *r && *r != '"'; r++) {
      if (*r == '\\' && (r[1] == '"' || r[1] == '\\')) r++;
      *w++ = *r;
    }
    if (*r != '"')
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s:%d: the quoted value has no closing '\"'", path, lineno);
    *w = '\0';
    for (r++; is_space(*r); r++) {}
    if (*r && *r != '#')
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s:%d: text after the closing quote ('%s'); start a comment with #", path,
                    lineno, r);
    *out = v;
    return ZT_OK;
  }
  for (char *h = v; *h; h++)
    if (*h == '#' && (h == v || is_space(h[-1]))) {
      *h = '\0';
      break;
    }
  char *e = v + strlen(v);
  while (e > v && is_space(e[-1])) *--e = '\0';
  *out = v;
  return ZT_OK;
}

zt_status zt_config_file_read(const char *path, zt_config_set_fn set, void *user_data) {
  if (!path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "config file name is empty");
  char *text = NULL;
  size_t size = 0;
  ZT_TRY(zt__read_text_file(path, ZT_CONFIG_MAX_BYTES, "config file", &text, &size));
  void *data = text;
  /* keys seen so far, with their lines, to refuse a key given twice */
  char **keys = NULL;
  int *key_lines = NULL, n_keys = 0;
  zt_status s = ZT_OK;
  int lineno = 0;
  for (char *line = text; s == ZT_OK && line < text + size;) {
    char *nl = memchr(line, '\n', (size_t)(text + size - line));
    if (nl) *nl = '\0';
    else text[size] = '\0'; /* zt__read_text_file leaves a spare NUL after the data */
    lineno++;
    char *l = line;
    line = nl ? nl + 1 : text + size;
    while (is_space(*l)) l++;
    if (!*l || *l == '#') continue;
    char *eq = strchr(l, '=');
    if (!eq) {
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "%s:%d: expected 'name = value', got '%.80s'", path, lineno, l);
      break;
    }
    char *ke = eq;
    while (ke > l && is_space(ke[-1])) ke--;
    *ke = '\0';
    char *key = !strncmp(l, "--", 2) ? l + 2 : l, *val = NULL;
    if ((s = line_value(eq + 1, path, lineno, &val))) break;
    if (!strcmp(key, "config")) {
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "%s:%d: a config file cannot name another config file", path, lineno);
      break;
    }
    for (int k = 0; k < n_keys && !s; k++)
      if (!strcmp(keys[k], key))
        s = ZT_ERR(ZT_STATUS_INVALID_ARG, "%s:%d: '%s' is set twice (also on line %d); keep one", path, lineno, key,
                   key_lines[k]);
    if (s) break;
    char **gk = realloc(keys, sizeof *keys * (size_t)(n_keys + 1));
    int *gl = gk ? realloc(key_lines, sizeof *key_lines * (size_t)(n_keys + 1)) : NULL;
    if (gk) keys = gk;
    if (gl) key_lines = gl;
    if (!gk || !gl) {
      s = ZT_ERR(ZT_STATUS_OOM, "out of host memory reading '%s'", path);
      break;
    }
    keys[n_keys] = key;
    key_lines[n_keys++] = lineno;
    if (set(key, val, user_data) != ZT_OK) s = zt__error_prefix(ZT_STATUS_INVALID_ARG, "%s:%d", path, lineno);
  }
  free(keys);
  free(key_lines);
  free(data);
  return s;
}

static zt_status set_train(const char *key, const char *value, void *c) { return zt_train_config_set(c, key, value); }

zt_status zt_train_config_load(zt_train_config *c, const char *path) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config_load: config is NULL");
  return zt_config_file_read(path, set_train, c);
}
