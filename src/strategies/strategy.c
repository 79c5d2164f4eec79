/* The strategy interface (zt/strategy.h): attach and detach one strategy or several in their
 * order of composition. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt/strategy.h"

zt_status zt_strategy_attach(zt_strategy s, const zt_model *m) {
  if (!s.ops || !s.ops->attach || !s.self)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_strategy_attach: the strategy has no calls or no object");
  if (!m || !m->blocks || !m->module)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_strategy_attach: model is NULL or lacks its module and blocks");
  zt_status st = s.ops->attach(s.self, m);
  return st ? zt__error_prefix(st, "attaching the %s strategy", s.ops->kind) : ZT_OK;
}

void zt_strategy_detach(zt_strategy s) {
  if (s.ops && s.ops->detach && s.self) s.ops->detach(s.self);
}

/* The indexes of s sorted by order (stable): a small insertion sort. */
static int *by_order(int n, const zt_strategy *s) {
  int *ix = malloc(sizeof *ix * (size_t)(n > 0 ? n : 1));
  if (!ix) return NULL;
  for (int i = 0; i < n; i++) {
    int j = i;
    while (j > 0 && s[ix[j - 1]].ops && s[i].ops && s[ix[j - 1]].ops->order > s[i].ops->order) {
      ix[j] = ix[j - 1];
      j--;
    }
    ix[j] = i;
  }
  return ix;
}

zt_status zt_strategies_attach(int n, const zt_strategy *s, const zt_model *m) {
  if (n < 0 || (n > 0 && !s)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_strategies_attach: %d strategies at NULL", n);
  int *ix = by_order(n, s);
  if (!ix) return ZT_ERR(ZT_STATUS_OOM, "zt_strategies_attach: out of host memory");
  zt_status st = ZT_OK;
  int k = 0;
  for (; k < n && !st; k++) st = zt_strategy_attach(s[ix[k]], m);
  if (st)
    for (k -= 2; k >= 0; k--) zt_strategy_detach(s[ix[k]]);
  free(ix);
  return st;
}

void zt_strategies_detach(int n, const zt_strategy *s) {
  int *ix = s ? by_order(n, s) : NULL;
  for (int k = n - 1; ix && k >= 0; k--) zt_strategy_detach(s[ix[k]]);
  if (!ix) /* out of memory: detach in the reverse of the given order */
    for (int k = n - 1; s && k >= 0; k--) zt_strategy_detach(s[k]);
  free(ix);
}
