/* zerotrain snapshots: the saved state of a training run (the model in Hugging Face's GPT-2
 * layout, the optimizer's state, the step, the random stream and the data position), in series
 * folders written atomically; sharded ones per FSDP rank, read at any rank count and
 * consolidated (src/snapshot/). "Snapshot" here, as in the API; users and the CLI say
 * checkpoint (activation checkpointing is zt/checkpoint.h). Above io and data; below train. */
#ifndef ZT_SNAPSHOT_H
#define ZT_SNAPSHOT_H

#include "zt/data.h"
#include "zt/fsdp.h"
#include "zt/io.h"
#include "zt/lm.h"
#include "zt/optim.h"

/* ------------------------------------------------ training checkpoints (src/snapshot/snapshot.c,
 * src/snapshot/series.c)
 * Everything needed to resume bitwise. The file API is zt_snapshot_* (zt_checkpoint* is
 * activation checkpointing, zt/checkpoint.h); users and the CLI still say checkpoint, and
 * the files are unchanged. A checkpoint is a folder with model.safetensors (HF
 * GPT-2 names, loadable by transformers), config.json, optim.safetensors and state.json, and the
 * run's tokenizer (vocab.json, merges.txt) when it has one.
 * Saves go into a series folder DIR: each save is a new version DIR/step-<N> (a checkpoint
 * folder), written under a hidden name, renamed into place, and then made current by
 * pointing the link DIR/latest at it (an atomic rename). A crash, a kill or a full disk at
 * any moment leaves DIR/latest naming a complete checkpoint, whatever else DIR holds
 * (metrics files and the like are never touched). Every load takes either a series folder
 * (its latest version) or one checkpoint folder. */
typedef struct zt_train_state {
  int64_t step;          /* steps completed */
  zt_rng_state rng;      /* default generator */
  zt_loader_pos data;    /* train loader position */
  zt_lm_config model;    /* its family and shape: to refuse a checkpoint of another */
  double loss_scale;     /* f16 mixed precision: the loss scaler's scale (0: no scaler) */
  int64_t loss_scale_good; /* and its finite steps since the last change */
  char options[4096];    /* the options that set the run's course, "name=value" lines ("" if unknown) */
  /* Saves only: tokenizer files copied into the checkpoint folder ("" = none): GPT-2 BPE's
   * encoder.json as vocab.json and its merges (vocab.bpe) as merges.txt, the names transformers
   * and `zt sample` look for. Loads leave them "" (the files are in the folder). */
  char encoder[512], merges[512];
  /* Saves only: a Hugging Face tokenizer folder whose tokenizer.json, tokenizer_config.json and
   * special_tokens_map.json (those it has) are copied into the checkpoint folder ("" = none). */
  char tokenizer[512];
  /* Saves only: the largest weights file (0: ZT_LM_SHARD_BYTES, 5 GiB); a larger model is saved
   * as model-0000k-of-0000N.safetensors shards with model.safetensors.index.json, as
   * transformers saves it (loads read either). */
  int64_t shard_bytes;
} zt_train_state;
/* A new version in the series folder dir (created if missing), made current when complete.
 * o may be NULL (no optimizer state: the checkpoint cannot resume training). */
ZT_API ZT_NODISCARD zt_status zt_snapshot_save(const char *dir, const zt_model *m, zt_optim *o, const zt_train_state *st);
/* Loads into an existing model/optimizer of the same config (error naming what differs); a
 * sharded (FSDP) checkpoint is consolidated on load, from whichever shard files hold each tensor.
 * Parameters and optimizer state may be evicted to a store (zt_storage_evict), in part or all,
 * for both: a save reads them from the store and a load writes them into it, one at a time
 * through one host buffer (the largest evicted tensor), never restoring them; the files are
 * the same bytes as from RAM. */
ZT_API ZT_NODISCARD zt_status zt_snapshot_load(const char *dir, const zt_model *m, zt_optim *o, zt_train_state *st);
/* Read only the state (to build the right model before loading). */
ZT_API ZT_NODISCARD zt_status zt_snapshot_read_state(const char *dir, zt_train_state *st);
/* The checkpoint folder dir names: the target of dir/latest (read once) when dir is a series,
 * else dir itself when it holds a state.json. Errors say why there is none (nothing saved yet,
 * or a first save that was interrupted). */
ZT_API ZT_NODISCARD zt_status zt_snapshot_resolve(const char *dir, char *out, size_t cap);
/* Remove the versions of a series beyond the newest keep (by save time; the one 'latest'
 * names is always kept). Versions that hold files zerotrain did not write are left. */
ZT_API ZT_NODISCARD zt_status zt_snapshot_prune(const char *dir, int keep);

/* ------------------------------------------------ FSDP checkpoints (src/snapshot/sharded.c) */
/* A sharded checkpoint folder: shard-<r>-of-<N>.safetensors for each rank r of the shard group
 * (this rank's pieces of the parameters, named "param.<name>", and of the optimizer state,
 * "exp_avg.<name>", "exp_avg_sq.<name>", "momentum_buffer.<name>"), index.json (per shard file
 * and tensor: the parameter, its full shape and the element range [start, start + count) of
 * the flattened parameter it holds) and state.json (as zt_snapshot_save's, plus the world
 * size and strategy it was saved at). Collective over f's ranks; under HYBRID the first shard
 * group writes. Atomic as a whole like zt_snapshot_save: a crash leaves the complete old
 * folder or the complete new one. */
ZT_API ZT_NODISCARD zt_status zt_snapshot_save_sharded(const char *dir, zt_fsdp *f, zt_optim *o, const zt_train_state *st);
/* Load into f's shards and o's state (o may be NULL) at any world size and strategy: each
 * rank reads, for each of its pieces, the overlapping ranges of whichever shard files hold
 * them (N -> M resharding). Errors name the file and what is missing or differs. */
ZT_API ZT_NODISCARD zt_status zt_snapshot_load_sharded(const char *dir, zt_fsdp *f, zt_optim *o, zt_train_state *st);
/* Whether dir holds a sharded checkpoint (an index.json). */
ZT_API bool zt_snapshot_is_sharded(const char *dir);
/* Offline: turn a sharded checkpoint into a single-process one (model.safetensors,
 * config.json, optim.safetensors, state.json, and the tokenizer files it carries), which
 * zt_snapshot_load and transformers read, saved as zt_snapshot_save saves into the series folder
 * out_dir. An out_dir that holds a checkpoint already is refused (nothing written) unless force,
 * when the consolidated one becomes its newest version ('latest'). Atomic: a failure leaves out_dir
 * as it was (a folder made for it is removed). */
ZT_API ZT_NODISCARD zt_status zt_snapshot_consolidate(const char *sharded_dir, const char *out_dir, bool force);
/* A full checkpoint of an FSDP model: parameters and optimizer state gathered to rank 0,
 * which writes exactly what zt_snapshot_save writes. Collective. */
ZT_API ZT_NODISCARD zt_status zt_snapshot_save_full(const char *dir, const zt_model *m, zt_fsdp *f, zt_optim *o, const zt_train_state *st);
/* Load a single-process checkpoint into an FSDP model at any world size: every rank reads the
 * files and keeps its slices. */
ZT_API ZT_NODISCARD zt_status zt_snapshot_load_full(const char *dir, const zt_model *m, zt_fsdp *f, zt_optim *o, zt_train_state *st);

#endif
