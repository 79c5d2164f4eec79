/* The machine's single-precision GEMM rate (src/train/gemm_rate.c): what a run's MFU is
 * measured against, and what the memory planner times a step with (zt_sgemm_gflops, public).
 * Included by: src/train. */
#ifndef ZT_TRAIN_GEMM_RATE_H
#define ZT_TRAIN_GEMM_RATE_H

#include <stdint.h>

/* The ceiling MFU is measured against: the best of a few runs at two sizes, so that a moment of
 * load beside the run (which only ever slows a run down) does not set it low; measured once per
 * process and thread count. */
double zt__sgemm_ceiling(void);

/* The median of v[0, n) (sorted in place; 0 when n < 1): what every measurement of the training
 * layer keeps of its runs, so that a moment of load beside one run does not set the figure. */
double zt__median(double *v, int64_t n);

#endif
