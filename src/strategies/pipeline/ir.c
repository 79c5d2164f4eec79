/* Pipeline schedules as data: the schedule object, stage placement, and the text form (one
 * header line, one line of action tokens per rank). Parsing reports the line and the token;
 * it checks syntax and ranges of the header only, the validator judges the actions. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "pipeline_internal.h"

static const char *const op_names[ZT_PIPELINE_OP_COUNT] = {"F", "B", "W", "BW", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};

void zt__pp_buf_printf(zt__pp_buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->p && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p, b->cap = cap;
  }
}

zt_status zt__pp_buf_take(zt__pp_buf *b, char **out) {
  *out = NULL;
  if (b->oom || !b->p) {
    free(b->p);
    *b = (zt__pp_buf){0};
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory while writing a pipeline schedule's text");
  }
  *out = b->p;
  *b = (zt__pp_buf){0};
  return ZT_OK;
}

zt_status zt__pp_check_size(int ranks, int chunks, int microbatches) {
  if (ranks < 1 || ranks > ZT_PIPELINE_MAX_RANKS || chunks < 1 || chunks > ZT_PIPELINE_MAX_CHUNKS || microbatches < 1 ||
      microbatches > ZT_PIPELINE_MAX_MICROBATCHES)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "a pipeline schedule has ranks in [1, %d], chunks in [1, %d] and microbatches in [1, %d] (got "
                  "ranks=%d chunks=%d microbatches=%d)",
                  ZT_PIPELINE_MAX_RANKS, ZT_PIPELINE_MAX_CHUNKS, ZT_PIPELINE_MAX_MICROBATCHES, ranks, chunks,
                  microbatches);
  long long slots = (long long)ranks * chunks * microbatches;
  if (slots > ZT_PIPELINE_MAX_SLOTS)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "a pipeline schedule of %d stages (ranks x chunks) and %d microbatches has %lld (stage, "
                  "microbatch) pairs; checking and simulating it would take about %.1f GiB (%d bytes a pair), and "
                  "the limit is %d pairs (%.2f GiB): use fewer microbatches or stages",
                  ranks * chunks, microbatches, slots,
                  (double)slots * ZT_PIPELINE_BYTES_PER_SLOT / (1 << 30), ZT_PIPELINE_BYTES_PER_SLOT,
                  ZT_PIPELINE_MAX_SLOTS, (double)ZT_PIPELINE_MAX_SLOTS * ZT_PIPELINE_BYTES_PER_SLOT / (1 << 30));
  return ZT_OK;
}

zt_status zt_pipeline_schedule_new(int ranks, int chunks, int microbatches, zt_pipeline_placement placement,
                                   zt_pipeline_schedule **out) {
  *out = NULL;
  ZT_TRY(zt__pp_check_size(ranks, chunks, microbatches));
  if (placement != ZT_PIPELINE_PLACEMENT_LOOP && placement != ZT_PIPELINE_PLACEMENT_V)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "unknown pipeline placement %d (loop or v)", (int)placement);
  if (placement == ZT_PIPELINE_PLACEMENT_V && chunks != 2)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "the V placement puts 2 chunks on each rank; got chunks=%d (use chunks=2)",
                  chunks);
  zt_pipeline_schedule *s = calloc(1, sizeof *s);
  if (s) {
    s->n_actions = calloc((size_t)ranks, sizeof *s->n_actions);
    s->cap_ = calloc((size_t)ranks, sizeof *s->cap_);
    s->actions = calloc((size_t)ranks, sizeof *s->actions);
  }
  if (!s || !s->n_actions || !s->cap_ || !s->actions) {
    zt_pipeline_schedule_free(s);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a pipeline schedule of %d ranks", ranks);
  }
  s->ranks = ranks, s->chunks = chunks, s->microbatches = microbatches, s->placement = placement;
  snprintf(s->name, sizeof s->name, "custom");
  *out = s;
  return ZT_OK;
}

void zt_pipeline_schedule_free(zt_pipeline_schedule *s) {
  if (!s) return;
  for (int r = 0; s->actions && r < s->ranks; r++) free(s->actions[r]);
  free(s->actions);
  free(s->n_actions);
  free(s->cap_);
  free(s);
}

zt_status zt_pipeline_schedule_push(zt_pipeline_schedule *s, int r, zt_pipeline_action a) {
  if (r < 0 || r >= s->ranks)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d is out of range (the schedule has %d ranks)", r, s->ranks);
  /* the sizes are bounded (zt__pp_check_size), so this product and the capacities fit an int */
  int most = 7 * s->chunks * s->microbatches;
  if (s->n_actions[r] >= most)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "rank %d has more than %d actions, more than a valid schedule of %d chunks per rank and %d "
                  "microbatches has (7 per stage and microbatch: F, B, W and four transfers); it repeats actions",
                  r, most, s->chunks, s->microbatches);
  if (s->n_actions[r] == s->cap_[r]) {
    int cap = s->cap_[r] ? 2 * s->cap_[r] : 16;
    if (cap > most) cap = most;
    zt_pipeline_action *p = realloc(s->actions[r], (size_t)cap * sizeof *p);
    if (!p) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for rank %d's pipeline actions", r);
    s->actions[r] = p, s->cap_[r] = cap;
  }
  s->actions[r][s->n_actions[r]++] = a;
  return ZT_OK;
}

int zt_pipeline_stage_count(const zt_pipeline_schedule *s) { return s->ranks * s->chunks; }

int zt_pipeline_stage_rank(const zt_pipeline_schedule *s, int stage) {
  int P = s->ranks;
  if (stage < 0 || stage >= P * s->chunks) return -1;
  if (s->placement == ZT_PIPELINE_PLACEMENT_V) return stage < P ? stage : 2 * P - 1 - stage;
  return stage % P;
}

int zt__pp_stage_chunk(const zt_pipeline_schedule *s, int stage) { return stage / s->ranks; }

bool zt_pipeline_has_comm(const zt_pipeline_schedule *s) {
  for (int r = 0; r < s->ranks; r++)
    for (int i = 0; i < s->n_actions[r]; i++)
      if (!zt__pp_is_compute(s->actions[r][i].op)) return true;
  return false;
}

const char *zt_pipeline_action_str(zt_pipeline_action a, char *buf) {
  const char *k = (unsigned)a.op < ZT_PIPELINE_OP_COUNT ? op_names[a.op] : "?";
  snprintf(buf, 32, "%d%s%d", a.stage, k, a.mb);
  return buf;
}

/* A non-negative decimal at *p (advanced past it); -1 when there is none or it is too big. */
static long read_uint(const char **p) {
  if (!isdigit((unsigned char)**p)) return -1;
  long v = 0;
  while (isdigit((unsigned char)**p)) {
    v = v * 10 + (**p - '0');
    if (v > 1000000000L) return -1;
    (*p)++;
  }
  return v;
}

zt_status zt_pipeline_action_parse(const char *tok, zt_pipeline_action *out) {
  const char *p = tok;
  long stage = read_uint(&p);
  if (stage < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' does not start with a stage number (a token is STAGE KIND MB, e.g. 1F3)",
                  tok);
  const char *k = p;
  while (*p && !isdigit((unsigned char)*p)) p++;
  size_t klen = (size_t)(p - k);
  int op = -1;
  for (int i = 0; i < ZT_PIPELINE_OP_COUNT; i++)
    if (strlen(op_names[i]) == klen && !strncmp(op_names[i], k, klen)) op = i;
  if (op < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "'%s' has the unknown kind '%.*s' (kinds: F B W BW SEND_F RECV_F SEND_B RECV_B)", tok, (int)klen, k);
  long mb = read_uint(&p);
  if (mb < 0 || *p)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' does not end with a microbatch number (a token is STAGE KIND MB, e.g. 1F3)",
                  tok);
  *out = (zt_pipeline_action){(zt_pipeline_op)op, (int)stage, (int)mb};
  return ZT_OK;
}

zt_status zt_pipeline_schedule_format(const zt_pipeline_schedule *s, char **out) {
  zt__pp_buf b = {0};
  zt__pp_buf_printf(&b, "zt-pipeline ranks=%d chunks=%d microbatches=%d placement=%s", s->ranks, s->chunks,
                    s->microbatches, s->placement == ZT_PIPELINE_PLACEMENT_V ? "v" : "loop");
  if (strcmp(s->name, "custom")) zt__pp_buf_printf(&b, " name=%s", s->name);
  zt__pp_buf_printf(&b, "\n");
  char t[32];
  for (int r = 0; r < s->ranks; r++) {
    zt__pp_buf_printf(&b, "%d:", r);
    for (int i = 0; i < s->n_actions[r]; i++) zt__pp_buf_printf(&b, " %s", zt_pipeline_action_str(s->actions[r][i], t));
    zt__pp_buf_printf(&b, "\n");
  }
  return zt__pp_buf_take(&b, out);
}

/* The header's fields, "key=value" words after "zt-pipeline". */
static zt_status parse_header(char *line, int ln, zt_pipeline_schedule **out) {
  long v[3] = {-1, -1, -1};
  const char *keys[3] = {"ranks", "chunks", "microbatches"};
  const long most[3] = {ZT_PIPELINE_MAX_RANKS, ZT_PIPELINE_MAX_CHUNKS, ZT_PIPELINE_MAX_MICROBATCHES};
  int placement = ZT_PIPELINE_PLACEMENT_LOOP;
  char name[32] = "custom";
  char *save = NULL, *w = strtok_r(line, " \t\r", &save);
  if (!w || strcmp(w, "zt-pipeline"))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "line %d: a schedule file starts with the header 'zt-pipeline ranks=P chunks=V microbatches=M "
                  "placement=loop|v' (got '%s')",
                  ln, w ? w : "");
  while ((w = strtok_r(NULL, " \t\r", &save))) {
    char *eq = strchr(w, '=');
    if (!eq) return ZT_ERR(ZT_STATUS_INVALID_ARG, "line %d: header word '%s' is not key=value", ln, w);
    *eq = '\0';
    const char *val = eq + 1;
    int k = -1;
    for (int i = 0; i < 3; i++)
      if (!strcmp(w, keys[i])) k = i;
    if (k >= 0) {
      const char *p = val;
      v[k] = read_uint(&p);
      if (v[k] < 1 || v[k] > most[k] || *p)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "line %d: header %s='%s' must be an integer in [1, %ld]", ln, w, val,
                      most[k]);
    } else if (!strcmp(w, "placement")) {
      if (!strcmp(val, "loop")) placement = ZT_PIPELINE_PLACEMENT_LOOP;
      else if (!strcmp(val, "v")) placement = ZT_PIPELINE_PLACEMENT_V;
      else return ZT_ERR(ZT_STATUS_INVALID_ARG, "line %d: placement='%s' is neither loop nor v", ln, val);
    } else if (!strcmp(w, "name")) {
      snprintf(name, sizeof name, "%s", val);
    } else {
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "line %d: unknown header key '%s' (keys: ranks chunks microbatches placement name)", ln, w);
    }
  }
  for (int i = 0; i < 3; i++)
    if (v[i] < 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "line %d: the header has no %s=", ln, keys[i]);
  zt_status st = zt_pipeline_schedule_new((int)v[0], (int)v[1], (int)v[2], (zt_pipeline_placement)placement, out);
  if (st != ZT_OK) return zt__error_prefix(st, "line %d", ln);
  memcpy((*out)->name, name, sizeof name);
  return ZT_OK;
}

/* One rank line "R: tokens..." (the R-th after the header). */
static zt_status parse_rank_line(zt_pipeline_schedule *s, char *line, int ln, int r) {
  char *save = NULL, *w = strtok_r(line, " \t\r", &save);
  char want[16];
  snprintf(want, sizeof want, "%d:", r);
  if (!w || strcmp(w, want))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "line %d: expected rank %d's line, starting '%s' (got '%s')", ln, r, want,
                  w ? w : "");
  for (int t = 1; (w = strtok_r(NULL, " \t\r", &save)); t++) {
    zt_pipeline_action a;
    zt_status st = zt_pipeline_action_parse(w, &a);
    if (st == ZT_OK) st = zt_pipeline_schedule_push(s, r, a);
    if (st != ZT_OK) return zt__error_prefix(st, "line %d, token %d", ln, t);
  }
  return ZT_OK;
}

/* Parse text in place (its lines and tokens are cut with NULs). */
static zt_status parse_text(char *text, zt_pipeline_schedule **out) {
  *out = NULL;
  if (!strncmp(text, "\xEF\xBB\xBF", 3))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "line 1: the text starts with a UTF-8 byte-order mark (BOM, the bytes EF BB BF), which the schedule "
                  "text form does not have: save the file as UTF-8 without a BOM");
  zt_pipeline_schedule *s = NULL;
  zt_status st = ZT_OK;
  int ln = 0, r = 0;
  for (char *line = text; line && st == ZT_OK;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    ln++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    const char *q = line;
    while (*q == ' ' || *q == '\t' || *q == '\r') q++;
    if (*q) {
      if (!s) st = parse_header(line, ln, &s);
      else if (r >= s->ranks)
        st = ZT_ERR(ZT_STATUS_INVALID_ARG, "line %d: more rank lines than the header's ranks=%d", ln, s->ranks);
      else st = parse_rank_line(s, line, ln, r++);
    }
    line = nl ? nl + 1 : NULL;
  }
  if (st == ZT_OK && !s) st = ZT_ERR(ZT_STATUS_INVALID_ARG, "the schedule text is empty (it needs a header line)");
  if (st == ZT_OK && r < s->ranks)
    st = ZT_ERR(ZT_STATUS_INVALID_ARG, "the schedule has %d rank lines, the header says ranks=%d", r, s->ranks);
  if (st != ZT_OK) {
    zt_pipeline_schedule_free(s);
    return st;
  }
  *out = s;
  return ZT_OK;
}

zt_status zt_pipeline_schedule_parse(const char *text, zt_pipeline_schedule **out) {
  *out = NULL;
  char *copy = strdup(text);
  if (!copy) return ZT_ERR(ZT_STATUS_OOM, "out of host memory parsing a pipeline schedule");
  zt_status st = parse_text(copy, out);
  free(copy);
  return st;
}

zt_status zt_pipeline_schedule_read(const char *path, zt_pipeline_schedule **out) {
  *out = NULL;
  char *text;
  size_t size;
  /* a regular file only (a FIFO or /dev/zero would block or never end), of bounded size, text */
  ZT_TRY(zt__read_text_file(path, ZT_PIPELINE_MAX_FILE_BYTES, "schedule file", &text, &size));
  zt_status st = parse_text(text, out);
  free(text);
  if (st != ZT_OK) return zt__error_prefix(st, "'%s'", path);
  return ZT_OK;
}

zt_status zt_pipeline_schedule_write(const zt_pipeline_schedule *s, const char *path) {
  char *text;
  ZT_TRY(zt_pipeline_schedule_format(s, &text));
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(text);
    return ZT_ERR(ZT_STATUS_IO, "cannot write schedule file '%s': %s", path, strerror(errno));
  }
  size_t len = strlen(text);
  bool ok = fwrite(text, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  free(text);
  if (!ok) return ZT_ERR(ZT_STATUS_IO, "writing schedule file '%s' failed (disk full?)", path);
  return ZT_OK;
}
