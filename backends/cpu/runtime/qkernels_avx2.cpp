// AVX2 block kernels of the CPU delegate (see qkernels.h). A block's 16 rows are two halves of
// 8 (bytes [0, 32) and [32, 64) of every 64-byte word chunk), one int32 / fp32 lane per row.
#include "qkernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "act_quant.h"
#include "qkernels_simd.h"

namespace ember {
namespace cpu {
#if EMBER_X86
namespace {

EMBER_AVX2_F16C inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The kernels keep each row's running sums in the output tile (out[m * 16 + 8 * h], 8 lanes)
// rather than in registers: they are touched once per group, while MB rows of products and
// partial sums live in the inner loop, and with MB more accumulators there GCC spilled inside
// that loop (batched decode, MB = 4, measured on a Zen 3).
template <int MB>
EMBER_AVX2_F16C inline void zero_tile(float* out, int h) {
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + m * 16 + 8 * h, _mm256_setzero_ps());
}

template <int MB>
EMBER_AVX2_F16C inline void group_step_tile(const Coeffs& co, int64_t g, int h, const __m256 (&p)[MB],
                                            const float* asum, int64_t G, float* out) {
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_loadu_ps(out + m * 16 + 8 * h);
  group_step256<MB>(co, g, 8 * h, p, asum, G, acc);
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + m * 16 + 8 * h, acc[m]);
}

// The same for the int kernels (int_group_step256: the zero point folded where it can be).
template <int MB>
EMBER_AVX2_F16C inline void int_group_step_tile(const Coeffs& co, int64_t g, int h, __m256 (&p)[MB],
                                                const float* ascale, const float* asum, int64_t G, float* out) {
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_loadu_ps(out + m * 16 + 8 * h);
  int_group_step256<MB>(co, g, 8 * h, p, ascale, asum, G, acc);
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + m * 16 + 8 * h, acc[m]);
}

// One word of 8 rows (32 bytes at `word`) against the 8 activations at q[m * lda]: p16[m] += the
// rows' products, pairwise in int16.
template <int MB>
EMBER_AVX2_F16C __attribute__((always_inline)) inline void int4_word(const uint8_t* word, const int8_t* q, int64_t lda,
                                                                     __m256i (&p16)[MB]) {
  const __m256i nib = _mm256_set1_epi8(15);
  const __m256i v = load256(word);
  const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
  for (int m = 0; m < MB; ++m) {
    const int8_t* qm = q + m * lda;
    p16[m] = _mm256_add_epi16(p16[m], _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(load32(qm))),
                                                       _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load32(qm + 4)))));
  }
}

// 4-bit codes x int8 activations, one half: VPMADDUBSW (unsigned codes <= 15, so a pair sums to
// at most 3,840 in magnitude and a word's low + high nibbles to 7,680), summed in int16 over up to
// 4 words (30,720 < 32,767: no saturation), then widened by VPMADDWD with ones.
// WPG > 0 fixes the words per group at compile time (4: groups of 32, the common case).
template <int MB, int WPG>
EMBER_AVX2_F16C void int4_half(const uint8_t* codes, int64_t G, int64_t wpg_arg, const Coeffs& co,
                          const int8_t* q, int64_t lda, const float* asum, const float* ascale, float* out, int h) {
  const int64_t wpg = WPG > 0 ? WPG : wpg_arg;
  const __m256i ones = _mm256_set1_epi16(1);
  zero_tile<MB>(out, h);
  for (int64_t g = 0; g < G; ++g) {
    co.prefetch_group(g, G, wpg, h, 2);  // the block runs in two halves: half h takes its shares
    __m256i d[MB];
    for (int m = 0; m < MB; ++m) d[m] = group_sums_start256(co, m, g, G);
    for (int64_t j0 = 0; j0 < wpg; j0 += 4) {
      co.prefetch_word(g, j0, G, wpg, h, 2);
      __m256i p16[MB];
      for (int m = 0; m < MB; ++m) p16[m] = _mm256_setzero_si256();
      const int64_t j1 = std::min<int64_t>(wpg, j0 + 4);
      if (MB == 1) {
        for (int64_t j = j0; j < j1; ++j) int4_word<MB>(co.group_codes(codes, g) + j * 64 + 32 * h, q + (g * wpg + j) * 8, lda, p16);
      } else {
        // Not unrolled: unrolled, GCC hoists every word's products ahead of the sums and, at MB = 4,
        // spills them to the stack (66 stores per group; +12-15% prefill rolled).
#pragma GCC unroll 1
        for (int64_t j = j0; j < j1; ++j) int4_word<MB>(co.group_codes(codes, g) + j * 64 + 32 * h, q + (g * wpg + j) * 8, lda, p16);
      }
      for (int m = 0; m < MB; ++m) d[m] = _mm256_add_epi32(d[m], _mm256_madd_epi16(p16[m], ones));
    }
    __m256 p[MB];
    for (int m = 0; m < MB; ++m) p[m] = _mm256_cvtepi32_ps(d[m]);
    int_group_step_tile<MB>(co, g, h, p, ascale, asum + g, G, out);
  }
}

// 8-bit codes (0..255) x int8 activations, one half: both widened to int16 and VPMADDWD (a
// byte product pair can reach 65,280, past VPMADDUBSW's int16 range). Each row's two pair sums
// are folded with one horizontal add at the end of the group.
template <int MB>
EMBER_AVX2_F16C void int8_half(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                          const int8_t* q, int64_t lda, const float* asum, const float* ascale, float* out, int h) {
  zero_tile<MB>(out, h);
  for (int64_t g = 0; g < G; ++g) {
    co.prefetch_group(g, G, wpg, h, 2);  // the block runs in two halves: half h takes its shares
    __m256i da[MB], db[MB];  // rows 0-3 and 4-7 of the half, two pair sums per row
    for (int m = 0; m < MB; ++m) da[m] = db[m] = _mm256_setzero_si256();
    for (int64_t j = 0; j < wpg; ++j) {
      co.prefetch_word(g, j, G, wpg, h, 2);
      const int64_t w = g * wpg + j;
      const __m256i v = load256(co.group_codes(codes, g) + j * 64 + 32 * h);
      const __m256i u0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v));
      const __m256i u1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1));
      for (int m = 0; m < MB; ++m) {
        const __m128i a4 = _mm_cvtepi8_epi16(_mm_cvtsi32_si128(load32(q + m * lda + w * 4)));
        const __m256i a = _mm256_broadcastq_epi64(a4);
        da[m] = _mm256_add_epi32(da[m], _mm256_madd_epi16(u0, a));
        db[m] = _mm256_add_epi32(db[m], _mm256_madd_epi16(u1, a));
      }
    }
    __m256 p[MB];
    for (int m = 0; m < MB; ++m) {
      // hadd: [r0 r1 r4 r5 | r2 r3 r6 r7] -> rows in order.
      const __m256i rows = _mm256_permute4x64_epi64(_mm256_hadd_epi32(da[m], db[m]), 0xD8);
      p[m] = _mm256_cvtepi32_ps(rows);
    }
    int_group_step_tile<MB>(co, g, h, p, ascale, asum + g, G, out);
  }
}

// Codes x fp32 activations, one half. A word holds, per row (lane), W codes for W consecutive
// activations: code k of a lane is (word >> shift_k) & mask, converted to fp32 and multiplied into
// the broadcast activation. Each row keeps one FMA chain per position k (W chains, each summing
// its position over the group's words in order), added pairwise at the end of the group:
// independent chains, so one row is not bound by the FMA latency. The chains live in registers
// CP at a time per row (CP x MB accumulators <= 8): several rows take several passes over the
// group's words (each pass converts only its positions' codes, so the work is the same), and
// every row count sums in the same order, bit for bit (a batched row equals a solo one).
template <int BITS>
constexpr int code_shift(int k) {
  return BITS == 4 ? (k < 4 ? 8 * k : 8 * (k - 4) + 4) : 8 * k;
}

// Pairwise sum of a[0..n) (n a power of two), the tree every row count uses.
template <int N>
EMBER_AVX2_F16C __attribute__((always_inline)) inline __m256 tree_sum(const __m256* a) {
  if constexpr (N == 1) return a[0];
  else return _mm256_add_ps(tree_sum<N / 2>(a), tree_sum<N / 2>(a + N / 2));
}

// One pass of float_half over group g's words (gcodes: its first word; w0: that word's index, for
// the activations): positions [K0, K0 + CP) of every word, MB rows; sum[m] receives the pairwise
// sum of the row's CP chains. The first pass (K0 = 0) asks for the next block's shares past the
// group's first (Coeffs::prefetch_word).
template <int BITS, int MB, int K0, int CP>
EMBER_AVX2_F16C __attribute__((always_inline)) inline void float_pass(const Coeffs& co, int64_t g, int64_t G,
                                                                      const uint8_t* gcodes, int64_t w0, int64_t wpg,
                                                                      const float* x, int64_t lda, int h,
                                                                      __m256i mask, __m256 (&sum)[MB]) {
  constexpr int W = BITS == 4 ? 8 : 4;
  __m256 a[MB][CP];
  for (int m = 0; m < MB; ++m)
    for (int c = 0; c < CP; ++c) a[m][c] = _mm256_setzero_ps();
  for (int64_t w = w0; w < w0 + wpg; ++w) {
    if constexpr (K0 == 0) co.prefetch_word(g, w - w0, G, wpg, h, 2);
    const __m256i v = load256(gcodes + (w - w0) * 64 + 32 * h);
    for (int c = 0; c < CP; ++c) {
      const __m256 u = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, code_shift<BITS>(K0 + c)), mask));
      for (int m = 0; m < MB; ++m)
        a[m][c] = _mm256_fmadd_ps(u, _mm256_broadcast_ss(x + m * lda + w * W + K0 + c), a[m][c]);
    }
  }
  for (int m = 0; m < MB; ++m) sum[m] = tree_sum<CP>(a[m]);
}

template <int BITS, int MB>
EMBER_AVX2_F16C void float_half(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                           const float* x, int64_t lda, const float* asum, float* out, int h) {
  constexpr int W = BITS == 4 ? 8 : 4;
  constexpr int CP = std::min(W, std::max(1, 8 / MB));
  constexpr int PASSES = W / CP;
  static_assert(W % CP == 0 && (CP & (CP - 1)) == 0, "passes cover power-of-two runs of positions");
  const __m256i mask = _mm256_set1_epi32(BITS == 4 ? 15 : 255);
  zero_tile<MB>(out, h);
  for (int64_t g = 0; g < G; ++g) {
    co.prefetch_group(g, G, wpg, h, 2);  // the block runs in two halves: half h takes its shares
    __m256 part[PASSES][MB];
    const uint8_t* gc = co.group_codes(codes, g);
    float_pass<BITS, MB, 0, CP>(co, g, G, gc, g * wpg, wpg, x, lda, h, mask, part[0]);
    if constexpr (PASSES > 1) float_pass<BITS, MB, CP, CP>(co, g, G, gc, g * wpg, wpg, x, lda, h, mask, part[1]);
    if constexpr (PASSES > 2) {
      float_pass<BITS, MB, 2 * CP, CP>(co, g, G, gc, g * wpg, wpg, x, lda, h, mask, part[2]);
      float_pass<BITS, MB, 3 * CP, CP>(co, g, G, gc, g * wpg, wpg, x, lda, h, mask, part[3]);
    }
    static_assert(PASSES == 1 || PASSES == 2 || PASSES == 4, "1, 2 or 4 passes");
    __m256 p[MB];
    for (int m = 0; m < MB; ++m) {
      __m256 parts[PASSES];
      for (int i = 0; i < PASSES; ++i) parts[i] = part[i][m];
      p[m] = tree_sum<PASSES>(parts);
    }
    group_step_tile<MB>(co, g, h, p, asum + g, G, out);
  }
}

// One word of int4_expanded at MB = 4, in assembly: 8 int16 sums, the 2 code registers of a
// nibble pass, the activation vector and a product fill 13 of the 16 ymm registers, and GCC, given
// the intrinsics, folds each activation load into both multiplies (Zen 3 loads 2 vectors per cycle,
// the bound here) and reassociates the sums so that every product of the low pass is live at once:
// 4 sums spilled, a load and a store each per word.
#define EMBER_I4X_ROW(h0, h1, off)                \
  "vmovdqu " off "(%[a]), %[av]\n\t"              \
  "vpmaddubsw %[av], %[c0], %[t]\n\t"             \
  "vpaddw %[t], %[" h0 "], %[" h0 "]\n\t"         \
  "vpmaddubsw %[av], %[c1], %[t]\n\t"             \
  "vpaddw %[t], %[" h1 "], %[" h1 "]\n\t"
EMBER_AVX2_F16C __attribute__((always_inline)) inline void int4_expanded_word4(const uint8_t* word, const uint8_t* a,
                                                                               __m256i nib, __m256i (&p)[2][4]) {
  __m256i c0, c1, av, t;
  asm("vpand (%[w]), %[nib], %[c0]\n\t"
      "vpand 32(%[w]), %[nib], %[c1]\n\t"
      EMBER_I4X_ROW("p00", "p10", "0") EMBER_I4X_ROW("p01", "p11", "64")
      EMBER_I4X_ROW("p02", "p12", "128") EMBER_I4X_ROW("p03", "p13", "192")
      "vmovdqu (%[w]), %[c0]\n\t"
      "vpsrlw $4, %[c0], %[c0]\n\t"
      "vpand %[nib], %[c0], %[c0]\n\t"
      "vmovdqu 32(%[w]), %[c1]\n\t"
      "vpsrlw $4, %[c1], %[c1]\n\t"
      "vpand %[nib], %[c1], %[c1]\n\t"
      EMBER_I4X_ROW("p00", "p10", "32") EMBER_I4X_ROW("p01", "p11", "96")
      EMBER_I4X_ROW("p02", "p12", "160") EMBER_I4X_ROW("p03", "p13", "224")
      : [p00] "+x"(p[0][0]), [p01] "+x"(p[0][1]), [p02] "+x"(p[0][2]), [p03] "+x"(p[0][3]),
        [p10] "+x"(p[1][0]), [p11] "+x"(p[1][1]), [p12] "+x"(p[1][2]), [p13] "+x"(p[1][3]),
        [c0] "=&x"(c0), [c1] "=&x"(c1), [av] "=&x"(av), [t] "=&x"(t)
      : [w] "r"(word), [a] "r"(a), [nib] "x"(nib), "m"(*reinterpret_cast<const uint8_t(*)[64]>(word)),
        "m"(*reinterpret_cast<const uint8_t(*)[256]>(a)));
}
#undef EMBER_I4X_ROW

// int4_half for MB = 1..4 rows over pre-broadcast activations (qkernels.h, ExpandInt4Fn), both
// 8-row halves at once: each activation vector is a plain load (a memory operand) serving 16
// rows, where a broadcast per row and half costs a vector-pipe uop on a Zen 3, as many as the
// multiplies. Otherwise int4_half's steps in its order: the same sums, the same results.
template <int MB, int WPG>
EMBER_AVX2_F16C void int4_expanded(const uint8_t* codes, int64_t G, int64_t wpg_arg, const Coeffs& co,
                                   const int8_t* qb, const float* asum, const float* ascale, float* out) {
  const int64_t wpg = WPG > 0 ? WPG : wpg_arg;
  const __m256i ones = _mm256_set1_epi16(1), nib = _mm256_set1_epi8(15);
  zero_tile<MB>(out, 0);
  zero_tile<MB>(out, 1);
  for (int64_t g = 0; g < G; ++g) {
    co.prefetch_group(g, G, wpg);
    __m256i d[2][MB];
    for (int m = 0; m < MB; ++m) d[0][m] = d[1][m] = group_sums_start256(co, m, g, G);
    for (int64_t j0 = 0; j0 < wpg; j0 += 4) {
      co.prefetch_word(g, j0, G, wpg);
      __m256i p16[2][MB];
      for (int m = 0; m < MB; ++m) p16[0][m] = p16[1][m] = _mm256_setzero_si256();
      const int64_t j1 = std::min<int64_t>(wpg, j0 + 4);
#pragma GCC unroll 1
      for (int64_t j = j0; j < j1; ++j) {
        const uint8_t* word = co.group_codes(codes, g) + j * 64;
        const uint8_t* a = reinterpret_cast<const uint8_t*>(qb) + (g * wpg + j) * MB * 64;
        if constexpr (MB == 4) {
          int4_expanded_word4(word, a, nib, p16);
        } else {
          for (int nb = 0; nb < 2; ++nb) {  // low nibbles (activations 0-3), then high ones (4-7)
            const __m256i v0 = load256(word), v1 = load256(word + 32);
            const __m256i c0 = _mm256_and_si256(nb ? _mm256_srli_epi16(v0, 4) : v0, nib);
            const __m256i c1 = _mm256_and_si256(nb ? _mm256_srli_epi16(v1, 4) : v1, nib);
            for (int m = 0; m < MB; ++m) {
              const __m256i av = load256(a + m * 64 + 32 * nb);
              p16[0][m] = _mm256_add_epi16(p16[0][m], _mm256_maddubs_epi16(c0, av));
              p16[1][m] = _mm256_add_epi16(p16[1][m], _mm256_maddubs_epi16(c1, av));
            }
          }
        }
      }
      for (int h = 0; h < 2; ++h)
        for (int m = 0; m < MB; ++m) d[h][m] = _mm256_add_epi32(d[h][m], _mm256_madd_epi16(p16[h][m], ones));
    }
    for (int h = 0; h < 2; ++h) {
      __m256 p[MB];
      for (int m = 0; m < MB; ++m) p[m] = _mm256_cvtepi32_ps(d[h][m]);
      int_group_step_tile<MB>(co, g, h, p, ascale, asum + g, G, out);
    }
  }
}

template <int MB>
EMBER_AVX2_F16C void int4_expanded_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                                         const int8_t* qb, const float* asum, const float* ascale, float* out) {
  if (wpg == 4) int4_expanded<MB, 4>(codes, G, wpg, co, qb, asum, ascale, out);
  else int4_expanded<MB, 0>(codes, G, wpg, co, qb, asum, ascale, out);
}

EMBER_AVX2_F16C void expand_int4_avx2(const int8_t* q, int64_t lda, int MB, int64_t K, int8_t* qb) {
  for (int64_t w = 0; w < K / 8; ++w) {
    for (int m = 0; m < MB; ++m) {
      const int8_t* src = q + m * lda + w * 8;
      int8_t* dst = qb + (w * MB + m) * 64;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_set1_epi32(load32(src)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), _mm256_set1_epi32(load32(src + 4)));
    }
  }
}

template <int MB>
EMBER_AVX2_F16C void int4_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                           const int8_t* q, int64_t lda, const float* asum, const float* ascale, float* out) {
  if (wpg == 4) {
    int4_half<MB, 4>(codes, G, wpg, co, q, lda, asum, ascale, out, 0);
    int4_half<MB, 4>(codes, G, wpg, co, q, lda, asum, ascale, out, 1);
  } else {
    int4_half<MB, 0>(codes, G, wpg, co, q, lda, asum, ascale, out, 0);
    int4_half<MB, 0>(codes, G, wpg, co, q, lda, asum, ascale, out, 1);
  }
}

template <int MB>
EMBER_AVX2_F16C void int8_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                           const int8_t* q, int64_t lda, const float* asum, const float* ascale, float* out) {
  int8_half<MB>(codes, G, wpg, co, q, lda, asum, ascale, out, 0);
  int8_half<MB>(codes, G, wpg, co, q, lda, asum, ascale, out, 1);
}

template <int BITS, int MB>
EMBER_AVX2_F16C void float_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                            const float* x, int64_t lda, const float* asum, float* out) {
  float_half<BITS, MB>(codes, G, wpg, co, x, lda, asum, out, 0);
  float_half<BITS, MB>(codes, G, wpg, co, x, lda, asum, out, 1);
}

// Dequantizes a block for the GEMM path (qkernels.h): 8 rows per vector, the lanes of a word.
template <int BITS>
EMBER_AVX2_F16C void dequant_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, float* out,
                                   int64_t ldo) {
  constexpr int W = BITS == 4 ? 8 : 4;
  const __m256i mask = _mm256_set1_epi32(BITS == 4 ? 15 : 255);
  for (int64_t g = 0; g < G; ++g) {
    for (int h = 0; h < 2; ++h) {
      __m256 sv, cv;
      coeffs256(co, g, 8 * h, &sv, &cv);
      for (int64_t j = 0; j < wpg; ++j) {
        const int64_t w = g * wpg + j;
        const __m256i v = load256(co.group_codes(codes, g) + j * 64 + 32 * h);
        float* o = out + w * W * ldo + 8 * h;
        for (int b = 0; b < 4; ++b) {
          const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * b), mask));
          _mm256_storeu_ps(o + b * ldo, _mm256_fmadd_ps(lo, sv, cv));
          if (BITS == 4) {
            const __m256 hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * b + 4), mask));
            _mm256_storeu_ps(o + (4 + b) * ldo, _mm256_fmadd_ps(hi, sv, cv));
          }
        }
      }
    }
  }
}

// ---- activation quantizers (qkernels.h): act_quant.h's codes, 8 lanes at a time, the tail of a
// group in scalar code. Every step is the scalar one, so the codes are identical.

EMBER_AVX2_F16C inline float hmax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

EMBER_AVX2_F16C inline float hmin256(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(m, _mm_movehdup_ps(m)));
}

EMBER_AVX2_F16C inline int32_t hsum256(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

// 8 integral floats in [-128, 127] -> 8 int8 codes at q; returns them as int32 lanes.
EMBER_AVX2_F16C inline __m256i store_codes8(__m256 r, int8_t* q) {
  const __m256i i = _mm256_cvtps_epi32(r);
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));  // exact: in range
  _mm_storel_epi64(reinterpret_cast<__m128i*>(q), _mm_packs_epi16(w, w));
  return i;
}

EMBER_AVX2_F16C void quantize_groups_avx2(const float* x, int64_t K, int64_t gs, int8_t* q, float* d, float* asum) {
  const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(FLT_MAX);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const int64_t vec = gs / 8 * 8;
  for (int64_t g = 0; g < K / gs; ++g) {
    const float* xg = x + g * gs;
    int8_t* qg = q + g * gs;
    __m256 amax = _mm256_setzero_ps();
    int bad = 0;
    for (int64_t k = 0; k < vec; k += 8) {
      const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(xg + k));
      bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // NaN or infinity
      amax = _mm256_max_ps(amax, a);
    }
    float am = hmax256(amax);
    for (int64_t k = vec; k < gs; ++k) {
      const float a = std::fabs(xg[k]);
      bad |= !(a <= FLT_MAX);
      am = std::max(am, a);
    }
    if (bad) {
      std::fill(qg, qg + gs, int8_t{0});
      d[g] = asum[g] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float dg = am / 127.0f;
    int32_t total = 0;
    if (dg > 0.0f) {
      const __m256 dv = _mm256_set1_ps(dg);
      __m256i sum = _mm256_setzero_si256();
      for (int64_t k = 0; k < vec; k += 8) {
        __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(xg + k), dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
        sum = _mm256_add_epi32(sum, store_codes8(r, qg + k));
      }
      total = hsum256(sum);
      for (int64_t k = vec; k < gs; ++k) {
        qg[k] = static_cast<int8_t>(std::min(std::max(round_half_even(xg[k] / dg), -127.0f), 127.0f));
        total += qg[k];
      }
    } else {
      std::fill(qg, qg + gs, int8_t{0});
    }
    d[g] = dg;
    asum[g] = dg * static_cast<float>(total);
  }
}

EMBER_AVX2_F16C void quantize_token_avx2(const float* x, int64_t K, int64_t gs, int8_t* q, float* asum, float* scale,
                                         float* zp) {
  const int64_t vec = K / 8 * 8;
  __m256 vlo = _mm256_setzero_ps(), vhi = _mm256_setzero_ps();
  int nan = 0;
  for (int64_t k = 0; k < vec; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k);
    nan |= _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vlo = _mm256_min_ps(vlo, v);
    vhi = _mm256_max_ps(vhi, v);
  }
  float lo = hmin256(vlo), hi = hmax256(vhi);
  for (int64_t k = vec; k < K; ++k) {
    nan |= x[k] != x[k];
    lo = std::min(lo, x[k]);
    hi = std::max(hi, x[k]);
  }
  const ActParams p = act_params_from_range<RoundF32>(lo, hi, nan != 0);
  *scale = p.ok ? p.scale : std::numeric_limits<float>::quiet_NaN();  // the reference gives NaN rows
  *zp = p.ok ? p.zp : 0.0f;
  if (!p.ok) {
    std::fill(q, q + K, int8_t{0});
    std::fill(asum, asum + K / gs, 0.0f);
    return;
  }
  const __m256 inv = _mm256_set1_ps(p.inv), zpv = _mm256_set1_ps(p.zp);
  const __m256 tlo = _mm256_set1_ps(-1024.0f), thi = _mm256_set1_ps(1024.0f);
  const __m256 qlo = _mm256_set1_ps(-128.0f), qhi = _mm256_set1_ps(127.0f);
  const int64_t gvec = gs / 8 * 8;
  for (int64_t g = 0; g < K / gs; ++g) {
    const float* xg = x + g * gs;
    int8_t* qg = q + g * gs;
    __m256i sum = _mm256_setzero_si256();
    for (int64_t k = 0; k < gvec; k += 8) {
      __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xg + k), inv);
      t = _mm256_min_ps(_mm256_max_ps(t, tlo), thi);
      __m256 r = _mm256_add_ps(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zpv);
      r = _mm256_min_ps(_mm256_max_ps(r, qlo), qhi);
      sum = _mm256_add_epi32(sum, store_codes8(r, qg + k));
    }
    int32_t total = hsum256(sum);
    for (int64_t k = gvec; k < gs; ++k) {
      qg[k] = static_cast<int8_t>(act_code<RoundF32>(xg[k], p));
      total += qg[k];
    }
    asum[g] = static_cast<float>(total);
  }
}

}  // namespace

void add_avx2_block_kernels(BlockKernels& t) {
  if (!cpu_features().f16c) return;  // the kernels read fp16 scales with F16C
  t.int_isa = t.float_isa = t.quant_isa = t.dequant_isa = KernelIsa::kAvx2;
  t.dequant4 = dequant_block<4>;
  t.dequant8 = dequant_block<8>;
  t.quantize_token = quantize_token_avx2;
  t.quantize_groups = quantize_groups_avx2;
  t.int4[0] = int4_block<1>, t.int4[1] = int4_block<2>, t.int4[2] = int4_block<3>, t.int4[3] = int4_block<4>;
  t.int4_zinit = true;  // int4 and int4_expanded
  t.expand_int4 = expand_int4_avx2;
  t.prefetch_next_block = false;  // measured on a Zen 3: see BlockKernels
  t.int4_expanded[0] = int4_expanded_block<1>;
  t.int4_expanded[1] = int4_expanded_block<2>, t.int4_expanded[2] = int4_expanded_block<3>;
  t.int4_expanded[3] = int4_expanded_block<4>;
  t.int8[0] = int8_block<1>, t.int8[1] = int8_block<2>, t.int8[2] = int8_block<3>, t.int8[3] = int8_block<4>;
  t.float4[0] = float_block<4, 1>, t.float4[1] = float_block<4, 2>, t.float4[2] = float_block<4, 3>,
  t.float4[3] = float_block<4, 4>;
  t.float8[0] = float_block<8, 1>, t.float8[1] = float_block<8, 2>, t.float8[2] = float_block<8, 3>,
  t.float8[3] = float_block<8, 4>;
}
#else
void add_avx2_block_kernels(BlockKernels&) {}
#endif

}  // namespace cpu
}  // namespace ember
