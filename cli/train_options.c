/* Every option of zt train, defined once: flag name (also its config-file key), value
 * name, the zt_train_config field it sets (library options go through the library's typed,
 * range-checked zt_train_config_set) or a field of the command's own options, the default
 * shown, and help. --help, flag and config-file parsing, and the mapping of the library's
 * field names in error messages back to flags all come from this table. */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* How the default is shown: read from the defaulted config (or command options) by type,
 * unless the row gives a text. */
typedef enum train_opt_type {
  TRAIN_OPT_TEXT, /* shown from `dflt` only */
  TRAIN_OPT_I64,
  TRAIN_OPT_INT,
  TRAIN_OPT_U64,
  TRAIN_OPT_F64,
} train_opt_type;

typedef struct train_option {
  const char *section; /* starts a section of --help when not NULL */
  const char *name;    /* the flag without dashes, and the config-file key */
  const char *metavar;
  const char *field;   /* zt_train_config member ("data.batch"); NULL: the command's own option */
  size_t offset;       /* of the value in zt_train_config, or in zt_cli_train_opts when field is NULL */
  train_opt_type type;
  int64_t lo, hi;      /* the command's own integer options */
  const char *dflt;    /* the default as text (NULL: from the value at offset; "": none shown) */
  const char *help;    /* lines after the first are indented under it */
} train_option;

#define CFG(f) #f, offsetof(zt_train_config, f)
#define OWN(f) NULL, offsetof(zt_cli_train_opts, f)

static const train_option k_options[] = {
    {"usage: zt train [--config FILE] [options]\n"
     "Every option can also be given in a config file as 'name = value' lines (# comments);\n"
     "flags given on the command line override the file.",
     "config", "FILE", NULL, 0, TRAIN_OPT_TEXT, 0, 0, "", "read options from FILE ('name = value' lines)"},
    {"model:", "model", "NAME", CFG(model.preset), TRAIN_OPT_TEXT, 0, 0, "gpt2-tiny",
     "preset: gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m"},
    {NULL, "layers", "N", CFG(model.n_layer), TRAIN_OPT_TEXT, 0, 0, "the preset's", "transformer blocks"},
    {NULL, "heads", "N", CFG(model.n_head), TRAIN_OPT_TEXT, 0, 0, "the preset's", "attention heads"},
    {NULL, "dim", "N", CFG(model.n_embd), TRAIN_OPT_TEXT, 0, 0, "the preset's", "embedding width"},
    {NULL, "vocab", "N", CFG(model.vocab_size), TRAIN_OPT_TEXT, 0, 0, "--data's, else the preset's",
     "vocabulary size"},
    {NULL, "ctx", "N", CFG(model.block_size), TRAIN_OPT_TEXT, 0, 0, "the preset's", "context length"},
    {NULL, "dropout", "P", CFG(model.dropout), TRAIN_OPT_TEXT, 0, 0, "the preset's", "dropout probability"},
    {NULL, "init-from", "FILE|DIR", CFG(model.init_from), TRAIN_OPT_TEXT, 0, 0, "",
     "start from the weights of a transformers GPT-2 (model.safetensors, or\n"
     "its folder: the model takes the shape of its config.json) or of a\n"
     "zerotrain checkpoint (a --save folder or one step-N in it, sharded too)"},
    {"data:", "data", "FILE", CFG(data.path), TRAIN_OPT_TEXT, 0, 0, "the built-in dataset",
     "token file (zt tokenize)"},
    {NULL, "val-data", "FILE", CFG(data.val_path), TRAIN_OPT_TEXT, 0, 0, "last 10% of --data",
     "validation token file"},
    {NULL, "encoder", "FILE", CFG(data.encoder), TRAIN_OPT_TEXT, 0, 0, "",
     "with --merges: the GPT-2 tokenizer the data was made with (encoder.json;\n"
     "zt tokenize's): the end-of-run sample is text, and every checkpoint\n"
     "carries it as vocab.json + merges.txt (zt sample and transformers read them)"},
    {NULL, "merges", "FILE", CFG(data.merges), TRAIN_OPT_TEXT, 0, 0, "", "the tokenizer's merges (vocab.bpe)"},
    {NULL, "batch", "B", CFG(data.batch), TRAIN_OPT_I64, 0, 0, NULL, "sequences per step"},
    {NULL, "seq", "T", CFG(data.seq), TRAIN_OPT_I64, 0, 0, NULL, "tokens per sequence"},
    {NULL, "microbatches", "M", CFG(data.microbatches), TRAIN_OPT_I64, 0, 0, NULL,
     "run each step's batch as M microbatches (gradient accumulation:\n"
     "one update per step, about 1/M of the activation memory)"},
    {"memory:", "recompute", "MODE", CFG(memory.recompute), TRAIN_OPT_TEXT, 0, 0, "none",
     "recompute the blocks' activations in backward instead of keeping them\n"
     "(bitwise the same results, less activation memory):\n"
     "none | full | selective (keep QKV and MLP up-projection outputs,\n"
     "recompute the rest; also selective:gemm, selective:attention) |\n"
     "budget=SIZE (per-block plan that fits SIZE bytes of activations, e.g. 300M) |\n"
     "plan=LETTERS (a mode per block: n none, s selective, f full; e.g. nnff)"},
    {NULL, "checkpoint-every", "K", CFG(memory.checkpoint_every), TRAIN_OPT_INT, 0, 0, NULL,
     "blocks per recomputed region"},
    {NULL, "offload-activations", "TIER", CFG(memory.offload_activations), TRAIN_OPT_TEXT, 0, 0, "none",
     "none | bf16 (compressed in memory, lossy) | disk (a spill file,\n"
     "lossless) | host: saved activations of the blocks go there in forward and\n"
     "come back, prefetched, in backward"},
    {NULL, "offload-dir", "DIR", CFG(memory.offload_dir), TRAIN_OPT_TEXT, 0, 0, "$TMPDIR or /tmp",
     "where the disk tiers' spill files go"},
    {NULL, "offload-model", "TIER", CFG(memory.offload_model), TRAIN_OPT_TEXT, 0, 0, "none",
     "none | disk | bf16 | host: OffloadModel: the model cut into slices whose\n"
     "parameters and grads live in TIER, a few slices in RAM at a time; each\n"
     "step runs --microbatches chunks through a slice, then the next; backward\n"
     "recomputes slice by slice (bitwise plain training with disk and host)"},
    {NULL, "offload-states", "TIER", CFG(memory.offload_states), TRAIN_OPT_TEXT, 0, 0, "none",
     "none | disk | bf16 | host: every model state in TIER (ZeRO-Infinity in one\n"
     "process): OffloadModel over TIER with AdamW's moments there too, the model\n"
     "built straight into it and checkpoints streamed from and into it, so the\n"
     "whole model is never in RAM (--offload-model's options apply); with\n"
     "--shard full|hybrid:G|grad_op, FSDP instead: each rank's shards, gradient\n"
     "shards and AdamW state in its own TIER, a unit in RAM when it runs"},
    {NULL, "mem-limit", "SIZE", CFG(memory.mem_limit), TRAIN_OPT_TEXT, 0, 0,
     "with --offload-states, the memory available",
     "with --offload-states: choose slices, resident slices and the mode so\n"
     "that the predicted peak RAM fits SIZE (e.g. 4G); prints the plan, refuses\n"
     "a SIZE nothing fits, naming the smallest that does. Without it (and\n"
     "without --offload-slices/--offload-resident) the plan fits the memory\n"
     "available: the memory cgroup's limit, else MemAvailable (printed)"},
    {NULL, "activation-trial", "MODE", CFG(memory.activation_trial), TRAIN_OPT_TEXT, 0, 0, "auto",
     "keep-graph OffloadModel with activation offload: step 3 offloads every\n"
     "slice's activations, step 4 recomputes every slice's blocks, and from\n"
     "step 5 each slice keeps the faster way, as measured (printed);\n"
     "auto (when --mem-limit chose activation offload) | on | off"},
    {NULL, "offload-slices", "N", CFG(memory.offload_slices), TRAIN_OPT_INT, 0, 0,
     "2; with --offload-states the planner's",
     "OffloadModel: slices, balanced by parameter bytes (at most layers + 2)"},
    {NULL, "offload-resident", "K", CFG(memory.offload_resident), TRAIN_OPT_INT, 0, 0,
     "2; with --offload-states the planner's",
     "OffloadModel: slices in RAM at once (the one computing, the next prefetched)"},
    {NULL, "offload-mode", "MODE", CFG(memory.offload_mode), TRAIN_OPT_TEXT, 0, 0, "recompute",
     "OffloadModel: recompute (forward without a graph, each slice recomputed\n"
     "in backward) | keep-graph (the graph kept, slices reloaded in backward)"},
    {"data parallel (run under mpirun -np N; --batch is the global batch, B/N rows per rank):", "shard", "MODE",
     CFG(parallel.shard), TRAIN_OPT_TEXT, 0, 0, "none",
     "none: DDP (replicated, bucketed gradient all-reduce) |\n"
     "full: FSDP ZeRO-3 (parameters, grads, optimizer state sharded) |\n"
     "grad_op: ZeRO-2 (full parameters kept through backward) |\n"
     "opt: ZeRO-1 (optimizer state sharded) | hybrid:G (full shard in groups\n"
     "of G ranks, replicated across groups); one transformer block per unit"},
    {NULL, "prefetch", "on|off", CFG(parallel.prefetch), TRAIN_OPT_TEXT, 0, 0, "on",
     "FSDP: gather the next unit while this one computes"},
    {NULL, "save-format", "F", CFG(checkpoint.save_full), TRAIN_OPT_TEXT, 0, 0, "sharded",
     "FSDP checkpoints: sharded (a file per rank + index.json; loads at any\n"
     "rank count; zt consolidate makes a single one) or full"},
    {NULL, "mixed-precision", "P", CFG(parallel.mixed_precision), TRAIN_OPT_TEXT, 0, 0, "none",
     "FSDP (needs --shard other than none; one rank works): none | bf16 | fp16:\n"
     "gather parameters and reduce gradients in P, f32 master shards (fp16 adds\n"
     "dynamic loss scaling); the CPU kernels compute in f32 on the rounded values"},
    {"pipeline parallel (mpirun -np P x D: D replicas of a P-rank pipeline; --shard none: DDP across\nthem, full|grad_op|opt: ZeRO per step):", "pp", "P",
     CFG(parallel.pp), TRAIN_OPT_INT, 0, 0, NULL,
     "pipeline ranks: the model cut into stages over P consecutive ranks"},
    {NULL, "schedule", "NAME|FILE", CFG(parallel.schedule), TRAIN_OPT_TEXT, 0, 0, "1f1b",
     "gpipe | 1f1b | interleaved | zb-h1 | zb-h2 | zb-v | v-half | v-min |\n"
     "dualpipev | auto (the greedy planner, again after step 1 on its measured costs)\n"
     "| a schedule file (zt schedule --out); runs --microbatches M per step"},
    {NULL, "chunks", "V", CFG(parallel.chunks), TRAIN_OPT_TEXT, 0, 0, "the schedule's",
     "stages per rank (interleaved: V >= 2; the V-shaped ones: 2)"},
    {NULL, "pp-balance", "B", CFG(parallel.pp_balance), TRAIN_OPT_TEXT, 0, 0, "even",
     "blocks per stage: even | auto (balanced by modelled cost, the\n"
     "lm head counted) | a list, one count per stage (1,3,3,1)"},
    {"optimisation:", "steps", "N", CFG(steps), TRAIN_OPT_I64, 0, 0, NULL, "training steps"},
    {NULL, "lr", "LR", CFG(optim.lr), TRAIN_OPT_F64, 0, 0, NULL, "peak learning rate"},
    {NULL, "min-lr", "LR", CFG(optim.min_lr), TRAIN_OPT_TEXT, 0, 0, "lr/10",
     "final learning rate of the cosine schedule"},
    {NULL, "warmup", "N", CFG(optim.warmup), TRAIN_OPT_TEXT, 0, 0, "min(100, steps/10)", "warm-up steps"},
    {NULL, "optimizer", "NAME", CFG(optim.kind), TRAIN_OPT_TEXT, 0, 0, "adamw", "adamw or sgd"},
    {NULL, "weight-decay", "W", CFG(optim.weight_decay), TRAIN_OPT_F64, 0, 0, NULL,
     "decoupled weight decay on matrices and embeddings"},
    {NULL, "beta1", "B", CFG(optim.beta1), TRAIN_OPT_F64, 0, 0, NULL, "AdamW first-moment decay"},
    {NULL, "beta2", "B", CFG(optim.beta2), TRAIN_OPT_F64, 0, 0, NULL, "AdamW second-moment decay"},
    {NULL, "momentum", "M", CFG(optim.momentum), TRAIN_OPT_F64, 0, 0, NULL, "SGD momentum"},
    {NULL, "grad-clip", "C", CFG(optim.grad_clip), TRAIN_OPT_F64, 0, 0, NULL,
     "clip the global grad norm to C, 0 = off"},
    {"run:", "seed", "S", CFG(seed), TRAIN_OPT_U64, 0, 0, NULL, "random seed"},
    {NULL, "threads", "N", CFG(threads), TRAIN_OPT_INT, 0, 0, NULL, "kernel threads, 0 = all cores"},
    {NULL, "log-every", "N", OWN(log_every), TRAIN_OPT_I64, 1, 1ll << 40, NULL,
     "progress line every N steps; a step that takes longer than\n"
     "ZT_STEP_PROGRESS_S seconds (default 3) also shows its parts as it goes"},
    {NULL, "eval-every", "N", CFG(log.eval_every), TRAIN_OPT_I64, 0, 0, NULL,
     "validation loss every N steps, 0 = at the end only"},
    {NULL, "eval-batches", "N", CFG(log.eval_batches), TRAIN_OPT_I64, 0, 0, NULL, "batches per validation"},
    {NULL, "metrics", "FILE", CFG(log.metrics), TRAIN_OPT_TEXT, 0, 0, "",
     "one JSON object per step (step, loss, lr, tokens_per_s, mem, val_loss)"},
    {NULL, "tensorboard", "DIR", CFG(log.tensorboard), TRAIN_OPT_TEXT, 0, 0, "",
     "TensorBoard event files (the same figures; tensorboard --logdir DIR)"},
    {NULL, "timeline", "FILE", CFG(log.timeline), TRAIN_OPT_TEXT, 0, 0, "",
     "pipeline runs: SVG of the last step's measured timeline per rank\n"
     "beside the simulator's prediction from the measured costs"},
    {NULL, "save", "DIR", CFG(checkpoint.save), TRAIN_OPT_TEXT, 0, 0, "",
     "checkpoints: DIR/step-N per save, DIR/latest links the newest; each save is\n"
     "atomic (a crash leaves the previous one current)"},
    {NULL, "save-every", "N", CFG(checkpoint.save_every), TRAIN_OPT_I64, 0, 0, NULL,
     "checkpoint every N steps, 0 = at the end only"},
    {NULL, "keep-checkpoints", "K", CFG(checkpoint.keep_checkpoints), TRAIN_OPT_INT, 0, 0, NULL,
     "versions kept in DIR, older ones are removed"},
    {NULL, "resume", "DIR", CFG(checkpoint.resume), TRAIN_OPT_TEXT, 0, 0, "",
     "continue from a checkpoint (bitwise the same as not stopping); options that\n"
     "change the run's course (seed, batch, lr...) must be the checkpoint's"},
    {NULL, "allow-config-change", "on", CFG(checkpoint.allow_config_change), TRAIN_OPT_TEXT, 0, 0, "",
     "resume although such options differ (the changes are printed)"},
    {NULL, "comm-timeout", "S", CFG(parallel.comm_timeout), TRAIN_OPT_F64, 0, 0, NULL,
     "seconds a rank waits for the others in a collective before the job ends\n"
     "with an error naming the missing ranks, 0 = forever"},
    {NULL, "stop-at", "N", CFG(stop_at), TRAIN_OPT_TEXT, 0, 0, "",
     "stop (and checkpoint) after step N; the schedule still spans --steps"},
    {NULL, "inject-nan-at", "N", CFG(inject_nan_at), TRAIN_OPT_TEXT, 0, 0, "",
     "testing aid: pretend the loss is NaN at step N"},
    {NULL, "sample-len", "N", OWN(sample_len), TRAIN_OPT_I64, 0, 1 << 20, NULL,
     "characters of sample text at the end, 0 = none"},
};
#define N_OPTIONS (sizeof k_options / sizeof k_options[0])

/* Library wordings that a flag alone does not render; matched before the plain fields. */
static const struct {
  const char *api, *cli;
} k_phrases[] = {
    {"checkpoint.allow_config_change = true", "--allow-config-change on"},
    {"memory.recompute_budget=", "--recompute budget="},
    {"model)", "--model/--layers/... flags)"},
};

zt_cli_train_opts zt_cli_train_opts_default(void) { return (zt_cli_train_opts){.log_every = 10, .sample_len = 300}; }

static const train_option *find(const char *name) {
  for (size_t i = 0; i < N_OPTIONS; i++)
    if (!strcmp(k_options[i].name, name)) return &k_options[i];
  return NULL;
}

zt_status zt_cli_train_set(zt_train_config *c, zt_cli_train_opts *own, const char *name, const char *value) {
  const train_option *o = find(name);
  if (!o || !strcmp(name, "config")) {
    const char *names[N_OPTIONS + 1];
    for (size_t i = 0; i < N_OPTIONS; i++) names[i] = k_options[i].name;
    names[N_OPTIONS] = NULL;
    const char *near = zt_cli_closest(name, names);
    if (near) return zt_set_error(ZT_STATUS_INVALID_ARG, "unknown option '%s'; did you mean --%s? (see zt train --help)", name, near);
    return zt_set_error(ZT_STATUS_INVALID_ARG, "unknown option '%s' (see zt train --help)", name);
  }
  if (o->field) return zt_train_config_set(c, name, value);
  return zt_config_parse_i64(name, value, o->lo, o->hi, (int64_t *)((char *)own + o->offset));
}

static const char *shown_default(const train_option *o, const zt_train_config *d, const zt_cli_train_opts *own,
                                 char buf[64]) {
  if (o->dflt) return o->dflt;
  const char *p = o->field ? (const char *)d + o->offset : (const char *)own + o->offset;
  switch (o->type) {
  case TRAIN_OPT_I64: snprintf(buf, 64, "%lld", (long long)*(const int64_t *)p); break;
  case TRAIN_OPT_INT: snprintf(buf, 64, "%d", *(const int *)p); break;
  case TRAIN_OPT_U64: snprintf(buf, 64, "%llu", (unsigned long long)*(const uint64_t *)p); break;
  case TRAIN_OPT_F64: snprintf(buf, 64, "%g", *(const double *)p); break;
  case TRAIN_OPT_TEXT: buf[0] = '\0'; break;
  }
  return buf;
}

void zt_cli_train_usage(FILE *f) {
  zt_train_config d;
  zt_train_config_default(&d);
  zt_cli_train_opts own = zt_cli_train_opts_default();
  for (size_t i = 0; i < N_OPTIONS; i++) {
    const train_option *o = &k_options[i];
    if (o->section) fprintf(f, "%s\n", o->section);
    char head[64], dbuf[64];
    int w = snprintf(head, sizeof head, "  --%s %s", o->name, o->metavar);
    fprintf(f, "%s%*s", head, w < 22 ? 22 - w : 2, "");
    for (const char *h = o->help; *h;) { /* continuation lines under the first */
      const char *nl = strchr(h, '\n');
      int len = nl ? (int)(nl - h) : (int)strlen(h);
      fprintf(f, "%.*s", len, h);
      if (!nl) break;
      fprintf(f, "\n%22s", "");
      h = nl + 1;
    }
    const char *dv = shown_default(o, &d, &own, dbuf);
    fprintf(f, dv[0] ? " (default %s)\n" : "\n", dv);
  }
}

static bool ident(char ch) { return isalnum((unsigned char)ch) || ch == '_' || ch == '.'; }

/* Does api (a field or phrase) start at s, as a whole name? */
static bool names_at(const char *s, const char *api) {
  size_t n = strlen(api);
  return !strncmp(s, api, n) && (!ident(api[n - 1]) || !ident(s[n]));
}

void zt_cli_train_message(const char *msg, char *out, size_t cap) {
  static const char prefix[] = "zt_train_config.";
  size_t n = 0, lp = sizeof prefix - 1;
  char flag[72];
  for (const char *s = msg; *s && n + 1 < cap;) {
    const char *with = NULL;
    size_t used = 0;
    if (!strncmp(s, prefix, lp)) {
      for (size_t i = 0; !with && i < sizeof k_phrases / sizeof k_phrases[0]; i++)
        if (names_at(s + lp, k_phrases[i].api)) with = k_phrases[i].cli, used = strlen(k_phrases[i].api);
      for (size_t i = 0; !with && i < N_OPTIONS; i++)
        if (k_options[i].field && names_at(s + lp, k_options[i].field)) {
          snprintf(flag, sizeof flag, "--%s", k_options[i].name);
          with = flag, used = strlen(k_options[i].field);
        }
    }
    if (!with) {
      out[n++] = *s++;
      continue;
    }
    int w = snprintf(out + n, cap - n, "%s", with);
    n = w < 0 || (size_t)w >= cap - n ? cap - 1 : n + (size_t)w;
    s += lp + used;
  }
  out[n < cap ? n : cap - 1] = '\0';
}
