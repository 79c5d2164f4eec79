/* zerotrain token files: "ZTOK", u32 version 1, u32 token width (2 or 4), u32 vocab size
 * (0 if unknown), u64 token count, then the tokens, all little-endian. Loading checks every
 * field and the file length and names the file and the fix; saving is atomic. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "zt/data.h"
#include "zt/io.h"

#define ZT_TOKENS_MAGIC "ZTOK"
#define ZT_TOKENS_VERSION 1u
#define ZT_TOKENS_HEADER 24 /* magic 4 + version 4 + width 4 + vocab 4 + count 8 */

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void wr32(uint8_t *p, uint32_t v) {
  for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}

void zt_tokens_free(zt_tokens *t) {
  if (!t) return;
  free(t->ids);
  free(t);
}

/* Read and convert the tokens in chunks, so a file costs its int32 ids plus 1 MiB. */
static zt_status read_ids(FILE *f, const char *path, uint32_t width, int32_t vocab, zt_tokens *t) {
  enum { CHUNK = 1 << 20 };
  uint8_t *buf = malloc(CHUNK);
  if (!buf) return ZT_ERR(ZT_STATUS_OOM, "loading token file '%s': out of host memory", path);
  zt_status s = ZT_OK;
  int64_t per = CHUNK / width;
  for (int64_t at = 0; at < t->count && !s;) {
    int64_t k = t->count - at < per ? t->count - at : per;
    if (fread(buf, width, (size_t)k, f) != (size_t)k) {
      s = ZT_ERR(ZT_STATUS_IO, "cannot read token file '%s' at token %lld: %s", path, (long long)at,
                 ferror(f) ? strerror(errno) : "unexpected end of file");
      break;
    }
    for (int64_t i = 0; i < k; i++) {
      const uint8_t *p = buf + i * width;
      uint32_t v = width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : rd32(p);
      if (v > INT32_MAX || (vocab > 0 && v >= (uint32_t)vocab)) {
        s = ZT_ERR(ZT_STATUS_IO,
                   "token file '%s' is damaged: token %u at position %lld is outside its own vocabulary of %d; "
                   "re-create it with `zt tokenize`",
                   path, v, (long long)(at + i), vocab);
        break;
      }
      t->ids[at + i] = (int32_t)v;
    }
    at += k;
  }
  free(buf);
  return s;
}

/* A token file's header, every field checked against the file's length. */
typedef struct tokens_header {
  uint32_t width, vocab;
  uint64_t count;
} tokens_header;

/* Opens path and reads its header: on success *out is the open file, positioned at the tokens. */
static zt_status open_tokens(const char *path, FILE **out, tokens_header *th) {
  *out = NULL;
  int fd = -1;
  uint64_t size = 0;
  zt_status os = zt__open_regular_file(path, "token file", &fd, &size);
  if (os && access(path, F_OK) != 0)
    return ZT_ERR(ZT_STATUS_IO, "cannot open token file '%s': %s (make one with `zt tokenize TEXT_FILE OUT`)", path,
                  strerror(errno));
  if (os) return os;
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    return ZT_ERR(ZT_STATUS_IO, "cannot read token file '%s': %s", path, strerror(e));
  }
  uint8_t h[ZT_TOKENS_HEADER];
  size_t got = fread(h, 1, sizeof h, f);
  zt_status s = ZT_OK;
  uint32_t version = got >= 8 ? rd32(h + 4) : 0, width = got >= 12 ? rd32(h + 8) : 0,
           vocab = got >= 16 ? rd32(h + 12) : 0;
  uint64_t count = 0;
  for (int k = 7; k >= 0 && got >= ZT_TOKENS_HEADER; k--) count = count << 8 | h[16 + k];
  uint64_t body = size >= ZT_TOKENS_HEADER ? size - ZT_TOKENS_HEADER : 0;
  if (got < 4 || memcmp(h, ZT_TOKENS_MAGIC, 4) != 0) {
    s = ZT_ERR(ZT_STATUS_IO,
               "'%s' is not a zerotrain token file (it does not start with \"ZTOK\"): make token files from text "
               "with `zt tokenize TEXT_FILE OUT`",
               path);
  } else if (got < ZT_TOKENS_HEADER) {
    s = ZT_ERR(ZT_STATUS_IO,
               "token file '%s' is truncated: %llu bytes, shorter than its %d-byte header; re-create it with `zt "
               "tokenize`",
               path, (unsigned long long)size, ZT_TOKENS_HEADER);
  } else if (version != ZT_TOKENS_VERSION) {
    s = ZT_ERR(ZT_STATUS_IO,
               "token file '%s' has format version %u, but this zerotrain reads version %u: re-create it with this "
               "zerotrain's `zt tokenize`",
               path, version, ZT_TOKENS_VERSION);
  } else if (width != 2 && width != 4) {
    s = ZT_ERR(ZT_STATUS_IO, "token file '%s' is damaged: token width %u bytes (only 2 and 4 exist); re-create it with "
               "`zt tokenize`", path, width);
  } else if (vocab > INT32_MAX) {
    s = ZT_ERR(ZT_STATUS_IO, "token file '%s' is damaged: vocabulary size %u is over 2^31-1; re-create it with `zt "
               "tokenize`", path, vocab);
  } else if (count > body / width) {
    /* no count * width here: a damaged count overflows it */
    s = ZT_ERR(ZT_STATUS_IO,
               "token file '%s' is truncated or damaged: its header claims %llu tokens of %u bytes but the file holds "
               "%llu bytes after its %d-byte header (room for %llu tokens); re-create it with `zt tokenize` (or copy "
               "it again completely)",
               path, (unsigned long long)count, width, (unsigned long long)body, ZT_TOKENS_HEADER,
               (unsigned long long)(body / width));
  } else if (body != count * width) {
    s = ZT_ERR(ZT_STATUS_IO,
               "token file '%s' is damaged: %llu bytes follow its %llu tokens of %u bytes; re-create it with `zt "
               "tokenize`",
               path, (unsigned long long)(body - count * width), (unsigned long long)count, width);
  }
  if (s) {
    fclose(f);
    return s;
  }
  *th = (tokens_header){width, vocab, count};
  *out = f;
  return ZT_OK;
}

zt_status zt_tokens_vocab_size(const char *path, int32_t *vocab) {
  if (!path || !vocab) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokens_vocab_size: NULL path or out");
  FILE *f = NULL;
  tokens_header th;
  ZT_TRY(open_tokens(path, &f, &th));
  fclose(f);
  *vocab = (int32_t)th.vocab;
  return ZT_OK;
}

zt_status zt_tokens_load(const char *path, zt_tokens **out) {
  if (!path || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokens_load: NULL path or out");
  *out = NULL;
  FILE *f = NULL;
  tokens_header th;
  ZT_TRY(open_tokens(path, &f, &th));
  zt_status s = ZT_OK;
  zt_tokens *t = calloc(1, sizeof *t);
  if (t) t->ids = malloc(th.count ? th.count * sizeof *t->ids : 1);
  if (!t || !t->ids)
    s = ZT_ERR(ZT_STATUS_OOM, "loading token file '%s': out of host memory for %llu tokens", path,
               (unsigned long long)th.count);
  if (!s) {
    t->count = (int64_t)th.count;
    t->vocab_size = (int32_t)th.vocab;
    s = read_ids(f, path, th.width, (int32_t)th.vocab, t);
  }
  fclose(f);
  if (s) zt_tokens_free(t);
  else *out = t;
  return s;
}

zt_status zt_tokens_save(const char *path, const zt_tokens *t, int width) {
  if (!path || !t || (!t->ids && t->count > 0) || t->count < 0 || t->vocab_size < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokens_save: NULL path or tokens, or a negative count or vocab size");
  if (width != 0 && width != 2 && width != 4)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokens_save: token width %d (expected 0 for automatic, 2 or 4)", width);
  int32_t max_id = 0;
  for (int64_t i = 0; i < t->count; i++) {
    int32_t v = t->ids[i];
    if (v < 0 || (t->vocab_size > 0 && v >= t->vocab_size))
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "zt_tokens_save: token %d at position %lld is outside the vocabulary [0, %d) of '%s'", v,
                    (long long)i, t->vocab_size ? t->vocab_size : INT32_MAX, path);
    if (v > max_id) max_id = v;
  }
  if (width == 0) width = max_id < 65536 ? 2 : 4;
  if (width == 2 && max_id >= 65536)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_tokens_save: token %d does not fit in 2 bytes: save '%s' with width 4 (or 0)", max_id, path);
  uint8_t h[ZT_TOKENS_HEADER];
  memcpy(h, ZT_TOKENS_MAGIC, 4);
  wr32(h + 4, ZT_TOKENS_VERSION);
  wr32(h + 8, (uint32_t)width);
  wr32(h + 12, (uint32_t)t->vocab_size);
  for (int k = 0; k < 8; k++) h[16 + k] = (uint8_t)((uint64_t)t->count >> (8 * k));
  size_t nb = (size_t)t->count * (size_t)width;
  uint8_t *body = malloc(nb ? nb : 1);
  if (!body) return ZT_ERR(ZT_STATUS_OOM, "zt_tokens_save: out of host memory for %zu bytes", nb);
  for (int64_t i = 0; i < t->count; i++) {
    uint32_t v = (uint32_t)t->ids[i];
    if (width == 2) body[2 * i] = (uint8_t)v, body[2 * i + 1] = (uint8_t)(v >> 8);
    else wr32(body + 4 * i, v);
  }
  const void *chunks[2] = {h, body};
  size_t sizes[2] = {sizeof h, nb};
  zt_status s = zt_write_file_atomic(path, chunks, sizes, 2);
  free(body);
  if (s) return zt__error_prefix(s, "writing token file '%s'", path);
  return ZT_OK;
}

zt_status zt_tokens_check_range(const zt_tokens *t, int32_t vocab_size) {
  if (!t || (!t->ids && t->count > 0)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokens_check_range: tokens are NULL");
  if (vocab_size <= 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokens_check_range: vocabulary size %d (must be > 0)", vocab_size);
  for (int64_t i = 0; i < t->count; i++)
    if (t->ids[i] < 0 || t->ids[i] >= vocab_size)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "token id %d at position %lld is outside the model's vocabulary [0, %d): tokenize the data with "
                    "the model's tokenizer, or use a model with a larger vocabulary (zt_train_config.model.vocab_size)",
                    t->ids[i], (long long)i, vocab_size);
  return ZT_OK;
}
