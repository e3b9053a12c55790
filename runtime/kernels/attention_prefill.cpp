// Attention of several new tokens at once (kern::attend_prefill, attention.h), as two small
// GEMMs per task on the fp32 micro-kernel (f32_kernels.h).
//
// A task is (batch row b, kv head hk, block of nb query rows): the block's queries of every head
// of the group, G = group x nb rows, are packed once, transposed, into 32-wide panels. The keys
// they can see are then read in place (an fp32 cache) or dequantized a block at a time (fp16,
// bf16, int8) and run through the micro-kernel as its A rows against those panels: each cache row
// is read once per task, and the scores come out register-blocked, where one dot product per
// (query, key) ended in a horizontal sum. Over an int8 cache, where the table says it is faster
// (F32Kernels::i8_scores_for_prefill), the scores are decode's instead: integer dot products of
// the query rows' codes with the cached codes (f32.i8_scores). Each query row's softmax then runs
// over its own keys (causal, sliding window), zero elsewhere, and the outputs are S V: the softmax
// rows as the micro-kernel's A rows against V packed 32 columns wide, 256 keys deep.
// nb keeps a task's scores within L2 (fewer rows late in a long context), gives every thread work
// when T is small, and fills the 32-wide panels.
#include <algorithm>
#include <vector>

#include "act_quant.h"
#include "attention.h"

namespace ember {
namespace kern {
namespace {

constexpr int64_t kScoreBudget = 65536;  // fp32 scores per task (256 KiB)
constexpr int64_t kMaxBlockRows = 32;    // query rows per task
constexpr int64_t kKeyBlock = 64;        // keys dequantized (or read in place) at a time for the scores
constexpr int64_t kKeysDeep = 256;       // keys per packed V panel

// Query rows per task: the scores of the block's longest rows within budget; at least two tasks
// per thread when T allows (3 kv heads and a 12-token turn would otherwise be 3 tasks on 2
// threads); and, among the counts down to half of that, the one whose group x nb query rows fill
// the micro-kernel's 32-wide panels best (3 heads x 16 rows = 48 would leave a panel half empty;
// 3 x 10 = 30 or 3 x 32 = 96 fill them).
int64_t block_rows(int64_t T, int64_t pos, int64_t group, int64_t heads, int64_t threads) {
  const int64_t want_blocks = std::max<int64_t>(1, (2 * threads + heads - 1) / heads);
  int64_t most = std::clamp<int64_t>(kScoreBudget / std::max<int64_t>(1, group * (pos + T)), 1, kMaxBlockRows);
  most = std::max<int64_t>(1, std::min(most, (T + want_blocks - 1) / want_blocks));
  int64_t best = most;
  double best_fill = 0;
  for (int64_t nb = most; nb >= std::max<int64_t>(1, most / 2); --nb) {
    const int64_t g = group * nb;
    const double fill = static_cast<double>(g) / static_cast<double>(kNR * ((g + kNR - 1) / kNR));
    if (fill > best_fill + 1e-9) {
      best = nb;
      best_fill = fill;
    }
  }
  return best;
}

// The query rows of one task (nb: the block's row count), fp32 [G = group x nb, D]: row r =
// g * nb + t is head hk * group + g at query i0 + t. Over an int8 cache each row is quantized
// (quantize_kv_row) into q8 [G, D] and qs [G], and A holds the dequantized values.
void gather_queries(const AttendArgs& a, int64_t b, int64_t hk, int64_t i0, int64_t nb, float* A, int8_t* q8,
                    float* qs) {
  const Tensor& q = *a.q;
  const int64_t Hq = q.sizes[1], T = q.sizes[2], D = q.sizes[3], group = Hq / a.Hkv;
  const bool int8_cache = a.k.t->dtype == DType::kInt8;
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t t = 0; t < nb; ++t) {
      const int64_t off = ((b * Hq + hk * group + g) * T + i0 + t) * D;
      float* row = A + (g * nb + t) * D;
      if (q.dtype == DType::kFloat32) {
        std::copy(q.ptr<float>() + off, q.ptr<float>() + off + D, row);
      } else {
        convert_elements(q.dtype, static_cast<const uint8_t*>(q.data) + static_cast<size_t>(off) * q.element_size(),
                         DType::kFloat32, row, D);
      }
      if (int8_cache) {  // the query as its int8 codes times their scale (attend_cache_int8)
        const int64_t r = g * nb + t;
        quantize_kv_row(row, D, q8 + r * D, qs + r);
        for (int64_t d = 0; d < D; ++d) row[d] = static_cast<float>(q8[r * D + d]) * qs[r];
      }
    }
  }
}

// The n rows of A [n, D] into panels of kNR, transposed: panel p holds rows 32 p.., as
// Bp[p][d][c] = A[32 p + c][d], zero past the last row.
void pack_rows_transposed(const float* A, int64_t n, int64_t D, float* Bp) {
  for (int64_t p = 0; p * kNR < n; ++p) {
    float* panel = Bp + p * D * kNR;
    const int64_t nr = std::min<int64_t>(kNR, n - p * kNR);
    for (int64_t d = 0; d < D; ++d) {
      float* dst = panel + d * kNR;
      for (int64_t c = 0; c < nr; ++c) dst[c] = A[(p * kNR + c) * D + d];
      std::fill(dst + nr, dst + kNR, 0.0f);
    }
  }
}

struct Buffers {
  std::vector<float> A, qpanels, scores, kbuf, vbuf, vpanel, out, inv, qs;
  std::vector<int8_t> q8;
};

}  // namespace

void attend_prefill(const AttendArgs& a) {
  const Tensor& q = *a.q;
  Tensor& out = *a.out;
  const int64_t B = q.sizes[0], Hq = q.sizes[1], T = q.sizes[2], D = q.sizes[3];
  const int64_t Hkv = a.Hkv, S = a.S, group = Hq / Hkv, pos = a.pos, window = a.window;
  const F32Kernels& f32 = f32_kernels();
  const int mr_max = f32.ukernel_max_rows;
  const int64_t nb = block_rows(T, pos, group, B * Hkv, get_num_threads());
  const int64_t tblocks = (T + nb - 1) / nb;
  const int64_t tasks = B * Hkv * tblocks;
  const bool out_f32 = out.dtype == DType::kFloat32;
  const bool int8_cache = a.k.t->dtype == DType::kInt8;
  const bool int_scores = int8_cache && f32.i8_scores_for_prefill;

  auto body = [&](int64_t task_b, int64_t task_e) {
    thread_local Buffers buf;
    const int64_t gmax = group * nb, panels = (gmax + kNR - 1) / kNR;
    grow(buf.A, gmax * D);
    grow(buf.qpanels, panels * D * kNR);
    grow(buf.kbuf, kKeyBlock * D);
    grow(buf.vbuf, kKeysDeep * D);
    grow(buf.vpanel, kKeysDeep * kNR);
    grow(buf.out, gmax * D);
    grow(buf.inv, gmax);
    grow(buf.q8, gmax * D);
    grow(buf.qs, gmax);
    float tile[kMaxUkernelRows * kNR];
    for (int64_t task = task_b; task < task_e; ++task) {
      // The latest query blocks (the most keys under a causal mask) first.
      const int64_t blk = tblocks - 1 - task / (B * Hkv), hk = task % Hkv, b = task / Hkv % B;
      const int64_t i0 = blk * nb, rows = std::min(T, i0 + nb) - i0, G = group * rows;
      // Keys any query of the block can see: [lo, hi).
      const int64_t hi = pos + i0 + rows, lo = window > 0 ? std::max<int64_t>(0, pos + i0 - window + 1) : 0;
      const int64_t nk = hi - lo, row0 = (b * Hkv + hk) * S + lo;
      grow(buf.scores, G * nk);
      float* const A = buf.A.data();
      float* const sc = buf.scores.data();
      gather_queries(a, b, hk, i0, rows, A, buf.q8.data(), buf.qs.data());
      if (int_scores) {
        // The int8 cache's scores as decode computes them: integer dot products of the query
        // rows' codes and the cached codes, times the two scales (f32.i8_scores, 4 rows at a time).
        for (int64_t j0 = 0; j0 < nk; j0 += kKeyBlock) {
          const int64_t kb = std::min(kKeyBlock, nk - j0);
          f32.i8_scores.fn(buf.q8.data(), buf.qs.data(), G, a.k.t->ptr<int8_t>() + (row0 + j0) * D,
                           a.k.scales + row0 + j0, kb, D, sc + j0, nk, PrefetchLines{});
        }
      } else {
        // Scores: key rows as A (mr at a time) against the query panels; the tile [keys,
        // queries] lands transposed in sc [G, nk].
        pack_rows_transposed(A, G, D, buf.qpanels.data());
        for (int64_t j0 = 0; j0 < nk; j0 += kKeyBlock) {
          const int64_t kb = std::min(kKeyBlock, nk - j0);
          const float* K = a.k.rows(row0 + j0, kb, buf.kbuf.data());
          for (int64_t j = 0; j < kb; j += mr_max) {
            const int mr = static_cast<int>(std::min<int64_t>(mr_max, kb - j));
            for (int64_t p = 0; p * kNR < G; ++p) {
              const int nr = static_cast<int>(std::min<int64_t>(kNR, G - p * kNR));
              f32.ukernel.fn(mr, D, K + j * D, D, buf.qpanels.data() + p * D * kNR, tile, kNR, nr, true, nullptr,
                             nullptr);
              for (int c = 0; c < nr; ++c) {
                float* srow = sc + (p * kNR + c) * nk + j0 + j;
                for (int i = 0; i < mr; ++i) srow[i] = tile[i * kNR + c];
              }
            }
          }
        }
      }
      // Each query row's softmax over the keys it sees; zero elsewhere.
      for (int64_t r = 0; r < G; ++r) {
        const int64_t p = pos + i0 + r % rows;
        const int64_t first = (window > 0 ? std::max<int64_t>(0, p - window + 1) : 0) - lo, end = p + 1 - lo;
        float* s = sc + r * nk;
        float mx = 0;
        const float sum = capped_softmax(s + first, end - first, a.sc, a.cap, &mx);
        std::fill(s, s + first, 0.0f);
        std::fill(s + end, s + nk, 0.0f);
        buf.inv[r] = 1.0f / sum;
      }
      // Outputs: the softmax rows against V, 32 columns and kKeysDeep keys at a time.
      float* const o = buf.out.data();
      for (int64_t k0 = 0; k0 < nk; k0 += kKeysDeep) {
        const int64_t kc = std::min(kKeysDeep, nk - k0);
        const float* V = a.v.rows(row0 + k0, kc, buf.vbuf.data());
        for (int64_t n0 = 0; n0 < D; n0 += kNR) {
          const int nr = static_cast<int>(std::min<int64_t>(kNR, D - n0));
          float* vp = buf.vpanel.data();
          for (int64_t k = 0; k < kc; ++k) {
            std::copy(V + k * D + n0, V + k * D + n0 + nr, vp + k * kNR);
            std::fill(vp + k * kNR + nr, vp + (k + 1) * kNR, 0.0f);
          }
          for (int64_t m = 0; m < G; m += mr_max) {
            const int mr = static_cast<int>(std::min<int64_t>(mr_max, G - m));
            f32.ukernel.fn(mr, kc, sc + m * nk + k0, nk, vp, o + m * D + n0, D, nr, k0 == 0, nullptr, nullptr);
          }
        }
      }
      for (int64_t r = 0; r < G; ++r) {
        const int64_t g = r / rows, i = i0 + r % rows;
        const int64_t ooff = ((b * T + i) * Hq + hk * group + g) * D;
        float* orow = o + r * D;
        for (int64_t e = 0; e < D; ++e) orow[e] *= buf.inv[r];
        if (out_f32) std::copy(orow, orow + D, out.ptr<float>() + ooff);
        else store_chunk<float>(out.dtype, out.data, ooff, D, orow);
      }
    }
  };
  // Work ~ attended keys x D per query row; parallel when there is enough of it.
  const int64_t work = B * Hq * T * (pos + T) * D;
  // Uneven tasks, the longest first, each taken by whichever thread is free (against static halves,
  // in-process alternating runs on a 2-core Zen 4: 128-token chunk at position 1,500 +3.1% AVX2,
  // +1.8% with an int8 cache on VNNI, even with an fp32 cache).
  if (tasks > 1 && work >= 32768) parallel_tasks(tasks, body);
  else body(0, tasks);
}

}  // namespace kern
}  // namespace ember
