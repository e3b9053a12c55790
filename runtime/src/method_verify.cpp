// Load-time dataflow proof for a method: values are produced before they are read, and no
// kernel reads arena bytes it also writes.
//
// Without it a hostile file can place a consumer before the view that feeds it (the consumer
// then reads whatever the alias pointed at last: a previous call's freed input), read an
// arena slice nothing has written, or make a copy kernel's source and destination overlap.
#include <algorithm>
#include <cinttypes>
#include <vector>

#include "ember/runtime/method.h"
#include "method_instr.h"
#include "program_generated.h"

namespace ember {

namespace {

struct Slice {
  const uint8_t* begin;
  const uint8_t* end;
};

bool overlaps(const Slice& a, const Slice& b) { return a.begin < b.end && b.begin < a.end; }

}  // namespace

Error Method::verify_dataflow(const std::vector<int8_t>& storage) const {
  const size_t nv = values_.size();
  auto index_of = [&](const EValue* v) { return static_cast<size_t>(v - values_.data()); };
  auto storage_at = [&](size_t v) { return static_cast<fb::Storage>(storage[v]); };
  // produced[v]: a tensor whose bytes are valid when the instruction being checked runs.
  std::vector<bool> produced(nv, false);
  // root[v]: the value whose memory a tensor uses (itself, or for a view what it aliases).
  std::vector<size_t> root(nv);
  for (size_t v = 0; v < nv; ++v) {
    root[v] = v;
    if (storage[v] < 0) {
      produced[v] = true;  // scalars, lists, strings: fixed in the file or written by sym kernels
      continue;
    }
    const fb::Storage s = storage_at(v);
    produced[v] = s == fb::Storage::Constant || s == fb::Storage::State;
  }
  for (const EValue* in : inputs_) produced[index_of(in)] = true;

  // The tensors an argument slot stands for: itself, or the items of a tensor list.
  auto tensors_of = [&](const EValue* v, std::vector<size_t>* out) {
    out->clear();
    if (v->tag == Tag::kTensor) out->push_back(index_of(v));
    if (v->tag == Tag::kTensorList) {
      for (int32_t e = 0; e < v->count; ++e) {
        if (v->items[e] != nullptr) out->push_back(index_of(v->items[e]));
      }
    }
  };
  auto arena_slice = [&](size_t v) -> Slice {
    const Tensor& t = values_[v].tensor;
    const uint8_t* b = static_cast<const uint8_t*>(t.data);
    return Slice{b, b + std::max<size_t>(t.capacity, 1)};
  };

  std::vector<size_t> tensors, reads;
  for (size_t k = 0; k < instrs_.size(); ++k) {
    const Instr& in = instrs_[k];
    const std::string what = instruction_info(k).name;
    const int nread = in.nargs - in.nouts;
    reads.clear();
    for (int a = 0; a < nread; ++a) {
      tensors_of(in.args[a], &tensors);
      for (size_t t : tensors) {
        EMBER_CHECK(produced[t], ErrorCode::kInvalidProgram,
                    "instruction %zu (%s) reads value %zu before any instruction produces it (a consumer placed "
                    "before its producer, or an unbound %s tensor); the file is corrupted",
                    k, what.c_str(), t, fb::EnumNameStorage(storage_at(t)));
        reads.push_back(t);
      }
    }
    for (int a = nread; a < in.nargs; ++a) {
      tensors_of(in.args[a], &tensors);
      for (size_t t : tensors) {
        if (in.view) {
          // A view aliases its first argument (Tensor::alias in the view kernels).
          const EValue* src = nread > 0 ? in.args[0] : nullptr;
          root[t] = src != nullptr && src->tag == Tag::kTensor ? root[index_of(src)] : t;
        } else if (storage_at(t) == fb::Storage::Arena) {
          for (size_t r : reads) {
            const size_t rr = root[r];
            if (rr == t || storage[rr] < 0 || storage_at(rr) != fb::Storage::Arena) continue;
            EMBER_CHECK(!overlaps(arena_slice(rr), arena_slice(t)), ErrorCode::kInvalidProgram,
                        "instruction %zu (%s) writes value %zu into arena bytes that overlap value %zu, which it "
                        "reads; the memory plan is corrupted",
                        k, what.c_str(), t, rr);
          }
        }
        produced[t] = true;
      }
    }
  }
  for (size_t o = 0; o < outputs_.size(); ++o) {
    tensors_of(outputs_[o], &tensors);
    for (size_t t : tensors) {
      EMBER_CHECK(produced[t], ErrorCode::kInvalidProgram,
                  "output %zu of method '%s' (value %zu) is never produced by any instruction", o, name_.c_str(), t);
    }
  }
  return Error::ok();
}

}  // namespace ember
