// A small fixed thread pool for data-parallel loops inside kernels.
//
// `parallel_for` splits [0, n) into at most num_threads() contiguous chunks and runs them
// concurrently, the calling thread taking one chunk. Calls from inside a running chunk run
// serially (no nested parallelism), and so do calls made while another thread is using the
// pool (it never blocks). Thread count defaults to the number of physical cores. The pool is
// process-wide: ember.runtime and ember.runners share one (libember_runtime).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "ember/runtime/error.h"

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

// Logical CPUs this process may run on (its affinity mask): the most threads the pool uses.
// More threads than CPUs only spin against each other (1000 threads ran a model 700x slower).
int max_num_threads();

// Sets the number of threads used by kernels: `n` clamped to [1, max_num_threads()]. The
// worker threads are started now. Returns the count in effect, which is lower than asked when
// `n` was above max_num_threads() or when the OS refused to start a worker; in the latter case
// the pool keeps the workers it has, thread_pool_error() says why, and no later parallel_for
// tries again (only the next set_num_threads does).
int set_num_threads(int n);
int get_num_threads();

// Caps the threads of the parallel loops this thread starts while the cap lives (RAII,
// thread-local, nestable: the innermost cap wins, and the one before it comes back when it
// ends). `n` <= 0: no cap (the pool's count); 1: every loop runs inline on this thread. A cap
// never raises the count above get_num_threads(). Sessions of one program use it to run with
// their own thread count over the one process-wide pool.
class ThreadCap {
 public:
  explicit ThreadCap(int n);
  ~ThreadCap();
  ThreadCap(const ThreadCap&) = delete;
  ThreadCap& operator=(const ThreadCap&) = delete;

  // The cap in effect on the calling thread (0: none).
  static int current();
  // The cap for work shared by two callers with caps `a` and `b`: none when either has none,
  // else the larger.
  static int merge(int a, int b) { return a <= 0 || b <= 0 ? 0 : (a > b ? a : b); }

 private:
  int previous_;
};

// Why the last attempt to start worker threads failed (kOutOfMemory with the OS's reason and
// the count reached), or Error::ok(). Cleared by a set_num_threads that starts all its workers.
Error thread_pool_error();

// Synchronization accounting for EMBER_PROFILE. Off by default (it reads the clock around every
// parallel loop); while on, each parallel_for that uses more than one thread adds to the totals.
struct PoolProfile {
  uint64_t loops = 0;         // parallel loops run on more than one thread
  double caller_wait_s = 0;   // the calling thread waiting at loop ends for the workers to finish
  double worker_busy_s = 0;   // worker threads running chunks, summed over the workers
};
void set_pool_profiling(bool on);
// Totals since the process started (only loops run while profiling was on count).
PoolProfile pool_profile();

// Work for the calling thread's wait at the end of its next parallel loop that the workers have
// not finished yet: fn(ctx) runs once there (on this thread, before it waits for them), then the
// hook is cleared; set_idle_work(nullptr, nullptr) drops one that never ran. Per thread. For
// what only pays in such waits (asking for the lines the caller reads next).
void set_idle_work(void (*fn)(void*), void* ctx);

// Runs fn(begin, end) over chunks of [0, n). `grain` is the smallest chunk worth a thread.
void parallel_for_impl(int64_t n, int64_t grain, RangeFn fn);

template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  auto& f = fn;
  parallel_for_impl(n, grain, RangeFn(f));
}

// Runs fn(i, i + 1) for each i of [0, n), the items taken in order, one at a time, by whichever
// thread is free next: uneven items (put the longest first) and a thread that runs slower for a
// while balance themselves. Serial where parallel_for would be (inside a chunk, the pool in use by
// another thread, one thread).
void parallel_tasks_impl(int64_t n, RangeFn fn);

template <typename F>
void parallel_tasks(int64_t n, F&& fn) {
  auto& f = fn;
  parallel_tasks_impl(n, RangeFn(f));
}

}  // namespace ember
