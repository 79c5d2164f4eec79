/* Custom functions: ctx-saved tensors, non-tensor data and its free fn, NULL inputs, several
 * outputs (unused ones get zeros), needs_input_grad, errors for bad forwards and wrong-shaped
 * grads, and a reentrant backward (checkpointing); grads checked by finite differences. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

/* ------------------------------------------------ y = scale * x * w (+ x if in[2] given),
 * scale passed as user_data and kept on the ctx as non-tensor data */
static int g_scale_frees = 0;
static void free_scale(void *p) {
  g_scale_frees++;
  free(p);
}

static zt_status smul_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)n_in, (void)n_out;
  double *scale = malloc(sizeof *scale);
  *scale = *(const double *)ud;
  zt_fn_ctx_set_data(ctx, scale, free_scale);
  ZT_TRY(zt_node_save(ctx, in[0], NULL));
  ZT_TRY(zt_node_save(ctx, in[1], NULL));
  zt_tensor *p = NULL;
  ZT_TRY(zt_mul(in[0], in[1], &p));
  zt_status s = zt_mul_scalar(p, *scale, &out[0]);
  zt_tensor_free(p);
  if (s || n_in < 3 || !in[2]) return s;
  zt_tensor *q = out[0];
  s = zt_add(q, in[2], &out[0]);
  zt_tensor_free(q);
  return s;
}

static zt_status smul_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                               zt_tensor **gin) {
  (void)n_out;
  double scale = *(double *)zt_fn_ctx_data(ctx);
  zt_tensor *x = NULL, *w = NULL, *t = NULL;
  ZT_TRY(zt_node_saved(ctx, 0, &x));
  ZT_TRY(zt_node_saved(ctx, 1, &w));
  ZT_TRY(zt_mul_scalar(gout[0], scale, &t));
  zt_status s = ZT_OK;
  if (needs[0]) s = zt_mul(t, w, &gin[0]);
  if (!s && needs[1]) s = zt_mul(t, x, &gin[1]);
  if (!s && n_in > 2 && needs[2]) s = zt_tensor_clone_data(gout[0], ZT_MEM_TAG_TEMP, &gin[2]);
  zt_tensor_free(t);
  return s;
}
static const zt_function smul_fn = {"ScaledMul", smul_forward, smul_backward};

static zt_status f_smul(zt_tensor *const *in, zt_tensor **out, void *ud) {
  return zt_function_apply(&smul_fn, 3, in, 1, out, ud);
}

static void test_forward_backward_gradcheck(void) {
  int64_t shape[] = {3, 4};
  zt_tensor *x = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *b = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 3);
  double scale = 2.5;
  g_scale_frees = 0;
  ZT_GRADCHECK(f_smul, 3, ((zt_tensor *[]){x, w, b}), &scale, NULL);
  /* only some inputs require grad */
  ZT_CHECK_OK(zt_tensor_set_requires_grad(w, false));
  ZT_GRADCHECK(f_smul, 3, ((zt_tensor *[]){x, w, NULL}), &scale, NULL);
  ZT_CHECK(g_scale_frees > 0);
  /* names and structure */
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_function_apply(&smul_fn, 3, (zt_tensor *[]){x, w, b}, 1, &y, &scale));
  ZT_CHECK(!strcmp(zt_node_name(y->grad_fn), "ScaledMul") && zt_node_n_next(y->grad_fn) == 3);
  ZT_CHECK(zt_node_next(y->grad_fn, 1, NULL) == NULL); /* w needs no grad */
  ZT_CHECK(zt_node_n_saved(y->grad_fn) == 2);
  ZT_CHECK(y->requires_grad && !zt_tensor_is_leaf(y) && y->output_nr == 0);
  zt_tensor_free(y);
  zt_test_free_all((zt_tensor *[]){x, w, b}, 3);
}

static void test_ctx_data_lifetime(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 4), *w = zt_test_rand(1, shape, ZT_DTYPE_F32, -1, 1, 5);
  double scale = 3;
  g_scale_frees = 0;
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_function_apply(&smul_fn, 2, (zt_tensor *[]){x, w}, 1, &y, &scale));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(g_scale_frees == 0); /* data lives with the node, not with backward */
  ZT_CHECK_NEAR(zt_tensor_get(x->grad, 1), 3 * zt_tensor_get(w, 1), 1e-6);
  zt_tensor_free(y);
  ZT_CHECK(g_scale_frees == 1);
  /* without grad the node is freed right after forward */
  zt_tensor_free(x->grad);
  x->grad = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_function_apply(&smul_fn, 2, (zt_tensor *[]){x, w}, 1, &y, &scale));
  zt_set_grad_enabled(prev);
  ZT_CHECK(g_scale_frees == 2 && !y->grad_fn && !y->requires_grad);
  zt_tensor_free(y);
  zt_test_free_all((zt_tensor *[]){x, w, g}, 3);
}

/* set_data twice frees the first value */
static int g_frees_a = 0, g_frees_b = 0;
static void free_a(void *p) { (void)p, g_frees_a++; }
static void free_b(void *p) { (void)p, g_frees_b++; }
static zt_status data_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)n_in, (void)n_out, (void)ud;
  zt_fn_ctx_set_data(ctx, &g_frees_a, free_a);
  if (zt_fn_ctx_data(ctx) != &g_frees_a) return ZT_ERR(ZT_STATUS_INTERNAL, "data not kept");
  zt_fn_ctx_set_data(ctx, &g_frees_b, free_b);
  return zt_tensor_clone_data(in[0], ZT_MEM_TAG_ACTIVATION, &out[0]);
}
static zt_status pass_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                               zt_tensor **gin) {
  (void)ctx, (void)n_out;
  for (int i = 0; i < n_in; i++)
    if (needs[i]) ZT_TRY(zt_tensor_clone_data(gout[0], ZT_MEM_TAG_TEMP, &gin[i]));
  return ZT_OK;
}
static const zt_function data_fn = {"Data", data_forward, pass_backward};

static void test_set_data_replaces(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 6), *y = NULL;
  g_frees_a = g_frees_b = 0;
  ZT_CHECK_OK(zt_function_apply(&data_fn, 1, &x, 1, &y, NULL));
  ZT_CHECK(g_frees_a == 1 && g_frees_b == 0);
  zt_tensor_free(y);
  ZT_CHECK(g_frees_a == 1 && g_frees_b == 1);
  zt_tensor_free(x);
}

/* ------------------------------------------------ NULL inputs and several outputs */
typedef struct multi_rec {
  int backwards;
  bool needs_fwd[3], needs_bwd[3];
  double gout1_sum;
  int gout1_ndim;
  int64_t gout1_shape0;
} multi_rec;

/* in: (x, NULL, w) -> out0 = x * w, out1 = x + w (shape of x) */
static zt_status multi_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)n_out;
  multi_rec *r = ud;
  zt_fn_ctx_set_data(ctx, r, NULL);
  for (int i = 0; i < n_in; i++) r->needs_fwd[i] = zt_fn_ctx_needs_input_grad(ctx, i);
  if (in[1] != NULL) return ZT_ERR(ZT_STATUS_INVALID_ARG, "slot 1 is a non-tensor slot");
  ZT_TRY(zt_node_save(ctx, in[0], NULL));
  ZT_TRY(zt_node_save(ctx, in[2], NULL));
  ZT_TRY(zt_mul(in[0], in[2], &out[0]));
  return zt_add(in[0], in[2], &out[1]);
}
static zt_status multi_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                                zt_tensor **gin) {
  (void)n_out;
  multi_rec *r = zt_fn_ctx_data(ctx);
  r->backwards++;
  for (int i = 0; i < n_in; i++) r->needs_bwd[i] = needs[i];
  r->gout1_sum = 0;
  for (int64_t i = 0; i < zt_tensor_numel(gout[1]); i++) r->gout1_sum += fabs(zt_tensor_get(gout[1], i));
  r->gout1_ndim = gout[1]->ndim;
  r->gout1_shape0 = gout[1]->shape[0];
  if (needs[1]) return ZT_ERR(ZT_STATUS_INTERNAL, "a NULL input cannot need a grad");
  zt_tensor *x = NULL, *w = NULL, *t = NULL;
  ZT_TRY(zt_node_saved(ctx, 0, &x));
  ZT_TRY(zt_node_saved(ctx, 1, &w));
  if (needs[0]) {
    ZT_TRY(zt_mul(gout[0], w, &t));
    zt_status s = zt_add(t, gout[1], &gin[0]);
    zt_tensor_free(t);
    ZT_TRY(s);
  }
  if (needs[2]) {
    ZT_TRY(zt_mul(gout[0], x, &t));
    zt_status s = zt_add(t, gout[1], &gin[2]);
    zt_tensor_free(t);
    ZT_TRY(s);
  }
  return ZT_OK;
}
static const zt_function multi_fn = {"Multi", multi_forward, multi_backward};

static zt_status f_multi_out0(zt_tensor *const *in, zt_tensor **out, void *ud) {
  zt_tensor *o[2] = {0};
  ZT_TRY(zt_function_apply(&multi_fn, 3, (zt_tensor *[]){in[0], NULL, in[1]}, 2, o, ud));
  zt_tensor_free(o[1]);
  *out = o[0];
  return ZT_OK;
}
static zt_status f_multi_both(zt_tensor *const *in, zt_tensor **out, void *ud) {
  zt_tensor *o[2] = {0};
  ZT_TRY(zt_function_apply(&multi_fn, 3, (zt_tensor *[]){in[0], NULL, in[1]}, 2, o, ud));
  zt_status s = zt_mul(o[0], o[1], out);
  zt_tensor_free(o[0]);
  zt_tensor_free(o[1]);
  return s;
}

static void test_null_inputs_and_multiple_outputs(void) {
  int64_t shape[] = {2, 3};
  zt_tensor *x = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 7);
  zt_tensor *w = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 8);
  multi_rec r = {0};
  zt_tensor *o[2] = {0};
  ZT_CHECK_OK(zt_function_apply(&multi_fn, 3, (zt_tensor *[]){x, NULL, w}, 2, o, &r));
  ZT_CHECK(r.needs_fwd[0] && !r.needs_fwd[1] && r.needs_fwd[2]);
  ZT_CHECK(o[0]->grad_fn == o[1]->grad_fn && o[1]->output_nr == 1);
  ZT_CHECK(zt_node_next(o[0]->grad_fn, 1, NULL) == NULL);
  /* out1 unused: backward gets zeros shaped like it */
  zt_tensor *g = zt_test_ones_like(o[0]);
  ZT_CHECK_OK(zt_backward(1, &o[0], &g, true));
  ZT_CHECK(r.backwards == 1 && r.gout1_sum == 0 && r.gout1_ndim == 2 && r.gout1_shape0 == 2);
  ZT_CHECK(r.needs_bwd[0] && !r.needs_bwd[1] && r.needs_bwd[2]);
  ZT_CHECK(zt_test_max_abs_diff(x->grad, w) == 0);
  /* needs_input_grad in backward follows zt_grad's request */
  zt_tensor *gw = NULL;
  ZT_CHECK_OK(zt_grad(1, &o[1], &g, 1, &w, true, &gw));
  ZT_CHECK(r.backwards == 2 && !r.needs_bwd[0] && r.needs_bwd[2] && r.gout1_sum == 6);
  ZT_CHECK(zt_tensor_get(gw, 0) == 1);
  zt_tensor_free(gw);
  zt_tensor_free(x->grad);
  x->grad = NULL;
  zt_tensor_free(w->grad);
  w->grad = NULL;
  /* finite differences: one output used, then both */
  ZT_GRADCHECK(f_multi_out0, 2, ((zt_tensor *[]){x, w}), &r, NULL);
  ZT_GRADCHECK(f_multi_both, 2, ((zt_tensor *[]){x, w}), &r, NULL);
  zt_test_free_all((zt_tensor *[]){x, w, o[0], o[1], g}, 5);
}

/* Integer outputs are returned but not differentiable. */
static zt_status int_out_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)ctx, (void)n_in, (void)n_out, (void)ud;
  ZT_TRY(zt_exp(in[0], &out[0]));
  return zt_tensor_zeros(in[0]->ndim, in[0]->shape, ZT_DTYPE_I64, ZT_CPU, &out[1]);
}
static zt_status int_out_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                                  zt_tensor **gin) {
  (void)ctx, (void)n_out, (void)n_in;
  if (gout[1]->dtype != ZT_DTYPE_I64) return ZT_ERR(ZT_STATUS_INTERNAL, "unexpected dtype");
  if (needs[0]) return zt_tensor_clone_data(gout[0], ZT_MEM_TAG_TEMP, &gin[0]);
  return ZT_OK;
}
static const zt_function int_out_fn = {NULL, int_out_forward, int_out_backward};

static void test_integer_output(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 9), *o[2] = {0};
  ZT_CHECK_OK(zt_function_apply(&int_out_fn, 1, &x, 2, o, NULL));
  ZT_CHECK(o[0]->requires_grad && !o[1]->requires_grad && !o[1]->grad_fn);
  ZT_CHECK(!strcmp(zt_node_name(o[0]->grad_fn), "CustomFunction")); /* no name given */
  zt_tensor *g = zt_test_ones_like(o[0]);
  ZT_CHECK_OK(zt_backward(1, &o[0], &g, false));
  ZT_CHECK(zt_tensor_get(x->grad, 2) == 1);
  zt_test_free_all((zt_tensor *[]){x, o[0], o[1], g}, 4);
}

/* ------------------------------------------------ bad forwards and backwards */
static zt_status identity_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out,
                                  void *ud) {
  (void)ctx, (void)n_in, (void)n_out, (void)ud;
  out[0] = in[0];
  return ZT_OK;
}
static const zt_function identity_fn = {"Identity", identity_forward, pass_backward};

static zt_status missing_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out,
                                 void *ud) {
  (void)ctx, (void)n_in, (void)n_out, (void)ud;
  return zt_exp(in[0], &out[0]); /* out[1] never set */
}
static const zt_function missing_fn = {"Missing", missing_forward, pass_backward};

static zt_status dup_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)ctx, (void)n_in, (void)n_out, (void)ud;
  ZT_TRY(zt_exp(in[0], &out[0]));
  out[1] = out[0];
  return ZT_OK;
}
static const zt_function dup_fn = {"Dup", dup_forward, pass_backward};

static zt_status failing_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out,
                                 void *ud) {
  (void)ctx, (void)n_in, (void)n_out, (void)ud;
  ZT_TRY(zt_exp(in[0], &out[0])); /* made, then the forward fails: freed by apply */
  return ZT_ERR(ZT_STATUS_SHAPE, "forward refuses this shape");
}
static const zt_function failing_fn = {"Failing", failing_forward, pass_backward};

static zt_status history_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out,
                                 void *ud) {
  (void)ctx, (void)n_in, (void)in, (void)n_out;
  out[0] = ud; /* a tensor with autograd history, made elsewhere */
  return ZT_OK;
}
static const zt_function history_fn = {"History", history_forward, pass_backward};

static zt_status wrong_grad_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                                     zt_tensor **gin) {
  (void)ctx, (void)n_out, (void)gout, (void)n_in;
  if (needs[0]) return zt_tensor_zeros(1, (int64_t[]){3}, ZT_DTYPE_F64, ZT_CPU, &gin[0]);
  return ZT_OK;
}
static zt_status wrong_dtype_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                                      zt_tensor **gin) {
  (void)ctx, (void)n_out, (void)n_in;
  if (needs[0]) return zt_tensor_zeros(gout[0]->ndim, gout[0]->shape, ZT_DTYPE_F32, ZT_CPU, &gin[0]);
  return ZT_OK;
}
static zt_status clone_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)ctx, (void)n_in, (void)n_out, (void)ud;
  return zt_tensor_clone_data(in[0], ZT_MEM_TAG_ACTIVATION, &out[0]);
}
static const zt_function wrong_grad_fn = {"WrongGrad", clone_forward, wrong_grad_backward};
static const zt_function wrong_dtype_fn = {"WrongDtype", clone_forward, wrong_dtype_backward};

static void test_errors(void) {
  int64_t shape[] = {2, 3};
  zt_tensor *x = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 10), *o[2] = {(zt_tensor *)0x1, (zt_tensor *)0x1};
  ZT_CHECK_ERR(zt_function_apply(&identity_fn, 1, &x, 1, o, NULL), ZT_STATUS_INVALID_ARG,
               "custom function Identity: forward returned input 0 itself as output 0; return a new tensor");
  ZT_CHECK(o[0] == NULL && x->grad_fn == NULL && x->storage->refcount == 1);
  ZT_CHECK_ERR(zt_function_apply(&missing_fn, 1, &x, 2, o, NULL), ZT_STATUS_INVALID_ARG,
               "custom function Missing: forward did not set output 1");
  ZT_CHECK(o[0] == NULL && o[1] == NULL);
  ZT_CHECK_ERR(zt_function_apply(&dup_fn, 1, &x, 2, o, NULL), ZT_STATUS_INVALID_ARG,
               "forward returned one tensor as outputs 0 and 1");
  ZT_CHECK_ERR(zt_function_apply(&failing_fn, 1, &x, 1, o, NULL), ZT_STATUS_SHAPE, "forward refuses this shape");
  zt_tensor *h = NULL;
  ZT_CHECK_OK(zt_exp(x, &h));
  ZT_CHECK_ERR(zt_function_apply(&history_fn, 1, &x, 1, o, h), ZT_STATUS_INVALID_ARG,
               "output 0 already has autograd history");
  ZT_CHECK(h->grad_fn != NULL); /* the foreign tensor is left alone */
  zt_tensor_free(h);
  ZT_CHECK_ERR(zt_function_apply(NULL, 1, &x, 1, o, NULL), ZT_STATUS_INVALID_ARG, "needs forward and backward");
  ZT_CHECK_ERR(zt_function_apply(&missing_fn, 1, &x, 0, o, NULL), ZT_STATUS_INVALID_ARG, "bad input/output counts");
  /* a backward returning a wrong-shaped grad */
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_function_apply(&wrong_grad_fn, 1, &x, 1, &y, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_AUTOGRAD,
               "WrongGrad returned a gradient of shape (3,) (f64) for input 0, which has shape (2, 3) (f64)");
  zt_tensor_free(y);
  ZT_CHECK_OK(zt_function_apply(&wrong_dtype_fn, 1, &x, 1, &y, NULL));
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_AUTOGRAD, "returned a gradient of shape (2, 3) (f32)");
  ZT_CHECK(x->grad == NULL);
  zt_test_free_all((zt_tensor *[]){x, y, g}, 3);
}

/* ------------------------------------------------ reentrant backward (checkpointing):
 * forward runs f without grad and keeps only the input; backward recomputes f with grad
 * on a detached copy and calls zt_grad inside. f(x) = tanh(exp(x) * x) */
static zt_status f_inner(zt_tensor *x, zt_tensor **out) {
  zt_tensor *e = NULL, *m = NULL;
  ZT_TRY(zt_exp(x, &e));
  zt_status s = zt_mul(e, x, &m);
  if (!s) s = zt_tanh(m, out);
  zt_tensor_free(e);
  zt_tensor_free(m);
  return s;
}
static zt_status ckpt_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)n_in, (void)n_out, (void)ud;
  ZT_TRY(zt_node_save(ctx, in[0], NULL));
  return f_inner(in[0], &out[0]);
}
static zt_status ckpt_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                               zt_tensor **gin) {
  (void)n_out, (void)n_in;
  if (!needs[0]) return ZT_OK;
  zt_tensor *saved = NULL, *x = NULL, *y = NULL;
  ZT_TRY(zt_node_saved(ctx, 0, &saved));
  ZT_TRY(zt_tensor_alias(saved, &x));
  zt_status s = zt_tensor_set_requires_grad(x, true);
  bool prev = zt_set_grad_enabled(true);
  if (!s) s = f_inner(x, &y);
  zt_set_grad_enabled(prev);
  if (!s) s = zt_grad(1, &y, gout, 1, &x, false, &gin[0]);
  zt_tensor_free(y);
  zt_tensor_free(x);
  return s;
}
static const zt_function ckpt_fn = {"Checkpoint", ckpt_forward, ckpt_backward};

static zt_status f_ckpt(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *a = NULL, *b = NULL;
  ZT_TRY(zt_mul(in[0], in[1], &a));
  zt_status s = zt_function_apply(&ckpt_fn, 1, &a, 1, &b, NULL);
  if (!s) s = zt_mul(b, in[1], out);
  zt_tensor_free(a);
  zt_tensor_free(b);
  return s;
}
static zt_status f_plain(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *a = NULL, *b = NULL;
  ZT_TRY(zt_mul(in[0], in[1], &a));
  zt_status s = f_inner(a, &b);
  if (!s) s = zt_mul(b, in[1], out);
  zt_tensor_free(a);
  zt_tensor_free(b);
  return s;
}

static void test_nested_backward(void) {
  int64_t shape[] = {2, 3};
  zt_tensor *x = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 11);
  zt_tensor *w = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 12);
  ZT_GRADCHECK(f_ckpt, 2, ((zt_tensor *[]){x, w}), NULL, NULL);
  /* bitwise equal to the plain graph (same kernels, same order) */
  zt_tensor *yc = NULL, *yp = NULL;
  ZT_CHECK_OK(f_ckpt((zt_tensor *[]){x, w}, &yc, NULL));
  ZT_CHECK_OK(f_plain((zt_tensor *[]){x, w}, &yp, NULL));
  ZT_CHECK(zt_test_bitwise_equal(yc, yp));
  zt_tensor *r = zt_test_rand(2, shape, ZT_DTYPE_F64, -1, 1, 13);
  ZT_CHECK_OK(zt_backward(1, &yc, &r, false));
  zt_tensor *gxc = x->grad, *gwc = w->grad;
  x->grad = w->grad = NULL;
  ZT_CHECK_OK(zt_backward(1, &yp, &r, false));
  ZT_CHECK(zt_test_bitwise_equal(gxc, x->grad) && zt_test_bitwise_equal(gwc, w->grad));
  zt_test_free_all((zt_tensor *[]){x, w, yc, yp, r, gxc, gwc}, 7);
}

int main(void) {
  ZT_RUN(test_forward_backward_gradcheck);
  ZT_RUN(test_ctx_data_lifetime);
  ZT_RUN(test_set_data_replaces);
  ZT_RUN(test_null_inputs_and_multiple_outputs);
  ZT_RUN(test_integer_output);
  ZT_RUN(test_errors);
  ZT_RUN(test_nested_backward);
  return zt_test_finish();
}
