// Method loading (value table, instruction table, delegates, arena) and the interpreter loop.
#include "ember/runtime/method.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "ember/runtime/memory_limit.h"
#include "ember/runtime/program.h"
#include "method_instr.h"
#include "program_generated.h"

namespace ember {


namespace {

// Guards the arena size arithmetic; the allocation itself is bounded by memory_limit().
constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 50;
constexpr uint64_t kArenaAlign = 64;  // export/memory_planning.py ALIGN

bool in_bounds(uint64_t off, uint64_t len, uint64_t total) { return off <= total && len <= total - off; }

template <typename Vec>
uint32_t vsize(const Vec* v) {
  return v == nullptr ? 0 : v->size();
}

}  // namespace

Method::Method() = default;

Method::~Method() {
  if (profile_) print_profile();
  for (auto& d : delegates_) {
    if (d.backend != nullptr && d.handle != nullptr) d.backend->destroy(d.handle);
  }
  std::free(arena_);
}

Error Method::load(std::shared_ptr<Program> program, uint32_t index, std::shared_ptr<ProgramState> session_state) {
  program_ = std::move(program);
  state_ = std::move(session_state);
  const fb::Method* m = program_->root()->methods()->Get(index);
  name_ = m->name() != nullptr ? m->name()->str() : "";

  // Arena: one 64-byte-aligned allocation, made once the values have shown how much of it
  // they use, and never touched until kernels write it.
  EMBER_CHECK(m->arena_size() <= kMaxArenaBytes, ErrorCode::kInvalidProgram,
              "arena size %" PRIu64 " bytes: the file is corrupted", m->arena_size());
  arena_size_ = static_cast<size_t>(m->arena_size());
  uint64_t arena_extent = 0;                          // bytes the values use
  std::vector<std::pair<uint32_t, uint64_t>> arena_slices;  // (value, offset) placed after allocation

  // Values.
  const auto* vals = m->values();
  const uint32_t nv = vsize(vals);
  values_.assign(nv, EValue());
  auto check_index = [&](int32_t k, const char* what) -> Error {
    EMBER_CHECK(k >= 0 && static_cast<uint32_t>(k) < nv, ErrorCode::kInvalidProgram,
                "%s refers to value %d, outside the %u values of method '%s'", what, k, nv, name_.c_str());
    return Error::ok();
  };
  const auto& state = state_ != nullptr ? state_->tensors() : program_->state();  // a session's or the default
  for (uint32_t i = 0; i < nv; ++i) {
    const fb::Value* fv = vals->Get(i);
    EValue& v = values_[i];
    // The verifier accepts a union tag without a value: every *_as_X() below relies on this check.
    EMBER_CHECK(fv->v_type() == fb::ValueKind::NONE || fv->v() != nullptr, ErrorCode::kInvalidProgram,
                "value %u: kind %d has no data", i, static_cast<int>(fv->v_type()));
    switch (fv->v_type()) {
      case fb::ValueKind::NONE:
      case fb::ValueKind::Null:
        v.tag = Tag::kNone;
        break;
      case fb::ValueKind::Int:
        v.tag = Tag::kInt;
        v.scalar.i = fv->v_as_Int()->v();
        break;
      case fb::ValueKind::Double:
        v.tag = Tag::kDouble;
        v.scalar.d = fv->v_as_Double()->v();
        break;
      case fb::ValueKind::Bool:
        v.tag = Tag::kBool;
        v.scalar.b = fv->v_as_Bool()->v();
        break;
      case fb::ValueKind::String: {
        v.tag = Tag::kString;
        const auto* s = fv->v_as_String()->v();
        v.str = s != nullptr ? s->c_str() : "";
        v.count = s != nullptr ? static_cast<int32_t>(s->size()) : 0;
        break;
      }
      case fb::ValueKind::DoubleList: {
        v.tag = Tag::kDoubleList;
        const auto* items = fv->v_as_DoubleList()->items();
        v.doubles = items != nullptr ? items->data() : nullptr;
        v.count = static_cast<int32_t>(vsize(items));
        break;
      }
      case fb::ValueKind::BoolList: {
        v.tag = Tag::kBoolList;
        const auto* items = fv->v_as_BoolList()->items();
        v.bools = items != nullptr ? reinterpret_cast<const uint8_t*>(items->data()) : nullptr;
        v.count = static_cast<int32_t>(vsize(items));
        break;
      }
      case fb::ValueKind::IntList:
      case fb::ValueKind::TensorList: {
        const bool ints = fv->v_type() == fb::ValueKind::IntList;
        const auto* items = ints ? fv->v_as_IntList()->items() : fv->v_as_TensorList()->items();
        v.tag = ints ? Tag::kIntList : Tag::kTensorList;
        lists_.emplace_back();
        auto& list = lists_.back();
        for (uint32_t k = 0; k < vsize(items); ++k) {
          const int32_t e = items->Get(k);
          if (!ints && e == -1) {
            list.push_back(nullptr);
            continue;
          }
          EMBER_TRY(check_index(e, ints ? "an int list" : "a tensor list"));
          const fb::ValueKind want = ints ? fb::ValueKind::Int : fb::ValueKind::Tensor;
          EMBER_CHECK(vals->Get(static_cast<uint32_t>(e))->v_type() == want, ErrorCode::kInvalidProgram,
                      "value %u: list item %u (value %d) is not %s", i, k, e, ints ? "an int" : "a tensor");
          list.push_back(&values_[static_cast<size_t>(e)]);
        }
        v.count = static_cast<int32_t>(list.size());
        break;
      }
      case fb::ValueKind::Tensor: {
        const fb::Tensor* ft = fv->v_as_Tensor();
        v.tag = Tag::kTensor;
        Tensor& t = v.tensor;
        const int dt = static_cast<int>(ft->dtype());
        EMBER_CHECK(dtype_valid(dt), ErrorCode::kInvalidProgram, "value %u: invalid dtype %d", i, dt);
        t.dtype = static_cast<DType>(dt);
        const uint32_t rank = vsize(ft->sizes());
        EMBER_CHECK(rank <= static_cast<uint32_t>(kMaxDims), ErrorCode::kInvalidProgram,
                    "value %u: rank %u is above %d", i, rank, kMaxDims);
        t.dim = static_cast<int32_t>(rank);
        uint64_t numel = 1;
        for (uint32_t d = 0; d < rank; ++d) {
          const int64_t s = ft->sizes()->Get(d);
          EMBER_CHECK(s >= 0 && (s == 0 || numel <= (uint64_t{1} << 48) / static_cast<uint64_t>(s)),
                      ErrorCode::kInvalidProgram, "value %u: invalid size %" PRId64 " at dim %u", i, s, d);
          numel *= static_cast<uint64_t>(s);
          t.sizes[d] = s;
        }
        const uint64_t need = numel * dtype_size(t.dtype);
        const uint64_t nbytes = ft->nbytes();
        switch (ft->storage()) {
          case fb::Storage::Arena:
            EMBER_CHECK(need <= nbytes && in_bounds(ft->offset(), nbytes, arena_size_), ErrorCode::kInvalidProgram,
                        "value %u: arena slice [%" PRIu64 ", +%" PRIu64 ") does not fit the %zu-byte arena "
                        "or its %" PRIu64 "-byte shape",
                        i, ft->offset(), nbytes, arena_size_, need);
            EMBER_CHECK(ft->offset() % dtype_size(t.dtype) == 0, ErrorCode::kInvalidProgram,
                        "value %u: arena offset %" PRIu64 " is not aligned for %s (a multiple of %zu)", i,
                        ft->offset(), dtype_name(t.dtype), dtype_size(t.dtype));
            arena_slices.emplace_back(i, ft->offset());
            arena_extent = std::max(arena_extent, ft->offset() + std::max<uint64_t>(nbytes, 1));
            t.capacity = static_cast<size_t>(nbytes);
            break;
          case fb::Storage::Constant: {
            auto seg = program_->segment(ft->segment());
            if (!seg.ok()) return seg.error().with_context("value " + std::to_string(i));
            EMBER_CHECK(need <= nbytes && in_bounds(ft->offset(), nbytes, seg.value().size()),
                        ErrorCode::kInvalidProgram,
                        "value %u: constant slice [%" PRIu64 ", +%" PRIu64 ") does not fit segment %u (%zu bytes)",
                        i, ft->offset(), nbytes, ft->segment(), seg.value().size());
            EMBER_CHECK(ft->offset() % dtype_size(t.dtype) == 0, ErrorCode::kInvalidProgram,
                        "value %u: constant offset %" PRIu64 " in segment %u is not aligned for %s (a multiple "
                        "of %zu)", i, ft->offset(), ft->segment(), dtype_name(t.dtype), dtype_size(t.dtype));
            // Constants are never written: the loader only lets Arena/State tensors be outputs.
            t.data = const_cast<char*>(seg.value().data() + ft->offset());
            t.capacity = static_cast<size_t>(nbytes);
            break;
          }
          case fb::Storage::State: {
            EMBER_CHECK(ft->state() < state.size(), ErrorCode::kInvalidProgram,
                        "value %u: state index %u is out of range (%zu state tensors)", i, ft->state(), state.size());
            const Tensor& st = state[ft->state()].tensor;
            EMBER_CHECK(st.dtype == t.dtype && need == st.capacity, ErrorCode::kInvalidProgram,
                        "value %u: does not match the dtype/size of state '%s'", i, state[ft->state()].name.c_str());
            t.data = st.data;
            t.capacity = st.capacity;
            break;
          }
          case fb::Storage::Input:
          case fb::Storage::Alias:
            // Bound by set_input or by a view kernel; until then it is empty. The loader proves
            // (verify_dataflow) that nothing reads it before then.
            t.data = nullptr;
            t.capacity = 0;
            for (uint32_t d = 0; d < rank; ++d) t.sizes[d] = 0;
            break;
          default:
            return Error::make(ErrorCode::kInvalidProgram, "value %u: unknown storage kind %d", i,
                               static_cast<int>(ft->storage()));
        }
        break;
      }
      default:
        return Error::make(ErrorCode::kInvalidProgram, "value %u: unknown value kind %d", i,
                           static_cast<int>(fv->v_type()));
    }
  }
  // The arena may not be larger than what its values use (the planner's size is the aligned
  // end of the last slice), so a file cannot make this allocation larger than its own plan.
  const uint64_t planned = (arena_extent + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  EMBER_CHECK(m->arena_size() <= planned, ErrorCode::kInvalidProgram,
              "arena size %" PRIu64 " bytes is larger than the %" PRIu64 " bytes its values use (corrupted file)",
              m->arena_size(), planned);
  if (arena_size_ > 0) {
    EMBER_TRY(check_memory(arena_size_, "the activation arena"));
    arena_ = static_cast<uint8_t*>(std::aligned_alloc(kArenaAlign, (arena_size_ + 63) / 64 * 64));
    EMBER_CHECK(arena_ != nullptr, ErrorCode::kOutOfMemory, "cannot allocate the %zu-byte arena", arena_size_);
  }
  for (const auto& [vi, off] : arena_slices) values_[vi].tensor.data = arena_ + off;

  // Bind list item pointers now that lists_ no longer reallocates.
  {
    size_t li = 0;
    for (uint32_t i = 0; i < nv; ++i) {
      if (values_[i].tag == Tag::kIntList || values_[i].tag == Tag::kTensorList) {
        values_[i].items = lists_[li].data();
        ++li;
      }
    }
  }
  auto storage_of = [&](int32_t k) { return vals->Get(static_cast<uint32_t>(k))->v_as_Tensor()->storage(); };
  auto is_tensor = [&](int32_t k) { return values_[static_cast<size_t>(k)].tag == Tag::kTensor; };

  // Inputs and outputs.
  for (uint32_t k = 0; k < vsize(m->inputs()); ++k) {
    const int32_t vi = m->inputs()->Get(k);
    EMBER_TRY(check_index(vi, "an input"));
    EMBER_CHECK(is_tensor(vi) && storage_of(vi) == fb::Storage::Input, ErrorCode::kInvalidProgram,
                "input %u (value %d) is not an input tensor", k, vi);
    const fb::Tensor* ft = vals->Get(static_cast<uint32_t>(vi))->v_as_Tensor();
    TensorSpec spec;
    spec.dtype = values_[static_cast<size_t>(vi)].tensor.dtype;
    for (uint32_t d = 0; d < vsize(ft->sizes()); ++d) {
      spec.sizes.push_back(ft->sizes()->Get(d));
      spec.dynamic.push_back(d < vsize(ft->dynamic()) && ft->dynamic()->Get(d));
    }
    EMBER_CHECK(std::find(inputs_.begin(), inputs_.end(), &values_[static_cast<size_t>(vi)]) == inputs_.end(),
                ErrorCode::kInvalidProgram, "input %u (value %d) is listed twice", k, vi);
    inputs_.push_back(&values_[static_cast<size_t>(vi)]);
    input_specs_.push_back(std::move(spec));
  }
  // A tensor with Input storage that is not a method input would never be bound.
  for (uint32_t i = 0; i < nv; ++i) {
    if (!is_tensor(static_cast<int32_t>(i)) || storage_of(static_cast<int32_t>(i)) != fb::Storage::Input) continue;
    EMBER_CHECK(std::find(inputs_.begin(), inputs_.end(), &values_[i]) != inputs_.end(), ErrorCode::kInvalidProgram,
                "value %u has Input storage but is not an input of method '%s', so nothing would bind it", i,
                name_.c_str());
  }
  input_bound_.assign(inputs_.size(), false);
  for (uint32_t k = 0; k < vsize(m->outputs()); ++k) {
    const int32_t vi = m->outputs()->Get(k);
    EMBER_TRY(check_index(vi, "an output"));
    outputs_.push_back(&values_[static_cast<size_t>(vi)]);
    TensorSpec spec;
    if (is_tensor(vi)) {
      const fb::Tensor* ft = vals->Get(static_cast<uint32_t>(vi))->v_as_Tensor();
      spec.dtype = values_[static_cast<size_t>(vi)].tensor.dtype;
      for (uint32_t d = 0; d < vsize(ft->sizes()); ++d) {
        spec.sizes.push_back(ft->sizes()->Get(d));
        spec.dynamic.push_back(d < vsize(ft->dynamic()) && ft->dynamic()->Get(d));
      }
    }
    output_specs_.push_back(std::move(spec));
  }

  // Operators: resolve kernels by name.
  std::vector<const KernelDef*> kernels;
  for (uint32_t k = 0; k < vsize(m->operators()); ++k) {
    const auto* nm = m->operators()->Get(k)->name();
    const std::string name = nm != nullptr ? nm->str() : "";
    const KernelDef* def = KernelRegistry::global().find(name);
    EMBER_CHECK(def != nullptr, ErrorCode::kNotFound,
                "operator '%s' has no kernel in this runtime; re-export with a delegate that "
                "handles it, or upgrade ember",
                name.c_str());
    kernels.push_back(def);
    op_names_.push_back(name);
  }

  // Delegates: look up backends and initialize them with their blobs.
  for (uint32_t k = 0; k < vsize(m->delegates()); ++k) {
    const fb::Delegate* fd = m->delegates()->Get(k);
    DelegateInstance inst;
    inst.id = fd->backend() != nullptr ? fd->backend()->str() : "";
    inst.backend = BackendRegistry::global().find(inst.id);
    if (inst.backend == nullptr) {
      std::string known;
      for (const auto& id : BackendRegistry::global().ids()) known += (known.empty() ? "" : ", ") + id;
      return Error::make(ErrorCode::kNotFound,
                         "delegate %u needs backend '%s', which is not registered in this build "
                         "(registered: %s)",
                         k, inst.id.c_str(), known.empty() ? "none" : known.c_str());
    }
    auto blob = program_->segment(fd->segment());
    if (!blob.ok()) return blob.error().with_context("delegate " + std::to_string(k));
    std::vector<CompileSpec> specs;
    for (uint32_t s = 0; s < vsize(fd->compile_specs()); ++s) {
      const fb::KeyValue* kv = fd->compile_specs()->Get(s);
      CompileSpec cs;
      if (kv->key() != nullptr) cs.key = std::string_view(kv->key()->c_str(), kv->key()->size());
      if (kv->value() != nullptr) {
        cs.value = kv->value()->data();
        cs.size = kv->value()->size();
      }
      specs.push_back(cs);
    }
    auto handle = inst.backend->init(reinterpret_cast<const uint8_t*>(blob.value().data()), blob.value().size(),
                                     specs.data(), specs.size());
    if (!handle.ok()) return handle.error().with_context("initializing backend '" + inst.id + "'");
    inst.handle = handle.value();
    delegates_.push_back(std::move(inst));
  }

  // Instructions.
  auto check_output = [&](int32_t vi, bool view, uint32_t instr) -> Error {
    EMBER_TRY(check_index(vi, "an instruction output"));
    const EValue& v = values_[static_cast<size_t>(vi)];
    if (v.tag == Tag::kInt) return Error::ok();  // symbolic int results
    std::vector<int32_t> tensors;
    if (v.tag == Tag::kTensor) {
      tensors.push_back(vi);
    } else if (v.tag == Tag::kTensorList) {
      for (int32_t e = 0; e < v.count; ++e) {
        EMBER_CHECK(v.items[e] != nullptr, ErrorCode::kInvalidProgram,
                    "instruction %u: output list %d holds None", instr, vi);
        tensors.push_back(static_cast<int32_t>(v.items[e] - values_.data()));
      }
    } else {
      return Error::make(ErrorCode::kInvalidProgram, "instruction %u: output value %d is a %s", instr, vi,
                         tag_name(v.tag));
    }
    for (int32_t t : tensors) {
      const fb::Storage s = storage_of(t);
      const bool ok = view ? s == fb::Storage::Alias : (s == fb::Storage::Arena || s == fb::Storage::State);
      EMBER_CHECK(ok, ErrorCode::kInvalidProgram,
                  "instruction %u: output tensor %d has storage %s, which this instruction may not write",
                  instr, t, fb::EnumNameStorage(s));
    }
    return Error::ok();
  };
  const uint32_t ni = vsize(m->instructions());
  for (uint32_t k = 0; k < ni; ++k) {
    const fb::Instruction* fi = m->instructions()->Get(k);
    EMBER_CHECK(fi->i() != nullptr, ErrorCode::kInvalidProgram, "instruction %u has no data", k);
    Instr in;
    in.arg_offset = arg_storage_.size();
    const flatbuffers::Vector<int32_t>* args = nullptr;
    const flatbuffers::Vector<int32_t>* outs = nullptr;
    bool view = false;
    switch (fi->i_type()) {
      case fb::InstructionKind::KernelCall: {
        const fb::KernelCall* kc = fi->i_as_KernelCall();
        EMBER_CHECK(kc->op() < kernels.size(), ErrorCode::kInvalidProgram,
                    "instruction %u: operator index %u is out of range (%zu operators)", k, kc->op(), kernels.size());
        const KernelDef* def = kernels[kc->op()];
        args = kc->args();
        outs = kc->outputs();
        EMBER_CHECK(static_cast<int>(vsize(args)) == def->num_args &&
                        static_cast<int>(vsize(outs)) == def->num_outputs,
                    ErrorCode::kInvalidProgram,
                    "instruction %u (%s): has %u arguments and %u outputs, the kernel takes %d and %d", k,
                    op_names_[kc->op()].c_str(), vsize(args), vsize(outs), def->num_args, def->num_outputs);
        in.kind = Instr::Kind::kKernel;
        in.fn = def->fn;
        in.index = kc->op();
        view = def->view;
        in.view = view;
        break;
      }
      case fb::InstructionKind::DelegateCall: {
        const fb::DelegateCall* dc = fi->i_as_DelegateCall();
        EMBER_CHECK(dc->delegate() < delegates_.size(), ErrorCode::kInvalidProgram,
                    "instruction %u: delegate index %u is out of range (%zu delegates)", k, dc->delegate(),
                    delegates_.size());
        args = dc->args();
        outs = dc->outputs();
        in.kind = Instr::Kind::kDelegate;
        in.index = dc->delegate();
        in.stackable = vsize(args) == 1 && vsize(outs) == 1 &&
                       delegates_[in.index].backend->max_stacked_rows(delegates_[in.index].handle) > 1;
        break;
      }
      case fb::InstructionKind::CopyCall: {
        const fb::CopyCall* cc = fi->i_as_CopyCall();
        EMBER_TRY(check_index(cc->src(), "a copy source"));
        EMBER_CHECK(is_tensor(cc->src()), ErrorCode::kInvalidProgram, "instruction %u: copy source is not a tensor", k);
        EMBER_TRY(check_output(cc->dst(), false, k));
        EMBER_CHECK(is_tensor(cc->dst()), ErrorCode::kInvalidProgram, "instruction %u: copy target is not a tensor", k);
        in.kind = Instr::Kind::kCopy;
        arg_storage_.push_back(&values_[static_cast<size_t>(cc->src())]);
        arg_storage_.push_back(&values_[static_cast<size_t>(cc->dst())]);
        in.nargs = 2;
        in.nouts = 1;
        instrs_.push_back(in);
        continue;
      }
      default:
        return Error::make(ErrorCode::kInvalidProgram, "instruction %u: unknown kind %d", k,
                           static_cast<int>(fi->i_type()));
    }
    for (uint32_t a = 0; a < vsize(args); ++a) {
      EMBER_TRY(check_index(args->Get(a), "an instruction argument"));
      arg_storage_.push_back(&values_[static_cast<size_t>(args->Get(a))]);
    }
    for (uint32_t a = 0; a < vsize(outs); ++a) {
      EMBER_TRY(check_output(outs->Get(a), view, k));
      arg_storage_.push_back(&values_[static_cast<size_t>(outs->Get(a))]);
    }
    in.nargs = static_cast<int>(vsize(args) + vsize(outs));
    in.nouts = static_cast<int>(vsize(outs));
    instrs_.push_back(in);
  }
  for (auto& in : instrs_) in.args = arg_storage_.data() + in.arg_offset;
  {
    std::vector<int8_t> storage(nv, -1);  // fb::Storage of each tensor value, -1 for other kinds
    for (uint32_t i = 0; i < nv; ++i) {
      if (is_tensor(static_cast<int32_t>(i))) storage[i] = static_cast<int8_t>(storage_of(static_cast<int32_t>(i)));
    }
    EMBER_TRY(verify_dataflow(storage));
  }
  const char* prof = std::getenv("EMBER_PROFILE");
  profile_ = prof != nullptr && prof[0] != '\0' && prof[0] != '0';
  if (profile_) set_pool_profiling(true);
  profile_seconds_.assign(instrs_.size(), 0.0);
  profile_calls_.assign(instrs_.size(), 0);
  return Error::ok();
}

Error Method::set_input(size_t i, const Tensor& t) {
  EMBER_CHECK_ARG(i < inputs_.size(), "method '%s' has %zu inputs; there is no input %zu", name_.c_str(),
                  inputs_.size(), i);
  const TensorSpec& spec = input_specs_[i];
  EMBER_CHECK_ARG(t.dtype == spec.dtype, "input %zu of '%s' must be %s, got %s", i, name_.c_str(),
                  dtype_name(spec.dtype), dtype_name(t.dtype));
  EMBER_CHECK_ARG(static_cast<size_t>(t.dim) == spec.sizes.size(), "input %zu of '%s' must have rank %zu, got %d",
                  i, name_.c_str(), spec.sizes.size(), t.dim);
  for (int d = 0; d < t.dim; ++d) {
    if (spec.dynamic[static_cast<size_t>(d)]) {
      EMBER_CHECK_ARG(t.sizes[d] >= 0 && t.sizes[d] <= spec.sizes[static_cast<size_t>(d)],
                      "input %zu of '%s': dim %d is %" PRId64 ", above its exported bound %" PRId64
                      " (re-export with a larger bound or split the input)",
                      i, name_.c_str(), d, t.sizes[d], spec.sizes[static_cast<size_t>(d)]);
    } else {
      EMBER_CHECK_ARG(t.sizes[d] == spec.sizes[static_cast<size_t>(d)],
                      "input %zu of '%s': dim %d must be %" PRId64 " (static), got %" PRId64, i, name_.c_str(), d,
                      spec.sizes[static_cast<size_t>(d)], t.sizes[d]);
    }
  }
  EMBER_CHECK_ARG(t.numel() == 0 || t.data != nullptr, "input %zu of '%s' has no data", i, name_.c_str());
  EMBER_CHECK_ARG(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0,
                  "input %zu of '%s' is not aligned for %s (address %p); pass an aligned copy", i, name_.c_str(),
                  dtype_name(t.dtype), t.data);
  Tensor& dst = inputs_[i]->tensor;
  dst.data = t.data;
  dst.capacity = t.nbytes();
  dst.dim = t.dim;
  for (int d = 0; d < t.dim; ++d) dst.sizes[d] = t.sizes[d];
  input_bound_[i] = true;
  return Error::ok();
}

Error Method::begin_execution() {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    EMBER_CHECK_ARG(input_bound_[i], "input %zu of '%s' was not set", i, name_.c_str());
  }
  // Inputs must be set again before the next execution (the caller's memory may be gone). Views
  // keep last execution's pointers: their producers bind them again before anything reads them
  // (verify_dataflow proves it at load). Clearing them here cost a batched step its metadata
  // lines: the calling thread wrote every session's views, and the thread running a session's
  // stretch then took each line back to bind them (Tensor::resize). 4 SmolLM2 sessions batched
  // on a 2-core Zen 5 VM whose vCPUs were at times far apart (a line's round trip ~375 ns
  // against ~90 ns at others), steps alternating with and without in blocks of 16 in one process:
  // far apart 0.959x-0.979x per step (16 runs), near 1.014x-1.020x (5 runs), where the harness's A/A (its
  // later positions in the second block) gave 1.004x-1.023x.
  std::fill(input_bound_.begin(), input_bound_.end(), false);
  return Error::ok();
}

Error Method::run_instruction(size_t k, KernelContext& ctx) {
  const Instr& in = instrs_[k];
  ctx.instruction = static_cast<int>(k);
  const KernelArgs args{in.args, in.nargs};
  Error e;
  switch (in.kind) {
    case Instr::Kind::kKernel:
      e = in.fn(ctx, args);
      if (e) return Error(e.code(), "instruction " + std::to_string(k) + " (" + op_names_[in.index] + "): " + e.message());
      break;
    case Instr::Kind::kDelegate: {
      const DelegateInstance& d = delegates_[in.index];
      e = d.backend->execute(d.handle, ctx, args);
      if (e) return Error(e.code(), "instruction " + std::to_string(k) + " (delegate " + d.id + "): " + e.message());
      break;
    }
    case Instr::Kind::kCopy: {
      const Tensor& src = args[0].tensor;
      Tensor& dst = args[1].tensor;
      if (src.dtype != dst.dtype) {
        return Error::make(ErrorCode::kInvalidProgram, "instruction %zu (copy): dtype %s into %s", k,
                           dtype_name(src.dtype), dtype_name(dst.dtype));
      }
      e = dst.resize(src.sizes, src.dim);
      if (e) return e.with_context("instruction " + std::to_string(k) + " (copy)");
      if (dst.data != src.data && src.nbytes() > 0) std::memmove(dst.data, src.data, src.nbytes());
      break;
    }
  }
  return Error::ok();
}

Error Method::execute() {
  EMBER_TRY(begin_execution());
  const PoolProfile pool0 = profile_ ? pool_profile() : PoolProfile();
  const auto exec_t0 = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  KernelContext ctx;
  const size_t n = instrs_.size();
  for (size_t k = 0; k < n; ++k) {
    const auto t0 = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    EMBER_TRY(run_instruction(k, ctx));
    if (profile_) {
      profile_seconds_[k] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++profile_calls_[k];
    }
  }
  if (profile_) {
    const PoolProfile pool1 = pool_profile();
    profile_pool_.loops += pool1.loops - pool0.loops;
    profile_pool_.caller_wait_s += pool1.caller_wait_s - pool0.caller_wait_s;
    profile_pool_.worker_busy_s += pool1.worker_busy_s - pool0.worker_busy_s;
    ++profile_executions_;
    profile_wall_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - exec_t0).count();
  }
  return Error::ok();
}

void Method::print_profile() const {
  std::map<std::string, std::pair<double, uint64_t>> by_name;
  double total = 0;
  const bool per_instruction = std::getenv("EMBER_PROFILE")[0] == '2';
  for (size_t k = 0; k < instrs_.size(); ++k) {
    std::string key = instruction_info(k).name;
    if (per_instruction) {
      // One row per instruction, labelled with the shape of its first output tensor.
      const Instr& in = instrs_[k];
      char shape[96] = "";
      if (in.nargs > 0 && in.args[in.nargs - 1]->is_tensor()) in.args[in.nargs - 1]->tensor.describe(shape, sizeof shape);
      key = "#" + std::to_string(k) + " " + key + " -> " + shape;
    }
    auto& e = by_name[key];
    e.first += profile_seconds_[k];
    e.second += profile_calls_[k];
    total += profile_seconds_[k];
  }
  std::vector<std::pair<std::string, std::pair<double, uint64_t>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::fprintf(stderr, "ember profile of method '%s': %.3f s in %zu instructions\n", name_.c_str(), total, instrs_.size());
  for (const auto& r : rows) {
    std::fprintf(stderr, "  %8.3f s %5.1f%% %8llu calls  %s\n", r.second.first, total > 0 ? 100 * r.second.first / total : 0.0,
                 static_cast<unsigned long long>(r.second.second), r.first.c_str());
  }
  // Synchronization: the calling thread waiting at the end of parallel loops (imbalance and
  // hand-off), and how much of their time the workers spent running chunks (the rest they waited
  // for work: the serial stretches between loops). The pool is process-wide, so loops run by
  // other threads at the same time count too.
  // Shares of the executions' wall time (batched steps whole; a stacked call's seconds above are
  // shared by the batch's methods, so the instructions' sum is less).
  const int threads = get_num_threads();
  const PoolProfile& p = profile_pool_;
  const double calls = static_cast<double>(std::max<uint64_t>(1, profile_executions_));
  const double wall = profile_wall_s_;
  std::fprintf(stderr, "  sync: %d thread%s, %.1f parallel loops per call; the calling thread waited %.3f s at loop ends (%.1f%%)",
               threads, threads == 1 ? "" : "s", static_cast<double>(p.loops) / calls, p.caller_wait_s,
               wall > 0 ? 100 * p.caller_wait_s / wall : 0.0);
  if (threads > 1 && wall > 0) {
    std::fprintf(stderr, "; workers ran chunks %.1f%% of the time", 100 * p.worker_busy_s / (wall * (threads - 1)));
  }
  std::fprintf(stderr, "\n");
  // Batched steps (execute_batch): what one step cost, split into the stacked delegate calls (one
  // call over the rows of every method of the batch) and the stretches of per-method
  // instructions between them (each method's run as a pool task). Above, a stacked call counts
  // its share of the wall time; a per-method instruction, its own time on the thread that ran it.
  const BatchProfile& b = profile_batch_;
  if (b.steps > 0) {
    const double steps = static_cast<double>(b.steps);
    std::fprintf(stderr,
                 "  batched: %llu steps, %.2f methods per step; per step %.3f ms: stacked delegate calls %.3f ms, "
                 "per-method stretches %.3f ms, the rest %.3f ms\n",
                 static_cast<unsigned long long>(b.steps), static_cast<double>(b.methods) / steps,
                 1e3 * b.step_s / steps, 1e3 * b.stacked_s / steps, 1e3 * b.segment_s / steps,
                 1e3 * (b.step_s - b.stacked_s - b.segment_s) / steps);
  }
}

size_t Method::num_instructions() const { return instrs_.size(); }

InstructionInfo Method::instruction_info(size_t i) const {
  InstructionInfo info;
  if (i >= instrs_.size()) return info;
  const Instr& in = instrs_[i];
  switch (in.kind) {
    case Instr::Kind::kKernel:
      info.kind = "kernel";
      info.name = op_names_[in.index];
      break;
    case Instr::Kind::kDelegate:
      info.kind = "delegate";
      info.name = delegates_[in.index].id;
      break;
    case Instr::Kind::kCopy:
      info.kind = "copy";
      info.name = "copy";
      break;
  }
  return info;
}

}  // namespace ember
