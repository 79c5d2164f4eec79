/* The Hugging Face tokenizer as read from tokenizer.json (hf_tokenizer.c) and used to encode and
 * decode (hf_encode.c). Internal to those two files. Invariants: every id below vocab_size
 * that has a token has its string in bytes; the vocabulary map holds the model's tokens only
 * (added tokens are matched on the text before it), keyed by what BPE sees (raw bytes for a
 * byte-level vocabulary, the token's UTF-8 otherwise); every merge's ids are in the map. */
#ifndef ZT_DATA_HF_TOKENIZER_H
#define ZT_DATA_HF_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer_internal.h"

#define ZT__HF_MAX_STEPS 8

typedef enum zt__hf_norm { ZT__HF_NORM_PREPEND, ZT__HF_NORM_REPLACE, ZT__HF_NORM_NFC } zt__hf_norm;
typedef enum zt__hf_pre {
  ZT__HF_PRE_SPLIT_GPT2,   /* Split with GPT-2's regex, or ByteLevel's use_regex */
  ZT__HF_PRE_SPLIT_LLAMA3, /* Split with Llama 3's regex */
  ZT__HF_PRE_SPLIT_QWEN2,  /* Split with Qwen2's regex */
  ZT__HF_PRE_BYTE_LEVEL,   /* ByteLevel: the optional prefix space, then GPT-2's regex if use_regex */
  ZT__HF_PRE_DIGITS,       /* Digits: numbers (\p{N}) apart from the rest, one by one or in runs */
  ZT__HF_PRE_METASPACE     /* Metaspace: ' ' -> the replacement, prepended by scheme, split or not */
} zt__hf_pre;
typedef enum zt__hf_dec {
  ZT__HF_DEC_BYTE_LEVEL, /* applied when the vocabulary is read: token strings are raw bytes */
  ZT__HF_DEC_REPLACE,
  ZT__HF_DEC_BYTE_FALLBACK,
  ZT__HF_DEC_FUSE,
  ZT__HF_DEC_STRIP,
  ZT__HF_DEC_METASPACE
} zt__hf_dec;
typedef enum zt__hf_prepend { ZT__HF_PREPEND_NEVER, ZT__HF_PREPEND_FIRST, ZT__HF_PREPEND_ALWAYS } zt__hf_prepend;

/* One step of the normalizer, pre-tokenizer or decoder; a and b are owned strings. */
typedef struct zt__hf_step {
  int kind; /* zt__hf_norm, zt__hf_pre or zt__hf_dec */
  char *a, *b; /* Prepend: a; Replace: a -> b; Metaspace: a, the replacement; Strip: a, the character */
  size_t alen, blen;
  bool flag; /* ByteLevel: add_prefix_space; Digits: individual_digits; Metaspace: split */
  bool use_regex; /* ByteLevel */
  zt__hf_prepend prepend; /* Metaspace */
  int start, stop; /* Strip */
} zt__hf_step;

typedef struct zt__hf_added {
  int32_t id;
  char *content; /* owned */
  size_t len;
  bool lstrip, rstrip, single_word;
  bool normalized; /* matched in the normalized text (else in the text as given) */
  uint8_t *match;  /* what is matched: the content, normalized where the token is (owned; NUL after) */
  size_t match_len;
} zt__hf_added;

typedef struct zt__hf_entry {
  int64_t off; /* into bytes */
  int32_t len;
  int32_t id; /* < 0: empty slot */
} zt__hf_entry;

typedef struct zt__hf_merge {
  uint64_t key; /* a << 32 | b */
  int32_t rank; /* < 0: empty slot */
  int32_t id;
} zt__hf_merge;

struct zt__hf_tokenizer {
  int32_t vocab_size;
  bool byte_level;
  uint8_t *bytes; /* every string below, back to back */
  size_t bytes_len, bytes_cap;
  int64_t *tok_off; /* id -> the string the decoder starts from; -1: no token */
  int32_t *tok_len;
  zt__hf_entry *map; /* model vocabulary: string -> id */
  size_t map_cap, map_n;
  zt__hf_merge *merges;
  size_t merge_cap;
  int32_t byte_id[256];     /* byte-level: the token of each byte (-1: none) */
  int32_t fallback_id[256]; /* byte fallback: <0xNN> (-1: none) */
  int32_t unk_id;           /* -1: none */
  bool fuse_unk, byte_fallback, ignore_merges;
  zt__hf_step norm[ZT__HF_MAX_STEPS], pre[ZT__HF_MAX_STEPS], dec[ZT__HF_MAX_STEPS];
  int n_norm, n_pre, n_dec;
  zt__hf_added *added;
  int n_added;
  int32_t bos_id, eos_id;
  int32_t prefix[4], suffix[4]; /* the post-processor's special tokens around one text */
  int n_prefix, n_suffix;
};

/* Applies the normalizer to s[0..n): *out is s itself (nothing changed, *owned NULL) or *owned, a
 * malloc'd copy (the caller frees it). False: out of memory. (hf_encode.c) */
bool zt__hf_normalize(const zt__hf_tokenizer *h, const uint8_t *s, size_t n, const uint8_t **out, size_t *out_n,
                      uint8_t **owned);
/* The id of s[0..len) in the model vocabulary, -1 if absent. */
int32_t zt__hf_lookup(const zt__hf_tokenizer *h, const uint8_t *s, size_t len);
/* The merge of (a, b): rank and merged id, or NULL. */
const zt__hf_merge *zt__hf_merge_find(const zt__hf_tokenizer *h, int32_t a, int32_t b);

#endif
