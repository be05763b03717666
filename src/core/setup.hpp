// Setting a communicator up: the transports it may use, this process's PeerInfo, and connecting every peer
// over the first transport that can reach it (both sides decide from the same PeerInfo table). The
// bootstrap exchange itself is bootstrap.hpp; the tuner's calibration at init is calibrate.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace collie::core {

/// Whether COLLIE_NET puts the UCX transport in makeTransports(): ucx yes, tcp no, auto when UCX reports an RDMA
/// transport on this host. COLLIE_NET=ucx in a build without UCX fails with InvalidArgument.
bool useUcx();
/// The transports a communicator may use, in order of preference (the first that can connect a pair wins):
/// shm (unless COLLIE_SHM_DISABLE=1), ucx (see useUcx()), tcp.
std::vector<std::unique_ptr<transport::Transport>> makeTransports();
/// This process's PeerInfo before any transport has listened.
transport::PeerInfo localPeerInfo(int rank);

/// A communicator's links to its peers, as connectAll leaves them.
struct Links {
  std::vector<std::unique_ptr<transport::Transport>> transports;  ///< in order of preference (listening)
  std::vector<std::unique_ptr<transport::Connection>> conns;      ///< by rank (self included)
  std::vector<std::string> peerTransport;                         ///< by rank: the transport's name, "self"
  bool oversubscribed = true;                                     ///< more ranks on this host than CPUs: spin politely
  double cpuShare = 1;                                            ///< ranks of this host per CPU, at least 1
};

/// Connects ctx.rank to every other rank of ctx.peers over links.transports (which have listened); throws
/// InvalidUsage when no transport can reach a peer. Collective over all ranks.
void connectAll(Links& links, const transport::CommContext& ctx);
/// The names of links.transports, in order of preference.
std::vector<std::string> transportNames(const Links& links);
/// The transport kinds rank 0 uses to reach the others (what calibration measures), in order of first use.
std::vector<std::string> kindsInUse(const std::vector<std::unique_ptr<transport::Transport>>& transports,
                                    const std::vector<transport::PeerInfo>& peers);
/// The secret of a communicator split from one with `parent`: mixed with the split epoch and the color.
std::array<uint8_t, 16> splitSecret(const std::array<uint8_t, 16>& parent, int epoch, int color);

}  // namespace collie::core
