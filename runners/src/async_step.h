// AsyncStep: the decode steps of a TextDecoder run on a helper thread, so that what the caller
// does with a token once it is sampled (its callback, Python, an HTTP stream) overlaps the
// forward steps instead of preceding them. With several sessions batched by a StepBatcher, each
// session's next step then joins the batch as soon as its token is sampled: the batch waits for
// no caller's per-token work.
//
// After each step the helper runs the owner's `advance` (accept the step, sample the next
// token, decide whether to go on) and, when it says so, starts the next step itself: the
// generation runs up to `depth` tokens ahead of its owner, whose wait() takes the outcomes in
// order. The steps are chained (TextDecoder::Chain): with a StepBatcher, the thread that ran a
// batch runs `advance` for it and queues the next step at once, while the helper stays parked in
// the step, so batched sessions go from one step to the next without their helpers waking; the
// helper takes over when the owner falls `depth` outcomes behind or stops advancing. So a caller
// busy for a while (its thread waiting for the GIL, say) holds up neither its own generation nor
// a batch. The tokens and the state are the same as with every step run by
// the owner; only who runs `advance`, and when, differs.
//
// The helper thread starts on the first launch() and lives until the AsyncStep is destroyed.
// Between launch() and the wait() that returns an outcome which starts no further step, the
// decoder and whatever `advance` touches belong to the helper thread: its owner must not touch
// them (TextRunner drains with wait(false) before anything else uses the decoder). Not
// thread-safe otherwise: one owner thread calls launch / wait / poll / launched.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include <pthread.h>

#include "ember/runners/stats.h"
#include "ember/runners/text_decoder.h"

namespace ember {
namespace runners {

class AsyncStep {
 public:
  // What `advance` made of a finished step: the token for the owner (or an error, or a value
  // meaning done, with `reason`), the generation's decode time at it, and the next step to start
  // at once, if any.
  struct Advanced {
    Result<int64_t> token{int64_t{0}};
    StopReason reason = StopReason::kNone;
    double decode_ms = 0;
    bool launch = false;
    int64_t next_token = 0, next_pos = 0;
  };
  // Runs on the helper thread after each step: returns true when it took the step's result
  // (filling *out), false to leave it to the owner (the chain of steps then ends there).
  using AdvanceFn = std::function<bool(Result<const float*>* step, Advanced* out)>;
  // What wait() hands the owner.
  struct Outcome {
    bool advanced = false;  // the helper ran `advance`: `result` holds what it made of the step
    Advanced result;
    Result<const float*> step{static_cast<const float*>(nullptr)};  // else: the step's result
  };

  // depth >= 1: how many outcomes may wait for the owner before the helper pauses.
  AsyncStep(TextDecoder* decoder, AdvanceFn advance, size_t depth);
  ~AsyncStep();
  AsyncStep(const AsyncStep&) = delete;
  AsyncStep& operator=(const AsyncStep&) = delete;

  // Starts decoder->step(&token, 1, pos) on the helper thread, `advance` allowed after it.
  // Errors: kOutOfMemory when the helper thread cannot be started (nothing was launched; run the
  // step directly).
  Error launch(int64_t token, int64_t pos);
  // Whether a launched chain of steps has outcomes the owner has not collected yet.
  bool launched() const { return launched_; }
  // The oldest outcome not collected yet, waiting for it. allow_advance false (draining): the
  // helper runs `advance` no more; the step that follows the last advanced outcome, if any,
  // comes back as a step result (logits valid until the next step). Call while launched().
  Outcome wait(bool allow_advance);
  // wait(true) when an outcome is already there (true, *out filled), else false at once.
  bool poll(Outcome* out);

 private:
  class Links;
  static void* thread_main(void* self);
  void loop();
  // Under mu_, with an outcome queued: takes the oldest.
  Outcome take_locked();

  TextDecoder* const decoder_;
  const AdvanceFn advance_;
  const size_t depth_;
  pthread_t thread_{};
  bool started_ = false;
  bool launched_ = false;  // owner-side: a chain whose last outcome is not collected yet
  std::mutex mu_;
  std::condition_variable cv_;
  // Under mu_:
  bool requested_ = false;  // a step (token_, pos_) for the helper to start
  bool running_ = false;    // the helper is running a chain of steps
  bool may_advance_ = false;  // set by launch(), cleared by a draining wait(false)
  bool quit_ = false;
  int64_t token_ = 0, pos_ = 0;
  std::vector<Outcome> ring_;  // depth_ + 1 slots (draining may add one past depth_)
  size_t head_ = 0, count_ = 0;
};

}  // namespace runners
}  // namespace ember
