/* Recompute plans (zt/strategy.h): a mode per block, grouped into regions of up to `every`
 * blocks, run by a wrapper on the model's block sequence; FULL and SELECTIVE regions run
 * inside zt_checkpoint, whose recomputation runs the region's span again through the same
 * wrapper chain (the span's `next`, kept in a part record). A span that cuts a region (a
 * pipeline stage boundary inside it) runs the cut parts as regions of their own. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/status_internal.h"
#include "zt/checkpoint.h"
#include "zt/nn.h"
#include "zt/strategy.h"

/* One region: blocks [first, first + count) of one mode. */
typedef struct region {
  int first, count;
  zt_recompute mode;
  zt_checkpoint_policy policy;
} region;

/* What one checkpoint runs: blocks [lo, lo + n) through next. Its address is the checkpoint's
 * user_data, so it lives as long as the plan's regions do; one per distinct part. */
typedef struct part {
  zt_span_next next;
  int lo, n;
} part;

struct zt_recompute_plan {
  zt_recompute mode;     /* when modes is NULL: every block's */
  zt_recompute *modes;   /* or one per block (n_modes) */
  int n_modes;
  int every;
  zt_checkpoint_policy policy;
  /* attached */
  zt_module *seq;
  int wrapper_id;
  region *regions; /* up to seq->n_children */
  int n_regions;
  part **parts;    /* the parts run so far (kept: recomputation in backward reads them) */
  int n_parts, cap_parts;
};

const char *zt_recompute_name(zt_recompute mode) {
  switch (mode) {
  case ZT_RECOMPUTE_NONE: return "none";
  case ZT_RECOMPUTE_FULL: return "full";
  case ZT_RECOMPUTE_SELECTIVE: return "selective";
  case ZT_RECOMPUTE_PLAN: return "plan";
  }
  return "?";
}

zt_recompute_options zt_recompute_options_default(void) {
  zt_recompute_options o = {0};
  o.mode = ZT_RECOMPUTE_NONE;
  o.every = 1;
  o.policy = (zt_checkpoint_policy){zt_checkpoint_policy_save_wide_gemm, NULL};
  return o;
}

static bool block_mode(zt_recompute m) {
  return m == ZT_RECOMPUTE_NONE || m == ZT_RECOMPUTE_FULL || m == ZT_RECOMPUTE_SELECTIVE;
}

static zt_status check(const zt_recompute_options *o) {
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_recompute_options is NULL");
  if (o->modes) {
    if (o->n_modes < 1)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_recompute_options.n_modes is %d with modes given; give one mode per block",
                    o->n_modes);
    for (int i = 0; i < o->n_modes; i++)
      if (!block_mode(o->modes[i]))
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "zt_recompute_options.modes: block %d has mode %d; a block's mode is none, full or selective", i,
                      (int)o->modes[i]);
  } else if (!block_mode(o->mode)) {
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_recompute_options.mode is %d, not none, full or selective (per-block plans: "
                  "zt_recompute_options.modes)",
                  (int)o->mode);
  }
  if (o->every < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_recompute_options.every is %d: blocks per region must be >= 1", o->every);
  return ZT_OK;
}

static zt_recompute mode_of(const zt_recompute_plan *p, int i) { return p->modes ? p->modes[i] : p->mode; }

/* The regions of plan p over n blocks: runs of one mode, cut every `every` blocks; *out is new. */
static zt_status make_regions(const zt_recompute_plan *p, int n, region **out, int *n_out) {
  if (p->modes && p->n_modes != n)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "the recompute plan has %d per-block modes but the model has %d blocks",
                  p->n_modes, n);
  region *r = malloc(sizeof *r * (size_t)(n > 0 ? n : 1));
  if (!r) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for %d recompute regions", n);
  int k = 0;
  for (int i = 0; i < n;) {
    int len = 1;
    while (i + len < n && len < p->every && mode_of(p, i + len) == mode_of(p, i)) len++;
    r[k++] = (region){i, len, mode_of(p, i), p->policy};
    i += len;
  }
  *out = r;
  *n_out = k;
  return ZT_OK;
}

/* Everything or nothing: a failure leaves p as it was. */
static zt_status set(zt_recompute_plan *p, const zt_recompute_options *o) {
  ZT_TRY(check(o));
  zt_recompute_plan next = *p;
  next.mode = o->mode;
  next.modes = NULL;
  next.n_modes = o->modes ? o->n_modes : 0;
  next.every = o->every;
  next.policy = o->policy.fn ? o->policy : zt_recompute_options_default().policy;
  if (o->modes) {
    if (!(next.modes = malloc(sizeof *next.modes * (size_t)o->n_modes)))
      return ZT_ERR(ZT_STATUS_OOM, "out of host memory for %d recompute modes", o->n_modes);
    memcpy(next.modes, o->modes, sizeof *next.modes * (size_t)o->n_modes);
  }
  if (p->seq) {
    zt_status s = make_regions(&next, p->seq->n_children, &next.regions, &next.n_regions);
    if (s) {
      free(next.modes);
      return s;
    }
    free(p->regions);
  }
  free(p->modes);
  *p = next;
  return ZT_OK;
}

zt_status zt_recompute_plan_new(const zt_recompute_options *o, zt_recompute_plan **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_recompute_plan_new: out is NULL");
  *out = NULL;
  zt_recompute_plan *p = calloc(1, sizeof *p);
  if (!p) return ZT_ERR(ZT_STATUS_OOM, "zt_recompute_plan_new: out of host memory");
  zt_status s = set(p, o);
  if (s) {
    free(p);
    return zt__error_prefix(s, "zt_recompute_plan_new");
  }
  *out = p;
  return ZT_OK;
}

zt_status zt_recompute_plan_set(zt_recompute_plan *p, const zt_recompute_options *o) {
  if (!p) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_recompute_plan_set: plan is NULL");
  zt_status s = set(p, o);
  return s ? zt__error_prefix(s, "zt_recompute_plan_set") : ZT_OK;
}

zt_recompute zt_recompute_plan_mode(const zt_recompute_plan *p, int *every) {
  int e = p ? p->every : 1;
  if (p && p->seq && e > p->seq->n_children) e = p->seq->n_children;
  if (every) *every = e;
  if (!p) return ZT_RECOMPUTE_NONE;
  if (!p->modes) return p->mode;
  for (int i = 1; i < p->n_modes; i++)
    if (p->modes[i] != p->modes[0]) return ZT_RECOMPUTE_PLAN;
  return p->modes[0];
}

void zt_recompute_plan_modes(const zt_recompute_plan *p, int n_modes, zt_recompute *modes) {
  for (int i = 0; p && modes && i < n_modes; i++) modes[i] = p->modes && i < p->n_modes ? p->modes[i] : p->mode;
}

zt_checkpoint_policy zt_recompute_plan_policy(const zt_recompute_plan *p) {
  return p ? p->policy : zt_recompute_options_default().policy;
}

/* ------------------------------------------------------------------ the wrapper */

/* A region's checkpoint function: its part of the span, run further in. */
static zt_status region_fn(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out;
  const part *q = ud;
  return zt_span_run(q->next, q->lo, q->n, in[0], out);
}

/* The part record for blocks [lo, lo + n) through next: the one made before, or a new one. */
static part *part_of(zt_recompute_plan *p, zt_span_next next, int lo, int n) {
  for (int i = 0; i < p->n_parts; i++) {
    part *q = p->parts[i];
    if (q->lo == lo && q->n == n && q->next.seq == next.seq && q->next.level == next.level) return q;
  }
  part **grown = zt__grow(p->parts, &p->cap_parts, p->n_parts + 1, sizeof *grown, "a recompute plan's parts");
  part *q = grown ? malloc(sizeof *q) : NULL;
  if (grown) p->parts = grown;
  if (!q) {
    if (grown) ZT_ERR(ZT_STATUS_OOM, "out of host memory for a recompute part");
    return NULL;
  }
  *q = (part){next, lo, n};
  p->parts[p->n_parts++] = q;
  return q;
}

static void parts_free(zt_recompute_plan *p) {
  for (int i = 0; i < p->n_parts; i++) free(p->parts[i]);
  p->n_parts = 0;
}

static zt_status run(void *ud, zt_span_next next, int first, int count, zt_tensor *x, zt_tensor **y) {
  zt_recompute_plan *p = ud;
  zt_tensor *cur = x;
  zt_status s = ZT_OK;
  // with grad mode off (eval, sampling) zt_checkpoint just runs the region
  for (int g = 0; g < p->n_regions && !s; g++) {
    region *r = &p->regions[g];
    int lo = r->first > first ? r->first : first;
    int hi = r->first + r->count < first + count ? r->first + r->count : first + count;
    if (lo >= hi) continue;
    zt_tensor *o = NULL;
    if (r->mode == ZT_RECOMPUTE_NONE) {
      s = zt_span_run(next, lo, hi - lo, cur, &o);
    } else {
      part *q = part_of(p, next, lo, hi - lo);
      zt_checkpoint_options co = zt_checkpoint_options_default();
      if (r->mode == ZT_RECOMPUTE_SELECTIVE) co.policy = r->policy;
      s = q ? zt_checkpoint(region_fn, q, 1, &cur, 1, &o, &co) : ZT_STATUS_OOM;
    }
    if (cur != x) zt_tensor_free(cur);
    cur = s ? NULL : o;
  }
  if (s) return s;
  *y = cur;
  return ZT_OK;
}

/* ------------------------------------------------------------------ the strategy */

static void detach(void *self) {
  zt_recompute_plan *p = self;
  if (!p->seq) return;
  zt_module_remove_wrapper(p->seq, p->wrapper_id);
  p->seq = NULL;
  p->n_regions = 0;
}

static zt_status attach(void *self, const zt_model *m) {
  zt_recompute_plan *p = self;
  if (p->seq) return ZT_ERR(ZT_STATUS_STATE, "the recompute plan is attached to a model already; detach it first");
  zt_module *seq = zt_model_blocks(m);
  if (!seq) return ZT_ERR(ZT_STATUS_INVALID_ARG, "the model has no block sequence");
  region *r = NULL;
  int n = 0;
  ZT_TRY(make_regions(p, seq->n_children, &r, &n));
  zt_module_wrapper w = {run, ZT_STRATEGY_ORDER_RECOMPUTE, p};
  zt_status s = zt_module_add_wrapper(seq, &w, &p->wrapper_id);
  if (s) {
    free(r);
    return s;
  }
  free(p->regions);
  p->regions = r;
  p->n_regions = n;
  p->seq = seq;
  return ZT_OK;
}

static const zt_strategy_ops ops = {"recompute", ZT_STRATEGY_ORDER_RECOMPUTE, attach, detach};

zt_strategy zt_recompute_plan_strategy(zt_recompute_plan *p) { return (zt_strategy){&ops, p}; }

void zt_recompute_plan_free(zt_recompute_plan *p) {
  if (!p) return;
  detach(p);
  free(p->modes);
  free(p->regions);
  parts_free(p);
  free(p->parts);
  free(p);
}
