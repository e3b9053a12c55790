// Tensor: a non-owning, always-contiguous (row-major) view of typed memory.
//
// The runtime keeps every tensor contiguous; view ops alias their input's bytes with new
// sizes, and ops that would produce strided views (permute, expand, slice) copy instead.
// `capacity` is the number of bytes available at `data` (the planned upper bound), so a
// kernel can resize its output within the plan for dynamic shapes, never beyond it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ember/runtime/dtype.h"
#include "ember/runtime/error.h"

namespace ember {

constexpr int kMaxDims = 8;

struct Tensor {
  void* data = nullptr;       // not owned; lifetime is the method arena, program or caller
  size_t capacity = 0;        // bytes usable at `data`
  DType dtype = DType::kFloat32;
  int32_t dim = 0;
  int64_t sizes[kMaxDims] = {0, 0, 0, 0, 0, 0, 0, 0};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < dim; ++i) n *= sizes[i];
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  size_t element_size() const { return dtype_size(dtype); }

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  // Size of dim `d`; negative `d` counts from the end. `d` must be valid.
  int64_t size(int d) const { return sizes[d < 0 ? d + dim : d]; }

  // Product of sizes in [begin, end).
  int64_t prod(int begin, int end) const {
    int64_t n = 1;
    for (int i = begin; i < end; ++i) n *= sizes[i];
    return n;
  }

  // Sets the shape. Fails (kOutOfMemory) if the new shape needs more than `capacity` bytes or
  // (kInvalidArgument) if `ndim` exceeds kMaxDims or a size is negative.
  Error resize(const int64_t* new_sizes, int ndim);

  // Makes this tensor an alias of `src`'s bytes with `src`'s dtype and the given shape.
  Error alias(const Tensor& src, const int64_t* new_sizes, int ndim);

  // Human-readable "float32[2, 3]".
  const char* describe(char* buf, size_t len) const;
};

// Normalizes a possibly negative dim against `rank`; returns an error naming the op on failure.
Error normalize_dim(int64_t dim, int64_t rank, int64_t* out, const char* what);

}  // namespace ember
