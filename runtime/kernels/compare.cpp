// Comparisons (eq/ne/lt/le/gt/ge), logical ops, where and masked_fill.
//
// Comparisons and logical ops compute in the inputs' category (fp32 when any input is
// floating, else int64) and write the output's dtype (bool, as planned by the exporter).
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// Rounds a double scalar to the storage precision of a half tensor it is compared with
// (PyTorch casts a same-category scalar to the tensor's dtype).
double round_to(DType dt, double v) {
  if (dt == DType::kFloat16) return half_to_float(float_to_half(static_cast<float>(v)));
  if (dt == DType::kBFloat16) return bf16_to_float(float_to_bf16(static_cast<float>(v)));
  return v;
}

template <typename C>
Error operand_for(KernelArgs args, int i, const Tensor* other_tensor, Operand* op, const char* what) {
  if (args[i].is_tensor()) {
    op->t = &args[i].tensor;
    return Error::ok();
  }
  Scalar s;
  EMBER_TRY(arg_scalar(args, i, &s, what));
  if (s.is_floating() && other_tensor != nullptr) s.d = round_to(other_tensor->dtype, s.d);
  make_scalar_operand<C>(op, s);
  return Error::ok();
}

bool arg_is_floating(KernelArgs args, int i) {
  if (args[i].is_tensor()) return is_floating(args[i].tensor.dtype);
  return args[i].tag == Tag::kDouble;
}

template <typename Op>
Error compare(KernelArgs args, const Op& op) {
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(args, args.n - 1, &out, "out"));
  const Tensor* t0 = args[0].is_tensor() ? &args[0].tensor : nullptr;
  const Tensor* t1 = args[1].is_tensor() ? &args[1].tensor : nullptr;
  EMBER_CHECK_ARG(t0 != nullptr || t1 != nullptr, "expected at least one Tensor operand, got %s and %s",
                  tag_name(args[0].tag), tag_name(args[1].tag));
  auto run = [&](auto zero) -> Error {
    using C = decltype(zero);
    Operand a, b;
    EMBER_TRY(operand_for<C>(args, 0, t1, &a, "self"));
    EMBER_TRY(operand_for<C>(args, 1, t0, &b, "other"));
    const Tensor* ins[2] = {a.t, b.t};
    return map_elements<C, bool, 2>(*out, ins, [op](C x, C y) { return op(x, y); });
  };
  if (arg_is_floating(args, 0) || arg_is_floating(args, 1)) return run(float{});
  return run(int64_t{});
}

struct EqOp { template <typename C> bool operator()(C a, C b) const { return a == b; } };
struct NeOp { template <typename C> bool operator()(C a, C b) const { return a != b; } };
struct LtOp { template <typename C> bool operator()(C a, C b) const { return a < b; } };
struct LeOp { template <typename C> bool operator()(C a, C b) const { return a <= b; } };
struct GtOp { template <typename C> bool operator()(C a, C b) const { return a > b; } };
struct GeOp { template <typename C> bool operator()(C a, C b) const { return a >= b; } };
struct AndOp { template <typename C> bool operator()(C a, C b) const { return a != C(0) && b != C(0); } };
struct OrOp { template <typename C> bool operator()(C a, C b) const { return a != C(0) || b != C(0); } };
struct XorOp { template <typename C> bool operator()(C a, C b) const { return (a != C(0)) != (b != C(0)); } };

Error eq_k(KernelContext&, KernelArgs a) { return compare(a, EqOp{}); }
Error ne_k(KernelContext&, KernelArgs a) { return compare(a, NeOp{}); }
Error lt_k(KernelContext&, KernelArgs a) { return compare(a, LtOp{}); }
Error le_k(KernelContext&, KernelArgs a) { return compare(a, LeOp{}); }
Error gt_k(KernelContext&, KernelArgs a) { return compare(a, GtOp{}); }
Error ge_k(KernelContext&, KernelArgs a) { return compare(a, GeOp{}); }
Error logical_and_k(KernelContext&, KernelArgs a) { return compare(a, AndOp{}); }
Error logical_or_k(KernelContext&, KernelArgs a) { return compare(a, OrOp{}); }
Error logical_xor_k(KernelContext&, KernelArgs a) { return compare(a, XorOp{}); }

template <typename F>
Error unary_predicate(KernelArgs args, F f_float, bool int_value_for_ints) {
  Tensor* self = nullptr;
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(args, 0, &self, "self"));
  EMBER_TRY(arg_tensor(args, args.n - 1, &out, "out"));
  const Tensor* ins[1] = {self};
  if (is_floating(self->dtype)) return map_elements<float, bool, 1>(*out, ins, f_float);
  return map_elements<int64_t, bool, 1>(*out, ins, [int_value_for_ints, f_float](int64_t x) {
    return int_value_for_ints ? f_float(static_cast<float>(x)) : false;
  });
}
Error logical_not_k(KernelContext&, KernelArgs a) {
  return unary_predicate(a, [](float x) { return x == 0.0f; }, true);
}
Error isnan_k(KernelContext&, KernelArgs a) {
  return unary_predicate(a, [](float x) { return x != x; }, false);
}
Error isinf_k(KernelContext&, KernelArgs a) {
  return unary_predicate(a, [](float x) { return std::isinf(x); }, false);
}
Error isfinite_k(KernelContext&, KernelArgs a) {
  Tensor* self = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  if (!is_floating(self->dtype)) {
    return unary_predicate(a, [](float) { return true; }, true);
  }
  return unary_predicate(a, [](float x) { return std::isfinite(x); }, false);
}

// where(condition, self, other) with self/other tensors or scalars.
Error where_k(KernelContext&, KernelArgs a) {
  Tensor* cond = nullptr;
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &cond, "condition"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  auto run = [&](auto zero) -> Error {
    using C = decltype(zero);
    Operand x, y;
    if (a[1].is_tensor()) x.t = &a[1].tensor;
    else {
      Scalar s;
      EMBER_TRY(arg_scalar(a, 1, &s, "self"));
      make_scalar_operand<C>(&x, s);
    }
    if (a[2].is_tensor()) y.t = &a[2].tensor;
    else {
      Scalar s;
      EMBER_TRY(arg_scalar(a, 2, &s, "other"));
      make_scalar_operand<C>(&y, s);
    }
    const Tensor* ins[3] = {cond, x.t, y.t};
    return map_elements<C, C, 3>(*out, ins, [](C c, C u, C v) { return c != C(0) ? u : v; });
  };
  if (is_floating(out->dtype)) return run(float{});
  return run(int64_t{});
}

// masked_fill(self, mask, value): value is a Scalar or a 0-dim tensor. May run in place.
Error masked_fill_k(KernelContext&, KernelArgs a) {
  Tensor* self = nullptr;
  Tensor* mask = nullptr;
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, 1, &mask, "mask"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(mask->dtype == DType::kBool || mask->dtype == DType::kUInt8,
                  "masked_fill: mask must be bool, got %s", dtype_name(mask->dtype));
  auto run = [&](auto zero) -> Error {
    using C = decltype(zero);
    Operand v;
    if (a[2].is_tensor()) {
      EMBER_CHECK_ARG(a[2].tensor.numel() == 1, "masked_fill: value tensor must have one element, got %" PRId64,
                      a[2].tensor.numel());
      v.t = &a[2].tensor;
      const double d = read_as_double(a[2].tensor, 0);
      make_scalar_operand<C>(&v, d, is_floating(a[2].tensor.dtype) ? 0 : static_cast<int64_t>(d),
                             is_floating(a[2].tensor.dtype));
    } else {
      Scalar s;
      EMBER_TRY(arg_scalar(a, 2, &s, "value"));
      make_scalar_operand<C>(&v, s);
    }
    const Tensor* ins[3] = {mask, self, v.t};
    return map_elements<C, C, 3>(*out, ins, [](C m, C x, C val) { return m != C(0) ? val : x; });
  };
  if (is_floating(out->dtype)) return run(float{});
  return run(int64_t{});
}

}  // namespace

void register_compare_kernels(KernelRegistry& r) {
  const char* names[][2] = {{"eq", nullptr}, {"ne", nullptr}, {"lt", nullptr},
                            {"le", nullptr}, {"gt", nullptr}, {"ge", nullptr}};
  KernelFn fns[] = {eq_k, ne_k, lt_k, le_k, gt_k, ge_k};
  for (int k = 0; k < 6; ++k) {
    const std::string base = std::string("aten::") + names[k][0];
    r.add(base + ".Tensor", KernelDef{fns[k], 2, 1, false});
    r.add(base + ".Scalar", KernelDef{fns[k], 2, 1, false});
  }
  r.add("aten::logical_and.default", KernelDef{logical_and_k, 2, 1, false});
  r.add("aten::logical_or.default", KernelDef{logical_or_k, 2, 1, false});
  r.add("aten::logical_xor.default", KernelDef{logical_xor_k, 2, 1, false});
  r.add("aten::logical_not.default", KernelDef{logical_not_k, 1, 1, false});
  r.add("aten::isnan.default", KernelDef{isnan_k, 1, 1, false});
  r.add("aten::isinf.default", KernelDef{isinf_k, 1, 1, false});
  r.add("aten::isfinite.default", KernelDef{isfinite_k, 1, 1, false});
  r.add("aten::where.self", KernelDef{where_k, 3, 1, false});
  r.add("aten::where.ScalarSelf", KernelDef{where_k, 3, 1, false});
  r.add("aten::where.ScalarOther", KernelDef{where_k, 3, 1, false});
  r.add("aten::where.Scalar", KernelDef{where_k, 3, 1, false});
  r.add("aten::masked_fill.Scalar", KernelDef{masked_fill_k, 3, 1, false});
  r.add("aten::masked_fill.Tensor", KernelDef{masked_fill_k, 3, 1, false});
}

}  // namespace ember
