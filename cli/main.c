/* zt: the zerotrain command. Dispatches to subcommands; prints usage. */
#include <stdio.h>
#include <string.h>

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
          "run 'zt <command> --help' for a command's options\n");
}

const char *zt_cli_bytes(double b, char *buf) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, i++;
  snprintf(buf, 32, i ? "%.1f %s" : "%.0f %s", b, u[i]);
  return buf;
}

int zt_cli_fail(const char *cmd) {
  fprintf(stderr, "zt %s: %s\n", cmd, zt_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *c = argv[1];
  if (!strcmp(c, "help") || !strcmp(c, "--help") || !strcmp(c, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(c, "train")) return zt_cmd_train(argc - 2, argv + 2);
  if (!strcmp(c, "sample")) return zt_cmd_sample(argc - 2, argv + 2);
  if (!strcmp(c, "tokenize")) return zt_cmd_tokenize(argc - 2, argv + 2);
  if (!strcmp(c, "plot")) return zt_cmd_plot(argc - 2, argv + 2);
  if (!strcmp(c, "bench")) return zt_cmd_bench(argc - 2, argv + 2);
  if (!strcmp(c, "consolidate")) return zt_cmd_consolidate(argc - 2, argv + 2);
  fprintf(stderr, "zt: unknown command '%s' (see zt help)\n", c);
  return 2;
}
