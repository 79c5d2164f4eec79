/* Training options: the setters' range checks, config files (whole lines of any length,
 * '#' comments only at a line start or after a blank, quoted values, NUL bytes, names given
 * twice, files that are not regular), the options a checkpoint records and what a resume
 * changes, and the metrics file kept up to a resumed step. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "train/run_log.h"
#include "zt_test.h"

static void write_text(const char *path, const char *text) { zt_test_write_file(path, text, strlen(text)); }

static void test_setters_range_checked(void) {
  zt_train_config c;
  zt_train_config_default(&c);
  ZT_CHECK_ERR(zt_train_config_set(&c, "steps", "99999999999999999999"), ZT_STATUS_INVALID_ARG,
               "needs an integer in [1, 1099511627776]");
  ZT_CHECK_ERR(zt_train_config_set(&c, "batch", "2000000"), ZT_STATUS_INVALID_ARG, "[1, 1048576]");
  ZT_CHECK_ERR(zt_train_config_set(&c, "layers", "5000"), ZT_STATUS_INVALID_ARG, "[1, 4096]");
  ZT_CHECK_ERR(zt_train_config_set(&c, "lr", "nan"), ZT_STATUS_INVALID_ARG, "needs a number in [0, 10]");
  ZT_CHECK_ERR(zt_train_config_set(&c, "save", ""), ZT_STATUS_INVALID_ARG, "got an empty one");
  ZT_CHECK_ERR(zt_train_config_set(&c, "keep-checkpoints", "0"), ZT_STATUS_INVALID_ARG, "[1, 1000]");
  ZT_CHECK_ERR(zt_train_config_set(&c, "comm-timeout", "-1"), ZT_STATUS_INVALID_ARG, "comm-timeout");
  ZT_CHECK_OK(zt_train_config_set(&c, "comm-timeout", "2.5"));
  ZT_CHECK(c.parallel.comm_timeout == 2.5);
  ZT_CHECK_OK(zt_train_config_set(&c, "allow-config-change", "on"));
  ZT_CHECK(c.checkpoint.allow_config_change);
  ZT_CHECK_OK(zt_train_config_set(&c, "seed", "9223372036854775807"));
  ZT_CHECK(c.seed == 9223372036854775807ull);
}

/* Collects what a config file sets. */
typedef struct seen {
  int n;
  char name[8][32], value[8][64];
} seen;

static zt_status collect(const char *name, const char *value, void *ud) {
  seen *s = ud;
  if (s->n == 8) return ZT_ERR(ZT_STATUS_INVALID_ARG, "too many");
  snprintf(s->name[s->n], 32, "%s", name);
  snprintf(s->value[s->n++], 64, "%s", value);
  return ZT_OK;
}

static void test_config_file_lines(void) {
  zt_test_tmpdir_make("cfg");
  char path[300];
  zt_test_tmp_path_to(path, sizeof path, "c");
  /* a comment longer than any line buffer stays a comment; '#' inside a value stays; quotes */
  size_t n = 5000;
  char *text = malloc(n + 200);
  memcpy(text, "# ", 2);
  memset(text + 2, 'x', n);
  strcpy(text + 2 + n,
         " steps = 99\n  --steps = 2 \r\nmetrics = run#1.jsonl   # the run\nsave = \"a #b \\\"c\\\"\"  # quoted\n\n"
         "  # indented comment\nlr=0.5");
  write_text(path, text);
  free(text);
  seen s = {0};
  ZT_CHECK_OK(zt_config_file_read(path, collect, &s));
  ZT_CHECK(s.n == 4);
  ZT_CHECK(!strcmp(s.name[0], "steps") && !strcmp(s.value[0], "2"));
  ZT_CHECK(!strcmp(s.name[1], "metrics") && !strcmp(s.value[1], "run#1.jsonl"));
  ZT_CHECK(!strcmp(s.name[2], "save") && !strcmp(s.value[2], "a #b \"c\""));
  ZT_CHECK(!strcmp(s.name[3], "lr") && !strcmp(s.value[3], "0.5"));
  /* the training config reads the same file */
  zt_train_config c;
  zt_train_config_default(&c);
  ZT_CHECK_OK(zt_train_config_load(&c, path));
  ZT_CHECK(c.steps == 2 && !strcmp(c.log.metrics, "run#1.jsonl") && !strcmp(c.checkpoint.save, "a #b \"c\"") && c.optim.lr == 0.5);
  /* errors name the file and line */
  const char *bad[][2] = {
      {"steps = 2\nbat\0ch = 2\n", "line 2: holds a NUL byte"},
      {"steps = 2\n\nsteps = 3\n", ":3: 'steps' is set twice (also on line 1)"},
      {"steps 2\n", ":1: expected 'name = value'"},
      {"save = \"open\n", ":1: the quoted value has no closing"},
      {"save = \"a\" b\n", ":1: text after the closing quote"},
      {"config = other\n", ":1: a config file cannot name another"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t len = i == 0 ? 20 : strlen(bad[i][0]);
    zt_test_write_file(path, bad[i][0], len);
    memset(&s, 0, sizeof s);
    ZT_CHECK_ERR(zt_config_file_read(path, collect, &s), ZT_STATUS_INVALID_ARG, bad[i][1]);
    ZT_CHECK(strstr(zt_last_error(), path) != NULL);
  }
  /* a setter's error gets the file and line */
  write_text(path, "\nsteps = many\n");
  ZT_CHECK_ERR(zt_train_config_load(&c, path), ZT_STATUS_INVALID_ARG, ":2: option 'steps' needs an integer");
  /* not regular files: refused at once, saying what they are */
  ZT_CHECK_ERR(zt_config_file_read(zt_test_tmpdir(), collect, &s), ZT_STATUS_IO, "a folder");
  ZT_CHECK_ERR(zt_config_file_read("/dev/zero", collect, &s), ZT_STATUS_IO, "not a regular file");
  char fifo[300];
  zt_test_tmp_path_to(fifo, sizeof fifo, "fifo");
  ZT_CHECK(mkfifo(fifo, 0600) == 0);
  ZT_CHECK_ERR(zt_config_file_read(fifo, collect, &s), ZT_STATUS_IO, "FIFO");
  ZT_CHECK_ERR(zt_config_file_read(zt_test_tmp_path("missing"), collect, &s), ZT_STATUS_IO, "No such file");
  zt_test_tmpdir_remove();
}

static void test_resume_changes(void) {
  zt_train_config c;
  zt_train_config_default(&c);
  zt_train_state st;
  memset(&st, 0, sizeof st);
  char buf[512];
  bool course = true;
  /* nothing recorded (an older checkpoint): nothing to say */
  ZT_CHECK_OK(zt_train_resume_changes(&c, 1, &st, buf, sizeof buf, &course));
  ZT_CHECK(!buf[0] && !course);
  snprintf(st.options, sizeof st.options, "seed=1337\nbatch=8\nlr=0.001\nval-data=(split)\nranks=1\n");
  ZT_CHECK_OK(zt_train_resume_changes(&c, 1, &st, buf, sizeof buf, &course));
  ZT_CHECK(!buf[0] && !course);
  c.seed = 7;
  ZT_CHECK_OK(zt_train_config_set(&c, "lr", "2e-3"));
  ZT_CHECK_OK(zt_train_resume_changes(&c, 2, &st, buf, sizeof buf, &course));
  ZT_CHECK(course && !strcmp(buf, "seed 1337 -> 7, lr 0.001 -> 0.002, ranks 1 -> 2"));
  /* changes that do not alter the course are reported without refusing */
  c.seed = 1337;
  c.optim.lr = 1e-3;
  ZT_CHECK_OK(zt_train_resume_changes(&c, 2, &st, buf, sizeof buf, &course));
  ZT_CHECK(!course && !strcmp(buf, "ranks 1 -> 2"));
}

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  int n = 0, ch;
  while (f && (ch = fgetc(f)) != EOF) n += ch == '\n';
  if (f) fclose(f);
  return n;
}

/* A resumed run keeps the metrics lines up to its checkpoint's step and drops the rest (and
 * a line torn by a kill); a new run starts the file over. */
static void test_metrics_resume(void) {
  zt_test_tmpdir_make("runlog");
  char path[300];
  zt_test_tmp_path_to(path, sizeof path, "m.jsonl");
  write_text(path, "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"loss\":1}\n{\"step\":4,\"lo");
  zt__run_log *l = NULL;
  ZT_CHECK_OK(zt__run_log_open(path, "", 2, &l));
  zt_train_step_info in = {0};
  in.step = 3;
  in.loss = 0.5;
  in.val_loss = NAN;
  in.world = 1;
  double figs[ZT__RANK_FIG_N] = {0};
  ZT_CHECK_OK(zt__run_log_step(l, &in, "single", figs));
  ZT_CHECK_OK(zt__run_log_close(l));
  void *d = NULL;
  size_t n = 0;
  ZT_CHECK_OK(zt_read_file(path, &d, &n));
  ZT_CHECK(d && count_lines(path) == 3);
  ZT_CHECK(d && !strncmp(d, "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"loss\":0.5,", 58));
  free(d);
  ZT_CHECK_OK(zt__run_log_open(path, "", 0, &l));
  ZT_CHECK_OK(zt__run_log_close(l));
  ZT_CHECK(count_lines(path) == 0);
  ZT_CHECK_ERR(zt__run_log_open("/nonexistent/d/m.jsonl", "", 0, &l), ZT_STATUS_IO, "/nonexistent/d/m.jsonl");
  zt_test_tmpdir_remove();
}

int main(void) {
  ZT_RUN(test_setters_range_checked);
  ZT_RUN(test_config_file_lines);
  ZT_RUN(test_resume_changes);
  ZT_RUN(test_metrics_resume);
  return zt_test_finish();
}
