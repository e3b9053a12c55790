#include "ember/runners/step_batcher.h"

#include <algorithm>
#include <cstdlib>

#include "ember/runtime/thread_pool.h"

namespace ember {
namespace runners {
namespace {

bool batching_enabled() {
  const char* v = std::getenv("EMBER_BATCH_DECODE");
  return v == nullptr || v[0] != '0';
}

// How long a step waits for the other active sessions: a quarter of the last batch's execution
// time (their threads come back after sampling and whatever their callers do with the token),
// between 50 us and 2 ms.
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

bool StepBatcher::next_job(Clock::time_point now, std::vector<Request*>* job, Clock::time_point* until) {
  *until = Clock::time_point::max();
  if (queue_.empty()) return false;
  size_t decodes = 0;
  for (const Request* r : queue_) decodes += r->decode ? 1 : 0;
  // Wait (briefly) for the sessions in a generation that have not asked for their step yet.
  const size_t want = std::min(max_batch_, active_);
  // From the later of the oldest request's arrival and the end of the last batch: requests that
  // queued up while a batch ran wait for that batch's sessions to come back, else the sessions
  // would split into two convoys that alternate for good.
  const Clock::time_point deadline = std::max(first_arrival_, last_batch_end_) + join_window(last_batch_time_);
  if (decodes < want && now < deadline) {
    *until = deadline;
    return false;
  }
  const size_t take = std::min(max_batch_, queue_.size());
  job->assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
  return true;
}

Error StepBatcher::run(Method* method, bool decode, size_t* batch_size, Chain* chain) {
  if (batch_size != nullptr) *batch_size = 1;
  if (!enabled_) {
    for (;;) {
      Error e = method->execute();
      if (chain == nullptr || !chain->next(e, 1)) return e;
    }
  }
  Request req;
  req.method = method;
  req.decode = decode;
  req.threads = ThreadCap::current();
  req.chain = chain;
  std::unique_lock<std::mutex> lk(mu_);
  if (queue_.empty()) first_arrival_ = Clock::now();
  queue_.push_back(&req);
  cv_.notify_all();  // a thread waiting to fill a batch may have it now
  // job_, methods_ and errors_ belong to the thread that set busy_ until it clears it.
  while (!req.done) {
    if (busy_) {
      cv_.wait(lk);
      continue;
    }
    Clock::time_point until;
    if (!next_job(Clock::now(), &job_, &until)) {
      if (until == Clock::time_point::max()) cv_.wait(lk);
      else cv_.wait_until(lk, until);
      continue;
    }
    // This thread runs the job (its own step or others'), outside the lock.
    busy_ = true;
    lk.unlock();
    const Clock::time_point t0 = Clock::now();
    int threads = job_[0]->threads;
    for (const Request* r : job_) threads = ThreadCap::merge(threads, r->threads);
    ThreadCap cap(threads);
    if (job_.size() == 1) {
      job_[0]->error = job_[0]->method->execute();
    } else {
      methods_.clear();
      for (Request* r : job_) methods_.push_back(r->method);
      errors_.assign(job_.size(), Error::ok());
      Method::execute_batch(methods_.data(), methods_.size(), errors_.data());
      for (size_t i = 0; i < job_.size(); ++i) job_[i]->error = errors_[i];
    }
    const Clock::duration took = Clock::now() - t0;
    // The chains, outside the lock: a step whose chain binds the next one goes back in the queue
    // (behind whatever queued meanwhile) without its caller waking.
    for (Request* r : job_) r->again = r->chain != nullptr && r->chain->next(r->error, job_.size());
    lk.lock();
    bool finished = false;
    for (Request* r : job_) {
      r->batch = job_.size();
      if (r->again) {
        r->error = Error::ok();
        r->decode = true;
        if (queue_.empty()) first_arrival_ = Clock::now();
        queue_.push_back(r);
      } else {
        r->done = true;
        finished = true;
      }
    }
    last_batch_time_ = took;
    last_batch_end_ = Clock::now();
    busy_ = false;
    // Waking the waiting callers only pays when a step is done: its caller takes the result, and
    // when it is this thread's own, another caller runs the queue. Otherwise (every step chained
    // on) this thread runs the next job itself, and the others would wake only to find it busy.
    if (finished) cv_.notify_all();
  }
  if (batch_size != nullptr) *batch_size = req.batch;
  return req.error;
}

}  // namespace runners
}  // namespace ember
