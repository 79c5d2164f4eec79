/* The store object over an implementation (zt_store_ops): put / get / drop of byte ranges
 * of any device (staged through host memory by the device's backend when the host cannot
 * touch it), and asynchronous gets (prefetch / wait / cancel) run in order by one helper
 * thread per store, started on first use.
 * Invariants: the helper touches only queued requests, the implementation's get and the
 * destination bytes, never a storage object; a request is freed by the thread that waits or
 * cancels it, never by the helper; everything the helper shares is guarded by mu. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "backend.h"
#include "store_internal.h"

zt_status zt_store_new(const zt_store_ops *ops, void *ctx, zt_device dev, zt_store **out) {
  zt_status s = ZT_OK;
  if (!ops || !out || !ops->put || !ops->get || !ops->drop)
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_new: ops or out is NULL, or ops lacks put, get or drop");
  else if (!ops->get_range != !ops->put_range)
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_new: ops has one of get_range and put_range: give both or neither");
  zt_store *st = s ? NULL : calloc(1, sizeof *st);
  if (!s && !st) s = ZT_ERR(ZT_STATUS_OOM, "zt_store_new: out of host memory");
  if (s) {
    if (ops && ops->free) ops->free(ctx);
    if (out) *out = NULL;
    return s;
  }
  st->ops = ops;
  st->ctx = ctx;
  st->dev = dev;
  st->w_cap = ZT_STORE_WRITE_CAP_DEFAULT;
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->work, NULL);
  pthread_cond_init(&st->done, NULL);
  *out = st;
  return ZT_OK;
}

void zt_store_free(zt_store *s) {
  if (!s) return;
  /* requests waited, writes behind finished (their storages restored or freed), items dropped
   * (kept copies too: zt_storage_drop_kept) */
  ZT_ASSERT(s->in_flight == 0 && s->w_active == 0 && s->st.items == 0);
  if (s->thread_on) {
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
  }
  if (s->ops->free) s->ops->free(s->ctx);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->done);
  pthread_mutex_destroy(&s->mu);
  free(s->w_msg);
  free(s);
}

const char *zt_store_kind(const zt_store *s) { return s && s->ops->kind ? s->ops->kind : "?"; }
zt_device zt_store_device(const zt_store *s) { return s->dev; }

/* ---------------------------------------------------------------- put / get / drop */
/* Under mu: a put is in. */
static void count_put(zt_store *s, const zt_store_item *it) {
  s->st.puts++;
  s->st.items++;
  s->st.bytes_held += (int64_t)it->held;
  if (s->st.bytes_held > s->st.peak_bytes_held) s->st.peak_bytes_held = s->st.bytes_held;
}

zt_status zt_store_put(zt_store *s, zt_device dev, const void *src, size_t nbytes, zt_dtype dtype, zt_mem_tag tag,
                       zt_store_item *out) {
  if (!s || !out || (!src && nbytes))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_put: store, source or out is NULL");
  *out = (zt_store_item){0};
  if (!zt_dtype_valid(dtype) || (int)tag < 0 || tag >= ZT_MEM_TAG_COUNT)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_put: dtype %d or tag %d is not a valid value", (int)dtype,
                  (int)tag);
  if (nbytes % zt_dtype_size(dtype))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_put: %zu bytes are not a whole number of %s elements", nbytes,
                  zt_dtype_name(dtype));
  const zt__backend *b;
  ZT_TRY(zt__backend_of(dev, "zt_store_put", &b));
  zt_store_item it = {.nbytes = nbytes, .dtype = dtype, .tag = tag};
  if (nbytes) {
    /* the implementation reads host bytes: the device's own, or a copy staged by its backend */
    void *stage = NULL;
    if (!b->host_accessible) {
      ZT_TRY(zt_mem_alloc(nbytes, ZT_CPU, ZT_MEM_TAG_TEMP, &stage));
      b->read(b->ctx, stage, src, nbytes, NULL);
    }
    zt_status st = s->ops->put(s->ctx, stage ? stage : src, &it);
    if (stage) zt_mem_free(stage, nbytes, ZT_CPU, ZT_MEM_TAG_TEMP);
    if (st) return st;
  }
  pthread_mutex_lock(&s->mu);
  count_put(s, &it);
  pthread_mutex_unlock(&s->mu);
  *out = it;
  return ZT_OK;
}

/* The get itself, on any thread: into dst directly when the host can touch dev's memory,
 * else through a staging buffer written by dev's backend. */
static zt_status get_into(zt_store *s, const zt_store_item *it, zt_device dev, void *dst) {
  if (!it->nbytes) return ZT_OK;
  const zt__backend *b;
  ZT_TRY(zt__backend_of(dev, "zt_store_get", &b));
  if (b->host_accessible) return s->ops->get(s->ctx, it, dst);
  void *stage;
  ZT_TRY(zt_mem_alloc(it->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP, &stage));
  zt_status st = s->ops->get(s->ctx, it, stage);
  if (!st) b->write(b->ctx, dst, stage, it->nbytes, NULL);
  zt_mem_free(stage, it->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  return st;
}

static void count_get(zt_store *s, bool helper) {
  pthread_mutex_lock(&s->mu);
  s->st.gets++;
  s->st.helper_gets += helper;
  pthread_mutex_unlock(&s->mu);
}

zt_status zt_store_get(zt_store *s, const zt_store_item *it, zt_device dev, void *dst) {
  if (!s || !it || (!dst && it->nbytes)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_get: store, item or dst is NULL");
  count_get(s, false);
  return get_into(s, it, dev, dst);
}

bool zt_store_has_ranges(const zt_store *s) { return s && s->ops->get_range && s->ops->put_range; }

/* The checks both range calls share: range ops, a range of whole elements inside the item. */
static zt_status check_range(const zt_store *s, const zt_store_item *it, size_t off, size_t nbytes, const void *buf,
                             const char *fn) {
  if (!s || !it || (!buf && nbytes)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: store, item or buffer is NULL", fn);
  if (!zt_store_has_ranges(s))
    return ZT_ERR(ZT_STATUS_UNSUPPORTED,
                  "%s: the %s store moves whole items only (no range ops): get or put the whole item (ask "
                  "zt_store_has_ranges first)",
                  fn, s->ops->kind);
  size_t es = zt_dtype_size(it->dtype);
  if (off > it->nbytes || nbytes > it->nbytes - off || off % es || nbytes % es)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s: bytes [%zu, %zu) are not whole %s elements inside the item's %zu bytes: pass a range of "
                  "whole elements inside it",
                  fn, off, off + nbytes, zt_dtype_name(it->dtype), it->nbytes);
  return ZT_OK;
}

zt_status zt_store_get_range(zt_store *s, const zt_store_item *it, size_t off, size_t nbytes, void *dst) {
  ZT_TRY(check_range(s, it, off, nbytes, dst, "zt_store_get_range"));
  count_get(s, false);
  return nbytes ? s->ops->get_range(s->ctx, it, off, nbytes, dst) : ZT_OK;
}

zt_status zt_store_put_range(zt_store *s, const zt_store_item *it, size_t off, size_t nbytes, const void *src) {
  ZT_TRY(check_range(s, it, off, nbytes, src, "zt_store_put_range"));
  if (!nbytes) return ZT_OK;
  zt_status st = s->ops->put_range(s->ctx, it, off, nbytes, src);
  pthread_mutex_lock(&s->mu);
  s->st.puts++; /* the item's count and held bytes are unchanged */
  pthread_mutex_unlock(&s->mu);
  return st;
}

void zt_store_drop(zt_store *s, zt_store_item *it) {
  if (!s || !it) return;
  if (it->nbytes) s->ops->drop(s->ctx, it);
  pthread_mutex_lock(&s->mu);
  ZT_ASSERT(s->st.items > 0);
  s->st.items--;
  s->st.bytes_held -= (int64_t)it->held;
  pthread_mutex_unlock(&s->mu);
  *it = (zt_store_item){0};
}

/* ---------------------------------------------------------------- the helper and its requests */
static void put_done(zt_store *s, zt_store_request *r, zt_status st, char *msg);

static void *helper_main(void *arg) {
  zt_store *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stop && (!s->q_head || s->paused)) pthread_cond_wait(&s->work, &s->mu);
    if (s->stop) break;
    zt_store_request *r = s->q_head;
    s->q_head = r->next;
    if (!s->q_head) s->q_tail = NULL;
    r->next = NULL;
    r->state = ZT__STORE_REQ_RUNNING;
    pthread_mutex_unlock(&s->mu);
    if (r->kind == ZT__STORE_REQ_PUT) {
      zt_status st = s->ops->put(s->ctx, r->src, &r->item);
      put_done(s, r, st, st ? strdup(zt_last_error()) : NULL);
      pthread_mutex_lock(&s->mu);
      continue;
    }
    zt_status st = get_into(s, &r->item, r->dev, r->dst);
    char *msg = st ? strdup(zt_last_error()) : NULL; /* zt_last_error is this thread's */
    pthread_mutex_lock(&s->mu);
    s->st.gets++;
    s->st.helper_gets++;
    r->status = st;
    r->msg = msg;
    r->state = ZT__STORE_REQ_DONE;
    pthread_cond_broadcast(&s->done);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Under mu: the helper running, if it can be. */
static void helper_start(zt_store *s) {
  if (s->thread_on || s->st.helper_failed) return;
  if (pthread_create(&s->thread, NULL, helper_main, s) == 0) {
    s->thread_on = true;
    s->st.threads_started++;
  } else {
    s->st.helper_failed = true; /* no thread: wait does the gets; slower, never wrong */
  }
}

zt_status zt_store_prefetch(zt_store *s, const zt_store_item *it, zt_device dev, void *dst, zt_store_request **out) {
  if (!s || !it || !out || (!dst && it->nbytes))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_prefetch: store, item, dst or out is NULL");
  zt_store_request *r = calloc(1, sizeof *r);
  if (!r) return ZT_ERR(ZT_STATUS_OOM, "zt_store_prefetch: out of host memory for a request");
  *r = (zt_store_request){.store = s, .item = *it, .dev = dev, .dst = dst};
  pthread_mutex_lock(&s->mu);
  s->in_flight++;
  if (s->q_tail) s->q_tail->next = r;
  else s->q_head = r;
  s->q_tail = r;
  helper_start(s);
  if (s->thread_on) pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  *out = r;
  return ZT_OK;
}

bool zt_store_request_done(zt_store_request *r) {
  if (!r) return true;
  pthread_mutex_lock(&r->store->mu);
  bool done = r->state == ZT__STORE_REQ_DONE;
  pthread_mutex_unlock(&r->store->mu);
  return done;
}

/* Under mu: take a queued request off the queue. */
static void unqueue(zt_store *s, zt_store_request *r) {
  zt_store_request *prev = NULL;
  for (zt_store_request *x = s->q_head; x; prev = x, x = x->next)
    if (x == r) {
      if (prev) prev->next = r->next;
      else s->q_head = r->next;
      if (s->q_tail == r) s->q_tail = prev;
      r->next = NULL;
      return;
    }
  ZT_ASSERT(0 && "a queued request is on the queue");
}

/* Under mu: r is not queued any more (run here, or waited for). Returns with r not in use
 * by the helper. */
static bool take(zt_store *s, zt_store_request *r) {
  if (r->state == ZT__STORE_REQ_QUEUED) {
    unqueue(s, r);
    return true; /* the caller runs it, if it still wants it */
  }
  while (r->state == ZT__STORE_REQ_RUNNING) pthread_cond_wait(&s->done, &s->mu);
  return false;
}

static void request_free(zt_store *s, zt_store_request *r) {
  pthread_mutex_lock(&s->mu);
  s->in_flight--;
  pthread_mutex_unlock(&s->mu);
  free(r->msg);
  free(r);
}

zt_status zt_store_wait(zt_store_request *r) {
  if (!r) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_wait: request is NULL");
  zt_store *s = r->store;
  pthread_mutex_lock(&s->mu);
  bool here = take(s, r);
  pthread_mutex_unlock(&s->mu);
  zt_status st;
  if (here) { /* not started: sooner done here than after the ones queued before it */
    count_get(s, false);
    st = get_into(s, &r->item, r->dev, r->dst);
  } else {
    st = r->status;
    if (st)
      st = ZT_ERR(st, "%s store: the helper thread could not get %zu bytes back: %s", zt_store_kind(s), r->item.nbytes,
                  r->msg ? r->msg : "(its message was lost: out of host memory)");
  }
  request_free(s, r);
  return st;
}

void zt_store_cancel(zt_store_request *r) {
  if (!r) return;
  zt_store *s = r->store;
  pthread_mutex_lock(&s->mu);
  take(s, r);
  pthread_mutex_unlock(&s->mu);
  request_free(s, r);
}

void zt_store_stats_get(const zt_store *s, zt_store_stats *out) {
  if (!out) return;
  if (!s) {
    *out = (zt_store_stats){0};
    return;
  }
  zt_store *m = (zt_store *)s; /* locking does not change the store */
  pthread_mutex_lock(&m->mu);
  *out = s->st;
  pthread_mutex_unlock(&m->mu);
}

void zt_store_io_stats_get(const zt_store *s, zt_store_io_stats *out) {
  if (!out) return;
  *out = (zt_store_io_stats){0};
  if (s && s->ops->io_stats) s->ops->io_stats(s->ctx, out); /* none: the store does no I/O */
}

/* ---------------------------------------------------------------- write behind */
/* Writes behind are put requests on the same FIFO as the gets, so one helper orders them; the
 * disk store's put spreads its chunks over the I/O threads. A request's source bytes are freed
 * by whoever finishes its write, unless its owner asked for them back (reclaim) or the write
 * failed: then they go back to the owner, so no failure loses data. */

void zt_store_set_write_cap(zt_store *s, size_t bytes) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  ZT_ASSERT(s->w_active == 0); /* the cap a waiting eviction compares against must not move under it */
  s->w_cap = bytes;
  pthread_mutex_unlock(&s->mu);
}

size_t zt_store_write_cap(const zt_store *s) {
  if (!s) return 0;
  zt_store *m = (zt_store *)s; /* locking does not change the store */
  pthread_mutex_lock(&m->mu);
  size_t c = m->w_cap;
  pthread_mutex_unlock(&m->mu);
  return c;
}

void zt__store_pause(zt_store *s, bool paused) {
  pthread_mutex_lock(&s->mu);
  s->paused = paused;
  pthread_cond_broadcast(&s->work);
  pthread_mutex_unlock(&s->mu);
}

void zt__store_count_skipped(zt_store *s) {
  pthread_mutex_lock(&s->mu);
  s->st.puts_skipped++;
  pthread_mutex_unlock(&s->mu);
}

/* Under mu: the first unreported failure, as a status (cleared). */
static zt_status take_write_error(zt_store *s, const char *where) {
  zt_status e = s->w_err;
  if (!e) return ZT_OK;
  char *msg = s->w_msg;
  s->w_err = ZT_OK;
  s->w_msg = NULL;
  e = ZT_ERR(e,
             "%s: an earlier write behind into the %s store failed: %s; what it was writing keeps its bytes in RAM, "
             "nothing is lost (an evicted storage is restored from them, an offloaded saved tensor read back from "
             "them): free space in the store, or use another one",
             where, zt_store_kind(s), msg ? msg : "(its message was lost: out of host memory)");
  free(msg);
  return e;
}

/* Under mu, the helper started: wait while nbytes more would pass the cap (an item larger than
 * the cap alone goes through). */
static zt_status wait_room(zt_store *s, size_t nbytes, const char *where) {
  while (s->thread_on && s->st.write_bytes_in_flight > 0 && (size_t)s->st.write_bytes_in_flight + nbytes > s->w_cap) {
    if (s->w_active == 0) /* only failed writes hold the bytes: waiting would never end */
      return ZT_ERR(ZT_STATUS_STATE,
                    "%s: %lld bytes of failed writes behind are held in RAM, past the %s store's write cap of %zu "
                    "bytes: restore or free what they were writing (zt_store_flush reports the failure)",
                    where, (long long)s->st.write_bytes_in_flight, zt_store_kind(s), s->w_cap);
    pthread_cond_wait(&s->done, &s->mu);
  }
  return ZT_OK;
}

zt_status zt__store_write_room(zt_store *s, size_t nbytes, const char *where) {
  pthread_mutex_lock(&s->mu);
  zt_status e = take_write_error(s, where);
  if (!e) helper_start(s);
  if (!e) e = wait_room(s, nbytes, where);
  pthread_mutex_unlock(&s->mu);
  return e;
}

zt_status zt__store_write_error(zt_store *s, const char *where) {
  pthread_mutex_lock(&s->mu);
  zt_status e = take_write_error(s, where);
  pthread_mutex_unlock(&s->mu);
  return e;
}

bool zt__store_can_write_behind(zt_store *s) {
  pthread_mutex_lock(&s->mu);
  bool can = s->helper_put && !s->st.helper_failed;
  pthread_mutex_unlock(&s->mu);
  return can;
}

zt_status zt__store_put_async(zt_store *s, zt_device dev, void *src, size_t nbytes, zt_dtype dtype, zt_mem_tag tag,
                              const char *where, zt_store_request **out) {
  *out = NULL;
  const zt__backend *b;
  ZT_TRY(zt__backend_of(dev, where, &b));
  if (!s->helper_put || !b->host_accessible || !nbytes) return ZT_OK; /* the caller puts */
  zt_store_request *r = calloc(1, sizeof *r);
  if (!r) return ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory for a request", where);
  *r = (zt_store_request){.store = s, .kind = ZT__STORE_REQ_PUT, .dev = dev, .src = src,
                          .item = {.nbytes = nbytes, .dtype = dtype, .tag = tag}};
  pthread_mutex_lock(&s->mu);
  zt_status e = take_write_error(s, where);
  if (!e) helper_start(s);
  if (!e) e = wait_room(s, nbytes, where); /* past the cap: earlier writes first */
  if (e || !s->thread_on) { /* no helper: the caller puts, synchronously */
    pthread_mutex_unlock(&s->mu);
    free(r);
    return e;
  }
  s->in_flight++;
  s->w_active++;
  s->st.async_puts++;
  s->st.write_bytes_in_flight += (int64_t)nbytes;
  if (s->st.write_bytes_in_flight > s->st.peak_write_bytes_in_flight)
    s->st.peak_write_bytes_in_flight = s->st.write_bytes_in_flight;
  if (s->q_tail) s->q_tail->next = r;
  else s->q_head = r;
  s->q_tail = r;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  *out = r;
  return ZT_OK;
}

/* A put request's write ended with st (msg: its message, owned): counted, its source freed
 * unless the owner wants it back or the write failed, then DONE. Runs on the thread that did
 * the write, without mu. */
static void put_done(zt_store *s, zt_store_request *r, zt_status st, char *msg) {
  pthread_mutex_lock(&s->mu);
  bool free_src = !st && !r->reclaim; /* decided once, under mu: a later reclaim reads src_freed */
  r->src_freed = free_src;
  pthread_mutex_unlock(&s->mu);
  /* freed before the bytes leave the count: an eviction waiting on the cap finds them gone */
  if (free_src) zt_mem_free(r->src, r->item.nbytes, r->dev, r->item.tag);
  pthread_mutex_lock(&s->mu);
  s->w_active--;
  if (!st) {
    count_put(s, &r->item);
    s->st.write_bytes_in_flight -= (int64_t)r->item.nbytes;
  } else { /* the bytes stay in RAM, counted in flight until the owner takes them back */
    s->st.write_failures++;
    if (!s->w_err) {
      s->w_err = st;
      s->w_msg = msg ? strdup(msg) : NULL;
    }
  }
  r->status = st;
  r->msg = msg;
  r->state = ZT__STORE_REQ_DONE;
  pthread_cond_broadcast(&s->done);
  pthread_mutex_unlock(&s->mu);
}

/* put_finish; with !wait it returns *settled false (r untouched) where it would wait: a write
 * running, or queued and not taken back. !report: a failure is returned as its code only (no
 * message is made: the thread's last error stays the one being reported). */
static zt_status put_finish(zt_store_request *r, bool take_back, bool wait, bool report, zt_store_item *item,
                            void **ram, bool *settled) {
  zt_store *s = r->store;
  size_t n = r->item.nbytes;
  *item = (zt_store_item){0};
  *ram = NULL;
  *settled = true;
  pthread_mutex_lock(&s->mu);
  if (!wait && (r->state == ZT__STORE_REQ_RUNNING || (r->state == ZT__STORE_REQ_QUEUED && !take_back))) {
    pthread_mutex_unlock(&s->mu);
    *settled = false;
    return ZT_OK;
  }
  if (r->state == ZT__STORE_REQ_QUEUED) {
    unqueue(s, r);
    if (take_back) { /* never written: the bytes go back as they are */
      s->w_active--;
      s->st.write_bytes_in_flight -= (int64_t)n;
      pthread_cond_broadcast(&s->done);
      pthread_mutex_unlock(&s->mu);
      *ram = r->src;
      request_free(s, r);
      return ZT_OK;
    }
    r->state = ZT__STORE_REQ_RUNNING; /* here, now, rather than after the ones queued before it */
    pthread_mutex_unlock(&s->mu);
    zt_status st = s->ops->put(s->ctx, r->src, &r->item);
    put_done(s, r, st, st ? strdup(zt_last_error()) : NULL);
    pthread_mutex_lock(&s->mu);
  } else if (take_back) {
    r->reclaim = true;
  }
  while (r->state != ZT__STORE_REQ_DONE) pthread_cond_wait(&s->done, &s->mu);
  zt_status st = r->status;
  if (st) s->st.write_bytes_in_flight -= (int64_t)n; /* a failed write's bytes are the owner's again */
  pthread_mutex_unlock(&s->mu);
  if (!st) *item = r->item;
  if (!r->src_freed) *ram = r->src;
  if (st && report)
    st = ZT_ERR(st, "%s store: the write behind of %zu bytes failed: %s", zt_store_kind(s), n,
                r->msg ? r->msg : "(its message was lost: out of host memory)");
  request_free(s, r);
  return st;
}

zt_status zt__store_put_finish(zt_store_request *r, bool take_back, zt_store_item *item, void **ram) {
  bool settled;
  return put_finish(r, take_back, true, true, item, ram, &settled);
}

bool zt__store_put_settle(zt_store_request *r, bool wait, zt_store_item *item, void **ram, bool *settled) {
  return put_finish(r, true, wait, false, item, ram, settled) != ZT_OK;
}

zt_status zt_store_flush(zt_store *s) {
  if (!s) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_flush: store is NULL");
  pthread_mutex_lock(&s->mu);
  while (s->w_active > 0) pthread_cond_wait(&s->done, &s->mu);
  zt_status e = take_write_error(s, "zt_store_flush");
  pthread_mutex_unlock(&s->mu);
  return e;
}
