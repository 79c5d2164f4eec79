/* zt: the zerotrain command. Dispatches to subcommands; prints usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: zt <command> [options]\n"
          "commands:\n"
          "  train      train a GPT model (default: gpt2-tiny on the built-in data)\n"
          "  sample     generate text from a checkpoint\n"
          "  tokenize   turn a text file into a token file\n"
          "  plot       draw loss and memory curves from a metrics file as SVG\n"
          "  bench      benchmarks (zt bench step ...)\n"
          "  consolidate  turn a sharded (FSDP) checkpoint into a single-process one\n"
          "  schedule   pipeline schedules: generate, check, simulate, draw\n"
          "  version    which zerotrain this is (also --version)\n"
          "run 'zt <command> --help' for a command's options\n");
}

/* Edit distance (insertions, deletions, substitutions, a swap of neighbours) of two short words. */
static int distance(const char *a, const char *b) {
  enum { MAX = 64 };
  size_t n = strlen(a), m = strlen(b);
  if (n >= MAX || m >= MAX) return MAX;
  int d[MAX][MAX];
  for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[n][m];
}

const char *zt_cli_closest(const char *name, const char *const *candidates) {
  const char *best = NULL;
  int bd = 0, limit = strlen(name) <= 4 ? 1 : strlen(name) <= 8 ? 2 : 3;
  for (int i = 0; candidates[i]; i++) {
    int d = distance(name, candidates[i]);
    if (d <= limit && (!best || d < bd)) best = candidates[i], bd = d;
  }
  return best;
}

const char *zt_cli_count(int64_t n, const char *word, char buf[64]) {
  snprintf(buf, 64, "%lld %s%s", (long long)n, word, n == 1 ? "" : "s");
  return buf;
}

const char *zt_cli_bytes(double b, char *buf) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, i++;
  snprintf(buf, 32, i ? "%.1f %s" : "%.0f %s", b, u[i]);
  return buf;
}

int zt_cli_fail(const char *cmd) {
  char m[4096];
  zt_cli_train_message(zt_last_error(), m, sizeof m);
  fprintf(stderr, "zt %s: %s\n", cmd, m);
  return 1;
}

bool zt_cli_wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
  return false;
}

/* Is name one of the space-separated words of list? */
static bool in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *w = list; w && *w;) {
    const char *e = strchr(w, ' ');
    size_t l = e ? (size_t)(e - w) : strlen(w);
    if (l == n && !strncmp(w, name, n)) return true;
    w = e ? e + 1 : w + l;
  }
  return false;
}

int zt_cli_arg(const char *cmd, int argc, char **argv, int *i, const char *flags, char name[64], const char **value) {
  if (*i >= argc) return 1;
  const char *a = argv[(*i)++];
  name[0] = '\0';
  if (a[0] != '-' || !a[1]) {
    *value = a;
    return 0;
  }
  if (a[1] != '-' || !a[2]) {
    fprintf(stderr, "zt %s: unknown option '%s' (options start with --; see zt %s --help)\n", cmd, a, cmd);
    return 2;
  }
  const char *eq = strchr(a, '=');
  size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
  if (len >= 64) {
    fprintf(stderr, "zt %s: unknown option '%.70s...' (see zt %s --help)\n", cmd, a, cmd);
    return 2;
  }
  memcpy(name, a + 2, len);
  name[len] = '\0';
  if (eq) {
    *value = eq + 1;
    return 0;
  }
  if (in_list(flags, name)) {
    *value = NULL;
    return 0;
  }
  if (*i >= argc) {
    fprintf(stderr, "zt %s: option '--%s' needs a value (see zt %s --help)\n", cmd, name, cmd);
    return 2;
  }
  const char *v = argv[(*i)++];
  if (!strncmp(v, "--", 2)) {
    fprintf(stderr,
            "zt %s: option '--%s' needs a value, but the next argument is the option '%s' (for a file whose name "
            "starts with --, write ./%s or --%s=%s)\n",
            cmd, name, v, v, name, v);
    return 2;
  }
  *value = v;
  return 0;
}

int zt_cli_option(const char *cmd, int argc, char **argv, int *i, char name[64], const char **value) {
  int at = *i, rc = zt_cli_arg(cmd, argc, argv, i, NULL, name, value);
  if (rc == 0 && !name[0]) {
    fprintf(stderr, "zt %s: unexpected argument '%s' (options start with --; see zt %s --help)\n", cmd, argv[at],
            cmd);
    return 2;
  }
  return rc;
}

int zt_cli_i64(const char *cmd, const char *name, const char *value, int64_t lo, int64_t hi, int64_t *out) {
  if (zt_config_parse_i64(name, value, lo, hi, out) == ZT_OK) return 0;
  fprintf(stderr, "zt %s: %s\n", cmd, zt_last_error());
  return 2;
}

const char *zt_cli_program = "zt";

/* OpenMP's idle threads spin before they sleep: libgomp's default is 300,000 rounds, some
 * milliseconds, at every barrier of every parallel region. On a machine where another process
 * holds a core, the waiting thread burns the time slices its teammate needs, and a step of the
 * default model beside one CPU-bound process on 2 cores took 4.5 times its idle time. zt bounds
 * the spin to ZT_CLI_SPINCOUNT rounds (what a barrier waits on an idle machine is shorter), then
 * the thread sleeps (bench/load.sh measures both). libgomp reads its settings once, when it is
 * loaded, before main: so the command runs itself again with them in its environment. A user's
 * own OMP_WAIT_POLICY or GOMP_SPINCOUNT is left as it is. */
#define ZT_CLI_SPINCOUNT "1000"
static void bound_openmp_spin(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
  if (setenv("GOMP_SPINCOUNT", ZT_CLI_SPINCOUNT, 1) != 0) return;
  execv("/proc/self/exe", argv); /* returns only on failure: then libgomp's defaults stay */
  unsetenv("GOMP_SPINCOUNT");
}

int main(int argc, char **argv) {
  bound_openmp_spin(argv);
  zt_cli_program = argv[0];
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *c = argv[1];
  if (!strcmp(c, "help") || !strcmp(c, "--help") || !strcmp(c, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(c, "--version") || !strcmp(c, "version")) {
    printf("zt (zerotrain) %s\n", zt_version());
    return 0;
  }
  if (!strcmp(c, "train")) return zt_cmd_train(argc - 2, argv + 2);
  if (!strcmp(c, "sample")) return zt_cmd_sample(argc - 2, argv + 2);
  if (!strcmp(c, "tokenize")) return zt_cmd_tokenize(argc - 2, argv + 2);
  if (!strcmp(c, "plot")) return zt_cmd_plot(argc - 2, argv + 2);
  if (!strcmp(c, "bench")) return zt_cmd_bench(argc - 2, argv + 2);
  if (!strcmp(c, "consolidate")) return zt_cmd_consolidate(argc - 2, argv + 2);
  if (!strcmp(c, "schedule")) return zt_cmd_schedule(argc - 2, argv + 2);
  if (!strcmp(c, "plan")) return zt_cmd_plan(argc - 2, argv + 2);
  static const char *const commands[] = {"train", "sample", "tokenize", "plot", "bench", "consolidate", "schedule", "plan",
                                          "help", "version", NULL};
  const char *near = zt_cli_closest(c, commands);
  if (near) fprintf(stderr, "zt: unknown command '%s'; did you mean '%s'? (see zt help)\n", c, near);
  else fprintf(stderr, "zt: unknown command '%s' (see zt help)\n", c);
  return 2;
}
