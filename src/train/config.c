/* Training configuration: defaults, one setter shared by command-line flags and config
 * files (so both accept exactly the same names and values), and the config-file reader. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt/train.h"

void zt_train_config_default(zt_train_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->model, sizeof c->model, "gpt2-tiny");
  c->dropout = -1;
  c->batch = 8;
  c->seq = 256;
  c->steps = 600;
  c->lr = 1e-3;
  c->min_lr = -1;
  c->warmup = -1;
  c->optimizer = ZT_OPTIM_ADAMW;
  c->weight_decay = 0.1;
  c->beta1 = 0.9;
  c->beta2 = 0.95;
  c->momentum = 0.9;
  c->grad_clip = 1.0;
  c->seed = 1337;
  c->eval_every = 100;
  c->eval_batches = 8;
  c->recompute = ZT_RECOMPUTE_NONE;
  c->checkpoint_every = 1;
  c->shard = ZT_SHARD_NONE;
  c->prefetch = true;
  c->mixed_precision = ZT_DTYPE_F32;
}

static zt_status parse_bool(const char *key, const char *v, bool *out) {
  if (v && (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1"))) *out = true;
  else if (v && (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "0"))) *out = false;
  else return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' is on or off (got '%s')", key, v ? v : "");
  return ZT_OK;
}

static zt_status parse_i64(const char *key, const char *v, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || x < lo)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs an integer >= %lld (got '%s')", key, (long long)lo,
                  v ? v : "");
  *out = x;
  return ZT_OK;
}

static zt_status parse_int(const char *key, const char *v, int lo, int *out) {
  int64_t x = 0;
  ZT_TRY(parse_i64(key, v, lo, &x));
  if (x > 1 << 30) return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s': %lld is too large", key, (long long)x);
  *out = (int)x;
  return ZT_OK;
}

static zt_status parse_f64(const char *key, const char *v, double lo, double hi, double *out) {
  char *end;
  double x = v ? strtod(v, &end) : NAN;
  if (!v || !*v || *end || !(x >= lo && x <= hi))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs a number in [%g, %g] (got '%s')", key, lo, hi, v ? v : "");
  *out = x;
  return ZT_OK;
}

static zt_status parse_str(const char *key, const char *v, char *dst, size_t cap) {
  if (!v) return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs a value", key);
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
  default: break;
  }
  if (mult > 1 && *end == 'i') end++;
  if (mult > 1 && (*end == 'B' || *end == 'b')) end++;
  if (*end || x * mult >= 9.2e18) goto bad;
  *out = (int64_t)(x * mult);
  return ZT_OK;
bad:
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs a positive size in bytes, e.g. 300M or 1.5G (got '%s')", key,
                v ? v : "");
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
      c->recompute = modes[i].mode;
      c->selective_policy = modes[i].policy;
      c->recompute_budget = 0;
      return ZT_OK;
    }
  if (v && !strncmp(v, "budget=", 7)) {
    ZT_TRY(parse_bytes("recompute budget", v + 7, &c->recompute_budget));
    c->recompute = ZT_RECOMPUTE_NONE;
    return ZT_OK;
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "option 'recompute' is none, full, selective[:wide|:gemm|:attention] or budget=SIZE (got '%s')",
                v ? v : "");
}

zt_status zt_train_config_set(zt_train_config *c, const char *key, const char *v) {
  if (!key) return ZT_ERR(ZT_STATUS_INVALID_ARG, "option name is NULL");
  if (!strcmp(key, "model")) {
    zt_gpt2_config g;
    ZT_TRY(parse_str(key, v, c->model, sizeof c->model));
    return zt_gpt2_preset(c->model, &g);
  }
  if (!strcmp(key, "layers")) return parse_int(key, v, 1, &c->n_layer);
  if (!strcmp(key, "heads")) return parse_int(key, v, 1, &c->n_head);
  if (!strcmp(key, "dim")) return parse_int(key, v, 1, &c->n_embd);
  if (!strcmp(key, "vocab")) return parse_int(key, v, 1, &c->vocab_size);
  if (!strcmp(key, "ctx")) return parse_int(key, v, 1, &c->block_size);
  if (!strcmp(key, "dropout")) return parse_f64(key, v, 0, 0.999, &c->dropout);
  if (!strcmp(key, "data")) return parse_str(key, v, c->data, sizeof c->data);
  if (!strcmp(key, "val-data")) return parse_str(key, v, c->val_data, sizeof c->val_data);
  if (!strcmp(key, "batch")) return parse_i64(key, v, 1, &c->batch);
  if (!strcmp(key, "seq")) return parse_i64(key, v, 1, &c->seq);
  if (!strcmp(key, "steps")) return parse_i64(key, v, 1, &c->steps);
  if (!strcmp(key, "lr")) return parse_f64(key, v, 0, 10, &c->lr);
  if (!strcmp(key, "min-lr")) return parse_f64(key, v, 0, 10, &c->min_lr);
  if (!strcmp(key, "warmup")) return parse_i64(key, v, 0, &c->warmup);
  if (!strcmp(key, "optimizer")) {
    if (v && !strcmp(v, "adamw")) c->optimizer = ZT_OPTIM_ADAMW;
    else if (v && !strcmp(v, "sgd")) c->optimizer = ZT_OPTIM_SGD;
    else return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'optimizer' is adamw or sgd (got '%s')", v ? v : "");
    return ZT_OK;
  }
  if (!strcmp(key, "weight-decay")) return parse_f64(key, v, 0, 10, &c->weight_decay);
  if (!strcmp(key, "beta1")) return parse_f64(key, v, 0, 0.999999, &c->beta1);
  if (!strcmp(key, "beta2")) return parse_f64(key, v, 0, 0.999999, &c->beta2);
  if (!strcmp(key, "momentum")) return parse_f64(key, v, 0, 0.999999, &c->momentum);
  if (!strcmp(key, "grad-clip")) return parse_f64(key, v, 0, 1e9, &c->grad_clip);
  if (!strcmp(key, "seed")) {
    int64_t s = 0;
    ZT_TRY(parse_i64(key, v, 0, &s));
    c->seed = (uint64_t)s;
    return ZT_OK;
  }
  if (!strcmp(key, "threads")) return parse_int(key, v, 0, &c->threads);
  if (!strcmp(key, "eval-every")) return parse_i64(key, v, 0, &c->eval_every);
  if (!strcmp(key, "eval-batches")) return parse_i64(key, v, 1, &c->eval_batches);
  if (!strcmp(key, "metrics")) return parse_str(key, v, c->metrics, sizeof c->metrics);
  if (!strcmp(key, "save")) return parse_str(key, v, c->save, sizeof c->save);
  if (!strcmp(key, "save-every")) return parse_i64(key, v, 0, &c->save_every);
  if (!strcmp(key, "resume")) return parse_str(key, v, c->resume, sizeof c->resume);
  if (!strcmp(key, "init-from")) return parse_str(key, v, c->init_from, sizeof c->init_from);
  if (!strcmp(key, "stop-at")) return parse_i64(key, v, 0, &c->stop_at);
  if (!strcmp(key, "inject-nan-at")) return parse_i64(key, v, 0, &c->inject_nan_at);
  if (!strcmp(key, "recompute")) return parse_recompute(c, v);
  if (!strcmp(key, "offload-activations")) {
    static const char *const names[] = {"none", "bf16", "disk", "host"};
    for (int i = 0; i < 4; i++)
      if (v && !strcmp(v, names[i])) {
        c->offload_activations = i; /* 0 none, then ZT_OFFLOAD_BF16, _DISK, _HOST */
        return ZT_OK;
      }
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'offload-activations' is none, bf16, disk or host (got '%s')",
                  v ? v : "");
  }
  if (!strcmp(key, "offload-dir")) return parse_str(key, v, c->offload_dir, sizeof c->offload_dir);
  if (!strcmp(key, "checkpoint-every")) return parse_int(key, v, 1, &c->checkpoint_every);
  if (!strcmp(key, "shard")) {
    zt_status s = zt_shard_strategy_parse(v ? v : "", &c->shard, &c->hybrid_group);
    return s ? zt__error_prefix(s, "option 'shard'") : ZT_OK;
  }
  if (!strcmp(key, "prefetch")) return parse_bool(key, v, &c->prefetch);
  if (!strcmp(key, "save-format")) {
    if (v && (!strcmp(v, "sharded") || !strcmp(v, "full"))) {
      c->save_full = !strcmp(v, "full");
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
        c->mixed_precision = mp[i].dt;
        return ZT_OK;
      }
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'mixed-precision' is bf16, fp16 or none (got '%s')", v ? v : "");
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "unknown option '%s' (see zt train --help)", key);
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

zt_status zt_train_config_load(zt_train_config *c, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return ZT_ERR(ZT_STATUS_IO, "cannot open config file '%s': %s", path, strerror(errno));
  char line[1200];
  int lineno = 0;
  zt_status s = ZT_OK;
  while (s == ZT_OK && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *l = trim(line);
    if (!*l) continue;
    char *eq = strchr(l, '=');
    if (!eq) {
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "%s:%d: expected 'key = value', got '%s'", path, lineno, l);
      break;
    }
    *eq = '\0';
    char *key = trim(l), *val = trim(eq + 1);
    if (!strncmp(key, "--", 2)) key += 2;
    if (zt_train_config_set(c, key, val) != ZT_OK) s = zt__error_prefix(ZT_STATUS_INVALID_ARG, "%s:%d", path, lineno);
  }
  fclose(f);
  return s;
}
