/* Hugging Face tokenizer.json tokenizers against the `tokenizers` package: tests/fixtures/hf holds
 * small tokenizers of both kinds (byte-level: GPT-2, Llama 3, Qwen2 and SmolLM configurations;
 * byte fallback: Llama 2 and Mistral configurations, and Llama 2's with added tokens that are not
 * special) trained by scripts/gen_hf_tokenizer_fixture.py,
 * and cases.json the reference's ids and decoded text for tricky strings. Checked: id for id,
 * decode as the reference, decode(encode(s)) == s wherever the reference round-trips, the bos/eos
 * around a document, any bytes round-tripping, zt_tokenize_files over a folder, and the messages
 * for what is not supported. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "zt/train.h"
#include "zt_test.h"

static const char *NAMES[] = {"gpt2", "llama3", "qwen2", "smollm", "llama2", "mistral", "llama2_added"};
#define N_NAMES (int)(sizeof NAMES / sizeof *NAMES)

/* tests/fixtures/hf/<name> (zt_test_fixture), in one of four rotating buffers so that a call
 * can take several. */
static const char *fixture(const char *name) {
  static char bufs[4][4096];
  static int k;
  char *buf = bufs[k = (k + 1) % 4];
  zt_test_fixture(buf, sizeof bufs[0], "hf/%s", name);
  return buf;
}

static zt__json *cases(void) {
  static zt__json *c;
  if (c) return c;
  void *data = NULL;
  size_t size = 0;
  ZT_CHECK_OK(zt_read_file(fixture("cases.json"), &data, &size));
  if (data) ZT_CHECK_OK(zt__json_parse(data, size, "cases.json", &c));
  free(data);
  return c;
}

static bool ids_equal(const int32_t *ids, int64_t n, const zt__json *exp, int64_t *first_diff) {
  *first_diff = -1;
  for (int64_t i = 0; i < n || i < exp->n; i++) {
    int64_t v = -1;
    if (i >= n || i >= exp->n || !zt__json_i64(&exp->items[i], &v) || v != ids[i]) {
      *first_diff = i;
      return false;
    }
  }
  return true;
}

static void print_ids(const char *what, const int32_t *ids, int64_t n) {
  fprintf(stderr, "  %s:", what);
  for (int64_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
  fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

static void check_tokenizer(const char *name) {
  zt__json *c = cases();
  if (!c) return;
  const zt__json *strings = zt__json_get(c, "strings"), *ref = zt__json_get(zt__json_get(c, "tokenizers"), name);
  ZT_CHECK(strings && ref);
  if (!strings || !ref) return;
  const zt__json *ids_exp = zt__json_get(ref, "ids"), *dec_exp = zt__json_get(ref, "decoded");
  const zt__json *spec_exp = zt__json_get(ref, "with_special");
  zt_tokenizer *t = NULL;
  ZT_CHECK_OK(zt_tokenizer_hf(fixture(name), &t));
  if (!t) return;
  int64_t vocab = 0;
  ZT_CHECK(zt__json_i64(zt__json_get(ref, "vocab_size"), &vocab) && vocab == zt_tokenizer_vocab_size(t));
  int32_t eos = zt_tokenizer_eos_id(t);
  ZT_CHECK(eos >= 0);
  for (int k = 0; k < strings->n; k++) {
    const char *s = strings->items[k].str;
    size_t len = strlen(s);
    int32_t *ids = NULL, *doc = NULL;
    int64_t n = 0, nd = 0, diff;
    ZT_CHECK_OK(zt_tokenizer_encode(t, s, len, &ids, &n));
    if (!ids_equal(ids, n, &ids_exp->items[k], &diff)) {
      zt_test_fail(__FILE__, __LINE__, "%s, string %d (\"%.40s\"): id %lld differs from the reference's", name, k, s,
                   (long long)diff);
      print_ids("zerotrain", ids, n);
    }
    /* decode: as the reference, from the reference's ids */
    const char *want = dec_exp->items[k].str;
    char *text = NULL;
    size_t tl = 0;
    ZT_CHECK_OK(zt_tokenizer_decode(t, ids, n, &text, &tl));
    if (text && (tl != strlen(want) || memcmp(text, want, tl)))
      zt_test_fail(__FILE__, __LINE__, "%s, string %d: decoded \"%.60s\", the reference \"%.60s\"", name, k, text,
                   want);
    if (text && !strcmp(want, s)) ZT_CHECK(tl == len && !memcmp(text, s, len)); /* decode(encode(s)) == s */
    free(text);
    /* a document: the post-processor's specials, then eos unless it ends with it already */
    ZT_CHECK_OK(zt_tokenizer_encode_document(t, s, len, &doc, &nd));
    const zt__json *sp = &spec_exp->items[k];
    int64_t last = -1;
    if (sp->n > 0) (void)zt__json_i64(&sp->items[sp->n - 1], &last);
    bool adds = last != eos;
    ZT_CHECK(nd == sp->n + adds);
    if (nd == sp->n + adds) {
      if (!ids_equal(doc, sp->n, sp, &diff))
        zt_test_fail(__FILE__, __LINE__, "%s, string %d: document id %lld differs", name, k, (long long)diff);
      if (adds) ZT_CHECK(doc[nd - 1] == eos);
    }
    free(doc);
    free(ids);
  }
  zt_tokenizer_free(t);
}

static void test_gpt2(void) { check_tokenizer("gpt2"); }
static void test_llama3(void) { check_tokenizer("llama3"); }
static void test_qwen2(void) { check_tokenizer("qwen2"); }
static void test_smollm(void) { check_tokenizer("smollm"); }
static void test_llama2(void) { check_tokenizer("llama2"); }
static void test_mistral(void) { check_tokenizer("mistral"); }
static void test_llama2_added(void) { check_tokenizer("llama2_added"); }

/* bos/eos as tokenizer_config.json names them, and the bos a document starts with. */
static void test_special_tokens(void) {
  static const struct {
    const char *name;
    int32_t bos, eos;
    bool doc_bos;
  } want[] = {{"gpt2", 0, 0, false}, {"llama3", 520, 521, true}, {"qwen2", -1, 0, false},
              {"llama2", 1, 2, true},    {"mistral", 1, 2, true}};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    zt_tokenizer *t = NULL;
    ZT_CHECK_OK(zt_tokenizer_hf(fixture(want[i].name), &t));
    if (!t) continue;
    if (zt_tokenizer_bos_id(t) != want[i].bos || zt_tokenizer_eos_id(t) != want[i].eos)
      zt_test_fail(__FILE__, __LINE__, "%s: bos %d eos %d, expected %d %d", want[i].name, zt_tokenizer_bos_id(t),
                   zt_tokenizer_eos_id(t), want[i].bos, want[i].eos);
    int32_t *ids = NULL;
    int64_t n = 0;
    ZT_CHECK_OK(zt_tokenizer_encode_document(t, "", 0, &ids, &n));
    ZT_CHECK(n == (want[i].doc_bos ? 2 : 1) && ids[n - 1] == want[i].eos);
    if (want[i].doc_bos && n == 2) ZT_CHECK(ids[0] == want[i].bos);
    free(ids);
    zt_tokenizer_free(t);
  }
}

/* Any bytes come back: random bytes (mostly not UTF-8), long runs, every byte value. */
static void test_roundtrip_bytes(void) {
  char rnd[4096];
  uint64_t x = 99;
  for (size_t i = 0; i < sizeof rnd; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    rnd[i] = (char)(x >> 56);
    if (rnd[i] == 0) rnd[i] = 1;
  }
  char *spaces = malloc(50001);
  memset(spaces, ' ', 50000);
  spaces[0] = 'x', spaces[50000] = 'a';
  char all[255];
  for (int i = 0; i < 255; i++) all[i] = (char)(i + 1);
  const struct {
    const char *s;
    size_t n;
  } texts[] = {{rnd, sizeof rnd}, {spaces, 50001}, {all, sizeof all}, {"\xff\xfe\xc3(\xed\xa0\x80 x", 10}};
  for (int k = 0; k < N_NAMES; k++) {
    zt_tokenizer *t = NULL;
    ZT_CHECK_OK(zt_tokenizer_hf(fixture(NAMES[k]), &t));
    if (!t) continue;
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
      int32_t *ids = NULL;
      int64_t n = 0;
      char *back = NULL;
      size_t bl = 0;
      ZT_CHECK_OK(zt_tokenizer_encode(t, texts[i].s, texts[i].n, &ids, &n));
      ZT_CHECK_OK(zt_tokenizer_decode(t, ids, n, &back, &bl));
      if (!back || bl != texts[i].n || memcmp(back, texts[i].s, bl))
        zt_test_fail(__FILE__, __LINE__, "%s: text %zu does not come back (%zu bytes of %zu)", NAMES[k], i, bl,
                     texts[i].n);
      free(ids);
      free(back);
    }
    zt_tokenizer_free(t);
  }
  free(spaces);
}

static void write_text(const char *path, const char *s) {
  FILE *f = fopen(path, "wb");
  ZT_CHECK(f != NULL);
  if (!f) return;
  fputs(s, f);
  fclose(f);
}

/* Files and folders into one token file: documents in order, each [bos] text eos. */
static void test_tokenize_files(void) {
  char dir[] = "/tmp/zt_hf_tok_XXXXXX";
  ZT_CHECK(mkdtemp(dir) != NULL);
  char sub[64], a[128], b[128], c[128], hidden[128], out[128];
  snprintf(sub, sizeof sub, "%s/docs", dir);
  ZT_CHECK(mkdir(sub, 0700) == 0);
  snprintf(a, sizeof a, "%s/b.txt", sub);
  snprintf(b, sizeof b, "%s/a.txt", sub);
  snprintf(hidden, sizeof hidden, "%s/.hidden", sub);
  snprintf(c, sizeof c, "%s/c.txt", dir);
  snprintf(out, sizeof out, "%s/out.tok", dir);
  write_text(a, "second document");
  write_text(b, "first document\n");
  write_text(hidden, "never read");
  write_text(c, "third");
  zt_tokenizer *t = NULL;
  ZT_CHECK_OK(zt_tokenizer_hf(fixture("llama3"), &t));
  if (t) {
    const char *inputs[] = {sub, c};
    int64_t docs = 0, count = 0;
    ZT_CHECK_OK(zt_tokenize_files(t, inputs, 2, out, &docs, &count));
    ZT_CHECK(docs == 3);
    /* expected: each document by itself */
    const char *texts[] = {"first document\n", "second document", "third"};
    int32_t want[256];
    int64_t nw = 0;
    for (int i = 0; i < 3; i++) {
      int32_t *ids = NULL;
      int64_t n = 0;
      ZT_CHECK_OK(zt_tokenizer_encode_document(t, texts[i], strlen(texts[i]), &ids, &n));
      ZT_CHECK(ids && ids[0] == zt_tokenizer_bos_id(t) && ids[n - 1] == zt_tokenizer_eos_id(t));
      for (int64_t k = 0; k < n && nw < 256; k++) want[nw++] = ids[k];
      free(ids);
    }
    zt_tokens *tok = NULL;
    ZT_CHECK_OK(zt_tokens_load(out, &tok));
    ZT_CHECK(tok && tok->count == nw && count == nw && tok->vocab_size == zt_tokenizer_vocab_size(t));
    if (tok && tok->count == nw) ZT_CHECK(memcmp(tok->ids, want, (size_t)nw * sizeof *want) == 0);
    zt_tokens_free(tok);
    const char *missing[] = {"/nonexistent/zt_no_such_file"};
    ZT_CHECK_ERR(zt_tokenize_files(t, missing, 1, out, NULL, NULL), ZT_STATUS_IO, "zt_no_such_file");
    zt_tokenizer_free(t);
  }
  unlink(a), unlink(b), unlink(c), unlink(hidden), unlink(out);
  rmdir(sub), rmdir(dir);
}

/* tokenizer.json with one part changed: what is not supported is refused, naming it. */
static void check_refused(const char *name, const char *from, const char *to, const char *msg) {
  void *data = NULL;
  size_t size = 0;
  char path[512];
  snprintf(path, sizeof path, "%s/tokenizer.json", fixture(name));
  ZT_CHECK_OK(zt_read_file(path, &data, &size));
  if (!data) return;
  char *s = data, *at = strstr(s, from);
  ZT_CHECK(at != NULL);
  char dir[] = "/tmp/zt_hf_bad_XXXXXX";
  ZT_CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  FILE *f = fopen(path, "wb");
  if (f && at) {
    fwrite(s, 1, (size_t)(at - s), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
  }
  if (f) fclose(f);
  zt_tokenizer *t = NULL;
  ZT_CHECK_ERR(zt_tokenizer_hf(dir, &t), ZT_STATUS_INVALID_ARG, msg);
  zt_tokenizer_free(t);
  unlink(path);
  rmdir(dir);
  free(data);
}

static void test_refused(void) {
  check_refused("llama2", "\"type\":\"BPE\"", "\"type\":\"Unigram\"", "model 'Unigram' is not supported");
  check_refused("mistral", "\"type\":\"Metaspace\"", "\"type\":\"Whitespace\"", "pre_tokenizer 'Whitespace'");
  check_refused("llama3", "\\\\p{N}{1,3}", "\\\\p{N}{1,4}", "\\p{N}{1,4}");
  check_refused("llama3", "\"behavior\":\"Isolated\"", "\"behavior\":\"Removed\"", "Split behavior 'Removed'");
  check_refused("qwen2", "\"type\":\"NFC\"", "\"type\":\"NFKC\"", "normalizer 'NFKC'");
  check_refused("llama2", "\"type\":\"Fuse\"", "\"type\":\"CTC\"", "decoder 'CTC'");
  check_refused("gpt2", "\"dropout\":null", "\"dropout\":0.1", "dropout");
  zt_tokenizer *t = NULL;
  ZT_CHECK_ERR(zt_tokenizer_hf("/nonexistent/zt_model", &t), ZT_STATUS_IO, "tokenizer.json");
}

int main(void) {
  ZT_RUN(test_gpt2);
  ZT_RUN(test_llama3);
  ZT_RUN(test_qwen2);
  ZT_RUN(test_smollm);
  ZT_RUN(test_llama2);
  ZT_RUN(test_mistral);
  ZT_RUN(test_llama2_added);
  ZT_RUN(test_special_tokens);
  ZT_RUN(test_roundtrip_bytes);
  ZT_RUN(test_tokenize_files);
  ZT_RUN(test_refused);
  zt__json_free(cases());
  return zt_test_finish();
}
