#include <algorithm>
#include <mutex>

#include "ember/runtime/backend.h"
#include "ember/runtime/kernel.h"

namespace ember {

namespace {
template <typename V>
void upsert(std::vector<std::pair<std::string, V>>& entries, std::string_view name, V v) {
  for (auto& e : entries) {
    if (e.first == name) {
      e.second = v;
      return;
    }
  }
  entries.emplace_back(std::string(name), v);
}
template <typename V>
const V* lookup(const std::vector<std::pair<std::string, V>>& entries, std::string_view name) {
  for (const auto& e : entries) {
    if (e.first == name) return &e.second;
  }
  return nullptr;
}
template <typename V>
std::vector<std::string> keys(const std::vector<std::pair<std::string, V>>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.first);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry registry;
  return registry;
}
void KernelRegistry::add(std::string_view name, KernelDef def) { upsert(entries_, name, def); }
const KernelDef* KernelRegistry::find(std::string_view name) const { return lookup(entries_, name); }
std::vector<std::string> KernelRegistry::names() const { return keys(entries_); }

BackendRegistry& BackendRegistry::global() {
  static BackendRegistry registry;
  return registry;
}
void BackendRegistry::add(std::string_view id, Backend* backend) { upsert(entries_, id, backend); }
Backend* BackendRegistry::find(std::string_view id) const {
  Backend* const* b = lookup(entries_, id);
  return b == nullptr ? nullptr : *b;
}
std::vector<std::string> BackendRegistry::ids() const { return keys(entries_); }

void initialize() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_portable_kernels(KernelRegistry::global());
    register_builtin_backends(BackendRegistry::global());
  });
}

}  // namespace ember
