// Fixed worker pool: workers spin briefly on a generation counter (decode launches many small
// parallel loops back to back), then yield the core for a while, then sleep on a condition variable.
#include "ember/runtime/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EMBER_PAUSE() _mm_pause()
#else
#define EMBER_PAUSE() std::this_thread::yield()
#endif

namespace ember {

int physical_core_count() {
  // Count distinct (physical id, core id) pairs; fall back to logical CPUs.
  std::ifstream f("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys = "0";
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "physical id") phys = val;
    if (key == "core id") cores.emplace(phys, val);
  }
  int logical = static_cast<int>(std::thread::hardware_concurrency());
  int n = cores.empty() ? logical : static_cast<int>(cores.size());
  return std::max(1, n);
}

int max_num_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int n = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, n);
}

namespace {

thread_local bool t_in_parallel = false;
thread_local void (*t_idle_fn)(void*) = nullptr;  // set_idle_work
thread_local void* t_idle_ctx = nullptr;
thread_local int t_thread_cap = 0;  // ThreadCap: 0 = none

// EMBER_PROFILE's synchronization totals (nanoseconds), see PoolProfile.
std::atomic<bool> g_profiling{false};
std::atomic<uint64_t> g_loops{0}, g_wait_ns{0}, g_busy_ns{0};

inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// How a worker waits for the next loop: PAUSE for kPauseSpins (~50 us on a Zen 4: the gaps
// between the loops of a step), then sched_yield for kYieldSpins (~4 ms: the gap between steps),
// then sleep. Yielding instead of pausing through the gap between steps gives the core to the
// threads that need it then (batched sessions sampling and queueing their next step, Python, the
// HTTP stream): 4 sessions generating in 4 threads on a 2-core Zen 4, +2.5 to +5.7% tok/s in 3
// alternating rounds; one session alone: unchanged within the noise.
constexpr int kPauseSpins = 2000;
constexpr int kYieldSpins = 8000;

// The pool's job between loops: never called (a worker runs a job's function only after claiming one
// of its chunks).
struct NoRange {
  void operator()(int64_t, int64_t) const {}
};
NoRange g_no_range;

class Pool {
 public:
  ~Pool() { stop_workers(); }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  int set_threads(int n) {
    std::lock_guard<std::mutex> call(call_mu_);
    stop_workers();
    threads_ = std::min(std::max(1, n), max_num_threads());
    {
      std::lock_guard<std::mutex> lk(error_mu_);
      error_ = Error::ok();
    }
    start_failed_ = false;
    ensure_workers();
    return threads();
  }

  Error error() const {
    std::lock_guard<std::mutex> lk(error_mu_);
    return error_;
  }

  // per_item: one chunk per item of [0, n) (parallel_tasks), else at most one per thread.
  void run(int64_t n, int64_t grain, RangeFn fn, bool per_item = false) {
    const int nt = t_thread_cap > 0 ? std::min(t_thread_cap, threads()) : threads();
    int64_t chunks = grain > 0 ? (n + grain - 1) / grain : n;
    // One chunk per item only where every worker may take part: below the pool's count, a cap
    // bounds the threads by bounding the chunks.
    chunks = per_item && nt == threads() ? n : std::min<int64_t>(chunks, nt);
    if (chunks <= 1 || nt <= 1 || t_in_parallel) {
      fn(0, n);
      return;
    }
    std::unique_lock<std::mutex> call(call_mu_, std::try_to_lock);
    if (!call.owns_lock()) {  // another thread is using the pool: run on this one
      fn(0, n);
      return;
    }
    ensure_workers();
    // Close the counter, publish the job, then open the counter (release): a worker that claims a
    // chunk (acquire) sees the job. The counter carries the job's chunk count with the index, so a
    // claim and the count it is checked against always come from one job: a worker still looping
    // from the last job, whose claim lands on the closed counter or on the last job's exhausted one,
    // fails; checked against a separate count it could have read the new job's larger one and run
    // a chunk twice (more threads than 2, consecutive loops of different chunk counts).
    next_.store(0, std::memory_order_relaxed);
    fn_ = fn;
    n_ = n;
    pending_.store(chunks, std::memory_order_relaxed);
    next_.store(static_cast<uint64_t>(chunks) << 32, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lk(mu_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    t_in_parallel = true;
    work();
    t_in_parallel = false;
    const bool profiling = g_profiling.load(std::memory_order_relaxed);
    const uint64_t waited_from = profiling ? now_ns() : 0;
    if (t_idle_fn != nullptr && pending_.load(std::memory_order_acquire) != 0) {
      void (*idle)(void*) = t_idle_fn;
      t_idle_fn = nullptr;
      idle(t_idle_ctx);
    }
    while (pending_.load(std::memory_order_acquire) != 0) EMBER_PAUSE();
    if (profiling) {
      g_wait_ns.fetch_add(now_ns() - waited_from, std::memory_order_relaxed);
      g_loops.fetch_add(1, std::memory_order_relaxed);
    }
  }

 private:
  void work() {
    for (;;) {
      const uint64_t claim = next_.fetch_add(1, std::memory_order_acq_rel);
      const int64_t c = static_cast<int64_t>(claim & 0xffffffffu), chunks = static_cast<int64_t>(claim >> 32);
      if (c >= chunks) return;
      // A valid claim: the job cannot finish (and be replaced) before this chunk is done.
      const int64_t b = n_ * c / chunks, e = n_ * (c + 1) / chunks;
      fn_(b, e);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void worker_loop() {
    t_in_parallel = true;
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      int spins = 0;
      while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
        ++spins;
        if (spins < kPauseSpins) {
          EMBER_PAUSE();
        } else if (spins < kPauseSpins + kYieldSpins) {
          sched_yield();
        } else {
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait(lk, [&] { return generation_.load() != seen || stop_.load(); });
        }
      }
      if (stop_.load()) return;
      seen = generation_.load(std::memory_order_acquire);
      if (g_profiling.load(std::memory_order_relaxed)) {
        const uint64_t t0 = now_ns();
        work();
        g_busy_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
      } else {
        work();
      }
    }
  }

  static void* worker_main(void* self) {
#ifdef __linux__
    pthread_setname_np(pthread_self(), "ember-kernel");  // what top -H and /proc/*/task/*/comm show
#endif
    static_cast<Pool*>(self)->worker_loop();
    return nullptr;
  }

  // Starts the missing workers (call_mu_ held). pthread_create reports failure as a code (no
  // exception, as std::thread would throw): the pool then runs with the workers it has, the
  // error is kept for thread_pool_error(), and no later call tries again.
  void ensure_workers() {
    const int want = threads() - 1;
    if (start_failed_ || static_cast<int>(workers_.size()) >= want) return;
    workers_.reserve(static_cast<size_t>(want));
    while (static_cast<int>(workers_.size()) < want) {
      pthread_t t;
      const int rc = pthread_create(&t, nullptr, &Pool::worker_main, this);
      if (rc != 0) {
        const int have = static_cast<int>(workers_.size()) + 1;
        Error e = Error::make(ErrorCode::kOutOfMemory,
                              "cannot start kernel worker thread %d of %d: %s; running with %d thread%s", have,
                              want + 1, std::strerror(rc), have, have == 1 ? "" : "s");
        std::fprintf(stderr, "ember: %s\n", e.message().c_str());
        {
          std::lock_guard<std::mutex> lk(error_mu_);
          error_ = std::move(e);
        }
        start_failed_ = true;
        threads_ = have;
        return;
      }
      workers_.push_back(t);
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (pthread_t t : workers_) pthread_join(t, nullptr);
    workers_.clear();
    stop_ = false;
  }

  std::atomic<int> threads_{std::min(physical_core_count(), max_num_threads())};
  std::mutex call_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<pthread_t> workers_;
  bool start_failed_ = false;  // guarded by call_mu_
  mutable std::mutex error_mu_;
  Error error_;
  // What the waiting workers read, one cache line: the job and the generation they spin on. The
  // job's RangeFn is copied here (two pointers) rather than pointed to on the caller's stack: a
  // worker then reaches the callable one cache miss sooner (each a trip to the caller's core). The
  // loop of two ~0.55 us chunks below: 1.21-1.45 us against 1.14-2.01 (mostly ~1.8) far apart (7
  // runs), 0.69-0.88 against 0.74-0.91 near; but there the caller's serial gap wrote its stack
  // beside the RangeFn. In a batched step (4 SmolLM2 sessions, steps alternating in blocks of 16):
  // far 0.986x-1.005x (6 runs), near 0.979x-0.997x (3 runs), within that harness's noise.
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  RangeFn fn_{g_no_range};
  int64_t n_ = 0;
  // The open job's (chunk count << 32) | next chunk index; count 0 (closed): every claim fails.
  // Failed claims per job are bounded by the thread count, far from carrying into the count.
  // Claims and completions each on a line of their own, apart from the line the workers spin on:
  // in one line, the caller publishing a job and claiming its chunk, and a worker finishing one,
  // traded that line with the spinning threads at each write. Two threads, loops of two ~0.55 us
  // chunks (a scratch program, 2-core Zen 5 VM): per loop 1.31-1.88 us (mean 1.60) against
  // 1.58-1.92 (mean 1.86) while its vCPUs were far apart (a line's round trip ~390 ns; 10 runs),
  // 0.76-0.88 us either way while near (~87 ns).
  alignas(64) std::atomic<uint64_t> next_{0};
  alignas(64) std::atomic<int64_t> pending_{0};
  char pad_[64 - sizeof(std::atomic<int64_t>)] = {};
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: workers may outlive static destructors
  return *p;
}

}  // namespace

void set_pool_profiling(bool on) { g_profiling.store(on, std::memory_order_relaxed); }

PoolProfile pool_profile() {
  PoolProfile p;
  p.loops = g_loops.load(std::memory_order_relaxed);
  p.caller_wait_s = 1e-9 * static_cast<double>(g_wait_ns.load(std::memory_order_relaxed));
  p.worker_busy_s = 1e-9 * static_cast<double>(g_busy_ns.load(std::memory_order_relaxed));
  return p;
}

int set_num_threads(int n) { return pool().set_threads(n); }
Error thread_pool_error() { return pool().error(); }
int get_num_threads() { return pool().threads(); }
ThreadCap::ThreadCap(int n) : previous_(t_thread_cap) { t_thread_cap = std::max(0, n); }
ThreadCap::~ThreadCap() { t_thread_cap = previous_; }
int ThreadCap::current() { return t_thread_cap; }

void set_idle_work(void (*fn)(void*), void* ctx) {
  t_idle_fn = fn;
  t_idle_ctx = ctx;
}

void parallel_for_impl(int64_t n, int64_t grain, RangeFn fn) {
  if (n <= 0) return;
  pool().run(n, grain, fn);
}

void parallel_tasks_impl(int64_t n, RangeFn fn) {
  if (n <= 0) return;
  pool().run(n, 1, fn, true);
}

}  // namespace ember
