// softmax / log_softmax along one dim, computed in fp32 (max-subtracted), for
// aten::_softmax, aten::softmax.int, aten::_log_softmax, aten::log_softmax.int.
#include <vector>

#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// In-place softmax over a contiguous fp32 row.
void softmax_row(float* x, int64_t n, bool log) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < n; ++k) mx = std::max(mx, x[k]);
  if (mx == -std::numeric_limits<float>::infinity()) {  // all masked: PyTorch yields NaN
    for (int64_t k = 0; k < n; ++k) x[k] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (log) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += std::exp(static_cast<double>(x[k] - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    for (int64_t k = 0; k < n; ++k) x[k] -= lse;
    return;
  }
  float sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    const float e = exp_approx(x[k] - mx);
    x[k] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t k = 0; k < n; ++k) x[k] *= inv;
}

Error softmax_impl(KernelArgs a, bool log) {
  Tensor *self = nullptr, *out = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_floating(*out, "softmax output"));
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "softmax"));
  EMBER_TRY(out->resize(self->sizes, self->dim));
  int64_t O, R, I;
  split_at(*self, static_cast<int>(d), &O, &R, &I);
  if (R == 0 || O * I == 0) return Error::ok();
  const DType idt = self->dtype, odt = out->dtype;
  auto body = [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(R));
    std::vector<float> tmp(static_cast<size_t>(R));
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / I, i = t % I;
      if (I == 1) {
        const float* x = load_chunk<float>(idt, self->data, o * R, 1, R, row.data());
        if (x != row.data()) std::memcpy(row.data(), x, static_cast<size_t>(R) * 4);
        softmax_row(row.data(), R, log);
        float* dst = store_target<float>(odt, out->data, o * R, tmp.data());
        if (dst != tmp.data()) {
          std::memcpy(dst, row.data(), static_cast<size_t>(R) * 4);
        } else {
          store_chunk<float>(odt, out->data, o * R, R, row.data());
        }
      } else {
        for (int64_t r = 0; r < R; ++r) {
          float v;
          load_chunk<float>(idt, self->data, (o * R + r) * I + i, 0, 1, &v);
          row[r] = v;
        }
        softmax_row(row.data(), R, log);
        for (int64_t r = 0; r < R; ++r) store_chunk<float>(odt, out->data, (o * R + r) * I + i, 1, &row[r]);
      }
    }
  };
  const int64_t rows = O * I;
  if (rows > 1 && rows * R >= 32768) parallel_for(rows, std::max<int64_t>(1, 8192 / R), body);
  else body(0, rows);
  return Error::ok();
}

Error softmax_k(KernelContext&, KernelArgs a) { return softmax_impl(a, false); }
Error log_softmax_k(KernelContext&, KernelArgs a) { return softmax_impl(a, true); }

}  // namespace

void register_softmax_kernels(KernelRegistry& r) {
  r.add("aten::_softmax.default", KernelDef{softmax_k, 3, 1, false});
  r.add("aten::softmax.int", KernelDef{softmax_k, 3, 1, false});
  r.add("aten::_log_softmax.default", KernelDef{log_softmax_k, 3, 1, false});
  r.add("aten::log_softmax.int", KernelDef{log_softmax_k, 3, 1, false});
}

}  // namespace ember
