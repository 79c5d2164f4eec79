/* The option table's internals (src/train/options.c: the table; src/train/config.c: the parsers
 * by type): a row's value in a run, as the ranks compare it and a checkpoint records it.
 * Internal.
 * Included by: src/train (and tests/test_options.c). */
#ifndef ZT_TRAIN_OPTIONS_H
#define ZT_TRAIN_OPTIONS_H

#include "zt/train.h"

/* What a run's values are read from. */
typedef struct zt__option_ctx {
  const zt_train_config *c; /* the config as the run resolved it (run_options.c: the model's shape, dropout and
                             * min-lr as used; schedule "none" without a pipeline) */
  int world;                /* the ranks */
  int64_t warmup;           /* the warm-up the run resolved */
} zt__option_ctx;
/* Row o's value (o from zt_train_option_at) as zt_option_format writes it: a row with a field
 * from x->c, a derived row without one (ranks, warmup-resolved) from x itself (its offset is
 * into zt__option_ctx). */
void zt__option_value(const zt_option *o, const zt__option_ctx *x, char *buf, size_t cap);

/* The parsers of config.c that special rows share: a non-empty text into dst[cap]; a size in
 * bytes (ZT_OPTION_TYPE_SIZE's syntax). Errors name the option as key. */
ZT_NODISCARD zt_status zt__option_parse_text(const char *key, const char *v, char *dst, size_t cap);
ZT_NODISCARD zt_status zt__option_parse_bytes(const char *key, const char *v, int64_t *out);

#endif
