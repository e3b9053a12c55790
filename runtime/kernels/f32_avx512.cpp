// AVX-512 (F/BW/VL + FMA) versions of the fp32 table entries. See f32_kernels.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "f32_kernels.h"
#include "i8_pv.h"
#include "kernel_utils.h"

#include "x86_simd.h"

namespace ember {
namespace kern {
namespace {

#if EMBER_X86
// ---- AVX-512 -------------------------------------------------------------------------------

// Horizontal sum (not _mm512_reduce_add_ps: GCC 12 warns inside it under -Werror).
EMBER_AVX512 inline float hsum512(__m512 v) {
  __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));
  __m128 x = _mm512_castps512_ps128(t);
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

EMBER_AVX512 float dot_avx512(const float* a, const float* b, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), s1);
  }
  for (; k + 16 <= n; k += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), s0);
  if (k < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), s1);
  }
  return hsum512(_mm512_add_ps(s0, s1));
}

// One row at a time, front to back: each thread reads its share of W as a single sequential
// stream (measured ~15% more bandwidth than interleaving 8 rows), with a software prefetch
// 1 KiB ahead of every line, across row ends, so the stream never waits at a page boundary.
EMBER_AVX512 void gemv_rows_avx512(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1,
                                   float* y, const float* bias) {
  constexpr int64_t kAhead = 256;  // floats
  const int64_t K64 = K & ~int64_t{63}, K16 = K & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - K16)) - 1);
  for (int64_t n = n0; n < n1; ++n) {
    const float* w = W + n * ldw;
    const char* pf = reinterpret_cast<const char*>(w + kAhead);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k < K64; k += 64) {
      _mm_prefetch(pf + 4 * k, _MM_HINT_T0);
      _mm_prefetch(pf + 4 * k + 64, _MM_HINT_T0);
      _mm_prefetch(pf + 4 * k + 128, _MM_HINT_T0);
      _mm_prefetch(pf + 4 * k + 192, _MM_HINT_T0);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 16), _mm512_loadu_ps(x + k + 16), a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 32), _mm512_loadu_ps(x + k + 32), a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 48), _mm512_loadu_ps(x + k + 48), a3);
    }
    for (; k < K16; k += 16) {
      _mm_prefetch(pf + 4 * k, _MM_HINT_T0);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), a0);
    }
    if (tail) {
      _mm_prefetch(pf + 4 * k, _MM_HINT_T0);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + k), _mm512_maskz_loadu_ps(tail, x + k), a1);
    }
    y[n] = hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))) + (bias ? bias[n] : 0.0f);
  }
}

// next_a: MR rows (stride lda) that the next call reads from memory, prefetched one line per row
// every 16 k, or nullptr.
template <int MR>
EMBER_AVX512 inline void ukernel_avx512_t(int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc,
                                          int nr, bool first, const float* bias, const float* next_a) {
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) {
    c0[i] = _mm512_setzero_ps();
    c1[i] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    if (next_a != nullptr && (k & 15) == 0) {
      for (int i = 0; i < MR; ++i) _mm_prefetch(reinterpret_cast<const char*>(next_a + i * lda + k), _MM_HINT_T0);
    }
    const __m512 b0 = _mm512_loadu_ps(Bp + k * kNR);
    const __m512 b1 = _mm512_loadu_ps(Bp + k * kNR + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(A[i * lda + k]);
      c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
    }
  }
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
  __m512 base0 = _mm512_setzero_ps(), base1 = _mm512_setzero_ps();
  if (first && bias) {
    base0 = _mm512_maskz_loadu_ps(m0, bias);
    base1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  }
  for (int i = 0; i < MR; ++i) {
    float* crow = C + i * ldc;
    __m512 p0 = base0, p1 = base1;
    if (!first) {
      p0 = _mm512_maskz_loadu_ps(m0, crow);
      p1 = _mm512_maskz_loadu_ps(m1, crow + 16);
    }
    _mm512_mask_storeu_ps(crow, m0, _mm512_add_ps(p0, c0[i]));
    _mm512_mask_storeu_ps(crow + 16, m1, _mm512_add_ps(p1, c1[i]));
  }
}

using Avx512Tile = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool, const float*,
                           const float*);
template <size_t... I>
constexpr std::array<Avx512Tile, sizeof...(I)> avx512_tiles(std::index_sequence<I...>) {
  return {&ukernel_avx512_t<static_cast<int>(I) + 1>...};
}
constexpr auto kAvx512Tiles = avx512_tiles(std::make_index_sequence<14>());  // mr = 1..14

EMBER_AVX512 void ukernel_avx512(int mr, int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc,
                                 int nr, bool first, const float* bias, const float* next_a) {
  kAvx512Tiles[static_cast<size_t>(std::clamp(mr, 1, 14) - 1)](kc, A, lda, Bp, C, ldc, nr, first, bias, next_a);
}

EMBER_AVX512 void axpy_avx512(float s, const float* x, float* y, int64_t n) {
  const __m512 sv = _mm512_set1_ps(s);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) _mm512_storeu_ps(y + k, _mm512_fmadd_ps(sv, _mm512_loadu_ps(x + k), _mm512_loadu_ps(y + k)));
  if (k < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1);
    _mm512_mask_storeu_ps(y + k, m, _mm512_fmadd_ps(sv, _mm512_maskz_loadu_ps(m, x + k), _mm512_maskz_loadu_ps(m, y + k)));
  }
}
// out = [sum(v[0]), ..., sum(v[15])]: a transpose-and-add tree instead of 16 horizontal sums.
EMBER_AVX512 inline __m512 reduce16_avx512(const __m512* v) {
  __m512 w[8], x[4];
  for (int i = 0; i < 8; ++i) {
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE));
  }
  for (int i = 0; i < 4; ++i) {
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[i], w[i + 4], 0x88), _mm512_shuffle_f32x4(w[i], w[i + 4], 0xDD));
  }
  const __m512 y0 = _mm512_add_ps(_mm512_unpacklo_ps(x[0], x[1]), _mm512_unpackhi_ps(x[0], x[1]));
  const __m512 y1 = _mm512_add_ps(_mm512_unpacklo_ps(x[2], x[3]), _mm512_unpackhi_ps(x[2], x[3]));
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y0, y1, 0x44), _mm512_shuffle_ps(y0, y1, 0xEE));
  return _mm512_shuffle_f32x4(z, z, 0xD8);  // blocks hold v[0-3], v[8-11], v[4-7], v[12-15]: reorder
}

// y[n0..n1) = W rows · x for short rows (attention scores): 16 rows per step, one reduction tree.
EMBER_AVX512 void gemv_short_rows_avx512(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1,
                                         float* y, const float* bias) {
  const int64_t K16 = K & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - K16)) - 1);
  int64_t n = n0;
  for (; n + 16 <= n1; n += 16) {
    const float* w = W + n * ldw;
    __m512 a[16];
    for (int j = 0; j < 16; ++j) a[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K16; k += 16) {
      const __m512 xv = _mm512_loadu_ps(x + k);
      // Cache rows usually come from DRAM (evicted by the weight stream): fetch the next 16 early.
      for (int j = 0; j < 16; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + (16 + j) * ldw + k), _MM_HINT_T0);
      for (int j = 0; j < 16; ++j) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(w + j * ldw + k), xv, a[j]);
    }
    if (tail) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + K16);
      for (int j = 0; j < 16; ++j) a[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + j * ldw + K16), xv, a[j]);
    }
    const __m512 sums = reduce16_avx512(a);
    _mm512_storeu_ps(y + n, bias ? _mm512_add_ps(sums, _mm512_loadu_ps(bias + n)) : sums);
  }
  for (; n < n1; ++n) y[n] = dot_avx512(x, W + n * ldw, K) + (bias ? bias[n] : 0.0f);
}

// exp(x) for 16 lanes, the same polynomial as kern::exp_approx (0 below -87.3).
EMBER_AVX512 inline __m512 exp_avx512(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc));
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  const __m512 yv = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  const __m512 e = _mm512_scalef_ps(yv, n);
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ), e);
}

// s[j] = exp(s[j] * scale - max_j(s * scale)); returns the sum, *max_out the max.
EMBER_AVX512 float scaled_softmax_avx512(float* s, int64_t n, float scale, float* max_out) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 mv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + j), sc);
    _mm512_storeu_ps(s + j, v);
    mv = _mm512_max_ps(mv, v);
  }
  float mx = _mm512_reduce_max_ps(mv);
  for (; j < n; ++j) {
    s[j] *= scale;
    mx = std::max(mx, s[j]);
  }
  const __m512 mxv = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + j), mxv));
    _mm512_storeu_ps(s + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  float total = _mm512_reduce_add_ps(sum);
  for (; j < n; ++j) {
    s[j] = exp_approx(s[j] - mx);
    total += s[j];
  }
  *max_out = mx;
  return total;
}

EMBER_AVX512 void silu_avx512(const float* x, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), v));
    _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(one, e)));
  }
  for (; i < n; ++i) y[i] = x[i] / (1.0f + exp_approx(-x[i]));
}

// out[0..16*NV) (last vector masked by `tail`) += sum_j p[j] * V[j]: two rows per step into two
// accumulator sets, so the FMAs form 2*NV independent chains instead of NV.
template <int NV>
EMBER_AVX512 void weighted_rows_sum_avx512_t(const float* p, const float* V, int64_t ldv, int64_t n, __mmask16 tail,
                                             float* out) {
  const auto mask = [tail](int v) { return v == NV - 1 ? tail : static_cast<__mmask16>(0xFFFF); };
  __m512 a0[NV], a1[NV];
  for (int v = 0; v < NV; ++v) {
    a0[v] = _mm512_maskz_loadu_ps(mask(v), out + 16 * v);
    a1[v] = _mm512_setzero_ps();
  }
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m512 p0 = _mm512_set1_ps(p[j]), p1 = _mm512_set1_ps(p[j + 1]);
    const float* r0 = V + j * ldv;
    const float* r1 = r0 + ldv;
    for (int v = 0; v < NV; ++v) {
      _mm_prefetch(reinterpret_cast<const char*>(r0 + 16 * ldv + 16 * v), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(r1 + 16 * ldv + 16 * v), _MM_HINT_T0);
    }
    for (int v = 0; v < NV; ++v) {
      a0[v] = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(mask(v), r0 + 16 * v), a0[v]);
      a1[v] = _mm512_fmadd_ps(p1, _mm512_maskz_loadu_ps(mask(v), r1 + 16 * v), a1[v]);
    }
  }
  if (j < n) {
    const __m512 p0 = _mm512_set1_ps(p[j]);
    for (int v = 0; v < NV; ++v) a0[v] = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(mask(v), V + j * ldv + 16 * v), a0[v]);
  }
  for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(out + 16 * v, mask(v), _mm512_add_ps(a0[v], a1[v]));
}

EMBER_AVX512 void weighted_rows_sum_avx512(const float* p, const float* V, int64_t ldv, int64_t n, int64_t D,
                                           float* out) {
  const __mmask16 tail = static_cast<__mmask16>(D % 16 == 0 ? 0xFFFF : (1u << (D % 16)) - 1);
  switch ((D + 15) / 16) {  // accumulators in registers for D <= 128
    case 1: weighted_rows_sum_avx512_t<1>(p, V, ldv, n, tail, out); return;
    case 2: weighted_rows_sum_avx512_t<2>(p, V, ldv, n, tail, out); return;
    case 3: weighted_rows_sum_avx512_t<3>(p, V, ldv, n, tail, out); return;
    case 4: weighted_rows_sum_avx512_t<4>(p, V, ldv, n, tail, out); return;
    case 5: weighted_rows_sum_avx512_t<5>(p, V, ldv, n, tail, out); return;
    case 6: weighted_rows_sum_avx512_t<6>(p, V, ldv, n, tail, out); return;
    case 7: weighted_rows_sum_avx512_t<7>(p, V, ldv, n, tail, out); return;
    case 8: weighted_rows_sum_avx512_t<8>(p, V, ldv, n, tail, out); return;
    default:
      for (int64_t j = 0; j < n; ++j) axpy_avx512(p[j], V + j * ldv, out, D);
  }
}
// 16 int8 codes as 16 floats (exact); `m` masks a tail (codes past it read as 0, not loaded).
EMBER_AVX512 inline __m512 i8x16_to_ps(const int8_t* c, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, c)));
}

// [sum(a[0]), sum(a[1]), sum(a[2]), sum(a[3])]: one add tree for the four rows.
EMBER_AVX512 inline __m128 reduce4_avx512(const __m512* a) {
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
  // Per 128-bit block: [a0, a1, a2, a3] partial sums.
  __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xEE));
  u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0x4E));
  u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0xB1));
  return _mm512_castps512_ps128(u);
}

// acc[g][r] += K row r's 16 codes at d (masked by m) x query head g's 16 values there.
template <int NG>
EMBER_AVX512 inline void i8_scores_step(__m512 (&acc)[NG][4], const float* q, const int8_t* k, int rows, int64_t D,
                                        int64_t d, __mmask16 m) {
  __m512 qv[NG];
  for (int g = 0; g < NG; ++g) qv[g] = _mm512_maskz_loadu_ps(m, q + g * D + d);
  for (int r = 0; r < rows; ++r) {
    const __m512 kv = i8x16_to_ps(k + r * D + d, m);
    for (int g = 0; g < NG; ++g) acc[g][r] = _mm512_fmadd_ps(kv, qv[g], acc[g][r]);
  }
}

// Scores of NG (<= 3) query heads against rows of int8 codes, 4 rows per step: each 16 codes are
// widened once, in a register, for all NG heads (see the AVX2 version); D's tail is masked.
template <int NG>
EMBER_AVX512 void i8_scores_avx512_t(const float* q, const float* qs, const int8_t* K, const float* ks, int64_t n,
                                     int64_t D, float* s, int64_t lds, PrefetchLines& pf) {
  const int64_t D16 = D & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (D - D16)) - 1);
  const int64_t per = pf.per((n + 3) / 4);
  for (int64_t j = 0; j < n; j += 4) {
    pf.issue(per);
    const int rows = static_cast<int>(std::min<int64_t>(4, n - j));
    const int8_t* k = K + j * D;
    __m512 acc[NG][4];
    for (int g = 0; g < NG; ++g)
      for (int r = 0; r < 4; ++r) acc[g][r] = _mm512_setzero_ps();
    if (rows == 4) {
      for (int64_t d = 0; d < D16; d += 16) i8_scores_step<NG>(acc, q, k, 4, D, d, 0xFFFF);
      if (tail) i8_scores_step<NG>(acc, q, k, 4, D, D16, tail);
    } else {
      for (int64_t d = 0; d < D16; d += 16) i8_scores_step<NG>(acc, q, k, rows, D, d, 0xFFFF);
      if (tail) i8_scores_step<NG>(acc, q, k, rows, D, D16, tail);
    }
    const __mmask8 out_mask = static_cast<__mmask8>((1u << rows) - 1);
    const __m128 sc = _mm_maskz_loadu_ps(out_mask, ks + j);
    for (int g = 0; g < NG; ++g)
      _mm_mask_storeu_ps(s + g * lds + j, out_mask, _mm_mul_ps(reduce4_avx512(acc[g]), _mm_mul_ps(_mm_set1_ps(qs[g]), sc)));
  }
}

// The query codes as fp32 (exact; see the AVX2 version), 3 heads at a time.
EMBER_AVX512 void i8_scores_avx512(const int8_t* q8, const float* qs, int64_t G, const int8_t* K, const float* ks,
                                   int64_t n, int64_t D, float* s, int64_t lds, PrefetchLines pf) {
  alignas(64) float qf[3 * kMaxI8ScoresDim];
  for (int64_t g0 = 0; g0 < G; g0 += 3) {  // 3 heads x 4 rows: 12 accumulators
    const int64_t ng = std::min<int64_t>(3, G - g0);
    for (int64_t i = 0; i < ng * D; ++i) qf[i] = static_cast<float>(q8[g0 * D + i]);
    float* sg = s + g0 * lds;
    switch (ng) {
      case 1: i8_scores_avx512_t<1>(qf, qs + g0, K, ks, n, D, sg, lds, pf); break;
      case 2: i8_scores_avx512_t<2>(qf, qs + g0, K, ks, n, D, sg, lds, pf); break;
      default: i8_scores_avx512_t<3>(qf, qs + g0, K, ks, n, D, sg, lds, pf); break;
    }
  }
  pf.issue_rest();
}

#define PV_TARGET EMBER_AVX512
#define PV_DOT(acc, a, b) _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
#include "i8_pv_avx512.inc"
#undef PV_TARGET
#undef PV_DOT

// argmax (f32_kernels.h): as the AVX2 version, 16 lanes.
EMBER_AVX512 int64_t argmax_avx512(const float* x, int64_t n) {
  __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512i best_i = _mm512_set1_epi32(-1);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  const int64_t vec_n = std::min<int64_t>(n, std::numeric_limits<int32_t>::max() - 16);  // int32 lane indices
  int64_t i = 0;
  for (; i + 16 <= vec_n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 gt = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, gt, v);
    best_i = _mm512_mask_mov_epi32(best_i, gt, idx);
    idx = _mm512_add_epi32(idx, step);
  }
  alignas(64) float bv[16];
  alignas(64) int32_t bi[16];
  _mm512_store_ps(bv, best);
  _mm512_store_si512(bi, best_i);
  return argmax_finish(bv, bi, 16, x, i, n);
}

#endif  // EMBER_X86

}  // namespace

void add_f32_avx512(F32Kernels& t) {
#if EMBER_X86
  constexpr KernelIsa kLevel = KernelIsa::kAvx512;
  t.dot.set(dot_avx512, kLevel);
  t.axpy.set(axpy_avx512, kLevel);
  t.gemv_rows.set(gemv_rows_avx512, kLevel);
  t.gemv_short_rows.set(gemv_short_rows_avx512, kLevel);
  t.gemv_cached_rows.set(gemv_short_rows_avx512, kLevel);  // not measured without its prefetch yet
  t.ukernel.set(ukernel_avx512, kLevel);
  t.ukernel_max_rows = 12;  // 24 accumulators: fewer loads per FMA
  t.softmax.set(scaled_softmax_avx512, kLevel);
  t.argmax.set(argmax_avx512, kLevel);
  t.silu.set(silu_avx512, kLevel);
  t.weighted_rows_sum.set(weighted_rows_sum_avx512, kLevel);
  t.i8_scores.set(i8_scores_avx512, kLevel);
  t.i8_weighted_rows.set(i8_weighted_rows_int, kLevel);
#else
  (void)t;
#endif
}

}  // namespace kern
}  // namespace ember
