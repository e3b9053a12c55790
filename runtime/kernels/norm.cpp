// layer_norm, native_layer_norm (out, mean, rstd) and rms_norm over the trailing
// `normalized_shape` dims; statistics in double, math in fp32, any float storage dtype.
#include <vector>

#include "gemm.h"
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// Checks normalized_shape against the trailing dims of x; returns the row length N.
Error norm_rows(KernelArgs a, int shape_idx, const Tensor& x, int64_t* N, int* nnorm, const char* op) {
  int64_t shape[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, shape_idx, shape, &n, "normalized_shape"));
  EMBER_CHECK_ARG(n >= 1 && n <= x.dim, "%s: normalized_shape has %d dims but the input has rank %d", op, n,
                  static_cast<int>(x.dim));
  for (int k = 0; k < n; ++k) {
    EMBER_CHECK_ARG(x.sizes[x.dim - n + k] == shape[k], "%s: normalized_shape[%d]=%" PRId64 " but the input dim is %" PRId64,
                    op, k, shape[k], x.sizes[x.dim - n + k]);
  }
  *N = x.prod(x.dim - n, x.dim);
  *nnorm = n;
  return Error::ok();
}

// Loads an optional affine parameter of N elements as fp32 (empty when absent).
Error load_param(const Tensor* p, int64_t N, std::vector<float>* v, const char* what) {
  v->clear();
  if (p == nullptr) return Error::ok();
  EMBER_CHECK_ARG(p->numel() == N, "%s has %" PRId64 " elements, expected %" PRId64, what, p->numel(), N);
  EMBER_TRY(check_floating(*p, what));
  v->resize(static_cast<size_t>(N));
  const float* src = load_chunk<float>(p->dtype, p->data, 0, 1, N, v->data());
  if (src != v->data()) std::memcpy(v->data(), src, static_cast<size_t>(N) * 4);
  return Error::ok();
}

// Normalizes each row: y = (x - mean) * rstd * w + b; optional mean/rstd outputs.
Error run_norm(const Tensor& x, Tensor& out, int64_t N, const std::vector<float>& w, const std::vector<float>& b, double eps,
               bool rms, Tensor* mean_out, Tensor* rstd_out) {
  EMBER_TRY(check_floating(x, "input"));
  EMBER_TRY(check_floating(out, "output"));
  EMBER_TRY(out.resize(x.sizes, x.dim));
  const int64_t M = N == 0 ? 0 : x.numel() / N;
  const DType idt = x.dtype, odt = out.dtype;
  auto body = [&](int64_t rb, int64_t re) {
    std::vector<float> row(static_cast<size_t>(N));
    for (int64_t m = rb; m < re; ++m) {
      const float* xr = load_chunk<float>(idt, x.data, m * N, 1, N, row.data());
      double mean = 0, var = 0;
      if (!rms) {
        double s = 0;
        for (int64_t k = 0; k < N; ++k) s += xr[k];
        mean = s / static_cast<double>(N);
        double ss = 0;
        for (int64_t k = 0; k < N; ++k) {
          const double dlt = xr[k] - mean;
          ss += dlt * dlt;
        }
        var = ss / static_cast<double>(N);
      } else {
        double ss = 0;
        for (int64_t k = 0; k < N; ++k) ss += static_cast<double>(xr[k]) * xr[k];
        var = ss / static_cast<double>(N);
      }
      const float rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
      const float mf = static_cast<float>(mean);
      float* y = store_target<float>(odt, out.data, m * N, row.data());
      // y may alias xr (same buffer) only elementwise, which is safe.
      for (int64_t k = 0; k < N; ++k) {
        float v = (xr[k] - mf) * rstd;
        if (!w.empty()) v *= w[k];
        if (!b.empty()) v += b[k];
        y[k] = v;
      }
      store_chunk<float>(odt, out.data, m * N, N, y);
      if (mean_out) {
        float mv = mf;
        store_chunk<float>(mean_out->dtype, mean_out->data, m, 1, &mv);
      }
      if (rstd_out) {
        float rv = rstd;
        store_chunk<float>(rstd_out->dtype, rstd_out->data, m, 1, &rv);
      }
    }
  };
  parallel_rows(M, N, body);
  return Error::ok();
}

// layer_norm(input, normalized_shape, weight?, bias?, eps, cudnn_enable)
Error layer_norm_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *w = nullptr, *b = nullptr, *out = nullptr;
  double eps = 1e-5;
  EMBER_TRY(arg_tensor(a, 0, &x, "input"));
  EMBER_TRY(arg_opt_tensor(a, 2, &w, "weight"));
  EMBER_TRY(arg_opt_tensor(a, 3, &b, "bias"));
  EMBER_TRY(arg_double(a, 4, &eps, "eps"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t N = 0;
  int nn = 0;
  EMBER_TRY(norm_rows(a, 1, *x, &N, &nn, "layer_norm"));
  std::vector<float> wv, bv;
  EMBER_TRY(load_param(w, N, &wv, "layer_norm weight"));
  EMBER_TRY(load_param(b, N, &bv, "layer_norm bias"));
  return run_norm(*x, *out, N, wv, bv, eps, false, nullptr, nullptr);
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
Error native_layer_norm_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *w = nullptr, *b = nullptr, *out = nullptr, *mean = nullptr, *rstd = nullptr;
  double eps = 1e-5;
  EMBER_TRY(arg_tensor(a, 0, &x, "input"));
  EMBER_TRY(arg_opt_tensor(a, 2, &w, "weight"));
  EMBER_TRY(arg_opt_tensor(a, 3, &b, "bias"));
  EMBER_TRY(arg_double(a, 4, &eps, "eps"));
  EMBER_TRY(arg_tensor(a, 5, &out, "out"));
  EMBER_TRY(arg_tensor(a, 6, &mean, "mean"));
  EMBER_TRY(arg_tensor(a, 7, &rstd, "rstd"));
  int64_t N = 0;
  int nn = 0;
  EMBER_TRY(norm_rows(a, 1, *x, &N, &nn, "native_layer_norm"));
  int64_t ssz[kMaxDims];
  for (int k = 0; k < x->dim; ++k) ssz[k] = k < x->dim - nn ? x->sizes[k] : 1;
  EMBER_TRY(mean->resize(ssz, x->dim));
  EMBER_TRY(rstd->resize(ssz, x->dim));
  std::vector<float> wv, bv;
  EMBER_TRY(load_param(w, N, &wv, "layer_norm weight"));
  EMBER_TRY(load_param(b, N, &bv, "layer_norm bias"));
  return run_norm(*x, *out, N, wv, bv, eps, false, mean, rstd);
}

double finfo_eps(DType t) {
  switch (t) {
    case DType::kFloat16: return 0.0009765625;
    case DType::kBFloat16: return 0.0078125;
    default: return 1.1920928955078125e-07;
  }
}

// rms_norm(input, normalized_shape, weight?, eps?)
Error rms_norm_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *w = nullptr, *out = nullptr;
  double eps = 0;
  bool has_eps = false;
  EMBER_TRY(arg_tensor(a, 0, &x, "input"));
  EMBER_TRY(arg_opt_tensor(a, 2, &w, "weight"));
  EMBER_TRY(arg_opt_double(a, 3, &eps, &has_eps, "eps"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  if (!has_eps) eps = finfo_eps(x->dtype);
  int64_t N = 0;
  int nn = 0;
  EMBER_TRY(norm_rows(a, 1, *x, &N, &nn, "rms_norm"));
  if (x->dtype == DType::kFloat32 && out->dtype == DType::kFloat32 && (!w || w->dtype == DType::kFloat32)) {
    EMBER_CHECK_ARG(!w || w->numel() == N, "rms_norm weight has %" PRId64 " elements, expected %" PRId64,
                    w ? w->numel() : 0, N);
    EMBER_TRY(out->resize(x->sizes, x->dim));
    const int64_t M = N == 0 ? 0 : x->numel() / N;
    const float* xp = x->ptr<float>();
    const float* wp = w ? w->ptr<float>() : nullptr;
    float* yp = out->ptr<float>();
    auto body = [&](int64_t rb, int64_t re) {
      for (int64_t m = rb; m < re; ++m) rms_norm_row_f32(xp + m * N, wp, N, static_cast<float>(eps), yp + m * N);
    };
    parallel_rows(M, N, body);
    return Error::ok();
  }
  std::vector<float> wv, bv;
  EMBER_TRY(load_param(w, N, &wv, "rms_norm weight"));
  return run_norm(*x, *out, N, wv, bv, eps, true, nullptr, nullptr);
}

}  // namespace

void register_norm_kernels(KernelRegistry& r) {
  r.add("aten::layer_norm.default", KernelDef{layer_norm_k, 6, 1, false});
  r.add("aten::native_layer_norm.default", KernelDef{native_layer_norm_k, 5, 3, false});
  r.add("aten::rms_norm.default", KernelDef{rms_norm_k, 4, 1, false});
}

}  // namespace ember
