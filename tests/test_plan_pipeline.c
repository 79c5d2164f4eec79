/* The planner's pipeline predictions against measured runs (run under mpirun -np 2 and 4; one
 * process skips): a few small pipelines train for three steps and the predicted peak of the
 * worst rank's accounted bytes, and of each of its tags, must be within 5% of what that rank
 * measured. Memory only (the default calibration: memory must not depend on measured speeds). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "zt/comm.h"
#include "zt/plan.h"
#include "zt/train.h"
#include "zt_test.h"

static zt_comm *g_world;
static int g_rank, g_size;

/* Tags below this share of the accounted peak are checked within TINY_TOL of the peak instead
 * of 5% of themselves: a few KiB of token ids or norm statistics are not worth modelling. */
#define TOL 0.05
#define TINY_TOL 0.01

static void last_step(const zt_train_step_info *info, void *ud) { *(zt_mem_stats *)ud = info->mem; }

/* One configuration: train it, then compare the worst rank (by accounted peak) with the plan. */
static void check(const char *const *kv, int pp) {
  zt_train_config c;
  zt_train_config_default(&c);
  c.parallel.comm_timeout = 120; /* a hang fails naming the ranks, before ctest's 300 s */
  char name[256] = "";
  for (int i = 0; kv[i]; i += 2) {
    ZT_CHECK_OK(zt_train_config_set(&c, kv[i], kv[i + 1]));
    size_t n = strlen(name);
    snprintf(name + n, sizeof name - n, "%s%s=%s", n ? " " : "", kv[i], kv[i + 1]);
  }
  char buf[32];
  snprintf(buf, sizeof buf, "%d", pp);
  ZT_CHECK_OK(zt_train_config_set(&c, "pp", buf));
  ZT_CHECK_OK(zt_train_config_set(&c, "steps", "3"));
  zt_mem_stats mem = {0};
  zt_train_result res;
  zt_status s = zt_train_run_on(&c, g_world, last_step, &mem, &res, NULL);
  ZT_CHECK_OK(s);
  if (s) return;
  /* every rank's tag peaks and total, to find the worst rank */
  int n = ZT_MEM_TAG_COUNT + 1;
  double v[8 * (ZT_MEM_TAG_COUNT + 1)] = {0};
  ZT_CHECK(g_size <= 8);
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) v[g_rank * n + t] = (double)mem.peak[t];
  v[g_rank * n + ZT_MEM_TAG_COUNT] = (double)mem.peak_total;
  zt_tensor *tv = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){g_size * n}, ZT_DTYPE_F64, v, &tv));
  ZT_CHECK_OK(zt_all_reduce(g_world, tv, ZT_REDUCE_SUM));
  for (int i = 0; i < g_size * n; i++) v[i] = zt_tensor_get(tv, i);
  zt_tensor_free(tv);
  int w = 0;
  for (int r = 1; r < g_size; r++)
    if (v[r * n + ZT_MEM_TAG_COUNT] > v[w * n + ZT_MEM_TAG_COUNT]) w = r;
  zt_plan_space sp;
  zt_plan_config pc;
  zt_plan_calibration cal;
  zt_plan_prediction p;
  zt_plan_calibration_default(&cal);
  ZT_CHECK_OK(zt_plan_space_of(&c, g_size, &sp));
  zt_plan_config_of(&c, g_size, &pc);
  ZT_CHECK_OK(zt_plan_predict(&sp, &cal, &pc, &p));
  double total = v[w * n + ZT_MEM_TAG_COUNT];
  for (int t = 0; t <= ZT_MEM_TAG_COUNT; t++) {
    double got = v[w * n + t], want = t < ZT_MEM_TAG_COUNT ? (double)p.tag[t] : (double)p.accounted;
    double err = fabs(want - got), lim = got >= total * 0.05 || t == ZT_MEM_TAG_COUNT ? TOL * got : TINY_TOL * total;
    const char *tag = t < ZT_MEM_TAG_COUNT ? zt_mem_tag_name((zt_mem_tag)t) : "total";
    if (g_rank == 0) printf("  %-44s rank %d %-10s predicted %12.0f measured %12.0f (%+.2f%%)\n", name, w, tag, want,
                            got, got > 0 ? 100 * (want - got) / got : 0.0);
    if (err > lim && g_rank == 0)
      zt_test_fail(__FILE__, __LINE__, "%s: %s predicted %.0f, measured %.0f on rank %d", name, tag, want, got, w);
  }
}

static void test_two_ranks(void) {
  if (g_size != 2) return;
  static const char *const cfgs[][16] = {
      {"schedule", "1f1b", "microbatches", "4", "batch", "8", "seq", "64", NULL},
      {"schedule", "gpipe", "microbatches", "4", "batch", "8", "seq", "64", NULL},
      {"schedule", "zb-h1", "microbatches", "4", "batch", "8", "seq", "64", NULL},
      {"schedule", "1f1b", "microbatches", "4", "batch", "8", "seq", "64", "recompute", "full", NULL},
      {"schedule", "gpipe", "microbatches", "4", "batch", "8", "seq", "64", "recompute", "selective", NULL},
      {"model", "llama-tiny", "schedule", "zb-h1", "microbatches", "4", "batch", "8", "seq", "64", NULL},
      {"model", "llama-tiny", "schedule", "gpipe", "microbatches", "4", "batch", "8", "seq", "64", "recompute", "full",
       NULL},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) check(cfgs[i], 2);
}

/* Pipeline x FSDP and pipeline x DDP: two stages, two replicas. */
static void test_four_ranks(void) {
  if (g_size != 4) return;
  static const char *const cfgs[][16] = {
      {"schedule", "1f1b", "microbatches", "4", "batch", "16", "seq", "64", "shard", "full", NULL},
      {"schedule", "1f1b", "microbatches", "4", "batch", "16", "seq", "64", NULL},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) check(cfgs[i], 2);
}

int main(void) {
  g_world = zt_test_world(&g_rank, &g_size);
  ZT_RUN(test_two_ranks);
  ZT_RUN(test_four_ranks);
  zt_comm_free(g_world);
  return zt_test_finish();
}
