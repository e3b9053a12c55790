// ProgramState: per-session instances of a program's state (see state.h).
#include "ember/runtime/state.h"

#include <sys/mman.h>

#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "ember/runtime/memory_limit.h"
#include "ember/runtime/program.h"
#include "program_generated.h"

namespace ember {

namespace {

// Copies the file's initial value into `t`, or zeroes it; `zero` false skips tensors without an
// initial value (a fresh calloc'ed block is zero already, and untouched pages stay uncommitted).
void init_tensor(const Program& program, uint32_t index, Tensor& t, bool zero) {
  const int seg_index = program.root()->state()->Get(index)->init_segment();
  if (seg_index >= 0) {
    auto seg = program.segment(static_cast<uint32_t>(seg_index));  // size verified at load
    if (seg.ok()) std::memcpy(t.data, seg.value().data(), t.capacity);
  } else if (zero) {
    std::memset(t.data, 0, t.capacity);
  }
}

}  // namespace

ProgramState::~ProgramState() { std::free(block_); }

void ProgramState::reset() {
  for (size_t i = 0; i < tensors_.size(); ++i) init_tensor(*program_, static_cast<uint32_t>(i), tensors_[i].tensor, true);
}

Result<std::shared_ptr<ProgramState>> Program::new_state() const {
  std::shared_ptr<ProgramState> s(new ProgramState());
  s->program_ = shared_from_this();
  s->tensors_ = state_;  // names, dtypes, shapes, capacities (verified at load); data rebound below
  if (state_.empty()) return s;
  std::vector<size_t> offsets;
  size_t placed = 0;
  for (const StateInfo& info : state_) {
    offsets.push_back(placed);
    placed += (info.tensor.capacity + 63) / 64 * 64;
  }
  // Same layout as the default state: one block, 2 MiB aligned, huge pages advised.
  constexpr size_t kHuge = size_t{1} << 21;
  EMBER_TRY(check_memory(placed + kHuge, "a session's program state (its KV cache)"));
  s->block_ = static_cast<uint8_t*>(std::calloc(placed + kHuge, 1));
  EMBER_CHECK(s->block_ != nullptr, ErrorCode::kOutOfMemory,
              "cannot allocate %zu bytes for a new program state (a session's KV cache); use fewer sessions "
              "or export with a smaller max_context_len",
              placed);
  s->nbytes_ = placed;
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(s->block_) + kHuge - 1) & ~(kHuge - 1));
#ifdef MADV_HUGEPAGE
  if (placed >= kHuge) madvise(base, (placed + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);  // a hint only
#endif
  for (size_t i = 0; i < s->tensors_.size(); ++i) {
    s->tensors_[i].tensor.data = base + offsets[i];
    init_tensor(*this, static_cast<uint32_t>(i), s->tensors_[i].tensor, false);
  }
  return s;
}

}  // namespace ember
