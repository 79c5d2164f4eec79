/* nn modules: the module tree (names, order, ownership, train/eval), each layer's
 * parameters (names, shapes, decay flags, PARAM tag, init), forwards against the ops
 * they wrap, dropout's identity/active cases, and a finite-difference check of a whole
 * transformer block in f64 with every parameter as a checked input. */
#include <stdlib.h>

#include "zt/nn.h"
#include "zt_test.h"

static void check_names(zt_module *m, const char *prefix, int n_expected, const char *const *expected) {
  int n = 0;
  zt_param *ps = NULL;
  ZT_CHECK_OK(zt_module_named_params(m, prefix, &n, &ps));
  ZT_CHECK(n == n_expected);
  for (int i = 0; ps && i < n && i < n_expected; i++)
    if (strcmp(ps[i].name, expected[i])) zt_test_fail(__FILE__, __LINE__, "param %d is %s, expected %s", i, ps[i].name, expected[i]);
  free(ps);
}

static void test_module_tree(void) {
  zt_module *root = NULL, *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt_module_new(NULL, "", &root));
  ZT_CHECK_OK(zt_module_new("Thing", "a", &a));
  ZT_CHECK_OK(zt_module_new("Thing", "b", &b));
  zt_tensor *w = NULL;
  ZT_CHECK_OK(zt_module_new_param(root, "scale", 1, (int64_t[]){3}, ZT_DTYPE_F32, false, &w));
  ZT_CHECK_OK(zt_module_new_param(a, "weight", 2, (int64_t[]){2, 3}, ZT_DTYPE_F32, true, NULL));
  ZT_CHECK_OK(zt_module_new_param(b, "bias", 1, (int64_t[]){4}, ZT_DTYPE_F64, false, NULL));
  ZT_CHECK_OK(zt_module_add_child(a, b)); /* a.b */
  ZT_CHECK_OK(zt_module_add_child(root, a));
  ZT_CHECK(zt_module_child(root, "a") == a && zt_module_child(a, "b") == b && !zt_module_child(root, "b"));
  if (w) {
    ZT_CHECK(w->requires_grad && w->storage->tag == ZT_MEM_TAG_PARAM);
    ZT_CHECK(zt_tensor_get(w, 0) == 0.0);
  }
  const char *names[] = {"scale", "a.weight", "a.b.bias"};
  check_names(root, "", 3, names);
  const char *pnames[] = {"m.scale", "m.a.weight", "m.a.b.bias"};
  check_names(root, "m", 3, pnames);
  ZT_CHECK(zt_module_num_params(root) == 3 + 6 + 4);
  ZT_CHECK(root->training && b->training);
  zt_module_set_training(root, false);
  ZT_CHECK(!root->training && !a->training && !b->training);
  /* errors */
  ZT_CHECK_ERR(zt_module_new_param(a, "weight", 1, (int64_t[]){1}, ZT_DTYPE_F32, true, NULL), ZT_STATUS_INVALID_ARG,
               "already has a parameter named \"weight\"");
  ZT_CHECK_ERR(zt_module_new_param(a, "x.y", 1, (int64_t[]){1}, ZT_DTYPE_F32, true, NULL), ZT_STATUS_INVALID_ARG,
               "contains a '.'");
  ZT_CHECK_ERR(zt_module_new_param(a, "ids", 1, (int64_t[]){1}, ZT_DTYPE_I32, true, NULL), ZT_STATUS_DTYPE,
               "must be floating point");
  zt_module *dup = NULL;
  ZT_CHECK_OK(zt_module_new(NULL, "a", &dup));
  ZT_CHECK_ERR(zt_module_add_child(root, dup), ZT_STATUS_INVALID_ARG, "already has a child named \"a\""); /* frees dup */
  zt_module_free(root);
}

static void test_linear_layer(void) {
  zt_rng_seed(1);
  zt_nn_linear *l = NULL, *nb = NULL;
  ZT_CHECK_OK(zt_nn_linear_new("fc", 64, 96, true, ZT_DTYPE_F32, 0.02, &l));
  ZT_CHECK_OK(zt_nn_linear_new("nb", 3, 2, false, ZT_DTYPE_F64, 0.02, &nb));
  if (!l || !nb) return;
  ZT_CHECK(l->weight->shape[0] == 64 && l->weight->shape[1] == 96 && l->bias->shape[0] == 96);
  ZT_CHECK(l->base.n_params == 2 && l->base.params[0].decay && !l->base.params[1].decay);
  ZT_CHECK(!strcmp(l->base.kind, "Linear") && !strcmp(l->base.params[0].name, "weight"));
  ZT_CHECK(fabs(zt_test_std(l->weight) - 0.02) < 0.001 && fabs(zt_test_mean(l->weight)) < 0.001);
  ZT_CHECK(zt_test_std(l->bias) == 0.0 && zt_test_mean(l->bias) == 0.0);
  ZT_CHECK(nb->base.n_params == 1 && !nb->bias);
  zt_tensor *x = zt_test_rand(3, (int64_t[]){2, 5, 64}, ZT_DTYPE_F32, -1, 1, 3), *y = NULL, *ref = NULL;
  ZT_CHECK_OK(zt_nn_linear_forward(l, x, &y));
  ZT_CHECK_OK(zt_linear_io(x, l->weight, l->bias, &ref));
  if (y && ref) ZT_CHECK(zt_test_bitwise_equal(y, ref));
  zt_tensor *bad = zt_test_rand(2, (int64_t[]){2, 5}, ZT_DTYPE_F32, -1, 1, 3), *yb = NULL;
  ZT_CHECK_ERR(zt_nn_linear_forward(l, bad, &yb), ZT_STATUS_SHAPE, "in Linear \"fc\"");
  ZT_CHECK_ERR(zt_nn_linear_new("z", 0, 2, true, ZT_DTYPE_F32, 0.02, &nb), ZT_STATUS_INVALID_ARG, "in is 0");
  zt_tensor_free(x);
  zt_tensor_free(bad);
  zt_tensor_free(y);
  zt_tensor_free(ref);
  zt_module_free(&l->base);
  zt_module_free(&nb->base);
}

static void test_layer_norm_and_embedding(void) {
  zt_nn_layer_norm *ln = NULL;
  zt_nn_embedding *e = NULL;
  ZT_CHECK_OK(zt_nn_layer_norm_new("ln", 8, 1e-5, ZT_DTYPE_F32, &ln));
  ZT_CHECK_OK(zt_nn_embedding_new("wte", 100, 8, ZT_DTYPE_F32, 0.02, &e));
  if (!ln || !e) return;
  ZT_CHECK(zt_test_mean(ln->weight) == 1.0 && zt_test_std(ln->weight) == 0.0 && zt_test_mean(ln->bias) == 0.0);
  ZT_CHECK(!ln->base.params[0].decay && !ln->base.params[1].decay);
  ZT_CHECK(e->weight->shape[0] == 100 && e->weight->shape[1] == 8 && e->base.params[0].decay);
  zt_tensor *x = zt_test_rand(2, (int64_t[]){3, 8}, ZT_DTYPE_F32, -1, 1, 4), *y = NULL, *ref = NULL;
  ZT_CHECK_OK(zt_nn_layer_norm_forward(ln, x, &y));
  ZT_CHECK_OK(zt_layer_norm(x, ln->weight, ln->bias, 1e-5, &ref));
  if (y && ref) ZT_CHECK(zt_test_bitwise_equal(y, ref));
  zt_tensor *ids = NULL, *emb = NULL, *ebad = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){3}, ZT_DTYPE_I32, (int32_t[]){5, 0, 99}, &ids));
  ZT_CHECK_OK(zt_nn_embedding_forward(e, ids, &emb));
  if (emb) ZT_CHECK(zt_tensor_get(emb, 2 * 8 + 1) == zt_tensor_get(e->weight, 99 * 8 + 1));
  ZT_CHECK_OK(zt_tensor_set(ids, 1, 100));
  ZT_CHECK_ERR(zt_nn_embedding_forward(e, ids, &ebad), ZT_STATUS_INVALID_ARG, "id 100 at position (1)");
  zt_tensor *ts[] = {x, y, ref, ids, emb};
  for (int i = 0; i < 5; i++) zt_tensor_free(ts[i]);
  zt_module_free(&ln->base);
  zt_module_free(&e->base);
}

static void test_dropout_layer(void) {
  zt_nn_dropout *d = NULL, *d0 = NULL;
  ZT_CHECK_OK(zt_nn_dropout_new("drop", 0.5, &d));
  ZT_CHECK_OK(zt_nn_dropout_new("drop0", 0.0, &d0));
  ZT_CHECK_ERR(zt_nn_dropout_new("bad", 1.0, &d0), ZT_STATUS_INVALID_ARG, "must be in [0, 1)");
  if (!d || !d0) return;
  zt_tensor *x = zt_test_rand_leaf(1, (int64_t[]){1000}, ZT_DTYPE_F32, 1, 2, 5), *y = x;
  ZT_CHECK_OK(zt_nn_dropout_forward(d0, &y)); /* p = 0: untouched */
  ZT_CHECK(y == x);
  zt_module_set_training(&d->base, false);
  ZT_CHECK_OK(zt_nn_dropout_forward(d, &y)); /* eval: untouched */
  ZT_CHECK(y == x);
  zt_module_set_training(&d->base, true);
  zt_tensor *a = NULL;
  ZT_CHECK_OK(zt_tensor_alias(x, &a)); /* a reference the layer may free */
  zt_tensor *keep = a;
  ZT_CHECK_OK(zt_nn_dropout_forward(d, &a));
  ZT_CHECK(a != keep);
  if (a != keep) {
    int zeros = 0;
    for (int i = 0; i < 1000; i++) zeros += zt_tensor_get(a, i) == 0.0;
    ZT_CHECK(zeros > 400 && zeros < 600);
  }
  zt_tensor_free(a);
  zt_tensor_free(x);
  zt_module_free(&d->base);
  zt_module_free(&d0->base);
}

static void test_mlp_attention_block_names(void) {
  zt_nn_block *b = NULL;
  zt_rng_seed(2);
  ZT_CHECK_OK(zt_nn_block_new("0", 64, 4, 0.0, ZT_DTYPE_F32, 0.02, 0.005, &b));
  if (!b) return;
  const char *names[] = {"h.0.ln_1.weight",      "h.0.ln_1.bias",        "h.0.attn.c_attn.weight",
                         "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias",
                         "h.0.ln_2.weight",      "h.0.ln_2.bias",        "h.0.mlp.c_fc.weight",
                         "h.0.mlp.c_fc.bias",    "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias"};
  check_names(&b->base, "h.0", 12, names);
  int n = 0;
  zt_param *ps = NULL;
  ZT_CHECK_OK(zt_module_named_params(&b->base, "", &n, &ps));
  int64_t shapes[12][2] = {{64, 0}, {64, 0}, {64, 192}, {192, 0}, {64, 64}, {64, 0},
                           {64, 0}, {64, 0}, {64, 256}, {256, 0}, {256, 64}, {64, 0}};
  for (int i = 0; ps && i < n && i < 12; i++) {
    zt_tensor *t = ps[i].tensor;
    bool two_d = shapes[i][1] != 0;
    ZT_CHECK(t->ndim == (two_d ? 2 : 1) && t->shape[0] == shapes[i][0] && (!two_d || t->shape[1] == shapes[i][1]));
    ZT_CHECK(ps[i].decay == two_d);
    ZT_CHECK(t->storage->tag == ZT_MEM_TAG_PARAM && t->requires_grad);
  }
  /* residual projections get their own std */
  if (ps && n == 12) {
    ZT_CHECK(fabs(zt_test_std(ps[10].tensor) - 0.005) < 0.0003);
    ZT_CHECK(fabs(zt_test_std(ps[2].tensor) - 0.02) < 0.001);
  }
  free(ps);
  zt_nn_attention *a = NULL;
  ZT_CHECK_ERR(zt_nn_attention_new("attn", 10, 4, 0.0, ZT_DTYPE_F32, 0.02, 0.02, &a), ZT_STATUS_INVALID_ARG,
               "not divisible by n_head");
  zt_module_free(&b->base);
}

/* Block forward = x + attn(ln_1 x) then + mlp(ln_2 .), rebuilt here from ops. */
static void test_block_forward_matches_ops(void) {
  zt_nn_block *b = NULL;
  ZT_CHECK_OK(zt_nn_block_new("0", 8, 2, 0.0, ZT_DTYPE_F64, 0.3, 0.3, &b));
  if (!b) return;
  zt_tensor *x = zt_test_rand(3, (int64_t[]){2, 5, 8}, ZT_DTYPE_F64, -1, 1, 6), *y = NULL;
  ZT_CHECK_OK(zt_nn_block_forward(b, x, &y));
  zt_tensor *t[16] = {0};
  ZT_CHECK_OK(zt_layer_norm(x, b->ln_1->weight, b->ln_1->bias, 1e-5, &t[0]));
  ZT_CHECK_OK(zt_linear_io(t[0], b->attn->c_attn->weight, b->attn->c_attn->bias, &t[1]));
  ZT_CHECK_OK(zt_causal_attention(t[1], 2, &t[2]));
  ZT_CHECK_OK(zt_linear_io(t[2], b->attn->c_proj->weight, b->attn->c_proj->bias, &t[3]));
  ZT_CHECK_OK(zt_add(x, t[3], &t[4]));
  ZT_CHECK_OK(zt_layer_norm(t[4], b->ln_2->weight, b->ln_2->bias, 1e-5, &t[5]));
  ZT_CHECK_OK(zt_linear_io(t[5], b->mlp->c_fc->weight, b->mlp->c_fc->bias, &t[6]));
  ZT_CHECK_OK(zt_gelu(t[6], &t[7]));
  ZT_CHECK_OK(zt_linear_io(t[7], b->mlp->c_proj->weight, b->mlp->c_proj->bias, &t[8]));
  ZT_CHECK_OK(zt_add(t[4], t[8], &t[9]));
  if (y && t[9]) ZT_CHECK(zt_test_bitwise_equal(y, t[9]));
  for (int i = 0; i < 16; i++) zt_tensor_free(t[i]);
  zt_tensor_free(x);
  zt_tensor_free(y);
  zt_module_free(&b->base);
}

static zt_status f_block(zt_tensor *const *in, zt_tensor **out, void *ud) {
  return zt_nn_block_forward(ud, in[0], out);
}

/* Finite differences through a whole block: x and all 12 parameters. */
static void test_block_gradcheck(void) {
  zt_nn_block *b = NULL;
  zt_rng_seed(3);
  ZT_CHECK_OK(zt_nn_block_new("0", 4, 2, 0.0, ZT_DTYPE_F64, 0.5, 0.5, &b));
  if (!b) return;
  int n = 0;
  zt_param *ps = NULL;
  ZT_CHECK_OK(zt_module_named_params(&b->base, "", &n, &ps));
  /* non-trivial layer-norm parameters, so their grads are checked off the 1/0 point */
  bool prev = zt_set_grad_enabled(false);
  for (int i = 0; i < n; i++)
    if (ps[i].tensor->ndim == 1) ZT_CHECK_OK(zt_tensor_normal_(ps[i].tensor, 0.5, 0.3));
  zt_set_grad_enabled(prev);
  zt_tensor *in[13];
  in[0] = zt_test_rand_leaf(3, (int64_t[]){2, 3, 4}, ZT_DTYPE_F64, -1, 1, 7);
  for (int i = 0; i < n && i < 12; i++) in[1 + i] = ps[i].tensor;
  zt_gc_opts o = {1e-6, 1e-6, 1e-4};
  ZT_GRADCHECK(f_block, 1 + n, in, b, &o);
  for (int i = 0; i < n; i++) {
    zt_tensor_free(ps[i].tensor->grad);
    ps[i].tensor->grad = NULL;
  }
  free(ps);
  zt_tensor_free(in[0]);
  zt_module_free(&b->base);
}

int main(void) {
  ZT_RUN(test_module_tree);
  ZT_RUN(test_linear_layer);
  ZT_RUN(test_layer_norm_and_embedding);
  ZT_RUN(test_dropout_layer);
  ZT_RUN(test_mlp_attention_block_names);
  ZT_RUN(test_block_forward_matches_ops);
  ZT_RUN(test_block_gradcheck);
  return zt_test_finish();
}
