// ember::quantize_kv: a step's keys or values as int8 codes with one fp32 scale per row of D
// values (the int8 KV cache; llm/ops.py holds the reference semantics, matched bit for bit).
#include <cmath>
#include <limits>
#include <vector>

#include "act_quant.h"
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// One row: s = max|x| / 127, codes = clamp(round_half_even(x / s), -127, 127); zeros for an
// all-zero row (s = 0) and for a row holding a NaN or an infinity (s = NaN).
void quantize_row(const float* x, int64_t D, int8_t* codes, float* scale) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t d = 0; d < D; ++d) {
    const float a = std::fabs(x[d]);
    finite = finite && a <= std::numeric_limits<float>::max();
    amax = a > amax ? a : amax;
  }
  const float s = amax / 127.0f;
  if (!finite || !(s > 0.0f)) {
    for (int64_t d = 0; d < D; ++d) codes[d] = 0;
    *scale = finite ? s : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  for (int64_t d = 0; d < D; ++d) {
    const float r = round_half_even(x[d] / s);  // |x / s| <= 127 (+ rounding): within the trick's range
    codes[d] = static_cast<int8_t>(r < -127.0f ? -127.0f : (r > 127.0f ? 127.0f : r));
  }
  *scale = s;
}

// quantize_kv(x [..., D] float) -> (codes int8 [..., D], scales float32 [..., 1])
Error quantize_kv_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *codes = nullptr, *scales = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &x, "x"));
  EMBER_TRY(arg_tensor(a, 1, &codes, "codes"));
  EMBER_TRY(arg_tensor(a, 2, &scales, "scales"));
  EMBER_TRY(check_floating(*x, "quantize_kv input"));
  EMBER_CHECK_ARG(x->dim >= 1, "quantize_kv: the input is a scalar; it needs rows of D values");
  EMBER_CHECK_ARG(codes->dtype == DType::kInt8 && scales->dtype == DType::kFloat32,
                  "quantize_kv: outputs must be int8 codes and float32 scales, got %s and %s", dtype_name(codes->dtype),
                  dtype_name(scales->dtype));
  int64_t ssz[kMaxDims];
  for (int k = 0; k < x->dim; ++k) ssz[k] = x->sizes[k];
  ssz[x->dim - 1] = 1;
  EMBER_TRY(codes->resize(x->sizes, x->dim));
  EMBER_TRY(scales->resize(ssz, x->dim));
  const int64_t D = x->sizes[x->dim - 1], rows = D > 0 ? x->numel() / D : 0;
  int8_t* c = codes->ptr<int8_t>();
  float* s = scales->ptr<float>();
  if (D == 0) {
    for (int64_t r = 0; r < scales->numel(); ++r) s[r] = 0.0f;
    return Error::ok();
  }
  if (x->dtype == DType::kFloat32) {
    const float* xf = x->ptr<float>();
    for (int64_t r = 0; r < rows; ++r) quantize_row(xf + r * D, D, c + r * D, s + r);
    return Error::ok();
  }
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    convert_elements(x->dtype, static_cast<const uint8_t*>(x->data) + static_cast<size_t>(r * D) * x->element_size(),
                     DType::kFloat32, row.data(), D);
    quantize_row(row.data(), D, c + r * D, s + r);
  }
  return Error::ok();
}

}  // namespace

void register_kv_quant_kernels(KernelRegistry& r) {
  r.add("ember::quantize_kv.default", KernelDef{quantize_kv_k, 1, 2, false});
  r.add("ember::quantize_kv", KernelDef{quantize_kv_k, 1, 2, false});
}

}  // namespace ember
