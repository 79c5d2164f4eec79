/* The memory this process may use (zt_mem_available in zt/train.h), what the --mem-limit
 * planner plans for when no limit is given: the least of its memory cgroup's limit (v2: memory.max
 * of its cgroup and of each cgroup above it; v1: hierarchical_memory_limit of its memory cgroup,
 * which is already the least over the ancestors) and the machine's MemAvailable plus the
 * process's own RSS (what it holds already is its own to use). The cgroup mounts are those
 * bench/mem_limit.sh uses: v2 at /sys/fs/cgroup or /sys/fs/cgroup/unified, v1 at
 * /sys/fs/cgroup/memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/offload_plan.h"

/* A limit of 2^60 bytes or more is no limit (v1 writes 2^63 - 4096 for none). */
#define NO_LIMIT ((int64_t)1 << 60)

/* The number in file path ("max", v2's none: NO_LIMIT); -1: no such file or no number. */
static int64_t read_number(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[64] = {0};
  long long v = -1;
  if (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "max", 3))
      v = NO_LIMIT;
    else if (sscanf(line, "%lld", &v) != 1)
      v = -1;
  }
  fclose(f);
  return v;
}

/* In the file path, the value of the line "key N" (-1: none). */
static int64_t read_keyed(const char *path, const char *key, int64_t unit) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  long long v = -1;
  size_t n = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && (line[n] == ' ' || line[n] == ':' || line[n] == '\t')) {
      if (sscanf(line + n + 1, "%lld", &v) != 1) v = -1;
      break;
    }
  fclose(f);
  return v < 0 ? -1 : (int64_t)v * unit;
}

/* From root/proc/self/cgroup: the v2 path (hierarchy 0) and the v1 memory path into v2 and v1
 * ("" when absent). */
static void cgroup_paths(const char *root, char *v2, char *v1, size_t cap) {
  v2[0] = v1[0] = '\0';
  char path[512];
  snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c1 = *c2 = '\0';
    const char *ctl = c1 + 1, *p = c2 + 1;
    if (!strcmp(line, "0") && !ctl[0]) snprintf(v2, cap, "%s", p);
    for (const char *s = ctl; *s;) { /* a comma-separated list of controllers */
      size_t n = strcspn(s, ",");
      if (n == 6 && !strncmp(s, "memory", 6)) snprintf(v1, cap, "%s", p);
      s += n + (s[n] == ',');
    }
  }
  fclose(f);
}

/* The least memory.max from the cgroup at mount + path up to mount's root; its file in at. */
static int64_t v2_limit(const char *mount, const char *path, char *at, size_t cap) {
  char dir[1024], file[1100];
  snprintf(dir, sizeof dir, "%s%s", mount, path);
  int64_t best = -1;
  for (;;) {
    size_t n = strlen(dir);
    while (n > strlen(mount) && dir[n - 1] == '/') dir[--n] = '\0';
    snprintf(file, sizeof file, "%s/memory.max", dir);
    int64_t v = read_number(file);
    if (v >= 0 && v < NO_LIMIT && (best < 0 || v < best)) best = v, snprintf(at, cap, "%s", file);
    if (n <= strlen(mount)) break;
    char *slash = strrchr(dir + strlen(mount), '/');
    if (!slash) break;
    *slash = '\0';
  }
  return best;
}

zt_status zt__mem_available_at(const char *root, int64_t rss, zt_mem_available_info *out) {
  if (!root || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_mem_available: out is NULL");
  memset(out, 0, sizeof *out);
  char v2[512], v1[512], at[1100] = "", file[1100];
  cgroup_paths(root, v2, v1, sizeof v2);
  int64_t cg = -1;
  const char *kind = "";
  if (v2[0]) {
    static const char *const mounts[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    for (int i = 0; i < 2 && cg < 0; i++) {
      char m[600], ctl[700];
      snprintf(m, sizeof m, "%s%s", root, mounts[i]);
      snprintf(ctl, sizeof ctl, "%s/cgroup.controllers", m);
      FILE *f = fopen(ctl, "r");
      if (!f) continue;
      fclose(f);
      cg = v2_limit(m, v2, at, sizeof at), kind = "v2";
    }
  }
  if (cg < 0 && v1[0]) {
    snprintf(file, sizeof file, "%s/sys/fs/cgroup/memory%s%smemory.stat", root, v1,
             v1[strlen(v1) - 1] == '/' ? "" : "/");
    int64_t v = read_keyed(file, "hierarchical_memory_limit", 1);
    if (v < 0) { /* an older kernel: this cgroup's own limit */
      snprintf(file, sizeof file, "%s/sys/fs/cgroup/memory%s%smemory.limit_in_bytes", root, v1,
               v1[strlen(v1) - 1] == '/' ? "" : "/");
      v = read_number(file);
    }
    if (v >= 0 && v < NO_LIMIT) cg = v, kind = "v1", snprintf(at, sizeof at, "%s", file);
  }
  snprintf(file, sizeof file, "%s/proc/meminfo", root);
  int64_t avail = read_keyed(file, "MemAvailable", 1024);
  if (avail >= 0) avail += rss > 0 ? rss : 0;
  const char *shown = at[0] ? at + strlen(root) : at; /* the file as the process sees it */
  if (cg >= 0 && (avail < 0 || cg <= avail)) {
    out->bytes = cg;
    snprintf(out->source, sizeof out->source, "the memory cgroup's limit (%s %s)", kind, shown);
  } else if (avail >= 0) {
    out->bytes = avail;
    snprintf(out->source, sizeof out->source, "the machine's MemAvailable (/proc/meminfo) and this process's RSS%s",
             cg >= 0 ? ", less than the memory cgroup's limit" : "");
  } else {
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "zt_mem_available: neither a memory cgroup limit nor /proc/meminfo's "
                                         "MemAvailable can be read here; give the limit (zt_train_config.memory.mem_limit)");
  }
  return ZT_OK;
}

zt_status zt_mem_available(zt_mem_available_info *out) { return zt__mem_available_at("", zt_mem_current_rss(), out); }
