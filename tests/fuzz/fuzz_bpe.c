/* libFuzzer target: GPT-2 BPE files. The input is encoder.json, a NUL byte, then vocab.bpe
 * (no NUL: all of it is encoder.json and vocab.bpe is empty). Oracle: a tokenizer that loads
 * encodes a fixed text (ASCII, other scripts, digits, spaces, invalid UTF-8) and decodes it
 * back byte for byte, with every id inside its vocabulary. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "zt/train.h"

static const char k_text[] = "Hello world's 123 don't  \n\t  caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac "
                             "\xf0\x9f\x98\x80!? \xff\xfe\xc3 aaaaaaaa abab  \r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  const uint8_t *nul = memchr(data, 0, size);
  size_t n_enc = nul ? (size_t)(nul - data) : size;
  const char *enc = zt_fuzz_path("encoder.json"), *mer = zt_fuzz_path("vocab.bpe");
  zt_fuzz_write(enc, data, n_enc);
  zt_fuzz_write(mer, nul ? nul + 1 : data, nul ? size - n_enc - 1 : 0);
  zt_tokenizer *t = NULL;
  if (zt_tokenizer_gpt2(enc, mer, &t) != ZT_OK) {
    if (t) zt_fuzz_fail("a failed load returned a tokenizer");
    return 0;
  }
  int32_t *ids = NULL;
  int64_t n = 0;
  size_t len = sizeof k_text - 1;
  if (zt_tokenizer_encode(t, k_text, len, &ids, &n)) zt_fuzz_fail("encode failed");
  int32_t vocab = zt_tokenizer_vocab_size(t);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab) zt_fuzz_fail("id %d outside the vocabulary %d", ids[i], vocab);
  char *back = NULL;
  size_t blen = 0;
  if (zt_tokenizer_decode(t, ids, n, &back, &blen)) zt_fuzz_fail("decode of encode failed");
  if (blen != len || memcmp(back, k_text, len)) zt_fuzz_fail("decode(encode(text)) != text");
  free(back);
  free(ids);
  zt_tokenizer_free(t);
  return 0;
}
