// ember.reference: interprets the float32 add/mul/linear subgraphs packed by
// backends/reference/partitioner.py (see its docstring for the blob layout).
// Every count, index and size read from the blob is checked in init(): operands refer only to
// values an earlier op produced, "none" is accepted only as linear's bias, and the values'
// storage is bounded by ember::memory_limit() before it is allocated.
#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ember/runtime/backend.h"
#include "ember/runtime/memory_limit.h"

namespace ember {
namespace {

enum class RefKind : uint32_t { kInput = 0, kValue = 1, kConst = 2, kNone = 3 };
enum class Opcode : uint32_t { kAdd = 0, kMul = 1, kLinear = 2 };

struct Ref {
  RefKind kind;
  uint32_t index;
};

struct Op {
  Opcode code;
  std::vector<Ref> refs;
  uint32_t out;
};

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// n zeroed floats, or null when n == 0 or the allocation fails.
float* zeroed_floats(uint64_t n) { return n == 0 ? nullptr : static_cast<float*>(std::calloc(n, sizeof(float))); }

struct Buf {  // a shaped float buffer (constant or intermediate value)
  const float* data = nullptr;  // constants point into the blob (never copied)
  // Owned storage: copied constants and intermediate values (at their max size). calloc'd, so
  // the pages of a large bound stay unallocated until an op writes them; null when empty.
  std::unique_ptr<float, FreeDeleter> storage;
  uint64_t capacity = 0;        // elements in `storage`
  int dim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < dim; ++i) n *= sizes[i];
    return n;
  }
};

struct Program {
  uint32_t num_inputs = 0;
  std::vector<Buf> consts;
  std::vector<Buf> values;
  std::vector<Op> ops;
  std::vector<uint32_t> outputs;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  template <typename T>
  bool read(T* v) {
    if (n_ - pos_ < sizeof(T) || pos_ > n_) return false;
    std::memcpy(v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  const uint8_t* take(size_t bytes) {
    if (bytes > n_ - pos_) return nullptr;
    const uint8_t* r = p_ + pos_;
    pos_ += bytes;
    return r;
  }
  bool done() const { return pos_ == n_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

#define BAD_BLOB(...) Error::make(ErrorCode::kInvalidProgram, "ember.reference blob: " __VA_ARGS__)

Result<void*> parse(const uint8_t* blob, size_t size) {
  Reader r(blob, size);
  auto p = std::make_unique<Program>();
  const uint8_t* magic = r.take(4);
  if (magic == nullptr || std::memcmp(magic, "ERF1", 4) != 0) return BAD_BLOB("bad magic");
  uint32_t nvalues, nconsts, nops, nouts;
  if (!r.read(&p->num_inputs) || !r.read(&nvalues) || !r.read(&nconsts) || !r.read(&nops) || !r.read(&nouts)) {
    return BAD_BLOB("truncated header");
  }
  // Each entry takes at least this many bytes of the blob (a rank, a size, an op with two
  // operands and an output, an index), so the tables below stay proportional to the blob.
  if (uint64_t{nconsts} * 4 + uint64_t{nvalues} * 8 + uint64_t{nops} * 28 + uint64_t{nouts} * 4 > size) {
    return BAD_BLOB("counts exceed blob size");
  }
  p->consts.resize(nconsts);
  for (auto& c : p->consts) {
    uint32_t rank;
    if (!r.read(&rank) || rank > static_cast<uint32_t>(kMaxDims)) return BAD_BLOB("bad constant rank");
    c.dim = static_cast<int>(rank);
    uint64_t n = 1;  // elements, kept below the blob's float count at every step (no overflow)
    for (int d = 0; d < c.dim; ++d) {
      if (!r.read(&c.sizes[d]) || c.sizes[d] < 0 || c.sizes[d] > (int64_t{1} << 40)) return BAD_BLOB("bad constant size");
      const uint64_t s = static_cast<uint64_t>(c.sizes[d]);
      if (s != 0 && n > size / 4 / s) return BAD_BLOB("constant larger than the blob");
      n *= s;
    }
    const uint8_t* data = r.take(n * 4);
    if (data == nullptr) return BAD_BLOB("truncated constant data");
    c.storage.reset(zeroed_floats(n));
    if (n > 0 && c.storage == nullptr) return Error::make(ErrorCode::kOutOfMemory, "ember.reference: cannot allocate a constant");
    if (n > 0) std::memcpy(c.storage.get(), data, n * 4);
    c.capacity = n;
    c.data = c.storage.get();  // copied: blob offsets are not float-aligned in general
  }
  std::vector<uint64_t> value_numel(nvalues);
  uint64_t value_bytes = 0;
  for (auto& n : value_numel) {
    if (!r.read(&n) || n > (uint64_t{1} << 40)) return BAD_BLOB("bad value size");
    value_bytes = std::min<uint64_t>(value_bytes + n * sizeof(float), uint64_t{1} << 62);  // saturates
  }
  EMBER_TRY(check_memory(value_bytes, "ember.reference: the delegate's intermediate values"));
  p->values.resize(nvalues);
  for (uint32_t i = 0; i < nvalues; ++i) {
    Buf& v = p->values[i];
    v.storage.reset(zeroed_floats(value_numel[i]));
    if (value_numel[i] > 0 && v.storage == nullptr) {
      return Error::make(ErrorCode::kOutOfMemory, "ember.reference: cannot allocate %" PRIu64 " floats for value %u",
                         value_numel[i], i);
    }
    v.capacity = value_numel[i];
    v.data = v.storage.get();
  }
  std::vector<bool> produced(nvalues, false);
  p->ops.resize(nops);
  for (auto& op : p->ops) {
    uint32_t code, nrefs;
    if (!r.read(&code) || code > 2 || !r.read(&nrefs) || nrefs != (code == 2 ? 3u : 2u)) return BAD_BLOB("bad op");
    op.code = static_cast<Opcode>(code);
    for (uint32_t k = 0; k < nrefs; ++k) {
      uint32_t kind, index;
      if (!r.read(&kind) || !r.read(&index) || kind > 3) return BAD_BLOB("bad operand");
      const uint32_t limit = kind == 0 ? p->num_inputs : kind == 1 ? nvalues : kind == 2 ? nconsts : 1;
      if (index >= limit) return BAD_BLOB("operand index %u out of range", index);
      // Only linear's bias is optional; any other "none" operand would be read.
      if (static_cast<RefKind>(kind) == RefKind::kNone && !(op.code == Opcode::kLinear && k == 2)) {
        return BAD_BLOB("operand %u of op %zu is none, which only linear's bias may be", k,
                        static_cast<size_t>(&op - p->ops.data()));
      }
      if (static_cast<RefKind>(kind) == RefKind::kValue && !produced[index]) {
        return BAD_BLOB("op %zu reads value %u before an op produces it", static_cast<size_t>(&op - p->ops.data()),
                        index);
      }
      op.refs.push_back(Ref{static_cast<RefKind>(kind), index});
    }
    if (!r.read(&op.out) || op.out >= nvalues) return BAD_BLOB("bad op output");
    for (const Ref& ref : op.refs) {
      if (ref.kind == RefKind::kValue && ref.index == op.out) return BAD_BLOB("op writes value %u, which it reads", op.out);
    }
    produced[op.out] = true;
  }
  p->outputs.resize(nouts);
  for (auto& o : p->outputs) {
    if (!r.read(&o) || o >= nvalues) return BAD_BLOB("bad output index");
    if (!produced[o]) return BAD_BLOB("output value %u is never produced", o);
  }
  if (!r.done()) return BAD_BLOB("trailing bytes");
  return static_cast<void*>(p.release());
}

// Resolves an operand to a shaped float view.
Error resolve(Program& p, const Ref& ref, KernelArgs args, Buf* out) {
  switch (ref.kind) {
    case RefKind::kInput: {
      const EValue& v = args[static_cast<int>(ref.index)];
      if (!v.is_tensor() || v.tensor.dtype != DType::kFloat32) {
        return Error::make(ErrorCode::kInvalidArgument, "ember.reference: input %u must be a float32 tensor", ref.index);
      }
      out->data = v.tensor.ptr<float>();
      out->dim = v.tensor.dim;
      for (int d = 0; d < out->dim; ++d) out->sizes[d] = v.tensor.sizes[d];
      return Error::ok();
    }
    case RefKind::kValue: {
      const Buf& b = p.values[ref.index];
      out->data = b.data;
      out->dim = b.dim;
      for (int d = 0; d < b.dim; ++d) out->sizes[d] = b.sizes[d];
      return Error::ok();
    }
    case RefKind::kConst: {
      const Buf& b = p.consts[ref.index];
      out->data = b.data;
      out->dim = b.dim;
      for (int d = 0; d < b.dim; ++d) out->sizes[d] = b.sizes[d];
      return Error::ok();
    }
    case RefKind::kNone:
      out->data = nullptr;
      out->dim = 0;
      return Error::ok();
  }
  return Error::make(ErrorCode::kInternal, "ember.reference: bad operand kind");
}

Error set_shape(Buf& out, const int64_t* sizes, int dim) {
  int64_t n = 1;
  for (int d = 0; d < dim; ++d) n *= sizes[d];
  if (static_cast<uint64_t>(n) > out.capacity) {
    return Error::make(ErrorCode::kOutOfMemory, "ember.reference: result of %" PRId64 " elements exceeds its bound %zu",
                       n, static_cast<size_t>(out.capacity));
  }
  out.dim = dim;
  for (int d = 0; d < dim; ++d) out.sizes[d] = sizes[d];
  return Error::ok();
}

Error elementwise(const Buf& a, const Buf& b, Buf& out, bool mul) {
  const int dim = a.dim > b.dim ? a.dim : b.dim;
  int64_t sizes[kMaxDims], sa[kMaxDims], sb[kMaxDims];
  for (int d = 0; d < dim; ++d) {  // right-aligned broadcasting with element strides
    const int da = d - (dim - a.dim), db = d - (dim - b.dim);
    const int64_t na = da >= 0 ? a.sizes[da] : 1, nb = db >= 0 ? b.sizes[db] : 1;
    if (na != nb && na != 1 && nb != 1) {
      return Error::make(ErrorCode::kInvalidArgument, "ember.reference: cannot broadcast %" PRId64 " with %" PRId64, na, nb);
    }
    sizes[d] = na == 1 ? nb : na;
  }
  int64_t ta = 1, tb = 1;
  for (int d = dim - 1; d >= 0; --d) {
    const int da = d - (dim - a.dim), db = d - (dim - b.dim);
    const int64_t na = da >= 0 ? a.sizes[da] : 1, nb = db >= 0 ? b.sizes[db] : 1;
    sa[d] = na == 1 ? 0 : ta;
    sb[d] = nb == 1 ? 0 : tb;
    ta *= na;
    tb *= nb;
  }
  EMBER_TRY(set_shape(out, sizes, dim));
  const int64_t n = out.numel();
  float* o = out.storage.get();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, ia = 0, ib = 0;
    for (int d = dim - 1; d >= 0; --d) {
      const int64_t c = rem % sizes[d];
      rem /= sizes[d];
      ia += c * sa[d];
      ib += c * sb[d];
    }
    o[i] = mul ? a.data[ia] * b.data[ib] : a.data[ia] + b.data[ib];
  }
  return Error::ok();
}

Error linear(const Buf& x, const Buf& w, const Buf& bias, Buf& out) {
  if (x.dim < 1 || w.dim != 2 || x.sizes[x.dim - 1] != w.sizes[1] || (bias.data && (bias.dim != 1 || bias.sizes[0] != w.sizes[0]))) {
    return Error::make(ErrorCode::kInvalidArgument, "ember.reference: linear shapes do not match");
  }
  const int64_t k = w.sizes[1], n = w.sizes[0], m = x.numel() / (k == 0 ? 1 : k);
  int64_t sizes[kMaxDims];
  for (int d = 0; d < x.dim - 1; ++d) sizes[d] = x.sizes[d];
  sizes[x.dim - 1] = n;
  EMBER_TRY(set_shape(out, sizes, x.dim));
  float* o = out.storage.get();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = bias.data ? bias.data[j] : 0.0f;
      for (int64_t t = 0; t < k; ++t) acc += x.data[i * k + t] * w.data[j * k + t];
      o[i * n + j] = acc;
    }
  }
  return Error::ok();
}

class ReferenceBackend final : public Backend {
 public:
  Result<void*> init(const uint8_t* blob, size_t size, const CompileSpec*, size_t) override {
    return parse(blob, size);
  }

  Error execute(void* handle, KernelContext&, KernelArgs args) override {
    Program& p = *static_cast<Program*>(handle);
    if (args.n != static_cast<int>(p.num_inputs + p.outputs.size())) {
      return Error::make(ErrorCode::kInvalidProgram, "ember.reference: called with %d values, expected %zu", args.n,
                         p.num_inputs + p.outputs.size());
    }
    for (const Op& op : p.ops) {
      Buf a, b, c;
      EMBER_TRY(resolve(p, op.refs[0], args, &a));
      EMBER_TRY(resolve(p, op.refs[1], args, &b));
      Buf& out = p.values[op.out];
      if (op.code == Opcode::kLinear) {
        EMBER_TRY(resolve(p, op.refs[2], args, &c));
        EMBER_TRY(linear(a, b, c, out));
      } else {
        EMBER_TRY(elementwise(a, b, out, op.code == Opcode::kMul));
      }
    }
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      const Buf& v = p.values[p.outputs[k]];
      EValue& ev = args[static_cast<int>(p.num_inputs + k)];
      if (!ev.is_tensor() || ev.tensor.dtype != DType::kFloat32) {
        return Error::make(ErrorCode::kInvalidProgram, "ember.reference: output %zu is not a float32 tensor", k);
      }
      EMBER_TRY(ev.tensor.resize(v.sizes, v.dim));
      std::memcpy(ev.tensor.data, v.data, static_cast<size_t>(v.numel()) * sizeof(float));
    }
    return Error::ok();
  }

  void destroy(void* handle) override { delete static_cast<Program*>(handle); }
};

}  // namespace

void ember_register_backend_reference(BackendRegistry& registry) {
  static ReferenceBackend backend;
  registry.add("ember.reference", &backend);
}

}  // namespace ember
