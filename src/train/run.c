/* What a training run owns and its mode borrows (run.h): the world and the data's share of it,
 * the storage tier (made once, for whichever mode keeps states there), building the model,
 * the optimizer, and the checkpoint of ranks that hold the same values. With --batch the
 * global batch, the ranks of the data's share read B / share rows each, so N ranks compute
 * what one computes. */
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "train/run.h"

zt_status zt__run_open(zt__run *r, const zt_train_config *c, zt_comm *comm) {
  if (!comm) {
    ZT_TRY(zt_comm_world(&comm));
    r->own_comm = true;
  }
  r->comm = comm;
  r->rank = zt_comm_rank(comm);
  r->world = zt_comm_size(comm);
  if (c->parallel.pp > 1 && r->world % c->parallel.pp)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.parallel.pp %d does not divide the %d ranks: run P x D ranks (mpirun -np %d for one "
                  "pipeline, %d for two replicas of it)",
                  c->parallel.pp, r->world, c->parallel.pp, 2 * c->parallel.pp);
  int P = c->parallel.pp > 1 ? c->parallel.pp : 1;
  r->data_rank = r->rank / P, r->data_world = r->world / P;
  if (c->data.batch % r->data_world)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.data.batch %lld is the global batch and must divide evenly over the %d %s; use a "
                  "multiple of %d",
                  (long long)c->data.batch, r->data_world, P > 1 ? "pipeline replicas" : "ranks", r->data_world);
  if (c->parallel.mixed_precision != ZT_DTYPE_F32 && c->parallel.shard == ZT_SHARD_NONE)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.parallel.mixed_precision %s needs an FSDP strategy (it sets the dtype FSDP gathers parameters and reduces "
                  "gradients in): set zt_train_config.parallel.shard to full, grad_op, opt or hybrid:G (one rank works too)",
                  c->parallel.mixed_precision == ZT_DTYPE_BF16 ? "bf16" : "fp16");
  if (c->parallel.shard == ZT_SHARD_HYBRID && (c->parallel.hybrid_group < 1 || r->world % c->parallel.hybrid_group))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.shard hybrid:%d needs a group size that divides the %d ranks",
                  c->parallel.hybrid_group, r->world);
  return ZT_OK;
}

void zt__run_close(zt__run *r) {
  if (r->own_comm) zt_comm_free(r->comm);
  r->comm = NULL, r->own_comm = false;
}

zt_status zt__run_mean(zt__run *r, double *v) {
  if (r->world == 1) return ZT_OK;
  zt_tensor *t = NULL;
  ZT_TRY(zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_F64, v, &t));
  zt_status s = zt_all_reduce(r->comm, t, ZT_REDUCE_AVG);
  if (!s) *v = zt_tensor_get(t, 0);
  zt_tensor_free(t);
  return s;
}

zt_status zt__run_gather(zt__run *r, const double *mine, int n, double *all) {
  zt_tensor *in = NULL, *out = NULL;
  ZT_TRY(zt_tensor_from_data(1, (int64_t[]){n}, ZT_DTYPE_F64, mine, &in));
  zt_status s = zt_tensor_empty_tagged(1, (int64_t[]){(int64_t)n * r->world}, ZT_DTYPE_F64, ZT_CPU, ZT_MEM_TAG_TEMP,
                                       &out);
  if (!s) s = zt_all_gather(r->comm, in, out);
  if (!s && all) zt__dev_read(out, all, sizeof *all * (size_t)n * (size_t)r->world);
  zt_tensor_free(in);
  zt_tensor_free(out);
  return s;
}

/* ------------------------------------------------ the storage tier */
zt_status zt__run_check_model_out(const zt_train_config *c) {
  if (c->memory.offload_states)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_run: model_out asks for the whole model in RAM, which "
                  "zt_train_config.memory.offload_states exists to avoid; pass NULL (the checkpoints have it)");
  return ZT_OK;
}

bool zt__train_fsdp_stores(const zt_train_config *c) {
  return c->memory.offload_states && c->parallel.shard != ZT_SHARD_NONE;
}

/* What the tier does not compose with (NULL: nothing). A pipeline keeps no state in it: its
 * mode refuses the tier in its check (pipeline_train.c). */
static const char *tier_refuses(const zt_train_config *c, zt_comm *comm) {
  bool fsdp = zt__train_fsdp_stores(c); /* the tier is FSDP's: no offload model */
  if (!fsdp && c->parallel.shard != ZT_SHARD_NONE)
    return "zt_train_config.parallel.shard (FSDP; with memory.offload_states instead, FSDP keeps its states in the "
           "store itself: ZeRO-Infinity)";
  if (!fsdp && c->parallel.mixed_precision != ZT_DTYPE_F32) return "zt_train_config.parallel.mixed_precision";
  if (fsdp && c->parallel.shard == ZT_SHARD_OPT)
    return "zt_train_config.parallel.shard opt, which keeps every full parameter in RAM (use full, hybrid:G or "
           "grad_op)";
  if (!fsdp && c->memory.offload_mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH && comm && zt_comm_size(comm) > 1)
    return "more than one process in zt_train_config.memory.offload_mode keep-graph (its chunks decide on their own "
           "losses; DDP needs recompute)";
  return NULL;
}

zt_status zt__run_tier(zt__run *r) {
  if (r->tier) return ZT_OK;
  const zt_train_config *c = r->c;
  const char *no = tier_refuses(c, r->comm);
  if (no)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "zt_train_config.memory.offload_model does not run with %s; drop one of them",
                  no);
  const char *dir = c->memory.offload_dir[0] ? c->memory.offload_dir : NULL;
  switch ((zt_offload_tier)c->memory.offload_model) {
  case ZT_OFFLOAD_BF16: ZT_TRY(zt_store_bf16_new(&r->tier)); break;
  case ZT_OFFLOAD_DISK: ZT_TRY(zt_store_disk_new(dir, "zt_offload_model", &r->tier)); break;
  default: ZT_TRY(zt_store_memory_new(&r->tier)); break;
  }
  if (c->memory.offload_write_cap > 0) zt_store_set_write_cap(r->tier, (size_t)c->memory.offload_write_cap);
  return ZT_OK;
}

void zt__run_tier_io(zt__run *r, zt_train_step_info *info) {
  if (!r->tier) return;
  zt_store_io_stats now;
  zt_store_io_stats_get(r->tier, &now);
  info->io_read_bytes = now.read_bytes - r->io_last.read_bytes;
  info->io_write_bytes = now.write_bytes - r->io_last.write_bytes;
  info->io_read_ms = (now.read_seconds - r->io_last.read_seconds) * 1e3;
  info->io_write_ms = (now.write_seconds - r->io_last.write_seconds) * 1e3;
  r->io_last = now;
}

void zt__run_tier_io_skip(zt__run *r) {
  zt_train_step_info unused = {0};
  zt__run_tier_io(r, &unused);
}

void zt__run_tier_close(zt__run *r) {
  zt_store_free(r->tier);
  r->tier = NULL;
  r->io_last = (zt_store_io_stats){0};
}

/* ------------------------------------------------ the model, the optimizer, a checkpoint */
zt_status zt__run_build(zt__run *r, bool into_tier) {
  if (into_tier) ZT_TRY(zt__run_tier(r));
  return zt_lm_new(&r->g, ZT_DTYPE_F32, into_tier ? r->tier : NULL, &r->model);
}

zt_status zt__run_optim(zt__run *r) { return zt_optim_new(&r->oc, r->n_params, r->params, &r->opt); }

zt_status zt__run_save_replicated(zt__run *r, const zt_train_state *st) {
  const char *dir = r->c->checkpoint.save;
  zt_status s = ZT_OK;
  if (r->rank == 0) s = zt_snapshot_save(dir, &r->model, r->opt, st);
  if (r->world == 1) return s;
  double ok = s ? 0 : 1;
  zt_status g = zt__run_mean(r, &ok);
  if (s || g) return s ? s : g;
  if (ok < 1) return ZT_ERR(ZT_STATUS_IO, "rank 0 could not write checkpoint '%s' (see its error)", dir);
  return ZT_OK;
}
