// The handshake every transport runs in connect(ctx, peers): who dials whom, how a connection proves it belongs
// to the communicator, how strangers are refused, and how long anyone waits.
//
//   - Every handshake message starts with a Header: magic, version, the transport's kind, the sender's rank,
//     the rank it is for, a channel number (which of the pair's links; tcp: the socket index) and the
//     communicator's secret, compared in constant time. The transport's own fields follow (fixed size per
//     transport, Wire::messageBytes).
//   - A pair is connected from either side at any time: the rank that needs the peer dials it and speaks first, the
//     process's accept loop answers (accept_loop.hpp: a connection that closes, sends garbage, cannot show the
//     secret or sends no hello within kHelloWait is logged and closed; at most kMaxUnverified wait at once), and
//     the dial rule settles two dials at once (dialer.hpp). Eager connection at init runs the same rule, each rank
//     dialling the listed peers below it.
//   - Handshake::await() reads the answers on the links of this call, checking each like a hello.
//   - Every wait ends at one deadline (ctx.timeout, COLLIE_TIMEOUT when zero) with a Timeout naming exactly
//     the ranks still missing.
// The transport keeps only its specifics: how it dials, how a message is read (Wire), what a hello carries
// and what it does with it (tcp: sockets per peer and striping; shm: segments and fds over its unix socket).
#pragma once

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/socket.hpp"
#include "transport/transport.hpp"

namespace collie::transport {

/// An owned file descriptor. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

namespace handshake {

constexpr uint32_t kMagic = 0x434c4849;  // "CLHI"
/// How long an accepted connection may take to send its hello (less when the handshake's deadline is nearer).
/// The bootstrap root uses the same bounds.
constexpr std::chrono::milliseconds kHelloWait{2000};
/// Accepted connections waiting for their hello at once, at most.
constexpr size_t kMaxUnverified = 128;
constexpr uint16_t kVersion = 2;
/// How often a waiting handshake looks whether the same-host peers it waits for still exist.
constexpr std::chrono::milliseconds kLivenessEvery{100};

/// The first bytes of every handshake message of every transport.
struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;  ///< the sender's TransportKind
  uint32_t type;  ///< the transport's own message type
  int32_t fromRank;
  int32_t toRank;
  int32_t channel;  ///< which of the pair's links this is (0 when there is one)
  uint8_t secret[16];
};
static_assert(sizeof(Header) == 40);

/// Whether two secrets are equal, in time that does not depend on where they differ.
bool secretsEqual(const uint8_t* a, const uint8_t* b, size_t bytes);
/// Whether a received Header is for this receiver: right magic, version and transport `kind`, the communicator's
/// `secret` (16 bytes, compared in constant time), addressed to `rank`. Pure (the fuzzers call it on any bytes).
bool headerAuthentic(const Header& h, TransportKind kind, int rank, const uint8_t* secret);
/// The Header a rank of the communicator with `secret` (16 bytes) sends: this protocol's magic and version.
Header makeHeader(TransportKind kind, uint32_t type, int fromRank, int toRank, int channel, const uint8_t* secret);
/// Whether a hello may come from its sender when any member may dial (accept_loop.hpp): another rank below
/// `nranks`, on a channel in [0, channels). Pure.
bool dialerValid(const Header& h, int rank, int nranks, int channels);
/// Header::type of the answers that turn a dial away (dialer.hpp), the same for every transport.
constexpr uint32_t kRefusedDuplicate = 0x100;  ///< the pair is being connected by the other side's dial
constexpr uint32_t kRefusedFailed = 0x101;     ///< the communicator failed here (or could not answer)
/// The communicator failed here on mismatched calls: a MismatchRecord follows the refusal, in a write of its own.
constexpr uint32_t kRefusedMismatch = 0x102;
/// Header::type of a question outside the dial rule (Dialer::askWaiting): which calls does the rank's run wait in.
/// Answered with kToldWaiting and a WaitingCalls record in a write of its own, or refused as a dial is
/// (kRefusedMismatch, kRefusedFailed) when the communicator failed there; the pair's state is not touched.
constexpr uint32_t kAskWaiting = 0x110;
constexpr uint32_t kToldWaiting = 0x111;
/// Header::type of a question for a rank's contact card (Dialer::askCard): the rank asked for follows the header (an
/// int32 in the message's first bytes after it). Answered with kToldCard and a CardAnswer in a write of its own.
constexpr uint32_t kAskCard = 0x112;
constexpr uint32_t kToldCard = 0x113;
/// Where an accepted connection came from: its address, or for a unix socket the process (SO_PEERCRED).
std::string describePeer(int fd, const sockaddr_storage& addr);
/// Whether the process at the other end of unix socket `fd` runs as this process's effective user (its uid in *uid).
bool sameUser(int fd, uid_t* uid);
/// "1, 2, 5"
std::string rankList(const std::vector<int>& ranks);
/// Milliseconds left until `deadline`, for poll() (0 when past).
int pollMs(base::Deadline deadline);

/// A handshake connection: a socket and what has arrived of its current message.
struct Link {
  UniqueFd fd;
  std::string from;           ///< where it came from, for messages
  int peer = -1;              ///< the rank at the other end (dialled: expected; accepted: from its hello)
  int channel = 0;            ///< dialled: expected
  std::vector<uint8_t> buf;   ///< the message (Wire::messageBytes once a read started)
  size_t got = 0;             ///< bytes of it read so far
  std::vector<UniqueFd> fds;  ///< descriptors that came with it (unix sockets)
  bool done = false;          ///< the transport expects nothing more on it during this handshake
  base::Deadline expires{};   ///< accepted: when it must have sent its hello
  /// Accepted: why its hello, read whole, could not be taken here (its descriptors could not be installed: this
  /// rank is out of them); the desk it is for fails that pair with it. Empty: nothing went wrong.
  std::string failure;
  ErrorCode failureCode = ErrorCode::Success;

  const Header& header() const { return *reinterpret_cast<const Header*>(buf.data()); }
  /// The message as the transport's struct (which starts with a Header).
  template <typename M>
  const M& as() const {
    return *reinterpret_cast<const M*>(buf.data());
  }
  /// Makes ready for the next message (keeps fd, peer and channel).
  void clearMessage() {
    got = 0;
    fds.clear();
  }
};

/// How a transport's handshake messages travel.
class Wire {
 public:
  virtual ~Wire() = default;
  /// Size of every handshake message of this transport (at least sizeof(Header)).
  virtual size_t messageBytes() const = 0;
  /// Reads without blocking what has arrived of one message into link.buf (sized messageBytes), link.got and
  /// link.fds. Returns 1 when the message is complete, 0 when more is to come, -1 on EOF, error or garbage.
  virtual int read(Link& link) = 0;
};

/// One connect() call of one transport (see the top of this file).
class Handshake {
 public:
  /// `channels`: links per peer pair (>= 1). Checks `peers` (in range, no duplicates; this rank may be listed).
  /// `timeout`: how long its waits may take in all, when not ctx's (zero: ctx.timeout, else COLLIE_TIMEOUT).
  Handshake(const char* transport, TransportKind kind, const CommContext& ctx, const std::vector<int>& peers,
            int channels, Wire& wire, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  int rank() const { return ctx_.rank; }
  const CommContext& context() const { return ctx_; }
  base::Deadline deadline() const { return deadline_; }
  /// " in <comm>" or "", for messages.
  std::string where() const;

  /// Our header for a message of `type` to `to` on `channel`.
  Header header(uint32_t type, int to, int channel) const;
  /// Right magic, version, kind and secret, and addressed to this rank.
  bool authentic(const Header& h) const;
  /// Throws Timeout: "<transport> connect of rank R in C: timed out after T ms waiting for peer rank(s) X to Y".
  [[noreturn]] void failTimeout(const std::vector<int>& missing, const char* toDoWhat) const;
  /// Called in every wait for `missing` peers: throws when the communicator was aborted, and (about every
  /// kLivenessEvery) RemoteError when one of them ran on this host and its process is gone, so that a peer that died
  /// before it connected fails the wait at once rather than at the timeout (a connection made on first use may be
  /// the first a rank tries with a peer that died long ago).
  void checkWaiting(const std::vector<int>& missing);
  /// One poll() of a wait for `missing` peers on `pfds`, until `until` at most: checkWaiting's checks, except that a
  /// peer found gone fails the wait only when nothing has arrived on `pfds`: a same-host peer may send its last
  /// handshake message and exit before this rank reads it (it is looked for gone first, so anything it sent is
  /// queued by then). Returns how many of `pfds` are ready (0: none, the wait ended or a signal came).
  int pollWaiting(std::vector<pollfd>& pfds, const std::vector<int>& missing, base::Deadline until);

  /// Reads messages on `links` until each is done: every complete message is checked (authentic, from
  /// link.peer, on link.channel) and handed to onMessage(link), which sets link.done when it expects no more.
  /// EOF fails with RemoteError naming the peer; a wrong message with InternalError.
  void await(const std::vector<Link*>& links, const std::function<void(Link&)>& onMessage);

 private:
  /// checkWaiting's checks without failing for a gone peer: throws when aborted; returns the first of `missing`
  /// whose process has exited (-1: none, or not looked at yet this kLivenessEvery).
  int goneAmong(const std::vector<int>& missing);
  [[noreturn]] void failGone(int peer) const;
  /// A poll timeout for a wait until `until`, short enough for the liveness checks to run often.
  int waitMs(base::Deadline until) const;

  const char* transport_;
  TransportKind kind_;
  const CommContext& ctx_;
  Wire& wire_;
  int channels_;
  std::chrono::milliseconds timeout_;
  base::Deadline deadline_;
  base::Deadline nextLivenessCheck_{};
};

// The listening socket of a transport that shakes hands over TCP (tcp, and ucx for its handshake).
/// Opens a non-blocking listener on `bind` (AF_UNSPEC: base::defaultLocalAddress()) at any free port and publishes
/// its address in `self` as `kind`'s; returns the descriptor and stores the address in *bound.
int listenAndPublish(const sockaddr_storage& bind, TransportKind kind, PeerInfo& self, sockaddr_storage* bound);
/// The socket address `kind` published in `info` (family AF_UNSPEC when it published none).
sockaddr_storage socketAddressOf(const PeerInfo& info, TransportKind kind);
/// How long a dial of `peer` at `target` may go unanswered before the peer's host counts as down
/// (base::connectWithRetry's unansweredLimit): `deadMs` (COLLIE_PEER_DEAD_TIMEOUT) for a peer on another host (its
/// hostHash or netNs differs) at an address off loopback; zero, no limit, for a peer on this host (silence there is
/// a full listen queue of a live process; Handshake::checkWaiting finds a gone one) or where deadMs is 0.
std::chrono::milliseconds unansweredLimit(const CommContext& ctx, int peer, const sockaddr_storage& target,
                                          int64_t deadMs);
/// A socket connected to the listener `peer` published as `kind` (InvalidArgument when it published none), tried
/// until hs's deadline. The listener was up when it published its address and stays up while its communicator lives,
/// so refusals mean the peer is gone: a few in a row (a full backlog drops a SYN, it does not refuse it) end the dial
/// with RemoteError rather than the timeout; so does no answer at all from another host for `deadMs`
/// (unansweredLimit). `transport` and `what` ("rank 3 (tcp socket 1)") name it in messages.
UniqueFd dialPublishedListener(Handshake& hs, const char* transport, TransportKind kind, int peer,
                               const std::string& what, int64_t deadMs);
/// Reads without blocking from link's stream socket into link.buf until it holds link.buf.size() bytes (link.got
/// of them so far): 1 when it does, 0 when more is to come, -1 on EOF or an error. For the Wires of stream sockets.
int readStream(Link& link);

}  // namespace handshake
}  // namespace collie::transport
