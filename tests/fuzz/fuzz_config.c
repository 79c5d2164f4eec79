/* libFuzzer target: `zt train --config FILE` files, read by zt_train_config_load over the
 * defaults. */
#include "fuzz_util.h"
#include "zt/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  const char *path = zt_fuzz_path("train.conf");
  zt_fuzz_write(path, data, size);
  zt_train_config c;
  zt_train_config_default(&c);
  (void)zt_train_config_load(&c, path);
  return 0;
}
