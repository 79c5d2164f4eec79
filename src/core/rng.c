/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
 * Counter-based: block k of seed s is a pure function of (s, k), so any thread can draw
 * any element and results never depend on the thread count. The default generator is
 * (seed, offset): callers reserve blocks by advancing the offset atomically. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt/tensor.h"
#include "backend.h"
#include "tensor_internal.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void zt_philox4x32(uint64_t seed, uint64_t counter_lo, uint64_t counter_hi, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
  uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static uint64_t g_seed = 0x5eed;
static _Atomic uint64_t g_offset = 0;

void zt_rng_seed(uint64_t seed) {
  g_seed = seed;
  atomic_store(&g_offset, 0);
}
zt_rng_state zt_rng_get_state(void) { return (zt_rng_state){g_seed, atomic_load(&g_offset)}; }
void zt_rng_set_state(zt_rng_state s) {
  g_seed = s.seed;
  atomic_store(&g_offset, s.offset);
}
zt_rng_state zt_rng_reserve(uint64_t nblocks) {
  return (zt_rng_state){g_seed, atomic_fetch_add(&g_offset, nblocks)};
}

static inline float u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

float zt_rng_uniform_at(zt_rng_state s, uint64_t i) {
  uint32_t w[4];
  zt_philox4x32(s.seed, s.offset + i / 4, 0, w);
  return u32_to_unit(w[i % 4]);
}

/* Values are drawn on the host: straight into t's bytes where the host can write them
 * (cpu), else into a host buffer that host_done writes through t's backend. */
static zt_status host_target(zt_tensor *t, void **p) {
  void *d;
  ZT_TRY(zt_tensor_data(t, &d));
  const zt__backend *b = zt__backend_get(zt_tensor_device(t).type);
  if (b && b->host_accessible) {
    *p = d;
    return ZT_OK;
  }
  *p = malloc(zt_tensor_nbytes(t) ? zt_tensor_nbytes(t) : 1);
  if (!*p) return ZT_ERR(ZT_STATUS_OOM, "out of host memory: %zu bytes to draw random values", zt_tensor_nbytes(t));
  return ZT_OK;
}

static void host_done(zt_tensor *t, void *p) {
  const zt__backend *b = zt__backend_get(zt_tensor_device(t).type);
  if (b && b->host_accessible) return;
  zt__dev_write(t, p, zt_tensor_nbytes(t));
  free(p);
}

zt_status zt_tensor_uniform_(zt_tensor *t, double lo, double hi) {
  if (!t || !zt_dtype_is_float(t->dtype))
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_tensor_uniform_: needs a floating-point tensor");
  if (!zt_tensor_is_contiguous(t)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_uniform_: tensor must be contiguous");
  ZT_TRY(zt__check_inplace(t, "zt_tensor_uniform_"));
  void *p;
  ZT_TRY(host_target(t, &p));
  int64_t n = zt_tensor_numel(t);
  zt_rng_state s = zt_rng_reserve((uint64_t)(n + 3) / 4);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t b = 0; b < (n + 3) / 4; b++) {
    uint32_t w[4];
    zt_philox4x32(s.seed, s.offset + (uint64_t)b, 0, w);
    for (int j = 0; j < 4 && b * 4 + j < n; j++) zt__store(t->dtype, p, b * 4 + j, lo + (hi - lo) * u32_to_unit(w[j]));
  }
  host_done(t, p);
  zt_tensor_bump_version(t);
  return ZT_OK;
}

/* Normals, four per Philox block (Box-Muller, both outputs). */
zt_status zt_tensor_normal_(zt_tensor *t, double mean, double std) {
  if (!t || !zt_dtype_is_float(t->dtype))
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_tensor_normal_: needs a floating-point tensor");
  if (!zt_tensor_is_contiguous(t)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_normal_: tensor must be contiguous");
  ZT_TRY(zt__check_inplace(t, "zt_tensor_normal_"));
  void *p;
  ZT_TRY(host_target(t, &p));
  int64_t n = zt_tensor_numel(t);
  /* One block gives four normals: Box-Muller on words (0,1) and (2,3), both outputs used. */
  zt_rng_state s = zt_rng_reserve((uint64_t)(n + 3) / 4);
  bool f32 = t->dtype == ZT_DTYPE_F32;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t b = 0; b < (n + 3) / 4; b++) {
    uint32_t w[4];
    zt_philox4x32(s.seed, s.offset + (uint64_t)b, 0, w);
    double z[4];
    for (int j = 0; j < 2; j++) {
      double u1 = ((double)w[2 * j] + 1.0) / 4294967296.0; /* (0, 1] */
      double u2 = (double)w[2 * j + 1] / 4294967296.0;
      double r = sqrt(-2.0 * log(u1)), a = 2.0 * 3.14159265358979323846 * u2;
      z[2 * j] = r * cos(a);
      z[2 * j + 1] = r * sin(a);
    }
    for (int j = 0; j < 4 && b * 4 + j < n; j++) {
      if (f32)
        ((float *)p)[b * 4 + j] = (float)(mean + std * z[j]);
      else
        zt__store(t->dtype, p, b * 4 + j, mean + std * z[j]);
    }
  }
  host_done(t, p);
  zt_tensor_bump_version(t);
  return ZT_OK;
}
