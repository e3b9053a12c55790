// Error and Result<T>: the runtime never throws. Every fallible call returns one of these.
//
// An `Error` is a code plus a human-readable message that says what was wrong, with the
// offending value, and what to do instead. `Error::ok()` carries no message (no allocation).
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>

namespace ember {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // a caller passed a bad value (wrong dtype, rank, size, count)
  kInvalidProgram = 2,   // the file is malformed: bad magic, version, index, offset or size
  kNotFound = 3,         // unknown method, kernel, backend or metadata key
  kNotSupported = 4,     // a valid request this build cannot serve
  kOutOfMemory = 5,      // an allocation or a planned capacity was exceeded
  kIO = 6,               // the operating system refused (open, mmap, read)
  kInternal = 7,         // a broken invariant inside ember (a bug: please report it)
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Error {
 public:
  Error() = default;
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Error ok() { return Error(); }
  // printf-style constructor; the message is formatted once, only on failure paths.
  static Error make(ErrorCode code, const char* fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 2, 3)))
#endif
      ;

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return !is_ok(); }  // true when this is an error
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is prefixed with `context` ("while X: <message>").
  Error with_context(const std::string& context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// Holds either a value or an error. Access the value only after checking `ok()`.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : has_value_(true), value_(std::move(value)) {}  // NOLINT(implicit)
  Result(Error error) : error_(std::move(error)) {}                // NOLINT(implicit)

  bool ok() const { return has_value_; }
  const Error& error() const { return error_; }
  T& value() & { return value_; }
  T&& value() && { return std::move(value_); }
  T* operator->() { return &value_; }
  T& operator*() { return value_; }

 private:
  bool has_value_ = false;
  T value_{};
  Error error_;
};

}  // namespace ember

// Returns early from the enclosing function with the error if `expr` failed.
#define EMBER_TRY(expr)                   \
  do {                                    \
    ::ember::Error _ember_err = (expr);   \
    if (_ember_err) return _ember_err;    \
  } while (0)

// Returns an Error::make(code, ...) from the enclosing function when `cond` is false.
#define EMBER_CHECK(cond, code, ...)                                 \
  do {                                                               \
    if (!(cond)) return ::ember::Error::make((code), __VA_ARGS__);   \
  } while (0)

#define EMBER_CHECK_ARG(cond, ...) EMBER_CHECK(cond, ::ember::ErrorCode::kInvalidArgument, __VA_ARGS__)
