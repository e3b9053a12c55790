// Internal to the runtime: the UTF-8 check of a program table's strings (see program_strings.cpp).
#pragma once

#include <string_view>

#include "ember/runtime/error.h"
#include "program_generated.h"

namespace ember {

// True when `s` is well-formed UTF-8 as Python's strict decoder takes it (no overlong forms,
// no surrogates, nothing above U+10FFFF); NUL bytes are allowed.
bool valid_utf8(std::string_view s);

// Checks every string of a verified program table (method, operator, delegate, compile-spec,
// value, state and metadata names, string values). The flatbuffer verifier checks a string's
// bounds and terminator only: a corrupted name reached Python as bytes that could not be
// decoded, a UnicodeDecodeError instead of an ember error. Returns kInvalidProgram naming the
// first bad string's place; never reads outside the table (its strings were verified).
Error verify_program_strings(const fb::Program* root);

}  // namespace ember
