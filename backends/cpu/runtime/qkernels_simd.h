// Helpers shared by the SIMD block kernels of the CPU delegate (AVX2, AVX-512, AVX-512 VNNI).
#pragma once

#include <cstdint>

#include "qkernels.h"
#include "x86_simd.h"

namespace ember {
namespace cpu {

// 4 activation bytes as one int32 (for a broadcast); unaligned.
inline int32_t load32(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

#if EMBER_X86
// F16C is on every AVX2 CPU ember has met; the AVX2 table is only used when the CPU reports it.
#define EMBER_AVX2_F16C __attribute__((target("avx2,fma,f16c")))

// 8 per-row parameters from `param` (co.scale or co.offset) at element i, fp16 or fp32 as co.half says.
EMBER_AVX2_F16C inline __m256 params256(const Coeffs& co, const void* param, int64_t i) {
  if (!co.half) return _mm256_loadu_ps(static_cast<const float*>(param) + i);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(param) + i)));
}

// 8 rows' coefficients of group g (row0 = 0 or 8 of the block): *s = scale, *c = m - s * ze.
EMBER_AVX2_F16C inline void coeffs256(const Coeffs& co, int64_t g, int row0, __m256* s, __m256* c) {
  const int64_t i = g * co.param_stride + row0;
  *s = params256(co, co.scale, i);
  const __m256 mv = co.offset ? params256(co, co.offset, i) : _mm256_set1_ps(co.m_const);
  *c = _mm256_fnmadd_ps(*s, _mm256_set1_ps(co.ze), mv);
}

// The per-group step of qkernels.h for 8 rows (row0 = 0 or 8 of the block):
// acc = fma(s, P, acc); acc = fma(c, A, acc), with c = m - s * ze.
template <int MB>
EMBER_AVX2_F16C inline void group_step256(const Coeffs& co, int64_t g, int row0, const __m256 (&p)[MB],
                                          const float* asum, int64_t G, __m256 (&acc)[MB]) {
  __m256 sv, cv;
  coeffs256(co, g, row0, &sv, &cv);
  for (int m = 0; m < MB; ++m) {
    acc[m] = _mm256_fmadd_ps(sv, p[m], acc[m]);
    acc[m] = _mm256_fmadd_ps(cv, _mm256_broadcast_ss(asum + m * G), acc[m]);
  }
}

// p[m] *= ascale[m][g] (per-group activation scales; ascale [MB][G], or null: nothing to do).
template <int MB>
EMBER_AVX2_F16C inline void scale_by_group256(__m256 (&p)[MB], const float* ascale, int64_t g, int64_t G) {
  if (!ascale) return;
  for (int m = 0; m < MB; ++m) p[m] = _mm256_mul_ps(p[m], _mm256_broadcast_ss(ascale + m * G + g));
}

// The int32 sums that row m's group g starts from (8 lanes): its -ze * A where the caller folds the
// zero point into them (Coeffs::zinit), else zero.
EMBER_AVX2_F16C inline __m256i group_sums_start256(const Coeffs& co, int64_t m, int64_t g, int64_t G) {
  return co.zinit != nullptr ? _mm256_set1_epi32(co.zinit[m * G + g]) : _mm256_setzero_si256();
}

// The int kernels' group step for 8 rows: folded (folds_zero_point; with Coeffs::zinit, p holds
// P - ze * A already) or p scaled by ascale, then group_step256.
template <int MB>
EMBER_AVX2_F16C inline void int_group_step256(const Coeffs& co, int64_t g, int row0, __m256 (&p)[MB],
                                              const float* ascale, const float* asum, int64_t G, __m256 (&acc)[MB]) {
  if (co.zinit != nullptr) {
    const __m256 sv = params256(co, co.scale, g * co.param_stride + row0);
    for (int m = 0; m < MB; ++m) acc[m] = _mm256_fmadd_ps(sv, p[m], acc[m]);
    return;
  }
  if (folds_zero_point(co, ascale)) {
    const __m256 sv = params256(co, co.scale, g * co.param_stride + row0);
    for (int m = 0; m < MB; ++m)
      acc[m] = _mm256_fmadd_ps(sv, _mm256_sub_ps(p[m], _mm256_set1_ps(co.ze * asum[m * G])), acc[m]);
    return;
  }
  scale_by_group256<MB>(p, ascale, g, G);
  group_step256<MB>(co, g, row0, p, asum, G, acc);
}

// 16 per-row parameters from `param` (co.scale or co.offset) at element i, fp16 or fp32 as co.half says.
EMBER_AVX512 inline __m512 params512(const Coeffs& co, const void* param, int64_t i) {
  if (!co.half) return _mm512_loadu_ps(static_cast<const float*>(param) + i);
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(param) + i)));
}

template <int MB>
EMBER_AVX512 inline void scale_by_group512(__m512 (&p)[MB], const float* ascale, int64_t g, int64_t G) {
  if (!ascale) return;
  for (int m = 0; m < MB; ++m) p[m] = _mm512_mul_ps(p[m], _mm512_set1_ps(ascale[m * G + g]));
}

// The same for all 16 rows of a block.
template <int MB>
EMBER_AVX512 inline void group_step512(const Coeffs& co, int64_t g, const __m512 (&p)[MB], const float* asum,
                                       int64_t G, __m512 (&acc)[MB]) {
  const int64_t i = g * co.param_stride;
  const __m512 sv = params512(co, co.scale, i);
  const __m512 mv = co.offset ? params512(co, co.offset, i) : _mm512_set1_ps(co.m_const);
  const __m512 cv = _mm512_fnmadd_ps(sv, _mm512_set1_ps(co.ze), mv);
  for (int m = 0; m < MB; ++m) {
    acc[m] = _mm512_fmadd_ps(sv, p[m], acc[m]);
    acc[m] = _mm512_fmadd_ps(cv, _mm512_set1_ps(asum[m * G]), acc[m]);
  }
}

// The int32 sums that row m's group g starts from: its -ze * A where the caller folds the zero
// point into them (Coeffs::zinit), else zero.
EMBER_AVX512 inline __m512i group_sums_start512(const Coeffs& co, int64_t m, int64_t g, int64_t G) {
  return co.zinit != nullptr ? _mm512_set1_epi32(co.zinit[m * G + g]) : _mm512_setzero_si512();
}

// The int kernels' group step for a block's 16 rows: folded (folds_zero_point; with Coeffs::zinit,
// p holds P - ze * A already) or p scaled by ascale, then group_step512.
template <int MB>
EMBER_AVX512 inline void int_group_step512(const Coeffs& co, int64_t g, __m512 (&p)[MB], const float* ascale,
                                           const float* asum, int64_t G, __m512 (&acc)[MB]) {
  if (co.zinit != nullptr) {
    const __m512 sv = params512(co, co.scale, g * co.param_stride);
    for (int m = 0; m < MB; ++m) acc[m] = _mm512_fmadd_ps(sv, p[m], acc[m]);
    return;
  }
  if (folds_zero_point(co, ascale)) {
    const __m512 sv = params512(co, co.scale, g * co.param_stride);
    for (int m = 0; m < MB; ++m)
      acc[m] = _mm512_fmadd_ps(sv, _mm512_sub_ps(p[m], _mm512_set1_ps(co.ze * asum[m * G])), acc[m]);
    return;
  }
  scale_by_group512<MB>(p, ascale, g, G);
  group_step512<MB>(co, g, p, asum, G, acc);
}
#endif

}  // namespace cpu
}  // namespace ember
