// Host identities and the host layout of a communicator (see host_identity.hpp).
#include "core/host_identity.hpp"

#include <cerrno>
#include <cstdlib>
#include <functional>

#include "base/errors.hpp"
#include "base/params.hpp"
#include "core/bootstrap.hpp"

namespace collie::core {

uint64_t hostIdentityOf(const std::string& spec, int rank, uint64_t machine) {
  if (spec.empty()) return machine;
  for (const char* form : {"rank/", "rank%"}) {
    if (spec.rfind(form, 0) != 0) continue;
    const std::string k = spec.substr(5);
    char* end = nullptr;
    errno = 0;
    const long per = std::strtol(k.c_str(), &end, 10);
    COLLIE_ARG_CHECK(!k.empty() && *end == '\0' && errno == 0 && per >= 1 && per <= 1 << 30,
                     "COLLIE_HOST_ID=%s: expected %sK with K a positive integer", spec.c_str(), form);
    const long host = form[4] == '/' ? rank / per : rank % per;
    return std::hash<std::string>{}("collie host " + std::to_string(host));
  }
  return std::hash<std::string>{}("collie host " + spec);
}

uint64_t localHostIdentity(int rank) { return hostIdentityOf(base::params::hostId(), rank, localHostHash()); }

algorithms::patterns::HostLayout hostLayoutOf(const std::vector<transport::PeerInfo>& peers) {
  std::vector<uint64_t> ids;
  ids.reserve(peers.size());
  for (const auto& p : peers) ids.push_back(p.hostHash ^ (p.netNs * 0x9e3779b97f4a7c15ull));
  return algorithms::patterns::HostLayout::fromIds(ids);
}

}  // namespace collie::core
