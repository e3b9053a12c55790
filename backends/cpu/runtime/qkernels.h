// Micro-kernels of the CPU delegate: one block of 16 packed weight rows (packed_weight.h)
// against up to kMaxM activation rows, from a table per ISA level chosen once for
// ember::kernel_isa() (portable C++, AVX2, AVX-512, AVX-512 VNNI, AMX).
//
// Both kinds compute, for every activation row m and block row r (u: the stored codes; s, c: the
// block's coefficients, c = m - s * ze, from a Coeffs):
//   out[m][r] = sum_g ( s[g][r] * P[m][g][r] + c[g][r] * A[m][g] )
// int kernels:   P = sum_{k in g} u[r][k] * q[m][k], summed exactly in int32 (q: int8 codes),
//                times ascale[m][g] when ascale is given (per-group activation scales: then the
//                activations are q * ascale), A = asum[m][g] (the sum of the group's activations
//                in the same units as P);
// float kernels: P = sum_{k in g} u[r][k] * x[m][k] in fp32 (x: fp32 activations),
//                A = asum[m][g] = sum_{k in g} x[m][k].
// That is sum_k act[m][k] * w[r][k] with w = u * s + c. Every SIMD level applies the per-group
// step as two FMAs in the same order, so the int kernels give bit-identical results on every
// SIMD level. Where folds_zero_point holds (symmetric weights, per-token int8 activations) the
// int kernels take it as one: out[m][r] += s * (P - ze * A), P - ze * A an exact integer.
//
// Arguments: codes = the block's code words (per group: [words_per_group][16] x 4 bytes, groups
// co.group_bytes apart), G and words_per_group from the PackedWeight, co = the block's
// coefficients, act = activations [MB][lda] (int8 or fp32), asum = [MB][G] fp32, ascale = [MB][G]
// fp32 or null (int kernels), out = [MB][16] fp32.
#pragma once

#include <cstdint>

#include "ember/runtime/cpu.h"

namespace ember {
namespace cpu {

constexpr int kMaxM = 4;  // activation rows sharing one pass over a weight block
constexpr int kRowTile = 16;  // activation rows of the int4_rows16 kernels (AMX tiles)

// Asks for the cache line at p into L2 (prefetcht2). An asm statement on x86: GCC 12 compiled
// Coeffs::prefetch_word's __builtin_prefetch loop, inlined into the kernels, to nothing.
inline void prefetch_l2(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("prefetcht2 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, 1);
#endif
}

// Asks for the cache line at p in a state this core may write (PREFETCHW; a NOP on x86 CPUs
// without it), so that a store to it later does not wait for another core to give it up.
inline void prefetch_for_write(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

// One block's coefficients, read by the kernels group by group: s = scale[g][r] and
// c = m - s * ze, with m = offset[g][r] (or m_const when offset is null). The packed scales and
// offsets are read in place when the format allows (fp32 or fp16 scales, a constant zero point,
// offsets of the scale's type); otherwise block_coeffs precomputes s and c in fp32 and this
// holds them with ze = 0.
// Group g's code words start at codes + g * group_bytes (the word j at + j * 64), and its 16 rows'
// scales (offsets) at scale + g * param_stride (offset + g * param_stride) elements: the layouts of
// packed_weight.h, where a group's coefficients follow its codes (interleaved) or all codes come
// first, and the [G][16] arrays block_coeffs fills (param_stride 16).
struct Coeffs {
  const void* scale = nullptr;   // [G] x 16, param_stride apart, fp32 or (half) fp16
  const void* offset = nullptr;  // the same in the scale's type, or null
  bool half = false;
  float m_const = 0.0f;
  float ze = 0.0f;
  int64_t group_bytes = 0;
  int64_t param_stride = 16;
  // The block its caller runs next (next_bytes long), or null: each kernel asks for it into L2
  // (prefetcht2) a share at a time as it walks its words (prefetch_word), so the reads stay in
  // flight while the block computes instead of stalling the core on a burst of requests.
  const uint8_t* next_block = nullptr;
  int64_t next_bytes = 0;
  // Where the caller folds the zero point into the integer sums (see BlockKernels::int4_zinit), or
  // null: row m's -ze * A of group g at zinit[m * G + g] (exact integers), where the kernels start
  // that group's int32 sums; the group step is then acc = fma(s, P, acc), the bits of
  // folds_zero_point's step.
  const int32_t* zinit = nullptr;

  // A share per group of up to kShareWords words (groups of 32: 4 words at 4 bits, 8 at 8), and
  // per kShareWords words of longer groups. Per-channel weights are one group of K / 8 or K / 4
  // words: a share per group was a burst again. Steps alternating in one process on a 2-core Intel
  // Xeon VM, against a share per group: SmolLM2 8da4w (its tied lm_head is 8-bit per channel)
  // decode -10.6%, 4 sessions batched -7.5% (avx2: -5.6%, -4.8%); `q8` (8-bit per-channel
  // linears) -20.8%; `--qlinear 8da8w --qlinear-group-size 0` -10.4%; groups of 32 (`gguf`) unchanged.
  static constexpr int64_t kShareWords = 8;

  const uint8_t* group_codes(const uint8_t* codes, int64_t g) const { return codes + g * group_bytes; }
  // Share i (of n) of next_block's cache lines, from where share i - 1's ended.
  void prefetch_share(int64_t i, int64_t n) const {
    if (next_block == nullptr) return;
    const int64_t end = i + 1 == n ? next_bytes : (next_bytes * (i + 1) / n) & ~int64_t{63};
    for (int64_t off = (next_bytes * i / n) & ~int64_t{63}; off < end; off += 64)
      prefetch_l2(next_block + off);
  }
  // Called by a kernel as it starts group g (G groups of wpg words), in part h of the `parts`
  // passes it makes over the block (the AVX2 kernels run it in two 8-row halves), and at every
  // later word j of the group (prefetch_word): the share of the kShareWords words that start
  // there, if they start there. Groups of 32 (wpg <= kShareWords) take theirs at the start only,
  // where the word loops, with their length fixed at compile time, unroll as without it (with the
  // call in the loop at every word, a 128-token prefill ran 6% slower).
  void prefetch_group(int64_t g, int64_t G, int64_t wpg, int64_t h = 0, int64_t parts = 1) const {
    if (next_block == nullptr) return;
    const int64_t chunks = (wpg + kShareWords - 1) / kShareWords;
    prefetch_share((h * G + g) * chunks, parts * G * chunks);
  }
  void prefetch_word(int64_t g, int64_t j, int64_t G, int64_t wpg, int64_t h = 0, int64_t parts = 1) const {
    if (next_block == nullptr || j == 0 || (j & (kShareWords - 1)) != 0) return;
    const int64_t chunks = (wpg + kShareWords - 1) / kShareWords;
    prefetch_share((h * G + g) * chunks + j / kShareWords, parts * G * chunks);
  }
};

// Whether an int kernel's group step folds the weights' zero point into the integer sum: symmetric
// weights (no offset, m = 0) under per-token activations (ascale null, so A = asum is the group's
// integer code sum). The step is then acc = fma(s, P - ze * A, acc): P and ze * A are integers,
// exact in fp32 below 2^24, so one FMA where the general step takes two (and the product is
// rounded once). Every level takes the same path, so the SIMD levels stay bit-identical. On a
// Zen 4 the FMAs share their pipes with VPDPBUSD: 4-bit x int8 blocks of 4 rows, 175 -> 187-193
// MAC/ns in a standalone loop.
inline bool folds_zero_point(const Coeffs& co, const float* ascale) {
  return ascale == nullptr && co.offset == nullptr && co.m_const == 0.0f;
}

// The integer sums a group starts from: -ze * A where the caller passes Coeffs::zinit, else 0.
// Starting there, P - ze * A comes out of the same exact integers (4-bit codes in groups of up to
// kMaxZinitGroup values: |P| and |ze * A| stay within 2^24, where every integer is an fp32 value)
// without the step's multiply, broadcast and subtraction per row and block.
constexpr int64_t kMaxZinitGroup = 8192;

using IntBlockFn = void (*)(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const int8_t* q,
                            int64_t lda, const float* asum, const float* ascale, float* out);
using FloatBlockFn = void (*)(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const float* x,
                              int64_t lda, const float* asum, float* out);

// One block's 16 rows dequantized for prefill's GEMM path: out[k * ldo + r] = u[r][k] * s + c
// (k < G * gs, r < 16; s, c of the row's group, fp32), the weights the float kernels multiply by.
using DequantBlockFn = void (*)(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, float* out, int64_t ldo);

// Two consecutive blocks at once (4-bit codes, int kernels, MB >= 2 rows): codes1 and co1 the
// second block's; out = [MB][32] (row m: the first block's 16 results, then the second's). Equal
// to IntBlockFn on each block, bit for bit; one pass broadcasts each activation word for both.
using IntPairFn = void (*)(const uint8_t* codes0, const uint8_t* codes1, int64_t G, int64_t wpg, const Coeffs& co0,
                           const Coeffs& co1, const int8_t* q, int64_t lda, const float* asum, const float* ascale,
                           float* out);

// Four consecutive blocks (64 weight rows) at once, 4-bit codes in groups of 32 (words_per_group
// 4), against MB rows: each activation word is broadcast once for the four blocks, where a single
// block broadcasts it for one. For blocks already in cache (the rows after a linear's first tile):
// the four interleaved streams defeat prefetching from DRAM. codes[i], co[i]: block i's (co[0].zinit
// starts every block's sums; next_block is not read); q, lda, asum, ascale as for IntBlockFn.
// out = [MB][64]: row m's 16 results of block 0, then block 1's, 2's and 3's. Equal to IntBlockFn on
// each block, bit for bit.
using IntQuadFn = void (*)(const uint8_t* const* codes, int64_t G, const Coeffs* co, const int8_t* q, int64_t lda,
                           const float* asum, const float* ascale, float* out);

// 4-bit weights x int8 activations for MB = 1..4 rows (decode, a tile of a batched decode step or of a
// prefill) over pre-broadcast activations: expand_int4 writes, for every 8-activation word w of
// q [MB][lda] and row m < MB, 64 bytes at qb + (w * MB + m) * 64: the word's activations 0-3
// repeated 8 times, then 4-7 repeated 8 times (qb: MB * K * 8 bytes). The kernel then loads them
// where int4 broadcasts them once per block and row; its results equal int4[MB - 1]'s bit for bit.
using ExpandInt4Fn = void (*)(const int8_t* q, int64_t lda, int MB, int64_t K, int8_t* qb);
using Int4ExpandedFn = void (*)(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, const int8_t* qb,
                                const float* asum, const float* ascale, float* out);

// Activation quantizers, one row of K values at a time (act_quant.h holds the scalar math; every
// level gives exactly its codes). Per token (torchao's asymmetric scheme): codes q[K], group sums
// asum[G] of the codes, the row's scale and zero point (scale NaN, codes 0 for a row holding a
// NaN or an infinity). Per group (symmetric, gs values): codes q[K], scales d[G] and
// asum[g] = d[g] * sum of the group's codes (d NaN for a group holding a NaN or an infinity).
using TokenQuantFn = void (*)(const float* x, int64_t K, int64_t gs, int8_t* q, float* asum, float* scale, float* zp);
using GroupQuantFn = void (*)(const float* x, int64_t K, int64_t gs, int8_t* q, float* d, float* asum);

// Entry [MB - 1] handles MB activation rows. Each family records the level it runs at.
struct BlockKernels {
  KernelIsa int_isa = KernelIsa::kPortable;
  KernelIsa float_isa = KernelIsa::kPortable;
  KernelIsa quant_isa = KernelIsa::kPortable;
  KernelIsa dequant_isa = KernelIsa::kPortable;
  TokenQuantFn quantize_token = nullptr;
  GroupQuantFn quantize_groups = nullptr;
  IntBlockFn int4[kMaxM] = {};
  IntBlockFn int8[kMaxM] = {};
  IntPairFn int4_pair[kMaxM] = {};  // [MB - 1] for MB >= 2, where a level has them ([0] stays null)
  IntQuadFn int4_quad[kMaxM] = {};  // [MB - 1], where a level has them (cpu_backend.cpp: where they run)
  // The fewest rows of a linear call that run int4_pair (fewer: int4, one block at a time). On a
  // 2-core Zen 5 VM (SmolLM2 `8da4w-kv8`, forwards alternating in one process, 8 prefills or 32 steps
  // at a time), single blocks against pairs: prefills of 5-16 tokens -12% to -5%, 20-32 within 1%, 40
  // and 48 +3%, 64 and 128 +4% and +6%; batched steps (positions 30-61, four runs) of 4 sessions -2.5%
  // to -3.7% in three and +0.2% in one, of 2 sessions -2.0% to -4.7%, of 3 -4.3% to +2.6%. Set by the
  // level (add_avx512vnni_block_kernels).
  int64_t pair_min_rows = 2;
  // Whether int4, int4_pair and int4_expanded start each group's sums at Coeffs::zinit when the
  // caller sets it (folded zero points: symmetric 4-bit weights under per-token activations), from
  // the AVX2 level up (the portable kernels do not). At AVX-512 VNNI the group step was a fifth of a
  // 4-row pair's time with the weights in L2. SmolLM2
  // `8da4w-kv8` on a 2-core Zen 5 VM, linear calls alternating with it off in blocks of 16 steps of
  // one process: 4 sessions batched, the 4-row linears -2.2% to -3.0% and the step -2.2% to -2.4%
  // in three runs, 0% in a fourth (the linears wait on memory too); the linears of a 16- and a
  // 64-token prefill -7% to -9% and -9% to -11%. Held to AVX2: 4 rows -4.7% (step -3.3%), prefill
  // -7.7% and -8.7%; AVX-512 without VNNI: -0.8%, prefill -2.9%. One row (decode): +0.7% to +2.3%
  // in four of five runs, within noise, so the caller folds it over several rows only. The gate/up
  // linear with its weights in L2 (VNNI): one row -6%, 4 rows -10% to -13%.
  bool int4_zinit = false;
  ExpandInt4Fn expand_int4 = nullptr;        // with int4_expanded; null where a level has none
  Int4ExpandedFn int4_expanded[kMaxM] = {};  // [MB - 1]
  FloatBlockFn float4[kMaxM] = {};
  FloatBlockFn float8[kMaxM] = {};
  DequantBlockFn dequant4 = nullptr;
  DequantBlockFn dequant8 = nullptr;
  // 4-bit weights x int8 activations, kRowTile rows at once, where a level has them (AMX):
  // unpack_int4_tiles lays a block's codes out as tile rows (G * words_per_group * 128 bytes, 64-byte
  // aligned; groups of whole 32-value chunks: words_per_group % 4 == 0), once for all the row tiles
  // that meet the block; int4_rows16 then takes that layout where an IntBlockFn takes the codes (16
  // rows, out [16][16]). Equal to int4[kMaxM - 1] on each 4 rows, bit for bit. A thread calls
  // tiles_begin() before a run of int4_rows16 calls, with no other code using the tile unit in
  // between, and tiles_end() after.
  KernelIsa row_tile_isa = KernelIsa::kPortable;
  void (*unpack_int4_tiles)(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, uint8_t* tiles) = nullptr;
  IntBlockFn int4_rows16 = nullptr;
  void (*tiles_begin)() = nullptr;
  void (*tiles_end)() = nullptr;
  // Linears ask for the next block of their range into L2 while the current one computes (Coeffs::
  // next_block, in shares as the kernels walk the block), where that was measured to pay (a tuning
  // choice, never a change of results):
  // prefetch_next_block: single rows over 4-bit weights in the earlier, non-interleaved layout
  // (packed_weight.h), set by the level: on a Zen 4 (AVX-512) +7-35% decode (measured with the whole
  // next block asked for at once; spread as below since, not measured again there); on a Zen 3 (AVX2)
  // -9-13% (the hardware prefetcher alone keeps more reads in flight there); for 8-bit weights
  // -10-20% on the Zen 4, and interleaved blocks, one sequential stream, lost there too (26 against
  // 27-30 GB/s). Over several rows the Zen 3 stalled on the prefetches (half of a step outside the
  // kernels).
  // prefetch_every_block: every linear over every packed weight, set on Intel CPUs and on AMD from
  // Zen 5 (CPUID family 0x1A) on (block_kernels()); never measured on a Zen 3 or Zen 4, which keep
  // prefetch_next_block's choice above. On a 2-core AMD EPYC (Zen 5) VM, SmolLM2 `8da4w-kv8`, runs
  // alternating with it off: 4 sessions batched -22% per step (4.28-4.45 -> 3.34 ms; forced avx2:
  // 6.9-7.3 -> 4.75-4.85 ms), decode -7% per step (2.06-2.10 -> 1.91-1.94 ms; avx2 -8% to -15%),
  // decode at ~1,900 +9% tok/s, 128-token prefill no slower.
  // On a 2-core Intel Xeon VM (AVX-512 VNNI + AMX), SmolLM2 steps alternating in one process: the
  // whole next block asked for at once, one row only, against nothing: decode -12% to -20% at
  // avx512vnni, -20% at avx2, -18% with fp32 activations (`gguf`), -24% over 8-bit weights; then a
  // share per group against that: decode -8% more (avx512vnni), -11% (avx2), -20% (`gguf`), 4
  // sessions batched -21% (avx512vnni), -17% (avx2), -19% (`gguf-a8`), a 12-token prefill -12%,
  // 128-token prefill within 2% either way. A burst of a block's 80-220 requests stalls the core on
  // its fill buffers; spread over the block's groups they stay in flight while it computes (a
  // standalone loop over 64 MiB of 4-bit blocks, one thread, 4 rows: 7.5 GB/s without prefetch, 11.5
  // in bursts, 16.0 spread, 17.9 with the blocks in L2; one row: 19.9 in bursts, 23.4 spread). Why
  // the hardware prefetchers alone fall short there was not measured; Intel's L2 streamer stops at
  // each 4 KiB page.
  bool prefetch_next_block = false;
  bool prefetch_every_block = false;
};

// The table for kernel_isa(), built on first use (thread-safe).
const BlockKernels& block_kernels();

// Per-level fillers: each overwrites the entries it implements (qkernels_<level>.cpp).
void add_portable_block_kernels(BlockKernels& t);
void add_avx2_block_kernels(BlockKernels& t);
void add_avx512_block_kernels(BlockKernels& t);
void add_avx512vnni_block_kernels(BlockKernels& t);
void add_amx_block_kernels(BlockKernels& t);

}  // namespace cpu
}  // namespace ember
