/* Grow-arrays (core/grow.h): doubling reallocation with overflow checks; a failure is a
 * status (ZT_STATUS_OOM naming the size and the purpose), and leaves the array untouched. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/status_internal.h"
#include "core/grow.h"

void *zt__grow(void *items, int *cap, int need, size_t elem, const char *what) {
  ZT_ASSERT(cap && *cap >= 0 && need >= 1 && elem > 0);
  if (need <= *cap) return items;
  int n = *cap ? (*cap <= INT_MAX / 2 ? 2 * *cap : INT_MAX) : 8;
  if (n < need) n = need;
  if ((size_t)n > SIZE_MAX / elem) {
    ZT_ERR(ZT_STATUS_OOM, "out of host memory: %d elements of %zu bytes for %s do not fit in a size_t", n, elem,
           what);
    return NULL;
  }
  void *p = realloc(items, (size_t)n * elem);
  if (!p) {
    ZT_ERR(ZT_STATUS_OOM, "out of host memory: could not allocate %zu bytes for %s (%d elements)", (size_t)n * elem,
           what, n);
    return NULL;
  }
  *cap = n;
  return p;
}
