// One logger. COLLIE_DEBUG=WARN|INFO|TRACE picks the level (default: warnings), COLLIE_DEBUG_SUBSYS a
// comma list of subsystems (INIT,BOOTSTRAP,NET,COLL,TUNE,ENV or ALL; ^X removes one), COLLIE_DEBUG_FILE a
// file to write to instead of stderr (%h is replaced by the host name, %p by the pid).
#pragma once

#include <cstdint>

namespace collie::base {

enum class LogLevel : int { None = 0, Warn = 1, Info = 2, Trace = 3 };

enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,
  kLogBootstrap = 1u << 1,
  kLogNet = 1u << 2,
  kLogColl = 1u << 3,
  kLogTune = 1u << 4,
  kLogEnv = 1u << 5,
  kLogAll = ~0u,
};

/// True when a message of this level and subsystem would be printed (cheap: read once, then cached).
bool logEnabled(LogLevel level, uint32_t subsys);
void logMessage(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

}  // namespace collie::base

#define COLLIE_LOG(level, subsys, ...)                                                \
  do {                                                                                \
    if (::collie::base::logEnabled((level), (subsys)))                                \
      ::collie::base::logMessage((level), (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define COLLIE_WARN(subsys, ...) COLLIE_LOG(::collie::base::LogLevel::Warn, subsys, __VA_ARGS__)
#define COLLIE_INFO(subsys, ...) COLLIE_LOG(::collie::base::LogLevel::Info, subsys, __VA_ARGS__)
#define COLLIE_TRACE(subsys, ...) COLLIE_LOG(::collie::base::LogLevel::Trace, subsys, __VA_ARGS__)
