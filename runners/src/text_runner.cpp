#include "ember/runners/text_runner.h"

#include <algorithm>
#include <cstdlib>

#include "async_step.h"
#include "ember/runtime/memory_limit.h"
#include "ember/runtime/thread_pool.h"

namespace ember {
namespace runners {

Error GenerateConfig::validate() const {
  EMBER_CHECK_ARG(max_new_tokens >= 1, "max_new_tokens must be >= 1, got %lld", static_cast<long long>(max_new_tokens));
  return sampling.validate();
}

TextRunner::TextRunner(std::unique_ptr<TextDecoder> decoder)
    : decoder_(std::move(decoder)), sampler_(decoder_->info().vocab_size) {
  cached_.reserve(static_cast<size_t>(decoder_->info().max_context_len));
  const char* ahead = std::getenv("EMBER_STEP_AHEAD");
  if (ahead != nullptr && ahead[0] != '\0') {
    char* end = nullptr;
    const long depth = std::strtol(ahead, &end, 10);
    if (*end == '\0' && depth >= 0) ahead_depth_ = static_cast<size_t>(std::min(depth, kMaxAheadDepth));
  }
}

Result<std::unique_ptr<TextRunner>> TextRunner::load(const std::string& path, int threads, LoadMode mode) {
  EMBER_CHECK_ARG(threads >= 0, "threads must be >= 0 (0 = one per physical core), got %d", threads);
  const Clock::time_point t0 = Clock::now();
  if (threads > 0) {
    set_num_threads(threads);  // clamped to the CPUs this process may use
    Error e = thread_pool_error();
    if (e) return e;
  }
  auto program = Program::load_file(path, mode);
  if (!program.ok()) return program.error();
  auto runner = create(std::move(program).value());
  if (!runner.ok()) return runner.error();
  (*runner)->stats_.load_ms = ms_since(t0);
  return runner;
}

Result<std::unique_ptr<TextRunner>> TextRunner::create(std::shared_ptr<Program> program,
                                                      std::shared_ptr<ProgramState> state,
                                                      std::shared_ptr<StepBatcher> batcher) {
  const Clock::time_point t0 = Clock::now();
  if (batcher == nullptr) batcher = std::make_shared<StepBatcher>();
  auto decoder = TextDecoder::create(std::move(program), "forward", std::move(state), std::move(batcher));
  if (!decoder.ok()) return decoder.error();
  // The sampler keeps three vocabulary-sized buffers and the runner one token id per position;
  // both sizes come from the file's metadata (TextDecoder checked them against the method).
  const LlmInfo& info = (*decoder)->info();
  EMBER_TRY(check_memory(static_cast<uint64_t>(info.vocab_size), Sampler::kBytesPerToken,
                         "the sampler's buffers for llm.vocab_size tokens"));
  EMBER_TRY(check_memory(static_cast<uint64_t>(info.max_context_len), sizeof(int64_t),
                         "the token history for llm.max_context_len positions"));
  std::unique_ptr<TextRunner> runner(new TextRunner(std::move(decoder).value()));
  runner->stats_.load_ms = ms_since(t0);
  return runner;
}

Result<std::unique_ptr<TextRunner>> TextRunner::new_session(int threads) const {
  EMBER_CHECK_ARG(threads >= 0, "a session's threads must be >= 0 (0 = the whole pool), got %d", threads);
  std::shared_ptr<Program> program = decoder_->shared_program();
  auto state = program->new_state();
  if (!state.ok()) return state.error();
  auto runner = create(std::move(program), std::move(state).value(), decoder_->batcher());
  if (runner.ok()) (*runner)->decoder_->set_threads(threads);
  return runner;
}

TextRunner::~TextRunner() {
  (void)drain();  // the helper must be done with the decoder before either goes
  set_active(false);
}

Error TextRunner::accept_step(Result<const float*> logits) {
  if (!logits.ok()) {
    cached_.clear();  // the cache content is unknown now
    pending_ = kDone;
    return logits.error().with_context("decode");
  }
  logits_ = *logits;
  cached_.push_back(pending_);
  pending_ = kDone;
  ++stats_.decode_steps;
  batched_steps_sum_ += static_cast<int64_t>(decoder_->last_batch_size());
  return Error::ok();
}

bool TextRunner::stepping_ahead() const { return ahead_ != nullptr && ahead_->launched(); }

Error TextRunner::drain() {
  launch_deferred_ = false;  // a step not started yet: its token is simply not fed
  if (!stepping_ahead()) return Error::ok();
  Error error = Error::ok();
  while (stepping_ahead()) {
    AsyncStep::Outcome o = ahead_->wait(false);
    if (o.advanced) continue;  // advance accepted its step; its token was never returned (below)
    Error e = accept_step(std::move(o.step));
    if (e && !error) error = std::move(e);
  }
  // Tokens the helper sampled ahead that next() never returned are not part of the generation:
  // neither counted nor left in cached_ (their cache rows are simply overwritten later).
  if (stats_.generated_tokens > returned_) {
    stats_.generated_tokens = returned_;
    stats_.decode_ms = returned_decode_ms_;
  }
  cached_.resize(std::min(cached_.size(), prompt_len_ + static_cast<size_t>(returned_)));
  return error;
}

void TextRunner::set_active(bool active) {
  if (active == active_) return;
  active_ = active;
  if (decoder_->batcher() == nullptr) return;
  if (active) decoder_->batcher()->enter();
  else decoder_->batcher()->leave();
}

bool TextRunner::is_stop_id(int64_t token) const {
  return std::find(config_.stop_ids.begin(), config_.stop_ids.end(), token) != config_.stop_ids.end();
}

void TextRunner::finish(StopReason reason) {
  (void)drain();  // a step started ahead completes (its token stays cached); an error here only clears the cache
  set_active(false);
  if (stats_.decode_steps > 0) {
    stats_.decode_batch_mean = static_cast<double>(batched_steps_sum_) / static_cast<double>(stats_.decode_steps);
  }
  stats_.stop_reason = reason;
  stats_.finish();
}

Error TextRunner::start(const int64_t* prompt, size_t n, const GenerateConfig& config) {
  const LlmInfo& info = decoder_->info();
  (void)drain();  // an abandoned generation's step started ahead: its cache row is valid
  set_active(false);
  pending_ = kDone;
  batched_steps_sum_ = 0;
  EMBER_TRY(config.validate());
  EMBER_CHECK_ARG(n >= 1, "the prompt is empty; pass at least one token (e.g. the BOS id %lld)",
                  static_cast<long long>(info.bos_id));
  EMBER_CHECK_ARG(static_cast<int64_t>(n) <= info.max_context_len,
                  "the prompt has %zu tokens but the context holds %lld (llm.max_context_len); shorten the "
                  "prompt or export with a larger max_context_len", n, static_cast<long long>(info.max_context_len));
  for (size_t i = 0; i < n; ++i) {
    EMBER_CHECK_ARG(prompt[i] >= 0 && prompt[i] < info.vocab_size,
                    "prompt token id %lld at index %zu is outside the vocabulary [0, %lld)",
                    static_cast<long long>(prompt[i]), i, static_cast<long long>(info.vocab_size));
  }
  EMBER_TRY(sampler_.configure(config.sampling));
  config_ = config;
  stop_requested_.store(false, std::memory_order_relaxed);

  const double load_ms = stats_.load_ms;
  stats_ = Stats();
  stats_.load_ms = load_ms;
  stats_.prompt_tokens = static_cast<int64_t>(n);
  prompt_len_ = n;
  returned_ = 0;
  returned_decode_ms_ = 0;
  start_time_ = Clock::now();

  // Keep the common prefix; recompute at least the last two prompt tokens (the one of a one-token
  // prompt): a prompt's last token then always comes out of a prefill chunk of two rows or more, as in
  // a fresh prefill (below), never out of the one-row decode path, which rounds differently. With
  // int8 activations a repeated greedy request drifted from the fresh answer within 48 tokens: SmolLM2
  // `8da4w` 6 of 8 prompts, `gguf-a8` 4 of 8; none with two rows recomputed.
  size_t keep = 0;
  const size_t limit = std::min(cached_.size(), n - std::min<size_t>(n, 2));
  while (keep < limit && cached_[keep] == prompt[keep]) ++keep;
  cached_.resize(keep);
  stats_.reused_tokens = static_cast<int64_t>(keep);

  const Clock::time_point t0 = Clock::now();
  for (size_t begin = keep; begin < n;) {
    size_t len = std::min(n - begin, static_cast<size_t>(info.max_seq_len));
    if (n - begin - len == 1 && len > 1) --len;  // no last chunk of one row (above): 128 + 1 -> 127 + 2
    auto logits = decoder_->step(prompt + begin, static_cast<int64_t>(len), static_cast<int64_t>(begin));
    if (!logits.ok()) {
      cached_.clear();  // the cache content is unknown now
      return logits.error().with_context("prefill");
    }
    logits_ = *logits;
    cached_.insert(cached_.end(), prompt + begin, prompt + begin + len);
    begin += len;
  }
  stats_.prefill_ms = ms_since(t0);
  stats_.prefill_tokens = static_cast<int64_t>(n - keep);
  set_active(true);
  return Error::ok();
}

Result<int64_t> TextRunner::next() {
  if (!active_) return kDone;
  if (stop_requested_.load(std::memory_order_relaxed)) {
    finish(StopReason::kStopped);
    return kDone;
  }
  if (launch_deferred_) {
    launch_deferred_ = false;
    if (ahead_->launch(pending_, static_cast<int64_t>(cached_.size()))) ahead_depth_ = 0;  // no helper: steps below
  }
  if (stepping_ahead()) {  // first: the helper owns pending_ and the rest until its chain ends
    Result<int64_t> token{kDone};
    collect(true, &token);
    return token;
  }
  const LlmInfo& info = decoder_->info();
  if (pending_ != kDone) {
    if (stats_.generated_tokens >= config_.max_new_tokens) {
      finish(StopReason::kMaxTokens);
      return kDone;
    }
    if (static_cast<int64_t>(cached_.size()) >= info.max_context_len) {
      finish(StopReason::kContextFull);
      return kDone;
    }
    Error e = accept_step(decoder_->step(&pending_, 1, static_cast<int64_t>(cached_.size())));
    if (e) {
      set_active(false);
      return e;
    }
  }
  return sample_and_launch();
}

bool TextRunner::try_next(Result<int64_t>* token) {
  return active_ && !stop_requested_.load(std::memory_order_relaxed) && stepping_ahead() && collect(false, token);
}

bool TextRunner::collect(bool block, Result<int64_t>* token) {
  AsyncStep::Outcome o;
  if (block) o = ahead_->wait(true);
  else if (!ahead_->poll(&o)) return false;
  if (o.advanced) {  // the helper sampled it
    *token = conclude(std::move(o.result.token), o.result.reason, o.result.decode_ms);
    return true;
  }
  Error e = accept_step(std::move(o.step));
  if (e) {
    set_active(false);
    *token = e;
    return true;
  }
  *token = sample_and_launch();
  return true;
}

Result<int64_t> TextRunner::sample_and_launch() {
  bool launch = false;
  Result<int64_t> token = sample_next(&launch);
  // Read before the launch: from then on the helper writes them.
  const StopReason reason = done_reason_;
  const double decode_ms = stats_.decode_ms;
  if (launch) {
    if (ahead_ == nullptr) {
      // From here the helper samples each token and starts its step itself, up to ahead_depth_
      // tokens ahead of this thread.
      ahead_ = std::make_unique<AsyncStep>(
          decoder_.get(),
          [this](Result<const float*>* step, AsyncStep::Advanced* out) {
            if (stop_requested_.load(std::memory_order_relaxed)) return false;  // next() stops it
            Error e = accept_step(std::move(*step));
            if (e) {
              out->token = e;
              return true;
            }
            out->token = sample_next(&out->launch);
            out->reason = done_reason_;
            out->decode_ms = stats_.decode_ms;
            out->next_token = pending_;
            out->next_pos = static_cast<int64_t>(cached_.size());
            return true;
          },
          ahead_depth_);
    }
    // The first token's step starts at the caller's next next() call instead: the caller, which
    // has just run the prefill, hands the token on (a piece to stream) before it waits again, where
    // a helper woken now took its core for the whole step (the scheduler favours the thread that
    // slept). SmolLM2 `8da4w-kv8`, 2-core Zen 5: the first streamed piece 5.8 ms after the
    // generation's start instead of 9.4; `ember serve` with one client, time to first token p50
    // 8.1 ms instead of 11.0 (two servers alternating, 6 rounds); the second token no later.
    if (stats_.generated_tokens == 1) launch_deferred_ = true;
    else if (ahead_->launch(pending_, static_cast<int64_t>(cached_.size()))) ahead_depth_ = 0;  // no helper: steps here
  }
  return conclude(std::move(token), reason, decode_ms);
}

Result<int64_t> TextRunner::sample_next(bool* launch) {
  *launch = false;
  const LlmInfo& info = decoder_->info();
  const Clock::time_point ts = Clock::now();
  auto token = sampler_.sample(logits_, cached_.data(), cached_.size());
  const Clock::time_point te = Clock::now();
  if (!token.ok()) return token.error();
  stats_.sampling_ms += std::chrono::duration<double, std::milli>(te - ts).count();
  // Decode time is wall time from the first token to the latest: with steps started ahead, the
  // caller's work between tokens overlaps the steps, so the sum of next() calls would undercount.
  if (stats_.decode_steps > 0) {
    stats_.decode_ms = std::chrono::duration<double, std::milli>(te - first_token_time_).count();
  } else {
    stats_.time_to_first_token_ms = std::chrono::duration<double, std::milli>(te - start_time_).count();
    first_token_time_ = te;
  }
  const int64_t id = *token;
  if (!config_.ignore_eos && std::find(info.eos_ids.begin(), info.eos_ids.end(), id) != info.eos_ids.end()) {
    done_reason_ = StopReason::kEos;
    return kDone;
  }
  if (is_stop_id(id)) {
    done_reason_ = StopReason::kStopToken;
    return kDone;
  }
  pending_ = id;
  ++stats_.generated_tokens;
  *launch = ahead_depth_ > 0 && stats_.generated_tokens < config_.max_new_tokens &&
            static_cast<int64_t>(cached_.size()) < info.max_context_len;
  return id;
}

Result<int64_t> TextRunner::conclude(Result<int64_t> token, StopReason reason, double decode_ms) {
  if (!token.ok()) {
    set_active(false);
    return token.error();
  }
  if (*token == kDone) {
    finish(reason);
  } else {
    ++returned_;
    returned_decode_ms_ = decode_ms;
  }
  return token;
}

Result<GenerateResult> TextRunner::generate(const std::vector<int64_t>& prompt, const GenerateConfig& config,
                                            const TokenCallback& on_token) {
  EMBER_TRY(start(prompt.data(), prompt.size(), config));
  GenerateResult result;
  const int64_t most = std::min<int64_t>(config.max_new_tokens, decoder_->info().max_context_len);
  result.tokens.reserve(static_cast<size_t>(most));
  for (;;) {
    auto token = next();
    if (!token.ok()) return token.error();
    if (*token == kDone) break;
    result.tokens.push_back(*token);
    if (on_token && !on_token(*token)) {
      finish(StopReason::kStopped);
      break;
    }
  }
  result.stop_reason = stats_.stop_reason;
  return result;
}

void TextRunner::reset() {
  (void)drain();
  set_active(false);
  pending_ = kDone;
  cached_.clear();
  decoder_->reset_state();
}

void TextRunner::release_cache() {
  (void)drain();
  set_active(false);
  pending_ = kDone;
  cached_.clear();  // the caller now owns what the cache holds
}

Result<const float*> TextRunner::forward(const int64_t* tokens, int64_t n, int64_t pos) {
  release_cache();
  return decoder_->step(tokens, n, pos);
}

Error TextRunner::forward_batch(TextRunner* const* runners, size_t n, const int64_t* const* tokens,
                                const int64_t* counts, const int64_t* positions, const float** logits) {
  std::vector<TextDecoder*> decoders(n);
  for (size_t i = 0; i < n; ++i) {
    EMBER_CHECK_ARG(runners[i] != nullptr, "forward_batch: runner %zu is null", i);
    runners[i]->release_cache();
    decoders[i] = runners[i]->decoder_.get();
  }
  return TextDecoder::step_batch(decoders.data(), n, tokens, counts, positions, logits);
}

}  // namespace runners
}  // namespace ember
