// Elementwise unary math (neg, abs, exp, log, sqrt, rsqrt, tanh, sigmoid, silu, gelu, relu,
// trig, rounding, clamp, ...). Floating outputs compute in fp32, integer outputs in int64.
#include "gemm.h"
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

template <typename Op>
Error unary(KernelArgs args, const Op& op, bool float_only = false) {
  Tensor* self = nullptr;
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(args, 0, &self, "self"));
  EMBER_TRY(arg_tensor(args, args.n - 1, &out, "out"));
  const Tensor* ins[1] = {self};
  if (compute_kind(out->dtype) == ComputeKind::kFloat) {
    return map_elements<float, float, 1>(*out, ins, [op](float x) { return op(x); });
  }
  EMBER_CHECK_ARG(!float_only, "this op needs a floating output, got %s", dtype_name(out->dtype));
  return map_elements<int64_t, int64_t, 1>(*out, ins, [op](int64_t x) { return op(x); });
}

#define EMBER_FLOAT_UNARY(NAME, EXPR)                                        \
  struct NAME##Op {                                                          \
    template <typename C>                                                    \
    C operator()(C x) const {                                                \
      if constexpr (std::is_floating_point<C>::value) return (EXPR);         \
      else return static_cast<C>(0);                                         \
    }                                                                        \
  };                                                                         \
  Error NAME##_k(KernelContext&, KernelArgs a) { return unary(a, NAME##Op{}, true); }

EMBER_FLOAT_UNARY(exp, std::exp(x))
EMBER_FLOAT_UNARY(exp2, std::exp2(x))
EMBER_FLOAT_UNARY(expm1, std::expm1(x))
EMBER_FLOAT_UNARY(log, std::log(x))
EMBER_FLOAT_UNARY(log2, std::log2(x))
EMBER_FLOAT_UNARY(log1p, std::log1p(x))
EMBER_FLOAT_UNARY(sqrt, std::sqrt(x))
EMBER_FLOAT_UNARY(rsqrt, 1.0f / std::sqrt(x))
EMBER_FLOAT_UNARY(tanh, std::tanh(x))
EMBER_FLOAT_UNARY(sigmoid, 1.0f / (1.0f + exp_approx(-x)))  // exp_approx: ~1 ulp, vectorizes
EMBER_FLOAT_UNARY(silu_generic, x / (1.0f + exp_approx(-x)))

// silu is on every MLP of the LLM path: fp32 gets the vectorized kernel.
Error silu_k(KernelContext& ctx, KernelArgs a) {
  Tensor* self = nullptr;
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  if (self->dtype != DType::kFloat32 || out->dtype != DType::kFloat32) return silu_generic_k(ctx, a);
  EMBER_TRY(out->resize(self->sizes, self->dim));
  silu_f32(self->ptr<float>(), out->ptr<float>(), self->numel());
  return Error::ok();
}
EMBER_FLOAT_UNARY(cos, std::cos(x))
EMBER_FLOAT_UNARY(sin, std::sin(x))
EMBER_FLOAT_UNARY(tan, std::tan(x))
EMBER_FLOAT_UNARY(atan, std::atan(x))
EMBER_FLOAT_UNARY(erf, std::erf(x))
EMBER_FLOAT_UNARY(reciprocal, 1.0f / x)
EMBER_FLOAT_UNARY(floor, std::floor(x))
EMBER_FLOAT_UNARY(ceil, std::ceil(x))
EMBER_FLOAT_UNARY(round, std::nearbyint(x))
EMBER_FLOAT_UNARY(trunc, std::trunc(x))
EMBER_FLOAT_UNARY(mish, x * std::tanh(std::log1p(std::exp(x))))
EMBER_FLOAT_UNARY(hardswish, x * std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f)
EMBER_FLOAT_UNARY(hardsigmoid, std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f)
#undef EMBER_FLOAT_UNARY

struct NegOp {
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point<C>::value) return -x;
    else return static_cast<C>(0 - static_cast<uint64_t>(x));
  }
};
struct AbsOp {
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point<C>::value) return std::fabs(x);
    else return x < 0 ? static_cast<C>(0 - static_cast<uint64_t>(x)) : x;
  }
};
struct ReluOp {
  template <typename C>
  C operator()(C x) const { return x > C(0) ? x : (x != x ? x : C(0)); }
};
struct SignOp {
  template <typename C>
  C operator()(C x) const { return x != x ? x : static_cast<C>((C(0) < x) - (x < C(0))); }
};
struct BitNotOp {
  bool is_bool;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_integral<C>::value) return is_bool ? static_cast<C>(x == 0) : ~x;
    else return 0;
  }
};

Error neg_k(KernelContext&, KernelArgs a) { return unary(a, NegOp{}); }
Error abs_k(KernelContext&, KernelArgs a) { return unary(a, AbsOp{}); }
Error relu_k(KernelContext&, KernelArgs a) { return unary(a, ReluOp{}); }
Error sign_k(KernelContext&, KernelArgs a) { return unary(a, SignOp{}); }
Error bitwise_not_k(KernelContext&, KernelArgs a) {
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(!is_floating(out->dtype), "bitwise_not needs an integer or bool tensor, got %s", dtype_name(out->dtype));
  return unary(a, BitNotOp{out->dtype == DType::kBool});
}

struct GeluOp {
  bool tanh_approx;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point<C>::value) {
      if (tanh_approx) {
        const C k = C(0.7978845608028654);  // sqrt(2/pi)
        return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
      }
      return C(0.5) * x * (C(1) + std::erf(x * C(0.7071067811865476)));
    } else {
      return 0;
    }
  }
};
Error gelu_k(KernelContext&, KernelArgs a) {
  const char* s = "";
  int len = 0;
  EMBER_TRY(arg_opt_string(a, 1, &s, &len, "approximate"));
  bool tanh_approx = false;
  if (str_eq(s, len, "tanh")) {
    tanh_approx = true;
  } else {
    EMBER_CHECK_ARG(len == 0 || str_eq(s, len, "none"), "gelu: approximate='%.*s' is not 'none' or 'tanh'", len, s);
  }
  return unary(a, GeluOp{tanh_approx}, true);
}

struct LeakyReluOp {
  float slope;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point<C>::value) return x > 0 ? x : x * slope;
    else return 0;
  }
};
Error leaky_relu_k(KernelContext&, KernelArgs a) {
  double s = 0.01;
  EMBER_TRY(arg_double(a, 1, &s, "negative_slope"));
  return unary(a, LeakyReluOp{static_cast<float>(s)}, true);
}

struct EluOp {
  float alpha, scale, input_scale;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point<C>::value)
      return x > 0 ? x * scale : alpha * scale * (std::exp(x * input_scale) - 1);
    else return 0;
  }
};
Error elu_k(KernelContext&, KernelArgs a) {  // elu(self, alpha, scale, input_scale)
  double al = 1, sc = 1, is = 1;
  EMBER_TRY(arg_double(a, 1, &al, "alpha"));
  EMBER_TRY(arg_double(a, 2, &sc, "scale"));
  EMBER_TRY(arg_double(a, 3, &is, "input_scale"));
  return unary(a, EluOp{static_cast<float>(al), static_cast<float>(sc), static_cast<float>(is)}, true);
}

struct SoftplusOp {
  float beta, threshold;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point<C>::value)
      return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
    else return 0;
  }
};
Error softplus_k(KernelContext&, KernelArgs a) {
  double beta = 1, th = 20;
  EMBER_TRY(arg_double(a, 1, &beta, "beta"));
  EMBER_TRY(arg_double(a, 2, &th, "threshold"));
  return unary(a, SoftplusOp{static_cast<float>(beta), static_cast<float>(th)}, true);
}

// clamp with optional bounds: NaN propagates like PyTorch.
struct ClampOp {
  double lo, hi;
  bool has_lo, has_hi;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point<C>::value) {
      if (x != x) return x;
      if (has_lo && x < static_cast<C>(lo)) x = static_cast<C>(lo);
      if (has_hi && x > static_cast<C>(hi)) x = static_cast<C>(hi);
      return x;
    } else {
      if (has_lo && static_cast<double>(x) < lo) x = float_to_int<C>(std::ceil(lo));
      if (has_hi && static_cast<double>(x) > hi) x = float_to_int<C>(std::floor(hi));
      return x;
    }
  }
};
Error clamp_bounds(KernelArgs a, int ilo, int ihi, ClampOp* op) {
  op->has_lo = ilo >= 0 && !a[ilo].is_none();
  op->has_hi = ihi >= 0 && !a[ihi].is_none();
  op->lo = op->hi = 0;
  if (op->has_lo) EMBER_TRY(arg_double(a, ilo, &op->lo, "min"));
  if (op->has_hi) EMBER_TRY(arg_double(a, ihi, &op->hi, "max"));
  return Error::ok();
}
Error clamp_k(KernelContext&, KernelArgs a) {
  ClampOp op{};
  EMBER_TRY(clamp_bounds(a, 1, 2, &op));
  return unary(a, op);
}
Error clamp_min_k(KernelContext&, KernelArgs a) {
  ClampOp op{};
  EMBER_TRY(clamp_bounds(a, 1, -1, &op));
  return unary(a, op);
}
Error clamp_max_k(KernelContext&, KernelArgs a) {
  ClampOp op{};
  EMBER_TRY(clamp_bounds(a, -1, 1, &op));
  return unary(a, op);
}

// clamp.Tensor(self, min?, max?): tensor bounds, broadcast.
template <typename C>
Error clamp_tensor_typed(KernelArgs a, Tensor& out) {
  Tensor* self = nullptr;
  Tensor* lo = nullptr;
  Tensor* hi = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_opt_tensor(a, 1, &lo, "min"));
  EMBER_TRY(arg_opt_tensor(a, 2, &hi, "max"));
  Operand olo, ohi;
  if (lo) olo.t = lo;
  else make_scalar_operand<C>(&olo, -std::numeric_limits<double>::infinity(), std::numeric_limits<int64_t>::min(),
                              std::is_floating_point<C>::value);
  if (hi) ohi.t = hi;
  else make_scalar_operand<C>(&ohi, std::numeric_limits<double>::infinity(), std::numeric_limits<int64_t>::max(),
                              std::is_floating_point<C>::value);
  const Tensor* ins[3] = {self, olo.t, ohi.t};
  return map_elements<C, C, 3>(out, ins, [](C x, C l, C h) {
    if constexpr (std::is_floating_point<C>::value) {
      if (x != x) return x;
      if (l != l) return l;
      if (h != h) return h;
    }
    x = x < l ? l : x;
    return x > h ? h : x;
  });
}
Error clamp_tensor_k(KernelContext&, KernelArgs a) {
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  if (is_floating(out->dtype)) return clamp_tensor_typed<float>(a, *out);
  return clamp_tensor_typed<int64_t>(a, *out);
}

Error hardtanh_k(KernelContext&, KernelArgs a) {
  ClampOp op{};
  EMBER_TRY(clamp_bounds(a, 1, 2, &op));
  return unary(a, op);
}

}  // namespace

void register_unary_kernels(KernelRegistry& r) {
  auto add1 = [&](const char* name, KernelFn fn) { r.add(name, KernelDef{fn, 1, 1, false}); };
  add1("aten::exp.default", exp_k);
  add1("aten::exp2.default", exp2_k);
  add1("aten::expm1.default", expm1_k);
  add1("aten::log.default", log_k);
  add1("aten::log2.default", log2_k);
  add1("aten::log1p.default", log1p_k);
  add1("aten::sqrt.default", sqrt_k);
  add1("aten::rsqrt.default", rsqrt_k);
  add1("aten::tanh.default", tanh_k);
  add1("aten::sigmoid.default", sigmoid_k);
  add1("aten::silu.default", silu_k);
  add1("aten::cos.default", cos_k);
  add1("aten::sin.default", sin_k);
  add1("aten::tan.default", tan_k);
  add1("aten::atan.default", atan_k);
  add1("aten::erf.default", erf_k);
  add1("aten::reciprocal.default", reciprocal_k);
  add1("aten::floor.default", floor_k);
  add1("aten::ceil.default", ceil_k);
  add1("aten::round.default", round_k);
  add1("aten::trunc.default", trunc_k);
  add1("aten::mish.default", mish_k);
  add1("aten::hardswish.default", hardswish_k);
  add1("aten::hardsigmoid.default", hardsigmoid_k);
  add1("aten::neg.default", neg_k);
  add1("aten::abs.default", abs_k);
  add1("aten::relu.default", relu_k);
  add1("aten::sign.default", sign_k);
  add1("aten::bitwise_not.default", bitwise_not_k);
  r.add("aten::gelu.default", KernelDef{gelu_k, 2, 1, false});
  r.add("aten::leaky_relu.default", KernelDef{leaky_relu_k, 2, 1, false});
  r.add("aten::elu.default", KernelDef{elu_k, 4, 1, false});
  r.add("aten::softplus.default", KernelDef{softplus_k, 3, 1, false});
  r.add("aten::clamp.default", KernelDef{clamp_k, 3, 1, false});
  r.add("aten::clamp.Tensor", KernelDef{clamp_tensor_k, 3, 1, false});
  r.add("aten::clamp_min.default", KernelDef{clamp_min_k, 2, 1, false});
  r.add("aten::clamp_max.default", KernelDef{clamp_max_k, 2, 1, false});
  r.add("aten::hardtanh.default", KernelDef{hardtanh_k, 3, 1, false});
}

}  // namespace ember
