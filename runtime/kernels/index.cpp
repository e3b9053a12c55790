// Indexing: embedding, index.Tensor (advanced indexing), index_put, index_copy, index_select,
// gather, slice_scatter, select_scatter.
//
// Scatter-style ops may be planned in place (out.data == self.data, e.g. the KV cache update):
// then `self` is not copied into `out` and only the indexed region is written, so the cost is
// proportional to the update, never to the whole tensor. Every index is bounds-checked.
#include <vector>

#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// Copies self into out unless they are the same memory (in-place plan).
Error init_from_self(const Tensor& self, Tensor& out, const char* op) {
  EMBER_CHECK_ARG(out.dtype == self.dtype, "%s: output dtype %s differs from self %s", op, dtype_name(out.dtype),
                  dtype_name(self.dtype));
  if (out.data == self.data) {
    return out.resize(self.sizes, self.dim);
  }
  EMBER_TRY(out.resize(self.sizes, self.dim));
  copy_bytes(out.data, self.data, self.nbytes());
  return Error::ok();
}

Error checked_index(const Tensor& idx, int64_t k, int64_t size, bool allow_negative, int64_t* out, const char* op) {
  int64_t v = index_at(idx, k);
  if (allow_negative && v < 0) v += size;
  EMBER_CHECK_ARG(v >= 0 && v < size, "%s: index %" PRId64 " is out of bounds for size %" PRId64, op, index_at(idx, k), size);
  *out = v;
  return Error::ok();
}

// embedding(weight [V, D], indices, padding_idx, scale_grad_by_freq, sparse) -> [*indices, D]
Error embedding_k(KernelContext&, KernelArgs a) {
  Tensor *w = nullptr, *idx = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &w, "weight"));
  EMBER_TRY(arg_tensor(a, 1, &idx, "indices"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_rank(*w, 2, "embedding weight"));
  EMBER_TRY(check_index_dtype(*idx, "embedding indices"));
  EMBER_CHECK_ARG(idx->dim < kMaxDims, "embedding: indices rank %d too large", static_cast<int>(idx->dim));
  int64_t sizes[kMaxDims];
  for (int d = 0; d < idx->dim; ++d) sizes[d] = idx->sizes[d];
  sizes[idx->dim] = w->sizes[1];
  EMBER_TRY(out->resize(sizes, idx->dim + 1));
  const int64_t V = w->sizes[0], D = w->sizes[1], n = idx->numel();
  const size_t wes = w->element_size(), oes = out->element_size();
  for (int64_t k = 0; k < n; ++k) {
    int64_t row = 0;
    EMBER_TRY(checked_index(*idx, k, V, false, &row, "embedding"));
    convert_elements(w->dtype, static_cast<const uint8_t*>(w->data) + static_cast<size_t>(row * D) * wes, out->dtype,
                     static_cast<uint8_t*>(out->data) + static_cast<size_t>(k * D) * oes, D);
  }
  return Error::ok();
}

// ---- advanced indexing ---------------------------------------------------------------------

// The iteration for self[indices]: an ordered list of outer "axes" (plain dims of self or the
// broadcast index group), then a contiguous inner block of trailing plain dims.
struct AdvIndex {
  const Tensor* idx[kMaxDims] = {};  // per self dim, nullptr = full slice
  int nidx = 0;
  int64_t bshape[kMaxDims] = {};     // broadcast shape of index tensors
  int bnd = 0;
  int64_t bnumel = 1;
  int64_t bstrides[kMaxDims][kMaxDims] = {};  // per self dim: element strides of its index over bshape
  // outer axes: -1 = index group, else a plain self dim
  int axes[kMaxDims + 1] = {};
  int naxes = 0;
  int64_t inner = 1;  // elements in the trailing block
  int last = -1;      // last indexed dim
  int64_t self_strides[kMaxDims] = {};
  int64_t result_sizes[kMaxDims] = {};
  int result_nd = 0;
};

Error make_adv_index(KernelArgs a, int i, const Tensor& self, AdvIndex* ai, const char* op) {
  const EValue& l = a[i];
  EMBER_CHECK_ARG(l.tag == Tag::kTensorList, "%s: indices must be Tensor?[], got %s", op, tag_name(l.tag));
  EMBER_CHECK_ARG(l.count <= self.dim, "%s: %d indices for a rank-%d tensor", op, l.count, static_cast<int>(self.dim));
  const Tensor* present[kMaxDims];
  int np = 0, first = -1;
  bool adjacent = true;
  for (int32_t d = 0; d < l.count; ++d) {
    const Tensor* t = l.tensor_at(d);
    ai->idx[d] = t;
    if (t == nullptr) continue;
    EMBER_CHECK_ARG(t->dtype == DType::kInt64 || t->dtype == DType::kInt32,
                    "%s: index %d has dtype %s; only int64/int32 index tensors are supported (boolean masks are not)",
                    op, d, dtype_name(t->dtype));
    if (first < 0) first = d;
    else if (ai->last != d - 1) adjacent = false;
    ai->last = d;
    present[np++] = t;
  }
  EMBER_CHECK_ARG(np > 0, "%s: needs at least one index tensor", op);
  EMBER_TRY(broadcast_shapes(present, np, ai->bshape, &ai->bnd));
  ai->bnumel = 1;
  for (int d = 0; d < ai->bnd; ++d) ai->bnumel *= ai->bshape[d];
  for (int d = 0; d < self.dim; ++d) {
    const Tensor* t = ai->idx[d];
    if (!t) continue;
    int64_t cs[kMaxDims];
    contiguous_strides(t->sizes, t->dim, cs);
    const int shift = ai->bnd - t->dim;
    for (int k = 0; k < ai->bnd; ++k)
      ai->bstrides[d][k] = (k < shift || t->sizes[k - shift] == 1) ? 0 : cs[k - shift];
  }
  contiguous_strides(self.sizes, self.dim, ai->self_strides);
  ai->inner = self.prod(ai->last + 1, self.dim);
  ai->naxes = 0;
  int rn = 0;
  auto push_group = [&]() {
    ai->axes[ai->naxes++] = -1;
    for (int k = 0; k < ai->bnd; ++k) ai->result_sizes[rn++] = ai->bshape[k];
  };
  if (!adjacent) push_group();
  for (int d = 0; d <= ai->last; ++d) {
    if (ai->idx[d] != nullptr) {
      if (adjacent && d == first) push_group();
      continue;
    }
    ai->axes[ai->naxes++] = d;
    ai->result_sizes[rn++] = self.sizes[d];
  }
  for (int d = ai->last + 1; d < self.dim; ++d) ai->result_sizes[rn++] = self.sizes[d];
  EMBER_CHECK_ARG(rn <= kMaxDims, "%s: result rank %d exceeds %d", op, rn, kMaxDims);
  ai->result_nd = rn;
  return Error::ok();
}

// Calls f(self_offset, result_block_index) for each inner block, after validating indices.
template <typename F>
Error for_each_block(const Tensor& self, const AdvIndex& ai, F f, const char* op) {
  // Precompute the self offset contributed by each index-group position (validates indices).
  std::vector<int64_t> goff(static_cast<size_t>(ai.bnumel));
  for (int64_t p = 0; p < ai.bnumel; ++p) {
    int64_t pos[kMaxDims];
    int64_t r = p;
    for (int k = ai.bnd - 1; k >= 0; --k) {
      pos[k] = ai.bshape[k] == 0 ? 0 : r % ai.bshape[k];
      r = ai.bshape[k] == 0 ? 0 : r / ai.bshape[k];
    }
    int64_t off = 0;
    for (int d = 0; d <= ai.last; ++d) {
      if (!ai.idx[d]) continue;
      int64_t e = 0;
      for (int k = 0; k < ai.bnd; ++k) e += pos[k] * ai.bstrides[d][k];
      int64_t v = 0;
      EMBER_TRY(checked_index(*ai.idx[d], e, self.sizes[d], true, &v, op));
      off += v * ai.self_strides[d];
    }
    goff[p] = off;
  }
  int64_t sizes[kMaxDims + 1];
  int64_t total = 1;
  for (int k = 0; k < ai.naxes; ++k) {
    sizes[k] = ai.axes[k] < 0 ? ai.bnumel : self.sizes[ai.axes[k]];
    total *= sizes[k];
  }
  if (total == 0) return Error::ok();
  int64_t ctr[kMaxDims + 1] = {};
  for (int64_t blk = 0; blk < total; ++blk) {
    int64_t off = 0;
    for (int k = 0; k < ai.naxes; ++k) off += ai.axes[k] < 0 ? goff[ctr[k]] : ctr[k] * ai.self_strides[ai.axes[k]];
    f(off, blk);
    for (int k = ai.naxes - 1; k >= 0; --k) {
      if (++ctr[k] < sizes[k]) break;
      ctr[k] = 0;
    }
  }
  return Error::ok();
}

// index.Tensor(self, indices)
Error index_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  AdvIndex ai;
  EMBER_TRY(make_adv_index(a, 1, *self, &ai, "index"));
  EMBER_CHECK_ARG(out->dtype == self->dtype, "index: output dtype differs from input");
  EMBER_TRY(out->resize(ai.result_sizes, ai.result_nd));
  const size_t es = self->element_size();
  const size_t block = static_cast<size_t>(ai.inner) * es;
  const uint8_t* src = static_cast<const uint8_t*>(self->data);
  uint8_t* dst = static_cast<uint8_t*>(out->data);
  return for_each_block(*self, ai, [&](int64_t off, int64_t blk) {
    std::memcpy(dst + static_cast<size_t>(blk) * block, src + static_cast<size_t>(off) * es, block);
  }, "index");
}

// index_put(self, indices, values, accumulate)
Error index_put_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *values = nullptr, *out = nullptr;
  bool acc = false;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, 2, &values, "values"));
  EMBER_TRY(arg_bool(a, 3, &acc, "accumulate"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  AdvIndex ai;
  EMBER_TRY(make_adv_index(a, 1, *self, &ai, "index_put"));
  EMBER_TRY(init_from_self(*self, *out, "index_put"));
  // Values broadcast to the result shape (materialized in self's dtype when they differ).
  int64_t rnumel = 1;
  for (int d = 0; d < ai.result_nd; ++d) rnumel *= ai.result_sizes[d];
  const void* vdata = values->data;
  std::vector<uint8_t> tmp;
  const size_t es = self->element_size();
  Tensor vv = *values;
  if (vv.dtype != self->dtype) {
    tmp.resize(static_cast<size_t>(values->numel()) * es);
    convert_elements(values->dtype, values->data, self->dtype, tmp.data(), values->numel());
    vdata = tmp.data();
  }
  if (!(values->numel() == rnumel && (values->dim == ai.result_nd || values->numel() == 1))) {
    EMBER_CHECK_ARG(values->dim <= ai.result_nd, "index_put: values of rank %d do not broadcast to rank %d",
                    static_cast<int>(values->dim), ai.result_nd);
    int64_t cs[kMaxDims], st[kMaxDims];
    contiguous_strides(values->sizes, values->dim, cs);
    const int shift = ai.result_nd - values->dim;
    for (int d = 0; d < ai.result_nd; ++d) {
      if (d < shift) {
        st[d] = 0;
        continue;
      }
      const int64_t s = values->sizes[d - shift];
      EMBER_CHECK_ARG(s == 1 || s == ai.result_sizes[d], "index_put: values dim %d of size %" PRId64
                      " does not broadcast to %" PRId64, d - shift, s, ai.result_sizes[d]);
      st[d] = s == 1 ? 0 : cs[d - shift];
    }
    std::vector<uint8_t> exp(static_cast<size_t>(rnumel) * es);
    if (rnumel > 0) strided_copy(vdata, es, ai.result_nd, ai.result_sizes, st, exp.data());
    tmp.swap(exp);
    vdata = tmp.data();
  }
  const size_t block = static_cast<size_t>(ai.inner) * es;
  uint8_t* dst = static_cast<uint8_t*>(out->data);
  const uint8_t* src = static_cast<const uint8_t*>(vdata);
  if (!acc) {
    return for_each_block(*self, ai, [&](int64_t off, int64_t blk) {
      std::memmove(dst + static_cast<size_t>(off) * es, src + static_cast<size_t>(blk) * block, block);
    }, "index_put");
  }
  return dispatch_storage(self->dtype, [&](auto s) -> Error {
    using S = decltype(s);
    S* o = static_cast<S*>(out->data);
    const S* v = static_cast<const S*>(vdata);
    const int64_t inner = ai.inner;
    return for_each_block(*self, ai, [&](int64_t off, int64_t blk) {
      for (int64_t k = 0; k < inner; ++k) {
        if constexpr (std::is_same<S, Half>::value || std::is_same<S, BFloat16>::value || std::is_same<S, float>::value) {
          o[off + k] = to_storage<S>(from_storage<float>(o[off + k]) + from_storage<float>(v[blk * inner + k]));
        } else if constexpr (std::is_same<S, bool>::value) {
          o[off + k] = o[off + k] || v[blk * inner + k];
        } else {
          o[off + k] = static_cast<S>(static_cast<int64_t>(o[off + k]) + static_cast<int64_t>(v[blk * inner + k]));
        }
      }
    }, "index_put");
  });
}

// The rows of `self`'s shape split at dim d ([O, S, I]) that `idx` (n indices into S, negative ones
// counted from the end, checked) names: scatter, src's n rows to those rows of dst (index_copy);
// else those rows of src to dst's n rows (index_select). Rows of I elements of self's size.
Error move_indexed_rows(const Tensor& self, int d, const Tensor& idx, int64_t n, void* dst, const void* src,
                        bool scatter, const char* op) {
  int64_t O, S, I;
  split_at(self, d, &O, &S, &I);
  const size_t es = self.element_size(), row = static_cast<size_t>(I) * es;
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = 0;
    EMBER_TRY(checked_index(idx, i, S, true, &t, op));
    for (int64_t o = 0; o < O; ++o) {
      const size_t at_s = static_cast<size_t>((o * S + t) * I) * es, at_n = static_cast<size_t>((o * n + i) * I) * es;
      std::memmove(static_cast<uint8_t*>(dst) + (scatter ? at_s : at_n),
                   static_cast<const uint8_t*>(src) + (scatter ? at_n : at_s), row);
    }
  }
  return Error::ok();
}

// index_copy(self, dim, index, source): out[.., index[i], ..] = source[.., i, ..]
Error index_copy_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *idx = nullptr, *src = nullptr, *out = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(arg_tensor(a, 2, &idx, "index"));
  EMBER_TRY(arg_tensor(a, 3, &src, "source"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_index_dtype(*idx, "index_copy index"));
  EMBER_CHECK_ARG(idx->dim <= 1, "index_copy: index must be 0-D or 1-D, got rank %d", static_cast<int>(idx->dim));
  EMBER_CHECK_ARG(self->dim > 0, "index_copy: self is a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "index_copy"));
  const int64_t n = idx->numel();
  EMBER_CHECK_ARG(src->dtype == self->dtype, "index_copy: source dtype %s differs from self %s", dtype_name(src->dtype),
                  dtype_name(self->dtype));
  bool ok = src->dim == self->dim || (src->dim == self->dim - 1 && n == 1 && idx->dim == 0);
  const bool squeezed = src->dim == self->dim - 1;
  for (int k = 0, j = 0; ok && k < self->dim; ++k) {
    if (k == d) {
      if (!squeezed && src->sizes[j] != n) ok = false;
      if (!squeezed) ++j;
      continue;
    }
    if (src->sizes[j++] != self->sizes[k]) ok = false;
  }
  char b1[96], b2[96];
  EMBER_CHECK_ARG(ok, "index_copy: source %s does not match self %s with %" PRId64 " indices along dim %" PRId64,
                  src->describe(b1, sizeof b1), self->describe(b2, sizeof b2), n, d);
  EMBER_TRY(init_from_self(*self, *out, "index_copy"));
  return move_indexed_rows(*self, static_cast<int>(d), *idx, n, out->data, src->data, true, "index_copy");
}

// index_select(self, dim, index)
Error index_select_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *idx = nullptr, *out = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(arg_tensor(a, 2, &idx, "index"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_index_dtype(*idx, "index_select index"));
  EMBER_CHECK_ARG(idx->dim <= 1, "index_select: index must be 0-D or 1-D");
  EMBER_CHECK_ARG(out->dtype == self->dtype, "index_select: output dtype differs from input");
  const int64_t n = idx->numel();
  if (self->dim == 0) {
    EMBER_CHECK_ARG(n == 1 && index_at(*idx, 0) == 0, "index_select: bad index for a scalar");
    EMBER_TRY(out->resize(self->sizes, 0));
    std::memcpy(out->data, self->data, self->element_size());
    return Error::ok();
  }
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "index_select"));
  int64_t sizes[kMaxDims];
  for (int k = 0; k < self->dim; ++k) sizes[k] = k == d ? n : self->sizes[k];
  EMBER_TRY(out->resize(sizes, self->dim));
  return move_indexed_rows(*self, static_cast<int>(d), *idx, n, out->data, self->data, false, "index_select");
}

// gather(self, dim, index, sparse_grad): out[p] = self[p with p[dim] = index[p]]
Error gather_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *idx = nullptr, *out = nullptr;
  int64_t dim = 0, d = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_int(a, 1, &dim, "dim"));
  EMBER_TRY(arg_tensor(a, 2, &idx, "index"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_index_dtype(*idx, "gather index"));
  EMBER_CHECK_ARG(out->dtype == self->dtype, "gather: output dtype differs from input");
  EMBER_CHECK_ARG(idx->dim == self->dim || (self->dim == 0 && idx->dim <= 1),
                  "gather: index rank %d differs from self rank %d", static_cast<int>(idx->dim), static_cast<int>(self->dim));
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "gather"));
  for (int k = 0; k < idx->dim && self->dim > 0; ++k) {
    EMBER_CHECK_ARG(k == d || idx->sizes[k] <= self->sizes[k],
                    "gather: index size %" PRId64 " at dim %d exceeds self's %" PRId64, idx->sizes[k], k, self->sizes[k]);
  }
  EMBER_TRY(out->resize(idx->sizes, idx->dim));
  const int64_t n = idx->numel();
  if (n == 0) return Error::ok();
  const size_t es = self->element_size();
  int64_t sst[kMaxDims];
  contiguous_strides(self->sizes, self->dim, sst);
  const int64_t dsize = self->dim == 0 ? 1 : self->sizes[d];
  int64_t ctr[kMaxDims] = {};
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = 0;
    EMBER_TRY(checked_index(*idx, k, dsize, true, &v, "gather"));
    int64_t off = 0;
    for (int j = 0; j < self->dim; ++j) off += (j == d ? v : ctr[j]) * sst[j];
    std::memcpy(static_cast<uint8_t*>(out->data) + static_cast<size_t>(k) * es,
                static_cast<const uint8_t*>(self->data) + static_cast<size_t>(off) * es, es);
    for (int j = idx->dim - 1; j >= 0; --j) {
      if (++ctr[j] < idx->sizes[j]) break;
      ctr[j] = 0;
    }
  }
  return Error::ok();
}

// Writes src into out[.., start:start+len*step:step, ..] along d.
Error scatter_range(Tensor& out, const Tensor& src, int64_t d, int64_t start, int64_t len, int64_t step, bool src_has_dim,
                    const char* op) {
  // src shape must equal out's with dim d = len (or removed when !src_has_dim).
  bool ok = src.dim == (src_has_dim ? out.dim : out.dim - 1);
  for (int k = 0, j = 0; ok && k < out.dim; ++k) {
    if (k == d) {
      if (src_has_dim && src.sizes[j++] != len) ok = false;
      continue;
    }
    if (src.sizes[j++] != out.sizes[k]) ok = false;
  }
  char b1[96], b2[96];
  EMBER_CHECK_ARG(ok, "%s: src %s does not fit %" PRId64 " positions along dim %" PRId64 " of %s", op,
                  src.describe(b1, sizeof b1), len, d, out.describe(b2, sizeof b2));
  EMBER_CHECK_ARG(src.dtype == out.dtype, "%s: src dtype %s differs from self %s", op, dtype_name(src.dtype),
                  dtype_name(out.dtype));
  int64_t O, S, I;
  split_at(out, static_cast<int>(d), &O, &S, &I);
  const size_t es = out.element_size();
  const size_t row = static_cast<size_t>(I) * es;
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t i = 0; i < len; ++i) {
      std::memmove(static_cast<uint8_t*>(out.data) + static_cast<size_t>((o * S + start + i * step) * I) * es,
                   static_cast<const uint8_t*>(src.data) + static_cast<size_t>((o * len + i) * I) * es, row);
    }
  }
  return Error::ok();
}

int64_t clamp_bound(int64_t v, int64_t size) {
  if (v < 0) v += size;
  return std::min(std::max<int64_t>(v, 0), size);
}

// slice_scatter(self, src, dim, start?, end?, step)
Error slice_scatter_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *src = nullptr, *out = nullptr;
  int64_t dim = 0, d = 0, start = 0, end = INT64_MAX, step = 1;
  bool has = false;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, 1, &src, "src"));
  EMBER_TRY(arg_int(a, 2, &dim, "dim"));
  EMBER_TRY(arg_opt_int(a, 3, &start, &has, "start"));
  if (!has) start = 0;
  EMBER_TRY(arg_opt_int(a, 4, &end, &has, "end"));
  if (!has) end = INT64_MAX;
  EMBER_TRY(arg_int(a, 5, &step, "step"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(self->dim > 0, "slice_scatter: self is a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "slice_scatter"));
  EMBER_CHECK_ARG(step > 0, "slice_scatter: step must be positive, got %" PRId64, step);
  const int64_t size = self->sizes[d];
  start = clamp_bound(start, size);
  end = clamp_bound(end, size);
  const int64_t len = end > start ? (end - start + step - 1) / step : 0;
  EMBER_TRY(init_from_self(*self, *out, "slice_scatter"));
  return scatter_range(*out, *src, d, start, len, step, true, "slice_scatter");
}

// select_scatter(self, src, dim, index)
Error select_scatter_k(KernelContext&, KernelArgs a) {
  Tensor *self = nullptr, *src = nullptr, *out = nullptr;
  int64_t dim = 0, d = 0, index = 0;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, 1, &src, "src"));
  EMBER_TRY(arg_int(a, 2, &dim, "dim"));
  EMBER_TRY(arg_int(a, 3, &index, "index"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(self->dim > 0, "select_scatter: self is a scalar");
  EMBER_TRY(normalize_dim(dim, self->dim, &d, "select_scatter"));
  const int64_t size = self->sizes[d];
  EMBER_CHECK_ARG(index >= -size && index < size, "select_scatter: index %" PRId64 " out of range for size %" PRId64, index,
                  size);
  if (index < 0) index += size;
  EMBER_TRY(init_from_self(*self, *out, "select_scatter"));
  return scatter_range(*out, *src, d, index, 1, 1, false, "select_scatter");
}

}  // namespace

void register_index_kernels(KernelRegistry& r) {
  r.add("aten::embedding.default", KernelDef{embedding_k, 5, 1, false});
  r.add("aten::index.Tensor", KernelDef{index_k, 2, 1, false});
  r.add("aten::index_put.default", KernelDef{index_put_k, 4, 1, false});
  r.add("aten::index_copy.default", KernelDef{index_copy_k, 4, 1, false});
  r.add("aten::index_select.default", KernelDef{index_select_k, 3, 1, false});
  r.add("aten::gather.default", KernelDef{gather_k, 4, 1, false});
  r.add("aten::slice_scatter.default", KernelDef{slice_scatter_k, 6, 1, false});
  r.add("aten::select_scatter.default", KernelDef{select_scatter_k, 4, 1, false});
}

}  // namespace ember
