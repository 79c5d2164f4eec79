/* The option table is consistent: names unique, every row has its help, every row reads back
 * the text its default (and each choice, and a few values of the rows with a syntax of their
 * own) formats to, the ranks compare every row but the local ones, a checkpoint records the
 * course, info and recorded rows (the names and values it recorded before the table) and a resume
 * compares the course and info ones (and only those), and zt train --help (the binary in
 * $ZT_CLI) lists every option. */
#include <stdlib.h>

#include "train/options.h"
#include "train/run_options.h"
#include "zt_test.h"

static size_t n_rows(void) {
  size_t n = 0;
  while (zt_train_option_at(n)) n++;
  return n;
}

static void test_names_unique_and_described(void) {
  size_t n = n_rows();
  ZT_CHECK(n > 50);
  for (size_t i = 0; i < n; i++) {
    const zt_option *o = zt_train_option_at(i);
    ZT_CHECK(o->name && o->name[0] && o->help && o->help[0]);
    if (!o->derived) {
      ZT_CHECK(o->field && o->metavar && zt_train_option_find(o->name) == o);
    } else {
      ZT_CHECK(!o->section && !zt_train_option_find(o->name));
    }
    for (size_t k = 0; k < i; k++)
      if (!strcmp(zt_train_option_at(k)->name, o->name)) zt_test_fail(__FILE__, __LINE__, "option '%s' is named twice", o->name);
  }
  ZT_CHECK(!zt_train_option_find("no-such-option") && !zt_train_option_find(NULL));
  ZT_CHECK_ERR(zt_train_config_set(NULL, "batch", "1"), ZT_STATUS_INVALID_ARG, "NULL");
}

/* Where row o's value lives: the config, or (derived rows over the run's values) the context. */
static void *base_of(const zt_option *o, zt_train_config *c, zt__option_ctx *x) { return o->field ? (void *)c : (void *)x; }

/* text parses into row o, and formats back as itself. */
static void round_trip(const zt_option *o, const char *text) {
  zt_train_config *c = malloc(sizeof *c);
  ZT_CHECK(c != NULL);
  if (!c) return;
  zt_train_config_default(c);
  zt__option_ctx x = {.c = c, .world = 1, .warmup = 0};
  char back[1100];
  zt_status s = zt_option_parse(o, base_of(o, c, &x), text);
  if (s) zt_test_fail(__FILE__, __LINE__, "option '%s': its own text '%s' does not parse: %s", o->name, text, zt_last_error());
  zt_option_format(o, base_of(o, c, &x), back, sizeof back);
  if (strcmp(back, text)) zt_test_fail(__FILE__, __LINE__, "option '%s': '%s' formats back as '%s'", o->name, text, back);
  free(c);
}

static void test_every_row_reads_its_own_text(void) {
  zt_train_config d;
  zt_train_config_default(&d);
  zt__option_ctx x = {.c = &d, .world = 1, .warmup = 0};
  int unset = 0;
  for (size_t i = 0; zt_train_option_at(i); i++) {
    const zt_option *o = zt_train_option_at(i);
    char text[1100], shown[64];
    zt_option_format(o, base_of(o, &d, &x), text, sizeof text);
    ZT_CHECK(zt_train_option_default(o, shown, sizeof shown) != NULL);
    /* an unset default (an empty text, a number below its range) shows as the row's unset text */
    if ((o->unset && !strcmp(text, o->unset)) || (o->type == ZT_OPTION_TYPE_TEXT && !text[0])) {
      unset++;
      continue;
    }
    round_trip(o, text);
    for (const zt_option_choice *ch = o->choices; ch && ch->name; ch++) {
      bool first = true; /* the first choice with a value names it */
      for (const zt_option_choice *e = o->choices; e != ch; e++) first &= e->value != ch->value;
      if (first) round_trip(o, ch->name);
    }
  }
  ZT_CHECK(unset > 10);
  /* the rows with a syntax of their own, beyond their defaults */
  static const char *const special[][2] = {
      {"recompute", "full"},       {"recompute", "selective"},      {"recompute", "selective:gemm"},
      {"recompute", "selective:attention"}, {"recompute", "budget=1048576"}, {"recompute", "plan=nsf"},
      {"shard", "full"},           {"shard", "grad_op"},            {"shard", "opt"},
      {"offload-states", "disk"},  {"offload-states", "host"},      {"model", "gpt2-124m"},
      {"mem-limit", "1073741824"}, {"warmup", "5"},                 {"save", "dir"},
  };
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) round_trip(zt_train_option_find(special[i][0]), special[i][1]);
}

static const zt_option *row_named(const char *name) {
  for (size_t i = 0; zt_train_option_at(i); i++)
    if (!strcmp(zt_train_option_at(i)->name, name)) return zt_train_option_at(i);
  return NULL;
}

/* st->options with name's recorded value replaced by value. */
static void record_with(const char *rec, const char *name, const char *value, zt_train_state *st) {
  size_t n = 0, l = strlen(name), cap = sizeof st->options;
  st->options[0] = '\0';
  for (const char *p = rec; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
    if (!strncmp(p, name, l) && p[l] == '=') n += (size_t)snprintf(st->options + n, cap - n, "%s=%s\n", name, value);
    else n += (size_t)snprintf(st->options + n, cap - n, "%.*s", (int)len, p);
    p += len;
  }
}

static void test_roles_drive_ranks_and_resume(void) {
  zt_train_config c;
  zt_train_config_default(&c);
  ZT_CHECK_OK(zt_train_config_set(&c, "warmup", "5")); /* set: an unset warm-up is not compared */
  zt_lm_config g;
  ZT_CHECK_OK(zt_train_model_config(&c, &g));
  zt__run_opts *o = malloc(sizeof *o);
  zt_train_state *st = calloc(1, sizeof *st);
  char *rec = malloc(sizeof st->options);
  ZT_CHECK(o && st && rec);
  if (!o || !st || !rec) return;
  zt__run_options(&c, &g, 1, NULL, o);
  zt__run_options_record(o, rec, sizeof st->options);
  /* the ranks compare every row but the local ones; the first n_recorded are the recorded roles */
  int agreed = 0;
  for (size_t i = 0; zt_train_option_at(i); i++) {
    const zt_option *r = zt_train_option_at(i);
    int at = -1;
    for (int k = 0; k < o->n; k++)
      if (!strcmp(o->name[k], r->name)) at = k;
    bool recorded = r->role == ZT_OPTION_ROLE_COURSE || r->role == ZT_OPTION_ROLE_INFO || r->role == ZT_OPTION_ROLE_RECORDED;
    if (r->role == ZT_OPTION_ROLE_LOCAL) ZT_CHECK(at < 0);
    else if (at < 0 || (at < o->n_recorded) != recorded)
      zt_test_fail(__FILE__, __LINE__, "option '%s': the ranks' list has it at %d of %d (%d recorded)", r->name, at, o->n,
                   o->n_recorded);
    agreed += at >= 0;
  }
  ZT_CHECK(agreed == o->n);
  /* a resume compares every course and info row, and no other */
  char buf[1024];
  bool course = true;
  snprintf(st->options, sizeof st->options, "%s", rec);
  ZT_CHECK_OK(zt_train_resume_changes(&c, 1, st, buf, sizeof buf, &course));
  ZT_CHECK(!buf[0] && !course);
  for (int k = 0; k < o->n_recorded; k++) {
    const zt_option *r = row_named(o->name[k]);
    ZT_CHECK(r != NULL);
    if (!r) continue;
    record_with(rec, r->name, "changed", st);
    ZT_CHECK_OK(zt_train_resume_changes(&c, 1, st, buf, sizeof buf, &course));
    char want[600];
    snprintf(want, sizeof want, "%s changed -> %s", r->name, o->value[k]);
    if (r->role == ZT_OPTION_ROLE_RECORDED) {
      if (buf[0]) zt_test_fail(__FILE__, __LINE__, "option '%s' is compared on resume: '%s'", r->name, buf);
    } else if (strcmp(buf, want) || course != (r->role == ZT_OPTION_ROLE_COURSE)) {
      zt_test_fail(__FILE__, __LINE__, "option '%s': the resume says '%s' (course %d), not '%s'", r->name, buf, course, want);
    }
  }
  /* an unset warm-up keeps the checkpoint's */
  c.optim.warmup = -1;
  record_with(rec, "warmup", "9", st);
  ZT_CHECK_OK(zt_train_resume_changes(&c, 1, st, buf, sizeof buf, &course));
  ZT_CHECK(!strstr(buf, "warmup") && !course);
  free(rec);
  free(st);
  free(o);
}

static int cmp_lines(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* text's lines, sorted, into lines[] (text is cut up); their count. */
static int sorted_lines(char *text, char **lines, int cap) {
  int n = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && n < cap; l = strtok_r(NULL, "\n", &save)) lines[n++] = l;
  qsort(lines, (size_t)n, sizeof *lines, cmp_lines);
  return n;
}

/* What a checkpoint of the default config recorded before the table (the lists of
 * run_options.c): the table records the same names and values, and a resume of it finds
 * nothing changed. */
static void test_record_as_before_the_table(void) {
  static const char before[] =
      "seed=1337\nbatch=8\nseq=256\nsteps=600\nlr=0.001\nmin-lr=0.0001\nwarmup=auto\nwarmup-resolved=60\n"
      "optimizer=adamw\nweight-decay=0.1\nbeta1=0.9\nbeta2=0.95\nmomentum=0.9\ngrad-clip=1\ndropout=0\n"
      "data=(built-in)\nmixed-precision=none\nval-data=(split)\nranks=1\nshard=none\nmicrobatches=1\npp=1\n"
      "schedule=none\nchunks=0\npp-balance=even\noffload-model=none\n";
  zt_train_config c;
  zt_train_config_default(&c);
  zt_lm_config g;
  ZT_CHECK_OK(zt_train_model_config(&c, &g));
  zt__run_opts *o = malloc(sizeof *o);
  zt_train_state *st = calloc(1, sizeof *st);
  ZT_CHECK(o && st);
  if (!o || !st) return;
  zt__run_options(&c, &g, 1, NULL, o);
  zt__run_options_record(o, st->options, sizeof st->options);
  char old[sizeof before], *a[64], *b[64];
  memcpy(old, before, sizeof before);
  int na = sorted_lines(st->options, a, 64), nb = sorted_lines(old, b, 64);
  ZT_CHECK(na == nb);
  for (int i = 0; i < na && i < nb; i++)
    if (strcmp(a[i], b[i])) zt_test_fail(__FILE__, __LINE__, "recorded '%s' where the format before had '%s'", a[i], b[i]);
  snprintf(st->options, sizeof st->options, "%s", before);
  char buf[512];
  bool course = true;
  ZT_CHECK_OK(zt_train_resume_changes(&c, 1, st, buf, sizeof buf, &course));
  ZT_CHECK(!buf[0] && !course);
  free(st);
  free(o);
}

/* zt train --help shows every option of the table. */
static void test_help_lists_every_row(void) {
  const char *cli = getenv("ZT_CLI");
  if (!cli || !*cli) {
    printf("  (ZT_CLI unset: zt train --help not checked)\n");
    return;
  }
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "'%s' train --help", cli);
  FILE *f = popen(cmd, "r");
  ZT_CHECK(f != NULL);
  if (!f) return;
  size_t cap = 1 << 16, n = 0;
  char *help = malloc(cap);
  ZT_CHECK(help != NULL);
  for (size_t got; help && n + 1 < cap && (got = fread(help + n, 1, cap - 1 - n, f)) > 0;) n += got;
  ZT_CHECK(pclose(f) == 0);
  if (!help) return;
  help[n] = '\0';
  for (size_t i = 0; zt_train_option_at(i); i++) {
    const zt_option *o = zt_train_option_at(i);
    char flag[96];
    snprintf(flag, sizeof flag, "\n  --%s %s ", o->name, o->metavar ? o->metavar : "");
    bool shown = strstr(help, flag) != NULL;
    if (shown == o->derived)
      zt_test_fail(__FILE__, __LINE__, "option '%s' is %sin zt train --help", o->name, shown ? "" : "not ");
  }
  free(help);
}

int main(void) {
  ZT_RUN(test_names_unique_and_described);
  ZT_RUN(test_every_row_reads_its_own_text);
  ZT_RUN(test_roles_drive_ranks_and_resume);
  ZT_RUN(test_record_as_before_the_table);
  ZT_RUN(test_help_lists_every_row);
  return zt_test_finish();
}
