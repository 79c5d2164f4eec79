/* Unicode Normalization Form C, for the NFC normalizer of tokenizer.json (Qwen2): canonical
 * decomposition (Hangul by its formula, the rest by src/data/unicode_nfc_tables.h), canonical
 * ordering of combining marks, then canonical composition (UAX #15). Text with no code point
 * at or above U+0300 is NFC already (below it every character is a starter that composes with
 * no other, which the table generator asserts), so the common case costs one scan. Bytes that
 * are not valid UTF-8 pass through as they are, as starters that compose with nothing. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "data/tokenizer_internal.h"
#include "data/unicode_nfc_tables.h"

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7 };
enum { L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

#define N_ROWS(t) (sizeof t / sizeof *t)

/* A code point, or an invalid byte b as -1 - b. */
static int ccc_of(int32_t cp) {
  if (cp < 0x300) return 0;
  size_t lo = 0, hi = N_ROWS(nfc_ccc);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (nfc_ccc[mid][1] < (uint32_t)cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < N_ROWS(nfc_ccc) && nfc_ccc[lo][0] <= (uint32_t)cp ? (int)nfc_ccc[lo][2] : 0;
}

static const uint32_t *decomp_of(int32_t cp) {
  size_t lo = 0, hi = N_ROWS(nfc_decomp);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (nfc_decomp[mid][0] < (uint32_t)cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < N_ROWS(nfc_decomp) && nfc_decomp[lo][0] == (uint32_t)cp ? nfc_decomp[lo] : NULL;
}

/* The primary composite of (a, b), or -1. */
static int32_t compose_of(int32_t a, int32_t b) {
  if (a < 0 || b < 0) return -1;
  if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
    return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
  if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
    return a + (b - T_BASE);
  size_t lo = 0, hi = N_ROWS(nfc_comp);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const uint32_t *r = nfc_comp[mid];
    if (r[0] < (uint32_t)a || (r[0] == (uint32_t)a && r[1] < (uint32_t)b)) lo = mid + 1;
    else hi = mid;
  }
  if (lo < N_ROWS(nfc_comp) && nfc_comp[lo][0] == (uint32_t)a && nfc_comp[lo][1] == (uint32_t)b)
    return (int32_t)nfc_comp[lo][2];
  return -1;
}

/* Appends the full canonical decomposition of cp to o (room: 4 per call at depth; a
 * decomposition is at most 4 code points long). */
static size_t decompose(int32_t cp, int32_t *o) {
  if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
    int32_t s = cp - S_BASE, t = s % T_COUNT;
    o[0] = L_BASE + s / N_COUNT, o[1] = V_BASE + (s % N_COUNT) / T_COUNT;
    if (t) o[2] = T_BASE + t;
    return t ? 3 : 2;
  }
  const uint32_t *d = cp >= 0xC0 ? decomp_of(cp) : NULL;
  if (!d) return o[0] = cp, 1;
  size_t n = decompose((int32_t)d[1], o);
  if (d[2]) n += decompose((int32_t)d[2], o + n);
  return n;
}

bool zt__nfc_maybe_changes(const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] >= 0xCC) return true;
  return false;
}

zt_status zt__nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_n) {
  *out = NULL, *out_n = 0;
  int32_t *cps = malloc((4 * n + 4) * sizeof *cps);
  uint8_t *o = malloc(4 * n + 4); /* composition never lengthens the decomposed text */
  if (!cps || !o) {
    free(cps), free(o);
    return ZT_ERR(ZT_STATUS_OOM, "NFC normalization: out of host memory for %zu bytes", n);
  }
  size_t m = 0;
  for (size_t i = 0, l; i < n; i += l) {
    int32_t cp = zt__utf8_next(s + i, n - i, &l);
    if (cp < 0) cps[m++] = -1 - (int32_t)s[i];
    else m += decompose(cp, cps + m);
  }
  /* canonical ordering: each run of non-starters sorted by class, stably */
  for (size_t i = 1; i < m; i++) {
    int c = ccc_of(cps[i]);
    if (c == 0) continue;
    for (size_t j = i; j > 0 && ccc_of(cps[j - 1]) > c; j--) {
      int32_t t = cps[j];
      cps[j] = cps[j - 1], cps[j - 1] = t;
    }
  }
  /* composition: each character joins the last starter unless blocked (a character between
   * them of class 0 or of a class not below its own) */
  size_t k = 0;
  if (m) {
    size_t starter = 0;
    int last = ccc_of(cps[0]) ? 256 : 0;
    k = 1;
    for (size_t i = 1; i < m; i++) {
      int c = ccc_of(cps[i]);
      int32_t comp = compose_of(cps[starter], cps[i]);
      if (comp >= 0 && (last < c || last == 0) && (last != 0 || k == starter + 1)) {
        cps[starter] = comp;
        continue;
      }
      if (c == 0) starter = k;
      last = c;
      cps[k++] = cps[i];
    }
  }
  size_t on = 0;
  for (size_t i = 0; i < k; i++) {
    if (cps[i] < 0) o[on++] = (uint8_t)(-1 - cps[i]);
    else on += zt__utf8_put((uint32_t)cps[i], o + on);
  }
  free(cps);
  *out = o, *out_n = on;
  return ZT_OK;
}
