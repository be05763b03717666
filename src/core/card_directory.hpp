// A directory of contact cards instead of the whole table on every rank (COLLIE_PEER_CARDS=directory).
//
// By default every rank keeps every rank's contact card (PeerInfo: where its transports listen) from init on. With
// a directory, init's all-gather (bootstrap_plan.hpp) carries whole cards only up the tree, so that each rank keeps
// the cards of its subtree (rank 0 all of them), and down the tree only each rank's host record (HostRecord: rank,
// pid, host, network namespace and which transports listen, 32 bytes against 96): enough for the host layout, the
// transport of every pair and the same-host liveness check, but not to dial. A rank learns a peer's card when a call
// first needs to connect to it (learnCards, from connectPeers): it asks, through that holder's listener (a kAskCard
// question answered by its accept loop whatever it is doing, transport/dialer.hpp), the lowest rank it knows whose
// subtree holds the peer (an ancestor of the peer); a rank it knows that holds no such card (its own ancestors)
// answers with the card of its parent, the next to ask. Every rank starts knowing its tree neighbours, rank 0 and
// rank 0's children (directorySeeds), so a lookup needs a rank whose parent died to reach the top of the tree; one
// fails only when every ancestor of the peer that this rank can reach is gone or silent (InvalidUsage never: a
// RemoteError naming the peer and the ranks asked). A shrink's or split's child asks its parent's directory for its
// own seeds, then gathers its own directory the same way (shrink.cpp, split.cpp).
#pragma once

#include <memory>
#include <vector>

#include "core/setup.hpp"

namespace collie::core {

/// Whether COLLIE_PEER_CARDS says directory.
bool cardDirectoryMode();

/// What init's all-gather carries down the tree under a directory: a PeerInfo without its addresses' bytes.
struct HostRecord {
  int32_t rank = -1;
  int32_t pid = 0;
  uint64_t hostHash = 0;
  uint64_t netNs = 0;
  uint8_t kinds[transport::PeerInfo::kMaxAddresses] = {0};  ///< the TransportKind of each address slot (0: empty)
  uint8_t reserved[8 - transport::PeerInfo::kMaxAddresses] = {0};
};
static_assert(sizeof(HostRecord) == 32, "HostRecord travels in tables of one per rank");

HostRecord hostRecordOf(const transport::PeerInfo& info);
/// A PeerInfo that says what `record` says, each listening transport's address slot empty (transport::contactKnown
/// is false for it).
transport::PeerInfo peerInfoOf(const HostRecord& record);

/// What this rank answers askers from now on: the cards of its subtree in init's tree, and its parent's card.
std::shared_ptr<const transport::CardBook> makeCardBook(int rank, int nranks,
                                                        const std::vector<transport::PeerInfo>& table);

/// Learns, by asking the directory (see the top of this file), the card of each of `peers` that links.ctx.peers
/// holds only a host record of, and writes it there. Throws RemoteError when a card cannot be learned from any rank
/// that holds it, Timeout when that takes longer than the communicator's timeout.
void learnCards(Links& links, const std::vector<int>& peers);

}  // namespace collie::core
