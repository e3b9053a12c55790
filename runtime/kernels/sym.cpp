// Symbolic-int kernels: sym_size/sym_numel read shapes at run time; sym::add/sub/mul/floordiv/
// mod/neg/max/min do integer arithmetic on them (Python semantics for floordiv and mod).
// Also the runtime assertions torch.export leaves in graphs.
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

Error set_int_out(KernelArgs a, int64_t v) {
  EValue& o = a[a.n - 1];
  EMBER_CHECK_ARG(o.tag == Tag::kInt || o.tag == Tag::kNone, "symbolic int output slot holds a %s", tag_name(o.tag));
  o.tag = Tag::kInt;
  o.scalar.i = v;
  return Error::ok();
}

Error sym_size_k(KernelContext&, KernelArgs a) {  // sym_size.int(self, dim)
  Tensor* self = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_CHECK_ARG(self->dim > 0, "sym_size: input is a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "sym_size"));
  return set_int_out(a, self->sizes[d]);
}
Error sym_numel_k(KernelContext&, KernelArgs a) {
  Tensor* self = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  return set_int_out(a, self->numel());
}

enum class SymOp { kAdd, kSub, kMul, kFloorDiv, kMod, kMax, kMin };

template <SymOp K>
Error sym_binary_k(KernelContext&, KernelArgs a) {
  int64_t x = 0, y = 0;
  EMBER_TRY(arg_int(a, 0, &x, "a"));
  EMBER_TRY(arg_int(a, 1, &y, "b"));
  int64_t r = 0;
  switch (K) {
    case SymOp::kAdd:
      EMBER_CHECK_ARG(!__builtin_add_overflow(x, y, &r), "sym add overflows: %" PRId64 " + %" PRId64, x, y);
      break;
    case SymOp::kSub:
      EMBER_CHECK_ARG(!__builtin_sub_overflow(x, y, &r), "sym sub overflows: %" PRId64 " - %" PRId64, x, y);
      break;
    case SymOp::kMul:
      EMBER_CHECK_ARG(!__builtin_mul_overflow(x, y, &r), "sym mul overflows: %" PRId64 " * %" PRId64, x, y);
      break;
    case SymOp::kFloorDiv:
    case SymOp::kMod: {
      EMBER_CHECK_ARG(y != 0, "symbolic integer division by zero (%" PRId64 " by 0)", x);
      EMBER_CHECK_ARG(!(x == INT64_MIN && y == -1), "symbolic integer division overflows");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      r = K == SymOp::kFloorDiv ? q : m;
      break;
    }
    case SymOp::kMax: r = x > y ? x : y; break;
    case SymOp::kMin: r = x < y ? x : y; break;
  }
  return set_int_out(a, r);
}

Error sym_neg_k(KernelContext&, KernelArgs a) {
  int64_t x = 0;
  EMBER_TRY(arg_int(a, 0, &x, "a"));
  EMBER_CHECK_ARG(x != INT64_MIN, "sym neg overflows");
  return set_int_out(a, -x);
}

// _assert_scalar(Scalar self, str assert_msg): fails when self is false/zero.
Error assert_scalar_k(KernelContext&, KernelArgs a) {
  Scalar s;
  EMBER_TRY(arg_scalar(a, 0, &s, "self"));
  if (s.as_double() != 0) return Error::ok();
  const char* msg = "";
  int len = 0;
  if (a[1].tag == Tag::kString && a[1].str != nullptr) {
    msg = a[1].str;
    len = a[1].count;
  }
  return Error::make(ErrorCode::kInvalidArgument, "runtime assertion failed: %.*s", len, msg);
}

// sym_constrain_range(_for_size)(Scalar size, int? min, int? max)
Error constrain_range_k(KernelContext&, KernelArgs a) {
  Scalar s;
  EMBER_TRY(arg_scalar(a, 0, &s, "size"));
  int64_t lo = 0, hi = 0;
  bool has_lo = false, has_hi = false;
  EMBER_TRY(arg_opt_int(a, 1, &lo, &has_lo, "min"));
  EMBER_TRY(arg_opt_int(a, 2, &hi, &has_hi, "max"));
  const int64_t v = s.as_int();
  EMBER_CHECK_ARG(!has_lo || v >= lo, "value %" PRId64 " is below its exported minimum %" PRId64, v, lo);
  EMBER_CHECK_ARG(!has_hi || v <= hi, "value %" PRId64 " is above its exported maximum %" PRId64, v, hi);
  return Error::ok();
}

Error noop_k(KernelContext&, KernelArgs) { return Error::ok(); }

}  // namespace

void register_sym_kernels(KernelRegistry& r) {
  r.add("aten::sym_size.int", KernelDef{sym_size_k, 2, 1, false});
  r.add("aten::sym_numel.default", KernelDef{sym_numel_k, 1, 1, false});
  struct Entry {
    const char* name;
    KernelFn fn;
    int nargs;
  };
  const Entry entries[] = {
      {"sym::add", sym_binary_k<SymOp::kAdd>, 2},      {"sym::sub", sym_binary_k<SymOp::kSub>, 2},
      {"sym::mul", sym_binary_k<SymOp::kMul>, 2},      {"sym::floordiv", sym_binary_k<SymOp::kFloorDiv>, 2},
      {"sym::mod", sym_binary_k<SymOp::kMod>, 2},      {"sym::max", sym_binary_k<SymOp::kMax>, 2},
      {"sym::min", sym_binary_k<SymOp::kMin>, 2},      {"sym::neg", sym_neg_k, 1},
  };
  for (const Entry& e : entries) {
    r.add(e.name, KernelDef{e.fn, e.nargs, 1, false});
    r.add(std::string(e.name) + ".default", KernelDef{e.fn, e.nargs, 1, false});
  }
  r.add("aten::_assert_scalar.default", KernelDef{assert_scalar_k, 2, 0, false});
  r.add("aten::sym_constrain_range_for_size.default", KernelDef{constrain_range_k, 3, 0, false});
  r.add("aten::sym_constrain_range.default", KernelDef{constrain_range_k, 3, 0, false});
  r.add("aten::_assert_tensor_metadata.default", KernelDef{noop_k, 6, 0, false});
}

}  // namespace ember
