#include "kernel_utils.h"

#include "f32_kernels.h"

namespace ember {
namespace kern {

void convert_elements(DType src_dt, const void* src, DType dst_dt, void* dst, int64_t n) {
  if (n <= 0) return;
  if (src_dt == dst_dt) {
    copy_bytes(dst, src, static_cast<size_t>(n) * dtype_size(src_dt));
    return;
  }
  if (src_dt == DType::kFloat16 && dst_dt == DType::kFloat32) {  // scales, caches: F16C when the CPU has it
    kern::f32_kernels().half_to_float.fn(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
    return;
  }
  dispatch_storage(src_dt, [&](auto s) {
    using S = decltype(s);
    const S* in = static_cast<const S*>(src);
    dispatch_storage(dst_dt, [&](auto d) {
      using D = decltype(d);
      D* o = static_cast<D*>(dst);
      if constexpr (std::is_same<S, Half>::value || std::is_same<S, BFloat16>::value) {
        for (int64_t i = 0; i < n; ++i) o[i] = to_storage<D>(from_storage<float>(in[i]));
      } else if constexpr (std::is_floating_point<S>::value) {
        for (int64_t i = 0; i < n; ++i) o[i] = to_storage<D>(in[i]);
      } else if constexpr (std::is_same<S, bool>::value) {
        for (int64_t i = 0; i < n; ++i) o[i] = to_storage<D>(static_cast<int64_t>(in[i]));
      } else {
        // Integers convert through int64 (exact) unless the target is floating.
        for (int64_t i = 0; i < n; ++i) {
          if constexpr (std::is_same<D, Half>::value || std::is_same<D, BFloat16>::value || std::is_same<D, float>::value) {
            o[i] = to_storage<D>(static_cast<float>(in[i]));
          } else {
            o[i] = to_storage<D>(static_cast<int64_t>(in[i]));
          }
        }
      }
      return 0;
    });
    return 0;
  });
}

double read_as_double(const Tensor& t, int64_t k) {
  return dispatch_storage(t.dtype, [&](auto s) -> double {
    using S = decltype(s);
    const S v = t.ptr<S>()[k];
    if constexpr (std::is_same<S, Half>::value || std::is_same<S, BFloat16>::value) {
      return static_cast<double>(from_storage<float>(v));
    } else {
      return static_cast<double>(v);
    }
  });
}

namespace {
int category(DType t) {
  if (t == DType::kBool) return 0;
  if (is_floating(t)) return 2;
  return 1;
}
int int_rank(DType t) {
  switch (t) {
    case DType::kUInt8: return 1;
    case DType::kInt8: return 1;
    case DType::kInt32: return 3;
    case DType::kInt64: return 4;
    default: return 0;
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if (a == DType::kFloat32 || b == DType::kFloat32) return DType::kFloat32;
    return DType::kFloat32;  // float16 with bfloat16
  }
  // Both integers. uint8 with int8 would be int16 in PyTorch; int32 is the nearest we store.
  if ((a == DType::kUInt8 && b == DType::kInt8) || (a == DType::kInt8 && b == DType::kUInt8)) return DType::kInt32;
  return int_rank(a) >= int_rank(b) ? a : b;
}

DType promote_with_scalar(DType t, const Scalar& s) {
  const int cs = s.kind == Scalar::kDouble ? 2 : s.kind == Scalar::kInt ? 1 : 0;
  const int ct = category(t);
  if (cs <= ct) return t;
  return cs == 2 ? DType::kFloat32 : DType::kInt64;
}

Error broadcast_shapes(const Tensor* const* ts, int n, int64_t* out_sizes, int* out_nd) {
  int nd = 0;
  for (int k = 0; k < n; ++k) nd = std::max(nd, static_cast<int>(ts[k]->dim));
  for (int d = 0; d < nd; ++d) out_sizes[d] = 1;
  for (int k = 0; k < n; ++k) {
    const Tensor& t = *ts[k];
    const int shift = nd - t.dim;
    for (int d = 0; d < t.dim; ++d) {
      const int64_t s = t.sizes[d];
      int64_t& o = out_sizes[shift + d];
      if (s == o || s == 1) continue;
      if (o == 1) {
        o = s;
        continue;
      }
      char b1[128], b2[128];
      return Error::make(ErrorCode::kInvalidArgument,
                         "shapes do not broadcast: operand %d is %s, another is %s (dim %d: %" PRId64 " vs %" PRId64 ")",
                         k, t.describe(b1, sizeof b1), ts[k == 0 ? 1 : 0]->describe(b2, sizeof b2), shift + d, s, o);
    }
  }
  *out_nd = nd;
  return Error::ok();
}

Error make_plan(const Tensor* const* ins, int nin, const int64_t* out_sizes, int out_nd, ElemPlan* p) {
  EMBER_CHECK(nin <= kMaxOperands, ErrorCode::kInternal, "too many operands (%d)", nin);
  p->nin = nin;
  int64_t numel = 1;
  for (int d = 0; d < out_nd; ++d) numel *= out_sizes[d];
  p->numel = numel;
  // Full-rank strides per input.
  int64_t st[kMaxOperands][kMaxDims];
  for (int k = 0; k < nin; ++k) {
    const Tensor& t = *ins[k];
    EMBER_CHECK_ARG(t.dim <= out_nd, "operand %d has rank %d, more than the result's %d", k, static_cast<int>(t.dim), out_nd);
    const int shift = out_nd - t.dim;
    int64_t cs[kMaxDims];
    contiguous_strides(t.sizes, t.dim, cs);
    for (int d = 0; d < out_nd; ++d) {
      if (d < shift) {
        st[k][d] = 0;
        continue;
      }
      const int64_t s = t.sizes[d - shift];
      EMBER_CHECK_ARG(s == out_sizes[d] || s == 1,
                      "operand %d does not broadcast to the result: dim %d is %" PRId64 ", result has %" PRId64, k, d, s,
                      out_sizes[d]);
      st[k][d] = s == 1 ? 0 : cs[d - shift];
    }
  }
  // Drop size-1 dims, then merge dims that are contiguous for every operand.
  int nd = 0;
  for (int d = 0; d < out_nd; ++d) {
    if (out_sizes[d] == 1) continue;
    if (nd > 0) {
      bool merge = true;
      for (int k = 0; k < nin; ++k)
        if (p->strides[k][nd - 1] != st[k][d] * out_sizes[d]) merge = false;
      if (merge) {
        p->sizes[nd - 1] *= out_sizes[d];
        for (int k = 0; k < nin; ++k) p->strides[k][nd - 1] = st[k][d];
        continue;
      }
    }
    p->sizes[nd] = out_sizes[d];
    for (int k = 0; k < nin; ++k) p->strides[k][nd] = st[k][d];
    ++nd;
  }
  if (nd == 0) {
    nd = 1;
    p->sizes[0] = 1;
    for (int k = 0; k < nin; ++k) p->strides[k][0] = 0;
  }
  p->nd = nd;
  return Error::ok();
}

}  // namespace kern
}  // namespace ember
