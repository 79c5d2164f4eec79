/* Agreement helpers for start-up checks: zt_comm_check_same (every rank passes the same
 * named values) and zt_comm_agree_status (one rank's failure becomes every rank's). Both
 * all-gather fixed-size records, so ranks that pass different counts, names or lengths
 * still take part in the same collectives and reach the same verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "comm/comm_internal.h"

/* 64-bit FNV-1a: values are compared by (length, hash), not sent whole. */
static uint64_t hash64(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void zt__same_record_set(zt__same_record *r, const char *name, const char *value) {
  memset(r, 0, sizeof *r);
  if (!value) value = "(null)";
  size_t nl = strlen(name), vl = strlen(value);
  r->present = 1;
  r->name_hash = hash64(name, nl);
  r->name_len = (int32_t)(nl < 0x7fffffff ? nl : 0x7fffffff);
  r->value_hash = hash64(value, vl);
  r->value_len = (int64_t)vl;
  memcpy(r->name, name, nl < ZT__SAME_NAME - 1 ? nl : ZT__SAME_NAME - 1);
  memcpy(r->value, value, vl < ZT__SAME_VALUE - 1 ? vl : ZT__SAME_VALUE - 1);
}

static bool same_value(const zt__same_record *a, const zt__same_record *b) {
  return a->value_len == b->value_len && a->value_hash == b->value_hash;
}

static bool same_name(const zt__same_record *a, const zt__same_record *b) {
  return a->present == b->present && (!a->present || (a->name_len == b->name_len && a->name_hash == b->name_hash));
}

/* 'value' with "..." when it was cut (the record keeps the first ZT__SAME_VALUE-1 bytes). */
static const char *shown(const zt__same_record *r, char *buf, size_t cap) {
  bool cut = r->value_len > (int64_t)strlen(r->value);
  snprintf(buf, cap, "'%s%s'", r->value, cut ? "..." : "");
  return buf;
}

static int count_fields(const zt__same_record *recs, int rank, int m) {
  int k = 0;
  while (k < m && recs[(size_t)rank * m + k].present) k++;
  return k;
}

/* Rank r in a list of ranks: its world rank with its label and group rank, or "rank R"
 * without a world (the list's head word, "world rank(s)" or "rank(s)", says which). */
static const char *in_list(const zt__rank_names *names, int r, char *buf, size_t cap) {
  const char *full = zt__rank_name(names, r, buf, cap);
  return zt__rank_world(names, r) >= 0 ? full + strlen("world rank ") : full + strlen("rank ");
}

zt_status zt__comm_same_compare(const zt__same_record *recs, int n, int m, const zt__rank_names *names) {
  char msg[1700], vb[ZT__SAME_VALUE + 8], na[ZT__RANK_NAME], nb[ZT__RANK_NAME];
  const char *rank_word = zt__rank_world(names, 0) >= 0 ? "world rank" : "rank";
  for (int i = 0; i < m; i++) {
    const zt__same_record *a = &recs[i];
    /* the fields themselves: count and names */
    for (int r = 1; r < n; r++) {
      const zt__same_record *b = &recs[(size_t)r * m + i];
      if (same_name(a, b)) continue;
      if (a->present != b->present) {
        const zt__same_record *has = a->present ? a : b;
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "ranks disagree on what to check: %s passes %d values, %s passes %d (the first missing one "
                      "is '%s'); every rank must check the same fields",
                      zt__rank_name(names, 0, na, sizeof na), count_fields(recs, 0, m),
                      zt__rank_name(names, r, nb, sizeof nb), count_fields(recs, r, m), has->name);
      }
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "ranks disagree on what to check: value %d is '%s' on %s but '%s' on %s; every rank must check "
                    "the same fields in the same order",
                    i + 1, a->name, zt__rank_name(names, 0, na, sizeof na), b->name,
                    zt__rank_name(names, r, nb, sizeof nb));
    }
    int first_diff = -1;
    for (int r = 1; r < n && first_diff < 0; r++)
      if (!same_value(a, &recs[(size_t)r * m + i])) first_diff = r;
    if (first_diff < 0) continue;
    /* name every distinct value with the ranks that have it */
    size_t len = (size_t)snprintf(msg, sizeof msg, "ranks disagree on '%s':", a->name);
    bool *done = calloc((size_t)n, sizeof *done);
    if (!done) return ZT_ERR(ZT_STATUS_OOM, "ranks disagree on '%s' (out of memory for the details)", a->name);
    int groups = 0;
    for (int r = 0; r < n; r++) {
      if (done[r]) continue;
      const zt__same_record *v = &recs[(size_t)r * m + i];
      int members = 0, listed = 0;
      for (int q = r; q < n; q++)
        if (!done[q] && same_value(v, &recs[(size_t)q * m + i])) members++;
      if (groups++ == 8) {
        if (len < sizeof msg) len += (size_t)snprintf(msg + len, sizeof msg - len, "; and other values");
        break;
      }
      if (len < sizeof msg)
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%s %s%s", groups > 1 ? "," : "", rank_word,
                                members > 1 ? "s" : "");
      for (int q = r; q < n; q++) {
        if (done[q] || !same_value(v, &recs[(size_t)q * m + i])) continue;
        done[q] = true;
        if (listed++ < 8 && len < sizeof msg)
          len += (size_t)snprintf(msg + len, sizeof msg - len, "%s %s", listed > 1 ? "," : "",
                                  in_list(names, q, na, sizeof na));
      }
      if (listed > 8 && len < sizeof msg)
        len += (size_t)snprintf(msg + len, sizeof msg - len, " and %d more", listed - 8);
      if (len < sizeof msg)
        len += (size_t)snprintf(msg + len, sizeof msg - len, " %s %s", members > 1 ? "have" : "has",
                                shown(v, vb, sizeof vb));
    }
    free(done);
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s; start every rank with the same options", msg);
  }
  return ZT_OK;
}

zt_status zt_comm_check_same_at(zt_comm *c, int n, const char *const *names, const char *const *values,
                                const char *file, int line) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_check_same: comm is NULL; create one with zt_comm_world");
  if (n < 0 || (n > 0 && (!names || !values)))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_check_same: n = %d with names %s and values %s; pass n >= 0 and both "
                  "arrays", n, names ? "set" : "NULL", values ? "set" : "NULL");
  for (int i = 0; i < n; i++)
    if (!names[i]) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_check_same: names[%d] is NULL", i);
  ZT_TRY(zt__comm_usable(c, "zt_comm_check_same")); /* below, a failure leaves the buffers to MPI */
  int size = zt_comm_size(c);
  /* first how many fields each rank has, then m records from everyone (m the largest n) */
  int32_t mine = n, *counts = calloc((size_t)size, sizeof *counts);
  if (!counts) return ZT_ERR(ZT_STATUS_OOM, "zt_comm_check_same: out of host memory");
  zt_status s = zt__comm_gather_bytes(c, ZT__COLL_CHECK_SAME, &mine, counts, sizeof mine, file, line);
  if (s != ZT_OK) return s; /* after a timeout MPI may still write counts: left allocated */
  int m = 0;
  for (int r = 0; r < size; r++) m = counts[r] > m ? counts[r] : m;
  free(counts);
  if (m == 0) return ZT_OK;
  zt__same_record *me = calloc((size_t)m, sizeof *me), *all = calloc((size_t)m * (size_t)size, sizeof *all);
  if (!me || !all) {
    free(me), free(all);
    return ZT_ERR(ZT_STATUS_OOM, "zt_comm_check_same: out of host memory");
  }
  for (int i = 0; i < n; i++) zt__same_record_set(&me[i], names[i], values[i]);
  s = zt__comm_gather_bytes(c, ZT__COLL_CHECK_SAME, me, all, sizeof *me * (size_t)m, file, line);
  free(me);
  if (s != ZT_OK) return s;
  zt__rank_names rn = zt__comm_names(c);
  s = zt__comm_same_compare(all, size, m, &rn);
  free(all);
  return s;
}

/* "text [file:line]" at the end of a message: the site zt__error recorded. */
static bool split_site(const char *msg, char *text, size_t text_cap, char *file, size_t file_cap, int *line) {
  size_t n = strlen(msg);
  if (n < 5 || msg[n - 1] != ']') return false;
  const char *open = strrchr(msg, '[');
  if (!open || open == msg || open[-1] != ' ') return false;
  const char *colon = strrchr(open, ':');
  if (!colon) return false;
  char *end = NULL;
  long l = strtol(colon + 1, &end, 10);
  if (end != msg + n - 1 || colon == open + 1 || l < 0) return false;
  snprintf(text, text_cap, "%.*s", (int)(open - 1 - msg), msg);
  snprintf(file, file_cap, "%.*s", (int)(colon - open - 1), open + 1);
  *line = (int)l;
  return true;
}

zt_status zt__comm_agree_pick(const zt__agree_record *recs, int n, int rank, const zt__rank_names *names) {
  int lowest = -1;
  for (int r = 0; r < n && lowest < 0; r++)
    if (recs[r].status != ZT_OK) lowest = r;
  if (lowest < 0) return ZT_OK;
  if (recs[rank].status != ZT_OK) return (zt_status)recs[rank].status; /* its own message stands */
  zt_status code = (zt_status)recs[lowest].status;
  if ((int)code <= 0 || code >= ZT_STATUS_COUNT) code = ZT_STATUS_INTERNAL;
  char msg[ZT__AGREE_MSG + 1], text[ZT__AGREE_MSG + 1], file[128], who[ZT__RANK_NAME];
  zt__rank_name(names, lowest, who, sizeof who);
  snprintf(msg, sizeof msg, "%s", recs[lowest].msg);
  int line = 0;
  /* re-issue the message with its own site, so it reads exactly as on rank `lowest` */
  if (split_site(msg, text, sizeof text, file, sizeof file, &line))
    return zt__error(code, file, line, "%s: %s", who, text);
  return ZT_ERR(code, "%s: %s", who, msg[0] ? msg : "(no message)");
}

zt_status zt_comm_agree_status_at(zt_comm *c, zt_status s, const char *file, int line) {
  ZT_TRY(zt__comm_usable(c, "zt_comm_agree_status")); /* below, a failure leaves the buffer to MPI */
  int size = zt_comm_size(c), rank = zt_comm_rank(c);
  zt__agree_record me;
  memset(&me, 0, sizeof me);
  me.status = (int32_t)s;
  if (s != ZT_OK) snprintf(me.msg, sizeof me.msg, "%s", zt_last_error());
  zt__agree_record *all = calloc((size_t)size, sizeof *all);
  if (!all) return ZT_ERR(ZT_STATUS_OOM, "zt_comm_agree_status: out of host memory");
  zt_status g = zt__comm_gather_bytes(c, ZT__COLL_AGREE_STATUS, &me, all, sizeof me, file, line);
  if (g != ZT_OK) return g; /* after a timeout MPI may still write `all`: left allocated */
  /* a gather that succeeds leaves zt_last_error() alone: a failing rank keeps its message */
  zt__rank_names rn = zt__comm_names(c);
  zt_status v = zt__comm_agree_pick(all, size, rank, &rn);
  free(all);
  return v;
}
