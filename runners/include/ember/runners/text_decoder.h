// TextDecoder: one LLM forward step over a loaded Program, with the cache as program state
// (the program's default state, or a ProgramState of its own: one per session).
//
// `step(tokens, n, pos)` runs forward(tokens int64[1, n], input_pos int64[1] = {pos}): it writes
// the K/V of positions [pos, pos + n) into the program's cache in place and returns a view of
// the logits of the last position, float32[vocab_size], valid until the next step (it points
// into the method's arena, or into this decoder's buffer when the program emits fp16/bf16).
// No allocation per step. Not thread-safe. Decoders of one program that share a StepBatcher
// (sessions) may step from their own threads at the same time: their steps go through it, and
// single-token steps taken together run as one batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "ember/runners/llm_info.h"
#include "ember/runners/step_batcher.h"
#include "ember/runtime/error.h"
#include "ember/runtime/method.h"
#include "ember/runtime/program.h"

namespace ember {
namespace runners {

class TextDecoder {
 public:
  // Loads `method` of `program` and reads its llm.* metadata; keeps a reference to the program.
  // The KV cache is `state` when given (from program->new_state(): a session of its own), else
  // the program's default state. Its steps run through `batcher` when given (one shared by the
  // sessions of the program), else directly. Fails with kInvalidArgument for a non-LLM program.
  static Result<std::unique_ptr<TextDecoder>> create(std::shared_ptr<Program> program,
                                                     std::string_view method = "forward",
                                                     std::shared_ptr<ProgramState> state = nullptr,
                                                     std::shared_ptr<StepBatcher> batcher = nullptr);

  // tokens: n ids in [0, vocab_size), 1 <= n <= max_seq_len, pos + n <= max_context_len.
  // Fails with kInvalidArgument naming the offending value; a kernel failure is returned as is.
  Result<const float*> step(const int64_t* tokens, int64_t n, int64_t pos);

  // What follows each step of a chain (step() with a Chain): next() gets the step's result
  // (logits valid until the next step) and returns true with the next single token and its
  // position, to run it at once, or false to end the chain. With a batcher it runs on whichever
  // thread executed the step (StepBatcher::Chain), while step()'s caller waits; it must not block,
  // and it may consume *step (move from it) only when it returns true or has taken the result.
  class Chain {
   public:
    virtual bool next(Result<const float*>* step, int64_t* token, int64_t* pos) = 0;

   protected:
    ~Chain() = default;
  };
  // step(), then the steps `chain` asks for, each as soon as the previous one is done: returns the
  // result of the last (the one after which next() returned false), or the error of a next step
  // that fails its checks.
  Result<const float*> step(const int64_t* tokens, int64_t n, int64_t pos, Chain* chain);

  // One step of each of `n` decoders of one program in one batched execution
  // (Method::execute_batch, one pass over the weights): decoders[i] takes the counts[i] tokens at
  // tokens[i] (1: a decode step; more: a prefill chunk of at most max_seq_len) from position
  // positions[i], with the checks of step(). logits[i] receives decoders[i]'s view of its last
  // token's logits, as step() would return it, bit for bit. The decoders must be distinct and
  // owned by the caller for the call. Returns the first failure, naming the decoder's index.
  static Error step_batch(TextDecoder* const* decoders, size_t n, const int64_t* const* tokens, const int64_t* counts,
                          const int64_t* positions, const float** logits);

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

  // This decoder's kernel thread count: its steps' parallel loops use at most `n` threads of the
  // process-wide pool (ThreadCap); 0 (the default): all of them. A batched execution runs on the
  // most that any of its steps allows.
  void set_threads(int n) { threads_ = n > 0 ? n : 0; }
  int threads() const { return threads_; }

  // How many sessions' steps shared the last step's execution (1: it ran alone).
  size_t last_batch_size() const { return last_batch_; }
  const std::shared_ptr<StepBatcher>& batcher() const { return batcher_; }

  const LlmInfo& info() const { return info_; }
  const Program& program() const { return *program_; }
  std::shared_ptr<Program> shared_program() const { return program_; }

 private:
  class BatcherChain;
  TextDecoder() = default;
  // step() in parts: checks and binds the inputs, then reads the last position's logits.
  Error bind(const int64_t* tokens, int64_t n, int64_t pos);
  Result<const float*> last_logits();
  std::shared_ptr<Program> program_;
  std::shared_ptr<ProgramState> state_;  // null: the program's default state
  std::unique_ptr<Method> method_;
  std::shared_ptr<StepBatcher> batcher_;  // null: steps run directly
  size_t last_batch_ = 1;
  int threads_ = 0;  // set_threads: 0 = no cap
  LlmInfo info_;
  int64_t pos_buf_[1] = {0};
  int64_t chain_token_ = 0;  // the bound token of a chained step
  std::vector<float> converted_;  // [vocab] when logits are not float32
};

}  // namespace runners
}  // namespace ember
