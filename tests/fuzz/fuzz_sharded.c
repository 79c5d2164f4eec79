/* libFuzzer target: sharded (FSDP) checkpoints. Once per process a valid checkpoint of a tiny
 * GPT-2 is written (2 shard files, index.json, state.json; fixed seed and save id). An input
 * that starts with '[' replaces shard 0's own record of its pieces (its zt_pieces metadata);
 * any other input replaces index.json. Then the index is read, the ranges of 8 entries spread
 * over it are read (entries up to 64K elements) and, for one input in 8 (by a hash of its
 * bytes), the checkpoint is consolidated; the files are restored after each input.
 * ZT_FUZZ_DUMP=DIR writes the valid index.json, zt_pieces and state.json there (the seeds in
 * tests/fuzz/corpus/sharded and corpus/state). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/tensor_internal.h"
#include "fuzz_util.h"
#include "snapshot/sharded.h"
#include "zt/nn.h"

#define SAVE_ID "fuzz-save-1"
#define WORLD 2
static const zt_gpt2_config k_cfg = {1, 1, 4, 8, 4, 0.0};

static char g_dir[512], g_out[512], g_shard0[600], g_index[600];
static void *g_index_text, *g_shard0_bytes;
static size_t g_index_len, g_shard0_len;
/* shard 0's tensors, to rewrite it with other metadata */
static int g_n0;
static const char *g_names0[64];
static zt_tensor *g_ts0[64];

static void die_on(zt_status s, const char *what) {
  if (s) zt_fuzz_fail("%s: %s", what, zt_last_error());
}

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "%s", zt_fuzz_path("ck"));
  snprintf(g_out, sizeof g_out, "%s", zt_fuzz_path("out"));
  if (mkdir(g_dir, 0755) != 0) zt_fuzz_fail("cannot make '%s'", g_dir);
  zt_rng_seed(7);
  zt_gpt2 *m = NULL;
  die_on(zt_gpt2_new(&k_cfg, &m), "zt_gpt2_new");
  zt_param *p;
  int np = zt_gpt2_params(m, &p);
  static char names[64][160];
  for (int r = 0; r < WORLD; r++) {
    zt__shard_piece pc[64];
    zt_tensor *own[64];
    int n = 0;
    for (int i = 0; i < np && n + 3 <= 64; i++) {
      zt_tensor *t = p[i].tensor;
      int64_t numel = zt_tensor_numel(t), start = r ? numel / 2 : 0, count = r ? numel - numel / 2 : numel / 2;
      if (!count) continue;
      /* param; exp_avg and exp_avg_sq of the first parameter only (a small index): the same
       * values (they do not matter) */
      for (int k = 0; k < (i == 0 ? 3 : 1); k++) {
        die_on(zt_tensor_empty_tagged(1, &count, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &own[n]), "empty");
        memcpy(zt__tensor_ptr(own[n]), (const float *)zt__tensor_ptr(t) + start, sizeof(float) * (size_t)count);
        pc[n] = (zt__shard_piece){p[i].name, (zt__shard_kind)k, t->ndim, t->shape, start, count, own[n]};
        if (r == 0) {
          snprintf(names[g_n0], sizeof names[g_n0], "%s.%s", zt__shard_kind_name((zt__shard_kind)k), p[i].name);
          g_names0[g_n0] = names[g_n0];
          g_ts0[g_n0++] = own[n];
          own[n] = NULL;
        }
        n++;
      }
    }
    die_on(zt__shard_write(g_dir, r, WORLD, n, pc, SAVE_ID), "zt__shard_write");
    for (int i = 0; i < n; i++) zt_tensor_free(own[i]);
  }
  zt_train_state st;
  memset(&st, 0, sizeof st);
  st.step = 5;
  st.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = k_cfg};
  die_on(zt__shard_write_index(g_dir, WORLD, "full", &st, true, 5, SAVE_ID), "zt__shard_write_index");
  zt_gpt2_free(m);
  snprintf(g_index, sizeof g_index, "%s/index.json", g_dir);
  char fname[64];
  snprintf(g_shard0, sizeof g_shard0, "%s/%s", g_dir, zt__shard_file_name(fname, 0, WORLD));
  die_on(zt_read_file(g_index, &g_index_text, &g_index_len), "read index.json");
  die_on(zt_read_file(g_shard0, &g_shard0_bytes, &g_shard0_len), "read shard 0");
  const char *dump = getenv("ZT_FUZZ_DUMP");
  if (dump) {
    char path[600], *pieces = NULL;
    snprintf(path, sizeof path, "%s/index.json", dump);
    zt_fuzz_write(path, g_index_text, g_index_len);
    die_on(zt_safetensors_metadata(g_shard0, "zt_pieces", &pieces), "zt_pieces");
    snprintf(path, sizeof path, "%s/pieces.json", dump);
    zt_fuzz_write(path, pieces, strlen(pieces));
    free(pieces);
    void *state = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/state.json", g_dir);
    die_on(zt_read_file(path, &state, &n), "read state.json");
    snprintf(path, sizeof path, "%s/state.json", dump);
    zt_fuzz_write(path, state, n);
    free(state);
  }
  /* the checkpoint must be valid as written */
  die_on(zt_snapshot_consolidate(g_dir, g_out, true), "consolidating the valid checkpoint");
  zt_fuzz_remove(g_out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  if (!g_dir[0]) setup();
  if (size > 0 && data[0] == '[') {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0'; /* metadata is a C string: up to the first NUL */
    const char *keys[] = {"zt_save_id", "zt_rank", "zt_world", "zt_pieces"}, *vals[] = {SAVE_ID, "0", "2", text};
    die_on(zt_safetensors_save(g_shard0, g_n0, g_names0, g_ts0, 4, keys, vals), "rewriting shard 0");
    free(text);
  } else {
    zt_fuzz_write(g_index, data, size);
  }
  zt__shard_index *ix = NULL;
  if (zt__shard_index_read(g_dir, &ix) == ZT_OK) {
    for (int i = 0; i < ix->n && i < 8; i++) { /* 8 reads: each checks its file on first use */
      const zt__shard_entry *e = &ix->e[i * (ix->n + 7) / 8 < ix->n ? i * (ix->n + 7) / 8 : ix->n - 1];
      if (e->count > (1 << 16)) continue;
      zt_tensor *dst = NULL;
      if (zt_tensor_empty_tagged(1, &e->count, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &dst)) continue;
      (void)zt__shard_read(ix, e->param, e->kind, e->ndim, e->shape, e->start, e->count, dst);
      zt_tensor_free(dst);
    }
    zt__shard_index_free(ix);
    /* consolidation (builds the model, writes a checkpoint) costs ~10x the rest: every 8th input */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    if (h % 8 == 0) {
      (void)zt_snapshot_consolidate(g_dir, g_out, true);
      zt_fuzz_remove(g_out);
    }
  }
  zt_fuzz_write(g_index, g_index_text, g_index_len);
  zt_fuzz_write(g_shard0, g_shard0_bytes, g_shard0_len);
  return 0;
}
