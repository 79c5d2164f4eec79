/* Training configuration: defaults, the typed, range-checked parsers and formatters behind the
 * option table's rows (src/train/options.c holds the table and zt_train_config_set), and the
 * config-file reader (whole file, any line length, quoted values, a key once). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "io/buf.h"
#include "train/options.h"
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

/* ------------------------------------------------------------------ values by type */

#define ZT_CONFIG_MAX_BYTES (1 << 20) /* a config file is a few lines */

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

zt_status zt_config_parse_f64(const char *key, const char *v, double lo, double hi, double *out) {
  char *end;
  double x = v ? strtod(v, &end) : NAN;
  if (!v || !*v || *end || !(x >= lo && x <= hi)) /* NaN fails the range test too */
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs a number in [%g, %g] (got '%s')", key, lo, hi, v ? v : "");
  *out = x;
  return ZT_OK;
}

static zt_status parse_bool(const char *key, const char *v, bool *out) {
  if (v && (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1"))) *out = true;
  else if (v && (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "0"))) *out = false;
  else return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' is on or off (got '%s')", key, v ? v : "");
  return ZT_OK;
}

zt_status zt__option_parse_text(const char *key, const char *v, char *dst, size_t cap) {
  if (!v || !*v)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' needs a value (got an empty one); leave the option out for its "
                  "default", key);
  if (strlen(v) >= cap) return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s': value is longer than %zu bytes", key, cap - 1);
  snprintf(dst, cap, "%s", v);
  return ZT_OK;
}

/* A byte count: digits with an optional K, M or G suffix (powers of 1024; "KiB", "MB"...). */
zt_status zt__option_parse_bytes(const char *key, const char *v, int64_t *out) {
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

/* An ENUM member: an int-sized enum, or a bool. */
static int enum_get(const zt_option *o, const void *p) { return o->size == sizeof(bool) ? *(const bool *)p : *(const int *)p; }
static void enum_set(const zt_option *o, void *p, int v) {
  if (o->size == sizeof(bool)) *(bool *)p = v != 0;
  else *(int *)p = v;
}

static zt_status parse_enum(const zt_option *o, void *p, const char *v) {
  for (const zt_option_choice *ch = o->choices; v && ch->name; ch++)
    if (!strcmp(v, ch->name)) {
      enum_set(o, p, ch->value);
      return ZT_OK;
    }
  char list[256];
  size_t n = 0, listed = 0, k = 0;
  for (const zt_option_choice *ch = o->choices; ch->name; ch++) listed += !ch->unlisted;
  list[0] = '\0';
  for (const zt_option_choice *ch = o->choices; ch->name && n < sizeof list; ch++) {
    if (ch->unlisted) continue;
    k++;
    int w = snprintf(list + n, sizeof list - n, "%s%s", k == 1 ? "" : k == listed ? " or " : ", ", ch->name);
    n += w > 0 ? (size_t)w : 0;
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "option '%s' is %s (got '%s')", o->name, list, v ? v : "");
}

/* The member's size matches the type (a table's row that does not is a bug). */
static void check_size(const zt_option *o) {
  size_t want = 0;
  switch (o->type) {
  case ZT_OPTION_TYPE_INT: want = sizeof(int); break;
  case ZT_OPTION_TYPE_I64: case ZT_OPTION_TYPE_U64: case ZT_OPTION_TYPE_SIZE: want = sizeof(int64_t); break;
  case ZT_OPTION_TYPE_F64: want = sizeof(double); break;
  case ZT_OPTION_TYPE_BOOL: want = sizeof(bool); break;
  case ZT_OPTION_TYPE_ENUM: want = o->size == sizeof(bool) ? sizeof(bool) : sizeof(int); break;
  case ZT_OPTION_TYPE_TEXT: case ZT_OPTION_TYPE_SPECIAL: want = o->size; break;
  }
  ZT_ASSERT(o->size == want && (o->type != ZT_OPTION_TYPE_ENUM || o->choices));
}

zt_status zt_option_parse(const zt_option *o, void *base, const char *v) {
  if (!o || !base) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_option_parse: option or base is NULL");
  check_size(o);
  void *p = (char *)base + o->offset;
  int64_t x = 0;
  switch (o->type) {
  case ZT_OPTION_TYPE_INT:
    ZT_TRY(zt_config_parse_i64(o->name, v, o->lo, o->hi, &x));
    *(int *)p = (int)x;
    return ZT_OK;
  case ZT_OPTION_TYPE_I64: return zt_config_parse_i64(o->name, v, o->lo, o->hi, (int64_t *)p);
  case ZT_OPTION_TYPE_U64:
    ZT_TRY(zt_config_parse_i64(o->name, v, o->lo, o->hi, &x));
    *(uint64_t *)p = (uint64_t)x;
    return ZT_OK;
  case ZT_OPTION_TYPE_F64: return zt_config_parse_f64(o->name, v, o->min, o->max, (double *)p);
  case ZT_OPTION_TYPE_BOOL: return parse_bool(o->name, v, (bool *)p);
  case ZT_OPTION_TYPE_TEXT: return zt__option_parse_text(o->name, v, p, o->size);
  case ZT_OPTION_TYPE_ENUM: return parse_enum(o, p, v);
  case ZT_OPTION_TYPE_SIZE: return zt__option_parse_bytes(o->name, v, (int64_t *)p);
  case ZT_OPTION_TYPE_SPECIAL: break;
  }
  ZT_ASSERT(o->parse); /* a SPECIAL row without its parser is a bug of its table */
  return o->parse(o, base, v);
}

void zt_option_format(const zt_option *o, const void *base, char *buf, size_t cap) {
  check_size(o);
  const void *p = (const char *)base + o->offset;
  char d[32];
  int64_t i = 0;
  buf[0] = '\0';
  switch (o->type) {
  case ZT_OPTION_TYPE_INT: i = *(const int *)p; break;
  case ZT_OPTION_TYPE_I64: case ZT_OPTION_TYPE_SIZE: i = *(const int64_t *)p; break;
  case ZT_OPTION_TYPE_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p); return;
  case ZT_OPTION_TYPE_F64: {
    double x = *(const double *)p;
    snprintf(buf, cap, "%s", o->unset && x < o->min ? o->unset : zt__fmt_double(d, x));
    return;
  }
  case ZT_OPTION_TYPE_BOOL: snprintf(buf, cap, "%s", *(const bool *)p ? "on" : "off"); return;
  case ZT_OPTION_TYPE_TEXT: snprintf(buf, cap, "%s", *(const char *)p || !o->unset ? (const char *)p : o->unset); return;
  case ZT_OPTION_TYPE_ENUM: {
    int v = enum_get(o, p);
    for (const zt_option_choice *ch = o->choices; ch->name; ch++)
      if (ch->value == v) {
        snprintf(buf, cap, "%s", ch->name);
        return;
      }
    snprintf(buf, cap, "%d", v);
    return;
  }
  case ZT_OPTION_TYPE_SPECIAL:
    ZT_ASSERT(o->format);
    o->format(o, base, buf, cap);
    return;
  }
  bool unset = o->type == ZT_OPTION_TYPE_SIZE ? i <= 0 : i < o->lo;
  if (o->unset && unset) snprintf(buf, cap, "%s", o->unset);
  else snprintf(buf, cap, "%lld", (long long)i);
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
