/* zerotrain pipeline schedules as data (src/strategies/pipeline/): per rank, an ordered list
 * of actions (F, B, W, BW, sends and receives) that is generated or read from text, lowered
 * to explicit communication, validated before it runs, simulated and rendered, and run by
 * the executor (execute.c: every stage in one process, or across the ranks of a zt_comm).
 * docs/pipeline-schedules.md describes the text form, the generators and the simulator's
 * model.
 *
 *   zt_pipeline_schedule *s;  zt_pipeline_sim *sim;
 *   zt_pipeline_generate(&(zt_pipeline_gen_options){.name = "zb-h1", .ranks = 4, .microbatches = 8}, &s);
 *   zt_pipeline_validate(s);
 *   zt_pipeline_costs c = zt_pipeline_costs_default();
 *   zt_pipeline_simulate(s, &c, &sim);     ... sim->bubble_rate, sim->peak_activations[r] ...
 *   zt_pipeline_sim_free(sim);  zt_pipeline_schedule_free(s);
 */
#ifndef ZT_PIPELINE_H
#define ZT_PIPELINE_H

#include "zt/status.h"
#include "zt/tensor.h"
#include "zt/comm.h"

/* What an action does. Stage numbers are global (0 .. ranks*chunks-1). B computes the input
 * gradients of a stage, W its weight gradients, BW both (a plain backward). SEND_F s m sends
 * stage s's output of microbatch m to stage s+1; RECV_F s m receives stage s's input (from
 * stage s-1); SEND_B s m sends stage s's input gradient to stage s-1; RECV_B s m receives
 * stage s's output gradient (from stage s+1). */
typedef enum zt_pipeline_op {
  ZT_PIPELINE_OP_F,
  ZT_PIPELINE_OP_B,
  ZT_PIPELINE_OP_W,
  ZT_PIPELINE_OP_BW,
  ZT_PIPELINE_OP_SEND_F,
  ZT_PIPELINE_OP_RECV_F,
  ZT_PIPELINE_OP_SEND_B,
  ZT_PIPELINE_OP_RECV_B,
  ZT_PIPELINE_OP_COUNT
} zt_pipeline_op;

typedef struct zt_pipeline_action {
  zt_pipeline_op op;
  int stage; /* global stage index */
  int mb;    /* microbatch */
} zt_pipeline_action;

/* Which rank holds stage s (of S = ranks*chunks): LOOP: s % ranks (chunk s / ranks; 1F1B,
 * interleaved); V (chunks == 2): rank r holds stages r and 2*ranks-1-r (ZB-V, V-Half, V-Min,
 * DualPipeV), so the first and the last stage are both on rank 0. */
typedef enum zt_pipeline_placement { ZT_PIPELINE_PLACEMENT_LOOP, ZT_PIPELINE_PLACEMENT_V } zt_pipeline_placement;

/* A schedule: plain data, owned by whoever made it (free with zt_pipeline_schedule_free).
 * actions[r][0 .. n_actions[r]) is rank r's program, in order. */
typedef struct zt_pipeline_schedule {
  int ranks, chunks, microbatches;
  zt_pipeline_placement placement;
  char name[32]; /* the generator's name, or "custom" */
  int *n_actions;
  zt_pipeline_action **actions;
  int *cap_; /* private: capacity of each actions[r] */
} zt_pipeline_schedule;

/* ---- sizes ----
 * The largest schedule the library makes, reads, checks and simulates: ranks, chunks per rank
 * and microbatches within these bounds, and at most ZT_PIPELINE_MAX_SLOTS (stage, microbatch)
 * pairs (ranks x chunks x microbatches). Checking and simulating a schedule takes about
 * ZT_PIPELINE_BYTES_PER_SLOT bytes a pair (its actions with their sends and receives, their
 * simulated times, the validator's index), so the cap holds that to about 2/3 GiB. Larger
 * shapes are refused before anything is allocated (ZT_STATUS_INVALID_ARG naming the bound
 * and the memory they would take). A schedule file has at most ZT_PIPELINE_MAX_FILE_BYTES
 * (room for the text of the largest schedule, sends and receives included). */
#define ZT_PIPELINE_MAX_RANKS 1024
#define ZT_PIPELINE_MAX_CHUNKS 64
#define ZT_PIPELINE_MAX_MICROBATCHES 100000
#define ZT_PIPELINE_MAX_SLOTS (1 << 21)
#define ZT_PIPELINE_BYTES_PER_SLOT 320
#define ZT_PIPELINE_MAX_FILE_BYTES ((size_t)256 << 20)

/* An empty schedule (ranks, chunks, microbatches within the bounds above; V placement needs
 * chunks == 2: ZT_STATUS_INVALID_ARG saying which). *out is the caller's. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_schedule_new(int ranks, int chunks, int microbatches,
                                                       zt_pipeline_placement placement, zt_pipeline_schedule **out);
ZT_API void zt_pipeline_schedule_free(zt_pipeline_schedule *s);
/* Append a to rank r's list (no checks beyond r's range and the list's length: the validator
 * judges the whole). A list longer than a valid schedule's can be (7 actions per stage of the
 * rank and microbatch: F, B, W and four transfers) is ZT_STATUS_INVALID_ARG. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_schedule_push(zt_pipeline_schedule *s, int r, zt_pipeline_action a);
/* The rank that holds stage `stage` (-1 when out of range), and the stage count. */
ZT_API int zt_pipeline_stage_rank(const zt_pipeline_schedule *s, int stage);
ZT_API int zt_pipeline_stage_count(const zt_pipeline_schedule *s);
/* Whether any rank's list has a SEND or RECV (the "with communication" form). */
ZT_API bool zt_pipeline_has_comm(const zt_pipeline_schedule *s);

/* ---- text form (ir.c) ----
 * One header line, then one line per rank, tokens separated by spaces; '#' starts a comment:
 *   zt-pipeline ranks=2 chunks=1 microbatches=2 placement=loop
 *   0: 0F0 0F1 0BW0 0BW1
 *   1: 1F0 1BW0 1F1 1BW1
 * A token is STAGE KIND MB: 1F3, 0W2, 1SEND_B3 (kinds F B W BW SEND_F RECV_F SEND_B RECV_B). */
/* The token of a ("1SEND_B3"); buf of 32 bytes; returns buf. */
ZT_API const char *zt_pipeline_action_str(zt_pipeline_action a, char *buf);
/* Parse one token (ZT_STATUS_INVALID_ARG saying what is wrong with it). */
ZT_API ZT_NODISCARD zt_status zt_pipeline_action_parse(const char *tok, zt_pipeline_action *out);
/* The text form of s in a malloc'd string (*out, the caller frees it with free()). */
ZT_API ZT_NODISCARD zt_status zt_pipeline_schedule_format(const zt_pipeline_schedule *s, char **out);
/* Parse the text form (errors name the line and the token). Parsing does not validate. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_schedule_parse(const char *text, zt_pipeline_schedule **out);
/* Read a schedule file: a regular file only (a FIFO, a device or a folder is ZT_STATUS_IO
 * naming what it is, before any read), of at most ZT_PIPELINE_MAX_FILE_BYTES, without NUL
 * bytes (named with their line) or a UTF-8 byte-order mark (named as such); parsed as above,
 * errors prefixed with the path. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_schedule_read(const char *path, zt_pipeline_schedule **out);
ZT_API ZT_NODISCARD zt_status zt_pipeline_schedule_write(const zt_pipeline_schedule *s, const char *path);

/* ---- costs (simulate.c) ----
 * Costs of one microbatch through one rank's share of the model (1/ranks of it); a chunk of a
 * schedule with V chunks per rank costs 1/V of them. comm is per hop between ranks (a hop
 * within one rank is free). bytes_per_unit: bytes of one unit of activations (below); 0: none. */
typedef struct zt_pipeline_costs {
  double f, b, w, comm;
  double bytes_per_unit;
  /* Optional: per stage (3 x the schedule's stage count values: F, B, W of one microbatch
   * through stage 0, then stage 1, ...), for stages that cost differently (GPT-2's first
   * stage has no input grads to compute, its last the head); then f, b, w are not used for
   * the compute actions. Borrowed. NULL: every stage costs f/V, b/V, w/V. */
  const double *stage;
} zt_pipeline_costs;
/* Every cost is a finite number in [0, ZT_PIPELINE_MAX_COST] (bytes_per_unit in [0, 1e18]):
 * the simulator sums millions of them, and NaN, infinity or 1e308 would make every time
 * meaningless. zt_pipeline_simulate and zt_pipeline_generate refuse others
 * (ZT_STATUS_INVALID_ARG naming the value). */
#define ZT_PIPELINE_MAX_COST 1e12
/* f = b = w = 1, comm = 0, bytes_per_unit 0, no per-stage costs. */
ZT_API zt_pipeline_costs zt_pipeline_costs_default(void);

/* ---- generators (generators.c, greedy.c) ----
 * names: gpipe 1f1b interleaved zb-h1 zb-h2 zb-v v-half v-min dualpipev auto. */
typedef struct zt_pipeline_gen_options {
  const char *name;
  int ranks, microbatches;
  int chunks;           /* interleaved: V >= 2 (0: 2); the V-shape families: 2 (0: 2); auto: 1 or 2 (0: the
                         * better of both); others 1 */
  zt_pipeline_costs costs; /* auto: the costs to plan for (all zero: the defaults) */
  double mem_limit;     /* auto: activations per rank, in units (0: no limit) */
} zt_pipeline_gen_options;
/* The space-separated list of generator names. */
ZT_API const char *zt_pipeline_generator_names(void);
/* Generate a compute-only schedule (*out, the caller's). An unknown name, or M below what the
 * family needs, is ZT_STATUS_INVALID_ARG saying the minimum. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_generate(const zt_pipeline_gen_options *o, zt_pipeline_schedule **out);

/* ---- lowering (lower.c) ----
 * The with-communication form of a compute-only s: every hop between ranks gets a RECV right
 * before the action that needs it (not earlier: an early receive blocks the rank behind a
 * message it does not need yet) and a SEND right after the action that produces it. Between
 * two ranks a kind's messages are received in the order they were sent (rule 4 below): a
 * message needed before others sent earlier takes those along, received right before it,
 * which waits for nothing more (they were produced before it). So a valid s lowers to a valid
 * schedule that simulates to the same step. s must be valid (rules 1-5: the validator's error
 * otherwise). */
ZT_API ZT_NODISCARD zt_status zt_pipeline_lower(const zt_pipeline_schedule *s, zt_pipeline_schedule **out);

/* ---- validation (validate.c) ----
 * Run before any schedule executes. Rules, in the order checked (the first broken one is the
 * error, ZT_STATUS_INVALID_ARG, naming the rank, the action and the rule):
 *  1. every action's stage and microbatch are in range and its stage is placed on its rank;
 *  2. per stage and microbatch: F once, and B and W once each or BW once (not both);
 *  3. on its rank, B (or BW) after F, W after B;
 *  4. with communication: every hop has its SEND after the producing action and its RECV before
 *     the consuming one, none within a rank, and between two ranks the sends of each kind
 *     match the receives in order (stage and microbatch);
 *  5. no deadlock: simulating it, every rank finishes (F of stage s waits for F of s-1, B of s
 *     for B of s+1, a RECV for its SEND);
 *  6. a compute-only s also passes 1-5 lowered (zt_pipeline_lower: what zt_pipeline_run
 *     executes), so a schedule that validates runs. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_validate(const zt_pipeline_schedule *s);

/* ---- simulation (simulate.c) ----
 * All ranks start at 0; an action starts when its rank is free and its inputs are there (a
 * producer's end, plus comm when it is on another rank); sends do not block; SEND/RECV take
 * no time of their own. Activations are counted in units of one microbatch through one rank's
 * share of the model: F of a chunk adds 1/V, the end of its W (or BW) takes it back. */
typedef struct zt_pipeline_sim {
  int ranks;
  int *n;              /* actions per rank (those of the schedule) */
  double **start, **end; /* [r][i]: the times of rank r's action i */
  double step_time;    /* the last end over all ranks */
  double bubble_rate;  /* sum of idle / (ranks * step_time) */
  double *busy;        /* per rank: time computing */
  double *idle;        /* per rank: step_time - busy */
  double *idle_in_span; /* per rank: idle between its first start and its last end (the
                           bubble when steps overlap, with no synchronisation between them) */
  double *peak_activations; /* per rank, in units (above) */
  double *peak_bytes;  /* per rank: peak_activations * bytes_per_unit */
} zt_pipeline_sim;
/* Simulate s (validated or not: a deadlock is ZT_STATUS_INVALID_ARG naming what each rank
 * waits for). *out is the caller's (zt_pipeline_sim_free). costs NULL: the defaults. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_simulate(const zt_pipeline_schedule *s, const zt_pipeline_costs *costs,
                                                   zt_pipeline_sim **out);
ZT_API void zt_pipeline_sim_free(zt_pipeline_sim *sim);

/* ---- running a schedule in one process (execute.c) ----
 * The stages of a model, for the executor: forward of stage `stage` for microbatch mb. in is
 * the first stage's input as given (token ids), or the previous stage's output cut from its
 * graph (a leaf that requires grad, borrowed); *out (new) is the stage's output, or for the
 * last stage its loss (one element). */
typedef struct zt_pipeline_stages {
  zt_status (*forward)(void *ctx, int stage, int mb, zt_tensor *in, zt_tensor **out);
  void *ctx;
} zt_pipeline_stages;
/* Run compute-only schedule s (validated first) with every stage in this process: the
 * executor's semantics without transport (the ranks take turns, each keeping its list's
 * order). F runs the stage's forward; B is zt_backward_input from the stage's output with the
 * next stage's input grad (the last stage: its loss times loss_scale); W is
 * zt_backward_weight of B's record; BW both. inputs[mb] feeds the first stage; losses (may be
 * NULL) gets each microbatch's loss (unscaled). The parameters' .grad accumulate as
 * microbatch accumulation does; nothing else is kept. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_run_local(const zt_pipeline_schedule *s, const zt_pipeline_stages *st,
                                                    zt_tensor *const *inputs, double loss_scale, double *losses);

/* Run s across the ranks of comm (one rank per schedule rank; this rank runs its own list):
 * the same semantics as zt_pipeline_run_local, with the hand-over between ranks by
 * non-blocking sends and receives (zt_isend / zt_irecv): a compute-only s is lowered first
 * (each receive right before the action that needs it, each send right after the action
 * that produces it), and an action waits only for the transfer it needs. Every tensor that
 * crosses a stage boundary has the boundary's shape and dtype (GPT-2: the hidden state
 * (B, T, C) f32); a tag per (stage, microbatch, direction) keeps the messages apart. The
 * first stage's inputs[mb] are read on its rank; losses (may be NULL) are filled on the rank
 * of the last stage. Collective over comm. */
typedef struct zt_pipeline_boundary {
  int ndim;
  int64_t shape[8];
  zt_dtype dtype;
} zt_pipeline_boundary;
/* What this rank did, measured (trace, may be NULL): each action of its (lowered) list with
 * its start and end in seconds from the run's start, the time spent computing (F, B, W, BW),
 * the span from the first start to the last end, and the measured bubble rate
 * 1 - busy / span (time waiting for transfers, or for nothing). Free with
 * zt_pipeline_trace_free. */
typedef struct zt_pipeline_trace {
  int n;
  zt_pipeline_action *actions;
  double *start, *end;
  double busy, span, bubble_rate;
} zt_pipeline_trace;
ZT_API void zt_pipeline_trace_free(zt_pipeline_trace *t); /* frees the arrays, zeroes *t */
ZT_API ZT_NODISCARD zt_status zt_pipeline_run(const zt_pipeline_schedule *s, const zt_pipeline_stages *st, zt_comm *comm,
                                              const zt_pipeline_boundary *b, zt_tensor *const *inputs,
                                              double loss_scale, double *losses, zt_pipeline_trace *trace);

/* ---- rendering (render.c): malloc'd strings, the caller frees them ---- */
/* A text timeline: one row per rank, `width` columns (0: 100) for the step time; each action
 * is drawn from its start with its kind's letter, idle time as '.'. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_render_text(const zt_pipeline_schedule *s, const zt_pipeline_sim *sim,
                                                      int width, char **out);
/* An SVG document: one row per rank, a colour per kind, the microbatch number in each box. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_render_svg(const zt_pipeline_schedule *s, const zt_pipeline_sim *sim,
                                                     char **out);
/* n timelines (schedule k with its times sim[k]) stacked in one SVG on one time scale (the
 * longest step spans the width), each under its title (titles or titles[k] NULL: the
 * schedule's name, shape, step and bubble rate), e.g. a measured step above the simulator's
 * prediction. */
ZT_API ZT_NODISCARD zt_status zt_pipeline_render_svg_stack(int n, const zt_pipeline_schedule *const *s,
                                                           const zt_pipeline_sim *const *sim, const char *const *titles,
                                                           char **out);

#endif
