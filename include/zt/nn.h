/* zerotrain nn: modules with named parameters, and the GPT-2 model.
 * A module owns its parameter tensors (tag PARAM, requires_grad) and its children;
 * Parameter names are dotted paths; GPT-2 uses the tensor names and layouts of Hugging
 * Face's GPT2LMHeadModel ("transformer.h.0.attn.c_attn.weight", Conv1D weights stored
 * (in, out) and applied with zt_linear_io), so checkpoints need no conversion. */
#ifndef ZT_NN_H
#define ZT_NN_H

#include "zt/ops.h"

/* A named parameter. `decay`: whether weight decay applies (2-D weights and embeddings
 * yes; biases and layer-norm parameters no). */
typedef struct zt_param {
  char name[96];
  zt_tensor *tensor;
  bool decay;
} zt_param;

/* ------------------------------------------------ GPT-2 */
typedef struct zt_gpt2_config {
  int n_layer;
  int n_head;
  int n_embd;
  int vocab_size;
  int block_size; /* context length (learned positions) */
  double dropout; /* embedding, attention-output and MLP-output dropout */
} zt_gpt2_config;

/* Presets: "gpt2-tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1558m". Unknown
 * names are ZT_STATUS_INVALID_ARG listing the presets. */
zt_status zt_gpt2_preset(const char *name, zt_gpt2_config *out);
/* Check a config (positive sizes, n_embd divisible by n_head, ...). */
zt_status zt_gpt2_config_validate(const zt_gpt2_config *c);

typedef struct zt_gpt2 zt_gpt2;

/* Build a model with GPT-2 initialisation (N(0, 0.02); residual projections scaled by
 * 1/sqrt(2 n_layer); biases 0; layer norms 1/0) from the default Philox generator. */
zt_status zt_gpt2_new(const zt_gpt2_config *c, zt_gpt2 **out);
void zt_gpt2_free(zt_gpt2 *m);
const zt_gpt2_config *zt_gpt2_get_config(const zt_gpt2 *m);
/* The parameters in a fixed order with HF names; the tied wte/lm_head is listed once
 * ("transformer.wte.weight"). The array is owned by the model. */
int zt_gpt2_params(zt_gpt2 *m, zt_param **params);
int64_t zt_gpt2_num_params(const zt_gpt2 *m); /* all parameters, tied embedding once */
void zt_gpt2_set_training(zt_gpt2 *m, bool training); /* dropout on/off */

/* Forward. ids (B, T) i32 with T <= block_size and ids in [0, vocab). With targets (B, T)
 * i32 (ignore index -1), *loss receives the mean cross-entropy (0-d) computed by the fused
 * chunked output layer, which never holds all B*T*V logits, and logits may be NULL. Without
 * targets, *logits receives (B, T, V) (for sampling; pass loss NULL). */
zt_status zt_gpt2_forward(zt_gpt2 *m, zt_tensor *ids, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss);

/* Training FLOPs per step by the formula 6 N B T + 12 L T d B T. */
double zt_gpt2_flops_per_step(const zt_gpt2 *m, int64_t B, int64_t T);

#endif
