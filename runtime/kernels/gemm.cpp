// fp32 GEMV / GEMM with run-time ISA selection. See gemm.h.
//
// GEMV (M = 1, B = [N, K] fp32): each thread takes a contiguous range of output rows and
// reads it front to back, one row at a time, so x stays in L1 and the weight is read exactly
// once, as one sequential stream per thread, at memory bandwidth.
// GEMM: B is packed per (32-column panel, KC-deep block) into a contiguous [KC, 32] tile
// (converting fp16/bf16 on the way), then a 6x32 register-blocked micro-kernel sweeps all
// rows of A over it. Threads split the column panels (or the rows when panels are few).
#include "gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <utility>
#include <vector>

#include "ember/runtime/thread_pool.h"
#include "kernel_utils.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 flags _mm512_undefined_* inside its own intrinsic headers as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define EMBER_X86 1
#else
#define EMBER_X86 0
#endif

namespace ember {
namespace kern {

// ---- ISA selection -------------------------------------------------------------------------

namespace {
Isa detect_isa() {
  Isa best = Isa::kPortable;
#if EMBER_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::kAvx2;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("fma"))
    best = Isa::kAvx512;
#endif
  const char* env = std::getenv("EMBER_KERNEL_ISA");
  if (env != nullptr) {
    Isa want = best;
    if (std::strcmp(env, "portable") == 0) want = Isa::kPortable;
    else if (std::strcmp(env, "avx2") == 0) want = Isa::kAvx2;
    else if (std::strcmp(env, "avx512") == 0) want = Isa::kAvx512;
    if (static_cast<int>(want) < static_cast<int>(best)) best = want;
  }
  return best;
}
}  // namespace

Isa cpu_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "portable";
  }
}

namespace {

constexpr int kMR = 6;
constexpr int kMRWide = 12;  // rows per AVX-512 micro-kernel call in the weights-in-place path
constexpr int kNR = 32;
constexpr int64_t kKC = 256;

// ---- portable kernels ----------------------------------------------------------------------

inline float dot_portable(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

void gemv_rows_portable(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1, float* y,
                        const float* bias) {
  for (int64_t n = n0; n < n1; ++n) y[n] = dot_portable(x, W + n * ldw, K) + (bias ? bias[n] : 0.0f);
}

template <int MR>
inline void ukernel_generic(int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc, int nr,
                            bool first, const float* bias) {
  float c[MR][kNR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNR; ++j) c[i][j] = 0;
  for (int64_t k = 0; k < kc; ++k) {
    const float* b = Bp + k * kNR;
    for (int i = 0; i < MR; ++i) {
      const float a = A[i * lda + k];
      for (int j = 0; j < kNR; ++j) c[i][j] += a * b[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* crow = C + i * ldc;
    for (int j = 0; j < nr; ++j) {
      const float base = first ? (bias ? bias[j] : 0.0f) : crow[j];
      crow[j] = base + c[i][j];
    }
  }
}

void ukernel_portable(int mr, int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc, int nr,
                      bool first, const float* bias, const float* /*next_a*/) {
  switch (mr) {
    case 6: ukernel_generic<6>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    case 5: ukernel_generic<5>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    case 4: ukernel_generic<4>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    case 3: ukernel_generic<3>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    case 2: ukernel_generic<2>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    default: ukernel_generic<1>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
  }
}

void axpy_portable(float s, const float* x, float* y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] += s * x[k];
}

#if EMBER_X86
// ---- AVX2 ----------------------------------------------------------------------------------

#define EMBER_AVX2 __attribute__((target("avx2,fma")))

EMBER_AVX2 inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

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

EMBER_AVX2 void ukernel_avx2(int mr, int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc,
                             int nr, bool first, const float* bias, const float* /*next_a*/) {
  // 4 x 32 tile in 16 ymm accumulators; rows beyond mr are computed on row 0 and dropped.
  for (int i0 = 0; i0 < mr; i0 += 3) {
    const int rows = std::min(3, mr - i0);
    __m256 c[3][4];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) c[i][j] = _mm256_setzero_ps();
    const float* a0 = A + i0 * lda;
    const float* a1 = A + (i0 + (rows > 1 ? 1 : 0)) * lda;
    const float* a2 = A + (i0 + (rows > 2 ? 2 : 0)) * lda;
    for (int64_t k = 0; k < kc; ++k) {
      const float* b = Bp + k * kNR;
      const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), b2 = _mm256_loadu_ps(b + 16),
                   b3 = _mm256_loadu_ps(b + 24);
      __m256 av = _mm256_broadcast_ss(a0 + k);
      c[0][0] = _mm256_fmadd_ps(av, b0, c[0][0]);
      c[0][1] = _mm256_fmadd_ps(av, b1, c[0][1]);
      c[0][2] = _mm256_fmadd_ps(av, b2, c[0][2]);
      c[0][3] = _mm256_fmadd_ps(av, b3, c[0][3]);
      av = _mm256_broadcast_ss(a1 + k);
      c[1][0] = _mm256_fmadd_ps(av, b0, c[1][0]);
      c[1][1] = _mm256_fmadd_ps(av, b1, c[1][1]);
      c[1][2] = _mm256_fmadd_ps(av, b2, c[1][2]);
      c[1][3] = _mm256_fmadd_ps(av, b3, c[1][3]);
      av = _mm256_broadcast_ss(a2 + k);
      c[2][0] = _mm256_fmadd_ps(av, b0, c[2][0]);
      c[2][1] = _mm256_fmadd_ps(av, b1, c[2][1]);
      c[2][2] = _mm256_fmadd_ps(av, b2, c[2][2]);
      c[2][3] = _mm256_fmadd_ps(av, b3, c[2][3]);
    }
    for (int i = 0; i < rows; ++i) {
      float tmp[kNR];
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(tmp + 8 * j, c[i][j]);
      float* crow = C + (i0 + i) * ldc;
      for (int j = 0; j < nr; ++j) crow[j] = (first ? (bias ? bias[j] : 0.0f) : crow[j]) + tmp[j];
    }
  }
}

EMBER_AVX2 void axpy_avx2(float s, const float* x, float* y, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(y + k, _mm256_fmadd_ps(sv, _mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k)));
  for (; k < n; ++k) y[k] += s * x[k];
}

// ---- AVX-512 -------------------------------------------------------------------------------

#define EMBER_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

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
                                         float* y) {
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
    _mm512_storeu_ps(y + n, reduce16_avx512(a));
  }
  for (; n < n1; ++n) y[n] = dot_avx512(x, W + n * ldw, K);
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
#endif  // EMBER_X86

using GemvRowsFn = void (*)(const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*, const float*);
// (mr, kc, A, lda, Bp, C, ldc, nr, first, bias, next_a): C[mr, nr] (+)= A[mr, kc] · Bp[kc, 32];
// next_a is the A block of the next call, to prefetch while this one computes (may be null).
using UkernelFn = void (*)(int, int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool, const float*,
                           const float*);

GemvRowsFn gemv_rows_fn() {
#if EMBER_X86
  switch (cpu_isa()) {
    case Isa::kAvx512: return gemv_rows_avx512;
    case Isa::kAvx2: return gemv_rows_avx2;
    default: break;
  }
#endif
  return gemv_rows_portable;
}

UkernelFn ukernel_fn() {
#if EMBER_X86
  switch (cpu_isa()) {
    case Isa::kAvx512: return ukernel_avx512;
    case Isa::kAvx2: return ukernel_avx2;
    default: break;
  }
#endif
  return ukernel_portable;
}

inline float load_float(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Packs B columns [n0, n0+nr) x rows [k0, k0+kc) into Bp[kc][kNR] (zero padded).
void pack_b(const void* B, DType bdt, int64_t ldb, bool b_nk, int64_t n0, int nr, int64_t k0, int64_t kc, float* Bp) {
  if (nr < kNR) std::memset(Bp, 0, sizeof(float) * static_cast<size_t>(kc) * kNR);
  if (b_nk && bdt == DType::kFloat32) {
    // k outer: contiguous writes, nr sequential read streams (cheaper than strided writes).
    const float* src = static_cast<const float*>(B) + n0 * ldb + k0;
    for (int64_t k = 0; k < kc; ++k) {
      float* dst = Bp + k * kNR;
      for (int j = 0; j < nr; ++j) dst[j] = src[j * ldb + k];
    }
  } else if (b_nk) {
    for (int j = 0; j < nr; ++j) {
      const int64_t row = (n0 + j) * ldb + k0;
      for (int64_t k = 0; k < kc; ++k) Bp[k * kNR + j] = load_float(B, bdt, row + k);
    }
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      const int64_t row = (k0 + k) * ldb + n0;
      if (bdt == DType::kFloat32) {
        std::memcpy(Bp + k * kNR, static_cast<const float*>(B) + row, sizeof(float) * static_cast<size_t>(nr));
      } else {
        for (int j = 0; j < nr; ++j) Bp[k * kNR + j] = load_float(B, bdt, row + j);
      }
    }
  }
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
#if EMBER_X86
  switch (cpu_isa()) {
    case Isa::kAvx512: return dot_avx512(a, b, n);
    case Isa::kAvx2: return dot_avx2(a, b, n);
    default: break;
  }
#endif
  return dot_portable(a, b, n);
}

void axpy_f32(float s, const float* x, float* y, int64_t n) {
#if EMBER_X86
  switch (cpu_isa()) {
    case Isa::kAvx512: axpy_avx512(s, x, y, n); return;
    case Isa::kAvx2: axpy_avx2(s, x, y, n); return;
    default: break;
  }
#endif
  axpy_portable(s, x, y, n);
}

void gemv_rows_f32(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1, float* y) {
#if EMBER_X86
  if (cpu_isa() == Isa::kAvx512 && K <= 256) {
    gemv_short_rows_avx512(x, W, ldw, K, n0, n1, y);
    return;
  }
#endif
  gemv_rows_fn()(x, W, ldw, K, n0, n1, y, nullptr);
}

void rms_norm_row_f32(const float* x, const float* w, int64_t n, float eps, float* y) {
  if (n <= 0) return;
  const float rstd = 1.0f / std::sqrt(dot_f32(x, x, n) / static_cast<float>(n) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * rstd * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * rstd;
  }
}

void silu_f32(const float* x, float* y, int64_t n) {
  auto body = [&](int64_t b, int64_t e) {
#if EMBER_X86
    if (cpu_isa() == Isa::kAvx512) {
      silu_avx512(x + b, y + b, e - b);
      return;
    }
#endif
    for (int64_t i = b; i < e; ++i) y[i] = x[i] / (1.0f + exp_approx(-x[i]));
  };
  if (n >= (1 << 15)) parallel_for(n, 1 << 13, body);
  else body(0, n);
}

float scaled_softmax_f32(float* s, int64_t n, float scale, float* max_out) {
#if EMBER_X86
  if (cpu_isa() == Isa::kAvx512) return scaled_softmax_avx512(s, n, scale, max_out);
#endif
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    s[j] *= scale;
    mx = std::max(mx, s[j]);
  }
  float total = 0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = exp_approx(s[j] - mx);
    total += s[j];
  }
  *max_out = mx;
  return total;
}

void weighted_rows_sum_f32(const float* p, const float* V, int64_t ldv, int64_t n, int64_t D, float* out) {
#if EMBER_X86
  if (cpu_isa() == Isa::kAvx512) {
    weighted_rows_sum_avx512(p, V, ldv, n, D, out);
    return;
  }
#endif
  for (int64_t j = 0; j < n; ++j) axpy_f32(p[j], V + j * ldv, out, D);
}

void gemv_nk_f32(int64_t N, int64_t K, const float* x, const float* W, int64_t ldw, float* y, const float* bias) {
  const GemvRowsFn fn = gemv_rows_fn();
  // Rows per task: whole 16-row groups (so no two threads write one cache line of y), and
  // enough bytes (>= ~64 KiB) to be worth a thread.
  constexpr int64_t kGroup = 16;
  const int64_t groups = (N + kGroup - 1) / kGroup;
  const int64_t grain = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, kGroup * K * 4));
  parallel_for(groups, grain, [&](int64_t gb, int64_t ge) {
    fn(x, W, ldw, K, gb * kGroup, std::min(N, ge * kGroup), y, bias);
  });
}

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const void* B, DType bdt, int64_t ldb, bool b_nk,
          float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = bias ? bias[n] : 0.0f;
    return;
  }
  if (b_nk && bdt == DType::kFloat32 && M <= 2) {
    for (int64_t m = 0; m < M; ++m) gemv_nk_f32(N, K, A + m * lda, static_cast<const float*>(B), ldb, C + m * ldc, bias);
    return;
  }
  const UkernelFn uk = ukernel_fn();
  if (b_nk && bdt == DType::kFloat32) {
    // Linear layers (prefill): compute Cᵀ = W · Aᵀ so the weights are read in place, once, with
    // no packing; only the small activation matrix is packed (transposed into 32-wide panels).
    const float* W = static_cast<const float*>(B);
    const int64_t mpanels = (M + kNR - 1) / kNR;
    std::vector<float> Ap(static_cast<size_t>(mpanels * K * kNR));
    parallel_for(mpanels, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        pack_b(A, DType::kFloat32, lda, true, p * kNR, static_cast<int>(std::min<int64_t>(kNR, M - p * kNR)), 0, K,
               Ap.data() + p * K * kNR);
      }
    });
    // The AVX-512 micro-kernel takes up to 12 rows (24 accumulators): fewer loads per FMA.
    const int64_t mr_max = cpu_isa() == Isa::kAvx512 ? kMRWide : kMR;
    const int64_t nblocks = (N + mr_max - 1) / mr_max;
    auto run_t = [&](int64_t b0, int64_t b1) {
      float tile[kMRWide * kNR];
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t n0 = blk * mr_max;
        const int mr = static_cast<int>(std::min<int64_t>(mr_max, N - n0));
        for (int64_t p = 0; p < mpanels; ++p) {
          const int nr = static_cast<int>(std::min<int64_t>(kNR, M - p * kNR));
          // The first panel streams this block of W from memory; meanwhile fetch the next block.
          const float* next = p == 0 && blk + 1 < b1 ? W + (n0 + mr_max) * ldb : nullptr;
          uk(mr, K, W + n0 * ldb, ldb, Ap.data() + p * K * kNR, tile, kNR, nr, true, nullptr, next);
          for (int j = 0; j < nr; ++j) {
            float* crow = C + (p * kNR + j) * ldc + n0;
            for (int i = 0; i < mr; ++i) crow[i] = tile[i * kNR + j] + (bias ? bias[n0 + i] : 0.0f);
          }
        }
      }
    };
    if (M * N * K < (1 << 18)) run_t(0, nblocks);
    else parallel_for(nblocks, 1, run_t);
    return;
  }
  const int64_t panels = (N + kNR - 1) / kNR;
  const int64_t kc_max = std::min(K, kKC);
  // One task = a range of panels x a range of row blocks.
  auto run = [&](int64_t p0, int64_t p1, int64_t m0, int64_t m1) {
    std::vector<float> Bp(static_cast<size_t>(kc_max) * kNR);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n0 = p * kNR;
      const int nr = static_cast<int>(std::min<int64_t>(kNR, N - n0));
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kc = std::min(kKC, K - k0);
        pack_b(B, bdt, ldb, b_nk, n0, nr, k0, kc, Bp.data());
        for (int64_t m = m0; m < m1; m += kMR) {
          const int mr = static_cast<int>(std::min<int64_t>(kMR, m1 - m));
          uk(mr, kc, A + m * lda + k0, lda, Bp.data(), C + m * ldc + n0, ldc, nr, k0 == 0, bias ? bias + n0 : nullptr,
             nullptr);
        }
      }
    }
  };
  const int64_t work = M * N * K;
  const int threads = get_num_threads();
  if (work < (1 << 18) || threads <= 1) {
    run(0, panels, 0, M);
    return;
  }
  if (panels >= 2 * threads || M < 2 * kMR) {
    parallel_for(panels, 1, [&](int64_t b, int64_t e) { run(b, e, 0, M); });
  } else {
    const int64_t mblocks = (M + kMR - 1) / kMR;
    parallel_for(mblocks, 1, [&](int64_t b, int64_t e) { run(0, panels, b * kMR, std::min(M, e * kMR)); });
  }
}

}  // namespace kern
}  // namespace ember
