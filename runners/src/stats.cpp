#include "ember/runners/stats.h"

#include <sys/resource.h>

namespace ember {
namespace runners {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kNone: return "none";
    case StopReason::kEos: return "eos";
    case StopReason::kStopToken: return "stop_token";
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kContextFull: return "context_full";
    case StopReason::kStopped: return "stopped";
  }
  return "unknown";
}

int64_t peak_rss_bytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
#if defined(__APPLE__)
  return static_cast<int64_t>(usage.ru_maxrss);  // bytes on macOS
#else
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
#endif
}

void Stats::finish() {
  prefill_tokens_per_s = prefill_ms > 0 ? prefill_tokens * 1000.0 / prefill_ms : 0.0;
  decode_tokens_per_s = decode_ms > 0 ? decode_steps * 1000.0 / decode_ms : 0.0;
  peak_rss_bytes = ::ember::runners::peak_rss_bytes();
}

}  // namespace runners
}  // namespace ember
