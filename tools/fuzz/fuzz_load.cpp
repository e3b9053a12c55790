// Coverage-guided fuzzing of the loader with libFuzzer (clang): every input is a candidate
// .ember file, loaded from memory, each method run on zero inputs (dynamic dims at 1) and, for
// a file with LLM metadata, the text runner driven for two tokens. Not run in CI; see README,
// developer notes, for the build and a seed corpus made from real files.
//
//   cmake -S . -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DEMBER_FUZZ=ON -DEMBER_PYTHON=OFF
//   cmake --build build/fuzz --target ember_fuzz_load
//   build/fuzz/ember_fuzz_load -rss_limit_mb=2048 -max_len=1000000 CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ember/runners/text_runner.h"
#include "ember/runtime/memory_limit.h"
#include "ember/runtime/method.h"
#include "ember/runtime/program.h"

namespace {

void run_methods(const std::shared_ptr<ember::Program>& program) {
  for (const std::string& name : program->method_names()) {
    auto m = program->load_method(name);
    if (!m.ok()) continue;
    ember::Method& method = *m.value();
    std::vector<std::vector<uint8_t>> buffers(method.num_inputs());
    bool bound = true;
    for (size_t i = 0; i < method.num_inputs() && bound; ++i) {
      const ember::TensorSpec& spec = method.input_spec(i);
      ember::Tensor t;
      t.dtype = spec.dtype;
      t.dim = static_cast<int32_t>(spec.sizes.size());
      for (int d = 0; d < t.dim; ++d) {
        const size_t k = static_cast<size_t>(d);
        t.sizes[d] = spec.dynamic[k] && spec.sizes[k] > 0 ? 1 : spec.sizes[k];
      }
      if (t.nbytes() > (size_t{1} << 26)) return;
      buffers[i].assign(t.nbytes(), 0);
      t.data = buffers[i].data();
      t.capacity = buffers[i].size();
      bound = !method.set_input(i, t);
    }
    if (bound) (void)method.execute();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ember::set_memory_limit(size_t{256} << 20);  // below -rss_limit_mb: ember must refuse first
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto loaded = ember::Program::load_bytes(data, size);
  if (!loaded.ok()) return 0;
  std::shared_ptr<ember::Program> program = loaded.value();
  if (program->find_metadata("llm.vocab_size") != nullptr) {
    auto runner = ember::runners::TextRunner::create(program);
    if (runner.ok()) {
      ember::runners::GenerateConfig config;
      config.max_new_tokens = 2;
      (void)(*runner)->generate({0}, config);
    }
  }
  run_methods(program);
  return 0;
}
