// <immintrin.h> for the per-ISA kernel files, EMBER_X86 (1 on x86 builds, else 0), the target
// attributes of each level and the small helpers more than one kernel file uses.
//
// The files compile for the baseline ISA: every function that uses wider instructions carries
// __attribute__((target("..."))) and is only reached through a table built for the CPU's level
// (ember/runtime/cpu.h).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 flags _mm512_undefined_* inside its own intrinsic headers as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define EMBER_X86 1

// Function attributes of the x86 levels (ember::KernelIsa::kAvx2 / kAvx512 / kAvx512Vnni).
#define EMBER_AVX2 __attribute__((target("avx2,fma")))
#define EMBER_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define EMBER_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
#define EMBER_AVX512VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,fma")))

namespace ember {
// The sum of a ymm register's 8 floats.
EMBER_AVX2 inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}
}  // namespace ember
#else
#define EMBER_X86 0
#endif
