/* Error reporting: every failure returns a status and leaves a message that says what was
 * wrong and what to do, with the library's file:line. One test per common mistake, each
 * checking the text; plus status names, per-thread messages and clearing. */
#include <pthread.h>
#include <stdlib.h>

#include "zt_test.h"

static void test_shape_mismatch(void) {
  zt_tensor *a = zt_test_rand(2, (int64_t[]){2, 3}, ZT_DTYPE_F32, 0, 1, 1);
  zt_tensor *b = zt_test_rand(2, (int64_t[]){4, 3}, ZT_DTYPE_F32, 0, 1, 2);
  zt_tensor *out = (zt_tensor *)0x1;
  ZT_CHECK_ERR(zt_add(a, b, &out), ZT_STATUS_SHAPE,
               "op 'add': shapes (2, 3) and (4, 3) cannot be broadcast together (dim 0: 2 vs 4)");
  ZT_CHECK(out == (zt_tensor *)0x1); /* untouched */
  ZT_CHECK(strstr(zt_last_error(), ".c:") != NULL); /* names the library's file:line */
  zt_tensor_free(a);
  zt_tensor_free(b);
}

static void test_dtype_mismatch(void) {
  zt_tensor *a = zt_test_rand(1, (int64_t[]){3}, ZT_DTYPE_F32, 0, 1, 1);
  zt_tensor *b = zt_test_rand(1, (int64_t[]){3}, ZT_DTYPE_F64, 0, 1, 2);
  zt_tensor *i = NULL, *out = NULL;
  ZT_CHECK_ERR(zt_mul(a, b, &out), ZT_STATUS_DTYPE,
               "op 'mul': mul: inputs have different dtypes (f32 and f64); cast one with zt_cast");
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){3}, ZT_DTYPE_BF16, ZT_CPU, &i));
  ZT_CHECK_ERR(zt_exp(i, &out), ZT_STATUS_DTYPE, "has dtype bf16; this op computes in f32 or f64 (cast with zt_cast)");
  ZT_CHECK(out == NULL);
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_tensor_free(i);
}

static void test_backward_twice(void) {
  zt_tensor *x = zt_test_rand_leaf(1, (int64_t[]){3}, ZT_DTYPE_F32, 0, 1, 3), *y = NULL;
  ZT_CHECK_OK(zt_tanh(x, &y));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK_ERR(zt_backward(1, &y, &g, false), ZT_STATUS_AUTOGRAD,
               "trying to backward through the graph a second time");
  ZT_CHECK(strstr(zt_last_error(), "TanhBackward") && strstr(zt_last_error(), "retain_graph=true"));
  zt_tensor_free(g);
  zt_tensor_free(y);
  zt_tensor_free(x);
}

static void test_inplace_after_save(void) {
  zt_tensor *w = zt_test_rand_leaf(1, (int64_t[]){3}, ZT_DTYPE_F32, 0, 1, 4);
  zt_tensor *a = zt_test_rand(1, (int64_t[]){3}, ZT_DTYPE_F32, 0, 1, 5), *y = NULL;
  ZT_CHECK(a->storage->version == 3); /* one bump per zt_tensor_set in zt_test_rand */
  ZT_CHECK_OK(zt_mul(w, a, &y));
  ZT_CHECK_OK(zt_tensor_fill_(a, 1));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_ERR(zt_backward(1, &y, &g, false), ZT_STATUS_AUTOGRAD, "has been modified by an in-place operation");
  ZT_CHECK(strstr(zt_last_error(), "in backward of op 'mul'") == zt_last_error()); /* prefixed with the op */
  ZT_CHECK(strstr(zt_last_error(), "is at version 4 but was saved at version 3"));
  ZT_CHECK(strstr(zt_last_error(), "clone it first"));
  zt_tensor_free(g);
  zt_tensor_free(y);
  zt_tensor_free(a);
  zt_tensor_free(w);
}

static void test_released_storage(void) {
  zt_tensor *a = zt_test_rand(1, (int64_t[]){3}, ZT_DTYPE_F32, 0, 1, 6), *out = NULL;
  ZT_CHECK_OK(zt_storage_release(a->storage));
  void *p;
  ZT_CHECK_ERR(zt_tensor_data(a, &p), ZT_STATUS_RELEASED,
               "tensor data was released (its storage was freed by a reshard or an offload); re-materialise the "
               "storage (zt_storage_rematerialize and refill) before reading it");
  ZT_CHECK_ERR(zt_add(a, a, &out), ZT_STATUS_RELEASED,
               "op 'add': input 0 has released storage (freed by a reshard or an offload); re-materialise it");
  zt_tensor_free(a);
}

static void test_unknown_dtype(void) {
  zt_tensor *t = NULL;
  ZT_CHECK_ERR(zt_tensor_empty(1, (int64_t[]){3}, (zt_dtype)99, ZT_CPU, &t), ZT_STATUS_DTYPE,
               "zt_tensor_empty: unknown dtype 99: use a zt_dtype value such as ZT_DTYPE_F32");
  zt_dtype d;
  ZT_CHECK_ERR(zt_dtype_parse("float8", &d), ZT_STATUS_DTYPE,
               "unknown dtype 'float8': use one of f32, f64, bf16, f16, i32, i64");
  ZT_CHECK(!strcmp(zt_dtype_name((zt_dtype)99), "invalid"));
}

static void test_null_output_pointer(void) {
  zt_tensor *a = zt_test_rand(1, (int64_t[]){3}, ZT_DTYPE_F32, 0, 1, 7);
  ZT_CHECK_ERR(zt_add(a, a, NULL), ZT_STATUS_INVALID_ARG, "op 'add': the output pointer is NULL");
  ZT_CHECK_ERR(zt_exp(a, NULL), ZT_STATUS_INVALID_ARG, "op 'exp': the output pointer is NULL");
  ZT_CHECK_ERR(zt_tensor_zeros(1, (int64_t[]){3}, ZT_DTYPE_F32, ZT_CPU, NULL), ZT_STATUS_INVALID_ARG,
               "zt_tensor_empty: out is NULL");
  ZT_CHECK_ERR(zt_tensor_clone_data(a, ZT_MEM_TAG_TEMP, NULL), ZT_STATUS_INVALID_ARG, "out is NULL");
  ZT_CHECK_ERR(zt_tensor_data(a, NULL), ZT_STATUS_INVALID_ARG, "out is NULL");
  zt_tensor *x = NULL;
  ZT_CHECK_ERR(zt_add(a, NULL, &x), ZT_STATUS_INVALID_ARG, "input is NULL");
  ZT_CHECK(x == NULL);
  zt_tensor_free(a);
}

static void test_status_names_and_clearing(void) {
  ZT_CHECK(!strcmp(zt_status_name(ZT_OK), "ZT_OK"));
  ZT_CHECK(!strcmp(zt_status_name(ZT_STATUS_RELEASED), "ZT_STATUS_RELEASED"));
  ZT_CHECK(!strcmp(zt_status_name(ZT_STATUS_INTERNAL), "ZT_STATUS_INTERNAL"));
  ZT_CHECK(!strcmp(zt_status_name(ZT_STATUS_COUNT), "ZT_STATUS_UNKNOWN"));
  ZT_CHECK(!strcmp(zt_status_name((zt_status)-1), "ZT_STATUS_UNKNOWN"));
  for (int s = 0; s < ZT_STATUS_COUNT; s++) ZT_CHECK(!strncmp(zt_status_name((zt_status)s), "ZT_", 3));
  zt_dtype d;
  ZT_CHECK(zt_dtype_parse("nope", &d) != ZT_OK);
  ZT_CHECK(zt_last_error()[0] != '\0');
  zt_clear_error();
  ZT_CHECK(zt_last_error()[0] == '\0');
  /* a successful call does not touch the message */
  ZT_CHECK(zt_dtype_parse("nope", &d) != ZT_OK);
  ZT_CHECK_OK(zt_dtype_parse("f32", &d));
  ZT_CHECK(strstr(zt_last_error(), "nope") != NULL);
  /* very long messages are truncated safely */
  char name[4000];
  memset(name, 'q', sizeof name - 1);
  name[sizeof name - 1] = 0;
  ZT_CHECK_ERR(zt_dtype_parse(name, &d), ZT_STATUS_DTYPE, "unknown dtype 'qqqq");
  ZT_CHECK(strlen(zt_last_error()) < 2048);
}

static void *thread_error(void *arg) {
  zt_dtype d;
  *(int *)arg = zt_last_error()[0] == '\0'; /* a fresh thread has no message */
  ZT_CHECK(zt_dtype_parse("thread-local", &d) != ZT_OK);
  return NULL;
}

static void test_messages_per_thread(void) {
  zt_dtype d;
  ZT_CHECK(zt_dtype_parse("main-thread", &d) != ZT_OK);
  int fresh = 0;
  pthread_t th;
  ZT_CHECK(pthread_create(&th, NULL, thread_error, &fresh) == 0);
  pthread_join(th, NULL);
  ZT_CHECK(fresh == 1);
  ZT_CHECK(strstr(zt_last_error(), "main-thread") && !strstr(zt_last_error(), "thread-local"));
}

/* A failing op backward names the op it happened in. */
static zt_status bad_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)ud;
  return zt_tensor_zeros(1, (int64_t[]){2}, ZT_DTYPE_F32, ZT_CPU, rep);
}

static void test_hook_shape_message(void) {
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){2, 2}, ZT_DTYPE_F32, 0, 1, 8), *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_OK(zt_tensor_register_hook(y, bad_hook, NULL, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_ERR(zt_backward(1, &y, &g, false), ZT_STATUS_SHAPE,
               "a tensor grad hook replaced a grad of shape (2, 2) (f32) with one of shape (2,) (f32)");
  zt_tensor_free(g);
  zt_tensor_free(y);
  zt_tensor_free(x);
}

int main(void) {
  ZT_RUN(test_shape_mismatch);
  ZT_RUN(test_dtype_mismatch);
  ZT_RUN(test_backward_twice);
  ZT_RUN(test_inplace_after_save);
  ZT_RUN(test_released_storage);
  ZT_RUN(test_unknown_dtype);
  ZT_RUN(test_null_output_pointer);
  ZT_RUN(test_status_names_and_clearing);
  ZT_RUN(test_messages_per_thread);
  ZT_RUN(test_hook_shape_message);
  return zt_test_finish();
}
