// Program: a loaded, verified .ember file.
//
// File layout: a 64-byte header (magic "EMBR\0\0\0\0", format major/minor, flatbuffer
// offset/size, data offset/size), the flatbuffer (schema program.fbs), then the data segments.
// `load_file` maps the file (weights are never copied) or, with LoadMode::kCopy, reads it into
// huge-page-backed memory; `load_bytes` copies the buffer once.
// Loading verifies the header, the flatbuffer and every index/offset/size read from it (every
// segment starts 64-byte aligned), so a corrupted file yields an Error, never a crash. The state
// block is bounded by memory_limit() (kOutOfMemory above it) and only tensors with initial bytes
// are written at load: zero state keeps its pages untouched until a method writes them. The
// Program owns the mapped bytes and the default program-level state (e.g. the KV cache) shared by
// all methods loaded without a state of their own (see state.h for per-session state); keep it
// alive (shared_ptr) as long as any Method or ProgramState created from it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ember/runtime/error.h"
#include "ember/runtime/state.h"
#include "ember/runtime/tensor.h"

namespace ember {

namespace fb {
struct Program;
}

class Method;

constexpr uint32_t kFormatMajor = 1;
constexpr uint32_t kFormatMinor = 0;
constexpr size_t kHeaderSize = 64;

enum class MetaKind : uint8_t { kInt, kDouble, kBool, kString, kIntList, kBytes };

// One metadata entry; views point into the program's bytes.
struct MetaEntry {
  std::string_view key;
  MetaKind kind = MetaKind::kInt;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  std::string_view bytes;             // kString and kBytes
  std::vector<int64_t> ints;          // kIntList
};

// How `Program::load_file` holds the file's bytes.
enum class LoadMode : uint8_t {
  // Map the file read-only: no copy, near-instant load, pages shared with the OS page cache
  // (and with other processes mapping the same file).
  kMmap,
  // Read the file into private anonymous memory, advised to use 2 MiB pages where the OS
  // allows (Linux transparent huge pages in "always" or "madvise" mode), then made read-only.
  // Costs one copy at load (about 0.1-0.3 s per GB from the page cache) and private memory;
  // memory-bound inference (LLM decode streams every weight once per token) runs faster
  // because the weight stream needs ~500x fewer TLB entries.
  kCopy,
};

class Program : public std::enable_shared_from_this<Program> {
 public:
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Errors: kIO (cannot open/read/map or allocate), kInvalidProgram (not a valid .ember file).
  static Result<std::shared_ptr<Program>> load_file(const std::string& path, LoadMode mode = LoadMode::kMmap);
  static Result<std::shared_ptr<Program>> load_bytes(const uint8_t* data, size_t size);

  std::vector<std::string> method_names() const;
  // Creates an executable instance of a method (its own arena and value table). Its state
  // values point into `state` when given (which must come from this program's new_state(); the
  // Method keeps it alive), else into the program's default state.
  // Errors: kNotFound (no such method), kInvalidArgument (a state of another program),
  // kInvalidProgram / kOutOfMemory from loading the method.
  Result<std::unique_ptr<Method>> load_method(std::string_view name, std::shared_ptr<ProgramState> state = nullptr);

  const std::vector<MetaEntry>& metadata() const { return metadata_; }
  const MetaEntry* find_metadata(std::string_view key) const;  // nullptr when absent

  // Program-level state shared by methods; reset_state() restores the initial values.
  const std::vector<StateInfo>& state() const { return state_; }
  void reset_state();
  // A new, independent instance of the program state (initial values; see state.h), for a
  // second conversation over the same weights. Errors: kOutOfMemory.
  Result<std::shared_ptr<ProgramState>> new_state() const;

  size_t file_size() const { return size_; }
  LoadMode load_mode() const { return mode_; }
  uint32_t format_major() const { return major_; }
  uint32_t format_minor() const { return minor_; }

  // Internal: verified flatbuffer root and segment access for Method.
  const fb::Program* root() const { return root_; }
  // Returns the bytes of segment `index` (bounds were verified at load).
  Result<std::string_view> segment(uint32_t index) const;

 private:
  Program() = default;
  static Result<std::shared_ptr<Program>> finish_load(std::shared_ptr<Program> p);
  Error verify();
  Error load_metadata();
  Error load_state();

  const uint8_t* base_ = nullptr;  // whole file
  size_t size_ = 0;
  void* mapping_ = nullptr;        // mmap base when loaded from a path (file map or anonymous copy)
  size_t mapping_size_ = 0;
  LoadMode mode_ = LoadMode::kMmap;
  std::vector<uint8_t> owned_;     // copy when loaded from bytes (64-byte aligned inside)
  uint32_t major_ = 0, minor_ = 0;
  uint64_t data_offset_ = 0, data_size_ = 0;
  const fb::Program* root_ = nullptr;
  std::vector<MetaEntry> metadata_;
  std::vector<StateInfo> state_;
  struct FreeDeleter {
    void operator()(uint8_t* p) const;  // std::free: state is calloc'ed (zero pages stay lazy)
  };
  std::unique_ptr<uint8_t, FreeDeleter> state_block_;  // all state tensors, 2 MiB aligned inside
};

}  // namespace ember
