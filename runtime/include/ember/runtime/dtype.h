// Scalar types the runtime stores, their sizes and fp16/bf16 <-> fp32 conversion.
// Numbering matches ember.fb.DType in program.fbs.
#pragma once

#include <cstdint>
#include <cstring>

namespace ember {

enum class DType : int8_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kInt64 = 3,
  kInt32 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kBool = 7,
};

constexpr int kNumDTypes = 8;

inline bool dtype_valid(int v) { return v >= 0 && v < kNumDTypes; }

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kBool: return 1;
  }
  return 0;
}

const char* dtype_name(DType t);

inline bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// Storage types for half precision: raw bits, converted to fp32 for compute.
struct Half { uint16_t bits; };
struct BFloat16 { uint16_t bits; };

inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {  // round to nearest even, NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

}  // namespace ember
