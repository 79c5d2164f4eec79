/* The `zt` command. For now `zt train` is a placeholder job that trains a small
 * character-level MLP language model through the engine (embedding -> linear -> GELU ->
 * linear -> fused cross-entropy, plain SGD) on built-in text, printing loss, speed and
 * memory per tag. The GPT-2 issue replaces it with the real training loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zt/ops.h"

static const char *const builtin_text =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife. However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
    "the rightful property of some one or other of their daughters. The quick brown fox jumps over the lazy dog. "
    "Pack my box with five dozen liquor jugs. How vexingly quick daft zebras jump! Sphinx of black quartz, judge "
    "my vow. The five boxing wizards jump quickly. Training runs out of memory long before it runs out of "
    "compute, so we trade memory for compute, communication, bandwidth and pipelining, and account for every byte. ";

typedef struct train_opts {
  int steps, batch, ctx, embd, hidden, log_every, threads;
  double lr;
  uint64_t seed;
} train_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: zt <command> [options]\n"
          "commands:\n"
          "  train   train the placeholder character-level MLP on built-in text\n"
          "  help    this text\n"
          "zt train options:\n"
          "  --steps N      optimisation steps (default 1500)\n"
          "  --batch B      sequences per step (default 32)\n"
          "  --ctx T        context characters (default 8)\n"
          "  --embd C       embedding width (default 24)\n"
          "  --hidden H     hidden width (default 256)\n"
          "  --lr LR        SGD learning rate (default 0.5)\n"
          "  --seed S       random seed (default 1337)\n"
          "  --threads N    kernel threads (default: all cores)\n"
          "  --log-every N  progress line every N steps (default 100)\n");
}

static int parse_int(const char *flag, const char *v, int lo, int *out) {
  char *end;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || *end || x < lo || x > 1000000000) {
    fprintf(stderr, "zt train: %s needs an integer >= %d (got '%s')\n", flag, lo, v ? v : "");
    return 1;
  }
  *out = (int)x;
  return 0;
}

static int parse_train(int argc, char **argv, train_opts *o) {
  *o = (train_opts){1500, 32, 8, 24, 256, 100, 0, 0.5, 1337};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--steps")) rc = parse_int(a, v, 1, &o->steps), i++;
    else if (!strcmp(a, "--batch")) rc = parse_int(a, v, 1, &o->batch), i++;
    else if (!strcmp(a, "--ctx")) rc = parse_int(a, v, 1, &o->ctx), i++;
    else if (!strcmp(a, "--embd")) rc = parse_int(a, v, 1, &o->embd), i++;
    else if (!strcmp(a, "--hidden")) rc = parse_int(a, v, 1, &o->hidden), i++;
    else if (!strcmp(a, "--threads")) rc = parse_int(a, v, 0, &o->threads), i++;
    else if (!strcmp(a, "--log-every")) rc = parse_int(a, v, 1, &o->log_every), i++;
    else if (!strcmp(a, "--seed")) {
      int s;
      rc = parse_int(a, v, 0, &s), i++;
      o->seed = (uint64_t)s;
    } else if (!strcmp(a, "--lr")) {
      char *end;
      o->lr = v ? strtod(v, &end) : 0;
      if (!v || *end || !(o->lr > 0)) {
        fprintf(stderr, "zt train: --lr needs a positive number (got '%s')\n", v ? v : "");
        rc = 1;
      }
      i++;
    } else {
      fprintf(stderr, "zt train: unknown option '%s' (see zt train --help)\n", a);
      rc = 1;
    }
    if (rc) return rc;
  }
  return 0;
}

#define CHECK(expr)                                                       \
  do {                                                                    \
    if ((expr) != ZT_OK) {                                                \
      fprintf(stderr, "zt train: %s\n", zt_last_error());                 \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

static zt_tensor *param(int ndim, const int64_t *shape, double std) {
  zt_tensor *t;
  CHECK(zt_tensor_empty_tagged(ndim, shape, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_PARAM, &t));
  CHECK(zt_tensor_normal_(t, 0.0, std));
  CHECK(zt_tensor_set_requires_grad(t, true));
  return t;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmd_train(int argc, char **argv) {
  train_opts o;
  if (parse_train(argc, argv, &o)) return 2;
  zt_set_num_threads(o.threads);
  zt_rng_seed(o.seed);
  const int V = 256;
  int64_t n_text = (int64_t)strlen(builtin_text);
  if (n_text <= o.ctx + 1) {
    fprintf(stderr, "zt train: --ctx %d is longer than the built-in text\n", o.ctx);
    return 2;
  }
  int64_t ws[] = {V, o.embd}, w1s[] = {o.hidden, (int64_t)o.ctx * o.embd}, b1s[] = {o.hidden};
  int64_t w2s[] = {V, o.hidden}, b2s[] = {V};
  zt_tensor *wte = param(2, ws, 0.1), *w1 = param(2, w1s, 0.05), *b1 = param(1, b1s, 0.0);
  zt_tensor *w2 = param(2, w2s, 0.02), *b2 = param(1, b2s, 0.0);
  zt_tensor *params[] = {wte, w1, b1, w2, b2};
  printf("zt train: placeholder char-MLP, %d steps, batch %d, context %d, %d threads\n", o.steps, o.batch, o.ctx,
         zt_get_num_threads());
  int64_t xs[] = {o.batch, o.ctx}, ys[] = {o.batch};
  zt_tensor *x, *y;
  CHECK(zt_tensor_empty(2, xs, ZT_DTYPE_I32, ZT_CPU, &x));
  CHECK(zt_tensor_empty(1, ys, ZT_DTYPE_I32, ZT_CPU, &y));
  double t0 = now_s(), first_loss = 0, loss_v = 0;
  for (int step = 1; step <= o.steps; step++) {
    /* batch of random windows, drawn from the Philox stream */
    zt_rng_state rs = zt_rng_reserve((uint64_t)o.batch);
    int32_t *xp = (int32_t *)x->storage->data, *yp = (int32_t *)y->storage->data;
    for (int b = 0; b < o.batch; b++) {
      int64_t start = (int64_t)(zt_rng_uniform_at(rs, (uint64_t)b * 4) * (float)(n_text - o.ctx - 1));
      for (int t = 0; t < o.ctx; t++) xp[b * o.ctx + t] = (unsigned char)builtin_text[start + t];
      yp[b] = (unsigned char)builtin_text[start + o.ctx];
    }
    zt_tensor *emb, *flat, *h, *a, *logits, *loss;
    CHECK(zt_embedding(wte, x, &emb));
    int64_t fs[] = {o.batch, (int64_t)o.ctx * o.embd};
    CHECK(zt_reshape(emb, 2, fs, &flat));
    CHECK(zt_linear(flat, w1, b1, &h));
    CHECK(zt_gelu(h, &a));
    CHECK(zt_linear(a, w2, b2, &logits));
    CHECK(zt_cross_entropy(logits, y, -1, &loss));
    loss_v = zt_tensor_get(loss, 0);
    if (step == 1) first_loss = loss_v;
    CHECK(zt_backward(1, &loss, NULL, false));
    bool prev = zt_set_grad_enabled(false);
    for (int p = 0; p < 5; p++) {
      float *w = (float *)params[p]->storage->data, *g = (float *)params[p]->grad->storage->data;
      int64_t n = zt_tensor_numel(params[p]);
      for (int64_t i = 0; i < n; i++) w[i] -= (float)o.lr * g[i];
      zt_tensor_bump_version(params[p]);
      zt_tensor_free(params[p]->grad);
      params[p]->grad = NULL;
    }
    zt_set_grad_enabled(prev);
    zt_tensor_free(emb), zt_tensor_free(flat), zt_tensor_free(h), zt_tensor_free(a);
    zt_tensor_free(logits), zt_tensor_free(loss);
    if (step % o.log_every == 0 || step == o.steps) {
      zt_mem_stats ms;
      zt_mem_stats_get(ZT_CPU, &ms);
      double el = now_s() - t0;
      printf("step %5d  loss %.4f  %.0f samples/s  mem peak PARAM %.1f KiB GRAD %.1f KiB ACTIVATION %.1f KiB TEMP %.1f KiB\n",
             step, loss_v, (double)step * o.batch / el, ms.peak[ZT_MEM_TAG_PARAM] / 1024.0,
             ms.peak[ZT_MEM_TAG_GRAD] / 1024.0, ms.peak[ZT_MEM_TAG_ACTIVATION] / 1024.0,
             ms.peak[ZT_MEM_TAG_TEMP] / 1024.0);
      fflush(stdout);
    }
  }
  printf("zt train: loss %.4f -> %.4f in %.1f s; peak RSS %.1f MiB\n", first_loss, loss_v, now_s() - t0,
         (double)zt_mem_peak_rss() / (1 << 20));
  zt_tensor_free(x), zt_tensor_free(y);
  for (int p = 0; p < 5; p++) zt_tensor_free(params[p]);
  return loss_v < first_loss ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
  fprintf(stderr, "zt: unknown command '%s' (see zt help)\n", argv[1]);
  return 2;
}
