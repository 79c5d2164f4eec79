/* zt train's options: the library's option table (zt_train_option_at: every training option,
 * its flag name and config-file key, field, range, default and help) and the command's own rows
 * beside it, over zt_cli_train_opts. --help, flag and config-file parsing, and the mapping of the
 * library's field names in error messages back to flags all come from these rows. */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The command's own options: rows over zt_cli_train_opts, placed in --help after the library's
 * row `after` (NULL: before them all). */
typedef struct own_option {
  const char *after;
  zt_option o;
} own_option;

#define OWN(f) .offset = offsetof(zt_cli_train_opts, f), .size = sizeof(((zt_cli_train_opts *)0)->f)

static const own_option k_own[] = {
    {NULL,
     {.section = "usage: zt train [--config FILE] [options]\n"
                 "Every option can also be given in a config file as 'name = value' lines (# comments);\n"
                 "flags given on the command line override the file.",
      .name = "config", .metavar = "FILE", .type = ZT_OPTION_TYPE_TEXT, .role = ZT_OPTION_ROLE_LOCAL, .shown = "",
      .help = "read options from FILE ('name = value' lines)"}},
    {"threads",
     {.name = "log-every", .metavar = "N", OWN(log_every), .type = ZT_OPTION_TYPE_I64, .lo = 1, .hi = 1ll << 40,
      .role = ZT_OPTION_ROLE_LOCAL,
      .help = "progress line every N steps; a step that takes longer than\n"
              "ZT_STEP_PROGRESS_S seconds (default 3) also shows its parts as it goes"}},
    {"plan-calibration",
     {.name = "plan-report", .metavar = "FILE", OWN(plan_report), .type = ZT_OPTION_TYPE_TEXT,
      .role = ZT_OPTION_ROLE_LOCAL, .shown = "",
      .help = "the planner's prediction for the run and what the run measured, as JSON"}},
    {"inject-nan-at",
     {.name = "sample-len", .metavar = "N", OWN(sample_len), .type = ZT_OPTION_TYPE_I64, .lo = 0, .hi = 1 << 20,
      .role = ZT_OPTION_ROLE_LOCAL, .help = "characters of sample text at the end, 0 = none"}},
};
#define N_OWN (sizeof k_own / sizeof k_own[0])

/* Library wordings that a flag alone does not render; matched before the plain fields. */
static const struct {
  const char *api, *cli;
} k_phrases[] = {
    {"checkpoint.allow_config_change = true", "--allow-config-change on"},
    {"memory.recompute_budget=", "--recompute budget="},
    {"model)", "--model/--layers/... flags)"},
};

zt_cli_train_opts zt_cli_train_opts_default(void) { return (zt_cli_train_opts){.log_every = 10, .sample_len = 300}; }

/* Every row in --help's order, the command's own ones among the library's; fn(row, is_own, ud) for each. */
static void each_row(void (*fn)(const zt_option *o, bool own, void *ud), void *ud) {
  for (size_t k = 0; k < N_OWN; k++)
    if (!k_own[k].after) fn(&k_own[k].o, true, ud);
  for (size_t i = 0; zt_train_option_at(i); i++) {
    const zt_option *o = zt_train_option_at(i);
    if (o->derived) continue;
    fn(o, false, ud);
    for (size_t k = 0; k < N_OWN; k++)
      if (k_own[k].after && !strcmp(k_own[k].after, o->name)) fn(&k_own[k].o, true, ud);
  }
}

typedef struct names {
  const char *name[128];
  size_t n;
} names;
static void add_name(const zt_option *o, bool own, void *ud) {
  (void)own;
  names *l = ud;
  if (l->n + 1 < sizeof l->name / sizeof l->name[0]) l->name[l->n++] = o->name;
}

zt_status zt_cli_train_set(zt_train_config *c, zt_cli_train_opts *own, const char *name, const char *value) {
  if (zt_train_option_find(name)) return zt_train_config_set(c, name, value);
  for (size_t k = 0; k < N_OWN; k++) /* config is read before the other options, not set */
    if (!strcmp(k_own[k].o.name, name) && strcmp(name, "config")) return zt_option_parse(&k_own[k].o, own, value);
  names l = {.n = 0};
  each_row(add_name, &l);
  l.name[l.n] = NULL;
  const char *near = zt_cli_closest(name, l.name);
  if (near) return zt_set_error(ZT_STATUS_INVALID_ARG, "unknown option '%s'; did you mean --%s? (see zt train --help)", name, near);
  return zt_set_error(ZT_STATUS_INVALID_ARG, "unknown option '%s' (see zt train --help)", name);
}

static void usage_row(const zt_option *o, bool own, void *ud) {
  FILE *f = ud;
  if (o->section) fprintf(f, "%s\n", o->section);
  char head[64], dbuf[64];
  int w = snprintf(head, sizeof head, "  --%s %s", o->name, o->metavar);
  fprintf(f, "%s%*s", head, w < 22 ? 22 - w : 2, "");
  for (const char *h = o->help; *h;) { /* continuation lines under the first */
    const char *nl = strchr(h, '\n');
    int len = nl ? (int)(nl - h) : (int)strlen(h);
    fprintf(f, "%.*s", len, h);
    if (!nl) break;
    fprintf(f, "\n%22s", "");
    h = nl + 1;
  }
  const char *dv = dbuf;
  if (!own) dv = zt_train_option_default(o, dbuf, sizeof dbuf);
  else if (o->shown) dv = o->shown;
  else {
    zt_cli_train_opts d = zt_cli_train_opts_default();
    zt_option_format(o, &d, dbuf, sizeof dbuf);
  }
  fprintf(f, dv[0] ? " (default %s)\n" : "\n", dv);
}

void zt_cli_train_usage(FILE *f) { each_row(usage_row, f); }

static bool ident(char ch) { return isalnum((unsigned char)ch) || ch == '_' || ch == '.'; }

/* Does api (a field or phrase) start at s, as a whole name? */
static bool names_at(const char *s, const char *api) {
  size_t n = strlen(api);
  return !strncmp(s, api, n) && (!ident(api[n - 1]) || !ident(s[n]));
}

void zt_cli_train_message(const char *msg, char *out, size_t cap) {
  static const char prefix[] = "zt_train_config.";
  size_t n = 0, lp = sizeof prefix - 1;
  char flag[72];
  for (const char *s = msg; *s && n + 1 < cap;) {
    const char *with = NULL;
    size_t used = 0;
    if (!strncmp(s, prefix, lp)) {
      for (size_t i = 0; !with && i < sizeof k_phrases / sizeof k_phrases[0]; i++)
        if (names_at(s + lp, k_phrases[i].api)) with = k_phrases[i].cli, used = strlen(k_phrases[i].api);
      for (size_t i = 0; !with && zt_train_option_at(i); i++) {
        const zt_option *o = zt_train_option_at(i);
        if (!o->derived && names_at(s + lp, o->field)) {
          snprintf(flag, sizeof flag, "--%s", o->name);
          with = flag, used = strlen(o->field);
        }
      }
    }
    if (!with) {
      out[n++] = *s++;
      continue;
    }
    int w = snprintf(out + n, cap - n, "%s", with);
    n = w < 0 || (size_t)w >= cap - n ? cap - 1 : n + (size_t)w;
    s += lp + used;
  }
  out[n < cap ? n : cap - 1] = '\0';
}
