// AVX2 block kernels of the CPU delegate (see qkernels.h). A block's 16 rows are two halves of
// 8 (bytes [0, 32) and [32, 64) of every 64-byte word chunk), one int32 / fp32 lane per row.
#include "qkernels.h"

#include <algorithm>

#include "qkernels_simd.h"

namespace ember {
namespace cpu {
#if EMBER_X86
namespace {

EMBER_AVX2_F16C inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// 4-bit codes x int8 activations, one half: VPMADDUBSW (unsigned codes <= 15, so a pair sums to
// at most 3,840 in magnitude and a word's low + high nibbles to 7,680), summed in int16 over up to
// 4 words (30,720 < 32,767: no saturation), then widened by VPMADDWD with ones.
// WPG > 0 fixes the words per group at compile time (4: groups of 32, the common case).
template <int MB, int WPG>
EMBER_AVX2_F16C void int4_half(const uint8_t* codes, int64_t G, int64_t wpg_arg, const Coeffs& co,
                          const int8_t* q, int64_t lda, const float* asum, const float* ascale, float* out, int h) {
  const int64_t wpg = WPG > 0 ? WPG : wpg_arg;
  const __m256i nib = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m256i d[MB];
    for (int m = 0; m < MB; ++m) d[m] = _mm256_setzero_si256();
    for (int64_t j0 = 0; j0 < wpg; j0 += 4) {
      __m256i p16[MB];
      for (int m = 0; m < MB; ++m) p16[m] = _mm256_setzero_si256();
      const int64_t j1 = std::min<int64_t>(wpg, j0 + 4);
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t w = g * wpg + j;
        const __m256i v = load256(codes + w * 64 + 32 * h);
        const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
        for (int m = 0; m < MB; ++m) {
          const int8_t* qm = q + m * lda + w * 8;
          p16[m] = _mm256_add_epi16(p16[m], _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(load32(qm))),
                                                             _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load32(qm + 4)))));
        }
      }
      for (int m = 0; m < MB; ++m) d[m] = _mm256_add_epi32(d[m], _mm256_madd_epi16(p16[m], ones));
    }
    __m256 p[MB];
    for (int m = 0; m < MB; ++m) p[m] = _mm256_cvtepi32_ps(d[m]);
    scale_by_group256<MB>(p, ascale, g, G);
    group_step256<MB>(co, g, 8 * h, p, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + m * 16 + 8 * h, acc[m]);
}

// 8-bit codes (0..255) x int8 activations, one half: both widened to int16 and VPMADDWD (a
// byte product pair can reach 65,280, past VPMADDUBSW's int16 range). Each row's two pair sums
// are folded with one horizontal add at the end of the group.
template <int MB>
EMBER_AVX2_F16C void int8_half(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                          const int8_t* q, int64_t lda, const float* asum, const float* ascale, float* out, int h) {
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m256i da[MB], db[MB];  // rows 0-3 and 4-7 of the half, two pair sums per row
    for (int m = 0; m < MB; ++m) da[m] = db[m] = _mm256_setzero_si256();
    for (int64_t j = 0; j < wpg; ++j) {
      const int64_t w = g * wpg + j;
      const __m256i v = load256(codes + w * 64 + 32 * h);
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
    scale_by_group256<MB>(p, ascale, g, G);
    group_step256<MB>(co, g, 8 * h, p, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + m * 16 + 8 * h, acc[m]);
}

// Codes x fp32 activations, one half: the codes of column i of a word are (word >> shift_i) &
// mask, converted to fp32 and multiplied into the broadcast activation.
template <int BITS, int MB>
EMBER_AVX2_F16C void float_half(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                           const float* x, int64_t lda, const float* asum, float* out, int h) {
  constexpr int W = BITS == 4 ? 8 : 4;
  const __m256i mask = _mm256_set1_epi32(BITS == 4 ? 15 : 255);
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m256 p0[MB], p1[MB];  // two chains per activation row
    for (int m = 0; m < MB; ++m) p0[m] = p1[m] = _mm256_setzero_ps();
    for (int64_t j = 0; j < wpg; ++j) {
      const int64_t w = g * wpg + j;
      const __m256i v = load256(codes + w * 64 + 32 * h);
      for (int i = 0; i < 4; ++i) {
        if (BITS == 4) {
          const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * i), mask));
          const __m256 hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * i + 4), mask));
          for (int m = 0; m < MB; ++m) {
            const float* xm = x + m * lda + w * W;
            p0[m] = _mm256_fmadd_ps(lo, _mm256_broadcast_ss(xm + i), p0[m]);
            p1[m] = _mm256_fmadd_ps(hi, _mm256_broadcast_ss(xm + 4 + i), p1[m]);
          }
        } else {
          const __m256 u = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * i), mask));
          for (int m = 0; m < MB; ++m) {
            __m256& p = (i & 1) ? p1[m] : p0[m];
            p = _mm256_fmadd_ps(u, _mm256_broadcast_ss(x + m * lda + w * W + i), p);
          }
        }
      }
    }
    __m256 p[MB];
    for (int m = 0; m < MB; ++m) p[m] = _mm256_add_ps(p0[m], p1[m]);
    group_step256<MB>(co, g, 8 * h, p, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + m * 16 + 8 * h, acc[m]);
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

}  // namespace

void add_avx2_block_kernels(BlockKernels& t) {
  if (!cpu_features().f16c) return;  // the kernels read fp16 scales with F16C
  t.int_isa = t.float_isa = KernelIsa::kAvx2;
  t.int4[0] = int4_block<1>, t.int4[1] = int4_block<2>, t.int4[2] = int4_block<3>, t.int4[3] = int4_block<4>;
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
