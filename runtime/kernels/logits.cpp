// ember/runtime/logits.h over the f32 kernel table.
#include "ember/runtime/logits.h"

#include "f32_kernels.h"

namespace ember {

int64_t argmax_f32(const float* x, int64_t n) { return n > 0 ? kern::f32_kernels().argmax.fn(x, n) : -1; }

float exp_weights_f32(float* s, int64_t n, float scale) {
  float m = 0.0f;
  if (n > 0) kern::f32_kernels().softmax.fn(s, n, scale, &m);
  return m;
}

}  // namespace ember
