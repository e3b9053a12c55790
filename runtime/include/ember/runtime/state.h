// ProgramState: one instance of a program's mutable state (e.g. an LLM's KV cache).
//
// A Program owns its immutable bytes (weights, mapped or read once) plus one default state
// instance (Program::state()). `Program::new_state()` makes another, independent instance with
// the same tensors (names, dtypes, shapes), so several conversations ("sessions") run over one
// copy of the weights: N sessions cost the weights once plus N x (state + method arenas).
//
// Bind a Method to a state with `program.load_method(name, state)`; the Method keeps the state
// alive (shared ownership), and every state-storage value of the method points into it. A state
// is not thread-safe: run at most one Method bound to it at a time (one session per thread).
// Methods bound to different states of one program may run concurrently.
//
// Memory: one zero-initialized block, 2 MiB aligned and advised to use huge pages; pages are
// only committed when written (a fresh state costs address space, not RSS, until it is used),
// except tensors with an initial value in the file, which are copied in at creation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/runtime/error.h"
#include "ember/runtime/tensor.h"

namespace ember {

class Program;

struct StateInfo {
  std::string name;
  Tensor tensor;  // points into the state block that owns it
};

class ProgramState {
 public:
  ~ProgramState();
  ProgramState(const ProgramState&) = delete;
  ProgramState& operator=(const ProgramState&) = delete;

  // Tensors in the program's state order, each pointing into this instance's block.
  const std::vector<StateInfo>& tensors() const { return tensors_; }
  // Restores every tensor to its initial value (the file's, or zeros).
  void reset();
  // Bytes of the block (all tensors, each 64-byte aligned).
  size_t nbytes() const { return nbytes_; }
  // The program this state was made from (a Method only binds to a state of its own program).
  const Program* program() const { return program_.get(); }

 private:
  friend class Program;
  ProgramState() = default;

  std::shared_ptr<const Program> program_;  // keeps the initial-value segments alive
  std::vector<StateInfo> tensors_;
  uint8_t* block_ = nullptr;                 // calloc'ed; freed in the destructor
  size_t nbytes_ = 0;
};

}  // namespace ember
