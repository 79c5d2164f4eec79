/* The planner's calibration (zt/plan.h): defaults, the environment's figures (ZT_PLAN_CALIBRATION),
 * files, and measuring every figure here through the library's own ops, stores and collectives.
 * Invariant: each rate is measured with the work counted the way plan_cost.c counts it, so that a
 * prediction of the measured work reproduces the measured time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "io/buf.h"
#include "io/json.h"
#include "train/gemm_rate.h"
#include "train/plan_internal.h"
#include "zt/autograd.h"
#include "zt/comm.h"
#include "zt/ops.h"
#include "zt/store.h"

static const char *const k_fig_names[ZT_PLAN_FIG_COUNT] = {"gemm_gflops", "attn_gflops", "elem_bps", "read_bps",
                                                           "write_bps", "comm_latency_s", "comm_bps", "base_bytes"};
const char *zt_plan_figure_name(zt_plan_figure f) {
  return (unsigned)f < ZT_PLAN_FIG_COUNT ? k_fig_names[f] : "?";
}
const char *zt_plan_source_name(zt_plan_source s) {
  return s == ZT_PLAN_SOURCE_MEASURED ? "measured" : s == ZT_PLAN_SOURCE_GIVEN ? "given" : "default";
}

void zt_plan_calibration_default(zt_plan_calibration *out) {
  memset(out, 0, sizeof *out);
  out->value[ZT_PLAN_FIG_GEMM] = 50;
  out->value[ZT_PLAN_FIG_ATTN] = 10;
  out->value[ZT_PLAN_FIG_ELEM] = 4e9;
  out->value[ZT_PLAN_FIG_READ] = 1e9;
  out->value[ZT_PLAN_FIG_WRITE] = 1e9;
  out->value[ZT_PLAN_FIG_COMM_LAT] = 20e-6;
  out->value[ZT_PLAN_FIG_COMM_BW] = 2e9;
  out->value[ZT_PLAN_FIG_BASE] = 64.0 * 1048576.0;
  out->world = 1, out->threads = 0;
}

/* ------------------------------------------------ the environment */
/* ZT_PLAN_CALIBRATION's keys; "gflops" and "rss" are the --mem-limit planner's older names. */
static const struct {
  const char *key;
  zt_plan_figure fig;
} k_env_keys[] = {{"gemm", ZT_PLAN_FIG_GEMM},  {"gflops", ZT_PLAN_FIG_GEMM},   {"attn", ZT_PLAN_FIG_ATTN},
                  {"elem", ZT_PLAN_FIG_ELEM},  {"read", ZT_PLAN_FIG_READ},     {"write", ZT_PLAN_FIG_WRITE},
                  {"lat", ZT_PLAN_FIG_COMM_LAT}, {"bw", ZT_PLAN_FIG_COMM_BW}, {"base", ZT_PLAN_FIG_BASE},
                  {"rss", ZT_PLAN_FIG_BASE}};
#define ENV_KEYS ((int)(sizeof k_env_keys / sizeof *k_env_keys))

/* A number above 0, optionally K, M or G (powers of 1024), ending at a comma or the end. */
static bool env_number(const char *v, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || !(x > 0) || !isfinite(x)) return false;
  double m = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1;
  if (m > 1) end++;
  if (*end && *end != ',') return false;
  *out = x * m;
  return true;
}

zt_status zt_plan_calibration_env(zt_plan_calibration *c) {
  const char *e = getenv("ZT_PLAN_CALIBRATION");
  if (!e || !*e) return ZT_OK;
  double v[ZT_PLAN_FIG_COUNT];
  bool given[ZT_PLAN_FIG_COUNT] = {false};
  /* the whole text is checked before c changes: a bad item leaves c as it was */
  for (const char *p = e;;) {
    size_t n = strcspn(p, "=,");
    int k = 0;
    while (k < ENV_KEYS && !(strlen(k_env_keys[k].key) == n && !strncmp(p, k_env_keys[k].key, n))) k++;
    double x = 0;
    if (k == ENV_KEYS || p[n] != '=' || !env_number(p + n + 1, &x))
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "ZT_PLAN_CALIBRATION='%s': give comma-separated key=value items among gemm=GFLOPS (the GEMM rate; "
                    "gflops is its older name), attn=GFLOPS (attention's), elem=BPS (elementwise bytes per second), "
                    "read=BPS and write=BPS (the offload tier's), lat=SECONDS and bw=BPS (a small all-reduce's time and "
                    "a large one's bus bandwidth), base=BYTES (the process's RSS besides its accounted bytes; rss is its "
                    "older name); numbers above 0, sizes may end in K, M or G (e.g. gemm=50,read=1.5G,write=1.5G,base=24M)",
                    e);
    v[k_env_keys[k].fig] = x, given[k_env_keys[k].fig] = true;
    p += n + 1 + strcspn(p + n + 1, ",");
    if (!*p) break;
    p++; /* past the comma: an empty item after it is refused above */
  }
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++)
    if (given[f]) c->value[f] = v[f], c->source[f] = ZT_PLAN_SOURCE_GIVEN, c->spread[f] = 0;
  return ZT_OK;
}

/* ------------------------------------------------ files */
void zt__plan_put_calibration(zt__buf *b, const zt_plan_calibration *c) {
  char d[32];
  zt__buf_printf(b, "{\"world\":%d,\"threads\":%d,\"reps\":%d,\"figures\":{", c->world, c->threads, c->reps);
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) {
    zt__buf_printf(b, "%s\n  \"%s\":{\"value\":%s", f ? "," : "", k_fig_names[f], zt__fmt_double(d, c->value[f]));
    zt__buf_printf(b, ",\"source\":\"%s\",\"spread\":%s}", zt_plan_source_name(c->source[f]),
                   zt__fmt_double(d, c->spread[f]));
  }
  zt__buf_printf(b, "}}");
}

zt_status zt_plan_calibration_write(const zt_plan_calibration *c, const char *path) {
  if (!c || !path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_calibration_write: give a calibration and a path");
  zt__buf b = {0};
  zt__plan_put_calibration(&b, c);
  zt__buf_printf(&b, "\n");
  zt_status s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  return s;
}

static bool json_int(const zt__json *j, int lo, int *out) {
  int64_t v;
  if (!zt__json_i64(j, &v) || v < lo || v > 1 << 30) return false;
  *out = (int)v;
  return true;
}

/* One figure's object {"value": > 0, "source": a source's name, "spread": >= 0} into c (GIVEN). */
static zt_status read_figure(const char *path, int f, const zt__json *j, zt_plan_calibration *c) {
  const char *name = k_fig_names[f];
  if (j->kind != ZT__JSON_OBJECT)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "calibration file '%s': figure '%s' is not an object {\"value\": ...}", path, name);
  double value = NAN, spread = 0;
  for (int i = 0; i < j->n; i++) {
    const char *k = j->keys[i];
    const zt__json *v = &j->items[i];
    if (!strcmp(k, "value")) {
      if (!zt__json_f64(v, &value) || !(value > 0) || !isfinite(value))
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "calibration file '%s': figure '%s' has a value that is not a number above 0",
                      path, name);
    } else if (!strcmp(k, "spread")) {
      if (!zt__json_f64(v, &spread) || !(spread >= 0) || !isfinite(spread))
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "calibration file '%s': figure '%s' has a spread that is not a number >= 0",
                      path, name);
    } else if (!strcmp(k, "source")) {
      /* informative: what it was where it was written; read, it is given */
      bool known = false;
      for (int s = ZT_PLAN_SOURCE_DEFAULT; s <= ZT_PLAN_SOURCE_GIVEN; s++)
        known |= v->kind == ZT__JSON_STRING && !strcmp(v->str, zt_plan_source_name((zt_plan_source)s));
      if (!known)
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "calibration file '%s': figure '%s' has a source other than \"default\", \"measured\" or \"given\"",
                      path, name);
    } else {
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "calibration file '%s': figure '%s' has an unknown key '%s' (a figure has value, source and spread)",
                    path, name, k);
    }
  }
  if (isnan(value))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "calibration file '%s': figure '%s' has no value", path, name);
  c->value[f] = value, c->spread[f] = spread, c->source[f] = ZT_PLAN_SOURCE_GIVEN;
  return ZT_OK;
}

static zt_status read_calibration(const char *path, const zt__json *j, zt_plan_calibration *c) {
  if (j->kind != ZT__JSON_OBJECT)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "calibration file '%s' is not a JSON object {\"figures\": ...}", path);
  for (int i = 0; i < j->n; i++) {
    const char *k = j->keys[i];
    const zt__json *v = &j->items[i];
    bool ok = true;
    if (!strcmp(k, "world")) ok = json_int(v, 1, &c->world);
    else if (!strcmp(k, "threads")) ok = json_int(v, 0, &c->threads);
    else if (!strcmp(k, "reps")) ok = json_int(v, 0, &c->reps);
    else if (!strcmp(k, "figures")) {
      if (v->kind != ZT__JSON_OBJECT)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "calibration file '%s': figures is not an object", path);
      for (int m = 0; m < v->n; m++) {
        int f = 0;
        while (f < ZT_PLAN_FIG_COUNT && strcmp(v->keys[m], k_fig_names[f])) f++;
        if (f == ZT_PLAN_FIG_COUNT)
          return ZT_ERR(ZT_STATUS_INVALID_ARG,
                        "calibration file '%s': unknown figure '%s' (the figures are gemm_gflops, attn_gflops, elem_bps, "
                        "read_bps, write_bps, comm_latency_s, comm_bps and base_bytes)",
                        path, v->keys[m]);
        ZT_TRY(read_figure(path, f, &v->items[m], c));
      }
    } else {
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "calibration file '%s': unknown key '%s' (a calibration file has world, threads, reps and figures)",
                    path, k);
    }
    if (!ok)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "calibration file '%s': %s is not a whole number of %s", path, k,
                    !strcmp(k, "world") ? "at least 1" : "at least 0");
  }
  return ZT_OK;
}

zt_status zt_plan_calibration_read(const char *path, zt_plan_calibration *c) {
  if (!c || !path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_calibration_read: give a path and a calibration");
  void *text = NULL;
  size_t len = 0;
  ZT_TRY(zt__read_regular_file(path, ZT__READ_JSON_MAX, "calibration file", &text, &len));
  char what[1100];
  snprintf(what, sizeof what, "calibration file '%s'", path);
  zt__json *j = NULL;
  zt_status s = zt__json_parse(text, len, what, &j);
  free(text);
  zt_plan_calibration tmp = *c; /* c changes only when the whole file reads */
  if (!s) s = read_calibration(path, j, &tmp);
  zt__json_free(j);
  if (!s) *c = tmp;
  return s;
}

/* ------------------------------------------------ helpers shared with the --mem-limit planner */
/* OpenBLAS packs a GEMM's operands into per-thread buffers that stay resident for the process's
 * life, as much as the largest packing so far touched: one GEMM shaped like the widest weight
 * gradient a step computes (dW = dY^T X over the MLP's ffn rows, or the head's vocabulary rows,
 * which the lm head computes in blocks of 4096; tokens deep, where OpenBLAS's own K block stops
 * well before 1024) makes the RSS measured after it hold them. */
void zt__plan_warm_blas(const zt_lm_config *m, int64_t tokens) {
  zt_lm_dims d = zt_lm_config_dims(m);
  int64_t C = d.hidden;
  int64_t M = d.vocab < 4096 ? d.vocab : 4096, K = tokens < 1024 ? tokens : 1024;
  if (d.ffn > M) M = d.ffn;
  zt_mem_tag tag = zt_mem_tag_push(ZT_MEM_TAG_TEMP);
  zt_tensor *a = NULL, *b = NULL, *y = NULL;
  zt_status s = zt_tensor_zeros(2, (int64_t[]){K, M}, ZT_DTYPE_F32, ZT_CPU, &a);
  if (!s) s = zt_tensor_zeros(2, (int64_t[]){K, C}, ZT_DTYPE_F32, ZT_CPU, &b);
  if (!s) s = zt_matmul(a, b, true, false, &y); /* (M, C) = a^T b, as linear's weight grad */
  zt_tensor_free(y), zt_tensor_free(b), zt_tensor_free(a);
  zt_mem_tag_pop(tag);
  if (s) zt_clear_error(); /* out of memory here: the run will say so */
}

zt_status zt__plan_store_rate(zt_offload_tier tier, const char *dir, size_t bytes, double *rd, double *wr) {
  *rd = *wr = 0;
  size_t n = (bytes > ((size_t)1 << 20) ? bytes : ((size_t)1 << 20)) & ~(size_t)4095;
  zt_store *st = NULL;
  ZT_TRY(tier == ZT_OFFLOAD_DISK ? zt_store_disk_new(dir, "zt_plan_probe", &st) : zt_store_memory_new(&st));
  void *buf = NULL; /* not from zt_mem_alloc: its cache would keep the block (and the RSS) for the whole run */
  if (posix_memalign(&buf, 4096, n) != 0) {
    zt_store_free(st);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for the %zu-byte buffer that probes the %s tier", n,
                  zt_offload_tier_name(tier));
  }
  memset(buf, 1, n); /* touched, so the put reads resident pages */
  zt_mem_account(ZT_CPU, ZT_MEM_TAG_TEMP, (int64_t)n);
  zt_store_item it;
  double t0 = zt_clock_now();
  zt_status s = zt_store_put(st, ZT_CPU, buf, n, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &it);
  double t1 = zt_clock_now();
  if (!s) {
    s = zt_store_get(st, &it, ZT_CPU, buf);
    double t2 = zt_clock_now();
    if (!s && t2 > t1 && t1 > t0) *wr = (double)n / (t1 - t0), *rd = (double)n / (t2 - t1);
    else if (!s) s = ZT_ERR(ZT_STATUS_IO, "the clock did not advance over a %zu-byte put and get", n);
    zt_store_drop(st, &it);
  }
  zt_mem_account(ZT_CPU, ZT_MEM_TAG_TEMP, -(int64_t)n);
  free(buf);
  zt_store_free(st);
  return s;
}

/* ------------------------------------------------ measuring */
/* Seconds one measurement aims at: long enough that the clock and a moment of load beside it
 * matter little, short enough that calibrating stays a few seconds. */
#define TARGET_S 0.15
#define MAX_INNER 256
#define PROBE_BYTES ((size_t)64 << 20)
#define COMM_BW_BYTES ((int64_t)32 << 20)
#define COMM_LAT_CALLS 31

/* reps runs into their median and spread ((max - min) / median). */
static void summarize(double *runs, int reps, double *value, double *spread) {
  double m = zt__median(runs, reps);
  *value = m;
  *spread = m > 0 ? (runs[reps - 1] - runs[0]) / m : 0;
}

/* A collective step over comm (NULL or one rank: nothing): every rank's status agreed, so that
 * a rank that failed does not leave the others waiting in the next collective. */
static zt_status agree(zt_comm *comm, zt_status s) {
  if (!comm || zt_comm_size(comm) <= 1) return s;
  return zt_comm_agree_status(comm, s);
}
static zt_status barrier(zt_comm *comm) {
  if (!comm || zt_comm_size(comm) <= 1) return ZT_OK;
  return zt_barrier(comm);
}
/* v[0, n) of every rank, rank after rank, into all[0, world * n). */
static zt_status gather(zt_comm *comm, const double *v, int n, double *all) {
  int world = comm ? zt_comm_size(comm) : 1;
  if (world <= 1) {
    memcpy(all, v, sizeof *v * (size_t)n);
    return ZT_OK;
  }
  zt_tensor *in = NULL, *out = NULL;
  zt_status s = zt_tensor_from_data(1, (int64_t[]){n}, ZT_DTYPE_F64, v, &in);
  if (!s) s = zt_tensor_zeros(1, (int64_t[]){(int64_t)world * n}, ZT_DTYPE_F64, ZT_CPU, &out);
  if (!s) s = zt_all_gather(comm, in, out);
  void *p = NULL;
  if (!s) s = zt_tensor_data(out, &p);
  if (!s) memcpy(all, p, sizeof *all * (size_t)world * (size_t)n);
  zt_tensor_free(in), zt_tensor_free(out);
  return s;
}

/* A workload measured at size n (rows or tokens), inner times over: *rate its figure's units per
 * second, *wall the seconds it took. */
typedef zt_status (*work_fn)(void *ctx, int64_t n, int inner, double *rate, double *wall);

/* Times fn reps times at one size every rank agrees on (the smallest any rank chose): from n0,
 * grown towards nmax until a run takes about TARGET_S, then repeated inner times when nmax is
 * reached first. Each run starts after a barrier, so every rank computes at once as in a run. */
static zt_status measure(zt_comm *comm, work_fn fn, void *ctx, int64_t n0, int64_t nmax, int reps, double *runs) {
  if (n0 > nmax) n0 = nmax;
  double rate = 0, wall = 0;
  zt_status s = fn(ctx, n0, 1, &rate, &wall); /* warm: first calls pay for page faults and thread start */
  if (!s) s = fn(ctx, n0, 1, &rate, &wall);
  ZT_TRY(agree(comm, s));
  double per = wall > 1e-6 ? wall / (double)n0 : 1e-6 / (double)n0; /* seconds per unit of n */
  int64_t n = (int64_t)(TARGET_S / per);
  n = n < n0 ? n0 : n > nmax ? nmax : n;
  if (n > 16) n -= n % 16; /* GEMM-friendly */
  double inner = ceil(TARGET_S / (per * (double)n));
  inner = inner < 1 ? 1 : inner > MAX_INNER ? MAX_INNER : inner;
  double mine[2] = {(double)n, inner}, *all = NULL;
  int world = comm ? zt_comm_size(comm) : 1;
  if (!(all = malloc(sizeof *all * 2 * (size_t)world))) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  s = gather(comm, mine, 2, all);
  for (int r = 0; !s && r < world; r++) {
    if (all[2 * r] < mine[0]) mine[0] = all[2 * r];
    if (all[2 * r + 1] < mine[1]) mine[1] = all[2 * r + 1];
  }
  free(all);
  ZT_TRY(s);
  for (int r = 0; r < reps; r++) {
    ZT_TRY(barrier(comm));
    s = fn(ctx, (int64_t)mine[0], (int)mine[1], &runs[r], &wall);
    ZT_TRY(agree(comm, s));
  }
  return ZT_OK;
}

/* A new f32 tensor (tag TEMP) with uniform values in [-1, 1), drawn from the default generator
 * whose state the caller saves and restores (calibrating must not change a later run's draws). */
static zt_status rand_tensor(int ndim, const int64_t *shape, bool grad, zt_tensor **out) {
  zt_tensor *t = NULL;
  zt_status s = zt_tensor_empty(ndim, shape, ZT_DTYPE_F32, ZT_CPU, &t);
  if (!s) s = zt_tensor_uniform_(t, -1, 1);
  if (!s && grad) s = zt_tensor_set_requires_grad(t, true);
  if (s) zt_tensor_free(t), t = NULL;
  *out = t;
  return s;
}

/* ---- GEMM: a block's linears (and the head's) as the model runs them: forward y = x W^T, input
 * grad dx = dy W, weight grad dW = dy^T x (GPT-2's Conv1D layout, W (in, out): y = x W, dx = dy W^T,
 * dW = x^T dy). The figure is the flop-weighted rate over one step's GEMMs: the flops of all over
 * the seconds each shape takes at its measured rate. */
#define MAX_SHAPES 8
typedef struct gemm_shape {
  int64_t in, out;
  double weight; /* flops per token a step spends in this shape (its count in a step) */
  bool head;     /* the lm head's: rows are the head's chunk, not the microbatch */
} gemm_shape;
typedef struct gemm_ctx {
  gemm_shape sh[MAX_SHAPES];
  int n;
  bool io; /* GPT-2's Conv1D layout */
} gemm_ctx;

static void gemm_add(gemm_ctx *g, int64_t in, int64_t out, double count, bool head) {
  for (int i = 0; i < g->n; i++)
    if (g->sh[i].in == in && g->sh[i].out == out && g->sh[i].head == head) {
      g->sh[i].weight += count * 2.0 * (double)in * (double)out;
      return;
    }
  ZT_ASSERT(g->n < MAX_SHAPES);
  g->sh[g->n++] = (gemm_shape){in, out, count * 2.0 * (double)in * (double)out, head};
}

static void gemm_shapes(const zt_lm_config *m, gemm_ctx *g) {
  zt_lm_dims d = zt_lm_config_dims(m);
  int64_t C = d.hidden, F = d.ffn, A = d.attn_width, L = d.n_layer, V = d.vocab;
  memset(g, 0, sizeof *g);
  if (m->family == ZT_LM_LLAMA) {
    int64_t kv = (int64_t)m->llama.n_kv_head * m->llama.head_dim;
    gemm_add(g, C, A, (double)L, false);      /* q */
    gemm_add(g, C, kv, 2.0 * L, false);       /* k, v */
    gemm_add(g, A, C, (double)L, false);      /* o */
    gemm_add(g, C, F, 2.0 * L, false);        /* gate, up */
    gemm_add(g, F, C, (double)L, false);      /* down */
  } else {
    g->io = true;
    gemm_add(g, C, 3 * C, (double)L, false);  /* c_attn */
    gemm_add(g, C, C, (double)L, false);      /* attention's c_proj */
    gemm_add(g, C, F, (double)L, false);      /* c_fc */
    gemm_add(g, F, C, (double)L, false);      /* the MLP's c_proj */
  }
  /* the head: V rows in blocks of 4096 (the dW block of lm_head.c), all of V's flops */
  int64_t vb = V < 4096 ? V : 4096;
  g->sh[g->n++] = (gemm_shape){C, vb, 2.0 * (double)V * (double)C, true};
}

/* One shape's forward, input grad and weight grad on rows rows, inner times; seconds into *t. */
static zt_status gemm_one(const gemm_ctx *g, const gemm_shape *sh, int64_t rows, int inner, double *t) {
  zt_tensor *x = NULL, *w = NULL, *dy = NULL, *y = NULL;
  int64_t wshape[2] = {g->io ? sh->in : sh->out, g->io ? sh->out : sh->in};
  zt_status s = rand_tensor(2, (int64_t[]){rows, sh->in}, false, &x);
  if (!s) s = rand_tensor(2, wshape, false, &w);
  if (!s) s = rand_tensor(2, (int64_t[]){rows, sh->out}, false, &dy);
  double t0 = zt_clock_now();
  for (int i = 0; !s && i < inner; i++) {
    s = zt_matmul(x, w, false, !g->io, &y); /* (rows, out) */
    zt_tensor_free(y), y = NULL;
    if (!s) s = zt_matmul(dy, w, false, g->io, &y); /* (rows, in) */
    zt_tensor_free(y), y = NULL;
    if (!s) s = g->io ? zt_matmul(x, dy, true, false, &y) : zt_matmul(dy, x, true, false, &y); /* W's shape */
    zt_tensor_free(y), y = NULL;
  }
  *t = zt_clock_now() - t0;
  zt_tensor_free(x), zt_tensor_free(w), zt_tensor_free(dy);
  return s;
}

static zt_status gemm_work(void *ctx, int64_t n, int inner, double *rate, double *wall) {
  const gemm_ctx *g = ctx;
  double flops = 0, secs = 0, all = 0;
  for (int i = 0; i < g->n; i++) {
    const gemm_shape *sh = &g->sh[i];
    /* the head's GEMMs run on chunks of at most 512 rows (lm_head.c) */
    int64_t rows = sh->head && n > 512 ? 512 : n;
    double t = 0;
    ZT_TRY(gemm_one(g, sh, rows, inner, &t));
    double f = 3.0 * 2.0 * (double)rows * (double)sh->in * (double)sh->out * inner;
    flops += sh->weight, secs += sh->weight * (t > 1e-9 ? t : 1e-9) / f, all += t;
  }
  *rate = flops / secs / 1e9, *wall = all;
  return ZT_OK;
}

/* ---- attention: forward and backward of the fused causal op at the run's sequence, counted as
 * plan_cost.c counts it: 12 T attn_width flops per token (forward 4, backward 8). */
typedef struct attn_ctx {
  int64_t T;
  int n_head, n_kv_head, head_dim;
} attn_ctx;

static zt_status attn_work(void *ctx, int64_t n, int inner, double *rate, double *wall) {
  const attn_ctx *a = ctx;
  int64_t width = (int64_t)(a->n_head + 2 * a->n_kv_head) * a->head_dim, aw = (int64_t)a->n_head * a->head_dim;
  zt_tensor *qkv = NULL, *g = NULL, *out = NULL;
  zt_status s = rand_tensor(3, (int64_t[]){n, a->T, width}, true, &qkv);
  if (!s) s = zt_tensor_full(3, (int64_t[]){n, a->T, aw}, ZT_DTYPE_F32, ZT_CPU, 1.0, &g);
  double t0 = zt_clock_now();
  for (int i = 0; !s && i < inner; i++) {
    s = zt_causal_attention_gqa(qkv, a->n_head, a->n_kv_head, &out);
    if (!s) s = zt_backward(1, &out, &g, false);
    zt_tensor_free(out), out = NULL;
    zt_tensor_free(qkv->grad), qkv->grad = NULL; /* each run's backward writes a fresh grad */
  }
  *wall = zt_clock_now() - t0;
  *rate = 12.0 * (double)a->T * (double)aw * (double)(n * a->T) * inner / (*wall > 1e-9 ? *wall : 1e-9) / 1e9;
  zt_tensor_free(g), zt_tensor_free(qkv);
  return s;
}

/* ---- elementwise: a block's norm, activation and residual add, forward and backward, on
 * (tokens, hidden): layer norm and GELU (GPT-2), RMS norm and SiLU (Llama). The bytes counted are
 * the full-size tensors each op reads and writes, 16 f32 values per element: forward, the norm
 * reads x and writes h (2), the activation reads h and writes a (2), the add reads a and x and
 * writes y (3); backward, the activation reads dy and h and writes dh (3), the norm reads dh and
 * x and writes dx (3), and x's two grads (the norm's and the residual's) summed reads two and
 * writes one (3). The per-row statistics and the (hidden) weights' grads are left out. */
typedef struct elem_ctx {
  int64_t C;
  bool llama;
} elem_ctx;
#define ELEM_VALUES 16.0

static zt_status elem_work(void *ctx, int64_t n, int inner, double *rate, double *wall) {
  const elem_ctx *e = ctx;
  zt_tensor *x = NULL, *w = NULL, *b = NULL, *g = NULL, *h = NULL, *a = NULL, *y = NULL;
  zt_status s = rand_tensor(2, (int64_t[]){n, e->C}, true, &x);
  if (!s) s = zt_tensor_full(1, (int64_t[]){e->C}, ZT_DTYPE_F32, ZT_CPU, 1.0, &w);
  if (!s) s = zt_tensor_set_requires_grad(w, true);
  if (!s && !e->llama) s = zt_tensor_zeros(1, (int64_t[]){e->C}, ZT_DTYPE_F32, ZT_CPU, &b);
  if (!s && !e->llama) s = zt_tensor_set_requires_grad(b, true);
  if (!s) s = zt_tensor_full(2, (int64_t[]){n, e->C}, ZT_DTYPE_F32, ZT_CPU, 1.0, &g);
  double t0 = zt_clock_now();
  for (int i = 0; !s && i < inner; i++) {
    s = e->llama ? zt_rms_norm(x, w, 1e-5, &h) : zt_layer_norm(x, w, b, 1e-5, &h);
    if (!s) s = e->llama ? zt_silu(h, &a) : zt_gelu(h, &a);
    if (!s) s = zt_add(a, x, &y);
    if (!s) s = zt_backward(1, &y, &g, false);
    zt_tensor_free(y), zt_tensor_free(a), zt_tensor_free(h), y = a = h = NULL;
    zt_tensor *leaves[] = {x, w, b};
    for (int k = 0; k < 3; k++)
      if (leaves[k]) zt_tensor_free(leaves[k]->grad), leaves[k]->grad = NULL;
  }
  *wall = zt_clock_now() - t0;
  *rate = ELEM_VALUES * 4.0 * (double)n * (double)e->C * inner / (*wall > 1e-9 ? *wall : 1e-9);
  zt_tensor_free(g), zt_tensor_free(b), zt_tensor_free(w), zt_tensor_free(x);
  return s;
}

/* ---- communication */
/* The latency (the median of COMM_LAT_CALLS 4-byte all-reduces, each timed alone) and the bus
 * bandwidth of a COMM_BW_BYTES all-reduce, reps times each. The bandwidth is the cost model's
 * inverse: moved / (t - latency), moved = 2 (n-1)/n bytes, so that lat + moved / bw is the time
 * measured. */
static zt_status comm_figures(zt_comm *comm, int reps, double *lat, double *bw) {
  int world = zt_comm_size(comm);
  zt_tensor *one = NULL, *big = NULL;
  double calls[COMM_LAT_CALLS];
  zt_status s = zt_tensor_zeros(1, (int64_t[]){1}, ZT_DTYPE_F32, ZT_CPU, &one);
  if (!s) s = zt_tensor_zeros(1, (int64_t[]){COMM_BW_BYTES / 4}, ZT_DTYPE_F32, ZT_CPU, &big);
  s = agree(comm, s);
  for (int i = 0; !s && i < 3; i++) s = zt_all_reduce(comm, one, ZT_REDUCE_SUM); /* warm: connections */
  if (!s) s = zt_all_reduce(comm, big, ZT_REDUCE_SUM);                        /* and buffers */
  for (int r = 0; !s && r < reps; r++) {
    s = zt_barrier(comm);
    for (int i = 0; !s && i < COMM_LAT_CALLS; i++) {
      double t0 = zt_clock_now();
      s = zt_all_reduce(comm, one, ZT_REDUCE_SUM);
      calls[i] = zt_clock_now() - t0;
    }
    if (!s) lat[r] = zt__median(calls, COMM_LAT_CALLS);
  }
  double l = s ? 0 : zt__median(lat, reps); /* sorts lat: its order means nothing */
  double moved = 2.0 * (world - 1) / world * (double)COMM_BW_BYTES;
  for (int r = 0; !s && r < reps; r++) {
    s = zt_barrier(comm);
    double t0 = zt_clock_now();
    if (!s) s = zt_all_reduce(comm, big, ZT_REDUCE_SUM);
    double t = zt_clock_now() - t0;
    bw[r] = moved / (t > 2 * l ? t - l : t > 1e-9 ? t : 1e-9);
  }
  zt_tensor_free(big), zt_tensor_free(one);
  return s;
}

/* ---- the base: the process's RSS besides its accounted bytes and the allocator's cache of
 * freed blocks (resident, unaccounted, and predicted apart by the planner), after the largest
 * GEMM of a step has touched OpenBLAS's buffers. */
static double base_bytes(const zt_lm_config *m, int64_t tokens) {
  zt__plan_warm_blas(m, tokens);
  int64_t rss = zt_mem_current_rss();
  zt_mem_stats st;
  zt_mem_stats_get(ZT_CPU, &st);
  int64_t b = rss - st.current_total - zt_mem_cached_bytes();
  return rss > 0 && b > 0 ? (double)b : NAN; /* no /proc: not measured */
}

/* ------------------------------------------------ calibrate */
/* What one rank measured: a value and a spread per figure (NaN: not measured), its threads. */
#define SLOTS (2 * ZT_PLAN_FIG_COUNT + 1)

static zt_status measure_all(zt_comm *comm, const zt_plan_space *sp, const char *dir, int reps, double *runs,
                             double *mine) {
  const zt_lm_config *m = &sp->model;
  zt_lm_dims d = zt_lm_config_dims(m);
  int world = sp->world > 0 ? sp->world : 1;
  int64_t rows = sp->batch / world;
  if (sp->microbatches > 0) rows /= sp->microbatches;
  if (rows < 1) rows = 1;
  int64_t tokens = rows * sp->seq;
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) mine[2 * f] = mine[2 * f + 1] = NAN;
  mine[2 * ZT_PLAN_FIG_COUNT] = zt_get_num_threads();

  /* first the base, before the measurements below leave blocks in glibc's heap */
  bool have_base = true;
  for (int r = 0; r < reps; r++) have_base &= !isnan(runs[r] = base_bytes(m, tokens));
  if (have_base) summarize(runs, reps, &mine[2 * ZT_PLAN_FIG_BASE], &mine[2 * ZT_PLAN_FIG_BASE + 1]);

#define WANT(f) (!(sp->skip & (1u << (f))))
  if (WANT(ZT_PLAN_FIG_GEMM)) {
    gemm_ctx g;
    gemm_shapes(m, &g);
    ZT_TRY(measure(comm, gemm_work, &g, 64, tokens, reps, runs));
    summarize(runs, reps, &mine[2 * ZT_PLAN_FIG_GEMM], &mine[2 * ZT_PLAN_FIG_GEMM + 1]);
  }
  if (WANT(ZT_PLAN_FIG_ATTN)) {
    attn_ctx a = {sp->seq, d.n_head, d.n_head, d.attn_width / d.n_head};
    if (m->family == ZT_LM_LLAMA) a.n_kv_head = m->llama.n_kv_head, a.head_dim = m->llama.head_dim;
    ZT_TRY(measure(comm, attn_work, &a, 1, rows, reps, runs));
    summarize(runs, reps, &mine[2 * ZT_PLAN_FIG_ATTN], &mine[2 * ZT_PLAN_FIG_ATTN + 1]);
  }
  if (WANT(ZT_PLAN_FIG_ELEM)) {
    elem_ctx e = {d.hidden, m->family == ZT_LM_LLAMA};
    ZT_TRY(measure(comm, elem_work, &e, 256, tokens, reps, runs));
    summarize(runs, reps, &mine[2 * ZT_PLAN_FIG_ELEM], &mine[2 * ZT_PLAN_FIG_ELEM + 1]);
  }
  /* the disk tier, a sixteenth of the memory limit at most (the --mem-limit planner's rule) */
  if (WANT(ZT_PLAN_FIG_READ) || WANT(ZT_PLAN_FIG_WRITE)) {
    size_t probe = PROBE_BYTES;
    if (sp->mem_limit > 0 && (size_t)(sp->mem_limit / 16) < probe) probe = (size_t)(sp->mem_limit / 16);
    double *rd = runs, *wr = runs + reps;
    for (int r = 0; r < reps; r++) {
      ZT_TRY(barrier(comm));
      ZT_TRY(agree(comm, zt__plan_store_rate(ZT_OFFLOAD_DISK, dir, probe, &rd[r], &wr[r])));
    }
    summarize(rd, reps, &mine[2 * ZT_PLAN_FIG_READ], &mine[2 * ZT_PLAN_FIG_READ + 1]);
    summarize(wr, reps, &mine[2 * ZT_PLAN_FIG_WRITE], &mine[2 * ZT_PLAN_FIG_WRITE + 1]);
  }
  if (comm && zt_comm_size(comm) > 1 && (WANT(ZT_PLAN_FIG_COMM_LAT) || WANT(ZT_PLAN_FIG_COMM_BW))) {
    double *lat = runs, *bw = runs + reps;
    ZT_TRY(comm_figures(comm, reps, lat, bw));
    summarize(lat, reps, &mine[2 * ZT_PLAN_FIG_COMM_LAT], &mine[2 * ZT_PLAN_FIG_COMM_LAT + 1]);
    summarize(bw, reps, &mine[2 * ZT_PLAN_FIG_COMM_BW], &mine[2 * ZT_PLAN_FIG_COMM_BW + 1]);
  }
#undef WANT
  return ZT_OK;
}

/* Every rank's figures into one calibration that every rank computes alike from the same gathered
 * numbers: a figure's value is the median over the ranks (the base: their largest, since each
 * rank must fit), its spread the largest; a figure some rank could not measure stays a default;
 * the threads are rank 0's. */
static void combine(const double *all, int world, int reps, double *v, zt_plan_calibration *out) {
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) {
    bool have = true;
    double spread = 0, most = 0;
    for (int r = 0; r < world; r++) {
      v[r] = all[r * SLOTS + 2 * f];
      have &= !isnan(v[r]);
      double sp = all[r * SLOTS + 2 * f + 1];
      if (sp > spread) spread = sp;
      if (v[r] > most) most = v[r];
    }
    if (!have) continue;
    out->value[f] = f == ZT_PLAN_FIG_BASE ? most : zt__median(v, world);
    out->spread[f] = spread;
    out->source[f] = ZT_PLAN_SOURCE_MEASURED;
  }
  out->world = world, out->threads = (int)all[2 * ZT_PLAN_FIG_COUNT], out->reps = reps;
}

zt_status zt_plan_calibrate(zt_comm *comm, const zt_plan_space *sp, const char *dir, int reps,
                            zt_plan_calibration *out) {
  zt_status s = ZT_OK;
  if (!sp || !out) s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_calibrate: give a space and a calibration to fill");
  else if (reps < 1 || reps > 1000)
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_calibrate: reps is %d; measure each figure 1 to 1000 times", reps);
  else if (sp->batch < 1 || sp->seq < 1)
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_calibrate: the space's batch (%lld) and seq (%lld) must be at least 1",
               (long long)sp->batch, (long long)sp->seq);
  else if (zt_lm_config_validate(&sp->model))
    s = zt__error_prefix(ZT_STATUS_INVALID_ARG, "zt_plan_calibrate: the space's model");
  ZT_TRY(agree(comm, s));
  int world = comm ? zt_comm_size(comm) : 1;
  double *runs = malloc(sizeof *runs * 2 * (size_t)reps), mine[SLOTS];
  double *all = malloc(sizeof *all * (SLOTS + 1) * (size_t)world); /* and a figure's value over the ranks */
  s = runs && all ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  s = agree(comm, s);
  zt_rng_state rng = zt_rng_get_state();
  bool grad = zt_set_grad_enabled(true);
  zt_mem_tag tag = zt_mem_tag_push(ZT_MEM_TAG_TEMP);
  if (!s) s = measure_all(comm, sp, dir, reps, runs, mine);
  if (!s) s = gather(comm, mine, SLOTS, all);
  if (!s) {
    zt_plan_calibration_default(out);
    combine(all, world, reps, all + SLOTS * (size_t)world, out);
  }
  zt_mem_tag_pop(tag);
  zt_set_grad_enabled(grad);
  zt_rng_set_state(rng);
  free(runs), free(all);
  /* the blocks the measurements freed are of sizes a run does not make: resident and unaccounted,
   * they would only add to the run's RSS */
  zt_mem_empty_cache();
  return s;
}
