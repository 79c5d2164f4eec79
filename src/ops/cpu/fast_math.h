/* Internal: the vectorisable f32 exp shared by the elementwise (tanh, GELU) and softmax
 * kernels. static inline and branch-free, so a loop calling it stays one SIMD loop; each
 * result depends on its element alone, never on the thread count or the vector lane. */
#ifndef ZT_OPS_CPU_FAST_MATH_H
#define ZT_OPS_CPU_FAST_MATH_H

#include <stdint.h>
#include <string.h>

/* e^x for x clamped to [-87, 88] (NaN clamps to a finite value: no UB in the int
 * conversion), split as e^x = (1 + r + r^2 q) 2^n: Cody-Waite reduction x = n ln2 + r,
 * |r| <= ln2/2 (ln2 as a high part exact in few bits plus a correction), q the Cephes
 * degree-5 polynomial; relative error ~1e-7. Returns q; *r gets r, *two_n gets 2^n. */
static inline float zt__expf_split(float x, float *r, float *two_n) {
  x = x > -87.0f ? x : -87.0f;
  x = x < 88.0f ? x : 88.0f;
  /* round x / ln2 to nearest with the 1.5 * 2^23 trick (no floorf call) */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float rr = x - n * 0.693359375f;
  rr = rr - n * -2.12194440e-4f;
  float q = 1.9875691500e-4f;
  q = q * rr + 1.3981999507e-3f;
  q = q * rr + 8.3334519073e-3f;
  q = q * rr + 4.1665795894e-2f;
  q = q * rr + 1.6666665459e-1f;
  q = q * rr + 5.0000001201e-1f;
  int32_t bits = ((int32_t)n + 127) * (1 << 23); /* 2^n as a float's bits; n in [-126, 127] */
  memcpy(two_n, &bits, sizeof *two_n);
  *r = rr;
  return q;
}

/* The two finished forms below evaluate r^2 q in different orders (each as its kernel
 * always has; they differ by at most 1 ulp), so that no kernel's results change bits. */

/* e^x clamped: x below -87 gives e^-87, above 88 gives e^88, NaN a finite value (callers
 * that can see NaN restore it). Used by tanh and GELU. */
static inline float zt__expf_clamped(float x) {
  float r, two_n, q = zt__expf_split(x, &r, &two_n);
  return (q * (r * r) + r + 1.0f) * two_n;
}

/* e^x that underflows to 0 below -87 and passes NaN through (about 1 ulp). Used by the
 * softmax family, whose arguments are x - max <= 0. */
static inline float zt__expf(float x) {
  float r, two_n, q = zt__expf_split(x, &r, &two_n);
  float y = (q * r * r + r + 1.0f) * two_n;
  y = x < -87.0f ? 0.0f : y;
  return x == x ? y : x;
}

#endif
