/* Internal: the vectorisable f32 exp shared by the elementwise (tanh, GELU) and softmax
 * kernels. static inline and branch-free, so a loop calling it stays one SIMD loop; each
 * result depends on its element alone, never on the thread count or the vector lane.
 * Included by: src/ops/cpu only (and its test). */
#ifndef ZT_OPS_CPU_FAST_MATH_H
#define ZT_OPS_CPU_FAST_MATH_H

#include <stdint.h>
#include <string.h>

/* e^x for x clamped to [-87, 88] (NaN stays NaN), split as e^x = (1 + r + r^2 q) 2^n:
 * Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2 (ln2 as a high part exact in few bits
 * plus a correction), q the Cephes degree-5 polynomial; relative error ~1e-7. Returns q;
 * *r gets r, *two_n gets 2^n. No float-to-int conversion: n is read from the bits of the
 * rounding sum, so no input (NaN, +-inf, huge) can be undefined behaviour; a NaN x makes
 * r and q NaN, so both finished forms return NaN for it. */
static inline float zt__expf_split(float x, float *r, float *two_n) {
  /* written so that a NaN fails both tests and passes through unchanged */
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  /* round x / ln2 to nearest with the 1.5 * 2^23 trick (no floorf call): for |n| < 2^22 the
   * sum is exactly 1.5 * 2^23 + n, whose low mantissa bits hold n */
  float k = x * 1.44269504088896341f + 12582912.0f;
  float n = k - 12582912.0f;
  float rr = x - n * 0.693359375f;
  rr = rr - n * -2.12194440e-4f;
  float q = 1.9875691500e-4f;
  q = q * rr + 1.3981999507e-3f;
  q = q * rr + 8.3334519073e-3f;
  q = q * rr + 4.1665795894e-2f;
  q = q * rr + 1.6666665459e-1f;
  q = q * rr + 5.0000001201e-1f;
  uint32_t kb;
  memcpy(&kb, &k, sizeof kb);
  /* 2^n as a float's bits, n in [-126, 127]; unsigned arithmetic: defined for any bits */
  uint32_t bits = (kb - 0x4B400000u + 127u) << 23;
  memcpy(two_n, &bits, sizeof *two_n);
  *r = rr;
  return q;
}

/* The two finished forms below evaluate r^2 q in different orders (each as its kernel
 * always has; they differ by at most 1 ulp), so that no kernel's results change bits. */

/* e^x clamped: x below -87 gives e^-87, above 88 (and +inf) gives e^88, NaN gives NaN.
 * Used by tanh and GELU. */
static inline float zt__expf_clamped(float x) {
  float r, two_n, q = zt__expf_split(x, &r, &two_n);
  return (q * (r * r) + r + 1.0f) * two_n;
}

/* e^x that underflows to 0 below -87 (and -inf) and passes NaN through (about 1 ulp). Used
 * by the softmax family, whose arguments are x - max <= 0. */
static inline float zt__expf(float x) {
  float r, two_n, q = zt__expf_split(x, &r, &two_n);
  float y = (q * r * r + r + 1.0f) * two_n;
  return x < -87.0f ? 0.0f : y;
}

/* sigmoid for SiLU, 1 / (1 + e^-x) with the clamped exp (x below -88 gives ~6e-39, not 0;
 * x times it is still far below any value that matters). The unary silu and the fused
 * swiglu kernels both use it, so the fused op is bitwise the composition. */
static inline float zt__sigmoidf(float x) { return 1.0f / (1.0f + zt__expf_clamped(-x)); }

#endif
