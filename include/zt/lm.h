/* zerotrain language models of every family behind one config and one constructor: what the
 * training layer, checkpoints and `zt train/sample` see of a model, so that they name no
 * family. A zt_lm_config is a family and its shape (plain data: copied, compared, written into
 * state.json); zt_lm_new builds it as a zt_model (zt/model.h) that owns the model. Each family
 * is one table (src/models/family.h: GPT-2 in gpt2_family.c, the Llama family in
 * llama_family.c); src/models/lm.c dispatches to it. */
#ifndef ZT_LM_H
#define ZT_LM_H

#include "zt/llama.h"
#include "zt/nn.h"

typedef enum zt_lm_family {
  ZT_LM_GPT2 = 0, /* GPT2LMHeadModel */
  ZT_LM_LLAMA,    /* LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM */
  ZT_LM_FAMILIES
} zt_lm_family;

typedef struct zt_lm_config {
  zt_lm_family family;
  union {
    zt_gpt2_config gpt2;   /* family GPT2 */
    zt_llama_config llama; /* family LLAMA */
  };
} zt_lm_config;

/* The sizes every family has, for planners (pipeline balance, the --mem-limit planner, the
 * activation model) that must not name a family. */
typedef struct zt_lm_dims {
  int n_layer, hidden, n_head, vocab, context; /* context: the longest sequence */
  int attn_width;        /* n_head * head_dim: the width attention runs at */
  int ffn;               /* the MLP's inner width (its weights are a block's largest tensors, ffn x hidden) */
  int64_t embed_params;  /* before the blocks: token embeddings (GPT-2: and positions) */
  int64_t block_params;  /* one block's */
  int64_t out_params;    /* after the blocks: the final norm and the output layer (a tied
                          * embedding counted again: the part uses it) */
  int64_t params;        /* all, a tied embedding once */
  bool tied;             /* the output layer is the token embedding */
} zt_lm_dims;

/* What one block keeps between forward and backward, in values per token (f32 values in
 * training), run in a recompute mode under a selective policy: input (kept once per recompute
 * region), kept (the rest kept), recomp (made again in backward, one region at a time), work
 * (the fraction of a block's forward its recomputation redoes); out: what the non-block part
 * holds at the end of forward (final norm input and statistics, its output, the output layer's
 * input grad). The activation predictor and the recompute budget planner (zt_lm_predict_*)
 * use these alone. */
typedef struct zt_act_cost {
  double input, kept, recomp, work, out;
} zt_act_cost;

ZT_API const char *zt_lm_family_name(zt_lm_family f); /* "gpt2", "llama"; "?" otherwise */

/* A preset of any family ("gpt2-tiny", ..., "llama-tiny", "smollm-135m", ...): unknown names are
 * ZT_STATUS_INVALID_ARG listing every preset. */
ZT_API ZT_NODISCARD zt_status zt_lm_preset(const char *name, zt_lm_config *out);
/* Every preset, ", "-separated (static). */
ZT_API const char *zt_lm_preset_names(void);
ZT_API ZT_NODISCARD zt_status zt_lm_config_validate(const zt_lm_config *c);
ZT_API zt_lm_dims zt_lm_config_dims(const zt_lm_config *c);
/* A training step's model FLOPs on B x T tokens: 6 per parameter per token (forward and
 * backward's matrix products) plus attention's 12 L T attn_width per token. */
ZT_API double zt_lm_flops_per_step(const zt_lm_dims *d, int64_t B, int64_t T);
ZT_API zt_act_cost zt_lm_act_cost(const zt_lm_config *c, zt_recompute mode, zt_checkpoint_policy policy);
/* Change the common sizes (0 or less: keep): layers, heads, width, vocabulary, context; the
 * family keeps its own consistent (an error says what cannot be). */
ZT_API ZT_NODISCARD zt_status zt_lm_config_reshape(zt_lm_config *c, int n_layer, int n_head, int hidden, int vocab,
                                                   int context);
/* GPT-2's dropout (embedding, attention and MLP outputs); other families have none and refuse p > 0. */
ZT_API ZT_NODISCARD zt_status zt_lm_config_set_dropout(zt_lm_config *c, double p);
/* ZT_OK when a checkpoint's config have can load into a model of config want; else
 * ZT_STATUS_SHAPE naming where (what) and the first field that differs. */
ZT_API ZT_NODISCARD zt_status zt_lm_config_check_same(const char *what, const zt_lm_config *have,
                                                      const zt_lm_config *want);
/* A short description ("gpt2 12 layers, 768 wide, 12 heads, vocab 50257, context 1024"). */
ZT_API void zt_lm_config_describe(const zt_lm_config *c, char *buf, size_t cap);

/* The family and shape of a Hugging Face model folder's config.json (path: the folder or the
 * file), by its model_type; a type no family reads is refused naming those that are. */
ZT_API ZT_NODISCARD zt_status zt_lm_config_from_hf(const char *path, zt_lm_config *out);

/* Build a model of c with parameters of dtype dt (f32; f64 for finite-difference tests),
 * initialised as the family does from the default Philox generator. evict_to (NULL: in RAM):
 * each top-level module's parameters go to that store as soon as they are made (f32), so the
 * whole model is never in RAM (bitwise the same values); the store must outlive the model.
 * *out owns the model: free it with zt_model_free. */
ZT_API ZT_NODISCARD zt_status zt_lm_new(const zt_lm_config *c, zt_dtype dt, zt_store *evict_to, zt_model *out);
/* Weights from a Hugging Face folder (model.safetensors or the shards of
 * model.safetensors.index.json) or one safetensors file into m (a model of a family, built
 * with the folder's shape): every parameter present with m's shape; F32, F64, BF16 or F16 on
 * disk (converted). */
ZT_API ZT_NODISCARD zt_status zt_lm_load_hf(const zt_model *m, const char *path);
/* The largest weights file a save writes by default; larger models are sharded (5 GiB, as
 * transformers' save_pretrained). */
#define ZT_LM_SHARD_BYTES ((int64_t)5 << 30)
/* m (a model of a family) as a Hugging Face folder dir (made if missing; its parent must
 * exist): config.json and model.safetensors, or past max_shard_bytes (0: ZT_LM_SHARD_BYTES)
 * model-0000k-of-0000N.safetensors shards and model.safetensors.index.json; transformers loads
 * either as it is. */
ZT_API ZT_NODISCARD zt_status zt_lm_save_hf(const zt_model *m, const char *dir, int64_t max_shard_bytes);

/* The activation model over any family: the predicted peak of activation bytes of one forward
 * and backward of B rows of T tokens with modes (n_layer entries), every blocks per recompute
 * region, policy for the SELECTIVE blocks (see zt_act_cost). */
ZT_API int64_t zt_lm_predict_activation_peak(const zt_lm_config *c, int64_t B, int64_t T, const zt_recompute *modes,
                                             int every, zt_checkpoint_policy policy);
/* A mode per block so that the predicted peak is within budget bytes at the least
 * recomputation (greedy on bytes freed per unit of work); ZT_STATUS_OOM naming the minimum
 * when even recomputing every block does not fit. modes: n_layer entries; *predicted (may be
 * NULL) the plan's peak. */
ZT_API ZT_NODISCARD zt_status zt_lm_plan_recompute(const zt_lm_config *c, int64_t B, int64_t T, int64_t budget,
                                                   zt_checkpoint_policy policy, zt_recompute *modes,
                                                   int64_t *predicted);

#endif
