// Internal: a Method's decoded instructions and delegate instances (shared by method.cpp,
// method_verify.cpp and method_batch.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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
  bool stackable = false;  // a delegate call whose rows may be stacked (Backend::max_stacked_rows)
  EValue* const* args = nullptr;
};

struct Method::DelegateInstance {
  Backend* backend = nullptr;
  void* handle = nullptr;
  std::string id;
};

}  // namespace ember
