/* Internal pieces of the optim layer shared with the strategies (FSDP clips gradient
 * shards with the same arithmetic as zt_clip_grad_norm). */
#ifndef ZT_OPTIM_INTERNAL_H
#define ZT_OPTIM_INTERNAL_H

#include "zt/optim.h"

/* Sum of squares of g (n) in double over a fixed tree of blocks: the same bits for any
 * thread count. */
double zt__grad_sumsq_f32(const float *g, int64_t n);
/* g (n) *= s. */
void zt__grad_scale_f32(float *g, int64_t n, float s);

#endif
