/* What the tokenizer files of src/data share: UTF-8, the Unicode classes of the pre-tokenizer
 * regexes, GPT-2's byte-to-character map (src/data/tokenizer.c), NFC (src/data/unicode_nfc.c),
 * the pre-tokenizer splitters (src/data/hf_pretokenizer.c) and the Hugging Face tokenizer.json
 * tokenizer behind zt_tokenizer (src/data/hf_tokenizer.c). Internal to src/data. */
#ifndef ZT_DATA_TOKENIZER_INTERNAL_H
#define ZT_DATA_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zt/status.h"

/* ------------------------------------------------ Unicode (tokenizer.c) */
/* \p{L}, \p{N}, \s (Unicode White_Space), anything else; an invalid UTF-8 byte (cp < 0) is OTHER. */
typedef enum zt__cp_class { ZT__CP_LETTER, ZT__CP_NUMBER, ZT__CP_SPACE, ZT__CP_OTHER } zt__cp_class;
zt__cp_class zt__cp_classify(int32_t cp);
/* Strict UTF-8 decode of the character at s[0..n) (n >= 1): its code point, or -1 for a byte
 * that does not start a valid sequence (then *len is 1). */
int32_t zt__utf8_next(const uint8_t *s, size_t n, size_t *len);
/* Writes cp's UTF-8 (1 to 4 bytes) to o; returns the length. */
size_t zt__utf8_put(uint32_t cp, uint8_t *o);
/* GPT-2's reversible map from bytes to printable characters, and its inverse on code points
 * below ZT__BYTE_MAP_CPS (-1: not a character of the map). */
#define ZT__BYTE_MAP_CPS 324
void zt__byte_map(int32_t byte_to_cp[256], int16_t cp_to_byte[ZT__BYTE_MAP_CPS]);

/* ------------------------------------------------ the hash maps' hashes */
/* FNV-1a of a byte string, its high bits folded down (the maps index by the low bits). */
static inline uint64_t zt__hash_bytes(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}
/* A 64-bit key mixed (murmur3's finalizer). */
static inline uint64_t zt__hash_u64(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* ------------------------------------------------ NFC (unicode_nfc.c) */
/* False when s is NFC already for certain (no code point at or above U+0300). */
bool zt__nfc_maybe_changes(const uint8_t *s, size_t n);
/* s in Normalization Form C, in *out (malloc'd; the caller frees); bytes that are not UTF-8
 * pass through. */
ZT_NODISCARD zt_status zt__nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_n);

/* ------------------------------------------------ pre-tokenizer splitters (hf_pretokenizer.c)
 * Each returns the end of the piece that starts at s[i] (i < n; the end is > i), the regex's
 * leftmost match at i with the text's end at n. */
size_t zt__gpt2_pretoken_end(const uint8_t *s, size_t n, size_t i);
size_t zt__llama3_pretoken_end(const uint8_t *s, size_t n, size_t i);
size_t zt__qwen2_pretoken_end(const uint8_t *s, size_t n, size_t i);

/* ------------------------------------------------ tokenizer.json (hf_tokenizer.c) */
typedef struct zt__hf_tokenizer zt__hf_tokenizer;
ZT_NODISCARD zt_status zt__hf_load(const char *dir, zt__hf_tokenizer **out);
void zt__hf_free(zt__hf_tokenizer *h);
int32_t zt__hf_vocab_size(const zt__hf_tokenizer *h);
int32_t zt__hf_bos_id(const zt__hf_tokenizer *h);
int32_t zt__hf_eos_id(const zt__hf_tokenizer *h);
/* Text to ids without special tokens around it (as tokenizers' encode(s, add_special_tokens=False)),
 * appended to *ids (growing it; *n and *cap updated). */
ZT_NODISCARD zt_status zt__hf_encode(const zt__hf_tokenizer *h, const uint8_t *s, size_t len, int32_t **ids, int64_t *n,
                                     int64_t *cap);
/* The special tokens its post-processor (or tokenizer_config.json's add_bos_token/add_eos_token)
 * puts before and after a text. */
void zt__hf_affixes(const zt__hf_tokenizer *h, const int32_t **prefix, int *n_prefix, const int32_t **suffix,
                    int *n_suffix);
ZT_NODISCARD zt_status zt__hf_decode(const zt__hf_tokenizer *h, const int32_t *ids, int64_t n, char **text, size_t *len);

#endif
