/* Dynamic loss scaling (GradScaler's rule): back off on overflow, grow after a run of
 * finite steps. The scale stays a power of two with the default factors, so scaling and
 * unscaling are exact in binary floating point. */
#include "zt/optim.h"

zt_loss_scaler zt_loss_scaler_default(void) { return (zt_loss_scaler){65536.0, 2.0, 0.5, 2000, 0, 0}; }

bool zt_loss_scaler_update(zt_loss_scaler *s, bool finite) {
  if (!finite) {
    s->scale *= s->backoff_factor;
    s->good_steps = 0;
    s->skipped++;
    return false;
  }
  if (++s->good_steps >= s->growth_interval) {
    s->scale *= s->growth_factor;
    s->good_steps = 0;
  }
  return true;
}
