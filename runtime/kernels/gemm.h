// fp32 matrix products for the portable kernels (linear, mm, bmm, addmm, matmul).
//
// Each function runs the version of ember::kernel_isa() (ember/runtime/cpu.h), from the table in
// f32_kernels.h: AVX-512, AVX2 or portable C++.
#pragma once

#include <cstdint>

#include "ember/runtime/dtype.h"

namespace ember {
namespace kern {

// C[M, N] = A[M, K] · op(B) (+ bias[N]); A, C, bias fp32 row-major with leading dims lda/ldc.
// B is any float dtype (fp32/fp16/bf16; converted while packing):
//   b_nk = true:  B is [N, K] (ldb = row stride), i.e. C = A · Bᵀ (linear weights)
//   b_nk = false: B is [K, N] (ldb = row stride), i.e. C = A · B
// Runs in parallel over the thread pool. M == 1 with fp32 [N, K] B streams B once (GEMV).
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const void* B, DType bdt, int64_t ldb, bool b_nk,
          float* C, int64_t ldc, const float* bias);

// y[N] = W[N, K] · x[K] (+ bias) for fp32 W: split over threads, weight streamed once.
void gemv_nk_f32(int64_t N, int64_t K, const float* x, const float* W, int64_t ldw, float* y, const float* bias);

// Single-threaded (for use inside a parallel task): y[n] = W[n, :] · x for n in [n0, n1); fp32 W
// rows of K values with row stride ldw. rows_in_l1: W was just written to a small buffer (no
// prefetching of the rows that follow).
void gemv_rows_f32(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1, float* y,
                   bool rows_in_l1 = false);

// Single-threaded: s[j] = exp(s[j] * scale - m) with m = max_j(s[j] * scale); returns the sum of
// the exponentials and stores m in *max_out (the pieces of a softmax that can be merged).
float scaled_softmax_f32(float* s, int64_t n, float scale, float* max_out);

// Single-threaded: out[0..D) += sum_j p[j] * V[j * ldv + 0..D) for j in [0, n) (attention's P·V
// for one query row; `out` stays in registers for D <= 128).
void weighted_rows_sum_f32(const float* p, const float* V, int64_t ldv, int64_t n, int64_t D, float* out);

// y[i] = x[i] * sigmoid(x[i]) for contiguous fp32 (vectorized, parallel when large; y may be x).
void silu_f32(const float* x, float* y, int64_t n);
// y[0..n) = x * rsqrt(mean(x^2) + eps) [* w] for one row, fp32 (w may be null; y may equal x).
void rms_norm_row_f32(const float* x, const float* w, int64_t n, float eps, float* y);

// Dot product of n fp32 values (vectorized for the current ISA).
float dot_f32(const float* a, const float* b, int64_t n);
// y[0..n) += s * x[0..n)
void axpy_f32(float s, const float* x, float* y, int64_t n);

}  // namespace kern
}  // namespace ember
