#include "base/params.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "base/errors.hpp"

namespace collie::base::params {
namespace {

const char* envOrNull(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

struct Entry {
  const char* env;
  const char* def;
  Rule rule;
  const char* desc;
};

// The registry, a parameter's text and the descriptions are made once and never destroyed (as the shm segment
// registry): a communicator with static storage is destroyed at exit after them, and reads parameters then.
const std::vector<Entry>& registry() {
  static const auto* rows = new std::vector<Entry>{
#define COLLIE_PARAM_ENTRY(name, type, env, def, rule, desc) Entry{env, def, rule, desc},
      COLLIE_PARAM_LIST(COLLIE_PARAM_ENTRY)
#undef COLLIE_PARAM_ENTRY
  };
  return *rows;
}

const Entry& find(const std::string& env) {
  for (const Entry& e : registry()) {
    if (env == e.env) return e;
  }
  COLLIE_FAIL(ErrorCode::InvalidArgument, "%s is not a collie parameter (collie-info --params lists them)",
              env.c_str());
}

std::string upper(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

std::vector<std::string> splitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    size_t comma = s.find(',', pos);
    out.push_back(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

std::string joinWords(const char* words, const char* sep) {
  std::string out;
  for (const std::string& w : splitCommas(words)) out += (out.empty() ? "" : sep) + w;
  return out;
}

bool oneOf(const std::string& text, const char* words, bool anyCase) {
  for (const std::string& w : splitCommas(words)) {
    if (anyCase ? upper(text) == upper(w) : text == w) return true;
  }
  return false;
}

std::string describe(const Rule& r) {
  switch (r.kind) {
    case Rule::Range:
      return "an integer in [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
    case Rule::ZeroOrRange:
      return "0 (automatic) or an integer in [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
    case Rule::Timeout:
      return "milliseconds, an integer in [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) +
             "], or inf / never (any case) to wait for ever";
    case Rule::Words:
      return "one of " + joinWords(r.words, ", ") + " (any case)";
    case Rule::Exact:
      return "one of " + joinWords(r.words, ", ");
    case Rule::Subsys:
      return "a comma list of " + joinWords(r.words, ", ") + " (any case), each optionally prefixed by ^";
    case Rule::HostPort:
      return "host:port with port in [1, 65535]";
    case Rule::Hex32:
      return "32 hex digits";
    case Rule::Text:
      return "any text";
  }
  return "any text";
}

[[noreturn]] void reject(const Entry& e, const std::string& text) {
  COLLIE_FAIL(ErrorCode::InvalidArgument, "%s=%s: expected %s", e.env, text.c_str(), describe(e.rule).c_str());
}

/// Parses a whole integer (decimal, or 0x hex / 0 octal as strtoll base 0 reads them); false on junk or overflow.
bool parseInteger(const std::string& text, int64_t* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 0);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE) return false;
  *out = v;
  return true;
}

std::string check(const Entry& e, const std::string& text) {
  const Rule& r = e.rule;
  int64_t v = 0;
  switch (r.kind) {
    case Rule::Range:
      if (!parseInteger(text, &v) || v < r.lo || v > r.hi) reject(e, text);
      return std::to_string(v);
    case Rule::ZeroOrRange:
      if (!parseInteger(text, &v) || (v != 0 && (v < r.lo || v > r.hi))) reject(e, text);
      return std::to_string(v);
    case Rule::Timeout:
      if (upper(text) == "INF" || upper(text) == "NEVER") return std::to_string(kNeverMs);
      if (!parseInteger(text, &v) || v < r.lo || v > r.hi) reject(e, text);
      return std::to_string(v);
    case Rule::Words:
    case Rule::Exact:
      if (!oneOf(text, r.words, r.kind == Rule::Words)) reject(e, text);
      return text;
    case Rule::Subsys:
      for (const std::string& item : splitCommas(text)) {
        if (item.empty()) continue;
        if (!oneOf(item[0] == '^' ? item.substr(1) : item, r.words, true)) reject(e, text);
      }
      return text;
    case Rule::HostPort: {
      size_t colon = text.rfind(':');
      if (colon == std::string::npos || colon == 0) reject(e, text);
      std::string port = text.substr(colon + 1);
      if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
        reject(e, text);
      }
      v = std::stoll(port);
      if (v < 1 || v > 65535) reject(e, text);
      return text;
    }
    case Rule::Hex32:
      if (text.size() != 32 || text.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        reject(e, text);
      }
      return text;
    case Rule::Text:
      return text;
  }
  return text;
}

/// The value a parameter takes in this process: its checked environment value, else its default.
std::string current(const char* env, const char* def) {
  checkEnvironment();
  const char* v = envOrNull(env);
  return v ? validate(env, v) : std::string(def);
}

int64_t readInt(const char* env, const char* def) { return std::strtoll(current(env, def).c_str(), nullptr, 10); }

}  // namespace

std::string validate(const std::string& env, const std::string& text) { return check(find(env), text); }

std::string allowed(const std::string& env) { return describe(find(env).rule); }

void checkEnvironment() {
  for (const Entry& e : registry()) {
    if (const char* v = envOrNull(e.env)) check(e, v);
  }
}

#define COLLIE_PARAM_DEFINE_Int(name, env, def)     \
  int64_t name() {                                  \
    static const int64_t value = readInt(env, def); \
    return value;                                   \
  }
#define COLLIE_PARAM_DEFINE_Str(name, env, def)                    \
  const std::string& name() {                                      \
    static const auto* value = new std::string(current(env, def)); \
    return *value;                                                 \
  }
#define COLLIE_PARAM_DEFINE(name, type, env, def, rule, desc) COLLIE_PARAM_DEFINE_##type(name, env, def)
COLLIE_PARAM_LIST(COLLIE_PARAM_DEFINE)
#undef COLLIE_PARAM_DEFINE

namespace {
std::string currentValue(int64_t v) { return std::to_string(v); }
std::string currentValue(const std::string& v) { return v; }

/// Each description followed by what the parameter allows, built once (ParamInfo points into it).
const std::vector<std::string>& descriptions() {
  static const auto* texts = [] {
    auto* out = new std::vector<std::string>;
    for (const Entry& e : registry()) out->push_back(std::string(e.desc) + "; allowed: " + describe(e.rule));
    return out;
  }();
  return *texts;
}
}  // namespace

std::vector<ParamInfo> all() {
  std::vector<ParamInfo> rows;
  size_t i = 0;
#define COLLIE_PARAM_ROW(name, type, env, def, rule, desc) \
  rows.push_back(                                          \
      ParamInfo{env, #type, def, descriptions()[i++].c_str(), currentValue(name()), envOrNull(env) != nullptr});
  COLLIE_PARAM_LIST(COLLIE_PARAM_ROW)
#undef COLLIE_PARAM_ROW
  return rows;
}

}  // namespace collie::base::params
