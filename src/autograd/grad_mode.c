/* Grad mode: a per-thread switch; off means ops record nothing. */
#include "zt/autograd.h"
#include "../core/tensor_internal.h"

static _Thread_local bool tl_grad_enabled = true;

bool zt_set_grad_enabled(bool enabled) {
  bool prev = tl_grad_enabled;
  tl_grad_enabled = enabled;
  return prev;
}
bool zt_grad_enabled(void) { return tl_grad_enabled; }

__attribute__((constructor)) static void install_grad_mode_query(void) { zt__grad_mode_query = zt_grad_enabled; }
