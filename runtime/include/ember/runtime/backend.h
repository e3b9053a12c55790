// Backend delegates: a lowered subgraph is stored as an opaque blob and executed by the
// backend registered under its id.
//
// Lifetime: `init` is called once per Method load with the blob bytes, which stay valid (they
// are mmapped from the program) until `destroy`, so a backend may keep pointers into them
// instead of copying weights. The handle it returns is owned by the backend and released by
// `destroy`. `execute` receives the delegate inputs followed by its outputs; outputs are
// planned tensors the backend must resize and fill.
//
// A blob is file data: `init` must bounds-check everything it reads from it and check every
// allocation the blob sizes with ember::check_memory (memory_limit.h) before making it, and
// report failures as Errors (never throw, never abort).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ember/runtime/cpu.h"
#include "ember/runtime/error.h"
#include "ember/runtime/kernel.h"

namespace ember {

struct CompileSpec {
  std::string_view key;
  const uint8_t* value = nullptr;  // points into the program
  size_t size = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Result<void*> init(const uint8_t* blob, size_t size, const CompileSpec* specs,
                             size_t num_specs) = 0;
  virtual Error execute(void* handle, KernelContext& ctx, KernelArgs args) = 0;
  virtual void destroy(void* handle) = 0;
  // How many rows a call with this handle may stack (Method::execute_batch): > 0 when it takes
  // one input tensor [..., K] and one output [..., N] and, for calls of up to that many rows,
  // computes each output row from the same input row alone, bit for bit as if that row came
  // alone. A batch of methods then runs one execute_stacked over the rows of all of them (one
  // pass over the weights for all). Default 0: never stacked.
  virtual int64_t max_stacked_rows(const void* handle) const {
    (void)handle;
    return 0;
  }
  // One call over the rows of n calls, where they are (required where max_stacked_rows > 0):
  // in[j] is call j's input [..., K] and out[j] its output (planned; resized and filled here, as
  // execute() does), the rows of all at most max_stacked_rows. Each output row must be what
  // execute() gives for that row. The tensors belong to the caller and stay valid through the
  // call. Default: kNotSupported.
  virtual Error execute_stacked(void* handle, KernelContext& ctx, Tensor* const* in, Tensor* const* out, size_t n) {
    (void)handle, (void)ctx, (void)in, (void)out, (void)n;
    return Error(ErrorCode::kNotSupported, "this backend stacks no rows");
  }
  // Appends the kernel families this backend runs and the ISA level of each, for
  // ember::kernel_paths() (default: none).
  virtual void describe_kernels(std::vector<KernelPath>& out) const { (void)out; }
};

class BackendRegistry {
 public:
  static BackendRegistry& global();
  // The registry does not own `backend`; it must live for the whole process.
  void add(std::string_view id, Backend* backend);
  Backend* find(std::string_view id) const;  // nullptr when unknown
  std::vector<std::string> ids() const;

 private:
  std::vector<std::pair<std::string, Backend*>> entries_;
};

// Registers the backends compiled into this build (called by ember::initialize()).
void register_builtin_backends(BackendRegistry& registry);

}  // namespace ember
