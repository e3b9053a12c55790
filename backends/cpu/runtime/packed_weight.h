// The CPU delegate's packed weight: a validated view of an "ECW1" blob (the layout is documented
// in backends/cpu/packing.py, which writes it).
//
// Ownership: a PackedWeight points into the blob (mapped or read once by the program) and owns
// nothing; the blob outlives every delegate handle (see ember/runtime/backend.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ember/runtime/error.h"

namespace ember {
namespace cpu {

constexpr int64_t kRows = 16;  // weight rows per block (one 32-bit lane per row in a zmm register)

enum class ParamKind : uint32_t { kNone = 0, kConst = 1, kPerGroup = 2 };
enum class ParamType : uint32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI8 = 3 };

// One per-group parameter (scale, zero point or offset): absent, one constant for the whole
// weight, or per group 16 values of `type`: group g's at offset + g * stride bytes into every block.
struct GroupParam {
  ParamKind kind = ParamKind::kNone;
  ParamType type = ParamType::kF32;
  float constant = 0.0f;
  size_t offset = 0;
  size_t stride = 0;
};

struct PackedWeight {
  int bits = 0;                  // 4 or 8
  int64_t N = 0, K = 0;          // rows (output features / vocabulary), row length
  int64_t gs = 0, G = 0;         // group size, groups per row (K / gs)
  int64_t NB = 0;                // blocks of kRows rows
  int64_t words_per_group = 0;   // 32-bit words per row per group: gs / 8 (4 bits) or gs / 4 (8 bits)
  bool interleaved = false;      // each group's parameters follow its codes (else: all codes first)
  size_t group_bytes = 0;        // from group g's first code word to group g + 1's
  size_t block_bytes = 0;        // stride between blocks
  GroupParam scale, zero_point, offset;
  bool has_rowsum = false;       // row sums packed (int8-activation linears need them)
  size_t rowsum_offset = 0;      // [16] fp32 in every block, when has_rowsum
  const uint8_t* blocks = nullptr;  // NB * block_bytes
  const float* bias = nullptr;      // [N] or nullptr

  const uint8_t* block(int64_t b) const { return blocks + static_cast<size_t>(b) * block_bytes; }
  // Added to the signed code to get the stored unsigned one (8 for 4 bits, 128 for 8 bits).
  float code_shift() const { return bits == 4 ? 8.0f : 128.0f; }
};

// Validates the header and that the blob holds exactly the bytes the header implies (every size
// checked for overflow first). kInvalidProgram naming the field on failure. `blob` must be
// 4-byte aligned (program segments are 64-byte aligned).
Result<PackedWeight> parse_packed_weight(const uint8_t* blob, size_t size);

// Block b's coefficients in fp32, [G][16] each: the weight of stored code u is u * s + c, with
// c = m - s * (z + shift) (m, z: the offset and zero point, 0 when absent).
void block_coeffs(const PackedWeight& w, int64_t b, float* s, float* c);

// Row n of the dequantized weight into out[K], with the reference's steps and rounding
// (export/quant_ops.py: ((q - z) * s) + m, each in fp32), for the embedding gather.
void dequantize_row(const PackedWeight& w, int64_t n, float* out);

}  // namespace cpu
}  // namespace ember
