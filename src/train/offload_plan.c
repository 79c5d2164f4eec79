/* The memory planner of zt train --offload-states --mem-limit (zt_offload_plan_make in
 * zt/train.h): for a language model (zt/lm.h) with every state in a store, the peak RAM of each plan (slices N,
 * resident slices K, how backward gets its activations) predicted from the slice cut
 * zt_offload_model_new makes and the bytes each phase of a step holds, and its step time from
 * the measured compute rate and disk bandwidth; the fastest plan that fits is chosen.
 * Invariant: the byte counts follow the residency rules of src/strategies/offload_model*.c
 * (a slice's update holds its parameters, grads and moments: two per parameter, one chunk's for
 * a parameter whose moments pass the update chunk; the next slice is prefetched
 * with its own; backward holds parameters and grads of the slice and the one before) and the
 * activation counts of its family (zt_act_cost); tests/test_offload_plan.c checks the prediction
 * against the accounting's measured peak. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "train/offload_plan.h"
#include "train/plan_internal.h"
#include "zt/plan.h"
#include "zt/train.h"

/* Values per token a block keeps for backward with nothing recomputed (the family's count). */
static double block_kept(const zt_lm_config *g) { return zt_lm_act_cost(g, ZT_RECOMPUTE_NONE, (zt_checkpoint_policy){0}).kept; }

int64_t zt__train_act_write_cap(const zt_lm_config *g, int64_t tokens) {
  return 2 * (int64_t)zt_lm_config_dims(g).ffn * tokens * 4;
}

/* The slices' parameter bytes P[s] (a shared parameter in each slice using it) and blocks
 * nb[s] of the cut count[0..N) over U units of ub bytes; returns the largest P. */
static int64_t slices_of(const int64_t *ub, int U, const int *count, int N, int64_t *P, int *nb) {
  int64_t Pmax = 0;
  for (int s = 0, first = 0; s < N; first += count[s], s++) {
    P[s] = 0, nb[s] = 0;
    for (int u = first; u < first + count[s]; u++) P[s] += ub[u], nb[s] += u > 0 && u < U - 1;
    Pmax = P[s] > Pmax ? P[s] : Pmax;
  }
  return Pmax;
}

/* The moment bytes an update of x parameter bytes holds: AdamW's two copies, or one update
 * chunk's where they pass it (OffloadModel's chunked updates; chunk 0: never). */
static double moments_held(double x, double chunk) { return chunk > 0 && 2.0 * x > chunk ? chunk : 2.0 * x; }

/* The moment bytes each unit's update holds (um[U]): the family's large tensors by their dims,
 * each chunked on its own (the token embedding V x C, and GPT-2's positions, in unit 0; the MLP's
 * ffn x C weights of a block, three gated (Llama) or two; the output layer, a tied embedding
 * again, in the last unit), the rest of a unit counted whole (at the default chunk every one of
 * its tensors is below it). */
static void unit_moments(const zt_offload_plan_input *in, int U, double *um) {
  zt_lm_dims d = zt_lm_config_dims(&in->model);
  double ch = (double)in->update_chunk_bytes, C = d.hidden, VC = (double)d.vocab * C * 4, FC = (double)d.ffn * C * 4;
  double mlp = in->model.family == ZT_LM_LLAMA ? 3 : 2;
  um[0] = moments_held(VC, ch) + moments_held((double)d.embed_params * 4 - VC, ch);
  for (int u = 1; u < U - 1; u++) um[u] = mlp * moments_held(FC, ch) + 2.0 * ((double)d.block_params * 4 - mlp * FC);
  um[U - 1] = moments_held(VC, ch) + 2.0 * ((double)d.out_params * 4 - VC);
}

/* The most RAM plan p can take: its peak, what writes behind may add, and a margin for what the
 * prediction does not model (ZT_OFFLOAD_PLAN_MARGIN). */
static void plan_bound(zt_offload_plan *p) {
  p->bound = p->peak + p->inflight_bytes + ZT_OFFLOAD_PLAN_MARGIN(p->peak);
}

/* What a plan holds at its peak (memory_peak) and how long its step takes (predict). */
typedef struct plan_peak {
  double states, acts; /* at the peak (a view's: below) */
  double bound;        /* the peak with what may be in flight then */
} plan_peak;

/* The kinds of blocks a step holds besides the slices' states, which share no sizes with them
 * nor each other: the activations (and backward's temporaries), the head's chunk of logits, the
 * output layer's weight grad waiting in the engine (a table's size). */
enum { KIND_ACTS = 1, KIND_HEAD = 2, KIND_OUT_GRAD = 4, KIND_ALL = 7 };

/* The peak of N slices of parameter bytes P (nb blocks each, their updates holding Mo moment
 * bytes), K resident, wte of them the table the first and the last slice share (0: none), ram
 * of moments in RAM all along (optim_in_ram), evictions written behind holding at most W (the
 * store's write cap), with the kinds of blocks in kinds; rec as predict's. A view of one kind
 * counts only its own part of the slices (P, Mo, wte, ram: the blocks' or the tables', or none)
 * and its kinds. */
static plan_peak memory_peak(const zt_offload_plan_input *in, const double *P, const double *Mo, const int *nb,
                             double wte, double ram_moments, double W, int kinds, int N, int K,
                             zt_offload_plan_activations act, const bool *rec) {
  const zt_lm_config *g = &in->model;
  zt_lm_dims d = zt_lm_config_dims(g);
  double C = d.hidden, V = d.vocab, F = d.ffn;
  double t = (double)in->rows / (double)in->microbatches * (double)in->seq; /* tokens of a chunk */
  /* the output layer's weight (its grad waits in the engine in keep-graph mode) */
  double out_w = V * C * 4;
  /* activations of one chunk (t tokens): a block keeps block_kept values per token; one
   * block's backward temporaries (ZT_OFFLOAD_PLAN_TEMP per token); a slice's boundary activation
   * and its grad; the head's chunk of logits, its grad made in place (measured: one chunk's
   * size live at most, gpt2-124m; the output layer's wte grad waits
   * in the engine in keep-graph mode); offloaded: the offload's own RAM, two of the largest (4C):
   * in forward the copies of saves being written behind (its write cap, zt__train_act_write_cap,
   * is this much), in backward a prefetch window (whose entries not yet written are their own
   * copies, taken back, in place of their loads) */
  double kept = block_kept(g) * t * 4, temp = ZT_OFFLOAD_PLAN_TEMP * C * t * 4, edge = 2 * C * t * 4;
  double head_rows = zt__plan_head_rows(t, V), head = head_rows * V * 4 + head_rows * 8;
  double window = (double)zt__train_act_write_cap(g, (int64_t)t);
  double out_grad = kinds & KIND_OUT_GRAD ? out_w : 0;
  if (!(kinds & KIND_ACTS)) kept = temp = edge = window = 0;
  if (!(kinds & KIND_HEAD)) head = 0;
  /* what evicting slice e may have in flight: W, or its largest tensor alone (a block's: the MLP's
   * weights; the embedding's and the head's: wte) */
#define FLY(e) ((e) < 0 || (e) >= N ? 0.0 : fmax(W, (e) == 0 || (e) == N - 1 ? fmax(out_w, 4 * F * C) : 4 * F * C))
  /* the peak over the phases of a step (M chunks; lazy updates), each phase's resident bytes
   * and what may also be in flight there (written behind: counted when the disk falls behind):
   * forward, slice s >= K: its load with its update's state (parameters, grads, moments: 4x its
   *   parameter bytes, less where moments are updated a chunk at a time) beside the slice before it computing (K 2), whose update's moments are
   *   then being written behind (when it had one), with the activations kept so far (keep-graph),
   *   the boundary activation (recompute) or none (activation offload: the copies being written
   *   behind, up to its cap, in flight); slices below K were updated at the last step's end and
   *   come in with their grads only (keep-graph with M > 1);
   * backward, slice s, as it starts: its parameters, the slice before it prefetched (with grads
   *   when an earlier chunk made them: keep-graph with M > 1) or, at the first slice, the one
   *   after it still in RAM with its grads (K 2), and the activations backward holds there; as it
   *   ends: its grads too, its own activations gone; at the first slice the tied embedding's
   *   later contributions beside; the slice evicted for the prefetch writes its grads behind;
   * the step's end (below) */
  bool prev_grads = act != ZT_OFFLOAD_PLAN_RECOMPUTE && in->microbatches > 1;
  bool ram = in->optim_in_ram; /* no moments pass through the store: Mo is 0, none written behind */
  double peak = 0, states = 0, acts = 0, bound = 0, blocks_before = 0;
  double P1 = N >= 2 ? P[1] - (N == 2 ? wte : 0) : 0; /* two slices share the tied embedding */
  double M1 = N >= 2 ? Mo[1] - (N == 2 && wte > 0 ? moments_held(wte, (double)in->update_chunk_bytes) : 0) : 0;
  for (int s = 0; s < N; s++) {
    double Ps = P[s];
    double prev = K >= 2 && s > 0 ? P[s - 1] - (N == 2 ? wte : 0) : 0;
    double phase_st[3], phase_act[3], phase_fly[3];
    phase_st[0] = (s >= K ? 2.0 * Ps + Mo[s] : prev_grads ? 2.0 * Ps : Ps) + prev;
    phase_act[0] = act == ZT_OFFLOAD_PLAN_KEEP ? blocks_before * kept : act == ZT_OFFLOAD_PLAN_OFFLOAD ? 0 : edge;
    bool upd_behind = !ram && K >= 2 && s - 1 >= K; /* the slice before updated at its load: its moments written behind */
    if (upd_behind) phase_st[0] += W;
    /* the slice evicted for this one (K 2: two before, for the prefetch; K 1: the one before) */
    phase_fly[0] = (upd_behind ? 0 : FLY(s - K)) + (act == ZT_OFFLOAD_PLAN_OFFLOAD ? window : 0);
    double b_prev = s > 0 ? prev * (prev_grads ? 2.0 : 1.0) : K >= 2 && N >= 2 ? 2.0 * P1 : 0;
    double tied = s == 0 && N > 1 ? wte : 0;
    phase_st[1] = (prev_grads ? 2.0 : 1.0) * Ps + b_prev + tied; /* its grads of an earlier chunk came with it */
    phase_act[1] = act == ZT_OFFLOAD_PLAN_KEEP        ? (blocks_before + nb[s]) * kept + temp
                   : act == ZT_OFFLOAD_PLAN_OFFLOAD ? window + temp + edge
                                                      : nb[s] * kept + temp + edge;
    if (kinds & KIND_ACTS && rec && rec[s] && nb[s])
      phase_act[1] += block_kept(g) * t * 4; /* a recomputed block's activations */
    /* the head: its chunk of logits, and with a grad of an earlier chunk the output layer's dW made
     * apart (TEMP) to be added into it (measured: gpt2-124m 6 slices, mb2 keep-graph: 147 MiB of
     * TEMP there, the logits chunk gone); the output layer's weight grad beside, made before the
     * slice's other grads (waiting in the engine in keep-graph mode; measured in recompute mode:
     * smollm-135m 8 slices, its 108 MiB beside the logits chunk) */
    if (s == N - 1) phase_act[1] += fmax(head, prev_grads ? out_grad : 0) + out_grad;
    phase_st[2] = 2.0 * Ps + b_prev + tied;
    phase_act[2] = (act == ZT_OFFLOAD_PLAN_KEEP ? blocks_before * kept : act == ZT_OFFLOAD_PLAN_OFFLOAD ? window : 0) + edge;
    phase_fly[1] = phase_fly[2] = K == 1 || s > 0 ? FLY(s + 1) : 0; /* the slice after, its grads written behind */
    for (int f = 0; f < 3; f++) {
      if (phase_st[f] + phase_act[f] > peak) peak = phase_st[f] + phase_act[f], states = phase_st[f], acts = phase_act[f];
      bound = fmax(bound, phase_st[f] + phase_act[f] + phase_fly[f]);
    }
    blocks_before += nb[s];
  }
  /* the step's end: backward leaves the first slices in RAM with their grads, and their
   * updates run at once, one slice after the other (its moments in, AdamW, its grads freed and
   * its moments out): slice 0's update beside slice 1's grads, then slice 1's (with two slices
   * the tied embedding is slice 0's, updated with it). AdamW outruns the disk: each parameter's
   * moments go out written behind while the next ones' are read within the slice's, so with a
   * second slice in the run about half the cap's worth more is in RAM than the run's start holds
   * (all of it, when the disk falls behind) */
  bool two = K >= 2 && N >= 2; /* the run goes on into slice 1 (with slice 0 alone, nothing more is read) */
  double P0 = P[0];
  double behind = two && !ram ? W / 2 : 0;
  double end = two ? fmax(2.0 * P0 + Mo[0] + 2.0 * P1, P0 + 2.0 * P1 + M1) + behind : 2.0 * P0 + Mo[0];
  if (end > peak) peak = end, states = end, acts = 0; /* backward's activations are gone */
  bound = fmax(bound, end + behind); /* one slice alone: its moments in flight were in RAM anyway */
  /* each resident slice past two: a middle one (the first and the last are counted above) loaded
   * ahead with its grads and its update's moments (measured, gpt2-124m 14 slices 3 resident: one
   * block's parameters and grads more) */
  double mid = 0;
  for (int s = 1; s < N - 1; s++) mid = fmax(mid, 2.0 * P[s] + Mo[s]);
  if (K > 2) states += (double)(K - 2) * mid, bound += (double)(K - 2) * mid;
  states += ram_moments, bound += ram_moments; /* in RAM the whole step */
#undef FLY
  return (plan_peak){states, acts, bound};
}

/* What one plan holds at its peak, and how long a step takes. rec (OFFLOAD only; NULL: none):
 * the slices whose blocks are recomputed instead of offloaded. */
static void predict(const zt_offload_plan_input *in, const int64_t *ub, int U, const int *count, int N, int K,
                    zt_offload_plan_activations act, const bool *rec, zt_offload_plan *p) {
  const zt_lm_config *g = &in->model;
  zt_lm_dims d = zt_lm_config_dims(g);
  double C = d.hidden, L = d.n_layer, A = d.attn_width;
  int64_t P[ZT_OFFLOAD_PLAN_MAX_UNITS] = {0};
  int nb[ZT_OFFLOAD_PLAN_MAX_UNITS] = {0};
  slices_of(ub, U, count, N, P, nb);
  double um[ZT_OFFLOAD_PLAN_MAX_UNITS], Mo[ZT_OFFLOAD_PLAN_MAX_UNITS] = {0};
  unit_moments(in, U, um);
  for (int s = 0, first = 0; s < N && !in->optim_in_ram; first += count[s], s++)
    for (int u = first; u < first + count[s]; u++) Mo[s] += um[u];
  /* the slices whole, and apart by kind of block: the blocks' (the same shapes in every block)
   * and the tables' (the rest of the parameters), each with its moments */
  double Pd[ZT_OFFLOAD_PLAN_MAX_UNITS], Pb[ZT_OFFLOAD_PLAN_MAX_UNITS], Pt[ZT_OFFLOAD_PLAN_MAX_UNITS];
  double Mb[ZT_OFFLOAD_PLAN_MAX_UNITS], Mt[ZT_OFFLOAD_PLAN_MAX_UNITS], none[ZT_OFFLOAD_PLAN_MAX_UNITS] = {0};
  double blk = (double)d.block_params * 4;
  for (int s = 0; s < N; s++) {
    Pd[s] = (double)P[s], Pb[s] = nb[s] * blk, Pt[s] = Pd[s] - Pb[s];
    Mb[s] = in->optim_in_ram ? 0 : nb[s] * um[1], Mt[s] = Mo[s] - Mb[s];
  }
  double wte = d.tied ? (double)d.vocab * C * 4 : 0;
  /* evictions written behind hold their RAM until written, at most the store's write cap W (the
   * smallest slice's parameters; one tensor larger than W goes alone) */
  double W = (double)in->write_cap_bytes;
  for (int s = 0; s < N; s++) W = fmin(W, Pd[s]);
  double ram = in->optim_in_ram ? 2.0 * (double)d.params * 4 : 0, ram_b = in->optim_in_ram ? 2.0 * blk * L : 0;
  plan_peak pk = memory_peak(in, Pd, Mo, nb, wte, ram, W, KIND_ALL, N, K, act, rec);
  /* the allocator's cache keeps a freed block for the next of its size, and the kinds share no
   * sizes: it ends up holding each kind at its own peak over the step (measured per block size,
   * gpt2-124m 4 to 14 slices and smollm-135m 8: within 1% but for smollm's blocks, 9% short: their
   * peak came with the slice after the computing one still on its way to the disk) */
  plan_peak kb = memory_peak(in, Pb, Mb, nb, 0, ram_b, W, 0, N, K, act, NULL);
  plan_peak kt = memory_peak(in, Pt, Mt, nb, wte, ram - ram_b, W, KIND_OUT_GRAD, N, K, act, NULL);
  plan_peak ka = memory_peak(in, none, none, nb, 0, 0, W, KIND_ACTS, N, K, act, rec);
  plan_peak kh = memory_peak(in, none, none, nb, 0, 0, W, KIND_HEAD, N, K, act, NULL);
  p->held_bytes = (int64_t)(kb.states + kt.states + kt.acts + ka.acts + kh.acts);
  double st = pk.states, a = pk.acts, bound = pk.bound;
  p->slices = N, p->resident = K, p->activations_mode = act, p->trial = false;
  /* the recomputed blocks, a letter each */
  double rec_blocks = 0;
  p->recompute_plan[0] = '\0';
  p->recomputed_slices = 0;
  for (int s = 0, b = 0; rec && s < N; s++) {
    p->recomputed_slices += rec[s] && nb[s];
    for (int j = 0; j < nb[s]; j++) p->recompute_plan[b++] = rec[s] ? 'f' : 'n';
    rec_blocks += rec[s] ? nb[s] : 0;
    p->recompute_plan[b] = '\0';
  }
  if (!p->recomputed_slices) p->recompute_plan[0] = '\0';
  p->states_bytes = (int64_t)st;
  p->activation_bytes = (int64_t)a;
  p->io_bytes = in->io_bytes * (act == ZT_OFFLOAD_PLAN_OFFLOAD ? 2 : 1); /* the activations' own store too */
  p->fixed_bytes = in->fixed_bytes;
  p->cache_bytes = in->cache_bytes;
  p->write_cap_bytes = (int64_t)W;
  p->peak = p->states_bytes + p->activation_bytes + p->io_bytes + p->cache_bytes + p->fixed_bytes;
  p->inflight_bytes = (int64_t)(bound - (st + a)); /* what the disk falling behind may add to the peak */
  plan_bound(p);
  /* time: compute (recompute runs the forward twice: 4/3 of a step's FLOPs) against the disk's
   * bytes per step (below; activations both ways when offloaded), whichever is longer */
  double n_params = (double)d.params, tokens = (double)in->rows * (double)in->seq;
  double flops = zt_lm_flops_per_step(&d, in->rows, in->seq);
  double comp = in->gflops > 0 ? flops / (in->gflops * 1e9) : 0;
  if (act == ZT_OFFLOAD_PLAN_RECOMPUTE) comp *= 4.0 / 3.0;
  /* a recomputed block runs its forward again (2 x its parameters + the attention's 4 T C per
   * token) and sends only its input to the tier */
  if (in->gflops > 0) comp += rec_blocks * (2.0 * (double)d.block_params + 4.0 * (double)in->seq * A) * tokens / (in->gflops * 1e9);
  /* bytes a parameter: its value in for forward and backward and out updated, its grad out (8 and
   * 8); with the moments in the tier, the lazy update's grad and moments in and the moments out
   * (12 and 12); keep-graph's chunks past the first each load the slices again in both passes with
   * the grads of the ones before (16) and write their grads (4). Measured, gpt2-124m: 4 slices 2
   * resident, moments in RAM, 7.9 and 6.7 read and written (recompute), 6.6 and 5.4 (keep-graph);
   * 6 slices with 2 microbatches in keep-graph 22.3 and 13.1 (the resident slices are not loaded) */
  double per_rd = 8.0 + (in->optim_in_ram ? 0 : 12.0), per_wr = per_rd;
  if (act != ZT_OFFLOAD_PLAN_RECOMPUTE)
    per_rd += 16.0 * (double)(in->microbatches - 1), per_wr += 4.0 * (double)(in->microbatches - 1);
  double rd = per_rd * n_params, wr = per_wr * n_params;
  double act_bytes = ((L - rec_blocks) * block_kept(g) + rec_blocks * C) * tokens * 4;
  if (act == ZT_OFFLOAD_PLAN_OFFLOAD) rd += act_bytes, wr += act_bytes;
  double io = (in->read_bps > 0 ? rd / in->read_bps : 0) + (in->write_bps > 0 ? wr / in->write_bps : 0);
  p->compute_s = comp;
  p->io_s = io;
  p->read_bytes = (int64_t)rd, p->written_bytes = (int64_t)wr;
  p->step_s = zt__offload_plan_step_s(comp, io, K, act);
}

double zt__offload_plan_step_s(double comp, double io, int K, zt_offload_plan_activations act) {
  /* with a slice prefetched (K >= 2) the disk works while the compute does; with one slice in RAM
   * nothing is prefetched and each load waits for the compute before it and holds up the compute
   * after it (measured: gpt2-124m, 11 slices, 1 resident, 4.9 s a step against 3.1 s for the
   * longer of the two) */
  if (K < 2) return comp + io;
  /* recompute mode overlaps its disk and compute only in part: measured max + 0.44-0.51 of the
   * shorter (gpt2-124m 6 slices, smollm-135m 16, 2 resident; where the rest goes is not traced);
   * keep-graph within 4% of the max, with several chunks too (gpt2-124m 6 slices, 2 microbatches:
   * 3.33 s against a disk's 3.4 s) */
  return fmax(comp, io) + (act == ZT_OFFLOAD_PLAN_RECOMPUTE ? 0.5 * fmin(comp, io) : 0);
}

const char *zt_offload_plan_activations_name(zt_offload_plan_activations a) {
  return a == ZT_OFFLOAD_PLAN_KEEP ? "keep-graph" : a == ZT_OFFLOAD_PLAN_OFFLOAD ? "keep-graph + activation offload"
                                                                                : "recompute";
}

/* The units' parameter bytes (embeddings, blocks, the output part with a tied embedding again),
 * as zt_lm_offload_units counts them; *U their count. */
static zt_status units_of(const zt_offload_plan_input *in, int64_t *ub, int *U, const char *fn) {
  if (!in) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: input is NULL", fn);
  ZT_TRY(zt_lm_config_validate(&in->model));
  zt_lm_dims d = zt_lm_config_dims(&in->model);
  *U = d.n_layer + 2;
  if (*U > ZT_OFFLOAD_PLAN_MAX_UNITS)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "%s: %d layers; the planner handles at most %d", fn, d.n_layer,
                  ZT_OFFLOAD_PLAN_MAX_UNITS - 2);
  if (in->rows < 1 || in->seq < 1 || in->microbatches < 1 || in->rows % in->microbatches)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %lld rows in %lld microbatches of seq %lld", fn, (long long)in->rows,
                  (long long)in->microbatches, (long long)in->seq);
  ub[0] = d.embed_params * 4;
  for (int u = 1; u < *U - 1; u++) ub[u] = d.block_params * 4;
  ub[*U - 1] = d.out_params * 4;
  return ZT_OK;
}

/* The cut and its prediction behind both entry points: fn names the caller in messages; limit > 0
 * gives the cache what the limit leaves (fill_cache), 0 keeps in->cache_bytes. */
static zt_status predict_cut(const char *fn, const zt_offload_plan_input *in, int slices, int resident,
                             zt_offload_plan_activations act, const char *recompute_plan, int64_t limit,
                             zt_offload_plan *out);

zt_status zt_offload_plan_predict(const zt_offload_plan_input *in, int slices, int resident,
                                  zt_offload_plan_activations act, zt_offload_plan *out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_plan_predict: out is NULL");
  return predict_cut("zt_offload_plan_predict", in, slices, resident, act, NULL, 0, out);
}

/* Activation offload with the q slices of most blocks (the later first among equals)
 * recomputed instead, for q = 0..N: the fastest (the fewest recomputed among equals); *all: every
 * slice recomputed (what the activation trial holds at its most). */
static void predict_offload(const zt_offload_plan_input *in, const int64_t *ub, int U, const int *count, int N, int K,
                            zt_offload_plan *best, zt_offload_plan *all) {
  bool rec[ZT_OFFLOAD_PLAN_MAX_UNITS] = {false};
  int64_t P[ZT_OFFLOAD_PLAN_MAX_UNITS];
  int nb[ZT_OFFLOAD_PLAN_MAX_UNITS];
  slices_of(ub, U, count, N, P, nb);
  predict(in, ub, U, count, N, K, ZT_OFFLOAD_PLAN_OFFLOAD, NULL, best);
  for (int q = 1; q <= N; q++) {
    int pick = -1; /* the next slice to recompute */
    for (int s = N - 1; s >= 0; s--)
      if (!rec[s] && nb[s] && (pick < 0 || nb[s] > nb[pick])) pick = s;
    if (pick < 0) break;
    rec[pick] = true;
    zt_offload_plan p;
    predict(in, ub, U, count, N, K, ZT_OFFLOAD_PLAN_OFFLOAD, rec, &p);
    if (p.step_s < best->step_s * 0.999) *best = p;
  }
  /* the activation trial recomputes every slice for a step: that holds the most (a recomputed
   * block's activations at backward's start, beside what offloading holds) */
  for (int s = 0; s < N; s++) rec[s] = true;
  predict(in, ub, U, count, N, K, ZT_OFFLOAD_PLAN_OFFLOAD, rec, all);
}

/* With the activation trial where both of its ways fit limit: p runs it, its peak the larger. */
static void with_trial(const zt_offload_plan *all, int64_t limit, zt_offload_plan *p) {
  if (all->bound > limit) return; /* the prediction's choice stays */
  p->trial = true;
  if (all->peak > p->peak) p->states_bytes = all->states_bytes, p->activation_bytes = all->activation_bytes, p->peak = all->peak;
  if (all->peak + all->inflight_bytes > p->peak + p->inflight_bytes) p->inflight_bytes = all->peak + all->inflight_bytes - p->peak;
  plan_bound(p);
}

/* The plans' preferred margin under the limit: the prediction's error is within 10%. */
#define MARGIN 0.85

/* The allocator's cache: what limit leaves under the 15% margin, between in->cache_bytes and
 * in->cache_max_bytes, and no more than four copies of the largest slice's parameters (a step
 * frees and allocates that much again per slice; a larger cache would not fill). */
static void fill_cache(const zt_offload_plan_input *in, const int64_t *ub, int U, const int *count, int64_t limit,
                       zt_offload_plan *p) {
  int64_t P[ZT_OFFLOAD_PLAN_MAX_UNITS];
  int nb[ZT_OFFLOAD_PLAN_MAX_UNITS];
  int64_t Pmax = slices_of(ub, U, count, p->slices, P, nb);
  int64_t base = p->peak - p->cache_bytes, room = (int64_t)(MARGIN * (double)limit) - base;
  int64_t fits = limit - ZT_OFFLOAD_PLAN_MARGIN(limit) - p->inflight_bytes - base; /* the bound stays within limit */
  int64_t cap = in->cache_max_bytes < 4 * Pmax ? in->cache_max_bytes : 4 * Pmax;
  int64_t c = room < cap ? room : cap;
  c = c < fits ? c : fits;
  if (c > p->cache_bytes) p->cache_bytes = c, p->peak = base + c, plan_bound(p);
}

zt_status zt__offload_plan_at(const zt_offload_plan_input *in, int slices, int resident, zt_offload_plan_activations act,
                              const char *recompute_plan, int64_t limit, zt_offload_plan *out) {
  return predict_cut("zt__offload_plan_at", in, slices, resident, act, recompute_plan, limit, out);
}

static zt_status predict_cut(const char *fn, const zt_offload_plan_input *in, int slices, int resident,
                             zt_offload_plan_activations act, const char *recompute_plan, int64_t limit,
                             zt_offload_plan *out) {
  memset(out, 0, sizeof *out);
  int64_t ub[ZT_OFFLOAD_PLAN_MAX_UNITS];
  int U = 0, count[ZT_OFFLOAD_PLAN_MAX_UNITS];
  ZT_TRY(units_of(in, ub, &U, fn));
  if (resident < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %d resident slices", fn, resident);
  ZT_TRY(zt_offload_model_balance(U, slices, ub, count));
  /* the slices whose blocks the letters recompute (activation offload only): a slice's blocks
   * are all 'f' or all 'n', as the search writes them */
  bool rec[ZT_OFFLOAD_PLAN_MAX_UNITS] = {false}, any = false;
  int L = U - 2;
  if (recompute_plan && *recompute_plan && act == ZT_OFFLOAD_PLAN_OFFLOAD) {
    if ((int)strlen(recompute_plan) != L)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: a recompute plan of %d letters for %d blocks", fn,
                    (int)strlen(recompute_plan), L);
    for (int sl = 0, u = 0; sl < slices; u += count[sl], sl++)
      for (int k = u; k < u + count[sl]; k++)
        if (k > 0 && k < U - 1 && recompute_plan[k - 1] == 'f') rec[sl] = any = true;
  }
  predict(in, ub, U, count, slices, resident < slices ? resident : slices, act, any ? rec : NULL, out);
  if (limit > 0) fill_cache(in, ub, U, count, limit, out);
  return ZT_OK;
}

zt_status zt_offload_plan_make(const zt_offload_plan_input *in, int64_t limit, zt_offload_plan *out) {
  const char *fn = "zt_offload_plan_make";
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: out is NULL", fn);
  memset(out, 0, sizeof *out);
  int64_t ub[ZT_OFFLOAD_PLAN_MAX_UNITS];
  int U = 0;
  ZT_TRY(units_of(in, ub, &U, fn));
  zt_offload_plan best = {0}, smallest = {0};
  bool found = false;
  int count[ZT_OFFLOAD_PLAN_MAX_UNITS];
  for (int a = 0; a < 3; a++) {
    zt_offload_plan_activations act = (zt_offload_plan_activations)a;
    if (act == ZT_OFFLOAD_PLAN_OFFLOAD && !in->can_offload_activations) continue;
    for (int K = 2; K >= 1; K--)
      for (int N = 1; N <= U; N++) {
        if (K > N) continue;
        ZT_TRY(zt_offload_model_balance(U, N, ub, count));
        zt_offload_plan p, all;
        if (act == ZT_OFFLOAD_PLAN_OFFLOAD)
          predict_offload(in, ub, U, count, N, K, &p, &all);
        else
          predict(in, ub, U, count, N, K, act, NULL, &p);
        if (!smallest.peak || p.bound < smallest.bound) smallest = p;
        if (p.bound > limit) continue;
        if (act == ZT_OFFLOAD_PLAN_OFFLOAD && in->trial) with_trial(&all, limit, &p);
        fill_cache(in, ub, U, count, limit, &p);
        /* the fastest; then prefetch (K 2); then the activation trial (the choice measured, not
         * predicted); then the larger allocator cache (measured at GPT-2 774M in 4 GiB: 64 MiB ->
         * 1 GiB took the kernel's minor faults from 26 to 4.9 million in three steps and a step
         * from 63 to 56 s); then a 15% margin under the limit (the prediction's error is within
         * 10%); then the fewest slices (fewer, larger transfers) */
        bool safe = (double)p.peak <= MARGIN * (double)limit, best_safe = (double)best.peak <= MARGIN * (double)limit;
        bool better =
            !found || p.step_s < best.step_s * 0.999 ||
            (p.step_s <= best.step_s * 1.001 &&
             (p.resident > best.resident ||
              (p.resident == best.resident &&
               (p.trial > best.trial ||
                (p.trial == best.trial &&
                 (p.cache_bytes > best.cache_bytes ||
                  (p.cache_bytes == best.cache_bytes &&
                   (safe > best_safe || (safe == best_safe && p.slices < best.slices)))))))));
        if (better) best = p, found = true;
      }
  }
  out->smallest_peak = smallest.bound;
  if (!found) {
    return ZT_ERR(ZT_STATUS_OOM,
                  "no plan fits zt_train_config.memory.mem_limit %.0f MiB: the smallest plan needs %.0f MiB (%d "
                  "slices, %d resident, %s: a predicted peak of %.0f MiB, and what writes behind and the margin add); "
                  "give at least that, or a smaller batch or more microbatches",
                  (double)limit / 1048576.0, ceil((double)smallest.bound / 1048576.0), smallest.slices,
                  smallest.resident, zt_offload_plan_activations_name(smallest.activations_mode),
                  ceil((double)smallest.peak / 1048576.0));
  }
  best.smallest_peak = smallest.bound;
  *out = best;
  return ZT_OK;
}

/* Every state in OffloadModel's store, in one process: what the planner plans without a limit. */
static bool plannable(const zt_train_config *c, int world) {
  return c->memory.offload_states && c->memory.offload_model && c->parallel.shard == ZT_SHARD_NONE && world == 1;
}

bool zt__train_plan_wanted(const zt_train_config *c, int world) {
  return c->memory.mem_limit > 0 ||
         (plannable(c, world) && c->memory.offload_slices <= 0 && c->memory.offload_resident <= 0);
}

/* The planner's input for c's run at limit, measured here (or as ZT_PLAN_CALIBRATION says). */
static zt_status plan_input(const zt_train_config *c, int world, int64_t limit, zt_offload_plan_input *in,
                            bool *calibrated) {
  zt_plan_space sp;
  ZT_TRY(zt_plan_space_of(c, world, &sp));
  sp.mem_limit = limit;
  if (c->memory.offload_model != ZT_OFFLOAD_DISK) sp.skip = 1u << ZT_PLAN_FIG_READ | 1u << ZT_PLAN_FIG_WRITE;
  int64_t cache_limit = zt_mem_cache_limit();
  /* the cache emptied (freed blocks go back to the kernel: host_alloc.c), so that the base the
   * calibration measures is what stays */
  zt_mem_set_cache_limit(0);
  zt_set_num_threads(c->threads); /* the run's: OpenBLAS keeps a buffer per thread */
  zt_plan_calibration cal;
  ZT_TRY(zt_plan_calibration_for(c, NULL, &sp, 3, &cal));
  *calibrated = false;
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) *calibrated |= cal.source[f] == ZT_PLAN_SOURCE_GIVEN;
  /* a trial needs its two steps and one to run the choice */
  zt__offload_plan_input(&sp, &cal, limit, cache_limit, c->data.microbatches, c->memory.offload_model,
                         c->memory.activation_trial != ZT_ACT_TRIAL_OFF && c->steps >= ZT_ACT_TRIAL_FIRST + 2, in);
  return ZT_OK;
}

/* The config's own plan (slices and resident, 2 where not set; its mode and activation offload),
 * predicted against limit. */
static zt_status predict_given(const zt_train_config *c, zt_offload_plan_input *in, int64_t limit,
                               zt_offload_plan *out) {
  int N = c->memory.offload_slices > 0 ? c->memory.offload_slices : 2;
  int K = c->memory.offload_resident > 0 ? c->memory.offload_resident : 2;
  zt_offload_plan_activations act = c->memory.offload_mode != ZT_OFFLOAD_MODEL_KEEP_GRAPH ? ZT_OFFLOAD_PLAN_RECOMPUTE
                                    : c->memory.offload_activations                      ? ZT_OFFLOAD_PLAN_OFFLOAD
                                                                                         : ZT_OFFLOAD_PLAN_KEEP;
  int64_t ub[ZT_OFFLOAD_PLAN_MAX_UNITS];
  int U = 0, count[ZT_OFFLOAD_PLAN_MAX_UNITS];
  ZT_TRY(units_of(in, ub, &U, "zt_train_plan_memory"));
  if (N > U) return ZT_OK; /* the run refuses it, naming the units */
  ZT_TRY(zt_offload_model_balance(U, N, ub, count));
  zt_offload_plan p, all;
  predict(in, ub, U, count, N, K < N ? K : N, act, NULL, &p); /* the config's recompute plan is its own */
  if (act == ZT_OFFLOAD_PLAN_OFFLOAD && c->memory.activation_trial == ZT_ACT_TRIAL_ON &&
      c->steps >= ZT_ACT_TRIAL_FIRST + 2) { /* the trial's recomputing step holds the most */
    bool rec[ZT_OFFLOAD_PLAN_MAX_UNITS];
    for (int s = 0; s < N; s++) rec[s] = true;
    predict(in, ub, U, count, N, K < N ? K : N, act, rec, &all);
    if (all.peak > p.peak) p.states_bytes = all.states_bytes, p.activation_bytes = all.activation_bytes, p.peak = all.peak;
  }
  fill_cache(in, ub, U, count, limit, &p);
  zt_offload_plan any; /* the smallest plan's peak, for the record: any limit names it */
  if (zt_offload_plan_make(in, INT64_MAX / 2, &any)) zt_clear_error();
  p.smallest_peak = any.smallest_peak;
  *out = p;
  return ZT_OK;
}

zt_status zt_train_plan_memory(zt_train_config *c, int world, zt_offload_plan *out) {
  if (!c || !out || world < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_plan_memory: config and out are required");
  memset(out, 0, sizeof *out);
  bool given = c->memory.offload_slices > 0 || c->memory.offload_resident > 0;
  if (c->memory.mem_limit > 0) {
    if (!c->memory.offload_states)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.memory.mem_limit plans where every model state lives: it "
                                           "needs zt_train_config.memory.offload_states (a tier)");
    if (c->parallel.shard != ZT_SHARD_NONE)
      return ZT_ERR(ZT_STATUS_UNSUPPORTED, "zt_train_config.memory.mem_limit plans OffloadModel's slices; with "
                                           "zt_train_config.parallel.shard FSDP keeps the states in the store unit by "
                                           "unit (a block at a time, unplanned): drop mem_limit");
  }
  int64_t limit = c->memory.mem_limit;
  char source[sizeof out->limit_source] = "zt_train_config.memory.mem_limit";
  if (c->memory.mem_limit <= 0 && !plannable(c, world)) {
    /* OffloadModel without its states in the store (or under FSDP, or DDP): its default slices */
    if (c->memory.offload_slices <= 0) c->memory.offload_slices = 2;
    if (c->memory.offload_resident <= 0) c->memory.offload_resident = 2;
    return ZT_OK;
  }
  zt_mem_available_info av;
  if (limit <= 0) {
    ZT_TRY(zt_mem_available(&av));
    limit = av.bytes;
    snprintf(source, sizeof source, "%s", av.source);
  } else if (!zt_mem_available(&av) && limit > av.bytes) { /* unknown here: the limit as given */
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.memory.mem_limit %.1f MiB is more than this process can have, %.1f MiB (%s): "
                  "give at most that (a plan for more would be stopped by the kernel)",
                  (double)limit / 1048576.0, (double)av.bytes / 1048576.0, av.source);
  }
  zt_clear_error();
  zt_offload_plan_input in;
  bool calibrated = false;
  ZT_TRY(plan_input(c, world, limit, &in, &calibrated));
  if (given) {
    ZT_TRY(predict_given(c, &in, limit, out));
  } else {
    zt_status s = zt_offload_plan_make(&in, limit, out);
    if (s == ZT_STATUS_OOM && c->memory.mem_limit <= 0)
      return ZT_ERR(ZT_STATUS_OOM,
                    "no plan keeps every state in the store within the memory available, %.0f MiB (%s): the smallest "
                    "predicted peak is %.0f MiB; give a smaller batch or more microbatches",
                    (double)limit / 1048576.0, source, ceil((double)out->smallest_peak / 1048576.0));
    if (s) return s;
    c->memory.activation_trial = out->trial ? ZT_ACT_TRIAL_ON : ZT_ACT_TRIAL_OFF; /* nothing to try otherwise */
    c->memory.offload_mode = out->activations_mode == ZT_OFFLOAD_PLAN_RECOMPUTE ? ZT_OFFLOAD_MODEL_RECOMPUTE
                                                                                 : ZT_OFFLOAD_MODEL_KEEP_GRAPH;
    c->memory.offload_activations = out->activations_mode == ZT_OFFLOAD_PLAN_OFFLOAD ? c->memory.offload_model : ZT_OFFLOAD_NONE;
    if (out->recomputed_slices) memcpy(c->memory.recompute_plan, out->recompute_plan, sizeof c->memory.recompute_plan);
  }
  c->memory.offload_slices = out->slices;
  c->memory.offload_resident = out->resident;
  out->read_bps = in.read_bps, out->write_bps = in.write_bps;
  out->limit = limit, out->given = given, out->calibrated = calibrated;
  snprintf(out->limit_source, sizeof out->limit_source, "%s", source);
  char what[1700];
  if (!given)
    snprintf(what, sizeof what, "planned for %s, %.1f MiB", source, (double)limit / 1048576.0);
  else
    snprintf(what, sizeof what,
             "the plan given (zt_train_config.memory.offload_slices, zt_train_config.memory.offload_resident), "
             "against %.1f MiB, %s",
             (double)limit / 1048576.0, source);
  snprintf(out->note, sizeof out->note,
           "%s; the plan takes at most %.1f MiB (its peak, %.1f MiB more where writes behind fall behind the disk, "
           "and a margin of %.1f MiB)%s%s",
           what, (double)out->bound / 1048576.0, (double)out->inflight_bytes / 1048576.0,
           (double)ZT_OFFLOAD_PLAN_MARGIN(out->peak) / 1048576.0,
           calibrated ? "; calibration from ZT_PLAN_CALIBRATION" : "",
           out->bound <= limit ? "" : "; that is above the limit, where the kernel may stop the run: leave the slices "
                                      "to the planner, or give fewer resident slices or more of them");
  /* the cache takes what the plan leaves free in every phase, the prediction's room at its peak */
  zt_mem_set_cache_limit(out->cache_bytes ? (in.cache_max_bytes > out->cache_bytes ? in.cache_max_bytes : out->cache_bytes) : 0);
  c->memory.held_limit = out->peak - out->fixed_bytes; /* the run's allocator: within the plan's peak */
  c->memory.offload_write_cap = out->write_cap_bytes;
  c->memory.mem_limit = 0; /* planned: the run takes the options as they are now */
  return ZT_OK;
}
