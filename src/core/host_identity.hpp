// Which host a rank runs on, as the hierarchical algorithms and the host-aware tuner see it.
//
// By default a host is a machine (host name and boot id: PeerInfo::hostHash, which the shm transport also
// compares) and a network namespace (PeerInfo::netNs): ranks in two namespaces of one machine reach each other
// over TCP only, as on separate hosts (the test bed, tests/testbed/, makes its hosts that way). COLLIE_HOST_ID
// replaces the machine's identity, for tests and containers: any text names the host of this process (ranks with
// the same text share a host); rank/K and rank%K put rank r of a communicator being created on host r / K or
// r mod K, so that thread ranks of one process can be given different hosts. Ranks on different hosts never use
// shm with each other, since hostHash differs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/patterns/hosts.hpp"
#include "transport/transport.hpp"

namespace collie::core {

/// PeerInfo::hostHash of rank `rank` of a communicator being created in this process: COLLIE_HOST_ID's host, or
/// the machine's (localHostHash()). Throws InvalidArgument naming COLLIE_HOST_ID for rank/K or rank%K with K not
/// a positive integer.
uint64_t localHostIdentity(int rank);
/// The parser behind it: the host id `spec` gives rank `rank`, `machine` when spec is empty.
uint64_t hostIdentityOf(const std::string& spec, int rank, uint64_t machine);
/// The host layout of a communicator from its PeerInfo table (host = hostHash and netNs).
algorithms::patterns::HostLayout hostLayoutOf(const std::vector<transport::PeerInfo>& peers);

}  // namespace collie::core
