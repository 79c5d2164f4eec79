/* CPU GEMM kernels (OpenBLAS sgemm/dgemm) used by matmul and linear, plus the small
 * helpers linear needs (bias broadcast, column sums). All matrices are row-major with
 * unit column stride; leading dims are in elements. BLAS is never called from inside an
 * OpenMP parallel region: each GEMM uses the whole (shared) thread pool itself.
 * Included by: src/ops only. */
#ifndef ZT_OPS_CPU_GEMM_H
#define ZT_OPS_CPU_GEMM_H

#include "ops/kernel_table.h"
#include "zt/tensor.h"

/* C (M,N) = op(A) . op(B) when beta == 0 (C's old contents are ignored), or
 * C += op(A) . op(B) when beta == 1. op(A) is (M,K): A is stored (M,K) (lda >= K), or
 * (K,M) (lda >= M) when ta; op(B) is (K,N): B is stored (K,N) (ldb >= N), or (N,K)
 * (ldb >= K) when tb. dt is f32 or f64. Empty sizes are fine (K == 0 gives C = 0 / C). */
void zt__cpu_gemm(zt_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                  const void *B, int64_t ldb, double beta, void *C, int64_t ldc);

/* A broadcast batch of GEMMs: for every index i of the batch shape bshape (nbd dims,
 * row-major order), C[i] = op(A[i]) . op(B[i]) with X[i] at X + sum_d i_d * xs[d]
 * (element strides; 0 along dims where X is broadcast). A C slice that several batch
 * indices map to (cs[d] == 0 on a dim of size > 1) is written (=) on its first visit and
 * accumulated (+=) on the later ones: that is the sum over the broadcast dims that the
 * backward of a broadcasting matmul needs. Matrix shapes and leading dims as zt__cpu_gemm. */
/* (zt__gemm_batch: src/ops/kernel_table.h) */
void zt__cpu_gemm_batched(zt_dtype dt, const zt__gemm_batch *bt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          const void *A, int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc);

/* out (R,N) = bias (N) broadcast over rows (=). Used to seed C before a beta=1 GEMM, so
 * the bias costs one write pass instead of a read-modify-write pass after the GEMM. */
void zt__cpu_fill_rows(zt_dtype dt, int64_t R, int64_t N, const void *bias, void *out);

/* out (N) = sum over rows of g (R,N) (=). */
void zt__cpu_col_sum(zt_dtype dt, int64_t R, int64_t N, const void *g, void *out);

#endif
