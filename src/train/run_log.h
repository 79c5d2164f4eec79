/* The run's logs (src/train/run_log.c): the --metrics JSON lines file and the --tensorboard
 * event files, written by rank 0 after every step.
 * Included by: src/train (and its tests). */
#ifndef ZT_TRAIN_RUN_LOG_H
#define ZT_TRAIN_RUN_LOG_H

#include "zt/train.h"

/* Per-rank figures in a metrics line: peak bytes per tag, peak total, peak RSS, the step's
 * communication (bytes sent, collective calls, ms waiting), and in a pipeline run the rank's
 * F, B, W and waiting ms. */
enum { ZT__RANK_FIG_BYTES = ZT_MEM_TAG_COUNT, ZT__RANK_FIG_RSS, ZT__RANK_FIG_SENT, ZT__RANK_FIG_CALLS,
       ZT__RANK_FIG_WAIT, ZT__RANK_FIG_PP_F, ZT__RANK_FIG_PP_B, ZT__RANK_FIG_PP_W, ZT__RANK_FIG_PP_WAIT,
       ZT__RANK_FIG_N };
void zt__rank_figures(const zt_train_step_info *in, double v[ZT__RANK_FIG_N]);

typedef struct zt__tb zt__tb; /* io/tensorboard.h */
/* One TensorBoard Event at in->step with every figure of the step (train/loss, train/lr,
 * train/grad_norm, train/loss_scale, val/loss, perf/..., mem/<TAG>, mem_peak/<TAG>, mem_peak/rss),
 * then a flush. */
ZT_NODISCARD zt_status zt__tb_write_step(zt__tb *w, const zt_train_step_info *in);

typedef struct zt__run_log zt__run_log;
/* Opens the logs that are asked for (either path may be "" for none). resume_step > 0: a
 * resumed run; the metrics file keeps its lines up to that step (later ones, logged by a run
 * that was stopped before its next checkpoint, are dropped: the file is rewritten atomically)
 * and new lines are appended; TensorBoard's readers drop the later events the same way.
 * resume_step 0: the metrics file starts empty. */
ZT_NODISCARD zt_status zt__run_log_open(const char *metrics, const char *tensorboard, int64_t resume_step, zt__run_log **out);
/* One step: the metrics line (shard names the strategy; ranks holds world * ZT__RANK_FIG_N
 * figures) and the TensorBoard event. */
ZT_NODISCARD zt_status zt__run_log_step(zt__run_log *l, const zt_train_step_info *in, const char *shard, const double *ranks);
/* Flush and close both files (NULL is a no-op): a failure to write their last bytes is
 * ZT_STATUS_IO naming the file; l is freed either way. */
ZT_NODISCARD zt_status zt__run_log_close(zt__run_log *l);

#endif
