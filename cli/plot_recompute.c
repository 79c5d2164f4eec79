/* zt plot --recompute: reads the JSON lines of bench/recompute.sh (zt bench step runs,
 * grouped by model size, batch and length, with a `none` run per group), prints each
 * run's ratios to its group's none (step time, peak ACTIVATION, peak RSS; budget runs
 * also measured peak / budget) as JSON lines, and draws activation memory against time
 * overhead as SVG. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct run {
  double params, batch, seq, ms, act, rss, budget;
  char mode[16];
} run;

static double num(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static void str(const char *line, const char *key, char *buf, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", key);
  const char *p = strstr(line, pat);
  buf[0] = 0;
  if (!p) return;
  p += strlen(pat);
  size_t n = 0;
  while (p[n] && p[n] != '"' && n + 1 < cap) n++;
  memcpy(buf, p, n);
  buf[n] = 0;
}

static bool same_group(const run *a, const run *b) {
  return a->params == b->params && a->batch == b->batch && a->seq == b->seq;
}

int zt_cli_plot_recompute(const char *in, const char *out) {
  FILE *f = fopen(in, "r");
  if (!f) {
    fprintf(stderr, "zt plot: cannot open '%s'\n", in);
    return 1;
  }
  run *rs = NULL;
  int n = 0, cap = 0, lineno = 0;
  char *line = NULL;
  size_t lcap = 0;
  while (getline(&line, &lcap, f) > 0) {
    lineno++;
    run r = {num(line, "params"), num(line, "batch"), num(line, "seq"), num(line, "ms_per_step"),
             num(line, "ACTIVATION"), num(line, "peak_rss_bytes"), num(line, "recompute_budget"), ""};
    str(line, "recompute", r.mode, sizeof r.mode);
    if (isnan(r.params) || isnan(r.ms) || isnan(r.act) || !r.mode[0]) {
      fprintf(stderr, "zt plot: %s:%d is not a zt bench step line (params, ms_per_step, ACTIVATION, recompute)\n", in,
              lineno);
      fclose(f);
      free(line);
      free(rs);
      return 1;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      rs = realloc(rs, sizeof *rs * (size_t)cap);
    }
    rs[n++] = r;
  }
  fclose(f);
  free(line);
  FILE *o = fopen(out, "w");
  if (!o) {
    fprintf(stderr, "zt plot: cannot write '%s'\n", out);
    free(rs);
    return 1;
  }
  enum { W = 760, H = 480, OX = 90, OY = 40, PW = 520, PH = 380 };
  double xmin = 1.0, xmax = 1.5; /* time ratio axis: noise can put a run a little under none */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (!strcmp(rs[j].mode, "none") && same_group(&rs[i], &rs[j])) {
        double r = rs[i].ms / rs[j].ms;
        if (r > xmax) xmax = ceil(r * 10) / 10;
        if (r < xmin) xmin = floor(r * 20) / 20;
      }
  fprintf(o, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif'>\n"
             "<rect width='100%%' height='100%%' fill='white'/>\n"
             "<text x='%d' y='24' font-size='15'>activation recomputation: peak ACTIVATION vs step time (ratios to none)</text>\n"
             "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#888'/>\n",
          W, H, OX, OX, OY, PW, PH);
  for (int k = 0; k <= 5; k++) { /* grid: memory 0..1, time 1..xmax */
    double y = OY + PH - k / 5.0 * PH, x = OX + k / 5.0 * PW;
    fprintf(o, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#eee'/><text x='%d' y='%.1f' font-size='11' "
               "text-anchor='end'>%.1f</text>\n",
            OX, y, OX + PW, y, OX - 4, y + 4, k / 5.0);
    fprintf(o, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#eee'/><text x='%.1f' y='%d' font-size='11' "
               "text-anchor='middle'>%.2fx</text>\n",
            x, OY, x, OY + PH, x, OY + PH + 14, xmin + k / 5.0 * (xmax - xmin));
  }
  fprintf(o, "<text x='%d' y='%d' font-size='12' text-anchor='middle'>step time / none</text>\n", OX + PW / 2, OY + PH + 32);
  fprintf(o, "<text x='20' y='%d' font-size='12' transform='rotate(-90 20 %d)' text-anchor='middle'>peak ACTIVATION / none</text>\n",
          OY + PH / 2, OY + PH / 2);
  static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  int group = 0, status = 0;
  for (int j = 0; j < n; j++) {
    if (strcmp(rs[j].mode, "none")) continue;
    const run *base = &rs[j];
    const char *color = colors[group % 6];
    char label[64];
    snprintf(label, sizeof label, "%.0fM params, B=%.0f, T=%.0f", base->params / 1e6, base->batch, base->seq);
    fprintf(o, "<text x='%d' y='%d' font-size='12' fill='%s'>%s</text>\n", OX + PW + 12, OY + 16 + 18 * group, color,
            label);
    for (int i = 0; i < n; i++) {
      if (!same_group(&rs[i], base)) continue;
      const run *r = &rs[i];
      double tr = r->ms / base->ms, mr = r->act / base->act, rr = r->rss / base->rss;
      printf("{\"group\":\"%s\",\"mode\":\"%s\",\"time_ratio\":%.3f,\"act_ratio\":%.3f,\"rss_ratio\":%.3f", label,
             r->mode, tr, mr, rr);
      if (r->budget > 0) printf(",\"budget\":%.0f,\"act_over_budget\":%.3f", r->budget, r->act / r->budget);
      printf("}\n");
      double x = OX + (tr - xmin) / (xmax - xmin) * PW, y = OY + PH - mr * PH;
      fprintf(o, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'/><text x='%.1f' y='%.1f' font-size='10' fill='%s'>%s</text>\n",
              x, y, color, x + 6, y - 4, color, r->mode);
    }
    group++;
  }
  if (!group) {
    fprintf(stderr, "zt plot: %s has no run with --recompute none to take ratios against\n", in);
    status = 1;
  }
  fprintf(o, "</svg>\n");
  fclose(o);
  free(rs);
  return status;
}
