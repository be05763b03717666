// Fuzzes the bootstrap root's parser of a rank's hello (core::parseBootstrapHello: the first bytes any connection
// to the root's port sends, before the secret is checked, so from anyone). Invariant: a hello that parses is
// well formed (rank in [0, nranks), its PeerInfo names that rank, address lengths in
// bounds) and encodes back to exactly the bytes it came from.
#include <cstring>

#include "base/errors.hpp"
#include "core/bootstrap_wire.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  core::BootstrapHello hello;
  try {
    hello = core::parseBootstrapHello(data, size);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_CHECK(hello.nranks >= 1 && hello.rank >= 0 && hello.rank < hello.nranks && hello.info.rank == hello.rank);
  for (const auto& a : hello.info.addresses) FUZZ_CHECK(a.length <= transport::TransportAddress::kBytes);
  const std::vector<uint8_t> again = core::encodeBootstrapHello(hello);
  FUZZ_CHECK(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  return 0;
}
