// Connections shared between a communicator and the children split from it with Options::shareConnections
// (collieConfig_t::splitShare; NCCL's splitShare), so that a child makes no connection, handshake or descriptor of its
// own for a pair its parent has connected (and a pair it connects first is the parent's too).
//
// A communicator's links live in a LinkShare, which it owns with the children that borrow them. A sharing child's
// transports are LendingTransports: connecting its rank c dials (or takes) its parent's connection to the parent's
// rank of c, and hands the child a BorrowedConnection that forwards to it. The communicators of one family (a root and
// every sharing descendant) share a ShareFamily: the poller those connections wake, the abort flag, the failure, and
// a lock that lets one of them at a time drive the connections:
//   - calls of a family run one after another on each rank, in the order they were issued: a call issued on one
//     member waits, before it is queued or run, until the calls issued before it on the other members have ended
//     (beginTurn, up to the timeout; a member's own calls keep their order in its queue), and one call
//     at a time drives the connections (ShareFamily::use). So a rank must call the family's communicators in the
//     same order as its peers, as on one ordered stream, and an async call on one member followed by a call on
//     another runs in that order on every rank;
//   - every message names its communicator (a 12-bit tag in the call fingerprint, call_fingerprint.hpp; no two
//     members of a family alive on a rank have the same one, sharingTagCandidate, where a rank splits them one after
//     another): a rank that called them in another order fails with a mismatch on both ends rather than take the
//     wrong communicator's data. A waiting
//     call of a sharing child looks at its idle connections and asks its peers what they wait in, as any waiting
//     run does (executor_waiting.cpp), through the root's listeners, where it shows its own waiting calls;
//   - a failure or an abort of one fails them all (their connections are one);
//   - the parent may be destroyed first: the connections stay open while a child uses them.
// Not in one group: a group's calls on two communicators of a family would wait on each other (groupEnd refuses it).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/poller.hpp"
#include "core/call_fingerprint.hpp"
#include "core/setup.hpp"

namespace collie::core {

/// A lock (Lockable, with try_lock_for) made of a mutex and a condition variable: std::timed_mutex's try_lock_for
/// locks through pthread_mutex_clocklock, which GCC 12's ThreadSanitizer does not see, so it reports the unlock.
class FamilyGate {
 public:
  void lock();
  bool try_lock();
  bool try_lock_for(std::chrono::milliseconds timeout);
  void unlock();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

/// What the communicators of a sharing family share (one per communicator that shares with none).
struct ShareFamily {
  base::Poller poller;              ///< what the family's connections wake
  std::atomic<bool> abort{false};   ///< any member's abort stops them all
  std::atomic<bool> shared{false};  ///< a child shares: every call takes a turn and `use`
  FamilyGate use;                   ///< held by the call that drives the family's connections
  std::atomic<bool> failed{false};
  std::mutex failMu;
  ErrorCode failCode = ErrorCode::Success;
  std::string failure;  ///< the first member's failure, with its name

  /// Records `message` (already naming its communicator and rank) as the family's failure unless one is recorded.
  void recordFailure(ErrorCode code, const std::string& message);
  /// The family's failure, or an empty message.
  std::pair<ErrorCode, std::string> failureOf();

  // Issue order: the member whose issued calls have not all ended, and how many there are.
  std::mutex turnMu;
  std::condition_variable turnCv;
  const void* turnOwner = nullptr;
  size_t turnCalls = 0;

  /// The tag of a sharing member made here (split), given back when it is destroyed.
  void holdTag(uint32_t tag);
  void releaseTag(uint32_t tag);
  /// Bit i set: candidate i of a child split now (sharingTagCandidate) is the tag of a member alive here.
  uint32_t takenTagCandidates(uint32_t parentTag, int epoch, int color);

  /// The last collective call any member made on this rank (members call one at a time), which the root's
  /// transports tell peers that ask (Transport::showLastCall).
  std::shared_ptr<transport::LastCall> lastCall = std::make_shared<transport::LastCall>();
  /// A collective call this rank made on the member tagged `tag`, kept while a child shares (Planner::plan): a
  /// member's waiting run judges a peer's call of another member against it (Executor::compareWaitingCalls), as a
  /// peer past a call that moved nothing on its side (0 elements) may wait in the next member's call while this rank
  /// still waits in that one.
  void recordCall(uint32_t tag, const transport::Fingerprint& fp);
  /// This rank's call `call` of the member tagged `tag`, while it is among that member's last 64.
  std::optional<transport::Fingerprint> recalledCall(uint32_t tag, uint32_t call);

 private:
  std::mutex tagsMu_;
  std::vector<uint32_t> tags_;  // of the sharing members alive on this rank
  std::mutex callsMu_;
  std::vector<std::pair<uint32_t, CallHistory>> calls_;  // by member tag
};

/// The candidates for the fingerprint tag of a child split with shareConnections (call_fingerprint.hpp), in order
/// of preference: each in 1..kMaxCommTag, never the parent's, mixed from the parent's tag, the split epoch and the
/// color, so every rank of the color computes the same ones. The child takes the first that no member of the family
/// alive on any of its ranks has (split's entry carries takenTagCandidates), so two members of a family never share
/// a tag on a connection (where each rank makes the family's splits one after another), and a rank that calls them
/// in another order than its peer fails with a mismatch.
constexpr int kTagCandidates = 32;
uint32_t sharingTagCandidate(uint32_t parentTag, int epoch, int color, int candidate);

/// Counts a call issued on `member` of `family` (one of its CommImpls) once no other member has a call issued and
/// not ended, waiting up to `timeout`; the call ends when the returned token is released (null: timed out).
std::shared_ptr<void> beginTurn(const std::shared_ptr<ShareFamily>& family, const void* member,
                                std::chrono::milliseconds timeout);

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
