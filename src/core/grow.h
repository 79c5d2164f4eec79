/* Grow-arrays: the one doubling realloc behind every growing list of the library (module
 * parameters, hooks, saved tensors, backward's work lists, ...). Internal (zt__).
 * Included by: any layer (core and above). */
#ifndef ZT_CORE_GROW_H
#define ZT_CORE_GROW_H

#include <stddef.h>

#include "zt/status.h"

/* items (room for *cap elements of elem bytes; NULL when *cap is 0) with room for at least
 * need >= 1 elements: returned as is when it has it, else reallocated to double the
 * capacity (8 at first, need if more) and *cap updated. On failure returns NULL with
 * ZT_STATUS_OOM recorded for zt_last_error(), naming the bytes and `what` they were for;
 * items and *cap are then unchanged (still valid, still the caller's). */
void *zt__grow(void *items, int *cap, int need, size_t elem, const char *what);

#endif
