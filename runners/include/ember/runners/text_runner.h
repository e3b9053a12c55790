// TextRunner: prefill + decode loop over a TextDecoder, with a Sampler, stop conditions,
// cache-prefix reuse across calls, and stats.
//
// The runner remembers which token ids are in the cache (`cached_tokens()`). A new prompt is
// compared with them: the common prefix is kept and only the rest is prefilled (in chunks of
// max_seq_len), so a multi-turn chat whose prompt extends the previous one recomputes only the
// new suffix. When the prompt diverges, the cache is rolled back to the common prefix (later
// positions are simply overwritten). At least the last prompt token is always recomputed, since
// its logits are needed.
//
// Two ways to drive it:
//   - `generate(prompt, config, on_token)`: the whole loop; `on_token` returns false to stop;
//   - `start(prompt, config)` then `next()` until it returns kDone: one token per call.
// Step ahead: once next() has sampled a token that generation will feed, it starts that token's
// forward step on a helper thread (AsyncStep) before returning, so the caller's work with the
// token overlaps the step. From then on the helper samples each token and starts its step itself,
// up to 4 tokens ahead of the caller (EMBER_STEP_AHEAD=N: N; 0: every step runs inside next()),
// and next() hands them over in order: the same tokens, but a caller that is slow for a moment
// (its thread waiting for the GIL, say) holds up neither its generation nor a batch of sessions.
// A generation that ends early (stop(), a callback returning false) still completes the step of
// the last token returned, which is then in cached_tokens(); tokens sampled ahead but never
// returned are dropped: not counted, not in cached_tokens() (stop() is seen at the next token,
// so at most one more step runs).
// `stop()` may be called from any thread; it ends the current generation at the next token.
// Everything else is single-threaded.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/runners/sampler.h"
#include "ember/runners/stats.h"
#include "ember/runners/text_decoder.h"

namespace ember {
namespace runners {

struct GenerateConfig {
  int64_t max_new_tokens = 256;     // >= 1
  SamplerConfig sampling;
  std::vector<int64_t> stop_ids;    // extra ids that end generation like EOS (not returned)
  bool ignore_eos = false;          // keep going past llm.eos_ids (benchmarks)

  Error validate() const;
};

// Called with each generated token; return false to stop.
using TokenCallback = std::function<bool(int64_t token)>;

struct GenerateResult {
  std::vector<int64_t> tokens;      // generated ids (EOS / stop ids excluded)
  StopReason stop_reason = StopReason::kNone;
};

class AsyncStep;

class TextRunner {
 public:
  static constexpr int64_t kDone = -1;

  // Loads the program at `path`; `threads` > 0 sets the kernel thread count (process-wide),
  // 0 leaves it (default: physical cores).
  static Result<std::unique_ptr<TextRunner>> load(const std::string& path, int threads = 0,
                                                  LoadMode mode = LoadMode::kMmap);
  // A runner over `program`; its KV cache is `state` when given, else the program's default state.
  // Its steps go through `batcher` (shared with the sessions made from it by new_session()); a
  // new one when null.
  static Result<std::unique_ptr<TextRunner>> create(std::shared_ptr<Program> program,
                                                    std::shared_ptr<ProgramState> state = nullptr,
                                                    std::shared_ptr<StepBatcher> batcher = nullptr);
  ~TextRunner();
  // A new, independent session over the same loaded program (the weights are shared, never
  // loaded again): its own KV cache (ProgramState), method arena, sampler, cached tokens and
  // stats. Sessions may run concurrently, each from one thread at a time: their forward steps
  // share one StepBatcher, which runs the decode steps of sessions generating at the same time
  // as one batch (one pass over the weights per step for all of them; tokens identical to
  // running each alone).
  // `threads` > 0: the session's own kernel thread count, at most that many threads of the
  // process-wide pool for its steps (TextDecoder::set_threads); 0: all of them.
  // Errors: kOutOfMemory (the KV cache or the arena cannot be allocated).
  Result<std::unique_ptr<TextRunner>> new_session(int threads = 0) const;

  // Validates the prompt (non-empty, ids in the vocabulary, shorter than the context) and the
  // config, reuses the cached prefix and prefills the rest (at least the last two tokens, in chunks
  // of two rows or more: a repeated prompt gives the fresh prompt's logits). On error the cache is
  // left unknown and the next prompt is prefilled from position 0.
  Error start(const int64_t* prompt, size_t n, const GenerateConfig& config);
  // The next token, or kDone (see stop_reason()). Errors only if a forward step fails. A returned
  // token's step is started ahead on a helper thread (EMBER_STEP_AHEAD) before next() returns,
  // except the first token's, which starts at the following call (the caller streams it first).
  Result<int64_t> next();
  // next() when its result is already there (a token the helper sampled ahead): true and *token
  // set, without waiting; false (nothing done) when next() would wait or compute. Lets a caller
  // holding a lock it would rather not release while waiting (Python's GIL) skip that.
  bool try_next(Result<int64_t>* token);

  Result<GenerateResult> generate(const std::vector<int64_t>& prompt, const GenerateConfig& config,
                                  const TokenCallback& on_token = nullptr);

  void stop() { stop_requested_.store(true, std::memory_order_relaxed); }
  // Forgets the cached tokens and zeroes the cache.
  void reset();

  // Raw forward for parity tests: bypasses the cached-token bookkeeping (which it clears).
  Result<const float*> forward(const int64_t* tokens, int64_t n, int64_t pos);
  // Raw batched step: runners[i] (sessions of one program, distinct) takes the counts[i] tokens
  // at tokens[i] (one: decode; more: a prefill chunk) from positions[i], all in one execution
  // (TextDecoder::step_batch); logits[i] as forward() gives for them.
  static Error forward_batch(TextRunner* const* runners, size_t n, const int64_t* const* tokens, const int64_t* counts,
                             const int64_t* positions, const float** logits);

  StopReason stop_reason() const { return stats_.stop_reason; }
  const Stats& stats() const { return stats_; }
  const std::vector<int64_t>& cached_tokens() const { return cached_; }
  const LlmInfo& info() const { return decoder_->info(); }
  const TextDecoder& decoder() const { return *decoder_; }
  Sampler& sampler() { return sampler_; }

 private:
  explicit TextRunner(std::unique_ptr<TextDecoder> decoder);
  bool is_stop_id(int64_t token) const;
  void finish(StopReason reason);
  // Marks the runner as generating or not, and tells the batcher on a change.
  void set_active(bool active);
  // For the raw forward calls: ends any generation and forgets the cached-token bookkeeping.
  void release_cache();
  // The result of pending_'s forward step: on success the token joins cached_ and the logits
  // become logits_; on failure cached_ is cleared (the cache content is unknown).
  Error accept_step(Result<const float*> logits);
  // Whether a step started ahead (AsyncStep) is waiting to be collected.
  bool stepping_ahead() const;
  // Collects the steps started ahead, if any (the helper samples no further token): accepts the
  // last one, drops the tokens sampled ahead that were not returned.
  Error drain();
  // Samples the token after logits_ and decides what follows (next()'s work once the step is
  // in): returns the token (*launch: start its step ahead now), kDone (done_reason_ says why;
  // finish() is the caller's) or the sampler's error. Runs on the owner's thread, or on the
  // helper's while it steps ahead (AsyncStep; the owner then touches none of this state).
  Result<int64_t> sample_next(bool* launch);
  // next()'s work once a step is in (or with no step yet): sample_next, start the token's step
  // ahead when it says so, conclude.
  Result<int64_t> sample_and_launch();
  // The next outcome of the steps started ahead (stepping_ahead()): waits for it (block) or takes
  // it only if it is there (false when not), then makes next()'s result of it.
  bool collect(bool block, Result<int64_t>* token);
  // next()'s result from sample_next's: finishes the generation on kDone, ends it on an error;
  // a token counts as returned, with the generation's decode time at its sampling (decode_ms).
  Result<int64_t> conclude(Result<int64_t> token, StopReason reason, double decode_ms);

  std::unique_ptr<TextDecoder> decoder_;
  Sampler sampler_;
  GenerateConfig config_;
  Stats stats_;
  std::atomic<bool> stop_requested_{false};

  std::vector<int64_t> cached_;   // ids whose K/V are in the cache, positions [0, size)
  const float* logits_ = nullptr; // logits after the last cached token
  int64_t pending_ = kDone;       // sampled and returned but not yet fed
  bool active_ = false;
  Clock::time_point start_time_;
  int64_t batched_steps_sum_ = 0;  // sum over decode steps of the sessions sharing each
  Clock::time_point first_token_time_;  // when the first token of this generation was sampled
  // How many tokens the helper may sample ahead of the caller (EMBER_STEP_AHEAD, read at creation;
  // 0: every step runs inside next()).
  static constexpr long kMaxAheadDepth = 64;
  size_t ahead_depth_ = 4;
  size_t prompt_len_ = 0;               // the generation's prompt length
  int64_t returned_ = 0;                // tokens next() returned in this generation
  double returned_decode_ms_ = 0;       // Stats::decode_ms when the last of them was sampled
  StopReason done_reason_ = StopReason::kNone;  // why sample_next last returned kDone
  std::unique_ptr<AsyncStep> ahead_;    // made on the first step started ahead
  bool launch_deferred_ = false;        // the first token's step: started by the next next() call
};

}  // namespace runners
}  // namespace ember
