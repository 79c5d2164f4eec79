/* The training loop's OffloadModel part (src/train/offload_train.c): with
 * zt_train_config.memory.offload_model the GPT-2's parameters and grads live in a store (disk,
 * bf16 or host) a few slices at a time, each step gathers its data.microbatches microbatches
 * into one batch that runs as that many chunks through zt_offload_model (with DDP, each rank its rows, the grads averaged slice by slice), evaluation goes
 * through it too, and checkpoints bring every parameter back for the save. Internal. */
#ifndef ZT_TRAIN_OFFLOAD_TRAIN_H
#define ZT_TRAIN_OFFLOAD_TRAIN_H

#include "zt/train.h"

typedef struct zt__train_om {
  zt_store *store;        /* the tier (NULL: off, everything below unset) */
  zt_offload_model *om;
  zt_tensor *x, *y;       /* a step's batch: the microbatches one after another */
  int64_t M;
  zt_offload_model_mode mode;
  zt_store_io_stats io_last; /* the store's I/O at the last step's end */
} zt__train_om;

/* The write-behind cap of the activation offload in training (zt_offload_options.write_cap):
 * two of the largest tensors a GPT-2 block saves (the MLP's 4 x n_embd wide ones) for a chunk
 * of tokens tokens, so a block's saves are written while its next ops compute, in bounded RAM
 * that the memory planner counts (src/train/offload_plan.c). */
int64_t zt__train_act_write_cap(const zt_gpt2_config *g, int64_t tokens);
/* zt_mem_available reading its files under root ("" the real ones: root/proc/self/cgroup,
 * root/proc/meminfo, root/sys/fs/cgroup/...) for a process of rss bytes. */
ZT_NODISCARD zt_status zt__mem_available_at(const char *root, int64_t rss, zt_mem_available_info *out);
/* Whether zt_train_plan_memory has something to do for c at world ranks. */
bool zt__train_plan_wanted(const zt_train_config *c, int world);
/* Whether c asks for OffloadModel (not when FSDP keeps the states: zt__train_fsdp_stores). */
bool zt__train_om_wanted(const zt_train_config *c);
/* Whether c asks for every state in a store held by FSDP (offload_states with a shard
 * strategy: ZeRO-Infinity); the store is made and freed here all the same (om->store). */
bool zt__train_fsdp_stores(const zt_train_config *c);
/* Checks what it composes with (DDP over comm's ranks when there are several; no pipeline,
 * sharding or mixed precision) and makes the store (once). */
ZT_NODISCARD zt_status zt__train_om_store(zt__train_om *om, const zt_train_config *c, zt_comm *comm);
/* Makes the store (unless made) and the offload model over m (borrowed) for batches of rows x
 * seq (this rank's), and evicts the parameters: call it once their values are final for step 1
 * (after a resume's load), or, with memory.offload_states (the model built into the store,
 * restore_on_free off, the optimizer's state in the store), before the resume's load. */
ZT_NODISCARD zt_status zt__train_om_open(zt__train_om *om, const zt_train_config *c, zt_gpt2 *m, zt_comm *comm,
                                         int64_t rows);
/* One optimizer step over so->microbatches microbatches from next (as zt_train_step's,
 * bitwise with a lossless store; o updates zt_gpt2_params); dp's mean (may be NULL: one
 * process) makes the loss the replicas' mean. With so->stop_request, the recomputing mode stops
 * after its forward when any rank asks (out->interrupted; nothing updated, no grads made: the
 * forward only applied the last step's waiting updates); the graph-keeping mode runs to its end. */
ZT_NODISCARD zt_status zt__train_om_step(zt__train_om *om, const zt_dp_strategy *dp, zt_optim *o, zt_batch_fn next,
                                         void *user_data, const zt_train_step_options *so, zt_train_step_result *out);
/* The loss of one batch (grad off). */
ZT_NODISCARD zt_status zt__train_om_loss(zt__train_om *om, zt_tensor *x, zt_tensor *y, double *loss);
/* Before a save: the updates that wait for their slice's next load applied and no restore in
 * flight, so the checkpoint streams each evicted parameter from the store through one buffer
 * (and writes the resident ones from RAM) instead of holding the whole model in RAM. */
ZT_NODISCARD zt_status zt__train_om_settle(zt__train_om *om);
/* The store's I/O since the last call (bytes and busy time per direction) into info. */
void zt__train_om_io_step(zt__train_om *om, zt_train_step_info *info);
/* The store's I/O since the last call is no step's (the set-up's, an evaluation's). */
void zt__train_om_io_skip(zt__train_om *om);
/* The run's figures (slices, loads, the store's peak). */
void zt__train_om_result(const zt__train_om *om, zt_train_result *res);
/* Frees the offload model (every parameter back in RAM, unless offload_states) and the batch;
 * the store stays for zt__train_om_close, after the model and optimizer are freed. */
void zt__train_om_free(zt__train_om *om);
/* Frees the store; zeroes *om. */
void zt__train_om_close(zt__train_om *om);

#endif
