// AVX2 + FMA versions of the fp32 table entries. See f32_kernels.h.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "f32_kernels.h"
#include "i8_pv.h"
#include "kernel_utils.h"

#include "x86_simd.h"

namespace ember {
namespace kern {
namespace {

#if EMBER_X86
// ---- AVX2 ----------------------------------------------------------------------------------

EMBER_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), s1);
  }
  for (; k + 8 <= n; k += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
  float s = hsum256(_mm256_add_ps(s0, s1));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

// Same order as gemv_rows_avx512: one row at a time, one sequential stream per thread.
EMBER_AVX2 void gemv_rows_avx2(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1, float* y,
                               const float* bias) {
  constexpr int64_t kAhead = 256;  // floats
  const int64_t K32 = K & ~int64_t{31}, K8 = K & ~int64_t{7};
  for (int64_t n = n0; n < n1; ++n) {
    const float* w = W + n * ldw;
    const char* pf = reinterpret_cast<const char*>(w + kAhead);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k < K32; k += 32) {
      _mm_prefetch(pf + 4 * k, _MM_HINT_T0);
      _mm_prefetch(pf + 4 * k + 64, _MM_HINT_T0);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 16), _mm256_loadu_ps(x + k + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 24), _mm256_loadu_ps(x + k + 24), a3);
    }
    for (; k < K8; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
    float r = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; k < K; ++k) r += w[k] * x[k];
    y[n] = r + (bias ? bias[n] : 0.0f);
  }
}

// MR x 16 tile: 2 * MR ymm accumulators (12 at MR = 6, BLIS's Haswell shape); per k, two loads of
// the packed panel serve MR broadcast rows, so each panel line read from L2 feeds 6 rows (a 3 x 32
// tile fed 3). Rows of A are the linear's weight rows, read in place; next_a: MR rows the next
// call reads from memory, prefetched one line per row every 16 k, or nullptr.
// One MR x 16 half of the panel (columns [16h, 16h + 16) of Bp) into out[MR][16].
template <int MR>
EMBER_AVX2 __attribute__((always_inline)) inline void tile16_avx2(int64_t kc, const float* A, int64_t lda,
                                                                  const float* b, const float* next_a, float* out) {
  __m256 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    if (next_a != nullptr) {
      for (int i = 0; i < MR; ++i) _mm_prefetch(reinterpret_cast<const char*>(next_a + i * lda + k0), _MM_HINT_T0);
    }
    const int64_t k1 = std::min(kc, k0 + 16);
    for (int64_t k = k0; k < k1; ++k) {
      const __m256 b0 = _mm256_loadu_ps(b + k * kNR), b1 = _mm256_loadu_ps(b + k * kNR + 8);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 av = _mm256_broadcast_ss(A + i * lda + k);
        c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
        c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(out + 16 * i, c0[i]);
    _mm256_storeu_ps(out + 16 * i + 8, c1[i]);
  }
}

// MR x 16 tiles: 2 * MR ymm accumulators (12 at MR = 6, BLIS's Haswell shape); per k, two loads of
// the packed panel serve MR broadcast rows, so each panel line read from L2 feeds 6 rows (a 3 x 32
// tile fed 3). Rows of A are the linear's weight rows, read in place; next_a: MR rows the next
// call reads from memory, prefetched one line per row every 16 k, or nullptr.
template <int MR>
EMBER_AVX2 void ukernel_avx2_t(int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc, int nr,
                               bool first, const float* bias, const float* next_a) {
  for (int h = 0; h < 2 && 16 * h < nr; ++h) {
    float tmp[MR * 16];
    tile16_avx2<MR>(kc, A, lda, Bp + 16 * h, h == 0 ? next_a : nullptr, tmp);
    const int cols = std::min(16, nr - 16 * h);
    for (int i = 0; i < MR; ++i) {
      float* crow = C + i * ldc + 16 * h;
      const float* brow = bias ? bias + 16 * h : nullptr;
      for (int j = 0; j < cols; ++j) crow[j] = (first ? (brow ? brow[j] : 0.0f) : crow[j]) + tmp[16 * i + j];
    }
  }
}

using Avx2Tile = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool, const float*,
                          const float*);
constexpr Avx2Tile kAvx2Tiles[6] = {&ukernel_avx2_t<1>, &ukernel_avx2_t<2>, &ukernel_avx2_t<3>,
                                    &ukernel_avx2_t<4>, &ukernel_avx2_t<5>, &ukernel_avx2_t<6>};

EMBER_AVX2 void ukernel_avx2(int mr, int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc,
                             int nr, bool first, const float* bias, const float* next_a) {
  for (int i0 = 0; i0 < mr; i0 += 6) {
    const int rows = std::min(6, mr - i0);
    kAvx2Tiles[rows - 1](kc, A + i0 * lda, lda, Bp, C + i0 * ldc, ldc, nr, first, bias, i0 == 0 ? next_a : nullptr);
  }
}

EMBER_AVX2 void axpy_avx2(float s, const float* x, float* y, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(y + k, _mm256_fmadd_ps(sv, _mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k)));
  for (; k < n; ++k) y[k] += s * x[k];
}

// exp(x) for 8 lanes: the polynomial of kern::exp_approx (0 below -87.3).
EMBER_AVX2 inline __m256 exp_avx2(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc));
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
  return _mm256_and_ps(e, _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));
}

EMBER_AVX2 inline float hmax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// s[j] = exp(s[j] * scale - max_j(s * scale)); returns the sum, *max_out the max.
EMBER_AVX2 float scaled_softmax_avx2(float* s, int64_t n, float scale, float* max_out) {
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), sc);
    _mm256_storeu_ps(s + j, v);
    mv = _mm256_max_ps(mv, v);
  }
  float mx = hmax256(mv);
  for (; j < n; ++j) {
    s[j] *= scale;
    mx = std::max(mx, s[j]);
  }
  const __m256 mxv = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), mxv));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  float total = hsum256(sum);
  for (; j < n; ++j) {
    s[j] = exp_approx(s[j] - mx);
    total += s[j];
  }
  *max_out = mx;
  return total;
}

EMBER_AVX2 void silu_avx2(const float* x, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), v));
    _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
  }
  for (; i < n; ++i) y[i] = x[i] / (1.0f + exp_approx(-x[i]));
}

// [sum(v[0]), ..., sum(v[7])] by a horizontal-add tree.
EMBER_AVX2 inline __m256 reduce8_avx2(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // per 128-bit half
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// y[n0..n1) = W rows · x for short rows (attention scores): 8 rows per step, one reduction tree.
// kPrefetch: the rows come from memory (fetch the next 8 early), not from L1.
template <bool kPrefetch>
EMBER_AVX2 void gemv_short_rows_avx2(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1,
                                     float* y, const float* bias) {
  const int64_t K8 = K & ~int64_t{7};
  int64_t n = n0;
  for (; n + 8 <= n1; n += 8) {
    const float* w = W + n * ldw;
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K8; k += 8) {
      const __m256 xv = _mm256_loadu_ps(x + k);
      // Cache rows usually come from DRAM (evicted by the weight stream): fetch the next 8 early.
      if (kPrefetch) {
        for (int j = 0; j < 8; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + (8 + j) * ldw + k), _MM_HINT_T0);
      }
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(w + j * ldw + k), xv, a[j]);
    }
    alignas(32) float sums[8];
    _mm256_store_ps(sums, reduce8_avx2(a));
    for (int j = 0; j < 8; ++j) {
      float r = sums[j];
      for (int64_t k = K8; k < K; ++k) r += w[j * ldw + k] * x[k];
      y[n + j] = r + (bias ? bias[n + j] : 0.0f);
    }
  }
  for (; n < n1; ++n) y[n] = dot_avx2(x, W + n * ldw, K) + (bias ? bias[n] : 0.0f);
}

// out[0..8*NV) += sum_j p[j] * V[j]: two rows per step into two accumulator sets when they fit
// in registers (NV <= 4), one set otherwise.
template <int NV>
EMBER_AVX2 void weighted_rows_sum_avx2_t(const float* p, const float* V, int64_t ldv, int64_t n, float* out) {
  constexpr bool kTwo = NV <= 4;
  __m256 a0[NV], a1[NV];
  for (int v = 0; v < NV; ++v) {
    a0[v] = _mm256_loadu_ps(out + 8 * v);
    a1[v] = _mm256_setzero_ps();
  }
  int64_t j = 0;
  if (kTwo) {
    for (; j + 2 <= n; j += 2) {
      const __m256 p0 = _mm256_set1_ps(p[j]), p1 = _mm256_set1_ps(p[j + 1]);
      const float* r0 = V + j * ldv;
      const float* r1 = r0 + ldv;
      for (int v = 0; v < NV; ++v) {
        a0[v] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(r0 + 8 * v), a0[v]);
        a1[v] = _mm256_fmadd_ps(p1, _mm256_loadu_ps(r1 + 8 * v), a1[v]);
      }
    }
  }
  for (; j < n; ++j) {
    const __m256 p0 = _mm256_set1_ps(p[j]);
    const float* r0 = V + j * ldv;
    _mm_prefetch(reinterpret_cast<const char*>(r0 + 8 * ldv), _MM_HINT_T0);
    for (int v = 0; v < NV; ++v) a0[v] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(r0 + 8 * v), a0[v]);
  }
  for (int v = 0; v < NV; ++v) _mm256_storeu_ps(out + 8 * v, kTwo ? _mm256_add_ps(a0[v], a1[v]) : a0[v]);
}

EMBER_AVX2 void weighted_rows_sum_avx2(const float* p, const float* V, int64_t ldv, int64_t n, int64_t D, float* out) {
  if (D % 8 == 0) {
    switch (D / 8) {  // accumulators in registers for D <= 128
      case 1: weighted_rows_sum_avx2_t<1>(p, V, ldv, n, out); return;
      case 2: weighted_rows_sum_avx2_t<2>(p, V, ldv, n, out); return;
      case 3: weighted_rows_sum_avx2_t<3>(p, V, ldv, n, out); return;
      case 4: weighted_rows_sum_avx2_t<4>(p, V, ldv, n, out); return;
      case 8: weighted_rows_sum_avx2_t<8>(p, V, ldv, n, out); return;
      case 10: weighted_rows_sum_avx2_t<10>(p, V, ldv, n, out); return;
      case 12: weighted_rows_sum_avx2_t<12>(p, V, ldv, n, out); return;
      case 16: weighted_rows_sum_avx2_t<16>(p, V, ldv, n, out); return;
      default: break;
    }
  }
  for (int64_t j = 0; j < n; ++j) axpy_avx2(p[j], V + j * ldv, out, D);
}

// 8 int8 codes as 8 floats (exact).
EMBER_AVX2 inline __m256 i8x8_to_ps(const int8_t* c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}

EMBER_AVX2 void scaled_i8_to_float_avx2(const int8_t* src, const float* scales, int64_t rows, int64_t D, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* c = src + r * D;
    float* o = dst + r * D;
    const __m256 s = _mm256_set1_ps(scales[r]);
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(i8x8_to_ps(c + d), s));
    for (; d < D; ++d) o[d] = static_cast<float>(c[d]) * scales[r];
  }
}

// Scores of NG (<= 3) query heads against rows of int8 codes, 4 rows per step: each 8 codes are
// widened once, in a register, for all NG heads; 4 x NG independent accumulators; the 4 rows'
// sums come out of one horizontal-add tree per head.
template <int NG>
EMBER_AVX2 void i8_scores_avx2_t(const float* q, const float* qs, const int8_t* K, const float* ks, int64_t n, int64_t D,
                                 float* s, int64_t lds, PrefetchLines& pf) {
  const int64_t D8 = D & ~int64_t{7};
  const int64_t per = pf.per(n / 4);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    pf.issue(per);
    const int8_t* k = K + j * D;
    __m256 acc[NG][4];
    for (int g = 0; g < NG; ++g)
      for (int r = 0; r < 4; ++r) acc[g][r] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D8; d += 8) {
      for (int r = 0; r < 4; ++r) {
        const __m256 kv = i8x8_to_ps(k + r * D + d);
        for (int g = 0; g < NG; ++g) acc[g][r] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q + g * D + d), acc[g][r]);
      }
    }
    const __m128 sc = _mm_loadu_ps(ks + j);
    for (int g = 0; g < NG; ++g) {
      const __m256 t0 = _mm256_hadd_ps(acc[g][0], acc[g][1]), t1 = _mm256_hadd_ps(acc[g][2], acc[g][3]);
      const __m256 u = _mm256_hadd_ps(t0, t1);  // per 128-bit half: the 4 rows' partial sums
      __m128 sums = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
      if (D8 < D) {
        alignas(16) float t[4];
        _mm_store_ps(t, sums);
        for (int r = 0; r < 4; ++r)
          for (int64_t d = D8; d < D; ++d) t[r] += q[g * D + d] * static_cast<float>(k[r * D + d]);
        sums = _mm_load_ps(t);
      }
      _mm_storeu_ps(s + g * lds + j, _mm_mul_ps(sums, _mm_mul_ps(_mm_set1_ps(qs[g]), sc)));
    }
  }
  for (; j < n; ++j) {
    const int8_t* k = K + j * D;
    for (int g = 0; g < NG; ++g) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t d = 0; d < D8; d += 8) acc = _mm256_fmadd_ps(i8x8_to_ps(k + d), _mm256_loadu_ps(q + g * D + d), acc);
      float r = hsum256(acc);
      for (int64_t d = D8; d < D; ++d) r += q[g * D + d] * static_cast<float>(k[d]);
      s[g * lds + j] = r * (qs[g] * ks[j]);
    }
  }
}

// The query codes as fp32 (exact), 3 heads at a time: products and partial sums of codes stay
// integers below 2^24, so the fp32 FMAs sum them exactly, in any order.
EMBER_AVX2 void i8_scores_avx2(const int8_t* q8, const float* qs, int64_t G, const int8_t* K, const float* ks,
                               int64_t n, int64_t D, float* s, int64_t lds, PrefetchLines pf) {
  alignas(32) float qf[3 * kMaxI8ScoresDim];
  for (int64_t g0 = 0; g0 < G; g0 += 3) {  // 3 heads x 4 rows: 12 accumulators, all in registers
    const int64_t ng = std::min<int64_t>(3, G - g0);
    for (int64_t i = 0; i < ng * D; ++i) qf[i] = static_cast<float>(q8[g0 * D + i]);
    float* sg = s + g0 * lds;
    switch (ng) {
      case 1: i8_scores_avx2_t<1>(qf, qs + g0, K, ks, n, D, sg, lds, pf); break;
      case 2: i8_scores_avx2_t<2>(qf, qs + g0, K, ks, n, D, sg, lds, pf); break;
      default: i8_scores_avx2_t<3>(qf, qs + g0, K, ks, n, D, sg, lds, pf); break;
    }
  }
  pf.issue_rest();
}

// The integer P·V over the int8 KV cache (i8_pv.h), 16 columns at a time: two rows' codes widen
// to int16 (VPMOVSXBW) and VPUNPCK{L,H}WD pairs them column by column; VPMADDWD + VPADDD then add
// both rows' products per head (the AVX-512 version, i8_pv_avx512.inc, has the details). Against
// the fp32 FMA version it replaced, alternating in one process (forced AVX2 on an Intel Xeon VM):
// the whole attention op -15% at position 1,900, -17% at 240.

// One head's block: w = p * s -> w, its int16 codes -> q (q[nb] = 0 for an odd nb), *back = m / kPvCode.
// False (q not written) when the block takes the fp32 path.
EMBER_AVX2 inline bool pv_round_avx2(const float* p, const float* s, int64_t nb, float* w, int16_t* q, float* back) {
  const __m256 zero = _mm256_setzero_ps(), big = _mm256_set1_ps(FLT_MAX);
  __m256 mx = zero, bad = zero;
  int64_t j = 0;
  for (; j + 8 <= nb; j += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(s + j));
    _mm256_storeu_ps(w + j, x);
    bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(x, zero, _CMP_NGE_UQ), _mm256_cmp_ps(x, big, _CMP_NLE_UQ)));
    mx = _mm256_max_ps(mx, x);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float top = 0;
  for (float v : lanes) top = std::max(top, v);
  bool clean = _mm256_movemask_ps(bad) == 0;
  for (; j < nb; ++j) {
    w[j] = p[j] * s[j];
    clean = clean && pv_clean(w[j]);
    top = std::max(top, w[j]);
  }
  if (!clean || !pv_quantized(top)) return false;
  const float inv = kPvCode / top;
  const __m256 iv = _mm256_set1_ps(inv);
  for (j = 0; j + 16 <= nb; j += 16) {
    const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w + j), iv));
    const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w + j + 8), iv));
    // codes in [0, 32767]: the saturating pack is exact; it interleaves 128-bit lanes, put back in order
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j), _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
  }
  for (; j < nb; ++j) q[j] = static_cast<int16_t>(std::nearbyint(w[j] * inv));
  q[nb] = 0;
  *back = top / kPvCode;
  return true;
}

// Rows j and j + 1 of 16 columns into NG heads' sums: v the first row's codes, y the second's
// (widened); qj the heads' codes from row j, ldq apart.
template <int NG>
EMBER_AVX2 inline void pv_rows_avx2(const int16_t* qj, int64_t ldq, const int8_t* v, __m256i y, __m256i (&acc)[NG][2]) {
  const __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)));
  const __m256i u0 = _mm256_unpacklo_epi16(x, y), u1 = _mm256_unpackhi_epi16(x, y);
  for (int g = 0; g < NG; ++g) {
    int32_t pair;
    __builtin_memcpy(&pair, qj + g * ldq, 4);
    const __m256i b = _mm256_set1_epi32(pair);
    acc[g][0] = _mm256_add_epi32(acc[g][0], _mm256_madd_epi16(u0, b));
    acc[g][1] = _mm256_add_epi32(acc[g][1], _mm256_madd_epi16(u1, b));
  }
}

// NG (<= 3) heads' codes q[g * ldq + j] against nb rows of V, columns [c0, c0 + 16):
// out[g * ldo + c] = fma(float(sum), back[g], out[...]) for the heads with back[g] != 0.
template <int NG>
EMBER_AVX2 void pv_cols_avx2(const int16_t* q, int64_t ldq, const float* back, const int8_t* V, int64_t nb, int64_t D,
                             int64_t c0, float* out, int64_t ldo, PrefetchLines& pf, int64_t per) {
  __m256i acc[NG][2];
  for (int g = 0; g < NG; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_si256();
  int64_t j = 0;
  // The prefetch asked for once per 8 row pairs (as in i8_pv_avx512.inc).
  for (int64_t j8; (j8 = std::min(nb & ~int64_t{1}, j + 16)) > j;) {
    pf.issue((j8 - j) * per);
    for (; j < j8; j += 2)
      pv_rows_avx2<NG>(q + j, ldq, V + j * D + c0, _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                                         reinterpret_cast<const __m128i*>(V + (j + 1) * D + c0))), acc);
  }
  if (j < nb) pv_rows_avx2<NG>(q + j, ldq, V + j * D + c0, _mm256_setzero_si256(), acc);  // odd: zeros (q[nb] = 0)
  // acc[g][0] lane 4L + i: column 8L + i; acc[g][1]: 8L + 4 + i.
  for (int g = 0; g < NG; ++g) {
    if (back[g] == 0) continue;
    const __m256 bv = _mm256_set1_ps(back[g]);
    float* o = out + g * ldo + c0;
    const __m256i lo = _mm256_permute2x128_si256(acc[g][0], acc[g][1], 0x20);
    const __m256i hi = _mm256_permute2x128_si256(acc[g][0], acc[g][1], 0x31);
    _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), bv, _mm256_loadu_ps(o)));
    _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), bv, _mm256_loadu_ps(o + 8)));
  }
}

EMBER_AVX2 void i8_weighted_rows_avx2(const float* p, int64_t ldp, int64_t G, const int8_t* V, const float* scales,
                                      int64_t n, int64_t D, float* out, int64_t ldo, PrefetchLines pf) {
  constexpr int64_t ldq = kPvRows + 16;
  const int64_t per = pf.per(n);  // per row of the first pass over each block of rows
  const int64_t D16 = D & ~int64_t{15};
  alignas(32) float w[kPvRows];
  alignas(32) int16_t q[3 * ldq];
  for (int64_t j0 = 0; j0 < n; j0 += kPvRows) {
    const int64_t nb = std::min(kPvRows, n - j0);
    const int8_t* vb = V + j0 * D;
    for (int64_t g0 = 0; g0 < G; g0 += 3) {
      const int ng = static_cast<int>(std::min<int64_t>(3, G - g0));
      float back[3] = {0, 0, 0};
      float* og = out + g0 * ldo;
      for (int g = 0; g < ng; ++g) {
        if (!pv_round_avx2(p + (g0 + g) * ldp + j0, scales + j0, nb, w, q + g * ldq, &back[g])) {
          pv_float_rows(w, vb, nb, D, og + g * ldo);
          std::fill(q + g * ldq, q + g * ldq + nb + 1, int16_t{0});
        }
      }
      for (int64_t c0 = 0; c0 < D16; c0 += 16) {
        switch (ng) {
          case 1: pv_cols_avx2<1>(q, ldq, back, vb, nb, D, c0, og, ldo, pf, per); break;
          case 2: pv_cols_avx2<2>(q, ldq, back, vb, nb, D, c0, og, ldo, pf, per); break;
          default: pv_cols_avx2<3>(q, ldq, back, vb, nb, D, c0, og, ldo, pf, per); break;
        }
      }
      for (int g = 0; g < ng; ++g)  // the last D % 16 columns
        if (back[g] != 0) pv_int_cols(q + g * ldq, vb, nb, D, D16, D, back[g], og + g * ldo);
    }
  }
  pf.issue_rest();
}

__attribute__((target("avx2,f16c"))) void half_to_float_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}
// argmax (f32_kernels.h): per lane, the first index of its largest value (strictly greater, so NaN
// never wins), then the lowest index among the lanes holding the overall largest.
EMBER_AVX2 int64_t argmax_avx2(const float* x, int64_t n) {
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 best = neg_inf;
  __m256i best_i = _mm256_set1_epi32(-1);
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i step = _mm256_set1_epi32(8);
  const int64_t vec_n = std::min<int64_t>(n, std::numeric_limits<int32_t>::max() - 8);  // int32 lane indices
  int64_t i = 0;
  for (; i + 8 <= vec_n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 gt = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
    best = _mm256_blendv_ps(best, v, gt);
    best_i = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best_i), _mm256_castsi256_ps(idx), gt));
    idx = _mm256_add_epi32(idx, step);
  }
  alignas(32) float bv[8];
  alignas(32) int32_t bi[8];
  _mm256_store_ps(bv, best);
  _mm256_store_si256(reinterpret_cast<__m256i*>(bi), best_i);
  return argmax_finish(bv, bi, 8, x, i, n);
}

#endif  // EMBER_X86

}  // namespace

void add_f32_avx2(F32Kernels& t) {
#if EMBER_X86
  constexpr KernelIsa kLevel = KernelIsa::kAvx2;
  t.dot.set(dot_avx2, kLevel);
  t.axpy.set(axpy_avx2, kLevel);
  t.gemv_rows.set(gemv_rows_avx2, kLevel);
  t.gemv_short_rows.set(gemv_short_rows_avx2<true>, kLevel);
  t.gemv_cached_rows.set(gemv_short_rows_avx2<false>, kLevel);
  t.ukernel.set(ukernel_avx2, kLevel);
  t.ukernel_max_rows = 6;
  t.softmax.set(scaled_softmax_avx2, kLevel);
  t.argmax.set(argmax_avx2, kLevel);
  t.silu.set(silu_avx2, kLevel);
  t.weighted_rows_sum.set(weighted_rows_sum_avx2, kLevel);
  if (cpu_features().f16c) t.half_to_float.set(half_to_float_f16c, kLevel);
  t.scaled_i8_to_float.set(scaled_i8_to_float_avx2, kLevel);
  t.i8_scores.set(i8_scores_avx2, kLevel);
  t.i8_weighted_rows.set(i8_weighted_rows_avx2, kLevel);
#else
  (void)t;
#endif
}

}  // namespace kern
}  // namespace ember
