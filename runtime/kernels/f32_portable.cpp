// Portable C++ versions of every fp32 table entry (any CPU). See f32_kernels.h.
#include <algorithm>
#include <cmath>
#include <limits>

#include "f32_kernels.h"
#include "i8_pv.h"
#include "kernel_utils.h"

namespace ember {
namespace kern {
namespace {

inline float dot_portable(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

void gemv_rows_portable(const float* x, const float* W, int64_t ldw, int64_t K, int64_t n0, int64_t n1, float* y,
                        const float* bias) {
  for (int64_t n = n0; n < n1; ++n) y[n] = dot_portable(x, W + n * ldw, K) + (bias ? bias[n] : 0.0f);
}

template <int MR>
inline void ukernel_generic(int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc, int nr,
                            bool first, const float* bias) {
  float c[MR][kNR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNR; ++j) c[i][j] = 0;
  for (int64_t k = 0; k < kc; ++k) {
    const float* b = Bp + k * kNR;
    for (int i = 0; i < MR; ++i) {
      const float a = A[i * lda + k];
      for (int j = 0; j < kNR; ++j) c[i][j] += a * b[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* crow = C + i * ldc;
    for (int j = 0; j < nr; ++j) {
      const float base = first ? (bias ? bias[j] : 0.0f) : crow[j];
      crow[j] = base + c[i][j];
    }
  }
}

void ukernel_portable(int mr, int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc, int nr,
                      bool first, const float* bias, const float* /*next_a*/) {
  switch (mr) {
    case 6: ukernel_generic<6>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    case 5: ukernel_generic<5>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    case 4: ukernel_generic<4>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    case 3: ukernel_generic<3>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    case 2: ukernel_generic<2>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
    default: ukernel_generic<1>(kc, A, lda, Bp, C, ldc, nr, first, bias); break;
  }
}

void axpy_portable(float s, const float* x, float* y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] += s * x[k];
}

float softmax_portable(float* s, int64_t n, float scale, float* max_out) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    s[j] *= scale;
    mx = std::max(mx, s[j]);
  }
  float total = 0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = exp_approx(s[j] - mx);
    total += s[j];
  }
  *max_out = mx;
  return total;
}

void silu_portable(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + exp_approx(-x[i]));
}

void weighted_rows_sum_portable(const float* p, const float* V, int64_t ldv, int64_t n, int64_t D, float* out) {
  for (int64_t j = 0; j < n; ++j) axpy_portable(p[j], V + j * ldv, out, D);
}

void scaled_i8_to_float_portable(const int8_t* src, const float* scales, int64_t rows, int64_t D, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d) dst[r * D + d] = static_cast<float>(src[r * D + d]) * scales[r];
}

void i8_scores_portable(const int8_t* q8, const float* qs, int64_t G, const int8_t* K, const float* ks, int64_t n,
                        int64_t D, float* s, int64_t lds, PrefetchLines pf) {
  const int64_t per = pf.per(n);
  for (int64_t j = 0; j < n; ++j) {
    pf.issue(per);
    const int8_t* k = K + j * D;
    for (int64_t g = 0; g < G; ++g) {
      const int8_t* qg = q8 + g * D;
      int32_t acc = 0;
      for (int64_t d = 0; d < D; ++d) acc += static_cast<int32_t>(qg[d]) * static_cast<int32_t>(k[d]);
      s[g * lds + j] = static_cast<float>(acc) * (qs[g] * ks[j]);
    }
  }
  pf.issue_rest();
}

void i8_weighted_rows_portable(const float* p, int64_t ldp, int64_t G, const int8_t* V, const float* scales, int64_t n,
                               int64_t D, float* out, int64_t ldo, PrefetchLines pf) {
  const int64_t per = pf.per(n);
  float w[kPvRows];
  int16_t q[kPvRows];
  for (int64_t j0 = 0; j0 < n; j0 += kPvRows) {
    const int64_t nb = std::min(kPvRows, n - j0);
    const int8_t* vb = V + j0 * D;
    pf.issue(per * nb);
    for (int64_t g = 0; g < G; ++g) {
      bool clean = true;
      float m = 0;
      for (int64_t j = 0; j < nb; ++j) {
        w[j] = p[g * ldp + j0 + j] * scales[j0 + j];
        clean = clean && pv_clean(w[j]);
        if (clean) m = std::max(m, w[j]);
      }
      float* o = out + g * ldo;
      if (!clean || !pv_quantized(m)) {
        pv_float_rows(w, vb, nb, D, o);
        continue;
      }
      const float inv = kPvCode / m;
      for (int64_t j = 0; j < nb; ++j) q[j] = static_cast<int16_t>(std::nearbyint(w[j] * inv));
      pv_int_cols(q, vb, nb, D, 0, D, m / kPvCode, o);
    }
  }
  pf.issue_rest();
}

void half_to_float_portable(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

// No lanes: argmax_finish's scalar loop over the whole row.
int64_t argmax_portable(const float* x, int64_t n) { return argmax_finish(nullptr, nullptr, 0, x, 0, n); }

}  // namespace

void add_f32_portable(F32Kernels& t) {
  constexpr KernelIsa kLevel = KernelIsa::kPortable;
  t.dot.set(dot_portable, kLevel);
  t.axpy.set(axpy_portable, kLevel);
  t.gemv_rows.set(gemv_rows_portable, kLevel);
  t.gemv_short_rows.set(gemv_rows_portable, kLevel);
  t.gemv_cached_rows.set(gemv_rows_portable, kLevel);
  t.ukernel.set(ukernel_portable, kLevel);
  t.ukernel_max_rows = 6;
  t.softmax.set(softmax_portable, kLevel);
  t.silu.set(silu_portable, kLevel);
  t.weighted_rows_sum.set(weighted_rows_sum_portable, kLevel);
  t.half_to_float.set(half_to_float_portable, kLevel);
  t.scaled_i8_to_float.set(scaled_i8_to_float_portable, kLevel);
  t.i8_scores.set(i8_scores_portable, kLevel);
  t.i8_weighted_rows.set(i8_weighted_rows_portable, kLevel);
  t.argmax.set(argmax_portable, kLevel);
}

}  // namespace kern
}  // namespace ember
