// Setting a communicator up: the transports it may use, this process's PeerInfo, and connecting every peer
// over the first transport that can reach it (both sides decide from the same PeerInfo table). The
// bootstrap exchange itself is bootstrap.hpp; the tuner's calibration at init is calibrate.cpp.
#pragma once

#include <array>
#include <atomic>
#include <collie/collie.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bootstrap_wire.hpp"
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
/// The CPUs this process may run on (its affinity), at least 1.
int usableCpus();

/// A communicator's links to its peers. With COLLIE_CONNECT=lazy (the default) a peer is connected when a call
/// first needs it (connectPeers from the communicator's execute: this rank dials it, and the peer answers from its
/// accept loop whatever it is doing, transport/dialer.hpp); eager connects every pair at init.
struct Links {
  std::vector<std::unique_ptr<transport::Transport>> transports;  ///< in order of preference (listening)
  std::vector<std::unique_ptr<transport::Connection>> conns;      ///< by rank (self included); null: not yet
  std::vector<std::string> peerTransport;                         ///< by rank: the transport's name, "self"
  std::vector<int> transportOf;                                   ///< by rank: index in transports, -1 self
  transport::CommContext ctx;                                     ///< the table and secret every connect uses
  std::atomic<int> connectedPeers{0};                             ///< peers (not self) with a connection
  uint64_t generation = 0;     ///< changes whenever a connection is made or closed (a sharing child may make them)
  bool oversubscribed = true;  ///< more ranks on this host than CPUs: spin politely
  bool cpusTaken = true;       ///< at least as many ranks on this host as CPUs: the progress thread spins politely
  bool cardDirectory = false;  ///< COLLIE_PEER_CARDS=directory: ctx.peers holds host records of ranks not met yet
};

/// Whether a communicator made with `mode` (Options::connect; Default: COLLIE_CONNECT) over `transports` connects
/// every pair at init. Default is eager where a transport cannot dial at any time (none of collie's own): lazy
/// connection there would leave Send/Recv patterns whose two ends are different calls waiting (ARCHITECTURE.md).
bool connectEagerly(ConnectMode mode, const std::vector<std::unique_ptr<transport::Transport>>& transports);
/// This rank's settings that every rank of a communicator must share (bootstrap_wire.hpp), for its bootstrap hello.
AgreedSettings agreedSettings(ConnectMode mode, const std::vector<std::unique_ptr<transport::Transport>>& transports);
/// Prepares links for ctx: chooses the transport of every peer whose PeerInfo is known (rank >= 0; throws
/// InvalidUsage when none can reach it), makes the self connection and starts answering dials (Transport::serve);
/// connects no one else.
void initLinks(Links& links, transport::CommContext ctx);
/// Gives links the table as far as the ranks have all-gathered it (bootstrap_plan.hpp), keeping the connections.
void completeLinks(Links& links, std::vector<transport::PeerInfo> peers);
/// Connects this rank to each of `peers` it has no connection to yet, transport by transport in the order of
/// preference (all of one transport's peers at once). With `dial` this rank dials them (Transport::dial: the peers
/// need not be connecting, they answer whatever they do); a transport that cannot (ucx), and `dial` false, connect
/// collectively (Transport::connect: every listed peer must, in a connect of its own, list this rank, as the calls
/// of one collective do). Returns how many connections it made.
int connectPeers(Links& links, const std::vector<int>& peers, bool dial);
/// connectPeers with every other rank, collectively (eager connection). Collective over all ranks.
void connectAll(Links& links);
/// The connection to `peer` is about to be closed on both sides (Transport::releasePeer): a later connectPeers of
/// the pair, from either side, connects it afresh. The connection stays usable until closePeer.
void releasePeer(Links& links, int peer);
/// Closes the (released) connection to `peer` and forgets it.
void closePeer(Links& links, int peer);
/// The names of links.transports, in order of preference.
std::vector<std::string> transportNames(const Links& links);
/// The transport kinds rank 0 uses to reach the others (what calibration measures), in order of first use.
std::vector<std::string> kindsInUse(const std::vector<std::unique_ptr<transport::Transport>>& transports,
                                    const std::vector<transport::PeerInfo>& peers);
/// The transports of a communicator made from another without a bootstrap (split, shrink), in the parent's order of
/// preference, and the kinds among them that share the parent's listeners.
struct ChildTransports {
  std::vector<std::unique_ptr<transport::Transport>> list;
  std::vector<transport::TransportKind> shared;
};
/// For each of `parent`, one that takes dials on its listener (Transport::shareListener: the address the parent
/// published reaches it, so the parent's PeerInfo table serves the new communicator too). A transport that cannot
/// share (ucx): with `fresh`, a new one of its kind listening, its address published in *fresh (for the ranks to
/// exchange); without, none (its addresses are then dropped from the table: childPeerInfo).
ChildTransports childTransports(const std::vector<std::unique_ptr<transport::Transport>>& parent,
                                transport::PeerInfo* fresh);
/// A parent's PeerInfo table entry as rank `rank` of a communicator whose shared transports are `shared`: other
/// kinds' addresses are dropped, then `fresh`'s (kMaxAddresses: the peer's new listeners, when given) put in.
transport::PeerInfo childPeerInfo(const transport::PeerInfo& parentEntry, int rank,
                                  const std::vector<transport::TransportKind>& shared,
                                  const transport::TransportAddress* fresh);
/// The secret of a communicator made from one with `parent` (split, shrink), told apart by `tweak` (what made it):
/// every output bit depends on every bit of both, so a child's child never gets its grandparent's secret (an XOR of
/// the parent with a salt of the tweak alone did, for two splits with the same epoch and color: the grandchild's
/// hellos then went to the grandparent's desk).
std::array<uint8_t, 16> deriveSecret(const std::array<uint8_t, 16>& parent, uint64_t tweak);
/// The secret of a communicator split from one with `parent`: derived with the split epoch and the color.
std::array<uint8_t, 16> splitSecret(const std::array<uint8_t, 16>& parent, int epoch, int color);

}  // namespace collie::core
