// Helpers shared by the SIMD block kernels of the CPU delegate (AVX2, AVX-512, AVX-512 VNNI).
#pragma once

#include <cstdint>

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
// The per-group step of qkernels.h for 16 rows: acc = fma(s, P, acc); acc = fma(c, A, acc).
template <int MB>
EMBER_AVX512 inline void group_step512(const float* s, const float* c, const __m512 (&p)[MB], const float* asum,
                                       int64_t G, __m512 (&acc)[MB]) {
  const __m512 sv = _mm512_loadu_ps(s), cv = _mm512_loadu_ps(c);
  for (int m = 0; m < MB; ++m) {
    acc[m] = _mm512_fmadd_ps(sv, p[m], acc[m]);
    acc[m] = _mm512_fmadd_ps(cv, _mm512_set1_ps(asum[m * G]), acc[m]);
  }
}
#endif

}  // namespace cpu
}  // namespace ember
