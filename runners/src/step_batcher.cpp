#include "ember/runners/step_batcher.h"

#include <algorithm>
#include <cstdlib>

namespace ember {
namespace runners {
namespace {

bool batching_enabled() {
  const char* v = std::getenv("EMBER_BATCH_DECODE");
  return v == nullptr || v[0] == '\0' || v[0] != '0';
}

// How long a decode step waits for the other active sessions: a quarter of the last batch's
// execution time (their threads come back after sampling and whatever their callers do with
// the token), between 50 us and 2 ms.
std::chrono::steady_clock::duration join_window(std::chrono::steady_clock::duration last_batch) {
  using std::chrono::microseconds;
  return std::clamp<std::chrono::steady_clock::duration>(last_batch / 4, microseconds(50), microseconds(2000));
}

}  // namespace

StepBatcher::StepBatcher(size_t max_batch) : max_batch_(std::max<size_t>(1, max_batch)), enabled_(batching_enabled()) {}

void StepBatcher::enter() {
  std::lock_guard<std::mutex> lk(mu_);
  ++active_;
}

void StepBatcher::leave() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (active_ > 0) --active_;
  }
  cv_.notify_all();  // a batch waiting for this session need not wait any more
}

bool StepBatcher::next_job(Clock::time_point now, std::vector<Request*>* job, bool* decode,
                           Clock::time_point* until) {
  *until = Clock::time_point::max();
  const bool prefill_turn = !prefill_queue_.empty() && (decode_queue_.empty() || last_was_decode_);
  if (prefill_turn) {
    job->assign(1, prefill_queue_.front());
    prefill_queue_.pop_front();
    *decode = false;
    return true;
  }
  if (decode_queue_.empty()) return false;
  const size_t want = std::min(max_batch_, std::max<size_t>(active_, 1));
  const Clock::time_point deadline = first_decode_arrival_ + join_window(last_batch_time_);
  if (decode_queue_.size() < want && prefill_queue_.empty() && now < deadline) {
    *until = deadline;
    return false;
  }
  const size_t take = std::min(max_batch_, decode_queue_.size());
  job->assign(decode_queue_.begin(), decode_queue_.begin() + static_cast<std::ptrdiff_t>(take));
  decode_queue_.erase(decode_queue_.begin(), decode_queue_.begin() + static_cast<std::ptrdiff_t>(take));
  if (!decode_queue_.empty()) first_decode_arrival_ = now;
  *decode = true;
  return true;
}

Error StepBatcher::run(Method* method, bool decode, size_t* batch_size) {
  if (batch_size != nullptr) *batch_size = 1;
  if (!enabled_) return method->execute();
  Request req;
  req.method = method;
  std::unique_lock<std::mutex> lk(mu_);
  if (decode) {
    if (decode_queue_.empty()) first_decode_arrival_ = Clock::now();
    decode_queue_.push_back(&req);
  } else {
    prefill_queue_.push_back(&req);
  }
  cv_.notify_all();  // a thread waiting to fill a batch may have it now
  std::vector<Request*> job;
  std::vector<Method*> methods;
  std::vector<Error> errors;
  while (!req.done) {
    if (busy_) {
      cv_.wait(lk);
      continue;
    }
    bool job_decode = false;
    Clock::time_point until;
    if (!next_job(Clock::now(), &job, &job_decode, &until)) {
      if (until == Clock::time_point::max()) cv_.wait(lk);
      else cv_.wait_until(lk, until);
      continue;
    }
    // This thread runs the job (its own step or others'), outside the lock.
    busy_ = true;
    lk.unlock();
    const Clock::time_point t0 = Clock::now();
    if (job.size() == 1) {
      job[0]->error = job[0]->method->execute();
    } else {
      methods.clear();
      for (Request* r : job) methods.push_back(r->method);
      errors.assign(job.size(), Error::ok());
      Method::execute_batch(methods.data(), methods.size(), errors.data());
      for (size_t i = 0; i < job.size(); ++i) job[i]->error = errors[i];
    }
    const Clock::duration took = Clock::now() - t0;
    lk.lock();
    for (Request* r : job) {
      r->batch = job.size();
      r->done = true;
    }
    if (job_decode) last_batch_time_ = took;
    last_was_decode_ = job_decode;
    busy_ = false;
    cv_.notify_all();
  }
  if (batch_size != nullptr) *batch_size = req.batch;
  return req.error;
}

}  // namespace runners
}  // namespace ember
