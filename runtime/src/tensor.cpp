#include "ember/runtime/tensor.h"

#include <cinttypes>
#include <cstdio>

#include "ember/runtime/evalue.h"

namespace ember {

Error Tensor::resize(const int64_t* new_sizes, int ndim) {
  EMBER_CHECK_ARG(ndim >= 0 && ndim <= kMaxDims, "rank %d is outside [0, %d]", ndim, kMaxDims);
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) {
    EMBER_CHECK_ARG(new_sizes[i] >= 0, "size %" PRId64 " of dim %d is negative", new_sizes[i], i);
    if (new_sizes[i] != 0 && n > INT64_MAX / new_sizes[i]) {
      return Error::make(ErrorCode::kOutOfMemory, "shape overflows int64 at dim %d", i);
    }
    n *= new_sizes[i];
  }
  const size_t es = dtype_size(dtype);
  if (n > 0 && static_cast<uint64_t>(n) > capacity / es) {
    return Error::make(ErrorCode::kOutOfMemory,
                       "result needs %" PRId64 " elements of %s but only %zu bytes were planned "
                       "(a dynamic dimension is above the bound it was exported with)",
                       n, dtype_name(dtype), capacity);
  }
  // Only what changes is written: a decode step sizes its tensors as the last one did, and a write
  // of the same value still takes the line from another core that read it (Method::begin_execution).
  if (dim != ndim) dim = ndim;
  for (int i = 0; i < ndim; ++i) {
    if (sizes[i] != new_sizes[i]) sizes[i] = new_sizes[i];
  }
  return Error::ok();
}

Error Tensor::alias(const Tensor& src, const int64_t* new_sizes, int ndim) {
  if (data != src.data) data = src.data;
  if (capacity != src.capacity) capacity = src.capacity;
  if (dtype != src.dtype) dtype = src.dtype;
  return resize(new_sizes, ndim);
}

const char* Tensor::describe(char* buf, size_t len) const {
  int w = std::snprintf(buf, len, "%s[", dtype_name(dtype));
  for (int i = 0; i < dim && w > 0 && static_cast<size_t>(w) < len; ++i) {
    w += std::snprintf(buf + w, len - static_cast<size_t>(w), i ? ", %" PRId64 : "%" PRId64, sizes[i]);
  }
  if (w > 0 && static_cast<size_t>(w) < len) std::snprintf(buf + w, len - static_cast<size_t>(w), "]");
  return buf;
}

Error normalize_dim(int64_t dim, int64_t rank, int64_t* out, const char* what) {
  const int64_t r = rank == 0 ? 1 : rank;  // scalars accept dim 0 / -1 like PyTorch
  if (dim < -r || dim >= r) {
    return Error::make(ErrorCode::kInvalidArgument, "%s: dim %" PRId64 " is out of range for rank %" PRId64,
                       what, dim, rank);
  }
  *out = dim < 0 ? dim + r : dim;
  return Error::ok();
}

const char* tag_name(Tag t) {
  switch (t) {
    case Tag::kNone: return "None";
    case Tag::kTensor: return "Tensor";
    case Tag::kInt: return "int";
    case Tag::kDouble: return "float";
    case Tag::kBool: return "bool";
    case Tag::kIntList: return "int[]";
    case Tag::kDoubleList: return "float[]";
    case Tag::kBoolList: return "bool[]";
    case Tag::kTensorList: return "Tensor[]";
    case Tag::kString: return "str";
  }
  return "unknown";
}

Error read_int_list(const EValue& v, int64_t* out, int max, int* n, const char* what) {
  if (v.tag == Tag::kInt) {  // a single int where a list is expected broadcasts as [v]
    EMBER_CHECK_ARG(max >= 1, "%s: list too long", what);
    out[0] = v.scalar.i;
    *n = 1;
    return Error::ok();
  }
  EMBER_CHECK_ARG(v.tag == Tag::kIntList, "%s: expected int[] but got %s", what, tag_name(v.tag));
  EMBER_CHECK_ARG(v.count <= max, "%s: list of %d ints is longer than the supported %d", what, v.count, max);
  for (int32_t k = 0; k < v.count; ++k) out[k] = v.items[k]->scalar.i;
  *n = v.count;
  return Error::ok();
}

}  // namespace ember
