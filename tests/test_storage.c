/* Storage: refcounts shared by views, wrapped memory, and releasing bytes while views live
 * (reshard/offload): reads are ZT_STATUS_RELEASED with a clear message, accounting drops and
 * comes back on re-materialise, and saved tensors survive a release and same-value refill. */
#include <stdlib.h>

#include "zt_test.h"
#include "core/tensor_internal.h"

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

int main(void) {
  ZT_RUN(test_refcount);
  ZT_RUN(test_wrap_external);
  ZT_RUN(test_release_rematerialize_with_views);
  ZT_RUN(test_retag);
  ZT_RUN(test_saved_tensor_release);
  ZT_RUN(test_released_grad_accumulation);
  return zt_test_finish();
}
