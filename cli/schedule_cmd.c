/* zt schedule: generate (or read) a pipeline schedule, validate and simulate it, and print its
 * timeline, bubble rate and peak activations per rank (or one JSON object); write its text form
 * (--out) and an SVG (--svg); --check FILE validates a schedule file and names the first broken
 * rule. All in one process (zt/pipeline.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "zt/pipeline.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: zt schedule --schedule NAME|FILE --stages P --microbatches M [options]\n"
          "       zt schedule --check FILE\n"
          "  --schedule NAME|FILE  a generator (%s)\n"
          "                        or a schedule file in the text form (docs/pipeline-schedules.md)\n"
          "  --stages P            pipeline ranks (not needed with a file)\n"
          "  --microbatches M      microbatches per step (not needed with a file)\n"
          "  --chunks V            chunks per rank (interleaved: default 2)\n"
          "  --costs F,B,W,C       forward, input-grad, weight-grad cost of one rank's share and the\n"
          "                        per-hop communication cost (default 1,1,1,0)\n"
          "  --mem-limit N         auto: activations per rank, in microbatches through one rank's share\n"
          "  --bytes-per-unit N    also report the peak in bytes (N bytes per unit)\n"
          "  --lower               add the sends and receives (the with-communication form)\n"
          "  --svg FILE            write the timeline as SVG\n"
          "  --out FILE            write the schedule's text form\n"
          "  --width N             columns of the text timeline (default 100)\n"
          "  --json                print one JSON object instead of the timeline\n"
          "  --check FILE          validate a schedule file; exit 1 naming the first broken rule\n",
          zt_pipeline_generator_names());
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    return 1;
  }
  size_t n = strlen(text);
  int bad = fwrite(text, 1, n, f) != n;
  bad |= fclose(f) != 0;
  if (bad) fprintf(stderr, "zt schedule: writing '%s' failed\n", path);
  return bad;
}

/* F,B,W,C: four finite numbers in [0, ZT_PIPELINE_MAX_COST] (NaN, inf and 1e308 are not costs). */
static int parse_costs(const char *v, zt_pipeline_costs *c) {
  double x[4];
  char part[64];
  const char *p = v;
  int n = 0;
  for (; n < 4 && p; n++) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    snprintf(part, sizeof part, "%.*s", (int)(len < sizeof part ? len : sizeof part - 1), p);
    if (len >= sizeof part || zt_config_parse_f64("--costs", part, 0, ZT_PIPELINE_MAX_COST, &x[n])) break;
    p = comma ? comma + 1 : NULL;
  }
  if (n < 4 || p) {
    fprintf(stderr, "zt schedule: --costs '%s' must be four numbers in [0, %g], F,B,W,C (e.g. 1,1,1,0)\n", v,
            ZT_PIPELINE_MAX_COST);
    return 2;
  }
  c->f = x[0], c->b = x[1], c->w = x[2], c->comm = x[3];
  return 0;
}

static void print_json(const zt_pipeline_schedule *s, const zt_pipeline_sim *sim) {
  printf("{\"schedule\":\"%s\",\"ranks\":%d,\"chunks\":%d,\"microbatches\":%d,\"step_time\":%.6g,\"bubble_rate\":%.6g,",
         s->name, s->ranks, s->chunks, s->microbatches, sim->step_time, sim->bubble_rate);
  const char *keys[4] = {"peak_activations", "peak_bytes", "idle", "idle_in_span"};
  const double *vals[4] = {sim->peak_activations, sim->peak_bytes, sim->idle, sim->idle_in_span};
  for (int k = 0; k < 4; k++) {
    printf("\"%s\":[", keys[k]);
    for (int r = 0; r < s->ranks; r++) printf("%s%.6g", r ? "," : "", vals[k][r]);
    printf("]%s", k < 3 ? "," : "}\n");
  }
}

static void print_summary(const zt_pipeline_schedule *s, const zt_pipeline_sim *sim, double bytes) {
  printf("step time %.6g, bubble rate %.2f%%\n", sim->step_time, 100 * sim->bubble_rate);
  printf("rank  idle      peak activations%s\n", bytes > 0 ? "  peak bytes" : "");
  for (int r = 0; r < s->ranks; r++) {
    char b[32];
    printf("%4d  %-8.4g  %-16.4g%s%s\n", r, sim->idle[r], sim->peak_activations[r], bytes > 0 ? "  " : "",
           bytes > 0 ? zt_cli_bytes(sim->peak_bytes[r], b) : "");
  }
}

typedef struct opts {
  const char *schedule, *svg, *out, *check;
  int64_t P, M, V, width;
  double mem_limit, bytes;
  zt_pipeline_costs costs;
  bool json, lower;
} opts;

static int parse(int argc, char **argv, opts *o) {
  int rc;
  char name[64];
  const char *v;
  for (int i = 0; (rc = zt_cli_arg("schedule", argc, argv, &i, "json lower", name, &v)) != 1;) {
    if (rc) return rc;
    if (!name[0]) {
      fprintf(stderr, "zt schedule: unexpected argument '%s' (see zt schedule --help)\n", v);
      return 2;
    }
    if (!strcmp(name, "schedule")) o->schedule = v;
    else if (!strcmp(name, "svg")) o->svg = v;
    else if (!strcmp(name, "out")) o->out = v;
    else if (!strcmp(name, "check")) o->check = v;
    else if (!strcmp(name, "json")) o->json = true;
    else if (!strcmp(name, "lower")) o->lower = true;
    else if (!strcmp(name, "stages")) rc = zt_cli_i64("schedule", "--stages", v, 1, 1024, &o->P);
    else if (!strcmp(name, "microbatches")) rc = zt_cli_i64("schedule", "--microbatches", v, 1, 100000, &o->M);
    else if (!strcmp(name, "chunks")) rc = zt_cli_i64("schedule", "--chunks", v, 1, 64, &o->V);
    else if (!strcmp(name, "width")) rc = zt_cli_i64("schedule", "--width", v, 10, 10000, &o->width);
    else if (!strcmp(name, "costs")) rc = parse_costs(v, &o->costs);
    else if (!strcmp(name, "mem-limit") || !strcmp(name, "bytes-per-unit")) {
      double *dst = name[0] == 'm' ? &o->mem_limit : &o->bytes;
      char flag[80];
      snprintf(flag, sizeof flag, "--%s", name);
      if (zt_config_parse_f64(flag, v, 0, 1e18, dst)) {
        fprintf(stderr, "zt schedule: %s\n", zt_last_error());
        return 2;
      }
    } else {
      fprintf(stderr, "zt schedule: unknown option '--%s' (see zt schedule --help)\n", name);
      return 2;
    }
    if (rc) return rc;
  }
  return 0;
}

/* The schedule named by --schedule: a file when a path of that name exists, else a generator.
 * stat, not open: opening a FIFO would wait for a writer (the reader refuses all but regular
 * files, saying what it is). */
static int load(const opts *o, zt_pipeline_schedule **s) {
  struct stat sb;
  if ((strchr(o->schedule, '/') || strchr(o->schedule, '.')) && stat(o->schedule, &sb) == 0) {
    if (zt_pipeline_schedule_read(o->schedule, s)) return zt_cli_fail("schedule");
    return 0;
  }
  if (!o->P || !o->M) {
    fprintf(stderr, "zt schedule: --schedule %s needs --stages P and --microbatches M\n", o->schedule);
    return 2;
  }
  zt_pipeline_gen_options g = {.name = o->schedule, .ranks = (int)o->P, .microbatches = (int)o->M,
                               .chunks = (int)o->V, .costs = o->costs, .mem_limit = o->mem_limit};
  if (zt_pipeline_generate(&g, s)) return zt_cli_fail("schedule");
  return 0;
}

int zt_cmd_schedule(int argc, char **argv) {
  if (zt_cli_wants_help(argc, argv)) {
    usage(stdout);
    return 0;
  }
  opts o = {.costs = zt_pipeline_costs_default(), .width = 100};
  int rc = parse(argc, argv, &o);
  if (rc) return rc;
  if (o.check) {
    zt_pipeline_schedule *s;
    if (zt_pipeline_schedule_read(o.check, &s)) return zt_cli_fail("schedule");
    /* the validation zt train runs: a compute-only file is checked lowered too */
    rc = zt_pipeline_validate(s) ? zt_cli_fail("schedule") : 0;
    if (!rc)
      printf("%s: valid (%d rank%s, %d chunk%s per rank, %d microbatch%s%s)\n", o.check, s->ranks,
             s->ranks == 1 ? "" : "s", s->chunks, s->chunks == 1 ? "" : "s", s->microbatches,
             s->microbatches == 1 ? "" : "es", zt_pipeline_has_comm(s) ? "" : "; with its sends and receives too");
    zt_pipeline_schedule_free(s);
    return rc;
  }
  if (!o.schedule) {
    usage(stderr);
    return 2;
  }
  zt_pipeline_schedule *s = NULL;
  if ((rc = load(&o, &s))) return rc;
  if (o.lower) {
    zt_pipeline_schedule *l;
    if (zt_pipeline_lower(s, &l)) rc = zt_cli_fail("schedule");
    else zt_pipeline_schedule_free(s), s = l;
  }
  zt_pipeline_sim *sim = NULL;
  char *text = NULL;
  o.costs.bytes_per_unit = o.bytes;
  if (!rc && (zt_pipeline_validate(s) || zt_pipeline_simulate(s, &o.costs, &sim))) rc = zt_cli_fail("schedule");
  if (!rc && o.out) {
    if (zt_pipeline_schedule_format(s, &text)) rc = zt_cli_fail("schedule");
    else rc = write_text(o.out, text);
    free(text);
  }
  if (!rc && o.svg) {
    if (zt_pipeline_render_svg(s, sim, &text)) rc = zt_cli_fail("schedule");
    else rc = write_text(o.svg, text);
    free(text);
  }
  if (!rc && o.json) print_json(s, sim);
  else if (!rc) {
    if (zt_pipeline_render_text(s, sim, (int)o.width, &text)) rc = zt_cli_fail("schedule");
    else fputs(text, stdout), free(text), print_summary(s, sim, o.bytes);
  }
  zt_pipeline_sim_free(sim);
  zt_pipeline_schedule_free(s);
  return rc;
}
