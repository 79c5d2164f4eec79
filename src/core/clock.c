/* The monotonic clock every timing in zerotrain reads (step times, comm timeouts, offload
 * waits, benchmarks): seconds on CLOCK_MONOTONIC, so only differences mean anything. */
#include <time.h>

#include "zt/status.h"

double zt_clock_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
