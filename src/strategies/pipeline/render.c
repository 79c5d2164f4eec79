/* Renderers of a simulated schedule: a text timeline for the terminal and a standalone SVG
 * (one row per rank, a colour per action kind, the microbatch number in each box). Both draw
 * the compute actions only; sends and receives take no time in the simulator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"

static char letter(zt_pipeline_op op) { return "FBWX"[op]; }

static zt_status check_pair(const zt_pipeline_schedule *s, const zt_pipeline_sim *sim) {
  if (sim->ranks != s->ranks)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "the simulation has %d ranks, the schedule %d: simulate this schedule first",
                  sim->ranks, s->ranks);
  for (int r = 0; r < s->ranks; r++)
    if (sim->n[r] != s->n_actions[r])
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "the simulation is of another schedule (rank %d: %d actions, not %d)", r,
                    sim->n[r], s->n_actions[r]);
  return ZT_OK;
}

zt_status zt_pipeline_render_text(const zt_pipeline_schedule *s, const zt_pipeline_sim *sim, int width, char **out) {
  *out = NULL;
  ZT_TRY(check_pair(s, sim));
  if (width <= 0) width = 100;
  double scale = sim->step_time > 0 ? width / sim->step_time : 0;
  char *row = malloc((size_t)width + 1);
  if (!row) return ZT_ERR(ZT_STATUS_OOM, "out of host memory rendering a schedule");
  zt__pp_buf b = {0};
  zt__pp_buf_printf(&b, "%s: %d ranks, %d chunk%s per rank, %d microbatches (F B W = forward, input grads, weight "
                        "grads; X = B and W fused; . = idle)\n",
                    s->name, s->ranks, s->chunks, s->chunks > 1 ? "s" : "", s->microbatches);
  for (int r = 0; r < s->ranks; r++) {
    memset(row, '.', (size_t)width);
    row[width] = '\0';
    for (int i = 0; i < s->n_actions[r]; i++) {
      zt_pipeline_action a = s->actions[r][i];
      if (!zt__pp_is_compute(a.op)) continue;
      int c0 = (int)(sim->start[r][i] * scale + 0.5), c1 = (int)(sim->end[r][i] * scale + 0.5);
      if (c1 <= c0) c1 = c0 + 1;
      if (c0 >= width) c0 = width - 1;
      if (c1 > width) c1 = width;
      char label[24];
      int n = snprintf(label, sizeof label, "%c%d", letter(a.op), a.mb);
      for (int c = c0; c < c1; c++) row[c] = c - c0 < n ? label[c - c0] : '-';
    }
    zt__pp_buf_printf(&b, "rank %2d |%s|\n", r, row);
  }
  free(row);
  return zt__pp_buf_take(&b, out);
}

static const char *const k_fill[4] = {"#4c78a8", "#f58518", "#54a24b", "#b279a2"};
/* The layout: a timeline is its title and SVG_TOP below it a row per rank; SVG_GAP between
 * timelines, 50 for the legend at the bottom. */
enum { SVG_LEFT = 70, SVG_TOP = 44, SVG_ROW = 26, SVG_PLOT_W = 1000, SVG_GAP = 10 };

/* One timeline: its title at y0, a row per rank below it, time scaled by scale. */
static void svg_timeline(zt__pp_buf *b, const zt_pipeline_schedule *s, const zt_pipeline_sim *sim, const char *title,
                         double y0, double scale) {
  const double left = SVG_LEFT, rowh = SVG_ROW, plot_w = SVG_PLOT_W;
  if (title)
    zt__pp_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"14\">%s</text>\n", left, y0 + 20, title);
  else
    zt__pp_buf_printf(b,
                      "<text x=\"%.0f\" y=\"%.0f\" font-size=\"14\">%s: %d ranks, %d microbatches, %d chunk%s per "
                      "rank; step %.4g, bubble rate %.1f%%</text>\n",
                      left, y0 + 20, s->name, s->ranks, s->microbatches, s->chunks, s->chunks > 1 ? "s" : "",
                      sim->step_time, 100 * sim->bubble_rate);
  for (int r = 0; r < s->ranks; r++) {
    double y = y0 + SVG_TOP + r * rowh;
    zt__pp_buf_printf(b, "<text x=\"8\" y=\"%.1f\" font-size=\"12\">rank %d</text>\n", y + rowh * 0.65, r);
    zt__pp_buf_printf(b, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\" fill=\"#f2f2f2\"/>\n", left, y + 2,
                      plot_w, rowh - 4);
    for (int i = 0; i < s->n_actions[r]; i++) {
      zt_pipeline_action a = s->actions[r][i];
      if (!zt__pp_is_compute(a.op)) continue;
      double x0 = left + sim->start[r][i] * scale, bw = (sim->end[r][i] - sim->start[r][i]) * scale;
      /* a V rank's second chunk is drawn lighter, so the two directions of the V read apart */
      bool second = s->chunks > 1 && zt__pp_stage_chunk(s, a.stage) % 2 == 1;
      zt__pp_buf_printf(b,
                        "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"%s stroke=\"white\" "
                        "stroke-width=\"0.5\"><title>%c stage %d microbatch %d: %.4g to %.4g</title></rect>\n",
                        x0, y + 2, bw, rowh - 4, k_fill[a.op], second ? " fill-opacity=\"0.6\"" : "", letter(a.op),
                        a.stage, a.mb, sim->start[r][i], sim->end[r][i]);
      if (bw >= 7)
        zt__pp_buf_printf(b,
                          "<text x=\"%.2f\" y=\"%.1f\" font-size=\"%.0f\" fill=\"white\" text-anchor=\"middle\">%d</text>\n",
                          x0 + bw / 2, y + rowh * 0.66, bw >= 14 ? 11.0 : 8.0, a.mb);
    }
  }
}

zt_status zt_pipeline_render_svg_stack(int n, const zt_pipeline_schedule *const *s, const zt_pipeline_sim *const *sim,
                                       const char *const *titles, char **out) {
  *out = NULL;
  if (n < 1 || !s || !sim) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_pipeline_render_svg_stack: nothing to draw");
  double tmax = 0, h = 0;
  bool chunked = false;
  for (int k = 0; k < n; k++) {
    ZT_TRY(check_pair(s[k], sim[k]));
    if (sim[k]->step_time > tmax) tmax = sim[k]->step_time;
    h += SVG_TOP + SVG_ROW * s[k]->ranks + (k ? SVG_GAP : 0);
    chunked |= s[k]->chunks > 1;
  }
  static const char *const kind[4] = {"F (forward)", "B (input grads)", "W (weight grads)", "BW (full backward)"};
  double scale = tmax > 0 ? SVG_PLOT_W / tmax : 0, w = SVG_LEFT + SVG_PLOT_W + 20;
  h += 50;
  zt__pp_buf b = {0};
  zt__pp_buf_printf(&b,
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" "
                    "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                    w, h, w, h);
  double y0 = 0;
  for (int k = 0; k < n; k++) {
    svg_timeline(&b, s[k], sim[k], titles ? titles[k] : NULL, y0, scale);
    y0 += SVG_TOP + SVG_ROW * s[k]->ranks + SVG_GAP;
  }
  double ly = h - 28; /* the legend, under the last timeline */
  for (int k = 0; k < 4; k++) {
    double lx = SVG_LEFT + k * 200;
    zt__pp_buf_printf(&b,
                      "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\" "
                      "font-size=\"12\">%s</text>\n",
                      lx, ly - 11, k_fill[k], lx + 20, ly, kind[k]);
  }
  if (chunked) /* the shading of the second chunk (above) needs saying */
    zt__pp_buf_printf(&b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\">lighter: the rank's second chunk</text>\n",
                      (double)SVG_LEFT + 4 * 200 - 30, ly);
  zt__pp_buf_printf(&b, "</svg>\n");
  return zt__pp_buf_take(&b, out);
}

zt_status zt_pipeline_render_svg(const zt_pipeline_schedule *s, const zt_pipeline_sim *sim, char **out) {
  return zt_pipeline_render_svg_stack(1, &s, &sim, NULL, out);
}
