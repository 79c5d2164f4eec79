/* SVG drawing for the zt plot commands: pictures, escaped text, axes with ticks at round
 * values, series and legends. Coordinates are picture units (the viewBox); every text
 * goes through one escaping writer, and every box sized for text uses the width bound
 * of zt_cli_svg_text_width. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "svg.h"

static const char *const anchors[] = {"start", "middle", "end"};

/* Length of the UTF-8 sequence at p, 0 if it is not a valid one. */
static int utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  for (int i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0) || (c == 0xF0 && p[1] < 0x90) ||
      (c == 0xF4 && p[1] >= 0x90))
    return 0; /* overlong, surrogate, or past U+10FFFF */
  return n;
}

static void put_escaped(FILE *f, const char *text) {
  for (const unsigned char *p = (const unsigned char *)text; *p;) {
    int n = utf8_len(p);
    if (n > 1)
      fwrite(p, 1, (size_t)n, f);
    else if (!n)
      fputc('?', f), n = 1;
    else if (*p == '&')
      fputs("&amp;", f);
    else if (*p == '<')
      fputs("&lt;", f);
    else if (*p == '>')
      fputs("&gt;", f);
    else if (*p == '\'')
      fputs("&apos;", f);
    else if (*p == '"')
      fputs("&quot;", f);
    else
      fputc(*p < 0x20 ? '?' : *p, f); /* control characters are not XML */
    p += n;
  }
}

/* Em widths chosen at or above those of DejaVu Sans (the widest common sans-serif;
 * Helvetica and Arial are narrower), so the sum bounds the drawn width. */
static double char_em(const unsigned char *p, int n) {
  if (n != 1) return 1.0;
  if (strchr("mwMW@%", *p)) return 1.0;
  if (strchr("ijlt.,:;'|!() ", *p)) return 0.45;
  if (strchr("=+<>~#&^*", *p)) return 0.86;
  if (*p >= 'A' && *p <= 'Z') return 0.82;
  return 0.68;
}

double zt_cli_svg_text_width(const char *text, double size) {
  double em = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p;) {
    int n = utf8_len(p);
    em += char_em(p, n);
    p += n ? n : 1;
  }
  return em * size;
}

/* text cut to whole characters and ended with "..." so that it fits in maxw; in buf. */
static const char *fit_text(const char *text, double size, double maxw, char *buf, size_t cap) {
  if (zt_cli_svg_text_width(text, size) <= maxw) return text;
  double w = zt_cli_svg_text_width("...", size);
  size_t used = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p;) {
    int n = utf8_len(p);
    size_t k = n ? (size_t)n : 1;
    w += char_em(p, n) * size;
    if (w > maxw || used + k + 4 > cap) break;
    memcpy(buf + used, p, k);
    used += k, p += k;
  }
  memcpy(buf + used, "...", 4);
  return buf;
}

/* cls: the class attribute (NULL for none) that lets tests find ticks and titles */
static void text_at(zt_cli_svg *s, double x, double y, double size, zt_cli_svg_anchor anchor, const char *color,
                    bool vertical, const char *cls, const char *text) {
  fputs("<text", s->f);
  if (cls) fprintf(s->f, " class='%s'", cls);
  if (vertical)
    fprintf(s->f, " transform='translate(%.1f %.1f) rotate(-90)'", x, y);
  else
    fprintf(s->f, " x='%.1f' y='%.1f'", x, y);
  fprintf(s->f, " font-size='%g' text-anchor='%s' fill='%s'>", size, anchors[anchor], color);
  put_escaped(s->f, text);
  fputs("</text>\n", s->f);
}

void zt_cli_svg_text(zt_cli_svg *s, double x, double y, double size, zt_cli_svg_anchor anchor, const char *color,
                     const char *text) {
  text_at(s, x, y, size, anchor, color, false, NULL, text);
}

bool zt_cli_svg_box_overlap(zt_cli_svg_box a, zt_cli_svg_box b) {
  return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}

bool zt_cli_svg_open(zt_cli_svg *s, const char *path, double w, double h, const char *title) {
  if (!(s->f = fopen(path, "w"))) return false;
  s->w = w, s->h = h;
  fprintf(s->f,
          "<?xml version='1.0' encoding='UTF-8'?>\n"
          "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' viewBox='0 0 %g %g' "
          "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'>\n"
          "<rect width='%g' height='%g' fill='white'/>\n",
          w, h, w, h, w, h);
  char buf[512];
  zt_cli_svg_text(s, 16, 26, 15, ZT_CLI_SVG_ANCHOR_START, "#111", fit_text(title, 15, w - 32, buf, sizeof buf));
  return true;
}

bool zt_cli_svg_close(zt_cli_svg *s) {
  fputs("</svg>\n", s->f);
  bool ok = !ferror(s->f);
  return fclose(s->f) == 0 && ok;
}

/* 1, 2 or 5 x 10^k near raw (> 0). */
static double nice_step(double raw) {
  double m = pow(10, floor(log10(raw))), f = raw / m;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * m;
}

zt_cli_svg_axis zt_cli_svg_axis_fit(double lo, double hi, int ticks, zt_cli_svg_fit fit, zt_cli_svg_unit unit,
                                    const char *title) {
  zt_cli_svg_axis a = {
      .ticks = ticks, .unit = unit, .title = title, .div = 1, .suffix = unit == ZT_CLI_SVG_UNIT_RATIO ? "x" : ""};
  if (!(lo <= hi)) lo = 0, hi = 0;
  bool from_zero = fit == ZT_CLI_SVG_FIT_FROM_ZERO && lo >= 0;
  if (from_zero) lo = 0;
  if (hi == lo) {
    double pad = lo ? fabs(lo) * 0.1 : unit == ZT_CLI_SVG_UNIT_BYTES ? 1024 : 1;
    if (from_zero)
      hi += pad;
    else
      lo -= pad, hi += pad;
  } else if (fit != ZT_CLI_SVG_FIT_TIGHT) {
    double margin = (hi - lo) * 0.03;
    if (!from_zero) lo -= margin;
    hi += margin;
  }
  double mag = fmax(fabs(lo), fabs(hi));
  if (unit == ZT_CLI_SVG_UNIT_BYTES) {
    static const char *const units[] = {" B", " KiB", " MiB", " GiB", " TiB"};
    int k = 0;
    while (mag >= 1024 && k < 4) mag /= 1024, a.div *= 1024, k++;
    a.suffix = units[k];
  } else if ((unit == ZT_CLI_SVG_UNIT_PLAIN || unit == ZT_CLI_SVG_UNIT_COUNT) && mag >= 1e4) {
    static const char *const si[] = {"k", "M", "G", "T"};
    int k = 0;
    for (a.div = 1e3; mag >= 1e3 * a.div * 10 && k < 3; k++) a.div *= 1e3;
    a.suffix = si[k];
  }
  double step_u = nice_step((hi - lo) / a.div / (ticks > 0 ? ticks : 5));
  if ((unit == ZT_CLI_SVG_UNIT_BYTES || unit == ZT_CLI_SVG_UNIT_COUNT) && a.div == 1 && step_u < 1)
    step_u = 1; /* whole */
  a.step = step_u * a.div;
  a.lo = floor(lo / a.step + 1e-9) * a.step;
  a.hi = ceil(hi / a.step - 1e-9) * a.step;
  a.decimals = (int)fmax(0, -floor(log10(step_u) + 1e-9));
  return a;
}

const char *zt_cli_svg_axis_label(const zt_cli_svg_axis *a, double v, char *buf, size_t cap) {
  if (fabs(v) < a->step * 1e-6) { /* 0 reads as 0 in every unit (not "-0", "0k" or "0 MiB") */
    snprintf(buf, cap, "0");
    return buf;
  }
  snprintf(buf, cap, "%.*f%s", a->decimals, v / a->div, a->suffix);
  return buf;
}

static int tick_count(const zt_cli_svg_axis *a) {
  double n = round((a->hi - a->lo) / a->step);
  return n < 1 ? 1 : n > 50 ? 50 : (int)n;
}

double zt_cli_svg_px(const zt_cli_svg_panel *p, double x) {
  return p->area.x + (x - p->x.lo) / (p->x.hi - p->x.lo) * p->area.w;
}

double zt_cli_svg_py(const zt_cli_svg_panel *p, double y) {
  return p->area.y + p->area.h - (y - p->y.lo) / (p->y.hi - p->y.lo) * p->area.h;
}

void zt_cli_svg_panel_axes(zt_cli_svg *s, const zt_cli_svg_panel *p) {
  const zt_cli_svg_box *a = &p->area;
  char buf[64];
  if (p->title) text_at(s, a->x, a->y - 10, 13, ZT_CLI_SVG_ANCHOR_START, "#222", false, "panel-title", p->title);
  double widest = 0;
  for (int i = 0, n = tick_count(&p->y); i <= n; i++) {
    double v = p->y.lo + i * p->y.step, y = zt_cli_svg_py(p, v);
    fprintf(s->f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#e8e8e8'/>", a->x, y, a->x + a->w, y);
    fprintf(s->f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#888'/>\n", a->x - 4, y, a->x, y);
    zt_cli_svg_axis_label(&p->y, v, buf, sizeof buf);
    text_at(s, a->x - 7, y + 4, 11, ZT_CLI_SVG_ANCHOR_END, "#333", false, "tick-y", buf);
    widest = fmax(widest, zt_cli_svg_text_width(buf, 11));
  }
  for (int i = 0, n = tick_count(&p->x); i <= n; i++) {
    double v = p->x.lo + i * p->x.step, x = zt_cli_svg_px(p, v);
    fprintf(s->f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#e8e8e8'/>", x, a->y, x, a->y + a->h);
    fprintf(s->f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#888'/>\n", x, a->y + a->h, x,
            a->y + a->h + 4);
    text_at(s, x, a->y + a->h + 17, 11, ZT_CLI_SVG_ANCHOR_MIDDLE, "#333", false, "tick-x",
            zt_cli_svg_axis_label(&p->x, v, buf, sizeof buf));
  }
  fprintf(s->f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#888'/>\n", a->x, a->y, a->w,
          a->h);
  if (p->x.title)
    text_at(s, a->x + a->w / 2, a->y + a->h + 36, 12, ZT_CLI_SVG_ANCHOR_MIDDLE, "#222", false, "axis-title",
            p->x.title);
  if (p->y.title)
    text_at(s, a->x - 7 - widest - 9, a->y + a->h / 2, 12, ZT_CLI_SVG_ANCHOR_MIDDLE, "#222", true, "axis-title",
            p->y.title);
}

static void append(zt_cli_svg_series *s, double x, double y) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    double *nx = realloc(s->x, sizeof *nx * (size_t)s->cap);
    if (nx) s->x = nx;
    double *ny = nx ? realloc(s->y, sizeof *ny * (size_t)s->cap) : NULL;
    if (!ny) {
      fprintf(stderr, "zt plot: out of memory\n");
      abort();
    }
    s->y = ny;
  }
  s->x[s->n] = x, s->y[s->n] = y, s->n++;
}

bool zt_cli_svg_series_push(zt_cli_svg_series *s, double x, double y) {
  if (!isfinite(x) || !isfinite(y)) return false;
  append(s, x, y);
  return true;
}

void zt_cli_svg_series_break(zt_cli_svg_series *s) {
  if (s->n && !isnan(s->x[s->n - 1])) append(s, NAN, NAN);
}

void zt_cli_svg_series_free(zt_cli_svg_series *s) {
  free(s->x), free(s->y);
  s->x = s->y = NULL, s->n = s->cap = 0;
}

void zt_cli_svg_series_range(const zt_cli_svg_series *ss, int n, double *x0, double *x1, double *y0, double *y1) {
  for (int k = 0; k < n; k++)
    for (int i = 0; i < ss[k].n; i++) {
      if (isnan(ss[k].x[i])) continue;
      *x0 = fmin(*x0, ss[k].x[i]), *x1 = fmax(*x1, ss[k].x[i]);
      *y0 = fmin(*y0, ss[k].y[i]), *y1 = fmax(*y1, ss[k].y[i]);
    }
}

static void mark(zt_cli_svg *s, zt_cli_svg_mark m, double x, double y, double r, const char *color) {
  const char *edge = "stroke='white' stroke-width='0.8'";
  switch (m) {
  case ZT_CLI_SVG_MARK_SQUARE:
    fprintf(s->f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s' %s/>\n", x - r * 0.9, y - r * 0.9,
            r * 1.8, r * 1.8, color, edge);
    break;
  case ZT_CLI_SVG_MARK_TRIANGLE:
    fprintf(s->f, "<polygon points='%.1f,%.1f %.1f,%.1f %.1f,%.1f' fill='%s' %s/>\n", x, y - r * 1.2, x - r * 1.1,
            y + r * 0.8, x + r * 1.1, y + r * 0.8, color, edge);
    break;
  case ZT_CLI_SVG_MARK_DIAMOND:
    fprintf(s->f, "<polygon points='%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f' fill='%s' %s/>\n", x, y - r * 1.2,
            x + r * 1.2, y, x, y + r * 1.2, x - r * 1.2, y, color, edge);
    break;
  case ZT_CLI_SVG_MARK_CIRCLE:
    fprintf(s->f, "<circle cx='%.1f' cy='%.1f' r='%.1f' fill='%s' %s/>\n", x, y, r, color, edge);
    break;
  }
}

static double mark_radius(const zt_cli_svg_series *s) { return s->style == ZT_CLI_SVG_STYLE_MARKERS ? 4.5 : 3.2; }

/* The run of points from i up to the next break or the end; its end index. */
static int run_end(const zt_cli_svg_series *c, int i) {
  while (i < c->n && !isnan(c->x[i])) i++;
  return i;
}

/* Points i..e-1 of c for a polyline. Of the points that fall in one unit of x it writes
 * the first, the lowest, the highest and the last, in order: the same line, drawn, but
 * a long run's file stays small. */
static void polyline_points(zt_cli_svg *s, const zt_cli_svg_panel *p, const zt_cli_svg_series *c, int i, int e) {
  bool first = true;
  for (int j = i; j < e;) {
    double col = floor(zt_cli_svg_px(p, c->x[j]));
    int k = j, lo = j, hi = j;
    for (; k < e && floor(zt_cli_svg_px(p, c->x[k])) == col; k++) {
      if (c->y[k] < c->y[lo]) lo = k;
      if (c->y[k] > c->y[hi]) hi = k;
    }
    int pick[4] = {j, lo < hi ? lo : hi, lo < hi ? hi : lo, k - 1};
    for (int q = 0; q < 4; q++) {
      if (q && pick[q] == pick[q - 1]) continue;
      fprintf(s->f, "%s%.1f,%.1f", first ? "" : " ", zt_cli_svg_px(p, c->x[pick[q]]), zt_cli_svg_py(p, c->y[pick[q]]));
      first = false;
    }
    j = k;
  }
}

void zt_cli_svg_panel_series(zt_cli_svg *s, const zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n) {
  for (int k = 0; k < n; k++) {
    const zt_cli_svg_series *c = &ss[k];
    if (!c->n) continue;
    fputs("<g class='series'>", s->f); /* named by a title: a tooltip in browsers */
    if (c->name) {
      fputs("<title>", s->f);
      put_escaped(s->f, c->name);
      fputs("</title>", s->f);
    }
    fputs("\n", s->f);
    for (int i = 0, e; i < c->n; i = e + 1) {
      e = run_end(c, i);
      if (c->style != ZT_CLI_SVG_STYLE_MARKERS && e - i > 1) {
        fprintf(s->f, "<polyline fill='none' stroke='%s' stroke-width='1.6' stroke-linejoin='round'", c->color);
        if (c->dash) fprintf(s->f, " stroke-dasharray='%s'", c->dash);
        fputs(" points='", s->f);
        polyline_points(s, p, c, i, e);
        fputs("'/>\n", s->f);
      }
      if (c->style != ZT_CLI_SVG_STYLE_LINE || e - i == 1) /* a lone point of a line shows as a marker */
        for (int j = i; j < e; j++)
          mark(s, c->mark, zt_cli_svg_px(p, c->x[j]), zt_cli_svg_py(p, c->y[j]), mark_radius(c), c->color);
    }
    fputs("</g>\n", s->f);
  }
}

static bool inside(zt_cli_svg_box b, double x, double y) {
  return x >= b.x && x <= b.x + b.w && y >= b.y && y <= b.y + b.h;
}

/* How much of the drawn series box b would hide: markers, and points every few units
 * along each line segment. */
static double hidden(const zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n, zt_cli_svg_box b) {
  double count = 0;
  b.x -= 3, b.y -= 3, b.w += 6, b.h += 6;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < ss[k].n; i++) {
      if (isnan(ss[k].x[i])) continue;
      double x = zt_cli_svg_px(p, ss[k].x[i]), y = zt_cli_svg_py(p, ss[k].y[i]);
      count += inside(b, x, y) ? 4 : 0;
      if (!i || isnan(ss[k].x[i - 1]) || ss[k].style == ZT_CLI_SVG_STYLE_MARKERS) continue;
      double x0 = zt_cli_svg_px(p, ss[k].x[i - 1]), y0 = zt_cli_svg_py(p, ss[k].y[i - 1]);
      if (fmax(x, x0) < b.x || fmin(x, x0) > b.x + b.w || fmax(y, y0) < b.y || fmin(y, y0) > b.y + b.h) continue;
      int steps = (int)fmin(1000, ceil(hypot(x - x0, y - y0) / 3));
      for (int j = 1; j < steps; j++) count += inside(b, x0 + (x - x0) * j / steps, y0 + (y - y0) * j / steps);
    }
  return count;
}

enum { LEGEND_ROW = 17, LEGEND_PAD = 7, LEGEND_SWATCH = 24, LEGEND_GAP = 14, LEGEND_INSET = 8 };
static const double legend_font = 11;

/* The legend's layout: entries left to right, then down, in `cols` columns. */
typedef struct legend_shape {
  int entries, cols, rows;
  double colw, w, h;
} legend_shape;

/* The legend in `cols` columns (0: as many as fit in the area's width, at least one). */
static legend_shape legend_shape_of(const zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n, int cols) {
  legend_shape l = {0};
  double textw = 0;
  for (int k = 0; k < n; k++)
    if (ss[k].n && ss[k].name) l.entries++, textw = fmax(textw, zt_cli_svg_text_width(ss[k].name, legend_font));
  if (!l.entries) return l;
  l.colw = LEGEND_SWATCH + 6 + textw;
  int fit = (int)floor((p->area.w - 2 * LEGEND_INSET - 2 * LEGEND_PAD + LEGEND_GAP) / (l.colw + LEGEND_GAP));
  fit = fit < 1 ? 1 : fit > l.entries ? l.entries : fit;
  l.cols = cols < 1 || cols > fit ? fit : cols;
  l.rows = (l.entries + l.cols - 1) / l.cols;
  l.cols = (l.entries + l.rows - 1) / l.rows; /* no empty column */
  l.w = 2 * LEGEND_PAD + l.cols * l.colw + (l.cols - 1) * LEGEND_GAP;
  l.h = 2 * LEGEND_PAD + l.rows * LEGEND_ROW - 4;
  return l;
}

/* The layout and corner (top right, top left, bottom right, bottom left) of the legend
 * that hide the least, fewer columns first among equals; how much they hide in *hid. */
static zt_cli_svg_box legend_place(const zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n, legend_shape *shape,
                                   double *hid) {
  const zt_cli_svg_box *a = &p->area;
  zt_cli_svg_box best = {0};
  *hid = INFINITY;
  int most = legend_shape_of(p, ss, n, 0).cols;
  for (int cols = 1; cols <= most; cols++) {
    legend_shape l = legend_shape_of(p, ss, n, cols);
    if (l.cols != cols) continue; /* same rows as a narrower one */
    double xs[2] = {a->x + a->w - LEGEND_INSET - l.w, a->x + LEGEND_INSET};
    double ys[2] = {a->y + LEGEND_INSET, a->y + a->h - LEGEND_INSET - l.h};
    for (int c = 0; c < 4; c++) {
      zt_cli_svg_box b = {xs[c % 2], ys[c / 2], l.w, l.h};
      double h = b.h > a->h ? INFINITY : hidden(p, ss, n, b);
      if (h < *hid || best.w == 0) *hid = h, best = b, *shape = l;
    }
  }
  return best;
}

void zt_cli_svg_panel_legend_room(zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n) {
  legend_shape l = legend_shape_of(p, ss, n, 0);
  if (!l.entries) return;
  double hid, hi = p->y.hi, top = p->y.hi + (p->y.hi - p->y.lo);
  legend_place(p, ss, n, &l, &hid);
  while (hid > 0 && p->y.hi + p->y.step <= top * (1 + 1e-9)) {
    p->y.hi += p->y.step;
    legend_place(p, ss, n, &l, &hid);
  }
  if (p->y.hi != hi)
    p->y = zt_cli_svg_axis_fit(p->y.lo, p->y.hi, p->y.ticks, ZT_CLI_SVG_FIT_TIGHT, p->y.unit, p->y.title);
}

zt_cli_svg_box zt_cli_svg_panel_legend(zt_cli_svg *s, const zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n) {
  legend_shape l = legend_shape_of(p, ss, n, 0);
  if (!l.entries) return (zt_cli_svg_box){0, 0, 0, 0};
  double hid;
  zt_cli_svg_box b = legend_place(p, ss, n, &l, &hid);
  /* a legend wider or taller than the area still stays inside the picture */
  b.x = fmax(0, fmin(b.x, s->w - l.w)), b.y = fmax(0, fmin(b.y, s->h - l.h));
  fprintf(s->f,
          "<g class='legend'><rect class='legend' x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='white' "
          "fill-opacity='0.92' stroke='#bbb' rx='3'/>\n",
          b.x, b.y, l.w, l.h);
  int e = 0;
  for (int k = 0; k < n; k++) {
    const zt_cli_svg_series *c = &ss[k];
    if (!c->n || !c->name) continue;
    double x = b.x + LEGEND_PAD + (e % l.cols) * (l.colw + LEGEND_GAP),
           y = b.y + LEGEND_PAD + (e / l.cols) * LEGEND_ROW + 6.5;
    e++;
    if (c->style != ZT_CLI_SVG_STYLE_MARKERS)
      fprintf(s->f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='2'%s%s%s/>", x, y,
              x + LEGEND_SWATCH, y, c->color, c->dash ? " stroke-dasharray='" : "", c->dash ? c->dash : "",
              c->dash ? "'" : "");
    if (c->style != ZT_CLI_SVG_STYLE_LINE || c->n == 1)
      mark(s, c->mark, x + LEGEND_SWATCH / 2.0, y, mark_radius(c), c->color);
    zt_cli_svg_text(s, x + LEGEND_SWATCH + 6, y + 4, legend_font, ZT_CLI_SVG_ANCHOR_START, "#222", c->name);
  }
  fputs("</g>\n", s->f);
  return b;
}

void zt_cli_svg_panel_note(zt_cli_svg *s, const zt_cli_svg_panel *p, const char *text) {
  zt_cli_svg_text(s, p->area.x + p->area.w / 2, p->area.y + p->area.h / 2, 12, ZT_CLI_SVG_ANCHOR_MIDDLE, "#888", text);
}
