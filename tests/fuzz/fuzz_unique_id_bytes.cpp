// Fuzzes the unique id's bytes (core::decodeUniqueId: what collieCommInitRank receives from the user, who got it
// from rank 0 by any means): the input fills a collieUniqueId (zero-padded or cut to its size). Invariant: an id
// that decodes encodes and decodes again to the same root address and secret.
#include <algorithm>
#include <cstring>

#include "base/errors.hpp"
#include "core/bootstrap.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  collieUniqueId id{};
  std::memcpy(id.internal, data, std::min(size, sizeof(id.internal)));
  try {
    core::UniqueIdData d = core::decodeUniqueId(id);
    core::UniqueIdData again = core::decodeUniqueId(core::encodeUniqueId(d));
    FUZZ_CHECK(std::memcmp(&d.root, &again.root, sizeof(d.root)) == 0 && d.secret == again.secret);
  } catch (const Error&) {
  }
  return 0;
}
