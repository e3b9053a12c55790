// Parsing and per-block coefficients of the CPU delegate's packed weight (packed_weight.h).
#include "packed_weight.h"

#include <cinttypes>
#include <cstring>

#include "kernel_utils.h"

namespace ember {
namespace cpu {
namespace {

constexpr size_t kHeaderBytes = 64;
constexpr size_t kAlign = 64;
constexpr int64_t kMaxRows = int64_t{1} << 31;  // rows of one weight (vocabulary sizes included)
constexpr int64_t kMaxK = int64_t{1} << 24;     // row length
constexpr int64_t kMaxGroup = 65536;            // one group's int32 sum cannot overflow
constexpr uint32_t kFlagBias = 1, kFlagRowsum = 2, kFlagInterleaved = 4;

#define BAD_BLOB(...) Error::make(ErrorCode::kInvalidProgram, "ember.cpu weight blob: " __VA_ARGS__)

struct Header {
  char magic[4];
  uint32_t version, bits, scale_type, zp_kind, zp_type, offset_kind, offset_type, flags, group_size;
  int64_t N, K;
  float zp_const, offset_const;
};
static_assert(sizeof(Header) == kHeaderBytes, "the ECW1 header is 64 bytes");

size_t type_size(ParamType t) { return t == ParamType::kF32 ? 4 : t == ParamType::kI8 ? 1 : 2; }

DType to_dtype(ParamType t) {
  switch (t) {
    case ParamType::kF16: return DType::kFloat16;
    case ParamType::kBF16: return DType::kBFloat16;
    case ParamType::kI8: return DType::kInt8;
    default: return DType::kFloat32;
  }
}

size_t pad(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Checks kind/type and, for a per-group parameter, assigns its offset in the block: [G][16] at the
// cursor (padded to 64 bytes), or, interleaved, 16 values at the cursor within group 0's part
// (unpadded; the stride is set once the group's size is known).
Error place_param(uint32_t kind, uint32_t type, float constant, bool int_ok, int64_t G, bool interleaved,
                  const char* what, size_t* cursor, GroupParam* p) {
  if (kind > static_cast<uint32_t>(ParamKind::kPerGroup)) return BAD_BLOB("%s kind %u is not 0, 1 or 2", what, kind);
  const bool type_ok = type <= static_cast<uint32_t>(ParamType::kI8) && (int_ok || type != static_cast<uint32_t>(ParamType::kI8));
  if (!type_ok) return BAD_BLOB("%s type %u is not supported", what, type);
  p->kind = static_cast<ParamKind>(kind);
  p->type = static_cast<ParamType>(type);
  p->constant = p->kind == ParamKind::kConst ? constant : 0.0f;
  if (p->kind == ParamKind::kPerGroup) {
    p->offset = *cursor;
    p->stride = kRows * type_size(p->type);
    *cursor += interleaved ? p->stride : pad(static_cast<size_t>(G) * p->stride);
  }
  return Error::ok();
}

// dst[G][16] (fp32) from a per-group parameter of block `blk`, or its constant.
void load_param(const GroupParam& p, const uint8_t* blk, int64_t G, float* dst) {
  if (p.kind != ParamKind::kPerGroup) {
    std::fill(dst, dst + G * kRows, p.constant);
    return;
  }
  for (int64_t g = 0; g < G; ++g) {
    kern::convert_elements(to_dtype(p.type), blk + p.offset + static_cast<size_t>(g) * p.stride, DType::kFloat32,
                           dst + g * kRows, kRows);
  }
}

// One value of a per-group parameter (row r of the block, group g) as fp32.
float param_at(const GroupParam& p, const uint8_t* blk, int64_t g, int64_t r) {
  if (p.kind != ParamKind::kPerGroup) return p.constant;
  float v = 0.0f;
  const size_t at = p.offset + static_cast<size_t>(g) * p.stride + static_cast<size_t>(r) * type_size(p.type);
  kern::convert_elements(to_dtype(p.type), blk + at, DType::kFloat32, &v, 1);
  return v;
}

}  // namespace

Result<PackedWeight> parse_packed_weight(const uint8_t* blob, size_t size) {
  if (reinterpret_cast<uintptr_t>(blob) % 4 != 0) return BAD_BLOB("is not 4-byte aligned in memory");
  if (size < kHeaderBytes) return BAD_BLOB("%zu bytes, shorter than its 64-byte header", size);
  Header h;
  std::memcpy(&h, blob, sizeof h);
  if (std::memcmp(h.magic, "ECW1", 4) != 0) return BAD_BLOB("bad magic (not a packed weight)");
  if (h.version != 1) return BAD_BLOB("version %u, this runtime reads version 1", h.version);
  if (h.bits != 4 && h.bits != 8) return BAD_BLOB("bits %u, expected 4 or 8", h.bits);
  if (h.N < 1 || h.N > kMaxRows) return BAD_BLOB("row count %" PRId64 " outside [1, 2^31]", h.N);
  if (h.K < 1 || h.K > kMaxK) return BAD_BLOB("row length %" PRId64 " outside [1, 2^24]", h.K);
  const int64_t per_word = h.bits == 4 ? 8 : 4;
  const int64_t gs = h.group_size;
  if (gs < per_word || gs % per_word != 0 || h.K % gs != 0 || gs > kMaxGroup) {
    return BAD_BLOB("group size %" PRId64 " must be a multiple of %" PRId64 ", at most 65536, dividing the row length %" PRId64,
                    gs, per_word, h.K);
  }
  PackedWeight w;
  w.bits = static_cast<int>(h.bits);
  w.N = h.N;
  w.K = h.K;
  w.gs = gs;
  w.G = h.K / gs;
  w.NB = (h.N + kRows - 1) / kRows;
  w.words_per_group = gs / per_word;
  if (h.flags & ~(kFlagBias | kFlagRowsum | kFlagInterleaved)) return BAD_BLOB("flags 0x%x has unknown bits", h.flags);
  w.interleaved = (h.flags & kFlagInterleaved) != 0;
  const size_t group_codes = static_cast<size_t>(w.words_per_group) * kRows * 4;  // a multiple of 64
  // Interleaved: the parameters of group 0 follow its codes; otherwise every group's codes come first.
  size_t cursor = w.interleaved ? group_codes : static_cast<size_t>(w.G) * group_codes;
  if (h.scale_type > static_cast<uint32_t>(ParamType::kBF16)) return BAD_BLOB("scale type %u is not supported", h.scale_type);
  EMBER_TRY(place_param(static_cast<uint32_t>(ParamKind::kPerGroup), h.scale_type, 0.0f, false, w.G, w.interleaved,
                        "scale", &cursor, &w.scale));
  EMBER_TRY(place_param(h.zp_kind, h.zp_type, h.zp_const, true, w.G, w.interleaved, "zero point", &cursor,
                        &w.zero_point));
  EMBER_TRY(place_param(h.offset_kind, h.offset_type, h.offset_const, false, w.G, w.interleaved, "offset", &cursor,
                        &w.offset));
  if (w.interleaved) {
    // A group: its codes and its parameters (16 values each, so a multiple of 16 bytes), unpadded.
    w.group_bytes = cursor;
    for (GroupParam* p : {&w.scale, &w.zero_point, &w.offset})
      if (p->kind == ParamKind::kPerGroup) p->stride = w.group_bytes;
    cursor = static_cast<size_t>(w.G) * w.group_bytes;
  } else {
    w.group_bytes = group_codes;
  }
  if (h.flags & kFlagRowsum) {
    w.rowsum_offset = cursor;
    cursor += kAlign;
  }
  w.block_bytes = pad(cursor);
  // NB <= 2^27 and block_bytes < 2^33: the product fits in 64 bits.
  const uint64_t body = static_cast<uint64_t>(w.NB) * w.block_bytes;
  const bool has_bias = (h.flags & kFlagBias) != 0;
  const uint64_t bias = has_bias ? pad(static_cast<size_t>(h.N) * 4) : 0;
  const uint64_t expected = kHeaderBytes + body + bias;
  if (expected != size) {
    return BAD_BLOB("%zu bytes, but a [%" PRId64 ", %" PRId64 "] %d-bit weight in groups of %" PRId64 " takes %" PRIu64,
                    size, h.N, h.K, w.bits, gs, expected);
  }
  w.blocks = blob + kHeaderBytes;
  w.has_rowsum = (h.flags & kFlagRowsum) != 0;
  w.bias = has_bias ? reinterpret_cast<const float*>(blob + kHeaderBytes + body) : nullptr;
  return w;
}

void block_coeffs(const PackedWeight& w, int64_t b, float* s, float* c) {
  const uint8_t* blk = w.block(b);
  load_param(w.scale, blk, w.G, s);
  load_param(w.zero_point, blk, w.G, c);  // c holds z for now
  const float shift = w.code_shift();
  float m[kRows];
  for (int64_t g = 0; g < w.G; ++g) {
    if (w.offset.kind == ParamKind::kPerGroup) {
      kern::convert_elements(to_dtype(w.offset.type), blk + w.offset.offset + static_cast<size_t>(g) * w.offset.stride,
                             DType::kFloat32, m, kRows);
    } else {
      std::fill(m, m + kRows, w.offset.constant);  // 0 when absent
    }
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t i = g * kRows + r;
      c[i] = m[r] - s[i] * (c[i] + shift);
    }
  }
}

void dequantize_row(const PackedWeight& w, int64_t n, float* out) {
  const int64_t b = n / kRows, r = n % kRows;
  const uint8_t* blk = w.block(b);
  const bool has_z = w.zero_point.kind != ParamKind::kNone, has_m = w.offset.kind != ParamKind::kNone;
  const int per_word = w.bits == 4 ? 8 : 4;
  const int shift = static_cast<int>(w.code_shift());
  for (int64_t g = 0; g < w.G; ++g) {
    const float s = param_at(w.scale, blk, g, r);
    const float z = has_z ? param_at(w.zero_point, blk, g, r) : 0.0f;
    const float m = has_m ? param_at(w.offset, blk, g, r) : 0.0f;
    for (int64_t j = 0; j < w.words_per_group; ++j) {
      const uint8_t* word = blk + static_cast<size_t>(g) * w.group_bytes + static_cast<size_t>((j * kRows + r) * 4);
      float* dst = out + g * w.gs + j * per_word;
      for (int i = 0; i < 4; ++i) {
        if (w.bits == 4) {
          dst[i] = static_cast<float>((word[i] & 15) - shift);
          dst[i + 4] = static_cast<float>((word[i] >> 4) - shift);
        } else {
          dst[i] = static_cast<float>(word[i] - shift);
        }
      }
    }
    float* row = out + g * w.gs;
    // The reference's order: ((q - z) * s) + m, each step in fp32.
    if (has_z)
      for (int64_t k = 0; k < w.gs; ++k) row[k] -= z;
    for (int64_t k = 0; k < w.gs; ++k) row[k] *= s;
    if (has_m)
      for (int64_t k = 0; k < w.gs; ++k) row[k] += m;
  }
}

}  // namespace cpu
}  // namespace ember
