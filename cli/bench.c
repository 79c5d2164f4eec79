/* zt bench step: training steps (zt_train_step: forward, backward, AdamW; no clipping) of a
 * GPT model on random tokens after warm-up (any zt train option, --recompute included; with
 * --offload-model TIER the steps are zt_offload_model_train_step's over the M microbatches as
 * one batch);
 * prints one JSON object with the median step time, model FLOP/s and its ratio to raw OpenBLAS sgemm
 * 2048^3 measured in the same run, and memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int zt_cli_bench_options(const char *cmd, int argc, char **argv, zt_train_config *c, int64_t *steps, int64_t *warm) {
  char name[64];
  const char *v;
  int rc;
  for (int i = 0; (rc = zt_cli_option(cmd, argc, argv, &i, name, &v)) != 1;) {
    if (rc) return rc;
    if (!strcmp(name, "steps")) rc = zt_cli_i64(cmd, name, v, 1, 1000, steps);
    else if (!strcmp(name, "warmup-steps")) rc = zt_cli_i64(cmd, name, v, 0, 1000, warm);
    else if (zt_train_config_set(c, name, v)) rc = (zt_cli_fail(cmd), 2);
    if (rc) return rc;
  }
  return 0;
}

/* Every microbatch of every step trains on the same random rows. */
typedef struct bench_batch {
  zt_tensor *x, *y;
} bench_batch;
static zt_status same_batch(void *ud, zt_tensor **x, zt_tensor **y) {
  const bench_batch *b = ud;
  *x = b->x, *y = b->y;
  return ZT_OK;
}

static int bench_step(int argc, char **argv) {
  zt_train_config c;
  zt_train_config_default(&c);
  int64_t steps = 5, warm = 1;
  if (zt_cli_wants_help(argc, argv)) {
    printf("usage: zt bench step --model NAME --batch B --seq T [--steps N (5)] [--warmup-steps N (1)]\n"
           "                     [any zt train option]\n");
    return 0;
  }
  int rc = zt_cli_bench_options("bench step", argc, argv, &c, &steps, &warm);
  if (rc) return rc;
  zt_set_num_threads(c.threads);
  zt_lm_config g;
  if (zt_train_model_config(&c, &g)) return zt_cli_fail("bench step");
  zt_lm_dims d = zt_lm_config_dims(&g);
  if (c.data.seq > d.context) {
    fprintf(stderr, "zt bench step: --seq %lld is longer than the model's context %d\n", (long long)c.data.seq, d.context);
    return 2;
  }
  int64_t M = c.data.microbatches, rows = c.data.batch / M;
  if (c.data.batch % M) {
    fprintf(stderr, "zt bench step: --microbatches %lld does not divide --batch %lld\n", (long long)M, (long long)c.data.batch);
    return 2;
  }
  zt_rng_seed(c.seed);
  zt_model model = {0}, *m = &model;
  zt_optim *o = NULL;
  zt_tensor *x = NULL, *y = NULL, *X = NULL, *Y = NULL;
  zt_store *store = NULL;
  zt_offload_model *om = NULL;
  double *t = calloc((size_t)steps, sizeof *t);
  rc = 1;
  zt_train_result plan = {0};
  zt_train_memory mem = {0};
  if (zt_lm_new(&g, ZT_DTYPE_F32, NULL, m) || zt_train_memory_attach(m, &c, rows, &mem, &plan)) goto fail;
  zt_param *params;
  int np = zt_model_params(m, &params);
  zt_optim_config oc = zt_optim_default(c.optim.kind);
  oc.lr = c.optim.lr;
  if (zt_optim_new(&oc, np, params, &o)) goto fail;
  int64_t xs[] = {rows, c.data.seq}, n_tok = rows * c.data.seq;
  /* token ids made on the host, then copied into tensors by the library (the CLI never
   * touches tensor bytes) */
  int32_t *ids = malloc(sizeof *ids * (size_t)(2 * n_tok));
  if (!ids) goto fail;
  zt_rng_state rs = {c.seed, 1u << 20};
  for (int64_t i = 0; i < 2 * n_tok; i++) ids[i] = (int32_t)(zt_rng_uniform_at(rs, (uint64_t)i) * (float)d.vocab);
  zt_mem_tag prev_tag = zt_mem_tag_push(ZT_MEM_TAG_TEMP);
  bool bad_ids = zt_tensor_from_data(2, xs, ZT_DTYPE_I32, ids, &x) ||
                 zt_tensor_from_data(2, xs, ZT_DTYPE_I32, ids + n_tok, &y);
  zt_mem_tag_pop(prev_tag);
  free(ids);
  if (bad_ids) goto fail;
  /* OffloadModel: the M microbatches (the same rows, as same_batch gives them) as one batch */
  if (c.memory.offload_model) {
    const char *dir = c.memory.offload_dir[0] ? c.memory.offload_dir : NULL;
    zt_status e = c.memory.offload_model == ZT_OFFLOAD_BF16   ? zt_store_bf16_new(&store)
                  : c.memory.offload_model == ZT_OFFLOAD_DISK ? zt_store_disk_new(dir, "zt_bench_offload_model", &store)
                                                              : zt_store_memory_new(&store);
    zt_offload_units u;
    zt_offload_model_options oo = zt_offload_model_options_default();
    if (c.memory.offload_slices > 0) oo.slices = c.memory.offload_slices; /* 0: the default */
    if (c.memory.offload_resident > 0) oo.resident = c.memory.offload_resident;
    oo.microbatches = (int)M;
    oo.mode = c.memory.offload_mode;
    zt_tensor **xs_m = calloc((size_t)M, sizeof *xs_m), **ys_m = calloc((size_t)M, sizeof *ys_m);
    for (int64_t k = 0; xs_m && ys_m && k < M; k++) xs_m[k] = x, ys_m[k] = y;
    if (!e && !(xs_m && ys_m)) e = zt_set_error(ZT_STATUS_OOM, "out of host memory");
    if (!e) e = zt_cat((int)M, xs_m, 0, &X);
    if (!e) e = zt_cat((int)M, ys_m, 0, &Y);
    free(xs_m), free(ys_m);
    if (!e) e = zt_lm_offload_units(m, &u);
    if (!e) e = zt_offload_model_new(&u, store, &oo, &om);
    if (e) goto fail;
  }
  bench_batch batch = {x, y};
  zt_train_step_options so = zt_train_step_options_default();
  so.lr = c.optim.lr;
  so.microbatches = M;
  so.grad_clip = -1; /* forward, backward and update only, as measured since the first version */
  for (int64_t s = 0; s < warm + steps; s++) {
    /* OffloadModel's lazy updates made the last AdamW state at the first forward after the
     * warm-up: flush them first, so OPTIM is constant over the measured steps */
    if (s == warm && om && zt_offload_model_flush(om)) goto fail;
    if (s == warm) zt_mem_reset_peaks();
    double t0 = zt_clock_now();
    zt_train_step_result sr;
    so.step = s + 1;
    if (om ? zt_offload_model_train_step(om, o, X, Y, so.lr, so.grad_clip, NULL, NULL)
           : zt_train_step(m, NULL, o, same_batch, &batch, &so, &sr))
      goto fail;
    if (s >= warm) t[s - warm] = zt_clock_now() - t0;
  }
  qsort(t, (size_t)steps, sizeof *t, cmp_d);
  double med = t[steps / 2];
  double flops = zt_model_flops_per_step(m, c.data.batch, c.data.seq);
  double sg = zt_sgemm_gflops(2048, 3);
  zt_mem_stats ms, sd = {0};
  zt_mem_stats_get(ZT_CPU, &ms);
  zt_offload_model_stats os = {0};
  zt_store_stats ss = {0};
  if (om) {
    zt_offload_model_stats_get(om, &os);
    zt_store_stats_get(store, &ss);
    zt_mem_stats_get(zt_store_device(store), &sd);
  }
  printf("{\"bench\":\"step\",\"model\":\"%s\",\"params\":%lld,\"batch\":%lld,\"microbatches\":%lld,\"seq\":%lld,\"threads\":%d,"
         "\"recompute\":\"%s\",\"recompute_budget\":%lld,\"plan\":\"%s\",\"checkpoint_every\":%d,"
         "\"offload\":%d,\"act_peak_predicted\":%lld,\"steps\":%lld,\"ms_per_step\":%.1f,\"tokens_per_s\":%.1f,"
         "\"model_gflops\":%.1f,\"sgemm_gflops\":%.1f,"
         "\"ratio_to_sgemm\":%.3f,\"peak_rss_bytes\":%lld,\"peak_bytes\":{",
         c.model.preset, (long long)zt_module_num_params(zt_model_module(m)), (long long)c.data.batch, (long long)M, (long long)c.data.seq, zt_get_num_threads(),
         c.memory.recompute_budget ? "budget" : zt_recompute_name(c.memory.recompute), (long long)c.memory.recompute_budget, plan.recompute_plan,
         c.memory.checkpoint_every, (int)c.memory.offload_activations, (long long)plan.act_peak_predicted, (long long)steps, med * 1e3,
         (double)(c.data.batch * c.data.seq) / med, flops / med / 1e9, sg, flops / med / 1e9 / sg,
         (long long)zt_mem_peak_rss());
  for (int k = 0; k < ZT_MEM_TAG_COUNT; k++)
    printf("%s\"%s\":%lld", k ? "," : "", zt_mem_tag_name((zt_mem_tag)k), (long long)ms.peak[k]);
  /* the peak of PARAM + GRAD together (OPTIM is constant after the warm-up's first update) */
  printf(",\"total\":%lld},\"peak_param_grad\":%lld", (long long)ms.peak_total,
         (long long)(warm > 0 ? ms.peak_state - ms.current[ZT_MEM_TAG_OPTIM] : ms.peak[ZT_MEM_TAG_PARAM] + ms.peak[ZT_MEM_TAG_GRAD]));
  printf(",\"offload_model\":\"%s\"", zt_offload_tier_name(c.memory.offload_model));
  if (om)
    printf(",\"offload_mode\":\"%s\",\"offload_slices\":%d,\"offload_resident\":%d,\"slice_param_bytes_max\":%lld,\"slice_loads\":%lld,"
           "\"slice_prefetched\":%lld,\"store_peak_bytes\":%lld,\"store_device_peak\":{\"PARAM\":%lld,\"GRAD\":%lld,"
           "\"ACTIVATION\":%lld,\"TEMP\":%lld}",
           c.memory.offload_mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH ? "keep-graph" : "recompute", os.slices, os.resident, (long long)os.slice_param_bytes_max, (long long)os.loads, (long long)os.prefetched,
           (long long)ss.peak_bytes_held, (long long)sd.peak[ZT_MEM_TAG_PARAM], (long long)sd.peak[ZT_MEM_TAG_GRAD],
           (long long)sd.peak[ZT_MEM_TAG_ACTIVATION], (long long)sd.peak[ZT_MEM_TAG_TEMP]);
  printf("}\n");
  rc = 0;
  goto done;
fail:
  rc = zt_cli_fail("bench step");
done:
  free(t);
  zt_offload_model_free(om); /* before the model and the store */
  zt_store_free(store);
  zt_tensor_free(X), zt_tensor_free(Y);
  zt_tensor_free(x), zt_tensor_free(y);
  zt_optim_free(o);
  zt_train_memory_free(&mem);
  zt_model_free(m);
  return rc;
}

int zt_cmd_bench(int argc, char **argv) {
  if (argc >= 1 && !strcmp(argv[0], "step")) return bench_step(argc - 1, argv + 1);
  if (argc >= 1 && !strcmp(argv[0], "dp")) return zt_cli_bench_dp(argc - 1, argv + 1);
  bool help = argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h") || !strcmp(argv[0], "help"));
  if (!help && argc >= 1) fprintf(stderr, "zt bench: unknown benchmark '%s'\n", argv[0]);
  fprintf(help ? stdout : stderr,
          "usage: zt bench step --model NAME --batch B --seq T [--steps N] [zt train options]\n"
          "       mpirun -np N zt bench dp --model NAME --batch B --seq T --shard MODE [--steps N]\n"
          "one JSON object per run; 'zt bench step --help' and 'zt bench dp --help' list the options\n");
  return help ? 0 : 2;
}
