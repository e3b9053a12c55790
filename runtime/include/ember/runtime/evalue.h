// EValue: one slot of a method's value table (tensor, scalar, list, string or None).
//
// Values are created once when a method is loaded; kernels read their arguments and write
// their outputs through pointers to these slots. Int values may be symbolic (written by
// sym_size and integer-arithmetic kernels at run time), which is how dynamic shapes flow.
#pragma once

#include <cstdint>

#include "ember/runtime/tensor.h"

namespace ember {

enum class Tag : uint8_t {
  kNone = 0,
  kTensor,
  kInt,
  kDouble,
  kBool,
  kIntList,     // elements are Int EValues (possibly symbolic)
  kDoubleList,
  kBoolList,
  kTensorList,  // elements are Tensor EValues or nullptr (None in an optional-tensor list)
  kString,
};

const char* tag_name(Tag t);

struct EValue {
  Tag tag = Tag::kNone;
  union {
    int64_t i;
    double d;
    bool b;
  } scalar{0};
  Tensor tensor;                      // valid when tag == kTensor
  EValue* const* items = nullptr;     // kIntList / kTensorList (owned by the Method)
  const double* doubles = nullptr;    // kDoubleList (points into the program)
  const uint8_t* bools = nullptr;     // kBoolList (points into the program)
  const char* str = nullptr;          // kString (points into the program)
  int32_t count = 0;                  // list length or string length

  bool is_none() const { return tag == Tag::kNone; }
  bool is_tensor() const { return tag == Tag::kTensor; }
  bool is_int() const { return tag == Tag::kInt; }
  bool is_double() const { return tag == Tag::kDouble; }
  bool is_bool() const { return tag == Tag::kBool; }

  // Numeric scalar as double: Int, Double and Bool all convert.
  double to_double() const {
    return tag == Tag::kDouble ? scalar.d : tag == Tag::kInt ? static_cast<double>(scalar.i)
                                                            : static_cast<double>(scalar.b);
  }
  int64_t to_int() const {
    return tag == Tag::kInt ? scalar.i : tag == Tag::kBool ? static_cast<int64_t>(scalar.b)
                                                           : static_cast<int64_t>(scalar.d);
  }
  int64_t int_at(int32_t k) const { return items[k]->scalar.i; }
  Tensor* tensor_at(int32_t k) const { return items[k] == nullptr ? nullptr : &items[k]->tensor; }
};

// Reads an IntList argument into `out` (at most `max` entries); fails if it is not an int list
// or is longer than `max`.
Error read_int_list(const EValue& v, int64_t* out, int max, int* n, const char* what);

// The arguments of one kernel call: schema arguments in order, then the outputs.
struct KernelArgs {
  EValue* const* v = nullptr;
  int n = 0;
  EValue& operator[](int k) const { return *v[k]; }
};

}  // namespace ember
