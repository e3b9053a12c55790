// Dynamic int8 activation quantization, step for step as the reference does it
// (export/quant_ops.py): torchao's asymmetric per-token scheme (quantize_activation_per_token)
// and llama.cpp's symmetric per-group one (quantize_activation_per_group). Shared by the
// portable ember::quantized_linear kernel and the CPU delegate (backends/cpu), so both quantize
// activations with exactly the same codes.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ember/runtime/dtype.h"

namespace ember {

// Each step of quantize_activation_per_token runs in x's dtype: R::r rounds an fp32 result to it.
struct RoundF32 {
  static float r(float v) { return v; }
  static constexpr float kSmallestNormal = FLT_MIN;
};
struct RoundBF16 {
  static float r(float v) { return bf16_to_float(float_to_bf16(v)); }
  static constexpr float kSmallestNormal = FLT_MIN;  // bf16 has fp32's exponent range
};
struct RoundF16 {
  static float r(float v) { return half_to_float(float_to_half(v)); }
  static constexpr float kSmallestNormal = 6.103515625e-05f;  // 2^-14
};

// torch.round (half to even) of |v| <= 1024 (callers clamp first): adding 1.5 * 2^23 leaves no
// fraction bits, so the addition itself rounds in the default to-nearest-even mode.
inline float round_half_even(float v) {
  const float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// The scale and zero point of one activation row, or ok=false when the row holds a NaN or an
// infinity (the reference then yields NaN for the whole row).
struct ActParams {
  float scale = 1.0f, inv = 1.0f, zp = 0.0f;
  bool ok = true;
};

// The parameters from a row's range: lo = min(min(x), 0), hi = max(max(x), 0), nan = whether the
// row holds a NaN (SIMD callers reduce the range themselves, then share this step).
template <typename R>
inline ActParams act_params_from_range(float lo, float hi, bool nan) {
  ActParams p;
  float scale = R::r(R::r(hi - lo) / 255.0f);
  if (scale < R::kSmallestNormal) scale = R::kSmallestNormal;
  if (nan || !std::isfinite(scale)) {
    p.ok = false;
    return p;
  }
  p.scale = scale;
  p.zp = std::min(std::max(R::r(-128.0f - std::nearbyint(R::r(lo / scale))), -128.0f), 127.0f);
  p.inv = R::r(1.0f / scale);  // torch computes 1 / scale, then multiplies
  return p;
}

template <typename R>
inline ActParams act_params(const float* x, int64_t K) {
  float lo = 0.0f, hi = 0.0f;  // min(min(x), 0), max(max(x), 0)
  bool nan = false;
  for (int64_t k = 0; k < K; ++k) {
    const float v = x[k];
    nan |= v != v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return act_params_from_range<R>(lo, hi, nan);
}

// The clamped code q in [-128, 127] of activation v.
template <typename R>
inline float act_code(float v, const ActParams& p) {
  float t = R::r(v * p.inv);
  t = !(t >= -1024.0f) ? -1024.0f : (t > 1024.0f ? 1024.0f : t);
  const float q = R::r(round_half_even(t) + p.zp);
  return std::min(std::max(q, -128.0f), 127.0f);
}

// One group of gs activations, symmetric: d = max|x| / 127, q = clamp(round(x / d), -127, 127)
// (q = 0 when d == 0), each step in fp32 as the reference computes it. Writes the codes and
// returns d, or NaN when the group holds a NaN or an infinity (the reference's result is then NaN).
inline float group_codes(const float* x, int64_t gs, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t k = 0; k < gs; ++k) {
    const float a = std::fabs(x[k]);
    finite &= a <= FLT_MAX;  // false for NaN and inf
    amax = std::max(amax, a);
  }
  if (!finite) {
    for (int64_t k = 0; k < gs; ++k) q[k] = 0;
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float d = amax / 127.0f;
  for (int64_t k = 0; k < gs; ++k) {
    const float t = d > 0.0f ? round_half_even(x[k] / d) : 0.0f;
    q[k] = static_cast<int8_t>(std::min(std::max(t, -127.0f), 127.0f));
  }
  return d;
}

// ember::quantize_kv of one row (the int8 KV cache, and the queries attend_cache_int8 scores
// with): s = max|x| / 127, codes = clamp(round_half_even(x / s), -127, 127); zeros for an
// all-zero row (s = 0) and for a row holding a NaN or an infinity (s = NaN).
inline void quantize_kv_row(const float* x, int64_t D, int8_t* codes, float* scale) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t d = 0; d < D; ++d) {
    const float a = std::fabs(x[d]);
    finite = finite && a <= std::numeric_limits<float>::max();
    amax = a > amax ? a : amax;
  }
  const float s = amax / 127.0f;
  if (!finite || !(s > 0.0f)) {
    for (int64_t d = 0; d < D; ++d) codes[d] = 0;
    *scale = finite ? s : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  for (int64_t d = 0; d < D; ++d) {
    const float r = round_half_even(x[d] / s);  // |x / s| <= 127 (+ rounding): within the trick's range
    codes[d] = static_cast<int8_t>(r < -127.0f ? -127.0f : (r > 127.0f ? 127.0f : r));
  }
  *scale = s;
}

}  // namespace ember
