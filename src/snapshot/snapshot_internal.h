/* What the snapshot files share (src/snapshot/): state.json, the save ids, the series' staging
 * folders, the shape check, the tokenizer files carried, and the full-shaped save the FSDP
 * gather writes through. Internal to src/snapshot/ and the training layer above it.
 * Included by: src/snapshot and src/train (and tests). */
#ifndef ZT_SNAPSHOT_INTERNAL_H
#define ZT_SNAPSHOT_INTERNAL_H

#include "io/buf.h"
#include "zt/snapshot.h"

/* ------------------------------------------------ checkpoint folders (src/snapshot/snapshot.c)
 * Shared by the single-process and the sharded checkpoints (src/snapshot/sharded.c). */
/* state.json text for st (extra: more members, each "  \"key\": value,\n", or NULL). */
void zt__snap_state_json(zt__buf *b, const zt_train_state *st, const char *save_id, bool has_optim, const char *extra);
/* Read dir/state.json of one checkpoint folder (a series is resolved first: zt_snapshot_resolve);
 * errors name the file and field; outputs may be NULL. */
ZT_NODISCARD zt_status zt__snap_read_state(const char *dir, zt_train_state *st, char save_id[64], bool *has_optim);
/* The shape a checkpoint recorded (have) against the model's (want): ZT_STATUS_SHAPE naming
 * the first field that differs and both values. */
ZT_NODISCARD zt_status zt__snap_check_shape(const char *dir, const zt_lm_config *have, const zt_lm_config *want);
/* A Hugging Face tokenizer's files, as a checkpoint carries them: tokenizer.json (needed) first,
 * then the optional ones. */
#define ZT__SNAP_HF_TOKENIZER_FILES 3
extern const char *const zt__snap_hf_tokenizer_files[ZT__SNAP_HF_TOKENIZER_FILES];
/* st's tokenizer files copied into the folder `into`, each written atomically (errors name the
 * file): GPT-2's (zt_train_state.encoder, merges; "" none) as vocab.json and merges.txt, a
 * Hugging Face folder's (zt_train_state.tokenizer) under their own names. */
ZT_NODISCARD zt_status zt__snap_copy_tokenizer(const char *into, const zt_train_state *st);
/* The error for resuming training from checkpoint dir, which holds no optimizer state. */
ZT_NODISCARD zt_status zt__snap_no_optim(const char *dir);
/* A fresh save id for a save at this step (unique per save; its second field is the save
 * time in ns, which orders the versions of a series). */
void zt__snap_new_save_id(char id[64], int64_t step);
/* One save into a checkpoint series folder (src/snapshot/series.c): begin creates the
 * folder if needed, removes staging folders of interrupted saves, picks the version name
 * (step-<N>, or step-<N>-<k> when taken) and creates the staging folder the files go into;
 * commit renames it to the version name and then points 'latest' at it (an atomic rename of
 * a new link); abort removes the staging folder. Ranks other than the one that began get the
 * same paths from the version name with join (no file system access). */
typedef struct zt__snap_staging {
  char dir[4096];   /* the series folder */
  char name[64];    /* the version ("step-00000100") */
  char stage[4096]; /* dir/.<name>.saving: where the files are written */
  char final[4096]; /* dir/<name> */
} zt__snap_staging;
ZT_NODISCARD zt_status zt__snap_staging_begin(const char *dir, int64_t step, zt__snap_staging *k);
/* Whether dir holds a checkpoint already: a 'latest' link (even a dangling one), a state.json or
 * a step-N version. */
bool zt__snap_holds_checkpoint(const char *dir);
ZT_NODISCARD zt_status zt__snap_staging_join(const char *dir, const char *name, zt__snap_staging *k);
ZT_NODISCARD zt_status zt__snap_staging_commit(zt__snap_staging *k);
void zt__snap_staging_abort(zt__snap_staging *k);
/* zt_snapshot_save with the optimizer state given as arrays (full-shaped, named
 * "exp_avg.<param>", ...): the full checkpoint of an FSDP model writes through this. */
ZT_NODISCARD zt_status zt__snapshot_save_arrays(const char *dir, const zt_model *m, bool has_optim, int n_opt,
                                     const char *const *opt_names, zt_tensor *const *opt_tensors, int64_t opt_step,
                                     const zt_train_state *st);

#endif
