// One error scheme inside collie: collie::Error exceptions (include/collie/collie.hpp) carrying an ErrorCode
// and a message that ends with the file:line that raised it. src/capi/ catches them at the C boundary.
// Caller mistakes (InvalidArgument, InvalidUsage) leave the communicator usable; SystemError, RemoteError,
// Timeout and InternalError make it failed.
#pragma once

#include <collie/collie.hpp>
#include <cstdarg>
#include <string>

namespace collie::base {

/// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list args);

[[noreturn]] void throwError(ErrorCode code, const char* file, int line, const std::string& message);

/// The name of an error code ("invalid argument", ...).
const char* errorCodeName(ErrorCode code);

/// True for failures that leave a communicator unusable.
inline bool isFatal(ErrorCode code) {
  return code != ErrorCode::Success && code != ErrorCode::InvalidArgument && code != ErrorCode::InvalidUsage &&
         code != ErrorCode::InProgress;
}

/// strerror(errno) as a std::string.
std::string errnoString(int err);

}  // namespace collie::base

#define COLLIE_FAIL(code, ...) \
  ::collie::base::throwError((code), __FILE__, __LINE__, ::collie::base::format(__VA_ARGS__))
#define COLLIE_ENFORCE(cond, code, ...)          \
  do {                                           \
    if (!(cond)) COLLIE_FAIL(code, __VA_ARGS__); \
  } while (0)
#define COLLIE_ARG_CHECK(cond, ...) COLLIE_ENFORCE(cond, ::collie::ErrorCode::InvalidArgument, __VA_ARGS__)
#define COLLIE_USAGE_CHECK(cond, ...) COLLIE_ENFORCE(cond, ::collie::ErrorCode::InvalidUsage, __VA_ARGS__)
#define COLLIE_INTERNAL_CHECK(cond, ...) COLLIE_ENFORCE(cond, ::collie::ErrorCode::InternalError, __VA_ARGS__)
/// Fails with SystemError and strerror(errno) when a syscall-style call returns < 0.
#define COLLIE_SYSCHECK(expr, what)                                          \
  do {                                                                       \
    if ((expr) < 0) {                                                        \
      int collieErr_ = errno;                                                \
      COLLIE_FAIL(::collie::ErrorCode::SystemError, "%s failed: %s", (what), \
                  ::collie::base::errnoString(collieErr_).c_str());          \
    }                                                                        \
  } while (0)
