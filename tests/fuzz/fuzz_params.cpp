// Fuzzes the check of every COLLIE_* value (base::params::validate, what init runs on the environment). Input:
// NAME=VALUE as in the environment (the seeds, stable when parameters are added), or a first byte below the
// registry's size picking a parameter by index followed by the value (so mutations of the value rarely lose the
// name). Unknown names must be refused as cleanly as bad values. Invariants: a value that validates, validated
// again, gives itself (what the accessors cache is accepted), and every parameter says what it allows.
#include <iterator>

#include "base/errors.hpp"
#include "base/params.hpp"
#include "fuzz_check.hpp"

namespace {
#define COLLIE_FUZZ_PARAM_NAME(name, type, env, def, rule, desc) env,
const char* const kNames[] = {COLLIE_PARAM_LIST(COLLIE_FUZZ_PARAM_NAME)};
#undef COLLIE_FUZZ_PARAM_NAME
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  if (size == 0) return 0;
  std::string name, text = fuzz::asString(data + 1, size - 1);
  if (data[0] < std::size(kNames)) {
    name = kNames[data[0]];
  } else {
    text = fuzz::asString(data, size);
    size_t eq = text.find('=');
    name = text.substr(0, eq);
    text = eq == std::string::npos ? "" : text.substr(eq + 1);
  }
  std::string value;
  try {
    value = base::params::validate(name, text);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_CHECK(base::params::validate(name, value) == value);
  FUZZ_CHECK(!base::params::allowed(name).empty());
  return 0;
}
