/* libFuzzer target: zerotrain token files ("ZTOK" header + ids). Oracle: a loaded file has
 * count >= 0 and every id in [0, vocab) (or >= 0 when the vocabulary is unknown). */
#include "fuzz_util.h"
#include "zt/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  const char *path = zt_fuzz_path("f.tok");
  zt_fuzz_write(path, data, size);
  zt_tokens *t = NULL;
  if (zt_tokens_load(path, &t) == ZT_OK) {
    if (!t || t->count < 0 || t->vocab_size < 0) zt_fuzz_fail("a bad zt_tokens");
    for (int64_t i = 0; i < t->count; i++)
      if (t->ids[i] < 0 || (t->vocab_size > 0 && t->ids[i] >= t->vocab_size))
        zt_fuzz_fail("id %d at %lld is outside the vocabulary %d", t->ids[i], (long long)i, t->vocab_size);
    zt_tokens_free(t);
  } else if (t) {
    zt_fuzz_fail("a failed load returned tokens");
  }
  return 0;
}
