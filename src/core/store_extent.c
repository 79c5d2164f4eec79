/* The disk store's spill-file extent allocator: first fit among freed extents, frees
 * coalesced with their neighbours, the end of the file pulled in when its last extent goes.
 * Callers hold the spill file's mu. */
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

/* Extents start on multiples of sp->align: 4096 for direct I/O (O_DIRECT needs aligned
 * offsets and lengths), else cache lines. */
static int64_t round_up(const zt__store_spill *sp, int64_t n) { return (n + sp->align - 1) / sp->align * sp->align; }

/* First fit among freed extents, else the end of the file. */
int64_t zt__store_extent_alloc(zt__store_spill *sp, int64_t len) {
  len = round_up(sp, len);
  for (int i = 0; i < sp->n_free; i++) {
    zt__store_extent *x = &sp->free_ext[i];
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
void zt__store_extent_free(zt__store_spill *sp, int64_t off, int64_t len) {
  len = round_up(sp, len);
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
      zt__store_extent *x = realloc(sp->free_ext, sizeof *x * (size_t)cap);
      if (!x) return; /* the space is lost until the file is emptied; never a wrong read */
      sp->free_ext = x;
      sp->cap_free = cap;
    }
    memmove(&sp->free_ext[i + 1], &sp->free_ext[i], sizeof *sp->free_ext * (size_t)(sp->n_free - i));
    sp->free_ext[i] = (zt__store_extent){off, len};
    sp->n_free++;
  }
  zt__store_extent *last = sp->n_free ? &sp->free_ext[sp->n_free - 1] : NULL;
  if (last && last->off + last->len == sp->end) {
    sp->end = last->off;
    sp->n_free--;
  }
}
