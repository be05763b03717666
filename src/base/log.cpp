#include "base/log.hpp"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include "base/errors.hpp"
#include "base/params.hpp"

namespace collie::base {
namespace {

struct LogConfig {
  LogLevel level = LogLevel::Warn;
  uint32_t subsys = kLogAll;
  FILE* out = stderr;
  char host[64] = {0};
};

uint32_t subsysBit(const std::string& name) {
  if (name == "INIT") return kLogInit;
  if (name == "BOOTSTRAP") return kLogBootstrap;
  if (name == "NET") return kLogNet;
  if (name == "COLL") return kLogColl;
  if (name == "TUNE") return kLogTune;
  if (name == "ENV") return kLogEnv;
  if (name == "ALL") return kLogAll;
  return 0;
}

LogConfig makeConfig() {
  LogConfig c;
  std::string lvl;
  for (char ch : params::debug()) lvl += static_cast<char>(toupper(static_cast<unsigned char>(ch)));
  if (lvl == "NONE")
    c.level = LogLevel::None;
  else if (lvl == "INFO")
    c.level = LogLevel::Info;
  else if (lvl == "TRACE")
    c.level = LogLevel::Trace;
  else
    c.level = LogLevel::Warn;

  const std::string& list = params::debugSubsys();
  bool first = true;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    for (auto& ch : item) ch = static_cast<char>(toupper(static_cast<unsigned char>(ch)));
    if (!item.empty()) {
      bool exclude = item[0] == '^';
      uint32_t bit = subsysBit(exclude ? item.substr(1) : item);
      if (exclude) {
        if (first) c.subsys = kLogAll;
        c.subsys &= ~bit;
      } else {
        if (first) c.subsys = 0;
        c.subsys |= bit;
      }
      first = false;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }

  gethostname(c.host, sizeof(c.host) - 1);
  const std::string& file = params::debugFile();
  if (!file.empty()) {
    std::string path;
    for (size_t i = 0; i < file.size(); ++i) {
      if (file[i] == '%' && i + 1 < file.size() && file[i + 1] == 'h') {
        path += c.host;
        ++i;
      } else if (file[i] == '%' && i + 1 < file.size() && file[i + 1] == 'p') {
        path += std::to_string(getpid());
        ++i;
      } else {
        path += file[i];
      }
    }
    if (FILE* f = fopen(path.c_str(), "a")) c.out = f;
  }
  return c;
}

// Logging never throws: a bad COLLIE_* value (which every parameter read reports) is said once on stderr and the
// defaults are used; the same value then fails init with InvalidArgument at the communicator's own reads.
LogConfig makeConfigOrDefault() {
  try {
    return makeConfig();
  } catch (const std::exception& e) {
    fprintf(stderr, "collie WARN %s (logging at WARN to stderr)\n", e.what());
    return LogConfig{};
  }
}

const LogConfig& config() {
  static const LogConfig c = makeConfigOrDefault();
  return c;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::Warn:
      return "WARN";
    case LogLevel::Info:
      return "INFO";
    case LogLevel::Trace:
      return "TRACE";
    default:
      return "";
  }
}

}  // namespace

bool logEnabled(LogLevel level, uint32_t subsys) {
  const LogConfig& c = config();
  return static_cast<int>(level) <= static_cast<int>(c.level) && (c.subsys & subsys) != 0;
}

void logMessage(LogLevel level, uint32_t /*subsys*/, const char* file, int line, const char* fmt, ...) {
  const LogConfig& c = config();
  va_list args;
  va_start(args, fmt);
  std::string msg = vformat(fmt, args);
  va_end(args);
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (level == LogLevel::Trace) {
    fprintf(c.out, "%s:%d collie %s %s (%s:%d)\n", c.host, getpid(), levelName(level), msg.c_str(), base, line);
  } else {
    fprintf(c.out, "%s:%d collie %s %s\n", c.host, getpid(), levelName(level), msg.c_str());
  }
  fflush(c.out);
}

}  // namespace collie::base
