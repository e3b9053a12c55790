// Portable C++ block kernels of the CPU delegate (see qkernels.h for what they compute).
#include "qkernels.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "act_quant.h"
#include "ember/runtime/dtype.h"

namespace ember {
namespace cpu {
namespace {

// Codes of one 32-bit word (row r's 4 bytes) in column order: 4 bits give 8 codes (low nibbles
// are columns 0-3, high nibbles 4-7), 8 bits give 4.
template <int BITS>
inline void word_codes(const uint8_t* word, int* u) {
  for (int i = 0; i < 4; ++i) {
    if (BITS == 4) {
      u[i] = word[i] & 15;
      u[i + 4] = word[i] >> 4;
    } else {
      u[i] = word[i];
    }
  }
}

// Element i of the scales (and offsets) and c = m - s * ze.
inline void coeffs_at(const Coeffs& co, int64_t i, float* s, float* c) {
  const float sv = co.half ? half_to_float(static_cast<const uint16_t*>(co.scale)[i]) : static_cast<const float*>(co.scale)[i];
  float m = co.m_const;
  if (co.offset) m = co.half ? half_to_float(static_cast<const uint16_t*>(co.offset)[i]) : static_cast<const float*>(co.offset)[i];
  *s = sv;
  *c = m - sv * co.ze;
}

// Both kinds of qkernels.h: T is the activation type (int8 codes or fp32) and S the type P is
// summed in (exact int32 or fp32).
template <int BITS, int MB, typename T, typename S>
void block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const T* act, int64_t lda,
           const float* asum, const float* ascale, float* out) {
  constexpr int W = BITS == 4 ? 8 : 4;
  float acc[MB][16] = {};
  for (int64_t g = 0; g < G; ++g) {
    co.prefetch_group(g, G, wpg);
    S p[MB][16] = {};
    for (int64_t j = 0; j < wpg; ++j) {
      co.prefetch_word(g, j, G, wpg);
      const uint8_t* words = co.group_codes(codes, g) + j * 64;
      const int64_t k = (g * wpg + j) * W;
      for (int r = 0; r < 16; ++r) {
        int u[8];
        word_codes<BITS>(words + 4 * r, u);
        for (int m = 0; m < MB; ++m) {
          const T* am = act + m * lda + k;
          S t = 0;
          for (int i = 0; i < W; ++i) t += static_cast<S>(u[i]) * static_cast<S>(am[i]);
          p[m][r] += t;
        }
      }
    }
    // The int kernels' folded step (qkernels.h, folds_zero_point) where it applies.
    const bool fold = std::is_same_v<T, int8_t> && folds_zero_point(co, ascale);
    for (int m = 0; m < MB; ++m) {
      const float a = asum[m * G + g];
      for (int r = 0; r < 16; ++r) {
        float s, c;
        coeffs_at(co, g * co.param_stride + r, &s, &c);
        float pf = static_cast<float>(p[m][r]);
        if (fold) {
          acc[m][r] = std::fma(s, pf - co.ze * a, acc[m][r]);
          continue;
        }
        if (ascale) pf *= ascale[m * G + g];
        acc[m][r] += s * pf + c * a;
      }
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int r = 0; r < 16; ++r) out[m * 16 + r] = acc[m][r];
}

template <int BITS, int MB>
void int_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const int8_t* q, int64_t lda,
               const float* asum, const float* ascale, float* out) {
  block<BITS, MB, int8_t, int32_t>(codes, G, wpg, co, q, lda, asum, ascale, out);
}

template <int BITS, int MB>
void float_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const float* x, int64_t lda,
                 const float* asum, float* out) {
  block<BITS, MB, float, float>(codes, G, wpg, co, x, lda, asum, nullptr, out);
}

template <int BITS>
void dequant_block(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, float* out, int64_t ldo) {
  constexpr int W = BITS == 4 ? 8 : 4;
  for (int64_t g = 0; g < G; ++g) {
    for (int r = 0; r < 16; ++r) {
      float s, c;
      coeffs_at(co, g * co.param_stride + r, &s, &c);
      for (int64_t j = 0; j < wpg; ++j) {
        int u[8];
        word_codes<BITS>(co.group_codes(codes, g) + j * 64 + 4 * r, u);
        const int64_t k = (g * wpg + j) * W;
        for (int i = 0; i < W; ++i) out[(k + i) * ldo + r] = static_cast<float>(u[i]) * s + c;
      }
    }
  }
}

void quantize_token(const float* x, int64_t K, int64_t gs, int8_t* q, float* asum, float* scale, float* zp) {
  const ActParams p = act_params<RoundF32>(x, K);
  *scale = p.ok ? p.scale : std::numeric_limits<float>::quiet_NaN();  // the reference gives NaN rows
  *zp = p.ok ? p.zp : 0.0f;
  for (int64_t k = 0; k < K; ++k) q[k] = p.ok ? static_cast<int8_t>(act_code<RoundF32>(x[k], p)) : int8_t{0};
  for (int64_t g = 0; g < K / gs; ++g) {
    int32_t t = 0;
    for (int64_t k = 0; k < gs; ++k) t += q[g * gs + k];
    asum[g] = static_cast<float>(t);
  }
}

void quantize_groups(const float* x, int64_t K, int64_t gs, int8_t* q, float* d, float* asum) {
  for (int64_t g = 0; g < K / gs; ++g) {
    d[g] = group_codes(x + g * gs, gs, q + g * gs);
    int32_t t = 0;
    for (int64_t k = 0; k < gs; ++k) t += q[g * gs + k];
    asum[g] = d[g] * static_cast<float>(t);
  }
}

}  // namespace

void add_portable_block_kernels(BlockKernels& t) {
  t.int_isa = t.float_isa = t.quant_isa = t.dequant_isa = KernelIsa::kPortable;
  t.dequant4 = dequant_block<4>;
  t.dequant8 = dequant_block<8>;
  t.quantize_token = quantize_token;
  t.quantize_groups = quantize_groups;
  t.int4[0] = int_block<4, 1>, t.int4[1] = int_block<4, 2>, t.int4[2] = int_block<4, 3>, t.int4[3] = int_block<4, 4>;
  t.int8[0] = int_block<8, 1>, t.int8[1] = int_block<8, 2>, t.int8[2] = int_block<8, 3>, t.int8[3] = int_block<8, 4>;
  t.float4[0] = float_block<4, 1>, t.float4[1] = float_block<4, 2>, t.float4[2] = float_block<4, 3>,
  t.float4[3] = float_block<4, 4>;
  t.float8[0] = float_block<8, 1>, t.float8[1] = float_block<8, 2>, t.float8[2] = float_block<8, 3>,
  t.float8[3] = float_block<8, 4>;
}

}  // namespace cpu
}  // namespace ember
