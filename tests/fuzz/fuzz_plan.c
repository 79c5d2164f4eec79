/* libFuzzer target: the planner's files, read back: a plan file (zt_plan_read, as zt train --plan
 * FILE reads it, for gpt2-tiny's space) when the input's first byte is even, a calibration file
 * (zt_plan_calibration_read, as --plan-calibration reads it) when it is odd; the rest is the file. */
#include <string.h>

#include "fuzz_util.h"
#include "zt/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  if (size < 1) return 0;
  const char *path = zt_fuzz_path("plan.json");
  zt_fuzz_write(path, data + 1, size - 1);
  if (data[0] % 2 == 0) {
    zt_plan_space sp;
    zt_plan_space_default(&sp); /* gpt2-tiny, batch 8, 1 rank, and zt train's seq: the seeds' space */
    sp.seq = 256;
    zt_plan_config c;
    zt_plan_prediction p;
    if (zt_plan_read(path, -1, &sp, &c, &p) == ZT_OK && (c.pp < 1 || c.dp < 1))
      zt_fuzz_fail("a plan read back with pp %d x dp %d", c.pp, c.dp);
    if (zt_plan_read(path, 1, &sp, &c, NULL)) zt_clear_error(); /* entry 1: the other path through it */
  } else {
    zt_plan_calibration c;
    zt_plan_calibration_default(&c);
    if (zt_plan_calibration_read(path, &c) == ZT_OK)
      for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++)
        if (!(c.value[f] > 0)) zt_fuzz_fail("figure %d read back as %g", f, c.value[f]);
  }
  return 0;
}
