/* Smoke test of the op path: elementwise ops, broadcast, backward, gradcheck. */
#include "zt_test.h"

static zt_status f_mul_add(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *t = NULL;
  ZT_TRY(zt_mul(in[0], in[1], &t));
  zt_status s = zt_add(t, in[0], out);
  zt_tensor_free(t);
  return s;
}

static void test_mul_add_gradcheck(void) {
  int64_t sa[] = {3, 4}, sb[] = {4};
  zt_tensor *a = zt_test_rand_leaf(2, sa, ZT_DTYPE_F64, -1, 1, 1);
  zt_tensor *b = zt_test_rand_leaf(1, sb, ZT_DTYPE_F64, -1, 1, 2);
  ZT_GRADCHECK(f_mul_add, 2, ((zt_tensor *[]){a, b}), NULL, NULL);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

static zt_status f_unary_chain(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *t1 = NULL, *t2 = NULL, *t3 = NULL;
  zt_status s = zt_gelu(in[0], &t1);
  if (!s) s = zt_tanh(t1, &t2);
  if (!s) s = zt_exp(t2, &t3);
  if (!s) s = zt_div(t3, in[1], out);
  zt_tensor_free(t1);
  zt_tensor_free(t2);
  zt_tensor_free(t3);
  return s;
}

static void test_unary_chain_gradcheck(void) {
  int64_t sa[] = {2, 3, 5};
  zt_tensor *a = zt_test_rand_leaf(3, sa, ZT_DTYPE_F64, -2, 2, 3);
  zt_tensor *b = zt_test_rand_leaf(3, sa, ZT_DTYPE_F64, 0.5, 2, 4);
  ZT_GRADCHECK(f_unary_chain, 2, ((zt_tensor *[]){a, b}), NULL, NULL);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

int main(void) {
  ZT_RUN(test_mul_add_gradcheck);
  ZT_RUN(test_unary_chain_gradcheck);
  return zt_test_finish();
}
