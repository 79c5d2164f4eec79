/* The test harness runner and helpers (see zt_test.h). */
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "zt/nn.h"
#include "zt/offload.h"
#include "zt/strategy.h"
#include "zt_test.h"

int zt_test_failed_checks = 0;
static int n_passed = 0, n_failed = 0;
static const char *current = "?";

void zt_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s (%s:%d): ", current, file, line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  zt_test_failed_checks++;
}

int64_t zt_test_live_bytes(void) {
  zt_mem_stats s;
  zt_mem_stats_get(ZT_CPU, &s);
  return s.current_total;
}

void zt_test_run(const char *name, void (*fn)(void)) {
  current = name;
  int before = zt_test_failed_checks;
  int64_t live = zt_test_live_bytes();
  int depth = zt_saved_tensor_hooks_depth();
  fn();
  if (zt_test_live_bytes() != live)
    zt_test_fail(__FILE__, __LINE__, "leak: %lld accounted bytes still live after the test",
                 (long long)(zt_test_live_bytes() - live));
  if (zt_saved_tensor_hooks_depth() != depth) zt_test_fail(__FILE__, __LINE__, "saved-tensor hooks left on the stack");
  if (!zt_grad_enabled()) zt_test_fail(__FILE__, __LINE__, "grad mode left off");
  if (zt_test_failed_checks == before) {
    n_passed++;
    printf("PASS %s\n", name);
  } else {
    n_failed++;
    printf("FAIL %s\n", name);
  }
  fflush(stdout);
}

int zt_test_finish(void) {
  printf("%d passed, %d failed\n", n_passed, n_failed);
  return n_failed ? 1 : 0;
}

zt_tensor *zt_test_rand(int ndim, const int64_t *shape, zt_dtype dt, double lo, double hi, uint64_t seed) {
  zt_tensor *t = NULL;
  if (zt_tensor_empty(ndim, shape, dt, ZT_CPU, &t)) {
    fprintf(stderr, "zt_test_rand: %s\n", zt_last_error());
    abort();
  }
  zt_rng_state st = {seed, 0};
  int64_t n = zt_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) ZT_CHECK_OK(zt_tensor_set(t, i, lo + (hi - lo) * zt_rng_uniform_at(st, (uint64_t)i)));
  return t;
}

zt_tensor *zt_test_rand_leaf(int ndim, const int64_t *shape, zt_dtype dt, double lo, double hi, uint64_t seed) {
  zt_tensor *t = zt_test_rand(ndim, shape, dt, lo, hi, seed);
  ZT_CHECK_OK(zt_tensor_set_requires_grad(t, true));
  return t;
}

double zt_test_max_abs_diff(const zt_tensor *a, const zt_tensor *b) {
  if (!zt_shape_equal(a->ndim, a->shape, b->ndim, b->shape)) return INFINITY;
  double m = 0;
  int64_t n = zt_tensor_numel(a);
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(zt_tensor_get(a, i) - zt_tensor_get(b, i));
    if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
  }
  return m;
}

bool zt_test_bitwise_equal(const zt_tensor *a, const zt_tensor *b) {
  if (!zt_shape_equal(a->ndim, a->shape, b->ndim, b->shape) || a->dtype != b->dtype) return false;
  int64_t n = zt_tensor_numel(a);
  for (int64_t i = 0; i < n; i++) {
    double x = zt_tensor_get(a, i), y = zt_tensor_get(b, i);
    if (memcmp(&x, &y, sizeof x) != 0) return false;
  }
  return true;
}

int64_t zt_test_cpu_now(void) {
  zt_mem_stats s;
  zt_mem_stats_get(ZT_CPU, &s);
  return s.current_total;
}

int64_t zt_test_cpu_peak(void) {
  zt_mem_stats s;
  zt_mem_stats_get(ZT_CPU, &s);
  return s.peak_total;
}

double zt_test_mean(const zt_tensor *t) {
  double s = 0;
  int64_t n = zt_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) s += zt_tensor_get(t, i);
  return s / (double)n;
}

double zt_test_std(const zt_tensor *t) {
  double m = zt_test_mean(t), s = 0;
  int64_t n = zt_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) s += (zt_tensor_get(t, i) - m) * (zt_tensor_get(t, i) - m);
  return sqrt(s / (double)n);
}

zt_tensor *zt_test_ones_like(const zt_tensor *t) {
  zt_tensor *o = NULL;
  ZT_CHECK_OK(zt_tensor_full(t->ndim, t->shape, t->dtype, ZT_CPU, 1, &o));
  return o;
}

zt_tensor *zt_test_rand_ids(int64_t B, int64_t T, int V, uint64_t seed) {
  int32_t *v = malloc(sizeof *v * (size_t)(B * T));
  ZT_ASSERT(v);
  zt_rng_state st = {seed, 0};
  for (int64_t i = 0; i < B * T; i++) v[i] = (int32_t)(zt_rng_uniform_at(st, (uint64_t)i) * V);
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, (int64_t[]){B, T}, ZT_DTYPE_I32, v, &t));
  free(v);
  return t;
}

zt_recompute_plan *zt_test_recompute(zt_gpt2 *g, zt_recompute mode, int every) {
  zt_recompute_options o = zt_recompute_options_default();
  o.mode = mode;
  o.every = every;
  zt_recompute_plan *p = NULL;
  ZT_CHECK_OK(zt_recompute_plan_new(&o, &p));
  zt_model m = zt_gpt2_model(g);
  if (p) ZT_CHECK_OK(zt_strategy_attach(zt_recompute_plan_strategy(p), &m));
  return p;
}

zt_offload *zt_test_offload(zt_gpt2 *g, const zt_offload_options *o) {
  zt_offload *s = NULL;
  ZT_CHECK_OK(zt_offload_new(o, &s));
  zt_model m = zt_gpt2_model(g);
  if (s) ZT_CHECK_OK(zt_strategy_attach(zt_offload_strategy(s), &m));
  return s;
}

void zt_test_free_all(zt_tensor **ts, int n) {
  for (int i = 0; i < n; i++) zt_tensor_free(ts[i]);
}

/* ------------------------------------------------ temporary directory and files */

static char g_tmpdir[128];

int zt_test_open_fd(const char *dir, const char *prefix) {
  DIR *d = opendir("/proc/self/fd");
  int fd = -1;
  for (struct dirent *e; d && fd < 0 && (e = readdir(d));) {
    char p[300], target[PATH_MAX];
    snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(p, target, sizeof target - 1);
    if (k <= 0) continue;
    target[k] = '\0';
    if (strstr(target, dir) && strstr(target, prefix)) fd = atoi(e->d_name);
  }
  if (d) closedir(d);
  return fd;
}

const char *zt_test_tmpdir_make(const char *tag) {
  snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/zt_test_%s_XXXXXX", tag);
  if (!mkdtemp(g_tmpdir)) {
    zt_test_fail(__FILE__, __LINE__, "mkdtemp(%s) failed", g_tmpdir);
    g_tmpdir[0] = '\0';
    return NULL;
  }
  return g_tmpdir;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

void zt_test_tmpdir_remove(void) {
  /* depth first (contents before their folder), never following links out of the tree */
  if (g_tmpdir[0]) nftw(g_tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  g_tmpdir[0] = '\0';
}

const char *zt_test_tmpdir(void) { return g_tmpdir; }

char *zt_test_tmp_path_to(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/%s", g_tmpdir, name);
  return buf;
}

const char *zt_test_tmp_path(const char *name) {
  static char bufs[8][512];
  static int k;
  k = (k + 1) % 8;
  return zt_test_tmp_path_to(bufs[k], sizeof bufs[k], name);
}

void zt_test_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    zt_test_fail(__FILE__, __LINE__, "cannot open %s for writing", path);
    return;
  }
  if (n && fwrite(data, 1, n, f) != n) zt_test_fail(__FILE__, __LINE__, "short write to %s", path);
  fclose(f);
}

zt_tensor *zt_test_rows(const zt_tensor *t, int rank, int world) {
  if (!t || t->ndim < 1 || world < 1 || t->shape[0] % world || !zt_tensor_is_contiguous(t)) {
    zt_test_fail(__FILE__, __LINE__, "zt_test_rows: need a contiguous tensor whose first dim divides by %d", world);
    return NULL;
  }
  int64_t shape[ZT_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  shape[0] /= world;
  zt_tensor *out = NULL;
  if (zt_tensor_empty(t->ndim, shape, t->dtype, ZT_CPU, &out)) {
    zt_test_fail(__FILE__, __LINE__, "zt_test_rows: %s", zt_last_error());
    return NULL;
  }
  size_t bytes = zt_tensor_nbytes(out);
  memcpy(zt__tensor_ptr(out), (const char *)zt__tensor_ptr(t) + (size_t)rank * bytes, bytes);
  return out;
}

zt_comm *zt_test_world(int *rank, int *size) {
  zt_comm *w = NULL;
  if (zt_comm_world(&w) != ZT_OK) {
    fprintf(stderr, "zt_comm_world: %s\n", zt_last_error());
    return NULL;
  }
  *rank = zt_comm_rank(w);
  *size = zt_comm_size(w);
  return w;
}

double zt_test_mean_over(zt_comm *c, double v) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_full(1, (int64_t[]){1}, ZT_DTYPE_F64, ZT_CPU, v, &t));
  ZT_CHECK_OK(zt_all_reduce(c, t, ZT_REDUCE_AVG));
  double r = t ? zt_tensor_get(t, 0) : NAN;
  zt_tensor_free(t);
  return r;
}

void zt_test_shared_tmpdir(zt_comm *c, const char *tag, char *dir, size_t cap) {
  int64_t buf[256] = {0};
  if (zt_comm_rank(c) == 0) {
    const char *t = zt_test_tmpdir_make(tag);
    for (size_t i = 0; t && t[i] && i < 255; i++) buf[i] = t[i];
  }
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){256}, ZT_DTYPE_I64, buf, &t));
  ZT_CHECK_OK(zt_broadcast(c, t, 0));
  size_t i = 0;
  for (; t && i + 1 < cap && i < 255 && zt_tensor_get(t, (int64_t)i) != 0; i++) dir[i] = (char)zt_tensor_get(t, (int64_t)i);
  dir[i] = '\0';
  zt_tensor_free(t);
}

double zt_test_gpt2_fwd_bwd(zt_gpt2 *m, zt_tensor *ids, zt_tensor *tg) {
  zt_tensor *loss = NULL;
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
  if (!loss) return NAN;
  double v = zt_tensor_get(loss, 0);
  ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_tensor_free(loss);
  return v;
}

void zt_test_gpt2_step(zt_gpt2 *m, zt_optim *o, int seed) {
  int64_t s[] = {2, 8};
  int32_t ids[16], tg[16];
  int V = zt_gpt2_get_config(m)->vocab_size;
  for (int i = 0; i < 16; i++) {
    ids[i] = (i * 7 + seed * 3) % V;
    tg[i] = (i * 5 + seed) % V;
  }
  zt_tensor *x = NULL, *y = NULL, *loss = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, s, ZT_DTYPE_I32, ids, &x));
  ZT_CHECK_OK(zt_tensor_from_data(2, s, ZT_DTYPE_I32, tg, &y));
  ZT_CHECK_OK(zt_gpt2_forward(m, x, y, NULL, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  ZT_CHECK_OK(zt_optim_step(o, 1e-2));
  zt_optim_zero_grad(o);
  zt_tensor_free(loss);
  zt_tensor_free(x);
  zt_tensor_free(y);
}

double zt_test_compare_at(const char *file, int line, const char *what, const zt_tensor *a, const zt_tensor *r,
                          double rtol, double atol) {
  if (!a || !r) {
    zt_test_fail(file, line, "%s: missing tensor", what);
    return INFINITY;
  }
  int64_t n = zt_tensor_numel(r);
  if (zt_tensor_numel(a) != n) {
    zt_test_fail(file, line, "%s: %lld elements, reference has %lld", what, (long long)zt_tensor_numel(a),
                 (long long)n);
    return INFINITY;
  }
  double worst = 0;
  int64_t worst_i = 0, n_bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = zt_tensor_get(a, i), y = zt_tensor_get(r, i), tol = atol + rtol * fabs(y);
    double ratio = fabs(x - y) / tol;
    if (!(ratio <= 1)) n_bad++;
    if (!(ratio <= worst)) { /* NaN counts as worst */
      worst = isnan(ratio) ? INFINITY : ratio;
      worst_i = i;
    }
  }
  if (n_bad)
    zt_test_fail(file, line, "%s: %lld of %lld elements off; worst [%lld] = %.9g, reference %.9g (tolerance %.3g)",
                 what, (long long)n_bad, (long long)n, (long long)worst_i, zt_tensor_get(a, worst_i),
                 zt_tensor_get(r, worst_i), atol + rtol * fabs(zt_tensor_get(r, worst_i)));
  return worst;
}

double zt_test_max_abs(const zt_tensor *t) {
  double m = 0;
  for (int64_t i = 0, n = zt_tensor_numel(t); i < n; i++) m = fmax(m, fabs(zt_tensor_get(t, i)));
  return m;
}

const zt_model *zt_test_lm(zt_gpt2 *m) {
  static zt_model ring[16];
  static int next;
  zt_model *slot = &ring[next++ % 16];
  *slot = zt_gpt2_model(m);
  return slot;
}

zt_status zt_test_snapshot_save_capped(const char *dir, zt_gpt2 *m, zt_optim *o, const zt_train_state *st,
                                       int64_t max_file_bytes) {
  struct rlimit old, lim;
  ZT_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
  lim = old;
  lim.rlim_cur = (rlim_t)max_file_bytes;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails (EFBIG) instead of killing */
  ZT_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  zt_status s = zt_snapshot_save(dir, zt_test_lm(m), o, st);
  ZT_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
  signal(SIGXFSZ, prev);
  return s;
}

zt_optim *zt_test_gpt2_adamw(zt_gpt2 *m) {
  zt_param *p;
  int n = zt_gpt2_params(m, &p);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, n, p, &o));
  return o;
}

void zt_test_fixture(char *buf, size_t cap, const char *rel_fmt, ...) {
  char rel[1024];
  va_list ap;
  va_start(ap, rel_fmt);
  vsnprintf(rel, sizeof rel, rel_fmt, ap);
  va_end(ap);
  const char *env = getenv("ZT_FIXTURES_DIR");
  if (env && *env) {
    snprintf(buf, cap, "%s/%s", env, rel);
    return;
  }
  const char *f = __FILE__, *slash = strrchr(f, '/');
  int dir_len = slash ? (int)(slash - f + 1) : 0;
  snprintf(buf, cap, "%.*sfixtures/%s", dir_len, f, rel);
}
