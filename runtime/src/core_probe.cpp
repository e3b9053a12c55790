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

using Clock = std::chrono::steady_clock;

// A batch stops early past this (a busy machine: each hand-off may wait for the partner's CPU), and
// the probe gives up when one hand-off takes longer than kGiveUp.
constexpr auto kBatchBudget = std::chrono::milliseconds(30);
constexpr auto kGiveUp = std::chrono::seconds(1);

struct alignas(64) PingPong {
  std::atomic<int64_t> turn{0};  // odd: the partner's move, even: the caller's; negative: stop
  int cpu = 0;
};

void* partner_main(void* arg) {
  PingPong& p = *static_cast<PingPong*>(arg);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(p.cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // the caller checked that it may
  for (;;) {
    int64_t t;
    while ((t = p.turn.load(std::memory_order_acquire)) >= 0 && (t & 1) == 0) {
    }
    if (t < 0) return nullptr;
    p.turn.store(t + 1, std::memory_order_release);
  }
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
  pthread_t partner;
  if (pthread_create(&partner, nullptr, &partner_main, &p) != 0) {
    return Error::make(ErrorCode::kOutOfMemory, "core_round_trip_ns: cannot start the second thread");
  }
  cpu_set_t mine;
  CPU_ZERO(&mine);
  CPU_SET(cpu_a, &mine);
  pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
  double best = -1;
  bool gave_up = false;
  int64_t turn = 0;
  for (int batch = 0; batch < 3 && !gave_up; ++batch) {
    const Clock::time_point t0 = Clock::now();
    int done = 0;
    while (done < trips) {
      p.turn.store(turn + 1, std::memory_order_release);
      for (int spins = 0; p.turn.load(std::memory_order_acquire) != turn + 2; ++spins) {
        // From the batch's start: a batch ends after kBatchBudget, so past kGiveUp one trip is stuck.
        if ((spins & 0xffff) == 0xffff && Clock::now() - t0 > kGiveUp) {
          gave_up = true;
          break;
        }
      }
      if (gave_up) break;
      turn += 2;
      ++done;
      if ((done & 63) == 0 && Clock::now() - t0 > kBatchBudget) break;
    }
    if (done > 0 && !gave_up) {
      const double t = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / done;
      best = best < 0 ? t : std::min(best, t);
    }
  }
  p.turn.store(-1, std::memory_order_release);
  pthread_join(partner, nullptr);
  pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  if (gave_up) {
    return Error::make(ErrorCode::kIO,
                       "core_round_trip_ns: CPU %d did not answer within 1 s (is it kept busy by other work?)",
                       cpu_b);
  }
  *ns = best;
  return Error::ok();
}
#else
Error core_round_trip_ns(int, int, int, double*) {
  return Error::make(ErrorCode::kNotSupported, "core_round_trip_ns: pinning threads is implemented on Linux only");
}
#endif

}  // namespace ember
