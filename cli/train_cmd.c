/* zt train: flags and an optional config file (same names; cli/train_options.c) into a
 * zt_train_config, a progress line every N steps (with elapsed time and ETA), progress inside steps that take
 * long (a live status line on a terminal, plain lines otherwise), a summary, and
 * (byte-level models) a sample of text. Under mpirun, an error that did not reach every
 * rank at once ends the whole job, so no rank is left waiting. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Shown state, shared by the training thread (callbacks) and, on a terminal, the ticker thread. */
typedef struct progress {
  int64_t log_every, sample_len, end_step;
  char plan_report[512];  /* --plan-report */
  bool tty;
  double slow_s;         /* a step this far in shows its part (ZT_STEP_PROGRESS_S; default 3 s on a terminal,
                          * 30 s in a log, where a line per part would flood it) */
  double part_shown;     /* plain output: when the last part line was printed */
  const char *save_dir;  /* --save: a line per checkpoint written */
  double win_tokens, win_s, win_mfu_s; /* since the last progress line: tokens, seconds, mfu x seconds */
  size_t warned;         /* bytes of zt_train_result.warnings already printed (as the steps met them) */
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
  /* plain output: a line per part of a long step, at most one per slow_s */
  if (!p->tty && t - p->step_t0 >= p->slow_s && t - p->part_shown >= p->slow_s) {
    p->part_shown = t;
    char a[32];
    printf("step %5lld/%lld: %s (%s into the step)\n", (long long)step, (long long)p->end_step,
           zt_train_phase_name(ph), duration(t - p->step_t0, a));
    fflush(stdout);
  }
  pthread_mutex_unlock(&p->mu);
}

/* "zt train: saved DIR/step-N" (the version 'latest' names now), then tail. */
static void print_saved(const char *dir, int64_t step, const char *tail) {
  char v[4096];
  if (zt_snapshot_resolve(dir, v, sizeof v)) snprintf(v, sizeof v, "%s (step %lld)", dir, (long long)step);
  zt_clear_error();
  printf("zt train: saved %s%s\n", v, tail);
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
  p->win_tokens += in->tokens_per_s * in->step_ms / 1e3, p->win_s += in->step_ms / 1e3;
  p->win_mfu_s += in->mfu * in->step_ms / 1e3;
  if (in->warning) {
    clear_status(p);
    fprintf(stderr, "zt train: warning: %s\n", in->warning);
    p->warned += strlen(in->warning) + (p->warned ? 2 : 0); /* "; " between them */
  }
  bool show = !(in->step % p->log_every && in->step != p->end_step && isnan(in->val_loss));
  if (show) {
    /* tokens/s and MFU over the steps since the last line, not the last step alone */
    double tps = p->win_s > 0 ? p->win_tokens / p->win_s : in->tokens_per_s;
    double mfu = p->win_s > 0 ? p->win_mfu_s / p->win_s : in->mfu;
    p->win_tokens = p->win_s = p->win_mfu_s = 0;
    clear_status(p);
    char b[6][32], e[2][32];
    double per_step = in->elapsed_s / (double)(in->step - in->first_step + 1);
    printf("step %5lld/%lld | loss %.4f", (long long)in->step, (long long)in->total_steps, in->loss);
    if (!isnan(in->val_loss)) printf(" | val %.4f", in->val_loss);
    if (in->act_trial) printf(" | trial: every slice's activations %s", in->act_trial == ZT_ACT_TRIAL_STEP_OFFLOAD ? "offloaded" : "recomputed");
    if (!isnan(in->pp_bubble)) printf(" | bubble %.1f%% (sim %.1f%%)", 100 * in->pp_bubble, 100 * in->pp_sim_bubble);
    if (in->io_read_bytes || in->io_write_bytes) {
      char r[32], w[32];
      printf(" | disk read %s in %.1f s, written %s in %.1f s", zt_cli_bytes((double)in->io_read_bytes, r),
             in->io_read_ms / 1e3, zt_cli_bytes((double)in->io_write_bytes, w), in->io_write_ms / 1e3);
    }
    printf(" | lr %.2e | %.0f tok/s | mfu %.1f%% | mem param %s grad %s optim %s act %s (peak %s) | rss %s | %s, ETA %s\n",
           in->lr, tps, 100 * mfu, zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_PARAM], b[0]),
           zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_GRAD], b[1]),
           zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_OPTIM], b[2]),
           zt_cli_bytes((double)in->mem.current[ZT_MEM_TAG_ACTIVATION], b[3]),
           zt_cli_bytes((double)in->mem.peak[ZT_MEM_TAG_ACTIVATION], b[4]), zt_cli_bytes((double)in->peak_rss, b[5]),
           duration(in->elapsed_s, e[0]), duration(per_step * (double)(p->end_step - in->step), e[1]));
  }
  if (in->act_choice) clear_status(p), print_choice(in->act_choice);
  if (in->saved_step) clear_status(p), print_saved(p->save_dir, in->saved_step, "");
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

/* ------------------------------------------------ stopping on a signal
 * The first SIGINT, SIGTERM, SIGHUP or SIGUSR1 asks the run to stop at its next safe point and
 * save (zt_train_config.stop_request); a second one, a second or more after the first, ends the
 * process at once (by the signal's default action). A copy that arrives within that second is
 * the same request delivered twice: Ctrl-C under mpirun reaches the ranks from the terminal and
 * again from mpirun. */
static volatile sig_atomic_t g_stop;     /* the first signal's number (0: none) */
static volatile sig_atomic_t g_speak;    /* this process says so on stderr (rank 0) */
static struct timespec g_stop_t;         /* when the first came */
static const int k_stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};

static volatile sig_atomic_t g_under_mpirun; /* a rank of an mpirun job */

static void on_stop_signal(int sig, siginfo_t *info, void *uc) {
  (void)uc;
  int saved = errno;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (g_stop) {
    if ((double)(now.tv_sec - g_stop_t.tv_sec) + (double)(now.tv_nsec - g_stop_t.tv_nsec) / 1e9 >= 1.0) {
      signal(sig, SIG_DFL); /* the second: at once */
      raise(sig);
    }
    errno = saved;
    return;
  }
  g_stop_t = now;
  g_stop = sig;
  static const char head[] = "\nzt train: ", tail[] =
      " received: stopping at the next safe point (the end of this step, or between its microbatches) and saving "
      "a checkpoint when --save is given; send it again to exit at once\n";
  const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "SIGUSR1";
  /* mpirun's own SIGTERM (its job ending: another rank failed, or it was told to stop) is
   * followed by a SIGKILL a second later: no promise to make */
  bool from_mpirun = g_under_mpirun && info && info->si_pid == getppid();
  if (g_speak && !from_mpirun) {
    ssize_t w = write(STDERR_FILENO, head, sizeof head - 1);
    w = write(STDERR_FILENO, name, strlen(name));
    w = write(STDERR_FILENO, tail, sizeof tail - 1);
    (void)w;
  }
  errno = saved;
}

static void catch_stop_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  g_under_mpirun = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
  for (size_t i = 0; i < sizeof k_stop_signals / sizeof k_stop_signals[0]; i++) sigaction(k_stop_signals[i], &sa, NULL);
}

static const char *signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "SIGUSR1";
}

/* An argument as the shell reads it back: as it is when it holds only safe characters, else in
 * single quotes. */
static void print_shell_word(const char *a) {
  bool plain = *a != '\0';
  for (const char *q = a; *q && plain; q++)
    plain = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || strchr("_-./:=,+@%", *q);
  if (plain) {
    printf("%s", a);
    return;
  }
  putchar('\'');
  for (const char *q = a; *q; q++) q[0] == '\'' ? printf("'\\''") : putchar(*q);
  putchar('\'');
}

/* "resume with: [mpirun -np N ]zt train ARGS --resume DIR": the command as given, its own
 * --resume left out. */
static void print_resume_hint(int argc, char **argv, int ranks, const char *dir) {
  printf("zt train: resume with: ");
  if (ranks > 1) printf("mpirun -np %d ", ranks);
  print_shell_word(zt_cli_program);
  printf(" train");
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--resume") && i + 1 < argc) {
      i++;
      continue;
    }
    if (!strncmp(argv[i], "--resume=", 9)) continue;
    putchar(' ');
    print_shell_word(argv[i]);
  }
  printf(" --resume ");
  print_shell_word(dir);
  printf("\n");
}

static int run_train(zt_train_config *c, zt_comm *world, progress *p, int argc, char **argv);

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
  snprintf(p.plan_report, sizeof p.plan_report, "%s", o.own.plan_report);
  g_speak = zt_comm_rank(world) == 0;
  c.stop_request = &g_stop;
  catch_stop_signals();
  int code = run_train(&c, world, &p, argc, argv);
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
  char cnt[2][64], model[700];
  zt_lm_config g;
  bool own_shape = c->model.n_layer || c->model.n_head || c->model.n_embd || c->model.vocab_size || c->model.block_size;
  if ((c->model.init_from[0] || own_shape) && zt_train_model_config(c, &g) == ZT_OK) {
    zt_lm_dims d = zt_lm_config_dims(&g);
    snprintf(model, sizeof model, "%s%s%s%s%s (%d layers, %d heads, dim %d, vocab %d, ctx %d)",
             c->model.init_from[0] ? zt_lm_family_name(g.family) : c->model.preset,
             c->model.init_from[0] ? " from '" : "", c->model.init_from[0] ? c->model.init_from : "",
             c->model.init_from[0] ? "'" : "", own_shape && !c->model.init_from[0] ? ", shape given" : "", d.n_layer,
             d.n_head, d.hidden, d.vocab, d.context);
  } else {
    snprintf(model, sizeof model, "%s", c->model.preset);
  }
  zt_clear_error(); /* the run reports a bad shape itself */
  printf("zt train: %s, data %s, batch %lld x seq %lld, %s, lr %g, seed %llu, recompute %s, activation offload %s",
         model, c->data.path[0] ? c->data.path : "built-in", (long long)c->data.batch, (long long)c->data.seq, zt_cli_count(c->steps, "step", cnt[0]), c->optim.lr,
         (unsigned long long)c->seed, rc, zt_offload_tier_name(c->memory.offload_activations));
  if (c->data.microbatches > 1) printf(", %lld microbatches", (long long)c->data.microbatches);
  if (c->memory.offload_states && c->parallel.shard != ZT_SHARD_NONE)
    printf(", every FSDP state in %s", zt_offload_tier_name(c->memory.offload_model));
  else if (c->memory.offload_model)
    printf(", model offload %s%s (%d slices, %d in RAM, %s)", zt_offload_tier_name(c->memory.offload_model),
           c->memory.offload_states ? " with every state" : "", c->memory.offload_slices,
           c->memory.offload_resident,
           c->memory.offload_mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH ? "keep-graph" : "recompute");
  if (c->parallel.pp > 1 && ranks % c->parallel.pp == 0)
    printf(", %s, pipeline %d x %d replica%s (schedule %s, balance %s)", zt_cli_count(ranks, "rank", cnt[1]), c->parallel.pp,
           ranks / c->parallel.pp, ranks / c->parallel.pp == 1 ? "" : "s", c->parallel.schedule, c->parallel.pp_balance);
  else if (ranks > 1 || c->parallel.shard != ZT_SHARD_NONE)
    printf(", %s, %s", zt_cli_count(ranks, "rank", cnt[1]), c->parallel.shard == ZT_SHARD_NONE ? "ddp" : zt_shard_strategy_name(c->parallel.shard));
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

/* Text from the trained model with the run's tokenizer, or bytes for a 256-token model; else a line
 * saying why there is none. */
static void print_sample(const zt_train_config *c, const zt_model *m, int64_t len) {
  if (!m || !m->ctx) {
    printf("no sample: with --offload-states the model is never whole in RAM; zt sample --checkpoint DIR samples "
           "from a checkpoint\n");
    return;
  }
  int vocab = zt_lm_config_dims(zt_model_config(m)).vocab;
  bool named = c->data.encoder[0] || c->data.tokenizer[0]; /* a tokenizer given, else bytes */
  if (!named && vocab != 256) {
    printf("no sample: the model's %d token ids are not bytes and the run has no tokenizer to turn them into text "
           "(give --tokenizer DIR or --encoder and --merges, what its data was tokenized with)\n",
           vocab);
    return;
  }
  zt_tokenizer *tok = NULL;
  int32_t *prompt = NULL, *ids = NULL;
  int64_t np = 0, n = 0;
  char *text = NULL;
  size_t tl = 0;
  zt_status s = c->data.tokenizer[0] ? zt_tokenizer_hf(c->data.tokenizer, &tok)
               : c->data.encoder[0] ? zt_tokenizer_gpt2(c->data.encoder, c->data.merges, &tok)
                                    : zt_tokenizer_byte(&tok);
  if (s ||
      zt_tokenizer_encode(tok, "\n", 1, &prompt, &np) ||
      zt_lm_sample(m, prompt, np, len, 0.8, 0, c->seed, &ids, &n) ||
      zt_tokenizer_decode(tok, ids + np, n - np, &text, &tl)) {
    zt_cli_fail("train");
  } else {
    printf("sample (temperature 0.8):\n");
    /* bytes: the printable ones; text of a tokenizer: as it is */
    for (size_t i = 0; i < tl; i++)
      putchar(named || (text[i] >= 32 && text[i] < 127) || text[i] == '\n' ? text[i] : '?');
    printf("\n");
  }
  free(text), free(ids), free(prompt);
  zt_tokenizer_free(tok);
}

static void print_summary(const zt_train_config *c, const zt_train_result *r, const zt_model *m, int64_t sample_len) {
  char steps[64];
  printf("zt train: %s in %.1f s, %.0f tok/s, %lld parameters, loss %.4f -> %.4f, val loss %.4f, "
         "sgemm ceiling %.0f GFLOP/s\n",
         zt_cli_count(r->steps_done, "step", steps), r->seconds, r->tokens_per_s, (long long)r->num_params, r->first_loss,
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
  if (sample_len > 0) print_sample(c, m, sample_len);
}

/* The planner's configuration for the run (or the options given) and what it predicts. */
static void print_prediction(const zt_plan_run *pr, int64_t held_limit) {
  if (!pr->source[0]) return;
  if (!pr->entry.pred.rss) {
    printf("zt train: plan: %s\n", pr->source);
    return;
  }
  char flags[2048];
  zt_plan_config_flags(&pr->entry.config, flags, sizeof flags);
  printf("zt train: plan: %s: %s (%s)\n", pr->source, pr->entry.name, flags);
  zt_cli_plan_prediction(stdout, "zt train: plan: predicted ", &pr->entry.pred);
  zt_cli_plan_calibration(stdout, "zt train: plan: ", &pr->cal);
  char b[32];
  if (held_limit > 0)
    printf("zt train: plan: the allocator holds at most %s a rank (live and cached: the limit less the rest and the "
           "margin)\n", zt_cli_bytes((double)held_limit, b));
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

static int run_train(zt_train_config *c, zt_comm *world, progress *p, int argc, char **argv) {
  int rank = zt_comm_rank(world), ranks = zt_comm_size(world);
  p->end_step = c->stop_at > 0 && c->stop_at < c->steps ? c->stop_at : c->steps;
  /* a live status line only in one process: under mpirun a rank's stdout is a pseudo-terminal
   * whatever mpirun's own output is (a log file would collect the line's redraws) */
  p->tty = ranks == 1 && isatty(STDOUT_FILENO);
  p->save_dir = c->checkpoint.save;
  const char *env = getenv("ZT_STEP_PROGRESS_S");
  char *end = NULL;
  double dflt = p->tty ? 3.0 : 30.0;
  p->slow_s = env ? strtod(env, &end) : dflt;
  if (!env || end == env || *end || !(p->slow_s >= 0)) p->slow_s = dflt;
  if (p->plan_report[0] && zt_cli_plan_report_check(p->plan_report)) return 1; /* before anything runs */
  /* --plan: the planner's options go into c, or its prediction of the options given is printed */
  zt_plan_run pr;
  bool by_hand = !c->plan[0];
  if (!by_hand && zt_train_plan(c, world, &pr)) {
    if (rank == 0) zt_cli_fail("train");
    return 1;
  }
  zt_offload_plan plan;
  if (zt_train_plan_memory(c, ranks, &plan)) { /* --mem-limit: the plan's options go into c */
    if (rank == 0) zt_cli_fail("train");
    return 1;
  }
  if (by_hand && zt_train_plan(c, world, &pr)) { /* a prediction that cannot be made costs the run nothing */
    if (c->plan_calibration[0]) { /* but a calibration file given is an input, checked as every other */
      if (rank == 0) zt_cli_fail("train");
      return 1;
    }
    if (rank == 0) fprintf(stderr, "zt train: warning: no prediction: %s\n", zt_last_error());
    zt_clear_error();
    memset(&pr, 0, sizeof pr);
  }
  pthread_mutex_init(&p->mu, NULL);
  if (rank == 0) {
    if (plan.peak) print_plan(&plan);
    print_prediction(&pr, c->memory.held_limit);
    print_start(c, ranks);
    c->on_phase = on_phase;
    c->phase_user_data = p;
  }
  p->ticking = p->tty && pthread_create(&p->ticker, NULL, ticker, p) == 0;
  zt_train_result r;
  zt_model m = {0};
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
  if (rank == 0 && r.warnings[p->warned ? p->warned + 2 : 0] && strlen(r.warnings) > p->warned)
    fprintf(stderr, "zt train: warning: %s\n", r.warnings + (p->warned ? p->warned + 2 : 0));
  int code = 0;
  if (r.stopped) { /* a signal: what was kept, and how to go on */
    int sig = r.stop_signal > 0 ? r.stop_signal : g_stop ? g_stop : SIGTERM; /* the one some rank got */
    code = 128 + sig;
    if (rank == 0) {
      print_summary(c, &r, NULL, 0);
      printf("zt train: stopped by %s after step %lld of %lld\n", signal_name(sig), (long long)r.last_step,
             (long long)c->steps);
      if (r.saved_step) {
        print_saved(c->checkpoint.save, r.saved_step, "");
        print_resume_hint(argc, argv, ranks, c->checkpoint.save);
      } else if (!c->checkpoint.save[0]) {
        printf("zt train: nothing was saved (no --save DIR); the steps of this run are lost\n");
      } else {
        printf("zt train: no step completed in this run: nothing new to save\n");
      }
    }
  } else if (rank == 0) {
    print_summary(c, &r, &m, p->sample_len);
    if (pr.entry.pred.rss) zt_cli_plan_versus(stdout, "zt train: plan: ", &pr.entry.pred, &r);
    if (p->plan_report[0]) zt_cli_plan_report(p->plan_report, &pr, &r);
  }
  fflush(stdout);
  zt_model_free(&m);
  return code;
}
