/* zerotrain ops: every differentiable operation. Each op has one registry entry
 * (src/ops/) with its shape rule, forward and backward, and CPU kernels (src/ops/cpu/).
 * Conventions for every function here:
 *  - inputs are borrowed; *out receives a new tensor owned by the caller (free it with
 *    zt_tensor_free); on failure *out is untouched and zt_last_error() says why;
 *  - inputs may be any strided view; float ops compute in f32 or f64 (inputs of one op
 *    share a dtype); bf16/f16 tensors are for storage: cast them first;
 *  - when grad mode is on and an input requires grad, the output records the op. */
#ifndef ZT_OPS_H
#define ZT_OPS_H

#include "zt/autograd.h"

/* ------------------------------------------------ elementwise (broadcasting, numpy rules) */
ZT_API ZT_NODISCARD zt_status zt_add(zt_tensor *a, zt_tensor *b, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_sub(zt_tensor *a, zt_tensor *b, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_mul(zt_tensor *a, zt_tensor *b, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_div(zt_tensor *a, zt_tensor *b, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_add_scalar(zt_tensor *a, double s, zt_tensor **out); /* a + s */
ZT_API ZT_NODISCARD zt_status zt_sub_scalar(zt_tensor *a, double s, zt_tensor **out); /* a - s */
ZT_API ZT_NODISCARD zt_status zt_mul_scalar(zt_tensor *a, double s, zt_tensor **out); /* a * s */
ZT_API ZT_NODISCARD zt_status zt_div_scalar(zt_tensor *a, double s, zt_tensor **out); /* a / s */
ZT_API ZT_NODISCARD zt_status zt_neg(zt_tensor *a, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_exp(zt_tensor *a, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_log(zt_tensor *a, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_sqrt(zt_tensor *a, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_pow(zt_tensor *a, double exponent, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_tanh(zt_tensor *a, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_relu(zt_tensor *a, zt_tensor **out);
/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
ZT_API ZT_NODISCARD zt_status zt_gelu(zt_tensor *a, zt_tensor **out);
/* SiLU (swish): x * sigmoid(x). */
ZT_API ZT_NODISCARD zt_status zt_silu(zt_tensor *a, zt_tensor **out);

/* ------------------------------------------------ reductions */
/* Sum / mean over dims (n_dims == 0: over all dims, giving a 0-d tensor). Negative dims
 * count from the end. keepdim keeps reduced dims with size 1. */
ZT_API ZT_NODISCARD zt_status zt_sum(zt_tensor *a, int n_dims, const int *dims, bool keepdim, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_mean(zt_tensor *a, int n_dims, const int *dims, bool keepdim, zt_tensor **out);
/* Max over one dim: values (differentiable; grad goes to the first maximal element) and
 * indices (i64, may be NULL if not wanted). */
ZT_API ZT_NODISCARD zt_status zt_max(zt_tensor *a, int dim, bool keepdim, zt_tensor **values, zt_tensor **indices);

/* ------------------------------------------------ softmax family and losses */
ZT_API ZT_NODISCARD zt_status zt_softmax(zt_tensor *a, int dim, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_log_softmax(zt_tensor *a, int dim, zt_tensor **out);
/* Mean cross-entropy of logits (..., V) against integer targets (...) (i32 or i64),
 * ignoring positions whose target is ignore_index; fused (log-softmax is not kept:
 * backward recomputes it from logits and the saved per-row logsumexp). 0-d output.
 * Targets out of [0, V) (other than ignore_index) are an error. If every target is
 * ignored the loss is 0. */
ZT_API ZT_NODISCARD zt_status zt_cross_entropy(zt_tensor *logits, zt_tensor *targets, int64_t ignore_index, zt_tensor **out);

/* ------------------------------------------------ linear algebra */
/* Batched matmul: a (..., M, K) or (..., K, M) when trans_a, b (..., K, N) or (..., N, K)
 * when trans_b; batch dims broadcast (b may be 2-D). OpenBLAS sgemm/dgemm. */
ZT_API ZT_NODISCARD zt_status zt_matmul(zt_tensor *a, zt_tensor *b, bool trans_a, bool trans_b, zt_tensor **out);
/* x (..., in) . W^T (out, in) + bias (out) (bias may be NULL). */
ZT_API ZT_NODISCARD zt_status zt_linear(zt_tensor *x, zt_tensor *weight, zt_tensor *bias, zt_tensor **out);

/* x (..., in) . W (in, out) + bias (out): the Conv1D layout of GPT-2 checkpoints. */
ZT_API ZT_NODISCARD zt_status zt_linear_io(zt_tensor *x, zt_tensor *weight, zt_tensor *bias, zt_tensor **out);

/* Mean cross-entropy of the logits x (N, C) . weight (V, C)^T against targets (N) (i32,
 * ignore_index skipped), without ever holding all N x V logits: rows are processed in
 * chunks; when grads are needed they are computed chunk by chunk during forward (for the
 * inputs that need them) and scaled by the incoming grad in backward. 0-d output. */
ZT_API ZT_NODISCARD zt_status zt_lm_head_cross_entropy(zt_tensor *x, zt_tensor *weight, zt_tensor *targets, int64_t ignore_index,
                                   zt_tensor **out);

/* ------------------------------------------------ nn ops */
/* Layer norm over the last dim; weight and bias (C) may be NULL. */
ZT_API ZT_NODISCARD zt_status zt_layer_norm(zt_tensor *x, zt_tensor *weight, zt_tensor *bias, double eps, zt_tensor **out);
/* RMS norm over the last dim (Llama's RMSNorm): x * rsqrt(mean(x^2) + eps) * weight, in x's
 * dtype (f32 sums in f32, as LlamaRMSNorm does after its cast to f32); weight (C) may be
 * NULL (no scale). Saves x, the weight and a per-row rstd. */
ZT_API ZT_NODISCARD zt_status zt_rms_norm(zt_tensor *x, zt_tensor *weight, double eps, zt_tensor **out);
/* SwiGLU, fused: silu(gate) * up for gate and up of one shape (a Llama MLP's gate_proj
 * and up_proj outputs). Bitwise zt_mul(zt_silu(gate), up), forward and backward, but it
 * saves only gate and up (the composition also keeps silu(gate)) and runs one pass. */
ZT_API ZT_NODISCARD zt_status zt_swiglu(zt_tensor *gate, zt_tensor *up, zt_tensor **out);

/* Rotary position embedding, Hugging Face's rotate-half layout (Llama, Mistral, Qwen).
 * x (..., T, W) holds heads of head_dim D = 2 * cos's last dim side by side in its last
 * dim (the layout of a q or k projection, (B, T, n_head * D)); cos and sin (P, D/2) hold
 * the angles' cosines and sines per position (zt_rope_table builds them; they get no
 * grad). Row t is at position pos_offset + t (cached decoding passes the cache's length;
 * pos_offset + T <= P). Within each rotated head, for i < D/2:
 *   out[i] = x[i] cos[p][i] - x[i + D/2] sin[p][i],
 *   out[i + D/2] = x[i + D/2] cos[p][i] + x[i] sin[p][i].
 * Only the first n_rot_heads heads are rotated, the other columns copied (so one call
 * rotates the q and k heads of a fused qkv and passes v through); n_rot_heads < 0 rotates
 * every head. cos and sin must be on x's device, in x's dtype. */
ZT_API ZT_NODISCARD zt_status zt_rope(zt_tensor *x, zt_tensor *cos, zt_tensor *sin, int64_t pos_offset,
                                      int64_t n_rot_heads, zt_tensor **out);

typedef enum zt_rope_scaling_type {
  ZT_ROPE_SCALING_NONE = 0,
  ZT_ROPE_SCALING_LLAMA3, /* rope_scaling {"rope_type": "llama3", ...} of Llama 3.1 / 3.2 */
} zt_rope_scaling_type;

/* config.json's rope_scaling. For LLAMA3, with wavelength w = 2 pi / f of each inverse
 * frequency f: w < orig / high_freq_factor keeps f; w > orig / low_freq_factor uses
 * f / factor; between, s = (orig / w - low_freq_factor) / (high_freq_factor -
 * low_freq_factor) blends (1 - s) f / factor + s f (transformers' llama3 rope; the
 * attention factor stays 1). */
typedef struct zt_rope_scaling {
  zt_rope_scaling_type type;
  double factor, low_freq_factor, high_freq_factor;
  int64_t original_max_position_embeddings;
} zt_rope_scaling;

/* The cos and sin tables (n_pos, head_dim / 2) for zt_rope at positions 0 .. n_pos - 1:
 * inverse frequencies f_i = theta^(-2i / head_dim) (i < head_dim / 2), adjusted by
 * scaling (NULL: none), angle p * f_i. Computed in f64 and rounded to dtype (f32 or f64);
 * *cos and *sin are new tensors on dev that need no grad (the caller frees them).
 * head_dim must be even and positive, theta > 0; a scaling with low_freq_factor >=
 * high_freq_factor, a factor <= 0 or original_max_position_embeddings <= 0 is refused. */
ZT_API ZT_NODISCARD zt_status zt_rope_table(int64_t head_dim, int64_t n_pos, double theta,
                                            const zt_rope_scaling *scaling, zt_dtype dtype, zt_device dev,
                                            zt_tensor **cos, zt_tensor **sin);

/* weight (V, C), ids (...) of i32/i64 -> (..., C). Ids out of range are an error. */
ZT_API ZT_NODISCARD zt_status zt_embedding(zt_tensor *weight, zt_tensor *ids, zt_tensor **out);
/* Inverted dropout with probability p (0 <= p < 1), mask drawn from the default Philox
 * generator; identity (an alias-free copy) when !train or p == 0. The mask is not
 * stored: backward regenerates it from the saved (seed, offset). */
ZT_API ZT_NODISCARD zt_status zt_dropout(zt_tensor *x, double p, bool train, zt_tensor **out);
/* Fused causal self-attention. qkv (B, T, 3C) holding q, k, v for n_head heads of
 * size C/n_head (GPT-2 layout) -> (B, T, C). Keeps only qkv, the output and a per-row
 * logsumexp (B, n_head, T) for backward: no T x T matrix is stored. */
ZT_API ZT_NODISCARD zt_status zt_causal_attention(zt_tensor *qkv, int n_head, zt_tensor **out);
/* The same op with grouped-query / multi-query heads (Llama, Mistral, Qwen): qkv
 * (B, T, (n_head + 2 n_kv_head) * head_dim) holds the n_head query heads, then the n_kv_head
 * key heads, then the n_kv_head value heads; query head h attends with kv head
 * h / (n_head / n_kv_head) (n_head % n_kv_head == 0) -> (B, T, n_head * head_dim). K and V
 * are read in place, never repeated per query head; the grad of a kv head sums those of
 * its query heads, in head order (deterministic). n_kv_head == n_head is exactly
 * zt_causal_attention (bitwise; the same entry, "causal_attention" to checkpoint policies). */
ZT_API ZT_NODISCARD zt_status zt_causal_attention_gqa(zt_tensor *qkv, int n_head, int n_kv_head, zt_tensor **out);
/* Attention of new queries against a KV cache (incremental decoding; zt_kv_cache in
 * zt/nn.h keeps such caches). q (B, Tq, n_head * head_dim); k and v (B, n_kv_head, capacity,
 * head_dim), whose positions [0, len) hold keys and values, the queries' own included
 * (Tq <= len <= capacity). Query i sits at position len - Tq + i and sees keys
 * [0, len - Tq + i]. Grouped-query attention: n_head is a multiple of n_kv_head and query
 * head h reads kv head h / (n_head / n_kv_head) (n_kv_head == n_head: GPT-2's multi-head).
 * -> (B, Tq, n_head * head_dim). In f32 each row is bitwise what zt_causal_attention gives
 * for the same keys and values. Inference only: no backward (it refuses to run when an
 * input requires grad and grad mode is on). */
ZT_API ZT_NODISCARD zt_status zt_cached_attention(zt_tensor *q, zt_tensor *k, zt_tensor *v, int64_t len, zt_tensor **out);

/* ------------------------------------------------ shape ops */
/* View when a is contiguous, copy otherwise. One dim may be -1. */
ZT_API ZT_NODISCARD zt_status zt_reshape(zt_tensor *a, int ndim, const int64_t *shape, zt_tensor **out);
/* Views (no copy): they share a's storage. */
ZT_API ZT_NODISCARD zt_status zt_transpose(zt_tensor *a, int dim0, int dim1, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_permute(zt_tensor *a, const int *dims, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_narrow(zt_tensor *a, int dim, int64_t start, int64_t length, zt_tensor **out);
/* Copies. */
ZT_API ZT_NODISCARD zt_status zt_contiguous(zt_tensor *a, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_cat(int n, zt_tensor *const *xs, int dim, zt_tensor **out);
/* Split a along dim into n parts of the given sizes (summing to the dim's size); outs
 * gets n views. */
ZT_API ZT_NODISCARD zt_status zt_split(zt_tensor *a, int dim, int n, const int64_t *sizes, zt_tensor **outs);
/* Convert to another dtype (differentiable between float dtypes). */
ZT_API ZT_NODISCARD zt_status zt_cast(zt_tensor *a, zt_dtype dtype, zt_tensor **out);

/* ------------------------------------------------ threads */
/* Threads used by kernels (OpenMP and OpenBLAS share one pool). 0 = all cores. */
ZT_API void zt_set_num_threads(int n);
ZT_API int zt_get_num_threads(void);

/* ------------------------------------------------ op policies (selective checkpointing)
 * The dispatcher asks a checkpoint region's policy about each op it records; the region
 * itself is in zt/checkpoint.h. */
/* Selective checkpointing (non-reentrant only): a policy says, for each op the region runs
 * in forward, whether to keep its outputs (SAVE: recomputation does not run the op again,
 * it reuses them) or to recompute it (RECOMPUTE, the default for every op without a
 * policy). The policy sees each op once, in forward; recomputation replays its decisions,
 * so a policy may keep state (a counter). Only ops that record a node are asked (ops on
 * inputs that need no grad, view ops and custom functions are always recomputed); ops of
 * a checkpoint nested in the region follow the nested region's own policy. A SAVE op
 * keeps its outputs and any tensor it saves that is neither an input nor an output (a
 * layer norm's mean and rstd, attention's logsumexp); its inputs are still recomputed
 * (they are what the op saves for backward). A recomputation whose op sequence differs
 * from the forward's fails backward with ZT_STATUS_AUTOGRAD naming both ops. */
typedef enum zt_checkpoint_decision {
  ZT_CHECKPOINT_RECOMPUTE = 0,
  ZT_CHECKPOINT_SAVE
} zt_checkpoint_decision;

typedef struct zt_checkpoint_op_info {
  const char *op;             /* the op's registry name: "linear_io", "matmul", "causal_attention", "gelu", ... */
  int index;                  /* its place among the region's ops the policy sees, from 0 */
  int n_in;
  zt_tensor *const *inputs;   /* borrowed; entries may be NULL (an optional bias) */
  int out_ndim;               /* output 0's shape and dtype (the op has not run yet) */
  const int64_t *out_shape;
  zt_dtype out_dtype;
  int64_t out_bytes;          /* all outputs together */
} zt_checkpoint_op_info;

typedef zt_checkpoint_decision (*zt_checkpoint_policy_fn)(const zt_checkpoint_op_info *info, void *user_data);
typedef struct zt_checkpoint_policy {
  zt_checkpoint_policy_fn fn; /* NULL: recompute every op (full checkpoint) */
  void *user_data;
} zt_checkpoint_policy;

/* Built-in policies (user_data unused):
 *  - save_gemm: keep the outputs of every GEMM (matmul, linear, linear_io), recompute the rest;
 *  - save_wide_gemm: keep the outputs of GEMMs that widen their input (output's last dim >
 *    input's: a transformer's QKV and MLP up-projections), recompute the rest; GPT-2's
 *    `--recompute selective` (the narrowing projections cost little to redo: the MLP's
 *    down-projection never is, early stop cuts recomputation before it);
 *  - recompute_attention: Megatron-style, keep every op's outputs except the attention
 *    core's (causal_attention), which alone is recomputed;
 *  - save_nothing: recompute every op (what a NULL policy does). */
ZT_API zt_checkpoint_decision zt_checkpoint_policy_save_gemm(const zt_checkpoint_op_info *info, void *user_data);
ZT_API zt_checkpoint_decision zt_checkpoint_policy_save_wide_gemm(const zt_checkpoint_op_info *info, void *user_data);
ZT_API zt_checkpoint_decision zt_checkpoint_policy_recompute_attention(const zt_checkpoint_op_info *info, void *user_data);
ZT_API zt_checkpoint_decision zt_checkpoint_policy_save_nothing(const zt_checkpoint_op_info *info, void *user_data);

#endif
