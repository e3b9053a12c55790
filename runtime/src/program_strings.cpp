// The UTF-8 check of a program table's strings (program_strings.h).
#include "program_strings.h"

#include <cstdint>
#include <string>

namespace ember {

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07u;
    } else {
      return false;  // a continuation byte first, or 0xF8-0xFF
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (p[i + k] & 0x3Fu);
    }
    static constexpr uint32_t kLeast[5] = {0, 0, 0x80, 0x800, 0x10000};  // shorter forms are overlong
    if (cp < kLeast[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

namespace {

bool ok(const flatbuffers::String* s) { return s == nullptr || valid_utf8(std::string_view(s->c_str(), s->size())); }

Error bad(const std::string& where) {
  return Error::make(ErrorCode::kInvalidProgram, "%s is not valid UTF-8 (the file is corrupted)", where.c_str());
}

Error check_method(const fb::Method* m, uint32_t i) {
  const std::string at = "method " + std::to_string(i);
  if (!ok(m->name())) return bad("the name of " + at);
  if (const auto* values = m->values()) {
    for (uint32_t j = 0; j < values->size(); ++j) {
      const fb::Value* v = values->Get(j);
      if (v->v() == nullptr) continue;  // Method::load reports a kind without data
      if (v->v_type() == fb::ValueKind::Tensor && !ok(v->v_as_Tensor()->name())) {
        return bad("the name of tensor value " + std::to_string(j) + " of " + at);
      }
      if (v->v_type() == fb::ValueKind::String && !ok(v->v_as_String()->v())) {
        return bad("string value " + std::to_string(j) + " of " + at);
      }
    }
  }
  if (const auto* ops = m->operators()) {
    for (uint32_t j = 0; j < ops->size(); ++j) {
      if (!ok(ops->Get(j)->name())) return bad("operator " + std::to_string(j) + " of " + at);
    }
  }
  if (const auto* delegates = m->delegates()) {
    for (uint32_t j = 0; j < delegates->size(); ++j) {
      const fb::Delegate* d = delegates->Get(j);
      if (!ok(d->backend())) return bad("the backend id of delegate " + std::to_string(j) + " of " + at);
      const auto* specs = d->compile_specs();
      for (uint32_t k = 0; specs != nullptr && k < specs->size(); ++k) {
        if (!ok(specs->Get(k)->key())) {
          return bad("compile spec " + std::to_string(k) + " of delegate " + std::to_string(j) + " of " + at);
        }
      }
    }
  }
  return Error::ok();
}

}  // namespace

Error verify_program_strings(const fb::Program* root) {
  if (const auto* methods = root->methods()) {
    for (uint32_t i = 0; i < methods->size(); ++i) EMBER_TRY(check_method(methods->Get(i), i));
  }
  if (const auto* state = root->state()) {
    for (uint32_t i = 0; i < state->size(); ++i) {
      if (!ok(state->Get(i)->name())) return bad("the name of state tensor " + std::to_string(i));
    }
  }
  if (const auto* md = root->metadata()) {
    for (uint32_t i = 0; i < md->size(); ++i) {
      const fb::MetaEntry* e = md->Get(i);
      if (!ok(e->key())) return bad("the key of metadata entry " + std::to_string(i));
      if (e->value() != nullptr && e->value_type() == fb::MetaValue::MetaString &&
          !ok(e->value_as_MetaString()->v())) {
        return bad("the value of metadata entry " + std::to_string(i));
      }
    }
  }
  return Error::ok();
}

}  // namespace ember
