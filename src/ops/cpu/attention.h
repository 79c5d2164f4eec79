/* Internal: CPU kernels of fused causal self-attention (src/ops/cpu/attention.c).
 * Inputs are contiguous f32 or f64 tensors of one dtype; qkv (B,T,(H + 2 Hkv) hs) holds the
 * H query heads, then the Hkv key heads, then the Hkv value heads side by side in its last
 * dim (GPT-2's layout when Hkv == H); query head h reads kv head h / (H / Hkv).
 * Included by: src/ops (the attention entry and the CPU tables) only. */
#ifndef ZT_OPS_CPU_ATTENTION_H
#define ZT_OPS_CPU_ATTENTION_H

#include "zt/tensor.h"

/* out (B,T,C) = softmax(mask(q k^T / sqrt(hs))) v for every query head (=), C = H hs;
 * lse (B,n_head,T) = logsumexp of each row of the scaled, masked scores (=).
 * Fails only when scratch memory cannot be allocated. */
ZT_NODISCARD zt_status zt__cpu_attention_forward(const zt_tensor *qkv, int n_head, int n_kv_head, zt_tensor *out,
                                                 zt_tensor *lse);

/* dqkv (B,T,(H + 2 Hkv) hs) = gradient of the loss w.r.t. qkv (=), from dout (B,T,C), qkv,
 * and the forward's out (B,T,C) and lse (B,n_head,T). Scores are recomputed block by block;
 * a kv head's dk and dv sum its query heads' contributions in head order. */
ZT_NODISCARD zt_status zt__cpu_attention_backward(const zt_tensor *qkv, const zt_tensor *out, const zt_tensor *lse,
                                     const zt_tensor *dout, int n_head, int n_kv_head, zt_tensor *dqkv);

/* Attention of new queries against a KV cache. q (B,Tq,H*hs); k, v (B,Hkv,S,hs) of which
 * positions [0, len) hold keys and values; H % Hkv == 0 (query head h reads kv head
 * h / (H/Hkv)); Tq <= len <= S. Query i sits at position len - Tq + i and sees keys
 * [0, len - Tq + i]. out (B,Tq,H*hs) (=). In f32 each row is bitwise the row
 * zt__cpu_attention_forward gives for the same keys and values (the same blocks, products
 * and online-softmax steps in the same order). Fails only when scratch memory cannot be
 * allocated. */
ZT_NODISCARD zt_status zt__cpu_attention_cached(const zt_tensor *q, const zt_tensor *k, const zt_tensor *v, int64_t len,
                                                zt_tensor *out);

#endif
