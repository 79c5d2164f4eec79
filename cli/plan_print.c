/* How the planner's figures read (zt plan's table and zt train's lines): a prediction by part, the
 * calibration with where each figure came from, and a prediction beside what a run measured. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

void zt_cli_plan_prediction(FILE *f, const char *prefix, const zt_plan_prediction *p) {
  char b[6][32];
  fprintf(f, "%speak RSS %s a rank: accounted %s (", prefix, zt_cli_bytes((double)p->rss, b[0]),
          zt_cli_bytes((double)p->accounted, b[1]));
  bool first = true;
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
    if (p->tag[t]) {
      fprintf(f, "%s%s %s", first ? "" : ", ", zt_mem_tag_name((zt_mem_tag)t), zt_cli_bytes((double)p->tag[t], b[2]));
      first = false;
    }
  fprintf(f, "), cache %s, I/O %s, base %s", zt_cli_bytes((double)p->cache, b[3]), zt_cli_bytes((double)p->io, b[4]),
          zt_cli_bytes((double)p->base, b[5]));
  if (p->inflight) fprintf(f, "; %s more where writes fall behind the disk", zt_cli_bytes((double)p->inflight, b[1]));
  if (p->disk_held) fprintf(f, "; disk %s held", zt_cli_bytes((double)p->disk_held, b[0]));
  fprintf(f, "\n%sstep %.3f s: compute %.3f, communication %.3f, disk %.3f, bubble %.3f\n", prefix, p->step_s,
          p->compute_s, p->comm_s, p->io_s, p->bubble_s);
}

void zt_cli_plan_calibration(FILE *f, const char *prefix, const zt_plan_calibration *c) {
  static const char *const unit[ZT_PLAN_FIG_COUNT] = {"GFLOP/s", "GFLOP/s", "GB/s", "GB/s", "GB/s", "us", "GB/s", "MiB"};
  static const double scale[ZT_PLAN_FIG_COUNT] = {1, 1, 1e-9, 1e-9, 1e-9, 1e6, 1e-9, 1.0 / 1048576};
  fprintf(f, "%scalibration (%d rank%s, %d thread%s a rank):", prefix, c->world, c->world == 1 ? "" : "s", c->threads,
          c->threads == 1 ? "" : "s");
  for (int i = 0; i < ZT_PLAN_FIG_COUNT; i++) {
    fprintf(f, "%s %s %.3g %s (%s", i ? "," : "", zt_plan_figure_name((zt_plan_figure)i), c->value[i] * scale[i],
            unit[i], zt_plan_source_name(c->source[i]));
    if (c->source[i] == ZT_PLAN_SOURCE_MEASURED && c->spread[i] > 0) fprintf(f, ", spread %.0f%%", 100 * c->spread[i]);
    fprintf(f, ")");
  }
  fprintf(f, "\n");
}

/* "+3.1%": measured against predicted. */
static const char *off(double pred, double meas, char *buf) {
  if (!(pred > 0) || !(meas > 0)) return snprintf(buf, 32, "n/a"), buf;
  snprintf(buf, 32, "%+.1f%%", 100.0 * (pred - meas) / meas);
  return buf;
}

void zt_cli_plan_versus(FILE *f, const char *prefix, const zt_plan_prediction *p, const zt_train_result *r) {
  char b[4][32], o[3][32];
  fprintf(f, "%spredicted vs measured (the largest rank): peak RSS %s vs %s (%s), accounted %s vs %s (%s), "
             "step %.3f s vs %.3f s (%s, the median step after the first)\n",
          prefix, zt_cli_bytes((double)p->rss, b[0]), zt_cli_bytes((double)r->peak_rss_max, b[1]),
          off((double)p->rss, (double)r->peak_rss_max, o[0]), zt_cli_bytes((double)p->accounted, b[2]),
          zt_cli_bytes((double)r->peak_bytes_max, b[3]), off((double)p->accounted, (double)r->peak_bytes_max, o[1]),
          p->step_s, r->step_s_median, off(p->step_s, r->step_s_median, o[2]));
}

static void json_prediction(FILE *f, const zt_plan_prediction *p) {
  fprintf(f, "{\"rss\":%lld,\"accounted\":%lld,\"cache\":%lld,\"io\":%lld,\"base\":%lld,\"inflight\":%lld,\"tag\":{",
          (long long)p->rss, (long long)p->accounted, (long long)p->cache, (long long)p->io, (long long)p->base,
          (long long)p->inflight);
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
    fprintf(f, "%s\"%s\":%lld", t ? "," : "", zt_mem_tag_name((zt_mem_tag)t), (long long)p->tag[t]);
  fprintf(f, "},\"disk_held\":%lld,\"compute_s\":%.6g,\"comm_s\":%.6g,\"io_s\":%.6g,\"bubble_s\":%.6g,"
             "\"step_s\":%.6g}",
          (long long)p->disk_held, p->compute_s, p->comm_s, p->io_s, p->bubble_s, p->step_s);
}

/* s as a JSON string (the names and flags here are plain text; quotes and controls escaped). */
static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 32) fprintf(f, "\\u%04x", (unsigned char)*s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

int zt_cli_plan_report_check(const char *path) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir) dir[1] = '\0';
  else if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr, "zt train: --plan-report %s is a folder; give a file name in it\n", path);
    return 1;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
    fprintf(stderr, "zt train: --plan-report %s: its folder %s is not there or cannot be written into; give a path "
                    "in a folder that is\n", path, dir);
    return 1;
  }
  return 0;
}

int zt_cli_plan_report(const char *path, const zt_plan_run *pr, const zt_train_result *r) {
  char tmp[600], flags[2048];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "zt train: warning: --plan-report %s: cannot write %s\n", path, tmp);
    return 1;
  }
  zt_plan_config_flags(&pr->entry.config, flags, sizeof flags);
  fprintf(f, "{\"configuration\":");
  json_string(f, pr->entry.name);
  fprintf(f, ",\"flags\":");
  json_string(f, flags);
  fprintf(f, ",\"source\":");
  json_string(f, pr->source);
  fprintf(f, ",\"planned\":%s,\"limit\":%lld,\"calibration\":{", pr->planned ? "true" : "false", (long long)pr->limit);
  for (int i = 0; i < ZT_PLAN_FIG_COUNT; i++)
    fprintf(f, "%s\"%s\":{\"value\":%.6g,\"source\":\"%s\"}", i ? "," : "", zt_plan_figure_name((zt_plan_figure)i),
            pr->cal.value[i], zt_plan_source_name(pr->cal.source[i]));
  fprintf(f, "},\"predicted\":");
  json_prediction(f, &pr->entry.pred);
  fprintf(f, ",\"measured\":{\"rss\":%lld,\"accounted\":%lld,\"tag\":{", (long long)r->peak_rss_max,
          (long long)r->peak_bytes_max);
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
    fprintf(f, "%s\"%s\":%lld", t ? "," : "", zt_mem_tag_name((zt_mem_tag)t), (long long)r->tag_peak_max[t]);
  fprintf(f, "},\"step_s\":%.6g,\"steps\":%lld}}\n", r->step_s_median, (long long)r->steps_done);
  int bad = ferror(f) != 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    remove(tmp);
    fprintf(stderr, "zt train: warning: --plan-report %s could not be written\n", path);
    return 1;
  }
  return 0;
}
