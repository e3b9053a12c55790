// Factories: arange, full/zeros/ones/empty (+ _like / new_ variants), scalar_tensor, fill.
// dtype/layout/device/pin_memory/memory_format arguments are ignored: the output's planned
// dtype already reflects them.
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

void fill_value(Tensor& out, const Scalar& v) {
  const int64_t n = out.numel();
  dispatch_storage(out.dtype, [&](auto s) {
    using S = decltype(s);
    S x;
    if constexpr (std::is_same<S, Half>::value || std::is_same<S, BFloat16>::value || std::is_same<S, float>::value) {
      x = to_storage<S>(static_cast<float>(v.as_double()));
    } else if constexpr (std::is_same<S, bool>::value) {
      x = v.as_double() != 0;
    } else {
      x = v.is_floating() ? to_storage<S>(v.d) : static_cast<S>(v.i);
    }
    S* p = out.ptr<S>();
    for (int64_t k = 0; k < n; ++k) p[k] = x;
    return 0;
  });
}

Error fill_shape(KernelArgs a, int size_idx, const Scalar& v) {
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t sizes[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, size_idx, sizes, &n, "size"));
  EMBER_TRY(out->resize(sizes, n));
  fill_value(*out, v);
  return Error::ok();
}

Error fill_like(KernelArgs a, const Scalar& v, bool write) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(out->resize(self->sizes, self->dim));
  if (write) fill_value(*out, v);
  return Error::ok();
}

Scalar int_scalar(int64_t i) {
  Scalar s;
  s.kind = Scalar::kInt;
  s.i = i;
  s.d = static_cast<double>(i);
  return s;
}

Error full_k(KernelContext&, KernelArgs a) {  // full(size, fill_value, ...)
  Scalar v;
  EMBER_TRY(arg_scalar(a, 1, &v, "fill_value"));
  return fill_shape(a, 0, v);
}
Error zeros_k(KernelContext&, KernelArgs a) { return fill_shape(a, 0, int_scalar(0)); }
Error ones_k(KernelContext&, KernelArgs a) { return fill_shape(a, 0, int_scalar(1)); }
// empty / new_empty: only the shape (argument `size_arg`); the contents are unspecified.
Error resize_only(KernelArgs a, int size_arg) {
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t sizes[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, size_arg, sizes, &n, "size"));
  return out->resize(sizes, n);
}
Error empty_k(KernelContext&, KernelArgs a) { return resize_only(a, 0); }
Error full_like_k(KernelContext&, KernelArgs a) {
  Scalar v;
  EMBER_TRY(arg_scalar(a, 1, &v, "fill_value"));
  return fill_like(a, v, true);
}
Error zeros_like_k(KernelContext&, KernelArgs a) { return fill_like(a, int_scalar(0), true); }
Error ones_like_k(KernelContext&, KernelArgs a) { return fill_like(a, int_scalar(1), true); }
Error empty_like_k(KernelContext&, KernelArgs a) { return fill_like(a, int_scalar(0), false); }
Error new_zeros_k(KernelContext&, KernelArgs a) { return fill_shape(a, 1, int_scalar(0)); }
Error new_ones_k(KernelContext&, KernelArgs a) { return fill_shape(a, 1, int_scalar(1)); }
Error new_empty_k(KernelContext&, KernelArgs a) { return resize_only(a, 1); }
Error new_full_k(KernelContext&, KernelArgs a) {  // new_full(self, size, fill_value, ...)
  Scalar v;
  EMBER_TRY(arg_scalar(a, 2, &v, "fill_value"));
  return fill_shape(a, 1, v);
}
Error scalar_tensor_k(KernelContext&, KernelArgs a) {
  Tensor* out = nullptr;
  Scalar v;
  EMBER_TRY(arg_scalar(a, 0, &v, "s"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(out->resize(nullptr, 0));
  fill_value(*out, v);
  return Error::ok();
}
Error fill_k(KernelContext&, KernelArgs a) {  // fill.Scalar(self, value) / fill.Tensor
  Scalar v;
  if (a[1].is_tensor()) {
    EMBER_CHECK_ARG(a[1].tensor.numel() == 1, "fill: value tensor must have one element");
    const double d = read_as_double(a[1].tensor, 0);
    v.kind = is_floating(a[1].tensor.dtype) ? Scalar::kDouble : Scalar::kInt;
    v.d = d;
    v.i = static_cast<int64_t>(d);
  } else {
    EMBER_TRY(arg_scalar(a, 1, &v, "value"));
  }
  return fill_like(a, v, true);
}

// arange(start, end, step): length ceil((end - start) / step).
Error arange_impl(KernelArgs a, const Scalar& start, const Scalar& end, const Scalar& step) {
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  const bool fl = start.is_floating() || end.is_floating() || step.is_floating() || is_floating(out->dtype);
  int64_t len = 0;
  if (fl) {
    const double s = start.as_double(), e = end.as_double(), st = step.as_double();
    EMBER_CHECK_ARG(st != 0 && std::isfinite(s) && std::isfinite(e) && std::isfinite(st),
                    "arange: invalid range start=%g end=%g step=%g", s, e, st);
    const double n = std::ceil((e - s) / st);
    EMBER_CHECK_ARG(n < 9.0e18, "arange: range start=%g end=%g step=%g is too long", s, e, st);
    len = n > 0 ? static_cast<int64_t>(n) : 0;
  } else {
    const int64_t s = start.i, e = end.i, st = step.i;
    EMBER_CHECK_ARG(st != 0, "arange: step must be nonzero");
    const double n = std::ceil((static_cast<double>(e) - static_cast<double>(s)) / static_cast<double>(st));
    EMBER_CHECK_ARG(n < 9.0e18, "arange: range is too long");
    len = n > 0 ? static_cast<int64_t>(n) : 0;
  }
  EMBER_TRY(out->resize(&len, 1));
  dispatch_storage(out->dtype, [&](auto z) {
    using S = decltype(z);
    S* p = out->ptr<S>();
    if constexpr (std::is_same<S, Half>::value || std::is_same<S, BFloat16>::value || std::is_same<S, float>::value) {
      const double s = start.as_double(), st = step.as_double();
      for (int64_t k = 0; k < len; ++k) p[k] = to_storage<S>(static_cast<float>(s + static_cast<double>(k) * st));
    } else if (fl) {
      const double s = start.as_double(), st = step.as_double();
      for (int64_t k = 0; k < len; ++k) p[k] = to_storage<S>(s + static_cast<double>(k) * st);
    } else {
      for (int64_t k = 0; k < len; ++k)
        p[k] = to_storage<S>(static_cast<int64_t>(static_cast<uint64_t>(start.i) + static_cast<uint64_t>(k) * static_cast<uint64_t>(step.i)));
    }
    return 0;
  });
  return Error::ok();
}
Error arange_k(KernelContext&, KernelArgs a) {  // arange(end, ...)
  Scalar e;
  EMBER_TRY(arg_scalar(a, 0, &e, "end"));
  return arange_impl(a, int_scalar(0), e, int_scalar(1));
}
Error arange_start_k(KernelContext&, KernelArgs a) {  // arange.start(start, end, ...)
  Scalar s, e;
  EMBER_TRY(arg_scalar(a, 0, &s, "start"));
  EMBER_TRY(arg_scalar(a, 1, &e, "end"));
  return arange_impl(a, s, e, int_scalar(1));
}
Error arange_step_k(KernelContext&, KernelArgs a) {  // arange.start_step(start, end, step, ...)
  Scalar s, e, st;
  EMBER_TRY(arg_scalar(a, 0, &s, "start"));
  EMBER_TRY(arg_scalar(a, 1, &e, "end"));
  EMBER_TRY(arg_scalar(a, 2, &st, "step"));
  return arange_impl(a, s, e, st);
}

}  // namespace

void register_factory_kernels(KernelRegistry& r) {
  r.add("aten::arange.default", KernelDef{arange_k, 5, 1, false});
  r.add("aten::arange.start", KernelDef{arange_start_k, 6, 1, false});
  r.add("aten::arange.start_step", KernelDef{arange_step_k, 7, 1, false});
  r.add("aten::full.default", KernelDef{full_k, 6, 1, false});
  r.add("aten::zeros.default", KernelDef{zeros_k, 5, 1, false});
  r.add("aten::ones.default", KernelDef{ones_k, 5, 1, false});
  r.add("aten::empty.memory_format", KernelDef{empty_k, 6, 1, false});
  r.add("aten::full_like.default", KernelDef{full_like_k, 7, 1, false});
  r.add("aten::zeros_like.default", KernelDef{zeros_like_k, 6, 1, false});
  r.add("aten::ones_like.default", KernelDef{ones_like_k, 6, 1, false});
  r.add("aten::empty_like.default", KernelDef{empty_like_k, 6, 1, false});
  r.add("aten::new_zeros.default", KernelDef{new_zeros_k, 6, 1, false});
  r.add("aten::new_ones.default", KernelDef{new_ones_k, 6, 1, false});
  r.add("aten::new_empty.default", KernelDef{new_empty_k, 6, 1, false});
  r.add("aten::new_full.default", KernelDef{new_full_k, 7, 1, false});
  r.add("aten::scalar_tensor.default", KernelDef{scalar_tensor_k, 5, 1, false});
  r.add("aten::fill.Scalar", KernelDef{fill_k, 2, 1, false});
  r.add("aten::fill.Tensor", KernelDef{fill_k, 2, 1, false});
}

}  // namespace ember
