/* The regexes that tokenizers split text with before BPE, implemented by hand (no regex engine):
 * each function is its pattern's leftmost match at a position, the alternatives tried in the
 * pattern's order with its backtracking cases resolved directly. Supported patterns:
 *   GPT-2 (tokenizer.json's ByteLevel use_regex, and Split with the same pattern):
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama 3 (Split, Isolated), and Qwen2 (the same with \p{N} in place of \p{N}{1,3}):
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Any other pattern is refused when tokenizer.json is read (hf_tokenizer.c), naming it.
 * The classes \p{L}, \p{N} and \s are those of tokenizer.c (Unicode 17); the references' regex
 * engines have older tables, so characters assigned since may split differently.
 * Invariant: every byte is in exactly one piece (the patterns match any character), so the
 * returned end is always past i; a byte that is not valid UTF-8 is one "other" character. */
#include <stdbool.h>

#include "data/tokenizer_internal.h"

/* End of the GPT-2 pre-token that starts at s[i] (i < n), by hand: the regex's
 * alternatives in order, with the one backtracking case (\s+(?!\S)) resolved directly. */
size_t zt__gpt2_pretoken_end(const uint8_t *s, size_t n, size_t i) {
  size_t l0, l;
  int32_t c0 = zt__utf8_next(s + i, n - i, &l0);
  if (c0 == '\'' && i + 1 < n) {
    uint8_t a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  zt__cp_class k0 = zt__cp_classify(c0), run;
  size_t j;
  if (k0 != ZT__CP_SPACE) {
    run = k0, j = i + l0; /* \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+ without the leading space */
  } else if (c0 == ' ' && i + 1 < n && zt__cp_classify(zt__utf8_next(s + i + 1, n - i - 1, &l)) != ZT__CP_SPACE) {
    run = zt__cp_classify(zt__utf8_next(s + i + 1, n - i - 1, &l)), j = i + 1 + l; /* " ?X+" with the space */
  } else {
    /* \s+(?!\S) then \s+: the whole run if it ends the text, else all but its last
     * character (which then starts the next pre-token) unless the run is one character. */
    size_t last = i;
    j = i + l0;
    while (j < n) {
      int32_t c = zt__utf8_next(s + j, n - j, &l);
      if (zt__cp_classify(c) != ZT__CP_SPACE) break;
      last = j, j += l;
    }
    return (j == n || last == i) ? j : last;
  }
  while (j < n) {
    int32_t c = zt__utf8_next(s + j, n - j, &l);
    if (zt__cp_classify(c) != run) break;
    j += l;
  }
  return j;
}
/* The case-insensitive contraction at s[i] == '\'' of Llama 3 and Qwen2: its end, or 0. The
 * letters' case-folding equivalents are ASCII but for 's', which U+017F (long s) also matches. */
static size_t contraction_end(const uint8_t *s, size_t n, size_t i) {
  size_t j = i + 1, l;
  if (j >= n) return 0;
  int32_t a = zt__utf8_next(s + j, n - j, &l);
  if (a >= 'A' && a <= 'Z') a += 'a' - 'A';
  if (a == 0x17F) a = 's';
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return j + l;
  if (a != 'r' && a != 'v' && a != 'l') return 0;
  j += l;
  if (j >= n) return 0;
  int32_t b = s[j] >= 'A' && s[j] <= 'Z' ? s[j] + ('a' - 'A') : s[j];
  if ((a == 'l' && b == 'l') || (a != 'l' && b == 'e')) return j + 1;
  return 0;
}

static size_t llama_pretoken_end(const uint8_t *s, size_t n, size_t i, int max_digits) {
  size_t l0, l;
  int32_t c0 = zt__utf8_next(s + i, n - i, &l0);
  zt__cp_class k0 = zt__cp_classify(c0);
  size_t j;
  if (c0 == '\'' && (j = contraction_end(s, n, i))) return j;
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  j = 0;
  if (k0 == ZT__CP_LETTER) j = i + l0;
  else if (k0 != ZT__CP_NUMBER && c0 != '\r' && c0 != '\n' && i + l0 < n &&
           zt__cp_classify(zt__utf8_next(s + i + l0, n - i - l0, &l)) == ZT__CP_LETTER)
    j = i + l0 + l;
  if (j) {
    while (j < n && zt__cp_classify(zt__utf8_next(s + j, n - j, &l)) == ZT__CP_LETTER) j += l;
    return j;
  }
  /* \p{N}{1,3} (Qwen2: \p{N}) */
  if (k0 == ZT__CP_NUMBER) {
    j = i + l0;
    for (int k = 1; k < max_digits && j < n && zt__cp_classify(zt__utf8_next(s + j, n - j, &l)) == ZT__CP_NUMBER; k++)
      j += l;
    return j;
  }
  /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
  bool other = true;
  if (k0 == ZT__CP_OTHER) j = i;
  else if (c0 == ' ' && i + 1 < n && zt__cp_classify(zt__utf8_next(s + i + 1, n - i - 1, &l)) == ZT__CP_OTHER)
    j = i + 1;
  else
    other = false;
  if (other) {
    while (j < n && zt__cp_classify(zt__utf8_next(s + j, n - j, &l)) == ZT__CP_OTHER) j += l;
    while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
    return j;
  }
  /* c0 is white space. \s*[\r\n]+: the run up to just after its last CR or LF, if it has one
   * (\s* backtracks to it; the CR/LF run then ends there as the whitespace run goes on with
   * other white space or stops); else \s+(?!\S) and \s+ as GPT-2's. */
  size_t w = i, last = i, last_nl = 0;
  bool nl = false;
  while (w < n) {
    int32_t c = zt__utf8_next(s + w, n - w, &l);
    if (zt__cp_classify(c) != ZT__CP_SPACE) break;
    if (c == '\r' || c == '\n') nl = true, last_nl = w;
    last = w, w += l;
  }
  if (nl) return last_nl + 1;
  return (w == n || last == i) ? w : last;
}

size_t zt__llama3_pretoken_end(const uint8_t *s, size_t n, size_t i) { return llama_pretoken_end(s, n, i, 3); }
size_t zt__qwen2_pretoken_end(const uint8_t *s, size_t n, size_t i) { return llama_pretoken_end(s, n, i, 1); }
