#include "base/params.hpp"

#include <cstdlib>

#include "base/errors.hpp"

namespace collie::base::params {
namespace {

const char* envOrNull(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int64_t parseInt(const char* env, const char* def) {
  const char* v = envOrNull(env);
  if (!v) return std::strtoll(def, nullptr, 0);
  char* end = nullptr;
  long long parsed = std::strtoll(v, &end, 0);
  if (end == v || *end != '\0') {
    // A bad value must not be silently replaced: say which variable and what was expected.
    COLLIE_FAIL(ErrorCode::InvalidArgument, "environment variable %s='%s' is not an integer", env, v);
  }
  return parsed;
}

std::string parseStr(const char* env, const char* def) {
  const char* v = envOrNull(env);
  return v ? std::string(v) : std::string(def);
}

}  // namespace

#define COLLIE_PARAM_DEFINE_Int(name, env, def)      \
  int64_t name() {                                   \
    static const int64_t value = parseInt(env, def); \
    return value;                                    \
  }
#define COLLIE_PARAM_DEFINE_Str(name, env, def)          \
  const std::string& name() {                            \
    static const std::string value = parseStr(env, def); \
    return value;                                        \
  }
#define COLLIE_PARAM_DEFINE(name, type, env, def, desc) COLLIE_PARAM_DEFINE_##type(name, env, def)
COLLIE_PARAM_LIST(COLLIE_PARAM_DEFINE)
#undef COLLIE_PARAM_DEFINE

namespace {
std::string currentValue(int64_t v) { return std::to_string(v); }
std::string currentValue(const std::string& v) { return v; }
}  // namespace

std::vector<ParamInfo> all() {
  std::vector<ParamInfo> rows;
#define COLLIE_PARAM_ROW(name, type, env, def, desc) \
  rows.push_back(ParamInfo{env, #type, def, desc, currentValue(name()), envOrNull(env) != nullptr});
  COLLIE_PARAM_LIST(COLLIE_PARAM_ROW)
#undef COLLIE_PARAM_ROW
  return rows;
}

}  // namespace collie::base::params
