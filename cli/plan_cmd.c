/* zt plan: the configurations a model, a batch and a number of ranks allow, each predicted (peak
 * RAM a rank by tag, disk, step time from a calibration of this machine) and ranked, the fastest
 * that fits the limit first; why the others do not fit; the choice as zt train's flags; all of
 * it as JSON (--out) for zt train --plan FILE. Under mpirun the calibration measures the
 * collectives at the world's size (rank 0 prints). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: zt plan [options]   (under mpirun -np N the collectives are measured at N ranks)\n"
          "the run's shape, as zt train takes it:\n"
          "  --model NAME, --layers N, --heads N, --dim N, --vocab N, --ctx N, --init-from DIR, --data FILE\n"
          "  --batch B --seq T    the global batch and sequence length\n"
          "  --microbatches M     only this many a replica (default: the planner tries 1, 2, 4, ...)\n"
          "  --mem-limit SIZE     RAM a rank (default: the memory available: the cgroup's limit, else MemAvailable)\n"
          "  --offload-dir DIR    where the disk tier is probed and would live (default $TMPDIR or /tmp)\n"
          "  --threads N          kernel threads a rank (default all cores)\n"
          "  --steps N --eval-every N  whether an evaluation runs between steps, which a pipeline's peak\n"
          "                       counts (default 600 and 100: it does)\n"
          "the plan:\n"
          "  --ranks N            ranks of the run (default: mpirun's, else 1)\n"
          "  --disk-limit SIZE    bytes of the disk tier a rank may hold (default no limit)\n"
          "  --tier TIER          the tier offload configurations use: disk | host | bf16 (default disk)\n"
          "  --top N              the fastest N that fit in the table (default 12)\n"
          "  --out FILE           the whole plan as JSON (zt train --plan FILE[:N] replays it)\n"
          "calibration (the figures step times are predicted from):\n"
          "  --plan-calibration FILE  read it (zt plan --save-calibration wrote it) instead of measuring\n"
          "  --reps N             measurements a figure, the median kept (default 3); 0: defaults, nothing measured\n"
          "  --save-calibration FILE  write the calibration used\n"
          "ZT_PLAN_CALIBRATION=\"gemm=G,attn=G,elem=BPS,read=BPS,write=BPS,lat=S,bw=BPS,base=BYTES\" gives figures too.\n");
}

typedef struct plan_opts {
  int64_t ranks, top, reps, disk_limit;
  const char *out, *save_cal, *tier;
} plan_opts;

static int own_option(const char *name, const char *v, plan_opts *o) {
  if (!strcmp(name, "ranks")) return zt_cli_i64("plan", "--ranks", v, 1, 1 << 20, &o->ranks);
  if (!strcmp(name, "top")) return zt_cli_i64("plan", "--top", v, 1, 1 << 20, &o->top);
  if (!strcmp(name, "reps")) return zt_cli_i64("plan", "--reps", v, 0, 1000, &o->reps);
  if (!strcmp(name, "out")) return o->out = v, 0;
  if (!strcmp(name, "save-calibration")) return o->save_cal = v, 0;
  if (!strcmp(name, "tier")) return o->tier = v, 0;
  if (!strcmp(name, "disk-limit")) {
    zt_train_config t; /* the size syntax of --mem-limit */
    zt_train_config_default(&t);
    if (zt_train_config_set(&t, "mem-limit", v)) {
      fprintf(stderr, "zt plan: --disk-limit '%s' is a size (e.g. 20G)\n", v);
      return 2;
    }
    o->disk_limit = t.memory.mem_limit;
    return 0;
  }
  return -1;
}

/* The options zt plan takes from zt train's table: the run's shape and where it runs. */
static bool shape_option(const char *name) {
  static const char *const k[] = {"model", "layers", "heads", "dim", "vocab", "ctx", "init-from", "data",
                                  "batch", "seq", "microbatches", "mem-limit", "offload-dir", "threads",
                                  "steps", "eval-every", "plan-calibration", NULL};
  for (int i = 0; k[i]; i++)
    if (!strcmp(k[i], name)) return true;
  return false;
}

static void print_table(const zt_plan *p, int64_t top) {
  char b[3][32];
  int fit = 0;
  for (int i = 0; i < p->n; i++) fit += p->entries[i].fits;
  printf("zt plan: %d configurations, %d fit %s a rank (%s)\n", p->n, fit, zt_cli_bytes((double)p->limit, b[0]),
         p->limit_source);
  printf("%4s  %-58s %10s %10s %9s\n", "rank", "configuration", "peak RSS", "disk", "step s");
  int shown = 0;
  for (int i = 0; i < p->n && shown < top; i++) {
    const zt_plan_entry *e = &p->entries[i];
    if (!e->fits) break;
    printf("%4d  %-58s %10s %10s %9.3f\n", i + 1, e->name, zt_cli_bytes((double)e->pred.rss, b[0]),
           e->pred.disk_held ? zt_cli_bytes((double)e->pred.disk_held, b[1]) : "-", e->pred.step_s);
    shown++;
  }
  if (fit > shown) printf("      ... and %d more that fit (--top N shows more; --out FILE has them all)\n", fit - shown);
  if (p->n > fit) {
    /* the others by what stops them: the smallest few */
    printf("do not fit (%d), the smallest first:\n", p->n - fit);
    int k = 0;
    for (int i = fit; i < p->n && k < 5; i++, k++)
      printf("      %-58s %s\n", p->entries[i].name, p->entries[i].why);
  }
}

int zt_cmd_plan(int argc, char **argv) {
  if (zt_cli_wants_help(argc, argv)) {
    usage(stdout);
    return 0;
  }
  zt_train_config c;
  zt_train_config_default(&c);
  plan_opts o = {.ranks = 0, .top = 12, .reps = 3};
  char name[64];
  const char *v;
  int rc;
  for (int i = 0; (rc = zt_cli_option("plan", argc, argv, &i, name, &v)) != 1;) {
    if (rc) return rc;
    int own = own_option(name, v, &o);
    if (own > 0) return own;
    if (own == 0) continue;
    if (!shape_option(name)) {
      fprintf(stderr, "zt plan: unknown option '--%s' (see zt plan --help)\n", name);
      return 2;
    }
    if (zt_train_config_set(&c, name, v)) {
      char m[2048];
      zt_cli_train_message(zt_last_error(), m, sizeof m);
      fprintf(stderr, "zt plan: %s\n", m);
      return 2;
    }
  }
  zt_comm *world = NULL;
  if (zt_comm_world(&world)) return zt_cli_fail("plan");
  int rank = zt_comm_rank(world), n = zt_comm_size(world);
  if (o.ranks > 0 && n > 1 && o.ranks != n) {
    if (rank == 0) fprintf(stderr, "zt plan: --ranks %lld under mpirun -np %d: give one or the other\n", (long long)o.ranks, n);
    zt_comm_free(world);
    return 2;
  }
  zt_set_num_threads(c.threads);
  zt_plan_space sp;
  zt_plan_calibration cal;
  zt_plan *p = NULL;
  zt_status s = zt_plan_space_of(&c, o.ranks > 0 ? (int)o.ranks : n, &sp);
  sp.microbatches = c.data.microbatches > 1 ? c.data.microbatches : 0;
  sp.disk_limit = o.disk_limit;
  if (!s && o.tier) {
    zt_train_config t;
    zt_train_config_default(&t);
    s = zt_train_config_set(&t, "offload-model", o.tier);
    sp.tier = t.memory.offload_model;
  }
  /* measured at this world: a plan for more ranks than run it measures no collective */
  if (!s) s = zt_plan_calibration_for(&c, n > 1 ? world : NULL, &sp, (int)o.reps, &cal);
  if (!s) s = zt_plan_make(&sp, &cal, &p);
  if (!s && rank == 0 && o.save_cal) s = zt_plan_calibration_write(&cal, o.save_cal);
  if (!s && rank == 0 && o.out) s = zt_plan_write(p, o.out);
  int code = 0;
  if (s) {
    code = rank == 0 ? zt_cli_fail("plan") : 1;
  } else if (rank == 0) {
    char desc[256];
    zt_lm_config_describe(&sp.model, desc, sizeof desc);
    printf("zt plan: %s; batch %lld x seq %lld on %d rank%s\n", desc, (long long)sp.batch, (long long)sp.seq, sp.world,
           sp.world == 1 ? "" : "s");
    zt_cli_plan_calibration(stdout, "zt plan: ", &cal);
    if (n == 1 && sp.world > 1)
      printf("zt plan: measured in one process for %d ranks: the collectives are defaults and the compute rates a "
             "process's alone; mpirun -np %d zt plan measures them as the run will have them\n",
             sp.world, sp.world);
    print_table(p, o.top);
    if (p->chosen >= 0) {
      char flags[2048];
      zt_plan_config_flags(&p->entries[p->chosen].config, flags, sizeof flags);
      printf("chosen: %s\n", p->entries[p->chosen].name);
      zt_cli_plan_prediction(stdout, "  ", &p->entries[p->chosen].pred);
      printf("  zt train flags: %s%s\n", flags, sp.world > 1 ? " (under mpirun)" : "");
      if (o.out) printf("  or: zt train --plan %s\n", o.out);
    } else {
      zt_status r = zt_plan_refusal(p);
      (void)r;
      code = zt_cli_fail("plan");
    }
  }
  zt_plan_free(p);
  zt_comm_free(world);
  return code;
}
