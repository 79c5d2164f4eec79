/* Reading a Hugging Face model folder's tokenizer: tokenizer.json (model, normalizer,
 * pre-tokenizer, decoder, added tokens, post-processor) and tokenizer_config.json (bos, eos,
 * add_bos_token, add_eos_token). What is supported, everything else refused with a message
 * that names it:
 *   model          BPE: byte-level (GPT-2, Llama 3, Qwen2, SmolLM) or with byte fallback and
 *                  <0xNN> tokens (Llama 2, Mistral); unk_token, fuse_unk, ignore_merges; merges
 *                  as "a b" strings or [a, b] pairs; no dropout, no subword prefix or suffix
 *   normalizer     none, Prepend, Replace (of a string), NFC (src/data/unicode_nfc.c), Sequence
 *   pre-tokenizer  none, ByteLevel, Split with GPT-2's, Llama 3's or Qwen2's regex (Isolated,
 *                  not inverted; hf_pretokenizer.c), Digits, Metaspace, Sequence
 *   decoder        ByteLevel; or Replace (of a string), ByteFallback, Fuse, Strip, Metaspace,
 *                  and Sequences of them
 * Invariants as in hf_tokenizer.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "data/hf_tokenizer.h"
#include "io/buf.h"
#include "io/json.h"

#define ZT_HF_MAX_VOCAB (1 << 24)

static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
static const char QWEN2_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

/* ------------------------------------------------ the hash maps (hashes: tokenizer_internal.h) */

static zt__hf_entry *map_slot(const zt__hf_tokenizer *h, const uint8_t *s, size_t len) {
  size_t mask = h->map_cap - 1;
  for (size_t i = zt__hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
    zt__hf_entry *e = &h->map[i];
    if (e->id < 0 || ((size_t)e->len == len && memcmp(h->bytes + e->off, s, len) == 0)) return e;
  }
}

int32_t zt__hf_lookup(const zt__hf_tokenizer *h, const uint8_t *s, size_t len) {
  return h->map_cap ? map_slot(h, s, len)->id : -1;
}

static zt__hf_merge *merge_slot(const zt__hf_tokenizer *h, int32_t a, int32_t b) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  size_t mask = h->merge_cap - 1;
  for (size_t i = zt__hash_u64(key) & mask;; i = (i + 1) & mask) {
    zt__hf_merge *e = &h->merges[i];
    if (e->rank < 0 || e->key == key) return e;
  }
}

const zt__hf_merge *zt__hf_merge_find(const zt__hf_tokenizer *h, int32_t a, int32_t b) {
  if (!h->merge_cap) return NULL;
  const zt__hf_merge *e = merge_slot(h, a, b);
  return e->rank < 0 ? NULL : e;
}

/* ------------------------------------------------ loading state */
typedef struct loader {
  zt__hf_tokenizer *h;
  const char *path; /* tokenizer.json, for messages */
  int16_t cp_to_byte[ZT__BYTE_MAP_CPS];
} loader;

static zt_status oom(const loader *L) { return ZT_ERR(ZT_STATUS_OOM, "reading '%s': out of host memory", L->path); }

static zt_status bad(const loader *L, const char *what) {
  return ZT_ERR(ZT_STATUS_IO, "'%s': %s", L->path, what);
}

/* A tokenizer.json feature zerotrain does not implement. */
static zt_status unsupported(const loader *L, const char *part, const char *name) {
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "'%s': the %s '%s' is not supported (zerotrain reads BPE tokenizers: byte-level as GPT-2, Llama 3 "
                "and Qwen2, or with byte fallback as Llama 2 and Mistral; see docs/training.md)",
                L->path, part, name);
}

static bool reserve(zt__hf_tokenizer *h, size_t extra) {
  if (h->bytes && h->bytes_len + extra <= h->bytes_cap) return true; /* never NULL, even for "" */
  size_t cap = h->bytes_cap ? 2 * h->bytes_cap : 1 << 16;
  while (cap < h->bytes_len + extra) cap *= 2;
  uint8_t *p = realloc(h->bytes, cap);
  if (!p) return false;
  h->bytes = p, h->bytes_cap = cap;
  return true;
}

/* Appends what BPE sees of token string s to h->bytes: for a byte-level vocabulary each
 * character of GPT-2's byte map as its byte; otherwise (and for any character outside the map,
 * as added tokens have) its UTF-8. *in_map: every character was one of the map's. */
static bool put_token(const loader *L, const char *s, bool *in_map) {
  zt__hf_tokenizer *h = L->h;
  size_t n = strlen(s);
  if (!reserve(h, n)) return false;
  *in_map = true;
  if (!h->byte_level) {
    memcpy(h->bytes + h->bytes_len, s, n);
    h->bytes_len += n;
    return true;
  }
  for (size_t p = 0, l; p < n; p += l) {
    int32_t cp = zt__utf8_next((const uint8_t *)s + p, n - p, &l);
    if (cp >= 0 && cp < ZT__BYTE_MAP_CPS && L->cp_to_byte[cp] >= 0) {
      h->bytes[h->bytes_len++] = (uint8_t)L->cp_to_byte[cp];
    } else {
      *in_map = false;
      memcpy(h->bytes + h->bytes_len, s + p, l);
      h->bytes_len += l;
    }
  }
  return true;
}

static bool map_grow(zt__hf_tokenizer *h) {
  if (2 * (h->map_n + 1) <= h->map_cap) return true;
  size_t cap = h->map_cap ? 2 * h->map_cap : 1 << 12;
  zt__hf_entry *old = h->map, *e = malloc(cap * sizeof *e);
  if (!e) return false;
  for (size_t i = 0; i < cap; i++) e[i].id = -1;
  size_t old_cap = h->map_cap;
  h->map = e, h->map_cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].id >= 0) *map_slot(h, h->bytes + old[i].off, (size_t)old[i].len) = old[i];
  free(old);
  return true;
}

/* ------------------------------------------------ JSON helpers */
static const char *str_of(const zt__json *j) { return j && j->kind == ZT__JSON_STRING ? j->str : NULL; }
static bool is_null(const zt__json *j) { return !j || j->kind == ZT__JSON_NULL; }
static bool bool_of(const zt__json *j, bool dflt) { return j && j->kind == ZT__JSON_BOOL ? j->boolean : dflt; }
static const char *type_of(const zt__json *j) { return str_of(zt__json_get(j, "type")); }

static zt_status dup_string(const loader *L, const char *s, char **out, size_t *len) {
  *len = strlen(s);
  *out = malloc(*len + 1);
  if (!*out) return oom(L);
  memcpy(*out, s, *len + 1);
  return ZT_OK;
}

/* A "pattern" object: {"String": s} (or {"Regex": r} when regex is allowed, returned in *regex). */
static zt_status pattern_of(const loader *L, const zt__json *j, const char *part, const char **string,
                            const char **regex) {
  const zt__json *p = zt__json_get(j, "pattern");
  *string = str_of(zt__json_get(p, "String"));
  if (regex) *regex = str_of(zt__json_get(p, "Regex"));
  if (*string || (regex && *regex)) return ZT_OK;
  if (str_of(zt__json_get(p, "Regex"))) return unsupported(L, part, "Replace with a regex pattern");
  return bad(L, "a pattern that is neither {\"String\": ...} nor {\"Regex\": ...}");
}

static zt_status prepend_scheme(const loader *L, const zt__json *j, zt__hf_prepend *out) {
  const char *s = str_of(zt__json_get(j, "prepend_scheme"));
  if (!s) { /* tokenizers before 0.14: add_prefix_space */
    *out = bool_of(zt__json_get(j, "add_prefix_space"), true) ? ZT__HF_PREPEND_ALWAYS : ZT__HF_PREPEND_NEVER;
    return ZT_OK;
  }
  if (!strcmp(s, "always")) *out = ZT__HF_PREPEND_ALWAYS;
  else if (!strcmp(s, "first")) *out = ZT__HF_PREPEND_FIRST;
  else if (!strcmp(s, "never")) *out = ZT__HF_PREPEND_NEVER;
  else return unsupported(L, "Metaspace prepend_scheme", s);
  return ZT_OK;
}

static zt_status add_step(const loader *L, zt__hf_step *steps, int *n, const char *part, zt__hf_step **out) {
  if (*n >= ZT__HF_MAX_STEPS) return unsupported(L, part, "Sequence of more than 8 steps");
  *out = &steps[(*n)++];
  memset(*out, 0, sizeof **out);
  return ZT_OK;
}

/* ------------------------------------------------ normalizer, pre-tokenizer, decoder */
static zt_status parse_normalizer(const loader *L, const zt__json *j) {
  zt__hf_tokenizer *h = L->h;
  if (is_null(j)) return ZT_OK;
  const char *t = type_of(j);
  if (!t) return bad(L, "a normalizer without a \"type\"");
  if (!strcmp(t, "Sequence")) {
    const zt__json *list = zt__json_get(j, "normalizers");
    if (!list || list->kind != ZT__JSON_ARRAY) return bad(L, "a Sequence normalizer without \"normalizers\"");
    for (int i = 0; i < list->n; i++) ZT_TRY(parse_normalizer(L, &list->items[i]));
    return ZT_OK;
  }
  zt__hf_step *s = NULL;
  if (!strcmp(t, "Prepend")) {
    const char *p = str_of(zt__json_get(j, "prepend"));
    if (!p) return bad(L, "a Prepend normalizer without \"prepend\"");
    ZT_TRY(add_step(L, h->norm, &h->n_norm, "normalizer", &s));
    s->kind = ZT__HF_NORM_PREPEND;
    return dup_string(L, p, &s->a, &s->alen);
  }
  if (!strcmp(t, "Replace")) {
    const char *from, *to = str_of(zt__json_get(j, "content"));
    ZT_TRY(pattern_of(L, j, "normalizer", &from, NULL));
    if (!to || !from[0]) return bad(L, "a Replace normalizer without \"content\" or with an empty pattern");
    ZT_TRY(add_step(L, h->norm, &h->n_norm, "normalizer", &s));
    s->kind = ZT__HF_NORM_REPLACE;
    ZT_TRY(dup_string(L, from, &s->a, &s->alen));
    return dup_string(L, to, &s->b, &s->blen);
  }
  if (!strcmp(t, "NFC")) {
    ZT_TRY(add_step(L, h->norm, &h->n_norm, "normalizer", &s));
    s->kind = ZT__HF_NORM_NFC;
    return ZT_OK;
  }
  return unsupported(L, "normalizer", t);
}

static zt_status parse_pre_tokenizer(const loader *L, const zt__json *j) {
  zt__hf_tokenizer *h = L->h;
  if (is_null(j)) return ZT_OK;
  const char *t = type_of(j);
  if (!t) return bad(L, "a pre_tokenizer without a \"type\"");
  if (!strcmp(t, "Sequence")) {
    const zt__json *list = zt__json_get(j, "pretokenizers");
    if (!list || list->kind != ZT__JSON_ARRAY) return bad(L, "a Sequence pre_tokenizer without \"pretokenizers\"");
    for (int i = 0; i < list->n; i++) ZT_TRY(parse_pre_tokenizer(L, &list->items[i]));
    return ZT_OK;
  }
  zt__hf_step *s = NULL;
  if (!strcmp(t, "ByteLevel")) {
    ZT_TRY(add_step(L, h->pre, &h->n_pre, "pre_tokenizer", &s));
    s->kind = ZT__HF_PRE_BYTE_LEVEL;
    s->flag = bool_of(zt__json_get(j, "add_prefix_space"), true);
    s->use_regex = bool_of(zt__json_get(j, "use_regex"), true);
    h->byte_level = true;
    return ZT_OK;
  }
  if (!strcmp(t, "Split")) {
    const char *string, *regex;
    ZT_TRY(pattern_of(L, j, "pre_tokenizer", &string, &regex));
    const char *behavior = str_of(zt__json_get(j, "behavior"));
    if (bool_of(zt__json_get(j, "invert"), false)) return unsupported(L, "pre_tokenizer", "Split with invert true");
    if (!behavior || strcmp(behavior, "Isolated"))
      return unsupported(L, "Split behavior", behavior ? behavior : "(none)");
    int kind = -1;
    if (regex && !strcmp(regex, GPT2_PATTERN)) kind = ZT__HF_PRE_SPLIT_GPT2;
    else if (regex && !strcmp(regex, LLAMA3_PATTERN)) kind = ZT__HF_PRE_SPLIT_LLAMA3;
    else if (regex && !strcmp(regex, QWEN2_PATTERN)) kind = ZT__HF_PRE_SPLIT_QWEN2;
    if (kind < 0)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "'%s': the Split pre-tokenizer's pattern %s%.300s%s is not one zerotrain implements (it "
                    "implements by hand GPT-2's, Llama 3's and Qwen2's regexes: see src/data/hf_pretokenizer.c)",
                    L->path, regex ? "regex \"" : "string \"", regex ? regex : string, "\"");
    ZT_TRY(add_step(L, h->pre, &h->n_pre, "pre_tokenizer", &s));
    s->kind = kind;
    return ZT_OK;
  }
  if (!strcmp(t, "Digits")) {
    ZT_TRY(add_step(L, h->pre, &h->n_pre, "pre_tokenizer", &s));
    s->kind = ZT__HF_PRE_DIGITS;
    s->flag = bool_of(zt__json_get(j, "individual_digits"), false);
    return ZT_OK;
  }
  if (!strcmp(t, "Metaspace")) {
    const char *rep = str_of(zt__json_get(j, "replacement"));
    if (!rep || !rep[0]) return bad(L, "a Metaspace pre_tokenizer without \"replacement\"");
    ZT_TRY(add_step(L, h->pre, &h->n_pre, "pre_tokenizer", &s));
    s->kind = ZT__HF_PRE_METASPACE;
    s->flag = bool_of(zt__json_get(j, "split"), true);
    ZT_TRY(prepend_scheme(L, j, &s->prepend));
    return dup_string(L, rep, &s->a, &s->alen);
  }
  return unsupported(L, "pre_tokenizer", t);
}

static zt_status parse_decoder(const loader *L, const zt__json *j) {
  zt__hf_tokenizer *h = L->h;
  const char *t = type_of(j);
  if (!t) return bad(L, "a decoder without a \"type\"");
  if (!strcmp(t, "Sequence")) {
    const zt__json *list = zt__json_get(j, "decoders");
    if (!list || list->kind != ZT__JSON_ARRAY) return bad(L, "a Sequence decoder without \"decoders\"");
    for (int i = 0; i < list->n; i++) ZT_TRY(parse_decoder(L, &list->items[i]));
    return ZT_OK;
  }
  zt__hf_step *s = NULL;
  ZT_TRY(add_step(L, h->dec, &h->n_dec, "decoder", &s));
  if (!strcmp(t, "ByteLevel")) {
    s->kind = ZT__HF_DEC_BYTE_LEVEL;
  } else if (!strcmp(t, "Replace")) {
    const char *from, *to = str_of(zt__json_get(j, "content"));
    ZT_TRY(pattern_of(L, j, "decoder", &from, NULL));
    if (!to || !from[0]) return bad(L, "a Replace decoder without \"content\" or with an empty pattern");
    s->kind = ZT__HF_DEC_REPLACE;
    ZT_TRY(dup_string(L, from, &s->a, &s->alen));
    ZT_TRY(dup_string(L, to, &s->b, &s->blen));
  } else if (!strcmp(t, "ByteFallback")) {
    s->kind = ZT__HF_DEC_BYTE_FALLBACK;
  } else if (!strcmp(t, "Fuse")) {
    s->kind = ZT__HF_DEC_FUSE;
  } else if (!strcmp(t, "Strip")) {
    const char *c = str_of(zt__json_get(j, "content"));
    int64_t a = 0, b = 0;
    if (!c || !c[0] || !zt__json_i64(zt__json_get(j, "start"), &a) || !zt__json_i64(zt__json_get(j, "stop"), &b) ||
        a < 0 || b < 0 || a > 1 << 20 || b > 1 << 20)
      return bad(L, "a Strip decoder without \"content\", \"start\" and \"stop\"");
    s->kind = ZT__HF_DEC_STRIP;
    s->start = (int)a, s->stop = (int)b;
    ZT_TRY(dup_string(L, c, &s->a, &s->alen));
  } else if (!strcmp(t, "Metaspace")) {
    const char *rep = str_of(zt__json_get(j, "replacement"));
    if (!rep || !rep[0]) return bad(L, "a Metaspace decoder without \"replacement\"");
    s->kind = ZT__HF_DEC_METASPACE;
    ZT_TRY(prepend_scheme(L, j, &s->prepend));
    ZT_TRY(dup_string(L, rep, &s->a, &s->alen));
  } else {
    h->n_dec--;
    return unsupported(L, "decoder", t);
  }
  return ZT_OK;
}

/* ------------------------------------------------ the BPE model */
static zt_status check_model_options(const loader *L, const zt__json *m) {
  zt__hf_tokenizer *h = L->h;
  const char *t = type_of(m);
  if (t && strcmp(t, "BPE")) return unsupported(L, "model", t);
  if (!t && !zt__json_get(m, "merges")) return bad(L, "the model has no \"type\" and no \"merges\"");
  const zt__json *d = zt__json_get(m, "dropout");
  double dropout = 0;
  if (!is_null(d) && (!zt__json_f64(d, &dropout) || dropout != 0)) return unsupported(L, "BPE option", "dropout");
  const char *pre = str_of(zt__json_get(m, "continuing_subword_prefix"));
  const char *suf = str_of(zt__json_get(m, "end_of_word_suffix"));
  if (pre && pre[0]) return unsupported(L, "BPE option", "continuing_subword_prefix");
  if (suf && suf[0]) return unsupported(L, "BPE option", "end_of_word_suffix");
  h->byte_fallback = bool_of(zt__json_get(m, "byte_fallback"), false);
  h->fuse_unk = bool_of(zt__json_get(m, "fuse_unk"), false);
  h->ignore_merges = bool_of(zt__json_get(m, "ignore_merges"), false);
  return ZT_OK;
}

static void set_token(zt__hf_tokenizer *h, int64_t id, int64_t off, size_t len) {
  h->tok_off[id] = off, h->tok_len[id] = (int32_t)len;
}

static zt_status parse_vocab(const loader *L, const zt__json *vocab) {
  zt__hf_tokenizer *h = L->h;
  if (!vocab || vocab->kind != ZT__JSON_OBJECT || vocab->n == 0)
    return bad(L, "the model has no \"vocab\" object of token strings and ids");
  for (int i = 0; i < vocab->n; i++) {
    int64_t id;
    if (!zt__json_i64(&vocab->items[i], &id) || id < 0 || id >= ZT_HF_MAX_VOCAB) {
      char msg[200];
      snprintf(msg, sizeof msg, "the vocab's token \"%.60s\" has no id in [0, 16777216)", vocab->keys[i]);
      return bad(L, msg);
    }
    int64_t off = (int64_t)h->bytes_len;
    bool in_map;
    if (!put_token(L, vocab->keys[i], &in_map) || !map_grow(h)) return oom(L);
    size_t len = h->bytes_len - (size_t)off;
    if (id >= h->vocab_size) h->vocab_size = (int32_t)id + 1;
    /* a byte-level token with a character outside the byte map is unreachable by BPE (the
     * pre-tokenizer maps every byte into the map): kept for decoding only */
    if (!in_map) continue;
    zt__hf_entry *e = map_slot(h, h->bytes + off, len);
    if (e->id >= 0) {
      char msg[200];
      snprintf(msg, sizeof msg, "the vocab has token \"%.60s\" twice", vocab->keys[i]);
      return bad(L, msg);
    }
    *e = (zt__hf_entry){off, (int32_t)len, (int32_t)id};
    h->map_n++;
  }
  return ZT_OK;
}

/* ids -> strings, once vocab_size is known (vocab and added tokens both read). */
static zt_status fill_tokens(const loader *L, const zt__json *vocab, const zt__json *added) {
  zt__hf_tokenizer *h = L->h;
  h->tok_off = malloc((size_t)h->vocab_size * sizeof *h->tok_off);
  h->tok_len = malloc((size_t)h->vocab_size * sizeof *h->tok_len);
  if (!h->tok_off || !h->tok_len) return oom(L);
  for (int32_t i = 0; i < h->vocab_size; i++) h->tok_off[i] = -1, h->tok_len[i] = 0;
  /* the map's entries, then the unreachable ones written again */
  for (size_t k = 0; k < h->map_cap; k++)
    if (h->map[k].id >= 0) set_token(h, h->map[k].id, h->map[k].off, (size_t)h->map[k].len);
  for (int i = 0; i < vocab->n; i++) {
    int64_t id;
    (void)zt__json_i64(&vocab->items[i], &id);
    if (h->tok_off[id] >= 0) continue;
    int64_t off = (int64_t)h->bytes_len;
    bool in_map;
    if (!put_token(L, vocab->keys[i], &in_map)) return oom(L);
    set_token(h, id, off, h->bytes_len - (size_t)off);
  }
  /* an added token decodes as its content (the reference: its normalized content where it is
   * marked normalized): through the byte map when every character is in it (as the ByteLevel
   * decoder does), else as its UTF-8 */
  for (int i = 0; added && i < added->n; i++) {
    const zt__hf_added *a = &h->added[i];
    const char *text = a->normalized ? (const char *)a->match : a->content;
    size_t len = a->normalized ? a->match_len : a->len;
    int64_t off = (int64_t)h->bytes_len;
    bool in_map;
    if (!put_token(L, text, &in_map)) return oom(L);
    if (!in_map) {
      h->bytes_len = (size_t)off;
      if (!reserve(h, len)) return oom(L);
      memcpy(h->bytes + off, text, len);
      h->bytes_len += len;
    }
    set_token(h, a->id, off, h->bytes_len - (size_t)off);
  }
  return ZT_OK;
}

static zt_status parse_added(const loader *L, const zt__json *added) {
  zt__hf_tokenizer *h = L->h;
  if (is_null(added)) return ZT_OK;
  if (added->kind != ZT__JSON_ARRAY) return bad(L, "\"added_tokens\" is not an array");
  h->added = calloc((size_t)added->n + 1, sizeof *h->added);
  if (!h->added) return oom(L);
  for (int i = 0; i < added->n; i++) {
    const zt__json *a = &added->items[i];
    const char *content = str_of(zt__json_get(a, "content"));
    int64_t id;
    if (!content || !content[0] || !zt__json_i64(zt__json_get(a, "id"), &id) || id < 0 || id >= ZT_HF_MAX_VOCAB)
      return bad(L, "an added token without \"content\" or an \"id\" in [0, 16777216)");
    zt__hf_added *t = &h->added[h->n_added++];
    t->id = (int32_t)id;
    t->lstrip = bool_of(zt__json_get(a, "lstrip"), false);
    t->rstrip = bool_of(zt__json_get(a, "rstrip"), false);
    t->single_word = bool_of(zt__json_get(a, "single_word"), false);
    t->normalized = bool_of(zt__json_get(a, "normalized"), !bool_of(zt__json_get(a, "special"), false));
    ZT_TRY(dup_string(L, content, &t->content, &t->len));
    if (id >= h->vocab_size) h->vocab_size = (int32_t)id + 1;
  }
  return ZT_OK;
}

/* What each added token matches: its content, through the normalizer where the token is marked
 * normalized (the reference matches those in the normalized text, by their normalized content:
 * under Llama 2's Prepend("▁"), "▁x" matches "▁▁x"). */
static zt_status added_matches(const loader *L) {
  zt__hf_tokenizer *h = L->h;
  for (int i = 0; i < h->n_added; i++) {
    zt__hf_added *a = &h->added[i];
    const uint8_t *m = (const uint8_t *)a->content;
    size_t n = a->len;
    uint8_t *owned = NULL;
    if (a->normalized && !zt__hf_normalize(h, m, n, &m, &n, &owned)) return oom(L);
    if (n == 0) return bad(L, "an added token whose normalized content is empty");
    a->match = malloc(n + 1);
    if (!a->match) {
      free(owned);
      return oom(L);
    }
    memcpy(a->match, m, n);
    a->match[n] = '\0';
    a->match_len = n;
    free(owned);
  }
  return ZT_OK;
}

/* merges: ["a b", ...] (tokenizers before 0.20) or [["a", "b"], ...]. */
static zt_status parse_merges(const loader *L, const zt__json *merges) {
  zt__hf_tokenizer *h = L->h;
  if (!merges || merges->kind != ZT__JSON_ARRAY) return bad(L, "the model has no \"merges\" array");
  h->merge_cap = 16;
  while (h->merge_cap < 2 * ((size_t)merges->n + 1)) h->merge_cap *= 2;
  h->merges = malloc(h->merge_cap * sizeof *h->merges);
  if (!h->merges) return oom(L);
  for (size_t k = 0; k < h->merge_cap; k++) h->merges[k].rank = -1;
  size_t scratch = h->bytes_len;
  for (int r = 0; r < merges->n; r++) {
    const zt__json *m = &merges->items[r];
    char *parts[2] = {NULL, NULL};
    char *owned = NULL;
    if (m->kind == ZT__JSON_STRING) {
      char *sp = strchr(m->str, ' ');
      if (!sp || strchr(sp + 1, ' ') || sp == m->str || !sp[1]) goto malformed;
      size_t n = strlen(m->str);
      owned = malloc(n + 1);
      if (!owned) return oom(L);
      memcpy(owned, m->str, n + 1);
      owned[sp - m->str] = '\0';
      parts[0] = owned, parts[1] = owned + (sp - m->str) + 1;
    } else if (m->kind == ZT__JSON_ARRAY && m->n == 2 && m->items[0].kind == ZT__JSON_STRING &&
               m->items[1].kind == ZT__JSON_STRING) {
      parts[0] = m->items[0].str, parts[1] = m->items[1].str;
    } else {
      goto malformed;
    }
    int64_t off[2];
    size_t len[2];
    bool in_map;
    for (int p = 0; p < 2; p++) {
      off[p] = (int64_t)h->bytes_len;
      if (!put_token(L, parts[p], &in_map)) {
        free(owned);
        return oom(L);
      }
      len[p] = h->bytes_len - (size_t)off[p];
    }
    int32_t a = zt__hf_lookup(h, h->bytes + off[0], len[0]), b = zt__hf_lookup(h, h->bytes + off[1], len[1]);
    int32_t ab = zt__hf_lookup(h, h->bytes + off[0], len[0] + len[1]); /* the two are adjacent */
    h->bytes_len = scratch;
    if (a < 0 || b < 0 || ab < 0) {
      char msg[300];
      snprintf(msg, sizeof msg, "merge %d (\"%.60s\" \"%.60s\") %s not in the vocab", r, parts[0], parts[1],
               a >= 0 && b >= 0 ? "makes a token that is" : "uses a token that is");
      free(owned);
      return bad(L, msg);
    }
    free(owned);
    zt__hf_merge *e = merge_slot(h, a, b);
    /* a repeated pair takes its last rank, as the reference's map built from the list does */
    *e = (zt__hf_merge){(uint64_t)(uint32_t)a << 32 | (uint32_t)b, r, ab};
    continue;
  malformed:;
    char msg[120];
    snprintf(msg, sizeof msg, "merge %d is neither \"a b\" nor [\"a\", \"b\"]", r);
    return bad(L, msg);
  }
  return ZT_OK;
}

/* ------------------------------------------------ special tokens */
/* The id of a special token's text: an added token's, else the vocabulary's; -1 if neither. */
static int32_t special_id(const zt__hf_tokenizer *h, const char *content) {
  for (int i = 0; i < h->n_added; i++)
    if (!strcmp(h->added[i].content, content)) return h->added[i].id;
  /* in the vocabulary: its characters are ASCII in every tokenizer that has such a token */
  return zt__hf_lookup(h, (const uint8_t *)content, strlen(content));
}

/* The post-processor's TemplateProcessing "single" template: its special tokens before and after
 * the text ($A). Other post-processors add nothing zerotrain needs (ByteLevel only trims offsets). */
static zt_status parse_post_processor(const loader *L, const zt__json *j) {
  zt__hf_tokenizer *h = L->h;
  const char *t = type_of(j);
  if (!t) return ZT_OK;
  if (!strcmp(t, "Sequence")) {
    const zt__json *list = zt__json_get(j, "processors");
    for (int i = 0; list && list->kind == ZT__JSON_ARRAY && i < list->n; i++)
      ZT_TRY(parse_post_processor(L, &list->items[i]));
    return ZT_OK;
  }
  if (strcmp(t, "TemplateProcessing")) return ZT_OK;
  const zt__json *single = zt__json_get(j, "single"), *specials = zt__json_get(j, "special_tokens");
  if (!single || single->kind != ZT__JSON_ARRAY) return bad(L, "a TemplateProcessing without a \"single\" template");
  h->n_prefix = h->n_suffix = 0;
  bool after = false;
  for (int i = 0; i < single->n; i++) {
    const zt__json *it = &single->items[i];
    if (zt__json_get(it, "Sequence")) {
      after = true;
      continue;
    }
    const char *name = str_of(zt__json_get(zt__json_get(it, "SpecialToken"), "id"));
    const zt__json *ids = zt__json_get(zt__json_get(specials, name ? name : ""), "ids");
    if (!name || !ids || ids->kind != ZT__JSON_ARRAY) return bad(L, "a TemplateProcessing item that is not understood");
    for (int k = 0; k < ids->n; k++) {
      int64_t id;
      int *n = after ? &h->n_suffix : &h->n_prefix;
      if (!zt__json_i64(&ids->items[k], &id) || id < 0 || id >= h->vocab_size || *n >= 4)
        return bad(L, "a TemplateProcessing special token whose id is not in the vocabulary");
      (after ? h->suffix : h->prefix)[(*n)++] = (int32_t)id;
    }
  }
  return ZT_OK;
}

/* tokenizer_config.json's bos_token / eos_token: a string, an {"content": ...} object, or null. */
static zt_status config_token(const char *path, const zt__hf_tokenizer *h, const zt__json *cfg, const char *key,
                              int32_t *id) {
  const zt__json *v = zt__json_get(cfg, key);
  const char *content = str_of(v);
  if (!content) content = str_of(zt__json_get(v, "content"));
  if (!content) return ZT_OK;
  *id = special_id(h, content);
  if (*id < 0)
    return ZT_ERR(ZT_STATUS_IO, "'%s': %s \"%.60s\" is neither an added token nor in the vocab of tokenizer.json", path,
                  key, content);
  return ZT_OK;
}

static zt_status read_config(const char *dir, zt__hf_tokenizer *h) {
  char path[4200];
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f) return ZT_OK; /* optional: without it, no bos or eos */
  fclose(f);
  void *data = NULL;
  size_t size = 0;
  zt__json *cfg = NULL;
  ZT_TRY(zt__read_regular_file(path, ZT__READ_JSON_MAX, "tokenizer config", &data, &size));
  zt_status s = zt__json_parse(data, size, path, &cfg);
  free(data);
  if (s) return s;
  if (cfg->kind != ZT__JSON_OBJECT) s = ZT_ERR(ZT_STATUS_IO, "'%s' is not a JSON object", path);
  if (!s) s = config_token(path, h, cfg, "bos_token", &h->bos_id);
  if (!s) s = config_token(path, h, cfg, "eos_token", &h->eos_id);
  /* add_bos_token / add_eos_token, where given, decide (as transformers rebuilds the template) */
  const zt__json *ab = zt__json_get(cfg, "add_bos_token"), *ae = zt__json_get(cfg, "add_eos_token");
  if (!s && ab && ab->kind == ZT__JSON_BOOL) {
    h->n_prefix = 0;
    if (ab->boolean && h->bos_id >= 0) h->prefix[h->n_prefix++] = h->bos_id;
  }
  if (!s && ae && ae->kind == ZT__JSON_BOOL) {
    h->n_suffix = 0;
    if (ae->boolean && h->eos_id >= 0) h->suffix[h->n_suffix++] = h->eos_id;
  }
  zt__json_free(cfg);
  return s;
}

/* ------------------------------------------------ the whole */
static zt_status load(loader *L, const zt__json *root) {
  zt__hf_tokenizer *h = L->h;
  if (root->kind != ZT__JSON_OBJECT) return bad(L, "not a JSON object");
  const zt__json *model = zt__json_get(root, "model");
  if (!model || model->kind != ZT__JSON_OBJECT) return bad(L, "no \"model\" object");
  ZT_TRY(check_model_options(L, model));
  ZT_TRY(parse_normalizer(L, zt__json_get(root, "normalizer")));
  ZT_TRY(parse_pre_tokenizer(L, zt__json_get(root, "pre_tokenizer")));
  const zt__json *dec = zt__json_get(root, "decoder");
  if (is_null(dec)) return bad(L, "no decoder (zerotrain needs one to turn ids back into text)");
  ZT_TRY(parse_decoder(L, dec));
  bool dec_byte_level = false;
  for (int i = 0; i < h->n_dec; i++) dec_byte_level |= h->dec[i].kind == ZT__HF_DEC_BYTE_LEVEL;
  if (dec_byte_level != h->byte_level || (h->byte_level && h->n_dec != 1))
    return unsupported(L, "combination of pre-tokenizer and decoder",
                       h->byte_level ? "ByteLevel pre-tokenizer without the ByteLevel decoder alone"
                                     : "ByteLevel decoder without the ByteLevel pre-tokenizer");
  for (int i = 0; i < h->n_pre; i++)
    if (h->pre[i].kind == ZT__HF_PRE_BYTE_LEVEL && i != h->n_pre - 1)
      return unsupported(L, "pre_tokenizer", "ByteLevel before another pre-tokenizer (it must be the last)");
  ZT_TRY(parse_vocab(L, zt__json_get(model, "vocab")));
  const zt__json *added = zt__json_get(root, "added_tokens");
  ZT_TRY(parse_added(L, added));
  ZT_TRY(added_matches(L));
  ZT_TRY(parse_merges(L, zt__json_get(model, "merges")));
  ZT_TRY(fill_tokens(L, zt__json_get(model, "vocab"), added));
  const char *unk = str_of(zt__json_get(model, "unk_token"));
  h->unk_id = -1;
  if (unk && (h->unk_id = zt__hf_lookup(h, (const uint8_t *)unk, strlen(unk))) < 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "the unk_token \"%.60s\" is not in the vocab", unk);
    return bad(L, msg);
  }
  for (int b = 0; b < 256; b++) {
    uint8_t byte = (uint8_t)b;
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    h->byte_id[b] = h->byte_level ? zt__hf_lookup(h, &byte, 1) : -1;
    h->fallback_id[b] = h->byte_fallback ? zt__hf_lookup(h, (const uint8_t *)name, 6) : -1;
  }
  return parse_post_processor(L, zt__json_get(root, "post_processor"));
}

zt_status zt__hf_load(const char *dir, zt__hf_tokenizer **out) {
  *out = NULL;
  char path[4200];
  if (!dir) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokenizer_hf: the folder is NULL");
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  void *data = NULL;
  size_t size = 0;
  zt_status s = zt__read_regular_file(path, ZT__READ_JSON_MAX, "tokenizer file", &data, &size);
  if (s)
    return zt__error_prefix(s, "reading the Hugging Face tokenizer of '%s' (a folder with tokenizer.json, as a "
                               "model folder on the Hub has)", dir);
  zt__json *root = NULL;
  s = zt__json_parse(data, size, path, &root);
  free(data);
  if (s) return s;
  zt__hf_tokenizer *h = calloc(1, sizeof *h);
  if (!h) {
    zt__json_free(root);
    return ZT_ERR(ZT_STATUS_OOM, "zt_tokenizer_hf: out of host memory");
  }
  h->bos_id = h->eos_id = h->unk_id = -1;
  loader L = {h, path, {0}};
  int32_t byte_to_cp[256];
  zt__byte_map(byte_to_cp, L.cp_to_byte);
  s = load(&L, root);
  zt__json_free(root);
  if (!s) s = read_config(dir, h);
  if (s) {
    zt__hf_free(h);
    return s;
  }
  *out = h;
  return ZT_OK;
}

void zt__hf_free(zt__hf_tokenizer *h) {
  if (!h) return;
  zt__hf_step *lists[3] = {h->norm, h->pre, h->dec};
  int counts[3] = {h->n_norm, h->n_pre, h->n_dec};
  for (int l = 0; l < 3; l++)
    for (int i = 0; i < counts[l]; i++) free(lists[l][i].a), free(lists[l][i].b);
  for (int i = 0; i < h->n_added; i++) free(h->added[i].content), free(h->added[i].match);
  free(h->added);
  free(h->bytes);
  free(h->tok_off);
  free(h->tok_len);
  free(h->map);
  free(h->merges);
  free(h);
}

int32_t zt__hf_vocab_size(const zt__hf_tokenizer *h) { return h->vocab_size; }
int32_t zt__hf_bos_id(const zt__hf_tokenizer *h) { return h->bos_id; }
int32_t zt__hf_eos_id(const zt__hf_tokenizer *h) { return h->eos_id; }

void zt__hf_affixes(const zt__hf_tokenizer *h, const int32_t **prefix, int *n_prefix, const int32_t **suffix,
                    int *n_suffix) {
  *prefix = h->prefix, *n_prefix = h->n_prefix, *suffix = h->suffix, *n_suffix = h->n_suffix;
}
