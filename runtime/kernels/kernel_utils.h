// Shared helpers for the portable kernels: argument checking, dtype conversion of element
// chunks, broadcasting plans and the generic elementwise engine.
//
// Every kernel validates what it reads from its arguments (tags, dtypes, ranks, every int
// used as a dim, size or index) and returns kInvalidArgument with the offending value, since
// a corrupted program file can pass anything.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/runtime/cpu.h"
#include "ember/runtime/dtype.h"
#include "ember/runtime/error.h"
#include "ember/runtime/evalue.h"
#include "ember/runtime/kernel.h"
#include "ember/runtime/tensor.h"
#include "ember/runtime/thread_pool.h"

namespace ember {
namespace kern {

// ------------------------------------------------------------------------------------------
// Argument access
// ------------------------------------------------------------------------------------------

inline Error bad_tag(int i, const char* what, const char* want, Tag got) {
  return Error::make(ErrorCode::kInvalidArgument, "argument %d (%s): expected %s but got %s", i, what,
                     want, tag_name(got));
}

inline Error arg_tensor(KernelArgs a, int i, Tensor** t, const char* what) {
  if (!a[i].is_tensor()) return bad_tag(i, what, "Tensor", a[i].tag);
  *t = &a[i].tensor;
  return Error::ok();
}

// None -> nullptr.
inline Error arg_opt_tensor(KernelArgs a, int i, Tensor** t, const char* what) {
  if (a[i].is_none()) {
    *t = nullptr;
    return Error::ok();
  }
  return arg_tensor(a, i, t, what);
}

inline Error arg_int(KernelArgs a, int i, int64_t* v, const char* what) {
  const EValue& e = a[i];
  if (e.tag == Tag::kInt) {
    *v = e.scalar.i;
  } else if (e.tag == Tag::kBool) {
    *v = e.scalar.b ? 1 : 0;
  } else {
    return bad_tag(i, what, "int", e.tag);
  }
  return Error::ok();
}

// Returns present=false for None.
inline Error arg_opt_int(KernelArgs a, int i, int64_t* v, bool* present, const char* what) {
  *present = !a[i].is_none();
  if (!*present) return Error::ok();
  return arg_int(a, i, v, what);
}

inline Error arg_double(KernelArgs a, int i, double* v, const char* what) {
  const EValue& e = a[i];
  if (e.tag != Tag::kDouble && e.tag != Tag::kInt && e.tag != Tag::kBool) return bad_tag(i, what, "number", e.tag);
  *v = e.to_double();
  return Error::ok();
}

inline Error arg_opt_double(KernelArgs a, int i, double* v, bool* present, const char* what) {
  *present = !a[i].is_none();
  if (!*present) return Error::ok();
  return arg_double(a, i, v, what);
}

inline Error arg_bool(KernelArgs a, int i, bool* v, const char* what) {
  const EValue& e = a[i];
  if (e.tag == Tag::kBool) {
    *v = e.scalar.b;
  } else if (e.tag == Tag::kInt) {
    *v = e.scalar.i != 0;
  } else {
    return bad_tag(i, what, "bool", e.tag);
  }
  return Error::ok();
}

// A `ScalarType?` argument: an Int holding ember's DType code, or None (present=false).
inline Error arg_opt_dtype(KernelArgs a, int i, DType* v, bool* present, const char* what) {
  *present = !a[i].is_none();
  if (!*present) return Error::ok();
  if (a[i].tag != Tag::kInt) return bad_tag(i, what, "dtype code (int)", a[i].tag);
  const int64_t code = a[i].scalar.i;
  EMBER_CHECK_ARG(code >= 0 && code < kNumDTypes, "argument %d (%s): dtype code %" PRId64 " is not one of ember's %d dtypes",
                  i, what, code, kNumDTypes);
  *v = static_cast<DType>(code);
  return Error::ok();
}

// An int[] argument (at most kMaxDims entries unless `max` says otherwise).
inline Error arg_int_list(KernelArgs a, int i, int64_t* out, int* n, const char* what, int max = kMaxDims) {
  return read_int_list(a[i], out, max, n, what);
}

// A `str?` argument; returns "" for None.
inline Error arg_opt_string(KernelArgs a, int i, const char** s, int* len, const char* what) {
  if (a[i].is_none()) {
    *s = "";
    *len = 0;
    return Error::ok();
  }
  if (a[i].tag != Tag::kString) return bad_tag(i, what, "str", a[i].tag);
  *s = a[i].str == nullptr ? "" : a[i].str;
  *len = a[i].str == nullptr ? 0 : a[i].count;
  return Error::ok();
}

inline bool str_eq(const char* s, int len, const char* lit) {
  const size_t n = std::strlen(lit);
  return static_cast<size_t>(len) == n && std::memcmp(s, lit, n) == 0;
}

// A numeric Scalar argument (Int, Double or Bool).
struct Scalar {
  enum Kind { kInt, kDouble, kBool } kind = kInt;
  int64_t i = 0;
  double d = 0;
  double as_double() const { return kind == kDouble ? d : static_cast<double>(i); }
  int64_t as_int() const { return kind == kDouble ? static_cast<int64_t>(d) : i; }
  bool is_floating() const { return kind == kDouble; }
};

inline Error arg_scalar(KernelArgs a, int i, Scalar* s, const char* what) {
  const EValue& e = a[i];
  switch (e.tag) {
    case Tag::kInt: s->kind = Scalar::kInt; s->i = e.scalar.i; s->d = static_cast<double>(e.scalar.i); break;
    case Tag::kBool: s->kind = Scalar::kBool; s->i = e.scalar.b; s->d = e.scalar.b; break;
    case Tag::kDouble: s->kind = Scalar::kDouble; s->d = e.scalar.d; s->i = 0; break;
    default: return bad_tag(i, what, "Scalar", e.tag);
  }
  return Error::ok();
}

inline const char* shape_str(const Tensor& t, char* buf, size_t len) { return t.describe(buf, len); }

// Checks `t` has dtype `dt`.
inline Error check_dtype(const Tensor& t, DType dt, const char* what) {
  EMBER_CHECK_ARG(t.dtype == dt, "%s: expected dtype %s but got %s", what, dtype_name(dt), dtype_name(t.dtype));
  return Error::ok();
}

inline Error check_floating(const Tensor& t, const char* what) {
  EMBER_CHECK_ARG(is_floating(t.dtype), "%s: expected a floating tensor (float32/float16/bfloat16) but got %s", what,
                  dtype_name(t.dtype));
  return Error::ok();
}

inline Error check_index_dtype(const Tensor& t, const char* what) {
  EMBER_CHECK_ARG(t.dtype == DType::kInt64 || t.dtype == DType::kInt32,
                  "%s: expected an int64 or int32 index tensor but got %s", what, dtype_name(t.dtype));
  return Error::ok();
}

inline Error check_rank(const Tensor& t, int rank, const char* what) {
  EMBER_CHECK_ARG(t.dim == rank, "%s: expected rank %d but got rank %d", what, rank, static_cast<int>(t.dim));
  return Error::ok();
}

// Reads element k of an int64/int32 index tensor.
inline int64_t index_at(const Tensor& t, int64_t k) {
  return t.dtype == DType::kInt64 ? t.ptr<int64_t>()[k] : static_cast<int64_t>(t.ptr<int32_t>()[k]);
}

inline void contiguous_strides(const int64_t* sizes, int nd, int64_t* strides) {
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; --d) {
    strides[d] = s;
    s *= sizes[d];
  }
}

inline bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.dim != b.dim) return false;
  for (int d = 0; d < a.dim; ++d)
    if (a.sizes[d] != b.sizes[d]) return false;
  return true;
}

// Bytes of overlap-safe copy.
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n == 0 || dst == src) return;
  std::memmove(dst, src, n);
}

// ------------------------------------------------------------------------------------------
// Element conversion
// ------------------------------------------------------------------------------------------

// Float -> integer conversion that never invokes undefined behaviour (NaN/inf/out of range
// saturate, NaN -> 0).
template <typename I>
inline I float_to_int(double v) {
  if (!(v == v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

// Converts a compute value C to storage type S.
template <typename S, typename C>
inline S to_storage(C v) {
  if constexpr (std::is_same<S, bool>::value) {
    return v != C(0);
  } else if constexpr (std::is_same<S, Half>::value) {
    return Half{float_to_half(static_cast<float>(v))};
  } else if constexpr (std::is_same<S, BFloat16>::value) {
    return BFloat16{float_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_integral<S>::value && std::is_floating_point<C>::value) {
    return float_to_int<S>(static_cast<double>(v));
  } else {
    return static_cast<S>(v);
  }
}

// Converts storage type S to compute value C.
template <typename C, typename S>
inline C from_storage(S v) {
  if constexpr (std::is_same<S, Half>::value) {
    return to_storage<C>(half_to_float(v.bits));
  } else if constexpr (std::is_same<S, BFloat16>::value) {
    return to_storage<C>(bf16_to_float(v.bits));
  } else {
    return to_storage<C>(v);
  }
}

// Calls f(S{}) with the storage type of `dt`.
template <typename F>
inline auto dispatch_storage(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat16: return f(Half{});
    case DType::kBFloat16: return f(BFloat16{});
    case DType::kInt64: return f(int64_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt8: return f(int8_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kBool: return f(bool{});
  }
  return f(float{});
}

template <typename S>
constexpr DType dtype_of() {
  if constexpr (std::is_same<S, float>::value) return DType::kFloat32;
  else if constexpr (std::is_same<S, Half>::value) return DType::kFloat16;
  else if constexpr (std::is_same<S, BFloat16>::value) return DType::kBFloat16;
  else if constexpr (std::is_same<S, int64_t>::value) return DType::kInt64;
  else if constexpr (std::is_same<S, int32_t>::value) return DType::kInt32;
  else if constexpr (std::is_same<S, int8_t>::value) return DType::kInt8;
  else if constexpr (std::is_same<S, uint8_t>::value) return DType::kUInt8;
  else if constexpr (std::is_same<S, bool>::value) return DType::kBool;
  else return static_cast<DType>(-1);  // a compute-only type (double): never a storage dtype
}

// Loads n elements of dtype `dt` at element offset `off` (stride 1, or stride 0: broadcast
// the element at `off`) as compute type C into `buf`. Returns a pointer to the n values:
// straight into the tensor when no conversion is needed, else `buf`.
template <typename C>
inline const C* load_chunk(DType dt, const void* base, int64_t off, int64_t stride, int64_t n, C* buf) {
  if (dtype_of<C>() == dt && stride == 1) return static_cast<const C*>(base) + off;
  dispatch_storage(dt, [&](auto s) {
    using S = decltype(s);
    const S* p = static_cast<const S*>(base) + off;
    if (stride == 0) {
      const C v = from_storage<C>(p[0]);
      for (int64_t i = 0; i < n; ++i) buf[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) buf[i] = from_storage<C>(p[i]);
    }
    return 0;
  });
  return buf;
}

// Where the n results should be written: straight into the output when its dtype is C.
template <typename C>
inline C* store_target(DType dt, void* base, int64_t off, C* buf) {
  if (dtype_of<C>() == dt) return static_cast<C*>(base) + off;
  return buf;
}

// Finishes a store started with store_target (converts `buf` into the output if needed).
template <typename C>
inline void store_chunk(DType dt, void* base, int64_t off, int64_t n, const C* src) {
  if (dtype_of<C>() == dt && static_cast<const C*>(base) + off == src) return;
  dispatch_storage(dt, [&](auto s) {
    using S = decltype(s);
    S* p = static_cast<S*>(base) + off;
    for (int64_t i = 0; i < n; ++i) p[i] = to_storage<S>(src[i]);
    return 0;
  });
}

// Makes v hold at least n elements; never shrinks it (a reused buffer is not zero-filled again).
template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

// Converts n contiguous elements between any two dtypes (overlap-safe only when equal dtype).
void convert_elements(DType src_dt, const void* src, DType dst_dt, void* dst, int64_t n);

// Reads element k of any tensor as double / writes one element from double.
double read_as_double(const Tensor& t, int64_t k);

// ------------------------------------------------------------------------------------------
// Type promotion
// ------------------------------------------------------------------------------------------

DType promote_types(DType a, DType b);

// The dtype a Scalar contributes when combined with a tensor of dtype `t` (PyTorch's
// category rule: a scalar only promotes across categories bool < int < float).
DType promote_with_scalar(DType t, const Scalar& s);

// ------------------------------------------------------------------------------------------
// Broadcasting elementwise engine
// ------------------------------------------------------------------------------------------

constexpr int kMaxOperands = 4;
constexpr int64_t kChunk = 256;

// An input operand: a tensor (possibly a 0-dim scalar tensor built over `local`).
struct Operand {
  const Tensor* t = nullptr;
  Tensor scalar_t;   // used when the operand is a Scalar
  union {
    float f;
    int64_t i;
    bool b;
  } local{};
};

// Turns a Scalar into a 0-dim tensor of compute type C.
template <typename C>
inline void make_scalar_operand(Operand* op, double v_d, int64_t v_i, bool is_float) {
  Tensor& t = op->scalar_t;
  t.dim = 0;
  t.data = &op->local;
  t.capacity = sizeof(op->local);
  if constexpr (std::is_same<C, float>::value) {
    op->local.f = is_float ? static_cast<float>(v_d) : static_cast<float>(v_i);
    t.dtype = DType::kFloat32;
  } else if constexpr (std::is_same<C, bool>::value) {
    op->local.b = is_float ? v_d != 0 : v_i != 0;
    t.dtype = DType::kBool;
  } else {
    op->local.i = is_float ? float_to_int<int64_t>(v_d) : v_i;
    t.dtype = DType::kInt64;
  }
  op->t = &t;
}

template <typename C>
inline void make_scalar_operand(Operand* op, const Scalar& s) {
  make_scalar_operand<C>(op, s.d, s.i, s.is_floating());
}

// A coalesced iteration plan over an output shape with per-input element strides.
struct ElemPlan {
  int nd = 0;                               // coalesced rank (>= 1)
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};  // per input
  int nin = 0;
  int64_t numel = 0;
};

// Computes the broadcast shape of `n` tensors into out_sizes / out_nd.
Error broadcast_shapes(const Tensor* const* ts, int n, int64_t* out_sizes, int* out_nd);

// Builds the plan for inputs broadcast to `out_sizes` (which each input must broadcast to).
Error make_plan(const Tensor* const* ins, int nin, const int64_t* out_sizes, int out_nd, ElemPlan* plan);

// Runs body(out_offset, in_offsets[nin], in_inner_strides[nin], n) over rows/chunks of the
// plan, in parallel when large. Inner strides are 0 or 1.
template <typename Body>
void run_plan(const ElemPlan& p, Body&& body) {
  const int64_t inner = p.sizes[p.nd - 1];
  if (p.numel == 0 || inner == 0) return;
  const int64_t chunks_per_row = (inner + kChunk - 1) / kChunk;
  const int64_t rows = p.numel / inner;
  const int64_t tiles = rows * chunks_per_row;
  int64_t inner_st[kMaxOperands];
  for (int k = 0; k < p.nin; ++k) inner_st[k] = p.strides[k][p.nd - 1];
  auto range = [&](int64_t tb, int64_t te) {
    int64_t row = tb / chunks_per_row;
    int64_t c = tb % chunks_per_row;
    // Unravel `row` over dims [0, nd-1).
    int64_t idx[kMaxDims] = {};
    int64_t off[kMaxOperands] = {};
    {
      int64_t r = row;
      for (int d = p.nd - 2; d >= 0; --d) {
        idx[d] = r % p.sizes[d];
        r /= p.sizes[d];
      }
      for (int k = 0; k < p.nin; ++k) {
        int64_t o = 0;
        for (int d = 0; d < p.nd - 1; ++d) o += idx[d] * p.strides[k][d];
        off[k] = o;
      }
    }
    int64_t t = tb;
    while (t < te) {
      const int64_t b = c * kChunk;
      const int64_t n = std::min(kChunk, inner - b);
      int64_t in_off[kMaxOperands];
      for (int k = 0; k < p.nin; ++k) in_off[k] = off[k] + b * inner_st[k];
      body(row * inner + b, in_off, inner_st, n);
      ++t;
      if (++c == chunks_per_row) {
        c = 0;
        ++row;
        for (int d = p.nd - 2; d >= 0; --d) {  // increment the row counter
          ++idx[d];
          for (int k = 0; k < p.nin; ++k) off[k] += p.strides[k][d];
          if (idx[d] < p.sizes[d] || d == 0) break;
          for (int k = 0; k < p.nin; ++k) off[k] -= p.strides[k][d] * idx[d];
          idx[d] = 0;
        }
      }
    }
  };
  const int64_t grain = std::max<int64_t>(1, 32768 / std::min<int64_t>(inner, kChunk));
  if (p.numel >= 65536) {
    parallel_for(tiles, grain, range);
  } else {
    range(0, tiles);
  }
}

// Elementwise map of `nin` inputs (compute type Cin) to the output (compute type Cout):
// out = f(in0[i], in1[i], ...). Broadcasts inputs, resizes `out` to the broadcast shape.
// Handles out aliasing an input of the same shape (each element is read before written).
template <typename Cin, typename Cout, int NIN, typename F>
Error map_elements(Tensor& out, const Tensor* const* ins, F f) {
  int64_t sizes[kMaxDims];
  int nd = 0;
  EMBER_TRY(broadcast_shapes(ins, NIN, sizes, &nd));
  EMBER_TRY(out.resize(sizes, nd));
  ElemPlan plan;
  EMBER_TRY(make_plan(ins, NIN, sizes, nd, &plan));
  const DType odt = out.dtype;
  void* obase = out.data;
  run_plan(plan, [&](int64_t ooff, const int64_t* in_off, const int64_t* in_st, int64_t n) {
    Cin bufs[NIN][kChunk];
    const Cin* src[NIN];
    for (int k = 0; k < NIN; ++k) src[k] = load_chunk<Cin>(ins[k]->dtype, ins[k]->data, in_off[k], in_st[k], n, bufs[k]);
    Cout obuf[kChunk];
    Cout* dst = store_target<Cout>(odt, obase, ooff, obuf);
    if constexpr (NIN == 1) {
      const Cin* a = src[0];
      for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i]);
    } else if constexpr (NIN == 2) {
      const Cin* a = src[0];
      const Cin* b = src[1];
      if (in_st[1] == 0) {
        const Cin bv = b[0];
        for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i], bv);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
      }
    } else if constexpr (NIN == 3) {
      const Cin* a = src[0];
      const Cin* b = src[1];
      const Cin* c = src[2];
      for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i], c[i]);
    }
    store_chunk<Cout>(odt, obase, ooff, n, dst);
  });
  return Error::ok();
}

// Compute type for arithmetic producing dtype `dt`.
enum class ComputeKind { kFloat, kInt, kBool };
inline ComputeKind compute_kind(DType dt) {
  if (is_floating(dt)) return ComputeKind::kFloat;
  if (dt == DType::kBool) return ComputeKind::kBool;
  return ComputeKind::kInt;
}

// Copies `in` permuted by `perm` (out dim d = in dim perm[d]) into contiguous `out` memory of
// the same dtype (no overlap allowed).
void permute_copy(const Tensor& in, const int64_t* perm, void* out);

// Copies the strided view (`nd` <= 2*kMaxDims dims, element strides, may be 0) of `src` into
// contiguous `dst`. Source and destination must not overlap.
void strided_copy(const void* src, size_t esize, int nd, const int64_t* sizes, const int64_t* strides, void* dst);

// The end of a SIMD argmax (f32_kernels.h, ArgmaxFn): each of `lanes` lanes holds its largest
// value bv[l] at index bi[l] (-1: none above -inf); the lowest index among the lanes at the top wins,
// then the scalar tail x[i..n), whose indices come after every lane's, can only win by being larger.
inline int64_t argmax_finish(const float* bv, const int32_t* bi, int lanes, const float* x, int64_t i, int64_t n) {
  int64_t top = -1;
  float top_v = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < lanes; ++l) {
    if (bv[l] > top_v || (bv[l] == top_v && bi[l] >= 0 && bi[l] < top)) {
      top_v = bv[l];
      top = bi[l];
    }
  }
  for (; i < n; ++i) {
    if (x[i] > top_v) {
      top_v = x[i];
      top = i;
    }
  }
  return top;
}

// exp(x) in fp32 to ~1 ulp, written as plain arithmetic so loops over it vectorize.
// Returns exactly 0 below -87.3 (so masked -inf scores get probability 0).
inline float exp_approx(float x) {
  const float xc = std::min(std::max(x, -87.3f), 88.3f);
  const float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = xc * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;
  // Integer work in uint32: a NaN input (any bit pattern) must not shift a negative value.
  uint32_t ti;
  std::memcpy(&ti, &t, 4);
  const uint32_t ni = ti - 0x4B400000u;  // bits of kMagic: n as an integer, modulo 2^32
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  const float y = p * r * r + r + 1.0f;
  const uint32_t bits = (ni + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x < -87.3f ? 0.0f : y * scale;
}

// Runs body(rb, re) over `rows` rows of `width` elements each: on the pool when there is enough
// work (>= 32K elements, >= ~8K elements per task), else on the calling thread.
template <typename F>
void parallel_rows(int64_t rows, int64_t width, F&& body) {
  if (rows > 1 && rows * width >= 32768) parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(width, 1)), body);
  else body(0, rows);
}

// A float tensor viewed as fp32: the data itself, or a converted copy.
struct F32View {
  const float* p = nullptr;
  std::vector<float> storage;
};

inline Error as_f32(const Tensor& t, F32View* v, const char* what) {
  EMBER_TRY(check_floating(t, what));
  if (t.dtype == DType::kFloat32) {
    v->p = t.ptr<float>();
    return Error::ok();
  }
  v->storage.resize(static_cast<size_t>(t.numel()));
  convert_elements(t.dtype, t.data, DType::kFloat32, v->storage.data(), t.numel());
  v->p = v->storage.data();
  return Error::ok();
}

// Reduction helpers: splits shape around dim `d` into [outer, size, inner].
inline void split_at(const Tensor& t, int d, int64_t* outer, int64_t* n, int64_t* inner) {
  *outer = t.prod(0, d);
  *n = t.dim == 0 ? 1 : t.sizes[d];
  *inner = t.dim == 0 ? 1 : t.prod(d + 1, t.dim);
}

}  // namespace kern

// Per-file registration functions (called by register_portable_kernels).
void register_binary_kernels(KernelRegistry& r);
void register_unary_kernels(KernelRegistry& r);
void register_compare_kernels(KernelRegistry& r);
void register_reduce_kernels(KernelRegistry& r);
void register_softmax_kernels(KernelRegistry& r);
void register_norm_kernels(KernelRegistry& r);
void register_linear_kernels(KernelRegistry& r);
void register_attention_kernels(KernelRegistry& r);
void register_shape_kernels(KernelRegistry& r);
void register_index_kernels(KernelRegistry& r);
void register_factory_kernels(KernelRegistry& r);
void register_convert_kernels(KernelRegistry& r);
void register_sym_kernels(KernelRegistry& r);
void register_fused_kernels(KernelRegistry& r);
void register_quantized_kernels(KernelRegistry& r);
void register_kv_quant_kernels(KernelRegistry& r);
// Appends the quantized row kernels' level (see ember/runtime/cpu.h: kernel_paths()).
void describe_quantized_kernels(std::vector<KernelPath>& out);

}  // namespace ember
