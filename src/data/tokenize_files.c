/* Text files and folders of them into one token file: each file a document
 * (zt_tokenizer_encode_document: a Hugging Face tokenizer's bos/eos around each), in the order
 * given, a folder's files in byte order of their paths, so that the same inputs always give the
 * same tokens. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status_internal.h"
#include "zt/data.h"
#include "zt/io.h"

#define ZT_TOKENIZE_MAX_DEPTH 32

typedef struct path_list {
  char **p;
  size_t n, cap;
} path_list;

static zt_status list_add(path_list *l, const char *path) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    char **q = realloc(l->p, cap * sizeof *q);
    if (!q) return ZT_ERR(ZT_STATUS_OOM, "zt_tokenize_files: out of host memory");
    l->p = q, l->cap = cap;
  }
  size_t n = strlen(path);
  if (!(l->p[l->n] = malloc(n + 1))) return ZT_ERR(ZT_STATUS_OOM, "zt_tokenize_files: out of host memory");
  memcpy(l->p[l->n++], path, n + 1);
  return ZT_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The regular files under a folder, sorted, appended to l. */
static zt_status add_folder(path_list *l, const char *dir, int depth) {
  if (depth > ZT_TOKENIZE_MAX_DEPTH)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokenize_files: folders nested deeper than %d at '%s' (a link loop?)",
                  ZT_TOKENIZE_MAX_DEPTH, dir);
  DIR *d = opendir(dir);
  if (!d) return ZT_ERR(ZT_STATUS_IO, "zt_tokenize_files: cannot read folder '%s'", dir);
  path_list here = {0};
  zt_status s = ZT_OK;
  for (struct dirent *e; !s && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    size_t n = strlen(dir) + strlen(e->d_name) + 2;
    char *p = malloc(n);
    if (!p) {
      s = ZT_ERR(ZT_STATUS_OOM, "zt_tokenize_files: out of host memory");
      break;
    }
    snprintf(p, n, "%s/%s", dir, e->d_name);
    s = list_add(&here, p);
    free(p);
  }
  closedir(d);
  if (here.n) qsort(here.p, here.n, sizeof *here.p, cmp_str);
  for (size_t i = 0; !s && i < here.n; i++) {
    struct stat st;
    if (stat(here.p[i], &st) != 0) continue; /* a dangling link */
    if (S_ISDIR(st.st_mode)) s = add_folder(l, here.p[i], depth + 1);
    else if (S_ISREG(st.st_mode)) s = list_add(l, here.p[i]);
  }
  for (size_t i = 0; i < here.n; i++) free(here.p[i]);
  free(here.p);
  return s;
}

zt_status zt_tokenize_files(const zt_tokenizer *t, const char *const *paths, int n_paths, const char *out_path,
                            int64_t *n_docs, int64_t *n_tokens) {
  if (!t || !paths || n_paths < 1 || !out_path)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokenize_files: NULL argument or no input");
  path_list files = {0};
  zt_status s = ZT_OK;
  for (int i = 0; !s && i < n_paths; i++) {
    struct stat st;
    if (!paths[i]) s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokenize_files: input %d is NULL", i);
    else if (stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode)) s = add_folder(&files, paths[i], 0);
    else s = list_add(&files, paths[i]); /* reading it says what is wrong with it */
  }
  if (!s && files.n == 0) s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokenize_files: the folders given hold no files");
  zt_tokens tok = {.vocab_size = zt_tokenizer_vocab_size(t)};
  int64_t cap = 0;
  for (size_t i = 0; !s && i < files.n; i++) {
    void *data = NULL;
    size_t size = 0;
    int32_t *ids = NULL;
    int64_t n = 0;
    s = zt_read_file(files.p[i], &data, &size);
    if (!s) s = zt_tokenizer_encode_document(t, data, size, &ids, &n);
    free(data);
    if (s) {
      s = zt__error_prefix(s, "tokenizing '%s'", files.p[i]);
      break;
    }
    if (tok.count + n > cap) {
      int64_t c = cap ? cap : 1 << 16;
      while (c < tok.count + n) c *= 2;
      int32_t *q = realloc(tok.ids, (size_t)c * sizeof *q);
      if (!q) s = ZT_ERR(ZT_STATUS_OOM, "zt_tokenize_files: out of host memory for %lld tokens", (long long)c);
      else tok.ids = q, cap = c;
    }
    if (!s && n) memcpy(tok.ids + tok.count, ids, (size_t)n * sizeof *ids), tok.count += n;
    free(ids);
  }
  if (!s) s = zt_tokens_save(out_path, &tok, 0);
  if (!s && n_docs) *n_docs = (int64_t)files.n;
  if (!s && n_tokens) *n_tokens = tok.count;
  free(tok.ids);
  for (size_t i = 0; i < files.n; i++) free(files.p[i]);
  free(files.p);
  return s;
}

zt_status zt_tokenize_file(const zt_tokenizer *t, const char *text_path, const char *out_path) {
  if (!t || !text_path || !out_path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tokenize_file: NULL argument");
  return zt_tokenize_files(t, &text_path, 1, out_path, NULL, NULL);
}
