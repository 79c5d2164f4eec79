/* Grad mode: a per-thread switch; off means ops record nothing. Autocast: the per-thread
 * mixed-precision setting that strategies capture and restore. */
#include "core/tensor_internal.h"
#include "zt/autograd.h"

static _Thread_local bool tl_grad_enabled = true;

bool zt_set_grad_enabled(bool enabled) {
  bool prev = tl_grad_enabled;
  tl_grad_enabled = enabled;
  return prev;
}
bool zt_grad_enabled(void) { return tl_grad_enabled; }

static _Thread_local zt_autocast_state tl_autocast = {false, ZT_DTYPE_BF16};

zt_autocast_state zt_autocast_get(void) { return tl_autocast; }
zt_autocast_state zt_autocast_set(zt_autocast_state s) {
  zt_autocast_state prev = tl_autocast;
  tl_autocast = s;
  return prev;
}

__attribute__((constructor)) static void install_grad_mode_query(void) { zt__grad_mode_query = zt_grad_enabled; }
