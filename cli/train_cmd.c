/* zt train: flags and an optional config file (same names) into a zt_train_config, a
 * progress line every N steps, a summary, and (byte-level models) a sample of text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void train_usage(FILE *f) {
  zt_train_config d;
  zt_train_config_default(&d);
  fprintf(f,
          "usage: zt train [--config FILE] [options]\n"
          "Every option can also be given in a config file as 'name = value' lines (# comments);\n"
          "flags given on the command line override the file.\n"
          "model:\n"
          "  --model NAME        preset: gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m (default %s)\n"
          "  --layers N --heads N --dim N --vocab N --ctx N   override the preset's shape\n"
          "  --dropout P         dropout probability (default: the preset's)\n"
          "  --init-from FILE    start from a transformers GPT-2 model.safetensors\n"
          "data:\n"
          "  --data FILE         token file (zt tokenize); default: the built-in dataset\n"
          "  --val-data FILE     validation token file (default: last 10%% of --data)\n"
          "  --batch B           sequences per step (default %lld)\n"
          "  --seq T             tokens per sequence (default %lld)\n"
          "memory:\n"
          "  --recompute MODE    recompute the blocks' activations in backward instead of keeping them\n"
          "                      (bitwise the same results, less activation memory; default none):\n"
          "                      none | full | selective (keep QKV and MLP up-projection outputs,\n"
          "                      recompute the rest; also selective:gemm, selective:attention) |\n"
          "                      budget=SIZE (per-block plan that fits SIZE bytes of activations, e.g. 300M)\n"
          "  --checkpoint-every K  blocks per recomputed region (default %d)\n"
          "  --offload-activations TIER  none | bf16 (compressed in memory, lossy) | disk (a spill file,\n"
          "                      lossless) | host: saved activations of the blocks go there in forward and\n"
          "                      come back, prefetched, in backward (default none)\n"
          "  --offload-dir DIR   where the disk tier's spill file goes (default $TMPDIR or /tmp)\n"
          "data parallel (run under mpirun -np N; --batch is the global batch, B/N rows per rank):\n"
          "  --shard MODE        none: DDP (replicated, bucketed gradient all-reduce; the default) |\n"
          "                      full: FSDP ZeRO-3 (parameters, grads, optimizer state sharded) |\n"
          "                      grad_op: ZeRO-2 (full parameters kept through backward) |\n"
          "                      opt: ZeRO-1 (optimizer state sharded) | hybrid:G (full shard in groups\n"
          "                      of G ranks, replicated across groups); one transformer block per unit\n"
          "  --prefetch on|off   FSDP: gather the next unit while this one computes (default on)\n"
          "  --save-format F     FSDP checkpoints: sharded (a file per rank + index.json; loads at any\n"
          "                      rank count; zt consolidate makes a single one) or full (default sharded)\n"
          "  --mixed-precision P FSDP (needs --shard other than none; one rank works): none | bf16 | fp16:\n"
          "                      gather parameters and reduce gradients in P, f32 master shards (fp16 adds\n"
          "                      dynamic loss scaling); the CPU kernels compute in f32 on the rounded values\n"
          "optimisation:\n"
          "  --steps N           training steps (default %lld)\n"
          "  --lr LR             peak learning rate (default %g)\n"
          "  --min-lr LR         final learning rate of the cosine schedule (default lr/10)\n"
          "  --warmup N          warm-up steps (default min(100, steps/10))\n"
          "  --optimizer NAME    adamw or sgd (default adamw)\n"
          "  --weight-decay W    decoupled weight decay on matrices and embeddings (default %g)\n"
          "  --beta1 B --beta2 B AdamW betas (default %g, %g)\n"
          "  --momentum M        SGD momentum (default %g)\n"
          "  --grad-clip C       clip the global grad norm to C, 0 = off (default %g)\n"
          "run:\n"
          "  --seed S            random seed (default %llu)\n"
          "  --threads N         kernel threads, 0 = all cores (default 0)\n"
          "  --log-every N       progress line every N steps (default 10)\n"
          "  --eval-every N      validation loss every N steps, 0 = at the end only (default %lld)\n"
          "  --eval-batches N    batches per validation (default %lld)\n"
          "  --metrics FILE      one JSON object per step (step, loss, lr, tokens_per_s, mem, val_loss)\n"
          "  --save DIR          write a checkpoint (model.safetensors, optim.safetensors, state.json)\n"
          "  --save-every N      checkpoint every N steps, 0 = at the end only (default 0)\n"
          "  --resume DIR        continue from a checkpoint (bitwise the same as not stopping)\n"
          "  --stop-at N         stop (and checkpoint) after step N; the schedule still spans --steps\n"
          "  --inject-nan-at N   testing aid: pretend the loss is NaN at step N\n"
          "  --sample-len N      characters of sample text at the end, 0 = none (default 300)\n",
          d.model, (long long)d.batch, (long long)d.seq, d.checkpoint_every, (long long)d.steps, d.lr, d.weight_decay, d.beta1, d.beta2,
          d.momentum, d.grad_clip, (unsigned long long)d.seed, (long long)d.eval_every, (long long)d.eval_batches);
}

typedef struct progress {
  int64_t log_every;
} progress;

static void on_step(const zt_train_step_info *in, void *ud) {
  const progress *p = ud;
  if (in->rank != 0) return; // rank 0 speaks for all (per-rank figures are in --metrics)
  if (in->step % p->log_every && in->step != in->total_steps && isnan(in->val_loss)) return;
  char b[6][32];
  printf("step %5lld/%lld | loss %.4f", (long long)in->step, (long long)in->total_steps, in->loss);
  if (!isnan(in->val_loss)) printf(" | val %.4f", in->val_loss);
  printf(" | lr %.2e | %.0f tok/s | mfu %.1f%% | mem param %s grad %s optim %s act %s (peak %s) | rss %s\n", in->lr,
         in->tokens_per_s, 100 * in->mfu, zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_PARAM], b[0]),
         zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_GRAD], b[1]),
         zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_OPTIM], b[2]),
         zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_ACTIVATION], b[3]),
         zt_cli_bytes((double)in->mem.peak[ZT_MEM_TAG_ACTIVATION], b[4]), zt_cli_bytes((double)in->peak_rss, b[5]));
  fflush(stdout);
}

static int run_train(const zt_train_config *cfg, zt_comm *world, int rank, int ranks, progress *p, int64_t sample_len);

int zt_cmd_train(int argc, char **argv) {
  zt_train_config c;
  zt_train_config_default(&c);
  progress p = {10};
  int64_t sample_len = 300;
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      train_usage(stdout);
      return 0;
    }
  for (int i = 0; i + 1 < argc; i++) /* the config file first, so flags override it */
    if (!strcmp(argv[i], "--config") && zt_train_config_load(&c, argv[i + 1])) {
      fprintf(stderr, "zt train: %s\n", zt_last_error());
      return 2;
    }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strncmp(a, "--", 2)) {
      fprintf(stderr, "zt train: unexpected argument '%s' (options start with --; see zt train --help)\n", a);
      return 2;
    }
    if (!v) {
      fprintf(stderr, "zt train: option '%s' needs a value (see zt train --help)\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--config")) continue;
    if (!strcmp(a, "--log-every") || !strcmp(a, "--sample-len")) {
      char *end;
      long long x = strtoll(v, &end, 10);
      if (*end || x < (strcmp(a, "--log-every") ? 0 : 1)) {
        fprintf(stderr, "zt train: option '%s' needs an integer >= %d (got '%s')\n", a + 2,
                strcmp(a, "--log-every") ? 0 : 1, v);
        return 2;
      }
      *(strcmp(a, "--log-every") ? &sample_len : &p.log_every) = x;
      continue;
    }
    if (zt_train_config_set(&c, a + 2, v)) {
      fprintf(stderr, "zt train: %s\n", zt_last_error());
      return 2;
    }
  }
  zt_comm *world = NULL;
  if (zt_comm_world(&world)) return zt_cli_fail("train");
  int rank = zt_comm_rank(world), ranks = zt_comm_size(world);
  int code = run_train(&c, world, rank, ranks, &p, sample_len);
  zt_comm_free(world);
  return code;
}

static int run_train(const zt_train_config *cfg, zt_comm *world, int rank, int ranks, progress *p, int64_t sample_len) {
  zt_train_config c = *cfg;
  char rc[64];
  if (c.recompute_budget > 0)
    snprintf(rc, sizeof rc, "budget %s", zt_cli_bytes((double)c.recompute_budget, (char[32]){0}));
  else
    snprintf(rc, sizeof rc, "%s", zt_recompute_name(c.recompute));
  static const char *const tiers[] = {"none", "bf16", "disk", "host"};
  if (rank == 0) {
    printf("zt train: %s%s, data %s, batch %lld x seq %lld, %lld steps, lr %g, seed %llu, recompute %s, offload %s",
           c.model, c.n_layer || c.n_head || c.n_embd || c.vocab_size || c.block_size ? " (shape overridden)" : "",
           c.data[0] ? c.data : "built-in", (long long)c.batch, (long long)c.seq, (long long)c.steps, c.lr,
           (unsigned long long)c.seed, rc, tiers[c.offload_activations]);
    if (ranks > 1 || c.shard != ZT_SHARD_NONE)
      printf(", %d ranks, %s", ranks, c.shard == ZT_SHARD_NONE ? "ddp" : zt_shard_strategy_name(c.shard));
    printf("\n");
    fflush(stdout);
  }
  zt_train_result r;
  zt_gpt2 *m = NULL;
  if (zt_train_run_on(&c, world, on_step, p, &r, &m)) {
    if (ranks > 1) fprintf(stderr, "zt train (rank %d): %s\n", rank, zt_last_error());
    return ranks > 1 ? 1 : zt_cli_fail("train");
  }
  if (rank != 0) {
    zt_gpt2_free(m);
    return 0;
  }
  printf("zt train: %lld steps in %.1f s, %.0f tok/s, %lld parameters, loss %.4f -> %.4f, val loss %.4f, "
         "sgemm ceiling %.0f GFLOP/s\n",
         (long long)r.steps_done, r.seconds, r.tokens_per_s, (long long)r.num_params, r.first_loss, r.last_loss,
         r.last_val_loss, r.sgemm_gflops);
  char b1[32], b2[32];
  printf("activations: blocks %s (n none, s selective, f full); peak %s measured, %s predicted\n", r.recompute_plan,
         zt_cli_bytes((double)r.act_peak, b1), zt_cli_bytes((double)r.act_peak_predicted, b2));
  if (r.offload_peak_bytes) printf("activation offload: peak %s in the tier\n", zt_cli_bytes((double)r.offload_peak_bytes, b1));
  char mem[8192];
  zt_mem_report(mem, sizeof mem);
  printf("memory by tag (bytes):\n%s", mem);
  if (sample_len > 0 && zt_gpt2_get_config(m)->vocab_size == 256) {
    const int32_t prompt[] = {'\n'};
    int32_t *ids = NULL;
    int64_t n = 0;
    if (zt_gpt2_sample(m, prompt, 1, sample_len, 0.8, 0, c.seed, &ids, &n)) {
      zt_gpt2_free(m);
      return zt_cli_fail("train");
    }
    printf("sample (temperature 0.8):\n");
    for (int64_t i = 1; i < n; i++) putchar((ids[i] >= 32 && ids[i] < 127) || ids[i] == '\n' ? ids[i] : '?');
    printf("\n");
    free(ids);
  }
  zt_gpt2_free(m);
  return 0;
}
