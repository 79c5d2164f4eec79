/* Fused causal self-attention kernels, FlashAttention style: forward keeps only the
 * output and a per-row logsumexp, backward recomputes the scores block by block, so no
 * T x T matrix ever exists. f32 is tiled (BLK x BLK blocks of queries x keys, packed per
 * head, register-blocked micro-kernels in vector extensions); f64 is a plain reference
 * path used by gradient checks. Results never depend on the thread count. Grouped-query
 * attention reads each kv head where it lies in qkv for every query head sharing it; with
 * as many kv heads as query heads every address and operation is GPT-2's. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "attention.h"

/* The micro-kernels rely on a*b+c becoming one FMA; -std=c11 turns contraction off. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

/* Tile geometry per ISA (this is the backend file where that choice lives):
 * VW floats per vector (the widest the target has, so no vector crosses the ABI); a
 * micro-tile is MR rows x NV vectors (NR = NV*VW columns), sized to keep MR*NV
 * accumulators in registers (32 zmm with AVX-512, 16 ymm / xmm otherwise).
 * BLK (queries per block = keys per block) is a multiple of MR and of NR. */
#if defined(__AVX512F__)
#define VW 16
#define MR 4
#define NV 4
#define BLK 64
#elif defined(__AVX__)
#define VW 8
#define MR 6
#define NV 2
#define BLK 48
#else
#define VW 4
#define MR 6
#define NV 2
#define BLK 48
#endif
#define NR (VW * NV)

/* Work (multiply-adds) below which attention stays on one thread. */
#define ATT_PAR_MIN (1 << 18)

typedef float vf __attribute__((vector_size(VW * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VW * sizeof(int32_t))));
typedef uint32_t vu __attribute__((vector_size(VW * sizeof(uint32_t))));

static inline vf vld(const float *p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void vst(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* A splat. x - 0 is exactly x (even for -0), so the subtraction folds away; x + 0 would not. */
static inline vf vbc(float x) { return x - (vf){0}; }
static inline vf vsel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
static inline vf vmax(vf a, vf b) { return vsel(a > b, a, b); }
static inline float vhsum(vf v) {
  float s = 0;
  for (int i = 0; i < VW; i++) s += v[i];
  return s;
}
/* lanes whose index j0 + lane < jv */
static inline vi vlanes_below(int64_t j0, int64_t jv) {
  vi io;
  for (int i = 0; i < VW; i++) io[i] = i;
  return io + (int32_t)j0 < (int32_t)jv;
}

/* e^x for the softmax's arguments x <= 0 (a tiny positive rounding excess is fine):
 * x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial (Cephes expf), within a few ulp.
 * Arguments below -87.3 (including -inf) are clamped there and give ~1e-38, not 0:
 * callers zero masked entries themselves (large positive ones give garbage, also
 * masked; the exponent arithmetic is unsigned so that stays defined). */
static inline vf vexp_neg(vf x) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  x = vmax(x, vbc(-87.3365447504f));
  vf t = x * 1.44269504088896341f + magic;
  vf n = t - magic;
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = vbc(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  vf y = p * (r * r) + r + 1.0f;
  vu e = ((vu)t - (vu)vbc(magic - 127.0f)) << 23; /* bits of 2^n */
  return y * (vf)e;
}

/* c (MR x NR, row stride ldc) (= or +=) sum_{k<kn} A(r,k) * b[k*ldb + 0..NR), where
 * A(r,k) = a[r*am + k*ak] is broadcast, so A may be read transposed at no cost. */
static inline __attribute__((always_inline)) void ukernel(int64_t kn, const float *restrict a, int64_t am,
                                                          int64_t ak, const float *restrict b, int64_t ldb,
                                                          float *restrict c, int64_t ldc, bool acc) {
  vf cr[MR][NV];
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) cr[r][v] = acc ? vld(c + r * ldc + v * VW) : (vf){0};
  for (int64_t k = 0; k < kn; k++, a += ak, b += ldb) {
    vf bv[NV];
    for (int v = 0; v < NV; v++) bv[v] = vld(b + v * VW);
    for (int r = 0; r < MR; r++) {
      vf s = vbc(a[r * am]);
      for (int v = 0; v < NV; v++) cr[r][v] += s * bv[v];
    }
  }
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) vst(c + r * ldc + v * VW, cr[r][v]);
}

/* Which part of a block product a causal (diagonal) block needs:
 *  N_LE_M: output tiles right of the diagonal (col > row) are skipped (left unwritten);
 *  K_LE_M: row tile m0 sums k < m0+MR only (A(i,j) = 0 for j > i);
 *  K_GE_M: row tile m0 sums k >= m0 only (A(j,i) = 0 for i < j). */
typedef enum tri_mode { TRI_NONE, TRI_N_LE_M, TRI_K_LE_M, TRI_K_GE_M } tri_mode;

/* c (m x n) (= or +=) A (m x kn) b (kn x n), A(r,k) = a[r*am + k*ak]; m % MR == 0,
 * n % NR == 0. Loops n outer so a (kn x NR) panel of b stays in L1 across row tiles. */
static void tgemm(int64_t m, int64_t n, int64_t kn, const float *a, int64_t am, int64_t ak, const float *b,
                  int64_t ldb, float *c, int64_t ldc, bool acc, tri_mode tri) {
  for (int64_t n0 = 0; n0 < n; n0 += NR)
    for (int64_t m0 = 0; m0 < m; m0 += MR) {
      if (tri == TRI_N_LE_M && n0 >= m0 + MR) continue;
      int64_t k0 = 0, k1 = kn;
      if (tri == TRI_K_LE_M && k1 > m0 + MR) k1 = m0 + MR;
      if (tri == TRI_K_GE_M) k0 = m0;
      if (k1 < k0) k1 = k0;
      if (acc && k1 == k0) continue;
      ukernel(k1 - k0, a + m0 * am + k0 * ak, am, ak, b + k0 * ldb + n0, ldb, c + m0 * ldc + n0, ldc, acc);
    }
}

/* qkv rows hold H query heads, then Hkv key heads, then Hkv value heads (W = (H + 2 Hkv) hs
 * floats; GPT-2's 3C when Hkv == H); query head h reads kv head h / grp. */
typedef struct att_dims {
  int64_t B, T, C, H, hs, hsp, nb, Tp; /* hsp: hs padded to NR; nb blocks of BLK; Tp = nb*BLK */
  int64_t Hkv, grp, W, koff, voff;     /* C = H hs (out's row); koff, voff: k and v in a qkv row */
} att_dims;

static att_dims dims_of(const zt_tensor *qkv, int n_head, int n_kv_head) {
  att_dims d;
  d.B = qkv->shape[0];
  d.T = qkv->shape[1];
  d.W = qkv->shape[2];
  d.H = n_head;
  d.Hkv = n_kv_head;
  d.grp = n_head / n_kv_head;
  d.hs = d.W / (n_head + 2 * n_kv_head);
  d.C = d.H * d.hs;
  d.koff = d.C;
  d.voff = d.C + d.Hkv * d.hs;
  d.hsp = (d.hs + NR - 1) / NR * NR;
  d.nb = (d.T + BLK - 1) / BLK;
  d.Tp = d.nb * BLK;
  return d;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

/* Rows of one head in qkv (and out, dqkv) are W (C) floats apart, each on its own page,
 * where hardware prefetchers stop: the packing loops prefetch PF_ROWS rows ahead. */
#define PF_ROWS 8
static inline void prefetch_read(const float *p, int64_t n) {
  for (int64_t x = 0; x < n; x += 16) __builtin_prefetch(p + x, 0, 3);
  __builtin_prefetch(p + n - 1, 0, 3);
}
static inline void prefetch_write(float *p, int64_t n) {
  for (int64_t x = 0; x < n; x += 16) __builtin_prefetch(p + x, 1, 3);
  __builtin_prefetch(p + n - 1, 1, 3);
}

/* sum_x a[x] b[x] in a fixed order: VW partial sums, then the tail. */
static inline float dotf(const float *a, const float *b, int64_t n) {
  vf acc = {0};
  int64_t x = 0;
  for (; x + VW <= n; x += VW) acc += vld(a + x) * vld(b + x);
  float s = vhsum(acc);
  for (; x < n; x++) s += a[x] * b[x];
  return s;
}

/* Scratch for every thread: one TEMP allocation, per_thread floats each (a multiple of
 * 16 floats, so every thread's part stays 64-byte aligned). */
typedef struct scratch {
  float *base;
  size_t bytes;
  int64_t per_thread;
} scratch;

static zt_status scratch_alloc(scratch *s, int64_t per_thread) {
  s->per_thread = round_up(per_thread, 16);
  s->bytes = (size_t)s->per_thread * (size_t)omp_get_max_threads() * sizeof(float);
  void *p = NULL;
  ZT_TRY(zt_mem_alloc(s->bytes, ZT_CPU, ZT_MEM_TAG_TEMP, &p));
  s->base = p;
  return ZT_OK;
}
static void scratch_free(scratch *s) { zt_mem_free(s->base, s->bytes, ZT_CPU, ZT_MEM_TAG_TEMP); }
static float *scratch_mine(const scratch *s) { return s->base + (int64_t)omp_get_thread_num() * s->per_thread; }

/* ------------------------------------------------------------------ f32 forward */
/* The forward keeps scores transposed, S^T (keys x queries): the softmax statistics of
 * VW queries then sit in one vector and every softmax step is a vertical vector op, with
 * no horizontal reductions. Products: S^T = K Q^T, and O += P V reading P^T transposed
 * through the micro-kernel's broadcasts, so O and the output stay row-major. */

/* Keys and values of kv head kh for key blocks [0, nkb), packed once per head (rows of qkv
 * are W apart, on separate pages; contiguous copies keep the block loops in cache).
 * Kp, Vp (nkb*BLK, hsp) row-major, zero padded past T and past hs. */
static void pack_kv(const att_dims *d, const float *base, int64_t kh, int64_t nkb, float *Kp, float *Vp) {
  const int64_t T = d->T, C3 = d->W, hs = d->hs, hsp = d->hsp;
  for (int64_t t = 0; t < nkb * BLK; t++) {
    float *kd = Kp + t * hsp, *vd = Vp + t * hsp;
    if (t < T) {
      const float *k = base + t * C3 + d->koff + kh * hs, *v = base + t * C3 + d->voff + kh * hs;
      if (t + PF_ROWS < T) {
        prefetch_read(k + PF_ROWS * C3, hs);
        prefetch_read(v + PF_ROWS * C3, hs);
      }
      memcpy(kd, k, sizeof(float) * (size_t)hs);
      memcpy(vd, v, sizeof(float) * (size_t)hs);
      for (int64_t x = hs; x < hsp; x++) kd[x] = vd[x] = 0;
    } else {
      memset(kd, 0, sizeof(float) * (size_t)hsp);
      memset(vd, 0, sizeof(float) * (size_t)hsp);
    }
  }
}

static int64_t fwd_scratch_floats(const att_dims *d) {
  return 2 * d->Tp * d->hsp + d->hs * BLK + BLK * d->hsp + BLK * BLK + 3 * BLK;
}

/* One (batch b, head h, query block qb): online softmax over key blocks 0..qb, keys and
 * values packed by pack_kv. Writes out rows (=) and lse rows (=) of this block. */
static void fwd_block_f32(const att_dims *d, const float *qkv, const float *Kp, const float *Vp, float *out,
                          float *lse, int64_t b, int64_t h, int64_t qb, float *ws) {
  const int64_t T = d->T, C = d->C, C3 = d->W, hs = d->hs, hsp = d->hsp, G = BLK / VW;
  float *QT = ws;                 /* (hs, BLK) scaled queries, transposed */
  float *O = QT + hs * BLK;       /* (BLK, hsp) unnormalised output */
  float *ST = O + BLK * hsp;      /* (BLK, BLK) scores S^T, then probabilities P^T */
  float *mv = ST + BLK * BLK, *lv = mv + BLK, *av = lv + BLK; /* per query: max, sum, rescale */
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + b * T * C3;
  const int64_t i0 = qb * BLK, nq = min64(BLK, T - i0), mq = round_up(nq, MR);

  memset(QT, 0, sizeof(float) * (size_t)(hs * BLK));
  for (int64_t ii = 0; ii < nq; ii++) {
    const float *q = base + (i0 + ii) * C3 + h * hs;
    if (ii + PF_ROWS < nq) prefetch_read(q + PF_ROWS * C3, hs);
    for (int64_t x = 0; x < hs; x++) QT[x * BLK + ii] = scale * q[x];
  }
  memset(O, 0, sizeof(float) * (size_t)(mq * hsp));
  for (int64_t g = 0; g < G; g++) {
    vst(mv + g * VW, vbc(-INFINITY));
    vst(lv + g * VW, (vf){0});
  }

  for (int64_t kb = 0; kb <= qb; kb++) {
    const int64_t nk = min64(BLK, T - kb * BLK);
    const bool diag = kb == qb;
    /* S^T (nk rounded up to MR, BLK) = K Q^T */
    tgemm(round_up(nk, MR), BLK, hs, Kp + kb * BLK * hsp, hsp, 1, QT, BLK, ST, BLK, false, TRI_NONE);
    /* queries of vector g see keys j <= i on the diagonal block: mask lanes with i < j */
    for (int64_t g = 0; g < G; g++) {
      vf mx = vld(mv + g * VW), mold = mx;
      for (int64_t j = 0; j < nk; j++) {
        vf s = vld(ST + j * BLK + g * VW);
        if (diag && j > g * VW) s = vsel(~vlanes_below(g * VW, j), s, vbc(-INFINITY));
        mx = vmax(mx, s);
      }
      vf alpha = vexp_neg(mold - mx), sum = {0}; /* ~0 on the first block (mold = -inf) */
      for (int64_t j = 0; j < nk; j++) {
        vf p = vexp_neg(vld(ST + j * BLK + g * VW) - mx);
        if (diag && j > g * VW) p = vsel(~vlanes_below(g * VW, j), p, (vf){0});
        vst(ST + j * BLK + g * VW, p);
        sum += p;
      }
      vst(mv + g * VW, mx);
      vst(lv + g * VW, vld(lv + g * VW) * alpha + sum);
      vst(av + g * VW, alpha);
    }
    if (kb > 0)
      for (int64_t ii = 0; ii < mq; ii++) {
        const vf a = vbc(av[ii]);
        for (int64_t x = 0; x < hsp; x += VW) vst(O + ii * hsp + x, vld(O + ii * hsp + x) * a);
      }
    /* O (mq, hsp) += P V, with P(i,j) = P^T[j][i] */
    tgemm(mq, hsp, nk, ST, 1, BLK, Vp + kb * BLK * hsp, hsp, O, hsp, true, diag ? TRI_K_LE_M : TRI_NONE);
  }

  for (int64_t ii = 0; ii < nq; ii++) {
    const float inv = 1.0f / lv[ii];
    const float *o = O + ii * hsp;
    float *dst = out + (b * T + i0 + ii) * C + h * hs;
    if (ii + PF_ROWS < nq) prefetch_write(dst + PF_ROWS * C, hs);
    for (int64_t x = 0; x < hs; x++) dst[x] = o[x] * inv;
    lse[(b * d->H + h) * T + i0 + ii] = mv[ii] + logf(lv[ii]);
  }
}

static zt_status fwd_f32(const att_dims *d, const float *qkv, float *out, float *lse) {
  scratch sc;
  ZT_TRY(scratch_alloc(&sc, fwd_scratch_floats(d)));
  const int64_t BH = d->B * d->H, BKV = d->B * d->Hkv, nthr = omp_get_max_threads(), nb = d->nb;
  const bool par = BH * nb > 1 && d->B * d->H * d->T * d->T / 2 * d->hs > ATT_PAR_MIN;
  const int64_t kv = d->Tp * d->hsp; /* offset of Vp in a thread's scratch */
  if (BKV % nthr == 0 || BKV >= 4 * nthr) {
    /* Enough kv heads to share out evenly: one task per kv head, its keys packed once for
     * the query heads that share it. */
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int64_t bk = 0; bk < BKV; bk++) {
      float *ws = scratch_mine(&sc);
      const int64_t b = bk / d->Hkv, kh = bk % d->Hkv;
      pack_kv(d, qkv + b * d->T * d->W, kh, nb, ws, ws + kv);
      for (int64_t h = kh * d->grp; h < (kh + 1) * d->grp; h++)
        for (int64_t qb = 0; qb < nb; qb++) fwd_block_f32(d, qkv, ws, ws + kv, out, lse, b, h, qb, ws + 2 * kv);
    }
  } else {
    /* Few heads: one task per (head, query block), each packing the keys it needs;
     * largest query blocks first for dynamic load balance. */
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int64_t t = 0; t < BH * nb; t++) {
      float *ws = scratch_mine(&sc);
      const int64_t qb = nb - 1 - t / BH, b = t % BH / d->H, h = t % BH % d->H;
      pack_kv(d, qkv + b * d->T * d->W, h / d->grp, qb + 1, ws, ws + kv);
      fwd_block_f32(d, qkv, ws, ws + kv, out, lse, b, h, qb, ws + 2 * kv);
    }
  }
  scratch_free(&sc);
  return ZT_OK;
}

/* ------------------------------------------------------------------ f32 backward */
static int64_t bwd_scratch_floats(const att_dims *d) {
  return 4 * d->Tp * d->hsp + 2 * d->hs * d->Tp + 2 * d->Tp + 2 * BLK * d->hsp + 2 * BLK * BLK;
}

/* One (batch b, query head h): its dq is written by this call only; the dk and dv of its
 * kv head are written (=) when acc is false, else added (+=): the query heads sharing a kv
 * head run one after the other in head order, kv heads in parallel without races
 * (deterministic).
 * For key block kb, query blocks qb >= kb: S = Qs K^T, P = exp(S - lse),
 * dP = dO V^T, dS = P (dP - D); dV += P^T dO, dK += dS^T Qs, dQ += dS K. */
static void bwd_head_f32(const att_dims *d, const float *qkv, const float *out, const float *lse,
                         const float *dout, float *dqkv, int64_t b, int64_t h, bool acc, float *ws) {
  const int64_t T = d->T, C = d->C, C3 = d->W, hs = d->hs, hsp = d->hsp, Tp = d->Tp, nb = d->nb;
  const int64_t kh = h / d->grp;
  float *Qs = ws;               /* (Tp, hsp) q * scale */
  float *Kr = Qs + Tp * hsp;    /* (Tp, hsp) k */
  float *dOr = Kr + Tp * hsp;   /* (Tp, hsp) dout */
  float *dQ = dOr + Tp * hsp;   /* (Tp, hsp) dq / scale, accumulated over key blocks */
  float *KT = dQ + Tp * hsp;    /* nb blocks of (hs, BLK): k transposed, block-major */
  float *VT = KT + hs * Tp;     /* same for v */
  float *L = VT + hs * Tp;      /* (Tp) lse */
  float *Dv = L + Tp;           /* (Tp) rowsum(dout * out) */
  float *dK = Dv + Tp;          /* (BLK, hsp) */
  float *dV = dK + BLK * hsp;   /* (BLK, hsp) */
  float *P = dV + BLK * hsp;    /* (BLK, BLK) */
  float *dS = P + BLK * BLK;    /* (BLK, BLK) dP, then dS */
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + b * T * C3;

  for (int64_t t = 0; t < Tp; t++) {
    float *qd = Qs + t * hsp, *kd = Kr + t * hsp, *gd = dOr + t * hsp;
    float *kt = KT + (t / BLK) * hs * BLK + t % BLK, *vt = VT + (t / BLK) * hs * BLK + t % BLK;
    if (t < T) {
      const float *q = base + t * C3 + h * hs, *k = base + t * C3 + d->koff + kh * hs;
      const float *v = base + t * C3 + d->voff + kh * hs;
      const float *o = out + (b * T + t) * C + h * hs, *g = dout + (b * T + t) * C + h * hs;
      if (t + PF_ROWS < T) {
        prefetch_read(q + PF_ROWS * C3, hs);
        prefetch_read(k + PF_ROWS * C3, hs);
        prefetch_read(v + PF_ROWS * C3, hs);
        prefetch_read(o + PF_ROWS * C, hs);
        prefetch_read(g + PF_ROWS * C, hs);
      }
      for (int64_t x = 0; x < hs; x++) qd[x] = scale * q[x];
      memcpy(kd, k, sizeof(float) * (size_t)hs);
      memcpy(gd, g, sizeof(float) * (size_t)hs);
      for (int64_t x = 0; x < hs; x++) kt[x * BLK] = k[x];
      for (int64_t x = 0; x < hs; x++) vt[x * BLK] = v[x];
      for (int64_t x = hs; x < hsp; x++) qd[x] = kd[x] = gd[x] = 0;
      Dv[t] = dotf(g, o, hs);
      L[t] = lse[(b * d->H + h) * T + t];
    } else {
      memset(qd, 0, sizeof(float) * (size_t)hsp);
      memset(kd, 0, sizeof(float) * (size_t)hsp);
      memset(gd, 0, sizeof(float) * (size_t)hsp);
      for (int64_t x = 0; x < hs; x++) kt[x * BLK] = vt[x * BLK] = 0;
      Dv[t] = L[t] = 0;
    }
  }
  memset(dQ, 0, sizeof(float) * (size_t)(Tp * hsp));

  for (int64_t kb = 0; kb < nb; kb++) {
    const int64_t j0 = kb * BLK, nk = min64(BLK, T - j0), mk = round_up(nk, MR);
    memset(dK, 0, sizeof(float) * (size_t)(BLK * hsp));
    memset(dV, 0, sizeof(float) * (size_t)(BLK * hsp));
    for (int64_t qb = kb; qb < nb; qb++) {
      const int64_t i0 = qb * BLK, nq = min64(BLK, T - i0), mq = round_up(nq, MR);
      const bool diag = qb == kb;
      const tri_mode nle = diag ? TRI_N_LE_M : TRI_NONE;
      /* P (mq, BLK) = Qs K^T;  dS (mq, BLK) = dO V^T */
      tgemm(mq, BLK, hs, Qs + i0 * hsp, hsp, 1, KT + kb * hs * BLK, BLK, P, BLK, false, nle);
      tgemm(mq, BLK, hs, dOr + i0 * hsp, hsp, 1, VT + kb * hs * BLK, BLK, dS, BLK, false, nle);
      for (int64_t ii = 0; ii < mq; ii++) {
        float *prow = P + ii * BLK, *drow = dS + ii * BLK;
        if (ii >= nq) {
          memset(prow, 0, sizeof(float) * BLK);
          memset(drow, 0, sizeof(float) * BLK);
          continue;
        }
        const int64_t jv = diag ? ii + 1 : BLK, nvec = (jv + VW - 1) / VW;
        const float li = L[i0 + ii], Di = Dv[i0 + ii];
        for (int64_t c = 0; c < nvec; c++) {
          vf p = vexp_neg(vld(prow + c * VW) - li);
          vf ds = p * (vld(drow + c * VW) - Di);
          if ((c + 1) * VW > jv) {
            vi m = vlanes_below(c * VW, jv);
            p = vsel(m, p, (vf){0});
            ds = vsel(m, ds, (vf){0});
          }
          vst(prow + c * VW, p);
          vst(drow + c * VW, ds);
        }
        for (int64_t c = nvec; c < BLK / VW; c++) {
          vst(prow + c * VW, (vf){0});
          vst(drow + c * VW, (vf){0});
        }
      }
      const tri_mode kge = diag ? TRI_K_GE_M : TRI_NONE;
      /* dV (mk, hsp) += P^T dO;  dK (mk, hsp) += dS^T Qs;  dQ (mq, hsp) += dS K */
      tgemm(mk, hsp, nq, P, 1, BLK, dOr + i0 * hsp, hsp, dV, hsp, true, kge);
      tgemm(mk, hsp, nq, dS, 1, BLK, Qs + i0 * hsp, hsp, dK, hsp, true, kge);
      tgemm(mq, hsp, nk, dS, BLK, 1, Kr + j0 * hsp, hsp, dQ + i0 * hsp, hsp, true, diag ? TRI_K_LE_M : TRI_NONE);
    }
    for (int64_t jj = 0; jj < nk; jj++) {
      float *gk = dqkv + (b * T + j0 + jj) * C3 + d->koff + kh * hs;
      float *gv = dqkv + (b * T + j0 + jj) * C3 + d->voff + kh * hs;
      const float *sk = dK + jj * hsp, *sv = dV + jj * hsp;
      if (jj + PF_ROWS < nk) {
        prefetch_write(gk + PF_ROWS * C3, hs);
        prefetch_write(gv + PF_ROWS * C3, hs);
      }
      if (acc)
        for (int64_t x = 0; x < hs; x++) {
          gk[x] += sk[x];
          gv[x] += sv[x];
        }
      else
        for (int64_t x = 0; x < hs; x++) {
          gk[x] = sk[x];
          gv[x] = sv[x];
        }
    }
  }
  for (int64_t t = 0; t < T; t++) {
    float *gq = dqkv + (b * T + t) * C3 + h * hs;
    const float *s = dQ + t * hsp;
    if (t + PF_ROWS < T) prefetch_write(gq + PF_ROWS * C3, hs);
    for (int64_t x = 0; x < hs; x++) gq[x] = scale * s[x];
  }
}

static zt_status bwd_f32(const att_dims *d, const float *qkv, const float *out, const float *lse, const float *dout,
                         float *dqkv) {
  scratch sc;
  ZT_TRY(scratch_alloc(&sc, bwd_scratch_floats(d)));
  const int64_t BKV = d->B * d->Hkv;
  const bool par = BKV > 1 && d->B * d->H * d->T * d->T / 2 * d->hs > ATT_PAR_MIN;
  /* one task per kv head: its query heads in order, the first writing dk and dv */
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t bk = 0; bk < BKV; bk++)
    for (int64_t g = 0; g < d->grp; g++)
      bwd_head_f32(d, qkv, out, lse, dout, dqkv, bk / d->Hkv, bk % d->Hkv * d->grp + g, g > 0, scratch_mine(&sc));
  scratch_free(&sc);
  return ZT_OK;
}

/* ------------------------------------------------------------------ f32 against a KV cache */
/* A query at position p sees keys [0, p]. fwd_block_f32 handles it as one lane of a query
 * block; this replays that lane's arithmetic for a lone query: keys in blocks of BLK from
 * 0, each score sum_x k[x] * (scale q[x]) fused in x order from 0, the block's running max,
 * rescale factor, exponentials and sum in key order, O rescaled then O += p_j v_j in key
 * order, and finally O * (1/l). Keys past p, which the block kernel masks, add exact zeros
 * there, so a row here is bitwise that kernel's row. The vector forms below are the block
 * kernel's (same operations, so the same fused multiply-adds). */

/* Work (query rows x positions x head size) from which cached attention uses threads: a
 * decoded token's attention (0.8M per layer at GPT-2 124M and 1024 positions) takes a fraction
 * of a millisecond on one core, less than a parallel region's fork and join can cost on a
 * loaded machine. */
#define CACHED_PAR_MIN (1 << 22)

static int64_t cached_scratch_floats(int64_t hs) { return hs * BLK + (BLK + 1) * round_up(hs, VW) + BLK + hs; }

/* o (hs) (=) for the query q (hs) at position p against key and value rows 0..p of one
 * head (rows hs apart). ws: cached_scratch_floats(hs) floats. */
static void cached_row_f32(const float *q, const float *k, const float *v, int64_t p, int64_t hs, float *o,
                           float *ws) {
  const int64_t hsv = round_up(hs, VW);
  float *KT = ws;           /* (hs, BLK): a block's keys, transposed (lanes are keys) */
  float *VP = KT + hs * BLK; /* (BLK, hsv): a block's values, zero padded past hs */
  float *S = VP + BLK * hsv; /* (BLK) scores, then probabilities */
  float *O = S + BLK;       /* (hsv) unnormalised output */
  float *qs = O + hsv;      /* (hs) the query, scaled */
  const float scale = 1.0f / sqrtf((float)hs);
  for (int64_t x = 0; x < hs; x++) qs[x] = scale * q[x];
  memset(O, 0, sizeof(float) * (size_t)hsv);
  vf mv = vbc(-INFINITY), lv = {0};
  for (int64_t j0 = 0; j0 <= p; j0 += BLK) {
    const int64_t nk = min64(BLK, p + 1 - j0), nkv = round_up(nk, VW);
    for (int64_t j = 0; j < nkv; j++)
      for (int64_t x = 0; x < hs; x++) KT[x * BLK + j] = j < nk ? k[(j0 + j) * hs + x] : 0;
    for (int64_t j = 0; j < nk; j++) {
      memcpy(VP + j * hsv, v + (j0 + j) * hs, sizeof(float) * (size_t)hs);
      for (int64_t x = hs; x < hsv; x++) VP[j * hsv + x] = 0;
    }
    for (int64_t g = 0; g < nkv; g += VW) {
      vf acc = {0};
      for (int64_t x = 0; x < hs; x++) acc += vld(KT + x * BLK + g) * vbc(qs[x]);
      vst(S + g, acc);
    }
    vf mx = mv, mold = mv;
    for (int64_t j = 0; j < nk; j++) mx = vmax(mx, vbc(S[j]));
    const vf alpha = vexp_neg(mold - mx);
    for (int64_t g = 0; g < nkv; g += VW) vst(S + g, vexp_neg(vld(S + g) - mx));
    vf sum = {0};
    for (int64_t j = 0; j < nk; j++) sum += vbc(S[j]);
    mv = mx;
    lv = lv * alpha + sum;
    if (j0 > 0)
      for (int64_t x = 0; x < hsv; x += VW) vst(O + x, vld(O + x) * vbc(alpha[0]));
    for (int64_t x = 0; x < hsv; x += VW) {
      vf ov = vld(O + x);
      for (int64_t j = 0; j < nk; j++) ov += vbc(S[j]) * vld(VP + j * hsv + x);
      vst(O + x, ov);
    }
  }
  const float inv = 1.0f / lv[0];
  for (int64_t x = 0; x < hs; x++) o[x] = O[x] * inv;
}

static zt_status cached_f32(const float *q, const float *k, const float *v, int64_t B, int64_t Tq, int64_t H,
                            int64_t Hkv, int64_t S, int64_t hs, int64_t len, float *out) {
  scratch sc;
  ZT_TRY(scratch_alloc(&sc, cached_scratch_floats(hs)));
  const int64_t rows = B * H * Tq, C = H * hs, group = H / Hkv;
  const bool par = rows > 1 && rows * len * hs > CACHED_PAR_MIN;
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t b = r / (H * Tq), h = r / Tq % H, i = r % Tq;
    const int64_t kv = ((b * Hkv + h / group) * S) * hs;
    cached_row_f32(q + (b * Tq + i) * C + h * hs, k + kv, v + kv, len - Tq + i, hs, out + (b * Tq + i) * C + h * hs,
                   scratch_mine(&sc));
  }
  scratch_free(&sc);
  return ZT_OK;
}

/* ------------------------------------------------------------------ f64 reference path */
/* Row by row with an O(T) score buffer: simple and exact enough for gradient checks. */

/* One query row: o (hs) (=) = softmax(q . k_j * scale) v over keys j in [0, p], key and
 * value rows ks and vs elements apart; returns the row's logsumexp. s: p + 1 doubles. */
static double row_f64(const double *q, const double *k, int64_t ks, const double *v, int64_t vs, int64_t p,
                      int64_t hs, double *o, double *s) {
  const double scale = 1.0 / sqrt((double)hs);
  double m = -INFINITY;
  for (int64_t j = 0; j <= p; j++) {
    const double *kj = k + j * ks;
    double acc = 0;
    for (int64_t x = 0; x < hs; x++) acc += q[x] * kj[x];
    s[j] = acc * scale;
    m = fmax(m, s[j]);
  }
  double l = 0;
  for (int64_t j = 0; j <= p; j++) l += s[j] = exp(s[j] - m);
  for (int64_t x = 0; x < hs; x++) o[x] = 0;
  for (int64_t j = 0; j <= p; j++) {
    const double *vj = v + j * vs;
    const double pj = s[j] / l;
    for (int64_t x = 0; x < hs; x++) o[x] += pj * vj[x];
  }
  return m + log(l);
}

static zt_status fwd_f64(const att_dims *d, const double *qkv, double *out, double *lse) {
  const int64_t T = d->T, C = d->C, C3 = d->W, hs = d->hs;
  void *buf = NULL;
  size_t bytes = sizeof(double) * (size_t)T;
  ZT_TRY(zt_mem_alloc(bytes, ZT_CPU, ZT_MEM_TAG_TEMP, &buf));
  for (int64_t b = 0; b < d->B; b++)
    for (int64_t h = 0; h < d->H; h++) {
      const double *kv = qkv + b * T * C3 + h / d->grp * hs, *k = kv + d->koff, *v = kv + d->voff;
      for (int64_t i = 0; i < T; i++)
        lse[(b * d->H + h) * T + i] =
            row_f64(qkv + (b * T + i) * C3 + h * hs, k, C3, v, C3, i, hs, out + (b * T + i) * C + h * hs, buf);
    }
  zt_mem_free(buf, bytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  return ZT_OK;
}

static void bwd_f64(const att_dims *d, const double *qkv, const double *out, const double *lse,
                    const double *dout, double *dqkv) {
  const int64_t T = d->T, C = d->C, C3 = d->W, hs = d->hs;
  const double scale = 1.0 / sqrt((double)hs);
  memset(dqkv, 0, sizeof(double) * (size_t)(d->B * T * C3));
  for (int64_t b = 0; b < d->B; b++)
    for (int64_t h = 0; h < d->H; h++)
      for (int64_t i = 0; i < T; i++) {
        const double *q = qkv + (b * T + i) * C3 + h * hs;
        const double *o = out + (b * T + i) * C + h * hs, *g = dout + (b * T + i) * C + h * hs;
        double *gq = dqkv + (b * T + i) * C3 + h * hs;
        double D = 0;
        for (int64_t x = 0; x < hs; x++) D += g[x] * o[x];
        const double li = lse[(b * d->H + h) * T + i];
        for (int64_t j = 0; j <= i; j++) {
          const int64_t kr = (b * T + j) * C3 + h / d->grp * hs;
          const double *k = qkv + kr + d->koff, *v = qkv + kr + d->voff;
          double *gk = dqkv + kr + d->koff, *gv = dqkv + kr + d->voff;
          double s = 0, dp = 0;
          for (int64_t x = 0; x < hs; x++) {
            s += q[x] * k[x];
            dp += g[x] * v[x];
          }
          const double p = exp(s * scale - li), ds = p * (dp - D) * scale;
          for (int64_t x = 0; x < hs; x++) {
            gv[x] += p * g[x];
            gq[x] += ds * k[x];
            gk[x] += ds * q[x];
          }
        }
      }
}

static zt_status cached_f64(const double *q, const double *k, const double *v, int64_t B, int64_t Tq, int64_t H,
                            int64_t Hkv, int64_t S, int64_t hs, int64_t len, double *out) {
  void *buf = NULL;
  size_t bytes = sizeof(double) * (size_t)len;
  ZT_TRY(zt_mem_alloc(bytes, ZT_CPU, ZT_MEM_TAG_TEMP, &buf));
  const int64_t C = H * hs, group = H / Hkv;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t kv = ((b * Hkv + h / group) * S) * hs;
      for (int64_t i = 0; i < Tq; i++)
        row_f64(q + (b * Tq + i) * C + h * hs, k + kv, hs, v + kv, hs, len - Tq + i, hs,
                out + (b * Tq + i) * C + h * hs, buf);
    }
  zt_mem_free(buf, bytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  return ZT_OK;
}

/* ------------------------------------------------------------------ entry points */
zt_status zt__cpu_attention_forward(const zt_tensor *qkv, int n_head, int n_kv_head, zt_tensor *out,
                                    zt_tensor *lse) {
  att_dims d = dims_of(qkv, n_head, n_kv_head);
  if (d.B * d.T == 0) return ZT_OK;
  if (qkv->dtype == ZT_DTYPE_F32)
    return fwd_f32(&d, zt__tensor_ptr(qkv), zt__tensor_ptr(out), zt__tensor_ptr(lse));
  ZT_ASSERT(qkv->dtype == ZT_DTYPE_F64);
  return fwd_f64(&d, zt__tensor_ptr(qkv), zt__tensor_ptr(out), zt__tensor_ptr(lse));
}

zt_status zt__cpu_attention_backward(const zt_tensor *qkv, const zt_tensor *out, const zt_tensor *lse,
                                     const zt_tensor *dout, int n_head, int n_kv_head, zt_tensor *dqkv) {
  att_dims d = dims_of(qkv, n_head, n_kv_head);
  if (d.B * d.T == 0) return ZT_OK;
  if (qkv->dtype == ZT_DTYPE_F32)
    return bwd_f32(&d, zt__tensor_ptr(qkv), zt__tensor_ptr(out), zt__tensor_ptr(lse), zt__tensor_ptr(dout),
                   zt__tensor_ptr(dqkv));
  ZT_ASSERT(qkv->dtype == ZT_DTYPE_F64);
  bwd_f64(&d, zt__tensor_ptr(qkv), zt__tensor_ptr(out), zt__tensor_ptr(lse), zt__tensor_ptr(dout),
          zt__tensor_ptr(dqkv));
  return ZT_OK;
}

zt_status zt__cpu_attention_cached(const zt_tensor *q, const zt_tensor *k, const zt_tensor *v, int64_t len,
                                   zt_tensor *out) {
  const int64_t B = q->shape[0], Tq = q->shape[1], Hkv = k->shape[1], S = k->shape[2], hs = k->shape[3];
  const int64_t H = q->shape[2] / hs;
  if (B * Tq == 0) return ZT_OK;
  if (q->dtype == ZT_DTYPE_F32)
    return cached_f32(zt__tensor_ptr(q), zt__tensor_ptr(k), zt__tensor_ptr(v), B, Tq, H, Hkv, S, hs, len,
                      zt__tensor_ptr(out));
  ZT_ASSERT(q->dtype == ZT_DTYPE_F64);
  return cached_f64(zt__tensor_ptr(q), zt__tensor_ptr(k), zt__tensor_ptr(v), B, Tq, H, Hkv, S, hs, len,
                    zt__tensor_ptr(out));
}
