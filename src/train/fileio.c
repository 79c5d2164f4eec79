/* Files: atomic whole-file writes (temp file in the same folder, fsync, rename, fsync of the
 * folder: a reader sees the old file or the new one, never a mix, and a failed write leaves
 * the old file as it was), whole-file reads, and the small JSON reader used by the
 * safetensors and checkpoint code (see fileio.h). */
#include "train/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ atomic write */

/* fsync of a folder makes a rename in it durable; some filesystems refuse it (EINVAL),
 * which is not an error of ours. */
int zt__fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = 0;
  if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) err = errno;
  close(fd);
  return err;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    size_t step = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
    ssize_t w = write(fd, p, step);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

zt_status zt_write_file_atomic(const char *path, const void *const *chunks, const size_t *sizes, int n_chunks) {
  if (!path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_write_file_atomic: the path is empty");
  if (n_chunks < 0 || (n_chunks > 0 && (!chunks || !sizes)))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_write_file_atomic('%s'): %d chunks with NULL chunk/size arrays", path,
                  n_chunks);
  for (int i = 0; i < n_chunks; i++)
    if (sizes[i] > 0 && !chunks[i])
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_write_file_atomic('%s'): chunk %d is NULL with %zu bytes", path, i,
                    sizes[i]);
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!*base) return ZT_ERR(ZT_STATUS_INVALID_ARG, "cannot write '%s': it names a folder, not a file", path);
  size_t dir_len = slash ? (size_t)(slash - path) : 0;
  size_t cap = strlen(path) + 64;
  char *tmp = malloc(cap), *dir = malloc(cap);
  if (!tmp || !dir) {
    free(tmp);
    free(dir);
    return ZT_ERR(ZT_STATUS_OOM, "cannot write '%s': out of memory", path);
  }
  /* ".<name>.tmp.<pid>" beside the target: the rename stays within one filesystem. */
  if (slash) {
    snprintf(tmp, cap, "%.*s/.%s.tmp.%ld", (int)dir_len, path, base, (long)getpid());
    snprintf(dir, cap, "%.*s", (int)(dir_len ? dir_len : 1), path);
  } else {
    snprintf(tmp, cap, ".%s.tmp.%ld", base, (long)getpid());
    snprintf(dir, cap, ".");
  }
  zt_status s = ZT_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    s = ZT_ERR(ZT_STATUS_IO, "cannot write '%s': cannot create the temp file '%s': %s", path, tmp, strerror(errno));
    goto out;
  }
  int err = 0;
  for (int i = 0; i < n_chunks && !err; i++) err = write_all(fd, chunks[i], sizes[i]);
  if (err) {
    s = ZT_ERR(ZT_STATUS_IO, "cannot write '%s': writing the temp file '%s' failed: %s (the old file is intact)",
               path, tmp, strerror(err));
  } else if (fsync(fd) != 0) {
    s = ZT_ERR(ZT_STATUS_IO, "cannot write '%s': fsync of the temp file '%s' failed: %s (the old file is intact)",
               path, tmp, strerror(errno));
  }
  if (close(fd) != 0 && !s)
    s = ZT_ERR(ZT_STATUS_IO, "cannot write '%s': closing the temp file '%s' failed: %s (the old file is intact)",
               path, tmp, strerror(errno));
  if (!s && rename(tmp, path) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "cannot write '%s': renaming '%s' over it failed: %s (the old file is intact)", path,
               tmp, strerror(errno));
  if (s) {
    unlink(tmp);
    goto out;
  }
  if ((err = zt__fsync_dir(dir)) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "wrote '%s' but the fsync of its folder '%s' failed: %s (the write may not survive a crash)",
               path, dir, strerror(err));
out:
  free(tmp);
  free(dir);
  return s;
}

zt_status zt_read_file(const char *path, void **data, size_t *size) {
  if (!path || !data || !size) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_read_file: NULL argument");
  *data = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ZT_ERR(ZT_STATUS_IO, "cannot read '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || S_ISDIR(sb.st_mode)) {
    int e = S_ISDIR(sb.st_mode) ? EISDIR : errno;
    close(fd);
    return ZT_ERR(ZT_STATUS_IO, "cannot read '%s': %s", path, strerror(e));
  }
  /* Regular files are read to their stat size; other files (pipes) until EOF. The extra
   * byte holds a NUL so that text files can be used as C strings. */
  size_t cap = S_ISREG(sb.st_mode) ? (size_t)sb.st_size + 1 : 4096, n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return ZT_ERR(ZT_STATUS_OOM, "cannot read '%s': out of memory for %zu bytes", path, cap);
  }
  for (;;) {
    if (n + 1 == cap) {
      if (S_ISREG(sb.st_mode)) break;
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        close(fd);
        return ZT_ERR(ZT_STATUS_OOM, "cannot read '%s': out of memory", path);
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      free(buf);
      close(fd);
      return ZT_ERR(ZT_STATUS_IO, "cannot read '%s': %s", path, strerror(e));
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  *data = buf;
  *size = n;
  return ZT_OK;
}

/* ------------------------------------------------------------------ text buffer */

static bool buf_reserve(zt__buf *b, size_t extra) {
  if (b->oom) return false;
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *d = realloc(b->data, cap);
  if (!d) {
    b->oom = true;
    return false;
  }
  b->data = d;
  b->cap = cap;
  return true;
}

void zt__buf_put(zt__buf *b, const char *s, size_t n) {
  if (!buf_reserve(b, n)) return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void zt__buf_printf(zt__buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !buf_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void zt__buf_json_string(zt__buf *b, const char *s) {
  zt__buf_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p};
      zt__buf_put(b, e, 2);
    } else if (*p < 0x20) {
      zt__buf_printf(b, "\\u%04x", *p);
    } else {
      zt__buf_put(b, (const char *)p, 1);
    }
  }
  zt__buf_put(b, "\"", 1);
}

void zt__buf_free(zt__buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

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

/* At the opening quote; on success *out is a malloc'd string. */
static zt_status parse_string(jparser *p, char **out) {
  p->pos++;
  zt__buf b = {0};
  zt__buf_put(&b, "", 0);
  for (;;) {
    if (p->pos >= p->len) {
      zt__buf_free(&b);
      return jerr(p, "unterminated string");
    }
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c < 0x20) {
      zt__buf_free(&b);
      return jerr(p, "control character 0x%02x in a string (escape it)", c);
    }
    if (c != '\\') {
      size_t start = p->pos;
      while (p->pos < p->len && p->s[p->pos] != '"' && p->s[p->pos] != '\\' && (unsigned char)p->s[p->pos] >= 0x20)
        p->pos++;
      zt__buf_put(&b, p->s + start, p->pos - start);
      continue;
    }
    if (p->pos + 1 >= p->len) {
      zt__buf_free(&b);
      return jerr(p, "unterminated string");
    }
    char e = p->s[p->pos + 1];
    static const char esc[] = "\"\\/bfnrt", map[] = "\"\\/\b\f\n\r\t";
    const char *simple = e ? strchr(esc, e) : NULL;
    if (simple) {
      zt__buf_put(&b, &map[simple - esc], 1);
      p->pos += 2;
      continue;
    }
    if (e != 'u') {
      zt__buf_free(&b);
      return jerr(p, "invalid escape '\\%c' in a string", e);
    }
    int cp = p->pos + 6 <= p->len ? hex4(p->s + p->pos + 2) : -1;
    if (cp < 0) {
      zt__buf_free(&b);
      return jerr(p, "invalid \\u escape (needs 4 hex digits)");
    }
    p->pos += 6;
    uint32_t code = (uint32_t)cp;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      int lo = p->pos + 6 <= p->len && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u' ? hex4(p->s + p->pos + 2) : -1;
      if (lo < 0xDC00 || lo > 0xDFFF) {
        zt__buf_free(&b);
        return jerr(p, "a high surrogate \\u%04x is not followed by a low one", cp);
      }
      p->pos += 6;
      code = 0x10000 + (((uint32_t)cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      zt__buf_free(&b);
      return jerr(p, "a lone low surrogate \\u%04x", cp);
    } else if (cp == 0) {
      zt__buf_free(&b);
      return jerr(p, "\\u0000 (NUL) is not allowed in strings here");
    }
    put_utf8(&b, code);
  }
  if (b.oom) {
    zt__buf_free(&b);
    return ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p->what);
  }
  *out = b.data;
  return ZT_OK;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static zt_status parse_number(jparser *p, zt__json *out) {
  size_t start = p->pos, i = p->pos;
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
  out->kind = ZT__JSON_NUMBER;
  out->str = malloc(i - start + 1);
  if (!out->str) return ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p->what);
  memcpy(out->str, s + start, i - start);
  out->str[i - start] = '\0';
  p->pos = i;
  return ZT_OK;
}

static zt_status parse_value(jparser *p, zt__json *out);

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
  for (;;) {
    if (out->n == cap) {
      int nc = cap ? cap * 2 : 8;
      zt__json *ni = realloc(out->items, sizeof *ni * (size_t)nc);
      if (ni) out->items = ni;
      char **nk = object ? realloc(out->keys, sizeof *nk * (size_t)nc) : NULL;
      if (nk) out->keys = nk;
      if (!ni || (object && !nk)) return ZT_ERR(ZT_STATUS_OOM, "out of memory parsing %s", p->what);
      cap = nc;
    }
    char *key = NULL;
    skip_ws(p);
    if (object) {
      if (p->pos >= p->len || p->s[p->pos] != '"')
        return jerr(p, p->pos >= p->len ? "unexpected end (expected a key)" : "expected a string key");
      size_t key_pos = p->pos;
      ZT_TRY(parse_string(p, &key));
      for (int i = 0; i < out->n; i++)
        if (!strcmp(out->keys[i], key)) {
          p->pos = key_pos;
          zt_status s = jerr(p, "duplicate key \"%s\"", key);
          free(key);
          return s;
        }
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != ':') {
        free(key);
        return jerr(p, "expected ':' after a key");
      }
      p->pos++;
    }
    zt__json *item = &out->items[out->n];
    memset(item, 0, sizeof *item);
    zt_status s = parse_value(p, item);
    if (s) {
      json_clear(item);
      free(key);
      return s;
    }
    if (object) out->keys[out->n] = key;
    out->n++;
    skip_ws(p);
    if (p->pos >= p->len) return jerr(p, "unexpected end (expected ',' or '%c')", close);
    char c = p->s[p->pos++];
    if (c == close) break;
    if (c != ',') {
      p->pos--;
      return jerr(p, "expected ',' or '%c'", close);
    }
  }
  p->depth--;
  return ZT_OK;
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
  if (!j || j->kind != ZT__JSON_OBJECT) return NULL;
  for (int i = 0; i < j->n; i++)
    if (!strcmp(j->keys[i], key)) return &j->items[i];
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
  errno = 0;
  long long v = strtoll(j->str, NULL, 10);
  if (errno) return false;
  *out = v;
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
