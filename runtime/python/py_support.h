// Helpers shared by the pybind11 modules (ember.runtime._C and ember.runners._runner): raising
// ember errors as typed Python exceptions and converting metadata. Header-only on purpose: each
// extension module compiles its own copy.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <string>
#include <string_view>

#include "ember/runtime/error.h"
#include "ember/runtime/program.h"
#include "ember/runtime/thread_pool.h"

namespace ember::py_support {

namespace py = pybind11;

// Text read from a file may be invalid UTF-8 (a corrupted name): decode it leniently.
inline py::object lenient_str(std::string_view s) {
  return py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}

// Raises the ember.runtime.errors class for the error's code, carrying its message.
[[noreturn]] inline void raise(const Error& e) {
  py::object cls = py::module_::import("ember.runtime.errors").attr("error_class")(error_code_name(e.code()));
  py::object msg = lenient_str(e.message());
  PyErr_SetObject(cls.ptr(), msg.ptr());
  throw py::error_already_set();
}

// Locks `mu` with the GIL released while waiting, then reacquires the GIL (mutex held). Never
// wait for an ember lock with the GIL held: its holder may need the GIL to release it.
inline std::unique_lock<std::mutex> lock_nogil(std::mutex& mu) {
  std::unique_lock<std::mutex> lk(mu, std::defer_lock);
  if (lk.try_lock()) return lk;
  py::gil_scoped_release nogil;
  lk.lock();
  return lk;
}

// A RuntimeWarning when `threads` is above the CPUs this process may use (the pool clamps it).
inline void warn_if_above_cpus(int threads) {
  const int cap = max_num_threads();
  if (threads <= cap) return;
  const std::string msg = "threads=" + std::to_string(threads) + " is more than the " + std::to_string(cap) +
                          " logical CPUs this process may use; using " + std::to_string(cap) +
                          " (extra threads would only compete for the same cores)";
  if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) != 0) throw py::error_already_set();
}

inline void check(const Error& e) {
  if (e) raise(e);
}

template <typename T>
T unwrap(Result<T>&& r) {
  if (!r.ok()) raise(r.error());
  return std::move(r).value();
}

inline py::object meta_to_py(const MetaEntry& m) {
  switch (m.kind) {
    case MetaKind::kInt: return py::int_(m.i);
    case MetaKind::kDouble: return py::float_(m.d);
    case MetaKind::kBool: return py::bool_(m.b);
    case MetaKind::kString: return lenient_str(m.bytes);
    case MetaKind::kIntList: return py::cast(m.ints);
    case MetaKind::kBytes: return py::bytes(m.bytes.data(), m.bytes.size());
  }
  return py::none();
}

inline py::dict metadata_dict(const Program& program) {
  py::dict d;
  for (const auto& m : program.metadata()) d[lenient_str(m.key)] = meta_to_py(m);
  return d;
}

}  // namespace ember::py_support
