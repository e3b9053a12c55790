#include "async_step.h"

#include <cstring>
#include <utility>

namespace ember {
namespace runners {

AsyncStep::~AsyncStep() {
  if (!started_) return;
  {
    std::unique_lock<std::mutex> lk(mu_);
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
  }
  launched_ = true;
  cv_.notify_all();
  return Error::ok();
}

AsyncStep::Outcome AsyncStep::wait(bool allow_advance) {
  std::unique_lock<std::mutex> lk(mu_);
  owner_waiting_ = allow_advance;
  cv_.wait(lk, [&] { return ready_; });
  owner_waiting_ = false;
  ready_ = false;
  Outcome out = std::move(outcome_);
  lk.unlock();
  cv_.notify_all();  // a step the helper started itself may be waiting to hand over its outcome
  launched_ = out.advanced && out.result.launch;  // the helper started the next step itself
  return out;
}

void* AsyncStep::thread_main(void* self) {
  static_cast<AsyncStep*>(self)->loop();
  return nullptr;
}

void AsyncStep::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return quit_ || requested_; });
    if (quit_) return;
    int64_t token = token_, pos = pos_;
    requested_ = false;
    running_ = true;
    lk.unlock();
    // Steps back to back while advance asks for the next one: the mutex is not taken between
    // handing an outcome over and starting the next step.
    for (bool again = true; again;) {
      Outcome out;
      out.step = decoder_->step(&token, 1, pos);
      lk.lock();
      cv_.wait(lk, [&] { return !ready_; });  // the last outcome is the owner's first
      const bool advance = owner_waiting_ && advance_;
      lk.unlock();
      // The owner is blocked in wait(true) until ready_: advance runs on its behalf.
      if (advance) out.advanced = advance_(&out.step, &out.result);
      again = out.advanced && out.result.launch;
      if (again) {
        token = out.result.next_token;
        pos = out.result.next_pos;
      }
      lk.lock();
      if (!again) running_ = false;
      outcome_ = std::move(out);
      ready_ = true;
      lk.unlock();
      cv_.notify_all();
    }
    lk.lock();
  }
}

}  // namespace runners
}  // namespace ember
