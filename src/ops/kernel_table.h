/* Internal: the kernel tables that op entries hold per device type. One table type per op
 * family; each device that has kernels defines one table of each type (the cpu's are in
 * src/ops/cpu/tables.c) and an op entry points its slot for that device at it:
 *
 *   static const zt__op op_gelu = {..., .kernels = {[ZT_DEVICE_CPU] = &zt__cpu_unary_kernels}};
 *   static zt_status gelu_forward(zt__op_call *c) {
 *     const zt__unary_kernels *k = c->kernels;   // the slot the dispatcher picked
 *     k->unary(ZT_UNOP_GELU, 0, c->in[0], c->out[0]);
 *
 * Op code calls kernels only through its slot. The dispatcher picks the slot of the
 * inputs' device (through its backend's kernel_type) and runs the kernel between the
 * backend's enter and exit hooks. Kernels take contiguous tensors of that device.
 * Included by: src/ops and a device backend's kernel tables (tests/guard_backend.c borrows the
 * CPU's). */
#ifndef ZT_OPS_KERNEL_TABLE_H
#define ZT_OPS_KERNEL_TABLE_H

#include "zt/tensor.h"

typedef enum zt__binop { ZT_BINOP_ADD, ZT_BINOP_SUB, ZT_BINOP_MUL, ZT_BINOP_DIV } zt__binop;

typedef enum zt__unop {
  ZT_UNOP_NEG,
  ZT_UNOP_EXP,
  ZT_UNOP_LOG,
  ZT_UNOP_SQRT,
  ZT_UNOP_TANH,
  ZT_UNOP_RELU,
  ZT_UNOP_GELU,
  ZT_UNOP_ADD_SCALAR, /* x + s */
  ZT_UNOP_MUL_SCALAR, /* x * s */
  ZT_UNOP_DIV_SCALAR, /* x / s */
  ZT_UNOP_POW,        /* x ^ s */
  ZT_UNOP_SILU,       /* x * sigmoid(x) */
} zt__unop;

/* A broadcast batch of GEMMs (see gemm_batched below). */
typedef struct zt__gemm_batch {
  int nbd;
  const int64_t *bshape;
  const int64_t *as, *bs, *cs;
} zt__gemm_batch;

/* Signatures (and their shapes and =/+= contracts) are those of the cpu kernels in
 * src/ops/cpu/ headers, which document them. */
typedef struct zt__unary_kernels {
  void (*unary)(zt__unop op, double s, const zt_tensor *a, zt_tensor *out);
  void (*unary_backward)(zt__unop op, double s, const zt_tensor *x, const zt_tensor *y, const zt_tensor *g,
                         zt_tensor *gx);
} zt__unary_kernels;

typedef struct zt__binary_kernels {
  void (*binary)(zt__binop op, const zt_tensor *a, const zt_tensor *b, zt_tensor *out);
  void (*unary)(zt__unop op, double s, const zt_tensor *a, zt_tensor *out); /* negation in backward */
} zt__binary_kernels;

typedef struct zt__cast_kernels {
  void (*cast)(void *dst, zt_dtype ddt, const void *src, zt_dtype sdt, int64_t n);
} zt__cast_kernels;

typedef struct zt__dropout_kernels {
  void (*dropout)(zt_rng_state s, double p, const zt_tensor *x, zt_tensor *out);
  void (*copy_rows)(void *dst, int64_t dst_pitch, const void *src, int64_t src_pitch, int64_t rows,
                    int64_t row_bytes); /* p == 0: a plain copy */
} zt__dropout_kernels;

typedef struct zt__embedding_kernels {
  int64_t (*find_bad_id)(const zt_tensor *ids, int64_t V, int64_t *bad);
  void (*embedding)(const zt_tensor *w, const zt_tensor *ids, zt_tensor *out);
  void (*embedding_backward)(const zt_tensor *g, const zt_tensor *ids, zt_tensor *dw);
} zt__embedding_kernels;

typedef struct zt__layer_norm_kernels {
  void (*layer_norm)(const zt_tensor *x, const zt_tensor *w, const zt_tensor *b, double eps, zt_tensor *out,
                     zt_tensor *mean, zt_tensor *rstd);
  int64_t (*scratch_numel)(int64_t rows, int64_t C);
  void (*layer_norm_backward)(const zt_tensor *g, const zt_tensor *x, const zt_tensor *w, const zt_tensor *mean,
                              const zt_tensor *rstd, zt_tensor *dx, zt_tensor *dw, zt_tensor *db, void *scratch);
} zt__layer_norm_kernels;

typedef struct zt__rms_norm_kernels {
  void (*rms_norm)(const zt_tensor *x, const zt_tensor *w, double eps, zt_tensor *out, zt_tensor *rstd);
  int64_t (*scratch_numel)(int64_t rows, int64_t C);
  void (*rms_norm_backward)(const zt_tensor *g, const zt_tensor *x, const zt_tensor *w, const zt_tensor *rstd,
                            zt_tensor *dx, zt_tensor *dw, void *scratch);
} zt__rms_norm_kernels;

typedef struct zt__rope_kernels {
  void (*rope)(const zt_tensor *x, const zt_tensor *cos, const zt_tensor *sin, int64_t pos_offset, int64_t n_rot,
               bool inverse, zt_tensor *out);
} zt__rope_kernels;

typedef struct zt__swiglu_kernels {
  void (*swiglu)(const zt_tensor *gate, const zt_tensor *up, zt_tensor *out);
  void (*swiglu_backward)(const zt_tensor *g, const zt_tensor *gate, const zt_tensor *up, zt_tensor *dgate,
                          zt_tensor *dup);
} zt__swiglu_kernels;

typedef struct zt__matmul_kernels {
  void (*gemm)(zt_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
               const void *B, int64_t ldb, double beta, void *C, int64_t ldc);
  void (*gemm_batched)(zt_dtype dt, const zt__gemm_batch *bt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const void *A, int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc);
  void (*fill_rows)(zt_dtype dt, int64_t R, int64_t N, const void *bias, void *out);
  void (*col_sum)(zt_dtype dt, int64_t R, int64_t N, const void *g, void *out);
} zt__matmul_kernels;

typedef struct zt__lm_head_kernels {
  void (*gemm)(zt_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
               const void *B, int64_t ldb, double beta, void *C, int64_t ldc);
  void (*chunk)(zt_dtype dt, void *logits, const void *targets, bool tgt_i32, int64_t n, int64_t V, int64_t ignore,
                bool grad, double scale, double *loss);
  int64_t (*check_targets)(const zt_tensor *targets, int64_t V, int64_t ignore, int64_t *bad_value, int64_t *count);
  void (*scale)(zt_dtype dt, int64_t n, double s, const void *x, void *y);
} zt__lm_head_kernels;

typedef struct zt__reduce_kernels {
  zt_status (*sum)(const zt_tensor *a, uint32_t mask, double scale, zt_tensor *out);
  void (*sum_backward)(const zt_tensor *g, uint32_t mask, double scale, zt_tensor *gx);
  void (*max)(const zt_tensor *a, int64_t outer, int64_t n, int64_t inner, zt_tensor *values, zt_tensor *indices);
  void (*max_backward)(const zt_tensor *g, const zt_tensor *indices, int64_t outer, int64_t n, int64_t inner,
                       zt_tensor *gx);
} zt__reduce_kernels;

typedef struct zt__shape_kernels {
  void (*to_contiguous)(const zt_tensor *src, zt_tensor *dst);
  void (*copy_rows)(void *dst, int64_t dst_pitch, const void *src, int64_t src_pitch, int64_t rows,
                    int64_t row_bytes);
} zt__shape_kernels;

typedef struct zt__softmax_kernels {
  void (*softmax)(const zt_tensor *x, int64_t outer, int64_t n, int64_t inner, bool log, zt_tensor *y);
  void (*softmax_backward)(const zt_tensor *y, const zt_tensor *g, int64_t outer, int64_t n, int64_t inner, bool log,
                           zt_tensor *gx);
  int64_t (*check_targets)(const zt_tensor *targets, int64_t V, int64_t ignore, int64_t *bad_value, int64_t *count);
  zt_status (*cross_entropy)(const zt_tensor *logits, const zt_tensor *targets, int64_t ignore, zt_tensor *lse,
                             double *loss_sum);
  void (*cross_entropy_backward)(const zt_tensor *logits, const zt_tensor *targets, const zt_tensor *lse,
                                 int64_t ignore, double scale, zt_tensor *gx);
} zt__softmax_kernels;

typedef struct zt__attention_kernels {
  zt_status (*forward)(const zt_tensor *qkv, int n_head, int n_kv_head, zt_tensor *out, zt_tensor *lse);
  zt_status (*backward)(const zt_tensor *qkv, const zt_tensor *out, const zt_tensor *lse, const zt_tensor *dout,
                        int n_head, int n_kv_head, zt_tensor *dqkv);
  zt_status (*cached)(const zt_tensor *q, const zt_tensor *k, const zt_tensor *v, int64_t len, zt_tensor *out);
} zt__attention_kernels;

/* The cpu's tables (src/ops/cpu/tables.c). */
extern const zt__unary_kernels zt__cpu_unary_kernels;
extern const zt__binary_kernels zt__cpu_binary_kernels;
extern const zt__cast_kernels zt__cpu_cast_kernels;
extern const zt__dropout_kernels zt__cpu_dropout_kernels;
extern const zt__embedding_kernels zt__cpu_embedding_kernels;
extern const zt__layer_norm_kernels zt__cpu_layer_norm_kernels;
extern const zt__rms_norm_kernels zt__cpu_rms_norm_kernels;
extern const zt__rope_kernels zt__cpu_rope_kernels;
extern const zt__swiglu_kernels zt__cpu_swiglu_kernels;
extern const zt__matmul_kernels zt__cpu_matmul_kernels;
extern const zt__lm_head_kernels zt__cpu_lm_head_kernels;
extern const zt__reduce_kernels zt__cpu_reduce_kernels;
extern const zt__shape_kernels zt__cpu_shape_kernels;
extern const zt__softmax_kernels zt__cpu_softmax_kernels;
extern const zt__attention_kernels zt__cpu_attention_kernels;

#endif
