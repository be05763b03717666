// Fuzzes COLLIE_SOCKET_IFNAME's matcher (base::interfaceMatches: "eth,ib" prefixes, "^" to exclude, "=" for exact
// names) and the interface search it drives (base::findInterfaces over this host's real interfaces, with
// COLLIE_SOCKET_FAMILY). Input: the filter, a newline, an interface name, optionally a newline and a family word.
// Invariant: for a non-empty filter F not starting with '^', "^F" matches exactly the names F does not.
#include "base/errors.hpp"
#include "base/socket.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  const std::string text = fuzz::asString(data, size);
  const size_t nl = text.find('\n');
  const std::string filter = text.substr(0, nl);
  std::string name = nl == std::string::npos ? "" : text.substr(nl + 1), family;
  if (size_t nl2 = name.find('\n'); nl2 != std::string::npos) {
    family = name.substr(nl2 + 1);
    name.resize(nl2);
  }
  const bool matched = base::interfaceMatches(filter, name);
  if (!filter.empty() && filter[0] != '^') FUZZ_CHECK(base::interfaceMatches("^" + filter, name) == !matched);
  try {
    for (const base::InterfaceAddress& ifa : base::findInterfaces(filter, family)) {
      FUZZ_CHECK(ifa.addr.ss_family == AF_INET || ifa.addr.ss_family == AF_INET6);
      if (!filter.empty()) FUZZ_CHECK(base::interfaceMatches(filter, ifa.name));
    }
  } catch (const Error&) {
  }
  return 0;
}
