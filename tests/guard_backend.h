/* The guarded test device (tests/guard_backend.c): ZT_DEVICE_GUARDED, whose memory the
 * host cannot touch except through its backend (PROT_NONE outside backend calls and kernel
 * runs), running the CPU's kernels. */
#ifndef ZT_TEST_GUARD_BACKEND_H
#define ZT_TEST_GUARD_BACKEND_H

#include "zt/tensor.h"

#define ZT_GUARDED ((zt_device){ZT_DEVICE_GUARDED, 0})

/* Register the guarded backend (idempotent). */
void zt_test_guard_register(void);
/* How many times the arena was opened so far (kernel runs and backend calls). */
int64_t zt_test_guard_opens(void);
/* Whether the arena is closed now (no backend call or kernel run in progress). */
bool zt_test_guard_is_closed(void);
/* The backend struct (a const zt__backend *), for tests that register it elsewhere. */
const void *zt_test_guard_backend(void);

#endif
