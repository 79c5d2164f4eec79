/* Checkpoint series: the folder that --save names holds one subfolder per save
 * (step-<N>, a complete checkpoint each) and a symbolic link 'latest' to the newest. A save
 * writes a hidden staging folder, renames it into place and only then swaps the link (an
 * atomic rename), so a crash, a kill or a full disk at any point leaves 'latest' naming a
 * complete checkpoint, whatever else the folder holds. Loads resolve the link once. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/grow.h"
#include "core/status_internal.h"
#include "io/atomic_file.h"
#include "snapshot/snapshot_internal.h"

#define CK_LATEST "latest"
#define CK_STATE "state.json"
#define CK_PATH_CAP 4096

static bool exists(const char *dir, const char *name) {
  char p[CK_PATH_CAP];
  return !zt__path_join(p, CK_PATH_CAP, dir, name) && access(p, F_OK) == 0;
}

/* "step-<digits>" with an optional "-<digits>" (a second save at the same step). */
static bool is_version_name(const char *name) {
  if (strncmp(name, "step-", 5)) return false;
  const char *p = name + 5;
  int dashes = 0, digits = 0;
  for (; *p; p++) {
    if (*p == '-' && digits && !dashes) dashes++, digits = 0;
    else if (*p >= '0' && *p <= '9') digits++;
    else return false;
  }
  return digits > 0;
}

/* The files zerotrain writes into a checkpoint folder (single-process and sharded), and
 * the temp files of an interrupted zt_write_file_atomic (".<name>.tmp.<pid>"). */
static bool is_ck_file(const char *name) {
  static const char *const files[] = {"model.safetensors", "config.json", "optim.safetensors", CK_STATE, "index.json",
                                      "vocab.json", "merges.txt"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    if (!strcmp(name, files[i])) return true;
  int r, n, end = 0;
  if (sscanf(name, "shard-%d-of-%d.safetensors%n", &r, &n, &end) == 2 && end > 0 && !name[end]) return true;
  return name[0] == '.' && strstr(name, ".tmp.") != NULL;
}

/* Remove a folder that zerotrain wrote: its checkpoint files, then the folder (which stays
 * when it holds anything else: a user's file is never deleted). state.json goes last: a
 * removal cut short (a kill) leaves a folder that still reads as a version, which the next
 * prune finishes; without its state it would be kept for ever as a save that never finished. */
static bool remove_ck_folder(const char *path) {
  DIR *d = opendir(path);
  if (!d) return errno == ENOENT;
  struct dirent *e;
  char p[CK_PATH_CAP];
  while ((e = readdir(d)))
    if (is_ck_file(e->d_name) && strcmp(e->d_name, CK_STATE) && !zt__path_join(p, CK_PATH_CAP, path, e->d_name))
      unlink(p);
  closedir(d);
  if (!zt__path_join(p, CK_PATH_CAP, path, CK_STATE)) unlink(p);
  return rmdir(path) == 0;
}

void zt__snap_new_save_id(char id[64], int64_t step) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(id, 64, "%llx-%llx-%lx", (unsigned long long)step,
           (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec, (long)getpid());
}

/* The folder name without trailing slashes ("/" stays). */
static zt_status clean_dir(const char *dir_in, char out[CK_PATH_CAP]) {
  if (!dir_in || !*dir_in) return ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint folder name is empty");
  if (strlen(dir_in) >= CK_PATH_CAP - 80) return ZT_ERR(ZT_STATUS_INVALID_ARG, "path '%s' is too long", dir_in);
  snprintf(out, CK_PATH_CAP, "%s", dir_in);
  for (size_t l = strlen(out); l > 1 && out[l - 1] == '/'; l--) out[l - 1] = '\0';
  return ZT_OK;
}

zt_status zt__snap_staging_join(const char *dir, const char *name, zt__snap_staging *k) {
  memset(k, 0, sizeof *k);
  ZT_TRY(clean_dir(dir, k->dir));
  if (!is_version_name(name) || strlen(name) >= sizeof k->name)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' is not a checkpoint version name", name);
  snprintf(k->name, sizeof k->name, "%s", name);
  char hidden[96];
  snprintf(hidden, sizeof hidden, ".%s.saving", name);
  ZT_TRY(zt__path_join(k->stage, CK_PATH_CAP, k->dir, hidden));
  ZT_TRY(zt__path_join(k->final, CK_PATH_CAP, k->dir, name));
  return ZT_OK;
}

zt_status zt__snap_staging_begin(const char *dir_in, int64_t step, zt__snap_staging *k) {
  char dir[CK_PATH_CAP];
  ZT_TRY(clean_dir(dir_in, dir));
  struct stat sb;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return ZT_ERR(ZT_STATUS_IO, "cannot create checkpoint folder '%s': %s", dir, strerror(errno));
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return ZT_ERR(ZT_STATUS_IO, "cannot save checkpoint '%s': it exists and is not a folder; name a folder", dir);
  /* staging folders of saves that were cut short */
  DIR *d = opendir(dir);
  if (!d) return ZT_ERR(ZT_STATUS_IO, "cannot save checkpoint '%s': %s", dir, strerror(errno));
  struct dirent *e;
  char p[CK_PATH_CAP];
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (e->d_name[0] == '.' && l > 8 && !strcmp(e->d_name + l - 7, ".saving") &&
        !zt__path_join(p, CK_PATH_CAP, dir, e->d_name))
      remove_ck_folder(p);
  }
  closedir(d);
  /* step-<N>, or step-<N>-<k> when a save at this step exists already (it may be 'latest') */
  char name[64];
  snprintf(name, sizeof name, "step-%08lld", (long long)step);
  for (int i = 1; exists(dir, name); i++) snprintf(name, sizeof name, "step-%08lld-%d", (long long)step, i);
  ZT_TRY(zt__snap_staging_join(dir, name, k));
  if (mkdir(k->stage, 0755) != 0)
    return ZT_ERR(ZT_STATUS_IO, "cannot save checkpoint in '%s': creating '%s' failed: %s", dir, k->stage,
                  strerror(errno));
  return ZT_OK;
}

void zt__snap_staging_abort(zt__snap_staging *k) { remove_ck_folder(k->stage); }

zt_status zt__snap_staging_commit(zt__snap_staging *k) {
  const char *dir = k->dir;
  if (rename(k->stage, k->final) != 0) {
    zt_status s = ZT_ERR(ZT_STATUS_IO, "cannot save checkpoint in '%s': renaming '%s' to '%s' failed: %s", dir,
                         k->stage, k->final, strerror(errno));
    remove_ck_folder(k->stage);
    return s;
  }
  int e = zt__fsync_dir(dir);
  if (e) return ZT_ERR(ZT_STATUS_IO, "cannot save checkpoint in '%s': fsync of the folder failed: %s", dir, strerror(e));
  /* the link: a new one under a temp name, renamed over the old one (atomic) */
  char tmp[CK_PATH_CAP], link[CK_PATH_CAP], tmpname[64];
  snprintf(tmpname, sizeof tmpname, ".%s.tmp.%ld", CK_LATEST, (long)getpid());
  ZT_TRY(zt__path_join(tmp, CK_PATH_CAP, dir, tmpname));
  ZT_TRY(zt__path_join(link, CK_PATH_CAP, dir, CK_LATEST));
  unlink(tmp);
  if (symlink(k->name, tmp) != 0)
    return ZT_ERR(ZT_STATUS_IO, "saved '%s' but cannot create the link '%s': %s", k->final, tmp, strerror(errno));
  if (rename(tmp, link) != 0) {
    int err = errno;
    unlink(tmp);
    return ZT_ERR(ZT_STATUS_IO,
                  "saved '%s' but cannot point '%s' at it: %s (is '%s' a folder? zerotrain keeps a link there: move "
                  "it away)",
                  k->final, link, strerror(err), link);
  }
  if ((e = zt__fsync_dir(dir)))
    return ZT_ERR(ZT_STATUS_IO, "saved '%s' but the fsync of '%s' failed: %s", k->final, dir, strerror(e));
  return ZT_OK;
}

bool zt__snap_holds_checkpoint(const char *dir_in) {
  char dir[CK_PATH_CAP], p[CK_PATH_CAP];
  struct stat sb;
  if (clean_dir(dir_in, dir) || zt__path_join(p, CK_PATH_CAP, dir, CK_LATEST)) return false;
  if (lstat(p, &sb) == 0 || exists(dir, CK_STATE)) return true;
  DIR *d = opendir(dir);
  bool found = false;
  for (struct dirent *e; d && !found && (e = readdir(d));) found = is_version_name(e->d_name);
  if (d) closedir(d);
  return found;
}

/* ------------------------------------------------------------------ resolve */

zt_status zt_snapshot_resolve(const char *dir_in, char *out, size_t cap) {
  if (!out || cap == 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_resolve: no output buffer");
  char dir[CK_PATH_CAP], path[CK_PATH_CAP], res[CK_PATH_CAP];
  ZT_TRY(clean_dir(dir_in, dir));
  struct stat sb;
  if (stat(dir, &sb) != 0) return ZT_ERR(ZT_STATUS_IO, "cannot open checkpoint '%s': %s", dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return ZT_ERR(ZT_STATUS_IO,
                  "checkpoint '%s' is not a folder (a checkpoint is a folder written by a training run "
                  "(zt_train_config.checkpoint.save), holding "
                  "'latest' and step-N folders, or one step-N folder itself)",
                  dir);
  ZT_TRY(zt__path_join(path, CK_PATH_CAP, dir, CK_LATEST));
  if (lstat(path, &sb) == 0) {
    char target[CK_PATH_CAP];
    ssize_t n = S_ISLNK(sb.st_mode) ? readlink(path, target, sizeof target - 1) : -1;
    if (S_ISLNK(sb.st_mode) && n <= 0)
      return ZT_ERR(ZT_STATUS_IO, "cannot read the link '%s': %s", path, strerror(errno));
    if (n > 0) { /* resolved once: a save that swaps the link meanwhile does not mix two checkpoints */
      target[n] = '\0';
      if (target[0] == '/') snprintf(res, sizeof res, "%s", target);
      else ZT_TRY(zt__path_join(res, CK_PATH_CAP, dir, target));
    } else {
      snprintf(res, sizeof res, "%s", path); /* a copied folder named latest */
    }
  } else if (exists(dir, CK_STATE)) {
    snprintf(res, sizeof res, "%s", dir); /* one checkpoint folder (a step-N, or an older layout) */
  } else {
    /* say why: nothing yet, or a save that never finished */
    DIR *d = opendir(dir);
    struct dirent *e;
    char partial[256] = "";
    while (d && (e = readdir(d)))
      if (e->d_name[0] == '.' && strstr(e->d_name, ".saving")) snprintf(partial, sizeof partial, "%s", e->d_name);
    if (d) closedir(d);
    if (partial[0])
      return ZT_ERR(ZT_STATUS_IO,
                    "checkpoint folder '%s' holds no finished checkpoint: the only save into it (%s) was interrupted "
                    "before it finished",
                    dir, partial);
    char cfg[CK_PATH_CAP + 16];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    bool hf = access(cfg, F_OK) == 0;
    return ZT_ERR(ZT_STATUS_IO,
                  "'%s' holds no checkpoint (no 'latest' link and no state.json): name a folder written by a training "
                  "run (zt_train_config.checkpoint.save)%s",
                  dir, hf ? "; it is a Hugging Face model folder (config.json), which has no training state to resume: "
                            "start from its weights with zt_train_config.model.init_from" : "");
  }
  if (strlen(res) >= cap) return ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint path '%s' is too long", res);
  snprintf(out, cap, "%s", res);
  return ZT_OK;
}

/* ------------------------------------------------------------------ prune */

typedef struct version {
  char name[64];
  unsigned long long saved_ns;
} version;

static int newest_first(const void *a, const void *b) {
  const version *x = a, *y = b;
  if (x->saved_ns != y->saved_ns) return x->saved_ns < y->saved_ns ? 1 : -1;
  return strcmp(y->name, x->name);
}

zt_status zt_snapshot_prune(const char *dir_in, int keep) {
  if (keep < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_prune: keep %d must be >= 1", keep);
  char dir[CK_PATH_CAP], path[CK_PATH_CAP], latest[CK_PATH_CAP] = "";
  ZT_TRY(clean_dir(dir_in, dir));
  ZT_TRY(zt__path_join(path, CK_PATH_CAP, dir, CK_LATEST));
  ssize_t ln = readlink(path, latest, sizeof latest - 1);
  latest[ln > 0 ? ln : 0] = '\0';
  DIR *d = opendir(dir);
  if (!d) return ZT_ERR(ZT_STATUS_IO, "cannot read checkpoint folder '%s': %s", dir, strerror(errno));
  version *v = NULL;
  int n = 0, cap = 0;
  zt_status s = ZT_OK;
  struct dirent *e;
  while ((e = readdir(d)) && !s) {
    struct stat sb;
    if (!is_version_name(e->d_name) || strlen(e->d_name) >= sizeof v->name || !strcmp(e->d_name, latest) ||
        zt__path_join(path, CK_PATH_CAP, dir, e->d_name) ||
        lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
      continue;
    char id[64];
    unsigned long long step, ns;
    /* A step-N folder without a readable state.json is what a prune cut short left (a save
     * renames its stage to step-N only once complete, and a prune removes state.json last):
     * finish removing it (remove_ck_folder leaves it if it holds anything of the user's). */
    if (zt__snap_read_state(path, NULL, id, NULL) || sscanf(id, "%llx-%llx", &step, &ns) != 2) {
      zt_clear_error();
      remove_ck_folder(path);
      continue;
    }
    version *g = zt__grow(v, &cap, n + 1, sizeof *v, "the list of checkpoint versions");
    if (!g) {
      s = ZT_STATUS_OOM;
      break;
    }
    v = g;
    memcpy(v[n].name, e->d_name, strlen(e->d_name) + 1);
    v[n++].saved_ns = ns;
  }
  closedir(d);
  if (!s) {
    if (n > 1) qsort(v, (size_t)n, sizeof *v, newest_first); /* v is NULL when n is 0 */
    /* the latest counts as one of the kept */
    for (int i = keep - (latest[0] ? 1 : 0); i < n && !s; i++)
      if (!zt__path_join(path, CK_PATH_CAP, dir, v[i].name) && !remove_ck_folder(path) && errno != ENOTEMPTY &&
          errno != EEXIST)
        s = ZT_ERR(ZT_STATUS_IO, "cannot remove old checkpoint '%s': %s", path, strerror(errno));
  }
  free(v);
  return s;
}
