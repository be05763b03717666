// Connecting a pair from either side, at any time (the dial rule), for the transports that connect on first use
// (tcp, shm, ucx). A transport supplies its messages (DialProtocol); Dialer keeps, per peer, who is connecting the pair
// and answers dials on the accept loop's thread (accept_loop.hpp), so a rank that needs a peer dials it and gets its
// answer whatever the peer is doing.
//
// The rule, per pair (lo < hi), serialised per peer by one lock on each side:
//   - a rank dials a peer only when it has no connection to it, is not dialling it and is not answering its dial;
//   - a hello from a peer the rank is not dialling (and has no connection to) is answered: the pair is connected;
//   - both dial at once: lo, dialling hi, turns hi's dial away ("duplicate"); hi, dialling lo, gives its own dial up
//     and answers lo's. hi's dial then gets lo's "duplicate" and hi waits for the answered one: lo's hello is on its
//     way (lo was dialling when it turned hi away), unless lo's connect failed before lo opened that dial (lo then
//     goes back to Idle and its communicator fails). So hi, not hearing from lo within a moment (kRedialRefused),
//     dials again: turned away again while lo still dials, answered or refused once lo gave up. lo's dial gets hi's
//     answer.
// So every pair ends with exactly one connection on both sides, and nothing is sent on a dial that is turned away
// (only its hello). A rank whose connect fails gives its dials up (Idle again) before its communicator refuses dials:
// a higher peer that gave its own dial up for such a dial may then see its dial answered, or its links part turned
// away and part answered; it fails with RemoteError (the lower rank is failing), not an internal error. A dial closed
// before any answer (the peer had no desk for it yet: a communicator being made) is tried again until the deadline; a
// peer that is gone fails at once (RemoteError from dialSocket), a peer that never answers at the deadline (Timeout
// naming it), as every handshake wait (Handshake::checkWaiting: abort, a same-host peer's process gone).
//
// Beside the rule, a waiting rank may ask a peer which collective calls its run waits in (askWaiting: a kAskWaiting
// dial, answered from the peer's desk with what its executor showed, showWaiting), so that ranks that wait on one
// another with no message sent can still compare their calls, and, where the communicator keeps a directory of
// contact cards, ask a peer for another rank's card (askCard, showCards); a question touches no pair's state.
//
// Transport::connect keeps its collective rule on top of this (each rank dials the listed peers below it and waits
// for the others to dial it): no dial is then turned away, which eager connection of every pair relies on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "transport/accept_loop.hpp"
#include "transport/fingerprint.hpp"
#include "transport/handshake.hpp"

namespace collie::transport::handshake {

/// What a rank tells a peer that asks which calls it waits in (kAskWaiting): the fingerprints of the collective calls
/// its run waits in, at most kMax, and the last collective call it made. Sent after the kToldWaiting header, in a
/// write of its own.
struct WaitingCalls {
  static constexpr uint32_t kMax = 8;
  uint32_t count = 0;
  uint32_t hasLast = 0;  ///< 1: `last` holds the last collective call the communicator made (LastCall)
  Fingerprint calls[kMax];
  Fingerprint last;
};
static_assert(sizeof(WaitingCalls) == 152);

/// A transport's part of connecting a pair on first use.
class DialProtocol {
 public:
  virtual ~DialProtocol() = default;
  /// The dialler's thread: a handshake socket connected to `peer`'s listener for `channel`; throws RemoteError
  /// when the peer is gone.
  virtual UniqueFd dialSocket(Handshake& hs, int peer, int channel) = 0;
  /// Sends this rank's hello on a dialled link (link.peer and link.channel set); may be called again for a
  /// fresh socket when the first was closed before any answer.
  virtual void sendHello(Handshake& hs, Link& link) = 0;
  /// A message that answers this rank's dial (never a refusal): handles it; sets link.done when no more is due.
  virtual void onAnswer(Handshake& hs, Link& link) = 0;
  /// The accept loop's thread: answers the verified hello on `link` of a dial this rank takes (its socket is
  /// then kept for finish()). Throws when it cannot; the dialler is then told so.
  virtual void answer(Handshake& hs, Link& link) = 0;
  /// The connection to `peer` made of `links` (one per channel), dialled by this rank (dialled) or answered. May
  /// wait for a last message (hs.await).
  virtual std::unique_ptr<Connection> finish(Handshake& hs, int peer, std::vector<Link>& links, bool dialled) = 0;
  /// This rank's dial of `peer` was turned away (the peer's is taken instead): drops what sendHello kept.
  virtual void forget(int peer) { (void)peer; }
};

/// One transport instance's pairs (see the top of this file).
class Dialer {
 public:
  /// `channels`: sockets per pair; `wire` reads the transport's messages.
  Dialer(const char* transport, TransportKind kind, int channels, DialProtocol& protocol, Wire& wire);
  ~Dialer();
  Dialer(const Dialer&) = delete;
  Dialer& operator=(const Dialer&) = delete;

  /// Answers the dials of ctx's communicator on `listener` from now on (the first call counts; ctx's rank, size,
  /// secret, name, timeout and poller are kept). `listener` must outlive this Dialer.
  void serve(Listener& listener, const CommContext& ctx);
  /// Connections to `peers`, in their order (this rank: a self connection). dialAll: this rank dials every listed
  /// peer that is not dialling it already (Transport::dial); otherwise only the listed peers below it, and waits
  /// for the others to dial it (Transport::connect). Fails within ctx.timeout naming the missing ranks; where a
  /// peer went away or stayed silent after this rank could not answer a dial, or this process ran out of
  /// descriptors, during the call, fails with SystemError naming that first.
  std::vector<std::unique_ptr<Connection>> connect(Listener& listener, const CommContext& ctx,
                                                   const std::vector<int>& peers, bool dialAll);
  /// The communicator failed: dials are answered with kRefusedFailed from now on, or with kRefusedMismatch and
  /// `*why` when it failed on mismatched calls (the dialler then throws MismatchError(*why), as it would had it
  /// been connected and its link poisoned). Waits for the answers under way (the dialler of one already counts
  /// itself connected) and returns every connection answered but not yet taken by a connect() (made with ctx; one
  /// that cannot be made is closed), for the caller to close or poison.
  std::vector<std::unique_ptr<Connection>> refuseAll(const CommContext& ctx, const MismatchRecord* why = nullptr);
  /// The connection made for `peer` (Taken) is about to be closed on both sides: from now on a dial from either
  /// side connects the pair afresh. The connection stays usable until the caller closes it. Both ends must release
  /// before either may dial again (core's release of init's all-gather links says how they agree: release, then a
  /// goodbye each way, then close), or the new dial is turned away as a duplicate.
  void release(int peer);
  /// How many dials were answered before a connect() of this rank listed their peer.
  uint64_t answeredEarly() const;
  /// The peers whose dials were answered whole (and without error) and that no connect() has taken yet.
  std::vector<int> answeredPeers() const;
  /// What a peer that asks (askWaiting) is told from now on: the calls this rank's run waits in (the first
  /// WaitingCalls::kMax of `calls`; empty: none).
  void showWaiting(const std::vector<Fingerprint>& calls);
  /// Where the communicator's last collective call is published, told with the waiting calls from now on.
  void showLastCall(std::shared_ptr<const LastCall> last);
  /// Asks `peer`'s listener which calls it shows (a kAskWaiting dial, answered on its accept loop's thread; no pair
  /// state changes on either side). Nothing waited in when it shows none; nullopt when it did not answer within
  /// kAskWait (gone, busy, its communicator not there). Throws MismatchError when its communicator failed on
  /// mismatched calls.
  std::optional<ToldCalls> askWaiting(const CommContext& ctx, int peer);
  /// What a peer that asks for a rank's contact card (askCard) is told from now on (nullptr: kNone).
  void showCards(std::shared_ptr<const CardBook> book);
  /// Asks `holder`'s listener for rank `target`'s card (a kAskCard dial, answered on its accept loop's thread, even
  /// when its communicator failed: the book does not change); nullopt when it did not answer within `wait`.
  std::optional<CardAnswer> askCard(const CommContext& ctx, int holder, int target, std::chrono::milliseconds wait);

 private:
  enum class State : uint8_t { Idle, Dialing, Answering, Answered, Taken };
  struct Pair {
    State state = State::Idle;
    bool asked = false;       ///< a connect() listed this peer
    std::vector<Link> links;  ///< answered: by channel
    int got = 0;              ///< answered channels
    std::string error;        ///< answering failed: what connect() throws
    ErrorCode code = ErrorCode::Success;
  };
  struct Dial {
    Link link;
    bool answered = false;  ///< a message came back on it
    bool refused = false;   ///< kRefusedDuplicate
    Clock::time_point retryAt{};
  };

  void take(Link& link);  ///< Desk::take
  /// Answers the dial on `link` with a message of `type` and, in a write of its own, `tail` (when not empty),
  /// without waiting: a fresh socket's buffer takes both.
  void answerWith(Link& link, uint32_t type, const void* tail = nullptr, size_t tailBytes = 0) const;
  /// Turns the dial on `link` away with `type`; kRefusedMismatch sends `why` after it.
  void refuse(Link& link, uint32_t type, const MismatchRecord& why = {}) const;
  /// Answers a kAskWaiting on `link` (the accept loop's thread): what showWaiting() left, or this communicator's
  /// refusal.
  void tellWaiting(Link& link) const;
  /// Dials `peer`'s listener with a question of `type` (`body`, when given, follows the header) and reads the
  /// answer's message into the returned link's buf; the caller checks it and reads what follows. Throws on failure.
  Link ask(Handshake& hs, int peer, uint32_t type, const void* body, size_t bodyBytes, const std::string& what);
  /// Answers a kAskCard on `link` (the accept loop's thread) from showCards()'s book.
  void tellCard(Link& link) const;
  /// After a kRefusedMismatch on `link`: reads the MismatchRecord that follows it and throws MismatchError (`how`:
  /// what the peer was doing, for the message); throws RemoteError as for kRefusedFailed when it does not come whole
  /// or names ranks outside the communicator.
  [[noreturn]] void failRefusedMismatch(Handshake& hs, Link& link, const char* how) const;
  void open(Handshake& hs, Dial& d);
  /// Reads the answers on every dial until each is done or refused; returns the refused peers.
  std::vector<int> awaitAnswers(Handshake& hs, std::map<int, std::vector<Dial>>& dials);
  /// Waits until every one of `peers` has been answered (their dials to this rank); with `until`, returns then
  /// the peers not heard of yet (no dial of theirs being answered here), or none once all were answered.
  std::vector<int> awaitDials(Handshake& hs, const std::vector<int>& peers,
                              std::optional<Clock::time_point> until = std::nullopt);
  /// Marks the pairs of `dials` that were answered (all but `refused`) Taken, moves their connections into `made`
  /// and drops them from `dials`.
  void takeAnswered(Handshake& hs, std::map<int, std::vector<Dial>>& dials, const std::vector<int>& refused,
                    std::map<int, std::unique_ptr<Connection>>& made);
  /// connect() without its choice of which failure to report.
  std::vector<std::unique_ptr<Connection>> connectPeers(Listener& listener, const CommContext& ctx,
                                                        const std::vector<int>& peers, bool dialAll);
  /// The first dial this rank could not answer for a cause of its own (ErrorCode::SystemError: out of descriptors,
  /// memory), as a message naming the peer; empty when there was none.
  std::string localFailure() const;

  const char* transport_;
  TransportKind kind_;
  int channels_;
  DialProtocol& protocol_;
  Wire& wire_;
  Listener* listener_ = nullptr;
  CommContext deskCtx_;  ///< the answering side's context (no table)
  Desk desk_;
  mutable std::mutex mu_;
  std::condition_variable answered_;
  std::vector<Pair> pairs_;  ///< by peer rank
  bool refusing_ = false;
  std::optional<MismatchRecord> refusalWhy_;  ///< refuseAll's `why`
  int answering_ = 0;                         ///< take() calls inside protocol_.answer() (refuseAll waits for them)
  WaitingCalls shown_;                        ///< showWaiting's
  std::shared_ptr<const LastCall> last_;      ///< showLastCall's
  std::shared_ptr<const CardBook> cards_;     ///< showCards's
  uint64_t answeredEarly_ = 0;
};

}  // namespace collie::transport::handshake

namespace collie::transport {

/// What tcp, shm and ucx share: a transport whose pairs connect by the dial rule (one handshake::Dialer on the
/// listener it opens in listen()), so that connect(), dial(), serve() and the rest are one piece of code.
class DialingTransport : public Transport {
 public:
  bool dialsAnyTime() const final { return true; }
  void serve(const CommContext& ctx) final;
  /// The dial rule's collective form: this rank dials the listed peers below it and waits for the others. Fails
  /// with Timeout naming the missing ranks when a peer does not show up within ctx.timeout (COLLIE_TIMEOUT when zero).
  std::vector<std::unique_ptr<Connection>> connect(const CommContext& ctx, const std::vector<int>& peers) final;
  std::vector<std::unique_ptr<Connection>> dial(const CommContext& ctx, const std::vector<int>& peers) final;
  std::vector<std::unique_ptr<Connection>> refuseDials(const CommContext& ctx, const MismatchRecord* why) final;
  void releasePeer(int peer) final;
  uint64_t stashedHellos() const final;
  std::vector<int> answeredPeers() const override;
  void showWaitingCalls(const std::vector<Fingerprint>& calls) final;
  void showLastCall(std::shared_ptr<const LastCall> last) final;
  std::optional<ToldCalls> askWaitingCalls(const CommContext& ctx, int peer) final;
  void showCards(std::shared_ptr<const CardBook> book) final;
  std::optional<CardAnswer> askCard(const CommContext& ctx, int holder, int target,
                                    std::chrono::milliseconds wait) final;

 protected:
  /// The transport's Dialer (a member of the derived class, declared after what it uses so that it goes first).
  virtual handshake::Dialer& dialer() const = 0;
  /// Runs on the executor's thread before this rank serves, connects or dials for ctx's communicator (ucx: makes its
  /// worker, which answering a dial needs).
  virtual void prepare(const CommContext& ctx) { (void)ctx; }
  /// What connect()'s INFO line says of each connection ("" or e.g. " with 4 socket(s) each").
  virtual std::string connectionDetail() const { return {}; }

  std::shared_ptr<handshake::Listener> listener_;  ///< made by listen(); shared with the transports of shareListener()

 private:
  handshake::Listener& listener(const char* call) const;
};

}  // namespace collie::transport
