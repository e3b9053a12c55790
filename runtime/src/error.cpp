#include "ember/runtime/error.h"

#include <vector>

namespace ember {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "Ok";
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kInvalidProgram: return "InvalidProgram";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kNotSupported: return "NotSupported";
    case ErrorCode::kOutOfMemory: return "OutOfMemory";
    case ErrorCode::kIO: return "IO";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Error Error::make(ErrorCode code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string msg;
  if (n > 0) {
    std::vector<char> buf(static_cast<size_t>(n) + 1);
    std::vsnprintf(buf.data(), buf.size(), fmt, ap2);
    msg.assign(buf.data(), static_cast<size_t>(n));
  }
  va_end(ap2);
  return Error(code, std::move(msg));
}

Error Error::with_context(const std::string& context) const {
  return Error(code_, context + ": " + message_);
}

}  // namespace ember
