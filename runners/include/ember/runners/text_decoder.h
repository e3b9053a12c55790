// TextDecoder: one LLM forward step over a loaded Program, with the cache as program state
// (the program's default state, or a ProgramState of its own: one per session).
//
// `step(tokens, n, pos)` runs forward(tokens int64[1, n], input_pos int64[1] = {pos}): it writes
// the K/V of positions [pos, pos + n) into the program's cache in place and returns a view of
// the logits of the last position, float32[vocab_size], valid until the next step (it points
// into the method's arena, or into this decoder's buffer when the program emits fp16/bf16).
// No allocation per step. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "ember/runners/llm_info.h"
#include "ember/runtime/error.h"
#include "ember/runtime/method.h"
#include "ember/runtime/program.h"

namespace ember {
namespace runners {

class TextDecoder {
 public:
  // Loads `method` of `program` and reads its llm.* metadata; keeps a reference to the program.
  // The KV cache is `state` when given (from program->new_state(): a session of its own), else
  // the program's default state. Fails with kInvalidArgument for a non-LLM program.
  static Result<std::unique_ptr<TextDecoder>> create(std::shared_ptr<Program> program,
                                                     std::string_view method = "forward",
                                                     std::shared_ptr<ProgramState> state = nullptr);

  // tokens: n ids in [0, vocab_size), 1 <= n <= max_seq_len, pos + n <= max_context_len.
  // Fails with kInvalidArgument naming the offending value; a kernel failure is returned as is.
  Result<const float*> step(const int64_t* tokens, int64_t n, int64_t pos);

  // Restores the cache (this decoder's state) to its initial value.
  void reset_state() {
    if (state_ != nullptr) {
      state_->reset();
    } else {
      program_->reset_state();
    }
  }
  // This decoder's own state, or null when it uses the program's default state.
  const std::shared_ptr<ProgramState>& state() const { return state_; }

  // Memory of this decoder's conversation: its KV cache (state) and its method arena, in bytes.
  size_t state_bytes() const;
  size_t arena_bytes() const { return method_->arena_size(); }

  const LlmInfo& info() const { return info_; }
  const Program& program() const { return *program_; }
  std::shared_ptr<Program> shared_program() const { return program_; }

 private:
  TextDecoder() = default;
  std::shared_ptr<Program> program_;
  std::shared_ptr<ProgramState> state_;  // null: the program's default state
  std::unique_ptr<Method> method_;
  LlmInfo info_;
  int64_t pos_buf_[1] = {0};
  std::vector<float> converted_;  // [vocab] when logits are not float32
};

}  // namespace runners
}  // namespace ember
