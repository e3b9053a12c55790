// Shape ops. Views (view/reshape/_unsafe_view/alias/detach/unsqueeze/squeeze/flatten/
// unflatten) alias their input without copying. Ops that are strided views in PyTorch
// (permute, transpose, t, expand, slice, select, narrow, repeat) copy into their output, since
// runtime tensors are always contiguous; so do cat/stack/split/unbind/clone/copy/triu/tril.
#include <vector>

#include "kernel_utils.h"

namespace ember {
namespace kern {

namespace {
constexpr int kMaxCopyDims = 2 * kMaxDims;

template <typename E>
void strided_copy_typed(const E* src, int nd, const int64_t* sizes, const int64_t* strides, E* dst) {
  // Outer loop over all but the last dim; inner run over the last.
  const int64_t inner = sizes[nd - 1];
  const int64_t ist = strides[nd - 1];
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= sizes[d];
  auto body = [&](int64_t rb, int64_t re) {
    int64_t idx[kMaxCopyDims] = {};
    int64_t off = 0;
    int64_t r = rb;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = r % sizes[d];
      r /= sizes[d];
      off += idx[d] * strides[d];
    }
    for (int64_t row = rb; row < re; ++row) {
      E* o = dst + row * inner;
      const E* s = src + off;
      if (ist == 1) {
        std::memmove(o, s, static_cast<size_t>(inner) * sizeof(E));  // the loader refuses overlap; never UB
      } else if (ist == 0) {
        const E v = s[0];
        for (int64_t k = 0; k < inner; ++k) o[k] = v;
      } else {
        for (int64_t k = 0; k < inner; ++k) o[k] = s[k * ist];
      }
      for (int d = nd - 2; d >= 0; --d) {
        off += strides[d];
        if (++idx[d] < sizes[d]) break;
        off -= strides[d] * sizes[d];
        idx[d] = 0;
      }
    }
  };
  if (rows * inner >= (1 << 17) && rows > 1) parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), body);
  else body(0, rows);
}
}  // namespace

// Copies the strided view (sizes, element strides, from src) into contiguous dst.
// Dims may number up to 2*kMaxDims. Source and destination must not overlap.
void strided_copy(const void* src, size_t esize, int nd, const int64_t* sizes_in, const int64_t* strides_in, void* dst) {
  // Drop size-1 dims and merge contiguous runs.
  int64_t sizes[kMaxCopyDims], strides[kMaxCopyDims];
  int n = 0;
  for (int d = 0; d < nd; ++d) {
    if (sizes_in[d] == 0) return;
    if (sizes_in[d] == 1) continue;
    if (n > 0 && strides[n - 1] == strides_in[d] * sizes_in[d]) {
      sizes[n - 1] *= sizes_in[d];
      strides[n - 1] = strides_in[d];
      continue;
    }
    sizes[n] = sizes_in[d];
    strides[n] = strides_in[d];
    ++n;
  }
  if (n == 0) {
    sizes[0] = 1;
    strides[0] = 1;
    n = 1;
  }
  switch (esize) {
    case 1: strided_copy_typed(static_cast<const uint8_t*>(src), n, sizes, strides, static_cast<uint8_t*>(dst)); break;
    case 2: strided_copy_typed(static_cast<const uint16_t*>(src), n, sizes, strides, static_cast<uint16_t*>(dst)); break;
    case 4: strided_copy_typed(static_cast<const uint32_t*>(src), n, sizes, strides, static_cast<uint32_t*>(dst)); break;
    default: strided_copy_typed(static_cast<const uint64_t*>(src), n, sizes, strides, static_cast<uint64_t*>(dst)); break;
  }
}

void permute_copy(const Tensor& in, const int64_t* perm, void* out) {
  int64_t cs[kMaxDims], sizes[kMaxDims], strides[kMaxDims];
  contiguous_strides(in.sizes, in.dim, cs);
  for (int d = 0; d < in.dim; ++d) {
    sizes[d] = in.sizes[perm[d]];
    strides[d] = cs[perm[d]];
  }
  if (in.dim == 0) {
    std::memcpy(out, in.data, in.element_size());
    return;
  }
  strided_copy(in.data, in.element_size(), in.dim, sizes, strides, out);
}

}  // namespace kern

namespace {

using namespace kern;

// Resolves a view shape with at most one -1 against `numel`.
Error infer_shape(const int64_t* req, int n, int64_t numel, int64_t* out, const char* op) {
  int infer = -1;
  int64_t prod = 1;
  for (int d = 0; d < n; ++d) {
    if (req[d] == -1) {
      EMBER_CHECK_ARG(infer < 0, "%s: only one dim may be -1 (dims %d and %d are)", op, infer, d);
      infer = d;
      continue;
    }
    EMBER_CHECK_ARG(req[d] >= 0, "%s: size %" PRId64 " of dim %d is invalid", op, req[d], d);
    if (req[d] != 0 && prod > INT64_MAX / req[d]) return Error::make(ErrorCode::kInvalidArgument, "%s: shape overflows", op);
    prod *= req[d];
    out[d] = req[d];
  }
  if (infer >= 0) {
    EMBER_CHECK_ARG(prod != 0 && numel % prod == 0, "%s: cannot infer dim %d: %" PRId64 " elements do not divide by %" PRId64, op,
                    infer, numel, prod);
    out[infer] = numel / prod;
    prod *= out[infer];
  }
  EMBER_CHECK_ARG(prod == numel, "%s: shape with %" PRId64 " elements does not match the input's %" PRId64, op, prod, numel);
  return Error::ok();
}

Error alias_out(KernelArgs a, const Tensor& self, const int64_t* sizes, int nd, const char* op) {
  Tensor* out = nullptr;
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t n = 1;
  for (int d = 0; d < nd; ++d) n *= sizes[d];
  EMBER_CHECK_ARG(n == self.numel(), "%s: view of %" PRId64 " elements over an input of %" PRId64, op, n, self.numel());
  return out->alias(self, sizes, nd);
}

// view/reshape/_unsafe_view(self, size)
Error view_k(KernelContext&, KernelArgs a) {
  Tensor* self = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  int64_t req[kMaxDims], sizes[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, 1, req, &n, "size"));
  EMBER_TRY(infer_shape(req, n, self->numel(), sizes, "view"));
  return alias_out(a, *self, sizes, n, "view");
}

Error alias_k(KernelContext&, KernelArgs a) {
  Tensor* self = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  return alias_out(a, *self, self->sizes, self->dim, "alias");
}

Error unsqueeze_k(KernelContext&, KernelArgs a) {
  Tensor* self = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_CHECK_ARG(self->dim < kMaxDims, "unsqueeze: rank %d is already the maximum", static_cast<int>(self->dim));
  EMBER_TRY(normalize_dim(dim, self->dim + 1, &d, "unsqueeze"));
  int64_t sizes[kMaxDims];
  int n = 0;
  for (int k = 0; k <= self->dim; ++k) {
    if (k == d) sizes[n++] = 1;
    if (k < self->dim) sizes[n++] = self->sizes[k];
  }
  return alias_out(a, *self, sizes, n, "unsqueeze");
}

Error squeeze_common(KernelArgs a, const Tensor& self, const bool* which) {
  int64_t sizes[kMaxDims];
  int n = 0;
  for (int k = 0; k < self.dim; ++k)
    if (!(which[k] && self.sizes[k] == 1)) sizes[n++] = self.sizes[k];
  return alias_out(a, self, sizes, n, "squeeze");
}
Error squeeze_k(KernelContext&, KernelArgs a) {  // squeeze.default(self)
  Tensor* self = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  bool which[kMaxDims];
  for (int k = 0; k < kMaxDims; ++k) which[k] = true;
  return squeeze_common(a, *self, which);
}
Error squeeze_dims_k(KernelContext&, KernelArgs a) {  // squeeze.dim(self, dim) / squeeze.dims(self, dim[])
  Tensor* self = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  int64_t dims[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, 1, dims, &n, "dim"));
  bool which[kMaxDims] = {};
  for (int k = 0; k < n; ++k) {
    int64_t d = 0;
    EMBER_TRY(normalize_dim(dims[k], self->dim, &d, "squeeze"));
    if (self->dim > 0) which[d] = true;
  }
  return squeeze_common(a, *self, which);
}

Error flatten_k(KernelContext&, KernelArgs a) {  // flatten.using_ints(self, start_dim, end_dim)
  Tensor* self = nullptr;
  int64_t s = 0, e = 0, ds = 0, de = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &s, "start_dim"));
  EMBER_TRY(arg_int(a, 2, &e, "end_dim"));
  if (self->dim == 0) {
    int64_t one = 1;
    return alias_out(a, *self, &one, 1, "flatten");
  }
  EMBER_TRY(normalize_dim(s, self->dim, &ds, "flatten"));
  EMBER_TRY(normalize_dim(e, self->dim, &de, "flatten"));
  EMBER_CHECK_ARG(ds <= de, "flatten: start_dim %" PRId64 " is after end_dim %" PRId64, ds, de);
  int64_t sizes[kMaxDims];
  int n = 0;
  for (int k = 0; k < ds; ++k) sizes[n++] = self->sizes[k];
  sizes[n++] = self->prod(static_cast<int>(ds), static_cast<int>(de) + 1);
  for (int k = static_cast<int>(de) + 1; k < self->dim; ++k) sizes[n++] = self->sizes[k];
  return alias_out(a, *self, sizes, n, "flatten");
}

Error unflatten_k(KernelContext&, KernelArgs a) {  // unflatten.int(self, dim, sizes)
  Tensor* self = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "unflatten"));
  EMBER_CHECK_ARG(self->dim > 0, "unflatten: input is a scalar");
  int64_t req[kMaxDims], part[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, 2, req, &n, "sizes"));
  EMBER_CHECK_ARG(self->dim - 1 + n <= kMaxDims, "unflatten: result rank %d exceeds %d", static_cast<int>(self->dim) - 1 + n,
                  kMaxDims);
  EMBER_TRY(infer_shape(req, n, self->sizes[d], part, "unflatten"));
  int64_t sizes[kMaxDims];
  int m = 0;
  for (int k = 0; k < self->dim; ++k) {
    if (k == d) {
      for (int j = 0; j < n; ++j) sizes[m++] = part[j];
    } else {
      sizes[m++] = self->sizes[k];
    }
  }
  return alias_out(a, *self, sizes, m, "unflatten");
}

// ---- copies ------------------------------------------------------------------------------

Error clone_k(KernelContext&, KernelArgs a) {  // clone(self, memory_format?) / lift_fresh_copy(self)
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(out->resize(self->sizes, self->dim));
  convert_elements(self->dtype, self->data, out->dtype, out->data, self->numel());
  return Error::ok();
}

// copy(self, src, non_blocking): src broadcast into self's shape and dtype. May run in place.
Error copy_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *src = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, 1, &src, "src"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  if (same_shape(*self, *src)) {
    EMBER_TRY(out->resize(self->sizes, self->dim));
    convert_elements(src->dtype, src->data, out->dtype, out->data, src->numel());
    return Error::ok();
  }
  EMBER_CHECK_ARG(src->dim <= self->dim, "copy: src of rank %d does not broadcast to self of rank %d", static_cast<int>(src->dim),
                  static_cast<int>(self->dim));
  const Tensor* ins[2] = {self, src};
  if (is_floating(out->dtype)) return map_elements<float, float, 2>(*out, ins, [](float, float s) { return s; });
  return map_elements<int64_t, int64_t, 2>(*out, ins, [](int64_t, int64_t s) { return s; });
}

Error permute_k(KernelContext&, KernelArgs a) {  // permute(self, dims)
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t dims[kMaxDims], perm[kMaxDims], sizes[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, 1, dims, &n, "dims"));
  EMBER_CHECK_ARG(n == self->dim, "permute: %d dims given for a rank-%d input", n, static_cast<int>(self->dim));
  bool seen[kMaxDims] = {};
  for (int k = 0; k < n; ++k) {
    EMBER_TRY(normalize_dim(dims[k], self->dim, &perm[k], "permute"));
    EMBER_CHECK_ARG(!seen[perm[k]], "permute: dim %" PRId64 " repeats", perm[k]);
    seen[perm[k]] = true;
    sizes[k] = self->sizes[perm[k]];
  }
  EMBER_CHECK_ARG(out->dtype == self->dtype, "permute: output dtype %s differs from input %s", dtype_name(out->dtype),
                  dtype_name(self->dtype));
  EMBER_TRY(out->resize(sizes, n));
  permute_copy(*self, perm, out->data);
  return Error::ok();
}

Error transpose_impl(KernelArgs a, int64_t d0, int64_t d1) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(out->dtype == self->dtype, "transpose: output dtype %s differs from input %s", dtype_name(out->dtype),
                  dtype_name(self->dtype));
  if (self->dim == 0) {
    EMBER_TRY(out->resize(self->sizes, 0));
    std::memcpy(out->data, self->data, self->element_size());
    return Error::ok();
  }
  int64_t n0 = 0, n1 = 0;
  EMBER_TRY(normalize_dim(d0, self->dim, &n0, "transpose"));
  EMBER_TRY(normalize_dim(d1, self->dim, &n1, "transpose"));
  int64_t perm[kMaxDims] = {}, sizes[kMaxDims] = {};
  for (int k = 0; k < self->dim; ++k) perm[k] = k;
  if (n0 >= kMaxDims || n1 >= kMaxDims) return Error::make(ErrorCode::kInvalidArgument, "transpose: bad dim");
  std::swap(perm[n0], perm[n1]);
  for (int k = 0; k < self->dim; ++k) sizes[k] = self->sizes[perm[k]];
  EMBER_TRY(out->resize(sizes, self->dim));
  permute_copy(*self, perm, out->data);
  return Error::ok();
}
Error transpose_k(KernelContext&, KernelArgs a) {
  int64_t d0 = 0, d1 = 0;
  EMBER_TRY(arg_int(a, 1, &d0, "dim0"));
  EMBER_TRY(arg_int(a, 2, &d1, "dim1"));
  return transpose_impl(a, d0, d1);
}
Error t_k(KernelContext&, KernelArgs a) {
  Tensor* self = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_CHECK_ARG(self->dim <= 2, "t: expects rank <= 2, got %d", static_cast<int>(self->dim));
  if (self->dim < 2) return transpose_impl(a, 0, 0);
  return transpose_impl(a, 0, 1);
}

// expand(self, size, implicit): -1 keeps a dim; new leading dims broadcast.
Error expand_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t req[kMaxDims], sizes[kMaxDims], strides[kMaxDims], cs[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, 1, req, &n, "size"));
  EMBER_CHECK_ARG(n >= self->dim, "expand: %d sizes for a rank-%d input", n, static_cast<int>(self->dim));
  contiguous_strides(self->sizes, self->dim, cs);
  const int shift = n - self->dim;
  for (int d = 0; d < n; ++d) {
    if (d < shift) {
      EMBER_CHECK_ARG(req[d] >= 0, "expand: size %" PRId64 " for new dim %d", req[d], d);
      sizes[d] = req[d];
      strides[d] = 0;
      continue;
    }
    const int64_t s = self->sizes[d - shift];
    if (req[d] == -1 || req[d] == s) {
      sizes[d] = s;
      strides[d] = cs[d - shift];
    } else {
      EMBER_CHECK_ARG(s == 1 && req[d] >= 0, "expand: dim %d of size %" PRId64 " cannot expand to %" PRId64, d, s, req[d]);
      sizes[d] = req[d];
      strides[d] = 0;
    }
  }
  EMBER_CHECK_ARG(out->dtype == self->dtype, "expand: output dtype differs from input");
  EMBER_TRY(out->resize(sizes, n));
  if (out->numel() == 0) return Error::ok();
  if (n == 0) {
    std::memcpy(out->data, self->data, self->element_size());
    return Error::ok();
  }
  strided_copy(self->data, self->element_size(), n, sizes, strides, out->data);
  return Error::ok();
}

// repeat(self, repeats)
Error repeat_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t rep[kMaxDims];
  int n = 0;
  EMBER_TRY(arg_int_list(a, 1, rep, &n, "repeats"));
  EMBER_CHECK_ARG(n >= self->dim, "repeat: %d repeats for a rank-%d input", n, static_cast<int>(self->dim));
  int64_t padded[kMaxDims], cs[kMaxDims], osz[kMaxDims];
  const int shift = n - self->dim;
  for (int d = 0; d < n; ++d) padded[d] = d < shift ? 1 : self->sizes[d - shift];
  contiguous_strides(padded, n, cs);
  int64_t sizes[2 * kMaxDims], strides[2 * kMaxDims];
  for (int d = 0; d < n; ++d) {
    EMBER_CHECK_ARG(rep[d] >= 0, "repeat: negative repeat %" PRId64 " at dim %d", rep[d], d);
    osz[d] = rep[d] * padded[d];
    sizes[2 * d] = rep[d];
    strides[2 * d] = 0;
    sizes[2 * d + 1] = padded[d];
    strides[2 * d + 1] = cs[d];
  }
  EMBER_CHECK_ARG(out->dtype == self->dtype, "repeat: output dtype differs from input");
  EMBER_TRY(out->resize(osz, n));
  if (out->numel() == 0) return Error::ok();
  if (n == 0) {
    std::memcpy(out->data, self->data, self->element_size());
    return Error::ok();
  }
  strided_copy(self->data, self->element_size(), 2 * n, sizes, strides, out->data);
  return Error::ok();
}

// Clamps a slice bound like Python.
int64_t clamp_bound(int64_t v, int64_t size) {
  if (v < 0) v += size;
  if (v < 0) v = 0;
  if (v > size) v = size;
  return v;
}

Error copy_range(const Tensor& self, int64_t d, int64_t start, int64_t len, int64_t step, Tensor& out, bool keep_dim) {
  int64_t sizes[kMaxDims], strides[kMaxDims], cs[kMaxDims];
  contiguous_strides(self.sizes, self.dim, cs);
  int n = 0;
  int64_t osz[kMaxDims];
  int on = 0;
  for (int k = 0; k < self.dim; ++k) {
    if (k == d) {
      sizes[n] = len;
      strides[n++] = cs[k] * step;
      if (keep_dim) osz[on++] = len;
    } else {
      sizes[n] = self.sizes[k];
      strides[n++] = cs[k];
      osz[on++] = self.sizes[k];
    }
  }
  EMBER_CHECK_ARG(out.dtype == self.dtype, "output dtype %s differs from input %s", dtype_name(out.dtype), dtype_name(self.dtype));
  EMBER_TRY(out.resize(osz, on));
  if (out.numel() == 0) return Error::ok();
  const uint8_t* base = static_cast<const uint8_t*>(self.data) + start * cs[d] * static_cast<int64_t>(self.element_size());
  strided_copy(base, self.element_size(), n, sizes, strides, out.data);
  return Error::ok();
}

// slice.Tensor(self, dim, start?, end?, step)
Error slice_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t dim = 0, d = 0, start = 0, end = INT64_MAX, step = 1;
  bool has = false;
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(arg_opt_int(a, 2, &start, &has, "start"));
  if (!has) start = 0;
  EMBER_TRY(arg_opt_int(a, 3, &end, &has, "end"));
  if (!has) end = INT64_MAX;
  EMBER_TRY(arg_int(a, 4, &step, "step"));
  EMBER_CHECK_ARG(self->dim > 0, "slice: cannot slice a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "slice"));
  EMBER_CHECK_ARG(step > 0, "slice: step must be positive, got %" PRId64, step);
  const int64_t size = self->sizes[d];
  start = clamp_bound(start, size);
  end = clamp_bound(end, size);
  const int64_t len = end > start ? (end - start + step - 1) / step : 0;
  return copy_range(*self, d, start, len, step, *out, true);
}

// narrow(self, dim, start, length)
Error narrow_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t dim = 0, d = 0, start = 0, len = 0;
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(arg_int(a, 2, &start, "start"));
  EMBER_TRY(arg_int(a, 3, &len, "length"));
  EMBER_CHECK_ARG(self->dim > 0, "narrow: cannot narrow a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "narrow"));
  const int64_t size = self->sizes[d];
  if (start < 0) start += size;
  EMBER_CHECK_ARG(start >= 0 && len >= 0 && start <= size - len,
                  "narrow: start %" PRId64 " + length %" PRId64 " exceeds dim size %" PRId64, start, len, size);
  return copy_range(*self, d, start, len, 1, *out, true);
}

// select.int(self, dim, index)
Error select_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t dim = 0, d = 0, index = 0;
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(arg_int(a, 2, &index, "index"));
  EMBER_CHECK_ARG(self->dim > 0, "select: cannot select from a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "select"));
  const int64_t size = self->sizes[d];
  EMBER_CHECK_ARG(index >= -size && index < size, "select: index %" PRId64 " is out of range for dim %" PRId64 " of size %" PRId64,
                  index, d, size);
  if (index < 0) index += size;
  return copy_range(*self, d, index, 1, 1, *out, false);
}

// Reads a Tensor[] argument into a vector of non-null tensors.
Error tensor_list(KernelArgs a, int i, std::vector<const Tensor*>* out, const char* what) {
  EMBER_CHECK_ARG(a[i].tag == Tag::kTensorList, "argument %d (%s): expected Tensor[] but got %s", i, what, tag_name(a[i].tag));
  out->clear();
  for (int32_t k = 0; k < a[i].count; ++k) {
    const Tensor* t = a[i].tensor_at(k);
    EMBER_CHECK_ARG(t != nullptr, "%s: item %d is None", what, k);
    out->push_back(t);
  }
  return Error::ok();
}

// cat(tensors, dim) and stack(tensors, dim) (stack = cat of unsqueezed inputs).
Error cat_impl(KernelArgs a, bool stack) {
  std::vector<const Tensor*> ts;
  Tensor* out = nullptr;
  EMBER_TRY(tensor_list(a, 0, &ts, "tensors"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  int64_t dim = 0;
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_CHECK_ARG(!ts.empty(), "cat: needs at least one tensor");
  // Reference shape: first tensor that is not a legacy empty 1-D [0] (cat only).
  const Tensor* ref = nullptr;
  for (const Tensor* t : ts)
    if (stack || !(t->dim == 1 && t->sizes[0] == 0)) {
      ref = t;
      break;
    }
  if (ref == nullptr) {  // all empty
    int64_t z = 0;
    return out->resize(&z, 1);
  }
  const int rank = stack ? ref->dim + 1 : ref->dim;
  EMBER_CHECK_ARG(rank > 0 && rank <= kMaxDims, "cat: cannot concatenate rank-%d tensors", static_cast<int>(ref->dim));
  int64_t d = 0;
  EMBER_TRY(normalize_dim(dim, rank, &d, stack ? "stack" : "cat"));
  int64_t osz[kMaxDims];
  for (int k = 0, j = 0; k < rank; ++k) osz[k] = (stack && k == d) ? 1 : ref->sizes[j++];
  int64_t total = 0;
  for (size_t k = 0; k < ts.size(); ++k) {
    const Tensor* t = ts[k];
    if (!stack && t->dim == 1 && t->sizes[0] == 0) continue;
    EMBER_CHECK_ARG(t->dim == ref->dim, "cat: tensor %zu has rank %d, expected %d", k, static_cast<int>(t->dim),
                    static_cast<int>(ref->dim));
    for (int j = 0; j < t->dim; ++j) {
      const int od = (stack && j >= d) ? j + 1 : j;
      if (!stack && od == d) continue;
      EMBER_CHECK_ARG(t->sizes[j] == ref->sizes[j], "cat: tensor %zu has size %" PRId64 " at dim %d, expected %" PRId64, k,
                      t->sizes[j], j, ref->sizes[j]);
    }
    total += stack ? 1 : t->sizes[d];
  }
  osz[d] = total;
  EMBER_TRY(out->resize(osz, rank));
  const int64_t O = out->prod(0, static_cast<int>(d));
  const int64_t I = out->prod(static_cast<int>(d) + 1, rank);
  const size_t oes = out->element_size();
  int64_t offset = 0;  // along dim d
  for (const Tensor* t : ts) {
    if (!stack && t->dim == 1 && t->sizes[0] == 0) continue;
    const int64_t len = stack ? 1 : t->sizes[d];
    const int64_t block = len * I;  // elements per outer index
    const size_t ies = t->element_size();
    for (int64_t o = 0; o < O; ++o) {
      uint8_t* dst = static_cast<uint8_t*>(out->data) + static_cast<size_t>((o * total + offset) * I) * oes;
      const uint8_t* src = static_cast<const uint8_t*>(t->data) + static_cast<size_t>(o * block) * ies;
      convert_elements(t->dtype, src, out->dtype, dst, block);
    }
    offset += len;
  }
  return Error::ok();
}
Error cat_k(KernelContext&, KernelArgs a) { return cat_impl(a, false); }
Error stack_k(KernelContext&, KernelArgs a) { return cat_impl(a, true); }

// Writes pieces of `self` along dim d into the TensorList output (split/unbind/chunk).
Error split_into(KernelArgs a, const Tensor& self, int64_t d, const int64_t* lens, int n, bool keep_dim) {
  const EValue& ol = a[a.n - 1];
  EMBER_CHECK_ARG(ol.tag == Tag::kTensorList, "split: output must be Tensor[], got %s", tag_name(ol.tag));
  EMBER_CHECK_ARG(ol.count == n, "split: produces %d pieces but the program planned %d", n, ol.count);
  int64_t start = 0;
  for (int k = 0; k < n; ++k) {
    Tensor* o = ol.tensor_at(k);
    EMBER_CHECK_ARG(o != nullptr, "split: output %d is None", k);
    EMBER_TRY(copy_range(self, d, start, lens[k], 1, *o, keep_dim));
    start += lens[k];
  }
  return Error::ok();
}
Error split_k(KernelContext&, KernelArgs a) {  // split.Tensor(self, split_size, dim)
  Tensor* self = nullptr;
  int64_t ss = 0, dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &ss, "split_size"));
  EMBER_TRY(arg_int(a, 2, &dim, "dim"));
  EMBER_CHECK_ARG(self->dim > 0, "split: input is a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "split"));
  const int64_t size = self->sizes[d];
  EMBER_CHECK_ARG(ss > 0 || (ss == 0 && size == 0), "split: split_size %" PRId64 " must be positive", ss);
  const EValue& ol = a[a.n - 1];
  EMBER_CHECK_ARG(ol.tag == Tag::kTensorList, "split: output must be Tensor[]");
  const int64_t pieces = ss == 0 ? 1 : std::max<int64_t>(1, (size + ss - 1) / ss);
  EMBER_CHECK_ARG(pieces == ol.count, "split: produces %" PRId64 " pieces but the program planned %d", pieces, ol.count);
  std::vector<int64_t> lens(static_cast<size_t>(pieces));
  for (int64_t k = 0; k < pieces; ++k) lens[k] = std::min(ss, size - k * ss);
  return split_into(a, *self, d, lens.data(), static_cast<int>(pieces), true);
}
Error split_sizes_k(KernelContext&, KernelArgs a) {  // split_with_sizes(self, split_sizes, dim)
  Tensor* self = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 2, &dim, "dim"));
  EMBER_CHECK_ARG(self->dim > 0, "split_with_sizes: input is a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "split_with_sizes"));
  const EValue& sv = a[1];
  EMBER_CHECK_ARG(sv.tag == Tag::kIntList, "split_with_sizes: split_sizes must be int[], got %s", tag_name(sv.tag));
  std::vector<int64_t> lens(static_cast<size_t>(sv.count));
  int64_t sum = 0;
  for (int32_t k = 0; k < sv.count; ++k) {
    lens[k] = sv.int_at(k);
    EMBER_CHECK_ARG(lens[k] >= 0 && lens[k] <= self->sizes[d], "split_with_sizes: size %" PRId64 " is invalid", lens[k]);
    sum += lens[k];
  }
  EMBER_CHECK_ARG(sum == self->sizes[d], "split_with_sizes: sizes sum to %" PRId64 " but dim %" PRId64 " has %" PRId64, sum, d,
                  self->sizes[d]);
  return split_into(a, *self, d, lens.data(), sv.count, true);
}
Error unbind_k(KernelContext&, KernelArgs a) {  // unbind.int(self, dim)
  Tensor* self = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_CHECK_ARG(self->dim > 0, "unbind: input is a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "unbind"));
  const int64_t size = self->sizes[d];
  EMBER_CHECK_ARG(a[a.n - 1].tag == Tag::kTensorList && a[a.n - 1].count == size,
                  "unbind: dim of size %" PRId64 " does not match the planned output list", size);
  const int64_t parts = self->sizes[d];
  std::vector<int64_t> lens(static_cast<size_t>(parts), 1);
  return split_into(a, *self, d, lens.data(), static_cast<int>(parts), false);
}

// triu/tril(self, diagonal): zero below/above the diagonal of the last two dims.
template <bool kUpper>
Error tri_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  int64_t diag = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &diag, "diagonal"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(self->dim >= 2, "triu/tril: input must have rank >= 2, got %d", static_cast<int>(self->dim));
  EMBER_CHECK_ARG(out->dtype == self->dtype, "triu/tril: output dtype differs from input");
  EMBER_TRY(out->resize(self->sizes, self->dim));
  const int64_t R = self->sizes[self->dim - 2], C = self->sizes[self->dim - 1];
  const int64_t B = self->prod(0, self->dim - 2);
  const size_t es = self->element_size();
  const uint8_t* src = static_cast<const uint8_t*>(self->data);
  uint8_t* dst = static_cast<uint8_t*>(out->data);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = 0; r < R; ++r) {
      const size_t row = static_cast<size_t>((b * R + r) * C) * es;
      // Kept columns: triu keeps c - r >= diag, tril keeps c - r <= diag.
      int64_t lo, hi;  // kept [lo, hi)
      if (kUpper) {
        lo = std::min(std::max<int64_t>(r + diag, 0), C);
        hi = C;
      } else {
        lo = 0;
        hi = std::min(std::max<int64_t>(r + diag + 1, 0), C);
      }
      if (src != dst) std::memmove(dst + row + lo * es, src + row + lo * es, static_cast<size_t>(hi - lo) * es);
      std::memset(dst + row, 0, static_cast<size_t>(lo) * es);
      std::memset(dst + row + hi * es, 0, static_cast<size_t>(C - hi) * es);
    }
  }
  return Error::ok();
}

}  // namespace

void register_shape_kernels(KernelRegistry& r) {
  r.add("aten::view.default", KernelDef{view_k, 2, 1, true});
  r.add("aten::_unsafe_view.default", KernelDef{view_k, 2, 1, true});
  r.add("aten::reshape.default", KernelDef{view_k, 2, 1, true});
  r.add("aten::alias.default", KernelDef{alias_k, 1, 1, true});
  r.add("aten::detach.default", KernelDef{alias_k, 1, 1, true});
  r.add("aten::unsqueeze.default", KernelDef{unsqueeze_k, 2, 1, true});
  r.add("aten::squeeze.default", KernelDef{squeeze_k, 1, 1, true});
  r.add("aten::squeeze.dim", KernelDef{squeeze_dims_k, 2, 1, true});
  r.add("aten::squeeze.dims", KernelDef{squeeze_dims_k, 2, 1, true});
  r.add("aten::flatten.using_ints", KernelDef{flatten_k, 3, 1, true});
  r.add("aten::unflatten.int", KernelDef{unflatten_k, 3, 1, true});
  r.add("aten::clone.default", KernelDef{clone_k, 2, 1, false});
  r.add("aten::lift_fresh_copy.default", KernelDef{clone_k, 1, 1, false});
  r.add("aten::copy.default", KernelDef{copy_k, 3, 1, false});
  r.add("aten::permute.default", KernelDef{permute_k, 2, 1, false});
  r.add("aten::transpose.int", KernelDef{transpose_k, 3, 1, false});
  r.add("aten::t.default", KernelDef{t_k, 1, 1, false});
  r.add("aten::expand.default", KernelDef{expand_k, 3, 1, false});
  r.add("aten::repeat.default", KernelDef{repeat_k, 2, 1, false});
  r.add("aten::slice.Tensor", KernelDef{slice_k, 5, 1, false});
  r.add("aten::narrow.default", KernelDef{narrow_k, 4, 1, false});
  r.add("aten::select.int", KernelDef{select_k, 3, 1, false});
  r.add("aten::cat.default", KernelDef{cat_k, 2, 1, false});
  r.add("aten::stack.default", KernelDef{stack_k, 2, 1, false});
  r.add("aten::split.Tensor", KernelDef{split_k, 3, 1, false});
  r.add("aten::split_with_sizes.default", KernelDef{split_sizes_k, 3, 1, false});
  r.add("aten::unbind.int", KernelDef{unbind_k, 2, 1, false});
  r.add("aten::triu.default", KernelDef{tri_k<true>, 2, 1, false});
  r.add("aten::tril.default", KernelDef{tri_k<false>, 2, 1, false});
}

}  // namespace ember
