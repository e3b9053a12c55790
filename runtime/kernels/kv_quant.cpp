// ember::quantize_kv: a step's keys or values as int8 codes with one fp32 scale per row of D
// values (the int8 KV cache; llm/ops.py holds the reference semantics, matched bit for bit).
#include <vector>

#include "act_quant.h"
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

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
    for (int64_t r = 0; r < rows; ++r) quantize_kv_row(xf + r * D, D, c + r * D, s + r);
    return Error::ok();
  }
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    convert_elements(x->dtype, static_cast<const uint8_t*>(x->data) + static_cast<size_t>(r * D) * x->element_size(),
                     DType::kFloat32, row.data(), D);
    quantize_kv_row(row.data(), D, c + r * D, s + r);
  }
  return Error::ok();
}

}  // namespace

void register_kv_quant_kernels(KernelRegistry& r) {
  r.add("ember::quantize_kv.default", KernelDef{quantize_kv_k, 1, 2, false});
  r.add("ember::quantize_kv", KernelDef{quantize_kv_k, 1, 2, false});
}

}  // namespace ember
