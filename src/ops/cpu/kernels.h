/* CPU kernels. Every kernel takes contiguous tensors of f32 or f64 (one dtype per call)
 * and states its shapes and whether it writes (=) or accumulates (+=) into outputs.
 * Loops are OpenMP-parallel above a size threshold; GEMMs go to OpenBLAS.
 * Included by: src/ops only. */
#ifndef ZT_OPS_CPU_KERNELS_H
#define ZT_OPS_CPU_KERNELS_H

#include "core/backend.h" /* ZT_PAR_MIN */
#include "ops/kernel_table.h"   /* zt__binop, zt__unop */
#include "zt/tensor.h"

/* out = a (op) b, with numpy broadcasting of a and b to out's shape. */
void zt__cpu_binary(zt__binop op, const zt_tensor *a, const zt_tensor *b, zt_tensor *out);

/* out (n) = f(a (n)) with scalar s where the op takes one. out may alias a. */
void zt__cpu_unary(zt__unop op, double s, const zt_tensor *a, zt_tensor *out);
/* gx (n) = g * f'(x) for the unary ops: uses x, or y = f(x) for exp/sqrt/tanh. */
void zt__cpu_unary_backward(zt__unop op, double s, const zt_tensor *x, const zt_tensor *y, const zt_tensor *g,
                            zt_tensor *gx);

#endif
