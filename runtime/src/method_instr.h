// Internal: one decoded instruction of a Method (shared by method.cpp and method_verify.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ember/runtime/method.h"

namespace ember {

struct Method::Instr {
  enum class Kind : uint8_t { kKernel, kDelegate, kCopy } kind = Kind::kKernel;
  KernelFn fn = nullptr;
  uint32_t index = 0;      // operator or delegate index
  size_t arg_offset = 0;   // into arg_storage_
  int nargs = 0;           // args + outputs
  int nouts = 0;           // outputs (the last nouts of args)
  bool view = false;       // a view kernel: its outputs alias its first argument
  EValue* const* args = nullptr;
};

}  // namespace ember
