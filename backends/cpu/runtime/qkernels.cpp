// The CPU delegate's kernel table for the chosen ISA level (qkernels.h).
#include "qkernels.h"

namespace ember {
namespace cpu {

const BlockKernels& block_kernels() {
  static const BlockKernels table = [] {
    BlockKernels t;
    const int level = static_cast<int>(kernel_isa());
    add_portable_block_kernels(t);
    if (level >= static_cast<int>(KernelIsa::kAvx2)) add_avx2_block_kernels(t);
    if (level >= static_cast<int>(KernelIsa::kAvx512)) add_avx512_block_kernels(t);
    if (level >= static_cast<int>(KernelIsa::kAvx512Vnni)) add_avx512vnni_block_kernels(t);
    if (level >= static_cast<int>(KernelIsa::kAmx)) add_amx_block_kernels(t);
    t.prefetch_every_block = cpu_features().vendor == CpuVendor::kIntel;  // measured: see BlockKernels
    return t;
  }();
  return table;
}

}  // namespace cpu
}  // namespace ember
