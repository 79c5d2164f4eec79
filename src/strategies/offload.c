/* Activation offload on saved-tensor hooks: pack copies a saved view's span of storage into
 * a tier entry (shared per storage id + version) and keeps no reference to the storage; a
 * helper thread loads the entries packed just before the one being unpacked.
 * Invariants: tier bytes are freed only on the calling thread, never while the helper reads
 * them; everything the helper touches is guarded by mu. Saved tensors may live on any
 * device: the tiers work on host bytes, which are the storage's own when its backend is
 * host-accessible (cpu: no extra copy) and a staging buffer moved by the backend
 * otherwise (zt__dev_storage_read / _write, on the helper thread too). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zt/offload.h"
#include "../core/backend.h"
#include "../core/tensor_internal.h"

#define MAX_PREFETCH 64
#define DISK_ALIGN 64 /* spill-file extents start on cache-line offsets */
static const zt_device disk_dev = {ZT_DEVICE_DISK, 0};

typedef enum entry_state {
  ENTRY_TIER = 0, /* only in the tier */
  ENTRY_QUEUED,   /* waiting for the helper */
  ENTRY_LOADING,  /* the helper is reading its tier bytes */
  ENTRY_READY,    /* loaded: ready holds the bytes */
  ENTRY_FAILED    /* the helper failed: err and errmsg say why */
} entry_state;

/* Where the tier keeps an entry's bytes. */
typedef struct tier_loc {
  void *host;      /* memory tiers */
  int64_t off;     /* disk: offset in the spill file */
  size_t bytes;    /* held by the tier */
  bool compressed; /* bf16 of f32/f64 values */
} tier_loc;

/* A tier: a struct of function pointers plus ctx, one per implementation (host, bf16,
 * disk). put and drop run on the calling thread; get also on the helper, so it reads only
 * loc and the fields of ctx that never change, and drop never runs during a get of loc. */
typedef struct tier_ops {
  /* copy n elements of dtype dt at src into the tier; loc says where they went */
  zt_status (*put)(void *ctx, const void *src, zt_dtype dt, int64_t n, tier_loc *loc);
  /* write them back, as dt, into dst */
  zt_status (*get)(void *ctx, const tier_loc *loc, zt_dtype dt, int64_t n, void *dst);
  void (*drop)(void *ctx, const tier_loc *loc);
  void (*free)(void *ctx); /* optional */
} tier_ops;

/* One tier copy of elements [lo, lo + n) of a storage, in the dtype of the views. */
typedef struct entry {
  uint64_t sid, version;
  zt_dtype dtype;
  zt_device device; /* of the saved storage: loads are made there */
  zt_mem_tag tag;   /* of the saved storage: loads are accounted as what they bring back */
  int64_t lo, n;
  size_t nbytes; /* of the span in its own dtype: what a load makes */
  tier_loc loc;  /* where the tier keeps it */
  int refs;      /* records using it (calling thread only) */
  /* guarded by mu */
  entry_state state;
  bool wanted; /* in the window: a finished load is kept, else dropped */
  bool used;   /* READY and already handed to an unpack (so a later one is a reuse, not a hit) */
  zt_storage *ready;
  zt_status err;
  char *errmsg;
  struct entry *qnext;
  /* calling thread only */
  struct entry *prev, *next; /* pack order */
  struct entry *hnext;       /* hash chain (same sid bucket) */
} entry;

/* What one saved tensor keeps: its view geometry and its entry, or an alias when kept. */
typedef struct record {
  zt_offload *o;
  entry *e;
  zt_tensor *kept;
  uint64_t version; /* kept: storage version at pack, for the in-place check */
  int64_t offset;   /* elements from the entry's span start */
  int ndim;
  int64_t shape[ZT_MAX_DIMS], stride[ZT_MAX_DIMS];
  zt_dtype dtype;
} record;

struct zt_offload {
  zt_offload_options opt;
  const tier_ops *tier;
  void *tier_ctx;
  int refs;         /* the handle + one per live record */
  bool handle_freed;
  int pushed;
  entry *head, *tail;
  entry **buckets;
  size_t nbuckets, n_live;
  entry *pf[MAX_PREFETCH + 1]; /* the window: the entry last unpacked and the ones before it */
  int n_pf;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_t thread;
  bool thread_on, thread_failed, stop;
  entry *q_head;
  zt_offload_stats st;
};

static void tier_add(zt_offload *o, int64_t delta) {
  o->st.bytes_in_tier += delta;
  if (o->st.bytes_in_tier > o->st.peak_bytes_in_tier) o->st.peak_bytes_in_tier = o->st.bytes_in_tier;
}

/* ---------------------------------------------------------------- memory tiers */
/* Round to nearest even, NaN kept quiet: the rule of zt_f32_to_bf16, inlined for speed. */
static inline uint16_t bf16_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float f32_of_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* src (n elements of f32 or f64) = bf16 into dst. f64 rounds to f32 first. Runs on the
 * calling thread (pack), so it may use the OpenMP pool. */
static void bf16_compress(const void *src, zt_dtype dt, uint16_t *dst, int64_t n) {
  if (dt == ZT_DTYPE_F32) {
    const float *s = src;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_of(s[i]);
  } else {
    const double *s = src;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_of((float)s[i]);
  }
}

/* Also runs on the helper thread: no OpenMP here (it would start a second pool). */
static void bf16_expand(const uint16_t *src, zt_dtype dt, void *dst, int64_t n) {
  if (dt == ZT_DTYPE_F32) {
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_of_bf16(src[i]);
  } else {
    double *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_of_bf16(src[i]);
  }
}

/* Host memory, accounted as cpu ACTIVATION so the tier shows in the memory table. */
static zt_status host_put(void *ctx, const void *src, zt_dtype dt, int64_t n, tier_loc *loc) {
  (void)ctx;
  loc->bytes = (size_t)n * zt_dtype_size(dt);
  ZT_TRY(zt_mem_alloc(loc->bytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION, &loc->host));
  memcpy(loc->host, src, loc->bytes);
  return ZT_OK;
}

/* f32 and f64 become bf16; bf16 and f16 are no wider, so they are copied as they are. */
static zt_status bf16_put(void *ctx, const void *src, zt_dtype dt, int64_t n, tier_loc *loc) {
  if (dt != ZT_DTYPE_F32 && dt != ZT_DTYPE_F64) return host_put(ctx, src, dt, n, loc);
  loc->compressed = true;
  loc->bytes = (size_t)n * 2;
  ZT_TRY(zt_mem_alloc(loc->bytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION, &loc->host));
  bf16_compress(src, dt, loc->host, n);
  return ZT_OK;
}

static zt_status mem_get(void *ctx, const tier_loc *loc, zt_dtype dt, int64_t n, void *dst) {
  (void)ctx;
  if (loc->compressed) bf16_expand(loc->host, dt, dst, n);
  else memcpy(dst, loc->host, loc->bytes);
  return ZT_OK;
}

static void mem_drop(void *ctx, const tier_loc *loc) {
  (void)ctx;
  zt_mem_free(loc->host, loc->bytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION);
}

static const tier_ops host_tier = {host_put, mem_get, mem_drop, NULL};
static const tier_ops bf16_tier = {bf16_put, mem_get, mem_drop, NULL};

/* ---------------------------------------------------------------- disk tier */
typedef struct extent {
  int64_t off, len;
} extent;

/* One unlinked spill file. fd and dir never change (the helper reads them); the rest is
 * the calling thread's. */
typedef struct spill {
  int fd;
  char *dir;
  int64_t end;      /* bytes in use up to here */
  extent *free_ext; /* freed extents below end: sorted by offset, coalesced */
  int n_free, cap_free;
  int64_t live; /* extents in use: at 0 the file is emptied */
} spill;

static zt_status write_full(const spill *sp, const void *buf, size_t n, int64_t off) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = pwrite(sp->fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return ZT_ERR(ZT_STATUS_IO,
                    "zt_offload: writing %zu bytes at offset %lld of the spill file in '%s' failed: %s; free disk "
                    "space there or pass another directory in zt_offload_options.dir",
                    n, (long long)off, sp->dir, k < 0 ? strerror(errno) : "nothing written");
    p += k, n -= (size_t)k, off += k;
  }
  return ZT_OK;
}

static zt_status read_full(const spill *sp, void *buf, size_t n, int64_t off) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = pread(sp->fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return ZT_ERR(ZT_STATUS_IO,
                    "zt_offload: reading %zu bytes at offset %lld of the spill file in '%s' failed: %s; the disk "
                    "or file system there may be failing",
                    n, (long long)off, sp->dir, k < 0 ? strerror(errno) : "unexpected end of file");
    p += k, n -= (size_t)k, off += k;
  }
  return ZT_OK;
}

static int64_t round_up(int64_t n) { return (n + DISK_ALIGN - 1) / DISK_ALIGN * DISK_ALIGN; }

/* First fit among freed extents, else the end of the file. */
static int64_t extent_alloc(spill *sp, int64_t len) {
  len = round_up(len);
  for (int i = 0; i < sp->n_free; i++) {
    extent *x = &sp->free_ext[i];
    if (x->len < len) continue;
    int64_t off = x->off;
    x->off += len;
    x->len -= len;
    if (x->len == 0) {
      memmove(x, x + 1, sizeof *x * (size_t)(sp->n_free - i - 1));
      sp->n_free--;
    }
    return off;
  }
  int64_t off = sp->end;
  sp->end += len;
  return off;
}

/* Give an extent back: merged with its neighbours, and the end pulled in when it was the
 * last one. */
static void extent_free(spill *sp, int64_t off, int64_t len) {
  len = round_up(len);
  int i = 0;
  while (i < sp->n_free && sp->free_ext[i].off < off) i++;
  bool merge_prev = i > 0 && sp->free_ext[i - 1].off + sp->free_ext[i - 1].len == off;
  bool merge_next = i < sp->n_free && off + len == sp->free_ext[i].off;
  if (merge_prev && merge_next) {
    sp->free_ext[i - 1].len += len + sp->free_ext[i].len;
    memmove(&sp->free_ext[i], &sp->free_ext[i + 1], sizeof *sp->free_ext * (size_t)(sp->n_free - i - 1));
    sp->n_free--;
  } else if (merge_prev) {
    sp->free_ext[i - 1].len += len;
  } else if (merge_next) {
    sp->free_ext[i].off = off;
    sp->free_ext[i].len += len;
  } else {
    if (sp->n_free == sp->cap_free) {
      int cap = sp->cap_free ? 2 * sp->cap_free : 16;
      extent *x = realloc(sp->free_ext, sizeof *x * (size_t)cap);
      if (!x) return; /* the space is lost until the file is emptied; never a wrong read */
      sp->free_ext = x;
      sp->cap_free = cap;
    }
    memmove(&sp->free_ext[i + 1], &sp->free_ext[i], sizeof *sp->free_ext * (size_t)(sp->n_free - i));
    sp->free_ext[i] = (extent){off, len};
    sp->n_free++;
  }
  extent *last = sp->n_free ? &sp->free_ext[sp->n_free - 1] : NULL;
  if (last && last->off + last->len == sp->end) {
    sp->end = last->off;
    sp->n_free--;
  }
}

/* Writes are synchronous: simple, and the bytes are on their way before pack returns, so
 * forward may free the activation at once. */
static zt_status disk_put(void *ctx, const void *src, zt_dtype dt, int64_t n, tier_loc *loc) {
  spill *sp = ctx;
  loc->bytes = (size_t)n * zt_dtype_size(dt);
  loc->off = extent_alloc(sp, (int64_t)loc->bytes);
  zt_status s = write_full(sp, src, loc->bytes, loc->off);
  if (s) {
    extent_free(sp, loc->off, (int64_t)loc->bytes);
    return s;
  }
  sp->live++;
  zt_mem_account(disk_dev, ZT_MEM_TAG_ACTIVATION, (int64_t)loc->bytes);
  return ZT_OK;
}

static zt_status disk_get(void *ctx, const tier_loc *loc, zt_dtype dt, int64_t n, void *dst) {
  (void)dt, (void)n;
  return read_full(ctx, dst, loc->bytes, loc->off);
}

static void disk_drop(void *ctx, const tier_loc *loc) {
  spill *sp = ctx;
  extent_free(sp, loc->off, (int64_t)loc->bytes);
  zt_mem_account(disk_dev, ZT_MEM_TAG_ACTIVATION, -(int64_t)loc->bytes);
  if (--sp->live == 0) { /* nothing live: give the disk space back between steps */
    sp->n_free = 0;
    sp->end = 0;
    if (ftruncate(sp->fd, 0) != 0) { /* only the space stays taken; later writes overwrite it */
    }
  }
}

static void spill_free(void *ctx) {
  spill *sp = ctx;
  if (!sp) return;
  if (sp->fd >= 0) close(sp->fd);
  free(sp->dir);
  free(sp->free_ext);
  free(sp);
}

static const tier_ops disk_tier = {disk_put, disk_get, disk_drop, spill_free};

static zt_status spill_open(const char *dir, spill **out) {
  spill *sp = calloc(1, sizeof *sp);
  size_t n = strlen(dir) + sizeof "/zt_offload_XXXXXX";
  char *path = malloc(n);
  if (sp) sp->fd = -1;
  if (sp) sp->dir = strdup(dir);
  if (!sp || !sp->dir || !path) {
    free(path);
    spill_free(sp);
    return ZT_ERR(ZT_STATUS_OOM, "zt_offload_new: out of host memory");
  }
  snprintf(path, n, "%s/zt_offload_XXXXXX", dir);
  sp->fd = mkostemp(path, O_CLOEXEC);
  zt_status s = ZT_OK;
  if (sp->fd < 0)
    s = ZT_ERR(ZT_STATUS_IO,
               "zt_offload_new: cannot create a spill file in directory '%s': %s; pass a writable directory in "
               "zt_offload_options.dir (or set TMPDIR)",
               dir, strerror(errno));
  /* unlinked at once: the bytes live while fd is open, and nothing is left after a crash */
  else if (unlink(path) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "zt_offload_new: cannot unlink the spill file '%s' in directory '%s': %s", path, dir,
               strerror(errno));
  free(path);
  if (s) {
    spill_free(sp);
    return s;
  }
  *out = sp;
  return ZT_OK;
}

/* ---------------------------------------------------------------- loads */
typedef struct load_src {
  const tier_ops *tier;
  void *ctx;
  tier_loc loc;
  size_t nbytes;
  int64_t n;
  zt_dtype dtype;
  zt_device device;
  zt_mem_tag tag;
} load_src;

static load_src src_of(const zt_offload *o, const entry *e) {
  return (load_src){o->tier, o->tier_ctx, e->loc, e->nbytes, e->n, e->dtype, e->device, e->tag};
}

/* A new storage (on the saved storage's device, with its tag) holding the entry's span.
 * Thread-safe: the allocator and the backends' byte moves are, and the tier bytes are not
 * dropped while this runs. */
static zt_status load(const load_src *src, zt_storage **out) {
  zt_storage *s;
  ZT_TRY(zt_storage_new(src->nbytes, src->device, src->tag, &s));
  void *host = zt__storage_host_data(s), *stage = NULL;
  zt_status st = host ? ZT_OK : zt_mem_alloc(src->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP, &stage);
  if (!st) st = src->tier->get(src->ctx, &src->loc, src->dtype, src->n, host ? host : stage);
  if (!st && stage) zt__dev_storage_write(s, 0, stage, src->nbytes);
  if (stage) zt_mem_free(stage, src->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  if (st) {
    zt_storage_release_ref(s);
    return st;
  }
  *out = s;
  return ZT_OK;
}

/* ---------------------------------------------------------------- helper thread */
static void queue_remove(zt_offload *o, entry *e) {
  for (entry **p = &o->q_head; *p; p = &(*p)->qnext)
    if (*p == e) {
      *p = e->qnext;
      e->qnext = NULL;
      return;
    }
}

static void queue_append(zt_offload *o, entry *e) {
  entry **p = &o->q_head;
  while (*p) p = &(*p)->qnext;
  e->qnext = NULL;
  *p = e;
}

static void *helper_main(void *arg) {
  zt_offload *o = arg;
  pthread_mutex_lock(&o->mu);
  for (;;) {
    while (!o->stop && !o->q_head) pthread_cond_wait(&o->work, &o->mu);
    if (o->stop) break;
    entry *e = o->q_head;
    o->q_head = e->qnext;
    e->qnext = NULL;
    e->state = ENTRY_LOADING;
    load_src src = src_of(o, e);
    pthread_mutex_unlock(&o->mu);
    zt_storage *s = NULL;
    zt_status st = load(&src, &s);
    char *msg = st ? strdup(zt_last_error()) : NULL; /* zt_last_error is this thread's */
    pthread_mutex_lock(&o->mu);
    o->st.prefetched++;
    if (!e->wanted) { /* left the window while loading: drop it */
      e->state = ENTRY_TIER;
      zt_storage_release_ref(s);
      free(msg);
    } else if (st) {
      e->state = ENTRY_FAILED;
      e->err = st;
      e->errmsg = msg;
    } else {
      e->state = ENTRY_READY;
      e->ready = s;
      e->used = false;
    }
    pthread_cond_broadcast(&o->done);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

/* Take e out of the window (under mu): whatever was loaded for it is dropped. A load in
 * flight is dropped by the helper when it finishes. */
static void unwant(zt_offload *o, entry *e) {
  e->wanted = false;
  if (e->state == ENTRY_QUEUED) {
    queue_remove(o, e);
    e->state = ENTRY_TIER;
  } else if (e->state == ENTRY_READY) {
    zt_storage_release_ref(e->ready);
    e->ready = NULL;
    e->state = ENTRY_TIER;
  } else if (e->state == ENTRY_FAILED) {
    free(e->errmsg);
    e->errmsg = NULL;
    e->state = ENTRY_TIER;
  }
}

static void window_remove(zt_offload *o, entry *e) {
  for (int i = 0; i < o->n_pf; i++)
    if (o->pf[i] == e) {
      memmove(&o->pf[i], &o->pf[i + 1], sizeof *o->pf * (size_t)(o->n_pf - i - 1));
      o->n_pf--;
      return;
    }
}

/* Under mu: the window becomes cur (whose load stays for the other saves of its storage,
 * often unpacked by the next node) and the `prefetch` live entries packed just before it
 * (the ones backward needs next). Entries that left it are dropped, new ones queued for
 * the helper. So loaded-but-unused bytes stay within prefetch + 1 entries. */
static void schedule(zt_offload *o, entry *cur) {
  entry *w[MAX_PREFETCH + 1];
  int nw = 0;
  w[nw++] = cur;
  if (!o->thread_failed)
    for (entry *p = cur->prev; p && nw < o->opt.prefetch + 1; p = p->prev) w[nw++] = p;
  for (int i = 0; i < o->n_pf; i++) {
    entry *x = o->pf[i];
    bool keep = false;
    for (int j = 0; j < nw && !keep; j++) keep = w[j] == x;
    if (!keep) unwant(o, x);
  }
  bool queued = false;
  for (int j = 0; j < nw; j++) {
    w[j]->wanted = true;
    if (j > 0 && w[j]->state == ENTRY_TIER) {
      w[j]->state = ENTRY_QUEUED;
      queue_append(o, w[j]);
      queued = true;
    }
    o->pf[j] = w[j];
  }
  o->n_pf = nw;
  if (!queued) return;
  if (!o->thread_on) {
    if (pthread_create(&o->thread, NULL, helper_main, o) != 0) {
      /* no thread: loads become synchronous; slower, never wrong */
      o->thread_failed = true;
      for (int j = 1; j < nw; j++) unwant(o, w[j]);
      o->n_pf = 1;
      return;
    }
    o->thread_on = true;
    o->st.threads_started++;
  }
  pthread_cond_signal(&o->work);
}

/* ---------------------------------------------------------------- entries */
/* Fibonacci hashing: ids are sequential, so spread them before masking. */
static size_t bucket_of(const zt_offload *o, uint64_t sid) {
  return (size_t)(sid * 0x9E3779B97F4A7C15ull >> 20) & (o->nbuckets - 1);
}

static zt_status hash_insert(zt_offload *o, entry *e) {
  if (o->n_live + 1 > o->nbuckets) { /* grow: chains stay about one long */
    size_t nb = o->nbuckets * 2;
    entry **b = calloc(nb, sizeof *b);
    if (!b) return ZT_ERR(ZT_STATUS_OOM, "zt_offload: out of host memory for the entry table");
    entry **old = o->buckets;
    size_t onb = o->nbuckets;
    o->buckets = b;
    o->nbuckets = nb;
    for (size_t i = 0; i < onb; i++)
      for (entry *x = old[i], *nx; x; x = nx) {
        nx = x->hnext;
        size_t k = bucket_of(o, x->sid);
        x->hnext = b[k];
        b[k] = x;
      }
    free(old);
  }
  size_t k = bucket_of(o, e->sid);
  e->hnext = o->buckets[k];
  o->buckets[k] = e;
  return ZT_OK;
}

static void hash_remove(zt_offload *o, entry *e) {
  for (entry **p = &o->buckets[bucket_of(o, e->sid)]; *p; p = &(*p)->hnext)
    if (*p == e) {
      *p = e->hnext;
      return;
    }
}

/* A live copy of the same storage bytes (id, version, dtype) covering [lo, lo + n). */
static entry *find_entry(const zt_offload *o, const zt_tensor *t, int64_t lo, int64_t n) {
  for (entry *e = o->buckets[bucket_of(o, t->storage->id)]; e; e = e->hnext)
    if (e->sid == t->storage->id && e->version == t->storage->version && e->dtype == t->dtype && e->lo <= lo &&
        lo + n <= e->lo + e->n)
      return e;
  return NULL;
}

static void free_tier_bytes(zt_offload *o, entry *e) {
  o->tier->drop(o->tier_ctx, &e->loc);
  tier_add(o, -(int64_t)e->loc.bytes);
}

/* Copy elements [lo, lo + n) of t's storage to the tier, as a new live entry. */
static zt_status make_entry(zt_offload *o, const zt_tensor *t, int64_t lo, int64_t n, entry **out) {
  entry *e = calloc(1, sizeof *e);
  if (!e) return ZT_ERR(ZT_STATUS_OOM, "zt_offload: out of host memory for a tier entry");
  size_t es = zt_dtype_size(t->dtype);
  e->sid = t->storage->id;
  e->version = t->storage->version;
  e->dtype = t->dtype;
  e->device = t->storage->device;
  e->tag = t->storage->tag;
  e->lo = lo;
  e->n = n;
  e->nbytes = (size_t)n * es;
  /* the tier reads host bytes: the storage's own, or a copy staged by its backend */
  const char *host = zt__storage_host_data(t->storage);
  void *stage = NULL;
  zt_status s = host ? ZT_OK : zt_mem_alloc(e->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP, &stage);
  if (!s && stage) zt__dev_storage_read(t->storage, (size_t)lo * es, stage, e->nbytes);
  if (!s) s = o->tier->put(o->tier_ctx, host ? host + lo * (int64_t)es : stage, t->dtype, n, &e->loc);
  if (stage) zt_mem_free(stage, e->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  if (s == ZT_OK) {
    tier_add(o, (int64_t)e->loc.bytes);
    s = hash_insert(o, e);
    if (s) free_tier_bytes(o, e);
  }
  if (s) {
    free(e);
    return s;
  }
  e->prev = o->tail;
  if (o->tail) o->tail->next = e;
  else o->head = e;
  o->tail = e;
  o->n_live++;
  o->st.entries++;
  o->st.bytes_offloaded += (int64_t)e->nbytes;
  *out = e;
  return ZT_OK;
}

static void entry_unref(zt_offload *o, entry *e) {
  if (--e->refs > 0) return;
  pthread_mutex_lock(&o->mu);
  while (e->state == ENTRY_LOADING) pthread_cond_wait(&o->done, &o->mu); /* its tier bytes are being read */
  unwant(o, e);
  window_remove(o, e);
  pthread_mutex_unlock(&o->mu);
  free_tier_bytes(o, e);
  hash_remove(o, e);
  if (e->prev) e->prev->next = e->next;
  else o->head = e->next;
  if (e->next) e->next->prev = e->prev;
  else o->tail = e->prev;
  free(e);
  o->n_live--;
}

/* ---------------------------------------------------------------- the store */
static void store_destroy(zt_offload *o) {
  ZT_ASSERT(o->n_live == 0 && !o->q_head);
  if (o->thread_on) {
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_broadcast(&o->work);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
  }
  if (o->tier && o->tier->free) o->tier->free(o->tier_ctx);
  pthread_cond_destroy(&o->work);
  pthread_cond_destroy(&o->done);
  pthread_mutex_destroy(&o->mu);
  free(o->buckets);
  free(o);
}

static void store_unref(zt_offload *o) {
  if (--o->refs == 0) store_destroy(o);
}

zt_offload_options zt_offload_options_default(zt_offload_tier tier) {
  return (zt_offload_options){tier, NULL, 64 << 10, 2};
}

zt_status zt_offload_new(const zt_offload_options *opt, zt_offload **out) {
  if (!opt || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_new: options or out is NULL");
  *out = NULL;
  if (opt->tier != ZT_OFFLOAD_BF16 && opt->tier != ZT_OFFLOAD_DISK && opt->tier != ZT_OFFLOAD_HOST)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_offload_new: tier %d is not a zt_offload_tier; use ZT_OFFLOAD_BF16, ZT_OFFLOAD_DISK or "
                  "ZT_OFFLOAD_HOST",
                  (int)opt->tier);
  if (opt->min_bytes < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_new: min_bytes is %lld; it must be >= 0",
                  (long long)opt->min_bytes);
  if (opt->prefetch < 0 || opt->prefetch > MAX_PREFETCH)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_new: prefetch is %d; it must be in [0, %d] (0: no helper thread)",
                  opt->prefetch, MAX_PREFETCH);
  zt_offload *o = calloc(1, sizeof *o);
  if (!o) return ZT_ERR(ZT_STATUS_OOM, "zt_offload_new: out of host memory");
  o->opt = *opt;
  o->refs = 1;
  o->nbuckets = 64;
  o->buckets = calloc(o->nbuckets, sizeof *o->buckets);
  if (!o->buckets) {
    free(o);
    return ZT_ERR(ZT_STATUS_OOM, "zt_offload_new: out of host memory");
  }
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->work, NULL);
  pthread_cond_init(&o->done, NULL);
  zt_status s = ZT_OK;
  if (opt->tier == ZT_OFFLOAD_DISK) {
    const char *tmp = getenv("TMPDIR");
    spill *sp = NULL;
    s = spill_open(opt->dir ? opt->dir : tmp && *tmp ? tmp : "/tmp", &sp);
    o->tier = &disk_tier;
    o->tier_ctx = sp;
  } else {
    o->tier = opt->tier == ZT_OFFLOAD_BF16 ? &bf16_tier : &host_tier;
  }
  o->opt.dir = NULL; /* the caller's string is not kept */
  if (s) {
    store_destroy(o);
    return s;
  }
  *out = o;
  return ZT_OK;
}

void zt_offload_free(zt_offload *o) {
  if (!o) return;
  ZT_ASSERT(!o->handle_freed);
  ZT_ASSERT(o->pushed == 0); /* its hooks would point at a freed handle: pop them first */
  o->handle_freed = true;
  store_unref(o);
}

/* ---------------------------------------------------------------- hooks */
/* Why t stays as it is (NULL: it goes to the tier). */
static const char *keep_reason(const zt_offload *o, const zt_tensor *t) {
  if (zt_tensor_numel(t) == 0) return "empty";
  if (!zt_dtype_is_float(t->dtype)) return "not float";
  /* parameters (and views of their storage) must stay where the optimizer updates them */
  if ((t->requires_grad && zt_tensor_is_leaf(t)) || t->storage->tag == ZT_MEM_TAG_PARAM) return "parameter";
  if ((int64_t)zt_tensor_nbytes(t) < o->opt.min_bytes) return "small";
  if (t->storage->released || !t->storage->data) return "released"; /* the engine reports it if still so */
  return NULL;
}

static zt_status off_pack(const zt_tensor *t, void **packed, void *user_data) {
  zt_offload *o = user_data;
  record *r = calloc(1, sizeof *r);
  if (!r) return ZT_ERR(ZT_STATUS_OOM, "zt_offload: out of host memory for a saved-tensor record");
  r->o = o;
  r->ndim = t->ndim;
  memcpy(r->shape, t->shape, sizeof r->shape);
  memcpy(r->stride, t->stride, sizeof r->stride);
  r->dtype = t->dtype;
  zt_status s = ZT_OK;
  if (keep_reason(o, t)) {
    r->version = t->storage->version;
    s = zt_tensor_alias(t, &r->kept);
    if (s == ZT_OK) o->st.tensors_kept++;
  } else {
    /* the span of storage elements the view touches (strides may be negative) */
    int64_t lo = t->offset, hi = t->offset;
    for (int d = 0; d < t->ndim; d++) {
      int64_t ext = t->stride[d] * (t->shape[d] - 1);
      if (ext < 0) lo += ext;
      else hi += ext;
    }
    ZT_ASSERT(lo >= 0 && (size_t)(hi + 1) * zt_dtype_size(t->dtype) <= t->storage->nbytes);
    entry *e = find_entry(o, t, lo, hi - lo + 1);
    if (!e) s = make_entry(o, t, lo, hi - lo + 1, &e);
    if (s == ZT_OK) {
      e->refs++;
      r->e = e;
      r->offset = t->offset - e->lo;
      o->st.tensors_offloaded++;
    }
  }
  if (s) {
    free(r);
    return s;
  }
  o->refs++;
  *packed = r;
  return ZT_OK;
}

static zt_status off_unpack(void *packed, zt_tensor **out, void *user_data) {
  (void)user_data;
  record *r = packed;
  zt_offload *o = r->o;
  if (r->kept) {
    /* The engine checks versions only for un-hooked records; a kept alias is the live
     * storage, so an in-place change after the save must fail here as it would there. */
    zt_tensor *k = r->kept;
    if (k->storage->version != r->version)
      return ZT_ERR(ZT_STATUS_AUTOGRAD,
                    "one of the tensors needed for gradient computation has been modified by an in-place "
                    "operation: a saved tensor of shape %s (kept in place by the activation offload) is at version "
                    "%llu but was saved at version %llu; do not modify it in place before backward (clone it first, "
                    "or modify a copy)",
                    zt_shape_str(k->ndim, k->shape, (char[128]){0}), (unsigned long long)k->storage->version,
                    (unsigned long long)r->version);
    return zt_tensor_alias(k, out);
  }
  entry *e = r->e;
  double t0 = 1e3 * zt_clock_now();
  zt_storage *s = NULL;
  zt_status err = ZT_OK;
  char *msg = NULL;
  bool waited = false, served = false, failed = false;
  pthread_mutex_lock(&o->mu);
  o->st.unpacks++;
  if (e->state == ENTRY_QUEUED) { /* the helper has not started it: loading it here is sooner */
    queue_remove(o, e);
    e->state = ENTRY_TIER;
  }
  schedule(o, e); /* before our own wait or load, so the helper works meanwhile */
  while (e->state == ENTRY_LOADING) {
    waited = true;
    pthread_cond_wait(&o->done, &o->mu);
  }
  if (e->state == ENTRY_READY) {
    s = e->ready;
    zt_storage_retain(s);
    if (!waited) {
      served = true;
      if (e->used) o->st.reuses++;
      else o->st.prefetch_hits++;
    }
    e->used = true;
  } else if (e->state == ENTRY_FAILED) { /* reported once; a later unpack tries again */
    failed = true;
    err = e->err;
    msg = e->errmsg;
    e->errmsg = NULL;
    e->state = ENTRY_TIER;
  }
  load_src src = src_of(o, e);
  pthread_mutex_unlock(&o->mu);
  if (!s && !failed) {
    err = load(&src, &s);
    if (err == ZT_OK) {
      pthread_mutex_lock(&o->mu);
      if (e->wanted && e->state == ENTRY_TIER) { /* kept for the other saves of this storage */
        zt_storage_retain(s);
        e->ready = s;
        e->used = true;
        e->state = ENTRY_READY;
      }
      pthread_mutex_unlock(&o->mu);
    }
  }
  if (!served) {
    o->st.waits++;
    o->st.wait_ms += 1e3 * zt_clock_now() - t0;
  }
  if (failed) {
    err = ZT_ERR(err, "zt_offload: the helper thread could not load a saved tensor: %s",
                 msg ? msg : "(its message was lost: out of host memory)");
    free(msg);
  }
  if (err) return err;
  zt_status st = zt__tensor_new_view(s, r->offset, r->ndim, r->shape, r->stride, r->dtype, out);
  zt_storage_release_ref(s); /* the view holds it now; the tier copy stays until release */
  return st;
}

static void off_release(void *packed, void *user_data) {
  (void)user_data;
  record *r = packed;
  zt_offload *o = r->o;
  zt_tensor_free(r->kept);
  if (r->e) entry_unref(o, r->e);
  free(r);
  store_unref(o);
}

zt_status zt_offload_push(zt_offload *o) {
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_push: store is NULL");
  zt_saved_tensor_hooks h = {off_pack, off_unpack, off_release, o};
  ZT_TRY(zt_saved_tensor_hooks_push(&h));
  o->pushed++;
  return ZT_OK;
}

zt_status zt_offload_pop(zt_offload *o) {
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_pop: store is NULL");
  const zt_saved_tensor_hooks *top = zt_saved_tensor_hooks_top();
  if (!top || top->pack != off_pack || top->user_data != o) {
    const char *why = !top                    ? "the stack is empty"
                      : top->pack == off_pack ? "another store's hooks are on top"
                                              : "other hooks (e.g. a checkpoint region) are on top";
    return ZT_ERR(ZT_STATUS_STATE,
                  "zt_offload_pop: this store's hooks are not on top of this thread's saved-tensor hooks stack (%s); "
                  "pop in the reverse order of push, on the thread that pushed",
                  why);
  }
  ZT_TRY(zt_saved_tensor_hooks_pop());
  o->pushed--;
  return ZT_OK;
}

void zt_offload_stats_get(const zt_offload *o, zt_offload_stats *out) {
  if (!out) return;
  if (!o) {
    *out = (zt_offload_stats){0};
    return;
  }
  zt_offload *m = (zt_offload *)o; /* locking does not change the store */
  pthread_mutex_lock(&m->mu);
  *out = o->st;
  pthread_mutex_unlock(&m->mu);
}

void zt_offload_reset_stats(zt_offload *o) {
  if (!o) return;
  pthread_mutex_lock(&o->mu);
  int64_t cur = o->st.bytes_in_tier;
  o->st = (zt_offload_stats){0};
  o->st.bytes_in_tier = cur;
  o->st.peak_bytes_in_tier = cur;
  pthread_mutex_unlock(&o->mu);
}
