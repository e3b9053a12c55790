#include "ember/runtime/memory_limit.h"

#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdlib>
#include <cstdio>

namespace ember {

namespace {

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{16} << 30;  // unknown: 16 GiB
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

uint64_t default_limit() {
  const char* env = std::getenv("EMBER_MEMORY_LIMIT");
  uint64_t v = 0;
  if (env != nullptr && env[0] != '\0') {
    if (parse_byte_size(env, &v) && v > 0) return v;
    std::fprintf(stderr, "ember: ignoring EMBER_MEMORY_LIMIT='%s' (expected bytes, e.g. 4G or 512M)\n", env);
  }
  return physical_memory();
}

std::atomic<uint64_t>& limit_slot() {
  static std::atomic<uint64_t> limit{default_limit()};
  return limit;
}

}  // namespace

bool parse_byte_size(const char* text, uint64_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  uint64_t v = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9'; ++p) {
    const uint64_t d = static_cast<uint64_t>(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  int shift = 0;
  switch (*p) {
    case '\0': break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: return false;
  }
  if (*p != '\0') {
    ++p;
    if (*p == 'i') ++p;                // "GiB", "Gi"
    if (*p == 'B' || *p == 'b') ++p;   // "GB", "MB"
    if (*p != '\0') return false;
  }
  if (shift > 0 && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

uint64_t memory_limit() { return limit_slot().load(std::memory_order_relaxed); }

void set_memory_limit(uint64_t bytes) {
  limit_slot().store(bytes == 0 ? default_limit() : bytes, std::memory_order_relaxed);
}

Error check_memory(uint64_t bytes, const char* what) {
  const uint64_t limit = memory_limit();
  if (bytes <= limit) return Error::ok();
  return Error::make(ErrorCode::kOutOfMemory,
                     "%s needs %" PRIu64 " bytes, above the memory limit of %" PRIu64
                     " bytes (a corrupted file, or a model larger than this limit: raise it with "
                     "ember.runtime.set_memory_limit(bytes) or EMBER_MEMORY_LIMIT=SIZE if the file is trusted)",
                     what, bytes, limit);
}

Error check_memory(uint64_t count, uint64_t element_size, const char* what) {
  if (element_size != 0 && count > UINT64_MAX / element_size) {
    return Error::make(ErrorCode::kOutOfMemory,
                       "%s needs %" PRIu64 " elements of %" PRIu64 " bytes, more than 2^64 bytes, above the memory "
                       "limit of %" PRIu64 " bytes (the file is corrupted)",
                       what, count, element_size, memory_limit());
  }
  return check_memory(count * element_size, what);
}

}  // namespace ember
