// core_round_trip_ns: two pinned threads ping-pong one cache line (see core_probe.h).
#include "ember/runtime/core_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

namespace ember {

#ifdef __linux__
namespace {

struct alignas(64) PingPong {
  std::atomic<int64_t> turn{0};  // odd: the partner's move, even: the caller's
  int cpu = 0;
  int64_t moves = 0;  // the partner's moves per batch
  int batches = 0;
};

void* partner_main(void* arg) {
  PingPong& p = *static_cast<PingPong*>(arg);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(p.cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // checked by the caller's allowed set
  int64_t expect = 1;
  for (int b = 0; b < p.batches; ++b) {
    for (int64_t i = 0; i < p.moves; ++i, expect += 2) {
      while (p.turn.load(std::memory_order_acquire) != expect) {
      }
      p.turn.store(expect + 1, std::memory_order_release);
    }
  }
  return nullptr;
}

}  // namespace

Error core_round_trip_ns(int cpu_a, int cpu_b, int trips, double* ns) {
  EMBER_CHECK_ARG(cpu_a >= 0 && cpu_a < CPU_SETSIZE && cpu_b >= 0 && cpu_b < CPU_SETSIZE,
                  "core_round_trip_ns: CPUs %d and %d must be in [0, %d)", cpu_a, cpu_b, CPU_SETSIZE);
  EMBER_CHECK_ARG(cpu_a != cpu_b, "core_round_trip_ns: the two CPUs must differ, got %d twice", cpu_a);
  EMBER_CHECK_ARG(trips >= 1 && trips <= 10000000, "core_round_trip_ns: trips=%d must be in [1, 10000000]", trips);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  EMBER_CHECK_ARG(sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_ISSET(cpu_a, &allowed) &&
                      CPU_ISSET(cpu_b, &allowed),
                  "core_round_trip_ns: CPUs %d and %d are not both among the CPUs this process may run on "
                  "(see os.sched_getaffinity(0))", cpu_a, cpu_b);
  cpu_set_t saved;
  CPU_ZERO(&saved);
  pthread_getaffinity_np(pthread_self(), sizeof saved, &saved);
  PingPong p;
  p.cpu = cpu_b;
  p.moves = trips;
  p.batches = 3;
  pthread_t partner;
  if (pthread_create(&partner, nullptr, &partner_main, &p) != 0) {
    return Error::make(ErrorCode::kOutOfMemory, "core_round_trip_ns: cannot start the second thread");
  }
  cpu_set_t mine;
  CPU_ZERO(&mine);
  CPU_SET(cpu_a, &mine);
  pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
  double best = 0;
  int64_t turn = 0;
  for (int b = 0; b < p.batches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < trips; ++i, turn += 2) {
      p.turn.store(turn + 1, std::memory_order_release);
      while (p.turn.load(std::memory_order_acquire) != turn + 2) {
      }
    }
    const double t = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / trips;
    best = b == 0 ? t : std::min(best, t);
  }
  pthread_join(partner, nullptr);
  pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  *ns = best;
  return Error::ok();
}
#else
Error core_round_trip_ns(int, int, int, double*) {
  return Error::make(ErrorCode::kNotSupported, "core_round_trip_ns: pinning threads is implemented on Linux only");
}
#endif

}  // namespace ember
