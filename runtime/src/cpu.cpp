// CPU feature detection and the kernel ISA level. See ember/runtime/cpu.h.
#include "ember/runtime/cpu.h"

#include <cstdlib>
#include <cstring>
#include <fstream>

#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define EMBER_CPU_X86 1
#else
#define EMBER_CPU_X86 0
#endif

namespace ember {
namespace {

#if EMBER_CPU_X86
// Linux hands AMX's tile data (8 KiB per thread) only to processes that ask for it; the first
// tile instruction of a process that did not ask faults. Asked once, for the whole process.
bool request_amx_state() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// XCR0: which register states the OS saves (AVX needs bits 1-2, AVX-512 bits 5-7, AMX 17-18).
uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);  // the 12 characters come in EBX, EDX, ECX
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    if (std::strcmp(vendor, "GenuineIntel") == 0) f.vendor = CpuVendor::kIntel;
    else if (std::strcmp(vendor, "AuthenticAMD") == 0) f.vendor = CpuVendor::kAmd;
  }
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const int base_family = static_cast<int>((a >> 8) & 0xF);
  f.family = base_family == 0xF ? base_family + static_cast<int>((a >> 20) & 0xFF) : base_family;
  const bool osxsave = (c >> 27) & 1;
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool avx_state = (xcr0 & 0x6) == 0x6;
  const bool avx512_state = (xcr0 & 0xE6) == 0xE6;
  const bool amx_state = (xcr0 & 0x60000) == 0x60000;
  f.fma = avx_state && ((c >> 12) & 1);
  f.f16c = avx_state && ((c >> 29) & 1);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = avx_state && ((b >> 5) & 1);
    f.avx512f = avx512_state && ((b >> 16) & 1);
    f.avx512bw = avx512_state && ((b >> 30) & 1);
    f.avx512vl = avx512_state && ((b >> 31) & 1);
    f.avx512vnni = avx512_state && ((c >> 11) & 1);
    f.avx512vbmi = avx512_state && ((c >> 1) & 1);
    f.amx_tile = amx_state && ((d >> 24) & 1);
    f.amx_int8 = amx_state && ((d >> 25) & 1);
    if (f.amx_tile && !request_amx_state()) f.amx_tile = f.amx_int8 = false;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = avx_state && ((a >> 4) & 1);
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

// The AMX kernels need GCC >= 11 or clang >= 12 (their target attributes); other builds stop at
// avx512vnni. The same test guards backends/cpu/runtime/qkernels_amx.cpp.
#if EMBER_CPU_X86 && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
constexpr bool kAmxBuilt = true;
#else
constexpr bool kAmxBuilt = false;
#endif

KernelIsa best_of(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma && f.avx512vnni) {
    return kAmxBuilt && f.amx_tile && f.amx_int8 ? KernelIsa::kAmx : KernelIsa::kAvx512Vnni;
  }
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) return KernelIsa::kAvx512;
  if (f.avx2 && f.fma) return KernelIsa::kAvx2;
  return KernelIsa::kPortable;
}

struct IsaChoice {
  KernelIsa isa = KernelIsa::kPortable;
  Error error;
};

IsaChoice choose() {
  IsaChoice choice;
  const KernelIsa best = best_kernel_isa();
  choice.isa = best;
  const char* env = std::getenv("EMBER_KERNEL_ISA");
  if (env == nullptr || *env == '\0') return choice;
  const KernelIsa levels[] = {KernelIsa::kPortable, KernelIsa::kAvx2, KernelIsa::kAvx512, KernelIsa::kAvx512Vnni,
                              KernelIsa::kAmx};
  std::string usable;
  for (KernelIsa level : levels) {
    if (static_cast<int>(level) <= static_cast<int>(best)) usable += std::string(usable.empty() ? "" : ", ") + kernel_isa_name(level);
  }
  for (KernelIsa level : levels) {
    if (std::strcmp(env, kernel_isa_name(level)) != 0) continue;
    if (static_cast<int>(level) > static_cast<int>(best)) {
      choice.error = Error::make(ErrorCode::kInvalidArgument,
                                 "EMBER_KERNEL_ISA=%s asks for kernels this CPU cannot run (it supports up to %s); "
                                 "set it to one of: %s, or unset it",
                                 env, kernel_isa_name(best), usable.c_str());
      return choice;
    }
    choice.isa = level;
    return choice;
  }
  choice.error = Error::make(ErrorCode::kInvalidArgument,
                             "EMBER_KERNEL_ISA=%s is not a kernel level; on this CPU use one of: %s, or unset it", env,
                             usable.c_str());
  return choice;
}

const IsaChoice& isa_choice() {
  static const IsaChoice choice = choose();
  return choice;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const char* cpu_vendor_name(CpuVendor vendor) {
  switch (vendor) {
    case CpuVendor::kIntel: return "intel";
    case CpuVendor::kAmd: return "amd";
    case CpuVendor::kOther: break;
  }
  return "other";
}

const std::string& cpu_model_name() {
  static const std::string name = [] {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("model name", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      const size_t start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? std::string() : line.substr(start);
    }
    return std::string();
  }();
  return name;
}

const char* kernel_isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAmx: return "amx";
    case KernelIsa::kAvx512Vnni: return "avx512vnni";
    case KernelIsa::kAvx512: return "avx512";
    case KernelIsa::kAvx2: return "avx2";
    default: return "portable";
  }
}

KernelIsa best_kernel_isa() { return best_of(cpu_features()); }

KernelIsa kernel_isa() { return isa_choice().isa; }

const Error& kernel_isa_error() { return isa_choice().error; }

}  // namespace ember
