// AsyncStep: one decode step of a TextDecoder run on a helper thread, so that what the caller
// does with a token once it is sampled (its callback, Python, an HTTP stream) overlaps the
// forward step of that token instead of preceding it. With several sessions batched by a
// StepBatcher, each session's next step then joins the batch as soon as its token is sampled:
// the batch no longer waits for the slowest caller's per-token work.
//
// The helper thread starts on the first launch() and lives until the AsyncStep is destroyed.
// Between launch() and wait() the decoder belongs to the helper thread: its owner must not touch
// it (TextRunner drains with wait() before anything else uses the decoder). Not thread-safe
// otherwise: one owner thread calls launch / wait / launched.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include <pthread.h>

#include "ember/runners/text_decoder.h"

namespace ember {
namespace runners {

class AsyncStep {
 public:
  explicit AsyncStep(TextDecoder* decoder) : decoder_(decoder) {}
  ~AsyncStep();
  AsyncStep(const AsyncStep&) = delete;
  AsyncStep& operator=(const AsyncStep&) = delete;

  // Starts decoder->step(&token, 1, pos) on the helper thread. Errors: kOutOfMemory when the
  // helper thread cannot be started (nothing was launched; run the step directly).
  Error launch(int64_t token, int64_t pos);
  // Whether a step was launched and not yet collected by wait().
  bool launched() const { return launched_; }
  // Waits for the launched step and returns its result (logits, valid until the next step).
  Result<const float*> wait();

 private:
  static void* thread_main(void* self);
  void loop();

  TextDecoder* const decoder_;
  pthread_t thread_{};
  bool started_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool launched_ = false;  // owner-side: a launch not yet waited for
  bool requested_ = false;  // under mu_: a step for the helper to run
  bool done_ = false;       // under mu_: its result is ready
  bool quit_ = false;       // under mu_
  int64_t token_ = 0, pos_ = 0;
  Result<const float*> result_{static_cast<const float*>(nullptr)};
};

}  // namespace runners
}  // namespace ember
