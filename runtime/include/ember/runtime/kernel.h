// Kernel registry: out-variant functions looked up by operator name when a method loads.
//
// A kernel receives the operator's schema arguments in order (defaults filled in at export)
// followed by its outputs, all as EValue slots. It must validate dtypes/ranks it relies on,
// resize its output tensors (within their planned capacity) and write them. It returns an
// Error naming what was wrong; the Method adds the op name and instruction index.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ember/runtime/error.h"
#include "ember/runtime/evalue.h"

namespace ember {

struct KernelContext {
  int instruction = 0;  // index of the running instruction (for messages)
};

using KernelFn = Error (*)(KernelContext& ctx, KernelArgs args);

// A registered kernel and the argument counts the loader checks every call against, so a
// kernel may index args[0 .. num_args + num_outputs) without further count checks (it must
// still check each argument's tag, dtype and rank).
struct KernelDef {
  KernelFn fn = nullptr;
  int num_args = 0;     // schema arguments
  int num_outputs = 1;  // outputs (a Tensor[] result counts as one TensorList output)
  // A view kernel makes its outputs aliases of an input (Tensor::alias) and writes nothing;
  // only view kernels may have Alias outputs, and they may not have any other kind.
  bool view = false;
};

class KernelRegistry {
 public:
  // The process-wide registry, populated by ember::initialize().
  static KernelRegistry& global();

  // Registers `fn` for `name` ("aten::add.Tensor", "ember::attend_cache"). A later
  // registration of the same name replaces the earlier one (backends may override).
  void add(std::string_view name, KernelDef def);
  const KernelDef* find(std::string_view name) const;  // nullptr when unknown
  std::vector<std::string> names() const;              // sorted

 private:
  std::vector<std::pair<std::string, KernelDef>> entries_;
};

// Registers every portable kernel (runtime/kernels). Called by ember::initialize().
void register_portable_kernels(KernelRegistry& registry);

// Registers the portable kernels and built-in backends exactly once; safe to call repeatedly
// and from several threads.
void initialize();

}  // namespace ember
