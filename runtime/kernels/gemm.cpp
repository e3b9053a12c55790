// fp32 GEMV / GEMM drivers over the per-ISA table (f32_kernels.h). See gemm.h.
//
// GEMV (M = 1, B = [N, K] fp32): each thread takes a contiguous range of output rows and
// reads it front to back, one row at a time, so x stays in L1 and the weight is read exactly
// once, as one sequential stream per thread, at memory bandwidth.
// GEMM: B is packed per (32-column panel, KC-deep block) into a contiguous [KC, 32] tile
// (converting fp16/bf16 on the way), then a register-blocked micro-kernel sweeps all rows of A
// over it. Threads split the column panels (or the rows when panels are few).
#include "gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ember/runtime/thread_pool.h"
#include "f32_kernels.h"
#include "kernel_utils.h"

namespace ember {
namespace kern {

const F32Kernels& f32_kernels() {
  static const F32Kernels table = [] {
    F32Kernels t;
    add_f32_portable(t);
    const KernelIsa isa = kernel_isa();
    if (static_cast<int>(isa) >= static_cast<int>(KernelIsa::kAvx2)) add_f32_avx2(t);
    if (static_cast<int>(isa) >= static_cast<int>(KernelIsa::kAvx512)) add_f32_avx512(t);
    if (static_cast<int>(isa) >= static_cast<int>(KernelIsa::kAvx512Vnni)) add_f32_avx512vnni(t);
    return t;
  }();
  return table;
}

void describe_f32_kernels(std::vector<KernelPath>& out) {
  const F32Kernels& t = f32_kernels();
  const auto add = [&out](const char* name, KernelIsa isa) { out.push_back({name, kernel_isa_name(isa)}); };
  add("f32.dot", t.dot.isa);
  add("f32.axpy", t.axpy.isa);
  add("f32.gemv", t.gemv_rows.isa);
  add("f32.gemv_short_rows", t.gemv_short_rows.isa);
  add("f32.gemv_cached_rows", t.gemv_cached_rows.isa);
  add("f32.gemm_ukernel", t.ukernel.isa);
  add("f32.softmax", t.softmax.isa);
  add("f32.silu", t.silu.isa);
  add("f32.weighted_rows_sum", t.weighted_rows_sum.isa);
  add("f32.half_to_float", t.half_to_float.isa);
  add("f32.scaled_i8_to_float", t.scaled_i8_to_float.isa);
  add("f32.i8_scores", t.i8_scores.isa);
  add("f32.i8_weighted_rows", t.i8_weighted_rows.isa);
  add("f32.argmax", t.argmax.isa);
}

namespace {

constexpr int kMR = 6;
constexpr int64_t kKC = 256;

inline float load_float(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Packs B columns [n0, n0+nr) x rows [k0, k0+kc) into Bp[kc][kNR] (zero padded).
void pack_b(const void* B, DType bdt, int64_t ldb, bool b_nk, int64_t n0, int nr, int64_t k0, int64_t kc, float* Bp) {
  if (nr < kNR) std::memset(Bp, 0, sizeof(float) * static_cast<size_t>(kc) * kNR);
  if (b_nk && bdt == DType::kFloat32) {
    // k outer: contiguous writes, nr sequential read streams (cheaper than strided writes).
    const float* src = static_cast<const float*>(B) + n0 * ldb + k0;
    for (int64_t k = 0; k < kc; ++k) {
      float* dst = Bp + k * kNR;
      for (int j = 0; j < nr; ++j) dst[j] = src[j * ldb + k];
    }
  } else if (b_nk) {
    for (int j = 0; j < nr; ++j) {
      const int64_t row = (n0 + j) * ldb + k0;
      for (int64_t k = 0; k < kc; ++k) Bp[k * kNR + j] = load_float(B, bdt, row + k);
    }
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      const int64_t row = (k0 + k) * ldb + n0;
      if (bdt == DType::kFloat32) {
        std::memcpy(Bp + k * kNR, static_cast<const float*>(B) + row, sizeof(float) * static_cast<size_t>(nr));
      } else {
        for (int j = 0; j < nr; ++j) Bp[k * kNR + j] = load_float(B, bdt, row + j);
      }
    }
  }
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) { return f32_kernels().dot.fn(a, b, n); }

void axpy_f32(float s, const float* x, float* y, int64_t n) { f32_kernels().axpy.fn(s, x, y, n); }

void gemv_rows_f32(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1, float* y,
                   bool rows_in_l1) {
  const F32Kernels& t = f32_kernels();
  const GemvRowsFn fn = K > kShortRowK ? t.gemv_rows.fn : rows_in_l1 ? t.gemv_cached_rows.fn : t.gemv_short_rows.fn;
  fn(x, W, ldw, K, n0, n1, y, nullptr);
}

void rms_norm_row_f32(const float* x, const float* w, int64_t n, float eps, float* y) {
  if (n <= 0) return;
  const float rstd = 1.0f / std::sqrt(dot_f32(x, x, n) / static_cast<float>(n) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * rstd * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * rstd;
  }
}

void silu_f32(const float* x, float* y, int64_t n) {
  const SiluFn fn = f32_kernels().silu.fn;
  if (n >= (1 << 15)) parallel_for(n, 1 << 13, [&](int64_t b, int64_t e) { fn(x + b, y + b, e - b); });
  else fn(x, y, n);
}

float scaled_softmax_f32(float* s, int64_t n, float scale, float* max_out) {
  return f32_kernels().softmax.fn(s, n, scale, max_out);
}

void weighted_rows_sum_f32(const float* p, const float* V, int64_t ldv, int64_t n, int64_t D, float* out) {
  f32_kernels().weighted_rows_sum.fn(p, V, ldv, n, D, out);
}

void gemv_nk_f32(int64_t N, int64_t K, const float* x, const float* W, int64_t ldw, float* y, const float* bias) {
  const GemvRowsFn fn = f32_kernels().gemv_rows.fn;
  // Rows per task: whole 16-row groups (so no two threads write one cache line of y), and
  // enough bytes (>= ~64 KiB) to be worth a thread.
  constexpr int64_t kGroup = 16;
  const int64_t groups = (N + kGroup - 1) / kGroup;
  const int64_t grain = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, kGroup * K * 4));
  parallel_for(groups, grain, [&](int64_t gb, int64_t ge) {
    fn(x, W, ldw, K, gb * kGroup, std::min(N, ge * kGroup), y, bias);
  });
}

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const void* B, DType bdt, int64_t ldb, bool b_nk,
          float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = bias ? bias[n] : 0.0f;
    return;
  }
  if (b_nk && bdt == DType::kFloat32 && M <= 2) {
    for (int64_t m = 0; m < M; ++m) gemv_nk_f32(N, K, A + m * lda, static_cast<const float*>(B), ldb, C + m * ldc, bias);
    return;
  }
  const UkernelFn uk = f32_kernels().ukernel.fn;
  if (b_nk && bdt == DType::kFloat32) {
    // Linear layers (prefill): compute Cᵀ = W · Aᵀ so the weights are read in place, once, with
    // no packing; only the small activation matrix is packed (transposed into 32-wide panels).
    const float* W = static_cast<const float*>(B);
    const int64_t mpanels = (M + kNR - 1) / kNR;
    std::vector<float> Ap(static_cast<size_t>(mpanels * K * kNR));
    parallel_for(mpanels, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        pack_b(A, DType::kFloat32, lda, true, p * kNR, static_cast<int>(std::min<int64_t>(kNR, M - p * kNR)), 0, K,
               Ap.data() + p * K * kNR);
      }
    });
    const int64_t mr_max = f32_kernels().ukernel_max_rows;
    const int64_t nblocks = (N + mr_max - 1) / mr_max;
    auto run_t = [&](int64_t b0, int64_t b1) {
      float tile[kMaxUkernelRows * kNR];
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t n0 = blk * mr_max;
        const int mr = static_cast<int>(std::min<int64_t>(mr_max, N - n0));
        for (int64_t p = 0; p < mpanels; ++p) {
          const int nr = static_cast<int>(std::min<int64_t>(kNR, M - p * kNR));
          // The first panel streams this block of W from memory; meanwhile fetch the next block.
          const float* next = p == 0 && blk + 1 < b1 ? W + (n0 + mr_max) * ldb : nullptr;
          uk(mr, K, W + n0 * ldb, ldb, Ap.data() + p * K * kNR, tile, kNR, nr, true, nullptr, next);
          for (int j = 0; j < nr; ++j) {
            float* crow = C + (p * kNR + j) * ldc + n0;
            for (int i = 0; i < mr; ++i) crow[i] = tile[i * kNR + j] + (bias ? bias[n0 + i] : 0.0f);
          }
        }
      }
    };
    if (M * N * K < (1 << 18)) run_t(0, nblocks);
    else parallel_for(nblocks, 1, run_t);
    return;
  }
  const int64_t panels = (N + kNR - 1) / kNR;
  const int64_t kc_max = std::min(K, kKC);
  // One task = a range of panels x a range of row blocks.
  auto run = [&](int64_t p0, int64_t p1, int64_t m0, int64_t m1) {
    std::vector<float> Bp(static_cast<size_t>(kc_max) * kNR);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n0 = p * kNR;
      const int nr = static_cast<int>(std::min<int64_t>(kNR, N - n0));
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kc = std::min(kKC, K - k0);
        pack_b(B, bdt, ldb, b_nk, n0, nr, k0, kc, Bp.data());
        for (int64_t m = m0; m < m1; m += kMR) {
          const int mr = static_cast<int>(std::min<int64_t>(kMR, m1 - m));
          uk(mr, kc, A + m * lda + k0, lda, Bp.data(), C + m * ldc + n0, ldc, nr, k0 == 0, bias ? bias + n0 : nullptr,
             nullptr);
        }
      }
    }
  };
  const int64_t work = M * N * K;
  const int threads = get_num_threads();
  if (work < (1 << 18) || threads <= 1) {
    run(0, panels, 0, M);
    return;
  }
  if (panels >= 2 * threads || M < 2 * kMR) {
    parallel_for(panels, 1, [&](int64_t b, int64_t e) { run(b, e, 0, M); });
  } else {
    const int64_t mblocks = (M + kMR - 1) / kMR;
    parallel_for(mblocks, 1, [&](int64_t b, int64_t e) { run(0, panels, b * kMR, std::min(M, e * kMR)); });
  }
}

}  // namespace kern
}  // namespace ember
