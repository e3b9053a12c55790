// Routines over a row of logits, for the runners' samplers: they run from the kernel tables at
// the level of ember::kernel_isa(), as every kernel does (ember.runtime.cpu_info() lists them,
// e.g. "f32.argmax"; EMBER_KERNEL_ISA forces a lower level), and give the same result on every
// level.
#pragma once

#include <cstdint>

namespace ember {

// The first index of the largest value of x[0..n) (ties: the lowest index; NaN is never chosen),
// or -1 when no value is above -inf (and for n <= 0). x: n floats, only read. Thread-safe; no
// allocation.
int64_t argmax_f32(const float* x, int64_t n);

// Softmax numerators in place: s[i] = exp(s[i] * scale - m), m = max_i(s[i] * scale), for
// s[0..n) without NaN (-inf gives 0; at least one value above -inf) and scale > 0 finite; the top
// value gives exactly 1. Returns m. The exp is the kernels' (within 2 ulp of std::exp above
// -87.3, 0 below). Thread-safe; no allocation.
float exp_weights_f32(float* s, int64_t n, float scale);

}  // namespace ember
