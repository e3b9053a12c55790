#include "ember/runners/llm_info.h"

namespace ember {
namespace runners {
namespace {

Result<int64_t> require_int(const Program& program, const char* key) {
  const MetaEntry* e = program.find_metadata(key);
  if (e == nullptr) {
    return Error::make(ErrorCode::kInvalidArgument,
                       "this file is not an LLM program: its metadata has no '%s'; "
                       "export the model with ember.llm.export_llm (or `ember export`)",
                       key);
  }
  EMBER_CHECK_ARG(e->kind == MetaKind::kInt, "metadata '%s' must be an int; re-export the model", key);
  return e->i;
}

int64_t optional_int(const Program& program, const char* key, int64_t fallback) {
  const MetaEntry* e = program.find_metadata(key);
  return e != nullptr && e->kind == MetaKind::kInt ? e->i : fallback;
}

}  // namespace

Result<LlmInfo> LlmInfo::from_program(const Program& program) {
  LlmInfo info;
  auto vocab = require_int(program, "llm.vocab_size");
  if (!vocab.ok()) return vocab.error();
  auto seq = require_int(program, "llm.max_seq_len");
  if (!seq.ok()) return seq.error();
  auto ctx = require_int(program, "llm.max_context_len");
  if (!ctx.ok()) return ctx.error();
  info.vocab_size = *vocab;
  info.max_seq_len = *seq;
  info.max_context_len = *ctx;
  EMBER_CHECK(info.vocab_size > 0 && info.vocab_size <= (int64_t{1} << 31), ErrorCode::kInvalidProgram,
              "llm.vocab_size is %lld; expected a positive count below 2^31", static_cast<long long>(info.vocab_size));
  EMBER_CHECK(info.max_seq_len > 0 && info.max_context_len > 0 && info.max_seq_len <= info.max_context_len,
              ErrorCode::kInvalidProgram, "llm.max_seq_len (%lld) and llm.max_context_len (%lld) must be positive "
              "with max_seq_len <= max_context_len", static_cast<long long>(info.max_seq_len),
              static_cast<long long>(info.max_context_len));
  info.bos_id = optional_int(program, "llm.bos_id", -1);
  info.pad_id = optional_int(program, "llm.pad_id", -1);
  if (const MetaEntry* e = program.find_metadata("llm.eos_ids")) {
    if (e->kind == MetaKind::kIntList) info.eos_ids = e->ints;
    if (e->kind == MetaKind::kInt) info.eos_ids = {e->i};
  }
  if (const MetaEntry* e = program.find_metadata("llm.family")) {
    if (e->kind == MetaKind::kString) info.family = std::string(e->bytes);
  }
  if (const MetaEntry* e = program.find_metadata("llm.logits")) {
    info.logits_all = e->kind == MetaKind::kString && e->bytes == "all";
  }
  return info;
}

}  // namespace runners
}  // namespace ember
