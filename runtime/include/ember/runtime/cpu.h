// CPU features and the kernel ISA level, detected once per process.
//
// Kernels never test features themselves: each kernel family builds a table of function
// pointers for kernel_isa() the first time it runs (runtime/kernels/f32_kernels.h, the
// quantized row kernels), and reports which level each entry uses through kernel_paths(), which
// Python shows as `ember.runtime.cpu_info()` and `ember bench` prints.
//
// EMBER_KERNEL_ISA=portable|avx2|avx512|avx512vnni|amx forces a level for tests and comparisons. A level this CPU
// lacks, or an unknown name, is refused: kernel_isa_error() says why, and loading any program
// fails with that message (kernels then run at the best level, which nothing reaches).
//
// Thread safety: every function here is safe to call from any thread (function-local statics).
#pragma once

#include <string>
#include <vector>

#include "ember/runtime/error.h"

namespace ember {

// Who made the CPU (CPUID's vendor string): kernels tune a few memory-access choices by it (their
// tables say which), never their results.
enum class CpuVendor : int { kOther = 0, kIntel = 1, kAmd = 2 };

// What the CPU (and the OS, for AVX state) supports. All false (vendor kOther) on non-x86 builds.
struct CpuFeatures {
  CpuVendor vendor = CpuVendor::kOther;
  int family = 0;  // CPUID's display family (base + extended): 0x19 Zen 3/4, 0x1A Zen 5, 6 Intel Core/Xeon
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;  // VPDPBUSD on zmm/ymm
  bool avx512vbmi = false;  // VPERMB (Ice Lake, Zen 4; not Skylake-X or Cascade Lake)
  bool avxvnni = false;     // VPDPBUSD with the VEX encoding (Alder Lake, Zen 5)
  // AMX: the CPU has it, the OS saves its state (XCR0) and, on Linux, granted this process its
  // tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once at detection); false otherwise.
  bool amx_tile = false;
  bool amx_int8 = false;
};

// Levels in increasing order; each includes the previous ones.
enum class KernelIsa : int {
  kPortable = 0,  // plain C++ (any CPU)
  kAvx2 = 1,      // AVX2 + FMA (+ F16C)
  kAvx512 = 2,    // AVX-512 F/BW/VL + FMA
  kAvx512Vnni = 3,  // kAvx512 + AVX512-VNNI (VPDPBUSD: int8 dot products)
  kAmx = 4,         // kAvx512Vnni + AMX-TILE/AMX-INT8 (tile dot products; builds whose compiler has them)
};

const CpuFeatures& cpu_features();
// "intel" / "amd" / "other".
const char* cpu_vendor_name(CpuVendor vendor);
// The CPU's model name ("AMD EPYC 7B13", ...), or "" when unknown.
const std::string& cpu_model_name();
// "portable" / "avx2" / "avx512" / "avx512vnni" / "amx".
const char* kernel_isa_name(KernelIsa isa);
// The highest level this CPU supports.
KernelIsa best_kernel_isa();
// The level kernels use: EMBER_KERNEL_ISA when set and valid, else best_kernel_isa().
KernelIsa kernel_isa();
// Error::ok() when EMBER_KERNEL_ISA is unset or names a level this CPU has; otherwise a
// kInvalidArgument error naming the value, what the CPU lacks and the levels that would work.
const Error& kernel_isa_error();

// One kernel family's entry and the level it runs at (an AVX-512 CPU may run some entries on
// their AVX2 version when no wider one exists).
struct KernelPath {
  std::string family;  // e.g. "f32.gemv", "q.linear_int8"
  std::string isa;     // kernel_isa_name() of the version in use
};
// Every kernel table's entries and their levels (builds the tables on first use). Defined next
// to the kernels (runtime/kernels/kernel_paths.cpp), which list their tables explicitly.
std::vector<KernelPath> kernel_paths();

}  // namespace ember
