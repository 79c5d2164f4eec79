/* The planner's prediction of data-parallel training (plan_internal.h): one process, DDP, and
 * FSDP with every sharding, each with recompute and activation offload. Memory is counted from
 * what the code allocates and when: the peak of each tag, and the accounted total's peak as the
 * largest of the step's few candidate moments (end of forward, each block's backward, the
 * embedding's backward, the update), each the static states plus what is alive there. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/offload_plan.h"
#include "train/plan_internal.h"

#define MAXD(a, b) ((a) > (b) ? (a) : (b))

/* The sizes one prediction works from (bytes, f32 everywhere: the CPU trains in f32). */
typedef struct dp_sizes {
  int L, G;                /* blocks; ranks of a shard group (1: nothing sharded) */
  bool fsdp, full_shard;   /* a zt_fsdp runs; its parameters are resharded between uses (FULL, HYBRID) */
  bool stored;             /* its states live in the tier between uses (fsdp_store.c) */
  int64_t M, rows, tok;    /* microbatches, rows per rank, tokens per microbatch */
  double C, F, V, T;       /* hidden, MLP width, vocabulary, sequence */
  double Pb, blk, root;    /* all parameters; one block's (an FSDP unit); the root unit (everything else) */
  double head_w;           /* the output layer's weight (V x C; the embedding when tied) */
  double head_g;           /* the non-block part's grads after the head's backward (final norm + output layer) */
  double ids_temp;         /* the loop's TEMP batches: x, y of a microbatch, the validation x, y of all rows */
  double ids_act;          /* the token and position ids the model keeps (the activation model's own) */
} dp_sizes;

static void sizes_of(const zt__plan_in *in, const zt_plan_config *c, dp_sizes *z) {
  const zt_lm_dims *d = &in->d;
  memset(z, 0, sizeof *z);
  z->L = d->n_layer;
  z->fsdp = c->shard != ZT_SHARD_NONE;
  z->G = !z->fsdp ? 1 : c->shard == ZT_SHARD_HYBRID ? c->hybrid_group : c->dp;
  if (z->G < 1) z->G = 1;
  z->full_shard = z->fsdp && (c->shard == ZT_SHARD_FULL || c->shard == ZT_SHARD_HYBRID) && z->G > 1;
  z->stored = zt__plan_fsdp_states(c);
  z->M = c->microbatches > 0 ? c->microbatches : 1;
  z->rows = in->sp->batch / (c->dp > 0 ? c->dp : 1);
  z->T = (double)in->sp->seq;
  z->tok = z->rows / z->M * in->sp->seq;
  z->C = d->hidden, z->F = d->ffn, z->V = d->vocab;
  z->Pb = 4.0 * (double)d->params;
  z->blk = 4.0 * (double)d->block_params;
  z->root = z->Pb - z->L * z->blk;
  z->head_w = 4.0 * z->V * z->C;
  z->head_g = 4.0 * (double)d->out_params;
  z->ids_temp = 4.0 * z->T * (2.0 * (double)(z->rows / z->M) + 2.0 * (double)z->rows);
  z->ids_act = 4.0 * ((double)z->tok + z->T);
}

/* The modes of the blocks: a letter per block, a plan for a byte budget (as the run makes it,
 * zt_train_memory_attach), or one mode for all. */
static zt_status modes_of(const zt__plan_in *in, const zt_plan_config *c, const dp_sizes *z, zt_recompute *modes) {
  int L = z->L;
  if (c->recompute_plan[0]) {
    if ((int)strlen(c->recompute_plan) != L)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "recompute plan '%s' has %zu letters; the model has %d blocks",
                    c->recompute_plan, strlen(c->recompute_plan), L);
    for (int i = 0; i < L; i++) {
      char ch = c->recompute_plan[i];
      modes[i] = ch == 'f' ? ZT_RECOMPUTE_FULL : ch == 's' ? ZT_RECOMPUTE_SELECTIVE : ZT_RECOMPUTE_NONE;
    }
    return ZT_OK;
  }
  if (c->recompute_budget > 0)
    return zt_lm_plan_recompute(&in->sp->model, z->rows / z->M, in->sp->seq, c->recompute_budget,
                                (zt_checkpoint_policy){0}, modes, NULL);
  for (int i = 0; i < L; i++) modes[i] = c->recompute;
  return ZT_OK;
}

/* What the MLP's backward holds at its busiest, beside the kept activations, per family (measured
 * with the allocator's snapshot at the accounted peak, gpt2-tiny at C 128 and 256, llama-tiny):
 *   temp_at   TEMP at the total's peak in a block's backward: GPT-2 the grads of the MLP's hidden
 *             and of its input (ffn + 2C a token) and the down projection's weight and bias grads
 *             before the leaf takes them (C x ffn + C); Llama the gate, up and activation grads
 *             (3 ffn) and the flowing grad (C) a token;
 *   temp_peak TEMP's own peak there (GPT-2: ffn + 5C a token, the 9C of gpt2-tiny and its
 *             C-256 variant; Llama: the same moment as temp_at);
 *   act_freed activations already freed at that moment (Llama: one ffn-wide save);
 *   grad_more grads already made there (Llama: the down projection's weight). */
typedef struct mlp_bwd {
  double temp_at, temp_peak, act_freed, grad_more;
} mlp_bwd;

static mlp_bwd mlp_of(const zt__plan_in *in, const dp_sizes *z) {
  mlp_bwd m;
  double t = (double)z->tok, C = z->C, F = z->F;
  if (in->sp->model.family == ZT_LM_LLAMA) {
    m.temp_at = m.temp_peak = 4.0 * t * (3.0 * F + C);
    m.act_freed = 4.0 * t * F;
    m.grad_more = 4.0 * F * C;
  } else {
    m.temp_at = 4.0 * (t * (F + 2.0 * C) + F * C + C);
    m.temp_peak = 4.0 * t * (F + 5.0 * C);
    m.act_freed = 0;
    m.grad_more = 0;
  }
  return m;
}

/* The LM head's forward: a chunk of rows x V logits and their per-row losses (f64), TEMP while it
 * runs. */
static double head_temp(const dp_sizes *z) {
  double rows = zt__plan_head_rows((double)z->tok, z->V);
  return rows * z->V * 4.0 + rows * 8.0;
}

/* FSDP's gradient bytes through backward (src/strategies/fsdp_run.c): the root unit's flat grad
 * from the head's forward on; each block's flat grad from its backward until its reduction is
 * finished, which happens once more than ZT__FSDP_MAX_PENDING (2) are in flight, and for the rest
 * at the end of backward; a finished reduction adds a shard (S = a unit / G: made while the flat
 * grad is still alive), which stored states send to the tier at once. The block points (grad
 * alive while block i's backward runs, its own flat grad attached) go to at[i], the embedding's
 * backward (before the root's reduction) to *embed; returns the peak. With microbatches, the earlier ones leave every
 * flat grad accumulated (no reduction until the last), so the last one starts from all of them. */
static double fsdp_grads(const dp_sizes *z, double *at, double *embed) {
  double pend[4];
  int np = 0;
  double shards = 0, alive = z->M > 1 ? z->Pb : z->root, peak = alive;
  int L = z->L;
  double G = z->G;
#define FINISH_OLDEST()                                                                          \
  do {                                                                                           \
    double sz = pend[0];                                                                         \
    double now = alive + shards + sz / G;                                                        \
    peak = MAXD(peak, now);                                                                      \
    alive -= sz, shards += z->stored ? 0 : sz / G;                                               \
    memmove(pend, pend + 1, sizeof *pend * (size_t)(np - 1));                                    \
    np--;                                                                                        \
  } while (0)
  for (int i = L - 1; i >= 0; i--) {
    if (z->M == 1) alive += z->blk; /* attached at the block's pre-backward */
    at[i] = alive + shards;
    peak = MAXD(peak, at[i]);
    pend[np++] = z->blk;
    if (np > 2) FINISH_OLDEST();
  }
  *embed = alive + shards; /* the embedding's backward: every block's done, two still reducing */
  pend[np++] = z->root; /* the root's parameters finish last (the embedding) */
  if (np > 2) FINISH_OLDEST();
  while (np) FINISH_OLDEST();
#undef FINISH_OLDEST
  return peak;
}

/* ACTIVATION values a token of each block's backward (region i, one block a region, as the run
 * plans): the kept values of the blocks before it, its input and kept values and what its
 * recomputation makes (the activation model's terms, zt_act_cost), into bwd[L]. */
static void act_bwd_all(const zt__plan_in *in, const zt_recompute *modes, int L, double *bwd) {
  double before = 0;
  for (int i = 0; i < L; i++) {
    zt_act_cost a = zt_lm_act_cost(&in->sp->model, modes[i], (zt_checkpoint_policy){0});
    bwd[i] = before + a.input + a.kept + a.recomp;
    before += a.input + a.kept;
  }
}

zt_status zt__plan_predict_dp(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out) {
  memset(out, 0, sizeof *out);
  const zt_plan_space *sp = in->sp;
  dp_sizes z;
  sizes_of(in, c, &z);
  if (z.L < 1 || z.L > ZT_TRAIN_MAX_LAYERS || z.rows < z.M || z.tok < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "data parallel: %d blocks, %lld rows a rank in %lld microbatches", z.L,
                  (long long)z.rows, (long long)z.M);
  if (z.stored && (z.G < 2 || !z.full_shard))
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "FSDP with its states in the tier is predicted for full and hybrid sharding over "
                                         "2 ranks or more (grad_op's measured RSS was 7%% above the count: its cache is "
                                         "not modelled)");
  zt_recompute *modes = calloc((size_t)z.L, sizeof *modes);
  double *gat = calloc((size_t)z.L, sizeof *gat), *abw = calloc((size_t)z.L, sizeof *abw);
  zt_status s = !modes || !gat || !abw ? ZT_ERR(ZT_STATUS_OOM, "out of host memory") : modes_of(in, c, &z, modes);
  if (s) {
    free(modes), free(gat), free(abw);
    return s;
  }
  act_bwd_all(in, modes, z.L, abw);
  const double t4 = 4.0 * (double)z.tok, G = z.G;
  const bool ddp = !z.fsdp && c->dp > 1;
  mlp_bwd mlp = mlp_of(in, &z);
  zt_act_cost none = zt_lm_act_cost(&sp->model, ZT_RECOMPUTE_NONE, (zt_checkpoint_policy){0});

  /* ---- the model states: parameters, AdamW's two moments, DDP's buckets, FSDP's gathers */
  double param, optim = 2.0 * z.Pb / G, comm = 0, comm_static = 0;
  if (!z.fsdp || z.G == 1)
    param = z.Pb; /* replicated (FSDP over one rank aliases its full parameters to its shards) */
  else if (z.full_shard)
    param = z.Pb / G + z.root + 2.0 * z.blk; /* shards + the root unit (kept gathered through forward for
                                              * the head) + the unit computing and the one prefetched */
  else
    param = z.Pb + z.Pb / G; /* GRAD_OP / OPT: full parameters kept, beside the shards the update writes */
  if (ddp) comm = comm_static = z.Pb; /* the flat buckets, made once, hold every grad */
  /* FSDP's states in the tier (fsdp_store.c): a shard comes in for its unit's gather and goes back
   * when the gather lands (the unit computing's and the one prefetched at once), and the update
   * streams unit by unit: the unit's shard, grad shard and moments in, the next unit's read ahead,
   * so no state stays in RAM between uses; what the update writes behind (its shards and moments)
   * may add up to the store's write cap where the disk falls behind */
  double unit_max = MAXD(z.root, z.blk), upd = (unit_max + z.blk) / G; /* a unit's shard and the next one's */
  double optim_static = optim;
  if (z.stored) {
    param = z.root + 2.0 * z.blk + 2.0 * z.blk / G; /* full and hybrid only (above) */
    optim = 2.0 * upd, optim_static = 0;
    out->inflight = (int64_t)fmin((double)ZT_STORE_WRITE_CAP_DEFAULT, 3.0 * z.Pb / G);
  }
  if (z.fsdp && z.G > 1) /* the reduce-scatters' outputs (a shard each), three in flight at most
                          * (ZT__FSDP_MAX_PENDING + the one starting), the root's among them at the end
                          * (measured exact: gpt2-tiny at 2 and 4 ranks, llama-tiny at 4, GPT-2 124M at 2) */
    comm = (MAXD(z.root, z.blk) + 2.0 * z.blk) / G;

  /* ---- grads */
  double grad, grad_end, grad_embed;
  if (z.fsdp) {
    grad = fsdp_grads(&z, gat, &grad_embed);
    if (z.M > 1) grad = MAXD(grad, z.Pb + z.head_w); /* a later head's dW beside the accumulated flat grads */
    grad_end = z.stored ? upd : z.Pb / G;
  } else {
    /* every leaf's grad by the end of backward; with microbatches the head's dW of a later one is
     * made in its forward beside the accumulated grads */
    grad = z.Pb + (z.M > 1 ? z.head_w : 0);
    grad_end = z.Pb;
    grad_embed = grad;
    for (int i = 0; i < z.L; i++)
      gat[i] = z.M > 1 ? z.Pb : z.head_g + (double)(z.L - 1 - i) * z.blk;
  }
  for (int i = 0; i < z.L; i++) gat[i] += mlp.grad_more;

  /* ---- activations: the model's prediction, or what offload keeps in RAM */
  double act = (double)zt_lm_predict_activation_peak(&sp->model, z.rows / z.M, sp->seq, modes, 1,
                                                     (zt_checkpoint_policy){0});
  double act_fwd = 0; /* at the end of forward: every region's input and kept bytes, and the head's part */
  for (int i = 0; i < z.L; i++) {
    zt_act_cost a = zt_lm_act_cost(&sp->model, modes[i], (zt_checkpoint_policy){0});
    act_fwd += a.input + a.kept;
  }
  act_fwd = t4 * (act_fwd + none.out) + z.ids_act;
  double off_act = -1, off_fwd = 0, off_b[ZT_TRAIN_MAX_LAYERS]; /* offload: ACTIVATION in RAM (forward, blocks) */
  if (c->offload_activations == ZT_OFFLOAD_DISK || c->offload_activations == ZT_OFFLOAD_BF16 ||
      c->offload_activations == ZT_OFFLOAD_HOST) {
    /* The saves of the blocks that keep theirs (recompute none) leave RAM as they are made; a
     * recomputed block's are the checkpoint's, kept as without offload (measured: selective and
     * full recompute hold the same ACTIVATION with and without it). What stays (the allocator's
     * snapshots, gpt2-tiny and llama-tiny):
     * forward: the head's part, the recomputed blocks' inputs and kept bytes, the block computing's
     *   live tensors (two ffn-wide and one C-wide a token) and the saves being written behind (at
     *   most the write cap, zt__train_act_write_cap);
     * backward of block i: the recomputed blocks before it, and its own bytes: recomputed, as the
     *   activation model counts them; offloaded, the prefetch window (two ffn-wide saves ahead and
     *   the flowing grad). */
    double cap = (double)zt__train_act_write_cap(&sp->model, z.tok), kept_rc = 0;
    bool offloaded = false;
    const double window = 2.0 * z.F + z.C;
    for (int i = 0; i < z.L; i++) {
      zt_act_cost a = zt_lm_act_cost(&sp->model, modes[i], (zt_checkpoint_policy){0});
      /* a recomputed block after offloaded ones: the window already brings theirs back */
      double own = modes[i] == ZT_RECOMPUTE_NONE ? window : a.input + a.kept + a.recomp + (offloaded ? window : 0);
      off_b[i] = z.ids_act + t4 * (kept_rc + own);
      if (modes[i] != ZT_RECOMPUTE_NONE) kept_rc += a.input + a.kept;
      offloaded |= modes[i] == ZT_RECOMPUTE_NONE;
    }
    off_fwd = z.ids_act + t4 * (kept_rc + none.out + window) + cap;
    off_act = off_fwd;
    for (int i = 0; i < z.L; i++) off_act = MAXD(off_act, off_b[i]);
    if (!offloaded) { /* every block recomputed: offload has nothing of theirs to move */
      off_act = act, off_fwd = act_fwd;
      for (int i = 0; i < z.L; i++) off_b[i] = z.ids_act + t4 * abw[i] - mlp.act_freed;
    }
    if (c->offload_activations == ZT_OFFLOAD_HOST) {
      /* the host store holds its copies in RAM: the model's peak and a block's copies beside the
       * originals their next ops still use (about an ffn-wide and two C-wide tensors a token), its
       * peak in the last block's backward */
      off_act = act + t4 * (z.F + 2.0 * z.C);
      off_fwd = act_fwd;
      for (int i = 0; i < z.L; i++)
        off_b[i] = z.ids_act + t4 * (abw[i] + none.out + z.F + 2.0 * z.C) - mlp.act_freed;
    } else if (c->offload_activations == ZT_OFFLOAD_BF16) {
      /* the bf16 store keeps its copies in RAM at half the bytes (not measured: from the tier's
       * format alone) */
      double saved = act - off_act > 0 ? act - off_act : 0;
      off_act += 0.5 * saved;
    }
  }
  if (off_act >= 0) act = off_act;

  /* ---- TEMP: the loop's batches plus the largest transient: the MLP's backward, the head's
   * logits chunk, or (tied) the embedding's backward, whose V x C grad is made apart and then
   * added into the head's */
  bool tied = in->d.tied;
  double temp_embed = tied ? z.head_w + t4 * z.C : 0;
  /* a later microbatch's copy of the head's dW (above): through its backward, without FSDP (whose
   * root flat grad takes dW in place: measured GPT-2 124M ZeRO-1 and gpt2-tiny FSDP full with 2
   * microbatches); over several ranks with microbatches the MLP's backward holds C + 4 more values a
   * token (measured gpt2-tiny, DDP and FSDP at 2 ranks; not traced to its op) */
  double temp_mb = tied && z.M > 1 && !z.fsdp ? z.head_w : 0;
  double temp_dp = c->dp > 1 && z.M > 1 ? t4 * (z.C + 4.0) : 0;
  double temp = z.ids_temp + MAXD(MAXD(mlp.temp_peak + temp_dp, head_temp(&z)) + temp_mb, temp_embed + temp_mb);

  /* ---- the accounted total: the largest of the step's moments (above the static states) */
  double stat = param + optim_static + comm_static;
  double dyn = 0;
  /* The head at the end of forward (src/ops/lm_head.c): its dW (GRAD) is made before its logits
   * chunk (TEMP), which goes when the op ends; the leaf then adopts dW (plain, DDP), or FSDP folds
   * it into the root unit's flat grad, made then (zeros) beside it: with nothing prefetched for
   * forward any more (FULL: a block less gathered). A later microbatch adds dW into the grads it
   * accumulated (measured exact: GPT-2 124M FSDP full and opt at 2 ranks, the allocator's snapshot
   * at the peak: root's flat grad + dW + the activations, TEMP its batches alone). */
  double head_fwd;
  if (z.M > 1) /* tied: the later dW goes into the accumulated grad through a V x C TEMP copy, made
                * once the logits chunk is gone (measured exact: GPT-2 124M, SmolLM-135M and a
                * 2-block SmolLM, 2 microbatches) */
    head_fwd = z.Pb + z.head_w + (tied ? MAXD(head_temp(&z), z.head_w) : head_temp(&z));
  else if (z.fsdp)
    head_fwd = z.head_w + MAXD(head_temp(&z), z.root) - (z.full_shard ? z.blk : 0);
  else
    head_fwd = z.head_w + head_temp(&z);
  head_fwd += z.ids_temp;
  if (off_act < 0) {
    /* end of forward, at the head */
    dyn = MAXD(dyn, act_fwd + head_fwd);
    /* each block's backward at its MLP: the kept activations (less the head's part, freed), the
     * grads made so far, the MLP's transients (an FSDP unit regathered for a recomputation beside) */
    for (int i = z.L - 1; i >= 0; i--) {
      double a = z.ids_act + t4 * abw[i] - mlp.act_freed;
      double g = gat[i];
      /* the reductions in flight there (FSDP over several ranks: their outputs, a shard each) */
      double x = z.fsdp && z.G > 1 ? (double)(z.L - 1 - i < 2 ? z.L - 1 - i : 2) * z.blk / G : 0;
      dyn = MAXD(dyn, a + g + mlp.temp_at + z.ids_temp + x + (z.M > 1 && !z.fsdp ? temp_mb : 0));
    }
  } else {
    /* offloaded: the forward's end with what stays in RAM, and each block's backward with its window */
    dyn = MAXD(dyn, off_fwd + head_fwd);
    for (int i = 0; i < z.L; i++) dyn = MAXD(dyn, off_b[i] + gat[i] + mlp.temp_at + z.ids_temp);
  }
  /* the end of backward: every grad (FSDP: its peak; a later microbatch: with its head's dW beside
   * the accumulated grads, and its copy in TEMP), the tied embedding's grad being added (measured
   * GPT-2 124M with 2 microbatches: exact) */
  if (!z.fsdp) {
    dyn = MAXD(dyn, grad_embed + MAXD(temp_embed, temp_mb) + z.ids_temp);
  } else {
    /* FSDP: the blocks' reductions all started, two in flight (their outputs in COMM), the root's
     * not yet; FULL has resharded every block (measured GPT-2 124M FSDP full with full recompute at
     * 2 ranks: exact) */
    double fly = z.G > 1 ? (double)(z.L < 2 ? z.L : 2) * z.blk / G : 0;
    dyn = MAXD(dyn, grad_embed + temp_embed + fly + z.ids_temp - (z.full_shard ? 2.0 * z.blk : 0));
    /* the root's reduction at the end: every shard, the root's flat grad and its output */
    dyn = MAXD(dyn, grad + (z.G > 1 ? z.root / G : 0) + z.ids_temp - (z.full_shard ? 2.0 * z.blk + z.root : 0));
  }
  /* the update: grads and moments (the moments' first step makes them here; stored: a unit's and
   * the next one's shard, grad shard and moments) */
  dyn = MAXD(dyn, grad_end + z.ids_temp + (z.stored ? optim + upd : 0));

  out->tag[ZT_MEM_TAG_PARAM] = (int64_t)param;
  out->tag[ZT_MEM_TAG_GRAD] = (int64_t)grad;
  out->tag[ZT_MEM_TAG_OPTIM] = (int64_t)optim;
  out->tag[ZT_MEM_TAG_ACTIVATION] = (int64_t)act;
  out->tag[ZT_MEM_TAG_COMM] = (int64_t)comm;
  out->tag[ZT_MEM_TAG_TEMP] = (int64_t)temp;
  out->accounted = (int64_t)(stat + dyn);
  /* The allocator's cache (plan_cost.c's pool: each tag's peak blocks held at once), and the TEMP
   * transients apart from the largest: each is a block of its own size (the head's logits chunk,
   * the tied embedding's grad, the MLP's), cached once made (measured GPT-2 124M: the RSS peak at a
   * step's start holds 1072 MB cached, the grads, activations and TEMP's 156 MB peak, and 111 MB
   * more: the 103 MB logits chunk). Blocks under 64 KiB are not cached (malloc's). */
  {
    double tr[3] = {mlp.temp_peak, head_temp(&z), temp_embed}, big = 0, sum = 0;
    for (int k = 0; k < 3; k++) {
      if (tr[k] < 65536.0) continue;
      sum += tr[k];
      big = MAXD(big, tr[k]);
    }
    double pool = -out->accounted;
    for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) pool += (double)out->tag[t];
    pool += sum - big;
    /* FSDP's GRAD blocks come in three sizes never all live at once: the shards (all of them by the
     * end), the root's flat grad and the blocks' (three at most): the cache keeps each */
    if (z.fsdp && z.M == 1) pool += MAXD(0, (z.stored ? 0 : z.Pb / G) + z.root + 3.0 * z.blk - grad);
    if (pool > (double)out->accounted) pool = (double)out->accounted; /* the cache's bound: the live high mark */
    if (pool > (double)zt_mem_cache_limit()) pool = (double)zt_mem_cache_limit();
    out->cache = pool > 0 ? (int64_t)pool : 0;
  }
  /* MPI's own buffers, outside every accounting: DDP's bucket all-reduces are all in flight by the
   * end of backward, each with a buffer of its size inside MPI (measured GPT-2 124M, 2 ranks: RSS
   * less the tags' sum 504 MB above one process's, Pb 498 MB, on both ranks); FSDP's reduce-scatters
   * reduce each unit whole on the group's first rank before scattering it (OpenMPI's), so that rank
   * holds the units in flight (three: the root and two blocks at the end of backward; measured GPT-2
   * 124M ZeRO-1 at 2 ranks: 215 MB unaccounted on rank 0 at its RSS peak, none on rank 1, against
   * 214 MB predicted). The reduction runs down a binomial tree, so the first rank holds a unit for
   * each level of it, log2 G of them (measured GPT-2 124M, rank 0 above the others: FSDP full at 2
   * ranks 182 MB, at 4 ranks 431 MB; FSDP full and ZeRO-1 at 2 ranks, the set-up's blocks given
   * back, 204 and 205 MiB, the 150 MiB root and two 27 MiB blocks: ZeRO-1 had measured 337 MB
   * with them). The prediction is the worst rank's. */
  double levels = z.G > 1 ? ceil(log2((double)z.G)) : 0;
  if (ddp) out->io = (int64_t)z.Pb;
  else if (z.fsdp && z.G > 1) out->io = (int64_t)(levels * MAXD(z.root, z.blk) + 2.0 * z.blk);

  /* ---- time (plan_cost.c's model) */
  double P = (double)in->d.params;
  out->compute_s = 0;
  for (int i = 0; i < z.L; i++)
    out->compute_s += zt__plan_compute_s(in, z.rows / z.M, i, i + 1, false, false, modes[i]);
  out->compute_s += zt__plan_compute_s(in, z.rows / z.M, 0, 0, true, true, ZT_RECOMPUTE_NONE);
  out->compute_s = out->compute_s * (double)z.M + zt__plan_optim_s(in, (int64_t)(P / G));
  out->comm_s = c->dp > 1 ? zt__plan_dp_comm_s(in, c, z.Pb, z.blk, z.root, out->compute_s) : 0;
  out->step_s = out->compute_s + out->comm_s;
  if (z.stored) {
    /* the tier holds the shards, grad shards and moments; a step reads every shard for its gathers
     * (twice: resharded between forward and backward) and every state for the update, and writes
     * the grad shards and the updated shards and moments. None of it hides behind the compute: a
     * gather waits for its shard, the update for its states (measured, gpt2-124m and smollm-135m
     * full at 2 ranks: 5.10 and 5.13 s a step against 5.15 and 5.08 s for compute, communication
     * and the disk's time one after the other; with the disk's time hidden, 3.11 and 2.99 s) */
    double P4 = 4.0 * P / G;
    out->disk_held = (int64_t)(4.0 * P4);
    double rd = 2.0 * P4 + 4.0 * P4, wr = 4.0 * P4;
    out->disk_read = (int64_t)rd, out->disk_written = (int64_t)wr;
    out->io_s = zt__plan_io_s(in, rd, wr, 0);
    out->step_s += out->io_s;
  }
  if (c->offload_activations == ZT_OFFLOAD_DISK) {
    /* every microbatch writes the saves of the blocks that keep theirs and reads them back once */
    double kept = 0;
    for (int i = 0; i < z.L; i++)
      if (modes[i] == ZT_RECOMPUTE_NONE) kept += zt_lm_act_cost(&sp->model, modes[i], (zt_checkpoint_policy){0}).kept;
    double bytes = t4 * kept;
    out->disk_held += (int64_t)bytes;
    out->disk_written += (int64_t)(bytes * (double)z.M), out->disk_read += (int64_t)(bytes * (double)z.M);
    double io = zt__plan_io_s(in, bytes * (double)z.M, bytes * (double)z.M, out->compute_s);
    out->io_s += io;
    out->step_s += io;
  }
  free(modes), free(gat), free(abw);
  zt__plan_finish(in, out);
  return ZT_OK;
}
