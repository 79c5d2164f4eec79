/* Checkpoints: bitwise save/load of parameters, optimizer state and training state (and
 * an identical next step after loading), config mismatch errors, missing or damaged
 * state.json, an interrupted save next to a good checkpoint, series folders (versions behind
 * an atomically swapped 'latest' link, pruning), a save failing half-way, HF GPT-2 files (prefix-less names, attention-mask buffers, tied lm_head, bf16). */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/buf.h"
#include "io/json.h"
#include "zt/autograd.h"
#include "zt_test.h"

static bool exists(const char *dir, const char *name) {
  char p[800];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static const zt_gpt2_config k_cfg = {2, 2, 16, 37, 8, 0.0};

static zt_gpt2 *new_model(const zt_gpt2_config *c, uint64_t seed) {
  zt_rng_seed(seed);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(c, &m));
  return m;
}



static bool params_equal(zt_gpt2 *a, zt_gpt2 *b) {
  zt_param *pa, *pb;
  int na = zt_gpt2_params(a, &pa), nb = zt_gpt2_params(b, &pb);
  if (na != nb || na == 0) return false;
  for (int i = 0; i < na; i++)
    if (strcmp(pa[i].name, pb[i].name) || !zt_test_bitwise_equal(pa[i].tensor, pb[i].tensor)) return false;
  return true;
}

static bool optim_equal(zt_optim *a, zt_optim *b) {
  int na, nb;
  const char *const *names_a, *const *names_b;
  zt_tensor *const *ta, *const *tb;
  if (zt_optim_state(a, &na, &names_a, &ta) || zt_optim_state(b, &nb, &names_b, &tb) || na != nb || na == 0)
    return false;
  for (int i = 0; i < na; i++)
    if (strcmp(names_a[i], names_b[i]) || !zt_test_bitwise_equal(ta[i], tb[i])) return false;
  return zt_optim_step_count(a) == zt_optim_step_count(b);
}

static zt_train_state state_at(int64_t step) {
  zt_train_state st = {0};
  st.step = step;
  st.rng.seed = 0xFFFFFFFFFFFFFFF1ull; /* beyond 2^53: must survive JSON exactly */
  st.rng.offset = 123456789012345ull;
  st.data.epoch = 3;
  st.data.index = 17;
  st.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = k_cfg};
  return st;
}

static void test_roundtrip_bitwise(void) {
  zt_test_tmpdir_make("ck");
  char ck[256];
  zt_test_tmp_path_to(ck, sizeof ck, "ck");
  zt_gpt2 *a = new_model(&k_cfg, 1);
  zt_optim *oa = zt_test_gpt2_adamw(a);
  zt_test_gpt2_step(a, oa, 1);
  zt_test_gpt2_step(a, oa, 2);
  zt_train_state st = state_at(2);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  /* a series folder: the version, and 'latest' linking to it */
  char ver[300], target[64] = "";
  snprintf(ver, sizeof ver, "%s/step-00000002", ck);
  const char *files[] = {"model.safetensors", "config.json", "optim.safetensors", "state.json"};
  for (int i = 0; i < 4; i++) ZT_CHECK(exists(ver, files[i]) && exists(ck, "latest"));
  ZT_CHECK(!exists(ck, ".step-00000002.saving"));
  char link[300];
  snprintf(link, sizeof link, "%s/latest", ck);
  ZT_CHECK(readlink(link, target, sizeof target - 1) > 0 && !strcmp(target, "step-00000002"));

  zt_gpt2 *b = new_model(&k_cfg, 2);
  zt_optim *ob = zt_test_gpt2_adamw(b);
  ZT_CHECK(!params_equal(a, b));
  zt_train_state got;
  memset(&got, 0xAB, sizeof got);
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), ob, &got));
  ZT_CHECK(params_equal(a, b));
  ZT_CHECK(optim_equal(oa, ob));
  ZT_CHECK(zt_optim_step_count(ob) == 2);
  ZT_CHECK(got.step == 2 && got.rng.seed == st.rng.seed && got.rng.offset == st.rng.offset);
  ZT_CHECK(got.data.epoch == 3 && got.data.index == 17);
  ZT_CHECK(got.model.family == ZT_LM_GPT2 && got.model.gpt2.n_layer == 2 && got.model.gpt2.n_head == 2 &&
           got.model.gpt2.n_embd == 16 && got.model.gpt2.vocab_size == 37 && got.model.gpt2.block_size == 8 &&
           got.model.gpt2.dropout == 0.0);
  zt_train_state rs;
  ZT_CHECK_OK(zt_snapshot_read_state(ck, &rs));
  ZT_CHECK(rs.step == 2 && rs.rng.seed == st.rng.seed && rs.model.gpt2.n_embd == 16 && rs.model.gpt2.block_size == 8);
  /* the next step after loading is the same, bitwise */
  zt_test_gpt2_step(a, oa, 3);
  zt_test_gpt2_step(b, ob, 3);
  ZT_CHECK(params_equal(a, b));
  ZT_CHECK(optim_equal(oa, ob));

  /* the files transformers reads: format=pt metadata and an HF GPT2Config */
  char path[300], *fmt = NULL;
  snprintf(path, sizeof path, "%s/latest/model.safetensors", ck);
  ZT_CHECK_OK(zt_safetensors_metadata(path, "format", &fmt));
  ZT_CHECK(fmt && !strcmp(fmt, "pt"));
  free(fmt);
  snprintf(path, sizeof path, "%s/latest/config.json", ck);
  void *text = NULL;
  size_t len = 0;
  ZT_CHECK_OK(zt_read_file(path, &text, &len));
  zt__json *j = NULL;
  ZT_CHECK_OK(zt__json_parse(text, len, "config.json", &j));
  free(text);
  int64_t v = 0;
  ZT_CHECK(!strcmp(zt__json_get(j, "model_type")->str, "gpt2"));
  ZT_CHECK(!strcmp(zt__json_get(j, "architectures")->items[0].str, "GPT2LMHeadModel"));
  ZT_CHECK(!strcmp(zt__json_get(j, "activation_function")->str, "gelu_new"));
  ZT_CHECK(zt__json_i64(zt__json_get(j, "n_layer"), &v) && v == 2);
  ZT_CHECK(zt__json_i64(zt__json_get(j, "n_head"), &v) && v == 2);
  ZT_CHECK(zt__json_i64(zt__json_get(j, "n_embd"), &v) && v == 16);
  ZT_CHECK(zt__json_i64(zt__json_get(j, "vocab_size"), &v) && v == 37);
  ZT_CHECK(zt__json_i64(zt__json_get(j, "n_positions"), &v) && v == 8);
  ZT_CHECK(zt__json_i64(zt__json_get(j, "n_ctx"), &v) && v == 8);
  ZT_CHECK(zt__json_get(j, "tie_word_embeddings")->boolean);
  zt__json_free(j);

  zt_optim_free(oa);
  zt_optim_free(ob);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_test_tmpdir_remove();
}

static void test_config_mismatch(void) {
  zt_test_tmpdir_make("ck");
  char ck[256];
  zt_test_tmp_path_to(ck, sizeof ck, "ck");
  zt_gpt2 *a = new_model(&k_cfg, 1);
  zt_train_state st = state_at(0);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), NULL, &st));
  zt_gpt2_config c3 = k_cfg;
  c3.n_layer = 3;
  zt_gpt2 *b = new_model(&c3, 1);
  ZT_CHECK_ERR(zt_snapshot_load(ck, zt_test_lm(b), NULL, NULL), ZT_STATUS_SHAPE, "has n_layer 2, model has 3");
  ZT_CHECK(strstr(zt_last_error(), ck) != NULL);
  zt_gpt2_free(b);
  zt_gpt2_config cv = k_cfg;
  cv.vocab_size = 40;
  b = new_model(&cv, 1);
  ZT_CHECK_ERR(zt_snapshot_load(ck, zt_test_lm(b), NULL, NULL), ZT_STATUS_SHAPE, "has vocab_size 37, model has 40");
  zt_gpt2_free(b);
  zt_gpt2_config cb = k_cfg;
  cb.block_size = 16;
  b = new_model(&cb, 1);
  ZT_CHECK_ERR(zt_snapshot_load(ck, zt_test_lm(b), NULL, NULL), ZT_STATUS_SHAPE, "has block_size 8, model has 16");
  zt_gpt2_free(b);
  /* weights alone load into a model of the same shape; a resume needs optimizer state */
  b = new_model(&k_cfg, 5);
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), NULL, NULL));
  ZT_CHECK(params_equal(a, b));
  zt_optim *ob = zt_test_gpt2_adamw(b);
  ZT_CHECK_ERR(zt_snapshot_load(ck, zt_test_lm(b), ob, NULL), ZT_STATUS_STATE, "holds no optimizer state");
  zt_optim_free(ob);
  zt_gpt2_free(b);
  zt_gpt2_free(a);
  zt_test_tmpdir_remove();
}

static void test_missing_or_damaged_state(void) {
  zt_test_tmpdir_make("ck");
  char ck[256], path[300];
  zt_test_tmp_path_to(ck, sizeof ck, "ck");
  zt_train_state st;
  ZT_CHECK_ERR(zt_snapshot_read_state(ck, &st), ZT_STATUS_IO, "No such file or directory");
  ZT_CHECK(strstr(zt_last_error(), ck) != NULL);
  zt_gpt2 *a = new_model(&k_cfg, 1);
  zt_optim *oa = zt_test_gpt2_adamw(a);
  st = state_at(4);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  snprintf(path, sizeof path, "%s/latest/state.json", ck);
  ZT_CHECK(unlink(path) == 0);
  ZT_CHECK_ERR(zt_snapshot_load(ck, zt_test_lm(a), oa, &st), ZT_STATUS_IO, "has no state.json");
  ZT_CHECK(strstr(zt_last_error(), "did not finish") != NULL);
  ZT_CHECK_ERR(zt_snapshot_read_state(ck, &st), ZT_STATUS_IO, "has no state.json");
  /* damaged: not JSON, a missing field, a bad value */
  const char *bad[][2] = {
      {"{\"format\": \"zerotrain-checkpoint\", \"version\": 1,", "invalid JSON in '"},
      {"{\"format\": \"zerotrain-checkpoint\", \"version\": 1, \"save_id\": \"x\", \"step\": 1}",
       "field 'rng.seed' is missing"},
      {"{\"format\": \"zerotrain-checkpoint\", \"version\": 1, \"save_id\": \"x\", \"step\": -1}",
       "field 'step' must be an integer"},
      {"{\"format\": \"other\"}", "is not a zerotrain state.json"},
      {"{\"format\": \"zerotrain-checkpoint\", \"version\": 9}", "format version 9"},
  };
  for (int i = 0; i < 5; i++) {
    const void *c = bad[i][0];
    size_t n = strlen(bad[i][0]);
    ZT_CHECK_OK(zt_write_file_atomic(path, &c, &n, 1));
    zt_status want = i == 4 ? ZT_STATUS_UNSUPPORTED : ZT_STATUS_IO;
    ZT_CHECK_ERR(zt_snapshot_read_state(ck, &st), want, bad[i][1]);
  }
  /* not a regular file, or far too large: refused before reading (a link to /dev/zero used
   * to grow the process until the OOM killer came; a FIFO blocked forever) */
  ZT_CHECK(unlink(path) == 0 && symlink("/dev/zero", path) == 0);
  ZT_CHECK_ERR(zt_snapshot_read_state(ck, &st), ZT_STATUS_IO, "it is a character device, not a regular file");
  ZT_CHECK(unlink(path) == 0 && mkfifo(path, 0600) == 0);
  unsigned prev = alarm(20);
  ZT_CHECK_ERR(zt_snapshot_read_state(ck, &st), ZT_STATUS_IO, "it is a FIFO (named pipe)");
  alarm(prev);
  ZT_CHECK(unlink(path) == 0);
  zt_test_write_file(path, "{", 1);
  ZT_CHECK(truncate(path, (off_t)ZT__READ_JSON_MAX + 1) == 0); /* sparse: no disk used */
  ZT_CHECK_ERR(zt_snapshot_read_state(ck, &st), ZT_STATUS_IO, "more than the 268435456 bytes");
  /* not a folder */
  ZT_CHECK_ERR(zt_snapshot_read_state(path, &st), ZT_STATUS_IO, "is not a folder");
  zt_optim_free(oa);
  zt_gpt2_free(a);
  zt_test_tmpdir_remove();
}

/* A save into a new folder that dies before state.json leaves that folder refused and the
 * previous checkpoint folder loadable. */
static void test_interrupted_save(void) {
  zt_test_tmpdir_make("ck");
  char ck1[256], ck2[256], path[300];
  zt_test_tmp_path_to(ck1, sizeof ck1, "ck1");
  zt_test_tmp_path_to(ck2, sizeof ck2, "ck2");
  zt_gpt2 *a = new_model(&k_cfg, 1), *snap = new_model(&k_cfg, 9);
  zt_optim *oa = zt_test_gpt2_adamw(a);
  zt_test_gpt2_step(a, oa, 1);
  zt_train_state st1 = state_at(1);
  ZT_CHECK_OK(zt_snapshot_save(ck1, zt_test_lm(a), oa, &st1));
  ZT_CHECK_OK(zt_snapshot_load(ck1, zt_test_lm(snap), NULL, NULL)); /* the weights of save 1 */
  zt_test_gpt2_step(a, oa, 2);
  zt_train_state st2 = state_at(2);
  ZT_CHECK_OK(zt_snapshot_save(ck2, zt_test_lm(a), oa, &st2));
  snprintf(path, sizeof path, "%s/latest/state.json", ck2);
  ZT_CHECK(unlink(path) == 0); /* the crash before the commit record */
  zt_gpt2 *b = new_model(&k_cfg, 3);
  zt_optim *ob = zt_test_gpt2_adamw(b);
  ZT_CHECK_ERR(zt_snapshot_load(ck2, zt_test_lm(b), ob, NULL), ZT_STATUS_IO, "has no state.json");
  zt_train_state got;
  ZT_CHECK_OK(zt_snapshot_load(ck1, zt_test_lm(b), ob, &got));
  ZT_CHECK(got.step == 1 && zt_optim_step_count(ob) == 1);
  ZT_CHECK(params_equal(b, snap));
  /* a half-written state.json (torn write without the atomic rename) is refused too */
  const void *c = "{\"format\": \"zerotrain-checkpoint\", \"vers";
  size_t n = strlen(c);
  ZT_CHECK_OK(zt_write_file_atomic(path, &c, &n, 1));
  ZT_CHECK_ERR(zt_snapshot_load(ck2, zt_test_lm(b), ob, NULL), ZT_STATUS_IO, "invalid JSON");
  ZT_CHECK_OK(zt_snapshot_load(ck1, zt_test_lm(b), ob, NULL));
  zt_optim_free(oa);
  zt_optim_free(ob);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_gpt2_free(snap);
  zt_test_tmpdir_remove();
}

static void copy_file(const char *from, const char *to) {
  void *d = NULL;
  size_t n = 0;
  ZT_CHECK_OK(zt_read_file(from, &d, &n));
  const void *c = d;
  ZT_CHECK_OK(zt_write_file_atomic(to, &c, &n, 1));
  free(d);
}

static void write_text_file(const char *path, const char *text) {
  const void *c = text;
  size_t n = strlen(text);
  ZT_CHECK_OK(zt_write_file_atomic(path, &c, &n, 1));
}

static int count_versions(const char *dir) {
  int n = 0;
  char p[400];
  for (int step = 0; step < 10; step++)
    for (int k = 0; k < 3; k++) {
      if (k) snprintf(p, sizeof p, "step-%08d-%d", step, k);
      else snprintf(p, sizeof p, "step-%08d", step);
      n += exists(dir, p);
    }
  return n;
}

/* Saves into one series folder: each is a new version behind 'latest'; leftovers of a
 * crashed save are cleaned; the user's files stay; a second save at the same step gets its
 * own version; files of two saves are never mixed silently; prune keeps the newest. */
static void test_series_folder(void) {
  zt_test_tmpdir_make("ck");
  char ck[256], other[256], stage[300], path[400];
  zt_test_tmp_path_to(ck, sizeof ck, "ck");
  zt_test_tmp_path_to(other, sizeof other, "other");
  zt_gpt2 *a = new_model(&k_cfg, 1), *b = new_model(&k_cfg, 2);
  zt_optim *oa = zt_test_gpt2_adamw(a), *ob = zt_test_gpt2_adamw(b);
  ZT_CHECK_ERR(zt_snapshot_read_state(zt_test_tmpdir(), &(zt_train_state){0}), ZT_STATUS_IO, "holds no checkpoint");
  zt_train_state st = state_at(1);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  /* the user's file in the folder, and a staging folder a crashed save left */
  snprintf(path, sizeof path, "%s/metrics.jsonl", ck);
  write_text_file(path, "{\"step\":1}\n");
  snprintf(stage, sizeof stage, "%s/.step-00000002.saving", ck);
  ZT_CHECK(mkdir(stage, 0755) == 0);
  snprintf(path, sizeof path, "%s/model.safetensors", stage);
  write_text_file(path, "partial");
  zt_test_gpt2_step(a, oa, 1);
  st = state_at(2);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  ZT_CHECK(!exists(ck, ".step-00000002.saving") && exists(ck, "metrics.jsonl") && exists(ck, "step-00000001"));
  zt_train_state got;
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), ob, &got));
  ZT_CHECK(got.step == 2 && params_equal(a, b) && optim_equal(oa, ob));
  /* a second save at step 2 (e.g. after a resume): its own version, made the latest */
  zt_test_gpt2_step(a, oa, 2);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), NULL, &st));
  ZT_CHECK(exists(ck, "step-00000002-1"));
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), NULL, &got));
  ZT_CHECK(params_equal(a, b));
  ZT_CHECK_ERR(zt_snapshot_load(ck, zt_test_lm(b), ob, NULL), ZT_STATUS_STATE, "holds no optimizer state");
  /* a version folder names itself */
  snprintf(path, sizeof path, "%s/step-00000001", ck);
  ZT_CHECK_OK(zt_snapshot_read_state(path, &got));
  ZT_CHECK(got.step == 1);
  /* prune: the newest two stay (the latest among them); a version holding a user's file stays */
  snprintf(path, sizeof path, "%s/step-00000001/notes.txt", ck);
  write_text_file(path, "mine");
  st = state_at(3);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  ZT_CHECK(count_versions(ck) == 4);
  ZT_CHECK_OK(zt_snapshot_prune(ck, 2));
  ZT_CHECK(exists(ck, "step-00000003") && exists(ck, "step-00000002-1") && !exists(ck, "step-00000002"));
  ZT_CHECK(exists(ck, "step-00000001/notes.txt") && !exists(ck, "step-00000001/model.safetensors"));
  /* a prune cut short (state.json removed, the rest not): the next prune finishes it */
  snprintf(path, sizeof path, "%s/step-00000002-1/state.json", ck);
  ZT_CHECK(unlink(path) == 0);
  ZT_CHECK_OK(zt_snapshot_prune(ck, 2));
  ZT_CHECK(!exists(ck, "step-00000002-1") && exists(ck, "step-00000003"));
  ZT_CHECK_OK(zt_snapshot_prune(ck, 1));
  ZT_CHECK(exists(ck, "step-00000003") && !exists(ck, "step-00000002-1") && exists(ck, "metrics.jsonl"));
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), ob, &got));
  ZT_CHECK(got.step == 3 && params_equal(a, b));
  ZT_CHECK_ERR(zt_snapshot_prune(ck, 0), ZT_STATUS_INVALID_ARG, "keep 0");
  /* model.safetensors of another save (files mixed by hand) is refused */
  ZT_CHECK_OK(zt_snapshot_save(other, zt_test_lm(b), ob, &st));
  char from[400];
  snprintf(from, sizeof from, "%s/latest/model.safetensors", other);
  snprintf(path, sizeof path, "%s/latest/model.safetensors", ck);
  copy_file(from, path);
  ZT_CHECK_ERR(zt_snapshot_load(ck, zt_test_lm(b), NULL, NULL), ZT_STATUS_IO, "model.safetensors is not from the same save");
  /* a path that is a file */
  ZT_CHECK_ERR(zt_snapshot_save(path, zt_test_lm(a), NULL, &st), ZT_STATUS_IO, "is not a folder");
  /* a trailing slash names the same folder; a link to the folder is followed */
  char slash[300], link[256];
  snprintf(slash, sizeof slash, "%s/", other);
  ZT_CHECK_OK(zt_snapshot_save(slash, zt_test_lm(a), oa, &st));
  ZT_CHECK_OK(zt_snapshot_load(other, zt_test_lm(b), ob, NULL));
  ZT_CHECK(params_equal(a, b));
  zt_test_tmp_path_to(link, sizeof link, "link");
  ZT_CHECK(symlink(other, link) == 0);
  zt_test_gpt2_step(a, oa, 4);
  ZT_CHECK_OK(zt_snapshot_save(link, zt_test_lm(a), oa, &st));
  struct stat sb;
  ZT_CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
  ZT_CHECK_OK(zt_snapshot_load(other, zt_test_lm(b), ob, NULL));
  ZT_CHECK(params_equal(a, b) && optim_equal(oa, ob));
  zt_optim_free(oa);
  zt_optim_free(ob);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_test_tmpdir_remove();
}

static int64_t file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* A save that fails half-way, as on a full disk (here: a file size limit that the model file
 * fits and the optimizer file does not), leaves the previous checkpoint current and loadable,
 * also in a folder that holds other files (a metrics file, as with --metrics ck/m.jsonl). */
static void test_failed_save_keeps_latest(void) {
  zt_test_tmpdir_make("ck");
  char ck[256], path[400];
  zt_test_tmp_path_to(ck, sizeof ck, "ck");
  ZT_CHECK(mkdir(ck, 0755) == 0);
  snprintf(path, sizeof path, "%s/m.jsonl", ck);
  write_text_file(path, "{\"step\":1}\n");
  zt_gpt2 *a = new_model(&k_cfg, 1), *b = new_model(&k_cfg, 2), *snap = new_model(&k_cfg, 3);
  zt_optim *oa = zt_test_gpt2_adamw(a), *ob = zt_test_gpt2_adamw(b);
  zt_test_gpt2_step(a, oa, 1);
  zt_train_state st = state_at(1);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(snap), NULL, NULL));
  snprintf(path, sizeof path, "%s/latest/model.safetensors", ck);
  int64_t model = file_size(path);
  snprintf(path, sizeof path, "%s/latest/optim.safetensors", ck);
  int64_t optim = file_size(path);
  ZT_CHECK(model > 0 && optim > model + 1024);
  zt_test_gpt2_step(a, oa, 2);
  st = state_at(2);
  zt_status s = zt_test_snapshot_save_capped(ck, a, oa, &st, (int64_t)(model + (optim - model) / 2));
  ZT_CHECK(s == ZT_STATUS_IO);
  zt_train_state got;
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), ob, &got));
  ZT_CHECK(got.step == 1 && params_equal(b, snap) && zt_optim_step_count(ob) == 1);
  ZT_CHECK(!exists(ck, ".step-00000002.saving") && exists(ck, "m.jsonl"));
  /* and the next save goes through */
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), ob, &got));
  ZT_CHECK(got.step == 2 && params_equal(a, b) && optim_equal(oa, ob));
  zt_optim_free(oa);
  zt_optim_free(ob);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_gpt2_free(snap);
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ HF files */

static void test_hf_roundtrip_and_variants(void) {
  zt_test_tmpdir_make("ck");
  char path[256];
  zt_test_tmp_path_to(path, sizeof path, "model.safetensors");
  zt_gpt2 *a = new_model(&k_cfg, 1), *b = new_model(&k_cfg, 2);
  ZT_CHECK_OK(zt_gpt2_save_hf(a, path));
  ZT_CHECK(access(zt_test_tmp_path("config.json"), F_OK) == 0);
  ZT_CHECK_OK(zt_gpt2_load_hf(b, path));
  ZT_CHECK(params_equal(a, b));

  /* an export without the "transformer." prefix, with mask buffers and a tied lm_head */
  zt_param *p;
  int np = zt_gpt2_params(a, &p);
  const char **names = calloc((size_t)np + 4, sizeof *names);
  zt_tensor **ts = calloc((size_t)np + 4, sizeof *ts);
  zt_tensor *wte = NULL;
  for (int i = 0; i < np; i++) {
    names[i] = strncmp(p[i].name, "transformer.", 12) ? p[i].name : p[i].name + 12;
    ts[i] = p[i].tensor;
    if (!strcmp(p[i].name, "transformer.wte.weight")) wte = p[i].tensor;
  }
  ZT_CHECK(wte != NULL);
  int64_t ms[] = {1, 1, 8, 8};
  zt_tensor *mask = NULL, *lm = NULL, *junk = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(4, ms, ZT_DTYPE_F32, ZT_CPU, &mask));
  ZT_CHECK_OK(zt_tensor_clone_data(wte, ZT_MEM_TAG_TEMP, &lm));
  names[np] = "h.0.attn.bias";
  ts[np] = mask;
  names[np + 1] = "h.1.attn.masked_bias";
  ts[np + 1] = mask;
  names[np + 2] = "lm_head.weight";
  ts[np + 2] = lm;
  zt_gpt2_free(b);
  b = new_model(&k_cfg, 2);
  ZT_CHECK_OK(zt_safetensors_save(path, np + 3, names, ts, 0, NULL, NULL));
  ZT_CHECK_OK(zt_gpt2_load_hf(b, path));
  ZT_CHECK(params_equal(a, b));
  /* an untied lm_head is another model */
  ZT_CHECK_OK(zt_tensor_set(lm, 5, 123.0));
  ZT_CHECK_OK(zt_safetensors_save(path, np + 3, names, ts, 0, NULL, NULL));
  ZT_CHECK_ERR(zt_gpt2_load_hf(b, path), ZT_STATUS_INVALID_ARG, "lm_head.weight differs from the embedding wte");
  /* a tensor that is no GPT-2 parameter */
  int64_t s1[] = {1};
  ZT_CHECK_OK(zt_tensor_zeros(1, s1, ZT_DTYPE_F32, ZT_CPU, &junk));
  names[np + 2] = "transformer.extra.weight";
  ts[np + 2] = junk;
  ZT_CHECK_OK(zt_safetensors_save(path, np + 3, names, ts, 0, NULL, NULL));
  ZT_CHECK_ERR(zt_gpt2_load_hf(b, path), ZT_STATUS_INVALID_ARG, "holds tensor 'transformer.extra.weight'");
  /* a file of a smaller model */
  zt_gpt2_config c1 = k_cfg;
  c1.n_layer = 1;
  zt_gpt2 *small = new_model(&c1, 1);
  ZT_CHECK_OK(zt_gpt2_save_hf(small, path));
  ZT_CHECK_ERR(zt_gpt2_load_hf(b, path), ZT_STATUS_INVALID_ARG, "the file has 1 layers, the model 2");
  ZT_CHECK(strstr(zt_last_error(), "has no tensor 'transformer.h.1.") != NULL);
  /* a file of another width: shape error naming the tensor */
  zt_gpt2_config cw = k_cfg;
  cw.n_embd = 32;
  zt_gpt2 *wide = new_model(&cw, 1);
  ZT_CHECK_OK(zt_gpt2_save_hf(wide, path));
  ZT_CHECK_ERR(zt_gpt2_load_hf(b, path), ZT_STATUS_SHAPE, "has shape (37, 32) in the file but (37, 16)");
  ZT_CHECK_ERR(zt_gpt2_load_hf(b, "/nonexistent/model.safetensors"), ZT_STATUS_IO, "No such file");

  /* bf16 weights load into the f32 model (rounded values) */
  zt_tensor **bf = calloc((size_t)np, sizeof *bf);
  for (int i = 0; i < np; i++) {
    names[i] = p[i].name;
    ZT_CHECK_OK(zt_cast(p[i].tensor, ZT_DTYPE_BF16, &bf[i]));
  }
  ZT_CHECK_OK(zt_safetensors_save(path, np, names, bf, 0, NULL, NULL));
  ZT_CHECK_OK(zt_gpt2_load_hf(b, path));
  zt_param *pb;
  zt_gpt2_params(b, &pb);
  bool ok = true;
  for (int i = 0; i < np; i++) {
    int64_t ne = zt_tensor_numel(pb[i].tensor);
    for (int64_t k = 0; k < ne; k++)
      ok = ok && zt_tensor_get(pb[i].tensor, k) == zt_bf16_to_f32(zt_f32_to_bf16((float)zt_tensor_get(p[i].tensor, k)));
  }
  ZT_CHECK(ok);
  for (int i = 0; i < np; i++) zt_tensor_free(bf[i]);
  free(bf);
  free(names);
  free(ts);
  zt_tensor_free(mask);
  zt_tensor_free(lm);
  zt_tensor_free(junk);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_gpt2_free(small);
  zt_gpt2_free(wide);
  zt_test_tmpdir_remove();
}

/* The model-*-of-*.safetensors files in dir. */
static int shard_count(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, "model-", 6);
  if (d) closedir(d);
  return n;
}

/* A save past its shard size: model-0000k-of-0000N.safetensors and the index, as transformers
 * writes them; a load reads them bitwise, and refuses a shard of another save before loading. */
static void test_sharded_weights(void) {
  zt_test_tmpdir_make("ck");
  char ck[256];
  zt_test_tmp_path_to(ck, sizeof ck, "ck");
  zt_gpt2 *a = new_model(&k_cfg, 1), *b = new_model(&k_cfg, 2);
  zt_optim *oa = zt_test_gpt2_adamw(a), *ob = zt_test_gpt2_adamw(b);
  zt_test_gpt2_step(a, oa, 1);
  zt_train_state st = state_at(1);
  st.shard_bytes = 4096; /* the 2-layer model's 37 x 16 embedding alone is 2.4 KB */
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  char ver[300];
  snprintf(ver, sizeof ver, "%s/step-00000001", ck);
  int N = shard_count(ver);
  char last[64];
  snprintf(last, sizeof last, "model-%05d-of-%05d.safetensors", N, N);
  ZT_CHECK(N >= 3 && exists(ver, "model.safetensors.index.json") && exists(ver, last) &&
           !exists(ver, "model.safetensors"));
  zt_train_state got;
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), ob, &got));
  ZT_CHECK(params_equal(a, b) && optim_equal(oa, ob));
  /* a shard from another save: refused before any tensor is overwritten */
  char other[256];
  zt_test_tmp_path_to(other, sizeof other, "other");
  zt_train_state st2 = state_at(1);
  st2.shard_bytes = 4096;
  ZT_CHECK_OK(zt_snapshot_save(other, zt_test_lm(b), ob, &st2));
  char from[400], to[400];
  snprintf(from, sizeof from, "%s/step-00000001/model-00002-of-%05d.safetensors", other, N);
  snprintf(to, sizeof to, "%s/model-00002-of-%05d.safetensors", ver, N);
  ZT_CHECK(rename(from, to) == 0);
  zt_gpt2 *c = new_model(&k_cfg, 3), *c0 = new_model(&k_cfg, 3);
  ZT_CHECK(params_equal(c, c0));
  ZT_CHECK_ERR(zt_snapshot_load(ck, zt_test_lm(c), NULL, NULL), ZT_STATUS_IO, "not from the same save");
  ZT_CHECK(params_equal(c, c0));
  zt_optim_free(oa), zt_optim_free(ob);
  zt_gpt2_free(a), zt_gpt2_free(b), zt_gpt2_free(c), zt_gpt2_free(c0);
}

int main(void) {
  ZT_RUN(test_roundtrip_bitwise);
  ZT_RUN(test_config_mismatch);
  ZT_RUN(test_missing_or_damaged_state);
  ZT_RUN(test_interrupted_save);
  ZT_RUN(test_series_folder);
  ZT_RUN(test_failed_save_keeps_latest);
  ZT_RUN(test_hf_roundtrip_and_variants);
  ZT_RUN(test_sharded_weights);
  return zt_test_finish();
}
