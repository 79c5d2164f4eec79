/* What the zt plot commands (cli/plot.c, cli/plot_recompute.c, cli/plot_plan.c) share: reading members of
 * JSON-lines records (cli/svg_jsonl.c) and drawing SVG panels (cli/svg.c) with ticks at
 * round values (1, 2, 5 x 10^k; byte axes in KiB/MiB/GiB), gridlines, axis titles and
 * legends inside the panel. All text goes out escaped. Text widths are overestimated, so
 * a box sized from them holds its text in any common sans-serif font. */
#ifndef ZT_CLI_SVG_H
#define ZT_CLI_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* ---- JSON lines (cli/svg_jsonl.c) ----
 * Lookups take a pointer to the '{' or '[' that opens a value and see only its own
 * members, never those of nested values; they return pointers into the line. */

typedef enum zt_cli_jsonl_kind { ZT_CLI_JSONL_ABSENT, ZT_CLI_JSONL_NUMBER, ZT_CLI_JSONL_OTHER } zt_cli_jsonl_kind;

/* Whether `line` holds one JSON object and nothing else (whitespace aside): '{' ... '}'
 * with brackets balanced outside strings. A shape check, not a full validation. */
bool zt_cli_jsonl_is_object(const char *line);
/* The value of member `key` of the object at `obj`; NULL if absent (or obj is NULL). */
const char *zt_cli_jsonl_member(const char *obj, const char *key);
/* Element i of the array at `arr`; NULL past the end (or arr is NULL or no array). */
const char *zt_cli_jsonl_element(const char *arr, int i);
/* Member `key` of `obj` as a number in *out. printf's nan and inf count as numbers, so
 * *out may be non-finite; OTHER for null, strings and the like. */
zt_cli_jsonl_kind zt_cli_jsonl_number(const char *obj, const char *key, double *out);
/* Member `key` of `obj` as a string (raw, escapes kept, cut at cap - 1 bytes) in buf;
 * false, with buf empty, when absent or not a string. */
bool zt_cli_jsonl_string(const char *obj, const char *key, char *buf, size_t cap);
/* Each line of the file at `path` that is not blank, in order, to each(line, its number, ud) until
 * it returns false (the caller's reason, printed by it). 0 then or after the last line; -1 after
 * printing why the file could not be opened or read ("zt plot: ..."). */
int zt_cli_jsonl_each(const char *path, bool (*each)(const char *line, int lineno, void *ud), void *ud);

/* ---- SVG (cli/svg.c) ---- */

typedef struct zt_cli_svg {
  FILE *f;
  double w, h; /* the viewBox: 0 0 w h */
} zt_cli_svg;

typedef struct zt_cli_svg_box {
  double x, y, w, h;
} zt_cli_svg_box;

typedef enum zt_cli_svg_anchor {
  ZT_CLI_SVG_ANCHOR_START,
  ZT_CLI_SVG_ANCHOR_MIDDLE,
  ZT_CLI_SVG_ANCHOR_END
} zt_cli_svg_anchor;

/* Creates `path` and starts a w x h picture on white with `title` (shortened with "..."
 * to fit) at its top. false, with errno set, when the file cannot be created. */
bool zt_cli_svg_open(zt_cli_svg *s, const char *path, double w, double h, const char *title);
/* Ends the picture and closes the file; false if any write failed. */
bool zt_cli_svg_close(zt_cli_svg *s);
/* Text (escaped; bytes that are not UTF-8 become '?') with its baseline at y. */
void zt_cli_svg_text(zt_cli_svg *s, double x, double y, double size, zt_cli_svg_anchor anchor, const char *color,
                     const char *text);
/* An upper bound of the width of text at font size `size`, in the same units. */
double zt_cli_svg_text_width(const char *text, double size);
bool zt_cli_svg_box_overlap(zt_cli_svg_box a, zt_cli_svg_box b);

/* How an axis labels its ticks: 0.5, 25k, 1.2M | as PLAIN with whole steps (counts such
 * as steps) | 512 KiB, 4 MiB | 1.05x */
typedef enum zt_cli_svg_unit {
  ZT_CLI_SVG_UNIT_PLAIN,
  ZT_CLI_SVG_UNIT_COUNT,
  ZT_CLI_SVG_UNIT_BYTES,
  ZT_CLI_SVG_UNIT_RATIO
} zt_cli_svg_unit;

typedef struct zt_cli_svg_axis {
  double lo, hi, step; /* the range drawn (whole ticks) and the tick spacing */
  int ticks;           /* the number of intervals asked for */
  zt_cli_svg_unit unit;
  const char *title;
  double div;         /* labels show v / div ... */
  const char *suffix; /* ... followed by this */
  int decimals;
} zt_cli_svg_axis;

/* How an axis range meets the data: exactly (then widened to whole ticks), with a margin
 * of a few percent at both ends, or from 0 (when no value is negative) with a margin at
 * the top. A margin keeps curves and markers off the frame. */
typedef enum zt_cli_svg_fit { ZT_CLI_SVG_FIT_TIGHT, ZT_CLI_SVG_FIT_MARGIN, ZT_CLI_SVG_FIT_FROM_ZERO } zt_cli_svg_fit;

/* An axis over the data range [lo, hi] (lo > hi when there are no data): about `ticks`
 * intervals a round step apart, the range widened to whole ticks; a range of one value
 * is widened around it. */
zt_cli_svg_axis zt_cli_svg_axis_fit(double lo, double hi, int ticks, zt_cli_svg_fit fit, zt_cli_svg_unit unit,
                                    const char *title);
/* The tick label of v on axis a, in buf of `cap` bytes. */
const char *zt_cli_svg_axis_label(const zt_cli_svg_axis *a, double v, char *buf, size_t cap);

typedef struct zt_cli_svg_panel {
  zt_cli_svg_box area; /* the plot area, in picture units */
  const char *title;
  zt_cli_svg_axis x, y;
} zt_cli_svg_panel;

double zt_cli_svg_px(const zt_cli_svg_panel *p, double x);
double zt_cli_svg_py(const zt_cli_svg_panel *p, double y);
/* Title above the area, gridlines, frame, ticks, tick labels and both axis titles; the
 * y title goes left of the widest tick label, so the area needs that much room there. */
void zt_cli_svg_panel_axes(zt_cli_svg *s, const zt_cli_svg_panel *p);

typedef enum zt_cli_svg_style {
  ZT_CLI_SVG_STYLE_LINE,
  ZT_CLI_SVG_STYLE_LINE_MARKERS,
  ZT_CLI_SVG_STYLE_MARKERS
} zt_cli_svg_style;
typedef enum zt_cli_svg_mark {
  ZT_CLI_SVG_MARK_CIRCLE,
  ZT_CLI_SVG_MARK_SQUARE,
  ZT_CLI_SVG_MARK_TRIANGLE,
  ZT_CLI_SVG_MARK_DIAMOND
} zt_cli_svg_mark;

/* Points of one named curve; the series owns x and y (zt_cli_svg_series_free). A point with
 * NaN coordinates is a break: the line stops there and starts again after it. */
typedef struct zt_cli_svg_series {
  double *x, *y;
  int n, cap;
  const char *name, *color;
  const char *dash; /* stroke-dasharray of the line, NULL for solid */
  zt_cli_svg_style style;
  zt_cli_svg_mark mark;
} zt_cli_svg_series;

/* Appends (x, y). A NaN or infinite coordinate is not a point: it is left out and the
 * call returns false; out of memory aborts (the plots have no partial result to keep). */
bool zt_cli_svg_series_push(zt_cli_svg_series *s, double x, double y);
/* Breaks the line after the last point (a no-op before the first point or after a break). */
void zt_cli_svg_series_break(zt_cli_svg_series *s);
void zt_cli_svg_series_free(zt_cli_svg_series *s);
/* Widens [*x0, *x1] x [*y0, *y1] to hold every point of the n series. */
void zt_cli_svg_series_range(const zt_cli_svg_series *ss, int n, double *x0, double *x1, double *y0, double *y1);
/* Draws the series (a lone point of a line series gets a marker, so it shows). */
void zt_cli_svg_panel_series(zt_cli_svg *s, const zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n);
/* Raises the top of p's y axis, a tick at a time up to twice its range, until the
 * legend of the series has a corner of the area where it hides none of them; then fits
 * the ticks to the new range. */
void zt_cli_svg_panel_legend_room(zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n);
/* A legend of the series that have points (in columns when they are many), inside the
 * panel's area, in the corner where it hides the least of the curves; returns its box
 * (w = 0 when there is none). */
zt_cli_svg_box zt_cli_svg_panel_legend(zt_cli_svg *s, const zt_cli_svg_panel *p, const zt_cli_svg_series *ss, int n);
/* A centred note in the area (e.g. "no finite values"). */
void zt_cli_svg_panel_note(zt_cli_svg *s, const zt_cli_svg_panel *p, const char *text);

#endif
