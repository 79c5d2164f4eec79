/* FSDP checkpoints. Format layer (every rank on its own, in its own folder): a GPT-2's
 * parameters and optimizer state cut into FSDP-like uneven pieces of 4 "ranks" (two units, each
 * flat and padded), written as shard files, read back bitwise at 3, 2 and 1 ranks and
 * consolidated into a single-process checkpoint; errors for another shape, a missing shard file
 * and an interrupted save. With FSDP (1 rank plainly, mpirun -np 2 / 4): sharded save, N -> M
 * reload on sub-groups, consolidation and full checkpoints continue training like the original;
 * one process reads a sharded checkpoint with zt_snapshot_load (consolidated on load), into
 * resident or evicted tensors. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tensor_internal.h"
#include "io/safetensors.h"
#include "snapshot/sharded.h"
#include "snapshot/snapshot_internal.h"
#include "zt/autograd.h"
#include "zt/store.h"
#include "zt/train.h"
#include "zt_test.h"

static zt_comm *g_world;
static int R, N; /* rank, size */

static const zt_gpt2_config k_cfg = {2, 2, 32, 64, 16, 0.0};

static zt_gpt2 *new_model(uint64_t seed) {
  zt_rng_seed(seed);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&k_cfg, &m));
  return m;
}

static zt_train_state state_at(int64_t step) {
  zt_train_state st;
  memset(&st, 0, sizeof st);
  st.step = step;
  st.rng = zt_rng_get_state();
  st.data.epoch = 1;
  st.data.index = 7;
  st.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = k_cfg};
  return st;
}

/* ------------------------------------------------------------------ format layer */

/* FSDP's layout over M ranks: params [0, split) are unit 0, the rest unit 1; each unit is one
 * flat buffer padded to a multiple of M, rank r holding [r S, (r+1) S) of it. */
typedef struct layout {
  int np;
  int64_t off[64], unit[64], numel[64];
  int64_t unit_numel[2];
} layout;

static void make_layout(zt_param *p, int np, int split, layout *L) {
  memset(L, 0, sizeof *L);
  L->np = np;
  for (int i = 0; i < np; i++) {
    int u = i < split ? 0 : 1;
    L->unit[i] = u;
    L->numel[i] = zt_tensor_numel(p[i].tensor);
    L->off[i] = L->unit_numel[u];
    L->unit_numel[u] += L->numel[i];
  }
}

/* The piece of param i at rank r of M (count 0: none). */
static void piece_of(const layout *L, int i, int r, int M, int64_t *start, int64_t *count) {
  int64_t padded = (L->unit_numel[L->unit[i]] + M - 1) / M * M, S = padded / M;
  int64_t lo = r * S, hi = lo + S, a = L->off[i], b = a + L->numel[i];
  int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
  *start = x - a;
  *count = y > x ? y - x : 0;
}

static zt_tensor *slice_copy(zt_tensor *full, int64_t start, int64_t count) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty_tagged(1, &count, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &t));
  if (t && count) memcpy(zt__tensor_ptr(t), (float *)zt__tensor_ptr(full) + start, sizeof(float) * (size_t)count);
  return t;
}

/* Write a sharded checkpoint of (m, o) as M ranks would, through the staged folder swap. */
static void write_synthetic(const char *dir, zt_gpt2 *m, zt_optim *o, const layout *L, int M,
                            const zt_train_state *st) {
  zt_param *p;
  int np = zt_gpt2_params(m, &p);
  int n_opt = 0;
  const char *const *onames = NULL;
  zt_tensor *const *ots = NULL;
  ZT_CHECK_OK(zt_optim_state(o, &n_opt, &onames, &ots));
  char id[64];
  zt__snap_new_save_id(id, st->step);
  zt__snap_staging stage;
  ZT_CHECK_OK(zt__snap_staging_begin(dir, st->step, &stage));
  for (int r = 0; r < M; r++) {
    zt__shard_piece pc[256];
    zt_tensor *own[256];
    int n = 0;
    for (int i = 0; i < np; i++) {
      int64_t start, count;
      piece_of(L, i, r, M, &start, &count);
      if (!count) continue;
      zt_tensor *t = p[i].tensor;
      own[n] = slice_copy(t, start, count);
      pc[n] = (zt__shard_piece){p[i].name, ZT__SHARD_PARAM, t->ndim, t->shape, start, count, own[n]};
      n++;
      for (int k = 0; k < n_opt; k++) {
        zt__shard_kind kind;
        const char *pn;
        ZT_CHECK(zt__shard_split_state_name(onames[k], &kind, &pn));
        if (strcmp(pn, p[i].name)) continue;
        own[n] = slice_copy(ots[k], start, count);
        pc[n] = (zt__shard_piece){p[i].name, kind, t->ndim, t->shape, start, count, own[n]};
        n++;
      }
    }
    ZT_CHECK_OK(zt__shard_write(stage.stage, r, M, n, pc, id));
    zt_test_free_all(own, n);
  }
  ZT_CHECK_OK(zt__shard_write_index(stage.stage, M, "full", st, true, zt_optim_step_count(o), id));
  ZT_CHECK_OK(zt__snap_staging_commit(&stage));
}

/* The index of a checkpoint series' latest version. */
static zt_status index_read(const char *series, zt__shard_index **ix) {
  char dir[4096];
  ZT_TRY(zt_snapshot_resolve(series, dir, sizeof dir));
  return zt__shard_index_read(dir, ix);
}

/* Every piece of every rank of an M-rank layout reads back bitwise. */
static void check_reads(const char *dir, zt_gpt2 *m, zt_optim *o, int M, int split) {
  zt__shard_index *ix = NULL;
  ZT_CHECK_OK(index_read(dir, &ix));
  if (!ix) return;
  zt_param *p;
  int np = zt_gpt2_params(m, &p);
  int n_opt = 0;
  const char *const *onames = NULL;
  zt_tensor *const *ots = NULL;
  ZT_CHECK_OK(zt_optim_state(o, &n_opt, &onames, &ots));
  layout L;
  make_layout(p, np, split, &L);
  int bad = 0;
  for (int r = 0; r < M; r++)
    for (int i = 0; i < np; i++) {
      int64_t start, count;
      piece_of(&L, i, r, M, &start, &count);
      zt_tensor *t = p[i].tensor, *got = NULL, *want = slice_copy(t, start, count);
      ZT_CHECK_OK(zt_tensor_zeros(1, &count, ZT_DTYPE_F32, ZT_CPU, &got));
      ZT_CHECK_OK(zt__shard_read(ix, p[i].name, ZT__SHARD_PARAM, t->ndim, t->shape, start, count, got));
      bad += !zt_test_bitwise_equal(got, want);
      zt_tensor_free(want);
      for (int k = 0; k < n_opt; k++) {
        zt__shard_kind kind;
        const char *pn;
        if (!zt__shard_split_state_name(onames[k], &kind, &pn) || strcmp(pn, p[i].name)) continue;
        want = slice_copy(ots[k], start, count);
        ZT_CHECK_OK(zt__shard_read(ix, p[i].name, kind, t->ndim, t->shape, start, count, got));
        bad += !zt_test_bitwise_equal(got, want);
        zt_tensor_free(want);
      }
      zt_tensor_free(got);
    }
  ZT_CHECK(bad == 0);
  zt__shard_index_free(ix);
}

static void fill_state(zt_optim *o, uint64_t seed) {
  int n = 0;
  const char *const *names = NULL;
  zt_tensor *const *ts = NULL;
  ZT_CHECK_OK(zt_optim_state(o, &n, &names, &ts));
  for (int k = 0; k < n; k++) {
    zt_tensor *r = zt_test_rand(ts[k]->ndim, ts[k]->shape, ZT_DTYPE_F32, 0, 1, seed + (uint64_t)k);
    ZT_CHECK_OK(zt_tensor_copy_(ts[k], r));
    zt_tensor_free(r);
  }
  zt_optim_set_step_count(o, 5);
}

static bool params_equal(zt_gpt2 *a, zt_gpt2 *b) {
  zt_param *pa, *pb;
  int n = zt_gpt2_params(a, &pa);
  if (n != zt_gpt2_params(b, &pb)) return false;
  for (int i = 0; i < n; i++)
    if (!zt_test_bitwise_equal(pa[i].tensor, pb[i].tensor)) return false;
  return true;
}

static bool optim_equal(zt_optim *a, zt_optim *b) {
  int na, nb;
  const char *const *xa, *const *xb;
  zt_tensor *const *ta, *const *tb;
  if (zt_optim_state(a, &na, &xa, &ta) || zt_optim_state(b, &nb, &xb, &tb) || na != nb) return false;
  for (int i = 0; i < na; i++)
    if (strcmp(xa[i], xb[i]) || !zt_test_bitwise_equal(ta[i], tb[i])) return false;
  return zt_optim_step_count(a) == zt_optim_step_count(b);
}


/* The format tests' set-up: a temporary folder with paths "ck" and "single", a model and
 * AdamW state filled with random values. */
typedef struct fmt_fixture {
  char dir[512], out[512];
  zt_gpt2 *m;
  zt_optim *o;
  zt_param *p;
  int np;
} fmt_fixture;

static bool fmt_open(fmt_fixture *x, const char *tag, uint64_t model_seed, uint64_t state_seed) {
  if (!zt_test_tmpdir_make(tag)) return false;
  zt_test_tmp_path_to(x->dir, sizeof x->dir, "ck");
  zt_test_tmp_path_to(x->out, sizeof x->out, "single");
  x->m = new_model(model_seed);
  x->o = zt_test_gpt2_adamw(x->m);
  fill_state(x->o, state_seed);
  x->np = zt_gpt2_params(x->m, &x->p);
  return true;
}

static void fmt_close(fmt_fixture *x) {
  zt_optim_free(x->o);
  zt_gpt2_free(x->m);
  zt_test_tmpdir_remove();
}

static void test_format_reshard_and_consolidate(void) {
  fmt_fixture x;
  if (!fmt_open(&x, "shardfmt", 11, 100)) return;
  char *dir = x.dir, *out = x.out;
  zt_gpt2 *m = x.m;
  zt_optim *o = x.o;
  zt_param *p = x.p;
  int np = x.np;
  layout L;
  int split = np / 3; /* an uneven cut: the units' boundaries fall inside parameters */
  make_layout(p, np, split, &L);
  zt_train_state st = state_at(5);
  write_synthetic(dir, m, o, &L, 4, &st);
  ZT_CHECK(zt_snapshot_is_sharded(dir));
  /* N -> M: every piece of another layout reads back bitwise */
  check_reads(dir, m, o, 4, split);
  check_reads(dir, m, o, 3, split);
  check_reads(dir, m, o, 2, np - 2);
  check_reads(dir, m, o, 1, split);
  /* a second save at 3 ranks is the new latest version */
  write_synthetic(dir, m, o, &L, 3, &st);
  check_reads(dir, m, o, 4, split);
  char path[600];
  snprintf(path, sizeof path, "%s/latest/shard-3-of-4.safetensors", dir);
  ZT_CHECK(access(path, F_OK) != 0);
  /* consolidation gives a single-process checkpoint that loads bitwise */
  ZT_CHECK_OK(zt_snapshot_consolidate(dir, out, false));
  ZT_CHECK(!zt_snapshot_is_sharded(out));
  /* into a folder that holds a checkpoint: refused, nothing written, unless forced (a new version) */
  char ver[600], ver2[600];
  ZT_CHECK_OK(zt_snapshot_resolve(out, ver, sizeof ver));
  ZT_CHECK_ERR(zt_snapshot_consolidate(dir, out, false), ZT_STATUS_INVALID_ARG, "holds a checkpoint already");
  ZT_CHECK_ERR(zt_snapshot_consolidate(dir, dir, false), ZT_STATUS_INVALID_ARG, "--force");
  ZT_CHECK_OK(zt_snapshot_resolve(out, ver2, sizeof ver2));
  ZT_CHECK(!strcmp(ver, ver2));
  ZT_CHECK_OK(zt_snapshot_consolidate(dir, out, true));
  ZT_CHECK_OK(zt_snapshot_resolve(out, ver2, sizeof ver2));
  ZT_CHECK(strcmp(ver, ver2) && access(ver, F_OK) == 0);
  zt_gpt2 *m2 = new_model(99);
  zt_optim *o2 = zt_test_gpt2_adamw(m2);
  zt_train_state st2;
  ZT_CHECK_OK(zt_snapshot_load(out, zt_test_lm(m2), o2, &st2));
  ZT_CHECK(params_equal(m, m2));
  ZT_CHECK(optim_equal(o, o2));
  ZT_CHECK(st2.step == 5 && st2.data.index == 7 && st2.rng.seed == st.rng.seed);
  zt_optim_free(o2);
  zt_gpt2_free(m2);
  fmt_close(&x);
}

static void test_format_errors(void) {
  fmt_fixture x;
  if (!fmt_open(&x, "shardfmt_err", 12, 200)) return;
  char *dir = x.dir, *out = x.out, path[600], moved[600];
  zt_gpt2 *m = x.m;
  zt_optim *o = x.o;
  zt_param *p = x.p;
  int np = x.np;
  layout L;
  make_layout(p, np, 4, &L);
  zt_train_state st = state_at(5);
  write_synthetic(dir, m, o, &L, 4, &st);
  zt__shard_index *ix = NULL;
  ZT_CHECK_OK(index_read(dir, &ix));
  if (ix) {
    zt_tensor *t = NULL;
    int64_t n = 10, shape[2] = {65, 32};
    ZT_CHECK_OK(zt_tensor_zeros(1, &n, ZT_DTYPE_F32, ZT_CPU, &t));
    /* another model shape: the message names the parameter and both shapes */
    ZT_CHECK_ERR(zt__shard_read(ix, "transformer.wte.weight", ZT__SHARD_PARAM, 2, shape, 0, 10, t), ZT_STATUS_SHAPE,
                 "'transformer.wte.weight' has shape (64, 32) in the checkpoint but (65, 32)");
    ZT_CHECK_ERR(zt__shard_read(ix, "transformer.h.7.ln_1.weight", ZT__SHARD_PARAM, 1, &n, 0, 10, t),
                 ZT_STATUS_SHAPE, "has no parameter 'transformer.h.7.ln_1.weight'");
    zt_tensor_free(t);
    zt__shard_index_free(ix);
  }
  /* a missing shard file is named */
  snprintf(path, sizeof path, "%s/latest/shard-2-of-4.safetensors", dir);
  snprintf(moved, sizeof moved, "%s/away", zt_test_tmpdir());
  ZT_CHECK(rename(path, moved) == 0);
  ZT_CHECK_ERR(zt_snapshot_consolidate(dir, out, false), ZT_STATUS_IO, "shard file '");
  ZT_CHECK_ERR(zt_snapshot_consolidate(dir, out, false), ZT_STATUS_IO, "shard-2-of-4.safetensors' is missing");
  ZT_CHECK(rename(moved, path) == 0);
  /* a shard file of another save (an interrupted save mixed files) */
  zt_train_state st6 = state_at(6);
  char dir2[512];
  zt_test_tmp_path_to(dir2, sizeof dir2, "ck2");
  write_synthetic(dir2, m, o, &L, 4, &st6);
  snprintf(moved, sizeof moved, "%s/latest/shard-1-of-4.safetensors", dir2);
  snprintf(path, sizeof path, "%s/latest/shard-1-of-4.safetensors", dir);
  ZT_CHECK(rename(moved, path) == 0);
  ZT_CHECK_ERR(zt_snapshot_consolidate(dir, out, false), ZT_STATUS_IO, "is not from the same save");
  /* no state.json: the commit record is missing */
  snprintf(path, sizeof path, "%s/latest/state.json", dir2);
  ZT_CHECK(unlink(path) == 0);
  ZT_CHECK_ERR(zt_snapshot_consolidate(dir2, out, false), ZT_STATUS_IO, "has no state.json");
  /* a single-process checkpoint is not a sharded one */
  ZT_CHECK_OK(zt_snapshot_save(out, zt_test_lm(m), o, &st));
  ZT_CHECK(!zt_snapshot_is_sharded(out));
  ZT_CHECK_ERR(zt_snapshot_consolidate(out, dir2, false), ZT_STATUS_IO, "has no index.json");
  fmt_close(&x);
}

/* Text of a file (NUL-terminated; free it). */
static char *text_of(const char *path) {
  void *d = NULL;
  size_t n = 0;
  ZT_CHECK_OK(zt_read_file(path, &d, &n));
  return d;
}

static void put_text(const char *path, const char *text) {
  const void *c = text;
  size_t n = strlen(text);
  ZT_CHECK_OK(zt_write_file_atomic(path, &c, &n, 1));
}

/* In text, exchange the first occurrences of a and b (same length, not overlapping). */
static bool swap_text(char *text, const char *a, const char *b) {
  char *x = strstr(text, a), *y = strstr(text, b);
  size_t l = strlen(a);
  if (!x || !y || strlen(b) != l) return false;
  char *tmp = malloc(l);
  memcpy(tmp, x, l);
  memcpy(x, y, l);
  memcpy(y, tmp, l);
  free(tmp);
  return true;
}

/* In text, replace the first occurrence of a by b. */
static bool replace_text(char **text, const char *a, const char *b) {
  char *x = strstr(*text, a);
  if (!x) return false;
  size_t la = strlen(a), lb = strlen(b), lt = strlen(*text);
  char *o = malloc(lt - la + lb + 1);
  memcpy(o, *text, (size_t)(x - *text));
  memcpy(o + (x - *text), b, lb);
  memcpy(o + (x - *text) + lb, x + la, lt - (size_t)(x - *text) - la + 1);
  free(*text);
  *text = o;
  return true;
}

/* index.json is checked against the shard files it names: an edited or mixed index cannot put
 * one parameter's values into another, or a range into another place (before, swapping two
 * entries' "tensor" fields, or their "file" fields, consolidated and resumed silently with the
 * values swapped); out-of-range numbers are refused instead of overflowing. */
static void test_format_index_checks(void) {
  fmt_fixture x;
  if (!fmt_open(&x, "shardfmt_ix", 13, 300)) return;
  layout L;
  make_layout(x.p, x.np, 4, &L); /* unit 0: wte, wpe and block 0's ln_1; 656 elements per rank */
  zt_train_state st = state_at(5);
  write_synthetic(x.dir, x.m, x.o, &L, 4, &st);
  char ver[600], ix_path[700];
  ZT_CHECK_OK(zt_snapshot_resolve(x.dir, ver, sizeof ver));
  snprintf(ix_path, sizeof ix_path, "%s/index.json", ver);
  char *orig = text_of(ix_path), *t = NULL;
  if (!orig) return;
  int64_t n = 656, shape[2] = {64, 32};
  zt_tensor *got = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, &n, ZT_DTYPE_F32, ZT_CPU, &got));
  zt__shard_index *ix = NULL;
  /* the "tensor" fields of ln_1.weight and ln_1.bias exchanged */
  t = strdup(orig);
  ZT_CHECK(replace_text(&t, "\"param.transformer.h.0.ln_1.weight\"", "\"@\"") &&
           replace_text(&t, "\"param.transformer.h.0.ln_1.bias\"", "\"param.transformer.h.0.ln_1.weight\"") &&
           replace_text(&t, "\"@\"", "\"param.transformer.h.0.ln_1.bias\""));
  put_text(ix_path, t);
  ZT_CHECK_ERR(zt_snapshot_consolidate(x.dir, x.out, false), ZT_STATUS_IO,
               "names tensor 'param.transformer.h.0.ln_1.bias' for param of parameter 'transformer.h.0.ln_1.weight', "
               "which is stored as 'param.transformer.h.0.ln_1.weight'");
  ZT_CHECK(strstr(zt_last_error(), ix_path) != NULL);
  ZT_CHECK_ERR(zt__shard_index_read(ver, &ix), ZT_STATUS_IO, "tensor entry");
  free(t);
  /* the "file" fields of wte's first two pieces exchanged: same tensor name and count (656) in
   * both files, so only the shard file's own record tells the ranges apart */
  t = strdup(orig);
  ZT_CHECK(swap_text(t, "\"file\": \"shard-0-of-4.safetensors\", \"tensor\": \"param.transformer.wte.weight\"",
                     "\"file\": \"shard-1-of-4.safetensors\", \"tensor\": \"param.transformer.wte.weight\""));
  put_text(ix_path, t);
  ZT_CHECK_ERR(zt_snapshot_consolidate(x.dir, x.out, false), ZT_STATUS_IO, "says tensor 'param.transformer.wte.weight'");
  ZT_CHECK(strstr(zt_last_error(), "the shard file says [") != NULL);
  ZT_CHECK_OK(zt__shard_index_read(ver, &ix));
  if (ix) ZT_CHECK_ERR(zt__shard_read(ix, "transformer.wte.weight", ZT__SHARD_PARAM, 2, shape, 0, 656, got),
                       ZT_STATUS_IO, "was edited or mixed with another save");
  zt__shard_index_free(ix);
  ix = NULL;
  free(t);
  /* the optimizer step must be an integer in [0, 2^53] (2^63 - 1 used to be taken, then overflowed) */
  const char *steps[] = {"9223372036854775807", "99999999999999999999", "9007199254740993", "-1", "1.5"};
  for (int i = 0; i < 5; i++) {
    t = strdup(orig);
    char field[64];
    snprintf(field, sizeof field, "\"optim_step\": %s", steps[i]);
    ZT_CHECK(replace_text(&t, "\"optim_step\": 5", field));
    put_text(ix_path, t);
    ZT_CHECK_ERR(zt__shard_index_read(ver, &ix), ZT_STATUS_IO, "field 'optim_step' is missing or not an integer in "
                 "[0, 2^53]");
    free(t);
  }
  /* ranges and shapes whose arithmetic overflows int64 */
  t = strdup(orig);
  ZT_CHECK(replace_text(&t, "\"shape\": [32], \"start\": 0, \"count\": 32}",
                        "\"shape\": [32], \"start\": 9223372036854775807, \"count\": 32}"));
  put_text(ix_path, t);
  ZT_CHECK_ERR(zt__shard_index_read(ver, &ix), ZT_STATUS_IO, "elements [9223372036854775807, +32) are not within "
               "its shape (32,) of 32 elements");
  free(t);
  t = strdup(orig);
  ZT_CHECK(replace_text(&t, "\"shape\": [32], \"start\": 0", "\"shape\": [4611686018427387904, 4, 0], \"start\": 0"));
  put_text(ix_path, t);
  ZT_CHECK_ERR(zt__shard_index_read(ver, &ix), ZT_STATUS_IO, "overflows a 64-bit integer");
  free(t);
  /* two entries of one range: stored twice */
  t = strdup(orig);
  ZT_CHECK(replace_text(&t, "\"shape\": [64, 32], \"start\": 656", "\"shape\": [64, 32], \"start\": 600"));
  put_text(ix_path, t);
  ZT_CHECK_ERR(zt__shard_index_read(ver, &ix), ZT_STATUS_IO, "two entries of 'transformer.wte.weight' (param) overlap: "
               "elements [600, 656) are listed twice");
  free(t);
  /* the original index still works */
  put_text(ix_path, orig);
  ZT_CHECK_OK(zt_snapshot_consolidate(x.dir, x.out, false));
  free(orig);
  zt_tensor_free(got);
  fmt_close(&x);
}

/* ------------------------------------------------------------------ with FSDP */

#define B_GLOBAL 8
#define T_SEQ 16
#define LR 1e-3
/* Ranks of another count sum their gradients in another order: losses and parameters after
 * two more AdamW steps agree to float32 reduction-order rounding, amplified a little by Adam's
 * normalisation (m / sqrt(v)); lr 1e-3 bounds a parameter's change per step by ~1e-3. */
#ifndef TOL_LOSS
#define TOL_LOSS 1e-5
#endif
#ifndef TOL_PARAM
#define TOL_PARAM 2e-5
#endif

typedef struct run {
  zt_comm *comm;
  zt_gpt2 *m;
  zt_fsdp *f; /* NULL: a plain single-process run */
  zt_optim *o;
} run;

static void run_new_as(run *r, zt_comm *comm, bool fsdp, zt_shard_strategy strategy, uint64_t seed) {
  memset(r, 0, sizeof *r);
  r->comm = comm;
  r->m = new_model(seed);
  zt_param *p;
  int n = zt_gpt2_params(r->m, &p);
  if (fsdp) {
    zt_fsdp_options fo = zt_fsdp_options_default();
    fo.strategy = strategy;
    if (strategy == ZT_SHARD_HYBRID) fo.hybrid_group = zt_comm_size(comm) > 1 ? zt_comm_size(comm) / 2 : 1;
    ZT_CHECK_OK(zt_fsdp_new(comm, zt_gpt2_module(r->m), &fo, &r->f));
    ZT_CHECK_OK(zt_fsdp_auto_wrap(r->f, NULL, NULL));
    ZT_CHECK_OK(zt_fsdp_init(r->f));
    n = zt_fsdp_params(r->f, &p, NULL);
  }
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  oc.lr = LR;
  ZT_CHECK_OK(zt_optim_new(&oc, n, p, &r->o));
}

static void run_new(run *r, zt_comm *comm, bool fsdp, uint64_t seed) {
  run_new_as(r, comm, fsdp, ZT_SHARD_FULL, seed);
}

static void run_free(run *r) {
  zt_optim_free(r->o);
  zt_fsdp_free(r->f);
  zt_gpt2_free(r->m);
  memset(r, 0, sizeof *r);
}

/* One step on global batch k (this rank's rows of it); returns the global mean loss. */
static double run_step(run *r, int k) {
  int world = r->f ? zt_comm_size(r->comm) : 1, rank = r->f ? zt_comm_rank(r->comm) : 0;
  zt_tensor *ids = zt_test_rand_ids(B_GLOBAL, T_SEQ, k_cfg.vocab_size, 500 + (uint64_t)k);
  zt_tensor *tg = zt_test_rand_ids(B_GLOBAL, T_SEQ, k_cfg.vocab_size, 900 + (uint64_t)k);
  zt_tensor *x = zt_test_rows(ids, rank, world), *y = zt_test_rows(tg, rank, world), *loss = NULL;
  ZT_CHECK_OK(zt_gpt2_forward(r->m, x, y, NULL, &loss));
  double l = loss ? zt_tensor_get(loss, 0) : NAN;
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  double norm = 0;
  if (r->f) {
    ZT_CHECK_OK(zt_fsdp_clip_grad_norm(r->f, 1.0, &norm));
    ZT_CHECK_OK(zt_optim_step(r->o, LR));
    ZT_CHECK_OK(zt_fsdp_after_step(r->f));
    zt_fsdp_zero_grad(r->f);
    zt_tensor *lt = NULL;
    ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_F64, &l, &lt));
    ZT_CHECK_OK(zt_all_reduce(r->comm, lt, ZT_REDUCE_AVG));
    l = zt_tensor_get(lt, 0);
    zt_tensor_free(lt);
  } else {
    zt_param *p;
    int n = zt_gpt2_params(r->m, &p);
    ZT_CHECK_OK(zt_clip_grad_norm(n, p, 1.0, &norm));
    ZT_CHECK_OK(zt_optim_step(r->o, LR));
    zt_optim_zero_grad(r->o);
  }
  zt_test_free_all((zt_tensor *[]){ids, tg, x, y, loss}, 5);
  return l;
}

/* The full parameter values (gathered under FSDP) as new tensors. */
static int snapshot(run *r, zt_tensor **out) {
  if (r->f) ZT_CHECK_OK(zt_fsdp_gather_full_params(r->f));
  zt_param *p;
  int n = zt_gpt2_params(r->m, &p);
  for (int i = 0; i < n; i++) ZT_CHECK_OK(zt_tensor_clone_data(p[i].tensor, ZT_MEM_TAG_TEMP, &out[i]));
  if (r->f) ZT_CHECK_OK(zt_fsdp_release_full_params(r->f));
  return n;
}

static double snapshot_diff(zt_tensor **a, zt_tensor **b, int n) {
  double d = 0;
  for (int i = 0; i < n; i++) d = fmax(d, zt_test_max_abs_diff(a[i], b[i]));
  return d;
}

static bool snapshot_bitwise(zt_tensor **a, zt_tensor **b, int n) {
  for (int i = 0; i < n; i++)
    if (!zt_test_bitwise_equal(a[i], b[i])) return false;
  return true;
}

/* Every parameter and optimizer state tensor of a plain run evicted to a new memory store;
 * returns the largest one's bytes. */
static int64_t evict_run(run *r, zt_store **store) {
  ZT_CHECK_OK(zt_store_memory_new(store));
  zt_param *p;
  int n = zt_gpt2_params(r->m, &p), no = 0;
  const char *const *names;
  zt_tensor *const *ot = NULL;
  ZT_CHECK_OK(zt_optim_state(r->o, &no, &names, &ot));
  int64_t biggest = 0;
  for (int i = 0; i < n + no; i++) {
    zt_tensor *t = i < n ? p[i].tensor : ot[i - n];
    ZT_CHECK_OK(zt_storage_evict(t->storage, *store, t->dtype));
    if ((int64_t)t->storage->nbytes > biggest) biggest = (int64_t)t->storage->nbytes;
  }
  return biggest;
}

/* Brings them back; whether every one was still evicted. */
static bool restore_run(run *r) {
  zt_param *p;
  int n = zt_gpt2_params(r->m, &p), no = 0;
  const char *const *names;
  zt_tensor *const *ot = NULL;
  ZT_CHECK_OK(zt_optim_state(r->o, &no, &names, &ot));
  bool all = true;
  for (int i = 0; i < n + no; i++) {
    zt_tensor *t = i < n ? p[i].tensor : ot[i - n];
    all = all && zt_storage_is_evicted(t->storage);
    ZT_CHECK_OK(zt_storage_restore(t->storage));
  }
  return all;
}

/* Continue two steps (batches 2, 3) and compare with the reference losses and parameters. */
static void continue_and_compare(run *r, const double *ref_loss, zt_tensor **ref, const char *what) {
  double l[2];
  for (int k = 0; k < 2; k++) l[k] = run_step(r, 2 + k);
  zt_tensor *snap[64] = {0};
  int n = snapshot(r, snap);
  double d = snapshot_diff(snap, ref, n);
  if (fabs(l[0] - ref_loss[0]) > TOL_LOSS || fabs(l[1] - ref_loss[1]) > TOL_LOSS || !(d <= TOL_PARAM))
    zt_test_fail(__FILE__, __LINE__, "rank %d, %s: losses %.9g %.9g vs %.9g %.9g, params differ by %g", R, what, l[0],
                 l[1], ref_loss[0], ref_loss[1], d);
  zt_test_free_all(snap, n);
}

static void test_fsdp_save_reshard_consolidate(void) {
  char dir[256], sh[320], full[320], cons[320];
  zt_test_shared_tmpdir(g_world, "fsdpck", dir, sizeof dir);
  snprintf(sh, sizeof sh, "%s/sharded", dir);
  snprintf(full, sizeof full, "%s/full", dir);
  snprintf(cons, sizeof cons, "%s/consolidated", dir);
  /* N ranks: 2 steps, both checkpoints, then 2 more steps: the reference */
  run a;
  run_new(&a, g_world, true, 1);
  for (int k = 0; k < 2; k++) run_step(&a, k);
  zt_train_state st = state_at(2);
  ZT_CHECK_OK(zt_snapshot_save_sharded(sh, a.f, a.o, &st));
  ZT_CHECK_OK(zt_snapshot_save_full(full, zt_test_lm(a.m), a.f, a.o, &st));
  ZT_CHECK(zt_snapshot_is_sharded(sh) && !zt_snapshot_is_sharded(full));
  zt_tensor *at2[64] = {0}, *ref[64] = {0};
  int np = snapshot(&a, at2);
  double ref_loss[2];
  for (int k = 0; k < 2; k++) ref_loss[k] = run_step(&a, 2 + k);
  snapshot(&a, ref);
  run_free(&a);

  /* sub-groups of other sizes load the sharded checkpoint and continue alike */
  int color = N == 4 ? (R < 2 ? 0 : R) : R;
  zt_comm *g = NULL;
  ZT_CHECK_OK(zt_comm_split(g_world, color, R, &g));
  run b;
  run_new(&b, g, true, 77);
  zt_train_state got;
  memset(&got, 0, sizeof got);
  ZT_CHECK_OK(zt_snapshot_load_sharded(sh, b.f, b.o, &got));
  ZT_CHECK(got.step == 2 && got.data.index == 7 && zt_optim_step_count(b.o) == 2);
  zt_tensor *snap[64] = {0};
  snapshot(&b, snap);
  ZT_CHECK(snapshot_bitwise(snap, at2, np)); /* values are copied, never recomputed */
  zt_test_free_all(snap, np);
  char what[64];
  snprintf(what, sizeof what, "sharded %d -> %d ranks", N, zt_comm_size(g));
  continue_and_compare(&b, ref_loss, ref, what);
  run_free(&b);
  /* the full checkpoint loads at that size too */
  run_new(&b, g, true, 78);
  ZT_CHECK_OK(zt_snapshot_load_full(full, zt_test_lm(b.m), b.f, b.o, &got));
  ZT_CHECK(got.step == 2 && zt_optim_step_count(b.o) == 2);
  snapshot(&b, snap);
  ZT_CHECK(snapshot_bitwise(snap, at2, np));
  zt_test_free_all(snap, np);
  snprintf(what, sizeof what, "full %d -> %d ranks", N, zt_comm_size(g));
  continue_and_compare(&b, ref_loss, ref, what);
  run_free(&b);
  zt_comm_free(g);

  /* one process: the consolidated checkpoint, the full one, and the sharded one itself, read by
   * zt_snapshot_load (consolidated on load), also into a model and moments evicted to a store
   * (bitwise the gathered values) */
  if (R == 0) {
    ZT_CHECK_OK(zt_snapshot_consolidate(sh, cons, false));
    const char *dirs[4] = {cons, full, sh, sh};
    const char *whats[4] = {"consolidated -> 1 process", "full -> 1 process", "sharded -> 1 process",
                            "sharded -> 1 process, evicted"};
    for (int d = 0; d < 4; d++) {
      run c;
      run_new(&c, NULL, false, 79);
      zt_store *store = NULL;
      int64_t biggest = d == 3 ? evict_run(&c, &store) : 0, before = zt_test_cpu_now();
      zt_mem_reset_peaks();
      ZT_CHECK_OK(zt_snapshot_load(dirs[d], zt_test_lm(c.m), c.o, &got));
      ZT_CHECK(got.step == 2 && zt_optim_step_count(c.o) == 2);
      /* evicted: RAM for the stage, a piece read from a shard file and the memory store's new
       * copy of one tensor, never the whole model */
      if (d == 3) ZT_CHECK(zt_test_cpu_peak() - before <= 3 * biggest && restore_run(&c)); /* evicted throughout */
      snapshot(&c, snap);
      ZT_CHECK(snapshot_bitwise(snap, at2, np));
      zt_test_free_all(snap, np);
      continue_and_compare(&c, ref_loss, ref, whats[d]);
      run_free(&c);
      zt_store_free(store);
    }
  }

  /* the other strategies write the same format and load it: saved under S, loaded under FULL;
   * saved under FULL (above), loaded under S (NONE: see the report on zt_fsdp_comm) */
  const zt_shard_strategy others[] = {ZT_SHARD_GRAD_OP, ZT_SHARD_OPT, ZT_SHARD_HYBRID};
  for (int i = 0; i < 3; i++) {
    char sdir[400];
    snprintf(sdir, sizeof sdir, "%s/%s", dir, zt_shard_strategy_name(others[i]));
    run x;
    run_new_as(&x, g_world, true, others[i], 1);
    for (int k = 0; k < 2; k++) run_step(&x, k);
    ZT_CHECK_OK(zt_snapshot_save_sharded(sdir, x.f, x.o, &st));
    zt__shard_index *ix = NULL; /* one file per rank of a shard group (HYBRID: of the first group) */
    ZT_CHECK_OK(index_read(sdir, &ix));
    ZT_CHECK(ix && ix->world == zt_comm_size(zt_fsdp_shard_comm(x.f)) && ix->n_files == ix->world);
    zt__shard_index_free(ix);
    run_free(&x);
    run_new(&x, g_world, true, 80);
    ZT_CHECK_OK(zt_snapshot_load_sharded(sdir, x.f, x.o, &got));
    snprintf(what, sizeof what, "saved under %s, loaded under full", zt_shard_strategy_name(others[i]));
    continue_and_compare(&x, ref_loss, ref, what);
    run_free(&x);
    run_new_as(&x, g_world, true, others[i], 81);
    ZT_CHECK_OK(zt_snapshot_load_sharded(sh, x.f, x.o, &got));
    snprintf(what, sizeof what, "saved under full, loaded under %s", zt_shard_strategy_name(others[i]));
    continue_and_compare(&x, ref_loss, ref, what);
    run_free(&x);
  }
  zt_test_free_all(at2, np);
  zt_test_free_all(ref, np);
  ZT_CHECK_OK(zt_barrier(g_world));
  if (R == 0) zt_test_tmpdir_remove();
}

static void test_fsdp_errors(void) {
  char dir[256], sh[320], path[700], moved[400];
  zt_test_shared_tmpdir(g_world, "fsdpck", dir, sizeof dir);
  snprintf(sh, sizeof sh, "%s/sharded", dir);
  run a;
  run_new(&a, g_world, true, 1);
  run_step(&a, 0);
  zt_train_state st = state_at(1);
  ZT_CHECK_OK(zt_snapshot_save_sharded(sh, a.f, a.o, &st));
  /* another model shape: a layer more */
  zt_gpt2_config big = k_cfg;
  big.n_layer = 3;
  zt_rng_seed(3);
  zt_gpt2 *m = NULL;
  zt_fsdp *f = NULL;
  zt_fsdp_options fo = zt_fsdp_options_default();
  ZT_CHECK_OK(zt_gpt2_new(&big, &m));
  ZT_CHECK_OK(zt_fsdp_new(g_world, zt_gpt2_module(m), &fo, &f));
  ZT_CHECK_OK(zt_fsdp_auto_wrap(f, NULL, NULL));
  ZT_CHECK_OK(zt_fsdp_init(f));
  zt_clear_error();
  zt_status s = zt_snapshot_load_sharded(sh, f, NULL, NULL);
  ZT_CHECK(s != ZT_OK);
  /* the rank that holds a piece of block 2 names it; the others say another rank failed */
  ZT_CHECK(strstr(zt_last_error(), "has no parameter 'transformer.h.2.") || strstr(zt_last_error(), "another rank"));
  zt_fsdp_free(f);
  zt_gpt2_free(m);
  /* a layer less: the checkpoint holds parameters no rank of the model has (every rank knows) */
  big.n_layer = 1;
  ZT_CHECK_OK(zt_gpt2_new(&big, &m));
  ZT_CHECK_OK(zt_fsdp_new(g_world, zt_gpt2_module(m), &fo, &f));
  ZT_CHECK_OK(zt_fsdp_auto_wrap(f, NULL, NULL));
  ZT_CHECK_OK(zt_fsdp_init(f));
  ZT_CHECK_ERR(zt_snapshot_load_sharded(sh, f, NULL, NULL), ZT_STATUS_SHAPE,
               "holds parameter 'transformer.h.1.ln_1.weight', which the model does not have");
  zt_fsdp_free(f);
  zt_gpt2_free(m);
  /* a missing shard file is named (by the rank that reads it: the same layout, its own file) */
  ZT_CHECK_OK(zt_barrier(g_world));
  char ver[600];
  ZT_CHECK_OK(zt_snapshot_resolve(sh, ver, sizeof ver));
  snprintf(path, sizeof path, "%s/shard-%d-of-%d.safetensors", ver, N - 1, N);
  snprintf(moved, sizeof moved, "%s/away", dir);
  if (R == 0) ZT_CHECK(rename(path, moved) == 0);
  ZT_CHECK_OK(zt_barrier(g_world));
  zt_clear_error();
  s = zt_snapshot_load_sharded(sh, a.f, a.o, NULL);
  ZT_CHECK(s == ZT_STATUS_IO);
  if (R == N - 1) ZT_CHECK(strstr(zt_last_error(), "is missing") && strstr(zt_last_error(), path));
  ZT_CHECK_OK(zt_barrier(g_world));
  run_free(&a);
  if (R == 0) zt_test_tmpdir_remove();
}

/* Rewrite a safetensors file with the same tensors and metadata value key = value (zt_save_id kept). */
static void restamp(const char *path, const char *key, const char *value) {
  int n = 0;
  zt__st_info *info = NULL;
  char *id = NULL;
  ZT_CHECK_OK(zt__safetensors_list(path, &n, &info));
  ZT_CHECK_OK(zt_safetensors_metadata(path, "zt_save_id", &id));
  zt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  for (int i = 0; i < n; i++) {
    names[i] = info[i].name;
    ZT_CHECK_OK(zt_tensor_zeros(info[i].ndim, info[i].shape, ZT_DTYPE_F32, ZT_CPU, &ts[i]));
  }
  ZT_CHECK_OK(zt_safetensors_load_into(path, n, names, ts, true));
  const char *keys[] = {"zt_save_id", key}, *vals[] = {id, value};
  ZT_CHECK_OK(zt_safetensors_save(path, n, names, ts, 2, keys, vals));
  zt_test_free_all(ts, n);
  free(ts);
  free(names);
  free(info);
  free(id);
}

/* A full checkpoint loaded under FSDP: the optimizer step in optim.safetensors must be an
 * integer in [0, 2^53] (99999999999999999999 used to be taken as 2^63 - 1 by strtoll, and the
 * next step's increment overflowed). */
static void test_fsdp_full_bad_step(void) {
  char dir[256], full[320];
  zt_test_shared_tmpdir(g_world, "fsdpck", dir, sizeof dir);
  snprintf(full, sizeof full, "%s/full", dir);
  run a;
  run_new(&a, g_world, true, 1);
  run_step(&a, 0);
  zt_train_state st = state_at(1);
  ZT_CHECK_OK(zt_snapshot_save_full(full, zt_test_lm(a.m), a.f, a.o, &st));
  ZT_CHECK_OK(zt_snapshot_load_full(full, zt_test_lm(a.m), a.f, a.o, NULL));
  const char *bad[] = {"99999999999999999999", "9007199254740993", "-1", "+5", " 5"};
  for (int i = 0; i < 5; i++) {
    char ver[600], path[700];
    ZT_CHECK_OK(zt_snapshot_resolve(full, ver, sizeof ver));
    snprintf(path, sizeof path, "%s/optim.safetensors", ver);
    ZT_CHECK_OK(zt_barrier(g_world));
    if (R == 0) restamp(path, "step", bad[i]);
    ZT_CHECK_OK(zt_barrier(g_world));
    ZT_CHECK_ERR(zt_snapshot_load_full(full, zt_test_lm(a.m), a.f, a.o, NULL), ZT_STATUS_IO,
                 "metadata 'step' is missing or not an integer in [0, 2^53]");
  }
  ZT_CHECK_OK(zt_barrier(g_world));
  run_free(&a);
  if (R == 0) zt_test_tmpdir_remove();
}

int main(void) {
  if (!(g_world = zt_test_world(&R, &N))) return 1;
  ZT_RUN(test_format_reshard_and_consolidate);
  ZT_RUN(test_format_errors);
  ZT_RUN(test_format_index_checks);
  ZT_RUN(test_fsdp_save_reshard_consolidate);
  ZT_RUN(test_fsdp_errors);
  ZT_RUN(test_fsdp_full_bad_step);
  int rc = zt_test_finish();
  zt_comm_free(g_world);
  return rc;
}
