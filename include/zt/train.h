/* zerotrain train: the training loop behind `zt train` (its config, one step, the modes it runs
 * in, the memory planner) and sampling (src/train/). The top library layer: it uses every layer
 * below, data (zt/data.h), files (zt/io.h) and snapshots (zt/snapshot.h) included. */
#ifndef ZT_TRAIN_H
#define ZT_TRAIN_H

#include <signal.h>

#include "zt/data.h"
#include "zt/fsdp.h"
#include "zt/io.h"
#include "zt/offload.h"
#include "zt/offload_model.h"
#include "zt/optim.h"
#include "zt/pipeline.h"
#include "zt/snapshot.h"
#include "zt/strategy.h"

/* ------------------------------------------------ the parts of a step (src/train/step.c) */
/* The parts of a training step, in order (EVAL and SAVE only at the steps that do them). */
typedef enum zt_train_phase {
  ZT_TRAIN_PHASE_FORWARD = 0,
  ZT_TRAIN_PHASE_BACKWARD,
  ZT_TRAIN_PHASE_OPTIMIZER,
  ZT_TRAIN_PHASE_EVAL,
  ZT_TRAIN_PHASE_SAVE,
  ZT_TRAIN_PHASE_COUNT
} zt_train_phase;
ZT_API const char *zt_train_phase_name(zt_train_phase p); /* "forward", ... */

/* ------------------------------------------------ one training step (src/train/step.c) */
/* A data-parallel strategy as the training step sees it: the few collective decisions of a
 * step. Every member is optional: NULL is the one-process behaviour (mean: the value itself;
 * set_sync: nothing; clip: zt_clip_grad_norm over the model's parameters; scale_grads: an
 * error, loss scaling needs a strategy that owns the gradients; optim_step: zt_optim_step;
 * after_step: zero the optimizer's grads). The training loop makes one for none, DDP and
 * FSDP. */
typedef struct zt_dp_strategy {
  zt_status (*mean)(void *ctx, double *v);                      /* *v = mean of *v over the ranks */
  void (*set_sync)(void *ctx, bool sync);                       /* off: the next backward only accumulates */
  zt_status (*clip)(void *ctx, double max_norm, double *norm);  /* global grad norm, clipped when max_norm > 0 */
  zt_status (*scale_grads)(void *ctx, double factor);           /* multiply every grad (loss unscaling) */
  zt_status (*after_step)(void *ctx, zt_optim *o);              /* after the update: zero grads and so on */
  zt_status (*optim_step)(void *ctx, zt_optim *o, double lr);   /* the update (FSDP's states in a store: unit by unit) */
  void *ctx;
} zt_dp_strategy;

/* Gives the next microbatch: inputs and targets (B, T) i32, borrowed (valid until the next call). */
typedef zt_status (*zt_batch_fn)(void *user_data, zt_tensor **inputs, zt_tensor **targets);

typedef struct zt_train_step_options {
  int64_t microbatches; /* >= 1: forward and backward per microbatch, gradients summed, one update */
  double lr;            /* of this step (the schedule's value) */
  double grad_clip;     /* > 0: clip the global grad norm to it; 0: measure the norm only; < 0: neither
                         * (grad_norm is NaN and a non-finite gradient goes unnoticed) */
  zt_loss_scaler *scaler; /* dynamic loss scaling (f16 gradients); NULL: none */
  bool poison_loss;     /* testing aid: take the loss as NaN */
  int64_t step;         /* the step's number, for on_phase */
  /* Optional: told when each part of the step starts (FORWARD, BACKWARD, OPTIMIZER). */
  void (*on_phase)(zt_train_phase phase, int64_t step, void *user_data);
  void *phase_user_data;
  /* Optional: a stop request (zt_train_config.stop_request), polled between microbatches: when
   * it is set on any rank (the ranks agree through dp's mean), the step stops before its next
   * microbatch, drops the gradients accumulated so far (dp's after-step, or zeroing) and
   * returns ZT_OK with interrupted set and nothing updated. */
  const volatile sig_atomic_t *stop_request;
} zt_train_step_options;
/* microbatches 1, lr 6e-4, grad_clip 0, the rest off. */
ZT_API zt_train_step_options zt_train_step_options_default(void);

typedef struct zt_train_step_result {
  double loss;       /* the mean over the microbatches of each one's loss averaged over the ranks */
  double grad_norm;  /* before clipping, global (NaN when not measured) */
  double loss_scale; /* the scale this step used (0 without a scaler) */
  bool skipped;      /* the scaler skipped the update (an inf/NaN gradient; the scale backs off) */
  bool bad_loss;     /* stopped: a microbatch's loss was not finite (before its backward) */
  bool bad_grad;     /* stopped: the grad norm was not finite without a scaler to skip the step */
  bool interrupted;  /* stopped between microbatches on a stop request: no update, the grads dropped */
} zt_train_step_result;

/* One optimizer step of model m (borrowed) over opt.microbatches microbatches from next: per
 * microbatch, forward to the loss, its mean over the ranks (dp), then backward of the loss
 * divided by the microbatch count (times the loss scale); then unscaling, the grad norm and
 * clipping, the update of o at opt.lr (unless the scaler skips it) and dp's after-step. With
 * several microbatches, dp's sync is off for all but the last backward. dp may be NULL (one
 * process). One microbatch computes exactly what a hand-written forward, backward, clip and
 * update compute (no division by 1). A non-finite loss or grad norm stops the step with
 * ZT_STATUS_STATE and out->bad_loss / bad_grad set, before the update: the parameters are
 * unchanged (the grads are not). The same on every rank, since both values are global. */
ZT_API ZT_NODISCARD zt_status zt_train_step(const zt_model *m, const zt_dp_strategy *dp, zt_optim *o, zt_batch_fn next,
                        void *user_data, const zt_train_step_options *opt, zt_train_step_result *out);

/* ------------------------------------------------ a pipeline step (src/train/pipeline_step.c) */
/* One optimizer step of a pipeline run on this rank: the schedule over its microbatches
 * (zt_pipeline_run: each microbatch's loss divided by M), then the mean loss (all ranks get
 * it), with data-parallel replicas (dp_comm) the grads of params averaged over them (DDP's
 * all-reduce, once, after the step's last W whatever the schedule: a zero-bubble schedule's
 * late W's are in it, unlike PyTorch's per-backward reduction, pytorch#144530), the tied
 * parameters' grads summed over the ranks that hold them (GPT-2's wte, held by the first and
 * the last stage: every copy takes the same update and they stay identical), the global
 * grad norm (each rank's own grads, a tied one counted once: on the comm's rank 0) with
 * clipping (grad_clip > 0; 0: measure only; < 0: neither), and the update of opt at lr.
 * params: those opt updates (this rank's stages' parameters: a tied one, if this rank holds
 * it, included). The grads are zeroed after. Collective over comm, dp_comm and tied_comm. */
typedef struct zt_pipeline_step_options {
  const zt_pipeline_schedule *schedule;
  zt_comm *comm;               /* the pipeline's ranks, one per schedule rank */
  zt_pipeline_boundary boundary; /* the tensors between stages */
  double lr, grad_clip;
  zt_tensor **tied;            /* parameters several ranks' stages use (the same list on every rank of tied_comm) */
  int n_tied;
  zt_comm *tied_comm;          /* the ranks that hold the tied parameters (NULL: comm) */
  zt_comm *dp_comm;            /* optional: this rank's data-parallel replicas (the ranks that run the same
                                * stages on other rows) */
  zt_zero *zero;               /* optional, with dp_comm: the stages' parameters sharded over the replicas
                                * (zt/fsdp.h): gathered before the schedule, grads reduce-scattered after it
                                * (instead of the all-reduce), params are its pieces and the norm sums the
                                * shards over the replicas too */
  zt_pipeline_trace *trace;    /* optional: this rank's measured actions (zt_pipeline_run) */
} zt_pipeline_step_options;
ZT_API ZT_NODISCARD zt_status zt_pipeline_train_step(const zt_pipeline_stages *st, zt_optim *opt, int n_params,
                                                     const zt_param *params, zt_tensor *const *inputs,
                                                     const zt_pipeline_step_options *o, zt_train_step_result *out);

/* ------------------------------------------------ OffloadModel (src/train/offload_train.c) */
/* A language model (zt/lm.h) as OffloadModel's units (zt/offload_model.h), borrowed: unit 0
 * the embeddings, units 1..L the blocks, unit L + 1 the final norm and the fused loss (a tied
 * embedding again: it is in RAM while the first or the last slice is); spans run as the
 * model's forward_stage (through the block sequence's wrappers), each unit using the
 * parameters its param_part names. m must stay alive (and at this address) while out is used. */
ZT_API ZT_NODISCARD zt_status zt_lm_offload_units(const zt_model *m, zt_offload_units *out);

/* The options of a training run, one struct per concern. */
typedef struct zt_train_model_options {
  char preset[32];       /* preset name ("gpt2-tiny", ...) */
  bool preset_set;       /* the preset was chosen (zt_train_config_set "model"), not the default: it must agree
                          * with init_from's shape */
  int n_layer, n_head, n_embd, vocab_size, block_size; /* > 0: override the preset (vocab_size 0: the training
                                                        * token file's, when its header records it) */
  double dropout;        /* < 0: the preset's */
  /* the weights to start from ("" = none): a transformers GPT-2 model.safetensors file, or its folder
   * (with config.json, whose shape the model takes), or a zerotrain checkpoint series or version
   * (sharded too; its shape likewise). Shape options that contradict the folder's are errors. */
  char init_from[512];
} zt_train_model_options;
typedef struct zt_train_data_options {
  char path[512];        /* token file; "" = built-in default data */
  char val_path[512];    /* token file for validation; "" = last 10% of path (or the default split) */
  int64_t batch, seq;    /* the global batch: each of N ranks runs batch/N rows */
  int64_t microbatches;  /* each rank's rows run as this many microbatches of batch/(N*microbatches) rows,
                          * gradients accumulated, one update per step (default 1) */
  /* the tokenizer the token files were made with, GPT-2 byte-pair encoding ("" = none; both or neither):
   * encoder.json and vocab.bpe (merges), checked before step 1 and copied into every checkpoint under
   * transformers' names (zt_train_state.encoder) */
  char encoder[512], merges[512];
  /* or a Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json; "" = none; not with
   * encoder/merges), checked before step 1 and its files copied into every checkpoint
   * (zt_train_state.tokenizer) */
  char tokenizer[512];
} zt_train_data_options;
typedef struct zt_train_optim_options {
  zt_optim_kind kind;
  double lr, min_lr;     /* min_lr < 0: lr / 10 */
  int64_t warmup;        /* < 0: min(100, steps / 10) */
  double weight_decay, beta1, beta2, momentum, grad_clip; /* grad_clip <= 0: off */
} zt_train_optim_options;
/* Whether a run measures OffloadModel's activations both ways (zt_train_memory_options.activation_trial). */
typedef enum zt_act_trial { ZT_ACT_TRIAL_OFF = -1, ZT_ACT_TRIAL_AUTO = 0, ZT_ACT_TRIAL_ON = 1 } zt_act_trial;
/* What a step of the activation trial ran (zt_train_step_info.act_trial). */
typedef enum zt_act_trial_step {
  ZT_ACT_TRIAL_STEP_NONE = 0,  /* not a trial step */
  ZT_ACT_TRIAL_STEP_OFFLOAD,   /* every slice's activations offloaded */
  ZT_ACT_TRIAL_STEP_RECOMPUTE  /* every slice's blocks recomputed */
} zt_act_trial_step;
#define ZT_TRAIN_MAX_LAYERS 1022 /* blocks a per-block recompute plan (and the --mem-limit planner) handles */
typedef struct zt_train_memory_options {
  zt_recompute recompute; /* activation recomputation of the blocks: NONE, FULL or SELECTIVE (default none) */
  int checkpoint_every;   /* blocks per checkpoint region (default 1) */
  zt_checkpoint_policy_fn selective_policy; /* of SELECTIVE (NULL: save_wide_gemm) */
  int64_t recompute_budget; /* > 0: plan per-block modes for this many ACTIVATION bytes (overrides recompute) */
  char recompute_plan[ZT_TRAIN_MAX_LAYERS + 1]; /* non-empty: a mode per block, 'n' none, 's' selective, 'f' full
                                                 * (overrides recompute and recompute_budget) */
  zt_offload_tier offload_activations; /* the blocks' saved tensors go to this tier (default NONE: off) */
  char offload_dir[512];    /* DISK tier: where the spill file goes ("" = $TMPDIR or /tmp) */
  /* OffloadModel (zt/offload_model.h, src/train/offload_train.c): NONE (default) off, else the tier
   * whose store holds the parameters and grads (and boundary activations) of the slices not in
   * RAM; the step's batch runs as data.microbatches chunks through every slice. */
  zt_offload_tier offload_model;
  int offload_slices;       /* N (at most layers + 2); 0 (default): with offload_states the planner's choice
                             * (zt_train_plan_memory, for the memory available), else 2 */
  int offload_resident;     /* K slices in RAM at once; 0 (default): with offload_states the planner's, else 2 */
  zt_offload_model_mode offload_mode; /* RECOMPUTE (default) or KEEP_GRAPH */
  /* Every model state in offload_model's store (ZeRO-Infinity's for one process): the model is
   * built straight into it, AdamW's moments live there too, checkpoints stream from and into
   * it, and nothing brings the whole model into RAM (not even the end of the run: model_out is
   * refused). */
  bool offload_states;
  int64_t held_limit;       /* > 0: the host allocator's live and cached bytes at most, a rank (cached blocks go back
                             * before a fresh block would pass it). The planners set it: zt_train_plan for a plan
                             * chosen under a memory limit (the limit less the plan's MPI and I/O buffers, base and
                             * margin), zt_train_plan_memory for states in the tier (its plan's peak less its
                             * fixed bytes) */
  int64_t offload_write_cap; /* > 0: the model offload store's write-behind cap (zt_store_set_write_cap; the
                             * planner sets it); 0: the store's default */
  int64_t mem_limit;        /* > 0: plan offload_slices, offload_resident and offload_mode so that the predicted
                             * peak RAM fits this many bytes (refused when nothing does); needs offload_states.
                             * 0 (default): with offload_states, one process and neither offload_slices nor
                             * offload_resident set, plan for the memory available (zt_mem_available) */
  /* The activation trial (src/train/act_trial.c), for OffloadModel's keep-graph mode with
   * activation offload, where each slice's blocks either offload their saved tensors or are
   * recomputed in backward: the run's third step (ZT_ACT_TRIAL_FIRST; the first two are unlike
   * the later ones) offloads every slice's, its fourth recomputes every slice's blocks, and from
   * its fifth each slice keeps the way its forward + backward took less time in
   * (zt_offload_model_slice_times; zt_train_result.act_choice). Bitwise the same results
   * either way. ZT_ACT_TRIAL_AUTO (default): when the --mem-limit planner chooses activation
   * offload (it then counts the RAM of both ways), ON: any such run, OFF: the planner's predicted
   * choice stays. Runs of fewer than five steps run no trial. */
  zt_act_trial activation_trial;
} zt_train_memory_options;
#define ZT_ACT_TRIAL_FIRST 3 /* the step of a run (1-based) that starts the activation trial */
/* What an activation trial measured and chose. */
typedef struct zt_act_choice {
  int slices;                            /* OffloadModel's slices (0: no trial ran) */
  int64_t offload_step, recompute_step;  /* the steps (1-based) that ran every slice one way, then the other */
  double offload_step_s, recompute_step_s; /* those steps' times */
  /* per slice: its blocks [first_block, first_block + blocks) and its forward + backward seconds
   * in each of the two steps (slices without blocks: 0 blocks, nothing to choose) */
  int first_block[ZT_TRAIN_MAX_LAYERS + 2], blocks[ZT_TRAIN_MAX_LAYERS + 2];
  double offload_s[ZT_TRAIN_MAX_LAYERS + 2], recompute_s[ZT_TRAIN_MAX_LAYERS + 2];
  char plan[ZT_TRAIN_MAX_LAYERS + 1];    /* the choice, a letter per block: f recomputed, n offloaded */
  int recomputed_slices;
} zt_act_choice;
/* Data parallel over the ranks of mpirun (one rank: plain training unless a shard strategy is
 * asked for). */
typedef struct zt_train_parallel_options {
  zt_shard_strategy shard;  /* NONE (default): DDP on N > 1 ranks; else FSDP with this strategy */
  int hybrid_group;         /* HYBRID: ranks per shard group */
  bool prefetch;            /* FSDP backward and forward prefetch (default on) */
  zt_dtype mixed_precision; /* FSDP parameter and gradient-reduction dtype: f32 (none), bf16 or f16 (with
                             * dynamic loss scaling) */
  double comm_timeout;      /* seconds a collective may wait for the other ranks (default 600; 0: forever) */
  /* Pipeline parallelism (src/train/pipeline_train.c): pp > 1 cuts the model into stages over pp
   * consecutive ranks; the world is pp x D ranks, D data-parallel replicas of the pipeline (DDP
   * across the replicas of each stage: shard none). Each replica runs its rows of the global
   * batch as data.microbatches microbatches through the schedule. */
  int pp;                   /* pipeline ranks (default 1: no pipeline) */
  char schedule[512];       /* a generator name (zt_pipeline_generator_names) or a schedule file (default 1f1b) */
  int chunks;               /* stages per rank (0: the schedule's own: 2 for interleaved and the V families) */
  char pp_balance[256];     /* blocks per stage: "even" (default), "auto" (balanced by modelled cost: the head
                             * counts), or a comma list ("1,3,3,1", one count per stage) */
} zt_train_parallel_options;
typedef struct zt_train_checkpoint_options {
  char save[512];        /* checkpoint series folder (a step-N folder per save, 'latest'); "" = none */
  int64_t save_every;    /* 0: only at the end */
  int keep_checkpoints;  /* versions kept in the save folder (default 2; older ones are removed) */
  bool save_full;        /* FSDP: gathered to rank 0 (a single-process checkpoint) instead of sharded */
  int64_t shard_bytes;   /* the largest weights file of a save (0: ZT_LM_SHARD_BYTES, 5 GiB); larger models are
                          * saved in shards with model.safetensors.index.json */
  char resume[512];      /* checkpoint to resume from (a series folder or one checkpoint folder) */
  bool allow_config_change; /* resume although options that change the run's course differ from the
                             * checkpoint's (the changes are reported either way) */
} zt_train_checkpoint_options;
typedef struct zt_train_log_options {
  int64_t eval_every, eval_batches; /* eval_every 0: only at the end */
  char metrics[512];     /* JSON lines file; "" = none */
  char tensorboard[512]; /* TensorBoard event files go to this folder; "" = none */
  char timeline[512];    /* pipeline runs: an SVG of the measured timeline of the last step beside the
                          * simulator's prediction from the measured costs; "" = none */
} zt_train_log_options;

typedef struct zt_train_config {
  zt_train_model_options model;
  zt_train_data_options data;
  zt_train_optim_options optim;
  zt_train_memory_options memory;
  zt_train_parallel_options parallel;
  zt_train_checkpoint_options checkpoint;
  zt_train_log_options log;
  int64_t steps;         /* the schedule's length */
  int64_t stop_at;       /* > 0: stop (and checkpoint) after this step; the schedule still uses steps */
  uint64_t seed;
  int threads;           /* 0: all cores */
  /* The planner (zt/plan.h, zt_train_plan): "auto" trains with the fastest configuration predicted to
   * fit memory.mem_limit per rank (else the memory available); "FILE" or "FILE:N" with the chosen
   * (or N-th) configuration of a plan file zt plan wrote; "" (default): the options as given. The
   * plan writes the options it chooses into the config, nothing else. */
  char plan[512];
  char plan_calibration[512]; /* a calibration file (zt plan --save-calibration) read instead of measuring */
  int64_t inject_nan_at; /* > 0: testing aid: make the loss NaN at this step */
  /* Optional: told when each part of a step starts (for progress shown inside long steps). */
  void (*on_phase)(zt_train_phase phase, int64_t step, void *user_data);
  void *phase_user_data;
  /* Optional: a stop request, set asynchronously (zt train's signal handler sets it on SIGINT,
   * SIGTERM, SIGHUP and SIGUSR1). The run polls it at its safe points: before each step and,
   * in data-parallel training (plain, DDP, FSDP), between a step's microbatches (a pipeline's
   * and OffloadModel's steps run to their end). The ranks agree: one rank's request stops every
   * rank at the same point. A step cut short is dropped whole (its gradients discarded, the data
   * position and the random stream put back to its start), so the run ends at its last complete
   * step, saves it when checkpoint.save is set (no evaluation), and returns ZT_OK with
   * zt_train_result.stopped set. */
  const volatile sig_atomic_t *stop_request;
} zt_train_config;
/* Defaults: gpt2-tiny on the default data (the values `zt train` shows in --help). */
ZT_API void zt_train_config_default(zt_train_config *c);
/* Set one option by its name ("batch", "lr", "keep-checkpoints", ...: a row of the option table
 * below; zt train's flags and config keys are these names) from a string; unknown names and bad
 * values are errors naming them. Messages of the library name options by their field
 * ("zt_train_config.data.batch"), which a front end may rewrite as its own option names (the
 * rows' field and name). */
ZT_API ZT_NODISCARD zt_status zt_train_config_set(zt_train_config *c, const char *key, const char *value);
/* The model config a training config asks for: the preset, the shape of what model.init_from
 * names (contradicting overrides are errors), the token file's vocabulary (without a vocab_size
 * override), then the explicit overrides. */
ZT_API ZT_NODISCARD zt_status zt_train_model_config(const zt_train_config *c, zt_lm_config *out);
/* Read a config file: "name = value" lines (a leading "--" on a name is dropped), in
 * file order, calling set for each. '#' starts a comment at the start of a line or after a
 * blank ("run#1.jsonl" is a value); a value may be double-quoted ("a #b", with \" and \\).
 * The file must be a regular text file of at most 1 MiB, without NUL bytes; a name given twice
 * is an error. Errors name the file and line. */
typedef zt_status (*zt_config_set_fn)(const char *name, const char *value, void *user_data);
ZT_API ZT_NODISCARD zt_status zt_config_file_read(const char *path, zt_config_set_fn set, void *user_data);
/* zt_config_file_read with zt_train_config_set. */
ZT_API ZT_NODISCARD zt_status zt_train_config_load(zt_train_config *c, const char *path);
/* The option parsers behind zt_train_config_set, for other commands' options: a decimal
 * integer in [lo, hi]; a finite number in [lo, hi] (NaN refused). Errors name the option. */
ZT_API ZT_NODISCARD zt_status zt_config_parse_i64(const char *name, const char *value, int64_t lo, int64_t hi, int64_t *out);
ZT_API ZT_NODISCARD zt_status zt_config_parse_f64(const char *name, const char *value, double lo, double hi, double *out);

/* ------------------------------------------------ the option table (src/train/options.c) */
/* Every option of a training run is one row of one table: its name, the zt_train_config field it
 * sets, its type and range, its role in a run, and its help. zt_train_config_set and config
 * files parse by it; zt train's flags and --help, the ranks' start-up comparison and what a
 * checkpoint records (zt_train_resume_changes) read it. Adding an option is adding a row. A
 * front end's own options are rows of the same kind over its own struct (zt_option_parse,
 * zt_option_format). */
typedef enum zt_option_type {
  ZT_OPTION_TYPE_INT,    /* int in [lo, hi] */
  ZT_OPTION_TYPE_I64,    /* int64_t in [lo, hi] */
  ZT_OPTION_TYPE_U64,    /* uint64_t in [lo, hi] (0 <= lo) */
  ZT_OPTION_TYPE_F64,    /* double in [min, max] (NaN refused) */
  ZT_OPTION_TYPE_BOOL,   /* bool: on or off (also true/false, 1/0) */
  ZT_OPTION_TYPE_TEXT,   /* char[size]: a path or a name, not empty */
  ZT_OPTION_TYPE_ENUM,   /* an enum (or a bool, by size): one of choices' names */
  ZT_OPTION_TYPE_SIZE,   /* int64_t bytes: a positive number, K, M, G or T after it multiplying by powers of
                          * 1024 ("300M", "1.5G"; "MiB", "MB" too) */
  ZT_OPTION_TYPE_SPECIAL /* a syntax of its own, that the table's row parses (recompute MODE, shard MODE) */
} zt_option_type;
/* What an option is to a run beyond its own process. */
typedef enum zt_option_role {
  ZT_OPTION_ROLE_COURSE,   /* sets the run's course: a checkpoint records it, and a resume with another value is
                            * refused unless checkpoint.allow_config_change (the continuation would not be
                            * bitwise); the ranks must agree on it */
  ZT_OPTION_ROLE_INFO,     /* recorded; a resume with another value is reported, not refused; ranks agree */
  ZT_OPTION_ROLE_RECORDED, /* recorded for the next run's use, never compared on resume; ranks agree */
  ZT_OPTION_ROLE_AGREE,    /* not recorded; the ranks must agree on it */
  ZT_OPTION_ROLE_LOCAL     /* neither: a process's own (threads), or checked by the run where it matters */
} zt_option_role;
/* An ENUM option's value: its name and the enum value. The first choice with a value names it
 * (recorded, shown); unlisted ones are accepted but left out of the list a message gives. */
typedef struct zt_option_choice {
  const char *name;
  int value;
  bool unlisted;
} zt_option_choice;
typedef struct zt_option zt_option;
/* A SPECIAL row's own syntax: parse value into what the row sets in base; the value as it parses back. */
typedef zt_status (*zt_option_parse_fn)(const zt_option *o, void *base, const char *value);
typedef void (*zt_option_format_fn)(const zt_option *o, const void *base, char *buf, size_t cap);
struct zt_option {
  const char *section;  /* starts a section of a front end's help, when not NULL */
  const char *name;     /* "batch": zt train's flag without its dashes, and the config-file key */
  const char *metavar;  /* the value's name in help ("B") */
  const char *field;    /* "data.batch": the zt_train_config member set (NULL: a front end's own option) */
  size_t offset, size;  /* that member's (or the front end's struct's) */
  zt_option_type type;
  zt_option_role role;
  int64_t lo, hi;       /* INT, I64, U64 */
  double min, max;      /* F64 */
  const zt_option_choice *choices; /* ENUM, ended by a NULL name */
  const char *unset;    /* the value's text while unset (a number below its range, an empty text): "auto" */
  const char *shown;    /* the default as help shows it (NULL: the default config's value; "": none) */
  const char *help;     /* lines after the first go under it */
  zt_option_parse_fn parse;   /* SPECIAL: the row's syntax */
  zt_option_format_fn format; /* SPECIAL: its value as text (every other type: by type) */
  bool unset_keeps;     /* while unset, a resume keeps the checkpoint's value: not compared (warmup) */
  bool derived;         /* not an option but a value of the run (the rank count, the warm-up it resolved)
                         * recorded or compared under name; nothing sets it, help leaves it out */
};
/* The table's rows in order (help's order), then NULL. */
ZT_API const zt_option *zt_train_option_at(size_t i);
/* The option called name (not a derived row), or NULL. */
ZT_API const zt_option *zt_train_option_find(const char *name);
/* The default of a row of the table as help shows it: the row's shown text, else its value in the
 * default config (zt_train_config_default); in buf when written there. */
ZT_API const char *zt_train_option_default(const zt_option *o, char *buf, size_t cap);
/* Parse value into the member at base + o->offset by o's type and range (SPECIAL: by the row's
 * parse); errors name the option ("option 'batch' needs an integer in [1, 1048576]"). */
ZT_API ZT_NODISCARD zt_status zt_option_parse(const zt_option *o, void *base, const char *value);
/* The member at base + o->offset as text, as it parses back (numbers exactly; SPECIAL: the row's
 * format). While unset (a number below its range, a size of 0, an empty text) the row's unset
 * text when it has one. */
ZT_API void zt_option_format(const zt_option *o, const void *base, char *buf, size_t cap);

typedef struct zt_train_step_info {
  int64_t step;           /* steps completed (1-based) */
  int64_t first_step;     /* the first step of this run (> 1 when resumed) */
  int64_t total_steps;
  double elapsed_s;       /* since this run's first step started */
  double loss, lr, grad_norm;
  double val_loss;        /* NaN when not evaluated at this step */
  double step_ms, tokens_per_s, mfu; /* mfu: model FLOP/s over the sgemm ceiling measured at start */
  zt_mem_stats mem;       /* cpu */
  int64_t peak_rss;
  int64_t act_peak_predicted; /* the model's prediction of peak ACTIVATION bytes (offload not counted) */
  int rank, world;        /* this process in the data-parallel group (0, 1 without one) */
  zt_dp_stats comm;       /* this rank's communication in this step */
  double loss_scale;      /* f16: the loss scale this step used (0 without scaling) */
  bool skipped;           /* f16: an inf/NaN grad skipped this step's update (the scale backs off) */
  /* Pipeline runs (NaN / 0 otherwise): the step's measured bubble rate (1 - the ranks' compute
   * time / (P x the step's schedule time)) and the simulator's for the schedule from the step's
   * measured mean F/B/W costs; this rank's time in F, B (and fused BW), W and not computing
   * (waiting for transfers) between its first and last action. */
  double pp_bubble, pp_sim_bubble;
  double pp_f_ms, pp_b_ms, pp_w_ms, pp_wait_ms;
  /* The model offload's store in this step (all 0 without one): bytes read and written, and the
   * wall time with a read / a write in flight (zt_store_io_stats; 0 for memory tiers). */
  int64_t io_read_bytes, io_write_bytes;
  double io_read_ms, io_write_ms;
  /* The activation trial (zt_train_config.memory.activation_trial): what this step ran (OFFLOAD:
   * every slice's activations offloaded, RECOMPUTE: every slice's recomputed, NONE: neither);
   * act_choice: after the second, what it measured and chose (NULL at every other step) */
  zt_act_trial_step act_trial;
  const zt_act_choice *act_choice;
  int64_t act_offload_bytes; /* activation offload: bytes of saved tensors sent to its tier in this step */
  int64_t saved_step;     /* a checkpoint of this step was just written (the step), else 0 */
  const char *warning;    /* a problem this step met that cost no training (a log that could not be
                           * written; also in zt_train_result.warnings), else NULL */
} zt_train_step_info;
typedef void (*zt_train_step_fn)(const zt_train_step_info *info, void *user_data);

/* ------------------------------------------------ the --mem-limit planner (src/train/offload_plan.c) */
/* How backward gets a slice's activations under OffloadModel: recomputed from the boundary
 * activations (RECOMPUTE mode), kept in RAM (KEEP_GRAPH), or kept with the blocks' saved
 * tensors in the store's tier (KEEP_GRAPH with activation offload). */
typedef enum zt_offload_plan_activations {
  ZT_OFFLOAD_PLAN_RECOMPUTE = 0,
  ZT_OFFLOAD_PLAN_KEEP,
  ZT_OFFLOAD_PLAN_OFFLOAD
} zt_offload_plan_activations;
ZT_API const char *zt_offload_plan_activations_name(zt_offload_plan_activations a);
#define ZT_OFFLOAD_PLAN_MAX_UNITS (ZT_TRAIN_MAX_LAYERS + 2) /* layers + 2 */
#define ZT_OFFLOAD_PLAN_TEMP 8.0 /* values per token of one block's backward temporaries (measured) */
typedef struct zt_offload_plan_input {
  zt_lm_config model;
  int64_t rows, seq, microbatches; /* this rank's rows per step, in microbatches chunks */
  int64_t fixed_bytes;             /* RAM the process holds besides the model's states and activations */
  int64_t io_bytes;                /* the store's I/O buffers */
  int64_t cache_bytes;             /* the allocator's cache of freed blocks (resident, not accounted) */
  int64_t cache_max_bytes;         /* > cache_bytes: zt_offload_plan_make gives the cache what the limit leaves
                                    * under a 15% margin, up to this and to four copies of the largest slice's
                                    * parameters (what a step frees and allocates again per slice): a freed block
                                    * reused costs no page faults and no zeroing by the kernel */
  int64_t write_cap_bytes;         /* evictions written behind: the most RAM held until written (the store's cap) */
  int64_t update_chunk_bytes;      /* OffloadModel's update chunk (zt_offload_model_options.update_chunk_bytes): a
                                    * parameter's update holds at most this much of its moments (0: whole moments) */
  double gflops;                   /* compute rate for the time estimate (0: not estimated) */
  double read_bps, write_bps;      /* the store's measured bandwidth (0: unknown) */
  bool can_offload_activations;    /* the tier is lossless (activation offload keeps results bitwise) */
  bool trial;                      /* an activation offload plan runs the activation trial (both ways in turn)
                                    * where both fit the limit, its peak then the larger of the two */
  bool optim_in_ram;               /* the optimizer's state stays in RAM, whole, for the run (OffloadModel without
                                    * offload_optim_state: only parameters and grads pass through the store) */
} zt_offload_plan_input;
typedef struct zt_offload_plan {
  int slices, resident;
  zt_offload_plan_activations activations_mode;
  /* OFFLOAD: the slices whose blocks are recomputed instead (only each block's input goes to the
   * tier; its forward runs again in backward), chosen per slice where the disk's time would
   * pass the compute's: a letter per block, 'f' recomputed, 'n' offloaded ("" none), as
   * zt_train_config.memory.recompute_plan takes it; recomputed_slices counts them */
  char recompute_plan[ZT_TRAIN_MAX_LAYERS + 1];
  int recomputed_slices;
  bool trial;                      /* the run measures the choice (zt_train_config.memory.activation_trial) from
                                    * its ZT_ACT_TRIAL_FIRST step: recompute_plan is the prediction until then */
  int64_t states_bytes, activation_bytes, io_bytes, cache_bytes, fixed_bytes; /* the predicted peak's parts */
  int64_t write_cap_bytes;         /* the store's write-behind cap: the smallest slice's parameters at most, so
                                    * what is in flight stays within the previous slice the states count */
  int64_t peak;                    /* their sum: the predicted peak RAM */
  int64_t held_bytes;              /* what the allocator holds at its most, live and cached, where its cache is
                                    * not bounded: each kind of block (the blocks', the tables', the
                                    * activations') at its own peak over the step */
  int64_t inflight_bytes;          /* what writes behind (the model store's, up to its write cap; activation
                                    * offload's, up to its own) may add to the peak's phase or make another phase
                                    * pass it, where the disk falls behind */
  int64_t bound;                   /* peak + inflight_bytes + the margin for what is not modelled
                                    * (ZT_OFFLOAD_PLAN_MARGIN): the most RAM the plan can take; a plan fits a limit
                                    * when this does */
  int64_t smallest_peak;           /* the smallest bound of any plan: the smallest limit some plan fits */
  double compute_s, io_s, step_s;  /* predicted step: compute, disk time, the longer of the two */
  int64_t read_bytes, written_bytes; /* the store's bytes a step, read and written (io_s's) */
  double read_bps, write_bps;      /* zt_train_plan_memory: the store's bandwidth it measured */
  /* zt_train_plan_memory: the limit planned for and where it came from (mem_limit, or what
   * zt_mem_available found); given: the plan was the config's (offload_slices or
   * offload_resident set), predicted, not chosen; calibrated: ZT_PLAN_CALIBRATION gave some of
   * what the planner measures otherwise; note: all that as a sentence to print */
  int64_t limit;
  char limit_source[1280];
  bool given, calibrated;
  char note[2400];
} zt_offload_plan;
/* One plan's prediction: slices N, resident K, activations act (OFFLOAD: nothing recomputed). */
ZT_API ZT_NODISCARD zt_status zt_offload_plan_predict(const zt_offload_plan_input *in, int slices, int resident,
                                                      zt_offload_plan_activations act, zt_offload_plan *out);
/* The fastest plan whose predicted peak RAM fits limit (ties: prefetching, then room for the
 * activation trial (in->trial), then the larger allocator cache (in->cache_max_bytes), then a
 * 15% margin, then fewer slices),
 * with activation offload trying every count of slices recomputed instead (the ones with the
 * most blocks first);
 * ZT_STATUS_OOM naming the smallest peak when none does (out->smallest_peak set either way). */
ZT_API ZT_NODISCARD zt_status zt_offload_plan_make(const zt_offload_plan_input *in, int64_t limit, zt_offload_plan *out);

typedef struct zt_train_result {
  int64_t steps_done;
  double first_loss, last_loss, last_val_loss;
  double seconds, tokens_per_s, sgemm_gflops;
  int64_t num_params;
  int64_t act_peak_predicted, act_peak; /* peak ACTIVATION bytes on cpu: predicted, measured over the run */
  char recompute_plan[128]; /* a letter per block: n none, s selective, f full ("..." when longer) */
  int64_t offload_peak_bytes; /* peak bytes in the activation offload tier (0: no offload) */
  int64_t model_store_peak_bytes; /* OffloadModel: peak bytes its store held (0: off) */
  int64_t model_slice_loads, model_slice_prefetched; /* OffloadModel: slice loads, of which prefetched */
  double model_load_wait_s, model_update_s, model_evict_s; /* OffloadModel: the computing thread's time waiting for
                                                            * loads, in updates, in evictions (zt_offload_model_stats) */
  double model_update_end_s, model_update_read_wait_s, model_update_adamw_s; /* of model_update_s (the same) */
  double offload_put_s, offload_wait_s; /* activation offload: forward's time putting saves, backward's waiting */
  int model_slices, model_resident;
  zt_device model_store_device;
  zt_mem_stats model_ram, model_store; /* OffloadModel: cpu and the store's device over the steps (peaks since step 1),
                                        * taken before the parameters come back into RAM at the end */
  zt_offload_plan plan;  /* the --mem-limit plan the run made (zeroed: none) */
  /* Measured, for the planner's prediction beside it (zt/plan.h): the largest peak RSS, peak of the
   * accounted bytes and peak of each tag on cpu over the ranks (rank 0 has every rank's, the others
   * their own), since step 1; the median step time of the run's steps after its first (its only one
   * when it ran one) */
  int64_t peak_rss_max, peak_bytes_max, tag_peak_max[ZT_MEM_TAG_COUNT];
  double step_s_median;
  zt_act_choice act_choice; /* the activation trial's measurements and choice (slices 0: none ran) */
  bool stopped;          /* a stop request ended the run early (zt_train_config.stop_request) */
  int stop_signal;       /* its value (zt train: the signal), agreed by the ranks (0: none) */
  int64_t last_step;     /* the last step completed (a resumed run counts the checkpoint's steps) */
  int64_t saved_step;    /* the step of the last checkpoint this run wrote (0: none) */
  /* Problems that cost no training and no checkpoint (a figure or a log that could not be
   * written): "; "-joined sentences, "" when none. The run still returns ZT_OK for them. */
  char warnings[2048];
  bool failed_together; /* the run failed on every rank at once, with the same message (a bad input found
                         * before the first step, or a NaN loss): no rank is left waiting in a collective.
                         * Any other failure under several ranks may leave the others waiting (until their
                         * --comm-timeout): a program then ends the job (zt_comm_abort). */
} zt_train_result;
/* What differs between the options a checkpoint recorded (st->options) and c's, at world ranks:
 * "name old -> new" items joined by ", " in buf ("" when nothing differs or the checkpoint
 * recorded nothing), and *course set when a change alters the run's course (the continuation
 * would not be bitwise): seed, batch, seq, the learning rate, its floor and warm-up, the optimizer
 * and its settings, clipping, dropout, the training data, mixed precision. Changes of the step
 * count, the validation data, the rank count or the sharding are reported but are not course
 * changes. */
ZT_API ZT_NODISCARD zt_status zt_train_resume_changes(const zt_train_config *c, int world, const zt_train_state *st, char *buf,
                                  size_t cap, bool *course);

/* Train as configured, calling on_step after every step (the library prints nothing).
 * On NaN/inf loss it stops with ZT_STATUS_STATE and leaves the last checkpoint intact.
 * If model_out is not NULL it receives the trained model (the caller frees it with zt_model_free). */
ZT_API ZT_NODISCARD zt_status zt_train_run(const zt_train_config *c, zt_train_step_fn on_step, void *user_data, zt_train_result *res,
                       zt_model *model_out);
/* The same over a given process group (borrowed; NULL: zt_comm_world for the run, freed
 * at its end, which finalizes MPI when the run started it). With a model_out under FSDP
 * the returned model holds the full parameters (gathered on every rank). */
ZT_API ZT_NODISCARD zt_status zt_train_run_on(const zt_train_config *c, zt_comm *comm, zt_train_step_fn on_step, void *user_data,
                          zt_train_result *res, zt_model *model_out);

/* The memory strategies of a run (zt/strategy.h), made from c's memory options and attached
 * to a GPT-2: a recompute plan (the per-block plan of recompute_budget for one forward of
 * `rows` rows of c's seq: a microbatch on this rank, else one mode for all blocks, under the
 * selective policy) and activation offload (NULL when off). res (may be NULL) gets
 * recompute_plan and act_peak_predicted (for `rows` rows). Detach (and free) them with
 * zt_train_memory_free before freeing the model. */
typedef struct zt_train_memory {
  zt_recompute_plan *recompute;
  zt_offload *offload;
} zt_train_memory;
ZT_API ZT_NODISCARD zt_status zt_train_memory_attach(const zt_model *m, const zt_train_config *c, int64_t rows, zt_train_memory *mem,
                                        zt_train_result *res);
ZT_API void zt_train_memory_free(zt_train_memory *mem); /* zeroes *mem; a zeroed one is a no-op */

/* RAM the process adds besides the accounting to its RSS at planning: the heap's small blocks, the
 * threads' stacks, blocks' rounding (measured: 7.4-9.7 MiB over five plans of a 12.9M-parameter
 * model, 3.3 MiB at GPT-2 124M) */
#define ZT_OFFLOAD_PLAN_FIXED ((int64_t)10 << 20)
/* What a plan's bound adds to its peak and writes in flight for what the prediction does not
 * model: 8 MiB (the kernel's memory for the process, charged to its memory cgroup: page tables,
 * the spill files' metadata) and 2% of the peak (the prediction's own error on what it models). */
#define ZT_OFFLOAD_PLAN_MARGIN(peak) (((int64_t)8 << 20) + (int64_t)((double)(peak) * 0.02))
/* The memory this process may use: the least of its memory cgroup's limit (v2: memory.max of
 * its cgroup and the cgroups above it; v1: hierarchical_memory_limit) and the machine's
 * MemAvailable plus the process's own RSS; source says which, and where it was read. */
typedef struct zt_mem_available_info {
  int64_t bytes;
  char source[1280];
} zt_mem_available_info;
ZT_API ZT_NODISCARD zt_status zt_mem_available(zt_mem_available_info *out);
/* Plan for c's model, batch (over world ranks) and tier, from the process's RSS now (after the
 * largest GEMM packing the model's steps make, OpenBLAS's buffers being resident for good), the
 * sgemm rate and the tier's bandwidth measured here, and write the plan into c (offload_slices,
 * offload_resident, offload_mode, offload_activations, recompute_plan), clearing mem_limit:
 * - c->memory.mem_limit > 0: for that limit; needs offload_states. A limit nothing fits:
 *   ZT_STATUS_OOM naming the smallest that does.
 * - mem_limit 0 with offload_states (OffloadModel's), one process and neither offload_slices nor
 *   offload_resident set: for the memory available (zt_mem_available; out->limit_source says
 *   which limit).
 * - mem_limit 0 with offload_states, one process and offload_slices or offload_resident set:
 *   that plan, predicted, not chosen (out->given; the one not set becomes 2), against the memory
 *   available.
 * - otherwise nothing to do (out zeroed).
 * A plan sets the allocator's cache bound (zt_mem_set_cache_limit) and the store's write cap.
 * The environment variable ZT_PLAN_CALIBRATION="gflops=G,read=BPS,write=BPS,rss=BYTES" (any of
 * them; sizes may end in K, M or G, powers of 1024) gives what is otherwise measured (the sgemm
 * rate in GFLOP/s, the tier's read and write bytes per second, the RSS at planning), so that
 * tests choose the same plan on a loaded machine as on an idle one. zt_train_run plans a config
 * that needs it itself. */
ZT_API ZT_NODISCARD zt_status zt_train_plan_memory(zt_train_config *c, int world, zt_offload_plan *out);

/* GFLOP/s of raw OpenBLAS sgemm at n x n x n on the current threads (median of reps runs
 * after one warm-up): the ceiling that model FLOP utilisation is measured against. */
ZT_API double zt_sgemm_gflops(int n, int reps);

/* ------------------------------------------------ sampling (src/train/sample.c) */
#define ZT_SAMPLE_MAX_LEN (1 << 20) /* tokens of a prompt, and tokens generated, per call */
/* Generate n tokens after the prompt (autoregressive, eval mode, grad off), with
 * temperature (0: greedy, else in (0, 100]) and top-k (0: all), from a private Philox stream (seed): the
 * default generator is not touched. *out is malloc'd (prompt + generated ids). Each token
 * comes from the last position of its context (the last block_size tokens, at positions
 * from 0), through a KV cache (the model's forward_cached, zt/model.h; allocated for the call on the
 * model's device, tag ACTIVATION): the prompt is prefilled, then each token runs alone; past
 * block_size each token prefills the shifted window again. The model's parameters must be
 * resident (module hooks and sequence wrappers do not run). */
ZT_API ZT_NODISCARD zt_status zt_lm_sample(const zt_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n, double temperature,
                         int top_k, uint64_t seed, int32_t **out, int64_t *n_out);
/* The logits of every position of ids (n <= the model's context; eval mode, grad off, the
 * whole sequence in one forward_logits): *out is malloc'd, n x vocabulary floats, row-major.
 * For comparing with another implementation (zt sample --logits). */
ZT_API ZT_NODISCARD zt_status zt_lm_logits(const zt_model *m, const int32_t *ids, int64_t n, float **out);

#endif
