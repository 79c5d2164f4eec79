/* The option table: every option of a training run is one row here (name, zt_train_config
 * field, type and range, role in a run, help), and nothing else names an option. The rows' order
 * is zt train's --help order; derived rows (values of the run, not options) are not shown. The
 * rows of SPECIAL type carry their parser and formatter below. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/options.h"

/* Bounds that keep every size computed from the options far from int64 overflow. */
#define ZT_MAX_ROWS (1ll << 20)  /* batch, seq, eval batches */
#define ZT_MAX_STEPS (1ll << 40) /* step counts */

/* ------------------------------------------------------------------ SPECIAL rows */

static zt_status parse_model(const zt_option *o, void *base, const char *v) {
  zt_train_config *c = base;
  zt_lm_config g;
  ZT_TRY(zt__option_parse_text(o->name, v, c->model.preset, sizeof c->model.preset));
  c->model.preset_set = true;
  return zt_lm_preset(c->model.preset, &g);
}
static void format_model(const zt_option *o, const void *base, char *buf, size_t cap) {
  (void)o;
  snprintf(buf, cap, "%s", ((const zt_train_config *)base)->model.preset);
}

static const struct {
  const char *name;
  zt_recompute mode;
  zt_checkpoint_policy_fn policy;
} k_recompute[] = {{"none", ZT_RECOMPUTE_NONE, NULL},
                   {"full", ZT_RECOMPUTE_FULL, NULL},
                   {"selective", ZT_RECOMPUTE_SELECTIVE, NULL},
                   {"selective:wide", ZT_RECOMPUTE_SELECTIVE, zt_checkpoint_policy_save_wide_gemm},
                   {"selective:gemm", ZT_RECOMPUTE_SELECTIVE, zt_checkpoint_policy_save_gemm},
                   {"selective:attention", ZT_RECOMPUTE_SELECTIVE, zt_checkpoint_policy_recompute_attention}};
#define N_RECOMPUTE (sizeof k_recompute / sizeof k_recompute[0])

static zt_status parse_recompute(const zt_option *o, void *base, const char *v) {
  (void)o;
  zt_train_memory_options *m = &((zt_train_config *)base)->memory;
  for (size_t i = 0; v && i < N_RECOMPUTE; i++)
    if (!strcmp(v, k_recompute[i].name)) {
      m->recompute = k_recompute[i].mode;
      m->selective_policy = k_recompute[i].policy;
      m->recompute_budget = 0;
      m->recompute_plan[0] = '\0';
      return ZT_OK;
    }
  if (v && !strncmp(v, "budget=", 7)) {
    ZT_TRY(zt__option_parse_bytes("recompute budget", v + 7, &m->recompute_budget));
    m->recompute = ZT_RECOMPUTE_NONE;
    m->recompute_plan[0] = '\0';
    return ZT_OK;
  }
  if (v && !strncmp(v, "plan=", 5)) {
    size_t n = strlen(v + 5);
    if (n < 1 || n > ZT_TRAIN_MAX_LAYERS || strspn(v + 5, "nsf") != n)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "option 'recompute' plan=LETTERS takes a letter per block, n (none), s (selective) or f (full), "
                    "at most %d of them (got '%s')",
                    ZT_TRAIN_MAX_LAYERS, v + 5);
    memcpy(m->recompute_plan, v + 5, n + 1);
    m->recompute = ZT_RECOMPUTE_NONE;
    m->recompute_budget = 0;
    return ZT_OK;
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "option 'recompute' is none, full, selective[:wide|:gemm|:attention], budget=SIZE or plan=LETTERS (got "
                "'%s')",
                v ? v : "");
}
/* The plan, the budget, else the mode (with its policy): what parse_recompute reads back. */
static void format_recompute(const zt_option *o, const void *base, char *buf, size_t cap) {
  (void)o;
  const zt_train_memory_options *m = &((const zt_train_config *)base)->memory;
  if (m->recompute_plan[0]) {
    snprintf(buf, cap, "plan=%s", m->recompute_plan);
    return;
  }
  if (m->recompute_budget > 0) {
    snprintf(buf, cap, "budget=%lld", (long long)m->recompute_budget);
    return;
  }
  for (size_t i = 0; i < N_RECOMPUTE; i++)
    if (k_recompute[i].mode == m->recompute && k_recompute[i].policy == m->selective_policy) {
      snprintf(buf, cap, "%s", k_recompute[i].name);
      return;
    }
  snprintf(buf, cap, "%s", zt_recompute_name(m->recompute));
}

static const zt_option_choice k_tiers[] = {{"none", ZT_OFFLOAD_NONE, false},
                                           {"bf16", ZT_OFFLOAD_BF16, false},
                                           {"disk", ZT_OFFLOAD_DISK, false},
                                           {"host", ZT_OFFLOAD_HOST, false},
                                           {NULL, 0, false}};

/* The model offload's tier, every state in it (offload_states and offload_model). */
static zt_status parse_offload_states(const zt_option *o, void *base, const char *v) {
  (void)o;
  zt_train_memory_options *m = &((zt_train_config *)base)->memory;
  for (const zt_option_choice *t = k_tiers; v && t->name; t++)
    if (!strcmp(v, t->name)) {
      m->offload_states = t->value != ZT_OFFLOAD_NONE;
      m->offload_model = (zt_offload_tier)t->value;
      return ZT_OK;
    }
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "option 'offload-states' is none, disk, bf16 or host (got '%s')", v ? v : "");
}
static void format_offload_states(const zt_option *o, const void *base, char *buf, size_t cap) {
  (void)o;
  const zt_train_memory_options *m = &((const zt_train_config *)base)->memory;
  snprintf(buf, cap, "%s", m->offload_states ? zt_offload_tier_name(m->offload_model) : "none");
}

/* A shard strategy, hybrid's group with it (the group is the derived row hybrid-group). */
static zt_status parse_shard(const zt_option *o, void *base, const char *v) {
  (void)o;
  zt_train_parallel_options *p = &((zt_train_config *)base)->parallel;
  zt_status s = zt_shard_strategy_parse(v ? v : "", &p->shard, &p->hybrid_group);
  return s ? zt__error_prefix(s, "option 'shard'") : ZT_OK;
}
/* The strategy's name ("hybrid" without its group: what checkpoints have always recorded). */
static void format_shard(const zt_option *o, const void *base, char *buf, size_t cap) {
  (void)o;
  snprintf(buf, cap, "%s", zt_shard_strategy_name(((const zt_train_config *)base)->parallel.shard));
}

/* ------------------------------------------------------------------ the table */

static const zt_option_choice k_optimizers[] = {{"adamw", ZT_OPTIM_ADAMW, false}, {"sgd", ZT_OPTIM_SGD, false}, {NULL, 0, false}};
static const zt_option_choice k_act_trial[] = {{"auto", ZT_ACT_TRIAL_AUTO, false},
                                               {"on", ZT_ACT_TRIAL_ON, false},
                                               {"off", ZT_ACT_TRIAL_OFF, false},
                                               {NULL, 0, false}};
static const zt_option_choice k_offload_modes[] = {
    {"recompute", ZT_OFFLOAD_MODEL_RECOMPUTE, false}, {"keep-graph", ZT_OFFLOAD_MODEL_KEEP_GRAPH, false}, {NULL, 0, false}};
static const zt_option_choice k_save_formats[] = {{"sharded", false, false}, {"full", true, false}, {NULL, 0, false}};
/* f16 first: the dtype's own name is the one recorded; fp16 is the one offered */
static const zt_option_choice k_precisions[] = {{"bf16", ZT_DTYPE_BF16, false},
                                                {"f16", ZT_DTYPE_F16, true},
                                                {"fp16", ZT_DTYPE_F16, false},
                                                {"none", ZT_DTYPE_F32, false},
                                                {NULL, 0, false}};

#define FIELD(f) .field = #f, .offset = offsetof(zt_train_config, f), .size = sizeof(((zt_train_config *)0)->f)
/* a derived row over the run's values (zt__option_ctx) */
#define RUN_VALUE(f) .offset = offsetof(zt__option_ctx, f), .size = sizeof(((zt__option_ctx *)0)->f), .derived = true
#define INT(a, b) .type = ZT_OPTION_TYPE_INT, .lo = (a), .hi = (b)
#define I64(a, b) .type = ZT_OPTION_TYPE_I64, .lo = (a), .hi = (b)
#define U64(a, b) .type = ZT_OPTION_TYPE_U64, .lo = (a), .hi = (b)
#define F64(a, b) .type = ZT_OPTION_TYPE_F64, .min = (a), .max = (b)
#define ENUM(c) .type = ZT_OPTION_TYPE_ENUM, .choices = (c)
#define SPECIAL(p, f) .type = ZT_OPTION_TYPE_SPECIAL, .parse = (p), .format = (f)
#define TEXT .type = ZT_OPTION_TYPE_TEXT
#define BOOL .type = ZT_OPTION_TYPE_BOOL
#define SIZE .type = ZT_OPTION_TYPE_SIZE
#define COURSE .role = ZT_OPTION_ROLE_COURSE
#define INFO .role = ZT_OPTION_ROLE_INFO
#define RECORDED .role = ZT_OPTION_ROLE_RECORDED
#define AGREE .role = ZT_OPTION_ROLE_AGREE
#define LOCAL .role = ZT_OPTION_ROLE_LOCAL

static const zt_option k_rows[] = {
    {.section = "model:", .name = "model", .metavar = "NAME", FIELD(model.preset), SPECIAL(parse_model, format_model),
     LOCAL, .help = "preset: " ZT_GPT2_PRESET_NAMES ",\n" ZT_LLAMA_PRESET_NAMES},
    /* the model's shape: the ranks compare the shape the run resolved (zt__option_ctx) */
    {.name = "layers", .metavar = "N", FIELD(model.n_layer), INT(1, 4096), AGREE, .unset = "auto",
     .shown = "the preset's", .help = "transformer blocks"},
    {.name = "heads", .metavar = "N", FIELD(model.n_head), INT(1, 4096), AGREE, .unset = "auto",
     .shown = "the preset's", .help = "attention heads"},
    {.name = "dim", .metavar = "N", FIELD(model.n_embd), INT(1, 1 << 20), AGREE, .unset = "auto",
     .shown = "the preset's", .help = "embedding width"},
    {.name = "vocab", .metavar = "N", FIELD(model.vocab_size), INT(1, 1 << 28), AGREE, .unset = "auto",
     .shown = "--data's, else the preset's", .help = "vocabulary size"},
    {.name = "ctx", .metavar = "N", FIELD(model.block_size), INT(1, 1 << 24), AGREE, .unset = "auto",
     .shown = "the preset's", .help = "context length"},
    {.name = "dropout", .metavar = "P", FIELD(model.dropout), F64(0, 0.999), COURSE, .unset = "auto",
     .shown = "the preset's", .help = "dropout probability"},
    {.name = "init-from", .metavar = "FILE|DIR", FIELD(model.init_from), TEXT, AGREE,
     .help = "start from the weights of a transformers GPT-2 (model.safetensors, or\n"
             "its folder: the model takes the shape of its config.json) or of a\n"
             "zerotrain checkpoint (a --save folder or one step-N in it, sharded too)"},
    {.section = "data:", .name = "data", .metavar = "FILE", FIELD(data.path), TEXT, COURSE, .unset = "(built-in)",
     .shown = "the built-in dataset", .help = "token file (zt tokenize)"},
    {.name = "val-data", .metavar = "FILE", FIELD(data.val_path), TEXT, INFO, .unset = "(split)",
     .shown = "last 10% of --data", .help = "validation token file"},
    {.name = "encoder", .metavar = "FILE", FIELD(data.encoder), TEXT, AGREE,
     .help = "with --merges: the GPT-2 tokenizer the data was made with (encoder.json;\n"
             "zt tokenize's): the end-of-run sample is text, and every checkpoint\n"
             "carries it as vocab.json + merges.txt (zt sample and transformers read them)"},
    {.name = "merges", .metavar = "FILE", FIELD(data.merges), TEXT, AGREE, .help = "the tokenizer's merges (vocab.bpe)"},
    {.name = "tokenizer", .metavar = "DIR", FIELD(data.tokenizer), TEXT, AGREE,
     .help = "or a Hugging Face tokenizer folder (tokenizer.json; zt tokenize --tokenizer's):\n"
             "the sample is text, and every checkpoint carries its files"},
    {.name = "batch", .metavar = "B", FIELD(data.batch), I64(1, ZT_MAX_ROWS), COURSE, .help = "sequences per step"},
    {.name = "seq", .metavar = "T", FIELD(data.seq), I64(1, ZT_MAX_ROWS), COURSE, .help = "tokens per sequence"},
    /* the same rows and mean loss, up to summation-order rounding */
    {.name = "microbatches", .metavar = "M", FIELD(data.microbatches), I64(1, ZT_MAX_ROWS), INFO,
     .help = "run each step's batch as M microbatches (gradient accumulation:\n"
             "one update per step, about 1/M of the activation memory)"},
    {.section = "memory:", .name = "recompute", .metavar = "MODE", FIELD(memory.recompute),
     SPECIAL(parse_recompute, format_recompute), AGREE,
     .help = "recompute the blocks' activations in backward instead of keeping them\n"
             "(bitwise the same results, less activation memory):\n"
             "none | full | selective (keep QKV and MLP up-projection outputs,\n"
             "recompute the rest; also selective:gemm, selective:attention) |\n"
             "budget=SIZE (per-block plan that fits SIZE bytes of activations, e.g. 300M) |\n"
             "plan=LETTERS (a mode per block: n none, s selective, f full; e.g. nnff)"},
    {.name = "checkpoint-every", .metavar = "K", FIELD(memory.checkpoint_every), INT(1, 4096), AGREE,
     .help = "blocks per recomputed region"},
    {.name = "offload-activations", .metavar = "TIER", FIELD(memory.offload_activations), ENUM(k_tiers), LOCAL,
     .help = "none | bf16 (compressed in memory, lossy) | disk (a spill file,\n"
             "lossless) | host: saved activations of the blocks go there in forward and\n"
             "come back, prefetched, in backward"},
    {.name = "offload-dir", .metavar = "DIR", FIELD(memory.offload_dir), TEXT, LOCAL, .shown = "$TMPDIR or /tmp",
     .help = "where the disk tiers' spill files go"},
    /* bitwise plain training with a lossless tier; its checkpoints are single-process ones */
    {.name = "offload-model", .metavar = "TIER", FIELD(memory.offload_model), ENUM(k_tiers), INFO,
     .help = "none | disk | bf16 | host: OffloadModel: the model cut into slices whose\n"
             "parameters and grads live in TIER, a few slices in RAM at a time; each\n"
             "step runs --microbatches chunks through a slice, then the next; backward\n"
             "recomputes slice by slice (bitwise plain training with disk and host)"},
    {.name = "offload-states", .metavar = "TIER", FIELD(memory.offload_states),
     SPECIAL(parse_offload_states, format_offload_states), LOCAL,
     .help = "none | disk | bf16 | host: every model state in TIER (ZeRO-Infinity in one\n"
             "process): OffloadModel over TIER with AdamW's moments there too, the model\n"
             "built straight into it and checkpoints streamed from and into it, so the\n"
             "whole model is never in RAM (--offload-model's options apply); with\n"
             "--shard full|hybrid:G|grad_op, FSDP instead: each rank's shards, gradient\n"
             "shards and AdamW state in its own TIER, a unit in RAM when it runs"},
    {.name = "mem-limit", .metavar = "SIZE", FIELD(memory.mem_limit), SIZE, LOCAL, .unset = "auto",
     .shown = "with --offload-states, the memory available",
     .help = "with --plan auto: the RAM per rank the plan must fit; with --offload-states:\n"
             "choose slices, resident slices and the mode so\n"
             "that the predicted peak RAM fits SIZE (e.g. 4G); prints the plan, refuses\n"
             "a SIZE nothing fits, naming the smallest that does. Without it (and\n"
             "without --offload-slices/--offload-resident) the plan fits the memory\n"
             "available: the memory cgroup's limit, else MemAvailable (printed)"},
    {.name = "activation-trial", .metavar = "MODE", FIELD(memory.activation_trial), ENUM(k_act_trial), LOCAL,
     .help = "keep-graph OffloadModel with activation offload: step 3 offloads every\n"
             "slice's activations, step 4 recomputes every slice's blocks, and from\n"
             "step 5 each slice keeps the faster way, as measured (printed);\n"
             "auto (when --mem-limit chose activation offload) | on | off"},
    {.name = "offload-slices", .metavar = "N", FIELD(memory.offload_slices), INT(1, 1 << 20), LOCAL, .unset = "auto",
     .shown = "2; with --offload-states the planner's",
     .help = "OffloadModel: slices, balanced by parameter bytes (at most layers + 2)"},
    {.name = "offload-resident", .metavar = "K", FIELD(memory.offload_resident), INT(1, 1 << 20), LOCAL,
     .unset = "auto", .shown = "2; with --offload-states the planner's",
     .help = "OffloadModel: slices in RAM at once (the one computing, the next prefetched)"},
    {.name = "offload-mode", .metavar = "MODE", FIELD(memory.offload_mode), ENUM(k_offload_modes), LOCAL,
     .help = "OffloadModel: recompute (forward without a graph, each slice recomputed\n"
             "in backward) | keep-graph (the graph kept, slices reloaded in backward)"},
    /* the rank count: a sharded checkpoint resumes at any, equal up to reduction-order rounding */
    {.name = "ranks", RUN_VALUE(world), INT(1, 1 << 30), INFO, .help = "the ranks of the run"},
    {.section = "data parallel (run under mpirun -np N; --batch is the global batch, B/N rows per rank):",
     .name = "shard", .metavar = "MODE", FIELD(parallel.shard), SPECIAL(parse_shard, format_shard), INFO,
     .help = "none: DDP (replicated, bucketed gradient all-reduce) |\n"
             "full: FSDP ZeRO-3 (parameters, grads, optimizer state sharded) |\n"
             "grad_op: ZeRO-2 (full parameters kept through backward) |\n"
             "opt: ZeRO-1 (optimizer state sharded) | hybrid:G (full shard in groups\n"
             "of G ranks, replicated across groups); one transformer block per unit"},
    {.name = "hybrid-group", FIELD(parallel.hybrid_group), INT(0, 1 << 20), AGREE, .derived = true,
     .help = "hybrid:G's G (set by shard)"},
    {.name = "prefetch", .metavar = "on|off", FIELD(parallel.prefetch), BOOL, AGREE,
     .help = "FSDP: gather the next unit while this one computes"},
    {.name = "save-format", .metavar = "F", FIELD(checkpoint.save_full), ENUM(k_save_formats), AGREE,
     .help = "FSDP checkpoints: sharded (a file per rank + index.json; loads at any\n"
             "rank count; zt consolidate makes a single one) or full"},
    {.name = "mixed-precision", .metavar = "P", FIELD(parallel.mixed_precision), ENUM(k_precisions), COURSE,
     .help = "FSDP (needs --shard other than none; one rank works): none | bf16 | fp16:\n"
             "gather parameters and reduce gradients in P, f32 master shards (fp16 adds\n"
             "dynamic loss scaling); the CPU kernels compute in f32 on the rounded values"},
    /* the pipeline's layout: its checkpoints are single-process ones */
    {.section = "pipeline parallel (mpirun -np P x D: D replicas of a P-rank pipeline; --shard none: DDP across\n"
                "them, full|grad_op|opt: ZeRO per step):",
     .name = "pp", .metavar = "P", FIELD(parallel.pp), INT(1, 4096), INFO,
     .help = "pipeline ranks: the model cut into stages over P consecutive ranks"},
    {.name = "schedule", .metavar = "NAME|FILE", FIELD(parallel.schedule), TEXT, INFO,
     .help = "gpipe | 1f1b | interleaved | zb-h1 | zb-h2 | zb-v | v-half | v-min |\n"
             "dualpipev | auto (the greedy planner, again after step 1 on its measured costs)\n"
             "| a schedule file (zt schedule --out); runs --microbatches M per step"},
    {.name = "chunks", .metavar = "V", FIELD(parallel.chunks), INT(0, 64), INFO, .shown = "the schedule's",
     .help = "stages per rank (interleaved: V >= 2; the V-shaped ones: 2)"},
    {.name = "pp-balance", .metavar = "B", FIELD(parallel.pp_balance), TEXT, INFO,
     .help = "blocks per stage: even | auto (balanced by modelled cost, the\n"
             "lm head counted) | a list, one count per stage (1,3,3,1)"},
    {.section = "planning (zt plan shows the space and its predictions):", .name = "plan", .metavar = "auto|FILE",
     FIELD(plan), TEXT, LOCAL, .shown = "",
     .help = "auto: train with the fastest configuration predicted to fit --mem-limit\n"
             "per rank (else the memory available): pipeline, sharding, microbatches,\n"
             "recompute, offload; FILE[:N]: a plan zt plan --out wrote (its choice, or\n"
             "entry N). Without it the options given are predicted, and printed"},
    {.name = "plan-calibration", .metavar = "FILE", FIELD(plan_calibration), TEXT, LOCAL, .shown = "measured at start",
     .help = "the planner's calibration (zt plan --save-calibration FILE) instead of measuring"},
    /* extending a run is what resuming is for: the cosine schedule then stretches from the
     * checkpoint on, and a warm-up that follows the step count shows as a course change of its own */
    {.section = "optimisation:", .name = "steps", .metavar = "N", FIELD(steps), I64(1, ZT_MAX_STEPS), INFO,
     .help = "training steps"},
    {.name = "lr", .metavar = "LR", FIELD(optim.lr), F64(0, 10), COURSE, .help = "peak learning rate"},
    {.name = "min-lr", .metavar = "LR", FIELD(optim.min_lr), F64(0, 10), COURSE, .unset = "auto", .shown = "lr/10",
     .help = "final learning rate of the cosine schedule"},
    /* an unset warm-up keeps the one the checkpoint's run resolved (warmup-resolved) */
    {.name = "warmup", .metavar = "N", FIELD(optim.warmup), I64(0, ZT_MAX_STEPS), COURSE, .unset = "auto",
     .unset_keeps = true, .shown = "min(100, steps/10)", .help = "warm-up steps"},
    /* recorded for the next run's use, not compared: an unset warm-up follows the step count, and
     * a resume that extends the run keeps the checkpoint's, so the schedule up to the resume step
     * is the one the run had */
    {.name = "warmup-resolved", RUN_VALUE(warmup), I64(0, ZT_MAX_STEPS), RECORDED,
     .help = "the warm-up the run resolved"},
    {.name = "optimizer", .metavar = "NAME", FIELD(optim.kind), ENUM(k_optimizers), COURSE, .help = "adamw or sgd"},
    {.name = "weight-decay", .metavar = "W", FIELD(optim.weight_decay), F64(0, 10), COURSE,
     .help = "decoupled weight decay on matrices and embeddings"},
    {.name = "beta1", .metavar = "B", FIELD(optim.beta1), F64(0, 0.999999), COURSE, .help = "AdamW first-moment decay"},
    {.name = "beta2", .metavar = "B", FIELD(optim.beta2), F64(0, 0.999999), COURSE, .help = "AdamW second-moment decay"},
    {.name = "momentum", .metavar = "M", FIELD(optim.momentum), F64(0, 0.999999), COURSE, .help = "SGD momentum"},
    {.name = "grad-clip", .metavar = "C", FIELD(optim.grad_clip), F64(0, 1e9), COURSE,
     .help = "clip the global grad norm to C, 0 = off"},
    {.section = "run:", .name = "seed", .metavar = "S", FIELD(seed), U64(0, INT64_MAX), COURSE, .help = "random seed"},
    {.name = "threads", .metavar = "N", FIELD(threads), INT(0, 4096), LOCAL, .help = "kernel threads, 0 = all cores"},
    {.name = "eval-every", .metavar = "N", FIELD(log.eval_every), I64(0, ZT_MAX_STEPS), AGREE,
     .help = "validation loss every N steps, 0 = at the end only"},
    {.name = "eval-batches", .metavar = "N", FIELD(log.eval_batches), I64(1, ZT_MAX_ROWS), AGREE,
     .help = "batches per validation"},
    /* rank 0 writes the logs: given to another rank alone, they would be dropped without a word */
    {.name = "metrics", .metavar = "FILE", FIELD(log.metrics), TEXT, AGREE,
     .help = "one JSON object per step (step, loss, lr, tokens_per_s, mem, val_loss)"},
    {.name = "tensorboard", .metavar = "DIR", FIELD(log.tensorboard), TEXT, AGREE,
     .help = "TensorBoard event files (the same figures; tensorboard --logdir DIR)"},
    {.name = "timeline", .metavar = "FILE", FIELD(log.timeline), TEXT, AGREE,
     .help = "pipeline runs: SVG of the last step's measured timeline per rank\n"
             "beside the simulator's prediction from the measured costs"},
    {.name = "save", .metavar = "DIR", FIELD(checkpoint.save), TEXT, AGREE,
     .help = "checkpoints: DIR/step-N per save, DIR/latest links the newest; each save is\n"
             "atomic (a crash leaves the previous one current)"},
    {.name = "save-every", .metavar = "N", FIELD(checkpoint.save_every), I64(0, ZT_MAX_STEPS), AGREE,
     .help = "checkpoint every N steps, 0 = at the end only"},
    {.name = "save-shard-size", .metavar = "SIZE", FIELD(checkpoint.shard_bytes), SIZE, AGREE, .unset = "5G",
     .shown = "5G",
     .help = "the largest weights file of a save: a larger model is saved as shards\n"
             "(model-0000k-of-0000N.safetensors, model.safetensors.index.json), as\n"
             "transformers saves it"},
    {.name = "keep-checkpoints", .metavar = "K", FIELD(checkpoint.keep_checkpoints), INT(1, 1000), AGREE,
     .help = "versions kept in DIR, older ones are removed"},
    {.name = "resume", .metavar = "DIR", FIELD(checkpoint.resume), TEXT, AGREE,
     .help = "continue from a checkpoint (bitwise the same as not stopping); options that\n"
             "change the run's course (seed, batch, lr...) must be the checkpoint's"},
    {.name = "allow-config-change", .metavar = "on", FIELD(checkpoint.allow_config_change), BOOL, LOCAL, .shown = "",
     .help = "resume although such options differ (the changes are printed)"},
    {.name = "comm-timeout", .metavar = "S", FIELD(parallel.comm_timeout), F64(0, 1e7), AGREE,
     .help = "seconds a rank waits for the others in a collective before the job ends\n"
             "with an error naming the missing ranks, 0 = forever"},
    {.name = "stop-at", .metavar = "N", FIELD(stop_at), I64(0, ZT_MAX_STEPS), AGREE, .shown = "",
     .help = "stop (and checkpoint) after step N; the schedule still spans --steps"},
    {.name = "inject-nan-at", .metavar = "N", FIELD(inject_nan_at), I64(0, ZT_MAX_STEPS), AGREE, .shown = "",
     .help = "testing aid: pretend the loss is NaN at step N"},
};
#define N_ROWS (sizeof k_rows / sizeof k_rows[0])

const zt_option *zt_train_option_at(size_t i) { return i < N_ROWS ? &k_rows[i] : NULL; }

const zt_option *zt_train_option_find(const char *name) {
  for (size_t i = 0; name && i < N_ROWS; i++)
    if (!k_rows[i].derived && !strcmp(k_rows[i].name, name)) return &k_rows[i];
  return NULL;
}

const char *zt_train_option_default(const zt_option *o, char *buf, size_t cap) {
  if (o->shown) return o->shown;
  zt_train_config d;
  zt_train_config_default(&d);
  zt_option_format(o, &d, buf, cap);
  return buf;
}

zt_status zt_train_config_set(zt_train_config *c, const char *key, const char *v) {
  if (!key) return ZT_ERR(ZT_STATUS_INVALID_ARG, "option name is NULL");
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config_set: config is NULL");
  const zt_option *o = zt_train_option_find(key);
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "unknown option '%s'", key);
  return zt_option_parse(o, c, v);
}

void zt__option_value(const zt_option *o, const zt__option_ctx *x, char *buf, size_t cap) {
  if (o->field) zt_option_format(o, x->c, buf, cap);
  else zt_option_format(o, x, buf, cap); /* a value of the run */
}
