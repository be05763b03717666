// Receive from any source: which peer's message a Recv with peer kAnySource (Communicator::recvAny) takes.
//
// Connections move ordered bytes and match each message to a receive posted for that one peer, so the receive
// cannot be posted until its peer is known. AnySourceMatcher finds it: it looks at the next message of every
// other rank's connection without consuming it (Connection::probe: the tcp header peeked on its socket, the shm
// head slot's header) until one is a send to this rank, and returns that rank; core then runs an ordinary Recv
// from it, so the message is received, numbered and fingerprinted exactly like a named receive (the pair's send
// and receive counters stay in step: call_fingerprint.hpp). A peer whose next message is from another call (it is
// ahead, in a collective this rank has not reached) is not a candidate: messages of a pair arrive in order, so
// its send to this rank, if any, can only come after that call; one whose next message is from a collective call
// this rank made with another fingerprint (a Broadcast both ranks took for their own, say) is a mismatch.
//
// Fairness: each search starts after the peer matched last, so a sender that always has a message waiting does not
// starve the others; per sender, messages are taken in the order they were sent.
//
// Failures, like any other call's, within the communicator's timeout on every rank:
//   - the matched message's fingerprint differs from the Recv this rank would post (another count or type):
//     MismatchError, which core reports on both ranks ("rank 0 called Send(...); rank 1 called Recv(...)");
//   - a peer that closed or died is dropped (it can send nothing more; a rank may exit after its last call) after
//     what it sent before was taken; when every peer is gone: RemoteError naming them;
//   - nothing arrives for the timeout: Timeout naming the receive and, for each rank waited on, the last call it
//     was seen in (or what it is ahead in), and the ranks that closed;
//   - a peer linked by a transport that cannot look ahead (ucx): InvalidUsage naming it;
//   - abort: the call ends at once.
// Not inside a group (validate.cpp refuses it), so no receive is ever posted on a connection while it is probed.
//
// Connections are looked up on every pass (connectionOf), so one made after the matcher (connections made on first
// use) is probed as soon as it exists. A peer without one yet (nullptr) stays a candidate, named "not connected
// yet" in the timeout: whoever makes connections on demand must let a peer whose first call is a send to this rank
// connect while this rank waits here (accepting on the listener from connectionOf, say).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/poller.hpp"
#include "core/executor.hpp"
#include "transport/transport.hpp"

namespace collie::core {

class AnySourceMatcher {
 public:
  /// connectionOf(r): the connection to rank r now, or nullptr while there is none (never asked for this rank).
  using ConnectionOf = std::function<transport::Connection*(int rank)>;
  AnySourceMatcher(int rank, int nranks, ConnectionOf connectionOf, base::Poller& poller,
                   const std::atomic<bool>& abortFlag, std::string commName);

  /// What the caller knows that the matcher needs: the fingerprint the Recv from `peer` would expect, the last call
  /// each peer was seen in, in words (for the timeout message), and the words for the call ("Recv(float32, 10 from
  /// any rank)").
  struct Call {
    std::function<transport::Fingerprint(int peer)> expected;
    std::function<std::string(int peer)> lastSeenText;  ///< Executor::lastSeenText
    /// This rank's collective call that a peer's message names (Executor::mineFor): a peer whose next message is
    /// from a call this rank made differently is a mismatch, not a peer ahead.
    std::function<std::optional<transport::Fingerprint>(const transport::Fingerprint& theirs)> mine;
    std::string text;
  };
  /// Waits until some other rank's next message is a send to this rank and returns that rank.
  int match(const Call& call, const ExecConfig& config);

 private:
  /// One pass over the peers, starting after the last match: the first with a send to this rank, or -1.
  int pass(const Call& call);
  [[noreturn]] void failTimeout(const Call& call, const ExecConfig& config) const;
  [[noreturn]] void failAllClosed(const Call& call) const;

  int rank_, nranks_;
  ConnectionOf connectionOf_;
  base::Poller& poller_;
  const std::atomic<bool>& abort_;
  std::string name_;
  int last_ = 0;                               // the peer matched last
  std::vector<std::string> closed_;            // by peer: why it was dropped (empty: still a candidate)
  std::vector<transport::Fingerprint> ahead_;  // by peer: the call its next message is from, when not a send to us
};

}  // namespace collie::core
