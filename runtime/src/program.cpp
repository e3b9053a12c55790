// Program loading: header checks, flatbuffer verification, segment/metadata/state checks.
#include "ember/runtime/program.h"

#include "ember/runtime/cpu.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ember/runtime/kernel.h"
#include "ember/runtime/memory_limit.h"
#include "ember/runtime/method.h"
#include "ember/runtime/thread_pool.h"
#include "program_generated.h"
#include "program_strings.h"

namespace ember {

namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'R', 0, 0, 0, 0};
// Guards the size arithmetic of state tensors against overflow (2^50 bytes); the allocation
// itself is bounded by memory_limit().
constexpr uint64_t kMaxStateBytes = uint64_t{1} << 50;
// Every segment starts on a cache line (export/format.py SEGMENT_ALIGN), so any tensor whose
// offset inside it is a multiple of its element size is aligned for its dtype.
constexpr uint64_t kSegmentAlign = 64;

uint64_t read_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// True when [off, off+len) lies within [0, total) without overflow.
bool in_bounds(uint64_t off, uint64_t len, uint64_t total) { return off <= total && len <= total - off; }

// The flatbuffer verifier checks a vector's length prefix for 4-byte alignment only, so a
// corrupted offset can leave the elements of an 8-byte vector misaligned (reading them is
// undefined behaviour). Absent vectors are fine.
template <typename T>
bool elements_aligned(const flatbuffers::Vector<T>* v) {
  return v == nullptr || reinterpret_cast<uintptr_t>(v->data()) % alignof(T) == 0;
}

// Checks every vector of 8-byte elements in the program for alignment.
Error verify_vector_alignment(const fb::Program* root) {
  auto fail = [](const char* what, uint32_t i, uint32_t j) {
    return Error::make(ErrorCode::kInvalidProgram,
                       "%s %u/%u: a vector of 8-byte values is misaligned in the program table (corrupted file)",
                       what, i, j);
  };
  if (root->segments() != nullptr &&
      reinterpret_cast<uintptr_t>(root->segments()->data()) % alignof(uint64_t) != 0) {
    return fail("segment table", 0, 0);
  }
  if (root->methods() != nullptr) {
    for (uint32_t i = 0; i < root->methods()->size(); ++i) {
      const auto* values = root->methods()->Get(i)->values();
      for (uint32_t j = 0; values != nullptr && j < values->size(); ++j) {
        const fb::Value* v = values->Get(j);
        if (v->v() == nullptr) continue;  // Method::load reports a kind without data
        if (v->v_type() == fb::ValueKind::Tensor && !elements_aligned(v->v_as_Tensor()->sizes())) {
          return fail("method/value", i, j);
        }
        if (v->v_type() == fb::ValueKind::DoubleList && !elements_aligned(v->v_as_DoubleList()->items())) {
          return fail("method/value", i, j);
        }
      }
    }
  }
  if (root->state() != nullptr) {
    for (uint32_t i = 0; i < root->state()->size(); ++i) {
      if (!elements_aligned(root->state()->Get(i)->sizes())) return fail("state", i, 0);
    }
  }
  if (root->metadata() != nullptr) {
    for (uint32_t i = 0; i < root->metadata()->size(); ++i) {
      const fb::MetaEntry* e = root->metadata()->Get(i);
      if (e->value() != nullptr && e->value_type() == fb::MetaValue::MetaIntList &&
          !elements_aligned(e->value_as_MetaIntList()->v())) {
        return fail("metadata", i, 0);
      }
    }
  }
  return Error::ok();
}

}  // namespace

void Program::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

Program::~Program() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

namespace {

// Reads `size` bytes of fd into fresh anonymous memory aligned to 2 MiB and advised to use huge
// pages, then makes it read-only. On success *raw/*raw_len describe the mapping to unmap.
Error read_into_huge_pages(int fd, const std::string& path, size_t size, void** raw, size_t* raw_len,
                           const uint8_t** base) {
  constexpr size_t kHuge = size_t{1} << 21;
  const size_t rounded = (size + kHuge - 1) / kHuge * kHuge;
  const size_t len = rounded + kHuge;  // slack to align the start
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return Error::make(ErrorCode::kIO, "cannot allocate %zu bytes to load '%s' into memory: %s (load it mapped instead)",
                       len, path.c_str(), std::strerror(errno));
  }
  uint8_t* a = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(m) + kHuge - 1) & ~(kHuge - 1));
#ifdef MADV_HUGEPAGE
  madvise(a, rounded, MADV_HUGEPAGE);  // a hint: without THP the copy still works, on 4 KiB pages
#endif
  // Read in 32 MiB pieces on the kernel threads: page faults (zeroing, huge-page compaction)
  // and the copy run in parallel. The first failure is reported.
  constexpr size_t kPiece = size_t{32} << 20;
  const int64_t pieces = static_cast<int64_t>((size + kPiece - 1) / kPiece);
  std::atomic<size_t> failed_at{SIZE_MAX};
  std::atomic<int> failed_errno{0};
  parallel_for(pieces, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t piece = pb; piece < pe && failed_at.load() == SIZE_MAX; ++piece) {
      size_t done = static_cast<size_t>(piece) * kPiece;
      const size_t end = std::min(size, done + kPiece);
      while (done < end) {
        const ssize_t r = ::pread(fd, a + done, end - done, static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          failed_errno.store(r < 0 ? errno : 0);
          failed_at.store(done);
          return;
        }
        done += static_cast<size_t>(r);
      }
    }
  });
  if (failed_at.load() != SIZE_MAX) {
    munmap(m, len);
    const int err = failed_errno.load();
    return Error::make(ErrorCode::kIO, "cannot read '%s' at byte %zu of %zu: %s", path.c_str(), failed_at.load(), size,
                       err ? std::strerror(err) : "unexpected end of file");
  }
  mprotect(a, rounded, PROT_READ);  // weights are read-only, as when mapped
  *raw = m;
  *raw_len = len;
  *base = a;
  return Error::ok();
}

}  // namespace

Result<std::shared_ptr<Program>> Program::load_file(const std::string& path, LoadMode mode) {
  initialize();
  if (kernel_isa_error()) return kernel_isa_error();  // a forced ISA is refused, never downgraded
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Error::make(ErrorCode::kIO, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error::make(ErrorCode::kIO, "'%s' is not a regular file", path.c_str());
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeaderSize) {
    ::close(fd);
    return Error::make(ErrorCode::kInvalidProgram,
                       "'%s' is %zu bytes, smaller than the %zu-byte ember header: not an .ember file",
                       path.c_str(), size, kHeaderSize);
  }
  std::shared_ptr<Program> p(new Program());
  p->mode_ = mode;
  p->size_ = size;
  if (mode == LoadMode::kCopy) {
    Error e = read_into_huge_pages(fd, path, size, &p->mapping_, &p->mapping_size_, &p->base_);
    ::close(fd);
    if (e) return e;
  } else {
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) {
      return Error::make(ErrorCode::kIO, "cannot mmap '%s': %s", path.c_str(), std::strerror(errno));
    }
    p->mapping_ = m;
    p->mapping_size_ = size;
    p->base_ = static_cast<const uint8_t*>(m);
  }
  auto r = finish_load(std::move(p));
  if (!r.ok()) return r.error().with_context("loading '" + path + "'");
  return r;
}

Result<std::shared_ptr<Program>> Program::load_bytes(const uint8_t* data, size_t size) {
  initialize();
  if (kernel_isa_error()) return kernel_isa_error();
  std::shared_ptr<Program> p(new Program());
  // Copy into storage whose start is 64-byte aligned so segment alignment holds.
  p->owned_.resize(size + 64);
  const uintptr_t raw = reinterpret_cast<uintptr_t>(p->owned_.data());
  const size_t pad = (64 - raw % 64) % 64;
  if (size > 0) std::memcpy(p->owned_.data() + pad, data, size);
  p->base_ = p->owned_.data() + pad;
  p->size_ = size;
  return finish_load(std::move(p));
}

Result<std::shared_ptr<Program>> Program::finish_load(std::shared_ptr<Program> p) {
  EMBER_TRY(p->verify());
  EMBER_TRY(p->load_metadata());
  EMBER_TRY(p->load_state());
  return p;
}

Error Program::verify() {
  EMBER_CHECK(size_ >= kHeaderSize, ErrorCode::kInvalidProgram,
              "file is %zu bytes, smaller than the %zu-byte ember header: not an .ember file", size_,
              kHeaderSize);
  EMBER_CHECK(std::memcmp(base_, kMagic, 8) == 0, ErrorCode::kInvalidProgram,
              "bad magic: this is not an .ember program (expected 'EMBR' at byte 0)");
  major_ = read_u32(base_ + 8);
  minor_ = read_u32(base_ + 12);
  EMBER_CHECK(major_ == kFormatMajor, ErrorCode::kInvalidProgram,
              "format version %u.%u is not supported by this runtime (reads %u.x); re-export the "
              "model with this version of ember",
              major_, minor_, kFormatMajor);
  const uint64_t fb_off = read_u64(base_ + 16), fb_size = read_u64(base_ + 24);
  data_offset_ = read_u64(base_ + 32);
  data_size_ = read_u64(base_ + 40);
  EMBER_CHECK(fb_off >= kHeaderSize && in_bounds(fb_off, fb_size, size_) && fb_off % 8 == 0,
              ErrorCode::kInvalidProgram,
              "header: program table at offset %" PRIu64 " size %" PRIu64 " lies outside the %zu-byte file",
              fb_off, fb_size, size_);
  EMBER_CHECK(in_bounds(data_offset_, data_size_, size_) && data_offset_ % 64 == 0,
              ErrorCode::kInvalidProgram,
              "header: data region at offset %" PRIu64 " size %" PRIu64 " lies outside the %zu-byte file",
              data_offset_, data_size_, size_);
  EMBER_CHECK(fb_size <= (uint64_t{1} << 31), ErrorCode::kInvalidProgram,
              "header: program table size %" PRIu64 " exceeds the 2 GiB flatbuffer limit", fb_size);
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 64;
  opts.max_tables = 1u << 26;
  flatbuffers::Verifier verifier(base_ + fb_off, static_cast<size_t>(fb_size), opts);
  EMBER_CHECK(fb::VerifyProgramBuffer(verifier), ErrorCode::kInvalidProgram,
              "program table failed flatbuffer verification (the file is corrupted or truncated)");
  root_ = fb::GetProgram(base_ + fb_off);
  EMBER_TRY(verify_vector_alignment(root_));
  EMBER_TRY(verify_program_strings(root_));
  if (root_->segments() != nullptr) {
    const auto* segs = root_->segments();
    for (uint32_t i = 0; i < segs->size(); ++i) {
      const fb::Segment* s = segs->Get(i);
      EMBER_CHECK(in_bounds(s->offset(), s->size(), data_size_), ErrorCode::kInvalidProgram,
                  "segment %u (offset %" PRIu64 ", size %" PRIu64 ") lies outside the %" PRIu64
                  "-byte data region",
                  i, s->offset(), s->size(), data_size_);
      EMBER_CHECK(s->offset() % kSegmentAlign == 0, ErrorCode::kInvalidProgram,
                  "segment %u starts at offset %" PRIu64 ", which is not a multiple of %" PRIu64
                  " (the writer aligns every segment; the file is corrupted)",
                  i, s->offset(), kSegmentAlign);
    }
  }
  return Error::ok();
}

Result<std::string_view> Program::segment(uint32_t index) const {
  const auto* segs = root_->segments();
  const uint32_t n = segs == nullptr ? 0 : segs->size();
  if (index >= n) {
    return Error::make(ErrorCode::kInvalidProgram, "segment index %u is out of range (%u segments)", index, n);
  }
  const fb::Segment* s = segs->Get(index);
  return std::string_view(reinterpret_cast<const char*>(base_ + data_offset_ + s->offset()),
                          static_cast<size_t>(s->size()));
}

Error Program::load_metadata() {
  metadata_.clear();
  const auto* md = root_->metadata();
  if (md == nullptr) return Error::ok();
  for (uint32_t i = 0; i < md->size(); ++i) {
    const fb::MetaEntry* e = md->Get(i);
    EMBER_CHECK(e->key() != nullptr && e->value() != nullptr, ErrorCode::kInvalidProgram,
                "metadata entry %u has no key or no value", i);
    MetaEntry m;
    m.key = std::string_view(e->key()->c_str(), e->key()->size());
    switch (e->value_type()) {
      case fb::MetaValue::MetaInt:
        m.kind = MetaKind::kInt;
        m.i = e->value_as_MetaInt()->v();
        break;
      case fb::MetaValue::MetaDouble:
        m.kind = MetaKind::kDouble;
        m.d = e->value_as_MetaDouble()->v();
        break;
      case fb::MetaValue::MetaBool:
        m.kind = MetaKind::kBool;
        m.b = e->value_as_MetaBool()->v();
        break;
      case fb::MetaValue::MetaString: {
        m.kind = MetaKind::kString;
        const auto* s = e->value_as_MetaString()->v();
        if (s != nullptr) m.bytes = std::string_view(s->c_str(), s->size());
        break;
      }
      case fb::MetaValue::MetaIntList: {
        m.kind = MetaKind::kIntList;
        const auto* v = e->value_as_MetaIntList()->v();
        if (v != nullptr) m.ints.assign(v->begin(), v->end());
        break;
      }
      case fb::MetaValue::MetaBytes: {
        m.kind = MetaKind::kBytes;
        auto seg = segment(e->value_as_MetaBytes()->segment());
        if (!seg.ok()) return seg.error().with_context("metadata '" + std::string(m.key) + "'");
        m.bytes = seg.value();
        break;
      }
      default:
        return Error::make(ErrorCode::kInvalidProgram, "metadata '%s' has an unknown value type %d",
                           e->key()->c_str(), static_cast<int>(e->value_type()));
    }
    metadata_.push_back(std::move(m));
  }
  return Error::ok();
}

const MetaEntry* Program::find_metadata(std::string_view key) const {
  for (const auto& m : metadata_) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

Error Program::load_state() {
  state_.clear();
  state_block_.reset();
  const auto* st = root_->state();
  if (st == nullptr) return Error::ok();
  uint64_t total = 0, placed = 0;
  std::vector<uint64_t> offsets;
  for (uint32_t i = 0; i < st->size(); ++i) {
    const fb::StateTensor* s = st->Get(i);
    StateInfo info;
    info.name = s->name() != nullptr ? s->name()->str() : "state" + std::to_string(i);
    const int dt = static_cast<int>(s->dtype());
    EMBER_CHECK(dtype_valid(dt), ErrorCode::kInvalidProgram, "state '%s' has invalid dtype %d",
                info.name.c_str(), dt);
    info.tensor.dtype = static_cast<DType>(dt);
    const auto* sizes = s->sizes();
    const int rank = sizes == nullptr ? 0 : static_cast<int>(sizes->size());
    EMBER_CHECK(rank <= kMaxDims, ErrorCode::kInvalidProgram, "state '%s' has rank %d > %d",
                info.name.c_str(), rank, kMaxDims);
    uint64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
      const int64_t v = sizes->Get(static_cast<uint32_t>(d));
      EMBER_CHECK(v >= 0 && (v == 0 || numel <= kMaxStateBytes / static_cast<uint64_t>(v)),
                  ErrorCode::kInvalidProgram, "state '%s' has invalid size %" PRId64 " at dim %d",
                  info.name.c_str(), v, d);
      numel *= static_cast<uint64_t>(v);
      info.tensor.sizes[d] = v;
    }
    info.tensor.dim = rank;
    const uint64_t nbytes = numel * dtype_size(info.tensor.dtype);
    total += nbytes;
    EMBER_CHECK(total <= kMaxStateBytes, ErrorCode::kInvalidProgram,
                "program state needs %" PRIu64 " bytes: the file is corrupted", total);
    if (s->init_segment() >= 0) {
      auto seg = segment(static_cast<uint32_t>(s->init_segment()));
      if (!seg.ok()) return seg.error().with_context("state '" + info.name + "'");
      EMBER_CHECK(seg.value().size() == nbytes, ErrorCode::kInvalidProgram,
                  "state '%s': initial value has %zu bytes, expected %" PRIu64, info.name.c_str(),
                  seg.value().size(), nbytes);
    } else {
      EMBER_CHECK(s->init_segment() == -1, ErrorCode::kInvalidProgram,
                  "state '%s' has invalid initial segment %d", info.name.c_str(), s->init_segment());
    }
    info.tensor.capacity = nbytes;
    offsets.push_back(placed);
    placed += (nbytes + 63) / 64 * 64;
    state_.push_back(std::move(info));
  }
  // One block for all state (e.g. every layer's K and V cache), aligned to and advised to use
  // 2 MiB pages: attention reads it every step, and per-buffer allocations (1-2 MiB each) would
  // never get huge pages. calloc keeps untouched pages lazy.
  if (state_.empty()) return Error::ok();
  constexpr uint64_t kHuge = uint64_t{1} << 21;
  EMBER_TRY(check_memory(placed + kHuge, "program state (e.g. the KV cache)"));
  uint8_t* mem = static_cast<uint8_t*>(std::calloc(placed + kHuge, 1));
  EMBER_CHECK(mem != nullptr, ErrorCode::kOutOfMemory, "cannot allocate %" PRIu64 " bytes for program state", placed);
  state_block_.reset(mem);
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mem) + kHuge - 1) & ~(kHuge - 1));
#ifdef MADV_HUGEPAGE
  if (placed >= kHuge) madvise(base, (placed + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);  // a hint only
#endif
  for (size_t i = 0; i < state_.size(); ++i) state_[i].tensor.data = base + offsets[i];
  // Only the tensors with initial bytes are written now: the rest is already zero, and its
  // pages stay untouched (and unallocated) until a method writes them.
  for (size_t i = 0; i < state_.size(); ++i) {
    const int seg_index = st->Get(static_cast<uint32_t>(i))->init_segment();
    if (seg_index < 0) continue;
    auto seg = segment(static_cast<uint32_t>(seg_index));  // verified above
    std::memcpy(state_[i].tensor.data, seg.value().data(), state_[i].tensor.capacity);
  }
  return Error::ok();
}

void Program::reset_state() {
  const auto* st = root_->state();
  for (size_t i = 0; i < state_.size(); ++i) {
    Tensor& t = state_[i].tensor;
    const int seg_index = st->Get(static_cast<uint32_t>(i))->init_segment();
    if (seg_index >= 0) {
      auto seg = segment(static_cast<uint32_t>(seg_index));  // verified in load_state
      std::memcpy(t.data, seg.value().data(), t.capacity);
    } else {
      std::memset(t.data, 0, t.capacity);
    }
  }
}

std::vector<std::string> Program::method_names() const {
  std::vector<std::string> out;
  const auto* ms = root_->methods();
  if (ms == nullptr) return out;
  for (uint32_t i = 0; i < ms->size(); ++i) {
    const auto* n = ms->Get(i)->name();
    out.push_back(n != nullptr ? n->str() : "");
  }
  return out;
}

Result<std::unique_ptr<Method>> Program::load_method(std::string_view name, std::shared_ptr<ProgramState> state) {
  EMBER_CHECK_ARG(state == nullptr || state->program() == this,
                  "load_method('%.*s') got a state made by another program; use this program's new_state()",
                  static_cast<int>(name.size()), name.data());
  const auto* ms = root_->methods();
  const uint32_t n = ms == nullptr ? 0 : ms->size();
  std::string known;
  for (uint32_t i = 0; i < n; ++i) {
    const auto* mn = ms->Get(i)->name();
    const std::string_view s = mn != nullptr ? std::string_view(mn->c_str(), mn->size()) : "";
    if (s == name) {
      std::unique_ptr<Method> m(new Method());
      Error e = m->load(shared_from_this(), i, std::move(state));
      if (e) return e.with_context("loading method '" + std::string(name) + "'");
      return m;
    }
    known += (known.empty() ? "" : ", ") + std::string(s);
  }
  return Error::make(ErrorCode::kNotFound, "no method named '%.*s' in this program (it has: %s)",
                     static_cast<int>(name.size()), name.data(), known.c_str());
}

}  // namespace ember
