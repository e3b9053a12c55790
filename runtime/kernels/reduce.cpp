// Reductions over dims: sum, mean, prod, amax, amin, any, all, argmax, argmin, max.dim,
// min.dim, and cumsum.
//
// The input is viewed as [O, R, I] (R = the reduced dims) when the reduced dims are one
// contiguous block; otherwise it is first permuted into [kept..., reduced...] order.
// Floating sums accumulate in double, integer sums in int64.
#include <vector>

#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// Which dims are reduced, and the output shape.
struct ReducePlan {
  bool reduced[kMaxDims] = {};
  int64_t out_sizes[kMaxDims] = {};
  int out_nd = 0;
};

// dims: nullptr/ndims==0 -> all dims (when `empty_means_all`).
Error make_reduce_plan(const Tensor& t, const int64_t* dims, int ndims, bool keepdim, ReducePlan* p, const char* op) {
  if (ndims == 0) {
    for (int d = 0; d < t.dim; ++d) p->reduced[d] = true;
  }
  for (int k = 0; k < ndims; ++k) {
    int64_t d;
    EMBER_TRY(normalize_dim(dims[k], t.dim, &d, op));
    if (t.dim == 0) continue;
    EMBER_CHECK_ARG(!p->reduced[d], "%s: dim %" PRId64 " appears more than once in the dim list", op, d);
    p->reduced[d] = true;
  }
  p->out_nd = 0;
  for (int d = 0; d < t.dim; ++d) {
    if (p->reduced[d]) {
      if (keepdim) p->out_sizes[p->out_nd++] = 1;
    } else {
      p->out_sizes[p->out_nd++] = t.sizes[d];
    }
  }
  return Error::ok();
}

// A view of the input as [O, R, I]: either the tensor itself, or a permuted copy.
struct ORI {
  const void* data = nullptr;
  int64_t O = 1, R = 1, I = 1;
  std::vector<uint8_t> storage;
};

void make_ori(const Tensor& t, const ReducePlan& p, ORI* v) {
  // Find whether the non-trivial reduced dims form one block.
  int first = -1, last = -1;
  bool block = true;
  for (int d = 0; d < t.dim; ++d) {
    if (!p.reduced[d] || t.sizes[d] == 1) continue;
    if (first < 0) first = d;
    last = d;
  }
  if (first >= 0) {
    for (int d = first; d <= last; ++d)
      if (!p.reduced[d] && t.sizes[d] != 1) block = false;
  }
  if (first < 0) {  // nothing of size > 1 reduced
    v->data = t.data;
    v->O = t.numel();
    v->R = 1;
    v->I = 1;
    if (t.numel() == 0) {
      // Reduced dims of size 0 make R 0.
      for (int d = 0; d < t.dim; ++d)
        if (p.reduced[d] && t.sizes[d] == 0) {
          v->R = 0;
          v->O = 1;
          for (int e = 0; e < t.dim; ++e)
            if (!p.reduced[e]) v->O *= t.sizes[e];
        }
    }
    return;
  }
  if (block) {
    v->data = t.data;
    v->O = t.prod(0, first);
    v->R = t.prod(first, last + 1);
    v->I = t.prod(last + 1, t.dim);
    return;
  }
  int64_t perm[kMaxDims];
  int n = 0;
  v->O = 1;
  v->R = 1;
  for (int d = 0; d < t.dim; ++d)
    if (!p.reduced[d]) {
      perm[n++] = d;
      v->O *= t.sizes[d];
    }
  for (int d = 0; d < t.dim; ++d)
    if (p.reduced[d]) {
      perm[n++] = d;
      v->R *= t.sizes[d];
    }
  v->I = 1;
  v->storage.resize(t.nbytes());
  permute_copy(t, perm, v->storage.data());
  v->data = v->storage.data();
}

// Reduces [O, R, I] into out[O, I]: acc = init; acc = step(acc, x) over R; out = fin(acc).
template <typename Acc, typename Step, typename Fin>
void reduce_ori(DType in_dt, const ORI& v, Tensor& out, Acc init, Step step, Fin fin) {
  const int64_t O = v.O, R = v.R, I = v.I;
  const DType odt = out.dtype;
  auto body = [&](int64_t ob, int64_t oe) {
    Acc acc[kChunk];
    Acc buf[kChunk];
    for (int64_t o = ob; o < oe; ++o) {
      if (I == 1) {
        Acc a = init;
        for (int64_t r0 = 0; r0 < R; r0 += kChunk) {
          const int64_t n = std::min(kChunk, R - r0);
          const Acc* x = load_chunk<Acc>(in_dt, v.data, o * R + r0, 1, n, buf);
          for (int64_t k = 0; k < n; ++k) a = step(a, x[k]);
        }
        acc[0] = fin(a);
        store_chunk<Acc>(odt, out.data, o, 1, acc);
        continue;
      }
      for (int64_t i0 = 0; i0 < I; i0 += kChunk) {
        const int64_t n = std::min(kChunk, I - i0);
        for (int64_t k = 0; k < n; ++k) acc[k] = init;
        for (int64_t r = 0; r < R; ++r) {
          const Acc* x = load_chunk<Acc>(in_dt, v.data, (o * R + r) * I + i0, 1, n, buf);
          for (int64_t k = 0; k < n; ++k) acc[k] = step(acc[k], x[k]);
        }
        for (int64_t k = 0; k < n; ++k) acc[k] = fin(acc[k]);
        store_chunk<Acc>(odt, out.data, o * I + i0, n, acc);
      }
    }
  };
  if (O * R * I >= 65536 && O > 1) parallel_for(O, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, R * I)), body);
  else body(0, O);
}

enum class RKind { kSum, kMean, kProd, kMax, kMin, kAny, kAll };

Error reduce_generic(const Tensor& self, const int64_t* dims, int ndims, bool keepdim, Tensor& out, RKind kind,
                     const char* op) {
  ReducePlan p;
  EMBER_TRY(make_reduce_plan(self, dims, ndims, keepdim, &p, op));
  EMBER_TRY(out.resize(p.out_sizes, p.out_nd));
  ORI v;
  make_ori(self, p, &v);
  if ((kind == RKind::kMax || kind == RKind::kMin) && v.R == 0 && v.O > 0) {
    return Error::make(ErrorCode::kInvalidArgument, "%s: cannot reduce over a zero-size dim (no identity)", op);
  }
  const double R = static_cast<double>(v.R);
  const bool fl = is_floating(self.dtype) || (is_floating(out.dtype) && (kind == RKind::kSum || kind == RKind::kMean ||
                                                                           kind == RKind::kProd));
  switch (kind) {
    case RKind::kSum:
    case RKind::kMean:
      if (fl) {
        const bool mean = kind == RKind::kMean;
        reduce_ori<double>(self.dtype, v, out, 0.0, [](double a, double x) { return a + x; },
                           [mean, R](double a) { return mean ? a / R : a; });
      } else {
        EMBER_CHECK_ARG(kind == RKind::kSum, "%s: mean needs a floating dtype, got %s", op, dtype_name(out.dtype));
        reduce_ori<int64_t>(self.dtype, v, out, int64_t{0},
                            [](int64_t a, int64_t x) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(x)); },
                            [](int64_t a) { return a; });
      }
      break;
    case RKind::kProd:
      if (fl) reduce_ori<double>(self.dtype, v, out, 1.0, [](double a, double x) { return a * x; }, [](double a) { return a; });
      else
        reduce_ori<int64_t>(self.dtype, v, out, int64_t{1},
                            [](int64_t a, int64_t x) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(x)); },
                            [](int64_t a) { return a; });
      break;
    case RKind::kMax:
    case RKind::kMin: {
      const bool mx = kind == RKind::kMax;
      if (fl) {
        const float init = mx ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
        reduce_ori<float>(self.dtype, v, out, init,
                          [mx](float a, float x) { return (x != x || (mx ? x > a : x < a)) ? x : a; },
                          [](float a) { return a; });
      } else {
        const int64_t init = mx ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
        reduce_ori<int64_t>(self.dtype, v, out, init, [mx](int64_t a, int64_t x) { return (mx ? x > a : x < a) ? x : a; },
                            [](int64_t a) { return a; });
      }
      break;
    }
    case RKind::kAny:
    case RKind::kAll: {
      const bool any = kind == RKind::kAny;
      if (is_floating(self.dtype)) {
        reduce_ori<float>(self.dtype, v, out, any ? 0.0f : 1.0f,
                          [any](float a, float x) { return any ? ((a != 0 || x != 0) ? 1.0f : 0.0f) : ((a != 0 && x != 0) ? 1.0f : 0.0f); },
                          [](float a) { return a; });
      } else {
        reduce_ori<int64_t>(self.dtype, v, out, int64_t{any ? 0 : 1},
                            [any](int64_t a, int64_t x) -> int64_t { return any ? (a != 0 || x != 0) : (a != 0 && x != 0); },
                            [](int64_t a) { return a; });
      }
      break;
    }
  }
  return Error::ok();
}

// Reads an optional dim list argument (None or [] = all dims).
Error read_dims(KernelArgs a, int i, int64_t* dims, int* n) {
  *n = 0;
  if (a[i].is_none()) return Error::ok();
  return arg_int_list(a, i, dims, n, "dim");
}

// The op's name in messages: with dims (sum.dim_IntList, amax, ...) and over the whole tensor.
constexpr const char* kDimsName[] = {"sum", "mean", "prod", "amax", "amin", "any", "all"};
constexpr const char* kFullName[] = {"sum", "mean", "prod", "max", "min", "any", "all"};
static_assert(sizeof kDimsName / sizeof *kDimsName == static_cast<int>(RKind::kAll) + 1, "a name per RKind");

// (self, dim, keepdim, ...) -> out: sum.dim_IntList, mean.dim and prod.dim_int (a trailing dtype?, the
// output's dtype already), amax/amin (dim[]), any/all .dim (an int: a one-element list) and .dims
// (dim[]?: None or [] is every dim).
template <RKind K>
Error dims_reduce_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t dims[kMaxDims];
  int n = 0;
  bool keep = false;
  EMBER_TRY(read_dims(a, 1, dims, &n));
  EMBER_TRY(arg_bool(a, 2, &keep, "keepdim"));
  return reduce_generic(*self, dims, n, keep, *out, K, kDimsName[static_cast<int>(K)]);
}
// (self, ...) -> out over every element: sum/mean/prod.default (a trailing dtype?), max/min/any/all.default.
template <RKind K>
Error full_reduce_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  return reduce_generic(*self, nullptr, 0, false, *out, K, kFullName[static_cast<int>(K)]);
}

// argmax/argmin/max.dim/min.dim: value + first index of the extreme (NaN counts as extreme).
Error arg_extreme(const Tensor& self, bool has_dim, int64_t dim, bool keep, Tensor* values, Tensor& indices, bool is_max,
                  const char* op) {
  ReducePlan p;
  int64_t d = 0;
  ORI v;
  if (has_dim) {
    EMBER_TRY(make_reduce_plan(self, &dim, 1, keep, &p, op));
    EMBER_TRY(normalize_dim(dim, self.dim, &d, op));
    v.data = self.data;
    if (self.dim > 0) {
      v.O = self.prod(0, static_cast<int>(d));
      v.R = self.sizes[d];
      v.I = self.prod(static_cast<int>(d) + 1, self.dim);
    }
  } else {  // flattened
    p.out_nd = 0;
    if (keep)
      for (int k = 0; k < self.dim; ++k) p.out_sizes[p.out_nd++] = 1;
    v.data = self.data;
    v.O = 1;
    v.R = self.numel();
    v.I = 1;
  }
  EMBER_CHECK_ARG(v.R > 0 || v.O * v.I == 0, "%s: cannot reduce over a zero-size dim", op);
  EMBER_TRY(indices.resize(p.out_sizes, p.out_nd));
  EMBER_CHECK_ARG(indices.dtype == DType::kInt64, "%s: indices output must be int64, got %s", op, dtype_name(indices.dtype));
  if (values) EMBER_TRY(values->resize(p.out_sizes, p.out_nd));
  const bool fl = is_floating(self.dtype);
  int64_t* idx_out = indices.ptr<int64_t>();
  const int64_t O = v.O, R = v.R, I = v.I;
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t i0 = 0; i0 < I; i0 += kChunk) {
      const int64_t n = std::min(kChunk, I - i0);
      double best[kChunk];
      int64_t bi[kChunk];
      double buf[kChunk];
      for (int64_t r = 0; r < R; ++r) {
        const double* xs = load_chunk<double>(self.dtype, self.data, (o * R + r) * I + i0, 1, n, buf);
        for (int64_t k = 0; k < n; ++k) {
          const double x = xs[k];
          if (r == 0) {
            best[k] = x;
            bi[k] = 0;
            continue;
          }
          const double b = best[k];
          if (fl && b != b) continue;
          const bool better = (fl && x != x) || (is_max ? x > b : x < b);
          if (better) {
            best[k] = x;
            bi[k] = r;
          }
        }
      }
      for (int64_t k = 0; k < n; ++k) idx_out[o * I + i0 + k] = bi[k];
      if (values) store_chunk<double>(values->dtype, values->data, o * I + i0, n, best);
    }
  }
  return Error::ok();
}

template <bool kMax>
Error argext_k(KernelContext&, KernelArgs a) {  // argmax(self, dim?, keepdim)
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t dim = 0;
  bool has = false, keep = false;
  EMBER_TRY(arg_opt_int(a, 1, &dim, &has, "dim"));
  EMBER_TRY(arg_bool(a, 2, &keep, "keepdim"));
  return arg_extreme(*self, has, dim, keep, nullptr, *out, kMax, kMax ? "argmax" : "argmin");
}
template <bool kMax>
Error ext_dim_k(KernelContext&, KernelArgs a) {  // max.dim(self, dim, keepdim) -> (values, indices)
  Tensor *self = nullptr, *vals = nullptr, *idx = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, 3, &vals, "values"));
  EMBER_TRY(arg_tensor(a, 4, &idx, "indices"));
  int64_t dim = 0;
  bool keep = false;
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(arg_bool(a, 2, &keep, "keepdim"));
  return arg_extreme(*self, true, dim, keep, vals, *idx, kMax, kMax ? "max" : "min");
}

// cumsum(self, dim, dtype?)
Error cumsum_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t dim = 0;
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  int64_t d = 0;
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "cumsum"));
  EMBER_TRY(out->resize(self->sizes, self->dim));
  int64_t O, R, I;
  split_at(*self, static_cast<int>(d), &O, &R, &I);
  const bool fl = is_floating(out->dtype);
  auto run = [&](auto zero) {
    using Acc = decltype(zero);
    std::vector<Acc> acc(static_cast<size_t>(std::max<int64_t>(I, 1)));
    std::vector<Acc> buf(static_cast<size_t>(std::max<int64_t>(I, 1)));
    for (int64_t o = 0; o < O; ++o) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t r = 0; r < R; ++r) {
        const int64_t off = (o * R + r) * I;
        const Acc* x = load_chunk<Acc>(self->dtype, self->data, off, 1, I, buf.data());
        for (int64_t k = 0; k < I; ++k) acc[k] += x[k];
        store_chunk<Acc>(out->dtype, out->data, off, I, acc.data());
      }
    }
  };
  if (fl) run(double{});
  else run(int64_t{});
  return Error::ok();
}

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
  r.add("aten::sum.dim_IntList", KernelDef{dims_reduce_k<RKind::kSum>, 4, 1, false});
  r.add("aten::sum.default", KernelDef{full_reduce_k<RKind::kSum>, 2, 1, false});
  r.add("aten::mean.dim", KernelDef{dims_reduce_k<RKind::kMean>, 4, 1, false});
  r.add("aten::mean.default", KernelDef{full_reduce_k<RKind::kMean>, 2, 1, false});
  r.add("aten::prod.dim_int", KernelDef{dims_reduce_k<RKind::kProd>, 4, 1, false});
  r.add("aten::prod.default", KernelDef{full_reduce_k<RKind::kProd>, 2, 1, false});
  r.add("aten::amax.default", KernelDef{dims_reduce_k<RKind::kMax>, 3, 1, false});
  r.add("aten::amin.default", KernelDef{dims_reduce_k<RKind::kMin>, 3, 1, false});
  r.add("aten::max.default", KernelDef{full_reduce_k<RKind::kMax>, 1, 1, false});
  r.add("aten::min.default", KernelDef{full_reduce_k<RKind::kMin>, 1, 1, false});
  r.add("aten::any.default", KernelDef{full_reduce_k<RKind::kAny>, 1, 1, false});
  r.add("aten::all.default", KernelDef{full_reduce_k<RKind::kAll>, 1, 1, false});
  r.add("aten::any.dim", KernelDef{dims_reduce_k<RKind::kAny>, 3, 1, false});
  r.add("aten::any.dims", KernelDef{dims_reduce_k<RKind::kAny>, 3, 1, false});
  r.add("aten::all.dim", KernelDef{dims_reduce_k<RKind::kAll>, 3, 1, false});
  r.add("aten::all.dims", KernelDef{dims_reduce_k<RKind::kAll>, 3, 1, false});
  r.add("aten::argmax.default", KernelDef{argext_k<true>, 3, 1, false});
  r.add("aten::argmin.default", KernelDef{argext_k<false>, 3, 1, false});
  r.add("aten::max.dim", KernelDef{ext_dim_k<true>, 3, 2, false});
  r.add("aten::min.dim", KernelDef{ext_dim_k<false>, 3, 2, false});
  r.add("aten::cumsum.default", KernelDef{cumsum_k, 3, 1, false});
}

}  // namespace ember
