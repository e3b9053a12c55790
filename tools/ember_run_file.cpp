// ember_run_file: load a .ember file and run every method once on zero-filled inputs at their
// upper bounds. Prints "ok" or "error: <message>" and exits 0 / 1; any other exit (a signal, a
// sanitizer report) is a runtime bug. Used by the corrupted-file tests, also under ASan.
//
//   ember_run_file [--copy] FILE [FILE...]     (one line per file)
//
// --copy loads the files that follow with LoadMode::kCopy (read into huge-page memory) instead
// of mapping them.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ember/runtime/method.h"
#include "ember/runtime/program.h"

namespace {

ember::Error run_file(const char* path, ember::LoadMode mode) {
  auto loaded = ember::Program::load_file(path, mode);
  if (!loaded.ok()) return loaded.error();
  std::shared_ptr<ember::Program> program = loaded.value();
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
      t.data = buffers[i].data();
      t.capacity = buffers[i].size();
      EMBER_TRY(method.set_input(i, t));
    }
    EMBER_TRY(method.execute());
  }
  return ember::Error::ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s [--copy] FILE [FILE...]\n", argv[0]);
    return 2;
  }
  int rc = 0, files = 0;
  ember::LoadMode mode = ember::LoadMode::kMmap;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--copy") == 0) {
      mode = ember::LoadMode::kCopy;
      continue;
    }
    ++files;
    ember::Error e = run_file(argv[i], mode);
    if (e) {
      // One line per file: names read from a corrupted file may hold any byte.
      std::string msg = e.message();
      for (char& c : msg) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
      }
      std::printf("error: [%s] %s\n", ember::error_code_name(e.code()), msg.c_str());
      rc = 1;
    } else {
      std::printf("ok\n");
    }
    std::fflush(stdout);
  }
  return files == 1 ? rc : 0;
}
