// The data path of the TCP transport: one Connection over several non-blocking sockets to one peer.
// Internal to src/transport/tcp (and its tests); the rest of collie sees a plain Connection.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "transport/tcp/msg_header.hpp"
#include "transport/transport.hpp"

namespace collie::transport::tcp {

/// Sends and receives over `fds` (connected, non-blocking, registered with `poller` by the caller; the
/// connection removes and closes them, so `poller` must outlive it). Both sides must use the same number of
/// sockets and stripe size.
class TcpConnection final : public Connection {
 public:
  /// deadMs > 0: checkAlive() fails once the peer's host has left data or window probes unanswered that long.
  /// sendBurstBytes: payload per sendmsg before the receives get a turn (TcpTransport::sendBurstFor).
  TcpConnection(int rank, int peer, std::vector<int> fds, int64_t stripeMinBytes, base::Poller* poller,
                int64_t deadMs = 0, size_t sendBurstBytes = SIZE_MAX);
  ~TcpConnection() override;
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  int peer() const override { return peer_; }
  void postSend(Transfer* t) override { post(t, /*send=*/true); }
  void postRecv(Transfer* t) override { post(t, /*send=*/false); }
  /// Tries every socket with pending parts until the kernel would block; true if anything moved.
  bool progress() override;
  bool busy() const override { return pending_ > 0; }
  bool announcedByPoller() const override { return poller_ != nullptr; }
  void close() override;
  void checkAlive() override;
  /// Peeks (MSG_PEEK) at the header of the next message on the socket that carries it (all or part of it).
  bool probe(Arrival* next) override;
  /// Finishes the part being written on each socket (bounded), writes a poison header after it, then closes.
  void poison(const MismatchRecord& why) override;
  void revealPoison(Clock::time_point until) override;

 private:
  struct Op {
    Transfer* t;
    uint32_t partsLeft;
  };
  struct Part {
    Op* op;
    char* data;     ///< this part's slice of the transfer's buffer
    size_t bytes;   ///< payload bytes of this part
    size_t done;    ///< bytes moved so far, header included
    uint32_t seq;   ///< message number (receive side: the expected one)
    MsgHeader hdr;  ///< send: the header to write; receive: where the header lands
  };
  struct Socket {
    int fd;
    std::deque<Part> sends;
    std::deque<Part> recvs;
  };

  void post(Transfer* t, bool send);
  bool sendOn(Socket& s);
  bool recvOn(Socket& s);
  /// Fills iov from the front parts of q with at most maxPayload payload bytes (headers not counted); returns the
  /// iovec count, sets *want to the bytes asked for and *capped to whether maxPayload cut the list short.
  int buildIov(const std::deque<Part>& q, iovec* iov, size_t* want, size_t maxPayload, bool* capped);
  /// Advances the front parts of q by n bytes; validates headers (receive side) and completes parts.
  void consume(std::deque<Part>& q, size_t n, bool recv);
  void checkHeader(const Part& p);
  /// Header h of message h.seq sits on socket `sock` while its receive waits on another: checks it against that
  /// receive (throws MismatchError when the sizes disagree, as they must for it to be there).
  void checkMisplaced(const MsgHeader& h, size_t sock);
  /// The sockets that carry one direction's unstriped messages (tcp_connection.cpp): first, first + stride, ...
  struct Lanes {
    size_t first, stride, count;
  };
  Lanes lanes(bool fromLowerRank) const;
  Lanes sendLanes() const { return lanes(rank_ < peer_); }
  Lanes recvLanes() const { return lanes(peer_ < rank_); }
  /// The socket of unstriped message number `seq` of `bytes` in this direction (send) or the peer's.
  size_t socketOf(uint32_t seq, uint64_t bytes, bool send) const;
  /// Whether a `msgBytes` message is cut into one part per socket.
  bool striped(uint64_t msgBytes) const;
  /// Payload bytes of part `part` of a `msgBytes` message cut in `nparts`.
  static size_t partBytes(uint64_t msgBytes, size_t part, size_t nparts);
  /// After the peer closed: reads the rest of what it sent, message by message, and throws MismatchError if it
  /// ends in a poison header. Bounded in time; returns when there is none.
  void scanForPoison();
  [[noreturn]] void failIo(int err, const char* op);
  Op* newOp(Transfer* t, uint32_t parts);

  int rank_;
  int peer_;
  int64_t stripeMin_;
  size_t sendBurst_;  ///< payload bytes one sendmsg writes at most
  base::Poller* poller_;
  int64_t deadMs_;
  std::vector<Socket> socks_;
  uint32_t sendSeq_ = 0;
  uint32_t recvSeq_ = 0;
  size_t pending_ = 0;  ///< posted transfers not yet complete
  bool closed_ = false;
  std::exception_ptr error_;  ///< the first failure, rethrown by every later progress()
  std::vector<std::unique_ptr<Op>> opStorage_;
  std::vector<Op*> freeOps_;
};

}  // namespace collie::transport::tcp
