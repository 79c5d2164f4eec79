/* The small JSON reader (json.h): a DOM with file-order items, keys checked unique, objects of
 * more than a few members indexed by key; errors name the file, line and column. */
#include "io/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "io/buf.h"

/* ------------------------------------------------------------------ JSON reader */

#define JSON_MAX_DEPTH 64

typedef struct jparser {
  const char *s;
  size_t len, pos;
  const char *what;
  int depth;
} jparser;

static zt_status jerr(const jparser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static zt_status jerr(const jparser *p, const char *fmt, ...) {
  int line = 1, col = 1;
  for (size_t i = 0; i < p->pos && i < p->len; i++) {
    if (p->s[i] == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ZT_ERR(ZT_STATUS_IO, "invalid JSON in %s at line %d, column %d: %s", p->what, line, col, msg);
}

static void json_clear(zt__json *j) {
  for (int i = 0; i < j->n; i++) {
    json_clear(&j->items[i]);
    if (j->keys) free(j->keys[i]);
  }
  free(j->items);
  free(j->keys);
  free(j->order);
  free(j->str);
  memset(j, 0, sizeof *j);
}

void zt__json_free(zt__json *j) {
  if (!j) return;
  json_clear(j);
  free(j);
}

static void skip_ws(jparser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int hex4(const char *s) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else return -1;
  }
  return v;
}

static void put_utf8(zt__buf *b, uint32_t cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xC0 | (cp >> 6));
    u[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | (cp >> 12));
    u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    u[0] = (char)(0xF0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  zt__buf_put(b, u, n);
}

/* At the opening quote: the string's unescaped text appended to b (NUL-terminated, as b
 * always is); on failure b holds a partial text that the caller frees or reuses. */
static zt_status parse_string_into(jparser *p, zt__buf *b) {
  p->pos++;
  zt__buf_put(b, "", 0);
  for (;;) {
    if (p->pos >= p->len) return jerr(p, "unterminated string");
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c < 0x20) return jerr(p, "control character 0x%02x in a string (escape it)", c);
    if (c != '\\') {
      size_t start = p->pos;
      while (p->pos < p->len && p->s[p->pos] != '"' && p->s[p->pos] != '\\' && (unsigned char)p->s[p->pos] >= 0x20)
        p->pos++;
      zt__buf_put(b, p->s + start, p->pos - start);
      continue;
    }
    if (p->pos + 1 >= p->len) return jerr(p, "unterminated string");
    char e = p->s[p->pos + 1];
    static const char esc[] = "\"\\/bfnrt", map[] = "\"\\/\b\f\n\r\t";
    const char *simple = e ? strchr(esc, e) : NULL;
    if (simple) {
      zt__buf_put(b, &map[simple - esc], 1);
      p->pos += 2;
      continue;
    }
    if (e != 'u') return jerr(p, "invalid escape '\\%c' in a string (unknown escape letter)", e);
    int cp = p->pos + 6 <= p->len ? hex4(p->s + p->pos + 2) : -1;
    if (cp < 0) return jerr(p, "invalid \\u escape (needs 4 hex digits)");
    p->pos += 6;
    uint32_t code = (uint32_t)cp;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      int lo = p->pos + 6 <= p->len && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u' ? hex4(p->s + p->pos + 2) : -1;
      if (lo < 0xDC00 || lo > 0xDFFF) return jerr(p, "a high surrogate not followed by a low one (\\u%04x)", cp);
      p->pos += 6;
      code = 0x10000 + (((uint32_t)cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) return jerr(p, "a lone low surrogate without a high one (\\u%04x)", cp); else if (cp == 0) return jerr(p, "\\u0000 (NUL) is not allowed in strings here");
    put_utf8(b, code);
  }
  if (b->oom) return ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p->what);
  return ZT_OK;
}

/* At the opening quote; on success *out is a malloc'd string. */
static zt_status parse_string(jparser *p, char **out) {
  /* the common case, no escapes: one allocation of the exact size */
  size_t start = p->pos + 1, end = start;
  while (end < p->len && p->s[end] != '"' && p->s[end] != '\\' && (unsigned char)p->s[end] >= 0x20) end++;
  if (end < p->len && p->s[end] == '"') {
    char *str = malloc(end - start + 1);
    if (!str) return ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p->what);
    memcpy(str, p->s + start, end - start);
    str[end - start] = '\0';
    p->pos = end + 1;
    *out = str;
    return ZT_OK;
  }
  zt__buf b = {0};
  zt_status s = parse_string_into(p, &b);
  if (s) {
    zt__buf_free(&b);
    return s;
  }
  *out = b.data;
  return ZT_OK;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* The end of the number at p->pos (checked against JSON's grammar), in *end. */
static zt_status scan_number(jparser *p, size_t *end) {
  size_t i = p->pos;
  const char *s = p->s;
  if (i < p->len && s[i] == '-') i++;
  if (i >= p->len || !is_digit(s[i])) return jerr(p, "invalid number");
  if (s[i] == '0') {
    i++;
  } else {
    while (i < p->len && is_digit(s[i])) i++;
  }
  if (i < p->len && s[i] == '.') {
    i++;
    if (i >= p->len || !is_digit(s[i])) return jerr(p, "invalid number (digits must follow '.')");
    while (i < p->len && is_digit(s[i])) i++;
  }
  if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= p->len || !is_digit(s[i])) return jerr(p, "invalid number (digits must follow the exponent)");
    while (i < p->len && is_digit(s[i])) i++;
  }
  *end = i;
  return ZT_OK;
}

static zt_status parse_number(jparser *p, zt__json *out) {
  size_t start = p->pos, end;
  ZT_TRY(scan_number(p, &end));
  out->kind = ZT__JSON_NUMBER;
  out->str = malloc(end - start + 1);
  if (!out->str) return ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p->what);
  memcpy(out->str, p->s + start, end - start);
  out->str[end - start] = '\0';
  p->pos = end;
  return ZT_OK;
}

static zt_status parse_value(jparser *p, zt__json *out);

/* Objects up to this many members are searched linearly (and checked for duplicates as
 * each key is read); larger ones get an index sorted by key. */
#define JSON_SMALL_OBJECT 8

/* Is key a before key b (ties: the earlier member first)? */
static bool key_before(char *const *keys, int a, int b) {
  int c = strcmp(keys[a], keys[b]);
  return c < 0 || (c == 0 && a < b);
}

/* idx[0, n) sorted by key with a bottom-up merge sort: O(n log n) comparisons whatever the
 * keys (an adversarial header cannot make it quadratic). tmp has room for n ints. */
static void sort_by_key(char *const *keys, int *idx, int *tmp, int n) {
  for (int w = 1; w < n; w *= 2) {
    for (int lo = 0; lo < n; lo += 2 * w) {
      int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int i = lo, k = mid, o = lo;
      while (i < mid && k < hi) tmp[o++] = key_before(keys, idx[k], idx[i]) ? idx[k++] : idx[i++];
      while (i < mid) tmp[o++] = idx[i++];
      while (k < hi) tmp[o++] = idx[k++];
    }
    memcpy(idx, tmp, sizeof *idx * (size_t)n);
  }
}

/* The sorted index of a large object, and its first duplicate key (the member, in file
 * order, whose key an earlier member has): -1 if none, -2 when out of memory. */
static int index_object(zt__json *o) {
  int n = o->n;
  o->order = malloc(sizeof *o->order * (size_t)n);
  int *tmp = malloc(sizeof *tmp * (size_t)n);
  if (!o->order || !tmp) {
    free(tmp);
    return -2;
  }
  for (int i = 0; i < n; i++) o->order[i] = i;
  sort_by_key(o->keys, o->order, tmp, n);
  free(tmp);
  int dup = -1;
  for (int i = 1; i < n; i++) /* equal keys are adjacent, in file order */
    if (!strcmp(o->keys[o->order[i - 1]], o->keys[o->order[i]]) && (dup < 0 || o->order[i] < dup))
      dup = o->order[i];
  return dup;
}

/* Arrays and objects: items grow by doubling; out->n counts only complete items so that
 * json_clear can free a partial result. */
static zt_status parse_container(jparser *p, zt__json *out, bool object) {
  if (++p->depth > JSON_MAX_DEPTH) return jerr(p, "nesting deeper than %d", JSON_MAX_DEPTH);
  out->kind = object ? ZT__JSON_OBJECT : ZT__JSON_ARRAY;
  char close = object ? '}' : ']';
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == close) {
    p->pos++;
    p->depth--;
    return ZT_OK;
  }
  int cap = 0;
  size_t *key_pos = NULL; /* objects: where each key starts, for the duplicate error */
  zt_status s = ZT_OK;
  for (;;) {
    if (out->n == cap) {
      if (cap > (1 << 29)) {
        s = jerr(p, "more than %d items in one %s", 1 << 30, object ? "object" : "array");
        break;
      }
      int nc = cap ? cap * 2 : 8;
      zt__json *ni = realloc(out->items, sizeof *ni * (size_t)nc);
      if (ni) out->items = ni;
      char **nk = object ? realloc(out->keys, sizeof *nk * (size_t)nc) : NULL;
      if (nk) out->keys = nk;
      size_t *np = object ? realloc(key_pos, sizeof *np * (size_t)nc) : NULL;
      if (np) key_pos = np;
      if (!ni || (object && (!nk || !np))) {
        s = ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p->what);
        break;
      }
      cap = nc;
    }
    char *key = NULL;
    skip_ws(p);
    if (object) {
      if (p->pos >= p->len || p->s[p->pos] != '"') {
        s = jerr(p, p->pos >= p->len ? "unexpected end (expected a key)" : "expected a string key");
        break;
      }
      key_pos[out->n] = p->pos;
      if ((s = parse_string(p, &key))) break;
      for (int i = 0; i < out->n && out->n < JSON_SMALL_OBJECT; i++)
        if (!strcmp(out->keys[i], key)) {
          p->pos = key_pos[out->n];
          s = jerr(p, "duplicate key \"%s\"", key);
          break;
        }
      skip_ws(p);
      if (!s && (p->pos >= p->len || p->s[p->pos] != ':')) s = jerr(p, "expected ':' after a key");
      if (s) {
        free(key);
        break;
      }
      p->pos++;
    }
    zt__json *item = &out->items[out->n];
    memset(item, 0, sizeof *item);
    if ((s = parse_value(p, item))) {
      json_clear(item);
      free(key);
      break;
    }
    if (object) out->keys[out->n] = key;
    out->n++;
    skip_ws(p);
    if (p->pos >= p->len) {
      s = jerr(p, "unexpected end (expected ',' or '%c')", close);
      break;
    }
    char c = p->s[p->pos++];
    if (c == close) break;
    if (c != ',') {
      p->pos--;
      s = jerr(p, "expected ',' or '%c'", close);
      break;
    }
  }
  if (!s && object && out->n > JSON_SMALL_OBJECT) {
    int dup = index_object(out);
    if (dup == -2) {
      s = ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p->what);
    } else if (dup >= 0) {
      size_t end = p->pos;
      p->pos = key_pos[dup];
      s = jerr(p, "duplicate key \"%s\"", out->keys[dup]);
      p->pos = end;
    }
  }
  free(key_pos);
  if (!s) p->depth--;
  return s;
}

static zt_status parse_value(jparser *p, zt__json *out) {
  skip_ws(p);
  if (p->pos >= p->len) return jerr(p, "unexpected end (expected a value)");
  char c = p->s[p->pos];
  if (c == '{' || c == '[') return parse_container(p, out, c == '{');
  if (c == '"') {
    out->kind = ZT__JSON_STRING;
    return parse_string(p, &out->str);
  }
  if (c == '-' || is_digit(c)) return parse_number(p, out);
  static const char *const lits[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(lits[i]);
    if (p->len - p->pos >= n && !memcmp(p->s + p->pos, lits[i], n)) {
      out->kind = i < 2 ? ZT__JSON_BOOL : ZT__JSON_NULL;
      out->boolean = i == 0;
      p->pos += n;
      return ZT_OK;
    }
  }
  if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f) return jerr(p, "unexpected character '%c'", c);
  return jerr(p, "unexpected byte 0x%02x", (unsigned char)c);
}

zt_status zt__json_each_member(const char *text, size_t len, const char *what, zt__json_member_fn fn, void *ctx) {
  jparser p = {text ? text : "", text ? len : 0, 0, what ? what : "input", 1};
  skip_ws(&p);
  if (p.pos >= p.len || p.s[p.pos] != '{') return jerr(&p, "expected '{' (a JSON object)");
  p.pos++;
  skip_ws(&p);
  /* one buffer for every key and one for every number value: no allocation per member */
  zt__buf key = {0}, num = {0};
  zt_status s = ZT_OK;
  bool empty = p.pos < p.len && p.s[p.pos] == '}';
  if (empty) p.pos++;
  while (!empty && !s) {
    skip_ws(&p);
    if (p.pos >= p.len || p.s[p.pos] != '"') {
      s = jerr(&p, p.pos >= p.len ? "unexpected end (expected a key)" : "expected a string key");
      break;
    }
    key.len = 0;
    if ((s = parse_string_into(&p, &key))) break;
    skip_ws(&p);
    if (p.pos >= p.len || p.s[p.pos] != ':') {
      s = jerr(&p, "expected ':' after a key");
      break;
    }
    p.pos++;
    skip_ws(&p);
    zt__json v = {0};
    size_t end;
    if (p.pos < p.len && (p.s[p.pos] == '-' || is_digit(p.s[p.pos]))) {
      if ((s = scan_number(&p, &end))) break;
      num.len = 0;
      zt__buf_put(&num, p.s + p.pos, end - p.pos);
      if (num.oom) {
        s = ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p.what);
        break;
      }
      p.pos = end;
      v.kind = ZT__JSON_NUMBER;
      v.str = num.data; /* not v's: no json_clear */
      s = fn(key.data, &v, ctx);
    } else {
      s = parse_value(&p, &v);
      if (!s) s = fn(key.data, &v, ctx);
      json_clear(&v);
    }
    if (s) break;
    skip_ws(&p);
    if (p.pos >= p.len) {
      s = jerr(&p, "unexpected end (expected ',' or '}')");
      break;
    }
    char c = p.s[p.pos++];
    if (c == '}') break;
    if (c != ',') {
      p.pos--;
      s = jerr(&p, "expected ',' or '}'");
    }
  }
  zt__buf_free(&key);
  zt__buf_free(&num);
  if (s) return s;
  skip_ws(&p);
  if (p.pos < p.len) return jerr(&p, "unexpected text after the end of the value (more text after the object)");
  return ZT_OK;
}

zt_status zt__json_parse(const char *text, size_t len, const char *what, zt__json **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__json_parse: out is NULL");
  *out = NULL;
  jparser p = {text ? text : "", text ? len : 0, 0, what ? what : "input", 0};
  zt__json *j = calloc(1, sizeof *j);
  if (!j) return ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p.what);
  zt_status s = parse_value(&p, j);
  if (!s) {
    skip_ws(&p);
    if (p.pos < p.len) s = jerr(&p, "unexpected text after the end of the value");
  }
  if (s) {
    zt__json_free(j);
    return s;
  }
  *out = j;
  return ZT_OK;
}

const zt__json *zt__json_get(const zt__json *j, const char *key) {
  if (!j || j->kind != ZT__JSON_OBJECT || !key) return NULL;
  if (!j->order) {
    for (int i = 0; i < j->n; i++)
      if (!strcmp(j->keys[i], key)) return &j->items[i];
    return NULL;
  }
  int lo = 0, hi = j->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(key, j->keys[j->order[mid]]);
    if (!c) return &j->items[j->order[mid]];
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return NULL;
}

static bool plain_integer(const zt__json *j, bool allow_minus) {
  if (!j || j->kind != ZT__JSON_NUMBER) return false;
  const char *s = j->str;
  if (*s == '-') {
    if (!allow_minus) return false;
    s++;
  }
  for (; *s; s++)
    if (!is_digit(*s)) return false;
  return true;
}

bool zt__json_i64(const zt__json *j, int64_t *out) {
  if (!plain_integer(j, true)) return false;
  /* digits by hand: strtoll's locale handling is most of the time of reading a large file
   * of small integers (encoder.json) */
  const char *s = j->str + (j->str[0] == '-');
  uint64_t v = 0, lim = j->str[0] == '-' ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; *s; s++) {
    uint64_t d = (uint64_t)(*s - '0');
    if (v > (lim - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = j->str[0] == '-' ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

bool zt__json_u64(const zt__json *j, uint64_t *out) {
  if (!plain_integer(j, false)) return false;
  errno = 0;
  unsigned long long v = strtoull(j->str, NULL, 10);
  if (errno) return false;
  *out = v;
  return true;
}

bool zt__json_f64(const zt__json *j, double *out) {
  if (!j || j->kind != ZT__JSON_NUMBER) return false;
  *out = strtod(j->str, NULL);
  return true;
}
