// kernel_paths(): every kernel table's entries and the ISA level each runs (ember/runtime/cpu.h).
// Each table describes itself; this only lists them, as register.cpp lists the kernels, then asks
// every registered backend for its own.
#include "ember/runtime/backend.h"
#include "ember/runtime/cpu.h"
#include "f32_kernels.h"
#include "kernel_utils.h"

namespace ember {

std::vector<KernelPath> kernel_paths() {
  std::vector<KernelPath> out;
  kern::describe_f32_kernels(out);
  describe_quantized_kernels(out);
  initialize();  // the backends' kernels too
  const BackendRegistry& backends = BackendRegistry::global();
  for (const std::string& id : backends.ids()) backends.find(id)->describe_kernels(out);
  return out;
}

}  // namespace ember
