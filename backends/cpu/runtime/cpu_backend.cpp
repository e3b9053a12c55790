// ember.cpu: the runtime half of the CPU delegate (backends/cpu). Each delegate call runs one
// quantized op over one packed weight (packed_weight.h), chosen by its compile specs:
//   op = "linear":    x [..., K] fp32 -> [..., N] fp32; act_quant 0 (fp32 activations, the
//                     float kernels), 1 (torchao's int8 asymmetric per-token activations:
//                     int8 codes q and zero point zp per row, the int kernels, then
//                     y = scale * (sum_k q_k w_k - zp * sum_k w_k) + bias, the row sums packed
//                     with the weight) or 2 (int8 symmetric per group of the weight's group
//                     size, llama.cpp's Q8_0 activations: y = sum_g d_g * sum_{k in g} q_k w_k
//                     + bias, the group scales d_g applied inside the int kernels);
//   op = "embedding": indices (int32/int64, any shape) -> [*indices.shape, K] fp32, each row
//                     dequantized exactly as the reference does.
// The blob holds only the weight, so a tied embedding and lm_head share one copy of it.
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

#include "ember/runtime/backend.h"
#include "f32_kernels.h"
#include "kernel_utils.h"
#include "packed_weight.h"
#include "qkernels.h"

namespace ember {
namespace cpu {
namespace {

enum class Op { kLinear, kEmbedding };
// The linear's activations: the values of the act_quant compile spec (export/quant_ops.py ActQuant).
enum class Act : uint8_t { kFloat = 0, kInt8PerToken = 1, kInt8PerGroup = 2 };

struct Handle {
  PackedWeight w;
  Op op = Op::kLinear;
  Act act = Act::kFloat;
  bool coeffs_in_place = false;  // the kernels read the packed scales / offsets directly
  float foldable_ze = 0.0f;      // the zero point folded into the sums (Coeffs::zinit), or 0: not folded
};

// fp32 or fp16 scales, no per-group zero point, offsets (if any) of the scale's type.
bool coeffs_in_place(const PackedWeight& w) {
  const bool scale_ok = w.scale.type == ParamType::kF32 || w.scale.type == ParamType::kF16;
  const bool offset_ok = w.offset.kind != ParamKind::kPerGroup || w.offset.type == w.scale.type;
  return scale_ok && offset_ok && w.zero_point.kind != ParamKind::kPerGroup;
}

// The ze the kernels may fold into their integer sums under per-token activations (Coeffs::zinit;
// folds_zero_point's step with in-place coefficients: 4-bit codes, no offset, an integer zero point
// of a 4-bit code, groups of at most kMaxZinitGroup values), or 0 where they may not.
float foldable_ze(const PackedWeight& w, bool in_place) {
  const bool no_offset =
      w.offset.kind == ParamKind::kNone || (w.offset.kind == ParamKind::kConst && w.offset.constant == 0.0f);
  const float ze = (w.zero_point.kind == ParamKind::kConst ? w.zero_point.constant : 0.0f) + w.code_shift();
  const bool integral = ze == std::floor(ze) && ze != 0.0f && std::fabs(ze) <= 16.0f;
  return in_place && w.bits == 4 && no_offset && w.gs <= kMaxZinitGroup && integral ? ze : 0.0f;
}

// Block b's coefficients for the kernels: in place, or computed into s / c ([G][16] fp32 each).
Coeffs block_coefficients(const Handle& h, int64_t b, float* s, float* c) {
  const PackedWeight& w = h.w;
  Coeffs co;
  co.group_bytes = static_cast<int64_t>(w.group_bytes);
  if (h.coeffs_in_place) {
    const uint8_t* blk = w.block(b);
    co.scale = blk + w.scale.offset;
    co.half = w.scale.type == ParamType::kF16;
    // Scales and offsets share a type here, and one stride (16 values, or a group, apart).
    co.param_stride = static_cast<int64_t>(w.scale.stride) / (co.half ? 2 : 4);
    co.offset = w.offset.kind == ParamKind::kPerGroup ? blk + w.offset.offset : nullptr;
    co.m_const = w.offset.kind == ParamKind::kConst ? w.offset.constant : 0.0f;
    co.ze = (w.zero_point.kind == ParamKind::kConst ? w.zero_point.constant : 0.0f) + w.code_shift();
    return co;
  }
  block_coeffs(w, b, s, c);
  co.scale = s;
  co.offset = c;  // c = m - s * 0
  return co;
}

#define CPU_ERROR(code, ...) Error::make(ErrorCode::code, "ember.cpu: " __VA_ARGS__)

Error parse_specs(const CompileSpec* specs, size_t n, Handle* h) {
  bool have_op = false;
  for (size_t i = 0; i < n; ++i) {
    const std::string_view value(reinterpret_cast<const char*>(specs[i].value), specs[i].size);
    if (specs[i].key == "op") {
      if (value == "linear") h->op = Op::kLinear;
      else if (value == "embedding") h->op = Op::kEmbedding;
      else return CPU_ERROR(kInvalidProgram, "compile spec op = '%.*s', expected 'linear' or 'embedding'",
                            static_cast<int>(value.size() > 32 ? 32 : value.size()), value.data());
      have_op = true;
    } else if (specs[i].key == "act_quant") {
      if (specs[i].size != 1 || specs[i].value[0] > 2) {
        return CPU_ERROR(kInvalidProgram, "compile spec act_quant must be one byte, 0, 1 or 2");
      }
      h->act = static_cast<Act>(specs[i].value[0]);
    }
  }
  if (!have_op) return CPU_ERROR(kInvalidProgram, "the delegate has no 'op' compile spec");
  return Error::ok();
}

// The activations in the kernels' form: int8 codes (int paths) or fp32 rows used in place, plus
// per-group sums [M][G]; per token: each row's scale and zero point; per group: each group's scale.
struct Activations {
  std::vector<int8_t> q;   // [M, K]
  std::vector<float> asum;  // [M, G]
  std::vector<float> scale, zp;  // [M] (per token)
  std::vector<float> gscale;  // [M, G] (per group)
  std::vector<int32_t> zinit;  // [M, G]: -ze * asum, where the kernels fold the zero point (Coeffs::zinit)
};

using kern::grow;

// The activation rows in the int kernels' form, per token or per group (qkernels.h quantizers).
void quantize_rows(const float* const* x, int64_t M, const PackedWeight& w, bool per_token, Activations* a) {
  const int64_t K = w.K, G = w.G, gs = w.gs;
  grow(a->q, M * K);
  grow(a->asum, M * G);
  if (per_token) {
    grow(a->scale, M);
    grow(a->zp, M);
  } else {
    grow(a->gscale, M * G);
  }
  const BlockKernels& bk = block_kernels();
  // Split over the threads from 4,096 values in 2 rows or more (a short prefill, a batched step):
  // left to the calling thread, the others waited it out (a 12-token prefill of SmolLM2 `8da4w` on a
  // 2-core Zen 4 spent 5% of its time quantizing, all of it serial).
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t m = r0; m < r1; ++m) {
      int8_t* qr = a->q.data() + m * K;
      if (per_token) bk.quantize_token(x[m], K, gs, qr, a->asum.data() + m * G, &a->scale[m], &a->zp[m]);
      else bk.quantize_groups(x[m], K, gs, qr, a->gscale.data() + m * G, a->asum.data() + m * G);
    }
  };
  if (M >= 2 && M * K >= 4096) parallel_for(M, 1, rows);
  else rows(0, M);
}

void sum_groups(const float* x, int64_t M, const PackedWeight& w, Activations* a) {
  const int64_t K = w.K, G = w.G, gs = w.gs;
  grow(a->asum, M * G);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t g = 0; g < G; ++g) {
      float t = 0.0f;
      for (int64_t k = 0; k < gs; ++k) t += x[m * K + g * gs + k];
      a->asum[m * G + g] = t;
    }
  }
}

// Packed weight bytes per span of blocks that the pre-broadcast int4 path runs tile by tile (each
// tile re-reads the span, which should stay in L2).
constexpr int64_t kSpanBytes = 256 * 1024;

// Float-activation linears over at least this many rows (prefill) take the GEMM path.
constexpr int64_t kGemmMinRows = 16;

// The most parts of the blocks that the threads of a multi-tile linear split (one per thread).
constexpr int kMaxParts = 64;
// A one-row linear over at least this many blocks (the lm_head of a 49,152-token vocabulary has 3,072)
// runs in items like several rows: smaller ones keep one range per thread (see linear_rows).
constexpr int64_t kDecodeItemsMinBlocks = 1024;

// Prefill of a float-activation linear: each pair of blocks (32 weight rows) is dequantized once
// into a [K][32] panel (thread-local, in L2) and multiplied by all M activation rows with the fp32
// GEMM micro-kernel, where the block kernels would convert every code again for each 4 rows.
// y [M, N] = x [M, K] · wᵀ (+ bias).
void run_linear_gemm(const Handle& h, const float* x, int64_t M, float* y) {
  const PackedWeight& w = h.w;
  const BlockKernels& bk = block_kernels();
  const DequantBlockFn dequant = w.bits == 4 ? bk.dequant4 : bk.dequant8;
  const kern::F32Kernels& fk = kern::f32_kernels();
  const int64_t K = w.K, N = w.N, G = w.G, mr_max = fk.ukernel_max_rows;
  const int64_t panels = (w.NB + 1) / 2;
  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> panel, coeffs;
    panel.resize(static_cast<size_t>(K * kern::kNR));
    coeffs.resize(static_cast<size_t>(2 * G * kRows));
    float* const bp = panel.data();
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t half = 0; half < 2 && 2 * p + half < w.NB; ++half) {
        const int64_t blk = 2 * p + half;
        const Coeffs co = block_coefficients(h, blk, coeffs.data(), coeffs.data() + G * kRows);
        dequant(w.block(blk), G, w.words_per_group, co, bp + kRows * half, kern::kNR);
      }
      const int64_t n0 = p * kern::kNR;
      const int nr = static_cast<int>(std::min<int64_t>(kern::kNR, N - n0));  // drops a missing half's columns
      const float* bias = w.bias ? w.bias + n0 : nullptr;
      for (int64_t m0 = 0; m0 < M; m0 += mr_max) {
        const int mr = static_cast<int>(std::min<int64_t>(mr_max, M - m0));
        fk.ukernel.fn(mr, K, x + m0 * K, K, bp, y + m0 * N + n0, N, nr, true, bias, nullptr);
      }
    }
  });
}

// A linear's rows, where the call has them: row m of the input at x[m] ([K] fp32), of the output at
// y[m] ([N] fp32); x0 / y0: all of them as one [M, K] / [M, N] matrix, or null where the rows lie
// apart (a batched step's sessions, Backend::execute_stacked).
struct Rows {
  const float* const* x = nullptr;
  float* const* y = nullptr;
  int64_t M = 0;
  const float* x0 = nullptr;
  float* y0 = nullptr;
};

// Checks x and sizes out to [..., N] (the call's one input and output).
Error check_and_size(const Handle& h, const Tensor& x, Tensor& out) {
  const PackedWeight& w = h.w;
  char b[96];
  if (x.dtype != DType::kFloat32 || x.dim < 1 || x.sizes[x.dim - 1] != w.K) {
    return CPU_ERROR(kInvalidArgument, "linear input must be float32 [..., %" PRId64 "], got %s", w.K,
                     x.describe(b, sizeof b));
  }
  if (out.dtype != DType::kFloat32) return CPU_ERROR(kInvalidProgram, "linear output must be float32");
  int64_t osz[kMaxDims];
  for (int d = 0; d < x.dim - 1; ++d) osz[d] = x.sizes[d];
  osz[x.dim - 1] = w.N;
  return out.resize(osz, x.dim);
}

// Appends the rows of x and out (checked and sized) to the pointer lists.
void append_rows(const PackedWeight& w, const Tensor& x, Tensor& out, std::vector<const float*>* xs,
                 std::vector<float*>* ys) {
  const int64_t rows = x.prod(0, x.dim - 1);
  const float* xp = x.ptr<float>();
  float* yp = out.ptr<float>();
  for (int64_t m = 0; m < rows; ++m) {
    xs->push_back(xp + m * w.K);
    ys->push_back(yp + m * w.N);
  }
}

Error linear_rows(const Handle& h, const Rows& r);

// The rows of n calls in one pass over the weight: one call (execute) or several sessions' at once
// (Backend::execute_stacked).
Error run_linear_calls(const Handle& h, Tensor* const* in, Tensor* const* out, size_t n) {
  // Reused by the calling thread from call to call (the workers read them through the Rows).
  thread_local std::vector<const float*> xs;
  thread_local std::vector<float*> ys;
  xs.clear();
  ys.clear();
  for (size_t j = 0; j < n; ++j) {
    EMBER_TRY(check_and_size(h, *in[j], *out[j]));
    append_rows(h.w, *in[j], *out[j], &xs, &ys);
  }
  // One call's rows are one matrix each way, which the GEMM path and the float kernels read in place.
  const bool one = n == 1;
  return linear_rows(h, Rows{xs.data(), ys.data(), static_cast<int64_t>(xs.size()), one ? in[0]->ptr<float>() : nullptr,
                             one ? out[0]->ptr<float>() : nullptr});
}

Error linear_rows(const Handle& h, const Rows& r) {
  const PackedWeight& w = h.w;
  const int64_t M = r.M, N = w.N, K = w.K, G = w.G;
  if (M == 0) return Error::ok();

  const BlockKernels& bk = block_kernels();
  // Reused by the calling thread from call to call: no allocation or zero-filling per linear.
  // The workers read it through `act`, a reference to this thread's buffers (naming the
  // thread_local inside the lambda would give each worker its own, empty one).
  thread_local Activations buffers;
  Activations& act = buffers;
  const bool int_path = h.act != Act::kFloat, per_token = h.act == Act::kInt8PerToken;
  // The float kernels read the rows as one matrix: rows that lie apart are gathered first (a few
  // rows of K values; the int paths quantize each row where it is instead).
  thread_local std::vector<float> gathered;
  const float* xf = r.x0;
  if (!int_path && xf == nullptr) {
    grow(gathered, M * K);
    for (int64_t m = 0; m < M; ++m) std::memcpy(gathered.data() + m * K, r.x[m], static_cast<size_t>(K) * sizeof(float));
    xf = gathered.data();
  }
  if (!int_path && M >= kGemmMinRows && r.y0 != nullptr) {
    run_linear_gemm(h, xf, M, r.y0);
    return Error::ok();
  }
  if (int_path) quantize_rows(r.x, M, w, per_token, &act);
  else sum_groups(xf, M, w, &act);
  // The zero point folded into the 4-bit int kernels' sums where they can (BlockKernels::int4_zinit),
  // over several rows: one row (decode) waits on memory, where it measured within noise.
  const int32_t* zinit = nullptr;
  if (M > 1 && per_token && h.foldable_ze != 0.0f && bk.int4_zinit) {
    grow(act.zinit, M * G);
    for (int64_t i = 0; i < M * G; ++i) act.zinit[i] = -static_cast<int32_t>(h.foldable_ze * act.asum[i]);
    zinit = act.zinit.data();
  }
  const IntBlockFn* ifn = w.bits == 4 ? bk.int4 : bk.int8;
  const FloatBlockFn* ffn = w.bits == 4 ? bk.float4 : bk.float8;
  // Whether run_range may take four blocks at once (int4_quad) for the tiles after a first.
  const bool quad_blocks = int_path && w.bits == 4 && w.words_per_group == 4 && bk.int4_quad[kMaxM - 1] != nullptr;
  // 4-bit weights, int8 activations, where the level has the kernels: each tile's activations are
  // broadcast once per thread into an L1-sized buffer (expand_int4) instead of once per block in the
  // kernel. The loop order is then tile by tile over a span of blocks that stays in L2 (the buffer,
  // 4 rows x 8 bytes per activation, is 4x the codes it meets per word). One row (decode) too: on a
  // Zen 3, paired in-process runs gave +1-4% decode (the kernel runs both halves of a block at once).
  const bool expanded = int_path && w.bits == 4 && K % 8 == 0 && bk.expand_int4 != nullptr;
  const int64_t span = expanded ? std::max<int64_t>(1, kSpanBytes / static_cast<int64_t>(w.block_bytes)) : 1;
  // Prefill where the level has 16-row kernels (AMX): each block meets the rows in tiles of
  // kRowTile, then the rows left over in tiles of kMaxM. On a 2-core Intel Xeon VM, SmolLM2 8da4w:
  // see the Performance section of the README.
  const bool row_tiles = int_path && w.bits == 4 && M >= kRowTile && bk.unpack_int4_tiles != nullptr &&
                         w.words_per_group % 4 == 0;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, kRows * K * M));
  const size_t coeff_begin = w.scale.offset;  // the coefficients start with the scales, after the codes
  // Where BlockKernels says it pays, each block's kernel asks for the next block of its range (into
  // L2) a share at a time as it computes (Coeffs::prefetch_word); over several rows, only the first
  // tile's pass does, the others find the block in cache.
  const bool prefetch =
      bk.prefetch_every_block || (M == 1 && bk.prefetch_next_block && !w.interleaved && w.bits == 4);
  const auto next_of = [&](int64_t blk, int64_t b1, int64_t m0) -> const uint8_t* {
    return prefetch && m0 == 0 && blk + 1 < b1 ? w.block(blk + 1) : nullptr;
  };
  // Blocks [b0, b1) against rows [r0, r1) (r0 a multiple of kMaxM), on the calling thread.
  const auto run_range = [&](int64_t b0, int64_t b1, int64_t r0, int64_t r1) {
    thread_local std::vector<float> coeffs;
    thread_local std::vector<int8_t> expanded_rows;
    coeffs.resize(static_cast<size_t>(8 * G * kRows));  // s and c of four blocks (a quad's)
    float* const cf = coeffs.data();
    float tile[kMaxM * 4 * kRows];
    // Rows [m0, m0 + mb) of block blk's results (t: row j's 16 at t + j * ld) into y, with the
    // per-token scale and zero point and the bias.
    const auto store_tile = [&](int64_t blk, int64_t m0, int mb, const float* t, int64_t ld) {
      const float* rowsum = w.has_rowsum ? reinterpret_cast<const float*>(w.block(blk) + w.rowsum_offset) : nullptr;
      const int64_t n0 = blk * kRows, rows = std::min(kRows, N - n0);
      for (int j = 0; j < mb; ++j) {
        float* yr = r.y[m0 + j] + n0;
        const float* tr = t + j * ld;
        if (per_token) {
          const float sc = act.scale[m0 + j], zp = act.zp[m0 + j];
          for (int64_t k = 0; k < rows; ++k) yr[k] = sc * (tr[k] - zp * rowsum[k]);
        } else {
          std::memcpy(yr, tr, static_cast<size_t>(rows) * sizeof(float));
        }
        if (w.bias)
          for (int64_t k = 0; k < rows; ++k) yr[k] += w.bias[n0 + k];
      }
    };
    // Blobs that store all of a block's codes first (not interleaved, as written before
    // 2026-11-26): the coefficients follow them, so the hardware prefetcher, following the codes,
    // reaches them only at the end, while the kernel needs group g's right after group g's codes:
    // without this, each group's scale load missed. Measured on a Zen 3: -3% per batched decode
    // step (B = 4); at one row (decode, memory-bound) the prefetches stalled on a full miss
    // queue instead: +1-2% decode without.
    const auto fetch_coeffs = [&](int64_t blk) {
      if (M > 1 && !w.interleaved)
        for (size_t off = coeff_begin; off < w.block_bytes; off += 64) __builtin_prefetch(w.block(blk) + off, 0, 3);
    };
    // Rows [m0, m0 + mb) against block blk: the kernel (xq: the tile's expanded activations, or
    // null; next: the block to prefetch meanwhile, or null), then the tile into y.
    const auto block_tile = [&](int64_t blk, int64_t m0, int mb, const int8_t* xq, const uint8_t* next) {
      fetch_coeffs(blk);
      Coeffs co = block_coefficients(h, blk, cf, cf + G * kRows);
      co.next_block = next;
      co.next_bytes = next != nullptr ? static_cast<int64_t>(w.block_bytes) : 0;
      const uint8_t* codes = w.block(blk);
      const float* ascale = per_token ? nullptr : act.gscale.data() + m0 * G;
      co.zinit = zinit != nullptr ? zinit + m0 * G : nullptr;
      if (xq != nullptr) {
        bk.int4_expanded[mb - 1](codes, G, w.words_per_group, co, xq, act.asum.data() + m0 * G, ascale, tile);
      } else if (int_path) {
        ifn[mb - 1](codes, G, w.words_per_group, co, act.q.data() + m0 * K, K, act.asum.data() + m0 * G, ascale, tile);
      } else {
        ffn[mb - 1](codes, G, w.words_per_group, co, xf + m0 * K, K, act.asum.data() + m0 * G, tile);
      }
      store_tile(blk, m0, mb, tile, kRows);
    };
    // Block blk against rows [m0, m1) in tiles of kRowTile with the level's 16-row kernel (between
    // tiles_begin and tiles_end; the block's codes unpacked once for all of them), then into y.
    const auto row_tiles_of = [&](int64_t blk, int64_t m0, int64_t m1, const uint8_t* next) {
      thread_local std::vector<uint8_t> unpacked;
      float rows16[kRowTile * kRows];
      const size_t bytes = static_cast<size_t>(G * w.words_per_group * 128);
      if (unpacked.size() < bytes + 64) unpacked.resize(bytes + 64);
      uint8_t* const tiles = unpacked.data() + (-reinterpret_cast<uintptr_t>(unpacked.data()) & 63);  // 64-byte aligned
      fetch_coeffs(blk);
      Coeffs co = block_coefficients(h, blk, cf, cf + G * kRows);
      co.next_block = next;
      co.next_bytes = next != nullptr ? static_cast<int64_t>(w.block_bytes) : 0;
      bk.unpack_int4_tiles(w.block(blk), G, w.words_per_group, co, tiles);
      for (int64_t m = m0; m < m1; m += kRowTile) {
        const float* ascale = per_token ? nullptr : act.gscale.data() + m * G;
        bk.int4_rows16(tiles, G, w.words_per_group, co, act.q.data() + m * K, K, act.asum.data() + m * G, ascale,
                       rows16);
        store_tile(blk, m, kRowTile, rows16, kRows);
      }
    };
    // Blocks blk and blk + 1 against rows [m0, m0 + mb), mb >= 2, with the level's pair kernel
    // (next: the blocks after them, next_bytes long, to prefetch meanwhile, or null).
    // The tile's output lines are asked for before the kernel runs, in a state this core may write:
    // the thread that consumed them last (a norm, the SwiGLU, the next linear's quantization, each
    // on the calling thread or a session's task) is often the other core, and the stores at the
    // tile's end otherwise wait to take each line back from it. On a 2-core Zen 5 VM whose vCPUs
    // were at times far apart (a line ping-ponged between two threads in ~375 ns a round trip
    // against ~100 ns at others), 4 SmolLM2 sessions batched, steps alternating with and without
    // in blocks of 16 in one process: far apart 0.917x-0.942x per step (8 runs), near 0.982x-1.011x
    // (11 runs, where that harness's A/A gave 1.004x-1.023x). Measured while those steps ran pairs;
    // on a Zen 5 they now run single blocks (BlockKernels::pair_min_rows), without this request.
    const auto pair_tile = [&](int64_t blk, int64_t m0, int mb, const uint8_t* next, int64_t next_bytes) {
      for (int j = 0; j < mb; ++j) {
        prefetch_for_write(r.y[m0 + j] + blk * kRows);
        prefetch_for_write(r.y[m0 + j] + (blk + 1) * kRows);
      }
      fetch_coeffs(blk);
      fetch_coeffs(blk + 1);
      Coeffs co0 = block_coefficients(h, blk, cf, cf + G * kRows);
      Coeffs co1 = block_coefficients(h, blk + 1, cf + 2 * G * kRows, cf + 3 * G * kRows);
      co0.zinit = co1.zinit = zinit != nullptr ? zinit + m0 * G : nullptr;
      co0.next_block = next;
      co0.next_bytes = next != nullptr ? next_bytes : 0;
      const float* ascale = per_token ? nullptr : act.gscale.data() + m0 * G;
      bk.int4_pair[mb - 1](w.block(blk), w.block(blk + 1), G, w.words_per_group, co0, co1, act.q.data() + m0 * K, K,
                           act.asum.data() + m0 * G, ascale, tile);
      store_tile(blk, m0, mb, tile, 2 * kRows);
      store_tile(blk + 1, m0, mb, tile + kRows, 2 * kRows);
    };
    // Blocks blk .. blk + 3, already in cache, against rows [m0, m0 + mb) with the level's quad kernel.
    const auto quad_tile = [&](int64_t blk, int64_t m0, int mb) {
      const uint8_t* codes[4];
      Coeffs co[4];
      for (int i = 0; i < 4; ++i) {
        co[i] = block_coefficients(h, blk + i, cf + 2 * i * G * kRows, cf + (2 * i + 1) * G * kRows);
        codes[i] = w.block(blk + i);
      }
      co[0].zinit = co[1].zinit = co[2].zinit = co[3].zinit = zinit != nullptr ? zinit + m0 * G : nullptr;
      const float* ascale = per_token ? nullptr : act.gscale.data() + m0 * G;
      bk.int4_quad[mb - 1](codes, G, co, act.q.data() + m0 * K, K, act.asum.data() + m0 * G, ascale, tile);
      for (int i = 0; i < 4; ++i) store_tile(blk + i, m0, mb, tile + i * kRows, 4 * kRows);
    };
    if (expanded) {
      grow(expanded_rows, kMaxM * K * 8);
      for (int64_t s0 = b0; s0 < b1; s0 += span) {
        const int64_t s1 = std::min(b1, s0 + span);
        for (int64_t m0 = r0; m0 < r1; m0 += kMaxM) {
          const int mb = static_cast<int>(std::min<int64_t>(kMaxM, r1 - m0));
          bk.expand_int4(act.q.data() + m0 * K, K, mb, K, expanded_rows.data());
          for (int64_t blk = s0; blk < s1; ++blk) block_tile(blk, m0, mb, expanded_rows.data(), next_of(blk, b1, m0));
        }
      }
      return;
    }
    // From BlockKernels::pair_min_rows rows on, 4-bit int blocks go in pairs where the level has the
    // kernel (each activation word broadcast once for 32 weight rows). SmolLM2 `8da4w-kv8` on a
    // 2-core Intel Xeon VM (VNNI), steps alternating in one process with single blocks: batched
    // decode of 2 sessions -2.7%, 3 -2.1%, 4 -0.4% to -2.2% (four runs); a 128-token prefill -1%. On
    // a Zen 5 single blocks win up to 16 rows (figures at pair_min_rows).
    if (row_tiles && r1 - r0 >= kRowTile) {  // 16-row tiles first; the loops below take the rows left
      const int64_t tiled_end = r0 + (r1 - r0) / kRowTile * kRowTile;
      bk.tiles_begin();
      for (int64_t blk = b0; blk < b1; ++blk) row_tiles_of(blk, r0, tiled_end, next_of(blk, b1, r0));
      bk.tiles_end();
      r0 = tiled_end;
    }
    const bool pairs =
        int_path && w.bits == 4 && r1 - r0 >= 2 && M >= bk.pair_min_rows && bk.int4_pair[kMaxM - 1] != nullptr;
    // The range's first block (a pair's two) at once: no kernel asked for it while another computed.
    // Zen 5 VM, SmolLM2 `8da4w-kv8`, calls alternating in one process: 4 sessions' 4-row linears -0.2% to
    // -4.2% (six runs, -2% on average), one session's -0.7% to -0.9% (three runs), a 16- and a 64-token
    // prefill's -4.5% and -2%.
    if (prefetch && b0 < b1) {
      const size_t bytes = static_cast<size_t>(std::min<int64_t>(pairs ? 2 : 1, b1 - b0)) * w.block_bytes;
      for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(w.block(b0) + off, 0, 3);
    }
    // Over more than one tile of rows, where the level has the quad kernel (4-bit int, groups of 32):
    // four blocks at a time, the first tile one block after the other (streaming them in, each asking
    // for the next), the other tiles with the quad kernel on the four blocks, then in L1. SmolLM2
    // `8da4w-kv8` on a 2-core Zen 5 VM, forwards alternating in one process with single blocks and pairs
    // as before (12 rounds): prefills of 12, 16, 32 and 128 tokens -8.4%, -9.0%, -9.5% and -6.2% (8:
    // within noise), a batched step with a newcomer's 12-token turn among 3 decodes -7.8%; `gguf-a8`
    // (per-group activation scales, the general group step; 10 rounds): 12, 32 and 128 tokens -6.3%,
    // -3.8%, -1.5%.
    const bool quads = quad_blocks && r1 - r0 > kMaxM;
    for (int64_t blk = b0; blk < b1;) {
      if (quads && blk + 3 < b1) {
        for (int64_t i = 0; i < 4; ++i) block_tile(blk + i, r0, kMaxM, nullptr, next_of(blk + i, b1, r0));
        for (int64_t m0 = r0 + kMaxM; m0 < r1; m0 += kMaxM) {
          quad_tile(blk, m0, static_cast<int>(std::min<int64_t>(kMaxM, r1 - m0)));
        }
        blk += 4;
        continue;
      }
      if (pairs && blk + 1 < b1) {
        const uint8_t* next = prefetch && blk + 2 < b1 ? w.block(blk + 2) : nullptr;
        const int64_t next_bytes = std::min<int64_t>(2, b1 - blk - 2) * static_cast<int64_t>(w.block_bytes);
        for (int64_t m0 = r0; m0 < r1; m0 += kMaxM) {
          const int mb = static_cast<int>(std::min<int64_t>(kMaxM, r1 - m0));
          if (mb >= 2) {
            pair_tile(blk, m0, mb, m0 == 0 ? next : nullptr, next_bytes);
          } else {  // a last tile of one row (m0 > 0: the first tile asked for the next blocks)
            block_tile(blk, m0, mb, nullptr, nullptr);
            block_tile(blk + 1, m0, mb, nullptr, nullptr);
          }
        }
        blk += 2;
        continue;
      }
      for (int64_t m0 = r0; m0 < r1; m0 += kMaxM) {
        block_tile(blk, m0, static_cast<int>(std::min<int64_t>(kMaxM, r1 - m0)), nullptr, next_of(blk, b1, m0));
      }
      ++blk;
    }
  };
  // Decode (one row) is memory-bound: the blocks split in one range per thread, except over the
  // largest weights (the lm_head), which run in items as below. There one thread's half took ~100 us
  // longer than the other's (AVX2 SmolLM2 decode: a third of the step's waiting at loop ends);
  // decode steps alternating in one process, against one range per thread: -0.6% and -0.8% (AVX2),
  // -0.6% and -1.5% (VNNI).
  // Where every block asks for the next one (prefetch_every_block), one tile of rows (a batched
  // decode step, M <= kMaxM) splits that way too: the requests stop at the end of a range, so items
  // left a stall at each of theirs. On a 2-core Intel Xeon VM, SmolLM2 steps alternating in one
  // process against items: 4 sessions batched -8.3% (avx512vnni), -9.0% (avx2), -5.3% (`gguf-a8`);
  // 2 sessions -8.6%, 3 -7.0%; items whose requests ran on into the next item gained half of that.
  const bool one_range = M == 1 || (M <= kMaxM && bk.prefetch_every_block);
  if (one_range && w.NB < kDecodeItemsMinBlocks) {
    parallel_for(w.NB, grain, [&](int64_t b0, int64_t b1) { run_range(b0, b1, 0, M); });
    return Error::ok();
  }
  // Several rows (batched steps, prefill): compute-bound work. Each thread runs its own part of the
  // blocks (the weights it reads, as above) in items, then takes the items of another part that
  // have not started yet: a thread running slower for a while leaves the rest to the faster one. On
  // a 2-core Zen 4 VM, one thread's half of a 4-bit prefill linear took 7% longer than the other's
  // (which waited 12% of an AVX2 prefill at loop ends). In-process alternating runs against one
  // range per thread: 128-token prefill +3.6% and +6.8% (AVX2), +1.3% (VNNI); a 4-session batched
  // step -5.1% (VNNI), -3.8% (AVX2); decode (one row, memory-bound) lost 3% over every linear, so
  // only its largest run this way.
  // Expanded over several tiles: items of a span against one tile, span by span (the order above).
  // Otherwise an eighth of a part's blocks against every tile (a block stays in L1 through them).
  const bool by_span = expanded && M > kMaxM;
  // Items of whole quads where several tiles may run them (run_range): an eighth of SmolLM2's q/k/v,
  // o and down parts is 2-3 blocks. Quads in gate/up alone gave a third of the gain above.
  const bool quad_items = quad_blocks && M > kMaxM;
  const int64_t per_step = by_span ? (M + kMaxM - 1) / kMaxM : 1;
  const int parts = static_cast<int>(std::min<int64_t>({w.NB, kMaxParts, std::max(1, get_num_threads())}));
  std::atomic<int64_t> next_item[kMaxParts];
  for (int p = 0; p < parts; ++p) next_item[p].store(0, std::memory_order_relaxed);
  const auto part_blocks = [&](int p, int64_t* b0, int64_t* b1) {
    *b0 = w.NB * p / parts;
    *b1 = w.NB * (p + 1) / parts;
  };
  parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t own = p0; own < p1; ++own) {
      for (int i = 0; i < parts; ++i) {  // its own part first, then the others in turn
        const int p = static_cast<int>((own + i) % parts);
        int64_t b0, b1;
        part_blocks(p, &b0, &b1);
        const int64_t step = by_span ? span : quad_items ? std::max<int64_t>(4, ((b1 - b0) / 8 + 3) & ~int64_t{3})
                                                         : std::max<int64_t>(1, (b1 - b0) / 8);
        const int64_t items = (b1 - b0 + step - 1) / step * per_step;
        for (int64_t i; (i = next_item[p].fetch_add(1, std::memory_order_relaxed)) < items;) {
          const int64_t s0 = b0 + i / per_step * step, t = i % per_step;
          const int64_t r0 = by_span ? t * kMaxM : 0, r1 = by_span ? std::min(M, r0 + kMaxM) : M;
          run_range(s0, std::min(b1, s0 + step), r0, r1);
        }
      }
    }
  });
  return Error::ok();
}

Error run_embedding(const Handle& h, KernelArgs args) {
  const PackedWeight& w = h.w;
  Tensor& idx = args[0].tensor;
  Tensor& out = args[1].tensor;
  EMBER_TRY(kern::check_index_dtype(idx, "ember.cpu embedding indices"));
  if (idx.dim >= kMaxDims) return CPU_ERROR(kInvalidArgument, "embedding indices of rank %d leave no room for the row", idx.dim);
  if (out.dtype != DType::kFloat32) return CPU_ERROR(kInvalidProgram, "embedding output must be float32");
  const int64_t T = idx.numel();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = kern::index_at(idx, t);
    if (n < 0 || n >= w.N) {
      return CPU_ERROR(kInvalidArgument, "embedding index %" PRId64 " (at position %" PRId64 ") is out of range for a table of %" PRId64 " rows",
                       n, t, w.N);
    }
  }
  int64_t osz[kMaxDims];
  for (int d = 0; d < idx.dim; ++d) osz[d] = idx.sizes[d];
  osz[idx.dim] = w.K;
  EMBER_TRY(out.resize(osz, idx.dim + 1));
  float* y = out.ptr<float>();
  kern::parallel_rows(T, w.K, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) dequantize_row(w, kern::index_at(idx, t), y + t * w.K);
  });
  return Error::ok();
}

class CpuBackend final : public Backend {
 public:
  Result<void*> init(const uint8_t* blob, size_t size, const CompileSpec* specs, size_t num_specs) override {
    auto h = std::make_unique<Handle>();
    EMBER_TRY(parse_specs(specs, num_specs, h.get()));
    Result<PackedWeight> w = parse_packed_weight(blob, size);
    if (!w.ok()) return w.error();
    h->w = w.value();
    h->coeffs_in_place = coeffs_in_place(h->w);
    h->foldable_ze = foldable_ze(h->w, h->coeffs_in_place);
    if (h->op == Op::kEmbedding && h->act != Act::kFloat) {
      return CPU_ERROR(kInvalidProgram, "an embedding takes no act_quant compile spec");
    }
    if (h->act == Act::kInt8PerToken && !h->w.has_rowsum) {
      return CPU_ERROR(kInvalidProgram, "an int8-activation linear needs the weight's row sums, which this blob lacks");
    }
    return static_cast<void*>(h.release());
  }

  Error execute(void* handle, KernelContext&, KernelArgs args) override {
    const Handle& h = *static_cast<const Handle*>(handle);
    if (args.n != 2 || !args[0].is_tensor() || !args[1].is_tensor()) {
      return CPU_ERROR(kInvalidProgram, "a delegate call takes one input and one output tensor, got %d values", args.n);
    }
    if (h.op == Op::kEmbedding) return run_embedding(h, args);
    Tensor* in = &args[0].tensor;
    Tensor* out = &args[1].tensor;
    return run_linear_calls(h, &in, &out, 1);
  }

  Error execute_stacked(void* handle, KernelContext&, Tensor* const* in, Tensor* const* out, size_t n) override {
    const Handle& h = *static_cast<const Handle*>(handle);
    if (h.op != Op::kLinear) return CPU_ERROR(kNotSupported, "only linears stack their rows");
    return run_linear_calls(h, in, out, n);
  }

  void destroy(void* handle) override { delete static_cast<Handle*>(handle); }

  // A linear's rows are independent: the int paths quantize each row alone and sum it exactly;
  // the float path gives the same bits for up to kGemmMinRows - 1 rows (the block kernels),
  // and the GEMM path above that sums in another order.
  int64_t max_stacked_rows(const void* handle) const override {
    const Handle& h = *static_cast<const Handle*>(handle);
    if (h.op != Op::kLinear) return 0;
    return h.act == Act::kFloat ? kGemmMinRows - 1 : std::numeric_limits<int64_t>::max();
  }

  void describe_kernels(std::vector<KernelPath>& out) const override {
    const BlockKernels& k = block_kernels();
    out.push_back({"cpu.linear_int8_activations", kernel_isa_name(k.int_isa)});
    out.push_back({"cpu.linear_float_activations", kernel_isa_name(k.float_isa)});
    out.push_back({"cpu.activation_quant", kernel_isa_name(k.quant_isa)});
    out.push_back({"cpu.dequantize_for_gemm", kernel_isa_name(k.dequant_isa)});
    // Prefill's 16-row tiles; without their kernels, the rows run on the int kernels above.
    out.push_back({"cpu.linear_int8_row_tiles", kernel_isa_name(k.int4_rows16 ? k.row_tile_isa : k.int_isa)});
    out.push_back({"cpu.embedding", kernel_isa_name(KernelIsa::kPortable)});
  }
};

}  // namespace
}  // namespace cpu

void ember_register_backend_cpu(BackendRegistry& registry) {
  static cpu::CpuBackend backend;
  registry.add("ember.cpu", &backend);
}

}  // namespace ember
