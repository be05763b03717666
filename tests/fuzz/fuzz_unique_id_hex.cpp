// Fuzzes the unique id as text (core::uniqueIdFromHex, what collieUniqueIdFromString and COLLIE_UNIQUE_ID
// read), then the id it gives (core::decodeUniqueId). Invariants: text that parses prints back as the same
// hex digits in lower case; an id that decodes encodes and decodes again to the same root address and secret.
#include <cctype>
#include <cstring>

#include "base/errors.hpp"
#include "core/bootstrap.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  const std::string text = fuzz::asString(data, size);
  collieUniqueId id;
  try {
    id = core::uniqueIdFromHex(text);
  } catch (const Error&) {
    return 0;
  }
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  FUZZ_CHECK(core::uniqueIdToHex(id) == lower);
  try {
    core::UniqueIdData d = core::decodeUniqueId(id);
    core::UniqueIdData again = core::decodeUniqueId(core::encodeUniqueId(d));
    FUZZ_CHECK(std::memcmp(&d.root, &again.root, sizeof(d.root)) == 0 && d.secret == again.secret);
  } catch (const Error&) {
  }
  return 0;
}
