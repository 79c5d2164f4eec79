/* zerotrain data: token files, tokenizers (bytes, GPT-2 byte-pair encoding, Hugging Face
 * tokenizer.json), the built-in default dataset and the loader that batches a token stream
 * (src/data/). Below the training layer; needs only tensors. */
#ifndef ZT_DATA_H
#define ZT_DATA_H

#include "zt/tensor.h"

/* ------------------------------------------------ token files (src/data/tokens.c)
 * Layout (little-endian): magic "ZTOK", u32 version (1), u32 token width in bytes (2 or
 * 4), u32 vocab size (0 if unknown), u64 token count, then the tokens. Loading checks
 * every field and the file length, and names the file and what was wrong. */
typedef struct zt_tokens {
  int32_t *ids; /* owned */
  int64_t count;
  int32_t vocab_size; /* from the header; 0 if unknown */
} zt_tokens;
ZT_API ZT_NODISCARD zt_status zt_tokens_load(const char *path, zt_tokens **out);
/* The vocabulary size a token file's header records (0: unknown), the header checked as by
 * zt_tokens_load without reading the tokens. */
ZT_API ZT_NODISCARD zt_status zt_tokens_vocab_size(const char *path, int32_t *vocab);
/* Written atomically (temp file, fsync, rename). width 0: 2 if every id < 65536, else 4. */
ZT_API ZT_NODISCARD zt_status zt_tokens_save(const char *path, const zt_tokens *t, int width);
ZT_API void zt_tokens_free(zt_tokens *t);
/* Error if any id is outside [0, vocab_size), naming the first one and its position. */
ZT_API ZT_NODISCARD zt_status zt_tokens_check_range(const zt_tokens *t, int32_t vocab_size);

/* ------------------------------------------------ tokenizers (src/data/tokenizer.c) */
typedef struct zt_tokenizer zt_tokenizer;
/* Byte-level: one token per byte, vocab 256. */
ZT_API ZT_NODISCARD zt_status zt_tokenizer_byte(zt_tokenizer **out);
/* GPT-2 byte-pair encoding from the user's encoder.json and vocab.bpe (merges). */
ZT_API ZT_NODISCARD zt_status zt_tokenizer_gpt2(const char *encoder_json_path, const char *merges_path, zt_tokenizer **out);
ZT_API void zt_tokenizer_free(zt_tokenizer *t);
ZT_API int32_t zt_tokenizer_vocab_size(const zt_tokenizer *t);
/* *ids is malloc'd (caller frees). */
ZT_API ZT_NODISCARD zt_status zt_tokenizer_encode(const zt_tokenizer *t, const char *text, size_t len, int32_t **ids, int64_t *n);
/* *text is malloc'd and NUL-terminated (caller frees). */
ZT_API ZT_NODISCARD zt_status zt_tokenizer_decode(const zt_tokenizer *t, const int32_t *ids, int64_t n, char **text, size_t *len);
/* A Hugging Face tokenizer from a model folder (src/data/hf_tokenizer.c, hf_encode.c,
 * hf_pretokenizer.c, unicode_nfc.c): dir/tokenizer.json, and dir/tokenizer_config.json when there is one (bos_token,
 * eos_token, add_bos_token, add_eos_token). BPE, byte-level (GPT-2, Llama 3, Qwen2, SmolLM) or with
 * byte fallback (Llama 2, Mistral); anything else in the file is refused, naming it
 * (docs/training.md lists what is read). zt_tokenizer_encode gives the ids of the `tokenizers`
 * package's encode(text, add_special_tokens=False), added tokens in the text included;
 * zt_tokenizer_decode its decode(ids) (special tokens written out), except that the byte fallback
 * writes bytes as they are where the reference writes U+FFFD for invalid UTF-8. */
ZT_API ZT_NODISCARD zt_status zt_tokenizer_hf(const char *dir, zt_tokenizer **out);
/* The bos and eos tokens of tokenizer_config.json; -1 where there is none (and for the byte and
 * GPT-2 tokenizers). */
ZT_API int32_t zt_tokenizer_bos_id(const zt_tokenizer *t);
ZT_API int32_t zt_tokenizer_eos_id(const zt_tokenizer *t);
/* One document as training data: for a Hugging Face tokenizer, the special tokens it puts before a
 * text (its bos, where add_bos_token or the post-processor's template adds it), the text's ids, those
 * it puts after, and the eos token (unless that was the last already); for the byte and GPT-2
 * tokenizers, zt_tokenizer_encode. *ids is malloc'd (caller frees). */
ZT_API ZT_NODISCARD zt_status zt_tokenizer_encode_document(const zt_tokenizer *t, const char *text, size_t len, int32_t **ids, int64_t *n);
/* Tokenize text files into one token file (src/data/tokenize_files.c), each file one document
 * (zt_tokenizer_encode_document), in the order given; a folder stands for the regular files under
 * it, at any depth, in byte order of their paths (names starting with '.' skipped). n_docs and
 * n_tokens (either may be NULL) receive the counts. */
ZT_API ZT_NODISCARD zt_status zt_tokenize_files(const zt_tokenizer *t, const char *const *paths, int n_paths, const char *out_path,
                                                int64_t *n_docs, int64_t *n_tokens);
/* zt_tokenize_files of one file. */
ZT_API ZT_NODISCARD zt_status zt_tokenize_file(const zt_tokenizer *t, const char *text_path, const char *out_path);

/* ------------------------------------------------ default data (src/data/default_data.c) */
/* The built-in dataset: needs no download and no file (see README for what it is),
 * byte-level tokens, split into train and validation parts. */
ZT_API ZT_NODISCARD zt_status zt_default_dataset(zt_tokens **train, zt_tokens **val);

/* ------------------------------------------------ batching (src/data/loader.c) */
typedef struct zt_loader_config {
  int64_t batch; /* rows per step on this rank */
  int64_t seq;   /* T */
  uint64_t seed;
  int rank, world; /* each rank reads a disjoint part of every global batch */
} zt_loader_config;
/* Position in the stream of batches, for resuming. */
typedef struct zt_loader_pos {
  uint64_t epoch;
  int64_t index; /* next window in this epoch's shuffled order */
} zt_loader_pos;
typedef struct zt_loader zt_loader;
/* Windows of seq+1 tokens at multiples of seq, shuffled per epoch with the seed.
 * tokens is borrowed. */
ZT_API ZT_NODISCARD zt_status zt_loader_new(const zt_tokens *tokens, const zt_loader_config *c, zt_loader **out);
ZT_API void zt_loader_free(zt_loader *l);
/* Fill x and y (B, T) i32 (y = x shifted by one). */
ZT_API ZT_NODISCARD zt_status zt_loader_next(zt_loader *l, zt_tensor *x, zt_tensor *y);
ZT_API zt_loader_pos zt_loader_get_pos(const zt_loader *l);
ZT_API ZT_NODISCARD zt_status zt_loader_set_pos(zt_loader *l, zt_loader_pos pos);
ZT_API int64_t zt_loader_windows_per_epoch(const zt_loader *l);

#endif
