// <immintrin.h> for the per-ISA kernel files, and EMBER_X86 (1 on x86 builds, else 0).
//
// The files compile for the baseline ISA: every function that uses wider instructions carries
// __attribute__((target("..."))) and is only reached through a table built for the CPU's level
// (ember/runtime/cpu.h).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 flags _mm512_undefined_* inside its own intrinsic headers as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define EMBER_X86 1
#else
#define EMBER_X86 0
#endif
