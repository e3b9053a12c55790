#include "async_step.h"

#include <cstring>
#include <utility>

namespace ember {
namespace runners {

AsyncStep::~AsyncStep() {
  if (!started_) return;
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !requested_ || done_; });  // a running step finishes first
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
    done_ = false;
  }
  launched_ = true;
  cv_.notify_all();
  return Error::ok();
}

Result<const float*> AsyncStep::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  requested_ = false;
  done_ = false;
  launched_ = false;
  return std::move(result_);
}

void* AsyncStep::thread_main(void* self) {
  static_cast<AsyncStep*>(self)->loop();
  return nullptr;
}

void AsyncStep::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return quit_ || (requested_ && !done_); });
    if (quit_) return;
    const int64_t token = token_, pos = pos_;
    lk.unlock();
    Result<const float*> r = decoder_->step(&token, 1, pos);
    lk.lock();
    result_ = std::move(r);
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace runners
}  // namespace ember
