/* One Llama training step at SmolLM-135M's shape (HuggingFaceTB/SmolLM-135M's config.json: 30
 * layers, hidden 576, intermediate 1536, 9 heads, 3 KV heads of 64, vocab 49152, tied
 * embeddings, rope_theta 10000, eps 1e-5), f32, random init and random tokens: forward to the
 * loss (zt_llama_forward with targets), zt_backward, AdamW (zt_optim_step), zero_grad (set to
 * none), each phase timed; medians of the timed steps after warm-up. In the same run a raw
 * cblas_sgemm of a representative shape ((B*T) x hidden x intermediate, as bench_gemm.c calls it)
 * and of 2048^3, medians. One JSON line:
 * {"bench":"llama_step","impl":"zerotrain",...,"tokens_per_s":..,"ratio_to_sgemm":..}.
 * Run: build/bench/bench_llama_step [--steps 5] [--warmup 1] [--threads 2] [--batch 4] [--seq 256]
 * [--layers 30]. The comparison with PyTorch: bench/llama_step.sh. */
#include <cblas.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "zt/llama.h"
#include "zt/ops.h"
#include "zt/optim.h"

#define MAX_STEPS 1000
#define SGEMM_RUNS 31

typedef struct opts {
  int steps, warmup, threads, batch, seq, layers;
} opts;

enum { PH_FWD, PH_BWD, PH_OPT, PH_N };

static int parse_int(const char *flag, const char *v, int lo, int hi) {
  char *end = NULL;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || *end || x < lo || x > hi) {
    fprintf(stderr, "bench_llama_step: %s wants an integer in [%d, %d]\n", flag, lo, hi);
    exit(2);
  }
  return (int)x;
}

static opts parse_opts(int argc, char **argv) {
  opts o = {.steps = 5, .warmup = 1, .threads = 2, .batch = 4, .seq = 256, .layers = 30};
  static const char *names[] = {"--steps", "--warmup", "--threads", "--batch", "--seq", "--layers"};
  int *fields[] = {&o.steps, &o.warmup, &o.threads, &o.batch, &o.seq, &o.layers};
  static const int lo[] = {1, 0, 1, 1, 1, 1}, hi[] = {MAX_STEPS, MAX_STEPS, 256, 4096, 2048, 30};
  for (int i = 1; i < argc; i++) {
    int k = 0;
    while (k < 6 && strcmp(argv[i], names[k])) k++;
    if (k == 6) {
      fprintf(stderr, "usage: bench_llama_step [--steps N] [--warmup N] [--threads N] [--batch B] [--seq T] "
                      "[--layers L]\n");
      exit(2);
    }
    *fields[k] = parse_int(names[k], i + 1 < argc ? argv[++i] : NULL, lo[k], hi[k]);
  }
  return o;
}

static zt_llama_config smollm_135m(int layers) {
  zt_llama_config c = {0};
  strcpy(c.model_type, "llama");
  c.vocab_size = 49152, c.hidden_size = 576, c.intermediate_size = 1536;
  c.n_layer = layers, c.n_head = 9, c.n_kv_head = 3, c.head_dim = 64;
  c.max_position_embeddings = 2048, c.rms_norm_eps = 1e-5, c.rope_theta = 10000.0;
  c.tie_word_embeddings = true, c.initializer_range = 0.02;
  return c;
}

/* Uniform random token ids (B, T) from stream offset off; exits on failure. */
static zt_tensor *random_ids(int64_t B, int64_t T, int vocab, uint64_t off) {
  int32_t *ids = malloc(sizeof *ids * (size_t)(B * T));
  if (!ids) bench_die("malloc");
  zt_rng_state rs = {1234, off};
  for (int64_t i = 0; i < B * T; i++) ids[i] = (int32_t)(zt_rng_uniform_at(rs, (uint64_t)i) * (float)vocab);
  zt_tensor *t = NULL;
  if (zt_tensor_from_data(2, (int64_t[]){B, T}, ZT_DTYPE_I32, ids, &t)) bench_die("ids");
  free(ids);
  return t;
}

/* The process's minor page faults so far: fresh pages touched (the timed steps' count says
 * whether the allocator's cache keeps the step's buffers). */
static long minor_faults(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

/* One training step; ph[] gets each phase's seconds; returns the loss. */
static double train_step(zt_llama *m, zt_optim *o, zt_tensor *x, zt_tensor *y, double *ph) {
  zt_tensor *loss = NULL;
  double t0 = bench_now_s();
  if (zt_llama_forward(m, x, y, NULL, &loss)) bench_die("zt_llama_forward");
  double t1 = bench_now_s();
  if (zt_backward(1, &loss, NULL, false)) bench_die("zt_backward");
  double t2 = bench_now_s();
  if (zt_optim_step(o, 6e-4)) bench_die("zt_optim_step");
  zt_optim_zero_grad(o);
  double t3 = bench_now_s();
  double l = zt_tensor_get(loss, 0);
  zt_tensor_free(loss);
  ph[PH_FWD] = t1 - t0, ph[PH_BWD] = t2 - t1, ph[PH_OPT] = t3 - t2;
  return l;
}

/* Median GFLOP/s of raw row-major sgemm C (m, n) = A (m, k) B (k, n), after one warm-up call. */
static double sgemm_gflops(int m, int n, int k) {
  float *a = malloc(sizeof(float) * (size_t)m * (size_t)k), *b = malloc(sizeof(float) * (size_t)k * (size_t)n);
  float *c = malloc(sizeof(float) * (size_t)m * (size_t)n);
  if (!a || !b || !c) bench_die("malloc");
  for (size_t i = 0; i < (size_t)m * (size_t)k; i++) a[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < (size_t)k * (size_t)n; i++) b[i] = (float)(i % 5) * 0.1f;
  double t[SGEMM_RUNS];
  for (int r = -1; r < SGEMM_RUNS; r++) {
    double t0 = bench_now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
    if (r >= 0) t[r] = bench_now_s() - t0;
  }
  free(a), free(b), free(c);
  return 2.0 * m * (double)n * k / bench_median(t, SGEMM_RUNS) / 1e9;
}

static void report(const opts *p, zt_llama *m, double ph[PH_N][MAX_STEPS], double *step, double loss, double faults) {
  const zt_llama_config *c = zt_llama_get_config(m);
  double med = bench_median(step, p->steps), tokens = (double)p->batch * p->seq;
  double gflops = zt_llama_flops_per_step(m, p->batch, p->seq) / med / 1e9;
  double sg = sgemm_gflops(p->batch * p->seq, c->intermediate_size, c->hidden_size);
  double sg2048 = sgemm_gflops(2048, 2048, 2048);
  printf("{\"bench\":\"llama_step\",\"impl\":\"zerotrain\",\"model\":\"smollm-135m\",\"layers\":%d,\"params\":%lld,"
         "\"batch\":%d,\"seq\":%d,\"threads\":%d,\"warmup\":%d,\"steps\":%d,\"ms_per_step\":%.1f,\"ms_best\":%.1f,"
         "\"fwd_ms\":%.1f,\"bwd_ms\":%.1f,\"optim_ms\":%.1f,\"tokens_per_s\":%.1f,\"model_gflops\":%.2f,"
         "\"sgemm_shape\":\"%dx%dx%d\",\"sgemm_gflops\":%.2f,\"ratio_to_sgemm\":%.3f,\"sgemm2048_gflops\":%.2f,"
         "\"ratio_to_sgemm2048\":%.3f,\"loss\":%.4f,\"peak_rss_bytes\":%lld,\"page_faults_per_step\":%.0f}\n",
         c->n_layer, (long long)zt_llama_num_params(m), p->batch, p->seq, zt_get_num_threads(), p->warmup, p->steps,
         1e3 * med, 1e3 * step[0], 1e3 * bench_median(ph[PH_FWD], p->steps), 1e3 * bench_median(ph[PH_BWD], p->steps),
         1e3 * bench_median(ph[PH_OPT], p->steps), tokens / med, gflops, p->batch * p->seq, c->intermediate_size,
         c->hidden_size, sg, gflops / sg, sg2048, gflops / sg2048, loss, (long long)zt_mem_peak_rss(), faults);
  fflush(stdout);
}

int main(int argc, char **argv) {
  opts p = parse_opts(argc, argv);
  zt_set_num_threads(p.threads);
  zt_rng_seed(1);
  zt_llama_config c = smollm_135m(p.layers);
  zt_llama *m = NULL;
  if (zt_llama_new(&c, ZT_DTYPE_F32, &m)) bench_die("zt_llama_new");
  zt_llama_set_training(m, true);
  zt_param *params;
  int np = zt_llama_params(m, &params);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW); /* lr 6e-4, betas (0.9, 0.95), wd 0.1 */
  zt_optim *o = NULL;
  if (zt_optim_new(&oc, np, params, &o)) bench_die("zt_optim_new");
  zt_tensor *x = random_ids(p.batch, p.seq, c.vocab_size, 0), *y = random_ids(p.batch, p.seq, c.vocab_size, 1u << 20);
  static double ph[PH_N][MAX_STEPS], step[MAX_STEPS];
  double loss = 0;
  long faults0 = 0;
  for (int s = -p.warmup; s < p.steps; s++) {
    if (s == 0) faults0 = minor_faults();
    double t[PH_N];
    loss = train_step(m, o, x, y, t);
    if (s < 0) continue;
    for (int k = 0; k < PH_N; k++) ph[k][s] = t[k];
    step[s] = t[PH_FWD] + t[PH_BWD] + t[PH_OPT];
  }
  report(&p, m, ph, step, loss, (double)(minor_faults() - faults0) / p.steps);
  zt_tensor_free(x), zt_tensor_free(y);
  zt_optim_free(o);
  zt_llama_free(m);
  return 0;
}
