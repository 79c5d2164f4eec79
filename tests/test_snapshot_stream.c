/* Checkpoints that stream from and into evicted storages: zt_storage_read_evicted /
 * _write_evicted (ranges, refusals, a failed put keeps the old contents); a save of a GPT-2
 * whose parameters and AdamW moments are evicted to a disk or a memory store writes the same
 * bytes as a save from RAM, a load into them equals a load into resident tensors, the
 * storages stay evicted throughout and the cpu peak grows by the stage only; a NaN in a file
 * is still found when the destination is evicted; a save failing midway (file size limit, a
 * store that cannot read) leaves the previous checkpoint as it was. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "io/bounce.h"
#include "zt/autograd.h"
#include "zt/store.h"
#include "zt_test.h"

static const zt_gpt2_config k_cfg = {2, 2, 16, 37, 8, 0.0};

/* ------------------------------------------------ a store that fails on demand */
typedef struct flaky {
  int gets_left; /* gets that still succeed; < 0: all */
  bool fail_put;
} flaky;

static zt_status flaky_put(void *ctx, const void *src, zt_store_item *it) {
  flaky *f = ctx;
  if (f->fail_put) return ZT_ERR(ZT_STATUS_IO, "flaky store: put refused (test)");
  ZT_TRY(zt_mem_alloc(it->nbytes, ZT_CPU, it->tag, &it->ptr));
  memcpy(it->ptr, src, it->nbytes);
  it->held = it->nbytes;
  return ZT_OK;
}
static zt_status flaky_get(void *ctx, const zt_store_item *it, void *dst) {
  flaky *f = ctx;
  if (f->gets_left == 0) return ZT_ERR(ZT_STATUS_IO, "flaky store: read failed (test)");
  if (f->gets_left > 0) f->gets_left--;
  memcpy(dst, it->ptr, it->nbytes);
  return ZT_OK;
}
static void flaky_drop(void *ctx, const zt_store_item *it) {
  (void)ctx;
  zt_mem_free(it->ptr, it->nbytes, ZT_CPU, it->tag);
}
static const zt_store_ops k_flaky_ops = {"flaky", flaky_put, flaky_get, flaky_drop, NULL, NULL, NULL, NULL};

/* ------------------------------------------------ helpers */
static zt_gpt2 *new_model(uint64_t seed) {
  zt_rng_seed(seed);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&k_cfg, &m));
  return m;
}


/* The model's parameters then the optimizer's state tensors (o may be NULL): the storages a
 * streamed checkpoint reads and writes. Returns the count; *ts is malloc'd. */
static int state_tensors(zt_gpt2 *m, zt_optim *o, zt_tensor ***ts) {
  zt_param *p;
  int np = zt_gpt2_params(m, &p), no = 0;
  const char *const *names;
  zt_tensor *const *ot = NULL;
  if (o) ZT_CHECK_OK(zt_optim_state(o, &no, &names, &ot));
  *ts = malloc(sizeof **ts * (size_t)(np + no));
  for (int i = 0; i < np; i++) (*ts)[i] = p[i].tensor;
  for (int i = 0; i < no; i++) (*ts)[np + i] = ot[i];
  return np + no;
}

static size_t evict_all(zt_gpt2 *m, zt_optim *o, zt_store *store) {
  zt_tensor **ts;
  int n = state_tensors(m, o, &ts);
  size_t biggest = 0;
  for (int i = 0; i < n; i++) {
    ZT_CHECK_OK(zt_storage_evict(ts[i]->storage, store, ts[i]->dtype));
    if (ts[i]->storage->nbytes > biggest) biggest = ts[i]->storage->nbytes;
  }
  free(ts);
  return biggest;
}

static bool all_evicted(zt_gpt2 *m, zt_optim *o) {
  zt_tensor **ts;
  int n = state_tensors(m, o, &ts);
  bool all = n > 0;
  for (int i = 0; i < n; i++) all = all && zt_storage_is_evicted(ts[i]->storage);
  free(ts);
  return all;
}

static void restore_all(zt_gpt2 *m, zt_optim *o) {
  zt_tensor **ts;
  int n = state_tensors(m, o, &ts);
  for (int i = 0; i < n; i++) ZT_CHECK_OK(zt_storage_restore(ts[i]->storage));
  free(ts);
}

static bool states_equal(zt_gpt2 *a, zt_optim *oa, zt_gpt2 *b, zt_optim *ob) {
  zt_tensor **ta, **tb;
  int na = state_tensors(a, oa, &ta), nb = state_tensors(b, ob, &tb);
  bool eq = na == nb && na > 0;
  for (int i = 0; i < na && eq; i++) eq = zt_test_bitwise_equal(ta[i], tb[i]);
  free(ta);
  free(tb);
  return eq && (!oa || zt_optim_step_count(oa) == zt_optim_step_count(ob));
}

static void *read_all(const char *path, size_t *n) {
  void *d = NULL;
  ZT_CHECK_OK(zt_read_file(path, &d, n));
  return d;
}

/* Whether two checkpoint files hold the same bytes once their save ids (which differ per
 * save, same length here: same step, process and time width) are set equal. */
static bool same_but_save_id(const char *a, const char *b) {
  char *ida = NULL, *idb = NULL;
  bool eq = false;
  size_t na = 0, nb = 0;
  char *da = read_all(a, &na), *db = read_all(b, &nb);
  if (!zt_safetensors_metadata(a, "zt_save_id", &ida) && !zt_safetensors_metadata(b, "zt_save_id", &idb) && ida &&
      idb && strlen(ida) == strlen(idb) && na == nb && da && db) {
    char *at = memmem(da, na, ida, strlen(ida));
    if (at) memcpy(at, idb, strlen(idb));
    eq = at && !memcmp(da, db, na);
  }
  free(ida);
  free(idb);
  free(da);
  free(db);
  return eq;
}

static bool files_equal(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  void *da = read_all(a, &na), *db = read_all(b, &nb);
  bool eq = da && db && na == nb && !memcmp(da, db, na);
  free(da);
  free(db);
  return eq;
}

/* Whether the folder holds a leftover temp file of an atomic write (".<name>.tmp.<pid>"). */
static bool has_temp_file(const char *dir) {
  DIR *d = opendir(dir);
  bool found = false;
  for (struct dirent *e; d && (e = readdir(d));) found = found || strstr(e->d_name, ".tmp.");
  if (d) closedir(d);
  return found;
}

static zt_store *new_store(int kind) {
  zt_store *s = NULL;
  if (kind == 0) ZT_CHECK_OK(zt_store_disk_new(zt_test_tmpdir(), "stream", &s));
  else ZT_CHECK_OK(zt_store_memory_new(&s));
  return s;
}

/* ------------------------------------------------ the storage calls */
static void test_storage_read_write_evicted(void) {
  zt_test_tmpdir_make("stream");
  for (int kind = 0; kind < 2; kind++) {
    zt_store *store = new_store(kind);
    float v[64], got[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i * 0.5f - 3.0f;
    zt_tensor *t = NULL;
    int64_t shape[] = {64};
    ZT_CHECK_OK(zt_tensor_from_data(1, shape, ZT_DTYPE_F32, v, &t));
    zt_storage *s = t->storage;
    zt_storage_set_name(s, "w");
    ZT_CHECK_ERR(zt_storage_read_evicted(s, 0, sizeof v, got), ZT_STATUS_STATE, "not evicted");
    ZT_CHECK_ERR(zt_storage_write_evicted(s, 0, sizeof v, v), ZT_STATUS_STATE, "not evicted");
    ZT_CHECK_OK(zt_storage_evict(s, store, ZT_DTYPE_F32));
    /* whole and part */
    memset(got, 0, sizeof got);
    ZT_CHECK_OK(zt_storage_read_evicted(s, 0, sizeof v, got));
    ZT_CHECK(!memcmp(got, v, sizeof v));
    ZT_CHECK_OK(zt_storage_read_evicted(s, 8 * sizeof(float), 4 * sizeof(float), got));
    ZT_CHECK(!memcmp(got, v + 8, 4 * sizeof(float)));
    ZT_CHECK_ERR(zt_storage_read_evicted(s, 60 * sizeof(float), 8 * sizeof(float), got), ZT_STATUS_INVALID_ARG,
                 "outside storage 'w'");
    uint64_t ver = s->version;
    float w[64];
    for (int i = 0; i < 64; i++) w[i] = (float)(100 + i);
    ZT_CHECK_OK(zt_storage_write_evicted(s, 0, sizeof w, w));
    float part[3] = {-1, -2, -3};
    ZT_CHECK_OK(zt_storage_write_evicted(s, 10 * sizeof(float), sizeof part, part));
    memcpy(w + 10, part, sizeof part);
    ZT_CHECK(s->version > ver && zt_storage_is_evicted(s));
    zt_store_stats ss;
    zt_store_stats_get(store, &ss);
    ZT_CHECK(ss.items == 1); /* the old items were dropped */
    /* a restore in flight is refused */
    ZT_CHECK_OK(zt_storage_restore_async(s));
    ZT_CHECK_ERR(zt_storage_read_evicted(s, 0, sizeof v, got), ZT_STATUS_STATE, "zt_storage_wait");
    ZT_CHECK_ERR(zt_storage_write_evicted(s, 0, sizeof v, v), ZT_STATUS_STATE, "being restored");
    ZT_CHECK_OK(zt_storage_wait(s));
    ZT_CHECK(!zt_storage_is_evicted(s));
    for (int i = 0; i < 64; i++) ZT_CHECK(zt_tensor_get(t, i) == w[i]);
    zt_tensor_free(t);
    zt_store_free(store);
  }
  /* a failed put keeps the old contents (and the store holds one item) */
  flaky *f = calloc(1, sizeof *f);
  f->gets_left = -1;
  zt_store *store = NULL;
  ZT_CHECK_OK(zt_store_new(&k_flaky_ops, f, ZT_CPU, &store));
  float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w[8] = {0}, got[8];
  zt_tensor *t = NULL;
  int64_t shape[] = {8};
  ZT_CHECK_OK(zt_tensor_from_data(1, shape, ZT_DTYPE_F32, v, &t));
  ZT_CHECK_OK(zt_storage_evict(t->storage, store, ZT_DTYPE_F32));
  f->fail_put = true;
  ZT_CHECK_ERR(zt_storage_write_evicted(t->storage, 0, sizeof w, w), ZT_STATUS_IO, "old contents are kept");
  f->fail_put = false;
  ZT_CHECK_OK(zt_storage_read_evicted(t->storage, 0, sizeof got, got));
  ZT_CHECK(!memcmp(got, v, sizeof v));
  zt_store_stats ss;
  zt_store_stats_get(store, &ss);
  ZT_CHECK(ss.items == 1);
  zt_tensor_free(t); /* frees the evicted storage: its item is dropped */
  zt_store_free(store);
  free(f);
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ save and load, evicted vs in RAM */
static void save_load_evicted(int kind) {
  zt_test_tmpdir_make("stream");
  char ram[300], ev[300], a_path[400], b_path[400];
  zt_test_tmp_path_to(ram, sizeof ram, "ram");
  zt_test_tmp_path_to(ev, sizeof ev, "evicted");
  zt_gpt2 *a = new_model(1);
  zt_optim *oa = zt_test_gpt2_adamw(a);
  zt_test_gpt2_step(a, oa, 1);
  zt_test_gpt2_step(a, oa, 2);
  zt_train_state st = {0};
  st.step = 2;
  st.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = k_cfg};
  ZT_CHECK_OK(zt_snapshot_save(ram, zt_test_lm(a), oa, &st));
  /* the plain writer too, with the same metadata: the very same bytes */
  zt_tensor **ts;
  int n = state_tensors(a, oa, &ts);
  char **names = malloc(sizeof *names * (size_t)n);
  for (int i = 0; i < n; i++) {
    names[i] = malloc(32);
    snprintf(names[i], 32, "t%d", i);
  }
  snprintf(a_path, sizeof a_path, "%s/all_ram.safetensors", zt_test_tmpdir());
  snprintf(b_path, sizeof b_path, "%s/all_evicted.safetensors", zt_test_tmpdir());
  const char *mk[] = {"k"}, *mv[] = {"v"};
  ZT_CHECK_OK(zt_safetensors_save(a_path, n, (const char *const *)names, ts, 1, mk, mv));

  zt_store *store = new_store(kind);
  size_t biggest = evict_all(a, oa, store);
  ZT_CHECK(all_evicted(a, oa));
  zt_store_io_stats io; /* the disk store's bounce buffers (TEMP, one per I/O thread) count too */
  zt_store_io_stats_get(store, &io);
  int64_t bounce = (int64_t)io.queue_depth * (io.chunk_bytes + 4096);
  int64_t before = zt_test_cpu_now();
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_safetensors_save(b_path, n, (const char *const *)names, ts, 1, mk, mv));
  ZT_CHECK_OK(zt_snapshot_save(ev, zt_test_lm(a), oa, &st));
  ZT_CHECK(zt_test_cpu_peak() <= before + (int64_t)biggest + bounce); /* the stage, nothing more */
  ZT_CHECK(zt_test_cpu_now() == before);
  ZT_CHECK(all_evicted(a, oa));
  ZT_CHECK(files_equal(a_path, b_path));
  const char *files[] = {"model.safetensors", "optim.safetensors"};
  for (int i = 0; i < 2; i++) {
    snprintf(a_path, sizeof a_path, "%s/latest/%s", ram, files[i]);
    snprintf(b_path, sizeof b_path, "%s/latest/%s", ev, files[i]);
    ZT_CHECK(same_but_save_id(a_path, b_path));
  }
  snprintf(a_path, sizeof a_path, "%s/latest/config.json", ram);
  snprintf(b_path, sizeof b_path, "%s/latest/config.json", ev);
  ZT_CHECK(files_equal(a_path, b_path));

  /* load into evicted tensors vs into resident ones */
  zt_gpt2 *b = new_model(2), *c = new_model(3);
  zt_optim *ob = zt_test_gpt2_adamw(b), *oc = zt_test_gpt2_adamw(c);
  zt_test_gpt2_step(b, ob, 5); /* other values everywhere, moments included */
  ZT_CHECK_OK(zt_snapshot_load(ram, zt_test_lm(c), oc, NULL));
  evict_all(b, ob, store);
  before = zt_test_cpu_now();
  zt_mem_reset_peaks();
  zt_train_state got;
  ZT_CHECK_OK(zt_snapshot_load(ev, zt_test_lm(b), ob, &got));
  /* the stage, and with a memory store the new copy of one storage before the old is dropped */
  ZT_CHECK(zt_test_cpu_peak() <= before + (int64_t)biggest * (kind == 1 ? 2 : 1) + bounce);
  ZT_CHECK(zt_test_cpu_now() == before);
  ZT_CHECK(got.step == 2 && all_evicted(b, ob));
  /* the finiteness check reads them back without restoring them */
  zt_tensor **bt;
  int nbt = state_tensors(b, ob, &bt);
  ZT_CHECK_OK(zt__tensors_check_finite(nbt, bt, (const char *const *)names, "test"));
  free(bt);
  ZT_CHECK(all_evicted(b, ob));
  restore_all(b, ob);
  restore_all(a, oa);
  ZT_CHECK(states_equal(b, ob, c, oc));
  ZT_CHECK(states_equal(a, oa, b, ob));
  /* and both train on alike */
  zt_test_gpt2_step(b, ob, 6);
  zt_test_gpt2_step(c, oc, 6);
  ZT_CHECK(states_equal(b, ob, c, oc));

  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  free(ts);
  zt_optim_free(oa);
  zt_optim_free(ob);
  zt_optim_free(oc);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_gpt2_free(c);
  zt_store_free(store);
  zt_test_tmpdir_remove();
}
static void test_save_load_evicted_disk(void) { save_load_evicted(0); }
static void test_save_load_evicted_memory(void) { save_load_evicted(1); }

/* ------------------------------------------------ a damaged file, evicted destination */
static void test_nan_reported_when_evicted(void) {
  zt_test_tmpdir_make("stream");
  char ck[300];
  zt_test_tmp_path_to(ck, sizeof ck, "ck");
  zt_gpt2 *a = new_model(1);
  zt_optim *oa = zt_test_gpt2_adamw(a);
  zt_test_gpt2_step(a, oa, 1);
  zt_param *pa;
  int np = zt_gpt2_params(a, &pa);
  ZT_CHECK(np > 3);
  int no = 0;
  const char *const *onames;
  zt_tensor *const *ots;
  ZT_CHECK_OK(zt_optim_state(oa, &no, &onames, &ots));
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_tensor_set(pa[3].tensor, 5, NAN));
  ZT_CHECK_OK(zt_tensor_set(ots[2], 7, INFINITY));
  zt_set_grad_enabled(prev);
  zt_train_state st = {0};
  st.step = 1;
  st.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = k_cfg};
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));

  zt_gpt2 *b = new_model(2);
  zt_optim *ob = zt_test_gpt2_adamw(b);
  zt_store *store = new_store(0);
  evict_all(b, ob, store);
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), ob, NULL));
  zt_param *pb;
  zt_gpt2_params(b, &pb);
  zt_tensor **ts = malloc(sizeof *ts * (size_t)np);
  const char **names = malloc(sizeof *names * (size_t)np);
  for (int i = 0; i < np; i++) ts[i] = pb[i].tensor, names[i] = pb[i].name;
  char want[200];
  snprintf(want, sizeof want, "tensor '%s' holds NaN (element 5 of", names[3]);
  ZT_CHECK_ERR(zt__tensors_check_finite(np, ts, names, "checkpoint 'ck'"), ZT_STATUS_INVALID_ARG, want);
  ZT_CHECK_OK(zt_optim_state(ob, &no, &onames, &ots));
  snprintf(want, sizeof want, "tensor '%s' holds inf (element 7 of", onames[2]);
  ZT_CHECK_ERR(zt__tensors_check_finite(no, ots, onames, "checkpoint 'ck'"), ZT_STATUS_INVALID_ARG, want);
  ZT_CHECK(all_evicted(b, ob));
  free(ts);
  free(names);
  restore_all(b, ob);
  zt_optim_free(oa);
  zt_optim_free(ob);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_store_free(store);
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ HF weights into an evicted model */
static void test_hf_into_evicted(void) {
  zt_test_tmpdir_make("stream");
  char path[400];
  snprintf(path, sizeof path, "%s/model.safetensors", zt_test_tmpdir());
  zt_gpt2 *a = new_model(1), *b = new_model(2);
  zt_param *pa;
  int np = zt_gpt2_params(a, &pa);
  /* an export with lm_head.weight (tied: wte's values), which the loader compares with wte */
  const char **names = malloc(sizeof *names * (size_t)(np + 1));
  zt_tensor **ts = malloc(sizeof *ts * (size_t)(np + 1));
  for (int i = 0; i < np; i++) {
    names[i] = pa[i].name;
    ts[i] = pa[i].tensor;
    if (!strcmp(pa[i].name, "transformer.wte.weight")) ts[np] = pa[i].tensor;
  }
  names[np] = "lm_head.weight";
  ZT_CHECK_OK(zt_safetensors_save(path, np + 1, names, ts, 0, NULL, NULL));
  zt_store *store = new_store(0);
  evict_all(b, NULL, store);
  ZT_CHECK_OK(zt_gpt2_load_hf(b, path));
  ZT_CHECK(all_evicted(b, NULL));
  restore_all(b, NULL);
  ZT_CHECK(states_equal(a, NULL, b, NULL));
  free(names);
  free(ts);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_store_free(store);
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ a save that fails midway */
static void test_failed_save_keeps_previous(void) {
  zt_test_tmpdir_make("stream");
  char ck[300], path[400];
  zt_test_tmp_path_to(ck, sizeof ck, "ck");
  zt_gpt2 *a = new_model(1), *b = new_model(2), *c = new_model(3);
  zt_optim *oa = zt_test_gpt2_adamw(a), *ob = zt_test_gpt2_adamw(b), *oc = zt_test_gpt2_adamw(c);
  zt_test_gpt2_step(a, oa, 1);
  zt_train_state st = {0};
  st.step = 1;
  st.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = k_cfg};
  flaky *f = calloc(1, sizeof *f);
  f->gets_left = -1;
  zt_store *store = NULL;
  ZT_CHECK_OK(zt_store_new(&k_flaky_ops, f, ZT_CPU, &store));
  evict_all(a, oa, store);
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(a), oa, &st));
  snprintf(path, sizeof path, "%s/latest/model.safetensors", ck);
  size_t model_n = 0;
  free(read_all(path, &model_n));
  snprintf(path, sizeof path, "%s/latest/optim.safetensors", ck);
  size_t optim_n = 0;
  void *optim_bytes = read_all(path, &optim_n);

  /* 1. the file size limit cuts optim.safetensors short */
  st.step = 2;
  zt_status s = zt_test_snapshot_save_capped(ck, a, oa, &st, (int64_t)(model_n + (optim_n - model_n) / 2));
  ZT_CHECK(s == ZT_STATUS_IO);
  ZT_CHECK(all_evicted(a, oa));
  zt_train_state got;
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(b), ob, &got));
  ZT_CHECK(got.step == 1);

  /* 2. the store fails to read a tensor halfway through the parameters */
  f->gets_left = 7;
  ZT_CHECK_ERR(zt_snapshot_save(ck, zt_test_lm(a), oa, &st), ZT_STATUS_IO, "flaky store: read failed");
  f->gets_left = -1;
  ZT_CHECK(all_evicted(a, oa));
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(c), oc, &got));
  ZT_CHECK(got.step == 1);
  DIR *d = opendir(ck);
  int entries = 0;
  for (struct dirent *e; d && (e = readdir(d));) entries += e->d_name[0] != '.';
  if (d) closedir(d);
  ZT_CHECK(entries == 2); /* step-00000001 and latest: no staging folder left */
  /* 3. over an existing file: the old file stays, no temp file beside it */
  zt_tensor **ts;
  int n = state_tensors(a, oa, &ts);
  const char **names = malloc(sizeof *names * (size_t)n);
  char (*nb)[16] = malloc(sizeof *nb * (size_t)n);
  for (int i = 0; i < n; i++) snprintf(nb[i], sizeof nb[i], "t%d", i), names[i] = nb[i];
  f->gets_left = n / 2;
  ZT_CHECK_ERR(zt_safetensors_save(path, n, names, ts, 0, NULL, NULL), ZT_STATUS_IO, "flaky store");
  f->gets_left = -1;
  size_t now_n = 0;
  void *now = read_all(path, &now_n);
  ZT_CHECK(now_n == optim_n && !memcmp(now, optim_bytes, optim_n));
  snprintf(path, sizeof path, "%s/latest", ck);
  ZT_CHECK(!has_temp_file(path));
  free(now);
  free(optim_bytes);
  free(names);
  free(nb);
  free(ts);

  restore_all(a, oa);
  restore_all(b, ob);
  ZT_CHECK(states_equal(a, oa, b, ob));
  ZT_CHECK(states_equal(b, ob, c, oc));
  zt_optim_free(oa);
  zt_optim_free(ob);
  zt_optim_free(oc);
  zt_gpt2_free(a);
  zt_gpt2_free(b);
  zt_gpt2_free(c);
  zt_store_free(store);
  free(f);
  zt_test_tmpdir_remove();
}

int main(void) {
  ZT_RUN(test_storage_read_write_evicted);
  ZT_RUN(test_save_load_evicted_disk);
  ZT_RUN(test_save_load_evicted_memory);
  ZT_RUN(test_nan_reported_when_evicted);
  ZT_RUN(test_hf_into_evicted);
  ZT_RUN(test_failed_save_keeps_previous);
  return zt_test_finish();
}
