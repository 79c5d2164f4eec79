/* Sampling speed: zt_lm_sample (KV cache: the prompt prefilled, then one position per token)
 * against the recompute path it replaced (the whole context through the model's forward per
 * token), in one run on one model, with the same prompt, seed and settings; median of the
 * timed runs of each (the two alternating, after one untimed run of the cached path). Checks
 * that both give the same tokens and reports the cached path's peak ACTIVATION bytes (the
 * cache, from the allocator). One JSON object, e.g.
 * {"bench":"sample","model":"gpt2-124m","tokens":256,...,"recompute_s":..,"cached_s":..,"speedup":..}.
 * Options: --model PRESET (gpt2-124m; any family's), --checkpoint DIR (its weights instead of the
 * initialisation), --tokens N (256), --prompt N (1: tokens of a fixed prompt), --runs R (3,
 * cached path), --recompute-runs R (3), --temperature T (0.8), --top-k K (0), --seed S (1);
 * prompt, temperature and top-k default to zt sample's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "train/sample.h"
#include "zt/train.h"

typedef zt_status (*sample_fn)(const zt_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n, double temperature,
                               int top_k, uint64_t seed, int32_t **out, int64_t *n_out);

/* One call of f, timed; *ids: its tokens (the previous ones freed). */
static double time_run(sample_fn f, const zt_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n, double temp,
                       int top_k, uint64_t seed, int32_t **ids) {
  int64_t n_out = 0;
  free(*ids);
  *ids = NULL;
  double t0 = bench_now_s();
  if (f(m, prompt, n_prompt, n, temp, top_k, seed, ids, &n_out)) bench_die("sampling");
  return bench_now_s() - t0;
}

static zt_model load_model(const char *preset, const char *ckpt) {
  zt_model m = {0};
  if (!ckpt) {
    zt_lm_config c;
    if (zt_lm_preset(preset, &c) || zt_lm_new(&c, ZT_DTYPE_F32, NULL, &m)) bench_die("model");
    return m;
  }
  char dir[4096];
  zt_train_state st;
  if (zt_snapshot_resolve(ckpt, dir, sizeof dir) || zt_snapshot_read_state(dir, &st) ||
      zt_lm_new(&st.model, ZT_DTYPE_F32, NULL, &m) || zt_snapshot_load(dir, &m, NULL, NULL))
    bench_die("checkpoint");
  return m;
}

int main(int argc, char **argv) {
  const char *preset = "gpt2-124m", *ckpt = NULL;
  long tokens = 256, n_prompt = 1, runs = 3, rruns = 3, top_k = 0, seed = 1;
  double temp = 0.8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--model")) preset = v;
    else if (!strcmp(k, "--checkpoint")) ckpt = v;
    else if (!strcmp(k, "--tokens")) tokens = atol(v);
    else if (!strcmp(k, "--prompt")) n_prompt = atol(v);
    else if (!strcmp(k, "--runs")) runs = atol(v);
    else if (!strcmp(k, "--recompute-runs")) rruns = atol(v);
    else if (!strcmp(k, "--temperature")) temp = atof(v);
    else if (!strcmp(k, "--top-k")) top_k = atol(v);
    else if (!strcmp(k, "--seed")) seed = atol(v);
    else {
      fprintf(stderr, "bench_sample: unknown option %s (see the comment at the top of bench/bench_sample.c)\n", k);
      return 2;
    }
  }
  if (argc % 2 == 0 || tokens < 1 || n_prompt < 1 || runs < 1 || rruns < 0) {
    fprintf(stderr, "bench_sample: options come in pairs; tokens, prompt and runs >= 1, recompute runs >= 0\n");
    return 2;
  }
  zt_rng_seed(1);
  zt_model model = load_model(preset, ckpt), *m = &model;
  int V = zt_lm_config_dims(zt_model_config(m)).vocab;
  int32_t *prompt = malloc(sizeof *prompt * (size_t)n_prompt);
  if (!prompt) bench_die("out of memory");
  for (long i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
  int32_t *fast = NULL, *slow = NULL;
  double *tcs = malloc(sizeof(double) * (size_t)runs), *trs = malloc(sizeof(double) * (size_t)(rruns + 1));
  if (!tcs || !trs) bench_die("out of memory");
  /* a warm-up of the cached path, which also reads its peak ACTIVATION bytes (the cache) */
  zt_mem_reset_peaks();
  time_run(zt_lm_sample, m, prompt, n_prompt, tokens, temp, (int)top_k, (uint64_t)seed, &fast);
  zt_mem_stats ms;
  zt_mem_stats_get(ZT_CPU, &ms);
  /* the two paths alternate, so that a change in the machine's load falls on both */
  for (long r = 0; r < runs || r < rruns; r++) {
    if (r < runs) tcs[r] = time_run(zt_lm_sample, m, prompt, n_prompt, tokens, temp, (int)top_k, (uint64_t)seed, &fast);
    if (r < rruns)
      trs[r] = time_run(zt__lm_sample_recompute, m, prompt, n_prompt, tokens, temp, (int)top_k, (uint64_t)seed, &slow);
  }
  double tc = bench_median(tcs, (int)runs), tr = rruns ? bench_median(trs, (int)rruns) : 0;
  free(tcs);
  free(trs);
  bool same = slow && !memcmp(fast, slow, sizeof *fast * (size_t)(n_prompt + tokens));
  printf("{\"bench\":\"sample\",\"model\":\"%s\",\"weights\":\"%s\",\"prompt\":%ld,\"tokens\":%ld,\"temperature\":%g,"
         "\"top_k\":%ld,\"threads\":%d,\"runs\":%ld,\"recompute_runs\":%ld,\"cached_s\":%.3f,\"cached_ms_per_token\":%.2f",
         ckpt ? "checkpoint" : preset, ckpt ? ckpt : "init", n_prompt, tokens, temp, top_k, zt_get_num_threads(), runs,
         rruns, tc, 1e3 * tc / (double)tokens);
  if (rruns)
    printf(",\"recompute_s\":%.3f,\"recompute_ms_per_token\":%.2f,\"speedup\":%.1f,\"same_tokens\":%s", tr,
           1e3 * tr / (double)tokens, tr / tc, same ? "true" : "false");
  printf(",\"cached_activation_peak_bytes\":%lld}\n", (long long)ms.peak[ZT_MEM_TAG_ACTIVATION]);
  free(fast);
  free(slow);
  free(prompt);
  zt_model_free(m);
  return rruns && !same ? 1 : 0;
}
