/* Encoding and decoding with a tokenizer.json tokenizer (hf_tokenizer.c reads it), in the order
 * the `tokenizers` package runs its stages: the added tokens are cut out of the text first
 * (leftmost, longest; those marked normalized out of the normalized text), then each stretch
 * between them is normalized, pre-tokenized (each pre-tokenizer splitting the pieces of the one
 * before) and BPE-encoded piece by piece. BPE
 * merges as the reference's word merge does: the pair of lowest rank, leftmost among equals,
 * one merge at a time (a heap over a linked list of symbols, O(n log n) for a piece of n
 * characters: Llama 2's pieces are whole texts). Decoding runs the decoder's steps over the
 * token strings. Where zerotrain differs: bytes that are not valid UTF-8 (the reference takes
 * Unicode strings only) are one character each, and the ByteFallback decoder writes the bytes
 * as they are where the reference writes U+FFFD for an invalid sequence. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "data/hf_tokenizer.h"

/* ------------------------------------------------ output and scratch */
typedef struct sym {
  int32_t id, prev, next;
  bool alive;
} sym;
typedef struct heap_item {
  int32_t rank, pos, id;
} heap_item;

#define ZT_HF_CACHE_MAX_LEN 255
#define ZT_HF_CACHE_MAX_ENTRIES (1 << 20)

typedef struct cache_entry {
  uint64_t hash;
  const uint8_t *key; /* into the text being encoded (only pieces that are unchanged slices of it) */
  uint32_t len;
  int32_t n;   /* ids; < 0: empty slot */
  int64_t off; /* into cache ids */
} cache_entry;

typedef struct enc {
  const zt__hf_tokenizer *h;
  int32_t **ids;
  int64_t *n, *cap;
  sym *syms;
  heap_item *heap;
  size_t syms_cap, heap_cap;
  const uint8_t *text; /* the whole text: pieces inside it may be cached */
  size_t text_len;
  cache_entry *cache;
  size_t cache_cap, cache_n;
  int32_t *cache_ids;
  size_t cache_ids_len, cache_ids_cap;
  bool first_raw[256], first_norm[256]; /* bytes that begin an added token of each pass */
  bool oom;
} enc;

static bool push_id(enc *e, int32_t id) {
  if (*e->n >= *e->cap) {
    int64_t cap = *e->cap ? 2 * *e->cap : 1024;
    int32_t *p = realloc(*e->ids, (size_t)cap * sizeof *p);
    if (!p) return e->oom = true, false;
    *e->ids = p, *e->cap = cap;
  }
  (*e->ids)[(*e->n)++] = id;
  return true;
}

/* ------------------------------------------------ BPE of one piece */
static bool heap_less(heap_item a, heap_item b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(heap_item *hp, size_t *n, heap_item it) {
  size_t i = (*n)++;
  hp[i] = it;
  while (i > 0 && heap_less(hp[i], hp[(i - 1) / 2])) {
    heap_item t = hp[i];
    hp[i] = hp[(i - 1) / 2], hp[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static heap_item heap_pop(heap_item *hp, size_t *n) {
  heap_item top = hp[0];
  hp[0] = hp[--(*n)];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && heap_less(hp[l], hp[m])) m = l;
    if (r < *n && heap_less(hp[r], hp[m])) m = r;
    if (m == i) break;
    heap_item t = hp[i];
    hp[i] = hp[m], hp[m] = t;
    i = m;
  }
  return top;
}

static bool add_sym(enc *e, size_t *ns, int32_t id) {
  if (*ns >= e->syms_cap) {
    size_t cap = e->syms_cap ? 2 * e->syms_cap : 256;
    sym *p = realloc(e->syms, cap * sizeof *p);
    heap_item *q = realloc(e->heap, cap * 3 * sizeof *q); /* pushes: n - 1 first, then two per merge */
    if (p) e->syms = p;
    if (q) e->heap = q;
    if (!p || !q) return e->oom = true, false;
    e->syms_cap = cap, e->heap_cap = 3 * cap;
  }
  e->syms[*ns] = (sym){id, (int32_t)*ns - 1, (int32_t)*ns + 1, true};
  (*ns)++;
  return true;
}

static void push_pair(enc *e, size_t *nh, int32_t pos) {
  const sym *a = &e->syms[pos];
  if (a->next < 0) return;
  const zt__hf_merge *m = zt__hf_merge_find(e->h, a->id, e->syms[a->next].id);
  if (m) heap_push(e->heap, nh, (heap_item){m->rank, pos, m->id});
}

/* The initial symbols of a piece (the reference's BPE::merge_word): each character's token;
 * a character without one becomes its <0xNN> byte tokens (byte fallback), else the unknown
 * token (consecutive ones fused into one with fuse_unk), else nothing. */
static bool initial_syms(enc *e, const uint8_t *p, size_t len, size_t *ns) {
  const zt__hf_tokenizer *h = e->h;
  int32_t unk = -1; /* an unknown token waiting to be added */
  for (size_t i = 0, l; i < len; i += l) {
    int32_t id;
    if (h->byte_level) {
      l = 1, id = h->byte_id[p[i]];
    } else {
      (void)zt__utf8_next(p + i, len - i, &l);
      id = zt__hf_lookup(h, p + i, l);
    }
    if (id >= 0) {
      if (unk >= 0 && !add_sym(e, ns, unk)) return false;
      unk = -1;
      if (!add_sym(e, ns, id)) return false;
      continue;
    }
    if (h->byte_fallback) {
      bool all = true;
      for (size_t k = 0; k < l; k++) all &= h->fallback_id[p[i + k]] >= 0;
      if (all) {
        for (size_t k = 0; k < l; k++)
          if (!add_sym(e, ns, h->fallback_id[p[i + k]])) return false;
        continue; /* as the reference: a waiting unknown token is added after these */
      }
    }
    if (h->unk_id >= 0) {
      if (unk >= 0 && !h->fuse_unk && !add_sym(e, ns, unk)) return false;
      unk = h->unk_id;
    }
  }
  if (unk >= 0 && !add_sym(e, ns, unk)) return false;
  return true;
}

static bool bpe_piece(enc *e, const uint8_t *p, size_t len) {
  const zt__hf_tokenizer *h = e->h;
  if (h->ignore_merges) {
    int32_t id = zt__hf_lookup(h, p, len);
    if (id >= 0) return push_id(e, id);
  }
  size_t ns = 0, nh = 0;
  if (!initial_syms(e, p, len, &ns)) return false;
  if (ns == 0) return true;
  e->syms[ns - 1].next = -1;
  for (size_t i = 0; i + 1 < ns; i++) push_pair(e, &nh, (int32_t)i);
  while (nh > 0) {
    heap_item top = heap_pop(e->heap, &nh);
    sym *a = &e->syms[top.pos];
    if (!a->alive || a->next < 0) continue;
    sym *b = &e->syms[a->next];
    const zt__hf_merge *m = zt__hf_merge_find(h, a->id, b->id);
    if (!m || m->id != top.id) continue; /* stale: a neighbour changed since it was pushed */
    a->id = top.id;
    b->alive = false;
    a->next = b->next;
    if (a->next >= 0) e->syms[a->next].prev = top.pos;
    if (a->prev >= 0) push_pair(e, &nh, a->prev);
    push_pair(e, &nh, top.pos);
  }
  for (int32_t i = 0; i >= 0; i = e->syms[i].next)
    if (!push_id(e, e->syms[i].id)) return false;
  return true;
}

/* A piece's ids, through a cache of the pieces that are slices of the text (the common case:
 * byte-level pre-tokenizers leave the text as it is). */
static bool model_piece(enc *e, const uint8_t *p, size_t len) {
  if (len == 0) return true;
  bool cacheable = e->cache && len <= ZT_HF_CACHE_MAX_LEN && p >= e->text && p + len <= e->text + e->text_len;
  if (!cacheable) return bpe_piece(e, p, len);
  uint64_t hs = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++) hs = (hs ^ p[i]) * 1099511628211ull;
  size_t mask = e->cache_cap - 1, i = (hs ^ (hs >> 29)) & mask;
  for (;; i = (i + 1) & mask) {
    cache_entry *c = &e->cache[i];
    if (c->n < 0) break;
    if (c->hash == hs && c->len == len && memcmp(c->key, p, len) == 0) {
      for (int32_t k = 0; k < c->n; k++)
        if (!push_id(e, e->cache_ids[c->off + k])) return false;
      return true;
    }
  }
  int64_t start = *e->n;
  if (!bpe_piece(e, p, len)) return false;
  int64_t cnt = *e->n - start;
  if (e->cache_n >= ZT_HF_CACHE_MAX_ENTRIES || 2 * (e->cache_n + 1) > e->cache_cap) return true; /* full: no more */
  if (e->cache_ids_len + (size_t)cnt > e->cache_ids_cap) {
    size_t cap = e->cache_ids_cap ? 2 * e->cache_ids_cap : 1 << 14;
    while (cap < e->cache_ids_len + (size_t)cnt) cap *= 2;
    int32_t *q = realloc(e->cache_ids, cap * sizeof *q);
    if (!q) return true; /* the cache only saves time */
    e->cache_ids = q, e->cache_ids_cap = cap;
  }
  memcpy(e->cache_ids + e->cache_ids_len, *e->ids + start, (size_t)cnt * sizeof **e->ids);
  e->cache[i] = (cache_entry){hs, p, (uint32_t)len, (int32_t)cnt, (int64_t)e->cache_ids_len};
  e->cache_ids_len += (size_t)cnt, e->cache_n++;
  return true;
}

/* ------------------------------------------------ pre-tokenizers */
static bool starts_with(const uint8_t *s, size_t n, const char *p, size_t pn) {
  return n >= pn && memcmp(s, p, pn) == 0;
}

static bool pre_tokenize(enc *e, const uint8_t *s, size_t n, int step, bool at_start);

typedef size_t (*split_fn)(const uint8_t *s, size_t n, size_t i);

static bool split_each(enc *e, const uint8_t *s, size_t n, int step, bool at_start, split_fn f) {
  for (size_t i = 0; i < n;) {
    size_t j = f(s, n, i);
    if (!pre_tokenize(e, s + i, j - i, step + 1, at_start && i == 0)) return false;
    i = j;
  }
  return true;
}

/* Digits: numbers (Rust's char::is_numeric, \p{N}: any script's digits, superscripts, Roman
 * numerals...) apart from the rest, one by one or in runs. */
static size_t digits_end(const uint8_t *s, size_t n, size_t i, bool individual) {
  size_t l;
  bool digit = zt__cp_classify(zt__utf8_next(s + i, n - i, &l)) == ZT__CP_NUMBER;
  size_t j = i + l;
  if (digit && individual) return j;
  while (j < n && (zt__cp_classify(zt__utf8_next(s + j, n - j, &l)) == ZT__CP_NUMBER) == digit) j += l;
  return j;
}

/* Metaspace: ' ' -> the replacement; the replacement prepended (scheme "always", or "first"
 * for the stretch at the text's start) unless the piece starts with it; then, with split,
 * pieces that each start at a replacement (the delimiter merged with what follows it). */
static bool metaspace(enc *e, const zt__hf_step *st, const uint8_t *s, size_t n, int step, bool at_start) {
  size_t spaces = 0;
  for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
  uint8_t *buf = malloc(n + (spaces + 1) * st->alen + 1);
  if (!buf) return e->oom = true, false;
  size_t m = 0;
  bool prepend = st->prepend == ZT__HF_PREPEND_ALWAYS || (st->prepend == ZT__HF_PREPEND_FIRST && at_start);
  bool starts = n > 0 && (s[0] == ' ' || starts_with(s, n, st->a, st->alen));
  if (prepend && !starts) memcpy(buf, st->a, st->alen), m += st->alen;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == ' ') memcpy(buf + m, st->a, st->alen), m += st->alen;
    else buf[m++] = s[i];
  }
  bool ok = true;
  if (!st->flag) {
    ok = pre_tokenize(e, buf, m, step + 1, at_start);
  } else {
    for (size_t i = 0; i < m && ok;) {
      size_t j = i + (starts_with(buf + i, m - i, st->a, st->alen) ? st->alen : 1);
      while (j < m && !starts_with(buf + j, m - j, st->a, st->alen)) j++;
      ok = pre_tokenize(e, buf + i, j - i, step + 1, at_start && i == 0);
      i = j;
    }
  }
  free(buf);
  return ok;
}

/* Runs pre-tokenizer `step` on piece s[0..n), each resulting piece through the next step, and
 * the pieces of the last into BPE. at_start: the piece begins at the text's first byte. */
static bool pre_tokenize(enc *e, const uint8_t *s, size_t n, int step, bool at_start) {
  const zt__hf_tokenizer *h = e->h;
  if (n == 0) return true;
  if (step == h->n_pre) return model_piece(e, s, n);
  const zt__hf_step *st = &h->pre[step];
  switch ((zt__hf_pre)st->kind) {
  case ZT__HF_PRE_SPLIT_GPT2: return split_each(e, s, n, step, at_start, zt__gpt2_pretoken_end);
  case ZT__HF_PRE_SPLIT_LLAMA3: return split_each(e, s, n, step, at_start, zt__llama3_pretoken_end);
  case ZT__HF_PRE_SPLIT_QWEN2: return split_each(e, s, n, step, at_start, zt__qwen2_pretoken_end);
  case ZT__HF_PRE_DIGITS:
    for (size_t i = 0; i < n;) {
      size_t j = digits_end(s, n, i, st->flag);
      if (!pre_tokenize(e, s + i, j - i, step + 1, at_start && i == 0)) return false;
      i = j;
    }
    return true;
  case ZT__HF_PRE_METASPACE: return metaspace(e, st, s, n, step, at_start);
  case ZT__HF_PRE_BYTE_LEVEL: {
    uint8_t *buf = NULL;
    if (st->flag && s[0] != ' ') { /* add_prefix_space */
      if (!(buf = malloc(n + 1))) return e->oom = true, false;
      buf[0] = ' ';
      memcpy(buf + 1, s, n);
      s = buf, n++;
    }
    bool ok = st->use_regex ? split_each(e, s, n, step, at_start, zt__gpt2_pretoken_end)
                            : pre_tokenize(e, s, n, step + 1, at_start);
    free(buf);
    return ok;
  }
  }
  return true;
}

/* ------------------------------------------------ normalizers */
bool zt__hf_normalize(const zt__hf_tokenizer *h, const uint8_t *s, size_t n, const uint8_t **out, size_t *out_n,
                      uint8_t **owned) {
  *out = s, *out_n = n, *owned = NULL;
  for (int k = 0; k < h->n_norm; k++) {
    const zt__hf_step *st = &h->norm[k];
    const uint8_t *cur = *out;
    size_t cn = *out_n, m = 0;
    uint8_t *buf = NULL;
    if (st->kind == ZT__HF_NORM_NFC) {
      if (!zt__nfc_maybe_changes(cur, cn)) continue;
      if (zt__nfc(cur, cn, &buf, &m)) goto oom;
    } else if (st->kind == ZT__HF_NORM_PREPEND) {
      if (cn == 0) continue;
      if (!(buf = malloc(cn + st->alen))) goto oom;
      memcpy(buf, st->a, st->alen);
      memcpy(buf + st->alen, cur, cn);
      m = cn + st->alen;
    } else { /* Replace, left to right, occurrences not overlapping */
      size_t hits = 0;
      for (size_t i = 0; i + st->alen <= cn;)
        if (memcmp(cur + i, st->a, st->alen) == 0) hits++, i += st->alen;
        else i++;
      if (!hits) continue;
      if (!(buf = malloc(cn + hits * st->blen + 1))) goto oom;
      for (size_t i = 0; i < cn;) {
        if (i + st->alen <= cn && memcmp(cur + i, st->a, st->alen) == 0) {
          memcpy(buf + m, st->b, st->blen), m += st->blen, i += st->alen;
        } else {
          buf[m++] = cur[i++];
        }
      }
    }
    free(*owned);
    *owned = buf, *out = buf, *out_n = m;
  }
  return true;
oom:
  free(*owned);
  *owned = NULL;
  return false;
}

/* ------------------------------------------------ added tokens */
/* A word character for single_word added tokens: letters, numbers and '_'. The reference uses the
 * regex crate's \w, which also counts combining marks and connector punctuation and not the
 * numbers that are not digits (², ½): an added token marked single_word next to one of those may
 * be matched where the reference leaves it (or the other way round). */
static bool is_word_cp(int32_t c) {
  zt__cp_class k = zt__cp_classify(c);
  return k == ZT__CP_LETTER || k == ZT__CP_NUMBER || c == '_';
}

/* The last code point before s[i] (i > 0), in a text that may not be valid UTF-8. */
static int32_t cp_before(const uint8_t *s, size_t i) {
  size_t j = i - 1, l;
  while (j > 0 && i - j < 4 && (s[j] & 0xC0) == 0x80) j--;
  int32_t c = zt__utf8_next(s + j, i - j, &l);
  return j + l == i ? c : -1;
}

/* The leftmost, longest added token of the pass (normalized or not) in s[from..n): its index
 * and start, or -1. */
static int find_added(const zt__hf_tokenizer *h, const bool first[256], bool normalized, const uint8_t *s, size_t n,
                      size_t from, size_t *start) {
  for (size_t i = from; i < n; i++) {
    if (!first[s[i]]) continue;
    int best = -1;
    for (int k = 0; k < h->n_added; k++) {
      const zt__hf_added *a = &h->added[k];
      if (a->normalized != normalized || a->match[0] != s[i] || a->match_len > n - i ||
          memcmp(s + i, a->match, a->match_len))
        continue;
      if (best < 0 || a->match_len > h->added[best].match_len) best = k;
    }
    if (best >= 0) return *start = i, best;
  }
  return -1;
}

static bool normalize_stretch(enc *e, const uint8_t *s, size_t n, bool at_start);

/* The reference's two passes over the added tokens: those not normalized are cut out of the text
 * as given, each stretch between them is normalized, and those normalized are cut out of that;
 * what is left goes to the pre-tokenizers. at_start: s begins at the text's first byte. */
static bool added_pass(enc *e, const uint8_t *s, size_t len, bool normalized, bool at_start) {
  const zt__hf_tokenizer *h = e->h;
  const bool *first = normalized ? e->first_norm : e->first_raw;
  size_t done = 0; /* text before this is encoded */
  bool ok = true;
  for (size_t i = 0; ok && i < len;) {
    size_t at;
    int k = find_added(h, first, normalized, s, len, i, &at);
    if (k < 0) break;
    const zt__hf_added *a = &h->added[k];
    size_t start = at, stop = at + a->match_len, l;
    i = stop;
    if (a->single_word) {
      bool word_before = start > 0 && is_word_cp(cp_before(s, start));
      bool word_after = stop < len && is_word_cp(zt__utf8_next(s + stop, len - stop, &l));
      if (word_before || word_after) continue;
    }
    if (a->lstrip)
      while (start > done && zt__cp_classify(cp_before(s, start)) == ZT__CP_SPACE) {
        size_t j = start - 1;
        while (j > done && (s[j] & 0xC0) == 0x80) j--;
        start = j;
      }
    if (a->rstrip)
      while (stop < len && zt__cp_classify(zt__utf8_next(s + stop, len - stop, &l)) == ZT__CP_SPACE) stop += l;
    ok = (normalized ? pre_tokenize(e, s + done, start - done, 0, at_start && done == 0)
                     : normalize_stretch(e, s + done, start - done, at_start && done == 0)) &&
         push_id(e, a->id);
    done = i = stop;
  }
  if (!ok) return false;
  return normalized ? pre_tokenize(e, s + done, len - done, 0, at_start && done == 0)
                    : normalize_stretch(e, s + done, len - done, at_start && done == 0);
}

static bool normalize_stretch(enc *e, const uint8_t *s, size_t n, bool at_start) {
  if (n == 0) return true;
  const uint8_t *t;
  size_t tn;
  uint8_t *owned;
  if (!zt__hf_normalize(e->h, s, n, &t, &tn, &owned)) return e->oom = true, false;
  bool ok = added_pass(e, t, tn, true, at_start);
  free(owned);
  return ok;
}

zt_status zt__hf_encode(const zt__hf_tokenizer *h, const uint8_t *s, size_t len, int32_t **ids, int64_t *n,
                        int64_t *cap) {
  enc e = {.h = h, .ids = ids, .n = n, .cap = cap, .text = s, .text_len = len};
  e.cache_cap = 1 << 12;
  if ((e.cache = malloc(e.cache_cap * sizeof *e.cache)))
    for (size_t i = 0; i < e.cache_cap; i++) e.cache[i].n = -1;
  /* bytes that begin an added token, to skip the rest quickly */
  for (int k = 0; k < h->n_added; k++)
    (h->added[k].normalized ? e.first_norm : e.first_raw)[h->added[k].match[0]] = true;
  bool ok = added_pass(&e, s, len, false, true);
  free(e.syms);
  free(e.heap);
  free(e.cache);
  free(e.cache_ids);
  if (!ok) return ZT_ERR(ZT_STATUS_OOM, "zt_tokenizer_encode: out of host memory");
  return ZT_OK;
}

/* ------------------------------------------------ decoding */
/* The token strings as the decoder's steps go: pieces (offset, length) of one buffer. */
typedef struct toks {
  uint8_t *buf;
  size_t len, cap;
  size_t *off, *n;
  int64_t count;
} toks;

static bool toks_put(toks *t, const void *p, size_t n) {
  if (n == 0) return true;
  if (t->len + n > t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 256;
    while (cap < t->len + n) cap *= 2;
    uint8_t *q = realloc(t->buf, cap);
    if (!q) return false;
    t->buf = q, t->cap = cap;
  }
  memcpy(t->buf + t->len, p, n);
  t->len += n;
  return true;
}

static void toks_free(toks *t) { free(t->buf), free(t->off), free(t->n); }

static bool toks_init(toks *t, int64_t count) {
  memset(t, 0, sizeof *t);
  t->off = malloc((size_t)(count ? count : 1) * sizeof *t->off);
  t->n = malloc((size_t)(count ? count : 1) * sizeof *t->n);
  return t->off && t->n;
}

static int hexval(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* One decoder step from `in` to `out` (a fresh toks). */
static bool dec_step(const zt__hf_step *st, const toks *in, toks *out) {
  if (!toks_init(out, in->count)) return false;
  if (st->kind == ZT__HF_DEC_FUSE) {
    out->off[0] = 0, out->n[0] = 0, out->count = in->count ? 1 : 0;
    for (int64_t k = 0; k < in->count; k++)
      if (!toks_put(out, in->buf + in->off[k], in->n[k])) return false;
    out->n[0] = out->len;
    return true;
  }
  for (int64_t k = 0; k < in->count; k++) {
    const uint8_t *s = in->buf + in->off[k];
    size_t n = in->n[k], start = out->len;
    switch ((zt__hf_dec)st->kind) {
    case ZT__HF_DEC_BYTE_LEVEL: /* applied when read */
    case ZT__HF_DEC_FUSE:
      if (!toks_put(out, s, n)) return false;
      break;
    case ZT__HF_DEC_BYTE_FALLBACK: {
      bool byte_token = n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>';
      if (byte_token && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
        uint8_t b = (uint8_t)(hexval(s[3]) * 16 + hexval(s[4]));
        if (!toks_put(out, &b, 1)) return false;
      } else if (!toks_put(out, s, n)) {
        return false;
      }
      break;
    }
    case ZT__HF_DEC_REPLACE:
    case ZT__HF_DEC_METASPACE: {
      /* Metaspace: the replacement becomes ' ', except in the first token (with a prepend
       * scheme) where it is dropped */
      bool meta = st->kind == ZT__HF_DEC_METASPACE, drop = meta && k == 0 && st->prepend != ZT__HF_PREPEND_NEVER;
      const char *to = meta ? " " : st->b;
      size_t to_n = meta ? (drop ? 0 : 1) : st->blen;
      for (size_t i = 0; i < n;) {
        if (starts_with(s + i, n - i, st->a, st->alen)) {
          if (!toks_put(out, to, to_n)) return false;
          i += st->alen;
        } else if (!toks_put(out, s + i++, 1)) {
          return false;
        }
      }
      break;
    }
    case ZT__HF_DEC_STRIP: {
      size_t a = 0, b = n;
      for (int c = 0; c < st->start && starts_with(s + a, b - a, st->a, st->alen); c++) a += st->alen;
      for (int c = 0; c < st->stop && b - a >= st->alen && memcmp(s + b - st->alen, st->a, st->alen) == 0; c++)
        b -= st->alen;
      if (!toks_put(out, s + a, b - a)) return false;
      break;
    }
    }
    out->off[k] = start, out->n[k] = out->len - start;
  }
  out->count = in->count;
  return true;
}

zt_status zt__hf_decode(const zt__hf_tokenizer *h, const int32_t *ids, int64_t n, char **text, size_t *len) {
  for (int64_t k = 0; k < n; k++)
    if (ids[k] < 0 || ids[k] >= h->vocab_size || h->tok_off[ids[k]] < 0)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "zt_tokenizer_decode: token id %d at position %lld is not in the tokenizer's vocabulary of %d "
                    "(were the ids made with another tokenizer?)",
                    ids[k], (long long)k, h->vocab_size);
  toks cur;
  bool ok = toks_init(&cur, n);
  for (int64_t k = 0; ok && k < n; k++) {
    cur.off[k] = cur.len, cur.n[k] = (size_t)h->tok_len[ids[k]];
    ok = toks_put(&cur, h->bytes + h->tok_off[ids[k]], cur.n[k]);
  }
  cur.count = n;
  for (int s = 0; ok && s < h->n_dec; s++) {
    toks next;
    ok = dec_step(&h->dec[s], &cur, &next);
    toks_free(&cur);
    cur = next;
  }
  char *o = ok ? malloc(cur.len + 1) : NULL;
  if (!o) {
    toks_free(&cur);
    return ZT_ERR(ZT_STATUS_OOM, "zt_tokenizer_decode: out of host memory");
  }
  size_t at = 0;
  for (int64_t k = 0; k < cur.count; k++)
    if (cur.n[k]) memcpy(o + at, cur.buf + cur.off[k], cur.n[k]), at += cur.n[k];
  o[at] = '\0';
  toks_free(&cur);
  *text = o;
  if (len) *len = at;
  return ZT_OK;
}
