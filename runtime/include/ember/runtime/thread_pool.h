// A small fixed thread pool for data-parallel loops inside kernels.
//
// `parallel_for` splits [0, n) into at most num_threads() contiguous chunks and runs them
// concurrently, the calling thread taking one chunk. Calls from inside a running chunk run
// serially (no nested parallelism). Thread count defaults to the number of physical cores.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace ember {

// A non-owning reference to a callable `void(int64_t begin, int64_t end)`.
class RangeFn {
 public:
  template <typename F>
  RangeFn(F& f)  // NOLINT(implicit): the callable must outlive this reference
      : obj_(static_cast<void*>(&f)), call_([](void* o, int64_t b, int64_t e) { (*static_cast<F*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

// Number of physical cores (falls back to logical CPUs when topology is unknown).
int physical_core_count();

// Sets the number of threads used by kernels (>= 1). Threads are created lazily.
void set_num_threads(int n);
int get_num_threads();

// Runs fn(begin, end) over chunks of [0, n). `grain` is the smallest chunk worth a thread.
void parallel_for_impl(int64_t n, int64_t grain, RangeFn fn);

template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  auto& f = fn;
  parallel_for_impl(n, grain, RangeFn(f));
}

}  // namespace ember
