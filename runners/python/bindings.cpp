// pybind11 bindings of the text runner: ember.runners._runner.
//
// The GIL is released while the runner computes; token callbacks reacquire it. Errors become
// the runtime's typed exceptions (ember.runtime.errors.error_class). A callback that returns
// False stops generation; one that raises stops it and the exception propagates.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ember/runners/sampler.h"
#include "ember/runners/text_runner.h"
#include "ember/runtime/thread_pool.h"
#include "py_support.h"

namespace py = pybind11;
using namespace ember;
using namespace ember::runners;
using py_support::check;
using py_support::raise;
using py_support::unwrap;

namespace {

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// Token ids as int64. A list or tuple of Python ints (what ember.llm passes) is read directly:
// numpy is imported only for anything else (arrays, nested lists), so a process that only
// generates never loads it (~16 MiB resident).
std::vector<int64_t> as_ids(const py::object& ids, const char* what) {
  PyObject* o = ids.ptr();
  if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject** items = PySequence_Fast_ITEMS(o);
    std::vector<int64_t> out(static_cast<size_t>(n));
    bool plain = true;
    for (Py_ssize_t i = 0; i < n && plain; ++i) {
      if (!PyLong_CheckExact(items[i])) {
        plain = false;
        break;
      }
      int overflow = 0;
      out[static_cast<size_t>(i)] = PyLong_AsLongLongAndOverflow(items[i], &overflow);
      plain = overflow == 0;
    }
    if (plain) return out;
  }
  IdArray a = IdArray::ensure(ids);
  if (!a) {
    PyErr_Clear();
    raise(Error::make(ErrorCode::kInvalidArgument, "%s must be a sequence of integer token ids", what));
  }
  if (a.ndim() == 2 && a.shape(0) == 1) a = a.reshape({a.shape(1)});
  if (a.ndim() != 1) {
    raise(Error::make(ErrorCode::kInvalidArgument, "%s must be 1-D (or [1, T]), got rank %zd", what,
                      static_cast<ssize_t>(a.ndim())));
  }
  return std::vector<int64_t>(a.data(), a.data() + a.shape(0));
}

const float* as_logits(const py::array_t<float, py::array::c_style | py::array::forcecast>& a, int64_t* n) {
  if (a.ndim() != 1 || a.shape(0) < 1) {
    raise(Error::make(ErrorCode::kInvalidArgument, "logits must be a non-empty 1-D float array, got rank %zd",
                      static_cast<ssize_t>(a.ndim())));
  }
  *n = a.shape(0);
  return a.data();
}

py::dict stats_to_py(const Stats& s) {
  py::dict d;
  d["load_ms"] = s.load_ms;
  d["prompt_tokens"] = s.prompt_tokens;
  d["reused_tokens"] = s.reused_tokens;
  d["prefill_tokens"] = s.prefill_tokens;
  d["prefill_ms"] = s.prefill_ms;
  d["prefill_tokens_per_s"] = s.prefill_tokens_per_s;
  d["time_to_first_token_ms"] = s.time_to_first_token_ms;
  d["generated_tokens"] = s.generated_tokens;
  d["decode_steps"] = s.decode_steps;
  d["decode_ms"] = s.decode_ms;
  d["decode_tokens_per_s"] = s.decode_tokens_per_s;
  d["decode_batch_mean"] = s.decode_batch_mean;
  d["sampling_ms"] = s.sampling_ms;
  d["peak_rss_bytes"] = s.peak_rss_bytes;
  d["stop_reason"] = stop_reason_name(s.stop_reason);
  return d;
}

// One runner, guarded so that two Python threads cannot drive it at once (stop() needs no lock).
// The guard is a try_lock that never waits, so it is never waited on with the GIL held; every
// call that computes releases the GIL.
class PyRunner {
 public:
  PyRunner(const std::string& path, int threads, bool mmap) {
    if (threads > 0) py_support::warn_if_above_cpus(threads);
    Result<std::unique_ptr<TextRunner>> r = [&] {
      py::gil_scoped_release nogil;
      return TextRunner::load(path, threads, mmap ? LoadMode::kMmap : LoadMode::kCopy);
    }();
    runner_ = unwrap(std::move(r));
  }

  // A runner made in C++ (a session of another runner).
  explicit PyRunner(std::unique_ptr<TextRunner> runner) : runner_(std::move(runner)) {}

  // A new session over the same loaded program: its own KV cache and runner state. Takes no
  // lock (it reads only what never changes after load), so it works while this runner generates.
  std::unique_ptr<PyRunner> session(int threads) {
    Result<std::unique_ptr<TextRunner>> r = [&] {
      py::gil_scoped_release nogil;
      return runner_->new_session(threads);
    }();
    return std::make_unique<PyRunner>(unwrap(std::move(r)));
  }

  std::unique_lock<std::mutex> lock() {
    std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
    if (!lk.owns_lock()) {
      raise(Error::make(ErrorCode::kInvalidArgument,
                        "this runner is already generating in another thread; use one runner per thread "
                        "(or call stop() and wait)"));
    }
    return lk;
  }

  void start(const py::object& prompt, const GenerateConfig& config) {
    auto lk = lock();
    const std::vector<int64_t> ids = as_ids(prompt, "prompt_ids");
    Error e;
    {
      py::gil_scoped_release nogil;
      e = runner_->start(ids.data(), ids.size(), config);
    }
    check(e);
  }

  py::object next() {
    auto lk = lock();
    // A token the helper already sampled is taken with the GIL held: releasing it would let
    // another thread take it, and getting it back can take that thread's whole switch interval.
    Result<int64_t> r{TextRunner::kDone};
    if (!runner_->try_next(&r)) {
      py::gil_scoped_release nogil;
      r = runner_->next();
    }
    int64_t t = unwrap(std::move(r));
    return t == TextRunner::kDone ? py::object(py::none()) : py::object(py::int_(t));
  }

  py::tuple generate(const py::object& prompt, const GenerateConfig& config, const py::object& callback) {
    auto lk = lock();
    const std::vector<int64_t> prompt_vec = as_ids(prompt, "prompt_ids");
    std::unique_ptr<py::error_already_set> raised;
    const bool has_cb = !callback.is_none();
    // With no callback we still take the GIL briefly per token so Ctrl-C (SIGINT) is noticed.
    TokenCallback on_token = [&](int64_t token) -> bool {
      py::gil_scoped_acquire gil;
      try {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        if (!has_cb) return true;
        py::object r = callback(token);
        return r.is_none() || PyObject_IsTrue(r.ptr()) == 1;
      } catch (py::error_already_set& e) {
        raised = std::make_unique<py::error_already_set>(std::move(e));
        return false;
      }
    };
    Result<GenerateResult> r = [&] {
      py::gil_scoped_release nogil;
      return runner_->generate(prompt_vec, config, on_token);
    }();
    if (raised) {
      py::error_already_set e = std::move(*raised);
      raised.reset();
      throw e;
    }
    GenerateResult result = unwrap(std::move(r));
    return py::make_tuple(py::cast(result.tokens), stop_reason_name(result.stop_reason));
  }

  py::array_t<float> forward(const py::object& tokens, int64_t pos) {
    auto lk = lock();
    const std::vector<int64_t> ids = as_ids(tokens, "tokens");
    Result<const float*> r = [&] {
      py::gil_scoped_release nogil;
      return runner_->forward(ids.data(), static_cast<int64_t>(ids.size()), pos);
    }();
    const float* logits = unwrap(std::move(r));
    const int64_t v = runner_->info().vocab_size;
    py::array_t<float> out(v);
    std::copy(logits, logits + v, out.mutable_data());
    return out;
  }

  void reset() {
    auto lk = lock();
    py::gil_scoped_release nogil;
    runner_->reset();
  }

  TextRunner& runner() { return *runner_; }

 private:
  std::unique_ptr<TextRunner> runner_;
  std::mutex mu_;
};

// One batched step over several sessions of one program (TextRunner::forward_batch): tokens[i] is
// one id (a decode step) or a sequence of ids (a prefill chunk).
py::list forward_batch(const std::vector<PyRunner*>& runners, const py::list& tokens, const py::object& positions) {
  const std::vector<int64_t> pos = as_ids(positions, "positions");
  const size_t n = runners.size();
  if (n == 0 || tokens.size() != n || pos.size() != n) {
    raise(Error::make(ErrorCode::kInvalidArgument,
                      "forward_batch takes one token (or list of tokens) and one position per session: got %zu "
                      "sessions, %zu tokens and %zu positions", n, tokens.size(), pos.size()));
  }
  std::vector<std::vector<int64_t>> ids(n);
  for (size_t i = 0; i < n; ++i) {
    const py::object item = tokens[i];
    ids[i] = PyLong_Check(item.ptr()) ? std::vector<int64_t>{item.cast<int64_t>()} : as_ids(item, "tokens");
  }
  std::vector<const int64_t*> id_ptrs(n);
  std::vector<int64_t> counts(n);
  for (size_t i = 0; i < n; ++i) {
    id_ptrs[i] = ids[i].data();
    counts[i] = static_cast<int64_t>(ids[i].size());
  }
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<TextRunner*> native(n);
  for (size_t i = 0; i < n; ++i) {
    if (runners[i] == nullptr) raise(Error::make(ErrorCode::kInvalidArgument, "forward_batch: session %zu is None", i));
    for (size_t j = 0; j < i; ++j) {
      if (runners[j] == runners[i]) {
        raise(Error::make(ErrorCode::kInvalidArgument, "forward_batch: sessions %zu and %zu are the same one; "
                          "each row needs its own session (llm.session())", j, i));
      }
    }
    locks.push_back(runners[i]->lock());
    native[i] = &runners[i]->runner();
  }
  std::vector<const float*> logits(n, nullptr);
  Error e;
  {
    py::gil_scoped_release nogil;
    e = TextRunner::forward_batch(native.data(), n, id_ptrs.data(), counts.data(), pos.data(), logits.data());
  }
  check(e);
  py::list out;
  for (size_t i = 0; i < n; ++i) {
    const int64_t v = native[i]->info().vocab_size;
    py::array_t<float> a(v);
    std::copy(logits[i], logits[i] + v, a.mutable_data());
    out.append(std::move(a));
  }
  return out;
}

py::object sample_many(const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
                       const SamplerConfig& config, const py::object& history, int64_t n) {
  int64_t vocab = 0;
  const float* data = as_logits(logits, &vocab);
  const std::vector<int64_t> hist = as_ids(history, "history");
  Sampler sampler(vocab);
  check(sampler.configure(config));
  py::array_t<int64_t> out(n);
  Error err;
  {
    py::gil_scoped_release nogil;
    for (int64_t i = 0; i < n; ++i) {
      Result<int64_t> r = sampler.sample(data, hist.data(), hist.size());
      if (!r.ok()) {
        err = r.error();
        break;
      }
      out.mutable_data()[i] = *r;
    }
  }
  check(err);
  return std::move(out);
}

}  // namespace

PYBIND11_MODULE(_runner, m) {
  m.doc() = "ember text runner: prefill/decode loop, sampler chain, stop conditions, stats";

  py::class_<SamplerConfig>(m, "SamplerConfig")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplerConfig::temperature)
      .def_readwrite("top_k", &SamplerConfig::top_k)
      .def_readwrite("top_p", &SamplerConfig::top_p)
      .def_readwrite("min_p", &SamplerConfig::min_p)
      .def_readwrite("repetition_penalty", &SamplerConfig::repetition_penalty)
      .def_readwrite("frequency_penalty", &SamplerConfig::frequency_penalty)
      .def_readwrite("presence_penalty", &SamplerConfig::presence_penalty)
      .def_readwrite("penalty_window", &SamplerConfig::penalty_window)
      .def_readwrite("seed", &SamplerConfig::seed)
      .def("validate", [](const SamplerConfig& c) { check(c.validate()); });

  py::class_<GenerateConfig>(m, "GenerateConfig")
      .def(py::init<>())
      .def_readwrite("max_new_tokens", &GenerateConfig::max_new_tokens)
      .def_readwrite("sampling", &GenerateConfig::sampling)
      .def_readwrite("stop_ids", &GenerateConfig::stop_ids)
      .def_readwrite("ignore_eos", &GenerateConfig::ignore_eos)
      .def("validate", [](const GenerateConfig& c) { check(c.validate()); });

  py::class_<PyRunner>(m, "Runner")
      .def(py::init<const std::string&, int, bool>(), py::arg("path"), py::arg("threads") = 0, py::arg("mmap") = false,
           "Loads an LLM .ember file. threads > 0 sets the kernel thread count (process-wide). mmap=False "
           "copies the file into huge-page-backed memory (faster decode); mmap=True maps it (instant load).")
      .def_property_readonly("metadata",
                             [](PyRunner& r) { return py_support::metadata_dict(r.runner().decoder().program()); })
      .def_property_readonly("vocab_size", [](PyRunner& r) { return r.runner().info().vocab_size; })
      .def_property_readonly("num_threads", [](PyRunner&) { return get_num_threads(); },
                             "Kernel threads in effect (process-wide; equal to ember.runtime.get_num_threads()).")
      .def_property_readonly("max_seq_len", [](PyRunner& r) { return r.runner().info().max_seq_len; })
      .def_property_readonly("max_context_len", [](PyRunner& r) { return r.runner().info().max_context_len; })
      .def_property_readonly("bos_id", [](PyRunner& r) { return r.runner().info().bos_id; })
      .def_property_readonly("eos_ids", [](PyRunner& r) { return r.runner().info().eos_ids; })
      .def("session", &PyRunner::session, py::arg("threads") = 0,
           "A new, independent session over the same loaded weights (its own KV cache, arena and state); "
           "threads > 0: its steps use at most that many of the process-wide pool's threads.")
      .def_property_readonly("threads", [](PyRunner& r) { return r.runner().decoder().threads(); },
                             "This session's thread cap (0: the whole pool).")
      .def_property_readonly("state_bytes", [](PyRunner& r) { return r.runner().decoder().state_bytes(); })
      .def_property_readonly("arena_bytes", [](PyRunner& r) { return r.runner().decoder().arena_bytes(); })
      .def("start", &PyRunner::start, py::arg("prompt_ids"), py::arg("config"),
           "Validates the prompt, reuses the cached prefix and prefills the rest (GIL released).")
      .def("next", &PyRunner::next, "The next generated token id, or None when generation ended (see stop_reason).")
      .def("generate", &PyRunner::generate, py::arg("prompt_ids"), py::arg("config"), py::arg("callback") = py::none(),
           "Runs the whole loop; callback(token_id) -> False stops. Returns (token_ids, stop_reason).")
      .def("stop", [](PyRunner& r) { r.runner().stop(); }, "Ends the current generation at the next token (any thread).")
      .def("reset", &PyRunner::reset, "Forgets the cached tokens and zeroes the KV cache.")
      .def("forward", &PyRunner::forward, py::arg("tokens"), py::arg("pos"),
           "Raw forward(tokens[T], input_pos=pos) -> float32[vocab] logits of the last position (a copy).")
      .def_property_readonly("stats", [](PyRunner& r) { return stats_to_py(r.runner().stats()); })
      .def_property_readonly("stop_reason", [](PyRunner& r) { return stop_reason_name(r.runner().stop_reason()); })
      .def_property_readonly("cached_tokens", [](PyRunner& r) { return r.runner().cached_tokens(); });

  m.def(
      "sample",
      [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits, const SamplerConfig& config,
         const py::object& history) {
        py::array_t<int64_t> out = sample_many(logits, config, history, 1).cast<py::array_t<int64_t>>();
        return out.at(0);
      },
      py::arg("logits"), py::arg("config"), py::arg("history") = py::list(),
      "One draw of the sampler chain on fixed logits (config.seed seeds it).");
  m.def("forward_batch", &forward_batch, py::arg("sessions"), py::arg("tokens"), py::arg("positions"),
        "One step of several sessions of one model in one batched execution: session i takes tokens[i] "
        "(one id, or a list of ids: a prefill chunk) from positions[i]. Returns each session's logits "
        "(float32[vocab], after its last token), bit for bit what forward() gives; the sessions' "
        "cached-token bookkeeping is cleared, as forward() does.");
  m.def("sample_many", &sample_many, py::arg("logits"), py::arg("config"), py::arg("history") = py::list(),
        py::arg("n") = 1, "n successive draws from one sampler seeded with config.seed.");
  m.def(
      "probabilities",
      [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits, const SamplerConfig& config,
         const py::object& history) {
        int64_t vocab = 0;
        const float* data = as_logits(logits, &vocab);
        const std::vector<int64_t> hist = as_ids(history, "history");
        Sampler sampler(vocab);
        check(sampler.configure(config));
        std::vector<float> probs;
        check(sampler.probabilities(data, hist.data(), hist.size(), &probs));
        py::array_t<float> out(vocab);
        std::copy(probs.begin(), probs.end(), out.mutable_data());
        return out;
      },
      py::arg("logits"), py::arg("config"), py::arg("history") = py::list(),
      "The post-chain distribution the draw uses: float32[vocab], 0 for filtered tokens, one-hot for greedy.");
}
