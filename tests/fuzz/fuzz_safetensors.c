/* libFuzzer target: safetensors files (header size, JSON header, offsets, data). The input is
 * the whole file. Every reader runs on it: names, metadata, the internal list, and loads of
 * each tensor into a tensor of its shape (f32 for floating dtypes, i64 for integer ones;
 * tensors over 64K elements are skipped), then one strict load of all of them. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "io/safetensors.h"
#include "zt/train.h"

static bool is_float(const char *dt) {
  return !strcmp(dt, "F32") || !strcmp(dt, "F64") || !strcmp(dt, "BF16") || !strcmp(dt, "F16");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  const char *path = zt_fuzz_path("f.safetensors");
  zt_fuzz_write(path, data, size);
  int nn = 0, ni = 0;
  char **names = NULL, *v = NULL;
  zt__st_info *info = NULL;
  zt_status s = zt_safetensors_names(path, &nn, &names);
  zt_status s2 = zt__safetensors_list(path, &ni, &info);
  if ((s == ZT_OK) != (s2 == ZT_OK) || (!s && nn != ni)) zt_fuzz_fail("names and list disagree");
  if (!zt_safetensors_metadata(path, "format", &v)) free(v);
  if (!s) {
    zt_tensor **ts = calloc((size_t)ni + 1, sizeof *ts);
    const char **tn = calloc((size_t)ni + 1, sizeof *tn);
    int n = 0;
    for (int i = 0; i < ni && ts && tn; i++) {
      if (zt__st_find(info, ni, info[i].name) != &info[i]) zt_fuzz_fail("zt__st_find misses '%s'", info[i].name);
      if (info[i].numel > (1 << 16)) continue;
      zt_dtype dt = is_float(info[i].dtype) ? ZT_DTYPE_F32 : ZT_DTYPE_I64;
      if (zt_tensor_zeros(info[i].ndim, info[i].shape, dt, ZT_CPU, &ts[n])) continue;
      tn[n] = info[i].name;
      (void)zt_safetensors_load_into(path, 1, &tn[n], &ts[n], false);
      n++;
    }
    if (ts && tn) (void)zt_safetensors_load_into(path, n, tn, ts, true);
    for (int i = 0; ts && i < n; i++) zt_tensor_free(ts[i]);
    free(ts);
    free(tn);
  }
  free(names);
  free(info);
  return 0;
}
