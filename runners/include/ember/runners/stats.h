// Stats of a runner: load, prefill, time to first token, decode, sampling, memory.
#pragma once

#include <chrono>
#include <cstdint>

namespace ember {
namespace runners {

// Why a generation ended.
enum class StopReason : int {
  kNone = 0,        // still running (or never started)
  kEos,             // the model emitted one of llm.eos_ids
  kStopToken,       // one of GenerateConfig::stop_ids
  kMaxTokens,       // max_new_tokens were generated
  kContextFull,     // the cache is full (position == llm.max_context_len)
  kStopped,         // stop() was called or the token callback returned false
};

const char* stop_reason_name(StopReason r);  // "eos", "stop_token", "max_tokens", ...

struct Stats {
  double load_ms = 0;              // Program load + method load
  int64_t prompt_tokens = 0;       // tokens in the last prompt
  int64_t reused_tokens = 0;       // prompt prefix already in the cache (not recomputed)
  int64_t prefill_tokens = 0;      // prompt tokens actually computed
  double prefill_ms = 0;
  double prefill_tokens_per_s = 0;
  double time_to_first_token_ms = 0;  // start of generate -> first token sampled
  int64_t generated_tokens = 0;    // tokens returned (EOS / stop ids excluded)
  int64_t decode_steps = 0;        // single-token forward calls
  double decode_ms = 0;            // wall time from the first token sampled to the last (steps overlap the caller)
  double decode_tokens_per_s = 0;
  double decode_batch_mean = 0;    // sessions per decode step on average, this one included (1: alone)
  double sampling_ms = 0;
  int64_t peak_rss_bytes = 0;      // getrusage(RUSAGE_SELF).ru_maxrss
  StopReason stop_reason = StopReason::kNone;

  void finish();  // derives the rates and samples peak RSS
};

int64_t peak_rss_bytes();

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace runners
}  // namespace ember
