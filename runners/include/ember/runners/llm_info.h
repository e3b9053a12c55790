// LlmInfo: the `llm.*` metadata contract of an exported LLM program, read and checked once.
//
// A program is an LLM program when it has a `forward` method and at least `llm.vocab_size`,
// `llm.max_seq_len` and `llm.max_context_len`; anything else fails with kInvalidArgument
// naming the missing key and how to produce a valid file (ember.llm.export_llm).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/runtime/error.h"
#include "ember/runtime/program.h"

namespace ember {
namespace runners {

struct LlmInfo {
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;       // largest T one forward call accepts (prefill chunk)
  int64_t max_context_len = 0;   // cache length: positions [0, max_context_len)
  int64_t bos_id = -1;           // -1 when the model has none
  int64_t pad_id = -1;
  std::vector<int64_t> eos_ids;  // any of them ends generation
  std::string family;
  bool logits_all = false;       // forward returns [1, T, vocab] instead of [1, vocab]

  static Result<LlmInfo> from_program(const Program& program);
};

}  // namespace runners
}  // namespace ember
