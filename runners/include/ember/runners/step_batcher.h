// StepBatcher: one queue for the forward steps of every session of one loaded program, which
// merges the decode steps of sessions that run at the same time into one batched execution
// (continuous batching): one pass over the weights per step serves all of them.
//
// Sessions (TextDecoders of one Program, each with its own state and method) call run() from
// their own threads. Executions never overlap: they share the weights and the kernel thread
// pool, so the batcher runs one at a time, in whichever calling thread finds it free, over the
// steps waiting at that moment (at most `max_batch`, first come first served) as one
// Method::execute_batch: decode steps (one token) and prefill chunks alike, so a newcomer's
// prefill rides along with the others' decoding instead of stalling it. Each session's outputs
// are the ones it would get alone, bit for bit.
// A step waits briefly for the other sessions in a generation (enter() / leave()) to join its
// batch: until all of them have asked, or a quarter of the last batch's time has passed (at
// most 2 ms), so a session that stops asking never holds up the others for long.
//
// A step runs under its caller's ThreadCap; a batched one under the cap that allows the most
// threads among its steps (ThreadCap::merge).
// EMBER_BATCH_DECODE=0 turns batching off: run() then executes each step at once, in the
// caller's thread, concurrently with the other sessions (the behaviour before batching).
// All methods are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "ember/runtime/error.h"
#include "ember/runtime/method.h"

namespace ember {
namespace runners {

class StepBatcher {
 public:
  static constexpr size_t kDefaultMaxBatch = 8;

  explicit StepBatcher(size_t max_batch = kDefaultMaxBatch);
  StepBatcher(const StepBatcher&) = delete;
  StepBatcher& operator=(const StepBatcher&) = delete;

  // Executes `method` (its inputs bound; owned by the caller, who must not touch it until this
  // returns). `decode`: a single-token step (the batch waits for those of active sessions).
  // Returns the method's result; `batch_size`, when given, receives how many steps shared the
  // execution (1: alone).
  Error run(Method* method, bool decode, size_t* batch_size = nullptr);

  // A session starts / stops generating: decode batches wait for the sessions in between.
  void enter();
  void leave();

  size_t max_batch() const { return max_batch_; }
  // Whether batching is on (EMBER_BATCH_DECODE, read when the batcher is made).
  bool enabled() const { return enabled_; }

 private:
  struct Request {
    Method* method = nullptr;
    Error error;
    size_t batch = 0;
    int threads = 0;  // the caller's ThreadCap
    bool decode = false;
    bool done = false;
  };
  using Clock = std::chrono::steady_clock;

  // The next job under the lock: fills `job` with the requests to run together and returns true,
  // or returns false with `until` set to when to look again (Clock::time_point::max(): on notify).
  bool next_job(Clock::time_point now, std::vector<Request*>* job, Clock::time_point* until);

  const size_t max_batch_;
  const bool enabled_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request*> queue_;
  Clock::time_point first_arrival_;  // when the queue last went from empty to not
  Clock::time_point last_batch_end_;
  Clock::duration last_batch_time_{0};
  bool busy_ = false;
  size_t active_ = 0;  // sessions between enter() and leave()
  // The running job, owned by the thread that set busy_ (reused: no allocation per step).
  std::vector<Request*> job_;
  std::vector<Method*> methods_;
  std::vector<Error> errors_;
};

}  // namespace runners
}  // namespace ember
