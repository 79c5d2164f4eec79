/* Every model state on a disk store (issue 16) when the disk fails: a write that fails (a full
 * disk) or a read that comes back short in the middle of a training step is a clear
 * ZT_STATUS_IO error naming the spill file's folder and what to do; the checkpoint saved
 * before it (streamed from the store) is intact and loads into a fresh plain model as the
 * state it saved; the store holds nothing half-written (its items are the model's). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "zt_test.h"
#include "core/status_internal.h"
#include "core/store_internal.h"
#include "zt/train.h"

enum { B = 4, T = 8 };
static const zt_gpt2_config cfg = {2, 2, 32, 64, 16, 0.0};

typedef struct states {
  zt_store *store;
  zt_gpt2 *m;
  zt_optim *o;
  zt_offload_model *om;
} states;

static void states_new(states *s) {
  memset(s, 0, sizeof *s);
  ZT_CHECK_OK(zt_store_disk_new(zt_test_tmpdir(), "zt_states_test", &s->store));
  zt_rng_seed(7);
  ZT_CHECK_OK(zt_gpt2_new_evicted(&cfg, s->store, &s->m));
  s->o = zt_test_gpt2_adamw(s->m);
  zt_offload_units u;
  ZT_CHECK_OK(zt_lm_offload_units(zt_test_lm(s->m), &u));
  zt_offload_model_options oo = zt_offload_model_options_default();
  oo.slices = cfg.n_layer + 2, oo.resident = 2, oo.offload_optim_state = true, oo.restore_on_free = false;
  ZT_CHECK_OK(zt_offload_model_new(&u, s->store, &oo, &s->om));
}

static void states_free(states *s) {
  zt_offload_model_free(s->om);
  zt_optim_free(s->o);
  zt_gpt2_free(s->m);
  zt_store_free(s->store); /* asserts that nothing is left in it */
}

/* A checkpoint of the model's state after one step, then a step whose disk fails (kind, at the
 * nth request from the step's start, in its forward: before any update): an IO error with its
 * message; the checkpoint loads into a fresh plain model, bitwise the offload model's
 * parameters (which the failed step left as they were). */
static void fails_midway(zt__io_fault kind, int64_t nth, const char *expect) {
  zt_test_tmpdir_make("offload_states");
  char ck[600];
  snprintf(ck, sizeof ck, "%s/ck", zt_test_tmpdir());
  zt_tensor *x = zt_test_rand_ids(B, T, cfg.vocab_size, 1), *y = zt_test_rand_ids(B, T, cfg.vocab_size, 2);
  states s;
  states_new(&s);
  zt_train_state st = {0};
  st.step = 1;
  st.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = cfg};
  ZT_CHECK_OK(zt_offload_model_train_step(s.om, s.o, x, y, 1e-2, 1.0, NULL, NULL));
  ZT_CHECK_OK(zt_offload_model_flush(s.om));
  ZT_CHECK_OK(zt_snapshot_save(ck, zt_test_lm(s.m), s.o, &st));
  /* the failing step */
  ZT_CHECK(zt__store_disk_fault_at(s.store, kind, nth));
  zt_status e = zt_offload_model_train_step(s.om, s.o, x, y, 1e-2, 1.0, NULL, NULL);
  ZT_CHECK(e == ZT_STATUS_IO);
  if (e) ZT_CHECK(strstr(zt_last_error(), expect) != NULL);
  ZT_CHECK(zt__store_disk_fault_at(s.store, kind, 0)); /* disarmed */
  /* the checkpoint: intact, and the state after step 1 */
  zt_rng_seed(99);
  zt_gpt2 *q = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&cfg, &q));
  zt_optim *qo = zt_test_gpt2_adamw(q);
  zt_train_state got;
  ZT_CHECK_OK(zt_snapshot_load(ck, zt_test_lm(q), qo, &got));
  ZT_CHECK(got.step == 1 && zt_optim_step_count(qo) == 1);
  /* equal to the offload model's parameters as they were saved: restore them and compare */
  ZT_CHECK_OK(zt_offload_model_restore_all(s.om));
  zt_param *a, *b;
  int n = zt_gpt2_params(s.m, &a);
  zt_gpt2_params(q, &b);
  for (int i = 0; i < n; i++) ZT_CHECK(zt_test_bitwise_equal(a[i].tensor, b[i].tensor));
  ZT_CHECK_OK(zt_offload_model_evict_all(s.om));
  zt_optim_free(qo);
  zt_gpt2_free(q);
  states_free(&s);
  zt_tensor_free(x);
  zt_tensor_free(y);
  zt_test_tmpdir_remove();
}

static void test_failed_write(void) { fails_midway(ZT__IO_FAULT_WRITE_ENOSPC, 3, "free disk space"); }
static void test_short_read(void) { fails_midway(ZT__IO_FAULT_READ_SHORT, 2, "reading"); }

int main(void) {
  ZT_RUN(test_failed_write);
  ZT_RUN(test_short_read);
  return zt_test_finish();
}
