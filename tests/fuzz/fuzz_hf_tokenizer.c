/* libFuzzer target: Hugging Face tokenizer folders. The input is tokenizer.json, a NUL byte,
 * then tokenizer_config.json (no NUL: there is no config). Oracle: a tokenizer that loads
 * encodes a fixed text (ASCII, other scripts, digits, white space, text that is not NFC, added
 * tokens, invalid UTF-8) with every id inside its vocabulary, decodes those ids, and encodes a
 * document that ends with its eos token where it has one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "zt/train.h"

static const char k_text[] = "Hello world's 123 DON'T  \n\t  caf\xc3\xa9 cafe\xcc\x81 \xe6\x97\xa5\xe6\x9c\xac "
                             "\xf0\x9f\x98\x80!? \xff\xfe\xc3 aaaaaaaa <s></s><|endoftext|> \xe2\x96\x81x \r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  const uint8_t *nul = memchr(data, 0, size);
  size_t n_tok = nul ? (size_t)(nul - data) : size;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", zt_fuzz_path("hf"));
  zt_fuzz_remove(dir);
  if (mkdir(dir, 0700)) zt_fuzz_fail("cannot make %s", dir);
  char tj[4200], tc[4200];
  snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
  snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
  zt_fuzz_write(tj, data, n_tok);
  if (nul) zt_fuzz_write(tc, nul + 1, size - n_tok - 1);
  zt_tokenizer *t = NULL;
  if (zt_tokenizer_hf(dir, &t) != ZT_OK) {
    if (t) zt_fuzz_fail("a failed load returned a tokenizer");
    return 0;
  }
  int32_t *ids = NULL, *doc = NULL;
  int64_t n = 0, nd = 0;
  size_t len = sizeof k_text - 1;
  if (zt_tokenizer_encode(t, k_text, len, &ids, &n)) zt_fuzz_fail("encode failed");
  int32_t vocab = zt_tokenizer_vocab_size(t);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab) zt_fuzz_fail("id %d outside the vocabulary %d", ids[i], vocab);
  char *back = NULL;
  size_t blen = 0;
  /* an id of the vocabulary may have no token (a gap): decode refuses it, which is fine */
  if (zt_tokenizer_decode(t, ids, n, &back, &blen) == ZT_OK && strlen(back) > blen) zt_fuzz_fail("decode length");
  if (zt_tokenizer_encode_document(t, k_text, len, &doc, &nd)) zt_fuzz_fail("encode_document failed");
  int32_t eos = zt_tokenizer_eos_id(t);
  if (eos >= 0 && (nd < 1 || doc[nd - 1] != eos)) zt_fuzz_fail("a document does not end with eos");
  free(back);
  free(ids);
  free(doc);
  zt_tokenizer_free(t);
  return 0;
}
