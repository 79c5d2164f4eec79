/* The cpu's kernel tables: the slot [ZT_DEVICE_CPU] of every op entry points at one of
 * these (src/ops/kernel_table.h). The only place outside src/ops/cpu/ that names a cpu
 * kernel is this table. */
#include "attention.h"
#include "gemm.h"
#include "kernels.h"
#include "lm_head.h"
#include "nn.h"
#include "reduce.h"
#include "shape.h"
#include "softmax.h"

const zt__unary_kernels zt__cpu_unary_kernels = {zt__cpu_unary, zt__cpu_unary_backward};
const zt__binary_kernels zt__cpu_binary_kernels = {zt__cpu_binary, zt__cpu_unary};
const zt__cast_kernels zt__cpu_cast_kernels = {zt__host_cast};
const zt__dropout_kernels zt__cpu_dropout_kernels = {zt__cpu_dropout, zt__cpu_copy_rows};
const zt__embedding_kernels zt__cpu_embedding_kernels = {zt__cpu_embedding_find_bad_id, zt__cpu_embedding,
                                                         zt__cpu_embedding_backward};
const zt__layer_norm_kernels zt__cpu_layer_norm_kernels = {zt__cpu_layer_norm, zt__cpu_layer_norm_scratch_numel,
                                                           zt__cpu_layer_norm_backward};
const zt__rms_norm_kernels zt__cpu_rms_norm_kernels = {zt__cpu_rms_norm, zt__cpu_rms_norm_scratch_numel,
                                                       zt__cpu_rms_norm_backward};
const zt__rope_kernels zt__cpu_rope_kernels = {zt__cpu_rope};
const zt__swiglu_kernels zt__cpu_swiglu_kernels = {zt__cpu_swiglu, zt__cpu_swiglu_backward};
const zt__matmul_kernels zt__cpu_matmul_kernels = {zt__cpu_gemm, zt__cpu_gemm_batched, zt__cpu_fill_rows,
                                                   zt__cpu_col_sum};
const zt__lm_head_kernels zt__cpu_lm_head_kernels = {zt__cpu_gemm, zt__cpu_lm_head_chunk, zt__cpu_ce_check_targets,
                                                     zt__cpu_scale};
const zt__reduce_kernels zt__cpu_reduce_kernels = {zt__cpu_sum, zt__cpu_sum_backward, zt__cpu_max,
                                                   zt__cpu_max_backward};
const zt__shape_kernels zt__cpu_shape_kernels = {zt__cpu_to_contiguous, zt__cpu_copy_rows};
const zt__softmax_kernels zt__cpu_softmax_kernels = {zt__cpu_softmax, zt__cpu_softmax_backward,
                                                     zt__cpu_ce_check_targets, zt__cpu_cross_entropy,
                                                     zt__cpu_cross_entropy_backward};
const zt__attention_kernels zt__cpu_attention_kernels = {zt__cpu_attention_forward, zt__cpu_attention_backward,
                                                         zt__cpu_attention_cached};
