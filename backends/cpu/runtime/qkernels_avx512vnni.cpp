// AVX-512 VNNI int kernels of the CPU delegate (see qkernels.h): VPDPBUSD multiplies the
// unsigned codes by the signed int8 activations and adds each row's four products into its
// int32 lane, with no intermediate saturation (4 x 255 x 128 fits easily), for 4- and 8-bit codes.
#include "qkernels.h"

#include "qkernels_simd.h"

namespace ember {
namespace cpu {
#if EMBER_X86
namespace {

// WPG > 0 fixes the words per group at compile time (groups of 32: 4 words at 4 bits, 8 at 8).
// Each row sums into two int32 accumulators (low and high nibbles at 4 bits, even and odd words
// at 8 bits), added at the group's end: two VPDPBUSD chains of half the length, where one chain
// left a single decode row bound by VPDPBUSD's latency. Integer sums: the same result exactly.
template <int BITS, int MB, int WPG>
EMBER_AVX512VNNI void int_block_fixed(const uint8_t* codes, int64_t G, int64_t wpg_arg, const Coeffs& co,
                                      const int8_t* q, int64_t lda, const float* asum, const float* ascale,
                                      float* out) {
  constexpr int W = BITS == 4 ? 8 : 4;
  const int64_t wpg = WPG > 0 ? WPG : wpg_arg;
  const __m512i nib = _mm512_set1_epi8(15);
  __m512 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    co.prefetch_group(g, G, wpg);
    __m512i d0[MB], d1[MB];
    for (int m = 0; m < MB; ++m) d0[m] = group_sums_start512(co, m, g, G), d1[m] = _mm512_setzero_si512();
    const uint8_t* gc = co.group_codes(codes, g);
    if (BITS == 4) {
      for (int64_t j = 0; j < wpg; ++j) {
        co.prefetch_word(g, j, G, wpg);
        const __m512i v = _mm512_loadu_si512(gc + j * 64);
        const __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        for (int m = 0; m < MB; ++m) {
          const int8_t* qm = q + m * lda + (g * wpg + j) * W;
          d0[m] = _mm512_dpbusd_epi32(d0[m], lo, _mm512_set1_epi32(load32(qm)));
          d1[m] = _mm512_dpbusd_epi32(d1[m], hi, _mm512_set1_epi32(load32(qm + 4)));
        }
      }
    } else {
      // Words in pairs, the even one into d0 and the odd one into d1: choosing the chain by the
      // word's parity at run time (WPG = 0: per-channel weights, groups other than 32) kept every
      // accumulator in memory, a store and a load around each VPDPBUSD. SmolLM2 `--qlinear 8da8w
      // --qlinear-group-size 0`, steps alternating in one process on a 2-core Intel Xeon VM:
      // decode -12.4%, 4 sessions batched -11.1%.
      int64_t j = 0;
      for (; j + 1 < wpg; j += 2) {
        co.prefetch_word(g, j, G, wpg);  // kShareWords is even: a j of the pairs starts every share
        const __m512i v0 = _mm512_loadu_si512(gc + j * 64), v1 = _mm512_loadu_si512(gc + j * 64 + 64);
        for (int m = 0; m < MB; ++m) {
          const int8_t* qm = q + m * lda + (g * wpg + j) * W;
          d0[m] = _mm512_dpbusd_epi32(d0[m], v0, _mm512_set1_epi32(load32(qm)));
          d1[m] = _mm512_dpbusd_epi32(d1[m], v1, _mm512_set1_epi32(load32(qm + W)));
        }
      }
      if (j < wpg) {
        co.prefetch_word(g, j, G, wpg);
        const __m512i v0 = _mm512_loadu_si512(gc + j * 64);
        for (int m = 0; m < MB; ++m)
          d0[m] = _mm512_dpbusd_epi32(d0[m], v0, _mm512_set1_epi32(load32(q + m * lda + (g * wpg + j) * W)));
      }
    }
    __m512 p[MB];
    for (int m = 0; m < MB; ++m) p[m] = _mm512_cvtepi32_ps(_mm512_add_epi32(d0[m], d1[m]));
    int_group_step512<MB>(co, g, p, ascale, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, acc[m]);
}

template <int BITS, int MB>
EMBER_AVX512VNNI void int_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const int8_t* q,
                                int64_t lda, const float* asum, const float* ascale, float* out) {
  constexpr int kG32 = BITS == 4 ? 4 : 8;
  if (wpg == kG32) return int_block_fixed<BITS, MB, kG32>(codes, G, wpg, co, q, lda, asum, ascale, out);
  int_block_fixed<BITS, MB, 0>(codes, G, wpg, co, q, lda, asum, ascale, out);
}

// Two consecutive blocks (32 weight rows) against MB >= 2 activation rows at 4 bits: each
// activation word broadcast once serves both blocks, and each (block, row) sums into one int32
// chain (lo then hi nibbles). Integer sums, then int_group_step512 per block: the same results as
// int_block on each block, bit for bit. out: [MB][32], row m's block-0 results then block-1's.
// Against int_block over the two blocks in turn, blocks in L1 (K = 576, groups of 32) on a 2-core
// Intel Xeon VM: -11% per block at 4 rows, -13% at 3, -9% at 2.
// WORD_SHARES: the next pair's lines asked for a share per word (Coeffs::prefetch_share over all
// G * wpg words) instead of per group: on AMD from Zen 5 (add_avx512vnni_block_kernels).
template <int MB, int WPG, bool WORD_SHARES>
EMBER_AVX512VNNI void int4_pair_fixed(const uint8_t* codes0, const uint8_t* codes1, int64_t G, int64_t wpg_arg,
                                      const Coeffs& co0, const Coeffs& co1, const int8_t* q, int64_t lda,
                                      const float* asum, const float* ascale, float* out) {
  static_assert(MB >= 2, "one row runs int_block");
  const int64_t wpg = WPG > 0 ? WPG : wpg_arg;
  const __m512i nib = _mm512_set1_epi8(15);
  __m512 acc0[MB], acc1[MB];
  for (int m = 0; m < MB; ++m) acc0[m] = acc1[m] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    if constexpr (!WORD_SHARES) co0.prefetch_group(g, G, wpg);
    __m512i d0[MB], d1[MB];
    for (int m = 0; m < MB; ++m) d0[m] = d1[m] = group_sums_start512(co0, m, g, G);  // co1.zinit is co0's
    const uint8_t* g0 = co0.group_codes(codes0, g);
    const uint8_t* g1 = co1.group_codes(codes1, g);
    for (int64_t j = 0; j < wpg; ++j) {
      if constexpr (WORD_SHARES) co0.prefetch_share(g * wpg + j, G * wpg);
      else co0.prefetch_word(g, j, G, wpg);
      const __m512i v0 = _mm512_loadu_si512(g0 + j * 64), v1 = _mm512_loadu_si512(g1 + j * 64);
      const __m512i lo0 = _mm512_and_si512(v0, nib), hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), nib);
      const __m512i lo1 = _mm512_and_si512(v1, nib), hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), nib);
      for (int m = 0; m < MB; ++m) {
        const int8_t* qm = q + m * lda + (g * wpg + j) * 8;
        const __m512i a = _mm512_set1_epi32(load32(qm)), b = _mm512_set1_epi32(load32(qm + 4));
        d0[m] = _mm512_dpbusd_epi32(d0[m], lo0, a);
        d1[m] = _mm512_dpbusd_epi32(d1[m], lo1, a);
        d0[m] = _mm512_dpbusd_epi32(d0[m], hi0, b);
        d1[m] = _mm512_dpbusd_epi32(d1[m], hi1, b);
      }
    }
    __m512 p0[MB], p1[MB];
    for (int m = 0; m < MB; ++m) p0[m] = _mm512_cvtepi32_ps(d0[m]), p1[m] = _mm512_cvtepi32_ps(d1[m]);
    int_group_step512<MB>(co0, g, p0, ascale, asum + g, G, acc0);
    int_group_step512<MB>(co1, g, p1, ascale, asum + g, G, acc1);
  }
  for (int m = 0; m < MB; ++m) {
    _mm512_storeu_ps(out + m * 32, acc0[m]);
    _mm512_storeu_ps(out + m * 32 + 16, acc1[m]);
  }
}

template <int MB, bool WORD_SHARES>
EMBER_AVX512VNNI void int4_pair(const uint8_t* codes0, const uint8_t* codes1, int64_t G, int64_t wpg,
                                const Coeffs& co0, const Coeffs& co1, const int8_t* q, int64_t lda, const float* asum,
                                const float* ascale, float* out) {
  if (wpg == 4) {
    return int4_pair_fixed<MB, 4, WORD_SHARES>(codes0, codes1, G, wpg, co0, co1, q, lda, asum, ascale, out);
  }
  int4_pair_fixed<MB, 0, WORD_SHARES>(codes0, codes1, G, wpg, co0, co1, q, lda, asum, ascale, out);
}

// Four blocks against MB rows (IntQuadFn): 4 x MB int32 chains, each word's codes unpacked once for
// all rows and each row's activations broadcast once for all blocks; the fp32 sums stay in an L1
// array between groups (the registers hold the chains, the codes and the broadcasts), each block's
// group step int_group_step512's. With the blocks in L2, 16 rows, the zero point folded, one core of a
// Zen 5 VM: 368-373 GMAC/s against 250 for int_block and 290 for int4_pair (a copy specialized for the
// benchmark's constants: 423 against 291, 89% of VPDPBUSD's peak); streaming the blocks from DRAM,
// 85-118 GMAC/s at 4 rows against 207-234 (the prefetching loses the four streams).
// FOLDED: the zero point folded into the sums (Coeffs::zinit), whose group step is one FMA; else
// int_group_step512's (per-group activation scales, offsets).
template <int MB, bool FOLDED>
EMBER_AVX512VNNI void int4_quad_t(const uint8_t* const* codes, int64_t G, const Coeffs* co, const int8_t* q,
                                  int64_t lda, const float* asum, const float* ascale, float* out) {
  constexpr int kBlocks = 4, kWords = 4;  // groups of 32: 4 words of 8 codes per row
  const __m512i nib = _mm512_set1_epi8(15);
  alignas(64) float acc[kBlocks][MB][16];
  for (int b = 0; b < kBlocks; ++b)
    for (int m = 0; m < MB; ++m) _mm512_store_ps(acc[b][m], _mm512_setzero_ps());
  for (int64_t g = 0; g < G; ++g) {
    __m512i d[kBlocks][MB];
    for (int m = 0; m < MB; ++m) {
      const __m512i z = group_sums_start512(co[0], m, g, G);
      for (int b = 0; b < kBlocks; ++b) d[b][m] = z;
    }
#pragma GCC unroll 4
    for (int j = 0; j < kWords; ++j) {
      __m512i lo[kBlocks], hi[kBlocks];
      for (int b = 0; b < kBlocks; ++b) {
        const __m512i v = _mm512_loadu_si512(co[b].group_codes(codes[b], g) + j * 64);
        lo[b] = _mm512_and_si512(v, nib);
        hi[b] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
      }
      for (int m = 0; m < MB; ++m) {
        const int8_t* qm = q + m * lda + (g * kWords + j) * 8;
        const __m512i a = _mm512_set1_epi32(load32(qm)), a4 = _mm512_set1_epi32(load32(qm + 4));
        for (int b = 0; b < kBlocks; ++b) {
          d[b][m] = _mm512_dpbusd_epi32(d[b][m], lo[b], a);
          d[b][m] = _mm512_dpbusd_epi32(d[b][m], hi[b], a4);
        }
      }
    }
    for (int b = 0; b < kBlocks; ++b) {
      if constexpr (FOLDED) {  // int_group_step512's step with Coeffs::zinit
        const __m512 sv = params512(co[b], co[b].scale, g * co[b].param_stride);
        for (int m = 0; m < MB; ++m)
          _mm512_store_ps(acc[b][m], _mm512_fmadd_ps(sv, _mm512_cvtepi32_ps(d[b][m]), _mm512_load_ps(acc[b][m])));
      } else {
        __m512 p[MB], ab[MB];
        for (int m = 0; m < MB; ++m) p[m] = _mm512_cvtepi32_ps(d[b][m]), ab[m] = _mm512_load_ps(acc[b][m]);
        int_group_step512<MB>(co[b], g, p, ascale, asum + g, G, ab);
        for (int m = 0; m < MB; ++m) _mm512_store_ps(acc[b][m], ab[m]);
      }
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int b = 0; b < kBlocks; ++b) _mm512_storeu_ps(out + m * 64 + b * 16, _mm512_load_ps(acc[b][m]));
}

template <int MB>
EMBER_AVX512VNNI void int4_quad(const uint8_t* const* codes, int64_t G, const Coeffs* co, const int8_t* q, int64_t lda,
                                const float* asum, const float* ascale, float* out) {
  if (co[0].zinit != nullptr) return int4_quad_t<MB, true>(codes, G, co, q, lda, asum, ascale, out);
  int4_quad_t<MB, false>(codes, G, co, q, lda, asum, ascale, out);
}

}  // namespace

void add_avx512vnni_block_kernels(BlockKernels& t) {
  t.int_isa = KernelIsa::kAvx512Vnni;
  t.int4[0] = int_block<4, 1>, t.int4[1] = int_block<4, 2>, t.int4[2] = int_block<4, 3>, t.int4[3] = int_block<4, 4>;
  t.int8[0] = int_block<8, 1>, t.int8[1] = int_block<8, 2>, t.int8[2] = int_block<8, 3>, t.int8[3] = int_block<8, 4>;
  // Over several rows, a pair computes long enough per word for the next pair's lines to be asked for
  // a share per word, not a burst per group. SmolLM2 `8da4w-kv8` on a 2-core Zen 5 VM, linear calls
  // alternating in one process in blocks of 16 steps: 4 sessions batched, the 4-row linears -3.6% to
  // -5.6% (steps -1.1% to -3.7%, five runs); 2 and 3 sessions -0.5% and -0.3%; a 16- and a 64-token
  // prefill's linears -2.7% and -0.2%; with the weights in L2 (nothing to wait for) +1.5%. One row
  // (decode) asked per word lost 18% to 42% there (a share's bounds cost two divisions; without them,
  // no change). Not measured on Intel, whose 128-token prefill ran 6% slower with per-word calls
  // in the single-block kernels (Coeffs::prefetch_group). Since, single blocks won over these pairs
  // up to 16 rows there (BlockKernels::pair_min_rows).
  const CpuFeatures& f = cpu_features();
  if (f.vendor == CpuVendor::kAmd && f.family >= 0x1A) {
    t.int4_quad[0] = int4_quad<1>, t.int4_quad[1] = int4_quad<2>, t.int4_quad[2] = int4_quad<3>;
    t.int4_quad[3] = int4_quad<4>;
    t.int4_pair[1] = int4_pair<2, true>, t.int4_pair[2] = int4_pair<3, true>, t.int4_pair[3] = int4_pair<4, true>;
    t.pair_min_rows = 17;  // single blocks up to 16 rows: see BlockKernels::pair_min_rows
  } else {
    t.int4_pair[1] = int4_pair<2, false>, t.int4_pair[2] = int4_pair<3, false>, t.int4_pair[3] = int4_pair<4, false>;
  }
}
#else
void add_avx512vnni_block_kernels(BlockKernels&) {}
#endif

}  // namespace cpu
}  // namespace ember
