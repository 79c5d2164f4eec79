/* zt plot --recompute: reads the JSON lines of bench/recompute.sh (zt bench step runs,
 * grouped by model size, batch and length, with a `none` run per group), prints each
 * run's ratios to its group's none (step time, peak ACTIVATION, peak RSS; budget runs
 * also measured peak / budget) as JSON lines, and draws activation memory against time
 * overhead as SVG: a marker per run, labelled with its mode, a legend of the groups. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "svg.h"

typedef struct run {
  double params, batch, seq, ms, act, rss, budget;
  char mode[32];
  int lineno;
} run;

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

static bool same_group(const run *a, const run *b) {
  return a->params == b->params && a->batch == b->batch && a->seq == b->seq;
}

/* Member key of obj as a number, NAN when absent or not one. */
static double num(const char *obj, const char *key) {
  double v;
  return zt_cli_jsonl_number(obj, key, &v) == ZT_CLI_JSONL_NUMBER ? v : NAN;
}

/* The runs read so far (read_runs' callback state). */
typedef struct runs_read {
  const char *in;
  run *rs;
  int n, cap;
  bool bad;
} runs_read;

/* One bench step line into rd; false after printing why it is not one. */
static bool run_line(const char *line, int lineno, void *ud) {
  runs_read *rd = ud;
  run r = {num(line, "params"),
           num(line, "batch"),
           num(line, "seq"),
           num(line, "ms_per_step"),
           num(zt_cli_jsonl_member(line, "peak_bytes"), "ACTIVATION"),
           num(line, "peak_rss_bytes"),
           num(line, "recompute_budget"),
           "",
           lineno};
  zt_cli_jsonl_string(line, "recompute", r.mode, sizeof r.mode);
  if (!zt_cli_jsonl_is_object(line) || isnan(r.params) || isnan(r.ms) || isnan(r.act) || !r.mode[0]) {
    fprintf(stderr,
            "zt plot: %s:%d is not a zt bench step line (a JSON object with params, ms_per_step, "
            "peak_bytes.ACTIVATION, recompute)\n",
            rd->in, lineno);
    return !(rd->bad = true);
  }
  if (rd->n == rd->cap) {
    int cap = rd->cap ? 2 * rd->cap : 16;
    run *g = realloc(rd->rs, sizeof *g * (size_t)cap);
    if (!g) {
      fprintf(stderr, "zt plot: out of memory\n");
      return !(rd->bad = true);
    }
    rd->rs = g, rd->cap = cap;
  }
  rd->rs[rd->n++] = r;
  return true;
}

/* The runs of `in` in *out (caller frees); their count, or -1 after printing why not. */
static int read_runs(const char *in, run **out) {
  runs_read rd = {in, NULL, 0, 0, false};
  if (zt_cli_jsonl_each(in, run_line, &rd) < 0 || rd.bad) {
    free(rd.rs);
    *out = NULL;
    return -1;
  }
  *out = rd.rs;
  return rd.n;
}

/* Mode labels beside their markers: the first of a few places around the marker that
 * stays in the area and clear of the legend, the markers and the labels placed so far;
 * a label equal to one already placed at the same spot is left out (the none runs). */
typedef struct placed {
  zt_cli_svg_box *boxes;
  double *px, *py;
  const char **text;
  int n;
} placed;

static void label(zt_cli_svg *s, const zt_cli_svg_panel *p, placed *pl, const zt_cli_svg_box *avoid, int navoid,
                  double px, double py, const char *text, const char *color) {
  for (int i = 0; i < pl->n; i++)
    if (!strcmp(pl->text[i], text) && hypot(pl->px[i] - px, pl->py[i] - py) < 3) return;
  const double size = 10, tw = zt_cli_svg_text_width(text, size), th = 10;
  /* box offsets from the marker: right, above right, below right, left, above left, below left, above, below */
  const double dx[] = {7, 5, 5, -7 - tw, -5 - tw, -5 - tw, -tw / 2, -tw / 2};
  const double dy[] = {-th / 2, -th - 5, 5, -th / 2, -th - 5, 5, -th - 7, 7};
  zt_cli_svg_box best = {0};
  int least = -1;
  for (int c = 0; c < 8 && least; c++) {
    zt_cli_svg_box b = {px + dx[c], py + dy[c], tw, th};
    if (b.x < p->area.x + 2 || b.x + b.w > p->area.x + p->area.w - 2 || b.y < p->area.y + 2 ||
        b.y + b.h > p->area.y + p->area.h - 2)
      continue;
    int hits = 0;
    for (int i = 0; i < navoid; i++) hits += zt_cli_svg_box_overlap(b, avoid[i]);
    for (int i = 0; i < pl->n; i++) hits += zt_cli_svg_box_overlap(b, pl->boxes[i]);
    if (least < 0 || hits < least) least = hits, best = b;
  }
  if (least < 0) best = (zt_cli_svg_box){px + dx[0], py + dy[0], tw, th}; /* no place in the area: beside it */
  zt_cli_svg_text(s, best.x, best.y + th - 2, size, ZT_CLI_SVG_ANCHOR_START, color, text);
  pl->boxes[pl->n] = best, pl->px[pl->n] = px, pl->py[pl->n] = py, pl->text[pl->n] = text, pl->n++;
}

int zt_cli_plot_recompute(const char *in, const char *out) {
  run *rs;
  int n = read_runs(in, &rs);
  if (n < 0) return 1;
  int ngroups = 0;
  for (int j = 0; j < n; j++) ngroups += !strcmp(rs[j].mode, "none");
  if (!ngroups) {
    fprintf(stderr, "zt plot: %s has no run with --recompute none to take ratios against\n", in);
    free(rs);
    return 1;
  }
  zt_cli_svg_series *groups = calloc((size_t)ngroups, sizeof *groups);
  char(*names)[64] = calloc((size_t)ngroups, sizeof *names);
  const run **base_of = calloc((size_t)n, sizeof *base_of);
  int *group_of = calloc((size_t)n, sizeof *group_of);
  if (!groups || !names || !base_of || !group_of) {
    fprintf(stderr, "zt plot: out of memory\n");
    free(groups), free(names), free(base_of), free(group_of), free(rs);
    return 1;
  }
  for (int j = 0, g = 0; j < n; j++) {
    if (strcmp(rs[j].mode, "none")) continue;
    const run *base = &rs[j];
    snprintf(names[g], sizeof names[g], "%.0fM params, B=%.0f, T=%.0f", base->params / 1e6, base->batch, base->seq);
    groups[g] = (zt_cli_svg_series){
        .name = names[g], .color = colors[g % 6], .style = ZT_CLI_SVG_STYLE_MARKERS, .mark = (zt_cli_svg_mark)(g % 4)};
    for (int i = 0; i < n; i++) {
      if (!same_group(&rs[i], base) || base_of[i]) continue;
      const run *r = &rs[i];
      double tr = r->ms / base->ms, mr = r->act / base->act, rr = r->rss / base->rss;
      printf("{\"group\":\"%s\",\"mode\":\"%s\",\"time_ratio\":%.3f,\"act_ratio\":%.3f,\"rss_ratio\":%.3f", names[g],
             r->mode, tr, mr, rr);
      if (r->budget > 0) printf(",\"budget\":%.0f,\"act_over_budget\":%.3f", r->budget, r->act / r->budget);
      printf("}\n");
      zt_cli_svg_series_push(&groups[g], tr, mr);
      base_of[i] = base, group_of[i] = g;
    }
    g++;
  }
  for (int i = 0; i < n; i++)
    if (!base_of[i])
      fprintf(stderr, "zt plot: %s:%d (%s) has no none run of the same params, batch and seq; left out\n", in,
              rs[i].lineno, rs[i].mode);

  double x0 = 1, x1 = 1, y0 = 0, y1 = 1; /* none is at (1, 1) */
  zt_cli_svg_series_range(groups, ngroups, &x0, &x1, &y0, &y1);
  zt_cli_svg_panel p = {
      {84, 60, 690, 390},
      NULL,
      zt_cli_svg_axis_fit(x0, x1, 8, ZT_CLI_SVG_FIT_MARGIN, ZT_CLI_SVG_UNIT_RATIO, "step time / none"),
      zt_cli_svg_axis_fit(y0, y1, 5, ZT_CLI_SVG_FIT_FROM_ZERO, ZT_CLI_SVG_UNIT_PLAIN, "peak ACTIVATION / none")};
  zt_cli_svg_panel_legend_room(&p, groups, ngroups);
  zt_cli_svg s;
  int status = 0;
  if (!zt_cli_svg_open(&s, out, 800, 510, "activation recomputation: peak ACTIVATION vs step time (ratios to none)")) {
    fprintf(stderr, "zt plot: cannot write '%s': %s\n", out, strerror(errno));
    status = 1;
  } else {
    zt_cli_svg_panel_axes(&s, &p);
    zt_cli_svg_panel_series(&s, &p, groups, ngroups);
    /* labels keep clear of the legend and of every marker */
    zt_cli_svg_box *avoid = malloc(sizeof *avoid * (size_t)(n + 1));
    placed pl = {malloc(sizeof *pl.boxes * (size_t)n), malloc(sizeof *pl.px * (size_t)n),
                 malloc(sizeof *pl.py * (size_t)n), malloc(sizeof *pl.text * (size_t)n), 0};
    if (!avoid || !pl.boxes || !pl.px || !pl.py || !pl.text) {
      fprintf(stderr, "zt plot: out of memory\n");
      abort();
    }
    int navoid = 0;
    avoid[navoid++] = zt_cli_svg_panel_legend(&s, &p, groups, ngroups);
    for (int i = 0; i < n; i++)
      if (base_of[i]) {
        double px = zt_cli_svg_px(&p, rs[i].ms / base_of[i]->ms), py = zt_cli_svg_py(&p, rs[i].act / base_of[i]->act);
        avoid[navoid++] = (zt_cli_svg_box){px - 5, py - 5, 10, 10};
      }
    for (int i = 0; i < n; i++)
      if (base_of[i]) {
        double tr = rs[i].ms / base_of[i]->ms, mr = rs[i].act / base_of[i]->act;
        if (isfinite(tr) && isfinite(mr))
          label(&s, &p, &pl, avoid, navoid, zt_cli_svg_px(&p, tr), zt_cli_svg_py(&p, mr), rs[i].mode,
                base_of[i] == &rs[i] ? "#333" : colors[group_of[i] % 6]); /* none: every group's, at (1, 1) */
      }
    free(avoid), free(pl.boxes), free(pl.px), free(pl.py), free(pl.text);
    if (!zt_cli_svg_close(&s)) {
      fprintf(stderr, "zt plot: writing '%s' failed\n", out);
      status = 1;
    }
  }
  for (int g = 0; g < ngroups; g++) zt_cli_svg_series_free(&groups[g]);
  free(groups), free(names), free(base_of), free(group_of), free(rs);
  return status;
}
