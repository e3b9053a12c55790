// Shared pieces of attend_cache / attend_cache_int8 (attention.cpp: the ops and decode;
// attention_prefill.cpp: several new tokens at once).
#pragma once

#include <cmath>
#include <cstdint>

#include "f32_kernels.h"
#include "gemm.h"
#include "kernel_utils.h"

namespace ember {
namespace kern {

// One cache as fp32 rows: the [B * Hkv * S, D] rows of an fp32 cache are read in place; fp16 /
// bf16 rows, or int8 codes times their row's fp32 scale, are turned into fp32 rows in a caller's
// buffer, a block at a time (the block stays in L1 for the math that follows, so the cache itself
// is read once, at its own width).
struct CacheRows {
  const Tensor* t = nullptr;
  const float* scales = nullptr;  // int8 caches: one scale per row
  int64_t D = 0;

  bool in_place() const { return t->dtype == DType::kFloat32; }

  // Rows [r0, r0 + n) as fp32: a pointer into the cache, or buf[n * D] filled.
  const float* rows(int64_t r0, int64_t n, float* buf) const {
    if (in_place()) return t->ptr<float>() + r0 * D;
    if (t->dtype == DType::kInt8) {
      f32_kernels().scaled_i8_to_float.fn(t->ptr<int8_t>() + r0 * D, scales + r0, n, D, buf);
      return buf;
    }
    convert_elements(t->dtype, static_cast<const uint8_t*>(t->data) + static_cast<size_t>(r0 * D) * t->element_size(),
                     DType::kFloat32, buf, n * D);
    return buf;
  }
};

// The attention of attend_cache over any cache: q [B, Hq, T, D], caches of [B, Hkv, S] rows
// (S from the caller), out [B, T, Hq, D], already resized. Query t sits at position pos + t and
// sees keys [max(0, pos + t - window + 1) if window > 0 else 0, pos + t]. An int8 cache's queries
// are quantized as its rows are (attend_cache_int8).
struct AttendArgs {
  const Tensor* q;
  CacheRows k, v;
  int64_t Hkv, S, pos, window;
  float sc, cap;
  Tensor* out;
};

// Scores s[0..n) -> exp(s' - max s') with s' = s * sc, soft-capped to cap * tanh(s' / cap) when
// cap > 0 (Gemma 2). Returns the sum; *mx gets the max.
inline float capped_softmax(float* s, int64_t n, float sc, float cap, float* mx) {
  if (cap <= 0) return scaled_softmax_f32(s, n, sc, mx);
  for (int64_t j = 0; j < n; ++j) s[j] = cap * std::tanh(s[j] * sc / cap);
  return scaled_softmax_f32(s, n, 1.0f, mx);
}

// Any number of new tokens (attention.cpp takes single-token fp32 decode itself): tasks are
// (batch row, kv head, block of query rows); see attention_prefill.cpp. Runs over the pool.
void attend_prefill(const AttendArgs& a);

}  // namespace kern
}  // namespace ember
