// The canonical quantized ops (export/quant_ops.py holds their reference semantics):
//   ember::quantized_linear(x, qdata, scale, zero_point?, offset?, bias?, bits, group_size, act_quant)
//   ember::quantized_embedding(qdata, scale, zero_point?, offset?, indices, bits, group_size, dtype)
//
// The weight is w[n, k] = (q[n, k] - z[n, g]) * s[n, g] + m[n, g] (g = k / group_size). With u
// the stored code (8 bits: q; 4 bits: the nibble q + 8, so ze_g = z_g + 8, else ze_g = z_g) it is
// w = u * s_g + c_g with c_g = m_g - s_g * ze_g, computed once per weight row.
//
// Weight-only (act_quant = 0): the row kernels rebuild w in registers, one FMA per 8 or 16 codes
// (u * s_g + c_g), and multiply-add it into the activations: the weights are read once, as
// codes, and never written anywhere.
//
// act_quant = 1 (torchao's dynamic int8 asymmetric per-token quantization) with an fp32 input:
// each activation row is quantized once to a_k = qx_k - zp (exact, int16) with scale xs, and
//   y[n] = xs * (sum_g s_g * sum_{k in g} a_k u_k  +  sum_g c_g * A_g),   A_g = sum_{k in g} a_k,
// where the products a_k u_k are summed exactly in int32 per group (madd of int16 pairs) and the
// group sums A_g are computed once per activation row. For fp16/bf16 inputs the reference rounds
// every step of the activation quant-dequant, and the dequantized activation itself, to the
// input's dtype, which no integer identity reproduces: those rows are quant-dequantized exactly as
// the reference does it and take the weight-only kernels.
//
// act_quant = 2 (int8 symmetric per group, llama.cpp's Q8_0 activations): each group is
// quantize-dequantized exactly as the reference does it (q * d, in x's dtype) and the result takes
// the weight-only kernels; the CPU delegate runs the integer form of the same math.
//
// Row kernels come from a table per ISA (portable C++; AVX2, which AVX-512 CPUs use as well),
// chosen once for ember::kernel_isa() (EMBER_KERNEL_ISA=portable forces the portable one). Threads
// split the output rows in blocks of 16; up to kMaxRowsPerPass activation rows share one pass over a
// weight row, and in prefill each block of weight rows stays in L1 across all activation rows.
#include <cfloat>
#include <vector>

#include "act_quant.h"
#include "gemm.h"
#include "kernel_utils.h"

#include "x86_simd.h"

namespace ember {
namespace {

using namespace kern;

constexpr int kMaxRowsPerPass = 4;      // activation rows sharing one pass over a weight row
constexpr int64_t kRowBlock = 16;       // weight rows per block (64-byte output lines per thread)
constexpr int64_t kIntSegment = 65536;  // codes per int32 flush: |sum| < 65536 * 255 * 128 < 2^31

// ---- row kernels ------------------------------------------------------------------------------
//
// One weight row of G groups of gs codes (`q`: 8 bits, int8 codes; 4 bits, two nibbles per byte)
// against MB activation rows (stride ldx / lda):
//   float kernels: out[m] = sum_g sum_{k in g} x[m][k] * (u_k * s[g] + c[g])   (w rebuilt in registers)
//   int kernels:   out[m] = sum_g s[g] * sum_{k in g} a[m][k] * u_k  +  sum_g c[g] * sa[m][g]
// (int16 activations, exact int32 sums per group, sa the exact group sums of a). 4-bit SIMD
// kernels read activations in the paired layout (pair_group).

using FloatRowFn = void (*)(const float* x, int64_t ldx, const uint8_t* q, const float* s, const float* c, int64_t G,
                            int64_t gs, float* out);
using IntRowFn = void (*)(const int16_t* a, int64_t lda, const float* sa, const uint8_t* q, const float* s,
                          const float* c, int64_t G, int64_t gs, float* out);

struct RowKernels {
  KernelIsa isa = KernelIsa::kPortable;  // the level of every entry
  bool paired4 = false;  // 4-bit kernels read the paired activation layout
  FloatRowFn f4[kMaxRowsPerPass] = {};
  FloatRowFn f8[kMaxRowsPerPass] = {};
  IntRowFn i4[kMaxRowsPerPass] = {};
  IntRowFn i8[kMaxRowsPerPass] = {};
};

// The paired layout of one group of activations for the 4-bit SIMD kernels: each full 32-wide
// chunk as its 16 even positions then its 16 odd ones (the low and the high nibbles of 16 code
// bytes), then one 16-wide chunk the same way (8 + 8), then the rest (< 16) in natural order.
template <typename T>
void pair_group(const T* src, int64_t gs, T* dst) {
  int64_t k = 0;
  for (; k + 32 <= gs; k += 32) {
    for (int i = 0; i < 16; ++i) {
      dst[k + i] = src[k + 2 * i];
      dst[k + 16 + i] = src[k + 2 * i + 1];
    }
  }
  if (k + 16 <= gs) {
    for (int i = 0; i < 8; ++i) {
      dst[k + i] = src[k + 2 * i];
      dst[k + 8 + i] = src[k + 2 * i + 1];
    }
    k += 16;
  }
  for (; k < gs; ++k) dst[k] = src[k];
}

// ---- portable -------------------------------------------------------------------------------

template <int MB>
inline void reduce8_out(const float (&acc)[MB][8], const float* extra, float* out) {
  for (int m = 0; m < MB; ++m) {
    const float* v = acc[m];
    out[m] = (((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))) + extra[m];
  }
}

template <int MB>
void f8_portable(const float* x, int64_t ldx, const uint8_t* qb, const float* s, const float* c, int64_t G, int64_t gs,
                 float* out) {
  const int8_t* q = reinterpret_cast<const int8_t*>(qb);
  float acc[MB][8] = {};
  float tail[MB] = {};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * gs;
    const float sg = s[g], cg = c[g];
    int64_t k = 0;
    for (; k + 8 <= gs; k += 8) {
      for (int j = 0; j < 8; ++j) {
        const float w = static_cast<float>(q[k0 + k + j]) * sg + cg;
        for (int m = 0; m < MB; ++m) acc[m][j] += x[m * ldx + k0 + k + j] * w;
      }
    }
    for (; k < gs; ++k) {
      const float w = static_cast<float>(q[k0 + k]) * sg + cg;
      for (int m = 0; m < MB; ++m) tail[m] += x[m * ldx + k0 + k] * w;
    }
  }
  reduce8_out<MB>(acc, tail, out);
}

// Natural activation layout: byte j of a group holds codes 2j (low nibble) and 2j + 1.
template <int MB>
void f4_portable(const float* x, int64_t ldx, const uint8_t* q, const float* s, const float* c, int64_t G, int64_t gs,
                 float* out) {
  float acc[MB][8] = {};
  float tail[MB] = {};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * gs;
    const uint8_t* qg = q + k0 / 2;
    const float sg = s[g], cg = c[g];
    int64_t k = 0;
    for (; k + 8 <= gs; k += 8) {
      for (int j = 0; j < 4; ++j) {
        const uint8_t b = qg[k / 2 + j];
        const float lo = static_cast<float>(b & 15) * sg + cg, hi = static_cast<float>(b >> 4) * sg + cg;
        for (int m = 0; m < MB; ++m) {
          acc[m][2 * j] += x[m * ldx + k0 + k + 2 * j] * lo;
          acc[m][2 * j + 1] += x[m * ldx + k0 + k + 2 * j + 1] * hi;
        }
      }
    }
    for (; k < gs; k += 2) {
      const uint8_t b = qg[k / 2];
      const float lo = static_cast<float>(b & 15) * sg + cg, hi = static_cast<float>(b >> 4) * sg + cg;
      for (int m = 0; m < MB; ++m) tail[m] += x[m * ldx + k0 + k] * lo + x[m * ldx + k0 + k + 1] * hi;
    }
  }
  reduce8_out<MB>(acc, tail, out);
}

template <int MB>
void i8_portable(const int16_t* a, int64_t lda, const float* sa, const uint8_t* qb, const float* s, const float* c,
                 int64_t G, int64_t gs, float* out) {
  const int8_t* q = reinterpret_cast<const int8_t*>(qb);
  float tot[MB] = {}, corr[MB] = {};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * gs;
    int64_t isum[MB] = {};
    for (int64_t s0 = 0; s0 < gs; s0 += kIntSegment) {
      const int64_t s1 = std::min(gs, s0 + kIntSegment);
      int32_t acc[MB][8] = {};
      int64_t k = s0;
      for (; k + 8 <= s1; k += 8) {
        for (int j = 0; j < 8; ++j) {
          const int32_t w = q[k0 + k + j];
          for (int m = 0; m < MB; ++m) acc[m][j] += w * a[m * lda + k0 + k + j];
        }
      }
      for (; k < s1; ++k) {
        for (int m = 0; m < MB; ++m) acc[m][0] += static_cast<int32_t>(q[k0 + k]) * a[m * lda + k0 + k];
      }
      for (int m = 0; m < MB; ++m)
        for (int j = 0; j < 8; ++j) isum[m] += acc[m][j];
    }
    for (int m = 0; m < MB; ++m) {
      tot[m] += s[g] * static_cast<float>(isum[m]);
      corr[m] += c[g] * sa[m * G + g];
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = tot[m] + corr[m];
}

template <int MB>
void i4_portable(const int16_t* a, int64_t lda, const float* sa, const uint8_t* q, const float* s, const float* c,
                 int64_t G, int64_t gs, float* out) {
  float tot[MB] = {}, corr[MB] = {};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * gs;
    const uint8_t* qg = q + k0 / 2;
    int64_t isum[MB] = {};
    for (int64_t s0 = 0; s0 < gs; s0 += kIntSegment) {
      const int64_t s1 = std::min(gs, s0 + kIntSegment);
      int32_t acc[MB][8] = {};
      int64_t k = s0;
      for (; k + 8 <= s1; k += 8) {
        for (int j = 0; j < 4; ++j) {
          const uint8_t b = qg[k / 2 + j];
          const int32_t lo = b & 15, hi = b >> 4;
          for (int m = 0; m < MB; ++m) {
            acc[m][2 * j] += lo * a[m * lda + k0 + k + 2 * j];
            acc[m][2 * j + 1] += hi * a[m * lda + k0 + k + 2 * j + 1];
          }
        }
      }
      for (; k < s1; k += 2) {
        const uint8_t b = qg[k / 2];
        for (int m = 0; m < MB; ++m) acc[m][0] += (b & 15) * a[m * lda + k0 + k] + (b >> 4) * a[m * lda + k0 + k + 1];
      }
      for (int m = 0; m < MB; ++m)
        for (int j = 0; j < 8; ++j) isum[m] += acc[m][j];
    }
    for (int m = 0; m < MB; ++m) {
      tot[m] += s[g] * static_cast<float>(isum[m]);
      corr[m] += c[g] * sa[m * G + g];
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = tot[m] + corr[m];
}

#if EMBER_X86
// ---- AVX2 -----------------------------------------------------------------------------------

EMBER_AVX2 inline __m128i load8_avx2(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }
EMBER_AVX2 inline __m128i load16_avx2(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
EMBER_AVX2 inline __m256i load32_avx2(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// w = u * s + c for 8 int32 codes.
EMBER_AVX2 inline __m256 weights_avx2(__m256i u, __m256 sv, __m256 cv) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), sv, cv);
}

template <int MB, int NA>
EMBER_AVX2 inline void finish_avx2(__m256 (&acc)[MB][NA], const float* tail, float* out) {
  for (int m = 0; m < MB; ++m) {
    __m256 t = acc[m][0];
    for (int j = 1; j < NA; ++j) t = _mm256_add_ps(t, acc[m][j]);
    out[m] = hsum256(t) + tail[m];
  }
}

// Rows whose groups are whole 32-code chunks (group sizes 32, 64, 128, most per-channel rows):
// one flat loop over the chunks (no tails; the group's s and c are re-broadcast per chunk, which
// keeps every accumulator in a register across group boundaries).
template <int MB>
EMBER_AVX2 void f4_avx2_g32(const float* x, int64_t ldx, const uint8_t* q, const float* s, const float* c, int64_t G,
                             int64_t gs, float* out) {
  constexpr int NA = MB == 1 ? 4 : 2;
  const __m256i nib = _mm256_set1_epi32(15);
  __m256 acc[MB][NA];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NA; ++j) acc[m][j] = _mm256_setzero_ps();
  const int64_t per_group = gs / 32, chunks = G * per_group;
  int64_t left = per_group;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const __m256 sv = _mm256_broadcast_ss(s), cv = _mm256_broadcast_ss(c);
    if (--left == 0) {
      left = per_group;
      ++s;
      ++c;
    }
    // Bytes 0-7 and 8-15 as int32 lanes: their low nibbles are activations [0, 8) and [8, 16)
    // of the paired chunk, their high nibbles [16, 24) and [24, 32).
    const __m256i ia = _mm256_cvtepu8_epi32(load8_avx2(q + 16 * ch));
    const __m256i ib = _mm256_cvtepu8_epi32(load8_avx2(q + 16 * ch + 8));
    const float* xc = x + 32 * ch;
    const __m256 w0 = weights_avx2(_mm256_and_si256(ia, nib), sv, cv);
    for (int m = 0; m < MB; ++m) acc[m][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xc + m * ldx), acc[m][0]);
    const __m256 w1 = weights_avx2(_mm256_and_si256(ib, nib), sv, cv);
    for (int m = 0; m < MB; ++m) acc[m][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xc + m * ldx + 8), acc[m][1]);
    const __m256 w2 = weights_avx2(_mm256_srli_epi32(ia, 4), sv, cv);
    for (int m = 0; m < MB; ++m) acc[m][2 % NA] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xc + m * ldx + 16), acc[m][2 % NA]);
    const __m256 w3 = weights_avx2(_mm256_srli_epi32(ib, 4), sv, cv);
    for (int m = 0; m < MB; ++m) acc[m][3 % NA] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xc + m * ldx + 24), acc[m][3 % NA]);
  }
  const float zero[MB] = {};
  finish_avx2<MB, NA>(acc, zero, out);
}

template <int MB>
EMBER_AVX2 void f8_avx2_g32(const float* x, int64_t ldx, const uint8_t* qb, const float* s, const float* c, int64_t G,
                             int64_t gs, float* out) {
  constexpr int NA = MB == 1 ? 4 : 2;
  const int8_t* q = reinterpret_cast<const int8_t*>(qb);
  __m256 acc[MB][NA];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NA; ++j) acc[m][j] = _mm256_setzero_ps();
  const int64_t per_group = gs / 32, chunks = G * per_group;
  int64_t left = per_group;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const __m256 sv = _mm256_broadcast_ss(s), cv = _mm256_broadcast_ss(c);
    if (--left == 0) {
      left = per_group;
      ++s;
      ++c;
    }
    const int8_t* qc = q + 32 * ch;
    const float* xc = x + 32 * ch;
    for (int j = 0; j < 4; ++j) {
      const __m256 w = weights_avx2(_mm256_cvtepi8_epi32(load8_avx2(qc + 8 * j)), sv, cv);
      for (int m = 0; m < MB; ++m)
        acc[m][j % NA] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xc + m * ldx + 8 * j), acc[m][j % NA]);
    }
  }
  const float zero[MB] = {};
  finish_avx2<MB, NA>(acc, zero, out);
}

// Exact int32 sums of one group (gs a multiple of 32, at most kIntSegment) into acc[m].
template <int MB, int BITS>
EMBER_AVX2 inline __attribute__((always_inline)) void int_group_avx2(const uint8_t* qg, const int16_t* ag,
                                                                       int64_t lda, int64_t gs, __m256i (&acc)[MB]) {
  const __m128i nib = _mm_set1_epi8(15);
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_si256();
  for (int64_t k = 0; k < gs; k += 32) {
    __m256i w0, w1;
    if (BITS == 4) {
      const __m128i v = load16_avx2(qg + k / 2);
      w0 = _mm256_cvtepu8_epi16(_mm_and_si128(v, nib));
      w1 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), nib));
    } else {
      w0 = _mm256_cvtepi8_epi16(load16_avx2(qg + k));
      w1 = _mm256_cvtepi8_epi16(load16_avx2(qg + k + 16));
    }
    for (int m = 0; m < MB; ++m) {
      const int16_t* am = ag + m * lda + k;
      const __m256i p0 = _mm256_madd_epi16(w0, load32_avx2(am));
      const __m256i p1 = _mm256_madd_epi16(w1, load32_avx2(am + 16));
      acc[m] = _mm256_add_epi32(acc[m], _mm256_add_epi32(p0, p1));
    }
  }
}

// out[m] = hsum(tot[m]) + sum_g c[g] * sa[m][g].
template <int MB>
EMBER_AVX2 inline void int_finish_avx2(const __m256 (&tot)[MB], const float* sa, const float* c, int64_t G,
                                        float* out) {
  __m256 corr[MB];
  float tail[MB] = {};
  for (int m = 0; m < MB; ++m) corr[m] = tot[m];
  int64_t g = 0;
  for (; g + 8 <= G; g += 8) {
    const __m256 cv = _mm256_loadu_ps(c + g);
    for (int m = 0; m < MB; ++m) corr[m] = _mm256_fmadd_ps(cv, _mm256_loadu_ps(sa + m * G + g), corr[m]);
  }
  for (; g < G; ++g)
    for (int m = 0; m < MB; ++m) tail[m] += c[g] * sa[m * G + g];
  for (int m = 0; m < MB; ++m) out[m] = hsum256(corr[m]) + tail[m];
}

template <int MB, int BITS>
EMBER_AVX2 void int_avx2_g32(const int16_t* a, int64_t lda, const float* sa, const uint8_t* q, const float* s,
                              const float* c, int64_t G, int64_t gs, float* out) {
  const int64_t gbytes = BITS == 4 ? gs / 2 : gs;
  __m256 tot[MB];
  for (int m = 0; m < MB; ++m) tot[m] = _mm256_setzero_ps();
  int64_t g = 0;
  if constexpr (MB == 1) {
    // One row: two groups per step into two chains, so the scale FMAs do not wait on each other.
    __m256 odd = _mm256_setzero_ps();
    for (; g + 2 <= G; g += 2) {
      __m256i i0[1], i1[1];
      int_group_avx2<1, BITS>(q + g * gbytes, a + g * gs, lda, gs, i0);
      int_group_avx2<1, BITS>(q + (g + 1) * gbytes, a + (g + 1) * gs, lda, gs, i1);
      tot[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(s + g), _mm256_cvtepi32_ps(i0[0]), tot[0]);
      odd = _mm256_fmadd_ps(_mm256_broadcast_ss(s + g + 1), _mm256_cvtepi32_ps(i1[0]), odd);
    }
    tot[0] = _mm256_add_ps(tot[0], odd);
  }
  for (; g < G; ++g) {
    __m256i i0[MB];
    int_group_avx2<MB, BITS>(q + g * gbytes, a + g * gs, lda, gs, i0);
    const __m256 sv = _mm256_broadcast_ss(s + g);
    for (int m = 0; m < MB; ++m) tot[m] = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(i0[m]), tot[m]);
  }
  int_finish_avx2<MB>(tot, sa, c, G, out);
}

template <int MB>
EMBER_AVX2 void f8_avx2(const float* x, int64_t ldx, const uint8_t* qb, const float* s, const float* c, int64_t G,
                         int64_t gs, float* out) {
  if ((gs & 31) == 0) return f8_avx2_g32<MB>(x, ldx, qb, s, c, G, gs, out);
  constexpr int NA = MB == 1 ? 4 : 2;  // independent accumulators per activation row
  const int8_t* q = reinterpret_cast<const int8_t*>(qb);
  __m256 acc[MB][NA];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NA; ++j) acc[m][j] = _mm256_setzero_ps();
  float tail[MB] = {};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * gs;
    const int8_t* qg = q + k0;
    const float* xg = x + k0;
    const __m256 sv = _mm256_set1_ps(s[g]), cv = _mm256_set1_ps(c[g]);
    int64_t k = 0;
    for (; k + 8 * NA <= gs; k += 8 * NA) {
      for (int j = 0; j < NA; ++j) {
        const __m256 w = weights_avx2(_mm256_cvtepi8_epi32(load8_avx2(qg + k + 8 * j)), sv, cv);
        for (int m = 0; m < MB; ++m) acc[m][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xg + m * ldx + k + 8 * j), acc[m][j]);
      }
    }
    for (; k + 8 <= gs; k += 8) {
      const __m256 w = weights_avx2(_mm256_cvtepi8_epi32(load8_avx2(qg + k)), sv, cv);
      for (int m = 0; m < MB; ++m) acc[m][0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xg + m * ldx + k), acc[m][0]);
    }
    for (; k < gs; ++k) {
      const float w = static_cast<float>(qg[k]) * s[g] + c[g];
      for (int m = 0; m < MB; ++m) tail[m] += w * xg[m * ldx + k];
    }
  }
  finish_avx2<MB, NA>(acc, tail, out);
}

template <int MB>
EMBER_AVX2 void f4_avx2(const float* x, int64_t ldx, const uint8_t* q, const float* s, const float* c, int64_t G,
                         int64_t gs, float* out) {
  if ((gs & 31) == 0) return f4_avx2_g32<MB>(x, ldx, q, s, c, G, gs, out);
  constexpr int NA = MB == 1 ? 4 : 2;
  const __m256i nib = _mm256_set1_epi32(15);
  __m256 acc[MB][NA];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NA; ++j) acc[m][j] = _mm256_setzero_ps();
  float tail[MB] = {};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * gs;
    const uint8_t* qg = q + k0 / 2;
    const float* xg = x + k0;
    const __m256 sv = _mm256_set1_ps(s[g]), cv = _mm256_set1_ps(c[g]);
    int64_t k = 0;
    for (; k + 32 <= gs; k += 32) {
      // Bytes 0-7 and 8-15 as int32 lanes: their low nibbles are activations [0, 8) and [8, 16)
      // of the paired chunk, their high nibbles [16, 24) and [24, 32).
      const __m256i ia = _mm256_cvtepu8_epi32(load8_avx2(qg + k / 2));
      const __m256i ib = _mm256_cvtepu8_epi32(load8_avx2(qg + k / 2 + 8));
      __m256 w[4];
      w[0] = weights_avx2(_mm256_and_si256(ia, nib), sv, cv);
      w[1] = weights_avx2(_mm256_and_si256(ib, nib), sv, cv);
      w[2] = weights_avx2(_mm256_srli_epi32(ia, 4), sv, cv);
      w[3] = weights_avx2(_mm256_srli_epi32(ib, 4), sv, cv);
      for (int j = 0; j < 4; ++j)
        for (int m = 0; m < MB; ++m)
          acc[m][j % NA] = _mm256_fmadd_ps(w[j], _mm256_loadu_ps(xg + m * ldx + k + 8 * j), acc[m][j % NA]);
    }
    if (k + 16 <= gs) {
      const __m256i ia = _mm256_cvtepu8_epi32(load8_avx2(qg + k / 2));
      const __m256 w0 = weights_avx2(_mm256_and_si256(ia, nib), sv, cv);
      const __m256 w1 = weights_avx2(_mm256_srli_epi32(ia, 4), sv, cv);
      for (int m = 0; m < MB; ++m) {
        acc[m][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xg + m * ldx + k), acc[m][0]);
        acc[m][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xg + m * ldx + k + 8), acc[m][1]);
      }
      k += 16;
    }
    for (; k < gs; k += 2) {
      const uint8_t b = qg[k / 2];
      const float lo = static_cast<float>(b & 15) * s[g] + c[g], hi = static_cast<float>(b >> 4) * s[g] + c[g];
      for (int m = 0; m < MB; ++m) tail[m] += lo * xg[m * ldx + k] + hi * xg[m * ldx + k + 1];
    }
  }
  finish_avx2<MB, NA>(acc, tail, out);
}

template <int MB>
EMBER_AVX2 void i8_avx2(const int16_t* a, int64_t lda, const float* sa, const uint8_t* qb, const float* s,
                         const float* c, int64_t G, int64_t gs, float* out) {
  if ((gs & 31) == 0 && gs <= kIntSegment) return int_avx2_g32<MB, 8>(a, lda, sa, qb, s, c, G, gs, out);
  const int8_t* q = reinterpret_cast<const int8_t*>(qb);
  __m256 tot[MB][1];
  for (int m = 0; m < MB; ++m) tot[m][0] = _mm256_setzero_ps();
  float tail[MB] = {};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * gs;
    const int8_t* qg = q + k0;
    const int16_t* ag = a + k0;
    const __m256 sv = _mm256_set1_ps(s[g]);
    for (int64_t s0 = 0; s0 < gs; s0 += kIntSegment) {
      const int64_t s1 = std::min(gs, s0 + kIntSegment);
      __m256i acc[MB];
      for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_si256();
      int64_t rest[MB] = {};
      int64_t k = s0;
      for (; k + 16 <= s1; k += 16) {
        const __m256i w = _mm256_cvtepi8_epi16(load16_avx2(qg + k));
        for (int m = 0; m < MB; ++m) acc[m] = _mm256_add_epi32(acc[m], _mm256_madd_epi16(w, load32_avx2(ag + m * lda + k)));
      }
      if (k + 8 <= s1) {
        const __m128i w = _mm_cvtepi8_epi16(load8_avx2(qg + k));
        for (int m = 0; m < MB; ++m)
          acc[m] = _mm256_add_epi32(acc[m], _mm256_zextsi128_si256(_mm_madd_epi16(w, load16_avx2(ag + m * lda + k))));
        k += 8;
      }
      for (; k < s1; ++k)
        for (int m = 0; m < MB; ++m) rest[m] += static_cast<int32_t>(qg[k]) * ag[m * lda + k];
      for (int m = 0; m < MB; ++m) {
        tot[m][0] = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(acc[m]), tot[m][0]);
        tail[m] += s[g] * static_cast<float>(rest[m]);
      }
    }
    for (int m = 0; m < MB; ++m) tail[m] += c[g] * sa[m * G + g];
  }
  finish_avx2<MB, 1>(tot, tail, out);
}

template <int MB>
EMBER_AVX2 void i4_avx2(const int16_t* a, int64_t lda, const float* sa, const uint8_t* q, const float* s,
                         const float* c, int64_t G, int64_t gs, float* out) {
  if ((gs & 31) == 0 && gs <= kIntSegment) return int_avx2_g32<MB, 4>(a, lda, sa, q, s, c, G, gs, out);
  const __m128i nib = _mm_set1_epi8(15);
  __m256 tot[MB][1];
  for (int m = 0; m < MB; ++m) tot[m][0] = _mm256_setzero_ps();
  float tail[MB] = {};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * gs;
    const uint8_t* qg = q + k0 / 2;
    const int16_t* ag = a + k0;
    const __m256 sv = _mm256_set1_ps(s[g]);
    for (int64_t s0 = 0; s0 < gs; s0 += kIntSegment) {  // segments start at multiples of 32
      const int64_t s1 = std::min(gs, s0 + kIntSegment);
      __m256i acc[MB];
      for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_si256();
      int64_t rest[MB] = {};
      int64_t k = s0;
      for (; k + 32 <= s1; k += 32) {
        // 16 bytes: the low nibbles are activations [0, 16) of the paired chunk, the high ones [16, 32).
        const __m128i v = load16_avx2(qg + k / 2);
        const __m256i lo = _mm256_cvtepu8_epi16(_mm_and_si128(v, nib));
        const __m256i hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), nib));
        for (int m = 0; m < MB; ++m) {
          const int16_t* am = ag + m * lda + k;
          const __m256i p0 = _mm256_madd_epi16(lo, load32_avx2(am));
          const __m256i p1 = _mm256_madd_epi16(hi, load32_avx2(am + 16));
          acc[m] = _mm256_add_epi32(acc[m], _mm256_add_epi32(p0, p1));
        }
      }
      if (k + 16 <= s1) {
        const __m128i v = load8_avx2(qg + k / 2);
        const __m128i lohi = _mm_unpacklo_epi64(_mm_and_si128(v, nib), _mm_and_si128(_mm_srli_epi16(v, 4), nib));
        const __m256i w = _mm256_cvtepu8_epi16(lohi);
        for (int m = 0; m < MB; ++m) acc[m] = _mm256_add_epi32(acc[m], _mm256_madd_epi16(w, load32_avx2(ag + m * lda + k)));
        k += 16;
      }
      for (; k < s1; k += 2) {
        const uint8_t b = qg[k / 2];
        for (int m = 0; m < MB; ++m) rest[m] += (b & 15) * ag[m * lda + k] + (b >> 4) * ag[m * lda + k + 1];
      }
      for (int m = 0; m < MB; ++m) {
        tot[m][0] = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(acc[m]), tot[m][0]);
        tail[m] += s[g] * static_cast<float>(rest[m]);
      }
    }
    for (int m = 0; m < MB; ++m) tail[m] += c[g] * sa[m * G + g];
  }
  finish_avx2<MB, 1>(tot, tail, out);
}

#endif  // EMBER_X86

// ---- the per-ISA table -------------------------------------------------------------------------

#define EMBER_QROWS(fn) {fn<1>, fn<2>, fn<3>, fn<4>}

RowKernels make_row_kernels(KernelIsa isa) {
  RowKernels k{KernelIsa::kPortable, false, EMBER_QROWS(f4_portable), EMBER_QROWS(f8_portable),
               EMBER_QROWS(i4_portable), EMBER_QROWS(i8_portable)};
#if EMBER_X86
  // AVX-512 CPUs run the AVX2 kernels too (cpu_info() says so): decode is bound by memory
  // bandwidth, and 512-bit versions should come with a machine to test them on.
  if (static_cast<int>(isa) >= static_cast<int>(KernelIsa::kAvx2)) {
    k = RowKernels{KernelIsa::kAvx2, true, EMBER_QROWS(f4_avx2), EMBER_QROWS(f8_avx2), EMBER_QROWS(i4_avx2),
                   EMBER_QROWS(i8_avx2)};
  }
#else
  (void)isa;
#endif
  return k;
}

const RowKernels& row_kernels() {
  static const RowKernels k = make_row_kernels(kernel_isa());
  return k;
}

// Integer path (fp32 rows): a_k = q_k - zp in [-255, 255].
void act_codes_f32(const float* x, int64_t K, const ActParams& p, int16_t* a) {
  if (!p.ok) {
    std::fill(a, a + K, int16_t{0});
    return;
  }
  const int32_t zp = static_cast<int32_t>(p.zp);
  for (int64_t k = 0; k < K; ++k) a[k] = static_cast<int16_t>(static_cast<int32_t>(act_code<RoundF32>(x[k], p)) - zp);
}

// The per-group symmetric quant-dequant (act_quant = 2) of one row in place: q * d rounded to x's
// dtype, NaN for a group holding a NaN or an infinity.
template <typename R>
void group_quant_dequant(float* x, int64_t K, int64_t gs) {
  std::vector<int8_t> q(static_cast<size_t>(gs));
  for (int64_t k0 = 0; k0 < K; k0 += gs) {
    const float d = group_codes(x + k0, gs, q.data());
    for (int64_t k = 0; k < gs; ++k) x[k0 + k] = R::r(static_cast<float>(q[static_cast<size_t>(k)]) * d);
  }
}

// Float path (fp16/bf16 rows): the reference's quant-dequant, (q - zp) * scale in x's dtype.
template <typename R>
void act_quant_dequant(const float* x, int64_t K, float* y) {
  const ActParams p = act_params<R>(x, K);
  if (!p.ok) {
    std::fill(y, y + K, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  for (int64_t k = 0; k < K; ++k) y[k] = R::r(R::r(act_code<R>(x[k], p) - p.zp) * p.scale);
}

// ---- argument checks ------------------------------------------------------------------------

struct QuantWeight {
  const Tensor* qdata = nullptr;
  const Tensor* scale = nullptr;
  const Tensor* zero_point = nullptr;  // may be null
  const Tensor* offset = nullptr;      // may be null
  int bits = 0;
  int64_t N = 0, K = 0, gs = 0, G = 0, row_bytes = 0;
};

// A [N, G] or [1, 1] per-group parameter.
Error check_group_param(const Tensor& t, int64_t N, int64_t G, const char* op, const char* what) {
  char b[96];
  EMBER_CHECK_ARG(t.dim == 2 && ((t.sizes[0] == N && t.sizes[1] == G) || (t.sizes[0] == 1 && t.sizes[1] == 1)),
                  "%s: %s must be [%" PRId64 ", %" PRId64 "] or [1, 1] (N = rows of qdata, G = K / group_size), got %s",
                  op, what, N, G, t.describe(b, sizeof b));
  return Error::ok();
}

// Validates the weight arguments at a[first..first+3] plus bits and group size. K is the row
// length the caller expects (the input's last dim), or -1 to take it from qdata.
Error check_weight(KernelArgs a, int first, int64_t bits_v, int64_t gs_v, int64_t K, const char* op, QuantWeight* w) {
  Tensor *qdata = nullptr, *scale = nullptr, *zp = nullptr, *offset = nullptr;
  EMBER_TRY(arg_tensor(a, first, &qdata, "qdata"));
  EMBER_TRY(arg_tensor(a, first + 1, &scale, "scale"));
  EMBER_TRY(arg_opt_tensor(a, first + 2, &zp, "zero_point"));
  EMBER_TRY(arg_opt_tensor(a, first + 3, &offset, "offset"));
  EMBER_CHECK_ARG(bits_v == 4 || bits_v == 8, "%s: bits must be 4 or 8, got %" PRId64, op, bits_v);
  char b[96];
  EMBER_CHECK_ARG(qdata->dim == 2, "%s: qdata must be 2-D [N, K] (bits 8) or [N, K / 2] (bits 4), got %s", op,
                  qdata->describe(b, sizeof b));
  if (bits_v == 8) {
    EMBER_CHECK_ARG(qdata->dtype == DType::kInt8, "%s: 8-bit qdata must be int8, got %s", op, dtype_name(qdata->dtype));
  } else {
    EMBER_CHECK_ARG(qdata->dtype == DType::kUInt8, "%s: 4-bit qdata must be uint8 (two codes per byte), got %s", op,
                    dtype_name(qdata->dtype));
  }
  const int64_t N = qdata->sizes[0], cols = qdata->sizes[1];
  const int64_t qK = bits_v == 4 ? 2 * cols : cols;
  if (K < 0) K = qK;
  EMBER_CHECK_ARG(qK == K, "%s: qdata %s holds rows of %" PRId64 " codes at %" PRId64 " bits, but the input's last dim is %" PRId64,
                  op, qdata->describe(b, sizeof b), qK, bits_v, K);
  EMBER_CHECK_ARG(gs_v > 0 && K % gs_v == 0, "%s: group_size %" PRId64 " must be positive and divide the row length %" PRId64,
                  op, gs_v, K);
  EMBER_CHECK_ARG(bits_v == 8 || gs_v % 2 == 0, "%s: a 4-bit group_size must be even, got %" PRId64, op, gs_v);
  const int64_t G = K / gs_v;
  EMBER_TRY(check_floating(*scale, "scale"));
  EMBER_CHECK_ARG(scale->dim == 2 && scale->sizes[0] == N && scale->sizes[1] == G,
                  "%s: scale must be [%" PRId64 ", %" PRId64 "] (rows of qdata, K / group_size = %" PRId64 " / %" PRId64 "), got %s",
                  op, N, G, K, gs_v, scale->describe(b, sizeof b));
  if (zp) {
    EMBER_CHECK_ARG(zp->dtype == DType::kInt8 || is_floating(zp->dtype),
                    "%s: zero_point must be int8 or a float dtype, got %s", op, dtype_name(zp->dtype));
    EMBER_TRY(check_group_param(*zp, N, G, op, "zero_point"));
  }
  if (offset) {
    EMBER_TRY(check_floating(*offset, "offset"));
    EMBER_TRY(check_group_param(*offset, N, G, op, "offset"));
  }
  w->qdata = qdata;
  w->scale = scale;
  w->zero_point = zp;
  w->offset = offset;
  w->bits = static_cast<int>(bits_v);
  w->N = N;
  w->K = K;
  w->gs = gs_v;
  w->G = G;
  w->row_bytes = bits_v == 4 ? K / 2 : K;
  return Error::ok();
}

// Row n of a per-group parameter as fp32 (broadcasting a [1, 1] one) into dst[G].
void param_row(const Tensor& t, int64_t n, int64_t G, float* dst) {
  if (t.sizes[0] == 1 && t.sizes[1] == 1) {
    float v = 0;
    convert_elements(t.dtype, t.data, DType::kFloat32, &v, 1);
    std::fill(dst, dst + G, v);
    return;
  }
  convert_elements(t.dtype, static_cast<const uint8_t*>(t.data) + static_cast<size_t>(n * G) * t.element_size(),
                   DType::kFloat32, dst, G);
}

// Per-weight-row coefficients of the linear: s (fp32 scales) and c_g = m_g - s_g * ze_g, so that
// w = u * s_g + c_g for the stored code u (4-bit codes are q + 8: ze = z + 8).
class RowCoeffs {
 public:
  explicit RowCoeffs(const QuantWeight& w) : w_(w), shift_(w.bits == 4 ? 8.0f : 0.0f) {
    const size_t G = static_cast<size_t>(w.G);
    if (w.scale->dtype != DType::kFloat32) sbuf_.resize(kRowBlock * G);
    cbuf_.resize(kRowBlock * G);
    z_rows_ = init_param(w.zero_point, &z_const_, &zbuf_);
    m_rows_ = init_param(w.offset, &m_const_, &mbuf_);
  }

  // Fills slot i (< kRowBlock) with weight row n's coefficients; returns its scales.
  const float* fill(int64_t i, int64_t n) {
    const int64_t G = w_.G;
    const float* s;
    if (w_.scale->dtype == DType::kFloat32) {
      s = w_.scale->ptr<float>() + n * G;
    } else {
      float* sb = sbuf_.data() + i * G;
      convert_elements(w_.scale->dtype, static_cast<const uint8_t*>(w_.scale->data) + static_cast<size_t>(n * G) * w_.scale->element_size(),
                       DType::kFloat32, sb, G);
      s = sb;
    }
    float* c = cbuf_.data() + i * G;
    if (!z_rows_ && !m_rows_) {
      const float ze = z_const_ + shift_, m = m_const_;
      for (int64_t g = 0; g < G; ++g) c[g] = m - s[g] * ze;
      return s;
    }
    if (z_rows_) param_row(*w_.zero_point, n, G, zbuf_.data());
    if (m_rows_) param_row(*w_.offset, n, G, mbuf_.data());
    const float* z = zbuf_.data();
    const float* m = mbuf_.data();
    for (int64_t g = 0; g < G; ++g) c[g] = m[g] - s[g] * (z[g] + shift_);
    return s;
  }
  const float* c(int64_t i) const { return cbuf_.data() + i * w_.G; }

 private:
  // A missing or [1, 1] parameter is one constant (filled into buf once); returns true when it
  // has a value per row.
  bool init_param(const Tensor* t, float* constant, std::vector<float>* buf) const {
    *constant = 0.0f;
    buf->assign(static_cast<size_t>(w_.G), 0.0f);
    if (t == nullptr) return false;
    if (t->sizes[0] == 1 && t->sizes[1] == 1) {
      convert_elements(t->dtype, t->data, DType::kFloat32, constant, 1);
      std::fill(buf->begin(), buf->end(), *constant);
      return false;
    }
    return true;
  }

  const QuantWeight& w_;
  float shift_;
  bool z_rows_ = false, m_rows_ = false;
  float z_const_ = 0.0f, m_const_ = 0.0f;
  std::vector<float> sbuf_, cbuf_;  // [kRowBlock, G]
  std::vector<float> zbuf_, mbuf_;  // [G]
};

// ---- quantized_linear ---------------------------------------------------------------------------

// The activations in the row kernels' form, prepared once per call.
struct Activations {
  bool int_path = false;
  const float* xf = nullptr;    // float path: [M, K] fp32 in the kernels' layout
  const int16_t* xi = nullptr;  // int path: [M, K] a = q - zp in the kernels' layout
  std::vector<float> fbuf;
  std::vector<int16_t> ibuf;
  std::vector<float> sums;      // int path: [M, G] exact group sums of a
  std::vector<float> mult;      // [M]: 1 (float path) or the activation scale (int path)
};

template <typename T>
void lay_out_row(const T* src, int64_t K, int64_t gs, bool paired, T* dst) {
  if (!paired) {
    if (dst != src) std::memcpy(dst, src, sizeof(T) * static_cast<size_t>(K));
    return;
  }
  for (int64_t k0 = 0; k0 < K; k0 += gs) pair_group(src + k0, gs, dst + k0);
}

void prepare_activations(const Tensor& x, int64_t M, const QuantWeight& w, int64_t act_quant, bool paired,
                         Activations* act) {
  const int64_t K = w.K, G = w.G, gs = w.gs;
  const bool f32 = x.dtype == DType::kFloat32;
  const bool per_group = act_quant == 2;
  act->int_path = act_quant == 1 && f32;
  act->mult.assign(static_cast<size_t>(M), 1.0f);
  if (act->int_path) {
    act->ibuf.resize(static_cast<size_t>(M * K));
    act->sums.resize(static_cast<size_t>(M * G));
    act->xi = act->ibuf.data();
  } else if (f32 && !paired && !per_group) {
    act->xf = x.ptr<float>();  // used in place
    return;
  } else {
    act->fbuf.resize(static_cast<size_t>(M * K));
    act->xf = act->fbuf.data();
  }
  parallel_rows(M, 4 * K, [&](int64_t r0, int64_t r1) {
    std::vector<float> tmp;      // an fp32 row in natural order, when it is not x itself
    std::vector<int16_t> tmp16;  // an int16 row in natural order, when it must be paired
    for (int64_t m = r0; m < r1; ++m) {
      if (act->int_path) {
        const float* xr = x.ptr<float>() + m * K;
        const ActParams p = act_params<RoundF32>(xr, K);
        int16_t* dst = act->ibuf.data() + m * K;
        int16_t* a = dst;
        if (paired) {
          tmp16.resize(static_cast<size_t>(K));
          a = tmp16.data();
        }
        act_codes_f32(xr, K, p, a);
        float* sums = act->sums.data() + m * G;
        for (int64_t g = 0; g < G; ++g) {
          int64_t t = 0;
          for (int64_t k = 0; k < gs; ++k) t += a[g * gs + k];
          sums[g] = static_cast<float>(t);
        }
        act->mult[m] = p.ok ? p.scale : std::numeric_limits<float>::quiet_NaN();
        lay_out_row(a, K, gs, paired, dst);
        continue;
      }
      const float* xr;
      float* dst = act->fbuf.data() + m * K;
      if (f32 && per_group) {
        float* conv = dst;
        if (paired) {
          tmp.resize(static_cast<size_t>(K));
          conv = tmp.data();
        }
        std::memcpy(conv, x.ptr<float>() + m * K, sizeof(float) * static_cast<size_t>(K));
        group_quant_dequant<RoundF32>(conv, K, gs);
        xr = conv;
      } else if (f32) {
        xr = x.ptr<float>() + m * K;  // paired (else x is used in place)
      } else {
        float* conv = dst;
        if (paired) {
          tmp.resize(static_cast<size_t>(K));
          conv = tmp.data();
        }
        convert_elements(x.dtype, static_cast<const uint8_t*>(x.data) + static_cast<size_t>(m * K) * x.element_size(),
                         DType::kFloat32, conv, K);
        if (act_quant == 1) {
          if (x.dtype == DType::kBFloat16) act_quant_dequant<RoundBF16>(conv, K, conv);
          else act_quant_dequant<RoundF16>(conv, K, conv);
        } else if (per_group) {
          if (x.dtype == DType::kBFloat16) group_quant_dequant<RoundBF16>(conv, K, gs);
          else group_quant_dequant<RoundF16>(conv, K, gs);
        }
        xr = conv;
      }
      lay_out_row(xr, K, gs, paired, dst);
    }
  });
}

// quantized_linear(x [..., K], qdata, scale, zero_point?, offset?, bias? [N], bits, group_size,
// act_quant) -> [..., N] in x's dtype.
Error quantized_linear_k(KernelContext&, KernelArgs a) {
  static const char* kOp = "quantized_linear";
  Tensor *x = nullptr, *bias = nullptr, *out = nullptr;
  int64_t bits = 0, gs = 0, act_quant = 0;
  EMBER_TRY(arg_tensor(a, 0, &x, "x"));
  EMBER_TRY(arg_opt_tensor(a, 5, &bias, "bias"));
  EMBER_TRY(arg_int(a, 6, &bits, "bits"));
  EMBER_TRY(arg_int(a, 7, &gs, "group_size"));
  EMBER_TRY(arg_int(a, 8, &act_quant, "act_quant"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_floating(*x, "quantized_linear x"));
  EMBER_CHECK_ARG(x->dim >= 1, "%s: x must have rank >= 1, got rank %d", kOp, static_cast<int>(x->dim));
  EMBER_CHECK_ARG(act_quant >= 0 && act_quant <= 2,
                  "%s: act_quant must be 0 (weight-only), 1 (int8 asymmetric per token) or 2 (int8 symmetric per "
                  "group), got %" PRId64, kOp, act_quant);
  QuantWeight w;
  EMBER_TRY(check_weight(a, 1, bits, gs, x->sizes[x->dim - 1], kOp, &w));
  char b1[96];
  if (bias) {
    EMBER_TRY(check_floating(*bias, "quantized_linear bias"));
    EMBER_CHECK_ARG(bias->dim == 1 && bias->sizes[0] == w.N, "%s: bias must be [%" PRId64 "], got %s", kOp, w.N,
                    bias->describe(b1, sizeof b1));
  }
  EMBER_CHECK_ARG(out->dtype == x->dtype, "%s: the output must have x's dtype %s, got %s", kOp, dtype_name(x->dtype),
                  dtype_name(out->dtype));
  int64_t osz[kMaxDims];
  for (int d = 0; d < x->dim - 1; ++d) osz[d] = x->sizes[d];
  osz[x->dim - 1] = w.N;
  EMBER_TRY(out->resize(osz, x->dim));
  const int64_t M = x->prod(0, x->dim - 1), N = w.N, K = w.K, G = w.G;
  if (M == 0 || N == 0) return Error::ok();

  const RowKernels& rk = row_kernels();
  const bool paired = rk.paired4 && w.bits == 4;
  Activations act;
  prepare_activations(*x, M, w, act_quant, paired, &act);
  F32View bv;
  if (bias) EMBER_TRY(as_f32(*bias, &bv, "quantized_linear bias"));
  const float* bp = bias ? bv.p : nullptr;
  std::vector<float> ybuf;
  float* y = out->dtype == DType::kFloat32 ? out->ptr<float>() : nullptr;
  if (y == nullptr) {
    ybuf.resize(static_cast<size_t>(M * N));
    y = ybuf.data();
  }
  const FloatRowFn* ffn = w.bits == 4 ? rk.f4 : rk.f8;
  const IntRowFn* ifn = w.bits == 4 ? rk.i4 : rk.i8;
  const uint8_t* qdata = w.qdata->ptr<uint8_t>();
  const int64_t nblocks = (N + kRowBlock - 1) / kRowBlock;
  // Enough work per task to be worth a thread (~64K multiply-adds or more).
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, kRowBlock * K * M));
  parallel_for(nblocks, grain, [&](int64_t b0, int64_t b1) {
    RowCoeffs coeffs(w);
    const float* srow[kRowBlock];
    float core[kMaxRowsPerPass];
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t n0 = blk * kRowBlock, nr = std::min(kRowBlock, N - n0);
      for (int64_t i = 0; i < nr; ++i) srow[i] = coeffs.fill(i, n0 + i);
      // Activation rows outer: this block of weight rows stays in L1 across all of them.
      for (int64_t m0 = 0; m0 < M; m0 += kMaxRowsPerPass) {
        const int mb = static_cast<int>(std::min<int64_t>(kMaxRowsPerPass, M - m0));
        for (int64_t i = 0; i < nr; ++i) {
          const int64_t n = n0 + i;
          const uint8_t* qrow = qdata + n * w.row_bytes;
          if (act.int_path) {
            ifn[mb - 1](act.xi + m0 * K, K, act.sums.data() + m0 * G, qrow, srow[i], coeffs.c(i), G, w.gs, core);
          } else {
            ffn[mb - 1](act.xf + m0 * K, K, qrow, srow[i], coeffs.c(i), G, w.gs, core);
          }
          const float bn = bp ? bp[n] : 0.0f;
          for (int j = 0; j < mb; ++j) y[(m0 + j) * N + n] = act.mult[m0 + j] * core[j] + bn;
        }
      }
    }
  });
  if (y != out->data) convert_elements(DType::kFloat32, y, out->dtype, out->data, M * N);
  return Error::ok();
}

// ---- quantized_embedding ------------------------------------------------------------------------

// quantized_embedding(qdata, scale, zero_point?, offset?, indices, bits, group_size, dtype)
// -> [*indices.shape, K] in `dtype`.
Error quantized_embedding_k(KernelContext&, KernelArgs a) {
  static const char* kOp = "quantized_embedding";
  Tensor *indices = nullptr, *out = nullptr;
  int64_t bits = 0, gs = 0;
  DType dt = DType::kFloat32;
  bool has_dt = false;
  EMBER_TRY(arg_tensor(a, 4, &indices, "indices"));
  EMBER_TRY(arg_int(a, 5, &bits, "bits"));
  EMBER_TRY(arg_int(a, 6, &gs, "group_size"));
  EMBER_TRY(arg_opt_dtype(a, 7, &dt, &has_dt, "dtype"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(has_dt && is_floating(dt), "%s: dtype must be float32, float16 or bfloat16, got %s", kOp,
                  has_dt ? dtype_name(dt) : "None");
  EMBER_CHECK_ARG(out->dtype == dt, "%s: the output must have dtype %s, got %s", kOp, dtype_name(dt),
                  dtype_name(out->dtype));
  EMBER_TRY(check_index_dtype(*indices, "quantized_embedding indices"));
  EMBER_CHECK_ARG(indices->dim < kMaxDims, "%s: indices of rank %d leave no room for the embedding dim", kOp,
                  static_cast<int>(indices->dim));
  QuantWeight w;
  EMBER_TRY(check_weight(a, 0, bits, gs, -1, kOp, &w));
  const int64_t T = indices->numel(), N = w.N, K = w.K, G = w.G;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t idx = index_at(*indices, t);
    EMBER_CHECK_ARG(idx >= 0 && idx < N, "%s: index %" PRId64 " (at position %" PRId64 ") is out of range for a table of %" PRId64
                    " rows", kOp, idx, t, N);
  }
  int64_t osz[kMaxDims];
  for (int d = 0; d < indices->dim; ++d) osz[d] = indices->sizes[d];
  osz[indices->dim] = K;
  EMBER_TRY(out->resize(osz, indices->dim + 1));
  if (T == 0 || K == 0) return Error::ok();
  const uint8_t* qdata = w.qdata->ptr<uint8_t>();
  parallel_rows(T, K, [&](int64_t t0, int64_t t1) {
    std::vector<float> s(static_cast<size_t>(G)), z(static_cast<size_t>(G), 0.0f), m(static_cast<size_t>(G), 0.0f);
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = index_at(*indices, t);
      param_row(*w.scale, n, G, s.data());
      if (w.zero_point) param_row(*w.zero_point, n, G, z.data());
      if (w.offset) param_row(*w.offset, n, G, m.data());
      const uint8_t* q = qdata + n * w.row_bytes;
      float* y = store_target<float>(out->dtype, out->data, t * K, row.data());  // the output itself when fp32
      // The reference's order: ((q - z) * s) + m, each step in fp32.
      for (int64_t g = 0; g < G; ++g) {
        float* r = y + g * w.gs;
        const int64_t k0 = g * w.gs;
        if (w.bits == 8) {
          const int8_t* qg = reinterpret_cast<const int8_t*>(q) + k0;
          for (int64_t k = 0; k < w.gs; ++k) r[k] = static_cast<float>(qg[k]);
        } else {
          const uint8_t* qg = q + k0 / 2;
          for (int64_t k = 0; k < w.gs; k += 2) {
            r[k] = static_cast<float>((qg[k / 2] & 15) - 8);
            r[k + 1] = static_cast<float>((qg[k / 2] >> 4) - 8);
          }
        }
        const float zg = z[g], sg = s[g], mg = m[g];
        if (w.zero_point)
          for (int64_t k = 0; k < w.gs; ++k) r[k] -= zg;
        for (int64_t k = 0; k < w.gs; ++k) r[k] *= sg;
        if (w.offset)
          for (int64_t k = 0; k < w.gs; ++k) r[k] += mg;
      }
      store_chunk<float>(out->dtype, out->data, t * K, K, y);
    }
  });
  return Error::ok();
}

}  // namespace

void describe_quantized_kernels(std::vector<KernelPath>& out) {
  const char* isa = kernel_isa_name(row_kernels().isa);
  for (const char* name : {"q.linear_weight_only", "q.linear_int8_activations"}) out.push_back({name, isa});
  out.push_back({"q.embedding", kernel_isa_name(KernelIsa::kPortable)});  // a gather: plain C++ (compiler-vectorized)
}

void register_quantized_kernels(KernelRegistry& r) {
  r.add("ember::quantized_linear.default", KernelDef{quantized_linear_k, 9, 1, false});
  r.add("ember::quantized_embedding.default", KernelDef{quantized_embedding_k, 8, 1, false});
}

}  // namespace ember
