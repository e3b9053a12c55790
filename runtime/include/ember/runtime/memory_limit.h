// Memory limit: the most bytes that any one allocation sized by a program file may ask for.
//
// A file sizes several allocations: program state (the KV cache), each method's activation
// arena, a delegate's intermediate values, the runner's sampler buffers (llm.vocab_size) and
// token history (llm.max_context_len). Each is checked with `check_memory` before it is made,
// so a corrupted or hostile file that declares gigabytes gets a clean kOutOfMemory error
// naming what was too large, instead of exhausting the process.
//
// The limit is process-wide. Default: the machine's physical memory, or the environment
// variable EMBER_MEMORY_LIMIT when set (bytes, or a number with a K/M/G/T suffix, powers of
// 1024). A caller that knows better raises or lowers it with `set_memory_limit` (Python:
// `ember.runtime.set_memory_limit`). Thread-safe.
#pragma once

#include <cstdint>

#include "ember/runtime/error.h"

namespace ember {

// The limit in bytes now in force.
uint64_t memory_limit();

// Sets the limit (bytes > 0); 0 restores the default (EMBER_MEMORY_LIMIT or physical memory).
void set_memory_limit(uint64_t bytes);

// Ok when `bytes` <= memory_limit(); else kOutOfMemory: "<what> needs N bytes, above the
// memory limit of M bytes ...", with how to raise the limit.
Error check_memory(uint64_t bytes, const char* what);

// The same for `count` elements of `element_size` bytes, without overflowing the product
// (a file's 2^62 positions times 8 bytes is refused, not wrapped to 0).
Error check_memory(uint64_t count, uint64_t element_size, const char* what);

// Parses "123", "64M", "2G" (powers of 1024); false on anything else or on overflow.
bool parse_byte_size(const char* text, uint64_t* out);

}  // namespace ember
