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
// A step may carry a Chain: whichever thread ran it calls the chain right after (the caller
// stays parked in run()), and when the chain binds another single-token step, that step goes back
// in the queue at once, so a generation's steps follow each other without its own thread waking
// between them (4 sessions: ~0.2 ms of wake-ups, waits and re-queueing per batched step otherwise).
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

  // What follows a chained step (run()'s `chain`). next() runs on the thread that executed the
  // step, outside the batcher's lock, while run()'s caller waits: `step` is the step's result and
  // `batch` how many steps shared its execution. Returns true when it has bound the method's
  // inputs for a next single-token step, which then runs as part of the same run() call; false
  // ends the chain (run() returns that step's result). It must not block or call run().
  class Chain {
   public:
    virtual bool next(const Error& step, size_t batch) = 0;

   protected:
    ~Chain() = default;
  };

  explicit StepBatcher(size_t max_batch = kDefaultMaxBatch);
  StepBatcher(const StepBatcher&) = delete;
  StepBatcher& operator=(const StepBatcher&) = delete;

  // Executes `method` (its inputs bound; owned by the caller, who must not touch it until this
  // returns). `decode`: a single-token step (the batch waits for those of active sessions).
  // Returns the method's result; `batch_size`, when given, receives how many steps shared the
  // execution (1: alone). With `chain`: the steps that chain->next() binds run too, and the result
  // and batch size are those of the last one (the one after which next() returned false).
  Error run(Method* method, bool decode, size_t* batch_size = nullptr, Chain* chain = nullptr);

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
    Chain* chain = nullptr;
    bool again = false;  // its chain bound another step (set by the thread that ran it)
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
