#include "async_step.h"

#include <cstring>
#include <utility>

namespace ember {
namespace runners {

AsyncStep::AsyncStep(TextDecoder* decoder, AdvanceFn advance, size_t depth)
    : decoder_(decoder), advance_(std::move(advance)), depth_(depth < 1 ? 1 : depth), ring_(depth_ + 1) {}

AsyncStep::~AsyncStep() {
  if (!started_) return;
  {
    std::unique_lock<std::mutex> lk(mu_);
    may_advance_ = false;  // a helper waiting for room ends its chain instead
    cv_.notify_all();
    cv_.wait(lk, [&] { return !requested_ && !running_; });  // a step in flight finishes first
    quit_ = true;
  }
  cv_.notify_all();
  pthread_join(thread_, nullptr);
}

Error AsyncStep::launch(int64_t token, int64_t pos) {
  if (!started_) {
    // pthread_create reports failure as a code (std::thread would throw).
    const int rc = pthread_create(&thread_, nullptr, &AsyncStep::thread_main, this);
    if (rc != 0) return Error::make(ErrorCode::kOutOfMemory, "cannot start the decode helper thread: %s", std::strerror(rc));
    started_ = true;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    token_ = token;
    pos_ = pos;
    requested_ = true;
    may_advance_ = true;
  }
  launched_ = true;
  cv_.notify_all();
  return Error::ok();
}

AsyncStep::Outcome AsyncStep::take_locked() {
  Outcome out = std::move(ring_[head_]);
  head_ = (head_ + 1) % ring_.size();
  --count_;
  launched_ = out.advanced && out.result.launch;  // the chain goes on past this outcome
  return out;
}

AsyncStep::Outcome AsyncStep::wait(bool allow_advance) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!allow_advance && may_advance_) {
    may_advance_ = false;
    cv_.notify_all();  // a helper waiting for room may go on (and end its chain)
  }
  cv_.wait(lk, [&] { return count_ > 0; });
  Outcome out = take_locked();
  lk.unlock();
  cv_.notify_all();  // room for the helper's next outcome
  return out;
}

bool AsyncStep::poll(Outcome* out) {
  std::unique_lock<std::mutex> lk(mu_);
  if (count_ == 0) return false;
  *out = take_locked();
  lk.unlock();
  cv_.notify_all();
  return true;
}

void* AsyncStep::thread_main(void* self) {
#ifdef __linux__
  pthread_setname_np(pthread_self(), "ember-step");  // what top -H and /proc/*/task/*/comm show
#endif
  static_cast<AsyncStep*>(self)->loop();
  return nullptr;
}

// The helper's chain as the decoder's (TextDecoder::Chain): after each step, on whichever thread
// ran it, advance and queue the outcome exactly as the helper would, so the next step starts at
// once without the helper waking; when the owner has no room for the outcome, or no longer allows
// advancing, it leaves the step to the helper (which then waits as before).
class AsyncStep::Links final : public TextDecoder::Chain {
 public:
  explicit Links(AsyncStep* a) : a_(a) {}

  bool next(Result<const float*>* step, int64_t* token, int64_t* pos) override {
    std::unique_lock<std::mutex> lk(a_->mu_);
    if (a_->count_ >= a_->depth_ || !a_->may_advance_ || !a_->advance_) return false;
    lk.unlock();
    Outcome out;
    out.step = std::move(*step);
    if (!a_->advance_(&out.step, &out.result)) {  // it took nothing: the helper decides
      *step = std::move(out.step);
      return false;
    }
    out.advanced = true;
    lk.lock();
    if (!a_->may_advance_) out.result.launch = false;  // as in loop()
    const bool again = out.result.launch;
    if (again) {
      *token = out.result.next_token;
      *pos = out.result.next_pos;
    } else {
      a_->running_ = false;
      ended = true;
    }
    a_->ring_[(a_->head_ + a_->count_) % a_->ring_.size()] = std::move(out);
    ++a_->count_;
    lk.unlock();
    a_->cv_.notify_all();
    return again;
  }

  bool ended = false;  // the chain ended here, its last outcome queued

 private:
  AsyncStep* a_;
};

void AsyncStep::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return quit_ || requested_; });
    if (quit_) return;
    int64_t token = token_, pos = pos_;
    requested_ = false;
    running_ = true;
    lk.unlock();
    // Steps back to back while advance asks for the next one and the owner keeps up (at most
    // depth_ outcomes waiting for it): each taken on by the step's own thread (Links) where it
    // can, else here.
    for (bool again = true; again;) {
      Links links(this);
      Outcome out;
      out.step = decoder_->step(&token, 1, pos, &links);
      if (links.ended) break;
      lk.lock();
      cv_.wait(lk, [&] { return count_ < depth_ || !may_advance_; });
      const bool advance = may_advance_ && advance_;
      lk.unlock();
      if (advance) out.advanced = advance_(&out.step, &out.result);
      lk.lock();
      // An owner that began draining while advance ran gets no further step: the token advance
      // sampled stays unfed, as when it decides to stop.
      if (!may_advance_) out.result.launch = false;
      again = out.advanced && out.result.launch;
      if (again) {
        token = out.result.next_token;
        pos = out.result.next_pos;
      } else {
        running_ = false;
      }
      ring_[(head_ + count_) % ring_.size()] = std::move(out);
      ++count_;
      lk.unlock();
      cv_.notify_all();
    }
    lk.lock();
  }
}

}  // namespace runners
}  // namespace ember
