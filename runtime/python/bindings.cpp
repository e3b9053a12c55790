// pybind11 bindings of the runtime: ember.runtime._C.
// Errors become typed Python exceptions (see ember/runtime/errors.py for the hierarchy).
//
// Locking rule: the GIL is released before any ember lock is taken (py_support::lock_nogil),
// and reacquired while holding it. A thread that waited for a lock with the GIL held would
// deadlock against the thread holding the lock, which needs the GIL to return.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ember/runtime/kernel.h"
#include "ember/runtime/method.h"
#include "ember/runtime/core_probe.h"
#include "ember/runtime/cpu.h"
#include "ember/runtime/memory_limit.h"
#include "ember/runtime/program.h"
#include "ember/runtime/thread_pool.h"
#include "py_support.h"

namespace py = pybind11;
using namespace ember;
using py_support::lock_nogil;
using py_support::raise;
using py_support::unwrap;

namespace {


// numpy dtype <-> ember dtype. bfloat16 travels as uint16 bits with an explicit flag.
Result<DType> dtype_from_numpy(const py::dtype& dt, bool bf16) {
  if (bf16) return DType::kBFloat16;
  const char kind = dt.kind();
  const size_t size = static_cast<size_t>(dt.itemsize());
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 2) return DType::kFloat16;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  if (kind == 'b') return DType::kBool;
  return Error::make(ErrorCode::kInvalidArgument, "numpy dtype %s is not supported by ember",
                     py::str(dt).cast<std::string>().c_str());
}

const char* numpy_format(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "uint16";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
  }
  return "uint8";
}

// A loaded program plus lazily created methods (one per name, guarded by a mutex each).
class PyProgram {
 public:
  explicit PyProgram(std::shared_ptr<Program> p) : program_(std::move(p)) {}

  std::vector<std::string> methods() const { return program_->method_names(); }

  py::dict metadata() const { return py_support::metadata_dict(*program_); }

  struct Slot {
    std::unique_ptr<Method> method;
    std::mutex mu;
  };

  // The method's slot, loading the method on first use. Called with the GIL held; the lookup
  // and the load run without it.
  Slot& slot(const std::string& name) {
    Slot* found = nullptr;
    Error err;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lk(mu_);
      auto it = methods_.find(name);
      if (it != methods_.end()) {
        found = it->second.get();
      } else {
        Result<std::unique_ptr<Method>> r = program_->load_method(name);
        if (r.ok()) {
          auto s = std::make_unique<Slot>();
          s->method = std::move(r).value();
          found = s.get();
          methods_.emplace(name, std::move(s));
        } else {
          err = r.error();
        }
      }
    }
    if (err) raise(err);
    return *found;
  }

  // inputs: list of (array, is_bf16). Returns list of (array, is_bf16).
  py::list run(const std::string& name, const py::list& inputs) {
    Slot& s = slot(name);
    Method& m = *s.method;
    if (inputs.size() != m.num_inputs()) {
      std::string specs;
      for (size_t i = 0; i < m.num_inputs(); ++i) {
        const auto& sp = m.input_spec(i);
        specs += (i ? ", " : "") + std::string(dtype_name(sp.dtype)) + "[";
        for (size_t d = 0; d < sp.sizes.size(); ++d) {
          specs += (d ? ", " : "") + std::string(sp.dynamic[d] ? "<=" : "") + std::to_string(sp.sizes[d]);
        }
        specs += "]";
      }
      raise(Error::make(ErrorCode::kInvalidArgument, "method '%s' takes %zu inputs (%s), got %zu", name.c_str(),
                        m.num_inputs(), specs.c_str(), static_cast<size_t>(inputs.size())));
    }
    std::vector<py::array> keep;
    std::vector<Tensor> tensors;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto pair = inputs[i].cast<py::tuple>();
      py::array a = py::array::ensure(pair[0], py::array::c_style);
      if (!a) raise(Error::make(ErrorCode::kInvalidArgument, "input %zu is not convertible to a numpy array", i));
      Tensor t;
      t.dtype = unwrap(dtype_from_numpy(a.dtype(), pair[1].cast<bool>()));
      if (a.ndim() > kMaxDims) {
        raise(Error::make(ErrorCode::kInvalidArgument, "input %zu has rank %zd, above %d", i,
                          static_cast<ssize_t>(a.ndim()), kMaxDims));
      }
      t.dim = static_cast<int32_t>(a.ndim());
      for (int d = 0; d < t.dim; ++d) t.sizes[d] = a.shape(d);
      t.data = const_cast<void*>(a.data());
      t.capacity = t.nbytes();
      tensors.push_back(t);
      keep.push_back(std::move(a));
    }
    // Bind, run and read the outputs under the method's lock; the GIL is released while
    // waiting for it and while running, and reacquired (lock held) to build the outputs.
    std::unique_lock<std::mutex> lk = lock_nogil(s.mu);
    Error e;
    {
      py::gil_scoped_release nogil;
      for (size_t i = 0; i < tensors.size() && !e; ++i) e = m.set_input(i, tensors[i]);
      if (!e) e = m.execute();
    }
    if (e) raise(e);
    py::list out;
    for (size_t i = 0; i < m.num_outputs(); ++i) {
      const EValue& v = m.output(i);
      if (v.tag == Tag::kTensor) {
        const Tensor& t = v.tensor;
        std::vector<ssize_t> shape(t.sizes, t.sizes + t.dim);
        py::array a(py::dtype(numpy_format(t.dtype)), shape);
        if (t.nbytes() > 0) std::memcpy(a.mutable_data(), t.data, t.nbytes());  // outputs outlive the arena
        out.append(py::make_tuple(a, t.dtype == DType::kBFloat16));
      } else if (v.tag == Tag::kInt) {
        out.append(py::make_tuple(py::int_(v.scalar.i), false));
      } else if (v.tag == Tag::kDouble) {
        out.append(py::make_tuple(py::float_(v.scalar.d), false));
      } else if (v.tag == Tag::kBool) {
        out.append(py::make_tuple(py::bool_(v.scalar.b), false));
      } else {
        out.append(py::make_tuple(py::none(), false));
      }
    }
    return out;
  }

  py::dict method_info(const std::string& name) {
    Slot& s = slot(name);
    Method& m = *s.method;
    py::dict d;
    py::list inputs;
    for (size_t i = 0; i < m.num_inputs(); ++i) {
      const auto& sp = m.input_spec(i);
      inputs.append(py::dict(py::arg("dtype") = dtype_name(sp.dtype), py::arg("sizes") = sp.sizes,
                             py::arg("dynamic") = sp.dynamic));
    }
    d["inputs"] = inputs;
    d["num_outputs"] = m.num_outputs();
    d["arena_size"] = m.arena_size();
    py::list instrs;
    for (size_t i = 0; i < m.num_instructions(); ++i) {
      auto info = m.instruction_info(i);
      instrs.append(py::make_tuple(info.kind, info.name));
    }
    d["instructions"] = instrs;
    return d;
  }

  void reset_state() {
    py::gil_scoped_release nogil;
    program_->reset_state();
  }
  size_t file_size() const { return program_->file_size(); }
  std::pair<uint32_t, uint32_t> version() const { return {program_->format_major(), program_->format_minor()}; }

 private:
  std::shared_ptr<Program> program_;
  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Slot>> methods_;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ember C++ runtime";
  ember::initialize();
  py::class_<PyProgram>(m, "Program")
      .def_property_readonly("methods", &PyProgram::methods)
      .def_property_readonly("metadata", &PyProgram::metadata)
      .def_property_readonly("file_size", &PyProgram::file_size)
      .def_property_readonly("format_version", &PyProgram::version)
      .def("run", &PyProgram::run, py::arg("method"), py::arg("inputs"))
      .def("method_info", &PyProgram::method_info, py::arg("method"))
      .def("reset_state", &PyProgram::reset_state);
  m.def(
      "load_file",
      [](const std::string& path, bool mmap) {
        Result<std::shared_ptr<Program>> r = [&] {
          py::gil_scoped_release nogil;
          return Program::load_file(path, mmap ? LoadMode::kMmap : LoadMode::kCopy);
        }();
        return std::make_unique<PyProgram>(unwrap(std::move(r)));
      },
      py::arg("path"), py::arg("mmap") = true);
  m.def(
      "load_bytes",
      [](const py::bytes& b) {
        std::string_view sv = b;  // bytes are immutable and `b` is held: safe without the GIL
        Result<std::shared_ptr<Program>> r = [&] {
          py::gil_scoped_release nogil;
          return Program::load_bytes(reinterpret_cast<const uint8_t*>(sv.data()), sv.size());
        }();
        return std::make_unique<PyProgram>(unwrap(std::move(r)));
      },
      py::arg("data"));
  m.def("kernel_names", [] { return KernelRegistry::global().names(); });
  m.def("kernel_info", [](const std::string& name) -> py::object {
    const KernelDef* d = KernelRegistry::global().find(name);
    if (d == nullptr) return py::none();
    return py::dict(py::arg("num_args") = d->num_args, py::arg("num_outputs") = d->num_outputs,
                    py::arg("view") = d->view);
  });
  m.def("backend_ids", [] { return BackendRegistry::global().ids(); });
  m.def("set_num_threads", [](int n) {
    if (n < 1) raise(Error::make(ErrorCode::kInvalidArgument, "threads must be >= 1, got %d", n));
    py_support::warn_if_above_cpus(n);
    Error err;
    {
      py::gil_scoped_release nogil;  // set_num_threads takes the pool's lock
      set_num_threads(n);
      err = thread_pool_error();
    }
    if (err) raise(err);
    return get_num_threads();
  });
  m.def("get_num_threads", &get_num_threads);
  m.def("max_num_threads", &max_num_threads);
  m.def("set_memory_limit", [](uint64_t bytes) { set_memory_limit(bytes); });
  m.def("get_memory_limit", &memory_limit);
  m.def("physical_core_count", &physical_core_count);
  m.def(
      "core_round_trip_ns",
      [](int cpu_a, int cpu_b, int trips) {
        double ns = 0;
        Error err;
        {
          py::gil_scoped_release nogil;  // spins for milliseconds
          err = core_round_trip_ns(cpu_a, cpu_b, trips, &ns);
        }
        if (err) raise(err);
        return ns;
      },
      py::arg("cpu_a"), py::arg("cpu_b"), py::arg("trips"));
  m.def("cpu_info", [] {
    const CpuFeatures& f = cpu_features();
    py::dict features(py::arg("avx2") = f.avx2, py::arg("fma") = f.fma, py::arg("f16c") = f.f16c,
                      py::arg("avx512f") = f.avx512f, py::arg("avx512bw") = f.avx512bw,
                      py::arg("avx512vl") = f.avx512vl, py::arg("avx512_vnni") = f.avx512vnni,
                      py::arg("avx512_vbmi") = f.avx512vbmi,
                      py::arg("avx_vnni") = f.avxvnni, py::arg("amx_tile") = f.amx_tile,
                      py::arg("amx_int8") = f.amx_int8);
    py::dict kernels;
    for (const KernelPath& k : kernel_paths()) kernels[py::str(k.family)] = k.isa;
    const Error& err = kernel_isa_error();
    return py::dict(py::arg("model") = cpu_model_name(), py::arg("vendor") = cpu_vendor_name(f.vendor),
                    py::arg("family") = f.family,
                    py::arg("features") = features,
                    py::arg("best_isa") = kernel_isa_name(best_kernel_isa()),
                    py::arg("isa") = kernel_isa_name(kernel_isa()),
                    py::arg("isa_error") = err ? py::object(py::str(err.message())) : py::object(py::none()),
                    py::arg("kernels") = kernels);
  });
}
