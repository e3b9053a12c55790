// ember/runtime/logits.h over the f32 kernel table.
#include "ember/runtime/logits.h"

#include "f32_kernels.h"

namespace ember {

int64_t argmax_f32(const float* x, int64_t n) { return n > 0 ? kern::f32_kernels().argmax.fn(x, n) : -1; }

}  // namespace ember
