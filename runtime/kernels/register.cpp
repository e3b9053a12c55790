// Registers every portable kernel. Each file owns its op names; this only calls them.
#include "kernel_utils.h"

namespace ember {

void register_portable_kernels(KernelRegistry& r) {
  register_binary_kernels(r);
  register_unary_kernels(r);
  register_compare_kernels(r);
  register_reduce_kernels(r);
  register_softmax_kernels(r);
  register_norm_kernels(r);
  register_linear_kernels(r);
  register_attention_kernels(r);
  register_shape_kernels(r);
  register_index_kernels(r);
  register_factory_kernels(r);
  register_convert_kernels(r);
  register_sym_kernels(r);
  register_fused_kernels(r);
  register_quantized_kernels(r);
  register_kv_quant_kernels(r);
}

}  // namespace ember
