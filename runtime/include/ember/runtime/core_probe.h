// How far apart two CPUs are: the time a cache line takes to go from one to the other and back.
//
// On a shared VM the hypervisor places the vCPUs where it likes and moves them: the same 2-vCPU
// machine measured ~90 ns at some minutes (the vCPUs near each other, sharing a last-level cache)
// and ~375 ns at others, and a batched decode step, whose threads hand cache lines to each other
// hundreds of times per step, ran ~15-25% slower in the second state. Benchmarks report this
// probe beside their figures (evals/machine_state.py) so that runs taken in different states are
// not compared as if they were one.
//
// Thread safety: safe from any thread; it pins the calling thread to cpu_a for the measurement
// and restores the thread's affinity before returning.
#pragma once

#include "ember/runtime/error.h"

namespace ember {

// Two threads, one pinned to cpu_a (the calling thread) and one to cpu_b (started here), hand
// one cache line back and forth up to `trips` times per batch; *ns receives the mean time of a
// round trip, in nanoseconds (the best of three batches; a batch ends early after ~30 ms, so a busy
// machine bounds the probe's time rather than its trips). Errors (nothing written to *ns):
// kInvalidArgument when a CPU is outside [0, 1024) or not one this process may run on, when
// cpu_a == cpu_b, or when trips is outside [1, 10,000,000]; kNotSupported off Linux;
// kOutOfMemory when the second thread cannot be started; kIO when one round trip takes longer
// than 1 s (the OS does not run the second thread on cpu_b).
Error core_round_trip_ns(int cpu_a, int cpu_b, int trips, double* ns);

}  // namespace ember
