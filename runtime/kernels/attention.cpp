// Attention: aten::scaled_dot_product_attention and ember::attend_cache / attend_cache_int8
// (causal attention of T new queries over a static KV cache): the ops, their checks, and decode
// (one fp32 query per head); several new tokens run in attention_prefill.cpp. fp32 math (an int8
// cache's scores in integers); work runs in parallel over the pool.
#include <algorithm>
#include <vector>

#include "act_quant.h"
#include "attention.h"

namespace ember {
namespace {

using namespace kern;

// Decode attention's chunks of cache rows (attend_decode) hold at least this many bytes of K rows
// (but a position's first): 128 rows of an int8 cache of 64-wide heads, 32 of an fp32 one.
// Smaller chunks cost more in per-task overhead and merging than they gain. Batched decode of 4
// SmolLM2 sessions at positions 100-400 (each session's attention runs its chunks in turn inside a
// pool task), steps alternating in one process: int8 cache, 128 rows against 32: -1.4% to -2.0% per
// step (one session alone: -0.2% to -1.1%); fp32 cache, 128 rows against 32: +2.0% and +2.2%.
constexpr int64_t kMinChunkBytes = 8192;

// Softmax over s[0..n) in place; returns false when every score is -inf.
inline bool softmax_inplace(float* s, int64_t n) {
  if (std::all_of(s, s + n, [](float x) { return x == -std::numeric_limits<float>::infinity(); })) return false;
  float mx;
  const float inv = 1.0f / scaled_softmax_f32(s, n, 1.0f, &mx);
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  return true;
}

// scaled_dot_product_attention(q, k, v, attn_mask?, dropout_p, is_causal, scale?, enable_gqa)
Error sdpa_k(KernelContext&, KernelArgs a) {
  Tensor *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr, *out = nullptr;
  double dropout = 0, scale = 0;
  bool causal = false, has_scale = false;
  EMBER_TRY(arg_tensor(a, 0, &q, "query"));
  EMBER_TRY(arg_tensor(a, 1, &k, "key"));
  EMBER_TRY(arg_tensor(a, 2, &v, "value"));
  EMBER_TRY(arg_opt_tensor(a, 3, &mask, "attn_mask"));
  EMBER_TRY(arg_double(a, 4, &dropout, "dropout_p"));
  EMBER_TRY(arg_bool(a, 5, &causal, "is_causal"));
  EMBER_TRY(arg_opt_double(a, 6, &scale, &has_scale, "scale"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(dropout == 0, "scaled_dot_product_attention: dropout_p=%g is not supported at inference (must be 0)", dropout);
  EMBER_CHECK_ARG(q->dim == 4 && k->dim == 4 && v->dim == 4,
                  "scaled_dot_product_attention: expects rank-4 [B, H, L, E] inputs, got ranks %d, %d, %d",
                  static_cast<int>(q->dim), static_cast<int>(k->dim), static_cast<int>(v->dim));
  const int64_t B = q->sizes[0], H = q->sizes[1], L = q->sizes[2], E = q->sizes[3];
  const int64_t Hkv = k->sizes[1], S = k->sizes[2], Ev = v->sizes[3];
  char b1[96], b2[96], b3[96];
  EMBER_CHECK_ARG(k->sizes[0] == B && v->sizes[0] == B && k->sizes[3] == E && v->sizes[1] == Hkv && v->sizes[2] == S &&
                      Hkv > 0 && H % Hkv == 0,
                  "scaled_dot_product_attention: shapes q=%s k=%s v=%s do not match (need k [B, Hkv, S, E], v [B, Hkv, S, Ev], "
                  "H %% Hkv == 0)",
                  q->describe(b1, sizeof b1), k->describe(b2, sizeof b2), v->describe(b3, sizeof b3));
  const int64_t group = H / Hkv;
  const float sc = has_scale ? static_cast<float>(scale) : static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
  const int64_t osz[4] = {B, H, L, Ev};
  EMBER_TRY(check_floating(*out, "attention output"));
  EMBER_TRY(out->resize(osz, 4));
  // Mask broadcast to [B, H, L, S].
  int64_t mst[4] = {0, 0, 0, 0};
  F32View mf;
  const bool* mb = nullptr;
  if (mask) {
    EMBER_CHECK_ARG(mask->dim <= 4, "scaled_dot_product_attention: attn_mask rank %d > 4", static_cast<int>(mask->dim));
    const int64_t full[4] = {B, H, L, S};
    int64_t cs[kMaxDims];
    contiguous_strides(mask->sizes, mask->dim, cs);
    const int shift = 4 - mask->dim;
    for (int d = shift; d < 4; ++d) {
      const int64_t s = mask->sizes[d - shift];
      EMBER_CHECK_ARG(s == 1 || s == full[d], "scaled_dot_product_attention: attn_mask %s does not broadcast to [%" PRId64
                      ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", mask->describe(b1, sizeof b1), B, H, L, S);
      mst[d] = s == 1 ? 0 : cs[d - shift];
    }
    if (mask->dtype == DType::kBool) mb = mask->ptr<bool>();
    else EMBER_TRY(as_f32(*mask, &mf, "attn_mask"));
  }
  F32View qv, kv, vv;
  EMBER_TRY(as_f32(*q, &qv, "query"));
  EMBER_TRY(as_f32(*k, &kv, "key"));
  EMBER_TRY(as_f32(*v, &vv, "value"));
  const bool out_f32 = out->dtype == DType::kFloat32;
  const int64_t rows = B * H * L;
  auto body = [&](int64_t rb, int64_t re) {
    std::vector<float> s(static_cast<size_t>(std::max<int64_t>(S, 1)));
    std::vector<float> acc(static_cast<size_t>(std::max<int64_t>(Ev, 1)));
    for (int64_t r = rb; r < re; ++r) {
      const int64_t i = r % L, h = (r / L) % H, b = r / (L * H);
      const int64_t hk = h / group;
      const float* qr = qv.p + r * E;
      const float* kb = kv.p + (b * Hkv + hk) * S * E;
      const float* vb = vv.p + (b * Hkv + hk) * S * Ev;
      const int64_t moff = b * mst[0] + h * mst[1] + i * mst[2];
      for (int64_t j = 0; j < S; ++j) {
        float x = dot_f32(qr, kb + j * E, E) * sc;
        if (causal && j > i) x = -std::numeric_limits<float>::infinity();
        if (mb && !mb[moff + j * mst[3]]) x = -std::numeric_limits<float>::infinity();
        if (mf.p) x += mf.p[moff + j * mst[3]];
        s[j] = x;
      }
      float* o = out_f32 ? out->ptr<float>() + r * Ev : acc.data();
      if (!softmax_inplace(s.data(), S)) {
        for (int64_t e = 0; e < Ev; ++e) o[e] = std::numeric_limits<float>::quiet_NaN();
      } else {
        for (int64_t e = 0; e < Ev; ++e) o[e] = 0;
        for (int64_t j = 0; j < S; ++j)
          if (s[j] != 0) axpy_f32(s[j], vb + j * Ev, o, Ev);
      }
      if (!out_f32) store_chunk<float>(out->dtype, out->data, r * Ev, Ev, o);
    }
  };
  if (rows > 1 && rows * S * E >= 16384) parallel_for(rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, S * E)), body);
  else body(0, rows);
  return Error::ok();
}

// The cache lines a decode task asks for into L2 (prefetcht2) as it computes: a stream of up to
// two runs of cache rows, each run K's rows and the same V rows side by side, handed out in equal
// shares, one per block of rows in each of the task's two passes (scores over K, then P.V over V).
// A task streams the next task's rows, so that fetching them overlaps its math. A thread's first
// task, whose rows nothing asked for ahead, first asks for its first block of K and of V at once,
// then streams the rest of its own rows before the next task's. The int8 cache's kernels spread
// each share over their rows (PrefetchLines); the other caches' blocks ask for it in one burst
// after each block.
//
// Asking for a whole long chunk at once stalls the core until the lines arrive: on a Zen 4 at
// position ~1,900 with an int8 cache, one thread's attention took 48-56 us per layer that way,
// 37-44 spread, 30-33 with the rows in cache. On a 2-core Xeon VM (AVX512-VNNI, SmolLM2 decode at
// ~1,880 over a real prompt, the rows coming from the last-level cache or DRAM at ~13 GB/s per
// core), a thread's first task took 2.3x as long as its later ones (~30k against ~13k TSC cycles);
// streaming its own rows, and spreading the shares over the kernels' rows instead of a burst per
// block: decode steps at ~1,880 -1% to -7% (alternating processes, 7 pairs), steps at ~95 and 4
// sessions batched at 60-400 unchanged (within +-1.6%); K's and V's rows side by side rather than
// one after the other: -0.5% and -1.1% more (in-process, alternating every 10 steps). With both, the
// op takes ~90k cycles per call against 113-118k (first tasks ~23k, the others ~11.6k).
struct TaskPrefetch {
  struct Run {
    const char* k;
    const char* v;
    size_t bytes;  // of each
  };
  Run run[2] = {};
  int runs = 0;
  int at = 0;      // the run being handed out
  size_t off = 0;  // the next byte of its K and V rows

  void add(const char* k, const char* v, size_t bytes) {
    if (bytes > 0 && runs < 2) run[runs++] = Run{k, v, bytes};
  }
  size_t total() const {
    size_t t = 0;
    for (int i = 0; i < runs; ++i) t += 2 * run[i].bytes;
    return t;
  }
  // The next n_bytes of the stream, half K's rows and half V's, as lines for a kernel to spread;
  // what lies past the current run's end (a share that crosses into the next run) asked for at once.
  PrefetchLines take(size_t n_bytes) {
    PrefetchLines first;
    bool have = false;
    // Whole lines per side: shares that split a line would ask for it twice.
    for (size_t side = (n_bytes / 2 + 63) & ~size_t{63}; side > 0 && at < runs;) {
      const size_t n = std::min(side, run[at].bytes - off);
      const int64_t lines = static_cast<int64_t>((n + 63) / 64);
      PrefetchLines part;
      part.p[0] = run[at].k + off;
      part.p[1] = run[at].v + off;
      part.lines[0] = part.lines[1] = lines;
      if (have) {
        part.issue_rest();
      } else {
        first = part;
        have = true;
      }
      side -= n;
      off += n;
      if (off >= run[at].bytes) {
        ++at;
        off = 0;
      }
    }
    return first;
  }
  void issue(size_t n_bytes) { take(n_bytes).issue_rest(); }
};

// An int8 cache's row scales [row0, row0 + n) of K and of V, asked for into L2 (prefetcht2). The
// task stream (TaskPrefetch) brings the rows' codes; without their scales, the kernels stalled on
// them: in a `perf` profile of 4 batched SmolLM2 `8da4w-kv8` sessions at positions 60-90, 37% of
// `i8_scores_vnni`'s samples and 31% of `i8_weighted_rows_int`'s sat at the scales' load. A task
// asks for the next task's (a thread's first task for its own too): a few lines each (4 bytes per
// row). Zen 5 VM, steps alternating in one process (16 rounds of 32): positions 60-92, one session
// -2.1%, 4 batched -0.7%; positions 300-332, -2.3% and -2.6%; at ~1,900 (`bench_attention.py`) no change.
void prefetch_scales(const AttendArgs& a, int64_t row0, int64_t n) {
  for (int64_t off = 0; off < n; off += 16) {  // 16 scales per line
    __builtin_prefetch(a.k.scales + row0 + off, 0, 1);
    __builtin_prefetch(a.v.scales + row0 + off, 0, 1);
  }
  if (n > 0) {  // the last row's line, where row0 is not line-aligned
    __builtin_prefetch(a.k.scales + row0 + n - 1, 0, 1);
    __builtin_prefetch(a.v.scales + row0 + n - 1, 0, 1);
  }
}

// Decode (T == 1, fp32 q and out): the attended keys are split into chunks across threads
// (flash-decoding); a task handles one (batch, kv head, chunk) for all query heads sharing that
// kv head, so each K/V row is read once per step, and the chunks' partial softmax results are
// merged exactly.
void attend_decode(const AttendArgs& a) {
  const Tensor& q = *a.q;
  const int64_t B = q.sizes[0], Hq = q.sizes[1], D = q.sizes[3];
  const int64_t Hkv = a.Hkv, S = a.S, group = Hq / Hkv, pos = a.pos, window = a.window;
  const float sc = a.sc, cap = a.cap;
  const int64_t hi = pos + 1, lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, n = hi - lo;
  // Very short contexts run on the calling thread: waking the pool costs more than the work.
  // (Beyond that, the cache rows come from DRAM: the weight stream evicts them every token.)
  // The split depends on the configured thread count only, never on the threads this call gets:
  // a batched step runs each session's attention inside a pool task, where the chunks run in
  // turn, and must give the logits the session gets alone (merging partial softmax results
  // rounds differently, and an int8-activation model amplifies one rounding flip to logit
  // differences of ~1).
  const bool parallel = B * Hq * n * D >= (1 << 14);
  // About 4 tasks per thread, and a whole number of tasks per thread (3 kv heads on 2 threads
  // would otherwise leave one thread a fifth idle).
  const int64_t threads = get_num_threads(), heads = B * Hkv;
  int64_t want = parallel ? std::max<int64_t>(1, (4 * threads + heads - 1) / heads) : 1;
  for (int64_t c = want; parallel && c < want + threads; ++c) {
    if ((heads * c) % threads == 0) {
      want = c;
      break;
    }
  }
  const int64_t min_rows = std::max<int64_t>(1, kMinChunkBytes / (D * static_cast<int64_t>(a.k.t->element_size())));
  int64_t nchunks = std::max<int64_t>(1, std::min<int64_t>(want, (n + min_rows - 1) / min_rows));
  while (nchunks > 1 && (heads * nchunks) % threads != 0) --nchunks;  // a whole number of tasks per thread
  const int64_t chunk = (n + nchunks - 1) / nchunks;
  const int64_t tasks = B * Hkv * nchunks, slot = D + 2;  // slot: running max, sum, output[D]
  thread_local std::vector<float> part_storage;  // reused across calls: no allocation per step
  part_storage.resize(static_cast<size_t>(tasks * group * slot));
  float* const part = part_storage.data();  // a plain pointer: worker threads see the caller's buffer
  const float* qp = q.ptr<float>();
  const F32Kernels& f32 = f32_kernels();
  const bool int8_cache = a.k.t->dtype == DType::kInt8 && a.v.t->dtype == DType::kInt8;
  // An int8 cache's scores take the queries in int8 (attend_cache_int8's semantics): each head's
  // row is quantized once per step, for every task.
  thread_local std::vector<int8_t> q8_storage;
  thread_local std::vector<float> qs_storage;
  if (int8_cache) {
    q8_storage.resize(static_cast<size_t>(B * Hq * D));
    qs_storage.resize(static_cast<size_t>(B * Hq));
    for (int64_t r = 0; r < B * Hq; ++r) quantize_kv_row(qp + r * D, D, q8_storage.data() + r * D, qs_storage.data() + r);
  }
  const int8_t* const q8 = q8_storage.data();
  const float* const qs = qs_storage.data();
  // The query heads of a group walk the chunk together, one block of rows at a time: each K/V
  // row comes from memory once and is reused from L1 by the other heads of its group.
  // An int8 cache is read in place by the f32.i8_* kernels: codes widened in registers, scales
  // applied per row (no fp32 copy of the block).
  constexpr int64_t kBlock = 64;
  // Task tk: batch row b, kv head hk, and its chunk's first cache row and row count.
  struct Task {
    int64_t b, hk, row0, nk;
  };
  auto task_of = [&](int64_t tk) {
    const int64_t c = tk % nchunks, hk = (tk / nchunks) % Hkv, b = tk / (nchunks * Hkv);
    const int64_t k0 = lo + c * chunk, k1 = std::min(hi, k0 + chunk);
    return Task{b, hk, (b * Hkv + hk) * S + k0, k1 - k0};
  };
  // Rows [r0, r0 + n) of a cache, as bytes.
  const auto rows_at = [&](const CacheRows& cr, int64_t r0) {
    return static_cast<const char*>(cr.t->data) + static_cast<size_t>(r0 * D) * cr.t->element_size();
  };
  const auto rows_bytes = [&](const CacheRows& cr, int64_t n) {
    return static_cast<size_t>(std::max<int64_t>(0, n) * D) * cr.t->element_size();
  };
  auto body = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> scores, rowbuf;
    scores.resize(static_cast<size_t>(group * chunk));
    rowbuf.resize(static_cast<size_t>(kBlock * D));
    for (int64_t task = t0; task < t1; ++task) {
      const Task t = task_of(task);
      const int64_t nk = t.nk, row0 = t.row0;  // the chunk's row count and first cache row
      const float* qg = qp + (t.b * Hq + t.hk * group) * D;  // the group's query heads, D apart
      float* const sl0 = part + task * group * slot;
      for (int64_t g = 0; g < group; ++g) {
        float* sl = sl0 + g * slot;
        sl[0] = -std::numeric_limits<float>::infinity();
        sl[1] = 0;
        std::fill(sl + 2, sl + slot, 0.0f);
      }
      if (nk <= 0) continue;
      TaskPrefetch stream;
      if (int8_cache) {  // the row scales: this task's (a thread's first) and the next one's
        if (task == t0) prefetch_scales(a, t.row0, nk);
        if (task + 1 < t1) {
          const Task n1 = task_of(task + 1);
          prefetch_scales(a, n1.row0, n1.nk);
        }
      }
      if (task == t0) {
        const int64_t head = std::min(kBlock, nk);
        PrefetchLines first;
        first.p[0] = rows_at(a.k, row0);
        first.p[1] = rows_at(a.v, row0);
        first.lines[0] = first.lines[1] = static_cast<int64_t>((rows_bytes(a.k, head) + 63) / 64);
        first.issue_rest();
        stream.add(rows_at(a.k, row0 + head), rows_at(a.v, row0 + head), rows_bytes(a.k, nk - head));
      }
      if (task + 1 < t1) {
        const Task n1 = task_of(task + 1);
        stream.add(rows_at(a.k, n1.row0), rows_at(a.v, n1.row0), rows_bytes(a.k, n1.nk));
      }
      const size_t slice = (stream.total() / static_cast<size_t>(2 * ((nk + kBlock - 1) / kBlock)) + 64) & ~size_t{63};
      for (int64_t j0 = 0; j0 < nk; j0 += kBlock) {
        const int64_t nb = std::min(kBlock, nk - j0);
        if (int8_cache) {
          const int64_t h0 = t.b * Hq + t.hk * group;  // the group's first query head
          f32.i8_scores.fn(q8 + h0 * D, qs + h0, group, a.k.t->ptr<int8_t>() + (row0 + j0) * D, a.k.scales + row0 + j0,
                           nb, D, scores.data() + j0, chunk, stream.take(slice));
        } else {
          const float* K = a.k.rows(row0 + j0, nb, rowbuf.data());
          for (int64_t g = 0; g < group; ++g) {
            gemv_rows_f32(qg + g * D, K, D, D, 0, nb, scores.data() + g * chunk + j0, !a.k.in_place());
          }
          stream.issue(slice);
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* s = scores.data() + g * chunk;
        float mx = 0;
        const float sum = capped_softmax(s, nk, sc, cap, &mx);
        sl0[g * slot] = mx;
        sl0[g * slot + 1] = sum;
      }
      for (int64_t j0 = 0; j0 < nk; j0 += kBlock) {
        const int64_t nb = std::min(kBlock, nk - j0);
        if (int8_cache) {
          f32.i8_weighted_rows.fn(scores.data() + j0, chunk, group, a.v.t->ptr<int8_t>() + (row0 + j0) * D,
                                  a.v.scales + row0 + j0, nb, D, sl0 + 2, slot, stream.take(slice));
        } else {
          const float* V = a.v.rows(row0 + j0, nb, rowbuf.data());
          for (int64_t g = 0; g < group; ++g) {
            weighted_rows_sum_f32(scores.data() + g * chunk + j0, V, D, nb, D, sl0 + g * slot + 2);
          }
          stream.issue(slice);
        }
      }
    }
  };
  if (parallel) parallel_for(tasks, 1, body);
  else body(0, tasks);
  float* op = a.out->ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group, g = h % group;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < nchunks; ++c) mx = std::max(mx, part[(((b * Hkv + hk) * nchunks + c) * group + g) * slot]);
      float* o = op + (b * Hq + h) * D;  // out [B, 1, Hq, D]
      std::fill(o, o + D, 0.0f);
      float total = 0;
      for (int64_t c = 0; c < nchunks; ++c) {
        const float* sl = part + (((b * Hkv + hk) * nchunks + c) * group + g) * slot;
        if (sl[1] == 0) continue;
        const float w = exp_approx(sl[0] - mx);
        total += w * sl[1];
        axpy_f32(w, sl + 2, o, D);
      }
      const float inv = 1.0f / total;
      for (int64_t e = 0; e < D; ++e) o[e] *= inv;
    }
  }
}

// Checks shared by attend_cache and attend_cache_int8; resizes out to [B, T, Hq, D] and fills
// the shape fields of *args.
Error check_attend(const char* op, const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& pos_t,
                   Tensor& out, AttendArgs* args) {
  EMBER_CHECK_ARG(q.dim == 4 && kc.dim == 4 && vc.dim == 4, "%s: q, k_cache, v_cache must be rank 4", op);
  EMBER_TRY(check_floating(q, "attention q"));
  EMBER_TRY(check_floating(out, "attention output"));
  EMBER_TRY(check_index_dtype(pos_t, "attention input_pos"));
  EMBER_CHECK_ARG(pos_t.numel() == 1, "%s: input_pos must hold one position, got %" PRId64 " elements", op,
                  pos_t.numel());
  const int64_t B = q.sizes[0], Hq = q.sizes[1], T = q.sizes[2], D = q.sizes[3];
  const int64_t Hkv = kc.sizes[1], S = kc.sizes[2];
  char b1[96], b2[96], b3[96];
  EMBER_CHECK_ARG(kc.sizes[0] == B && kc.sizes[3] == D && same_shape(kc, vc) && Hkv > 0 && Hq % Hkv == 0,
                  "%s: q=%s k_cache=%s v_cache=%s do not match (need caches [B, Hkv, S, D] with Hq %% Hkv == 0)", op,
                  q.describe(b1, sizeof b1), kc.describe(b2, sizeof b2), vc.describe(b3, sizeof b3));
  EMBER_CHECK_ARG(kc.dtype == vc.dtype, "%s: k_cache is %s but v_cache is %s", op, dtype_name(kc.dtype),
                  dtype_name(vc.dtype));
  const int64_t pos = index_at(pos_t, 0);
  EMBER_CHECK_ARG(pos >= 0 && T <= S && pos <= S - T,
                  "%s: positions [%" PRId64 ", %" PRId64 ") do not fit the cache of %" PRId64
                  " slots; export with a larger max_context_len or stop generating at the context end",
                  op, pos, pos + T, S);
  const int64_t osz[4] = {B, T, Hq, D};
  EMBER_TRY(out.resize(osz, 4));
  args->q = &q;
  args->out = &out;
  args->Hkv = Hkv;
  args->S = S;
  args->pos = pos;
  args->k = CacheRows{&kc, nullptr, D};
  args->v = CacheRows{&vc, nullptr, D};
  return Error::ok();
}

void attend(const AttendArgs& a) {
  if (a.q->sizes[2] == 1 && a.q->dtype == DType::kFloat32 && a.out->dtype == DType::kFloat32) attend_decode(a);
  else attend_prefill(a);
}

// ember::attend_cache(q [B,Hq,T,D], k_cache [B,Hkv,S,D], v_cache, input_pos int64[1], scale,
// sliding_window, softcap) -> [B, T, Hq, D]. Reads only keys [lo, pos + T): cost follows the
// number of attended keys, never the cache size S. Caches of any float dtype.
Error attend_cache_k(KernelContext&, KernelArgs a) {
  Tensor *q = nullptr, *kc = nullptr, *vc = nullptr, *pos_t = nullptr, *out = nullptr;
  double scale = 0, softcap = 0;
  AttendArgs args{};
  EMBER_TRY(arg_tensor(a, 0, &q, "q"));
  EMBER_TRY(arg_tensor(a, 1, &kc, "k_cache"));
  EMBER_TRY(arg_tensor(a, 2, &vc, "v_cache"));
  EMBER_TRY(arg_tensor(a, 3, &pos_t, "input_pos"));
  EMBER_TRY(arg_double(a, 4, &scale, "scale"));
  EMBER_TRY(arg_int(a, 5, &args.window, "sliding_window"));
  EMBER_TRY(arg_double(a, 6, &softcap, "softcap"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_floating(*kc, "attend_cache k_cache"));
  EMBER_TRY(check_floating(*vc, "attend_cache v_cache"));
  EMBER_TRY(check_attend("attend_cache", *q, *kc, *vc, *pos_t, *out, &args));
  args.sc = static_cast<float>(scale);
  args.cap = static_cast<float>(softcap);
  attend(args);
  return Error::ok();
}

// ember::attend_cache_int8(q, k_cache int8 [B,Hkv,S,D], k_scales f32 [B,Hkv,S,1], v_cache,
// v_scales, input_pos, scale, sliding_window, softcap): attend_cache over rows code * scale, with
// each query row quantized like a cache row first (quantize_kv_row): decode's scores are then
// integer dot products (f32.i8_scores).
Error attend_cache_int8_k(KernelContext&, KernelArgs a) {
  Tensor *q = nullptr, *kc = nullptr, *ks = nullptr, *vc = nullptr, *vs = nullptr, *pos_t = nullptr, *out = nullptr;
  double scale = 0, softcap = 0;
  AttendArgs args{};
  EMBER_TRY(arg_tensor(a, 0, &q, "q"));
  EMBER_TRY(arg_tensor(a, 1, &kc, "k_cache"));
  EMBER_TRY(arg_tensor(a, 2, &ks, "k_scales"));
  EMBER_TRY(arg_tensor(a, 3, &vc, "v_cache"));
  EMBER_TRY(arg_tensor(a, 4, &vs, "v_scales"));
  EMBER_TRY(arg_tensor(a, 5, &pos_t, "input_pos"));
  EMBER_TRY(arg_double(a, 6, &scale, "scale"));
  EMBER_TRY(arg_int(a, 7, &args.window, "sliding_window"));
  EMBER_TRY(arg_double(a, 8, &softcap, "softcap"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(kc->dtype == DType::kInt8, "attend_cache_int8: k_cache must be int8, got %s", dtype_name(kc->dtype));
  EMBER_TRY(check_attend("attend_cache_int8", *q, *kc, *vc, *pos_t, *out, &args));
  EMBER_CHECK_ARG(kc->sizes[3] <= kern::kMaxI8ScoresDim,
                  "attend_cache_int8: head dim %" PRId64 " is over the int8 cache's limit of %" PRId64
                  " (export with --kv-dtype fp16 or fp32)",
                  kc->sizes[3], kern::kMaxI8ScoresDim);
  char b1[96], b2[96];
  for (const Tensor* s : {ks, vs}) {
    const bool ok = s->dtype == DType::kFloat32 && s->dim == 4 && s->sizes[0] == kc->sizes[0] &&
                    s->sizes[1] == kc->sizes[1] && s->sizes[2] == kc->sizes[2] && s->sizes[3] == 1;
    EMBER_CHECK_ARG(ok, "attend_cache_int8: scales %s do not match the cache %s (need float32 [B, Hkv, S, 1])",
                    s->describe(b1, sizeof b1), kc->describe(b2, sizeof b2));
  }
  args.k.scales = ks->ptr<float>();
  args.v.scales = vs->ptr<float>();
  args.sc = static_cast<float>(scale);
  args.cap = static_cast<float>(softcap);
  attend(args);
  return Error::ok();
}

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
  r.add("aten::scaled_dot_product_attention.default", KernelDef{sdpa_k, 8, 1, false});
  r.add("ember::attend_cache.default", KernelDef{attend_cache_k, 7, 1, false});
  r.add("ember::attend_cache", KernelDef{attend_cache_k, 7, 1, false});
  r.add("ember::attend_cache_int8.default", KernelDef{attend_cache_int8_k, 9, 1, false});
  r.add("ember::attend_cache_int8", KernelDef{attend_cache_int8_k, 9, 1, false});
}

}  // namespace ember
