/* Storage: refcounts shared by views, wrapped memory, and releasing bytes while views live
 * (reshard/offload): reads are ZT_STATUS_RELEASED with a clear message, accounting drops and
 * comes back on re-materialise, and saved tensors survive a release and same-value refill.
 * Write-behind eviction (zt_storage_evict_async) and clean restores (restore with keep): bytes
 * back bitwise, the write cap, a failing write, puts skipped only for unchanged storages, and
 * frees while writes are in flight (the store tests of zt/store.h are test_store.c). */
#include <stdlib.h>
#include <string.h>

#include "zt_test.h"
#include "core/store_internal.h"
#include "core/tensor_internal.h"
#include "zt/store.h"

static int64_t tag_bytes(zt_mem_tag tag) {
  zt_mem_stats s;
  zt_mem_stats_get(ZT_CPU, &s);
  return s.current[tag];
}

static void test_refcount(void) {
  zt_storage *s = NULL;
  ZT_CHECK_OK(zt_storage_new(64, ZT_CPU, ZT_MEM_TAG_TEMP, &s));
  ZT_CHECK(s->refcount == 1 && s->nbytes == 64 && s->data && !s->released && !s->external && s->version == 0);
  ZT_CHECK(s->tag == ZT_MEM_TAG_TEMP && zt_device_equal(s->device, ZT_CPU));
  zt_tensor *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt__tensor_new_view(s, 0, 1, (int64_t[]){16}, NULL, ZT_DTYPE_F32, &a));
  ZT_CHECK(s->refcount == 2);
  ZT_CHECK_OK(zt__tensor_new_view(s, 8, 1, (int64_t[]){4}, NULL, ZT_DTYPE_F32, &b));
  ZT_CHECK(s->refcount == 3);
  zt_storage_retain(s);
  ZT_CHECK(s->refcount == 4);
  zt_storage_release_ref(s);
  zt_storage_release_ref(s); /* our own reference: the views keep it alive */
  ZT_CHECK(a->storage->refcount == 2);
  ZT_CHECK_OK(zt_tensor_fill_(a, 1));
  ZT_CHECK_OK(zt_tensor_fill_(b, 5));
  ZT_CHECK(zt_tensor_get(a, 7) == 1 && zt_tensor_get(a, 8) == 5 && zt_tensor_get(a, 11) == 5);
  int64_t before = tag_bytes(ZT_MEM_TAG_TEMP);
  zt_tensor_free(a);
  ZT_CHECK(tag_bytes(ZT_MEM_TAG_TEMP) == before); /* b still holds the bytes */
  ZT_CHECK(b->storage->refcount == 1 && zt_tensor_get(b, 0) == 5);
  zt_tensor_free(b);
  ZT_CHECK(tag_bytes(ZT_MEM_TAG_TEMP) == before - 64);
  zt_storage_release_ref(NULL); /* no-op */
}

static void test_wrap_external(void) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  int64_t live = zt_test_live_bytes();
  zt_storage *s = NULL;
  ZT_CHECK_OK(zt_storage_wrap(buf, sizeof buf, ZT_CPU, &s));
  ZT_CHECK(s->external && s->data == buf && zt_test_live_bytes() == live); /* not accounted */
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt__tensor_new_view(s, 0, 2, (int64_t[]){2, 3}, NULL, ZT_DTYPE_F32, &t));
  zt_storage_release_ref(s);
  ZT_CHECK(zt_tensor_get(t, 4) == 5);
  ZT_CHECK_OK(zt_tensor_set(t, 0, 10));
  ZT_CHECK(buf[0] == 10);
  ZT_CHECK_ERR(zt_storage_release(t->storage), ZT_STATUS_STATE, "cannot release wrapped (external) memory");
  zt_tensor_free(t); /* frees the object, not buf */
  ZT_CHECK(buf[5] == 6 && zt_test_live_bytes() == live);
}

static void test_release_rematerialize_with_views(void) {
  int64_t shape[] = {4, 8};
  zt_tensor *t = NULL, *alias = NULL, *row = NULL;
  ZT_CHECK_OK(zt_tensor_empty_tagged(2, shape, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_PARAM, &t));
  ZT_CHECK_OK(zt_tensor_fill_(t, 2));
  ZT_CHECK_OK(zt_tensor_alias(t, &alias));
  ZT_CHECK_OK(zt__tensor_new_view(t->storage, 8, 1, (int64_t[]){8}, NULL, ZT_DTYPE_F32, &row));
  zt_mem_stats st0;
  zt_mem_stats_get(ZT_CPU, &st0);
  uint64_t version = t->storage->version;

  ZT_CHECK_OK(zt_storage_release(t->storage));
  zt_mem_stats st1;
  zt_mem_stats_get(ZT_CPU, &st1);
  ZT_CHECK(st1.current[ZT_MEM_TAG_PARAM] == st0.current[ZT_MEM_TAG_PARAM] - 128);
  ZT_CHECK(st1.current_total == st0.current_total - 128);
  ZT_CHECK(t->storage->released && t->storage->data == NULL && t->storage->refcount == 3);
  ZT_CHECK_OK(zt_storage_release(t->storage)); /* releasing twice is harmless */
  ZT_CHECK(zt_test_live_bytes() == st1.current_total);

  /* every reader says what happened and what to do */
  void *p;
  ZT_CHECK_ERR(zt_tensor_data(row, &p), ZT_STATUS_RELEASED, "tensor data was released");
  ZT_CHECK_ERR(zt_tensor_data(alias, &p), ZT_STATUS_RELEASED, "re-materialise the storage");
  zt_tensor *o = NULL;
  ZT_CHECK_ERR(zt_add(t, alias, &o), ZT_STATUS_RELEASED, "op 'add': input 0 has released storage");
  ZT_CHECK(o == NULL);
  ZT_CHECK_ERR(zt_exp(row, &o), ZT_STATUS_RELEASED, "released storage");
  ZT_CHECK_ERR(zt_tensor_clone_data(alias, ZT_MEM_TAG_TEMP, &o), ZT_STATUS_RELEASED, "released");
  ZT_CHECK_ERR(zt_tensor_fill_(row, 1), ZT_STATUS_RELEASED, "released");
  ZT_CHECK_ERR(zt_tensor_set(row, 0, 1), ZT_STATUS_RELEASED, "released");
  zt_clear_error();
  ZT_CHECK(isnan(zt_tensor_get(row, 0)) && strstr(zt_last_error(), "released"));
  zt_tensor *src = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, shape, ZT_DTYPE_F32, ZT_CPU, &src));
  ZT_CHECK_ERR(zt_tensor_copy_(t, src), ZT_STATUS_RELEASED, "released");
  ZT_CHECK_ERR(zt_tensor_copy_(src, t), ZT_STATUS_RELEASED, "released");
  /* the view structs themselves stay usable: a new alias of released storage is fine */
  zt_tensor *a2 = NULL;
  ZT_CHECK_OK(zt_tensor_alias(row, &a2));
  ZT_CHECK(a2->storage->refcount == 4);
  zt_tensor_free(a2);

  /* re-materialise: accounting back under the same tag, views see the refilled bytes */
  ZT_CHECK_OK(zt_storage_rematerialize(t->storage));
  zt_mem_stats st2;
  zt_mem_stats_get(ZT_CPU, &st2);
  ZT_CHECK(st2.current[ZT_MEM_TAG_PARAM] == st0.current[ZT_MEM_TAG_PARAM]);
  ZT_CHECK(st2.current_total == st0.current_total + 128); /* + src */
  ZT_CHECK(!t->storage->released && t->storage->data != NULL);
  ZT_CHECK(t->storage->version == version); /* a restore, not a modification */
  ZT_CHECK_OK(zt_storage_rematerialize(t->storage)); /* no-op when present */
  ZT_CHECK(zt_test_live_bytes() == st2.current_total);
  ZT_CHECK_OK(zt_tensor_fill_(alias, 3));
  ZT_CHECK(zt_tensor_get(row, 7) == 3);
  ZT_CHECK_OK(zt_add(t, row, &o)); /* broadcasting (4,8) + (8,) */
  ZT_CHECK(zt_tensor_get(o, 31) == 6);
  zt_tensor_free(o);

  /* release, then free every view: the bytes are not freed twice */
  ZT_CHECK_OK(zt_storage_release(t->storage));
  zt_tensor_free(t);
  zt_tensor_free(alias);
  zt_tensor_free(row);
  zt_tensor_free(src);
  ZT_CHECK_ERR(zt_storage_release(NULL), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_ERR(zt_storage_rematerialize(NULL), ZT_STATUS_INVALID_ARG, "NULL");
}

static void test_retag(void) {
  zt_storage *s = NULL;
  ZT_CHECK_OK(zt_storage_new(256, ZT_CPU, ZT_MEM_TAG_ACTIVATION, &s));
  int64_t act = tag_bytes(ZT_MEM_TAG_ACTIVATION), comm = tag_bytes(ZT_MEM_TAG_COMM);
  zt_storage_retag(s, ZT_MEM_TAG_COMM);
  ZT_CHECK(s->tag == ZT_MEM_TAG_COMM);
  ZT_CHECK(tag_bytes(ZT_MEM_TAG_ACTIVATION) == act - 256 && tag_bytes(ZT_MEM_TAG_COMM) == comm + 256);
  /* retag while released: nothing moves now; re-materialising allocates under the new tag */
  ZT_CHECK_OK(zt_storage_release(s));
  ZT_CHECK(tag_bytes(ZT_MEM_TAG_COMM) == comm);
  zt_storage_retag(s, ZT_MEM_TAG_OPTIM);
  ZT_CHECK(tag_bytes(ZT_MEM_TAG_COMM) == comm);
  int64_t optim = tag_bytes(ZT_MEM_TAG_OPTIM);
  ZT_CHECK_OK(zt_storage_rematerialize(s));
  ZT_CHECK(tag_bytes(ZT_MEM_TAG_OPTIM) == optim + 256);
  zt_storage_release_ref(s);
  ZT_CHECK(tag_bytes(ZT_MEM_TAG_OPTIM) == optim);
}

/* A tensor saved for backward whose storage is released: backward says so; after a
 * re-materialise and refill with the same values, backward works and is correct. */
static void test_saved_tensor_release(void) {
  int64_t shape[] = {5};
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 1);
  zt_tensor *a = zt_test_rand(1, shape, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *keep = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(a, ZT_MEM_TAG_TEMP, &keep));
  ZT_CHECK_OK(zt_mul(w, a, &y));
  zt_tensor *g = NULL;
  ZT_CHECK_OK(zt_tensor_full(1, shape, ZT_DTYPE_F64, ZT_CPU, 1, &g));
  ZT_CHECK_OK(zt_storage_release(a->storage));
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_RELEASED, "was released");
  ZT_CHECK(w->grad == NULL);
  ZT_CHECK_OK(zt_storage_rematerialize(a->storage));
  /* the refill writes the same bytes, so it does not bump the version */
  void *p, *q;
  ZT_CHECK_OK(zt_tensor_data(a, &p));
  ZT_CHECK_OK(zt_tensor_data(keep, &q));
  memcpy(p, q, 5 * sizeof(double));
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(w->grad && zt_test_max_abs_diff(w->grad, keep) == 0);
  zt_tensor *all[] = {w, a, keep, y, g};
  for (size_t k = 0; k < 5; k++) zt_tensor_free(all[k]);
}

/* Accumulating into a .grad whose storage was released (a resharded grad) is an error. */
static void test_released_grad_accumulation(void) {
  int64_t shape[] = {3};
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_mul_scalar(w, 2, &y));
  zt_tensor *g = NULL;
  ZT_CHECK_OK(zt_tensor_full(1, shape, ZT_DTYPE_F32, ZT_CPU, 1, &g));
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(w->grad && zt_tensor_get(w->grad, 0) == 2);
  ZT_CHECK_OK(zt_storage_release(w->grad->storage));
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_RELEASED, "whose storage was released");
  ZT_CHECK_OK(zt_storage_rematerialize(w->grad->storage));
  ZT_CHECK_OK(zt_tensor_fill_(w->grad, 0));
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(zt_tensor_get(w->grad, 2) == 2);
  zt_tensor_free(y);
  zt_tensor_free(g);
  zt_tensor_free(w);
}

/* ---------------------------------------------------------------- write behind, clean restores */
static zt_store_stats sstats(const zt_store *s) {
  zt_store_stats st;
  zt_store_stats_get(s, &st);
  return st;
}

static zt_store *disk_store(void) {
  zt_store *s = NULL;
  ZT_CHECK_OK(zt_store_disk_new(zt_test_tmpdir(), "zt_storage_test", &s));
  return s;
}

/* n f32 tensors of 64 x w under ZT_MEM_TAG_PARAM, and their copies (TEMP). */
static void make_params(int n, int64_t w, zt_tensor **t, zt_tensor **want, uint64_t seed) {
  for (int i = 0; i < n; i++) {
    t[i] = zt_test_rand(2, (int64_t[]){64, w + i}, ZT_DTYPE_F32, -1, 1, seed + (uint64_t)i);
    zt_storage_retag(t[i]->storage, ZT_MEM_TAG_PARAM);
    ZT_CHECK_OK(zt_tensor_clone_data(t[i], ZT_MEM_TAG_TEMP, &want[i]));
  }
}

/* Evicted at once, written behind, back bitwise: restored while the write may still be queued
 * or running (from RAM), after it (from the store), synchronously, and read / written in place
 * while evicted; RAM freed once written. Disk and memory stores write behind; bf16 puts
 * synchronously (its put runs OpenMP). */
static void test_evict_async_round_trip(void) {
  zt_test_tmpdir_make("storage");
  int64_t live = zt_test_live_bytes();
  for (int k = 0; k < 3; k++) {
    zt_store *s = NULL;
    if (k == 0) s = disk_store();
    else if (k == 1) ZT_CHECK_OK(zt_store_memory_new(&s));
    else ZT_CHECK_OK(zt_store_bf16_new(&s));
    if (!s) return;
    enum { N = 8 };
    zt_tensor *t[N], *want[N];
    make_params(N, 200, t, want, 40);
    for (int i = 0; i < N; i++) ZT_CHECK_OK(zt_storage_evict_async(t[i]->storage, s, ZT_DTYPE_F32));
    void *p;
    ZT_CHECK_ERR(zt_tensor_data(t[0], &p), ZT_STATUS_RELEASED, "is evicted to");
    ZT_CHECK_ERR(zt_storage_evict_async(t[0]->storage, s, ZT_DTYPE_F32), ZT_STATUS_STATE, "evicted already");
    ZT_CHECK(sstats(s).async_puts == (k == 2 ? 0 : N));
    /* 0: at once (its write likely not done: taken back); 1: async; then in place, then the rest after a flush */
    ZT_CHECK_OK(zt_storage_restore(t[0]->storage));
    ZT_CHECK_OK(zt_storage_restore_async(t[1]->storage));
    ZT_CHECK_OK(zt_storage_wait(t[1]->storage));
    float got[64];
    ZT_CHECK_OK(zt_storage_read_evicted(t[2]->storage, 0, sizeof got, got));
    void *w2;
    ZT_CHECK_OK(zt_tensor_data(want[2], &w2));
    ZT_CHECK(!memcmp(got, w2, sizeof got) || k == 2);
    float ones[64];
    for (int j = 0; j < 64; j++) ones[j] = 1;
    ZT_CHECK_OK(zt_storage_write_evicted(t[3]->storage, 0, sizeof ones, ones));
    for (int j = 0; j < 64; j++) ZT_CHECK_OK(zt_tensor_set(want[3], j, 1.0));
    ZT_CHECK_OK(zt_store_flush(s));
    ZT_CHECK(sstats(s).write_bytes_in_flight == 0);
    for (int i = 2; i < N; i++) ZT_CHECK_OK(zt_storage_restore(t[i]->storage));
    for (int i = 0; i < N && k < 2; i++) ZT_CHECK(zt_test_bitwise_equal(t[i], want[i]));
    ZT_CHECK(sstats(s).items == 0 && sstats(s).write_failures == 0);
    zt_test_free_all(t, N);
    zt_test_free_all(want, N);
    zt_store_free(s);
  }
  ZT_CHECK(zt_test_live_bytes() == live);
  zt_test_tmpdir_remove();
}

static int64_t cpu_bytes(zt_mem_tag tag) { return tag_bytes(tag); }

/* Many evictions past the cap: the RAM held by writes never passes it (one item over the cap
 * alone goes through), everything comes back bitwise, and the RAM is gone once written. */
static void test_evict_async_cap(void) {
  zt_test_tmpdir_make("storage");
  int64_t live = zt_test_live_bytes();
  zt_store *s = disk_store();
  if (!s) return;
  ZT_CHECK(zt_store_write_cap(s) == ZT_STORE_WRITE_CAP_DEFAULT);
  enum { N = 24 };
  zt_tensor *t[N], *want[N];
  make_params(N, 1024, t, want, 70); /* ~256 KiB each */
  size_t cap = 3 * t[0]->storage->nbytes;
  zt_store_set_write_cap(s, cap);
  int64_t ram0 = cpu_bytes(ZT_MEM_TAG_PARAM);
  for (int i = 0; i < N; i++) ZT_CHECK_OK(zt_storage_evict_async(t[i]->storage, s, ZT_DTYPE_F32));
  zt_store_stats st = sstats(s);
  ZT_CHECK(st.peak_write_bytes_in_flight > 0 && (size_t)st.peak_write_bytes_in_flight <= cap);
  ZT_CHECK(cpu_bytes(ZT_MEM_TAG_PARAM) <= (int64_t)cap + (ram0 - (int64_t)(N * t[0]->storage->nbytes)) + 64 * 4 * N);
  ZT_CHECK_OK(zt_store_flush(s));
  ZT_CHECK(cpu_bytes(ZT_MEM_TAG_PARAM) == 0 && sstats(s).items == N && sstats(s).puts == N);
  for (int i = 0; i < N; i++) ZT_CHECK_OK(zt_storage_restore_async(t[i]->storage));
  for (int i = 0; i < N; i++) {
    ZT_CHECK_OK(zt_storage_wait(t[i]->storage));
    ZT_CHECK(zt_test_bitwise_equal(t[i], want[i]));
  }
  /* one item larger than the cap: let through alone */
  zt_store_set_write_cap(s, 1024);
  ZT_CHECK_OK(zt_storage_evict_async(t[0]->storage, s, ZT_DTYPE_F32));
  ZT_CHECK_OK(zt_storage_evict_async(t[1]->storage, s, ZT_DTYPE_F32)); /* waits for the first */
  ZT_CHECK_OK(zt_storage_restore(t[0]->storage));
  ZT_CHECK_OK(zt_storage_restore(t[1]->storage));
  ZT_CHECK(zt_test_bitwise_equal(t[0], want[0]) && zt_test_bitwise_equal(t[1], want[1]));
  zt_test_free_all(t, N);
  zt_test_free_all(want, N);
  ZT_CHECK_OK(zt_store_flush(s));
  zt_store_free(s);
  ZT_CHECK(zt_test_live_bytes() == live);
  zt_test_tmpdir_remove();
}

/* A write behind that fails (a full disk) loses nothing: the bytes stay in RAM, a restore gives
 * them back; the failure is reported once, by zt_store_flush or by the next evict_async (which
 * then evicts nothing); read_evicted puts again. */
static void test_evict_async_failure(void) {
  zt_test_tmpdir_make("storage");
  int64_t live = zt_test_live_bytes();
  zt_store *s = disk_store();
  if (!s) return;
  enum { N = 3 };
  zt_tensor *t[N], *want[N];
  make_params(N, 300, t, want, 90);
  /* reported by flush; restored from RAM */
  ZT_CHECK(zt__store_disk_fault_at(s, ZT__IO_FAULT_WRITE_ENOSPC, 1));
  ZT_CHECK_OK(zt_storage_evict_async(t[0]->storage, s, ZT_DTYPE_F32));
  ZT_CHECK_ERR(zt_store_flush(s), ZT_STATUS_IO, "an earlier write behind into the disk store failed");
  printf("  %s\n", zt_last_error());
  ZT_CHECK_OK(zt_store_flush(s)); /* reported once */
  ZT_CHECK(sstats(s).write_failures == 1 && sstats(s).items == 0 && sstats(s).write_bytes_in_flight > 0);
  ZT_CHECK(zt_storage_is_evicted(t[0]->storage));
  ZT_CHECK_OK(zt_storage_restore(t[0]->storage));
  ZT_CHECK(zt_test_bitwise_equal(t[0], want[0]) && sstats(s).write_bytes_in_flight == 0);
  /* reported by the next evict_async, which leaves its storage in memory */
  ZT_CHECK(zt__store_disk_fault_at(s, ZT__IO_FAULT_WRITE_ENOSPC, 1));
  ZT_CHECK_OK(zt_storage_evict_async(t[0]->storage, s, ZT_DTYPE_F32));
  while (sstats(s).write_failures < 2) {
  } /* the helper's write fails soon */
  ZT_CHECK_ERR(zt_storage_evict_async(t[1]->storage, s, ZT_DTYPE_F32), ZT_STATUS_IO, "keeps its bytes in RAM");
  ZT_CHECK(!zt_storage_is_evicted(t[1]->storage) && zt_test_bitwise_equal(t[1], want[1]));
  /* read in place: put again (the fault is spent), then the storage is an ordinary evicted one */
  float got[64];
  ZT_CHECK_OK(zt_storage_read_evicted(t[0]->storage, 0, sizeof got, got));
  ZT_CHECK(sstats(s).items == 1 && sstats(s).write_bytes_in_flight == 0);
  ZT_CHECK_OK(zt_storage_restore(t[0]->storage));
  ZT_CHECK(zt_test_bitwise_equal(t[0], want[0]));
  /* freed with its failed write's bytes in RAM */
  ZT_CHECK(zt__store_disk_fault_at(s, ZT__IO_FAULT_WRITE_ENOSPC, 1));
  ZT_CHECK_OK(zt_storage_evict_async(t[2]->storage, s, ZT_DTYPE_F32));
  ZT_CHECK_ERR(zt_store_flush(s), ZT_STATUS_IO, "write behind");
  zt_tensor_free(t[2]);
  t[2] = NULL;
  ZT_CHECK(sstats(s).items == 0 && sstats(s).write_bytes_in_flight == 0);
  zt_test_free_all(t, N);
  zt_test_free_all(want, N);
  zt_store_free(s);
  ZT_CHECK(zt_test_live_bytes() == live);
  zt_test_tmpdir_remove();
}

/* A storage restored with keep and not changed is evicted without a put (sync or async); a
 * changed one (an in-place op, write_evicted before the restore, gradient accumulation) is put
 * again; the kept copy goes with a free, a release, or zt_storage_drop_kept. */
static void test_clean_restore(void) {
  zt_test_tmpdir_make("storage");
  int64_t live = zt_test_live_bytes();
  zt_store *s = disk_store();
  if (!s) return;
  enum { N = 2 };
  zt_tensor *t[N], *want[N];
  make_params(N, 100, t, want, 110);
  zt_storage *a = t[0]->storage;
  ZT_CHECK_OK(zt_storage_evict(a, s, ZT_DTYPE_F32));
  ZT_CHECK_OK(zt_storage_restore_async_keep(a));
  ZT_CHECK_OK(zt_storage_wait(a));
  ZT_CHECK(zt_storage_has_kept(a) && sstats(s).items == 1 && zt_test_bitwise_equal(t[0], want[0]));
  ZT_CHECK_OK(zt_storage_evict_async(a, s, ZT_DTYPE_F32)); /* clean: no put */
  ZT_CHECK(sstats(s).puts == 1 && sstats(s).puts_skipped == 1 && !zt_storage_has_kept(a));
  ZT_CHECK_OK(zt_storage_restore_async_keep(a));
  ZT_CHECK_OK(zt_storage_wait(a));
  ZT_CHECK_OK(zt_storage_evict(a, s, ZT_DTYPE_F32)); /* clean, synchronously too */
  ZT_CHECK(sstats(s).puts == 1 && sstats(s).puts_skipped == 2);
  /* another dtype: the copy is not used */
  ZT_CHECK_OK(zt_storage_restore_async_keep(a));
  ZT_CHECK_OK(zt_storage_wait(a));
  ZT_CHECK_OK(zt_storage_evict(a, s, ZT_DTYPE_I32));
  ZT_CHECK(sstats(s).puts == 2 && sstats(s).items == 1);
  /* changed in place: put again, the new values come back */
  ZT_CHECK_OK(zt_storage_restore_async_keep(a));
  ZT_CHECK_OK(zt_storage_wait(a));
  ZT_CHECK_OK(zt_tensor_set(t[0], 5, 42.0));
  ZT_CHECK_OK(zt_tensor_set(want[0], 5, 42.0));
  ZT_CHECK_OK(zt_storage_evict_async(a, s, ZT_DTYPE_F32));
  ZT_CHECK_OK(zt_store_flush(s));
  ZT_CHECK(sstats(s).puts == 3 && sstats(s).puts_skipped == 2 && sstats(s).items == 1);
  /* written in place while evicted: the restore keeps the new copy, which is then clean */
  float ones[16];
  for (int j = 0; j < 16; j++) ones[j] = 1;
  ZT_CHECK_OK(zt_storage_write_evicted(a, 0, sizeof ones, ones));
  for (int j = 0; j < 16; j++) ZT_CHECK_OK(zt_tensor_set(want[0], j, 1.0));
  ZT_CHECK_OK(zt_storage_restore_async_keep(a));
  ZT_CHECK_OK(zt_storage_wait(a));
  ZT_CHECK(zt_test_bitwise_equal(t[0], want[0]));
  ZT_CHECK_OK(zt_storage_evict(a, s, ZT_DTYPE_F32));
  ZT_CHECK(sstats(s).puts == 4 && sstats(s).puts_skipped == 3); /* write_evicted's put, none here */
  ZT_CHECK_OK(zt_storage_restore(a));
  ZT_CHECK(zt_test_bitwise_equal(t[0], want[0]) && !zt_storage_has_kept(a) && sstats(s).items == 0);
  /* a restore with keep of a write not yet done: whatever it finds, the next eviction is right */
  ZT_CHECK_OK(zt_storage_evict_async(a, s, ZT_DTYPE_F32));
  ZT_CHECK_OK(zt_storage_restore_async_keep(a));
  ZT_CHECK_OK(zt_storage_wait(a));
  ZT_CHECK_OK(zt_storage_evict(a, s, ZT_DTYPE_F32));
  ZT_CHECK_OK(zt_storage_restore(a));
  ZT_CHECK(zt_test_bitwise_equal(t[0], want[0]) && sstats(s).items == 0);
  /* kept copies go with release, drop_kept, free */
  for (int i = 0; i < N; i++) {
    ZT_CHECK_OK(zt_storage_evict(t[i]->storage, s, ZT_DTYPE_F32));
    ZT_CHECK_OK(zt_storage_restore_async_keep(t[i]->storage));
    ZT_CHECK_OK(zt_storage_wait(t[i]->storage));
  }
  ZT_CHECK(sstats(s).items == 2);
  zt_storage_drop_kept(t[1]->storage);
  ZT_CHECK(sstats(s).items == 1 && !zt_storage_has_kept(t[1]->storage));
  ZT_CHECK_OK(zt_storage_release(t[0]->storage));
  ZT_CHECK(sstats(s).items == 0);
  ZT_CHECK_OK(zt_storage_rematerialize(t[0]->storage));
  ZT_CHECK_OK(zt_storage_evict(t[1]->storage, s, ZT_DTYPE_F32));
  ZT_CHECK_OK(zt_storage_restore_async_keep(t[1]->storage));
  ZT_CHECK_OK(zt_storage_wait(t[1]->storage));
  zt_tensor_free(t[1]);
  t[1] = NULL;
  ZT_CHECK(sstats(s).items == 0);
  zt_test_free_all(t, N);
  zt_test_free_all(want, N);
  zt_store_free(s);
  ZT_CHECK(zt_test_live_bytes() == live);
  zt_test_tmpdir_remove();
}

/* A .grad restored with keep and accumulated into by backward counts as changed: its version
 * is bumped by the accumulation, so the eviction puts. */
static void test_clean_restore_grad(void) {
  zt_test_tmpdir_make("storage");
  int64_t live = zt_test_live_bytes();
  zt_store *s = disk_store();
  if (!s) return;
  int64_t shape[] = {3};
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *y = NULL, *g = NULL;
  ZT_CHECK_OK(zt_mul_scalar(w, 2, &y));
  ZT_CHECK_OK(zt_tensor_full(1, shape, ZT_DTYPE_F32, ZT_CPU, 1, &g));
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK_OK(zt_storage_evict(w->grad->storage, s, ZT_DTYPE_F32));
  ZT_CHECK_OK(zt_storage_restore_async_keep(w->grad->storage));
  ZT_CHECK_OK(zt_storage_wait(w->grad->storage));
  ZT_CHECK_OK(zt_backward(1, &y, &g, false)); /* grad += 2 */
  ZT_CHECK_OK(zt_storage_evict_async(w->grad->storage, s, ZT_DTYPE_F32));
  ZT_CHECK_OK(zt_storage_restore(w->grad->storage));
  /* written behind (or taken back before it was: a restore from RAM), never skipped */
  ZT_CHECK(sstats(s).async_puts == 1 && sstats(s).puts_skipped == 0 && zt_tensor_get(w->grad, 1) == 4);
  zt_tensor_free(y);
  zt_tensor_free(g);
  zt_tensor_free(w);
  zt_store_free(s);
  ZT_CHECK(zt_test_live_bytes() == live);
  zt_test_tmpdir_remove();
}

/* Storages freed while their writes are queued or running: the writes not started are never
 * done, the running ones waited for, nothing leaks, and the store can be freed. */
static void test_free_in_flight(void) {
  zt_test_tmpdir_make("storage");
  int64_t live = zt_test_live_bytes();
  zt_store *s = disk_store();
  if (!s) return;
  enum { N = 16 };
  zt_tensor *t[N], *want[N];
  make_params(N, 2048, t, want, 130);
  for (int i = 0; i < N; i++) ZT_CHECK_OK(zt_storage_evict_async(t[i]->storage, s, ZT_DTYPE_F32));
  zt_test_free_all(t, N);
  zt_store_stats st = sstats(s);
  ZT_CHECK(st.items == 0 && st.write_bytes_in_flight == 0); /* how many were written is timing */
  printf("  %lld of %d writes done before their storages were freed\n", (long long)st.puts, N);
  zt_test_free_all(want, N);
  zt_store_free(s);
  ZT_CHECK(zt_test_live_bytes() == live && cpu_bytes(ZT_MEM_TAG_PARAM) == 0);
  zt_test_tmpdir_remove();
}

int main(void) {
  ZT_RUN(test_refcount);
  ZT_RUN(test_wrap_external);
  ZT_RUN(test_release_rematerialize_with_views);
  ZT_RUN(test_retag);
  ZT_RUN(test_saved_tensor_release);
  ZT_RUN(test_released_grad_accumulation);
  ZT_RUN(test_evict_async_round_trip);
  ZT_RUN(test_evict_async_cap);
  ZT_RUN(test_evict_async_failure);
  ZT_RUN(test_clean_restore);
  ZT_RUN(test_clean_restore_grad);
  ZT_RUN(test_free_in_flight);
  return zt_test_finish();
}
