/* zt consolidate SHARDED_DIR OUT_DIR [--force]: turn a sharded (FSDP) checkpoint into a
 * single-process one (model.safetensors + config.json for transformers, optim.safetensors +
 * state.json for zt train --resume). Runs in one process: no mpirun needed. An OUT_DIR that holds
 * a checkpoint is refused unless --force. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: zt consolidate SHARDED_DIR OUT_DIR [--force]\n"
          "  SHARDED_DIR  a checkpoint saved by zt train with FSDP (index.json + shard-R-of-N.safetensors)\n"
          "  OUT_DIR      a new folder for the single-process checkpoint (OUT_DIR/step-N with\n"
          "               model.safetensors, config.json, optim.safetensors, state.json, and the\n"
          "               tokenizer if it has one; OUT_DIR/latest links it), written atomically\n"
          "  --force      OUT_DIR may hold a checkpoint: add this one as its newest version\n"
          "zt train --resume, --init-from and zt sample read sharded checkpoints as they are; this\n"
          "makes one that transformers reads.\n");
}

int zt_cmd_consolidate(int argc, char **argv) {
  if (zt_cli_wants_help(argc, argv)) {
    usage(stdout);
    return 0;
  }
  const char *pos[2] = {NULL, NULL};
  int n = 0, rc;
  bool force = false;
  char name[64];
  const char *a;
  for (int i = 0; (rc = zt_cli_arg("consolidate", argc, argv, &i, "force", name, &a)) != 1;) {
    if (rc) return rc;
    if (!strcmp(name, "force") && !a) {
      force = true;
      continue;
    }
    if (name[0]) {
      fprintf(stderr, "zt consolidate: unknown option '--%s' (see zt consolidate --help)\n", name);
      return 2;
    }
    if (n == 2) {
      fprintf(stderr, "zt consolidate: too many arguments ('%s'); give SHARDED_DIR and OUT_DIR\n", a);
      return 2;
    }
    pos[n++] = a;
  }
  if (n < 2) {
    usage(stderr);
    return 2;
  }
  if (zt_snapshot_consolidate(pos[0], pos[1], force)) return zt_cli_fail("consolidate");
  printf("consolidated '%s' into '%s'\n", pos[0], pos[1]);
  return 0;
}
