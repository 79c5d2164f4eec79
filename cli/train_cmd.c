/* zt train: flags and an optional config file (same names; cli/train_options.c) into a
 * zt_train_config, a progress line every N steps (with elapsed time and ETA), progress inside steps that take
 * long (a live status line on a terminal, plain lines otherwise), a summary, and
 * (byte-level models) a sample of text. Under mpirun, an error that did not reach every
 * rank at once ends the whole job, so no rank is left waiting. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Shown state, shared by the training thread (callbacks) and, on a terminal, the ticker thread. */
typedef struct progress {
  int64_t log_every, sample_len, end_step;
  bool tty;
  double slow_s;         /* steps at least this long show their parts (ZT_STEP_PROGRESS_S, default 3) */
  pthread_mutex_t mu;
  pthread_t ticker;
  bool ticking, stop;
  int64_t step;          /* the step in progress (0: none) */
  zt_train_phase phase;
  double step_t0, last_step_s;
  bool status_shown;     /* a live status line is on the terminal */
} progress;

/* "45s", "12m05s", "3h07m" */
static const char *duration(double s, char buf[32]) {
  long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
  if (t < 60) snprintf(buf, 32, "%lds", t);
  else if (t < 3600) snprintf(buf, 32, "%ldm%02lds", t / 60, t % 60);
  else snprintf(buf, 32, "%ldh%02ldm", t / 3600, t % 3600 / 60);
  return buf;
}


static void clear_status(progress *p) {
  if (p->status_shown) printf("\r\033[K");
  p->status_shown = false;
}

static void *ticker(void *ud) {
  progress *p = ud;
  for (;;) {
    struct timespec ts = {0, 250 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&p->mu);
    if (p->stop) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    double t = zt_clock_now() - p->step_t0;
    if (p->step && t >= p->slow_s) {
      char a[32], b[32];
      printf("\r\033[Kstep %5lld/%lld: %s... %s into the step", (long long)p->step, (long long)p->end_step,
             zt_train_phase_name(p->phase), duration(t, a));
      if (p->last_step_s > 0) printf(" (last step took %s)", duration(p->last_step_s, b));
      fflush(stdout);
      p->status_shown = true;
    }
    pthread_mutex_unlock(&p->mu);
  }
}

static void on_phase(zt_train_phase ph, int64_t step, void *ud) {
  progress *p = ud;
  pthread_mutex_lock(&p->mu);
  double t = zt_clock_now();
  if (step != p->step) p->step_t0 = t;
  p->step = step;
  p->phase = ph;
  /* plain output: a line per part of a slow step */
  bool slow = p->last_step_s >= p->slow_s || t - p->step_t0 >= p->slow_s;
  if (!p->tty && slow) {
    char a[32];
    printf("step %5lld/%lld: %s (%s into the step)\n", (long long)step, (long long)p->end_step,
           zt_train_phase_name(ph), duration(t - p->step_t0, a));
    fflush(stdout);
  }
  pthread_mutex_unlock(&p->mu);
}

/* The activation trial's measurements and choice (zt_train_config.memory.activation_trial). */
static void print_choice(const zt_act_choice *c) {
  printf("zt train: activation trial, each slice's forward + backward with its activations offloaded (step %lld, "
         "%.1f s) and recomputed (step %lld, %.1f s):\n",
         (long long)c->offload_step, c->offload_step_s, (long long)c->recompute_step, c->recompute_step_s);
  for (int s = 0; s < c->slices; s++) {
    if (!c->blocks[s]) continue;
    char b[32];
    if (c->blocks[s] == 1) snprintf(b, sizeof b, "block %d", c->first_block[s]);
    else snprintf(b, sizeof b, "blocks %d-%d", c->first_block[s], c->first_block[s] + c->blocks[s] - 1);
    printf("  slice %d (%s): %.2f s offloaded, %.2f s recomputed: %s\n", s, b, c->offload_s[s], c->recompute_s[s],
           c->recompute_s[s] < c->offload_s[s] ? "recompute" : "offload");
  }
  printf("zt train: from step %lld, %d of the %d slices recompute their blocks: blocks %s (f recomputed, n "
         "offloaded)\n",
         (long long)c->recompute_step + 1, c->recomputed_slices, c->slices, c->plan);
}

static void on_step(const zt_train_step_info *in, void *ud) {
  progress *p = ud;
  if (in->rank != 0) return; // rank 0 speaks for all (per-rank figures are in --metrics)
  pthread_mutex_lock(&p->mu);
  p->last_step_s = in->step_ms / 1e3;
  p->step = 0;
  bool show = !(in->step % p->log_every && in->step != p->end_step && isnan(in->val_loss));
  if (show) {
    clear_status(p);
    char b[6][32], e[2][32];
    double per_step = in->elapsed_s / (double)(in->step - in->first_step + 1);
    printf("step %5lld/%lld | loss %.4f", (long long)in->step, (long long)in->total_steps, in->loss);
    if (!isnan(in->val_loss)) printf(" | val %.4f", in->val_loss);
    if (in->act_trial) printf(" | trial: every slice's activations %s", in->act_trial == 1 ? "offloaded" : "recomputed");
    if (!isnan(in->pp_bubble)) printf(" | bubble %.1f%% (sim %.1f%%)", 100 * in->pp_bubble, 100 * in->pp_sim_bubble);
    if (in->io_read_bytes || in->io_write_bytes) {
      char r[32], w[32];
      printf(" | disk read %s in %.1f s, written %s in %.1f s", zt_cli_bytes((double)in->io_read_bytes, r),
             in->io_read_ms / 1e3, zt_cli_bytes((double)in->io_write_bytes, w), in->io_write_ms / 1e3);
    }
    printf(" | lr %.2e | %.0f tok/s | mfu %.1f%% | mem param %s grad %s optim %s act %s (peak %s) | rss %s | %s, ETA %s\n",
           in->lr, in->tokens_per_s, 100 * in->mfu, zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_PARAM], b[0]),
           zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_GRAD], b[1]),
           zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_OPTIM], b[2]),
           zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_ACTIVATION], b[3]),
           zt_cli_bytes((double)in->mem.peak[ZT_MEM_TAG_ACTIVATION], b[4]), zt_cli_bytes((double)in->peak_rss, b[5]),
           duration(in->elapsed_s, e[0]), duration(per_step * (double)(p->end_step - in->step), e[1]));
  }
  if (in->act_choice) clear_status(p), print_choice(in->act_choice);
  fflush(stdout);
  pthread_mutex_unlock(&p->mu);
}

/* Config-file lines and flags alike go through the option table (cli/train_options.c). */
typedef struct cli_opts {
  zt_train_config *c;
  zt_cli_train_opts own;
} cli_opts;

static zt_status set_option(const char *name, const char *value, void *ud) {
  cli_opts *o = ud;
  return zt_cli_train_set(o->c, &o->own, name, value);
}

static int usage_error(void) { return (zt_cli_fail("train"), 2); }

static int run_train(zt_train_config *c, zt_comm *world, progress *p);

int zt_cmd_train(int argc, char **argv) {
  zt_train_config c;
  zt_train_config_default(&c);
  cli_opts o = {&c, zt_cli_train_opts_default()};
  if (zt_cli_wants_help(argc, argv)) {
    zt_cli_train_usage(stdout);
    return 0;
  }
  char name[64];
  const char *v;
  int rc;
  /* the config files first, so flags override them */
  for (int i = 0; (rc = zt_cli_option("train", argc, argv, &i, name, &v)) != 1;) {
    if (rc) return rc;
    if (!strcmp(name, "config") && zt_config_file_read(v, set_option, &o)) return usage_error();
  }
  for (int i = 0; (rc = zt_cli_option("train", argc, argv, &i, name, &v)) != 1;) {
    if (rc) return rc;
    if (strcmp(name, "config") && set_option(name, v, &o)) return usage_error();
  }
  zt_comm *world = NULL;
  if (zt_comm_world(&world)) return zt_cli_fail("train");
  progress p = {.log_every = o.own.log_every, .sample_len = o.own.sample_len};
  int code = run_train(&c, world, &p);
  zt_comm_free(world);
  return code;
}

/* The header line, and what a resume changes (the library refuses course changes unless asked). */
static void print_start(const zt_train_config *c, int ranks) {
  char rc[64];
  if (c->memory.recompute_plan[0])
    snprintf(rc, sizeof rc, "plan %.50s%s", c->memory.recompute_plan, strlen(c->memory.recompute_plan) > 50 ? "..." : "");
  else if (c->memory.recompute_budget > 0)
    snprintf(rc, sizeof rc, "budget %s", zt_cli_bytes((double)c->memory.recompute_budget, (char[32]){0}));
  else
    snprintf(rc, sizeof rc, "%s", zt_recompute_name(c->memory.recompute));
  static const char *const tiers[] = {"none", "bf16", "disk", "host"};
  printf("zt train: %s%s, data %s, batch %lld x seq %lld, %lld steps, lr %g, seed %llu, recompute %s, activation offload %s",
         c->model.preset, c->model.n_layer || c->model.n_head || c->model.n_embd || c->model.vocab_size || c->model.block_size ? " (shape overridden)" : "",
         c->data.path[0] ? c->data.path : "built-in", (long long)c->data.batch, (long long)c->data.seq, (long long)c->steps, c->optim.lr,
         (unsigned long long)c->seed, rc, tiers[c->memory.offload_activations]);
  if (c->data.microbatches > 1) printf(", %lld microbatches", (long long)c->data.microbatches);
  if (c->memory.offload_states && c->parallel.shard != ZT_SHARD_NONE)
    printf(", every FSDP state in %s", tiers[c->memory.offload_model & 3]);
  else if (c->memory.offload_model)
    printf(", model offload %s%s (%d slices, %d in RAM, %s)", tiers[c->memory.offload_model & 3],
           c->memory.offload_states ? " with every state" : "", c->memory.offload_slices,
           c->memory.offload_resident, c->memory.offload_mode ? "keep-graph" : "recompute");
  if (c->parallel.pp > 1 && ranks % c->parallel.pp == 0)
    printf(", %d ranks, pipeline %d x %d replica%s (schedule %s, balance %s)", ranks, c->parallel.pp,
           ranks / c->parallel.pp, ranks / c->parallel.pp == 1 ? "" : "s", c->parallel.schedule, c->parallel.pp_balance);
  else if (ranks > 1 || c->parallel.shard != ZT_SHARD_NONE)
    printf(", %d ranks, %s", ranks, c->parallel.shard == ZT_SHARD_NONE ? "ddp" : zt_shard_strategy_name(c->parallel.shard));
  printf("\n");
  zt_train_state st;
  char changes[1024];
  bool course = false;
  if (c->checkpoint.resume[0] && !zt_snapshot_read_state(c->checkpoint.resume, &st) &&
      !zt_train_resume_changes(c, ranks, &st, changes, sizeof changes, &course)) {
    printf("zt train: resuming '%s' at step %lld", c->checkpoint.resume, (long long)st.step);
    if (changes[0]) printf("; options changed since it was saved: %s", changes);
    printf("\n");
  }
  zt_clear_error(); /* the run itself reports a bad checkpoint */
  fflush(stdout);
}

static void print_summary(const zt_train_config *c, const zt_train_result *r, zt_gpt2 *m, int64_t sample_len) {
  printf("zt train: %lld steps in %.1f s, %.0f tok/s, %lld parameters, loss %.4f -> %.4f, val loss %.4f, "
         "sgemm ceiling %.0f GFLOP/s\n",
         (long long)r->steps_done, r->seconds, r->tokens_per_s, (long long)r->num_params, r->first_loss,
         r->last_loss, r->last_val_loss, r->sgemm_gflops);
  char b1[32], b2[32];
  printf("activations: blocks %s (n none, s selective, f full); peak %s measured, %s predicted\n", r->recompute_plan,
         zt_cli_bytes((double)r->act_peak, b1), zt_cli_bytes((double)r->act_peak_predicted, b2));
  if (r->offload_peak_bytes)
    printf("activation offload: peak %s in the tier; %.1f s putting saves in forward, %.1f s waiting for loads in "
           "backward\n",
           zt_cli_bytes((double)r->offload_peak_bytes, b1), r->offload_put_s, r->offload_wait_s);
  if (r->model_slices)
    printf("model offload: %d slices, %d in RAM at once; %lld slice loads (%lld prefetched); peak %s in its store "
           "(RAM peaks per tag and the store's device below)\n",
           r->model_slices, r->model_resident, (long long)r->model_slice_loads, (long long)r->model_slice_prefetched,
           zt_cli_bytes((double)r->model_store_peak_bytes, b1));
  if (r->model_slices)
    printf("model offload, the computing thread's time: %.1f s waiting for slices to load, %.1f s in updates, %.1f s "
           "in evictions; of the updates %.1f s at steps' ends, %.1f s waiting for moments, %.1f s in AdamW\n",
           r->model_load_wait_s, r->model_update_s, r->model_evict_s, r->model_update_end_s,
           r->model_update_read_wait_s, r->model_update_adamw_s);
  if (r->model_slices) {
    char dev[16];
    zt_device_str(r->model_store_device, dev);
    printf("model offload, peaks while training:");
    for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
      if (r->model_ram.peak[t] || r->model_store.peak[t])
        printf(" %s RAM %s %s %s;", zt_mem_tag_name((zt_mem_tag)t), zt_cli_bytes((double)r->model_ram.peak[t], b1), dev,
               zt_cli_bytes((double)r->model_store.peak[t], b2));
    printf("\n");
  }
  char mem[8192];
  zt_mem_report(mem, sizeof mem);
  printf("memory by tag (bytes):\n%s", mem);
  if (m && sample_len > 0 && zt_gpt2_get_config(m)->vocab_size == 256) {
    const int32_t prompt[] = {'\n'};
    int32_t *ids = NULL;
    int64_t n = 0;
    if (zt_gpt2_sample(m, prompt, 1, sample_len, 0.8, 0, c->seed, &ids, &n)) {
      zt_cli_fail("train");
      return;
    }
    printf("sample (temperature 0.8):\n");
    for (int64_t i = 1; i < n; i++) putchar((ids[i] >= 32 && ids[i] < 127) || ids[i] == '\n' ? ids[i] : '?');
    printf("\n");
    free(ids);
  }
}

/* --mem-limit's choice and what it predicts. */
static void print_plan(const zt_offload_plan *p) {
  char b[8][32];
  printf("zt train: memory plan: %d slices, %d in RAM at once (prefetch %s), activations: %s; predicted peak RAM %s "
         "(states %s, activations %s, I/O buffers %s, allocator cache %s, the rest of the process %s; the store's "
         "write-behind cap %s); the smallest plan needs %s\n",
         p->slices, p->resident, p->resident > 1 ? "on" : "off", zt_offload_plan_activations_name(p->activations_mode),
         zt_cli_bytes((double)p->peak, b[0]), zt_cli_bytes((double)p->states_bytes, b[1]),
         zt_cli_bytes((double)p->activation_bytes, b[2]), zt_cli_bytes((double)p->io_bytes, b[3]),
         zt_cli_bytes((double)p->cache_bytes, b[6]), zt_cli_bytes((double)p->fixed_bytes, b[4]),
         zt_cli_bytes((double)p->write_cap_bytes, b[7]), zt_cli_bytes((double)p->smallest_peak, b[5]));
  if (p->recomputed_slices)
    printf("zt train: memory plan: %d of the %d slices recompute their blocks instead of offloading their activations "
           "(the disk's time would pass the compute's): blocks %s (f recomputed, n offloaded)%s\n",
           p->recomputed_slices, p->slices, p->recompute_plan, p->trial ? "; predicted" : "");
  if (p->trial)
    printf("zt train: memory plan: activation trial: the run's step %d offloads every slice's activations, its step "
           "%d recomputes every slice's blocks, and from its step %d each slice keeps the faster way, measured (the "
           "peak above counts both)\n",
           ZT_ACT_TRIAL_FIRST, ZT_ACT_TRIAL_FIRST + 1, ZT_ACT_TRIAL_FIRST + 2);
  printf("zt train: predicted step %.1f s (compute %.1f s, disk %.1f s at %.2f GB/s read, %.2f GB/s written)\n",
         p->step_s, p->compute_s, p->io_s, p->read_bps / 1e9, p->write_bps / 1e9);
  char note[3072];
  zt_cli_train_message(p->note, note, sizeof note); /* the limit planned for, and whose it was */
  printf("zt train: memory plan: %s\n", note);
}

static int run_train(zt_train_config *c, zt_comm *world, progress *p) {
  int rank = zt_comm_rank(world), ranks = zt_comm_size(world);
  p->end_step = c->stop_at > 0 && c->stop_at < c->steps ? c->stop_at : c->steps;
  p->tty = rank == 0 && isatty(STDOUT_FILENO);
  const char *env = getenv("ZT_STEP_PROGRESS_S");
  char *end = NULL;
  p->slow_s = env ? strtod(env, &end) : 3.0;
  if (!env || end == env || *end || !(p->slow_s >= 0)) p->slow_s = 3.0;
  zt_offload_plan plan;
  if (zt_train_plan_memory(c, ranks, &plan)) { /* --mem-limit: the plan's options go into c */
    if (rank == 0) zt_cli_fail("train");
    return 1;
  }
  pthread_mutex_init(&p->mu, NULL);
  if (rank == 0) {
    if (plan.peak) print_plan(&plan);
    print_start(c, ranks);
    c->on_phase = on_phase;
    c->phase_user_data = p;
  }
  p->ticking = p->tty && pthread_create(&p->ticker, NULL, ticker, p) == 0;
  zt_train_result r;
  zt_gpt2 *m = NULL;
  /* every state in the store: the model never comes whole into RAM, so no sample at the end */
  zt_status s = zt_train_run_on(c, world, on_step, p, &r, c->memory.offload_states ? NULL : &m);
  if (p->ticking) {
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    clear_status(p);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->ticker, NULL);
  }
  pthread_mutex_destroy(&p->mu);
  if (s) {
    if (ranks == 1) return zt_cli_fail("train");
    if (r.failed_together) return rank == 0 ? zt_cli_fail("train") : 1; /* every rank knows; rank 0 says it */
    /* the other ranks may be waiting for this one in a collective: end the job */
    char m[4096];
    zt_cli_train_message(zt_last_error(), m, sizeof m);
    fprintf(stderr, "zt train (rank %d of %d): %s\nzt train: ending every rank of the job\n", rank, ranks, m);
    fflush(stderr);
    zt_comm_abort(world, 1);
    return 1;
  }
  if (rank == 0) print_summary(c, &r, m, p->sample_len);
  zt_gpt2_free(m);
  return 0;
}
