// AVX-512 (F/BW/VL) block kernels of the CPU delegate (see qkernels.h): a block's 16 rows are
// the 16 lanes of one zmm register. The int kernels here avoid VNNI; qkernels_avx512vnni.cpp
// replaces them where the CPU has it.
#include "qkernels.h"

#include <algorithm>

#include "qkernels_simd.h"

namespace ember {
namespace cpu {
#if EMBER_X86
namespace {

// 4-bit codes x int8 activations: VPMADDUBSW (codes <= 15), summed in int16 over up to 4 words
// (at most 30,720 in magnitude: no saturation), then widened by VPMADDWD with ones.
template <int MB, int WPG>
EMBER_AVX512 void int4_block_fixed(const uint8_t* codes, int64_t G, int64_t wpg_arg, const Coeffs& co,
                                   const int8_t* q, int64_t lda, const float* asum, const float* ascale, float* out) {
  const int64_t wpg = WPG > 0 ? WPG : wpg_arg;
  const __m512i nib = _mm512_set1_epi8(15), ones = _mm512_set1_epi16(1);
  __m512 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m512i d[MB];
    for (int m = 0; m < MB; ++m) d[m] = _mm512_setzero_si512();
    for (int64_t j0 = 0; j0 < wpg; j0 += 4) {
      __m512i p16[MB];
      for (int m = 0; m < MB; ++m) p16[m] = _mm512_setzero_si512();
      const int64_t j1 = std::min<int64_t>(wpg, j0 + 4);
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t w = g * wpg + j;
        const __m512i v = _mm512_loadu_si512(codes + w * 64);
        const __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        for (int m = 0; m < MB; ++m) {
          const int8_t* qm = q + m * lda + w * 8;
          p16[m] = _mm512_add_epi16(p16[m], _mm512_add_epi16(_mm512_maddubs_epi16(lo, _mm512_set1_epi32(load32(qm))),
                                                             _mm512_maddubs_epi16(hi, _mm512_set1_epi32(load32(qm + 4)))));
        }
      }
      for (int m = 0; m < MB; ++m) d[m] = _mm512_add_epi32(d[m], _mm512_madd_epi16(p16[m], ones));
    }
    __m512 p[MB];
    for (int m = 0; m < MB; ++m) p[m] = _mm512_cvtepi32_ps(d[m]);
    scale_by_group512<MB>(p, ascale, g, G);
    group_step512<MB>(co, g, p, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, acc[m]);
}

template <int MB>
EMBER_AVX512 void int4_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const int8_t* q,
                             int64_t lda, const float* asum, const float* ascale, float* out) {
  if (wpg == 4) return int4_block_fixed<MB, 4>(codes, G, wpg, co, q, lda, asum, ascale, out);  // groups of 32
  int4_block_fixed<MB, 0>(codes, G, wpg, co, q, lda, asum, ascale, out);
}

// 8-bit codes (0..255) x int8 activations: both widened to int16 and VPMADDWD; a row's two pair
// sums are folded at the end of the group.
template <int MB>
EMBER_AVX512 void int8_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                             const int8_t* q, int64_t lda, const float* asum, const float* ascale, float* out) {
  // Even and odd int32 lanes of (rows 0-7 pairs, rows 8-15 pairs): each row's two pair sums.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m512i da[MB], db[MB];
    for (int m = 0; m < MB; ++m) da[m] = db[m] = _mm512_setzero_si512();
    for (int64_t j = 0; j < wpg; ++j) {
      const int64_t w = g * wpg + j;
      const __m512i v = _mm512_loadu_si512(codes + w * 64);
      const __m512i u0 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(v));
      const __m512i u1 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(v, 1));
      for (int m = 0; m < MB; ++m) {
        const __m128i a4 = _mm_cvtepi8_epi16(_mm_cvtsi32_si128(load32(q + m * lda + w * 4)));
        const __m512i a = _mm512_broadcastq_epi64(a4);
        da[m] = _mm512_add_epi32(da[m], _mm512_madd_epi16(u0, a));
        db[m] = _mm512_add_epi32(db[m], _mm512_madd_epi16(u1, a));
      }
    }
    __m512 p[MB];
    for (int m = 0; m < MB; ++m) {
      const __m512i rows = _mm512_add_epi32(_mm512_permutex2var_epi32(da[m], even, db[m]),
                                            _mm512_permutex2var_epi32(da[m], odd, db[m]));
      p[m] = _mm512_cvtepi32_ps(rows);
    }
    scale_by_group512<MB>(p, ascale, g, G);
    group_step512<MB>(co, g, p, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, acc[m]);
}

// Codes x fp32 activations: column i of a word is (word >> shift_i) & mask, converted to fp32.
template <int BITS, int MB>
EMBER_AVX512 void float_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co,
                              const float* x, int64_t lda, const float* asum, float* out) {
  constexpr int W = BITS == 4 ? 8 : 4;
  const __m512i mask = _mm512_set1_epi32(BITS == 4 ? 15 : 255);
  __m512 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m512 p0[MB], p1[MB];  // two chains per activation row
    for (int m = 0; m < MB; ++m) p0[m] = p1[m] = _mm512_setzero_ps();
    for (int64_t j = 0; j < wpg; ++j) {
      const int64_t w = g * wpg + j;
      const __m512i v = _mm512_loadu_si512(codes + w * 64);
      for (int i = 0; i < 4; ++i) {
        if (BITS == 4) {
          const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * i), mask));
          const __m512 hi = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * i + 4), mask));
          for (int m = 0; m < MB; ++m) {
            const float* xm = x + m * lda + w * W;
            p0[m] = _mm512_fmadd_ps(lo, _mm512_set1_ps(xm[i]), p0[m]);
            p1[m] = _mm512_fmadd_ps(hi, _mm512_set1_ps(xm[4 + i]), p1[m]);
          }
        } else {
          const __m512 u = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * i), mask));
          for (int m = 0; m < MB; ++m) {
            __m512& p = (i & 1) ? p1[m] : p0[m];
            p = _mm512_fmadd_ps(u, _mm512_set1_ps(x[m * lda + w * W + i]), p);
          }
        }
      }
    }
    __m512 p[MB];
    for (int m = 0; m < MB; ++m) p[m] = _mm512_add_ps(p0[m], p1[m]);
    group_step512<MB>(co, g, p, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, acc[m]);
}

}  // namespace

void add_avx512_block_kernels(BlockKernels& t) {
  t.int_isa = t.float_isa = KernelIsa::kAvx512;
  t.int4[0] = int4_block<1>, t.int4[1] = int4_block<2>, t.int4[2] = int4_block<3>, t.int4[3] = int4_block<4>;
  t.int8[0] = int8_block<1>, t.int8[1] = int8_block<2>, t.int8[2] = int8_block<3>, t.int8[3] = int8_block<4>;
  t.float4[0] = float_block<4, 1>, t.float4[1] = float_block<4, 2>, t.float4[2] = float_block<4, 3>,
  t.float4[3] = float_block<4, 4>;
  t.float8[0] = float_block<8, 1>, t.float8[1] = float_block<8, 2>, t.float8[2] = float_block<8, 3>,
  t.float8[3] = float_block<8, 4>;
}
#else
void add_avx512_block_kernels(BlockKernels&) {}
#endif

}  // namespace cpu
}  // namespace ember
