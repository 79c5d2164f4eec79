/* zt plot: reads a --metrics JSON-lines file of zt train and draws SVG panels against
 * step: training and validation loss, tokens/s, peak bytes per memory tag and, for a
 * multi-rank run, peak bytes per rank. NaN and infinite values are left out (and
 * counted); a line that is not a JSON object with a "step" is an error. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "svg.h"

enum { NT = ZT_MEM_TAG_COUNT, MAX_RANK_CURVES = 8 };

typedef struct metrics {
  zt_cli_svg_series loss[2];                   /* train, validation */
  zt_cli_svg_series tps;                       /* tokens/s */
  zt_cli_svg_series mem[NT + 1];               /* peak bytes per tag, then the total */
  zt_cli_svg_series rank[MAX_RANK_CURVES + 2]; /* peak total per rank; past MAX_RANK_CURVES ranks: min, max */
  int lines, skipped, world;
  double first, last; /* the step range */
  char shard[32];
} metrics;

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

/* Member `key` of obj into series s at step x; a value that is there but not a finite
 * number is counted as skipped and breaks the line (no curve drawn across it). */
static void take(metrics *m, zt_cli_svg_series *s, const char *obj, const char *key, double x) {
  double v;
  zt_cli_jsonl_kind k = zt_cli_jsonl_number(obj, key, &v);
  if (k == ZT_CLI_JSONL_OTHER || (k == ZT_CLI_JSONL_NUMBER && !zt_cli_svg_series_push(s, x, v))) {
    m->skipped++;
    zt_cli_svg_series_break(s);
  }
}

static void take_ranks(metrics *m, const char *ranks, double step) {
  double lo = INFINITY, hi = -INFINITY;
  int n = 0;
  for (const char *r; (r = zt_cli_jsonl_element(ranks, n)); n++) {
    double v;
    if (zt_cli_jsonl_number(zt_cli_jsonl_member(r, "mem_peak"), "total", &v) != ZT_CLI_JSONL_NUMBER || !isfinite(v)) {
      m->skipped++;
      if (n < MAX_RANK_CURVES) zt_cli_svg_series_break(&m->rank[n]);
      continue;
    }
    if (n < MAX_RANK_CURVES) zt_cli_svg_series_push(&m->rank[n], step, v);
    lo = fmin(lo, v), hi = fmax(hi, v);
  }
  if (n > m->world) m->world = n;
  if (!zt_cli_svg_series_push(&m->rank[MAX_RANK_CURVES], step, lo)) /* no rank had a value */
    zt_cli_svg_series_break(&m->rank[MAX_RANK_CURVES]), zt_cli_svg_series_break(&m->rank[MAX_RANK_CURVES + 1]);
  else
    zt_cli_svg_series_push(&m->rank[MAX_RANK_CURVES + 1], step, hi);
}

/* One metrics line into m (read_metrics' callback); false after printing why it is not one. */
typedef struct metrics_read {
  const char *in;
  metrics *m;
  bool bad;
} metrics_read;

static bool metrics_line(const char *line, int lineno, void *ud) {
  metrics_read *rd = ud;
  metrics *m = rd->m;
  double step;
  if (!zt_cli_jsonl_is_object(line)) {
    fprintf(stderr, "zt plot: %s:%d is not a JSON object; zt plot reads the JSON lines that zt train --metrics writes\n",
            rd->in, lineno);
    return !(rd->bad = true);
  }
  zt_cli_jsonl_kind k = zt_cli_jsonl_number(line, "step", &step);
  if (k != ZT_CLI_JSONL_NUMBER || !isfinite(step)) {
    fprintf(stderr, "zt plot: %s:%d %s; zt plot reads the JSON lines that zt train --metrics writes%s\n", rd->in,
            lineno, k == ZT_CLI_JSONL_ABSENT ? "has no \"step\" field" : "has a \"step\" that is not a finite number",
            zt_cli_jsonl_member(line, "recompute")   ? " (for bench/recompute.sh results: zt plot --recompute)"
            : zt_cli_jsonl_member(line, "predicted") ? " (for planner accuracy lines: zt plot --plan)"
                                                     : "");
    return !(rd->bad = true);
  }
  if (!m->lines++) m->first = m->last = step;
  m->first = fmin(m->first, step), m->last = fmax(m->last, step);
  take(m, &m->loss[0], line, "loss", step);
  take(m, &m->loss[1], line, "val_loss", step);
  take(m, &m->tps, line, "tokens_per_s", step);
  const char *mem = zt_cli_jsonl_member(line, "mem");
  for (int t = 0; t <= NT; t++)
    take(m, &m->mem[t], zt_cli_jsonl_member(mem, t < NT ? zt_mem_tag_name((zt_mem_tag)t) : "total"), "peak", step);
  const char *ranks = zt_cli_jsonl_member(line, "ranks");
  if (ranks) take_ranks(m, ranks, step);
  if (!m->shard[0]) zt_cli_jsonl_string(line, "shard", m->shard, sizeof m->shard);
  return true;
}

/* Reads `in` into m; 0, or 1 after printing what is wrong. */
static int read_metrics(const char *in, metrics *m) {
  metrics_read rd = {in, m, false};
  if (zt_cli_jsonl_each(in, metrics_line, &rd) < 0 || rd.bad) return 1;
  if (!m->lines) {
    fprintf(stderr, "zt plot: '%s' holds no metrics lines (write some with zt train --metrics FILE)\n", in);
    return 1;
  }
  return 0;
}

/* One panel of series against step, its y axis fitted to the series. */
static void panel(zt_cli_svg *s, double y, const char *title, const zt_cli_svg_series *ss, int n, zt_cli_svg_unit unit,
                  zt_cli_svg_fit fit, const char *ytitle, double x0, double x1) {
  double u0 = INFINITY, u1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  zt_cli_svg_series_range(ss, n, &u0, &u1, &y0, &y1);
  zt_cli_svg_panel p = {{96, y, 836, 190},
                        title,
                        zt_cli_svg_axis_fit(x0, x1, 10, ZT_CLI_SVG_FIT_TIGHT, ZT_CLI_SVG_UNIT_COUNT, "step"),
                        zt_cli_svg_axis_fit(y0, y1, 4, fit, unit, ytitle)};
  zt_cli_svg_panel_legend_room(&p, ss, n);
  zt_cli_svg_panel_axes(s, &p);
  zt_cli_svg_panel_series(s, &p, ss, n);
  if (y0 > y1) zt_cli_svg_panel_note(s, &p, "no finite values to plot");
  zt_cli_svg_panel_legend(s, &p, ss, n);
}

static int draw(const char *in, const char *out, metrics *m) {
  double x0 = m->first, x1 = m->last; /* every panel spans the steps of the file */

  m->loss[0].name = "train loss", m->loss[0].color = palette[0], m->loss[0].style = ZT_CLI_SVG_STYLE_LINE;
  m->loss[1].name = "validation loss", m->loss[1].color = palette[3], m->loss[1].style = ZT_CLI_SVG_STYLE_LINE_MARKERS;
  m->tps.name = "tokens/s", m->tps.color = palette[2];
  char zero[128] = "";
  int nmem = 0;
  zt_cli_svg_series mem[NT + 1];
  for (int t = 0; t <= NT; t++) {
    zt_cli_svg_series c = m->mem[t];
    bool nonzero = false;
    for (int i = 0; i < c.n; i++) nonzero |= c.y[i] != 0 && !isnan(c.y[i]);
    c.name = t < NT ? zt_mem_tag_name((zt_mem_tag)t) : "total";
    c.color = t < NT ? palette[t] : "#333";
    if (nonzero || !c.n)
      mem[nmem++] = c;
    else
      snprintf(zero + strlen(zero), sizeof zero - strlen(zero), "%s%s", zero[0] ? ", " : "", c.name);
  }
  bool per_rank = m->world <= MAX_RANK_CURVES;
  zt_cli_svg_series *ranks = per_rank ? m->rank : m->rank + MAX_RANK_CURVES;
  int nranks = per_rank ? m->world : 2;
  char rank_names[MAX_RANK_CURVES][24];
  for (int r = 0; r < nranks; r++) {
    if (per_rank) snprintf(rank_names[r], sizeof rank_names[r], "rank %d", r);
    ranks[r].name = per_rank ? rank_names[r] : r ? "largest rank" : "smallest rank";
    ranks[r].color = palette[r];
    /* ranks often coincide: each dashed differently, the ones below show through the gaps */
    static const char *const dashes[] = {NULL, "9 5", "3 4", "14 4 3 4"};
    ranks[r].dash = dashes[r % 4];
  }

  bool multi = m->world > 1;
  int npanels = multi ? 4 : 3;
  const char *base = strrchr(in, '/') ? strrchr(in, '/') + 1 : in;
  char title[512];
  snprintf(title, sizeof title, "zt train metrics: %s, %d step%s", base, m->lines, m->lines == 1 ? "" : "s");
  if (multi) snprintf(title + strlen(title), sizeof title - strlen(title), ", %d ranks, shard %s", m->world, m->shard);
  zt_cli_svg s;
  if (!zt_cli_svg_open(&s, out, 960, 70 + npanels * 270 - 30, title)) {
    fprintf(stderr, "zt plot: cannot write '%s': %s\n", out, strerror(errno));
    return 1;
  }
  panel(&s, 70, "loss", m->loss, 2, ZT_CLI_SVG_UNIT_PLAIN, ZT_CLI_SVG_FIT_MARGIN, "loss", x0, x1);
  panel(&s, 340, "throughput", &m->tps, 1, ZT_CLI_SVG_UNIT_PLAIN, ZT_CLI_SVG_FIT_FROM_ZERO, "tokens/s", x0, x1);
  char mt[192];
  snprintf(mt, sizeof mt, "peak memory per tag%s%s%s", multi ? " (rank 0)" : "", zero[0] ? "; zero throughout: " : "",
           zero);
  panel(&s, 610, mt, mem, nmem, ZT_CLI_SVG_UNIT_BYTES, ZT_CLI_SVG_FIT_FROM_ZERO, "bytes", x0, x1);
  if (multi)
    panel(&s, 880, per_rank ? "peak memory per rank (all tags)" : "peak memory over ranks (all tags)", ranks, nranks,
          ZT_CLI_SVG_UNIT_BYTES, ZT_CLI_SVG_FIT_FROM_ZERO, "bytes", x0, x1);
  if (!zt_cli_svg_close(&s)) {
    fprintf(stderr, "zt plot: writing '%s' failed\n", out);
    return 1;
  }
  return 0;
}

int zt_cmd_plot(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  bool recompute = false, plan = false;
  if (zt_cli_wants_help(argc, argv)) {
    printf("usage: zt plot METRICS.jsonl --out PLOT.svg\n"
           "       (zt train --metrics: loss and validation loss, tokens/s, peak memory per tag and per rank)\n"
           "       zt plot --recompute BENCH.jsonl --out PLOT.svg   (bench/recompute.sh results: ratios to none\n"
           "                                                        as JSON lines, memory vs time overhead)\n"
           "       zt plot --plan ACCURACY.jsonl --out PLOT.svg     (the planner's predicted peak RSS and step\n"
           "                                                        time against measured, per configuration)\n");
    return 0;
  }
  char name[64];
  const char *v;
  int rc;
  for (int i = 0; (rc = zt_cli_arg("plot", argc, argv, &i, "recompute plan", name, &v)) != 1;) {
    if (rc) return rc;
    if (!strcmp(name, "recompute") && !v) recompute = true;
    else if (!strcmp(name, "plan") && !v) plan = true;
    else if (!strcmp(name, "out")) out = v;
    else if (!name[0] && !in) in = v;
    else {
      fprintf(stderr, "zt plot: unexpected argument '%s%s' (usage: zt plot METRICS.jsonl --out PLOT.svg)\n",
              name[0] ? "--" : "", name[0] ? name : v);
      return 2;
    }
  }
  if (!in || !out) {
    fprintf(stderr, "zt plot: usage: zt plot METRICS.jsonl --out PLOT.svg\n");
    return 2;
  }
  if (recompute && plan) {
    fprintf(stderr, "zt plot: --recompute and --plan read different files; give one of them\n");
    return 2;
  }
  if (recompute) return zt_cli_plot_recompute(in, out);
  if (plan) return zt_cli_plot_plan(in, out);
  metrics m = {0};
  int status = read_metrics(in, &m);
  if (!status) status = draw(in, out, &m);
  if (!status) {
    printf("zt plot: wrote %s (%d step%s", out, m.lines, m.lines == 1 ? "" : "s");
    if (m.skipped) printf("; %d NaN/inf or non-numeric values left out", m.skipped);
    printf(")\n");
  }
  for (int k = 0; k < 2; k++) zt_cli_svg_series_free(&m.loss[k]);
  zt_cli_svg_series_free(&m.tps);
  for (int t = 0; t <= NT; t++) zt_cli_svg_series_free(&m.mem[t]);
  for (int r = 0; r < MAX_RANK_CURVES + 2; r++) zt_cli_svg_series_free(&m.rank[r]);
  return status;
}
