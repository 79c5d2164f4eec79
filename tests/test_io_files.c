/* Atomic file writes (old content intact and no temp file left when a write fails),
 * whole-file reads, and the JSON reader used for checkpoint files. */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/file.h"
#include "io/buf.h"
#include "io/json.h"
#include "zt_test.h"

/* Number of entries in dir whose name contains ".tmp." (left-over temp files). */
static int count_temp_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) n++;
  closedir(d);
  return n;
}

static void write_str(const char *path, const char *s) {
  const void *c = s;
  size_t n = strlen(s);
  ZT_CHECK_OK(zt_write_file_atomic(path, &c, &n, 1));
}

static bool file_is(const char *path, const char *want) {
  void *d = NULL;
  size_t n = 0;
  if (zt_read_file(path, &d, &n) != ZT_OK) return false;
  bool ok = n == strlen(want) && !memcmp(d, want, n) && ((char *)d)[n] == '\0';
  free(d);
  return ok;
}

static void test_write_read_chunks(void) {
  zt_test_tmpdir_make("fileio");
  char path[128];
  zt_test_tmp_path_to(path, sizeof path, "a.bin");
  const char *a = "hello ", *b = "world";
  const void *chunks[] = {a, NULL, b, ""};
  size_t sizes[] = {6, 0, 5, 0};
  ZT_CHECK_OK(zt_write_file_atomic(path, chunks, sizes, 4));
  ZT_CHECK(file_is(path, "hello world"));
  write_str(path, "replaced");
  ZT_CHECK(file_is(path, "replaced"));
  ZT_CHECK_OK(zt_write_file_atomic(path, NULL, NULL, 0)); /* an empty file */
  ZT_CHECK(file_is(path, ""));
  ZT_CHECK(count_temp_files(zt_test_tmpdir()) == 0);
  /* a relative path (temp file in the current folder) */
  char cwd[512];
  ZT_CHECK(getcwd(cwd, sizeof cwd) != NULL);
  ZT_CHECK(chdir(zt_test_tmpdir()) == 0);
  write_str("rel.txt", "relative");
  ZT_CHECK(file_is("rel.txt", "relative"));
  ZT_CHECK(chdir(cwd) == 0);
  zt_test_tmpdir_remove();
}

/* A write that fails half way (file size limit: EFBIG) leaves the old file as it was and
 * removes its temp file. */
static void test_write_failure_keeps_old_file(void) {
  zt_test_tmpdir_make("fileio");
  char path[128];
  zt_test_tmp_path_to(path, sizeof path, "keep.txt");
  write_str(path, "the old content");
  struct rlimit old;
  ZT_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct rlimit lim = old;
  lim.rlim_cur = 4096;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  ZT_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  size_t n = 100000;
  char *big = calloc(n, 1);
  const void *c = big;
  zt_clear_error();
  zt_status s = zt_write_file_atomic(path, &c, &n, 1);
  ZT_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
  signal(SIGXFSZ, prev);
  free(big);
  ZT_CHECK(s == ZT_STATUS_IO);
  ZT_CHECK(strstr(zt_last_error(), path) != NULL);
  ZT_CHECK(strstr(zt_last_error(), "File too large") != NULL);
  ZT_CHECK(strstr(zt_last_error(), "the old file is intact") != NULL);
  ZT_CHECK(file_is(path, "the old content"));
  ZT_CHECK(count_temp_files(zt_test_tmpdir()) == 0);
  zt_test_tmpdir_remove();
}

static void test_write_errors(void) {
  zt_test_tmpdir_make("fileio");
  char path[160];
  zt_test_tmp_path_to(path, sizeof path, "missing/x.bin");
  const void *c = "x";
  size_t n = 1;
  ZT_CHECK_ERR(zt_write_file_atomic(path, &c, &n, 1), ZT_STATUS_IO, "No such file or directory");
  ZT_CHECK(strstr(zt_last_error(), path) != NULL);
  zt_test_tmp_path_to(path, sizeof path, "");
  ZT_CHECK_ERR(zt_write_file_atomic(path, &c, &n, 1), ZT_STATUS_INVALID_ARG, "names a folder");
  ZT_CHECK_ERR(zt_write_file_atomic("", &c, &n, 1), ZT_STATUS_INVALID_ARG, "path is empty");
  const void *nul = NULL;
  zt_test_tmp_path_to(path, sizeof path, "y.bin");
  ZT_CHECK_ERR(zt_write_file_atomic(path, &nul, &n, 1), ZT_STATUS_INVALID_ARG, "chunk 0 is NULL");
  /* renaming over a folder fails after the temp file was written: it is removed */
  zt_test_tmp_path_to(path, sizeof path, "sub");
  ZT_CHECK(mkdir(path, 0755) == 0);
  char inner[200];
  zt_test_tmp_path_to(inner, sizeof inner, "sub/f");
  write_str(inner, "inside");
  ZT_CHECK_ERR(zt_write_file_atomic(path, &c, &n, 1), ZT_STATUS_IO, "renaming");
  ZT_CHECK(count_temp_files(zt_test_tmpdir()) == 0);
  ZT_CHECK(file_is(inner, "inside"));
  /* a folder that is not writable (root may write anyway: then only check it worked) */
  char ro[160], ro_file[200];
  zt_test_tmp_path_to(ro, sizeof ro, "ro");
  zt_test_tmp_path_to(ro_file, sizeof ro_file, "ro/f.txt");
  ZT_CHECK(mkdir(ro, 0755) == 0);
  write_str(ro_file, "old");
  ZT_CHECK(chmod(ro, 0555) == 0);
  if (geteuid() != 0) {
    ZT_CHECK_ERR(zt_write_file_atomic(ro_file, &c, &n, 1), ZT_STATUS_IO, "Permission denied");
    ZT_CHECK(file_is(ro_file, "old"));
  }
  ZT_CHECK(chmod(ro, 0755) == 0);
  zt_test_tmpdir_remove();
}

static void test_read_errors(void) {
  zt_test_tmpdir_make("fileio");
  char path[128];
  void *d = NULL;
  size_t n = 0;
  zt_test_tmp_path_to(path, sizeof path, "none");
  ZT_CHECK_ERR(zt_read_file(path, &d, &n), ZT_STATUS_IO, "No such file or directory");
  ZT_CHECK(strstr(zt_last_error(), path) != NULL);
  ZT_CHECK_ERR(zt_read_file(zt_test_tmpdir(), &d, &n), ZT_STATUS_IO, "it is a folder, not a regular file");
  ZT_CHECK(d == NULL);
  zt_test_tmpdir_remove();
}

/* Only regular files are read, up to a limit: a symlink to /dev/zero used to grow the
 * process until the OOM killer came, a FIFO blocked the reader forever (a FIFO test that
 * hangs is stopped by the alarm). */
static void test_read_non_regular(void) {
  zt_test_tmpdir_make("fileio");
  char path[160], link_path[160];
  void *d = NULL;
  size_t n = 0;
  zt_test_tmp_path_to(link_path, sizeof link_path, "state.json");
  ZT_CHECK(symlink("/dev/zero", link_path) == 0);
  ZT_CHECK_ERR(zt_read_file(link_path, &d, &n), ZT_STATUS_IO, "it is a character device, not a regular file");
  ZT_CHECK(strstr(zt_last_error(), link_path) != NULL);
  ZT_CHECK_ERR(zt__read_regular_file("/dev/null", 100, "config file", &d, &n), ZT_STATUS_IO,
               "cannot read config file '/dev/null': it is a character device");
  zt_test_tmp_path_to(path, sizeof path, "fifo");
  ZT_CHECK(mkfifo(path, 0600) == 0);
  unsigned prev = alarm(20); /* old code: open() waits for a writer forever */
  ZT_CHECK_ERR(zt_read_file(path, &d, &n), ZT_STATUS_IO, "it is a FIFO (named pipe), not a regular file");
  ZT_CHECK_ERR(zt__read_regular_file(path, 100, "state.json", &d, &n), ZT_STATUS_IO, "is a FIFO");
  alarm(prev);
  ZT_CHECK_ERR(zt__read_regular_file(zt_test_tmpdir(), 100, "state.json", &d, &n), ZT_STATUS_IO, "it is a folder");
  /* the size limit, named; a file at the limit is read */
  zt_test_tmp_path_to(path, sizeof path, "big.json");
  write_str(path, "0123456789");
  ZT_CHECK_ERR(zt__read_regular_file(path, 9, "state.json", &d, &n), ZT_STATUS_IO,
               "it has 10 bytes, more than the 9 bytes");
  ZT_CHECK(d == NULL);
  ZT_CHECK_OK(zt__read_regular_file(path, 10, "state.json", &d, &n));
  ZT_CHECK(n == 10 && d && !memcmp(d, "0123456789", 11));
  free(d);
  int fd = -1;
  uint64_t size = 0;
  ZT_CHECK_OK(zt__open_regular_file(path, "token file", &fd, &size));
  ZT_CHECK(fd >= 0 && size == 10);
  if (fd >= 0) close(fd);
  ZT_CHECK_ERR(zt__open_regular_file("/dev/zero", "token file", &fd, &size), ZT_STATUS_IO,
               "cannot read token file '/dev/zero'");
  ZT_CHECK(fd == -1);
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ JSON */

static zt__json *parse_ok(const char *text) {
  zt__json *j = NULL;
  ZT_CHECK_OK(zt__json_parse(text, strlen(text), "test", &j));
  return j;
}

static void test_json_values(void) {
  zt__json *j = parse_ok(" \n{ \"a\" :[1, -2 ,3.5e2, true,false , null, \"s\"],\t\"b\": {}, \"c\": [],\r\n"
                         "\"big\": 18446744073709551615, \"neg\": -9223372036854775808 } \n");
  ZT_CHECK(j->kind == ZT__JSON_OBJECT && j->n == 5);
  const zt__json *a = zt__json_get(j, "a");
  ZT_CHECK(a && a->kind == ZT__JSON_ARRAY && a->n == 7);
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  ZT_CHECK(zt__json_i64(&a->items[1], &i) && i == -2);
  ZT_CHECK(!zt__json_i64(&a->items[2], &i)); /* 3.5e2 is not written as an integer */
  ZT_CHECK(zt__json_f64(&a->items[2], &f) && f == 350.0);
  ZT_CHECK(!zt__json_u64(&a->items[1], &u)); /* negative */
  ZT_CHECK(a->items[3].kind == ZT__JSON_BOOL && a->items[3].boolean);
  ZT_CHECK(a->items[4].kind == ZT__JSON_BOOL && !a->items[4].boolean);
  ZT_CHECK(a->items[5].kind == ZT__JSON_NULL);
  ZT_CHECK(a->items[6].kind == ZT__JSON_STRING && !strcmp(a->items[6].str, "s"));
  ZT_CHECK(zt__json_get(j, "b")->kind == ZT__JSON_OBJECT && zt__json_get(j, "b")->n == 0);
  ZT_CHECK(zt__json_get(j, "c")->kind == ZT__JSON_ARRAY && zt__json_get(j, "c")->n == 0);
  ZT_CHECK(zt__json_u64(zt__json_get(j, "big"), &u) && u == UINT64_MAX);
  ZT_CHECK(zt__json_i64(zt__json_get(j, "neg"), &i) && i == INT64_MIN);
  ZT_CHECK(!zt__json_i64(zt__json_get(j, "big"), &i)); /* does not fit */
  ZT_CHECK(zt__json_get(j, "zz") == NULL && zt__json_get(a, "a") == NULL);
  zt__json_free(j);

  j = parse_ok("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t \\u00e9 \\u20AC \\ud83d\\ude00\"");
  ZT_CHECK(!strcmp(j->str, "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  zt__json_free(j);

  /* escaping on output parses back to the same string */
  zt__buf b = {0};
  zt__buf_json_string(&b, "a\"b\\c\n\x01 \xc3\xa9");
  j = parse_ok(b.data);
  ZT_CHECK(!strcmp(j->str, "a\"b\\c\n\x01 \xc3\xa9"));
  zt__json_free(j);
  zt__buf_free(&b);
}

static void json_err(const char *text, const char *substr) {
  zt__json *j = (zt__json *)1;
  ZT_CHECK_ERR(zt__json_parse(text, strlen(text), "'x.json'", &j), ZT_STATUS_IO, substr);
  ZT_CHECK(j == NULL);
}

static void test_json_errors(void) {
  json_err("", "unexpected end");
  json_err("{\"a\": 1,}", "expected a string key");
  json_err("{\"a\": 1 \"b\": 2}", "expected ',' or '}'");
  json_err("{\"a\" 1}", "expected ':'");
  json_err("[1, 2", "unexpected end");
  json_err("{\"a\": 1, \"a\": 2}", "duplicate key \"a\"");
  json_err("{} x", "unexpected text after the end");
  json_err("\"abc", "unterminated string");
  json_err("\"a\nb\"", "control character");
  json_err("\"\\x\"", "invalid escape");
  json_err("\"\\u12\"", "4 hex digits");
  json_err("\"\\ud800x\"", "high surrogate");
  json_err("\"\\udc00\"", "lone low surrogate");
  json_err("\"\\u0000\"", "NUL");
  json_err("01", "unexpected text");
  json_err("1.", "digits must follow '.'");
  json_err("1e+", "digits must follow the exponent");
  json_err("-", "invalid number");
  json_err("tru", "unexpected character 't'");
  json_err("[1,\n  @]", "line 2, column 3: unexpected character '@'");
  json_err("in 'x.json'", "invalid JSON in 'x.json'");
  char deep[200];
  memset(deep, '[', 100);
  memset(deep + 100, ']', 100);
  zt__json *j = NULL;
  ZT_CHECK_ERR(zt__json_parse(deep, 200, "deep", &j), ZT_STATUS_IO, "nesting deeper than 64");
  j = NULL;
  ZT_CHECK_OK(zt__json_parse(deep + 40, 120, "ok", &j)); /* 60 levels */
  zt__json_free(j);
  /* duplicates in objects large enough to be sorted: the first repeat in file order is named */
  json_err("{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5, \"f\": 6, \"g\": 7, \"h\": 8, \"i\": 9,\n"
           "\"z\": 0, \"c\": 0, \"b\": 0}", "line 2, column 9: duplicate key \"c\"");
  json_err("{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5, \"f\": 6, \"g\": 7, \"h\": 8, \"a\": 9}",
           "duplicate key \"a\"");
}

/* An object of 600,000 members: parsing it, finding a duplicate key at its end and looking
 * up every member take O(n log n) (~1 s; the bound below is loose for sanitizer builds on a
 * loaded machine). The pairwise check took ~70 s for 300k keys, ~4x that for 600k (and ~1.5M
 * keys fit a safetensors header), as did looking up every member. */
static void test_json_large_object(void) {
  enum { N = 600000 };
  zt__buf b = {0};
  zt__buf_put(&b, "{", 1);
  for (int i = 0; i < N; i++) zt__buf_printf(&b, "%s\"tensor.%07d\": %d", i ? ", " : "", (int)((int64_t)i * 7919 % N), i);
  size_t valid_len = b.len;
  zt__buf_printf(&b, ", \"tensor.%07d\": 1}", (int)((int64_t)123 * 7919 % N));
  ZT_CHECK(!b.oom);
  double t0 = zt_clock_now();
  zt__json *j = NULL;
  ZT_CHECK_ERR(zt__json_parse(b.data, b.len, "'big.json'", &j), ZT_STATUS_IO, "duplicate key \"tensor.0374037\"");
  double t_dup = zt_clock_now() - t0;
  b.data[valid_len] = '}';
  t0 = zt_clock_now();
  ZT_CHECK_OK(zt__json_parse(b.data, valid_len + 1, "'big.json'", &j));
  int bad = 0;
  for (int i = 0; j && i < N; i++) {
    char key[32];
    snprintf(key, sizeof key, "tensor.%07d", (int)((int64_t)i * 7919 % N));
    int64_t v = -1;
    bad += !zt__json_i64(zt__json_get(j, key), &v) || v != i;
  }
  ZT_CHECK(bad == 0);
  ZT_CHECK(zt__json_get(j, "tensor.") == NULL && zt__json_get(j, "tensor.9999999") == NULL);
  double t_get = zt_clock_now() - t0;
  zt__json_free(j);
  zt__buf_free(&b);
  printf("  600k keys: duplicate found in %.2f s, parse + 600k lookups in %.2f s\n", t_dup, t_get);
  ZT_CHECK(t_dup < 60 && t_get < 60);
}

int main(void) {
  ZT_RUN(test_write_read_chunks);
  ZT_RUN(test_write_failure_keeps_old_file);
  ZT_RUN(test_write_errors);
  ZT_RUN(test_read_errors);
  ZT_RUN(test_read_non_regular);
  ZT_RUN(test_json_values);
  ZT_RUN(test_json_errors);
  ZT_RUN(test_json_large_object);
  return zt_test_finish();
}
