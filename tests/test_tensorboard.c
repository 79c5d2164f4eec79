/* TensorBoard event files: CRC-32C against published check values, the masked CRC against
 * values from TensorBoard's own masked_crc32c, and every written file read back by a small
 * record + protobuf reader of this test (both CRCs of every record, field numbers and wire
 * types, steps, tags and float values, the START event, file names and their order). */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/tensorboard.h"
#include "train/run_log.h"
#include "zt_test.h"

/* ------------------------------------------------ a reader of event files */

#define MAX_VALUES 48
typedef struct tb_value {
  char tag[96];
  float v;
} tb_value;
typedef struct tb_event {
  double wall_time;
  int64_t step;
  char file_version[64]; /* "" when absent */
  bool has_summary, has_session_log;
  int session_status;
  int n_values;
  tb_value values[MAX_VALUES];
} tb_event;

typedef struct rd {
  const uint8_t *p, *end;
  bool bad;
} rd;

static uint64_t rd_varint(rd *r) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (r->p >= r->end) break;
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  r->bad = true;
  return 0;
}

static uint64_t rd_le(rd *r, int n) {
  if (r->end - r->p < n) {
    r->bad = true;
    r->p = r->end;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)r->p[i] << (8 * i);
  r->p += n;
  return v;
}

/* A length-delimited field's bytes as a sub-reader. */
static rd rd_sub(rd *r) {
  uint64_t n = rd_varint(r);
  rd s = {r->p, r->p, false};
  if (r->bad || (uint64_t)(r->end - r->p) < n) {
    r->bad = true;
    s.bad = true;
    return s;
  }
  s.end = r->p + n;
  r->p += n;
  return s;
}

/* Checks each field's wire type (a wrong one, or an unknown field, is a failed check). */
static bool parse_value(rd r, tb_value *v) {
  bool has_tag = false, has_value = false;
  while (r.p < r.end && !r.bad) {
    uint64_t key = rd_varint(&r);
    if (key == (1 << 3 | 2)) {
      rd s = rd_sub(&r);
      size_t n = (size_t)(s.end - s.p);
      if (n >= sizeof v->tag) return false;
      memcpy(v->tag, s.p, n);
      v->tag[n] = '\0';
      has_tag = true;
    } else if (key == (2 << 3 | 5)) {
      uint32_t bits = (uint32_t)rd_le(&r, 4);
      memcpy(&v->v, &bits, 4);
      has_value = true;
    } else {
      return false;
    }
  }
  return !r.bad && has_tag && has_value;
}

static bool parse_event(rd r, tb_event *e) {
  memset(e, 0, sizeof *e);
  while (r.p < r.end && !r.bad) {
    uint64_t key = rd_varint(&r);
    if (key == (1 << 3 | 1)) {
      uint64_t bits = rd_le(&r, 8);
      memcpy(&e->wall_time, &bits, 8);
    } else if (key == (2 << 3 | 0)) {
      e->step = (int64_t)rd_varint(&r);
    } else if (key == (3 << 3 | 2)) {
      rd s = rd_sub(&r);
      size_t n = (size_t)(s.end - s.p);
      if (n >= sizeof e->file_version) return false;
      memcpy(e->file_version, s.p, n);
    } else if (key == (5 << 3 | 2)) {
      rd s = rd_sub(&r);
      e->has_summary = true;
      while (s.p < s.end && !s.bad) {
        if (rd_varint(&s) != (1 << 3 | 2) || e->n_values == MAX_VALUES) return false;
        if (!parse_value(rd_sub(&s), &e->values[e->n_values++])) return false;
      }
      if (s.bad) return false;
    } else if (key == (7 << 3 | 2)) {
      rd s = rd_sub(&r);
      e->has_session_log = true;
      if (rd_varint(&s) != (1 << 3 | 0)) return false;
      e->session_status = (int)rd_varint(&s);
      if (s.bad || s.p != s.end) return false;
    } else {
      return false;
    }
  }
  return !r.bad;
}

/* Reads every record of path into evs (at most max); checks both CRCs of each record and
 * that the file ends at a record boundary. Returns the count, or -1 after a failed check. */
static int read_events(const char *path, tb_event *evs, int max) {
  void *data = NULL;
  size_t size = 0;
  if (zt_read_file(path, &data, &size) != ZT_OK) {
    zt_test_fail(__FILE__, __LINE__, "cannot read %s: %s", path, zt_last_error());
    return -1;
  }
  rd r = {data, (const uint8_t *)data + size, false};
  int n = 0;
  while (r.p < r.end) {
    const uint8_t *head = r.p;
    uint64_t len = rd_le(&r, 8);
    uint32_t len_crc = (uint32_t)rd_le(&r, 4);
    if (r.bad || len_crc != zt__crc32c_mask(zt__crc32c(head, 8)) || (uint64_t)(r.end - r.p) < len + 4) {
      zt_test_fail(__FILE__, __LINE__, "%s: record %d: bad length or length CRC", path, n);
      n = -1;
      break;
    }
    const uint8_t *body = r.p;
    r.p += len;
    uint32_t data_crc = (uint32_t)rd_le(&r, 4);
    if (data_crc != zt__crc32c_mask(zt__crc32c(body, (size_t)len))) {
      zt_test_fail(__FILE__, __LINE__, "%s: record %d: bad data CRC", path, n);
      n = -1;
      break;
    }
    if (n == max || !parse_event((rd){body, body + len, false}, &evs[n])) {
      zt_test_fail(__FILE__, __LINE__, "%s: record %d: not a well-formed Event (or too many records)", path, n);
      n = -1;
      break;
    }
    n++;
  }
  free(data);
  return n;
}

static const tb_value *find_value(const tb_event *e, const char *tag) {
  for (int i = 0; i < e->n_values; i++)
    if (!strcmp(e->values[i].tag, tag)) return &e->values[i];
  return NULL;
}

/* The value of tag in e is exactly (float)want. */
static void check_value_at(int line, const tb_event *e, const char *tag, double want) {
  const tb_value *v = find_value(e, tag);
  if (!v)
    zt_test_fail(__FILE__, line, "no value '%s' at step %lld", tag, (long long)e->step);
  else if (memcmp(&v->v, &(float){(float)want}, 4))
    zt_test_fail(__FILE__, line, "'%s' at step %lld is %.9g, expected %.9g", tag, (long long)e->step, v->v,
                 (double)(float)want);
}
#define CHECK_VALUE(e, tag, want) check_value_at(__LINE__, (e), (tag), (want))

/* Names of the event files in dir, sorted (as TensorBoard reads them); returns the count. */
static int list_event_files(const char *dir, char names[][256], int max) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, "events.out.tfevents.", 20) && n < max) snprintf(names[n++], 256, "%s", e->d_name);
  closedir(d);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      char t[256];
      memcpy(t, names[j], 256);
      memcpy(names[j], names[j - 1], 256);
      memcpy(names[j - 1], t, 256);
    }
  return n;
}

/* The file_version record, then START at start_step: the preamble of every file. */
static void check_preamble(const tb_event *evs, int n, int64_t start_step, double t0, double t1) {
  ZT_CHECK(n >= 2);
  if (n < 2) return;
  ZT_CHECK(!strcmp(evs[0].file_version, "brain.Event:2"));
  ZT_CHECK(evs[0].step == 0 && !evs[0].has_summary && !evs[0].has_session_log);
  ZT_CHECK(evs[0].wall_time >= t0 - 1 && evs[0].wall_time <= t1 + 1);
  ZT_CHECK(evs[1].has_session_log && evs[1].session_status == 1 /* START */);
  ZT_CHECK(evs[1].step == start_step);
  ZT_CHECK(!evs[1].has_summary && !evs[1].file_version[0]);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------ tests */

static void test_crc32c(void) {
  /* Check values: "123456789" (the CRC catalogue's check), and RFC 3720 (iSCSI) B.4. */
  ZT_CHECK(zt__crc32c("123456789", 9) == 0xE3069283u);
  ZT_CHECK(zt__crc32c("", 0) == 0);
  uint8_t b[32];
  memset(b, 0, 32);
  ZT_CHECK(zt__crc32c(b, 32) == 0x8A9136AAu);
  memset(b, 0xFF, 32);
  ZT_CHECK(zt__crc32c(b, 32) == 0x62A8AB43u);
  for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
  ZT_CHECK(zt__crc32c(b, 32) == 0x46DD794Eu);
  for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
  ZT_CHECK(zt__crc32c(b, 32) == 0x113FDB5Cu);
  /* extend continues a CRC: any split gives the whole's CRC */
  for (size_t cut = 0; cut <= 9; cut++)
    ZT_CHECK(zt__crc32c_extend(zt__crc32c("123456789", cut), "123456789" + cut, 9 - cut) == 0xE3069283u);
}

static void test_masked_crc(void) {
  ZT_CHECK(zt__crc32c_mask(0) == 0xa282ead8u);
  ZT_CHECK(zt__crc32c_mask(0xE3069283u) == (((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u));
  /* Masked CRCs of record length headers (u64 little-endian), as TensorBoard's own
   * masked_crc32c computes them: 24, 0 and 1000. */
  const uint64_t lens[3] = {24, 0, 1000};
  const uint32_t want[3] = {0x224b7fa3u, 0x07980329u, 0x9a119507u};
  for (int i = 0; i < 3; i++) {
    uint8_t h[8];
    for (int k = 0; k < 8; k++) h[k] = (uint8_t)(lens[i] >> (8 * k));
    ZT_CHECK(zt__crc32c_mask(zt__crc32c(h, 8)) == want[i]);
  }
}

static zt_train_step_info step_info(int64_t step) {
  zt_train_step_info in;
  memset(&in, 0, sizeof in);
  in.step = step;
  in.total_steps = 100;
  in.loss = 3.0 + 1.0 / (double)step;
  in.lr = 6e-4 * (double)step / 7.0;
  in.grad_norm = 0.75 + (double)step;
  in.val_loss = NAN;
  in.step_ms = 12.5 * (double)step;
  in.tokens_per_s = 1000.0 / 3.0 + (double)step;
  in.mfu = 0.0123 * (double)step;
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) {
    in.mem.current[t] = (int64_t)(t + 1) * 1000003 + step;
    in.mem.peak[t] = (int64_t)(t + 1) * 2000003 + step;
  }
  in.mem.current_total = 123456789 + step;
  in.mem.peak_total = 987654321 + step;
  in.peak_rss = (int64_t)3 << 30;
  return in;
}

static const char *const base_tags[] = {"train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s",
                                        "perf/mfu", "perf/step_ms", "mem/total", "mem_peak/total",
                                        "mem_peak/rss"};
#define N_BASE_TAGS ((int)(sizeof base_tags / sizeof *base_tags))

static void check_step_event(const tb_event *e, const zt_train_step_info *in) {
  ZT_CHECK(e->step == in->step && e->has_summary && !e->has_session_log && !e->file_version[0]);
  bool val = !isnan(in->val_loss), scale = in->loss_scale > 0;
  ZT_CHECK(e->n_values == N_BASE_TAGS + 2 * ZT_MEM_TAG_COUNT + val + scale);
  CHECK_VALUE(e, "train/loss", in->loss);
  CHECK_VALUE(e, "train/lr", in->lr);
  CHECK_VALUE(e, "train/grad_norm", in->grad_norm);
  CHECK_VALUE(e, "perf/tokens_per_s", in->tokens_per_s);
  CHECK_VALUE(e, "perf/mfu", in->mfu);
  CHECK_VALUE(e, "perf/step_ms", in->step_ms);
  CHECK_VALUE(e, "mem/total", (double)in->mem.current_total);
  CHECK_VALUE(e, "mem_peak/total", (double)in->mem.peak_total);
  CHECK_VALUE(e, "mem_peak/rss", (double)in->peak_rss);
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) {
    char tag[64];
    snprintf(tag, sizeof tag, "mem/%s", zt_mem_tag_name((zt_mem_tag)t));
    CHECK_VALUE(e, tag, (double)in->mem.current[t]);
    snprintf(tag, sizeof tag, "mem_peak/%s", zt_mem_tag_name((zt_mem_tag)t));
    CHECK_VALUE(e, tag, (double)in->mem.peak[t]);
  }
  if (val) CHECK_VALUE(e, "val/loss", in->val_loss);
  else ZT_CHECK(find_value(e, "val/loss") == NULL);
  if (scale) CHECK_VALUE(e, "train/loss_scale", in->loss_scale);
  else ZT_CHECK(find_value(e, "train/loss_scale") == NULL);
}

static tb_event evs[64];

static void test_fresh_run(void) {
  zt_test_tmpdir_make("tb");
  char dir[256];
  zt_test_tmp_path_to(dir, sizeof dir, "runs/"); /* a trailing slash is fine; the folder is created */
  struct stat st;
  ZT_CHECK(stat(dir, &st) != 0);
  double t0 = now_s();
  zt__tb *w = NULL;
  ZT_CHECK_OK(zt__tb_open(dir, 0, &w));
  if (!w) return zt_test_tmpdir_remove();
  /* the name: events.out.tfevents.<seconds>.<hostname>.<pid>, in dir */
  char host[256] = "";
  gethostname(host, sizeof host);
  char want_tail[300];
  snprintf(want_tail, sizeof want_tail, ".%s.%ld", host, (long)getpid());
  const char *path = zt__tb_path(w);
  ZT_CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
  char prefix[300];
  zt_test_tmp_path_to(prefix, sizeof prefix, "runs/events.out.tfevents."); /* one slash, not "runs//" */
  ZT_CHECK(!strncmp(path, prefix, strlen(prefix)));
  ZT_CHECK(strlen(path) > strlen(want_tail) && !strcmp(path + strlen(path) - strlen(want_tail), want_tail));
  long long secs = atoll(path + strlen(prefix));
  ZT_CHECK(secs >= (long long)t0 && secs <= (long long)t0 + 2);

  ZT_CHECK_OK(zt__tb_scalar(w, "custom/x", 5, 1.0 / 3.0));
  ZT_CHECK_OK(zt__tb_scalar(w, "custom/neg", -3, -2.5e-7)); /* a negative int64 step: 10-byte varint */
  ZT_CHECK_OK(zt__tb_flush(w));
  zt_train_step_info s1 = step_info(1), s2 = step_info(2), s3 = step_info(3);
  s2.val_loss = 2.71828;
  s2.loss_scale = 65536;
  s3.loss = NAN; /* a NaN loss is written as NaN (only val_loss is left out when NaN) */
  ZT_CHECK_OK(zt__tb_write_step(w, &s1));
  ZT_CHECK_OK(zt__tb_write_step(w, &s2));
  /* the file holds every step so far before close (write_step flushes) */
  int n = read_events(path, evs, 64);
  ZT_CHECK(n == 6);
  ZT_CHECK_OK(zt__tb_write_step(w, &s3));
  char saved[512];
  snprintf(saved, sizeof saved, "%s", path);
  ZT_CHECK_OK(zt__tb_close(w));
  double t1 = now_s();

  n = read_events(saved, evs, 64);
  ZT_CHECK(n == 7);
  if (n == 7) {
    check_preamble(evs, n, 1, t0, t1);
    ZT_CHECK(evs[2].step == 5 && evs[2].n_values == 1);
    CHECK_VALUE(&evs[2], "custom/x", 1.0 / 3.0);
    ZT_CHECK(evs[3].step == -3);
    CHECK_VALUE(&evs[3], "custom/neg", -2.5e-7);
    check_step_event(&evs[4], &s1);
    check_step_event(&evs[5], &s2);
    ZT_CHECK(evs[6].step == 3 && find_value(&evs[6], "train/loss") && isnan(find_value(&evs[6], "train/loss")->v));
    for (int i = 0; i < n; i++) ZT_CHECK(evs[i].wall_time >= t0 - 1 && evs[i].wall_time <= t1 + 1);
    for (int i = 1; i < n; i++) ZT_CHECK(evs[i].wall_time >= evs[i - 1].wall_time);
  }
  char names[8][256];
  ZT_CHECK(list_event_files(dir, names, 8) == 1);
  zt_test_tmpdir_remove();
}

/* Steps 1..10, then a resume from a checkpoint at step 6: the new file sorts after the old
 * one and opens with START at step 7. Also: writers opened in the same second get distinct
 * names that sort in opening order. */
static void test_resume_and_names(void) {
  zt_test_tmpdir_make("tb");
  char dir[256];
  zt_test_tmp_path_to(dir, sizeof dir, "tb");
  zt__tb *w = NULL;
  ZT_CHECK_OK(zt__tb_open(dir, 0, &w));
  if (!w) return zt_test_tmpdir_remove();
  for (int64_t s = 1; s <= 10; s++) ZT_CHECK_OK(zt__tb_scalar(w, "train/loss", s, 10.0 + (double)s));
  char first[512];
  snprintf(first, sizeof first, "%s", zt__tb_path(w));
  ZT_CHECK_OK(zt__tb_close(w));
  ZT_CHECK_OK(zt__tb_open(dir, 6, &w)); /* same process, most likely the same second */
  if (!w) return zt_test_tmpdir_remove();
  char second[512];
  snprintf(second, sizeof second, "%s", zt__tb_path(w));
  ZT_CHECK(strcmp(second, first) > 0);
  for (int64_t s = 7; s <= 12; s++) ZT_CHECK_OK(zt__tb_scalar(w, "train/loss", s, 20.0 + (double)s));
  ZT_CHECK_OK(zt__tb_close(w));

  int n = read_events(first, evs, 64);
  ZT_CHECK(n == 12);
  if (n == 12) {
    check_preamble(evs, n, 1, 0, 1e300);
    for (int i = 2; i < 12; i++) ZT_CHECK(evs[i].step == i - 1);
    CHECK_VALUE(&evs[11], "train/loss", 20.0);
  }
  n = read_events(second, evs, 64);
  ZT_CHECK(n == 8);
  if (n == 8) {
    check_preamble(evs, n, 7, 0, 1e300);
    for (int i = 2; i < 8; i++) {
      ZT_CHECK(evs[i].step == i + 5);
      CHECK_VALUE(&evs[i], "train/loss", 20.0 + (double)(i + 5));
    }
  }
  /* Three writers open at once: three files, in opening order by name. */
  zt__tb *ws[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; i++) ZT_CHECK_OK(zt__tb_open(dir, 0, &ws[i]));
  if (ws[0] && ws[1] && ws[2]) {
    ZT_CHECK(strcmp(zt__tb_path(ws[0]), second) > 0);
    ZT_CHECK(strcmp(zt__tb_path(ws[1]), zt__tb_path(ws[0])) > 0);
    ZT_CHECK(strcmp(zt__tb_path(ws[2]), zt__tb_path(ws[1])) > 0);
  }
  for (int i = 0; i < 3; i++) ZT_CHECK_OK(zt__tb_close(ws[i]));
  char names[8][256];
  ZT_CHECK(list_event_files(dir, names, 8) == 5);
  /* a file from a future timestamp (clock skew, another host): a new file still sorts last */
  char future[512];
  snprintf(future, sizeof future, "%s/events.out.tfevents.%lld.otherhost.1", dir, (long long)time(NULL) + 1000);
  zt_test_write_file(future, "", 0);
  ZT_CHECK_OK(zt__tb_open(dir, 0, &w));
  if (w) ZT_CHECK(strcmp(zt__tb_path(w), future) > 0);
  ZT_CHECK_OK(zt__tb_close(w));
  zt_test_tmpdir_remove();
}

static void test_errors(void) {
  zt_test_tmpdir_make("tb");
  zt__tb *w = (zt__tb *)&w; /* not NULL: a failed open must set *out to NULL */
  ZT_CHECK_ERR(zt__tb_open(zt_test_tmp_path("no/such/parent"), 0, &w), ZT_STATUS_IO, "parent folder does not exist");
  ZT_CHECK(w == NULL);
  ZT_CHECK(strstr(zt_last_error(), zt_test_tmp_path("no/such/parent")) != NULL);
  zt_test_write_file(zt_test_tmp_path("afile"), "x", 1);
  ZT_CHECK_ERR(zt__tb_open(zt_test_tmp_path("afile"), 0, &w), ZT_STATUS_IO, "is not a folder");
  ZT_CHECK_ERR(zt__tb_open(zt_test_tmp_path("afile/sub"), 0, &w), ZT_STATUS_IO, "is a file, not a folder");
  ZT_CHECK_ERR(zt__tb_open("", 0, &w), ZT_STATUS_INVALID_ARG, "empty");
  ZT_CHECK_ERR(zt__tb_open(zt_test_tmp_path("tb"), -1, &w), ZT_STATUS_INVALID_ARG, "negative");
  ZT_CHECK_ERR(zt__tb_open(zt_test_tmp_path("tb"), 0, NULL), ZT_STATUS_INVALID_ARG, "out is NULL");
  ZT_CHECK_OK(zt__tb_close(NULL));
  ZT_CHECK_ERR(zt__tb_scalar(NULL, "a", 1, 1), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_ERR(zt__tb_write_step(NULL, NULL), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_ERR(zt__tb_flush(NULL), ZT_STATUS_INVALID_ARG, "NULL");

  ZT_CHECK_OK(zt__tb_open(zt_test_tmp_path("tb"), 0, &w));
  if (!w) return zt_test_tmpdir_remove();
  ZT_CHECK_ERR(zt__tb_scalar(w, "", 1, 1), ZT_STATUS_INVALID_ARG, "empty");
  ZT_CHECK_ERR(zt__tb_scalar(w, NULL, 1, 1), ZT_STATUS_INVALID_ARG, "NULL");
  char long_tag[1100];
  memset(long_tag, 'a', sizeof long_tag - 1);
  long_tag[sizeof long_tag - 1] = '\0';
  ZT_CHECK_ERR(zt__tb_scalar(w, long_tag, 1, 1), ZT_STATUS_INVALID_ARG, "longer than");
  ZT_CHECK_ERR(zt__tb_write_step(w, NULL), ZT_STATUS_INVALID_ARG, "NULL");

  /* A write that fails (file size limit): ZT_STATUS_IO naming the file, then refusals. */
  char path[512];
  snprintf(path, sizeof path, "%s", zt__tb_path(w));
  struct rlimit old;
  ZT_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct rlimit lim = old;
  lim.rlim_cur = 4096;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  ZT_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  zt_status s = ZT_OK;
  for (int64_t i = 1; i <= 100 && !s; i++) {
    zt_train_step_info in = step_info(i);
    s = zt__tb_write_step(w, &in);
  }
  ZT_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
  signal(SIGXFSZ, prev);
  ZT_CHECK(s == ZT_STATUS_IO);
  ZT_CHECK(strstr(zt_last_error(), path) != NULL);
  ZT_CHECK(strstr(zt_last_error(), "File too large") != NULL);
  ZT_CHECK_ERR(zt__tb_scalar(w, "a", 1, 1), ZT_STATUS_IO, "an earlier write");
  ZT_CHECK_ERR(zt__tb_flush(w), ZT_STATUS_IO, path);
  ZT_CHECK_OK(zt__tb_close(w)); /* the failure was reported already */
  zt_test_tmpdir_remove();
}

int main(void) {
  ZT_RUN(test_crc32c);
  ZT_RUN(test_masked_crc);
  ZT_RUN(test_fresh_run);
  ZT_RUN(test_resume_and_names);
  ZT_RUN(test_errors);
  return zt_test_finish();
}
