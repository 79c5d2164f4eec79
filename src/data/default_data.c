/* zerotrain's built-in dataset: about 2 MB of short children's stories written by a
 * fixed-seed probabilistic grammar (characters, places, things, quotes, small sums with the
 * right answers, pronoun and a/an agreement). Needs no download and no file; the same bytes
 * on every machine. Byte-level tokens; the last ~10% (whole stories) is the validation part. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/data.h"

#define ZT_DEFAULT_DATA_BYTES 2000000
#define ZT_DEFAULT_DATA_SEED 0x7a65726f747261ull /* "zerotra" */

typedef struct gen {
  uint64_t rng;
  char *buf;
  size_t len, cap;
  bool oom;
} gen;

static uint64_t next_u64(gen *g) { /* splitmix64: tiny, and the same on every platform */
  uint64_t z = (g->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int pick(gen *g, int n) { return (int)(next_u64(g) % (uint64_t)n); }
#define PICK(g, arr) ((arr)[pick((g), (int)(sizeof(arr) / sizeof *(arr)))])

static void put(gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(gen *g, const char *fmt, ...) {
  if (g->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g->buf + g->len, g->cap - g->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < g->cap - g->len) {
      g->len += (size_t)n;
      return;
    }
    char *p = realloc(g->buf, 2 * g->cap);
    if (!p) {
      g->oom = true;
      return;
    }
    g->buf = p, g->cap *= 2;
  }
}

typedef struct who {
  const char *name;
  int gender; /* 0 he, 1 she */
  const char *kind, *adj;
} who;

static const char *const boys[] = {"Tom", "Ben", "Sam", "Max", "Leo", "Jack", "Finn", "Oscar", "Hugo", "Noah"};
static const char *const girls[] = {"Lily", "Mia", "Anna", "Zoe", "Ella", "Ruby", "Lucy", "Nora", "Ivy", "Rosa"};
static const char *const kinds[] = {"cat", "dog", "fox", "rabbit", "bear", "frog", "duck", "owl", "mouse",
                                    "squirrel", "pig", "goat", "elephant", "turtle", "bird"};
static const char *const adjs[] = {"little", "big", "happy", "brave", "kind", "small", "old", "clever", "shy",
                                   "funny", "curious", "sleepy", "gentle", "quick", "eager"};
typedef struct place {
  const char *name, *at; /* "park", "in" */
} place;
static const place places[] = {{"park", "in"},   {"forest", "in"}, {"garden", "in"},  {"river", "by"},
                               {"house", "in"},  {"school", "at"}, {"beach", "on"},   {"farm", "on"},
                               {"hill", "on"},   {"town", "in"},   {"meadow", "in"},  {"lake", "by"},
                               {"village", "in"}, {"library", "in"}, {"market", "at"}};
typedef struct thing {
  const char *one, *many;
} thing;
static const thing things[] = {{"ball", "balls"},     {"kite", "kites"},   {"apple", "apples"},   {"book", "books"},
                               {"box", "boxes"},      {"hat", "hats"},     {"boat", "boats"},     {"cake", "cakes"},
                               {"flower", "flowers"}, {"stick", "sticks"}, {"key", "keys"},       {"map", "maps"},
                               {"egg", "eggs"},       {"cherry", "cherries"}, {"shell", "shells"}, {"stone", "stones"},
                               {"acorn", "acorns"},   {"umbrella", "umbrellas"}, {"leaf", "leaves"}, {"toy", "toys"}};
static const char *const colours[] = {"red", "blue", "green", "yellow", "shiny", "tiny", "orange", "purple", "old",
                                      "round"};
static const char *const feelings[] = {"happy", "sad", "excited", "scared", "proud", "tired", "surprised", "calm"};
static const char *const good_feelings[] = {"happy", "proud", "glad", "thankful", "excited"};
static const char *const activities[] = {"run", "jump", "sing", "read", "dance", "swim", "climb trees",
                                         "play games", "draw pictures", "look at the clouds"};
static const char *const pasts[] = {"ran", "jumped", "sang", "read", "danced", "swam", "played", "laughed"};
static const char *const landmarks[] = {"under a tree", "near the pond", "behind a rock", "in the grass",
                                        "by the old gate", "next to the path", "under the bridge"};
static const char *const times[] = {"morning", "afternoon", "evening", "sunny day", "rainy day", "windy day"};
static const char *const weathers[] = {"The sun was warm", "The wind was cold", "The rain fell softly",
                                       "The sky was blue", "Snow covered the ground"};

static const char *article(const char *word) { return strchr("aeiou", word[0]) ? "an" : "a"; }
static const char *he(const who *w) { return w->gender ? "she" : "he"; }
static const char *He(const who *w) { return w->gender ? "She" : "He"; }
static const char *his(const who *w) { return w->gender ? "her" : "his"; }
static const char *him(const who *w) { return w->gender ? "her" : "him"; }
static const char *const number_words[] = {"zero", "one", "two", "three", "four", "five",
                                           "six", "seven", "eight", "nine", "ten"};

static who make_who(gen *g, const char *avoid) {
  who w;
  do {
    w.gender = pick(g, 2);
    w.name = w.gender ? PICK(g, girls) : PICK(g, boys);
  } while (avoid && strcmp(w.name, avoid) == 0);
  w.kind = PICK(g, kinds);
  w.adj = PICK(g, adjs);
  return w;
}

static void sentence(gen *g, const who *a, const who *b) {
  const thing *t = &PICK(g, things);
  const char *colour = PICK(g, colours);
  const place *pl = &PICK(g, places);
  switch (pick(g, 13)) {
    case 0: put(g, "%s liked to %s %s the %s. ", He(a), PICK(g, activities), pl->at, pl->name); break;
    case 1:
      put(g, "One day, %s found %s %s %s %s. ", a->name, article(colour), colour, t->one, PICK(g, landmarks));
      break;
    case 2:
      put(g, "%s went to the %s with %s friend %s, %s %s %s. ", a->name, pl->name, his(a), b->name, article(b->adj),
          b->adj, b->kind);
      break;
    case 3: {
      int q = pick(g, 5);
      if (q == 0) put(g, "\"Look at this %s!\" said %s. ", t->one, a->name);
      else if (q == 1) put(g, "\"Can we play together?\" asked %s. ", a->name);
      else if (q == 2) put(g, "\"I am so %s!\" said %s. ", PICK(g, feelings), a->name);
      else if (q == 3) put(g, "\"Let's go to the %s,\" said %s. ", pl->name, b->name);
      else put(g, "\"Thank you, %s,\" said %s with a smile. ", b->name, a->name);
      break;
    }
    case 4: {
      int x = 1 + pick(g, 9), y = 1 + pick(g, 9);
      put(g, "%s had %d %s. %s gave %s %d more, so now %s had %d %s. ", a->name, x, x == 1 ? t->one : t->many,
          b->name, him(a), y, he(a), x + y, t->many);
      break;
    }
    case 5: {
      int x = 2 + pick(g, 9), y = 1 + pick(g, x - 1);
      put(g, "%s had %s %s, but %s lost %s. Now %s had %s %s left. ", a->name, number_words[x], t->many, he(a),
          number_words[y], he(a), number_words[x - y], x - y == 1 ? t->one : t->many);
      break;
    }
    case 6: put(g, "%s, and %s felt %s. ", PICK(g, weathers), a->name, PICK(g, feelings)); break;
    case 7: put(g, "%s and %s %s until the sun went down. ", a->name, b->name, PICK(g, pasts)); break;
    case 8:
      put(g, "%s wanted to give the %s to %s, because %s was %s %s %s. ", a->name, t->one, b->name, he(b),
          article(b->adj), b->adj, b->kind);
      break;
    case 9:
      put(g, "The %s %s looked for %s %s %s the %s. ", a->adj, a->kind, article(t->one), t->one, pl->at, pl->name);
      break;
    case 10:
      put(g, "\"Where is my %s?\" asked %s. \"It is %s,\" said %s. ", t->one, a->name, PICK(g, landmarks), b->name);
      break;
    case 11: put(g, "Suddenly, %s heard a loud noise %s. ", a->name, PICK(g, landmarks)); break;
    default: put(g, "%s was %s, so %s helped %s. ", b->name, PICK(g, feelings), a->name, him(b)); break;
  }
}

static void story(gen *g) {
  who a = make_who(g, NULL), b = make_who(g, a.name);
  switch (pick(g, 3)) {
    case 0:
      put(g, "Once upon a time, there was %s %s %s named %s. ", article(a.adj), a.adj, a.kind, a.name);
      break;
    case 1:
      put(g, "%s was %s %s %s who lived near the %s. ", a.name, article(a.adj), a.adj, a.kind, PICK(g, places).name);
      break;
    default: put(g, "One %s, %s the %s woke up %s. ", PICK(g, times), a.name, a.kind, PICK(g, feelings)); break;
  }
  for (int k = 3 + pick(g, 4); k > 0; k--) sentence(g, &a, &b);
  switch (pick(g, 3)) {
    case 0: put(g, "In the end, %s was very %s.", a.name, PICK(g, good_feelings)); break;
    case 1: put(g, "From that day on, %s and %s were best friends.", a.name, b.name); break;
    default: put(g, "The end."); break;
  }
  put(g, "\n\n");
}

static zt_status to_tokens(const char *s, size_t n, zt_tokens **out) {
  zt_tokens *t = calloc(1, sizeof *t);
  if (t) t->ids = malloc((n ? n : 1) * sizeof *t->ids);
  if (!t || !t->ids) {
    zt_tokens_free(t);
    return ZT_ERR(ZT_STATUS_OOM, "zt_default_dataset: out of host memory");
  }
  for (size_t i = 0; i < n; i++) t->ids[i] = (uint8_t)s[i];
  t->count = (int64_t)n;
  t->vocab_size = 256;
  *out = t;
  return ZT_OK;
}

zt_status zt_default_dataset(zt_tokens **train, zt_tokens **val) {
  if (!train || !val) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_default_dataset: NULL output");
  *train = *val = NULL;
  gen g = {.rng = ZT_DEFAULT_DATA_SEED, .cap = ZT_DEFAULT_DATA_BYTES + 4096};
  g.buf = malloc(g.cap);
  if (!g.buf) return ZT_ERR(ZT_STATUS_OOM, "zt_default_dataset: out of host memory");
  while (g.len < ZT_DEFAULT_DATA_BYTES && !g.oom) story(&g);
  if (g.oom) {
    free(g.buf);
    return ZT_ERR(ZT_STATUS_OOM, "zt_default_dataset: out of host memory");
  }
  /* split after the story that crosses 90%, so validation holds whole stories */
  const char *cut = strstr(g.buf + g.len * 9 / 10, "\n\n");
  size_t n_train = cut ? (size_t)(cut - g.buf) + 2 : g.len;
  zt_status s = to_tokens(g.buf, n_train, train);
  if (!s) s = to_tokens(g.buf + n_train, g.len - n_train, val);
  if (s) {
    zt_tokens_free(*train);
    *train = NULL;
  }
  free(g.buf);
  return s;
}
