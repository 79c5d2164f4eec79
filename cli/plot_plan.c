/* zt plot --plan: reads the planner's accuracy records (JSON lines, one measured
 * configuration each: predicted and measured peak RSS and step time) and draws predicted
 * against measured as two SVG panels, each with y = x, a target band and a dot per
 * configuration coloured by its rank count. Both axes of a panel share one range, so the
 * diagonal is the diagonal; lines that lack a number are skipped and counted. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "svg.h"

typedef struct config {
  double pred_rss, meas_rss, pred_s, meas_s;
  int ranks;
  char name[96];
} config;

/* What one panel plots: a figure of each config, its target band, its axis unit. */
typedef enum figure { FIGURE_RSS, FIGURE_STEP } figure;

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"};

/* A finite, positive number at obj.key (relative errors divide by the measured one). */
static bool positive(const char *obj, const char *key, double *out) {
  return zt_cli_jsonl_number(obj, key, out) == ZT_CLI_JSONL_NUMBER && isfinite(*out) && *out > 0;
}

/* One record of line into *c; false when it is not an object with every number. */
static bool parse(const char *line, int lineno, config *c) {
  if (!zt_cli_jsonl_is_object(line)) return false;
  const char *p = zt_cli_jsonl_member(line, "predicted"), *m = zt_cli_jsonl_member(line, "measured");
  double ranks;
  if (!positive(p, "rss", &c->pred_rss) || !positive(m, "rss", &c->meas_rss) || !positive(p, "step_s", &c->pred_s) ||
      !positive(m, "step_s", &c->meas_s) || !positive(line, "ranks", &ranks) || ranks != floor(ranks) || ranks > 1e6)
    return false;
  c->ranks = (int)ranks;
  if (!zt_cli_jsonl_string(line, "config", c->name, sizeof c->name) || !c->name[0])
    snprintf(c->name, sizeof c->name, "line %d", lineno);
  return true;
}

/* The records read so far (read_configs' callback state): unusable lines are counted, not fatal. */
typedef struct configs_read {
  config *cs;
  int n, cap, skipped, first_skipped;
} configs_read;

static bool config_line(const char *line, int lineno, void *ud) {
  configs_read *rd = ud;
  config c = {0};
  if (!parse(line, lineno, &c)) {
    if (!rd->skipped++) rd->first_skipped = lineno;
    return true;
  }
  if (rd->n == rd->cap) {
    rd->cap = rd->cap ? 2 * rd->cap : 16;
    config *g = realloc(rd->cs, sizeof *g * (size_t)rd->cap);
    if (!g) {
      fprintf(stderr, "zt plot: out of memory\n");
      abort();
    }
    rd->cs = g;
  }
  rd->cs[rd->n++] = c;
  return true;
}

/* The usable records of `in` in *out (caller frees); their count, or -1 after printing why
 * there are none. Skipped lines are counted on stderr. */
static int read_configs(const char *in, config **out) {
  configs_read rd = {0};
  if (zt_cli_jsonl_each(in, config_line, &rd) < 0) {
    free(rd.cs);
    return -1;
  }
  if (rd.skipped)
    fprintf(stderr,
            "zt plot: %s: %d line%s skipped (first: line %d), not a JSON object with ranks, predicted.rss, "
            "predicted.step_s, measured.rss and measured.step_s as positive numbers\n",
            in, rd.skipped, rd.skipped == 1 ? "" : "s", rd.first_skipped);
  if (!rd.n) {
    fprintf(stderr,
            "zt plot: '%s' holds no usable planner accuracy line (a JSON object per measured configuration: "
            "{\"config\":...,\"ranks\":N,\"predicted\":{\"rss\":B,\"step_s\":S},\"measured\":{...}})\n",
            in);
    free(rd.cs);
    return -1;
  }
  *out = rd.cs;
  return rd.n;
}

static double pred_of(const config *c, figure f) { return f == FIGURE_RSS ? c->pred_rss : c->pred_s; }
static double meas_of(const config *c, figure f) { return f == FIGURE_RSS ? c->meas_rss : c->meas_s; }

/* The line y = k x inside the panel's square, as a two-point series (none if it misses). */
static void ray(zt_cli_svg_series *s, const zt_cli_svg_panel *p, double k) {
  double lo = p->x.lo, hi = p->x.hi;
  double x0 = fmax(lo, lo / k), x1 = fmin(hi, hi / k);
  if (x0 < x1) zt_cli_svg_series_push(s, x0, k * x0), zt_cli_svg_series_push(s, x1, k * x1);
}

/* text shortened at whole UTF-8 characters, "..." ended, to fit maxw at `size`; in buf. */
static const char *shorten(const char *text, double size, double maxw, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", text);
  size_t n = strlen(buf);
  while (n && zt_cli_svg_text_width(buf, size) > maxw) {
    do n--;
    while (n && ((unsigned char)buf[n] & 0xC0) == 0x80);
    if (n + 4 > cap) continue;
    memcpy(buf + n, "...", 4);
  }
  return buf;
}

/* One panel at area: predicted (x) against measured (y) of figure f for every config,
 * grouped into one series per rank count (ranks[g], ascending). */
static void panel(zt_cli_svg *s, zt_cli_svg_box area, figure f, const config *cs, int n, const int *ranks, int ngroups) {
  const double band = f == FIGURE_RSS ? 0.05 : 0.15;
  const zt_cli_svg_unit unit = f == FIGURE_RSS ? ZT_CLI_SVG_UNIT_BYTES : ZT_CLI_SVG_UNIT_PLAIN;
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < n; i++)
    lo = fmin(lo, fmin(pred_of(&cs[i], f), meas_of(&cs[i], f))),
    hi = fmax(hi, fmax(pred_of(&cs[i], f), meas_of(&cs[i], f)));
  /* one axis fitted to every value, used for both directions; never below 0, as no value is */
  zt_cli_svg_axis a = zt_cli_svg_axis_fit(lo, hi, 6, ZT_CLI_SVG_FIT_MARGIN, unit, NULL);
  if (a.lo < 0) a = zt_cli_svg_axis_fit(lo, hi, 6, ZT_CLI_SVG_FIT_FROM_ZERO, unit, NULL);
  zt_cli_svg_panel p = {area, f == FIGURE_RSS ? "peak RSS: predicted vs measured" : "step time: predicted vs measured",
                        a, a};
  p.x.title = f == FIGURE_RSS ? "predicted peak RSS" : "predicted step time (s)";
  p.y.title = f == FIGURE_RSS ? "measured peak RSS" : "measured step time (s)";

  /* guides first, so the dots lie over them; then a series of dots per rank count */
  int nseries = 3 + ngroups;
  zt_cli_svg_series *ss = calloc((size_t)nseries, sizeof *ss);
  char(*names)[32] = calloc((size_t)ngroups + 1, sizeof *names);
  if (!ss || !names) {
    fprintf(stderr, "zt plot: out of memory\n");
    abort();
  }
  snprintf(names[ngroups], sizeof names[ngroups], "target \xC2\xB1%.0f%%", band * 100);
  ss[0] = (zt_cli_svg_series){.name = "y = x", .color = "#999", .style = ZT_CLI_SVG_STYLE_LINE};
  ss[1] = (zt_cli_svg_series){.name = names[ngroups], .color = "#bbb", .dash = "6 4", .style = ZT_CLI_SVG_STYLE_LINE};
  ss[2] = (zt_cli_svg_series){.color = "#bbb", .dash = "6 4", .style = ZT_CLI_SVG_STYLE_LINE}; /* unnamed: one entry */
  ray(&ss[0], &p, 1);
  ray(&ss[1], &p, 1 / (1 - band)); /* (predicted - measured) / measured = -band */
  ray(&ss[2], &p, 1 / (1 + band)); /* = +band */
  for (int g = 0; g < ngroups; g++) {
    snprintf(names[g], sizeof names[g], "%d rank%s", ranks[g], ranks[g] == 1 ? "" : "s");
    ss[3 + g] = (zt_cli_svg_series){
        .name = names[g], .color = colors[g % 7], .style = ZT_CLI_SVG_STYLE_MARKERS, .mark = ZT_CLI_SVG_MARK_CIRCLE};
  }
  int within = 0, worst = 0;
  for (int i = 0; i < n; i++) {
    double pr = pred_of(&cs[i], f), me = meas_of(&cs[i], f), err = (pr - me) / me;
    within += fabs(err) <= band + 1e-12; /* the error as the tables and the targets write it */
    if (fabs(err) > fabs((pred_of(&cs[worst], f) - meas_of(&cs[worst], f)) / meas_of(&cs[worst], f))) worst = i;
    for (int g = 0; g < ngroups; g++)
      if (ranks[g] == cs[i].ranks) zt_cli_svg_series_push(&ss[3 + g], pr, me);
  }

  zt_cli_svg_panel_axes(s, &p);
  zt_cli_svg_panel_series(s, &p, ss, nseries);
  zt_cli_svg_panel_legend(s, &p, ss, nseries);

  /* within: between the dashed lines, |predicted - measured| <= band x measured */
  const config *w = &cs[worst];
  double werr = 100 * (pred_of(w, f) - meas_of(w, f)) / meas_of(w, f);
  char note[192], name[96];
  int len = snprintf(note, sizeof note, "%d of %d within \xC2\xB1%.0f%%; worst %+.1f%%: ", within, n, band * 100, werr);
  shorten(w->name, 11, fmax(60, area.w + 60 - zt_cli_svg_text_width(note, 11)), name, sizeof name);
  snprintf(note + len, sizeof note - (size_t)len, "%s", name);
  zt_cli_svg_text(s, area.x, area.y + area.h + 58, 11, ZT_CLI_SVG_ANCHOR_START, "#222", note);
  printf("zt plot: %s: %d of %d within \xC2\xB1%.0f%%, worst (predicted - measured) / measured %+.1f%% (%s)\n",
         f == FIGURE_RSS ? "peak RSS" : "step time", within, n, band * 100, werr, w->name);
  for (int k = 0; k < nseries; k++) zt_cli_svg_series_free(&ss[k]);
  free(ss), free(names);
}

static int by_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int zt_cli_plot_plan(const char *in, const char *out) {
  config *cs;
  int n = read_configs(in, &cs);
  if (n < 0) return 1;
  int *ranks = malloc(sizeof *ranks * (size_t)n), ngroups = 0;
  if (!ranks) {
    fprintf(stderr, "zt plot: out of memory\n");
    abort();
  }
  for (int i = 0; i < n; i++) {
    int g = 0;
    while (g < ngroups && ranks[g] != cs[i].ranks) g++;
    if (g == ngroups) ranks[ngroups++] = cs[i].ranks;
  }
  qsort(ranks, (size_t)ngroups, sizeof *ranks, by_int);

  const char *base = strrchr(in, '/') ? strrchr(in, '/') + 1 : in;
  char title[512], buf[64];
  snprintf(title, sizeof title, "planner accuracy: %s, %s", base, zt_cli_count(n, "configuration", buf));
  zt_cli_svg s;
  if (!zt_cli_svg_open(&s, out, 1040, 560, title)) {
    fprintf(stderr, "zt plot: cannot write '%s': %s\n", out, strerror(errno));
    free(ranks), free(cs);
    return 1;
  }
  panel(&s, (zt_cli_svg_box){100, 70, 400, 400}, FIGURE_RSS, cs, n, ranks, ngroups);
  panel(&s, (zt_cli_svg_box){610, 70, 400, 400}, FIGURE_STEP, cs, n, ranks, ngroups);
  int status = 0;
  if (!zt_cli_svg_close(&s)) {
    fprintf(stderr, "zt plot: writing '%s' failed\n", out);
    status = 1;
  } else
    printf("zt plot: wrote %s (%s)\n", out, zt_cli_count(n, "configuration", buf));
  free(ranks), free(cs);
  return status;
}
