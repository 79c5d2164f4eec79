/* Token files (round trips, every bad-file error), the range check, the built-in default
 * dataset, and the batch loader (determinism, reshuffling per epoch, disjoint ranks,
 * resume from a saved position, errors). */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tensor_internal.h"
#include "zt/train.h"
#include "zt_test.h"

static long file_size(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fclose(f);
  return n;
}

static void roundtrip(int width, int32_t max_id, int expect_width) {
  int32_t ids[1000];
  for (int i = 0; i < 1000; i++) ids[i] = (int32_t)((i * 7919LL) % ((int64_t)max_id + 1));
  ids[999] = max_id;
  zt_tokens t = {ids, 1000, max_id + 1};
  const char *p = zt_test_tmp_path("rt.tok");
  ZT_CHECK_OK(zt_tokens_save(p, &t, width));
  ZT_CHECK(file_size(p) == 24 + 1000L * expect_width);
  zt_tokens *back = NULL;
  ZT_CHECK_OK(zt_tokens_load(p, &back));
  ZT_CHECK(back && back->count == 1000 && back->vocab_size == max_id + 1 && memcmp(back->ids, ids, sizeof ids) == 0);
  zt_tokens_free(back);
}

static void test_tokens_roundtrip(void) {
  roundtrip(2, 50256, 2);
  roundtrip(4, 50256, 4);
  roundtrip(0, 65535, 2);   /* automatic: 2 bytes while every id < 65536 */
  roundtrip(0, 100000, 4);  /* else 4 */
  roundtrip(4, 2000000000, 4);
  zt_tokens empty = {NULL, 0, 0};
  ZT_CHECK_OK(zt_tokens_save(zt_test_tmp_path("empty.tok"), &empty, 0));
  zt_tokens *back = NULL;
  ZT_CHECK_OK(zt_tokens_load(zt_test_tmp_path("empty.tok"), &back));
  ZT_CHECK(back && back->count == 0 && back->vocab_size == 0);
  zt_tokens_free(back);
}

static void test_tokens_save_errors(void) {
  int32_t ids[] = {1, 70000, 3};
  zt_tokens t = {ids, 3, 0};
  ZT_CHECK_ERR(zt_tokens_save(zt_test_tmp_path("e.tok"), &t, 2), ZT_STATUS_INVALID_ARG, "does not fit in 2 bytes");
  ZT_CHECK_ERR(zt_tokens_save(zt_test_tmp_path("e.tok"), &t, 3), ZT_STATUS_INVALID_ARG, "token width 3");
  ids[1] = -5;
  ZT_CHECK_ERR(zt_tokens_save(zt_test_tmp_path("e.tok"), &t, 0), ZT_STATUS_INVALID_ARG, "token -5 at position 1");
  ids[1] = 9;
  t.vocab_size = 5;
  ZT_CHECK_ERR(zt_tokens_save(zt_test_tmp_path("e.tok"), &t, 0), ZT_STATUS_INVALID_ARG, "token 9 at position 1");
  t.vocab_size = 0;
  ZT_CHECK_ERR(zt_tokens_save(zt_test_tmpdir(), &t, 0), ZT_STATUS_IO, "writing token file");
  ZT_CHECK(access(zt_test_tmp_path("e.tok"), F_OK) != 0); /* nothing written */
}

/* A valid header + tokens that each case then breaks. */
static size_t good_file(uint8_t *b, uint32_t version, uint32_t width, uint32_t vocab, uint64_t count, int n_tok) {
  memcpy(b, "ZTOK", 4);
  for (int k = 0; k < 4; k++) {
    b[4 + k] = (uint8_t)(version >> 8 * k);
    b[8 + k] = (uint8_t)(width >> 8 * k);
    b[12 + k] = (uint8_t)(vocab >> 8 * k);
  }
  for (int k = 0; k < 8; k++) b[16 + k] = (uint8_t)(count >> 8 * k);
  memset(b + 24, 0, (size_t)n_tok * width);
  for (int i = 0; i < n_tok; i++) b[24 + i * width] = (uint8_t)i;
  return 24 + (size_t)n_tok * width;
}

static void expect_bad(const uint8_t *b, size_t n, const char *msg) {
  const char *p = zt_test_tmp_path("bad.tok");
  zt_test_write_file(p, b, n);
  zt_tokens *t = (zt_tokens *)1;
  ZT_CHECK_ERR(zt_tokens_load(p, &t), ZT_STATUS_IO, msg);
  ZT_CHECK(strstr(zt_last_error(), p) != NULL);             /* names the file */
  ZT_CHECK(strstr(zt_last_error(), "zt tokenize") != NULL); /* and what to do */
  ZT_CHECK(t == NULL);
}

static void test_tokens_bad_files(void) {
  uint8_t b[256];
  zt_tokens *t = NULL;
  ZT_CHECK_ERR(zt_tokens_load(zt_test_tmp_path("absent.tok"), &t), ZT_STATUS_IO, "cannot open token file");
  ZT_CHECK(strstr(zt_last_error(), "absent.tok") && strstr(zt_last_error(), "No such file"));
  ZT_CHECK_ERR(zt_tokens_load(zt_test_tmpdir(), &t), ZT_STATUS_IO, "it is a folder, not a regular file");
  /* a FIFO is refused at once (opening it used to wait for a writer forever), a device too */
  const char *fifo = zt_test_tmp_path("fifo.tok");
  ZT_CHECK(mkfifo(fifo, 0600) == 0);
  unsigned prev = alarm(20);
  ZT_CHECK_ERR(zt_tokens_load(fifo, &t), ZT_STATUS_IO, "it is a FIFO (named pipe), not a regular file");
  alarm(prev);
  ZT_CHECK_ERR(zt_tokens_load("/dev/zero", &t), ZT_STATUS_IO, "token file '/dev/zero': it is a character device");
  expect_bad(b, 0, "is not a zerotrain token file");
  size_t n = good_file(b, 1, 2, 256, 10, 10);
  b[0] = 'X';
  expect_bad(b, n, "does not start with \"ZTOK\"");
  good_file(b, 1, 2, 256, 10, 10);
  expect_bad(b, 3, "is not a zerotrain token file");
  expect_bad(b, 13, "is truncated: 13 bytes, shorter than its 24-byte header");
  n = good_file(b, 2, 2, 256, 10, 10);
  expect_bad(b, n, "has format version 2, but this zerotrain reads version 1");
  n = good_file(b, 1, 3, 256, 10, 10);
  expect_bad(b, n, "token width 3 bytes (only 2 and 4 exist)");
  n = good_file(b, 1, 4, 0x80000000u, 10, 10);
  expect_bad(b, n, "vocabulary size 2147483648 is over 2^31-1");
  n = good_file(b, 1, 2, 256, 10, 10);
  expect_bad(b, n - 1, "is truncated or damaged: its header claims 10 tokens of 2 bytes but the file holds 19 bytes "
                      "after its 24-byte header (room for 9 tokens)");
  n = good_file(b, 1, 4, 256, 0xFFFFFFFFFFFFFFFFull, 10);
  expect_bad(b, n, "its header claims 18446744073709551615 tokens of 4 bytes but the file holds 40 bytes");
  /* 2^63 + 5 tokens of 2 bytes: the byte count overflows (the old message said "(10 bytes)") */
  n = good_file(b, 1, 2, 256, 0x8000000000000005ull, 5);
  expect_bad(b, n, "its header claims 9223372036854775813 tokens of 2 bytes but the file holds 10 bytes");
  n = good_file(b, 1, 2, 256, 10, 11);
  expect_bad(b, n, "2 bytes follow its 10 tokens");
  n = good_file(b, 1, 2, 5, 10, 10);
  expect_bad(b, n, "token 5 at position 5 is outside its own vocabulary of 5");
  n = good_file(b, 1, 4, 0, 10, 10);
  b[24 + 4 * 3 + 3] = 0x80; /* 0x80000003 does not fit an int32 id */
  expect_bad(b, n, "token 2147483651 at position 3");
  n = good_file(b, 1, 4, 0, 10, 10);
  zt_test_write_file(zt_test_tmp_path("ok.tok"), b, n);
  ZT_CHECK_OK(zt_tokens_load(zt_test_tmp_path("ok.tok"), &t));
  ZT_CHECK(t && t->count == 10 && t->ids[9] == 9 && t->vocab_size == 0);
  zt_tokens_free(t);
}

static void test_tokens_check_range(void) {
  int32_t ids[] = {0, 255, 300, -1};
  zt_tokens t = {ids, 2, 0};
  ZT_CHECK_OK(zt_tokens_check_range(&t, 256));
  t.count = 4;
  ZT_CHECK_ERR(zt_tokens_check_range(&t, 256), ZT_STATUS_INVALID_ARG,
               "token id 300 at position 2 is outside the model's vocabulary [0, 256)");
  ZT_CHECK_ERR(zt_tokens_check_range(&t, 1000), ZT_STATUS_INVALID_ARG, "token id -1 at position 3");
  ZT_CHECK_ERR(zt_tokens_check_range(&t, 0), ZT_STATUS_INVALID_ARG, "vocabulary size 0");
}

static void test_default_dataset(void) {
  zt_tokens *tr = NULL, *va = NULL, *tr2 = NULL, *va2 = NULL;
  ZT_CHECK_OK(zt_default_dataset(&tr, &va));
  ZT_CHECK_OK(zt_default_dataset(&tr2, &va2));
  if (!tr || !va || !tr2 || !va2) return;
  int64_t total = tr->count + va->count;
  ZT_CHECK(total >= 2000000 && total < 2010000);
  ZT_CHECK(va->count > total / 20 && va->count < total * 3 / 20); /* ~10% */
  ZT_CHECK(tr->vocab_size == 256 && va->vocab_size == 256);
  ZT_CHECK_OK(zt_tokens_check_range(tr, 128)); /* plain ASCII text */
  ZT_CHECK_OK(zt_tokens_check_range(va, 128));
  ZT_CHECK(tr->ids[tr->count - 1] == '\n' && tr->ids[tr->count - 2] == '\n'); /* whole stories */
  ZT_CHECK(va->ids[0] >= 'A' && va->ids[0] <= 'Z');
  /* deterministic: the same bytes every time */
  ZT_CHECK(tr->count == tr2->count && memcmp(tr->ids, tr2->ids, (size_t)tr->count * 4) == 0);
  ZT_CHECK(va->count == va2->count && memcmp(va->ids, va2->ids, (size_t)va->count * 4) == 0);
  /* varied: many distinct sentences, and sums that add up */
  char *text = malloc((size_t)tr->count + 1);
  for (int64_t i = 0; i < tr->count; i++) text[i] = (char)tr->ids[i];
  text[tr->count] = '\0';
  /* "Tom had 3 balls. Lily gave him 4 more, so now he had 7 balls." */
  int sums = 0;
  for (const char *p = text; (p = strstr(p, " more, so now ")) && sums < 50; p++) {
    const char *gave = p, *had;
    while (gave > text && strncmp(gave, " gave ", 6) != 0) gave--;
    for (had = gave; had > text && strncmp(had, " had ", 5) != 0;) had--;
    int x = -1, y = -1, z = -1;
    ZT_CHECK(sscanf(had, " had %d", &x) == 1 && sscanf(gave, " gave %*s %d", &y) == 1 &&
             sscanf(p, " more, so now %*s had %d", &z) == 1);
    ZT_CHECK(x + y == z && x >= 1 && y >= 1);
    sums++;
  }
  ZT_CHECK(sums == 50);
  free(text);
  zt_tokens_free(tr);
  zt_tokens_free(va);
  zt_tokens_free(tr2);
  zt_tokens_free(va2);
}

/* ------------------------------------------------ loader */
/* ids[i] = i, so a row's first token tells which window it is. */
static zt_tokens *counting_tokens(int64_t n) {
  zt_tokens *t = calloc(1, sizeof *t);
  t->ids = malloc((size_t)n * sizeof *t->ids);
  for (int64_t i = 0; i < n; i++) t->ids[i] = (int32_t)i;
  t->count = n;
  return t;
}

static void xy(int64_t B, int64_t T, zt_tensor **x, zt_tensor **y) {
  int64_t s[2] = {B, T};
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_I32, ZT_CPU, x));
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_I32, ZT_CPU, y));
}

/* Window index of each row of the next batch (and check x/y). */
static void next_windows(zt_loader *l, zt_tensor *x, zt_tensor *y, int64_t T, int64_t *w) {
  ZT_CHECK_OK(zt_loader_next(l, x, y));
  const int32_t *xd = zt__tensor_ptr(x), *yd = zt__tensor_ptr(y);
  int64_t B = x->shape[0];
  for (int64_t r = 0; r < B; r++) {
    ZT_CHECK(xd[r * T] % T == 0);
    w[r] = xd[r * T] / T;
    for (int64_t t = 0; t < T; t++) ZT_CHECK(xd[r * T + t] == xd[r * T] + t && yd[r * T + t] == xd[r * T + t] + 1);
  }
}

static void test_loader_windows_and_epochs(void) {
  const int64_t T = 8, B = 4;
  zt_tokens *tok = counting_tokens(T * 20 + 1); /* exactly 20 windows; the last token ends the last one */
  zt_loader_config c = {B, T, 42, 0, 1};
  zt_loader *l = NULL;
  ZT_CHECK_OK(zt_loader_new(tok, &c, &l));
  ZT_CHECK(zt_loader_windows_per_epoch(l) == 20);
  zt_tensor *x = NULL, *y = NULL;
  xy(B, T, &x, &y);
  int64_t order[3][20];
  for (int e = 0; e < 3; e++) {
    for (int b = 0; b < 5; b++) next_windows(l, x, y, T, order[e] + b * B);
    int seen[20] = {0};
    for (int i = 0; i < 20; i++) seen[order[e][i]]++;
    for (int i = 0; i < 20; i++) ZT_CHECK(seen[i] == 1); /* each window once per epoch */
    ZT_CHECK(zt_loader_get_pos(l).epoch == (uint64_t)e + 1 && zt_loader_get_pos(l).index == 0);
  }
  ZT_CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0); /* reshuffled every epoch */
  ZT_CHECK(memcmp(order[1], order[2], sizeof order[0]) != 0);
  bool shuffled = false;
  for (int i = 0; i < 20; i++) shuffled |= order[0][i] != i;
  ZT_CHECK(shuffled);
  zt_loader_free(l);
  /* one token fewer: the last window no longer fits */
  tok->count--;
  ZT_CHECK_OK(zt_loader_new(tok, &c, &l));
  ZT_CHECK(zt_loader_windows_per_epoch(l) == 19);
  zt_loader_free(l);
  zt_tensor_free(x);
  zt_tensor_free(y);
  zt_tokens_free(tok);
}

static void test_loader_determinism(void) {
  const int64_t T = 16, B = 3;
  zt_tokens *tok = counting_tokens(T * 37 + 5);
  zt_tensor *x = NULL, *y = NULL, *x2 = NULL, *y2 = NULL;
  xy(B, T, &x, &y);
  xy(B, T, &x2, &y2);
  zt_loader_config c = {B, T, 7, 0, 1}, c2 = {B, T, 8, 0, 1};
  zt_loader *a = NULL, *b = NULL, *d = NULL;
  ZT_CHECK_OK(zt_loader_new(tok, &c, &a));
  ZT_CHECK_OK(zt_loader_new(tok, &c, &b));
  ZT_CHECK_OK(zt_loader_new(tok, &c2, &d));
  bool differs = false;
  for (int s = 0; s < 40; s++) {
    zt_rng_seed((uint64_t)s * 1000); /* other RNG use must not change the data order */
    zt_rng_reserve(17);
    ZT_CHECK_OK(zt_loader_next(a, x, y));
    ZT_CHECK_OK(zt_loader_next(b, x2, y2));
    ZT_CHECK(zt_test_bitwise_equal(x, x2) && zt_test_bitwise_equal(y, y2));
    ZT_CHECK_OK(zt_loader_next(d, x2, y2));
    differs |= !zt_test_bitwise_equal(x, x2);
  }
  ZT_CHECK(differs); /* another seed, another order */
  zt_loader_free(a);
  zt_loader_free(b);
  zt_loader_free(d);
  zt_tensor_free(x);
  zt_tensor_free(y);
  zt_tensor_free(x2);
  zt_tensor_free(y2);
  zt_tokens_free(tok);
}

/* world ranks of batch B each read disjoint rows that together are world=1's batch W*B,
 * including across epoch ends (13 windows, global batch 6). */
static void test_loader_ranks(void) {
  const int64_t T = 4, B = 2;
  const int W = 3;
  zt_tokens *tok = counting_tokens(T * 13 + 1);
  zt_loader_config c1 = {B * W, T, 99, 0, 1};
  zt_loader *one = NULL, *r[W];
  ZT_CHECK_OK(zt_loader_new(tok, &c1, &one));
  for (int k = 0; k < W; k++) {
    zt_loader_config c = {B, T, 99, k, W};
    ZT_CHECK_OK(zt_loader_new(tok, &c, &r[k]));
  }
  zt_tensor *xg = NULL, *yg = NULL, *x = NULL, *y = NULL;
  xy(B * W, T, &xg, &yg);
  xy(B, T, &x, &y);
  for (int step = 0; step < 10; step++) {
    int64_t g[B * W], part[B];
    next_windows(one, xg, yg, T, g);
    for (int k = 0; k < W; k++) {
      next_windows(r[k], x, y, T, part);
      for (int64_t i = 0; i < B; i++) ZT_CHECK(part[i] == g[k * B + i]);
      ZT_CHECK(zt_loader_get_pos(r[k]).epoch == zt_loader_get_pos(one).epoch &&
               zt_loader_get_pos(r[k]).index == zt_loader_get_pos(one).index);
    }
  }
  zt_loader_free(one);
  for (int k = 0; k < W; k++) zt_loader_free(r[k]);
  zt_tensor_free(xg);
  zt_tensor_free(yg);
  zt_tensor_free(x);
  zt_tensor_free(y);
  zt_tokens_free(tok);
}

static void test_loader_resume(void) {
  const int64_t T = 8, B = 5;
  zt_tokens *tok = counting_tokens(T * 23 + 3);
  zt_loader_config c = {B, T, 1234, 0, 1};
  zt_loader *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt_loader_new(tok, &c, &a));
  zt_tensor *x = NULL, *y = NULL, *x2 = NULL, *y2 = NULL;
  xy(B, T, &x, &y);
  xy(B, T, &x2, &y2);
  for (int s = 0; s < 7; s++) ZT_CHECK_OK(zt_loader_next(a, x, y)); /* into the second epoch */
  zt_loader_pos pos = zt_loader_get_pos(a);
  ZT_CHECK(pos.epoch == 1);
  ZT_CHECK_OK(zt_loader_new(tok, &c, &b)); /* a fresh process */
  ZT_CHECK_OK(zt_loader_set_pos(b, pos));
  for (int s = 0; s < 12; s++) {
    ZT_CHECK_OK(zt_loader_next(a, x, y));
    ZT_CHECK_OK(zt_loader_next(b, x2, y2));
    ZT_CHECK(zt_test_bitwise_equal(x, x2) && zt_test_bitwise_equal(y, y2));
  }
  ZT_CHECK_ERR(zt_loader_set_pos(b, (zt_loader_pos){0, 23}), ZT_STATUS_INVALID_ARG,
               "data position 23 is outside the 23 windows");
  ZT_CHECK_ERR(zt_loader_set_pos(b, (zt_loader_pos){0, -1}), ZT_STATUS_INVALID_ARG, "data position -1");
  zt_loader_free(a);
  zt_loader_free(b);
  zt_tensor_free(x);
  zt_tensor_free(y);
  zt_tensor_free(x2);
  zt_tensor_free(y2);
  zt_tokens_free(tok);
}

static void test_loader_errors(void) {
  zt_tokens *tok = counting_tokens(16);
  zt_loader *l = NULL;
  zt_loader_config c = {2, 16, 1, 0, 1};
  ZT_CHECK_ERR(zt_loader_new(tok, &c, &l), ZT_STATUS_INVALID_ARG,
               "the dataset has 16 tokens, fewer than one window of seq + 1 = 17 tokens");
  c.seq = 0;
  ZT_CHECK_ERR(zt_loader_new(tok, &c, &l), ZT_STATUS_INVALID_ARG, "must both be >= 1");
  c = (zt_loader_config){2, 4, 1, 2, 2};
  ZT_CHECK_ERR(zt_loader_new(tok, &c, &l), ZT_STATUS_INVALID_ARG, "rank 2 is not in [0, world = 2)");
  c.rank = 1;
  ZT_CHECK_OK(zt_loader_new(tok, &c, &l));
  zt_tensor *x = NULL, *y = NULL, *bad = NULL, *f = NULL;
  xy(2, 4, &x, &y);
  int64_t s3[2] = {2, 3}, s1[1] = {8}, s2[2] = {2, 4};
  ZT_CHECK_OK(zt_tensor_zeros(2, s3, ZT_DTYPE_I32, ZT_CPU, &bad));
  ZT_CHECK_ERR(zt_loader_next(l, bad, y), ZT_STATUS_SHAPE, "x must be (batch, seq) = (2, 4), got (2, 3)");
  zt_tensor_free(bad);
  ZT_CHECK_OK(zt_tensor_zeros(1, s1, ZT_DTYPE_I32, ZT_CPU, &bad));
  ZT_CHECK_ERR(zt_loader_next(l, x, bad), ZT_STATUS_SHAPE, "y must be (batch, seq) = (2, 4), got (8");
  ZT_CHECK_OK(zt_tensor_zeros(2, s2, ZT_DTYPE_F32, ZT_CPU, &f));
  ZT_CHECK_ERR(zt_loader_next(l, f, y), ZT_STATUS_DTYPE, "x must be i32, got f32");
  ZT_CHECK_ERR(zt_loader_next(l, x, x), ZT_STATUS_INVALID_ARG, "share storage");
  ZT_CHECK(zt_loader_get_pos(l).index == 0); /* failed calls do not advance */
  ZT_CHECK_OK(zt_loader_next(l, x, y));
  /* 3 windows, global batch 4: rank 1 reads stream rows 2, 3 = epoch 0's last, epoch 1's first */
  ZT_CHECK(zt_loader_get_pos(l).epoch == 1 && zt_loader_get_pos(l).index == 1);
  zt_tensor_free(bad);
  zt_tensor_free(f);
  zt_tensor_free(x);
  zt_tensor_free(y);
  zt_loader_free(l);
  zt_tokens_free(tok);
}

int main(void) {
  if (!zt_test_tmpdir_make("data")) return 1;
  ZT_RUN(test_tokens_roundtrip);
  ZT_RUN(test_tokens_save_errors);
  ZT_RUN(test_tokens_bad_files);
  ZT_RUN(test_tokens_check_range);
  ZT_RUN(test_default_dataset);
  ZT_RUN(test_loader_windows_and_epochs);
  ZT_RUN(test_loader_determinism);
  ZT_RUN(test_loader_ranks);
  ZT_RUN(test_loader_resume);
  ZT_RUN(test_loader_errors);
  zt_test_tmpdir_remove();
  return zt_test_finish();
}
