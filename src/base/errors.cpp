#include "base/errors.hpp"

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/fd_limits.hpp"

namespace collie::base {

std::string vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return {};
  std::string out(static_cast<size_t>(n), '\0');
  vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vformat(fmt, args);
  va_end(args);
  return out;
}

void throwError(ErrorCode code, const char* file, int line, const std::string& message) {
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  throw Error(code, format("%s (%s:%d)", message.c_str(), base, line));
}

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::Success:
      return "no error";
    case ErrorCode::UnhandledCudaError:
      return "unhandled cuda error";
    case ErrorCode::SystemError:
      return "unhandled system error";
    case ErrorCode::InternalError:
      return "internal error";
    case ErrorCode::InvalidArgument:
      return "invalid argument";
    case ErrorCode::InvalidUsage:
      return "invalid usage";
    case ErrorCode::RemoteError:
      return "remote process exited or there was a network error";
    case ErrorCode::InProgress:
      return "operation in progress";
    case ErrorCode::Timeout:
      return "timed out waiting for a peer";
  }
  return "unknown result code";
}

std::string errnoString(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer.
  std::string text = strerror_r(err, buf, sizeof(buf));
  if (isFdShortage(err)) text += " (" + fdShortageMessage(err) + ")";
  return text;
}

}  // namespace collie::base
