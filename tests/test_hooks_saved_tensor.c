/* Saved-tensor hooks: a per-thread stack; the top pack() gets every saved tensor and returns
 * any object (an index into a user array here); unpack() runs in backward, release() when the
 * record is freed. Stash/unstash, popping an empty stack, and threads being independent. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

/* A "store": pack copies the tensor into slot i (as an offload would) and returns i. */
#define STORE_CAP 64
typedef struct store {
  zt_tensor *slot[STORE_CAP];
  int n;
  int packs, unpacks, releases;
  int64_t packed_numel[STORE_CAP];
  bool fail_pack;
} store;

static zt_status st_pack(const zt_tensor *t, void **packed, void *ud) {
  store *s = ud;
  if (s->fail_pack) return ZT_ERR(ZT_STATUS_IO, "store is full");
  if (s->n >= STORE_CAP) return ZT_ERR(ZT_STATUS_OOM, "test store full");
  s->packs++;
  s->packed_numel[s->n] = zt_tensor_numel(t);
  ZT_TRY(zt_tensor_clone_data(t, ZT_MEM_TAG_COMM, &s->slot[s->n]));
  *packed = (void *)(intptr_t)s->n++;
  return ZT_OK;
}
static zt_status st_unpack(void *packed, zt_tensor **out, void *ud) {
  store *s = ud;
  s->unpacks++;
  int i = (int)(intptr_t)packed;
  if (!s->slot[i]) return ZT_ERR(ZT_STATUS_STATE, "slot %d already released", i);
  return zt_tensor_alias(s->slot[i], out);
}
static void st_release(void *packed, void *ud) {
  store *s = ud;
  s->releases++;
  int i = (int)(intptr_t)packed;
  zt_tensor_free(s->slot[i]);
  s->slot[i] = NULL;
}
static zt_saved_tensor_hooks store_hooks(store *s) {
  return (zt_saved_tensor_hooks){st_pack, st_unpack, st_release, s};
}

static void test_pack_unpack_release(void) {
  int64_t shape[] = {4};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, 0.5, 1.5, 1);
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, 0.5, 1.5, 2);
  zt_tensor *c = zt_test_rand(1, shape, ZT_DTYPE_F64, 0.5, 1.5, 3);
  store s = {0};
  zt_saved_tensor_hooks h = store_hooks(&s);
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 0);
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h));
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 1);
  zt_tensor *a = NULL, *e = NULL, *l = NULL, *y = NULL;
  ZT_CHECK_OK(zt_mul(x, w, &a));   /* saves x, w */
  ZT_CHECK_OK(zt_exp(a, &e));      /* saves its output */
  ZT_CHECK_OK(zt_log(e, &l));      /* saves its input */
  ZT_CHECK_OK(zt_add(l, c, &y));   /* saves nothing */
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 0);
  ZT_CHECK(s.packs == 4 && s.unpacks == 0 && s.releases == 0);
  for (int i = 0; i < 4; i++) ZT_CHECK(s.packed_numel[i] == 4);
  /* the originals can change: the store holds copies, no version error */
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(s.unpacks == 4 && s.releases == 0);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false)); /* each use unpacks again */
  ZT_CHECK(s.unpacks == 8 && s.releases == 4);
  /* grads are right: d/dx log(exp(x w)) = w, twice */
  for (int64_t i = 0; i < 4; i++) {
    ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), 2 * zt_tensor_get(w, i), 1e-12);
    ZT_CHECK_NEAR(zt_tensor_get(w->grad, i), 2 * zt_tensor_get(x, i), 1e-12);
  }
  ZT_CHECK_ERR(zt_backward(1, &y, &g, false), ZT_STATUS_AUTOGRAD, "a second time");
  ZT_CHECK(s.releases == 4);
  zt_tensor *all[] = {x, w, c, a, e, l, y, g};
  zt_test_free_all(all, 8);
}

static void test_release_when_graph_freed(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 4), *a = NULL, *b = NULL;
  store s = {0};
  zt_saved_tensor_hooks h = store_hooks(&s);
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h));
  ZT_CHECK_OK(zt_mul(x, x, &a));
  ZT_CHECK_OK(zt_tanh(a, &b));
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK(s.packs == 3);
  zt_tensor_free(a);
  ZT_CHECK(s.releases == 0); /* b still owns the graph */
  zt_tensor_free(b);
  ZT_CHECK(s.releases == 3 && s.unpacks == 0);
  /* no grad needed: nothing is saved, so nothing is packed */
  zt_tensor *c = NULL, *d = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F32, ZT_CPU, &c));
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h));
  ZT_CHECK_OK(zt_mul(c, c, &d));
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK(s.packs == 3);
  zt_tensor *all[] = {x, c, d};
  zt_test_free_all(all, 3);
}

/* The top of the stack is used; popping restores the one below. */
static void test_stack_nesting(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 5), *a = NULL, *b = NULL, *c = NULL;
  store outer = {0}, inner = {0};
  zt_saved_tensor_hooks ho = store_hooks(&outer), hi = store_hooks(&inner);
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&ho));
  ZT_CHECK_OK(zt_exp(x, &a));
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&hi));
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 2);
  ZT_CHECK_OK(zt_exp(a, &b));
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK_OK(zt_exp(b, &c));
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK(outer.packs == 2 && inner.packs == 1);
  zt_tensor *g = zt_test_ones_like(c);
  ZT_CHECK_OK(zt_backward(1, &c, &g, false));
  ZT_CHECK(outer.unpacks == 2 && inner.unpacks == 1 && outer.releases == 2 && inner.releases == 1);
  double e1 = exp(zt_tensor_get(x, 0)), e2 = exp(e1), e3 = exp(e2);
  ZT_CHECK_NEAR(zt_tensor_get(x->grad, 0), e3 * e2 * e1, 1e-9 * e3 * e2 * e1);
  zt_tensor *all[] = {x, a, b, c, g};
  zt_test_free_all(all, 5);
}

static void test_stash_unstash(void) {
  int64_t shape[] = {2};
  store s1 = {0}, s2 = {0}, s3 = {0};
  zt_saved_tensor_hooks h1 = store_hooks(&s1), h2 = store_hooks(&s2), h3 = store_hooks(&s3);
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h1));
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h2));
  zt_saved_hooks_stash stash;
  zt_saved_tensor_hooks_stash(&stash);
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 0 && stash.depth == 2);
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 6), *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt_exp(x, &a)); /* saved plainly: the stash is out of the way */
  ZT_CHECK(s1.packs == 0 && s2.packs == 0);
  /* pushes while stashed are independent (and may stay when unstashing: they go) */
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h3));
  ZT_CHECK_OK(zt_exp(a, &b));
  ZT_CHECK(s3.packs == 1);
  zt_saved_tensor_hooks_unstash(&stash);
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 2 && stash.depth == 0 && stash.entries == NULL);
  zt_tensor *c = NULL;
  ZT_CHECK_OK(zt_exp(b, &c));
  ZT_CHECK(s2.packs == 1 && s1.packs == 0); /* the top is h2 again */
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  /* an empty stash round trip */
  zt_saved_tensor_hooks_stash(&stash);
  ZT_CHECK(stash.depth == 0 && zt_saved_tensor_hooks_depth() == 0);
  zt_saved_tensor_hooks_unstash(&stash);
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 0);
  /* pushing after an unstash grows the restored stack correctly */
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h1));
  zt_saved_tensor_hooks_stash(&stash);
  zt_saved_tensor_hooks_unstash(&stash);
  for (int i = 0; i < 20; i++) ZT_CHECK_OK(zt_saved_tensor_hooks_push(i % 2 ? &h1 : &h2));
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 21);
  for (int i = 0; i < 21; i++) ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  zt_tensor *g = zt_test_ones_like(c);
  ZT_CHECK_OK(zt_backward(1, &c, &g, false));
  ZT_CHECK(s2.unpacks == 1 && s3.unpacks == 1 && s2.releases == 1 && s3.releases == 1);
  zt_tensor *all[] = {x, a, b, c, g};
  zt_test_free_all(all, 5);
}

static zt_status wrong_unpack(void *packed, zt_tensor **out, void *ud) {
  (void)packed, (void)ud;
  return zt_tensor_zeros(1, (int64_t[]){9}, ZT_DTYPE_F64, ZT_CPU, out);
}
static zt_status null_unpack(void *packed, zt_tensor **out, void *ud) {
  (void)packed, (void)ud;
  *out = NULL;
  return ZT_OK;
}
static zt_status nothing_pack(const zt_tensor *t, void **packed, void *ud) {
  (void)t, (void)ud;
  *packed = NULL;
  return ZT_OK;
}

static void test_errors(void) {
  ZT_CHECK_ERR(zt_saved_tensor_hooks_pop(), ZT_STATUS_STATE,
               "zt_saved_tensor_hooks_pop: the saved-tensor hooks stack is empty");
  zt_saved_tensor_hooks bad = {st_pack, NULL, NULL, NULL};
  ZT_CHECK_ERR(zt_saved_tensor_hooks_push(&bad), ZT_STATUS_INVALID_ARG, "need both pack and unpack");
  ZT_CHECK_ERR(zt_saved_tensor_hooks_push(NULL), ZT_STATUS_INVALID_ARG, "need both pack and unpack");
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 0);
  /* a failing pack fails the op, cleanly */
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 7), *y = (zt_tensor *)0x1;
  store s = {.fail_pack = true};
  zt_saved_tensor_hooks h = store_hooks(&s);
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h));
  ZT_CHECK_ERR(zt_exp(x, &y), ZT_STATUS_IO, "store is full");
  ZT_CHECK(y == (zt_tensor *)0x1);
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  /* unpack must restore what pack was given */
  zt_saved_tensor_hooks hw = {nothing_pack, wrong_unpack, NULL, NULL};
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&hw));
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_AUTOGRAD,
               "the unpack hook returned a tensor of shape (9,) (f64) for saved tensor 0, which was saved with "
               "shape (2,) (f64)");
  zt_tensor_free(y);
  zt_saved_tensor_hooks hn = {nothing_pack, null_unpack, NULL, NULL};
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&hn));
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_AUTOGRAD, "the unpack hook returned no tensor");
  ZT_CHECK(x->grad == NULL);
  zt_tensor *all[] = {x, y, g};
  zt_test_free_all(all, 3);
}

/* ------------------------------------------------ threads */
typedef struct thread_arg {
  int depth_seen;
  int own_packs, foreign_packs_after;
  store *foreign;
  bool ok;
} thread_arg;

static void *thread_body(void *p) {
  thread_arg *a = p;
  a->depth_seen = zt_saved_tensor_hooks_depth(); /* the main thread's push is not visible */
  int before = a->foreign->packs;
  store mine = {0};
  zt_saved_tensor_hooks h = store_hooks(&mine);
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 8), *y = NULL, *z = NULL;
  bool ok = zt_exp(x, &y) == ZT_OK; /* no hooks on this thread: plain save */
  ok = ok && zt_saved_tensor_hooks_push(&h) == ZT_OK;
  ok = ok && zt_tanh(y, &z) == ZT_OK;
  ok = ok && zt_saved_tensor_hooks_pop() == ZT_OK;
  zt_tensor *g = NULL;
  ok = ok && zt_tensor_full(1, shape, ZT_DTYPE_F64, ZT_CPU, 1, &g) == ZT_OK;
  ok = ok && zt_backward(1, &z, &g, false) == ZT_OK;
  a->own_packs = mine.packs + 10 * mine.unpacks + 100 * mine.releases;
  a->foreign_packs_after = a->foreign->packs - before;
  zt_tensor_free(g);
  zt_tensor_free(z);
  zt_tensor_free(y);
  zt_tensor_free(x);
  a->ok = ok;
  return NULL;
}

static void test_threads_independent(void) {
  store main_store = {0};
  zt_saved_tensor_hooks h = store_hooks(&main_store);
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h));
  thread_arg a = {.foreign = &main_store};
  pthread_t th;
  ZT_CHECK(pthread_create(&th, NULL, thread_body, &a) == 0);
  pthread_join(th, NULL);
  ZT_CHECK(a.ok && a.depth_seen == 0);
  ZT_CHECK(a.own_packs == 111);           /* one pack, one unpack, one release */
  ZT_CHECK(a.foreign_packs_after == 0);   /* the main thread's hooks were never called */
  ZT_CHECK(zt_saved_tensor_hooks_depth() == 1);
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK(main_store.packs == 0);
}

/* Custom functions go through the hooks too, for every zt_node_save. */
static zt_status save2_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)n_in, (void)n_out, (void)ud;
  int i0 = -1, i1 = -1;
  ZT_TRY(zt_node_save(ctx, in[0], &i0));
  ZT_TRY(zt_node_save(ctx, in[1], &i1));
  if (i0 != 0 || i1 != 1) return ZT_ERR(ZT_STATUS_INTERNAL, "save indices %d %d", i0, i1);
  return zt_mul(in[0], in[1], &out[0]);
}
static zt_status save2_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                                zt_tensor **gin) {
  (void)n_out, (void)n_in;
  zt_tensor *a = NULL, *b = NULL;
  if (zt_node_n_saved(ctx) != 2) return ZT_ERR(ZT_STATUS_INTERNAL, "expected 2 saved");
  ZT_TRY(zt_node_saved(ctx, 0, &a));
  ZT_TRY(zt_node_saved(ctx, 1, &b));
  if (needs[0]) ZT_TRY(zt_mul(gout[0], b, &gin[0]));
  if (needs[1]) ZT_TRY(zt_mul(gout[0], a, &gin[1]));
  return ZT_OK;
}
static const zt_function save2_fn = {"Save2", save2_forward, save2_backward};

static void test_custom_function_saves(void) {
  int64_t shape[] = {3};
  zt_tensor *a = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 9);
  zt_tensor *b = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 10), *y = NULL;
  store s = {0};
  zt_saved_tensor_hooks h = store_hooks(&s);
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h));
  ZT_CHECK_OK(zt_function_apply(&save2_fn, 2, (zt_tensor *[]){a, b}, 1, &y, NULL));
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  ZT_CHECK(s.packs == 2); /* the inner zt_mul ran without grad: it saved nothing */
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(s.unpacks == 2 && s.releases == 2);
  ZT_CHECK(zt_test_max_abs_diff(a->grad, b) == 0 && zt_test_max_abs_diff(b->grad, a) == 0);
  zt_tensor *all[] = {a, b, y, g};
  zt_test_free_all(all, 4);
}

int main(void) {
  ZT_RUN(test_pack_unpack_release);
  ZT_RUN(test_release_when_graph_freed);
  ZT_RUN(test_stack_nesting);
  ZT_RUN(test_stash_unstash);
  ZT_RUN(test_errors);
  ZT_RUN(test_threads_independent);
  ZT_RUN(test_custom_function_saves);
  return zt_test_finish();
}
