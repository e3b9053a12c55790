// AMX kernels of the CPU delegate (see qkernels.h): 4-bit weights x int8 activations over tiles of
// 16 activation rows (prefill), on the tile unit's TDPBSUD. A block's code words are already the
// B tile's layout (per 32-bit lane: one weight row's 4 consecutive codes), so each 32-value chunk of
// a group is its 4 words with the nibbles split (low nibbles: activations 0-3 of each word, high:
// 4-7) into 8 tile rows; the activations load as the A tile straight from their rows. The group's
// exact int32 sums then take the same per-group step as every other level (int_group_step512's
// arithmetic, row by row), so the results equal int4[3]'s on each 4 rows, bit for bit.
//
// Against the AVX-512 VNNI kernels (4 rows per pass, each code word broadcast-multiplied once per
// row), blocks in L1 on a 2-core Intel Xeon VM (AMX-INT8): 16 rows of a K = 576 block 1,120-1,160 ns
// against 3,410-3,630 for 4 VNNI passes (3.0-3.2x); in SmolLM2 8da4w, 128-token prefill -19% (its
// activations and per-group steps bound the kernel there). At 4 rows the tiles' fixed costs
// (unpacking to memory, loading and storing tiles) left them at 0.8-1.3x VNNI, so decode and batched
// steps keep the VNNI kernels.
#include "qkernels.h"

#include "qkernels_simd.h"

#if EMBER_X86 && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define EMBER_AMX_KERNELS 1
#else
#define EMBER_AMX_KERNELS 0
#endif

namespace ember {
namespace cpu {
#if EMBER_AMX_KERNELS
namespace {

#define EMBER_AMX __attribute__((target("avx512f,avx512bw,avx512vl,fma,amx-tile,amx-int8")))

// The tile instructions, the tile's number a template argument (%c: printed as a bare number). The
// statements are volatile (they keep their order); the store names the bytes it writes, so the
// vector loads of the sums come after it, without a "memory" clobber (which made the compiler keep
// the accumulators in memory around every tile instruction). What the loads read (the activations,
// the unpacked codes) is not written while a kernel runs.
template <int T>
inline void tile_load(const void* base, int64_t stride) {
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T));
}
template <int T>
inline void tile_store_sums(int32_t* sums) {
  __asm__ volatile("tilestored %%tmm%c2, (%1,%3,1)"
                   : "=m"(*reinterpret_cast<int32_t(*)[kRowTile * 16]>(sums))
                   : "r"(sums), "i"(T), "r"(int64_t{64}));
}
template <int T>
inline void tile_zero() {
  __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
}
template <int C, int A, int B>
inline void tile_dpbsud() {
  __asm__ volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
}

// Two groups in flight: tiles 0 and 1 hold their int32 sums [16 rows][16 weight rows], 2 and 3
// their activations [16 rows][32 bytes], 4 and 5 their codes [8 rows of 4 activations][16 weight
// rows x 4]. (Four in flight, on all 8 tiles, ran slower.)
constexpr int kSums = 2;
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 32, 32, 64, 64};
  uint8_t rows[16] = {kRowTile, kRowTile, kRowTile, kRowTile, 8, 8};
};

void tiles_begin() {
  static const TileConfig config;
  // An asm statement that reads the whole struct: GCC 12 dropped the stores of a local config
  // before _tile_loadconfig.
  __asm__ volatile("ldtilecfg %0" ::"m"(config));
}

void tiles_end() { __asm__ volatile("tilerelease" ::); }

// A block's codes as tile rows: each 32-value chunk (4 code words) as 8 rows of 64 bytes (low nibbles
// of word j, then its high nibbles), chunk after chunk: G * wpg * 128 bytes at `tiles`.
EMBER_AMX void unpack_int4_tiles(const uint8_t* codes, int64_t G, int64_t wpg, const Coeffs& co, uint8_t* tiles) {
  const __m512i nib = _mm512_set1_epi8(15);
  for (int64_t g = 0; g < G; ++g) {
    co.prefetch_group(g, G, wpg);
    const uint8_t* gc = co.group_codes(codes, g);
    uint8_t* out = tiles + g * wpg * 128;
    for (int64_t j = 0; j < wpg; ++j) {
      const __m512i v = _mm512_loadu_si512(gc + j * 64);
      _mm512_store_si512(out + 2 * j * 64, _mm512_and_si512(v, nib));
      _mm512_store_si512(out + (2 * j + 1) * 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
    }
  }
}

// How a kernel applies the per-group step: int_group_step512's arithmetic, its branches taken
// once per call (inside the loops they left the compiler keeping the accumulators in memory).
enum class Step { kFolded, kPlain, kScaled };  // folds_zero_point; else without or with ascale

// The step of group g for 16 rows, its sums read from sums [16][16].
template <Step S>
EMBER_AMX inline void group_step16(const Coeffs& co, int64_t g, const int32_t* sums, const float* ascale,
                                   const float* asum, int64_t G, __m512 (&acc)[kRowTile]) {
  const int64_t i = g * co.param_stride;
  const __m512 sv = params512(co, co.scale, i);
  if constexpr (S == Step::kFolded) {
#pragma GCC unroll 16
    for (int m = 0; m < kRowTile; ++m) {
      const __m512 p = _mm512_cvtepi32_ps(_mm512_load_si512(sums + m * 16));
      acc[m] = _mm512_fmadd_ps(sv, _mm512_sub_ps(p, _mm512_set1_ps(co.ze * asum[m * G + g])), acc[m]);
    }
  } else {
    const __m512 mv = co.offset ? params512(co, co.offset, i) : _mm512_set1_ps(co.m_const);
    const __m512 cv = _mm512_fnmadd_ps(sv, _mm512_set1_ps(co.ze), mv);
#pragma GCC unroll 16
    for (int m = 0; m < kRowTile; ++m) {
      __m512 p = _mm512_cvtepi32_ps(_mm512_load_si512(sums + m * 16));
      if constexpr (S == Step::kScaled) p = _mm512_mul_ps(p, _mm512_set1_ps(ascale[m * G + g]));
      acc[m] = _mm512_fmadd_ps(sv, p, acc[m]);
      acc[m] = _mm512_fmadd_ps(cv, _mm512_set1_ps(asum[m * G + g]), acc[m]);
    }
  }
}

// One group's sums (chunks of 32 activations, `chunks` of them, their tile rows at gt) into tile P.
template <int P>
EMBER_AMX inline void group_sums(const uint8_t* gt, const int8_t* qg, int64_t lda, int64_t chunks) {
  constexpr int A = kSums + P, B = 2 * kSums + P;
  tile_zero<P>();
  for (int64_t ch = 0; ch < chunks; ++ch) {
    tile_load<A>(qg + ch * 32, lda);
    tile_load<B>(gt + ch * 512, 64);
    tile_dpbsud<P, A, B>();
  }
}

template <Step S>
EMBER_AMX void rows16(const uint8_t* tiles, int64_t G, int64_t wpg, const Coeffs& co, const int8_t* q, int64_t lda,
                      const float* asum, const float* ascale, float* out) {
  alignas(64) int32_t sums[kSums][kRowTile * 16];
  __m512 acc[kRowTile];
#pragma GCC unroll 16
  for (int m = 0; m < kRowTile; ++m) acc[m] = _mm512_setzero_ps();
  const int64_t chunks = wpg / 4, group_values = wpg * 8, group_bytes = wpg * 128;
  for (int64_t g = 0; g < G; g += 2) {
    group_sums<0>(tiles + g * group_bytes, q + g * group_values, lda, chunks);
    const bool two = g + 1 < G;
    if (two) group_sums<1>(tiles + (g + 1) * group_bytes, q + (g + 1) * group_values, lda, chunks);
    tile_store_sums<0>(sums[0]);
    group_step16<S>(co, g, sums[0], ascale, asum, G, acc);
    if (two) {
      tile_store_sums<1>(sums[1]);
      group_step16<S>(co, g + 1, sums[1], ascale, asum, G, acc);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < kRowTile; ++m) _mm512_storeu_ps(out + m * 16, acc[m]);
}

// 16 activation rows against one block whose codes unpack_int4_tiles laid out at `tiles` (an
// IntBlockFn over 16 rows otherwise; wpg a multiple of 4: groups of whole 32-value chunks). Groups go
// in pairs on tiles 0 and 1, so that one pair's tile work overlaps the other's per-group steps.
// Needs tiles_begin() on this thread.
EMBER_AMX void int4_rows16(const uint8_t* tiles, int64_t G, int64_t wpg, const Coeffs& co, const int8_t* q,
                           int64_t lda, const float* asum, const float* ascale, float* out) {
  if (folds_zero_point(co, ascale)) return rows16<Step::kFolded>(tiles, G, wpg, co, q, lda, asum, ascale, out);
  if (ascale == nullptr) return rows16<Step::kPlain>(tiles, G, wpg, co, q, lda, asum, ascale, out);
  rows16<Step::kScaled>(tiles, G, wpg, co, q, lda, asum, ascale, out);
}

}  // namespace

void add_amx_block_kernels(BlockKernels& t) {
  t.row_tile_isa = KernelIsa::kAmx;
  t.unpack_int4_tiles = unpack_int4_tiles;
  t.int4_rows16 = int4_rows16;
  t.tiles_begin = tiles_begin;
  t.tiles_end = tiles_end;
}
#else
void add_amx_block_kernels(BlockKernels&) {}
#endif

}  // namespace cpu
}  // namespace ember
