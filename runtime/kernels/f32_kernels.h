// The per-ISA table of fp32 building blocks behind gemm.h (GEMV rows, the GEMM micro-kernel,
// dot/axpy, softmax pieces, SiLU, attention's P·V).
//
// f32_kernels() is built once, for ember::kernel_isa(): the portable entries first, then each
// level up to the chosen one overwrites the entries it implements (f32_portable.cpp,
// f32_avx2.cpp, f32_avx512.cpp), recording its level per entry. Callers only go through the
// table; no kernel file tests the ISA itself.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/runtime/cpu.h"

namespace ember {
namespace kern {

constexpr int kNR = 32;              // GEMM micro-kernel panel width (columns)
constexpr int kMaxUkernelRows = 12;  // the most rows any table's micro-kernel takes per call

// y[n] = W[n, :K] · x (+ bias[n]) for n in [n0, n1); W rows of stride ldw. Single-threaded.
using GemvRowsFn = void (*)(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1, float* y,
                            const float* bias);
// C[mr, nr] (+)= A[mr, kc] · Bp[kc, kNR] (+ bias when `first`); mr <= ukernel_max_rows.
// next_a: the A block the next call reads (to prefetch while this one computes), or null.
using UkernelFn = void (*)(int mr, int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc,
                           int nr, bool first, const float* bias, const float* next_a);
using DotFn = float (*)(const float* a, const float* b, int64_t n);
using AxpyFn = void (*)(float s, const float* x, float* y, int64_t n);
// s[j] = exp(s[j] * scale - m), m = max_j(s[j] * scale) -> *max_out; returns sum_j s[j].
using SoftmaxFn = float (*)(float* s, int64_t n, float scale, float* max_out);
// y[i] = x[i] * sigmoid(x[i]) (y may be x). Single-threaded.
using SiluFn = void (*)(const float* x, float* y, int64_t n);
// out[0..D) += sum_{j<n} p[j] * V[j * ldv + 0..D).
using WeightedRowsSumFn = void (*)(const float* p, const float* V, int64_t ldv, int64_t n, int64_t D, float* out);
// dst[i] = fp16 src[i] as fp32 (exact).
using HalfToFloatFn = void (*)(const uint16_t* src, float* dst, int64_t n);
// dst[r * D + d] = float(src[r * D + d]) * scales[r] for r < rows, d < D (the int8 KV cache's rows).
using ScaledI8ToFloatFn = void (*)(const int8_t* src, const float* scales, int64_t rows, int64_t D, float* dst);
// Cache lines a kernel asks for (prefetcht2, into L2) while it computes, a few per step of its
// loop, so that fetching them overlaps its math: decode attention hands the int8 cache kernels the
// rows it reads next (attention.cpp, TaskPrefetch), K's rows and V's side by side (two sequential
// streams, asked for in turn). Asked for in one burst instead, the requests fill the core's
// line-fill buffers and stall it until the lines arrive. Nothing here changes a result.
struct PrefetchLines {
  const char* p[2] = {nullptr, nullptr};
  int64_t lines[2] = {0, 0};  // 64-byte lines from p[i]

  int64_t total() const { return lines[0] + lines[1]; }
  // Lines per step to ask for all of them in `steps` steps.
  int64_t per(int64_t steps) const { return steps > 1 ? (total() + steps - 1) / steps : total(); }
  // Asks for the next n lines (or as many as are left), from the two spans in turn.
  void issue(int64_t n) {
    while (n > 0 && total() > 0) {
      for (int i = 0; i < 2 && n > 0; ++i) {
        if (lines[i] == 0) continue;
        __builtin_prefetch(p[i], 0, 1);
        p[i] += 64;
        --lines[i];
        --n;
      }
    }
  }
  void issue_rest() { issue(total()); }
};

// The int8 KV cache read in place by G query heads at once (decode attention, one kv head's
// group): K and V are n rows of D int8 codes, row j worth codes * ks[j].
// Scores take the queries in int8 too, each head's row quantized as the cache's rows are
// (quantize_kv_row): q8 [G, D] codes, qs[G] their scales. Then
//   s[g * lds + j] = float(sum_d q8[g * D + d] * K[j * D + d]) * (qs[g] * ks[j])   for g < G, j < n,
// the integer sum exact on every path (D <= kMaxI8ScoresDim keeps it below 2^24, so fp32 paths
// hold it exactly too): every ISA gives the same bits.
// Both kernels also ask for the cache lines `pf` names (into L2), spread over the rows they walk,
// all of them asked for by the time they return (PrefetchLines).
constexpr int64_t kMaxI8ScoresDim = 1024;
using I8ScoresFn = void (*)(const int8_t* q8, const float* qs, int64_t G, const int8_t* K, const float* ks, int64_t n,
                            int64_t D, float* s, int64_t lds, PrefetchLines pf);
// P·V: out[g * ldo + 0..D) += sum_{j<n} p[g * ldp + j] * scales[j] * V[j * D + 0..D) for g < G, with
// the weights rounded to int16 per block of rows and the products summed in integers (i8_pv.h):
// every level gives the same bits. p's weights are >= 0 (a softmax's exponentials); D <= kMaxI8ScoresDim.
using I8WeightedRowsFn = void (*)(const float* p, int64_t ldp, int64_t G, const int8_t* V, const float* scales,
                                  int64_t n, int64_t D, float* out, int64_t ldo, PrefetchLines pf);

// The first index of the largest value of x[0..n) (ties: the lowest index; NaN never chosen), or
// -1 when no value is above -inf. Every level gives the same index.
using ArgmaxFn = int64_t (*)(const float* x, int64_t n);

template <typename Fn>
struct Entry {
  Fn fn = nullptr;
  KernelIsa isa = KernelIsa::kPortable;
  void set(Fn f, KernelIsa level) {
    fn = f;
    isa = level;
  }
};

struct F32Kernels {
  Entry<DotFn> dot;
  Entry<AxpyFn> axpy;
  Entry<GemvRowsFn> gemv_rows;        // long rows (weights): one sequential stream per thread
  Entry<GemvRowsFn> gemv_short_rows;  // rows of K <= kShortRowK (attention scores)
  // The same for rows already in L1 (a cache block converted to fp32 into a buffer): the AVX2
  // version then skips the prefetch of the next rows from memory. On a Zen 3, decode at ~1,900
  // with an int8 cache: -3 to -5% per token without the prefetch, an fp32 cache read in place
  // unchanged either way.
  Entry<GemvRowsFn> gemv_cached_rows;
  Entry<UkernelFn> ukernel;
  int ukernel_max_rows = 6;  // rows per micro-kernel call in the weights-in-place GEMM (<= kMaxUkernelRows)
  Entry<SoftmaxFn> softmax;
  Entry<SiluFn> silu;
  Entry<WeightedRowsSumFn> weighted_rows_sum;
  Entry<HalfToFloatFn> half_to_float;  // AVX2 level: only when the CPU has F16C
  Entry<ScaledI8ToFloatFn> scaled_i8_to_float;
  // Decode attention over an int8 cache: each code is widened in registers and used by every
  // query head of the group (no fp32 copy of the rows, no per-element scale multiply).
  Entry<I8ScoresFn> i8_scores;
  // Prefill over an int8 cache (attention_prefill.cpp) takes its scores from i8_scores instead of
  // dequantizing the keys for the fp32 micro-kernel: set by the levels where that is faster. On a
  // Zen 4, 1,920-token prefill of SmolLM2: +6-19% with VNNI, none to -7% with the AVX2 kernels.
  bool i8_scores_for_prefill = false;
  Entry<I8WeightedRowsFn> i8_weighted_rows;
  // Greedy sampling over a row of logits (ember/runtime/logits.h).
  Entry<ArgmaxFn> argmax;
};

constexpr int64_t kShortRowK = 256;

// Each level's file fills the entries it has (the portable one fills all).
void add_f32_portable(F32Kernels& t);
void add_f32_avx2(F32Kernels& t);    // no-op on non-x86 builds
void add_f32_avx512(F32Kernels& t);  // no-op on non-x86 builds
void add_f32_avx512vnni(F32Kernels& t);  // no-op on non-x86 builds

// The table for ember::kernel_isa(), built on first use (thread-safe).
const F32Kernels& f32_kernels();
// Appends ("f32.<entry>", level) for every entry of the table.
void describe_f32_kernels(std::vector<KernelPath>& out);

}  // namespace kern
}  // namespace ember
