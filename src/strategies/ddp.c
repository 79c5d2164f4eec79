/* DDP: every rank holds all parameters; gradients are averaged over the ranks in buckets
 * (flat COMM buffers made once, parameters in reverse order) whose all-reduces start from
 * post-accumulate-grad hooks while backward still runs (PyTorch DDP's reducer).
 * Invariants: buckets start strictly in bucket order on every rank (next_launch only grows
 * within a round); every started all-reduce is waited on before the round ends, also when
 * it ends in an error; a round belongs to one graph task and a new task starts a new one.
 * The engine runs a leaf's accumulator as soon as its grad is complete, so buckets start
 * while the rest of backward computes. Reentrant checkpointing (a nested
 * backward inside a round) is not supported: its task would start a new round. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zt/fsdp.h"
#include "core/backend.h"
#include "core/tensor_internal.h"
#include "zt/autograd.h"

typedef struct ddp_param {
  struct zt_ddp *d;
  zt_tensor *t;      /* borrowed */
  const char *name;  /* borrowed from the caller's zt_param array */
  int bucket;
  int64_t offset;    /* elements into the bucket buffer */
  int64_t numel;
  bool ready;        /* its grad arrived in the current round */
  zt_hook_handle *hook;
} ddp_param;

typedef struct ddp_bucket {
  zt_tensor *buf;      /* 1-D, tag COMM, dtype of its parameters */
  int first, count;    /* its parameters: ps[first .. first+count) */
  int n_ready;
  bool launched;
  zt_comm_work *work;  /* in flight when launched and not yet waited */
} ddp_bucket;

struct zt_ddp {
  zt_comm *comm;
  ddp_param *ps; /* trainable parameters, in reverse order of the caller's list */
  int n_ps;
  ddp_bucket *bs;
  int n_bs;
  bool sync;
  bool active;       /* a round (one synced backward) is under way */
  int64_t task;      /* its graph task */
  int next_launch;   /* buckets [0, next_launch) are started */
  zt_dp_stats stats;
};

/* What the ring algorithm sends for an all-reduce (or a broadcast) of bytes; the same
 * rounding as zt_comm_stats, so the two agree when one strategy owns the group. */
static void account(zt_ddp *d, size_t bytes, bool all_reduce) {
  int n = zt_comm_size(d->comm);
  double factor = n > 1 ? (all_reduce ? 2.0 * (n - 1) / n : 1.0) : 0.0;
  d->stats.comm_calls++;
  d->stats.bytes_sent += (int64_t)(factor * (double)bytes + 0.5);
  if (all_reduce) d->stats.all_reduces++;
}

zt_ddp_options zt_ddp_options_default(void) { return (zt_ddp_options){25 << 20, true}; }

static zt_status wait_bucket(zt_ddp *d, ddp_bucket *b) {
  if (!b->work) return ZT_OK;
  double t0 = zt_clock_now();
  zt_status s = zt_comm_wait(b->work);
  d->stats.wait_s += zt_clock_now() - t0;
  b->work = NULL;
  return s;
}

/* End a round: wait for whatever is in flight (every handle must be waited on), clear the
 * flags. Returns the first failure of those waits. */
static zt_status end_round(zt_ddp *d) {
  zt_status first = ZT_OK;
  for (int i = 0; i < d->n_bs; i++) {
    zt_status s = wait_bucket(d, &d->bs[i]);
    if (s && !first) first = s;
    d->bs[i].launched = false;
    d->bs[i].n_ready = 0;
  }
  for (int i = 0; i < d->n_ps; i++) d->ps[i].ready = false;
  d->active = false;
  d->next_launch = 0;
  return first;
}

/* Copy the bucket's grads into its buffer (no grad: zeros) and start the average. */
static zt_status launch(zt_ddp *d, ddp_bucket *b) {
  for (int i = b->first; i < b->first + b->count; i++) {
    ddp_param *p = &d->ps[i];
    if (!p->numel) continue;
    zt_tensor *g = p->t->grad;
    if (!g) {
      zt_tensor *slot; /* the parameter's slot of the bucket, zeroed by the device's backend */
      ZT_TRY(zt__tensor_new_view(b->buf->storage, b->buf->offset + p->offset, 1, &p->numel, NULL, b->buf->dtype, &slot));
      zt__dev_fill(slot, 0.0);
      zt_tensor_free(slot);
      continue;
    }
    if (g->dtype != b->buf->dtype || zt_tensor_numel(g) != p->numel)
      return ZT_ERR(ZT_STATUS_DTYPE,
                    "DDP: the .grad of parameter '%s' is %s with %lld elements but the parameter is %s with %lld; "
                    "a hook or the caller replaced it with a different tensor: keep .grad shaped like the parameter",
                    p->name, zt_dtype_name(g->dtype), (long long)zt_tensor_numel(g), zt_dtype_name(b->buf->dtype),
                    (long long)p->numel);
    void *src; /* unused: zt_tensor_data only checks that the bytes exist (not released) */
    zt_tensor *tmp = NULL;
    if (zt_tensor_is_contiguous(g)) {
      ZT_TRY(zt_tensor_data(g, &src));
    } else { /* a strided grad: gather it once (rare; the engine makes contiguous grads) */
      ZT_TRY(zt_tensor_clone_data(g, ZT_MEM_TAG_TEMP, &tmp));
    }
    zt__dev_copy_range(b->buf, p->offset, tmp ? tmp : g, 0, p->numel);
    zt_tensor_free(tmp);
  }
  zt_tensor_bump_version(b->buf);
  b->launched = true;
  ZT_TRY(zt_all_reduce_async(d->comm, b->buf, ZT_REDUCE_AVG, &b->work));
  account(d, zt_tensor_nbytes(b->buf), true);
  return ZT_OK;
}

/* Start every bucket that is complete and has all earlier buckets started. */
static zt_status launch_ready(zt_ddp *d) {
  while (d->next_launch < d->n_bs) {
    ddp_bucket *b = &d->bs[d->next_launch];
    if (b->n_ready < b->count) break;
    d->next_launch++;
    ZT_TRY(launch(d, b));
  }
  return ZT_OK;
}

/* Write the averaged values back into each .grad (creating it, tag GRAD, when missing). */
static zt_status write_back(zt_ddp *d, ddp_bucket *b) {
  for (int i = b->first; i < b->first + b->count; i++) {
    ddp_param *p = &d->ps[i];
    zt_tensor *g = p->t->grad;
    if (g && !zt_tensor_is_contiguous(g)) { /* replace a strided grad by a contiguous one */
      p->t->grad = NULL;
      zt_tensor_free(g);
      g = NULL;
    }
    if (!g) {
      ZT_TRY(zt_tensor_empty_tagged(p->t->ndim, p->t->shape, p->t->dtype, zt_tensor_device(p->t), ZT_MEM_TAG_GRAD,
                                    &g));
      p->t->grad = g;
    }
    if (p->numel) {
      void *dst; /* unused: the check that g's bytes exist */
      ZT_TRY(zt_tensor_data(g, &dst));
      zt__dev_copy_range(g, 0, b->buf, p->offset, p->numel);
    }
    zt_tensor_bump_version(g);
  }
  return ZT_OK;
}

/* End-of-backward: start what is left in order, wait for all, write back, reset. */
static zt_status finish_cb(void *user_data) {
  zt_ddp *d = user_data;
  if (!d->active) return ZT_OK;
  zt_status s = ZT_OK;
  while (!s && d->next_launch < d->n_bs) s = launch(d, &d->bs[d->next_launch++]);
  for (int i = 0; i < d->n_bs; i++) {
    zt_status w = wait_bucket(d, &d->bs[i]);
    if (w && !s) s = w;
  }
  for (int i = 0; !s && i < d->n_bs; i++) s = write_back(d, &d->bs[i]);
  zt_status e = end_round(d);
  return s ? s : e;
}

static zt_status begin_round(zt_ddp *d, int64_t task) {
  /* A round still active here belongs to a backward that failed before its callbacks ran:
   * finish its communication and forget it. */
  if (d->active) ZT_IGNORE(end_round(d), "the failed backward's own error was reported");
  ZT_TRY(zt_autograd_queue_callback(finish_cb, d));
  d->active = true;
  d->task = task;
  d->next_launch = 0;
  return ZT_OK;
}

static zt_status grad_ready_hook(zt_tensor *leaf, void *user_data) {
  (void)leaf;
  ddp_param *p = user_data;
  zt_ddp *d = p->d;
  if (!d->sync) return ZT_OK;
  int64_t task = zt_autograd_graph_task_id();
  if (!d->active || task != d->task) ZT_TRY(begin_round(d, task));
  ddp_bucket *b = &d->bs[p->bucket];
  if (p->ready) {
    if (b->launched)
      return ZT_ERR(ZT_STATUS_STATE,
                    "DDP: parameter '%s' got a second gradient in one backward after its bucket's all-reduce had "
                    "started; use each parameter in one backward pass per step (no reentrant checkpointing or "
                    "nested backward over it under DDP)",
                    p->name);
    return ZT_OK; /* its bucket reads .grad when it starts: the sum is what is reduced */
  }
  p->ready = true;
  b->n_ready++;
  return launch_ready(d);
}

/* ------------------------------------------------------------------ create / free */
static zt_status build_buckets(zt_ddp *d, int64_t cap) {
  d->bs = calloc((size_t)(d->n_ps ? d->n_ps : 1), sizeof *d->bs);
  if (!d->bs) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for DDP buckets");
  int64_t bytes = 0, numel = 0;
  for (int i = 0; i < d->n_ps; i++) {
    ddp_param *p = &d->ps[i];
    ddp_bucket *b = d->n_bs ? &d->bs[d->n_bs - 1] : NULL;
    bool fresh = !b || bytes >= cap || d->ps[b->first].t->dtype != p->t->dtype;
    if (fresh) {
      b = &d->bs[d->n_bs++];
      b->first = i;
      bytes = numel = 0;
    }
    p->bucket = d->n_bs - 1;
    p->offset = numel;
    b->count++;
    numel += p->numel;
    bytes += p->numel * (int64_t)zt_dtype_size(p->t->dtype);
  }
  for (int k = 0; k < d->n_bs; k++) {
    ddp_bucket *b = &d->bs[k];
    const ddp_param *last = &d->ps[b->first + b->count - 1];
    int64_t n = last->offset + last->numel;
    ZT_TRY(zt_tensor_empty_tagged(1, &n, last->t->dtype, zt_tensor_device(last->t), ZT_MEM_TAG_COMM, &b->buf));
  }
  return ZT_OK;
}

static zt_status broadcast_params(zt_ddp *d, int n_params, const zt_param *params) {
  if (zt_comm_size(d->comm) == 1) return ZT_OK;
  bool prev = zt_set_grad_enabled(false);
  zt_status s = ZT_OK;
  for (int i = 0; i < n_params && !s; i++) {
    zt_tensor *t = params[i].tensor;
    s = zt_broadcast(d->comm, t, 0);
    if (s)
      s = zt__error_prefix(s, "DDP: broadcasting parameter '%s' from rank 0", params[i].name);
    else
      account(d, zt_tensor_nbytes(t), false);
  }
  zt_set_grad_enabled(prev);
  return s;
}

static zt_status check_params(int n_params, const zt_param *params) {
  for (int i = 0; i < n_params; i++) {
    const zt_tensor *t = params[i].tensor;
    if (!t)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_ddp_new: parameter %d ('%s') has a NULL tensor", i, params[i].name);
    for (int j = 0; j < i; j++)
      if (params[j].tensor == t)
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "zt_ddp_new: parameters '%s' and '%s' are the same tensor; list a shared (tied) tensor once",
                      params[j].name, params[i].name);
    if (!zt_tensor_is_contiguous(t))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_ddp_new: parameter '%s' must be a contiguous tensor", params[i].name);
    /* buckets are flat buffers on the parameters' device (any device with a backend) */
    if (!zt_device_equal(zt_tensor_device(t), zt_tensor_device(params[0].tensor))) {
      char a[16], b[16];
      return ZT_ERR(ZT_STATUS_DEVICE, "zt_ddp_new: parameter '%s' is on %s and '%s' on %s; move them to one device",
                    params[i].name, zt_device_str(zt_tensor_device(t), a), params[0].name,
                    zt_device_str(zt_tensor_device(params[0].tensor), b));
    }
    if (t->requires_grad && t->dtype != ZT_DTYPE_F32 && t->dtype != ZT_DTYPE_F64)
      return ZT_ERR(ZT_STATUS_DTYPE,
                    "zt_ddp_new: parameter '%s' is %s; DDP averages f32 or f64 gradients: keep master parameters in "
                    "f32, or freeze this one (requires_grad false)",
                    params[i].name, zt_dtype_name(t->dtype));
    if (t->requires_grad && !zt_tensor_is_leaf(t))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_ddp_new: parameter '%s' is not a leaf tensor", params[i].name);
  }
  return ZT_OK;
}

zt_status zt_ddp_new(zt_comm *comm, int n_params, const zt_param *params, const zt_ddp_options *o, zt_ddp **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_ddp_new: out is NULL");
  *out = NULL;
  if (!comm) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_ddp_new: comm is NULL; pass a process group (zt_comm_world)");
  if (n_params < 0 || !params)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_ddp_new: params is %s and n_params is %d; pass the model's parameter list",
                  params ? "set" : "NULL", n_params);
  zt_ddp_options opt = o ? *o : zt_ddp_options_default();
  if (opt.bucket_bytes <= 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_ddp_new: bucket_bytes is %lld; it must be positive (default 25 MiB)",
                  (long long)opt.bucket_bytes);
  ZT_TRY(check_params(n_params, params));

  zt_ddp *d = calloc(1, sizeof *d);
  if (!d) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a zt_ddp");
  d->comm = comm;
  d->sync = true;
  d->ps = calloc((size_t)(n_params ? n_params : 1), sizeof *d->ps);
  zt_status s = d->ps ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory for DDP parameters");
  /* reverse order: the order backward produces grads, so early buckets fill first */
  for (int i = n_params - 1; !s && i >= 0; i--) {
    zt_tensor *t = params[i].tensor;
    if (!t->requires_grad) continue;
    d->ps[d->n_ps++] = (ddp_param){d, t, params[i].name, 0, 0, zt_tensor_numel(t), false, NULL};
  }
  if (!s) s = build_buckets(d, opt.bucket_bytes);
  if (!s && opt.broadcast_params) s = broadcast_params(d, n_params, params);
  /* In the caller's order: registering makes each leaf's accumulator node when it has none,
   * and the engine runs ready nodes newest first, so fresh accumulators then fire in reverse
   * parameter order, which is bucket order. */
  for (int i = d->n_ps - 1; !s && i >= 0; i--)
    s = zt_tensor_register_post_accumulate_grad_hook(d->ps[i].t, grad_ready_hook, &d->ps[i], &d->ps[i].hook);
  if (s) {
    zt_ddp_free(d);
    return s;
  }
  *out = d;
  return ZT_OK;
}

void zt_ddp_free(zt_ddp *d) {
  if (!d) return;
  if (d->active) ZT_IGNORE(end_round(d), "freeing: its communication is only finished, not used");
  for (int i = 0; i < d->n_ps; i++) zt_hook_remove(d->ps[i].hook);
  for (int k = 0; d->bs && k < d->n_bs; k++) zt_tensor_free(d->bs[k].buf);
  free(d->bs);
  free(d->ps);
  free(d);
}

void zt_ddp_set_sync(zt_ddp *d, bool sync) {
  if (d) d->sync = sync;
}

bool zt_ddp_sync(const zt_ddp *d) { return d ? d->sync : false; }

void zt_ddp_stats_get(const zt_ddp *d, zt_dp_stats *out) {
  if (!out) return;
  *out = d ? d->stats : (zt_dp_stats){0};
}

void zt_ddp_stats_reset(zt_ddp *d) {
  if (d) d->stats = (zt_dp_stats){0};
}
