// AsyncStep: the decode steps of a TextDecoder run on a helper thread, so that what the caller
// does with a token once it is sampled (its callback, Python, an HTTP stream) overlaps the
// forward step of that token instead of preceding it. With several sessions batched by a
// StepBatcher, each session's next step then joins the batch as soon as its token is sampled:
// the batch no longer waits for the slowest caller's per-token work.
//
// When the owner is already waiting for the step as it finishes (the usual case: a step takes
// milliseconds, the owner's per-token work far less), the helper also runs the owner's `advance`
// on it at once (accept the step, sample the next token, decide whether to go on) and, when it
// says so, starts the next step itself: the next batch then waits for no thread to wake up.
// The tokens and the state are the same either way; only who runs `advance` differs.
//
// The helper thread starts on the first launch() and lives until the AsyncStep is destroyed.
// Between launch() and wait() the decoder belongs to the helper thread: its owner must not touch
// it (TextRunner drains with wait(false) before anything else uses the decoder); `advance` runs
// only while the owner is blocked in wait(true), so it may use the owner's state. Not
// thread-safe otherwise: one owner thread calls launch / wait / launched.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include <pthread.h>

#include "ember/runners/text_decoder.h"

namespace ember {
namespace runners {

class AsyncStep {
 public:
  // What `advance` made of a finished step: the token for the owner (or an error, or kDone), and
  // the next step to start at once, if any.
  struct Advanced {
    Result<int64_t> token{int64_t{0}};
    bool launch = false;
    int64_t next_token = 0, next_pos = 0;
  };
  // Runs on the helper thread while the owner waits in wait(true): returns true when it took the
  // step's result (filling *out), false to leave it to the owner.
  using AdvanceFn = std::function<bool(Result<const float*>* step, Advanced* out)>;
  // What wait() hands the owner.
  struct Outcome {
    bool advanced = false;  // the helper ran `advance`: `result` holds what it made of the step
    Advanced result;
    Result<const float*> step{static_cast<const float*>(nullptr)};  // else: the step's result
  };

  AsyncStep(TextDecoder* decoder, AdvanceFn advance) : decoder_(decoder), advance_(std::move(advance)) {}
  ~AsyncStep();
  AsyncStep(const AsyncStep&) = delete;
  AsyncStep& operator=(const AsyncStep&) = delete;

  // Starts decoder->step(&token, 1, pos) on the helper thread. Errors: kOutOfMemory when the
  // helper thread cannot be started (nothing was launched; run the step directly).
  Error launch(int64_t token, int64_t pos);
  // Whether a step was launched and its outcome not yet collected by wait().
  bool launched() const { return launched_; }
  // Waits for the launched step's outcome. allow_advance: the helper may run `advance` on it (and
  // start the next step, after which launched() stays true); false: always the step's result
  // (logits valid until the next step).
  Outcome wait(bool allow_advance);

 private:
  static void* thread_main(void* self);
  void loop();

  TextDecoder* const decoder_;
  const AdvanceFn advance_;
  pthread_t thread_{};
  bool started_ = false;
  bool launched_ = false;  // owner-side: a launch whose outcome is not collected yet
  std::mutex mu_;
  std::condition_variable cv_;
  // Under mu_:
  bool requested_ = false;      // a step (token_, pos_) for the helper to start
  bool running_ = false;        // the helper is running one
  bool ready_ = false;          // outcome_ is waiting for the owner
  bool owner_waiting_ = false;  // the owner is in wait(true)
  bool quit_ = false;
  int64_t token_ = 0, pos_ = 0;
  Outcome outcome_;
};

}  // namespace runners
}  // namespace ember
