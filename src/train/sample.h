/* The reference path of sampling (src/train/sample.c), for tests and benchmarks.
 * Included by: src/train, its tests and bench/. */
#ifndef ZT_TRAIN_SAMPLE_H
#define ZT_TRAIN_SAMPLE_H

#include "zt/train.h"

/* zt_lm_sample with the logits of each token from the whole context (the last context-length
 * tokens) recomputed through the model's forward_logits, no KV cache: the path sampling took
 * before it had one. Same arguments, checks and tokens. */
ZT_NODISCARD zt_status zt__lm_sample_recompute(const zt_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n,
                                                 double temperature, int top_k, uint64_t seed, int32_t **out,
                                                 int64_t *n_out);

#endif
