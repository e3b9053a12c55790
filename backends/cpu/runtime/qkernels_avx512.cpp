// AVX-512 (F/BW/VL) block kernels of the CPU delegate (see qkernels.h): a block's 16 rows are
// the 16 lanes of one zmm register. The int kernels here avoid VNNI; qkernels_avx512vnni.cpp
// replaces them where the CPU has it.
#include "qkernels.h"

#include <algorithm>
#include <cfloat>
#include <limits>

#include "act_quant.h"
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
    co.prefetch_group(g, G, wpg);
    __m512i d[MB];
    for (int m = 0; m < MB; ++m) d[m] = group_sums_start512(co, m, g, G);
    for (int64_t j0 = 0; j0 < wpg; j0 += 4) {
      __m512i p16[MB];
      for (int m = 0; m < MB; ++m) p16[m] = _mm512_setzero_si512();
      const int64_t j1 = std::min<int64_t>(wpg, j0 + 4);
      for (int64_t j = j0; j < j1; ++j) {
        co.prefetch_word(g, j, G, wpg);
        const int64_t w = g * wpg + j;
        const __m512i v = _mm512_loadu_si512(co.group_codes(codes, g) + j * 64);
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
    int_group_step512<MB>(co, g, p, ascale, asum + g, G, acc);
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
    co.prefetch_group(g, G, wpg);
    __m512i da[MB], db[MB];
    for (int m = 0; m < MB; ++m) da[m] = db[m] = _mm512_setzero_si512();
    for (int64_t j = 0; j < wpg; ++j) {
      co.prefetch_word(g, j, G, wpg);
      const int64_t w = g * wpg + j;
      const __m512i v = _mm512_loadu_si512(co.group_codes(codes, g) + j * 64);
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
    int_group_step512<MB>(co, g, p, ascale, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, acc[m]);
}

// 4-bit codes x fp32 activations: the nibble of column i becomes its float through VPERMPS over the
// table 0..15 (the permute reads only the low 4 bits of each lane's index, so the shifted word
// needs no mask and no conversion), and four FMA chains per activation row (a single decode row
// was bound by the FMA latency with two). Every row count sums in this one order, so a row's
// result does not depend on how many rows share the call (batched decode equals decode alone).
template <int MB>
EMBER_AVX512 void float4_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const float* x,
                               int64_t lda, const float* asum, float* out) {
  const __m512 lut = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // Chain c of a word takes the nibbles at these shifts, against these activations of the word:
  // c0: bits 0, 16 (x0, x2); c1: 4, 20 (x4, x6); c2: 8, 24 (x1, x3); c3: 12, 28 (x5, x7).
  constexpr int kShift[8] = {0, 4, 8, 12, 16, 20, 24, 28};
  constexpr int kAct[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  __m512 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    co.prefetch_group(g, G, wpg);
    __m512 c[MB][4];
    for (int m = 0; m < MB; ++m)
      for (int i = 0; i < 4; ++i) c[m][i] = _mm512_setzero_ps();
    for (int64_t j = 0; j < wpg; ++j) {
      co.prefetch_word(g, j, G, wpg);
      const int64_t w = g * wpg + j;
      const __m512i v = _mm512_loadu_si512(co.group_codes(codes, g) + j * 64);
      for (int i = 0; i < 8; ++i) {
        const __m512 u = _mm512_permutexvar_ps(kShift[i] ? _mm512_srli_epi32(v, kShift[i]) : v, lut);
        for (int m = 0; m < MB; ++m) c[m][i & 3] = _mm512_fmadd_ps(u, _mm512_set1_ps(x[m * lda + w * 8 + kAct[i]]), c[m][i & 3]);
      }
    }
    __m512 p[MB];
    for (int m = 0; m < MB; ++m) p[m] = _mm512_add_ps(_mm512_add_ps(c[m][0], c[m][1]), _mm512_add_ps(c[m][2], c[m][3]));
    group_step512<MB>(co, g, p, asum + g, G, acc);
  }
  for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, acc[m]);
}

// 8-bit codes x fp32 activations: column i of a word is (word >> 8i) & 255 (a shift and a mask), or,
// where the CPU has AVX512-VBMI, one VPERMB that moves byte i of each lane to the lane's low byte and
// zeroes the rest: the same codes in one op instead of two. A standalone copy over 1 MiB of
// per-channel blocks in L2 (K = 576) on a 2-core Intel Xeon VM: 14.1 -> 16.4 GB/s at 4 rows, 21.6 ->
// 31.0 at one row; SmolLM2 `8da4w-kv8` (its tied lm_head is 8-bit per channel, fp32 activations),
// processes alternating: decode -7% (three rounds), 4 sessions batched -3% to -11%. Chosen at load by
// cpu_features().avx512vbmi (Cascade Lake has VNNI without VBMI).
#define FLOAT8_NAME float8_block
#define FLOAT8_TARGET EMBER_AVX512
#define FLOAT8_SETUP const __m512i mask = _mm512_set1_epi32(255);
#define FLOAT8_CODES(v, i) _mm512_and_si512(_mm512_srli_epi32(v, 8 * (i)), mask)
#include "qkernels_float8_avx512.inc"
#undef FLOAT8_NAME
#undef FLOAT8_TARGET
#undef FLOAT8_SETUP
#undef FLOAT8_CODES

// VPERMB index i: byte i of lane l to byte 0 of lane l (the other bytes are zeroed by the mask).
EMBER_AVX512VBMI inline __m512i lane_byte_index(int i) {
  return _mm512_add_epi32(_mm512_set1_epi32(i),
                          _mm512_set_epi32(60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0));
}

#define FLOAT8_NAME float8_block_vbmi
#define FLOAT8_TARGET EMBER_AVX512VBMI
#define FLOAT8_SETUP \
  const __m512i index[4] = {lane_byte_index(0), lane_byte_index(1), lane_byte_index(2), lane_byte_index(3)};
#define FLOAT8_CODES(v, i) _mm512_maskz_permutexvar_epi8(__mmask64{0x1111111111111111ULL}, index[i], v)
#include "qkernels_float8_avx512.inc"
#undef FLOAT8_NAME
#undef FLOAT8_TARGET
#undef FLOAT8_SETUP
#undef FLOAT8_CODES

// ---- activation quantizers (qkernels.h): act_quant.h's codes, 16 lanes at a time ----------------
// Every step is the scalar one (IEEE division and multiplication, round half to even, the same
// clamps), so the codes are identical; only the order of exact operations (max, min, integer sums)
// differs.

EMBER_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// Codes of n values (n <= 16, lanes past n are not stored) as int32 lanes, stored as int8.
EMBER_AVX512 inline __m512i store_codes(__m512 r, int8_t* q, __mmask16 m) {
  const __m512i i = _mm512_cvtps_epi32(r);  // r holds integers: exact
  _mm_mask_storeu_epi8(q, m, _mm512_cvtepi32_epi8(i));
  return _mm512_maskz_mov_epi32(m, i);
}

EMBER_AVX512 void quantize_groups_avx512(const float* x, int64_t K, int64_t gs, int8_t* q, float* d, float* asum) {
  const __m512 big = _mm512_set1_ps(FLT_MAX), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t g = 0; g < K / gs; ++g) {
    const float* xg = x + g * gs;
    int8_t* qg = q + g * gs;
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t k = 0; k < gs; k += 16) {
      const __mmask16 m = tail_mask(gs - k);
      const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, xg + k));
      bad |= _mm512_mask_cmp_ps_mask(m, a, big, _CMP_NLE_UQ);  // NaN or infinity
      amax = _mm512_max_ps(amax, a);
    }
    if (bad) {
      std::fill(qg, qg + gs, int8_t{0});
      d[g] = asum[g] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float dg = _mm512_reduce_max_ps(amax) / 127.0f;
    __m512i sum = _mm512_setzero_si512();
    if (dg > 0.0f) {
      const __m512 dv = _mm512_set1_ps(dg);
      for (int64_t k = 0; k < gs; k += 16) {
        const __mmask16 m = tail_mask(gs - k);
        __m512 r = _mm512_roundscale_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(m, xg + k), dv),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        sum = _mm512_add_epi32(sum, store_codes(r, qg + k, m));
      }
    } else {
      std::fill(qg, qg + gs, int8_t{0});
    }
    d[g] = dg;
    asum[g] = dg * static_cast<float>(_mm512_reduce_add_epi32(sum));
  }
}

EMBER_AVX512 void quantize_token_avx512(const float* x, int64_t K, int64_t gs, int8_t* q, float* asum, float* scale,
                                        float* zp) {
  __m512 vlo = _mm512_setzero_ps(), vhi = _mm512_setzero_ps();  // masked-off lanes load 0: no effect
  __mmask16 nan = 0;
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 m = tail_mask(K - k);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    vlo = _mm512_min_ps(vlo, v);
    vhi = _mm512_max_ps(vhi, v);
  }
  const ActParams p = act_params_from_range<RoundF32>(_mm512_reduce_min_ps(vlo), _mm512_reduce_max_ps(vhi), nan != 0);
  *scale = p.ok ? p.scale : std::numeric_limits<float>::quiet_NaN();  // the reference gives NaN rows
  *zp = p.ok ? p.zp : 0.0f;
  if (!p.ok) {
    std::fill(q, q + K, int8_t{0});
    std::fill(asum, asum + K / gs, 0.0f);
    return;
  }
  const __m512 inv = _mm512_set1_ps(p.inv), zpv = _mm512_set1_ps(p.zp);
  const __m512 tlo = _mm512_set1_ps(-1024.0f), thi = _mm512_set1_ps(1024.0f);
  const __m512 qlo = _mm512_set1_ps(-128.0f), qhi = _mm512_set1_ps(127.0f);
  for (int64_t g = 0; g < K / gs; ++g) {
    __m512i sum = _mm512_setzero_si512();
    for (int64_t k = g * gs; k < (g + 1) * gs; k += 16) {
      const __mmask16 m = tail_mask((g + 1) * gs - k);
      __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), inv);
      t = _mm512_min_ps(_mm512_max_ps(t, tlo), thi);
      __m512 r = _mm512_add_ps(_mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zpv);
      r = _mm512_min_ps(_mm512_max_ps(r, qlo), qhi);
      sum = _mm512_add_epi32(sum, store_codes(r, q + k, m));
    }
    asum[g] = static_cast<float>(_mm512_reduce_add_epi32(sum));
  }
}

}  // namespace

void add_avx512_block_kernels(BlockKernels& t) {
  t.int_isa = t.float_isa = t.quant_isa = KernelIsa::kAvx512;
  t.quantize_token = quantize_token_avx512;
  t.quantize_groups = quantize_groups_avx512;
  t.int4[0] = int4_block<1>, t.int4[1] = int4_block<2>, t.int4[2] = int4_block<3>, t.int4[3] = int4_block<4>;
  // A 512-bit register holds all 16 rows of a block: each activation broadcast already serves all
  // of them, so the AVX2 level's pre-broadcast kernels are not used here.
  t.expand_int4 = nullptr;
  for (Int4ExpandedFn& f : t.int4_expanded) f = nullptr;
  t.prefetch_next_block = true;  // measured on a Zen 4: see BlockKernels
  t.int8[0] = int8_block<1>, t.int8[1] = int8_block<2>, t.int8[2] = int8_block<3>, t.int8[3] = int8_block<4>;
  t.float4[0] = float4_block<1>, t.float4[1] = float4_block<2>, t.float4[2] = float4_block<3>, t.float4[3] = float4_block<4>;
  if (cpu_features().avx512vbmi) {
    t.float8[0] = float8_block_vbmi<1>, t.float8[1] = float8_block_vbmi<2>, t.float8[2] = float8_block_vbmi<3>;
    t.float8[3] = float8_block_vbmi<4>;
  } else {
    t.float8[0] = float8_block<1>, t.float8[1] = float8_block<2>, t.float8[2] = float8_block<3>;
    t.float8[3] = float8_block<4>;
  }
}
#else
void add_avx512_block_kernels(BlockKernels&) {}
#endif

}  // namespace cpu
}  // namespace ember
