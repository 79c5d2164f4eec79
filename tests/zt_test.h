/* A small test harness: checks that report file:line and zt_last_error(), a runner
 * that prints ctest-friendly results, a check that every accounted byte was freed, and
 * the helpers several test files share (tensors, a temporary directory, files). */
#ifndef ZT_TEST_H
#define ZT_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "zt/comm.h"
#include "zt/offload.h"
#include "zt/strategy.h"
#include "zt/optim.h"
#include "zt/train.h"

extern int zt_test_failed_checks;

void zt_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void zt_test_run(const char *name, void (*fn)(void));
/* Prints "N passed, M failed" and returns the process exit code. */
int zt_test_finish(void);
/* The path of tests/fixtures/<rel> (rel formatted as printf's) into buf; $ZT_FIXTURES_DIR, when
 * set, stands for tests/fixtures. CMake compiles sources by absolute path, so __FILE__ of this
 * harness locates the folder from any build folder. */
/* Every element of a within atol + rtol |r| of the reference r (same element count): a failure
 * at file:line names how many are off and the worst; returns the worst |a - r| / tolerance
 * (INFINITY on NaN or a mismatch). For the golden tests against PyTorch fixtures. */
double zt_test_compare_at(const char *file, int line, const char *what, const zt_tensor *a, const zt_tensor *r,
                          double rtol, double atol);
double zt_test_max_abs(const zt_tensor *t); /* max |t[i]| */
/* m through the model interface (zt_gpt2_model), at an address that stays valid for the
 * next 15 calls: for the calls that take a const zt_model * (snapshots, memory strategies). */
const zt_model *zt_test_lm(zt_gpt2 *m);
void zt_test_fixture(char *buf, size_t cap, const char *rel_fmt, ...) __attribute__((format(printf, 3, 4)));
/* Bytes currently accounted on cpu (all tags); tests check it returns to its start. */
int64_t zt_test_live_bytes(void);

#define ZT_CHECK(cond)                                               \
  do {                                                               \
    if (!(cond)) zt_test_fail(__FILE__, __LINE__, "check failed: %s", #cond); \
  } while (0)

#define ZT_CHECK_OK(expr)                                                                 \
  do {                                                                                    \
    zt_status s_ = (expr);                                                                \
    if (s_ != ZT_OK)                                                                      \
      zt_test_fail(__FILE__, __LINE__, "%s returned %s: %s", #expr, zt_status_name(s_), zt_last_error()); \
  } while (0)

/* expr must fail with status code and a message containing substr. */
#define ZT_CHECK_ERR(expr, code, substr)                                                           \
  do {                                                                                             \
    zt_clear_error();                                                                              \
    zt_status s_ = (expr);                                                                         \
    if (s_ != (code))                                                                              \
      zt_test_fail(__FILE__, __LINE__, "%s returned %s, expected %s (message: %s)", #expr,         \
                   zt_status_name(s_), zt_status_name(code), zt_last_error());                     \
    else if (!strstr(zt_last_error(), (substr)))                                                   \
      zt_test_fail(__FILE__, __LINE__, "%s: message \"%s\" does not contain \"%s\"", #expr,         \
                   zt_last_error(), (substr));                                                     \
  } while (0)

#define ZT_CHECK_NEAR(a, b, tol)                                                                  \
  do {                                                                                            \
    double a_ = (a), b_ = (b);                                                                    \
    if (!(fabs(a_ - b_) <= (tol)))                                                                \
      zt_test_fail(__FILE__, __LINE__, "%s = %.9g, %s = %.9g, differ by more than %g", #a, a_, #b, b_, (double)(tol)); \
  } while (0)

#define ZT_RUN(fn) zt_test_run(#fn, fn)

/* ------------------------------------------------ helpers */
/* New f64/f32 tensor filled with reproducible uniform values in [lo, hi). */
zt_tensor *zt_test_rand(int ndim, const int64_t *shape, zt_dtype dt, double lo, double hi, uint64_t seed);
/* Same, requiring grad. */
zt_tensor *zt_test_rand_leaf(int ndim, const int64_t *shape, zt_dtype dt, double lo, double hi, uint64_t seed);
/* Max |a - b| over all elements (shapes must match; returns INFINITY if not). */
double zt_test_max_abs_diff(const zt_tensor *a, const zt_tensor *b);
/* Bitwise equality of values (same shape and dtype). */
bool zt_test_bitwise_equal(const zt_tensor *a, const zt_tensor *b);
/* The cpu device's accounted bytes: now, and the peak since zt_mem_reset_peaks. */
int64_t zt_test_cpu_now(void);
int64_t zt_test_cpu_peak(void);
/* Mean and population standard deviation (two-pass) of t's values; t must not be empty. */
double zt_test_mean(const zt_tensor *t);
double zt_test_std(const zt_tensor *t);
/* New tensor of ones shaped like t (same dtype, cpu, no grad): a root grad for backward. */
zt_tensor *zt_test_ones_like(const zt_tensor *t);
/* zt_tensor_free on ts[0..n) (NULL entries are fine). */
void zt_test_free_all(zt_tensor **ts, int n);
/* (B, T) i32 token ids uniform in [0, V), from Philox stream (seed, 0); a new tensor. */
zt_tensor *zt_test_rand_ids(int64_t B, int64_t T, int V, uint64_t seed);

/* Memory strategies attached to GPT-2 g for a test (zt/strategy.h), counted as a failure
 * when that fails (NULL then): a recompute plan of one mode for every block, `every` blocks
 * per region; an activation offload store made from o. Free them (zt_recompute_plan_free,
 * zt_offload_free: each detaches itself) before g. */
typedef struct zt_gpt2 zt_gpt2;
zt_recompute_plan *zt_test_recompute(zt_gpt2 *g, zt_recompute mode, int every);
zt_offload *zt_test_offload(zt_gpt2 *g, const zt_offload_options *o);

/* Rows [rank*B/world, (rank+1)*B/world) of t (B, ...), contiguous, as a new tensor (B must
 * be divisible by world): this rank's part of a global batch. */
zt_tensor *zt_test_rows(const zt_tensor *t, int rank, int world);
/* The process group of the run (mpi under mpirun, else local) with this rank and the size
 * in *rank and *size; NULL (and a message on stderr) when it cannot be made. */
zt_comm *zt_test_world(int *rank, int *size);
/* The mean of v over the ranks of c (every rank gets it). */
double zt_test_mean_over(zt_comm *c, double v);
/* A temporary directory every rank of c sees: rank 0 makes it (zt_test_tmpdir_make(tag)) and
 * broadcasts its name into dir. Remove it on rank 0 (zt_test_tmpdir_remove) after a barrier. */
void zt_test_shared_tmpdir(zt_comm *c, const char *tag, char *dir, size_t cap);

/* ------------------------------------------------ GPT-2 helpers */
/* Forward with targets, then backward from the loss; returns the loss (NaN on failure,
 * reported as a failed check). */
double zt_test_gpt2_fwd_bwd(zt_gpt2 *m, zt_tensor *ids, zt_tensor *tg);
/* AdamW with default settings over the model's parameters (zt_gpt2_params). */
zt_optim *zt_test_gpt2_adamw(zt_gpt2 *m);
/* One AdamW step (lr 1e-2) of m on a fixed 2 x 8 batch made from seed (context >= 8). */
void zt_test_gpt2_step(zt_gpt2 *m, zt_optim *o, int seed);
/* zt_snapshot_save with the process's file size limit at max_file_bytes (SIGXFSZ ignored), so
 * a write past it fails midway as a full disk would; the limit is restored after. */
zt_status zt_test_snapshot_save_capped(const char *dir, zt_gpt2 *m, zt_optim *o, const zt_train_state *st,
                                       int64_t max_file_bytes);

/* ------------------------------------------------ temporary directory and files */
/* Makes a fresh directory /tmp/zt_test_<tag>_XXXXXX (one at a time per process) and
 * returns its path, or NULL after reporting a failed check. */
const char *zt_test_tmpdir_make(const char *tag);
/* Removes that directory and everything under it (links are removed, not followed). */
void zt_test_tmpdir_remove(void);
/* Path of the current temporary directory ("" when none). */
const char *zt_test_tmpdir(void);
/* The descriptor this process holds on a file in dir whose name has prefix (a store's or
 * activation offload's unlinked spill file, found through /proc/self/fd, for tests that play
 * a failing disk), or -1. */
int zt_test_open_fd(const char *dir, const char *prefix);
/* "<tmpdir>/<name>" in one of 8 rotating static buffers: valid for the next 7 calls, so a
 * few can be passed to one function; copy it (zt_test_tmp_path_to) to keep it longer. */
const char *zt_test_tmp_path(const char *name);
/* "<tmpdir>/<name>" written into buf (size bytes, truncated to fit); returns buf. */
char *zt_test_tmp_path_to(char *buf, size_t size, const char *name);
/* Writes n bytes of data to path, replacing the file (a failure is a failed check). */
void zt_test_write_file(const char *path, const void *data, size_t n);

/* ------------------------------------------------ gradient check (tests/gradcheck.c) */
/* fn computes one output from inputs (it may use ud for attrs). */
typedef zt_status (*zt_gc_fn)(zt_tensor *const *inputs, zt_tensor **out, void *ud);
typedef struct zt_gc_opts {
  double eps;  /* finite-difference step; default 1e-6 */
  double atol; /* default 1e-5 */
  double rtol; /* default 1e-4 */
} zt_gc_opts;
/* Compares analytic grads (zt_grad with a random grad_output, and zt_backward's
 * accumulation) with central differences for every input that requires grad (f64
 * inputs). Reports failures through zt_test_fail with the caller's file:line.
 * Returns true when everything matched. */
bool zt_gradcheck_at(const char *file, int line, zt_gc_fn fn, int n, zt_tensor *const *inputs, void *ud,
                     const zt_gc_opts *opts);
#define ZT_GRADCHECK(fn, n, inputs, ud, opts) zt_gradcheck_at(__FILE__, __LINE__, (fn), (n), (inputs), (ud), (opts))

#endif
