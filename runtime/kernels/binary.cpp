// Broadcasting binary arithmetic: add/sub/rsub/mul/div (with rounding modes)/pow/minimum/
// maximum/remainder/floor_divide/bitwise ops, for Tensor-Tensor and Tensor-Scalar overloads.
//
// The compute type follows the output's planned dtype (which the exporter took from PyTorch's
// type promotion): fp32 for floating outputs (fp16/bf16 are storage only), int64 otherwise.
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// ---- op functors ---------------------------------------------------------------------------

struct AddOp {
  double alpha = 1;
  int64_t alpha_i = 1;
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value) return a + static_cast<C>(alpha) * b;
    else return static_cast<C>(a + alpha_i * b);
  }
};
struct SubOp {
  double alpha = 1;
  int64_t alpha_i = 1;
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value) return a - static_cast<C>(alpha) * b;
    else return static_cast<C>(a - alpha_i * b);
  }
};
struct MulOp {
  template <typename C>
  C operator()(C a, C b) const { return a * b; }
};
struct DivOp {  // true division (outputs are floating)
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value) return a / b;
    else return b == 0 ? 0 : (b == -1 ? static_cast<C>(0 - static_cast<uint64_t>(a)) : a / b);
  }
};
struct DivTruncOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value) return std::trunc(a / b);
    else return b == 0 ? 0 : (b == -1 ? static_cast<C>(0 - static_cast<uint64_t>(a)) : a / b);
  }
};
template <typename C>
inline C floor_div(C a, C b) {
  if constexpr (std::is_floating_point<C>::value) {
    if (b == 0) return a / b;
    C mod = std::fmod(a, b);
    C div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
    C fl;
    if (div != 0) {
      fl = std::floor(div);
      if (div - fl > C(0.5)) fl += 1;
    } else {
      fl = std::copysign(C(0), a / b);
    }
    return fl;
  } else {
    if (b == 0) return 0;
    if (b == -1) return static_cast<C>(0 - static_cast<uint64_t>(a));
    C q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  }
}
struct DivFloorOp {
  template <typename C>
  C operator()(C a, C b) const { return floor_div(a, b); }
};
struct RemainderOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value) {
      C r = std::fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    } else {
      if (b == 0 || b == -1) return 0;
      C r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
  }
};
struct FmodOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value) return std::fmod(a, b);
    else return (b == 0 || b == -1) ? 0 : a % b;
  }
};
template <typename C>
inline C int_pow(C base, C exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp % 2 == 0) ? 1 : -1;
    return 0;
  }
  uint64_t r = 1, b = static_cast<uint64_t>(base);
  uint64_t e = static_cast<uint64_t>(exp);
  while (e) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<C>(r);
}
struct PowOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value) return std::pow(a, b);
    else return int_pow(a, b);
  }
};
struct MaximumOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value)
      if (a != a) return a;
    return a > b ? a : b;
  }
};
struct MinimumOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point<C>::value)
      if (a != a) return a;
    return a < b ? a : b;
  }
};
struct BitAndOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral<C>::value) return a & b;
    else return 0;
  }
};
struct BitOrOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral<C>::value) return a | b;
    else return 0;
  }
};
struct BitXorOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral<C>::value) return a ^ b;
    else return 0;
  }
};

// ---- drivers ---------------------------------------------------------------------------------

template <typename C>
Error get_operand(KernelArgs args, int i, Operand* op, const char* what) {
  if (args[i].is_tensor()) {
    op->t = &args[i].tensor;
    return Error::ok();
  }
  Scalar s;
  EMBER_TRY(arg_scalar(args, i, &s, what));
  make_scalar_operand<C>(op, s);
  return Error::ok();
}

// fp32 tensors of one shape (the common case in LLMs: residual adds, gating products): a direct
// vectorizable loop, split across threads when large. `out` may alias an input.
template <typename Op>
bool try_same_shape_f32(const Tensor& a, const Tensor& b, Tensor& out, const Op& op, Error* err) {
  if (a.dtype != DType::kFloat32 || b.dtype != DType::kFloat32 || out.dtype != DType::kFloat32 || !same_shape(a, b)) {
    return false;
  }
  *err = out.resize(a.sizes, a.dim);
  if (*err) return true;
  const float* x = a.ptr<float>();
  const float* y = b.ptr<float>();
  float* o = out.ptr<float>();
  auto body = [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) o[i] = op(x[i], y[i]);
  };
  const int64_t n = a.numel();
  if (n >= (1 << 16)) parallel_for(n, 1 << 14, body);
  else body(0, n);
  return true;
}

template <typename C, typename Op>
Error binary_typed(KernelArgs args, int ia, int ib, Tensor& out, const Op& op) {
  Operand a, b;
  EMBER_TRY(get_operand<C>(args, ia, &a, "self"));
  EMBER_TRY(get_operand<C>(args, ib, &b, "other"));
  if constexpr (std::is_same<C, float>::value) {
    Error err;
    if (try_same_shape_f32(*a.t, *b.t, out, op, &err)) return err;
  }
  const Tensor* ins[2] = {a.t, b.t};
  return map_elements<C, C, 2>(out, ins, [op](C x, C y) { return op(x, y); });
}

template <typename Op>
Error binary(KernelArgs args, int ia, int ib, const Op& op, bool int_only = false) {
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(args, args.n - 1, &out, "out"));
  if (int_only) {
    EMBER_CHECK_ARG(!is_floating(out->dtype), "bitwise ops need integer or bool tensors, got %s", dtype_name(out->dtype));
  }
  if (compute_kind(out->dtype) == ComputeKind::kFloat) return binary_typed<float>(args, ia, ib, *out, op);
  return binary_typed<int64_t>(args, ia, ib, *out, op);
}

Error read_alpha(KernelArgs args, int i, double* d, int64_t* iv) {
  Scalar s;
  EMBER_TRY(arg_scalar(args, i, &s, "alpha"));
  *d = s.as_double();
  *iv = s.as_int();
  return Error::ok();
}

Error add_k(KernelContext&, KernelArgs a) {
  AddOp op;
  EMBER_TRY(read_alpha(a, 2, &op.alpha, &op.alpha_i));
  return binary(a, 0, 1, op);
}
Error sub_k(KernelContext&, KernelArgs a) {
  SubOp op;
  EMBER_TRY(read_alpha(a, 2, &op.alpha, &op.alpha_i));
  return binary(a, 0, 1, op);
}
Error rsub_k(KernelContext&, KernelArgs a) {  // other - alpha * self
  SubOp op;
  EMBER_TRY(read_alpha(a, 2, &op.alpha, &op.alpha_i));
  return binary(a, 1, 0, op);
}
Error mul_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, MulOp{}); }
Error div_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, DivOp{}); }
Error div_mode_k(KernelContext&, KernelArgs a) {
  const char* mode = "";
  int len = 0;
  EMBER_TRY(arg_opt_string(a, 2, &mode, &len, "rounding_mode"));
  if (len == 0) return binary(a, 0, 1, DivOp{});
  if (str_eq(mode, len, "trunc")) return binary(a, 0, 1, DivTruncOp{});
  if (str_eq(mode, len, "floor")) return binary(a, 0, 1, DivFloorOp{});
  return Error::make(ErrorCode::kInvalidArgument, "div: rounding_mode '%.*s' is not one of None, 'trunc', 'floor'", len,
                     mode);
}
Error floor_divide_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, DivFloorOp{}); }
Error remainder_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, RemainderOp{}); }
Error fmod_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, FmodOp{}); }
Error pow_k(KernelContext&, KernelArgs a) {
  // Square is common (RMSNorm decompositions): use x*x, exactly what PyTorch does.
  if (a[0].is_tensor() && !a[1].is_tensor()) {
    Scalar e;
    EMBER_TRY(arg_scalar(a, 1, &e, "exponent"));
    if (e.as_double() == 2.0) return binary(a, 0, 0, MulOp{});
  }
  return binary(a, 0, 1, PowOp{});
}
Error maximum_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, MaximumOp{}); }
Error minimum_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, MinimumOp{}); }
Error bitand_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, BitAndOp{}, true); }
Error bitor_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, BitOrOp{}, true); }
Error bitxor_k(KernelContext&, KernelArgs a) { return binary(a, 0, 1, BitXorOp{}, true); }

}  // namespace

void register_binary_kernels(KernelRegistry& r) {
  r.add("aten::add.Tensor", KernelDef{add_k, 3, 1, false});
  r.add("aten::add.Scalar", KernelDef{add_k, 3, 1, false});
  r.add("aten::sub.Tensor", KernelDef{sub_k, 3, 1, false});
  r.add("aten::sub.Scalar", KernelDef{sub_k, 3, 1, false});
  r.add("aten::rsub.Tensor", KernelDef{rsub_k, 3, 1, false});
  r.add("aten::rsub.Scalar", KernelDef{rsub_k, 3, 1, false});
  r.add("aten::mul.Tensor", KernelDef{mul_k, 2, 1, false});
  r.add("aten::mul.Scalar", KernelDef{mul_k, 2, 1, false});
  r.add("aten::div.Tensor", KernelDef{div_k, 2, 1, false});
  r.add("aten::div.Scalar", KernelDef{div_k, 2, 1, false});
  r.add("aten::div.Tensor_mode", KernelDef{div_mode_k, 3, 1, false});
  r.add("aten::div.Scalar_mode", KernelDef{div_mode_k, 3, 1, false});
  r.add("aten::floor_divide.default", KernelDef{floor_divide_k, 2, 1, false});
  r.add("aten::floor_divide.Scalar", KernelDef{floor_divide_k, 2, 1, false});
  r.add("aten::remainder.Tensor", KernelDef{remainder_k, 2, 1, false});
  r.add("aten::remainder.Scalar", KernelDef{remainder_k, 2, 1, false});
  r.add("aten::fmod.Tensor", KernelDef{fmod_k, 2, 1, false});
  r.add("aten::fmod.Scalar", KernelDef{fmod_k, 2, 1, false});
  r.add("aten::pow.Tensor_Scalar", KernelDef{pow_k, 2, 1, false});
  r.add("aten::pow.Tensor_Tensor", KernelDef{pow_k, 2, 1, false});
  r.add("aten::pow.Scalar", KernelDef{pow_k, 2, 1, false});
  r.add("aten::maximum.default", KernelDef{maximum_k, 2, 1, false});
  r.add("aten::minimum.default", KernelDef{minimum_k, 2, 1, false});
  r.add("aten::bitwise_and.Tensor", KernelDef{bitand_k, 2, 1, false});
  r.add("aten::bitwise_and.Scalar", KernelDef{bitand_k, 2, 1, false});
  r.add("aten::bitwise_or.Tensor", KernelDef{bitor_k, 2, 1, false});
  r.add("aten::bitwise_or.Scalar", KernelDef{bitor_k, 2, 1, false});
  r.add("aten::bitwise_xor.Tensor", KernelDef{bitxor_k, 2, 1, false});
  r.add("aten::bitwise_xor.Scalar", KernelDef{bitxor_k, 2, 1, false});
}

}  // namespace ember
