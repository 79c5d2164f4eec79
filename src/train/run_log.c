/* The run's logs: one JSON object per step in the --metrics file and one TensorBoard event
 * per step under --tensorboard. A resumed run continues both from its checkpoint's step, so
 * the steps a stopped run logged after its last checkpoint appear once, with the values of
 * the run that continued. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "io/tensorboard.h"
#include "train/run_log.h"

struct zt__run_log {
  FILE *metrics;
  char metrics_path[512];
  zt__tb *tb;
};

void zt__rank_figures(const zt_train_step_info *in, double v[ZT__RANK_FIG_N]) {
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) v[t] = (double)in->mem.peak[t];
  v[ZT__RANK_FIG_BYTES] = (double)in->mem.peak_total;
  v[ZT__RANK_FIG_RSS] = (double)in->peak_rss;
  v[ZT__RANK_FIG_SENT] = (double)in->comm.bytes_sent;
  v[ZT__RANK_FIG_CALLS] = (double)in->comm.comm_calls;
  v[ZT__RANK_FIG_WAIT] = in->comm.wait_s * 1e3;
  v[ZT__RANK_FIG_PP_F] = in->pp_f_ms;
  v[ZT__RANK_FIG_PP_B] = in->pp_b_ms;
  v[ZT__RANK_FIG_PP_W] = in->pp_w_ms;
  v[ZT__RANK_FIG_PP_WAIT] = in->pp_wait_ms;
}

/* Keep the lines of a metrics file up to step `upto`: complete lines ("...}\n") whose
 * leading "step" is <= upto. Rewritten through a temp file and a rename, so a crash leaves
 * the old file or the new one. */
static zt_status truncate_metrics(const char *path, int64_t upto) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return ZT_OK; /* nothing to keep (or /dev/null and the like) */
  FILE *in = fopen(path, "r");
  if (!in) return ZT_ERR(ZT_STATUS_IO, "cannot read metrics file '%s': %s", path, strerror(errno));
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *out = fopen(tmp, "w");
  if (!out) {
    int e = errno;
    fclose(in);
    return ZT_ERR(ZT_STATUS_IO, "cannot rewrite metrics file '%s' (creating '%s': %s)", path, tmp, strerror(e));
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, in)) > 0) {
    long long step;
    int end = 0;
    if (n < 3 || line[n - 1] != '\n' || line[n - 2] != '}') continue; /* torn by a kill mid-write */
    if (sscanf(line, "{\"step\":%lld%n", &step, &end) == 1 && end > 0 && step <= upto) fputs(line, out);
  }
  free(line);
  fclose(in);
  int bad = fflush(out) != 0 || fsync(fileno(out)) != 0;
  bad |= fclose(out) != 0;
  if (bad || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return ZT_ERR(ZT_STATUS_IO, "cannot rewrite metrics file '%s': %s", path, strerror(e));
  }
  return ZT_OK;
}

zt_status zt__run_log_open(const char *metrics, const char *tensorboard, int64_t resume_step, zt__run_log **out) {
  *out = NULL;
  zt__run_log *l = calloc(1, sizeof *l);
  if (!l) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  zt_status s = ZT_OK;
  if (metrics && *metrics) {
    snprintf(l->metrics_path, sizeof l->metrics_path, "%s", metrics);
    if (resume_step > 0) s = truncate_metrics(metrics, resume_step);
    if (!s && !(l->metrics = fopen(metrics, resume_step > 0 ? "a" : "w")))
      s = ZT_ERR(ZT_STATUS_IO, "cannot open metrics file '%s': %s; name a file in a folder that exists", metrics,
                 strerror(errno));
  }
  if (!s && tensorboard && *tensorboard) s = zt__tb_open(tensorboard, resume_step, &l->tb);
  if (s) {
    ZT_IGNORE(zt__run_log_close(l), "the open's own failure is the one reported");
    return s;
  }
  *out = l;
  return ZT_OK;
}

static void write_metrics(FILE *f, const zt_train_step_info *in, const char *shard, const double *ranks) {
  fprintf(f, "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.6g,\"grad_norm\":%.6g,\"step_ms\":%.3f,\"tokens_per_s\":%.2f,\"mfu\":%.4f",
          (long long)in->step, in->loss, in->lr, in->grad_norm, in->step_ms, in->tokens_per_s, in->mfu);
  if (!isnan(in->val_loss)) fprintf(f, ",\"val_loss\":%.6f", in->val_loss);
  fprintf(f, ",\"mem\":{");
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
    fprintf(f, "%s\"%s\":{\"current\":%lld,\"peak\":%lld}", t ? "," : "", zt_mem_tag_name((zt_mem_tag)t),
            (long long)in->mem.current[t], (long long)in->mem.peak[t]);
  fprintf(f, ",\"total\":{\"current\":%lld,\"peak\":%lld}},\"act_peak_predicted\":%lld,\"peak_rss\":%lld",
          (long long)in->mem.current_total, (long long)in->mem.peak_total, (long long)in->act_peak_predicted,
          (long long)in->peak_rss);
  if (in->io_read_bytes || in->io_write_bytes)
    fprintf(f, ",\"io\":{\"read_bytes\":%lld,\"write_bytes\":%lld,\"read_ms\":%.1f,\"write_ms\":%.1f}",
            (long long)in->io_read_bytes, (long long)in->io_write_bytes, in->io_read_ms, in->io_write_ms);
  if (in->act_offload_bytes) fprintf(f, ",\"act_offload_bytes\":%lld", (long long)in->act_offload_bytes);
  if (in->act_trial) fprintf(f, ",\"act_trial\":\"%s\"", in->act_trial == ZT_ACT_TRIAL_STEP_OFFLOAD ? "offload" : "recompute");
  if (in->act_choice) fprintf(f, ",\"act_choice\":\"%s\"", in->act_choice->plan);
  if (in->loss_scale > 0) fprintf(f, ",\"loss_scale\":%g,\"skipped\":%s", in->loss_scale, in->skipped ? "true" : "false");
  bool pp = !isnan(in->pp_bubble);
  if (pp) fprintf(f, ",\"pp_bubble\":%.4f,\"pp_sim_bubble\":%.4f", in->pp_bubble, in->pp_sim_bubble);
  fprintf(f, ",\"world\":%d,\"shard\":\"%s\",\"ranks\":[", in->world, shard);
  for (int r = 0; r < in->world; r++) {
    const double *v = ranks + (size_t)r * ZT__RANK_FIG_N;
    fprintf(f, "%s{\"rank\":%d,\"mem_peak\":{", r ? "," : "", r);
    for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
      fprintf(f, "%s\"%s\":%.0f", t ? "," : "", zt_mem_tag_name((zt_mem_tag)t), v[t]);
    fprintf(f, ",\"total\":%.0f},\"peak_rss\":%.0f,\"comm_bytes\":%.0f,\"comm_calls\":%.0f,\"comm_wait_ms\":%.3f",
            v[ZT__RANK_FIG_BYTES], v[ZT__RANK_FIG_RSS], v[ZT__RANK_FIG_SENT], v[ZT__RANK_FIG_CALLS],
            v[ZT__RANK_FIG_WAIT]);
    if (pp)
      fprintf(f, ",\"f_ms\":%.3f,\"b_ms\":%.3f,\"w_ms\":%.3f,\"pp_wait_ms\":%.3f", v[ZT__RANK_FIG_PP_F],
              v[ZT__RANK_FIG_PP_B], v[ZT__RANK_FIG_PP_W], v[ZT__RANK_FIG_PP_WAIT]);
    fprintf(f, "}");
  }
  fprintf(f, "]}\n");
}

zt_status zt__tb_write_step(zt__tb *w, const zt_train_step_info *in) {
  if (!w || !in) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__tb_write_step: the writer or the step info is NULL");
  enum { MAX = 16 + 2 * ZT_MEM_TAG_COUNT };
  const char *tags[MAX];
  char names[2 * ZT_MEM_TAG_COUNT][32];
  double v[MAX];
  int n = 0;
#define ADD(t, x) (tags[n] = (t), v[n++] = (x))
  ADD("train/loss", in->loss);
  ADD("train/lr", in->lr);
  ADD("train/grad_norm", in->grad_norm);
  if (in->loss_scale > 0) ADD("train/loss_scale", in->loss_scale);
  if (!isnan(in->val_loss)) ADD("val/loss", in->val_loss);
  ADD("perf/tokens_per_s", in->tokens_per_s);
  ADD("perf/mfu", in->mfu);
  ADD("perf/step_ms", in->step_ms);
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) {
    snprintf(names[t], sizeof names[t], "mem/%s", zt_mem_tag_name((zt_mem_tag)t));
    ADD(names[t], (double)in->mem.current[t]);
  }
  ADD("mem/total", (double)in->mem.current_total);
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) {
    snprintf(names[ZT_MEM_TAG_COUNT + t], sizeof names[0], "mem_peak/%s", zt_mem_tag_name((zt_mem_tag)t));
    ADD(names[ZT_MEM_TAG_COUNT + t], (double)in->mem.peak[t]);
  }
  ADD("mem_peak/total", (double)in->mem.peak_total);
  ADD("mem_peak/rss", (double)in->peak_rss);
#undef ADD
  return zt__tb_scalars(w, in->step, n, tags, v);
}

zt_status zt__run_log_step(zt__run_log *l, const zt_train_step_info *in, const char *shard, const double *ranks) {
  if (!l) return ZT_OK;
  if (l->metrics) {
    write_metrics(l->metrics, in, shard, ranks);
    if (fflush(l->metrics) != 0 || ferror(l->metrics))
      return ZT_ERR(ZT_STATUS_IO, "writing metrics file '%s' failed: %s (is the disk full?)", l->metrics_path,
                    strerror(errno));
  }
  return l->tb ? zt__tb_write_step(l->tb, in) : ZT_OK;
}

zt_status zt__run_log_close(zt__run_log *l) {
  if (!l) return ZT_OK;
  zt_status s = ZT_OK;
  if (l->metrics && fclose(l->metrics) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "closing metrics file '%s' failed: %s (is the disk full? its last lines may be missing)",
               l->metrics_path, strerror(errno));
  zt_status t = zt__tb_close(l->tb);
  free(l);
  return s ? s : t;
}
