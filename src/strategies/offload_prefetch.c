/* Activation offload: the prefetch window. The entries packed just before the one being
 * unpacked are loaded by the store's helper thread (zt_store_prefetch) into storages made
 * here, so backward finds them ready; those whose write behind has not started are taken back
 * instead (their RAM copy is the load, and the write is never done). */
#include <string.h>

#include "core/status_internal.h"
#include "offload_internal.h"

void zt__offload_unwant(zt_offload *o, zt__offload_entry *e) {
  (void)o;
  e->wanted = false;
  /* a write in flight goes on; a ready storage that is the only copy stays until e is freed */
  if (e->state == ZT__OFFLOAD_ENTRY_WRITING || (e->state == ZT__OFFLOAD_ENTRY_READY && !e->in_store)) return;
  if (e->state == ZT__OFFLOAD_ENTRY_LOADING) {
    zt_store_cancel(e->req); /* a get already running finishes first: ready is written until then */
    e->req = NULL;
  }
  if (e->state != ZT__OFFLOAD_ENTRY_STORED) {
    zt_storage_release_ref(e->ready);
    e->ready = NULL;
    e->state = ZT__OFFLOAD_ENTRY_STORED;
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

/* Start the load of e on the helper. A failure here (no memory for the load) only means no
 * prefetch: the unpack that needs e loads it, and reports what fails then. */
static void start_load(zt_offload *o, zt__offload_entry *e) {
  if (!e->in_store) return; /* its bytes are in e->ram (not yet a storage): the unpack takes them */
  zt_storage *s = NULL;
  if (zt__offload_alloc(e, &s)) return;
  if (zt_store_prefetch(o->store, &e->item, s->device, s->data, &e->req)) {
    zt_storage_release_ref(s);
    return;
  }
  e->ready = s;
  e->state = ZT__OFFLOAD_ENTRY_LOADING;
}

/* The window becomes cur (whose load stays for the other saves of its storage, often
 * unpacked by the next node) and the `prefetch` live entries packed just before it (the
 * ones backward needs next). Entries that left it are dropped, new ones sent to the
 * helper. So loaded-but-unused bytes stay within prefetch + 1 entries. */
void zt__offload_schedule(zt_offload *o, zt__offload_entry *cur) {
  zt__offload_entry *w[ZT__OFFLOAD_MAX_PREFETCH + 1];
  int nw = 0;
  w[nw++] = cur;
  zt_store_stats ss;
  zt_store_stats_get(o->store, &ss);
  if (!ss.helper_failed) /* without a helper, loads are synchronous in unpack: slower, never wrong */
    for (zt__offload_entry *p = cur->prev; p && nw < o->opt.prefetch + 1; p = p->prev) w[nw++] = p;
  for (int i = 0; i < o->n_pf; i++) {
    zt__offload_entry *x = o->pf[i];
    bool keep = false;
    for (int j = 0; j < nw && !keep; j++) keep = w[j] == x;
    if (!keep) zt__offload_unwant(o, x);
  }
  for (int j = 0; j < nw; j++) {
    w[j]->wanted = true;
    bool settled; /* a write not started is taken back, a finished one settled; a running one is left to the unpack */
    if (j > 0 && w[j]->state == ZT__OFFLOAD_ENTRY_WRITING)
      ZT_IGNORE(zt__offload_settle(o, w[j], false, &settled), "the copy stays in e->ram: its unpack tries again");
    if (j > 0 && w[j]->state == ZT__OFFLOAD_ENTRY_STORED) start_load(o, w[j]);
    o->pf[j] = w[j];
  }
  o->n_pf = nw;
}
