/* One planner over every strategy (src/train/plan*.c): for a model, a batch and a number of
 * ranks it enumerates the configurations that make sense (recompute, activation offload,
 * OffloadModel and states on disk, DDP and FSDP sharding, pipelines of every schedule family
 * split P x D), predicts each one's peak RAM per rank by allocator tag, its disk bytes and its
 * step time from a calibration of this machine, and ranks them: the fastest that fits a memory
 * limit first. `zt plan` prints and writes it; `zt train --plan auto|FILE` trains with it; the
 * --mem-limit planner of states on disk is its OffloadModel part (zt_offload_plan_*, zt/train.h).
 *   zt_plan_space sp;  zt_plan_space_default(&sp);  sp.model = ...;  sp.world = 4;
 *   zt_plan_calibration cal;  zt_plan_calibrate(comm, &sp, NULL, 3, &cal);   (or _read / _default)
 *   zt_plan *p;  zt_plan_make(&sp, &cal, &p);  ... p->entries[p->chosen] ...  zt_plan_free(p);
 * A plan never changes results: it only writes options a run takes by hand (zt_plan_config_apply).
 * docs/plan.md says what is modelled and how far off it was measured to be. */
#ifndef ZT_PLAN_H
#define ZT_PLAN_H

#include "zt/train.h"

/* ------------------------------------------------ a point of the space */
/* The options of one configuration: what zt_plan_config_apply writes into a zt_train_config
 * (and zt_plan_config_of reads back from one). */
typedef struct zt_plan_config {
  int pp, dp;                  /* pipeline ranks x data-parallel replicas: the world */
  zt_shard_strategy shard;     /* over the dp ranks: NONE is DDP (plain training at dp 1); with pp > 1 the
                                * replicas of each stage (pipeline x FSDP: FULL, GRAD_OP or OPT) */
  int hybrid_group;            /* HYBRID: ranks per shard group */
  char schedule[32];           /* pp > 1: a generator name (zt_pipeline_generator_names) */
  int chunks;                  /* pp > 1: stages per rank (0: the schedule's own) */
  int64_t microbatches;        /* per replica and step */
  zt_recompute recompute;      /* every block: NONE, SELECTIVE or FULL */
  int64_t recompute_budget;    /* > 0: a per-block plan for this many ACTIVATION bytes instead */
  char recompute_plan[ZT_TRAIN_MAX_LAYERS + 1]; /* non-empty: a letter per block (n, s, f) instead */
  zt_offload_tier offload_activations; /* the blocks' saved tensors to this tier (NONE: kept) */
  zt_offload_tier offload_model;       /* OffloadModel's tier (NONE: off) */
  bool offload_states;         /* every model state in offload_model's tier (ZeRO-Infinity in one process) */
  int slices, resident;        /* OffloadModel: slices, slices in RAM at once */
  zt_offload_model_mode mode;  /* OffloadModel: RECOMPUTE or KEEP_GRAPH */
} zt_plan_config;

/* ------------------------------------------------ what is predicted */
typedef struct zt_plan_prediction {
  /* peak RAM per rank, by allocator tag on cpu (each tag's own peak, as zt_mem_stats.peak), and the
   * peak of their sum (zt_mem_stats.peak_total) */
  int64_t tag[ZT_MEM_TAG_COUNT];
  int64_t accounted;
  /* what the process holds besides the accounting: the allocator's cache of freed blocks, I/O
   * buffers, the process's own base (code, libraries, BLAS and MPI buffers: the calibration's) */
  int64_t cache, io, base;
  int64_t rss;                 /* accounted + cache + io + base: the peak RSS predicted */
  int64_t inflight;            /* states in the tier: what writes behind may add where they fall behind the disk; not
                                * in rss, counted when the entry is fitted to a limit */
  int64_t disk_held;           /* bytes held in the disk tier */
  int64_t disk_read, disk_written; /* bytes moved per step */
  /* the step, in seconds: compute (incl. recompute), communication not hidden behind it, disk
   * time not hidden, the pipeline's bubble; step = their sum as the mode overlaps them */
  double compute_s, comm_s, io_s, bubble_s, step_s;
} zt_plan_prediction;

/* ------------------------------------------------ calibration */
typedef enum zt_plan_figure {
  ZT_PLAN_FIG_GEMM = 0,  /* GFLOP/s of the model's GEMMs, per rank, every rank computing at once */
  ZT_PLAN_FIG_ATTN,      /* GFLOP/s of attention (forward + backward) at the run's sequence */
  ZT_PLAN_FIG_ELEM,      /* bytes/s of the elementwise ops (norms, activations, adds) per rank */
  ZT_PLAN_FIG_READ,      /* the disk tier's read bytes/s */
  ZT_PLAN_FIG_WRITE,     /* its write bytes/s */
  ZT_PLAN_FIG_COMM_LAT,  /* seconds of a small all-reduce over the world */
  ZT_PLAN_FIG_COMM_BW,   /* bytes/s of a large all-reduce (bus bandwidth: 2 (n-1)/n bytes moved) */
  ZT_PLAN_FIG_BASE,      /* bytes: the process's RSS besides its accounted bytes at start (libraries, BLAS
                          * and MPI buffers) */
  ZT_PLAN_FIG_COUNT
} zt_plan_figure;
typedef enum zt_plan_source {
  ZT_PLAN_SOURCE_DEFAULT = 0, /* a built-in default: nothing measured */
  ZT_PLAN_SOURCE_MEASURED,    /* measured here (the median of reps runs) */
  ZT_PLAN_SOURCE_GIVEN        /* read from a calibration file or ZT_PLAN_CALIBRATION */
} zt_plan_source;
ZT_API const char *zt_plan_figure_name(zt_plan_figure f);  /* "gemm_gflops", ... */
ZT_API const char *zt_plan_source_name(zt_plan_source s);  /* "default", "measured", "given" */
typedef struct zt_plan_calibration {
  double value[ZT_PLAN_FIG_COUNT];
  zt_plan_source source[ZT_PLAN_FIG_COUNT];
  double spread[ZT_PLAN_FIG_COUNT]; /* measured: (max - min) / median over the runs (0 otherwise) */
  int world, threads;          /* what it was measured at: ranks, threads per rank */
  int reps;
} zt_plan_calibration;

/* ------------------------------------------------ the space and the plan */
typedef struct zt_plan_space {
  zt_lm_config model;
  int64_t batch, seq;          /* global rows per step, tokens per row */
  int64_t microbatches;        /* > 0: only this many per replica; 0: the planner's choices */
  int world;                   /* ranks */
  int64_t mem_limit;           /* per rank (0: the memory available, zt_mem_available) */
  int64_t disk_limit;          /* the disk tier's bytes per rank (0: no limit) */
  zt_offload_tier tier;        /* the tier offload configurations use (default DISK) */
  bool eval_between;           /* an evaluation runs before a later step (default true; zt_plan_space_of: eval_every
                                * below steps): its blocks are cached then (docs/plan.md) */
  unsigned skip;               /* figures zt_plan_calibrate leaves as they are (1u << ZT_PLAN_FIG_...): a run that
                                * uses no disk tier writes no probe; a run by hand measures its base alone */
} zt_plan_space;
ZT_API void zt_plan_space_default(zt_plan_space *sp); /* gpt2-tiny, batch 8, seq 64, 1 rank, disk */

typedef struct zt_plan_entry {
  zt_plan_config config;
  zt_plan_prediction pred;
  bool fits;                   /* pred.rss (and disk_held) within the limits */
  char name[96];               /* "pp2 zb-h1 mb8 x dp2 ddp, recompute full" */
  char why[160];               /* !fits: what passes which limit */
} zt_plan_entry;
typedef struct zt_plan {
  zt_plan_space space;
  zt_plan_calibration cal;
  int64_t limit;               /* the memory limit planned for (space.mem_limit or the memory available) */
  char limit_source[1280];
  int n;                       /* entries: the ones that fit by predicted step, then the rest by RSS */
  zt_plan_entry *entries;
  int chosen;                  /* entries[0] when it fits, else -1 */
  /* chosen -1: the smallest limit some configuration fits (predicted at that limit: the allocator's
   * cache grows with the limit) and that configuration */
  int64_t smallest_limit;
  zt_plan_entry smallest;
} zt_plan;

/* Predict one configuration of sp under cal. A configuration that cannot run (pp x dp not the
 * world, a schedule that needs more microbatches, ...) is ZT_STATUS_INVALID_ARG saying why. */
ZT_API ZT_NODISCARD zt_status zt_plan_predict(const zt_plan_space *sp, const zt_plan_calibration *cal,
                                              const zt_plan_config *c, zt_plan_prediction *out);
/* Enumerate, predict and rank (*out: free with zt_plan_free). Nothing fits: ZT_OK with chosen -1;
 * zt_plan_refusal says why. */
ZT_API ZT_NODISCARD zt_status zt_plan_make(const zt_plan_space *sp, const zt_plan_calibration *cal, zt_plan **out);
ZT_API void zt_plan_free(zt_plan *p);
/* ZT_STATUS_OOM naming the limit, the smallest limit some configuration fits and that
 * configuration, when nothing fits p's limit; ZT_OK otherwise. */
ZT_API ZT_NODISCARD zt_status zt_plan_refusal(const zt_plan *p);

/* c's options into t (memory, parallel, data.microbatches); the rest of t is left alone. */
ZT_API void zt_plan_config_apply(const zt_plan_config *c, zt_train_config *t);
/* The configuration t asks for at world ranks (for a prediction of a run configured by hand). */
ZT_API void zt_plan_config_of(const zt_train_config *t, int world, zt_plan_config *out);
/* A short name of c (as zt_plan_entry.name). */
ZT_API void zt_plan_config_name(const zt_plan_config *c, char *buf, size_t cap);
/* The space a training config is in at world ranks: its model, batch, seq, microbatches and limit. */
ZT_API ZT_NODISCARD zt_status zt_plan_space_of(const zt_train_config *t, int world, zt_plan_space *out);

/* ------------------------------------------------ files */
/* The plan as JSON (atomically): the space, the calibration with each figure's source, every entry
 * with its options (zt train's names and values), prediction and why. */
ZT_API ZT_NODISCARD zt_status zt_plan_write(const zt_plan *p, const char *path);
/* A plan file's chosen configuration (or entry `index` >= 0) into out, and what it predicted into pred
 * (may be NULL), for zt train --plan FILE. A plan made for another space than want (the model's
 * family and sizes, batch, seq, world) is refused, saying what differs. */
ZT_API ZT_NODISCARD zt_status zt_plan_read(const char *path, int index, const zt_plan_space *want, zt_plan_config *out,
                                           zt_plan_prediction *pred);
/* c as zt train's flags ("--pp 2 --schedule zb-h1 --shard none --microbatches 8 --recompute none"). */
ZT_API void zt_plan_config_flags(const zt_plan_config *c, char *buf, size_t cap);

/* ------------------------------------------------ calibration */
/* Every figure from its default (source DEFAULT). */
ZT_API void zt_plan_calibration_default(zt_plan_calibration *out);
/* Measure every figure for sp's model at this process's threads, reps times each (median kept):
 * collective over comm (NULL: one process; the communication figures stay defaults), every rank
 * computing at once as in a run. dir: where the disk tier is probed (NULL: $TMPDIR or /tmp). */
ZT_API ZT_NODISCARD zt_status zt_plan_calibrate(zt_comm *comm, const zt_plan_space *sp, const char *dir, int reps,
                                                zt_plan_calibration *out);
/* A calibration as JSON, and back (figures it lacks stay as they were, a read one is GIVEN). */
ZT_API ZT_NODISCARD zt_status zt_plan_calibration_write(const zt_plan_calibration *c, const char *path);
ZT_API ZT_NODISCARD zt_status zt_plan_calibration_read(const char *path, zt_plan_calibration *c);
/* The environment's ZT_PLAN_CALIBRATION ("gemm=G,attn=G,elem=BPS,read=BPS,write=BPS,lat=S,bw=BPS,
 * base=BYTES", any of them; "gflops" is gemm's older name, sizes may end in K, M or G) over c (GIVEN):
 * so that tests plan the same on a loaded machine as on an idle one. */
ZT_API ZT_NODISCARD zt_status zt_plan_calibration_env(zt_plan_calibration *c);

/* ------------------------------------------------ a run's plan (src/train/plan_run.c) */
typedef struct zt_plan_run {
  zt_plan_entry entry;         /* the configuration the run takes, and its prediction */
  zt_plan_calibration cal;
  int64_t limit;               /* the memory per rank planned for */
  char limit_source[1280];
  int candidates, fitting;     /* auto: the configurations predicted, and how many of them fit */
  char source[640];            /* where the configuration came from, as a phrase */
  bool planned;                /* the planner's (auto or a file), not the options as given */
} zt_plan_run;
/* The calibration a run of c plans with: c->plan_calibration's file, then ZT_PLAN_CALIBRATION, then
 * what is still a default measured here, reps runs a figure (reps 0: left a default). Collective
 * over comm when it measures. */
ZT_API ZT_NODISCARD zt_status zt_plan_calibration_for(const zt_train_config *c, zt_comm *comm, const zt_plan_space *sp,
                                                      int reps, zt_plan_calibration *out);
/* Resolve c->plan for a run at comm's world (NULL: one process; collective over comm):
 * - "auto": plan and write the fastest fitting configuration's options into c; a limit nothing fits
 *   is ZT_STATUS_OOM before anything is allocated, naming the smallest limit that works and the
 *   configuration that needs it;
 * - "FILE" / "FILE:N": the plan file's chosen (or N-th) configuration's options into c;
 * - "": the options as given, predicted.
 * The calibration: c->plan_calibration's file, then ZT_PLAN_CALIBRATION, then what is still a
 * default measured here. c->plan is cleared; the caller prints out. */
ZT_API ZT_NODISCARD zt_status zt_train_plan(zt_train_config *c, zt_comm *comm, zt_plan_run *out);

#endif
