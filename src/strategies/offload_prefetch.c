/* Activation offload: the prefetch window and the helper thread that loads the entries
 * packed just before the one being unpacked. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "offload_internal.h"

void zt__offload_queue_remove(zt_offload *o, zt__offload_entry *e) {
  for (zt__offload_entry **p = &o->q_head; *p; p = &(*p)->qnext)
    if (*p == e) {
      *p = e->qnext;
      e->qnext = NULL;
      return;
    }
}

static void queue_append(zt_offload *o, zt__offload_entry *e) {
  zt__offload_entry **p = &o->q_head;
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
    zt__offload_entry *e = o->q_head;
    o->q_head = e->qnext;
    e->qnext = NULL;
    e->state = ZT__OFFLOAD_ENTRY_LOADING;
    zt__offload_load_src src = zt__offload_src_of(o, e);
    pthread_mutex_unlock(&o->mu);
    zt_storage *s = NULL;
    zt_status st = zt__offload_load(&src, &s);
    char *msg = st ? strdup(zt_last_error()) : NULL; /* zt_last_error is this thread's */
    pthread_mutex_lock(&o->mu);
    o->st.prefetched++;
    if (!e->wanted) { /* left the window while loading: drop it */
      e->state = ZT__OFFLOAD_ENTRY_TIER;
      zt_storage_release_ref(s);
      free(msg);
    } else if (st) {
      e->state = ZT__OFFLOAD_ENTRY_FAILED;
      e->err = st;
      e->errmsg = msg;
    } else {
      e->state = ZT__OFFLOAD_ENTRY_READY;
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
void zt__offload_unwant(zt_offload *o, zt__offload_entry *e) {
  e->wanted = false;
  if (e->state == ZT__OFFLOAD_ENTRY_QUEUED) {
    zt__offload_queue_remove(o, e);
    e->state = ZT__OFFLOAD_ENTRY_TIER;
  } else if (e->state == ZT__OFFLOAD_ENTRY_READY) {
    zt_storage_release_ref(e->ready);
    e->ready = NULL;
    e->state = ZT__OFFLOAD_ENTRY_TIER;
  } else if (e->state == ZT__OFFLOAD_ENTRY_FAILED) {
    free(e->errmsg);
    e->errmsg = NULL;
    e->state = ZT__OFFLOAD_ENTRY_TIER;
  }
}

void zt__offload_window_remove(zt_offload *o, zt__offload_entry *e) {
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
void zt__offload_schedule(zt_offload *o, zt__offload_entry *cur) {
  zt__offload_entry *w[ZT__OFFLOAD_MAX_PREFETCH + 1];
  int nw = 0;
  w[nw++] = cur;
  if (!o->thread_failed)
    for (zt__offload_entry *p = cur->prev; p && nw < o->opt.prefetch + 1; p = p->prev) w[nw++] = p;
  for (int i = 0; i < o->n_pf; i++) {
    zt__offload_entry *x = o->pf[i];
    bool keep = false;
    for (int j = 0; j < nw && !keep; j++) keep = w[j] == x;
    if (!keep) zt__offload_unwant(o, x);
  }
  bool queued = false;
  for (int j = 0; j < nw; j++) {
    w[j]->wanted = true;
    if (j > 0 && w[j]->state == ZT__OFFLOAD_ENTRY_TIER) {
      w[j]->state = ZT__OFFLOAD_ENTRY_QUEUED;
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
      for (int j = 1; j < nw; j++) zt__offload_unwant(o, w[j]);
      o->n_pf = 1;
      return;
    }
    o->thread_on = true;
    o->st.threads_started++;
  }
  pthread_cond_signal(&o->work);
}
