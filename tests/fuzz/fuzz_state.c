/* libFuzzer target: a checkpoint's state.json, read by zt_snapshot_read_state (the folder
 * holds only that file). */
#include <stdio.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "zt/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  static char dir[512];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s", zt_fuzz_path("ck"));
    if (mkdir(dir, 0755) != 0) zt_fuzz_fail("cannot make '%s'", dir);
  }
  zt_fuzz_write(zt_fuzz_path("ck/state.json"), data, size);
  zt_train_state st;
  (void)zt_snapshot_read_state(dir, &st);
  return 0;
}
