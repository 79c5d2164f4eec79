/* What the files of src/strategies/pipeline/ share: a growable text buffer (formatting,
 * rendering), per-(stage, microbatch) indexing, and the dependency rules the validator, the
 * simulator and the generators agree on.
 * Included by: src/strategies/pipeline only. */
#ifndef ZT_STRATEGIES_PIPELINE_INTERNAL_H
#define ZT_STRATEGIES_PIPELINE_INTERNAL_H

#include "zt/pipeline.h"

/* A malloc'd, NUL-terminated text that grows; a failed allocation sticks (oom) and is
 * reported once, by zt__pp_buf_take. */
typedef struct zt__pp_buf {
  char *p;
  size_t len, cap;
  bool oom;
} zt__pp_buf;
void zt__pp_buf_printf(zt__pp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the text to *out (ZT_STATUS_OOM, and the buffer freed, when an append failed). */
ZT_NODISCARD zt_status zt__pp_buf_take(zt__pp_buf *b, char **out);

/* ZT_STATUS_INVALID_ARG unless ranks, chunks and microbatches are within the bounds of
 * zt/pipeline.h (each, and their product): checked before anything of that size is allocated.
 * Within them every index below (op * S * M + stage * M + mb) fits an int. */
ZT_NODISCARD zt_status zt__pp_check_size(int ranks, int chunks, int microbatches);

/* The index of (stage, mb) in arrays of S*M entries. */
static inline int zt__pp_slot(const zt_pipeline_schedule *s, int stage, int mb) {
  return stage * s->microbatches + mb;
}
/* The chunk (0 .. V-1) that stage is on its rank. */
int zt__pp_stage_chunk(const zt_pipeline_schedule *s, int stage);
/* Whether op is F, B, W or BW. */
static inline bool zt__pp_is_compute(zt_pipeline_op op) { return op <= ZT_PIPELINE_OP_BW; }
/* The duration of a compute action op of stage `stage` under c, on a schedule of `chunks`
 * chunks per rank (c->stage's value, else c's per-rank-share cost / chunks). */
static inline double zt__pp_cost(const zt_pipeline_costs *c, int chunks, zt_pipeline_op op, int stage) {
  const double *k = c->stage ? c->stage + 3 * stage : NULL;
  double V = chunks;
  switch (op) {
    case ZT_PIPELINE_OP_F: return k ? k[0] : c->f / V;
    case ZT_PIPELINE_OP_B: return k ? k[1] : c->b / V;
    case ZT_PIPELINE_OP_W: return k ? k[2] : c->w / V;
    case ZT_PIPELINE_OP_BW: return k ? k[1] + k[2] : (c->b + c->w) / V;
    default: return 0;
  }
}

/* ZT_STATUS_INVALID_ARG unless every cost of c is finite and within ZT_PIPELINE_MAX_COST (the
 * per-stage ones too, 3 x stages of them, when c->stage is set). */
ZT_NODISCARD zt_status zt__pp_check_costs(const zt_pipeline_costs *c, int stages);

/* Rule 1 of zt_pipeline_validate: every action's kind, stage and microbatch in range, its stage
 * on its rank. What makes a schedule safe to index (zt__pp_index, zt__pp_cost's stage costs). */
ZT_NODISCARD zt_status zt__pp_check_ranges(const zt_pipeline_schedule *s);
/* Rules 1 to 5 of zt_pipeline_validate (without lowering a compute-only s). */
ZT_NODISCARD zt_status zt__pp_check_rules(const zt_pipeline_schedule *s);
/* zt_pipeline_lower of a compute-only s that passed zt__pp_check_rules. */
ZT_NODISCARD zt_status zt__pp_lower_checked(const zt_pipeline_schedule *s, zt_pipeline_schedule **out);

/* Simulate without building the result (the validator's deadlock check); on a deadlock the
 * error names what each rank waits for. */
ZT_NODISCARD zt_status zt__pp_check_progress(const zt_pipeline_schedule *s);


/* Where each (op, stage, mb) is in s: rank and index of its first occurrence, or rank -1. */
typedef struct zt__pp_index {
  int *rank, *idx; /* [op * S * M + slot] */
} zt__pp_index;
ZT_NODISCARD zt_status zt__pp_index_build(const zt_pipeline_schedule *s, zt__pp_index *ix);
void zt__pp_index_free(zt__pp_index *ix);
/* Rank r's action i in ix (-1 for the rank when absent). */
static inline int zt__pp_find(const zt_pipeline_schedule *s, const zt__pp_index *ix, zt_pipeline_op op, int stage,
                              int mb, int *idx) {
  size_t k = (size_t)op * (size_t)zt_pipeline_stage_count(s) * (size_t)s->microbatches + (size_t)zt__pp_slot(s, stage, mb);
  *idx = ix->idx[k];
  return ix->rank[k];
}

/* The list scheduler behind zb-h2, zb-v (M < 2P), auto and one of v-half's and v-min's
 * candidates (greedy.c): every rank runs, at each moment, the ready backward of its oldest
 * microbatch, else its oldest ready forward if its live activations stay within limit[r]
 * (chunk units; on a V rank the first chunk's forward leaves one unit free for the second
 * chunk's), else a deferred W; it waits otherwise. split false: BW instead of B then W. costs are those of a rank's share. */
typedef struct zt__pp_greedy {
  int ranks, chunks, microbatches;
  zt_pipeline_placement placement;
  const int *limit; /* per rank */
  bool split;
  zt_pipeline_costs costs;
} zt__pp_greedy;
ZT_NODISCARD zt_status zt__pp_greedy_run(const zt__pp_greedy *g, zt_pipeline_schedule **out);
#endif
