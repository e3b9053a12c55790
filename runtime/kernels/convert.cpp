// dtype conversion copies: _to_copy, to.dtype, to.dtype_layout. The output's planned dtype is
// the target; layout/device/memory_format arguments are ignored.
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

Error to_copy_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  DType want = out->dtype;
  bool has = false;
  EMBER_TRY(arg_opt_dtype(a, 1, &want, &has, "dtype"));
  EMBER_CHECK_ARG(!has || want == out->dtype, "_to_copy: requested dtype %s but the output was planned as %s",
                  dtype_name(want), dtype_name(out->dtype));
  EMBER_TRY(out->resize(self->sizes, self->dim));
  const int64_t n = self->numel();
  // Large conversions run in parallel chunks.
  if (n >= (1 << 18) && self->data != out->data) {
    const size_t ies = self->element_size(), oes = out->element_size();
    parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
      convert_elements(self->dtype, static_cast<const uint8_t*>(self->data) + static_cast<size_t>(b) * ies, out->dtype,
                       static_cast<uint8_t*>(out->data) + static_cast<size_t>(b) * oes, e - b);
    });
    return Error::ok();
  }
  convert_elements(self->dtype, self->data, out->dtype, out->data, n);
  return Error::ok();
}

}  // namespace

void register_convert_kernels(KernelRegistry& r) {
  r.add("aten::_to_copy.default", KernelDef{to_copy_k, 7, 1, false});
  r.add("aten::to.dtype", KernelDef{to_copy_k, 5, 1, false});
  r.add("aten::to.dtype_layout", KernelDef{to_copy_k, 8, 1, false});
}

}  // namespace ember
