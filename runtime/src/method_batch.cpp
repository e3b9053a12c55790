// Method::execute_batch: several instances of one method executed in lockstep, with each
// stackable delegate call run once over the rows of all of them (batched decode: one pass over
// a linear's weights serves every session of the step).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ember/runtime/method.h"
#include "ember/runtime/thread_pool.h"
#include "method_instr.h"

namespace ember {

namespace {

// A segment whose work (all methods' together, on one thread) was below this the last time runs on
// the calling thread alone: a fork-join costs more than it saves there. Per decoder layer of a
// batched decode step of SmolLM2, three of the four segments are a residual add and a norm, or the
// MLP's gate (3-6 us for 4 methods); the fourth, with the attention, takes ~65 us. B = 4 on a 2-core
// Zen 4, steps alternating in one process against every segment as parallel tasks: -7% per step.
constexpr double kParallelSegmentSeconds = 16e-6;

}  // namespace

template <typename F>
void Method::run_segment(Method* lead, size_t k, int64_t n, F& segment) {
  using Clock = std::chrono::steady_clock;
  if (n == 1) {
    segment(0, 1);
    return;
  }
  // The estimate lives in the batch's first method (sessions of one program have the same
  // instructions; whichever leads, its estimates converge after a step). 0 (never measured): serial.
  if (lead->segment_work_.size() != lead->instrs_.size()) lead->segment_work_.assign(lead->instrs_.size(), 0.0f);
  float& work = lead->segment_work_[k];
  const int cap = ThreadCap::current();
  const int threads = cap > 0 ? std::min(cap, get_num_threads()) : get_num_threads();
  const bool parallel = threads > 1 && work >= kParallelSegmentSeconds;
  const Clock::time_point t0 = Clock::now();
  if (parallel) parallel_for(n, 1, segment);
  else segment(0, n);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  work = static_cast<float>(parallel ? wall * static_cast<double>(std::min<int64_t>(threads, n)) : wall);
}

void Method::execute_batch(Method* const* methods, size_t n, Error* errors) {
  if (n == 0) return;
  const Method* first = methods[0];
  // Reused by each thread that runs batches: no allocation per step. Bound to references, since
  // the pool tasks below run on other threads, where the names would mean their own copies.
  thread_local std::vector<Method*> tl_live;
  thread_local std::vector<size_t> tl_slot;
  thread_local std::vector<Error> tl_errors;
  std::vector<Method*>& live = tl_live;       // the methods still running
  std::vector<size_t>& slot = tl_slot;        // errors[] index of each
  std::vector<Error>& step_errors = tl_errors;
  live.clear();
  slot.clear();
  for (size_t i = 0; i < n; ++i) {
    Method* m = methods[i];
    bool repeated = false;
    for (size_t j = 0; j < i; ++j) repeated |= methods[j] == m;
    if (m->program_ != first->program_ || m->name_ != first->name_ || repeated) {
      errors[i] = Error::make(ErrorCode::kInvalidArgument,
                              "execute_batch: method %zu %s method 0 ('%s'); a batch takes distinct instances of "
                              "one method of one loaded program (sessions of one model)", i,
                              repeated ? "is the same instance as" : "is of another program or method than",
                              first->name_.c_str());
      continue;
    }
    errors[i] = m->begin_execution();
    if (errors[i]) continue;
    live.push_back(m);
    slot.push_back(i);
  }
  const size_t ni = first->instrs_.size();
  size_t k = 0;
  while (k < ni && !live.empty()) {
    step_errors.assign(live.size(), Error::ok());
    size_t end = k + 1;
    if (live.size() > 1 && live[0]->instrs_[k].stackable) {
      run_stacked(k, live.data(), live.size(), step_errors.data());
    } else {
      // The instructions up to the next stacked call (a segment), each method's run as one task:
      // the methods share the pool's threads (their kernels then run single-threaded inside), which
      // keeps both threads busy through the small per-session ops that would run on one thread
      // anyway (batched decode B = 4 on a 2-core Zen 3: -5% per step). The kernels split their work
      // by the configured thread count, not by the threads they get, so the results do not change.
      while (end < ni && !(live.size() > 1 && live[0]->instrs_[end].stackable)) ++end;
      auto segment = [&](int64_t j0, int64_t j1) {
        KernelContext ctx;
        for (int64_t j = j0; j < j1; ++j) {
          for (size_t kk = k; kk < end && !step_errors[j]; ++kk) step_errors[j] = live[j]->run_instruction(kk, ctx);
        }
      };
      run_segment(live[0], k, static_cast<int64_t>(live.size()), segment);
    }
    k = end;
    // A method that failed stops here; the rest go on.
    size_t w = 0;
    for (size_t j = 0; j < live.size(); ++j) {
      if (step_errors[j]) {
        errors[slot[j]] = step_errors[j];
        continue;
      }
      live[w] = live[j];
      slot[w] = slot[j];
      ++w;
    }
    live.resize(w);
    slot.resize(w);
  }
}

namespace {

// Stacked rows copied in or out on all threads from this many bytes (smaller: on the calling thread).
constexpr size_t kParallelCopyBytes = 128 * 1024;

// The rows of a [..., K] tensor (all dims but the last).
int64_t rows_of(const Tensor& t) { return t.prod(0, t.dim - 1); }

// A [rows, cols] tensor of `dtype` over `buf` (grown as needed, never shrunk: a vector grown
// back after a smaller call would zero-fill the difference, ~0.8 MB per batched step for the
// lm_head's output; 64-byte aligned inside).
EValue scratch_matrix(std::vector<uint8_t>& buf, DType dtype, int64_t rows, int64_t cols) {
  EValue v;
  v.tag = Tag::kTensor;
  v.tensor.dtype = dtype;
  v.tensor.dim = 2;
  v.tensor.sizes[0] = rows;
  v.tensor.sizes[1] = cols;
  v.tensor.capacity = v.tensor.nbytes();
  if (buf.size() < v.tensor.capacity + 64) buf.resize(v.tensor.capacity + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  v.tensor.data = buf.data() + ((64 - p % 64) % 64);
  return v;
}

}  // namespace

void Method::run_stacked(size_t k, Method* const* methods, size_t n, Error* errors) {
  const DelegateInstance& d = methods[0]->delegates_[methods[0]->instrs_[k].index];
  const int64_t max_rows = d.backend->max_stacked_rows(d.handle);
  KernelContext ctx;
  size_t j = 0;
  while (j < n) {
    // The longest run from j of methods whose inputs and outputs match j's and whose rows fit.
    const Tensor& xj = methods[j]->instrs_[k].args[0]->tensor;
    const Tensor& oj = methods[j]->instrs_[k].args[1]->tensor;
    size_t e = j;
    int64_t rows = 0;
    if (xj.dim >= 1 && oj.dim >= 1 && oj.size(-1) > 0) {
      while (e < n) {
        const Tensor& x = methods[e]->instrs_[k].args[0]->tensor;
        const Tensor& o = methods[e]->instrs_[k].args[1]->tensor;
        const bool same = x.dim >= 1 && x.dtype == xj.dtype && x.size(-1) == xj.size(-1) && o.dtype == oj.dtype &&
                          (x.data != nullptr || x.numel() == 0);
        if (!same || rows + rows_of(x) > max_rows) break;
        rows += rows_of(x);
        ++e;
      }
    }
    if (e - j < 2) {
      errors[j] = methods[j]->run_instruction(k, ctx);
      ++j;
      continue;
    }
    stack_call(k, methods + j, e - j, rows, errors + j);
    j = e;
  }
}

void Method::stack_call(size_t k, Method* const* methods, size_t n, int64_t rows, Error* errors) {
  struct Scratch {
    std::vector<uint8_t> in, out;
  };
  thread_local Scratch scratch;  // reused by each thread that leads batches
  const Tensor& x0 = methods[0]->instrs_[k].args[0]->tensor;
  const Tensor& o0 = methods[0]->instrs_[k].args[1]->tensor;
  EValue in = scratch_matrix(scratch.in, x0.dtype, rows, x0.size(-1));
  // Room for the output's last dim as planned (a linear's N is static); the backend's resize
  // fails cleanly if it needs more.
  EValue out = scratch_matrix(scratch.out, o0.dtype, rows, o0.size(-1));
  // Each method's rows at their offset in the stacked input (and, below, back out of the stacked
  // output). Large copies (the lm_head's logits: ~0.8 MB at B = 4) go one method per task: on the
  // calling thread alone they kept the other threads waiting (B = 4 on a 2-core Zen 4: ~3% of a
  // step); small ones stay on it, where a parallel loop would cost more than the copy.
  thread_local std::vector<size_t> tl_offsets;  // bound by reference: the tasks run on other threads
  std::vector<size_t>& offsets = tl_offsets;
  offsets.assign(n + 1, 0);
  for (size_t j = 0; j < n; ++j) offsets[j + 1] = offsets[j] + methods[j]->instrs_[k].args[0]->tensor.nbytes();
  const auto copy_grain = [n](size_t bytes) { return bytes >= kParallelCopyBytes ? 1 : static_cast<int64_t>(n); };
  uint8_t* const dst = static_cast<uint8_t*>(in.tensor.data);
  parallel_for(static_cast<int64_t>(n), copy_grain(offsets[n]), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const Tensor& x = methods[j]->instrs_[k].args[0]->tensor;
      if (x.nbytes() > 0) std::memcpy(dst + offsets[j], x.data, x.nbytes());
    }
  });
  EValue* argv[2] = {&in, &out};
  KernelContext ctx;
  ctx.instruction = static_cast<int>(k);
  const DelegateInstance& d = methods[0]->delegates_[methods[0]->instrs_[k].index];
  Error e = d.backend->execute(d.handle, ctx, KernelArgs{argv, 2});
  if (e) {
    e = Error(e.code(), "instruction " + std::to_string(k) + " (delegate " + d.id + ", " + std::to_string(n) +
                            " methods batched): " + e.message());
    for (size_t j = 0; j < n; ++j) errors[j] = e;
    return;
  }
  const int64_t cols = out.tensor.size(-1);
  const size_t row_bytes = static_cast<size_t>(cols) * out.tensor.element_size();
  const uint8_t* const src = static_cast<const uint8_t*>(out.tensor.data);
  size_t row = 0;
  for (size_t j = 0; j < n; ++j) {
    offsets[j] = row * row_bytes;
    row += static_cast<size_t>(rows_of(methods[j]->instrs_[k].args[0]->tensor));
  }
  parallel_for(static_cast<int64_t>(n), copy_grain(row * row_bytes), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const Tensor& x = methods[j]->instrs_[k].args[0]->tensor;
      Tensor& o = methods[j]->instrs_[k].args[1]->tensor;
      int64_t sizes[kMaxDims];
      for (int dd = 0; dd < x.dim - 1; ++dd) sizes[dd] = x.sizes[dd];
      sizes[x.dim - 1] = cols;
      const size_t bytes = static_cast<size_t>(rows_of(x)) * row_bytes;
      errors[j] = o.resize(sizes, x.dim);
      if (!errors[j] && bytes > 0) std::memcpy(o.data, src + offsets[j], bytes);
    }
  });
  for (size_t j = 0; j < n; ++j) {
    if (errors[j]) {
      errors[j] = errors[j].with_context("instruction " + std::to_string(k) + " (delegate " + d.id + ", batched)");
    }
  }
}

}  // namespace ember
