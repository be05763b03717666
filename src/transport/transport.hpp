// The transport interface. A Transport connects this rank to a set of peers; each peer gets a Connection that
// moves bytes in order: sends posted on a Connection arrive at the peer in the order they were posted and
// fill that peer's receives in the order *it* posted them, with matching sizes on both sides.
//
// Connections are driven by one thread at a time (the executor's): postSend/postRecv queue a Transfer and
// progress() moves bytes without blocking. When nothing moves, the executor sleeps in Poller::wait, which
// wakes on any fd a transport registered (or on an explicit wake-up). Errors are thrown as collie::Error
// naming the peer rank and the cause (RemoteError when the peer went away).
//
// For each peer pair, the first transport in the communicator's list whose canConnect() is true wins
// (chooseTransport); both sides decide from the same PeerInfo table, so they agree.
//
// PeerInfo holds what identifies a rank's host (hostHash, netNs), its pid, and one opaque address per listening
// transport (PeerInfo::addresses): each transport encodes and decodes its own, as compactly as it can (tcp and ucx
// a packed socket address, shm two numbers), so a new transport adds no field here. Every rank holds one PeerInfo
// per rank: the contact points only (96 bytes each); what a connection needs beyond them (shm ring segments and
// eventfds, a UCX worker address, the sockets of a tcp pair) is exchanged in the handshake when the pair first
// connects. All transports shake hands the same way (transport/handshake.hpp).
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/fingerprint.hpp"

namespace collie::base {
class Poller;
}

namespace collie::transport {

using Clock = std::chrono::steady_clock;

enum class MemoryKind : uint8_t { Host = 0, Device = 1 };

/// Which transport an address (and a handshake message) belongs to. Values travel between ranks: never reuse one.
enum class TransportKind : uint16_t { None = 0, Tcp = 1, Shm = 2, Ucx = 3 };

/// One transport's address in a PeerInfo: opaque bytes that only that transport reads.
struct TransportAddress {
  static constexpr size_t kBytes = 22;  ///< an IPv6 socket address packed (base::packAddress)
  uint8_t kind = 0;                     ///< a TransportKind; 0: an empty slot
  uint8_t length = 0;                   ///< bytes used
  uint8_t bytes[kBytes] = {0};
};

/// What every rank publishes about itself at bootstrap (fixed size, so tables can be all-gathered).
struct PeerInfo {
  static constexpr int kMaxAddresses = 3;  ///< tcp, shm and ucx may all listen
  int32_t rank = -1;
  int32_t pid = 0;
  uint64_t hostHash = 0;  ///< same value for ranks on the same host
  uint64_t netNs = 0;  ///< networkNamespaceId() of this process, set by listen() of the transports that need it (shm)
  TransportAddress addresses[kMaxAddresses];  ///< one per listening transport, in no particular order

  /// The address `kind` published, or nullptr when it did not.
  const TransportAddress* address(TransportKind kind) const;
  /// Publishes (or replaces) the address of `kind`; fails with InternalError when it is too long or no slot is free.
  void setAddress(TransportKind kind, const void* bytes, size_t length);
};

static_assert(sizeof(PeerInfo) == 96, "PeerInfo travels in tables of one per rank: keep it small, say what grew");

/// Whether `info` holds where each of its transports listens: true for a whole contact card, false for a host record
/// (a slot with its kind and no bytes: the rank listens there, and its address is learned when a pair first needs
/// it; COLLIE_PEER_CARDS=directory, core's card_directory.hpp). A transport's address is never empty.
bool contactKnown(const PeerInfo& info);

/// What a rank of a communicator that keeps a directory of contact cards (COLLIE_PEER_CARDS=directory) answers a peer
/// that asks for a rank's card (Transport::askCard): the cards of ranks first, first + 1, ... (cards.size() of them,
/// mod nranks), and for any other rank the card of the rank to ask next (`up`; rank -1 when this rank holds every
/// card). Fixed once made: the accept loop's thread reads it while the communicator's own thread goes on.
struct CardBook {
  int nranks = 0;
  int first = 0;
  std::vector<PeerInfo> cards;
  PeerInfo up;
  /// The card of `rank` when this book holds it, else nullptr.
  const PeerInfo* find(int rank) const;
};

/// The answer to a question for rank `target`'s card (sent after a kToldCard header).
struct CardAnswer {
  static constexpr int32_t kCard = 1;   ///< `card` is the target's
  static constexpr int32_t kAskUp = 2;  ///< the rank asked does not hold it: `card` is the next rank to ask's
  static constexpr int32_t kNone = 3;   ///< no directory here (yet): ask again in a moment, or another rank
  int32_t status = kNone;
  int32_t target = -1;
  PeerInfo card;
};
static_assert(sizeof(CardAnswer) == 104);

/// An id of this process's network namespace (the inode of /proc/self/ns/net and its device), 0 if unknown.
uint64_t networkNamespaceId();

/// One posted send or receive. The executor owns it and keeps it alive (and unmoved) until complete.
struct Transfer {
  void* buf = nullptr;  ///< source of a send, destination of a receive
  size_t bytes = 0;
  MemoryKind kind = MemoryKind::Host;
  bool complete = false;  ///< set by the Connection when every byte has moved
  Fingerprint fp{};       ///< a send: its call's; a receive: the one the sender's must equal (fingerprint.hpp)
};

/// The head of the next message from a peer that no posted receive takes yet (Connection::probe).
struct Arrival {
  uint64_t bytes = 0;  ///< the whole message's size
  Fingerprint fp{};    ///< the sender's call
};

/// Everything a transport needs to know about the communicator it serves.
struct CommContext {
  int rank = 0;
  int nranks = 0;
  std::vector<PeerInfo> peers;           ///< indexed by rank
  uint8_t secret[16] = {0};              ///< a connection that cannot show it is refused
  std::string name;                      ///< for messages
  std::chrono::milliseconds timeout{0};  ///< 0: COLLIE_TIMEOUT
  base::Poller* poller = nullptr;
  const std::atomic<bool>* abort = nullptr;  ///< set: a connect waiting for peers fails at once (communicator abort)
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual int peer() const = 0;
  /// Queues t (bytes may be 0), or sends it at once (t->complete already set on return). The buffer must stay
  /// valid until t->complete.
  virtual void postSend(Transfer* t) = 0;
  virtual void postRecv(Transfer* t) = 0;
  /// Moves what it can without blocking; returns true if any byte moved or any transfer completed.
  virtual bool progress() = 0;
  /// True while any posted transfer is incomplete.
  virtual bool busy() const = 0;
  /// True when everything that lets progress() move on is announced by an edge of the poller it was given (tcp:
  /// its sockets, registered edge-triggered): a waiting executor may then ask the poller instead of calling
  /// progress() again (base::Poller::readyNow).
  virtual bool announcedByPoller() const { return false; }
  /// Closes the connection; the peer sees the connection go away. Idempotent.
  virtual void close() = 0;
  /// Called by the executor while it waits on this connection with nothing moving (about once a second, never on
  /// the fast path): throws RemoteError when the transport can tell that the peer is dead (its host stopped
  /// answering), as opposed to alive but not calling, which only the caller's timeout ends.
  virtual void checkAlive() {}
  /// For a receive from any source (core/any_source.hpp), only while no receive is posted here: true, with *next
  /// filled, once the head of the peer's next message has arrived; nothing is consumed. Until endProbe(), the
  /// connection ends a sleep of the poller when such a head arrives. Throws RemoteError when the peer closed or
  /// died with no such message (after what it sent before), MismatchError when it poisoned the link, and
  /// InvalidUsage where the transport cannot look ahead.
  virtual bool probe(Arrival* next);
  virtual void endProbe() {}
  /// Closes the connection after passing `why` to the peer where the transport can (best effort, bounded), so
  /// that its next progress() throws MismatchError(why) rather than a plain "peer closed".
  virtual void poison(const MismatchRecord& why) {
    (void)why;
    close();
  }
  /// For a connection about to be given up (its communicator failed while connecting another peer on first use):
  /// waits until `until` for the peer to close it and throws MismatchError when the peer poisoned it first, so that
  /// a mismatch found elsewhere is reported as such. May consume data in flight. Nothing when the transport cannot
  /// tell.
  virtual void revealPoison(Clock::time_point until) { (void)until; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual TransportKind kind() const = 0;
  /// Called before bootstrap: start listening and publish the address in `self`.
  virtual void listen(PeerInfo& self) = 0;
  /// Whether this transport can link the two ranks (same answer on both sides).
  virtual bool canConnect(const PeerInfo& local, const PeerInfo& peer) const = 0;
  /// Collective over `peers` (every listed peer calls this with this rank in its list). Returns one
  /// Connection per peer, in the order of `peers`. Fails within ctx.timeout if a peer never shows.
  virtual std::vector<std::unique_ptr<Connection>> connect(const CommContext& ctx, const std::vector<int>& peers) = 0;
  /// Whether this transport connects a pair from either side at any time (serve() and dial() below, the dial rule
  /// of dialer.hpp): tcp, shm and ucx. false: connect() is its only way, collective per pair (core then connects
  /// every pair at init).
  virtual bool dialsAnyTime() const { return false; }
  /// From now on answers the dials of ctx's communicator whatever this rank is doing (the process's accept loop,
  /// accept_loop.hpp). Only where dialsAnyTime().
  virtual void serve(const CommContext& ctx) { (void)ctx; }
  /// Connects to `peers` now, whatever they are doing: they answer from their accept loop (after serve()). Not
  /// collective: a listed peer need not connect to this rank. One Connection per peer, in the order of `peers`;
  /// fails within ctx.timeout naming the peers that never answered. Only where dialsAnyTime().
  virtual std::vector<std::unique_ptr<Connection>> dial(const CommContext& ctx, const std::vector<int>& peers) {
    return connect(ctx, peers);
  }
  /// The communicator failed: dials are turned down from now on (the dialler fails at once; with MismatchError(*why)
  /// when `why` is given, as a poisoned link would tell it). Returns the connections answered but not yet taken by a
  /// connect() or dial() (made with ctx), so that the caller closes or poisons them like the others.
  virtual std::vector<std::unique_ptr<Connection>> refuseDials(const CommContext& ctx, const MismatchRecord* why) {
    (void)ctx;
    (void)why;
    return {};
  }
  /// The connection to `peer` made by connect() or dial() is about to be closed on both sides (the caller closes it
  /// once both ends released it): a later dial() of the pair, from either side, connects it afresh. Only where
  /// dialsAnyTime().
  virtual void releasePeer(int peer) { (void)peer; }
  /// How many verified hellos arrived (were answered, for the transports that dial any time) before a connect()
  /// listed their peer (observable so that tests can check that path ran).
  virtual uint64_t stashedHellos() const { return 0; }
  /// The peers whose dials this rank answered that no connect() or dial() has taken yet, where taking them costs
  /// no wait and their connections can look ahead (Connection::probe): for a waiting run that looks for messages no
  /// receive takes (core's Executor::lookAtIdleConnections). Empty where the transport cannot say.
  virtual std::vector<int> answeredPeers() const { return {}; }
  /// The collective calls this rank's run waits in (their fingerprints; empty: none), told from now on to any
  /// peer that asks (askWaitingCalls), outside the data stream: for waiting ranks to compare their calls where no
  /// message shows the difference (core's Executor::lookAtIdleConnections). Only where dialsAnyTime().
  virtual void showWaitingCalls(const std::vector<Fingerprint>& calls) { (void)calls; }
  /// Where the last collective call of this rank's communicator is published, told with the calls it waits in to
  /// any peer that asks (askWaitingCalls): a peer past a call that moved nothing on its side, and no longer waiting
  /// in it, still shows how it made it. Only where dialsAnyTime().
  virtual void showLastCall(std::shared_ptr<const LastCall> last) { (void)last; }
  /// What `peer` shows (showWaitingCalls, showLastCall), asked through its listener rather than the pair's
  /// connection: nothing waited in when it shows nothing, nullopt when it does not answer within a moment. Throws
  /// MismatchError when the peer's communicator failed on mismatched calls (as its refused dial would say).
  virtual std::optional<ToldCalls> askWaitingCalls(const CommContext& ctx, int peer) {
    (void)ctx;
    (void)peer;
    return std::nullopt;
  }
  /// The directory of contact cards told from now on to any peer that asks (askCard; nullptr: none). Only where
  /// dialsAnyTime().
  virtual void showCards(std::shared_ptr<const CardBook> book) { (void)book; }
  /// Asks `holder`'s listener for rank `target`'s card (ctx.peers[holder] must hold the holder's address): nullopt
  /// when it does not answer within `wait` (gone, its communicator not there). Only where dialsAnyTime().
  virtual std::optional<CardAnswer> askCard(const CommContext& ctx, int holder, int target,
                                            std::chrono::milliseconds wait) {
    (void)ctx;
    (void)holder;
    (void)target;
    (void)wait;
    return std::nullopt;
  }
  /// A new transport of the same kind and settings that accepts on this one's listener (a duplicate of it), so
  /// that the address this one published reaches it, with no connection or other state of this one: for a
  /// communicator made without a bootstrap (core's shrink). nullptr when the transport cannot do that.
  virtual std::unique_ptr<Transport> shareListener() const { return nullptr; }
};

/// The transport that links `local` and `peer`: the first of `transports` whose canConnect() is true (both sides
/// decide from the same PeerInfo table, so they agree), or nullptr when none can.
Transport* chooseTransport(const std::vector<std::unique_ptr<Transport>>& transports, const PeerInfo& local,
                           const PeerInfo& peer);
/// The index in `transports` of chooseTransport's answer; -1 when none can.
int chooseTransportIndex(const std::vector<std::unique_ptr<Transport>>& transports, const PeerInfo& local,
                         const PeerInfo& peer);

/// The checks every Connection makes on a posted Transfer before it touches it: the connection ("tcp connection")
/// of `rank` to `peer` is open (InvalidUsage), and `t` is a host buffer, not null unless empty (InternalError: core
/// stages device buffers and checks the user's pointers). `what`: "send" or "receive". Inline: every post runs it.
[[noreturn]] void failPosted(const char* connection, int rank, int peer, bool closed, const Transfer& t,
                             const char* what);
inline void checkPosted(const char* connection, int rank, int peer, bool closed, const Transfer& t, const char* what) {
  if (closed || t.kind != MemoryKind::Host || (t.bytes != 0 && t.buf == nullptr))
    failPosted(connection, rank, peer, closed, t, what);
}

/// A connection of a rank to itself (sends are copied into the matching receives).
std::unique_ptr<Connection> makeSelfConnection(int rank);

}  // namespace collie::transport
