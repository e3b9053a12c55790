// The integer P·V of decode attention over the int8 KV cache, shared by every level's
// f32.i8_weighted_rows (f32_kernels.h, I8WeightedRowsFn): the rules that make every level give the
// same bits, and the scalar pieces they share.
//
// A call's rows go in blocks of kPvRows from its first. In a block, head g's weights are
// w[j] = p[g * ldp + j] * scales[j] (fp32). When every w[j] is finite and >= 0 and their max m is
// at least kPvMinMax, they are rounded to int16 codes q[j] = nearbyint(w[j] * (kPvCode / m)) in
// [0, 32767], and
//   out[g * ldo + d] = fma(float(sum_j q[j] * V[j][d]), m / kPvCode, out[g * ldo + d])
// with the integer sum exact (|sum| <= 256 x 32767 x 128 < 2^31). Otherwise (a NaN or inf weight,
// or a block of tiny or zero weights) the block's weights are added in fp32 by pv_float_rows, so
// that a NaN still reaches the output. The rounding costs at most half a code, 1/65534 of the
// block's largest weight: ~250 times finer than the int8 cache's own rounding of V. In exchange, the
// codes multiply as int16 pairs (VPDPWSSD, VPMADDWD): half the instructions of widening each code
// to fp32 for an FMA per head.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

namespace ember {
namespace kern {

constexpr int64_t kPvRows = 256;
constexpr float kPvCode = 32767.0f;
constexpr float kPvMinMax = 1e-30f;  // kPvCode / m stays finite

// Whether a weight may be rounded (finite and >= 0; false for NaN).
inline bool pv_clean(float w) { return w >= 0.0f && w <= FLT_MAX; }

// Whether a block of clean weights with max m is summed in integers.
inline bool pv_quantized(float m) { return m >= kPvMinMax && m <= FLT_MAX; }

// One head's block in fp32: out[d] += w[j] * V[j * D + d], rows in order (explicit FMAs: every
// level's build gives the same bits).
inline void pv_float_rows(const float* w, const int8_t* V, int64_t nb, int64_t D, float* out) {
  for (int64_t j = 0; j < nb; ++j)
    for (int64_t d = 0; d < D; ++d) out[d] = std::fma(w[j], static_cast<float>(V[j * D + d]), out[d]);
}

// Columns [d0, d1) of one head's rounded block in integers: out[d] = fma(float(sum_j q[j] * V[j * D + d]),
// back, out[d]) (the portable kernel; the SIMD ones' columns past their vector width).
inline void pv_int_cols(const int16_t* q, const int8_t* V, int64_t nb, int64_t D, int64_t d0, int64_t d1, float back,
                        float* out) {
  for (int64_t d = d0; d < d1; ++d) {
    int32_t acc = 0;
    for (int64_t j = 0; j < nb; ++j) acc += static_cast<int32_t>(q[j]) * static_cast<int32_t>(V[j * D + d]);
    out[d] = std::fma(static_cast<float>(acc), back, out[d]);
  }
}

}  // namespace kern
}  // namespace ember
