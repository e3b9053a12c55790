// ember_run_file: load a .ember file and run every method once on zero-filled inputs at their
// upper bounds. Prints "ok" or "error: <message>" and exits 0 / 1; any other exit (a signal, a
// sanitizer report) is a runtime bug. Used by the corrupted-file tests, also under ASan.
//
//   ember_run_file [--copy] [--nan] [--memory-limit SIZE] FILE [FILE...]   (one line per file)
//   ember_run_file [--memory-limit SIZE] --patched SEED PATCHES               (one line per mutant)
//
// A file with LLM metadata (llm.vocab_size) is also run through the text runner: two tokens
// generated after its BOS id. --patched runs the mutants the fuzzer wrote (tests/runtime/fuzz):
// PATCHES is "EMBP", u32 count, then per mutant u64 size, u32 n, n * (u64 offset, u32 len,
// bytes): SEED with those bytes written, cut or zero-padded to `size`, loaded from memory.
//
// --copy loads the files that follow with LoadMode::kCopy (read into huge-page memory) instead
// of mapping them; --nan fills the floating inputs of the files that follow with NaN instead of
// zeros; --memory-limit sets ember::set_memory_limit (e.g. 256M) for the whole run.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "ember/runners/text_runner.h"
#include "ember/runtime/dtype.h"
#include "ember/runtime/memory_limit.h"
#include "ember/runtime/method.h"
#include "ember/runtime/program.h"

namespace {

void fill_nan(ember::Tensor& t, std::vector<uint8_t>& bytes) {
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (t.dtype == ember::DType::kFloat32) {
      const uint32_t nan = 0x7fc00001u;
      std::memcpy(bytes.data() + i * 4, &nan, 4);
    } else if (t.dtype == ember::DType::kFloat16 || t.dtype == ember::DType::kBFloat16) {
      const uint16_t nan = t.dtype == ember::DType::kFloat16 ? 0x7e01 : 0x7fc1;
      std::memcpy(bytes.data() + i * 2, &nan, 2);
    }
  }
}

ember::Error run_llm(std::shared_ptr<ember::Program> program) {
  auto runner = ember::runners::TextRunner::create(std::move(program));
  if (!runner.ok()) return runner.error();
  ember::runners::GenerateConfig config;
  config.max_new_tokens = 2;
  const int64_t bos = (*runner)->info().bos_id >= 0 ? (*runner)->info().bos_id : 0;
  auto r = (*runner)->generate({bos}, config);
  return r.ok() ? ember::Error::ok() : r.error();
}

ember::Error run_program(const std::shared_ptr<ember::Program>& program, bool nan) {
  if (program->find_metadata("llm.vocab_size") != nullptr) EMBER_TRY(run_llm(program));
  for (const std::string& name : program->method_names()) {
    auto m = program->load_method(name);
    if (!m.ok()) return m.error();
    ember::Method& method = *m.value();
    std::vector<std::vector<uint8_t>> buffers(method.num_inputs());
    for (size_t i = 0; i < method.num_inputs(); ++i) {
      const ember::TensorSpec& spec = method.input_spec(i);
      ember::Tensor t;
      t.dtype = spec.dtype;
      t.dim = static_cast<int32_t>(spec.sizes.size());
      for (int d = 0; d < t.dim; ++d) {
        // Dynamic dims at 1 keep the run short; static dims must match.
        t.sizes[d] = spec.dynamic[static_cast<size_t>(d)] && spec.sizes[static_cast<size_t>(d)] > 0 ? 1 : spec.sizes[static_cast<size_t>(d)];
      }
      if (t.nbytes() > (size_t{1} << 30)) {
        return ember::Error::make(ember::ErrorCode::kInvalidArgument, "input %zu is too large to fill", i);
      }
      buffers[i].assign(t.nbytes(), 0);
      if (nan) fill_nan(t, buffers[i]);
      t.data = buffers[i].data();
      t.capacity = buffers[i].size();
      EMBER_TRY(method.set_input(i, t));
    }
    EMBER_TRY(method.execute());
  }
  return ember::Error::ok();
}

ember::Error run_file(const char* path, ember::LoadMode mode, bool nan) {
  auto loaded = ember::Program::load_file(path, mode);
  if (!loaded.ok()) return loaded.error();
  return run_program(loaded.value(), nan);
}

void print_result(const ember::Error& e) {
  if (e) {
    // One line per file: names read from a corrupted file may hold any byte.
    std::string msg = e.message();
    for (char& c : msg) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    std::printf("error: [%s] %s\n", ember::error_code_name(e.code()), msg.c_str());
  } else {
    std::printf("ok\n");
  }
  std::fflush(stdout);
}

bool read_all(const char* path, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

// Runs every mutant of a patch file; returns the process exit code (2: unreadable input).
int run_patched(const char* seed_path, const char* patches_path) {
  std::vector<uint8_t> seed, patches;
  if (!read_all(seed_path, &seed) || !read_all(patches_path, &patches)) {
    std::fprintf(stderr, "cannot read '%s' or '%s'\n", seed_path, patches_path);
    return 2;
  }
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (n > patches.size() - pos) return false;
    std::memcpy(dst, patches.data() + pos, n);
    pos += n;
    return true;
  };
  char magic[4];
  uint32_t count = 0;
  if (!take(magic, 4) || std::memcmp(magic, "EMBP", 4) != 0 || !take(&count, 4)) {
    std::fprintf(stderr, "'%s' is not a patch file (EMBP)\n", patches_path);
    return 2;
  }
  for (uint32_t k = 0; k < count; ++k) {
    uint64_t size = 0;
    uint32_t n = 0;
    if (!take(&size, 8) || !take(&n, 4) || size > (uint64_t{1} << 32)) {
      std::fprintf(stderr, "patch file truncated at mutant %u\n", k);
      return 2;
    }
    std::vector<uint8_t> data(seed);
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t off = 0;
      uint32_t len = 0;
      if (!take(&off, 8) || !take(&len, 4) || len > patches.size() - pos) {
        std::fprintf(stderr, "patch file truncated at mutant %u\n", k);
        return 2;
      }
      for (uint32_t b = 0; b < len; ++b) {
        if (off + b < data.size()) data[off + b] = patches[pos + b];
      }
      pos += len;
    }
    data.resize(static_cast<size_t>(size), 0);
    auto loaded = ember::Program::load_bytes(data.data(), data.size());
    print_result(loaded.ok() ? run_program(loaded.value(), false) : loaded.error());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s [--copy] [--nan] [--memory-limit SIZE] FILE [FILE...]\n", argv[0]);
    return 2;
  }
  int rc = 0, files = 0;
  bool nan = false;
  ember::LoadMode mode = ember::LoadMode::kMmap;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--copy") == 0) {
      mode = ember::LoadMode::kCopy;
      continue;
    }
    if (std::strcmp(argv[i], "--patched") == 0) {
      if (i + 2 >= argc) {
        std::fprintf(stderr, "--patched needs SEED PATCHES\n");
        return 2;
      }
      return run_patched(argv[i + 1], argv[i + 2]);
    }
    if (std::strcmp(argv[i], "--nan") == 0) {
      nan = true;
      continue;
    }
    if (std::strcmp(argv[i], "--memory-limit") == 0) {
      uint64_t limit = 0;
      if (i + 1 >= argc || !ember::parse_byte_size(argv[i + 1], &limit) || limit == 0) {
        std::fprintf(stderr, "--memory-limit needs a size such as 256M, got '%s'\n", i + 1 < argc ? argv[i + 1] : "");
        return 2;
      }
      ember::set_memory_limit(limit);
      ++i;
      continue;
    }
    ++files;
    ember::Error e = run_file(argv[i], mode, nan);
    print_result(e);
    if (e) rc = 1;
  }
  return files == 1 ? rc : 0;
}
