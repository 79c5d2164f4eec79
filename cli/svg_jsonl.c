/* Member lookups in the JSON lines the plots read (zt train --metrics, zt bench step).
 * A lookup walks only the members of the value it is given, skipping nested values
 * whole, so "loss" never matches inside "val_loss" nor a key of a nested object. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svg.h"

static const char *ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
  return p;
}

/* Past the string opening at p ('"'); NULL if it is not terminated. */
static const char *skip_string(const char *p) {
  for (p++; *p && *p != '"'; p++)
    if (*p == '\\' && !*++p) return NULL;
  return *p ? p + 1 : NULL;
}

/* Past the value starting at p: a string, a bracketed value, or a bare token. */
static const char *skip_value(const char *p) {
  const char *q;
  p = ws(p);
  if (*p == '"') return (q = skip_string(p)) ? q : p + strlen(p);
  if (*p == '{' || *p == '[') {
    int depth = 0;
    while (*p) {
      if (*p == '"') {
        if (!(q = skip_string(p))) return p + strlen(p);
        p = q;
        continue;
      }
      if (*p == '{' || *p == '[')
        depth++;
      else if ((*p == '}' || *p == ']') && --depth == 0)
        return p + 1;
      p++;
    }
    return p;
  }
  while (*p && *p != ',' && *p != '}' && *p != ']') p++;
  return p;
}

bool zt_cli_jsonl_is_object(const char *line) {
  const char *p = ws(line);
  if (*p != '{') return false;
  int depth = 0;
  for (; *p; p++) {
    if (*p == '"') {
      const char *e = skip_string(p);
      if (!e) return false;
      p = e - 1;
    } else if (*p == '{' || *p == '[')
      depth++;
    else if (*p == '}' || *p == ']') {
      if (--depth < 0) return false;
      if (!depth) return !*ws(p + 1);
    }
  }
  return false;
}

const char *zt_cli_jsonl_member(const char *obj, const char *key) {
  if (!obj) return NULL;
  const char *p = ws(obj);
  if (*p != '{') return NULL;
  size_t kn = strlen(key);
  for (p = ws(p + 1); *p == '"'; p = ws(p + 1)) {
    const char *k = p + 1, *e = skip_string(p);
    if (!e) return NULL;
    bool match = (size_t)(e - k - 1) == kn && !memcmp(k, key, kn);
    p = ws(e);
    if (*p != ':') return NULL;
    const char *v = ws(p + 1);
    if (match) return v;
    p = ws(skip_value(v));
    if (*p != ',') return NULL;
  }
  return NULL;
}

const char *zt_cli_jsonl_element(const char *arr, int i) {
  if (!arr) return NULL;
  const char *p = ws(arr);
  if (*p != '[') return NULL;
  p = ws(p + 1);
  if (*p == ']') return NULL;
  for (; i > 0; i--) {
    p = ws(skip_value(p));
    if (*p != ',') return NULL;
    p = ws(p + 1);
  }
  return *p && *p != ']' ? p : NULL;
}

zt_cli_jsonl_kind zt_cli_jsonl_number(const char *obj, const char *key, double *out) {
  const char *v = zt_cli_jsonl_member(obj, key);
  if (!v) return ZT_CLI_JSONL_ABSENT;
  char *end;
  double d = strtod(v, &end);
  if (end == v || (*ws(end) && !strchr(",}]", *ws(end)))) return ZT_CLI_JSONL_OTHER;
  *out = d;
  return ZT_CLI_JSONL_NUMBER;
}

bool zt_cli_jsonl_string(const char *obj, const char *key, char *buf, size_t cap) {
  const char *v = zt_cli_jsonl_member(obj, key);
  buf[0] = 0;
  if (!v || *v != '"') return false;
  const char *e = skip_string(v);
  if (!e) return false;
  size_t n = (size_t)(e - v - 2);
  if (n > cap - 1) n = cap - 1;
  memcpy(buf, v + 1, n);
  buf[n] = 0;
  return true;
}

int zt_cli_jsonl_each(const char *path, bool (*each)(const char *line, int lineno, void *ud), void *ud) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "zt plot: cannot open '%s': %s\n", path, strerror(errno));
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0;
  bool stopped = false;
  while (!stopped && getline(&line, &cap, f) > 0) {
    lineno++;
    stopped = *ws(line) && !each(line, lineno, ud);
  }
  int status = 0;
  if (!stopped && ferror(f)) {
    fprintf(stderr, "zt plot: cannot read '%s': %s\n", path, strerror(errno));
    status = -1;
  }
  fclose(f);
  free(line);
  return status;
}
