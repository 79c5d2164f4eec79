/* zt plot: reads a --metrics JSON-lines file and draws two SVG panels: train and
 * validation loss against step, and peak bytes per memory tag against step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct series {
  double *x, *y;
  int n, cap;
} series;

static void push(series *s, double x, double y) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 256;
    s->x = realloc(s->x, sizeof *s->x * (size_t)s->cap);
    s->y = realloc(s->y, sizeof *s->y * (size_t)s->cap);
  }
  s->x[s->n] = x, s->y[s->n] = y, s->n++;
}

/* Number after "key": in line (searching from `from`); NAN if absent. */
static double field(const char *from, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(from, pat);
  return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static void panel(FILE *f, int ox, int oy, int w, int h, const char *title, series *ss, const char *const *names,
                  const char *const *colors, int n, bool bytes) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < ss[k].n; i++) {
      x0 = fmin(x0, ss[k].x[i]), x1 = fmax(x1, ss[k].x[i]);
      y0 = fmin(y0, ss[k].y[i]), y1 = fmax(y1, ss[k].y[i]);
    }
  if (!(x1 > x0)) x1 = x0 + 1;
  if (bytes) y0 = 0;
  if (!(y1 > y0)) y1 = y0 + 1;
  fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#888'/>\n", ox, oy, w, h);
  fprintf(f, "<text x='%d' y='%d' font-size='14'>%s</text>\n", ox, oy - 8, title);
  char a[32], b[32];
  if (bytes) zt_cli_bytes(y1, a), zt_cli_bytes(y0, b);
  else snprintf(a, sizeof a, "%.3g", y1), snprintf(b, sizeof b, "%.3g", y0);
  fprintf(f, "<text x='%d' y='%d' font-size='11' text-anchor='end'>%s</text>\n", ox - 4, oy + 10, a);
  fprintf(f, "<text x='%d' y='%d' font-size='11' text-anchor='end'>%s</text>\n", ox - 4, oy + h, b);
  fprintf(f, "<text x='%d' y='%d' font-size='11'>step %.0f</text>\n", ox, oy + h + 14, x0);
  fprintf(f, "<text x='%d' y='%d' font-size='11' text-anchor='end'>step %.0f</text>\n", ox + w, oy + h + 14, x1);
  for (int k = 0; k < n; k++) {
    if (!ss[k].n) continue;
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", colors[k]);
    for (int i = 0; i < ss[k].n; i++)
      fprintf(f, "%.1f,%.1f ", ox + (ss[k].x[i] - x0) / (x1 - x0) * w, oy + h - (ss[k].y[i] - y0) / (y1 - y0) * h);
    fprintf(f, "'/>\n<text x='%d' y='%d' font-size='11' fill='%s'>%s</text>\n", ox + w + 8, oy + 14 + 14 * k, colors[k],
            names[k]);
  }
}

int zt_cmd_plot(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  bool recompute = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: zt plot METRICS.jsonl --out PLOT.svg\n"
             "       zt plot --recompute BENCH.jsonl --out PLOT.svg   (bench/recompute.sh results: ratios to none\n"
             "                                                        as JSON lines, memory vs time overhead)\n");
      return 0;
    }
    if (!strcmp(argv[i], "--recompute")) recompute = true;
    else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!in && strncmp(argv[i], "--", 2)) in = argv[i];
    else {
      fprintf(stderr, "zt plot: unexpected argument '%s' (usage: zt plot METRICS.jsonl --out PLOT.svg)\n", argv[i]);
      return 2;
    }
  }
  if (!in || !out) {
    fprintf(stderr, "zt plot: usage: zt plot METRICS.jsonl --out PLOT.svg\n");
    return 2;
  }
  if (recompute) return zt_cli_plot_recompute(in, out);
  FILE *f = fopen(in, "r");
  if (!f) {
    fprintf(stderr, "zt plot: cannot open '%s'\n", in);
    return 1;
  }
  enum { NT = ZT_MEM_TAG_COUNT };
  series loss[2] = {0}, mem[NT] = {0};
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0;
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    double step = field(line, "step"), l = field(line, "loss");
    if (isnan(step) || isnan(l)) {
      fprintf(stderr, "zt plot: %s:%d is not a metrics line (no step/loss)\n", in, lineno);
      fclose(f);
      free(line);
      return 1;
    }
    push(&loss[0], step, l);
    double v = field(line, "val_loss");
    if (!isnan(v)) push(&loss[1], step, v);
    for (int t = 0; t < NT; t++) {
      char key[32];
      snprintf(key, sizeof key, "\"%s\":{", zt_mem_tag_name((zt_mem_tag)t));
      const char *p = strstr(line, key);
      if (p) push(&mem[t], step, field(p, "peak"));
    }
  }
  fclose(f);
  free(line);
  FILE *o = fopen(out, "w");
  if (!o) {
    fprintf(stderr, "zt plot: cannot write '%s'\n", out);
    return 1;
  }
  fprintf(o, "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='640' font-family='sans-serif'>\n"
             "<rect width='100%%' height='100%%' fill='white'/>\n");
  const char *ln[] = {"train loss", "val loss"}, *lc[] = {"#1f77b4", "#d62728"};
  panel(o, 80, 40, 680, 240, "loss", loss, ln, lc, 2, false);
  const char *mn[NT], *mc[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
  for (int t = 0; t < NT; t++) mn[t] = zt_mem_tag_name((zt_mem_tag)t);
  panel(o, 80, 350, 680, 240, "peak memory by tag", mem, mn, mc, NT, true);
  fprintf(o, "</svg>\n");
  fclose(o);
  for (int k = 0; k < 2; k++) free(loss[k].x), free(loss[k].y);
  for (int t = 0; t < NT; t++) free(mem[t].x), free(mem[t].y);
  printf("zt plot: wrote %s (%d steps)\n", out, loss[0].n);
  return 0;
}
