/* Devices: a type and an index. Compute comes from each type's backend (src/core/backend.h);
 * disk is an accounting tier. */
#include <stdio.h>

#include "zt/tensor.h"

bool zt_device_equal(zt_device a, zt_device b) { return a.type == b.type && a.index == b.index; }

const char *zt_device_str(zt_device d, char *buf) {
  switch (d.type) {
  /* cpu and disk carry an index only when it is not 0 (accounting may use several) */
  case ZT_DEVICE_CPU: d.index ? snprintf(buf, 16, "cpu:%d", d.index) : snprintf(buf, 16, "cpu"); break;
  case ZT_DEVICE_CUDA: snprintf(buf, 16, "cuda:%d", d.index); break;
  case ZT_DEVICE_DISK: d.index ? snprintf(buf, 16, "disk:%d", d.index) : snprintf(buf, 16, "disk"); break;
  case ZT_DEVICE_GUARDED: snprintf(buf, 16, "guarded:%d", d.index); break;
  default: snprintf(buf, 16, "invalid(%d)", (int)d.type); break;
  }
  return buf;
}
