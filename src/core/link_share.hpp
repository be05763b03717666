// Connections shared between a communicator and the children split from it with Options::shareConnections
// (collieConfig_t::splitShare; NCCL's splitShare), so that a child makes no connection, handshake or descriptor of its
// own for a pair its parent has connected (and a pair it connects first is the parent's too).
//
// A communicator's links live in a LinkShare, which it owns with the children that borrow them. A sharing child's
// transports are LendingTransports: connecting its rank c dials (or takes) its parent's connection to the parent's
// rank of c, and hands the child a BorrowedConnection that forwards to it. The communicators of one family (a root and
// every sharing descendant) share a ShareFamily: the poller those connections wake, the abort flag, the failure, and
// a lock that lets one of them at a time drive the connections:
//   - calls of a family run one after another on each rank (a call waits for the lock up to the timeout), so a rank
//     must call the family's communicators in the same order as its peers, as on one ordered stream;
//   - every message names its communicator (a 12-bit tag in the call fingerprint, call_fingerprint.hpp): a rank that
//     called them in another order fails with a mismatch on both ends rather than take the wrong communicator's
//     data;
//   - a failure or an abort of one fails them all (their connections are one);
//   - the parent may be destroyed first: the connections stay open while a child uses them.
// Not in one group: a group's calls on two communicators of a family would wait on each other.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/poller.hpp"
#include "core/setup.hpp"

namespace collie::core {

/// What the communicators of a sharing family share (one per communicator that shares with none).
struct ShareFamily {
  base::Poller poller;              ///< what the family's connections wake
  std::atomic<bool> abort{false};   ///< any member's abort stops them all
  std::atomic<bool> shared{false};  ///< a child shares: every call takes `use`
  std::timed_mutex use;             ///< held by the call that drives the family's connections
  std::atomic<bool> failed{false};
  std::mutex failMu;
  ErrorCode failCode = ErrorCode::Success;
  std::string failure;  ///< the first member's failure, with its name

  /// Records `message` (already naming its communicator and rank) as the family's failure unless one is recorded.
  void recordFailure(ErrorCode code, const std::string& message);
  /// The family's failure, or an empty message.
  std::pair<ErrorCode, std::string> failureOf();
};

/// A communicator's links, owned by it and by the children that share them.
struct LinkShare {
  explicit LinkShare(std::shared_ptr<ShareFamily> f) : family(std::move(f)) {}
  ~LinkShare();  ///< closes the connections still open (a parent destroyed before its sharing children)

  std::shared_ptr<ShareFamily> family;  // first: the poller outlives the connections
  std::shared_ptr<LinkShare> lender;    ///< the parent's links, for a sharing child
  std::vector<int> lenderRank;          ///< by rank here: the parent's rank (sharing child)
  Links links;
};

/// A sharing child's transports: one per transport of `lender` (same name, kind and choice of pairs), whose connect
/// and dial connect `lender`'s links (Links::connectPeers, with the parent's secret, through its listeners) and
/// return connections that forward to the parent's. Connecting changes lender->links: only under the family's lock.
std::vector<std::unique_ptr<transport::Transport>> lendingTransports(const std::shared_ptr<LinkShare>& lender,
                                                                     const std::vector<int>& lenderRank);

}  // namespace collie::core
