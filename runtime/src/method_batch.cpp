// Method::execute_batch: several instances of one method executed in lockstep, with each
// stackable delegate call run once over the rows of all of them (batched decode: one pass over
// a linear's weights serves every session of the step).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ember/runtime/method.h"
#include "ember/runtime/thread_pool.h"
#include "method_instr.h"

namespace ember {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A segment whose work (all methods' together, on one thread) was below this the last time runs on
// the calling thread alone: a fork-join costs more than it saves there. Per decoder layer of a
// batched decode step of SmolLM2, three of the four segments are a residual add and a norm, or the
// MLP's gate (3-6 us for 4 methods); the fourth, with the attention, takes ~65 us. B = 4 on a 2-core
// Zen 4, steps alternating in one process against every segment as parallel tasks: -7% per step.
constexpr double kParallelSegmentSeconds = 16e-6;

}  // namespace

template <typename F>
void Method::run_segment(Method* lead, size_t k, int64_t n, bool uneven, F& segment) {
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
  if (parallel && uneven) parallel_tasks(n, segment);
  else if (parallel) parallel_for(n, 1, segment);
  else segment(0, n);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  work = static_cast<float>(parallel ? wall * static_cast<double>(std::min<int64_t>(threads, n)) : wall);
}

// The arguments (EValues) of the per-method instructions after a stacked call, asked for while
// the calling thread waits for the workers at the end of that call (set_idle_work): the weights
// streamed through the cache since the last step have evicted them, and the stretch runs on one
// thread. SmolLM2 `8da4w-kv8`, 4 sessions batched on a 2-core Zen 5 VM, steps alternating in blocks
// of 16 in one process: 0.976x-1.005x (8 runs, mean 0.993x) against 1.000x-1.032x for the same
// harness with the lookahead a no-op (6 runs, mean 1.012x): about -1.5% per step.
struct Method::Lookahead {
  std::vector<Method*>* live;
  size_t k0, ni;
  static void run(void* self) {
    const Lookahead& la = *static_cast<Lookahead*>(self);
    for (Method* m : *la.live) {
      for (size_t kk = la.k0; kk < la.ni && !m->instrs_[kk].stackable; ++kk) {
        const Instr& in = m->instrs_[kk];
        for (int i = 0; i < in.nargs; ++i) {
          const char* v = reinterpret_cast<const char*>(in.args[i]);
          __builtin_prefetch(v, 0, 3);
          __builtin_prefetch(v + 64, 0, 3);
          __builtin_prefetch(v + 128, 0, 3);
        }
      }
    }
  }
};

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
  // A batch whose methods differ in size (a newcomer's prefill chunk among decode steps): the
  // largest first, and each segment's methods taken one at a time by whichever thread is free, so
  // that the long task does not end up last on a busy thread. Served with 4 SmolLM2 sessions, such
  // batches, alternating with one contiguous half per thread: 15.1 -> 11.3, 15.5 -> 11.9, 12.9 ->
  // 12.0 and 13.1 -> 12.2 ms on average; equal methods keep the halves (taken one at a time: +1%).
  // The order changes no result: each method's rows are computed alone.
  const auto size_of = [](const Method* m) { return m->inputs_.empty() ? 0 : m->inputs_[0]->tensor.numel(); };
  bool uneven = false;
  for (const Method* m : live) uneven |= size_of(m) != size_of(live[0]);
  if (uneven) {
    thread_local std::vector<std::pair<Method*, size_t>> tl_pairs;
    std::vector<std::pair<Method*, size_t>>& pairs = tl_pairs;
    pairs.clear();
    for (size_t j = 0; j < live.size(); ++j) pairs.emplace_back(live[j], slot[j]);
    std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& a, const auto& b) { return size_of(a.first) > size_of(b.first); });
    for (size_t j = 0; j < pairs.size(); ++j) std::tie(live[j], slot[j]) = pairs[j];
  }
  const size_t ni = first->instrs_.size();
  // EMBER_PROFILE (read by every method at load): wall time per stacked call, shared by its
  // methods, and each method's own instructions timed where they run; the step's totals go to
  // every method of the batch (BatchProfile).
  const bool profiling = !live.empty() && live[0]->profile_;
  thread_local std::vector<Method*> tl_began;
  std::vector<Method*>& began = tl_began;  // the methods that started this step
  if (profiling) began.assign(live.begin(), live.end());
  const Clock::time_point step_t0 = profiling ? Clock::now() : Clock::time_point();
  const PoolProfile pool0 = profiling ? pool_profile() : PoolProfile();
  double stacked_s = 0, segment_s = 0;
  size_t k = 0;
  while (k < ni && !live.empty()) {
    step_errors.assign(live.size(), Error::ok());
    size_t end = k + 1;
    const Clock::time_point t0 = profiling ? Clock::now() : Clock::time_point();
    if (live.size() > 1 && live[0]->instrs_[k].stackable) {
      // While the calling thread waits for the workers at the end of the call, it reads ahead the
      // metadata of the per-method instructions that follow (Lookahead).
      Lookahead ahead{&live, k + 1, ni};
      set_idle_work(&Lookahead::run, &ahead);
      run_stacked(k, live.data(), live.size(), step_errors.data());
      set_idle_work(nullptr, nullptr);
      if (profiling) {
        const double s = seconds_since(t0);
        stacked_s += s;
        for (Method* m : live) {
          m->profile_seconds_[k] += s / static_cast<double>(live.size());
          ++m->profile_calls_[k];
        }
      }
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
          Method* m = live[j];
          for (size_t kk = k; kk < end && !step_errors[j]; ++kk) {
            const Clock::time_point i0 = profiling ? Clock::now() : Clock::time_point();
            step_errors[j] = m->run_instruction(kk, ctx);
            if (profiling) {
              m->profile_seconds_[kk] += seconds_since(i0);
              ++m->profile_calls_[kk];
            }
          }
        }
      };
      run_segment(live[0], k, static_cast<int64_t>(live.size()), uneven, segment);
      if (profiling) segment_s += seconds_since(t0);
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
  if (profiling) {
    const double step_s = seconds_since(step_t0);
    const PoolProfile pool1 = pool_profile();
    for (Method* m : began) {
      BatchProfile& b = m->profile_batch_;
      ++b.steps;
      b.methods += began.size();
      b.step_s += step_s;
      b.stacked_s += stacked_s;
      b.segment_s += segment_s;
      m->profile_pool_.loops += pool1.loops - pool0.loops;
      m->profile_pool_.caller_wait_s += pool1.caller_wait_s - pool0.caller_wait_s;
      m->profile_pool_.worker_busy_s += pool1.worker_busy_s - pool0.worker_busy_s;
      ++m->profile_executions_;
      m->profile_wall_s_ += step_s;
    }
  }
}

namespace {

// The rows of a [..., K] tensor (all dims but the last).
int64_t rows_of(const Tensor& t) { return t.prod(0, t.dim - 1); }

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
    stack_call(k, methods + j, e - j, errors + j);
    j = e;
  }
}

void Method::stack_call(size_t k, Method* const* methods, size_t n, Error* errors) {
  const DelegateInstance& d = methods[0]->delegates_[methods[0]->instrs_[k].index];
  KernelContext ctx;
  ctx.instruction = static_cast<int>(k);
  // Each method's own input and output: the backend reads and writes the rows where they are (no
  // copies into one tensor and back: 4 SmolLM2 sessions, -3.5% per step).
  thread_local std::vector<Tensor*> tl_in, tl_out;
  tl_in.clear();
  tl_out.clear();
  for (size_t j = 0; j < n; ++j) {
    tl_in.push_back(&methods[j]->instrs_[k].args[0]->tensor);
    tl_out.push_back(&methods[j]->instrs_[k].args[1]->tensor);
  }
  Error e = d.backend->execute_stacked(d.handle, ctx, tl_in.data(), tl_out.data(), n);
  if (!e) return;
  e = Error(e.code(), "instruction " + std::to_string(k) + " (delegate " + d.id + ", " + std::to_string(n) +
                          " methods batched): " + e.message());
  for (size_t j = 0; j < n; ++j) errors[j] = e;
}

}  // namespace ember
