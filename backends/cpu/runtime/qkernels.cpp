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
    const CpuFeatures& f = cpu_features();  // measured: see BlockKernels::prefetch_every_block
    t.prefetch_every_block = f.vendor == CpuVendor::kIntel || (f.vendor == CpuVendor::kAmd && f.family >= 0x1A);
    return t;
  }();
  return table;
}

}  // namespace cpu
}  // namespace ember
