// AVX512-VNNI versions of the fp32 table entries whose math is integer: the scores of int8
// queries over the int8 KV cache (f32.i8_scores), and the P·V over it (f32.i8_weighted_rows,
// VPDPWSSD: i8_pv_avx512.inc). See f32_kernels.h.
//
// VPDPBUSD multiplies unsigned by signed bytes: the cache codes k become unsigned as k ^ 0x80
// (= k + 128), and sum_d (k + 128) q = sum_d k q + 128 sum_d q, a per-head constant taken off at
// the end. A row's 64 codes fill one register, so a dot product would end in a 16-lane
// horizontal sum per row and head; instead 4 rows are transposed by 32-bit groups within each
// 128-bit lane (8 unpacks, shared by every head), which puts the 4 rows side by side in each lane,
// and the query's 4-code groups are laid out to match. 16 rows then end in one 3-step reduction
// per head. evals/bench_attention.py on a Zen 4, SmolLM2's layer at position 1,900 with its rows in L2:
// 38.9 us per call against 48.0 for the fp32 FMA version (~11 us of it call overhead).
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "f32_kernels.h"
#include "i8_pv.h"
#include "x86_simd.h"

namespace ember {
namespace kern {
namespace {

#if EMBER_X86
constexpr int64_t kMaxChunks = kMaxI8ScoresDim / 64;

// 64 bytes of a row, bytes past `bytes` zero (bytes <= 0: all zero).
EMBER_AVX512VNNI inline __m512i load_codes(const int8_t* p, int64_t bytes) {
  const __mmask64 m = bytes >= 64 ? ~__mmask64{0} : (bytes <= 0 ? __mmask64{0} : (__mmask64{1} << bytes) - 1);
  return _mm512_maskz_loadu_epi8(m, p);
}

// Rows r0 .. r0 + 3 of a 64-code chunk against NG heads: a[g] += their 4 x 16 code groups. kFull:
// all 4 rows exist and the chunk is whole (no masks).
template <int NG, bool kFull>
EMBER_AVX512VNNI inline void four_rows(__m512i (&a)[NG], const __m512i* q, const int8_t* row0, int64_t D,
                                       int64_t live_rows, int64_t bytes) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i r[4];
  for (int i = 0; i < 4; ++i) {
    const __m512i codes = kFull ? _mm512_loadu_si512(row0 + i * D) : load_codes(row0 + i * D, i < live_rows ? bytes : 0);
    r[i] = _mm512_xor_si512(codes, flip);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
  // u[k], lane L: the 4 rows side by side, each with its code group 4 L + k.
  const __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                        _mm512_unpackhi_epi64(t1, t3)};
  for (int g = 0; g < NG; ++g)
    for (int k = 0; k < 4; ++k) a[g] = _mm512_dpbusd_epi32(a[g], u[k], _mm512_load_si512(q + g * kMaxChunks * 4 + k));
}

// NG (<= 4) heads over rows in groups of 16; q[(g * kMaxChunks + c) * 4 + k]: for 64-code chunk c,
// lane L (of 4) holds the head's 32-bit code group 4 L + k, repeated 4 times.
template <int NG>
EMBER_AVX512VNNI void scores_t(const __m512i* q, const int32_t* corr, const float* qs, const int8_t* K, const float* ks,
                               int64_t n, int64_t D, float* s, int64_t lds, PrefetchLines& pf) {
  const int64_t chunks = (D + 63) / 64;
  const int64_t per = pf.per((n + 15) / 16);
  for (int64_t j = 0; j < n; j += 16) {
    pf.issue(per);
    const int64_t rows = std::min<int64_t>(16, n - j);
    const bool full = rows == 16 && D % 64 == 0;
    __m512i acc[NG][4];
    for (int rg = 0; rg < 4; ++rg) {
      __m512i a[NG];
      for (int g = 0; g < NG; ++g) a[g] = _mm512_setzero_si512();
      const int8_t* row0 = K + (j + 4 * rg) * D;
      for (int64_t c = 0; c < chunks; ++c) {
        if (full) four_rows<NG, true>(a, q + c * 4, row0 + 64 * c, D, 4, 64);
        else four_rows<NG, false>(a, q + c * 4, row0 + 64 * c, D, rows - 4 * rg, D - 64 * c);
      }
      for (int g = 0; g < NG; ++g) acc[g][rg] = a[g];
    }
    // acc[g][rg], lane L, slot i: row 4 rg + i over lane L's code groups; sum the 4 lanes.
    const __mmask16 out = static_cast<__mmask16>(rows >= 16 ? 0xFFFF : (1u << rows) - 1);
    const __m512 ksv = _mm512_maskz_loadu_ps(out, ks + j);
    for (int g = 0; g < NG; ++g) {
      const __m512i a = acc[g][0], b = acc[g][1], c = acc[g][2], d = acc[g][3];
      const __m512i ab = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xEE));
      const __m512i cd = _mm512_add_epi32(_mm512_shuffle_i32x4(c, d, 0x44), _mm512_shuffle_i32x4(c, d, 0xEE));
      const __m512i sum = _mm512_add_epi32(_mm512_shuffle_i32x4(ab, cd, 0x88), _mm512_shuffle_i32x4(ab, cd, 0xDD));
      const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum, _mm512_set1_epi32(corr[g])));
      _mm512_mask_storeu_ps(s + g * lds + j, out, _mm512_mul_ps(f, _mm512_mul_ps(_mm512_set1_ps(qs[g]), ksv)));
    }
  }
}

EMBER_AVX512VNNI void i8_scores_vnni(const int8_t* q8, const float* qs, int64_t G, const int8_t* K, const float* ks,
                                     int64_t n, int64_t D, float* s, int64_t lds, PrefetchLines pf) {
  constexpr int kHeads = 4;  // 4 heads x 4 row groups: 16 accumulators
  alignas(64) __m512i q[kHeads * kMaxChunks * 4];
  int32_t corr[kHeads];
  const int64_t chunks = (D + 63) / 64;
  for (int64_t g0 = 0; g0 < G; g0 += kHeads) {
    const int ng = static_cast<int>(std::min<int64_t>(kHeads, G - g0));
    for (int g = 0; g < ng; ++g) {
      const int8_t* qg = q8 + (g0 + g) * D;
      __m512i sums = _mm512_setzero_si512();  // the codes' sum, for the offset taken off at the end
      for (int64_t c = 0; c < chunks; ++c) {
        const __m512i groups = load_codes(qg + 64 * c, D - 64 * c);
        sums = _mm512_dpbusd_epi32(sums, _mm512_set1_epi8(1), groups);
        for (int k = 0; k < 4; ++k) {
          const __m512i idx = _mm512_set_epi32(12 + k, 12 + k, 12 + k, 12 + k, 8 + k, 8 + k, 8 + k, 8 + k, 4 + k, 4 + k,
                                               4 + k, 4 + k, k, k, k, k);
          q[(g * kMaxChunks + c) * 4 + k] = _mm512_permutexvar_epi32(idx, groups);
        }
      }
      alignas(64) int32_t lanes[16];
      _mm512_store_si512(lanes, sums);
      int32_t sum = 0;
      for (int32_t v : lanes) sum += v;
      corr[g] = 128 * sum;
    }
    float* sg = s + g0 * lds;
    switch (ng) {
      case 1: scores_t<1>(q, corr, qs + g0, K, ks, n, D, sg, lds, pf); break;
      case 2: scores_t<2>(q, corr, qs + g0, K, ks, n, D, sg, lds, pf); break;
      case 3: scores_t<3>(q, corr, qs + g0, K, ks, n, D, sg, lds, pf); break;
      default: scores_t<4>(q, corr, qs + g0, K, ks, n, D, sg, lds, pf); break;
    }
  }
  pf.issue_rest();
}

#define PV_TARGET EMBER_AVX512VNNI
#define PV_DOT(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#include "i8_pv_avx512.inc"
#undef PV_TARGET
#undef PV_DOT
#endif  // EMBER_X86

}  // namespace

void add_f32_avx512vnni(F32Kernels& t) {
#if EMBER_X86
  t.i8_scores.set(i8_scores_vnni, KernelIsa::kAvx512Vnni);
  t.i8_weighted_rows.set(i8_weighted_rows_int, KernelIsa::kAvx512Vnni);
  t.i8_scores_for_prefill = true;
#else
  (void)t;
#endif
}

}  // namespace kern
}  // namespace ember
