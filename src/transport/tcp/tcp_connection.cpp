// TCP data path.
//
// Every message is numbered (per direction) in the order it was posted. A message of at least stripeMin bytes
// is cut into nsock near-equal parts, part i going to socket i; a smaller one goes whole to one of the sockets
// of its direction (lanes(), by number). Both sides number and cut messages the same way, so every socket carries
// the parts of the messages it is given in posting order, and each socket keeps a FIFO of pending send parts and
// one of pending receive parts.
//
// On the wire every part is a MsgHeader (msg_header.hpp: magic, message number, whole-message bytes, the sender's
// call fingerprint) followed by the part's payload; a zero-byte message is a header alone, so it keeps its place
// in the order and a size mismatch is caught like any other. The receiver checks the header against what it
// posted (checkMsgHeader). A rank that found a call mismatch poisons the connection: it finishes the part it was
// writing, writes a poison header naming the mismatch, and closes; the peer meets that header where it expects
// its next one, or, when the socket fails under it first, looks for it in what is left of the stream. I/O uses
// sendmsg/recvmsg with an iovec list covering the header and payload of up to kMaxBatch queued parts, so a
// small message is one syscall each way and a burst of small messages shares syscalls. One sendmsg writes at most
// sendBurst_ payload bytes (TcpTransport::sendBurstFor); then progress() reads the receives before the next one.
//
// probe() (a receive from any source) peeks at the header of message number recvSeq_ on the sockets an unstriped
// message of that number may take (socketOf, small or large): whether or not it is striped, one of them carries a
// part of it, and every part's header holds the whole message's size and the sender's fingerprint. Nothing is read,
// so the receive posted next takes it as usual.
//
// progress() tries every socket that has pending parts until the kernel would block (EAGAIN, or a short
// read/write, which for stream sockets means the same). The executor sleeps in an edge-triggered epoll only
// after a progress() that moved nothing, so no readiness edge is ever lost.
#include "transport/tcp/tcp_connection.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/errors.hpp"
#include "base/poller.hpp"
#include "base/socket.hpp"

namespace collie::transport::tcp {
namespace {

constexpr int kMaxBatch = 64;  // parts per syscall (two iovecs each)
constexpr size_t kHeaderBytes = sizeof(MsgHeader);
constexpr uint64_t kLaneMinBytes = 64 * 1024;  // unstriped messages this large take their direction's sockets
constexpr auto kPoisonBudget = std::chrono::milliseconds(200);  // for writing, and for reading, a poison header

using PoisonClock = std::chrono::steady_clock;

// Waits until fd is ready for `events` or `until` passed; false then.
bool waitFd(int fd, short events, PoisonClock::time_point until) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - PoisonClock::now()).count();
  if (left <= 0) return false;
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(left)) > 0;
}

// Writes n bytes to a non-blocking socket by `until`; false if it could not.
bool writeAll(int fd, const char* data, size_t n, PoisonClock::time_point until) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFd(fd, POLLOUT, until)) return false;
    } else {
      return false;
    }
  }
  return true;
}

// Reads n bytes (into `to`, or dropped when it is null) from a non-blocking socket by `until`; false if it could not.
bool readAll(int fd, char* to, size_t n, PoisonClock::time_point until) {
  char sink[16384];
  while (n > 0) {
    size_t want = to ? n : std::min(n, sizeof(sink));
    ssize_t r = ::recv(fd, to ? to : sink, want, MSG_DONTWAIT);
    if (r > 0) {
      if (to) to += r;
      n -= static_cast<size_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFd(fd, POLLIN, until)) return false;
    } else {
      return false;  // end of stream or an error
    }
  }
  return true;
}

}  // namespace

TcpConnection::TcpConnection(int rank, int peer, std::vector<int> fds, int64_t stripeMinBytes, base::Poller* poller,
                             int64_t deadMs, size_t sendBurstBytes)
    : rank_(rank),
      peer_(peer),
      stripeMin_(stripeMinBytes),
      sendBurst_(sendBurstBytes),
      poller_(poller),
      deadMs_(deadMs) {
  socks_.reserve(fds.size());
  for (int fd : fds) socks_.push_back(Socket{fd, {}, {}});
}

TcpConnection::~TcpConnection() { close(); }

void TcpConnection::close() {
  if (closed_) return;
  closed_ = true;
  for (Socket& s : socks_) {
    if (s.fd < 0) continue;
    if (poller_) poller_->remove(s.fd);
    ::shutdown(s.fd, SHUT_RDWR);
    ::close(s.fd);
    s.fd = -1;
    s.sends.clear();
    s.recvs.clear();
  }
}

TcpConnection::Op* TcpConnection::newOp(Transfer* t, uint32_t parts) {
  Op* op;
  if (freeOps_.empty()) {
    opStorage_.push_back(std::make_unique<Op>());
    op = opStorage_.back().get();
  } else {
    op = freeOps_.back();
    freeOps_.pop_back();
  }
  op->t = t;
  op->partsLeft = parts;
  return op;
}

void TcpConnection::post(Transfer* t, bool send) {
  const char* what = send ? "send" : "receive";
  checkPosted("tcp connection", rank_, peer_, closed_, *t, what);
  t->complete = false;
  uint32_t seq = send ? sendSeq_++ : recvSeq_++;
  const bool cut = striped(t->bytes);
  const size_t nparts = cut ? socks_.size() : 1;
  Op* op = newOp(t, static_cast<uint32_t>(nparts));
  char* base = static_cast<char*>(t->buf);
  size_t offset = 0;
  for (size_t i = 0; i < nparts; ++i) {
    size_t bytes = partBytes(t->bytes, i, nparts);
    Socket& s = socks_[cut ? i : socketOf(seq, t->bytes, send)];
    Part part{op, base + offset, bytes, 0, seq, dataHeader(seq, t->bytes, t->fp)};
    (send ? s.sends : s.recvs).push_back(part);
    offset += bytes;
  }
  ++pending_;
}

bool TcpConnection::progress() {
  if (error_) std::rethrow_exception(error_);
  if (pending_ == 0) return false;
  bool moved = false;
  try {
    for (Socket& s : socks_) {
      if (!s.sends.empty()) moved |= sendOn(s);
      if (!s.recvs.empty()) moved |= recvOn(s);
    }
  } catch (...) {
    error_ = std::current_exception();
    throw;
  }
  return moved;
}

void TcpConnection::checkAlive() {
  if (error_) std::rethrow_exception(error_);
  // A peer that poisoned this connection while this rank waits on others (it may never be read here otherwise):
  // the poison header is the next thing on a socket with no message half read. And a message that came on
  // another socket than the one its receive waits on: the two sides disagree on its size class (one posted it
  // under kLaneMinBytes, the other at or above it), so it is a size mismatch, reported as such, not a timeout.
  for (size_t i = 0; i < socks_.size(); ++i) {
    const Socket& s = socks_[i];
    if (s.fd < 0 || (!s.recvs.empty() && s.recvs.front().done > 0)) continue;
    MsgHeader h{};
    if (::recv(s.fd, &h, kHeaderBytes, MSG_PEEK | MSG_DONTWAIT) != static_cast<ssize_t>(kHeaderBytes)) continue;
    if (h.magic == kPoisonMagic) throwMismatch(poisonRecord(h), base::format("from peer %d over tcp", peer_).c_str());
    if (h.magic == kMsgMagic && (s.recvs.empty() || s.recvs.front().seq != h.seq)) checkMisplaced(h, i);
  }
  if (deadMs_ <= 0 || closed_) return;
  for (const Socket& s : socks_) {
    const int64_t silent = base::unansweredMs(s.fd);
    if (silent <= deadMs_) continue;
    try {
      COLLIE_FAIL(ErrorCode::RemoteError,
                  "peer %d is dead or unreachable: its host has acknowledged nothing for %lld ms while data or "
                  "window probes waited for an answer (COLLIE_PEER_DEAD_TIMEOUT=%lld ms)",
                  peer_, static_cast<long long>(silent), static_cast<long long>(deadMs_));
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }
}

void TcpConnection::checkMisplaced(const MsgHeader& h, size_t sock) {
  for (size_t j = 0; j < socks_.size(); ++j) {
    if (j == sock) continue;
    for (const Part& p : socks_[j].recvs)
      if (p.seq == h.seq && p.done == 0)
        checkMsgHeader(h, ExpectedMsg{p.seq, p.op->t->bytes, p.op->t->fp}, rank_, peer_);
  }
}

bool TcpConnection::probe(Arrival* next) {
  if (error_) std::rethrow_exception(error_);
  COLLIE_USAGE_CHECK(!closed_, "receive from any source on the closed tcp connection of rank %d to peer %d", rank_,
                     peer_);
  COLLIE_INTERNAL_CHECK(pending_ == 0, "tcp connection to peer %d: probe with %zu transfers pending", peer_, pending_);
  // Message recvSeq_ is on the socket of a small one or on that of a large one (socketOf); the other may show a
  // later message first. Each socket is a stream of its own: a peer that sent and then closed may show its end on
  // one before the message it sent first has arrived on the other. So the pair counts as closed only when no socket
  // can still bring the message: both ended, or one ended and the other shows a later message.
  const size_t small = socketOf(recvSeq_, 0, false), large = socketOf(recvSeq_, kLaneMinBytes, false);
  const int candidates = large == small ? 1 : 2;
  int ended = 0;
  bool later = false;
  for (int k = 0; k < candidates; ++k) {
    const size_t sock = k == 0 ? small : large;
    MsgHeader h{};
    ssize_t n;
    do {
      n = ::recv(socks_[sock].fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) failIo(errno, "receive");
    if (n == 0) {  // this socket ended, after everything it carried was taken
      ++ended;
      continue;
    }
    if (static_cast<size_t>(n) < sizeof(h)) continue;  // the rest of the header arrives with a new edge
    if (h.magic == kPoisonMagic) throwMismatch(poisonRecord(h), base::format("from peer %d over tcp", peer_).c_str());
    COLLIE_ENFORCE(h.magic == kMsgMagic && static_cast<int32_t>(h.seq - recvSeq_) >= 0, ErrorCode::InternalError,
                   "corrupt tcp stream from peer %d: expected the header of message #%u or later, got magic 0x%08x #%u",
                   peer_, recvSeq_, h.magic, h.seq);
    if (h.seq != recvSeq_) {  // a later message: ours is on the other socket
      later = true;
      continue;
    }
    next->bytes = h.bytes;
    next->fp = h.fp;
    return true;
  }
  if (ended == candidates || (ended > 0 && later)) failIo(0, "receive");
  return false;
}

int TcpConnection::buildIov(const std::deque<Part>& q, iovec* iov, size_t* want, size_t maxPayload, bool* capped) {
  int n = 0;
  size_t total = 0;
  size_t payloadLeft = maxPayload;
  int parts = 0;
  *capped = false;
  for (const Part& p : q) {
    if (parts++ == kMaxBatch) break;
    if (payloadLeft == 0 && p.bytes > 0) {
      *capped = true;
      break;
    }
    size_t off = 0;
    if (p.done < kHeaderBytes) {
      iov[n].iov_base = reinterpret_cast<char*>(const_cast<MsgHeader*>(&p.hdr)) + p.done;
      iov[n].iov_len = kHeaderBytes - p.done;
      total += iov[n++].iov_len;
    } else {
      off = p.done - kHeaderBytes;
    }
    if (p.bytes > off) {
      size_t len = std::min(p.bytes - off, payloadLeft);
      iov[n].iov_base = p.data + off;
      iov[n].iov_len = len;
      total += iov[n++].iov_len;
      payloadLeft -= len;
      if (len < p.bytes - off) {
        *capped = true;
        break;
      }
    }
  }
  *want = total;
  return n;
}

// A message too small to stripe but of at least kLaneMinBytes goes whole to one of its direction's sockets: with two
// sockets or more, even indices carry the lower rank's, odd ones the higher rank's, so that such a socket's data
// flows one way and a rank's sendmsg and the delivery of the peer's data (on loopback, in the peer's sendmsg) do not
// take turns at its lock (2 ranks over loopback, 1 MiB AllReduce, 128 KiB slices: +15% busbw). Smaller messages
// keep sharing sockets with the other direction (number % nsock), where the peer's data carries the acknowledgement
// of ours (one socket per direction made the 8-byte AllReduce 23% slower), and striped messages use every socket
// (at 64 MiB, 1 MiB slices, 12% faster than one socket per direction); with 2 ranks striping starts at 1 MiB
// (TcpTransport::stripeMinFor). With one socket, both directions share it.
size_t TcpConnection::socketOf(uint32_t seq, uint64_t bytes, bool send) const {
  if (bytes < kLaneMinBytes) return seq % socks_.size();
  const Lanes l = send ? sendLanes() : recvLanes();
  return l.first + l.stride * (seq % l.count);
}

TcpConnection::Lanes TcpConnection::lanes(bool fromLowerRank) const {
  const size_t n = socks_.size();
  if (n < 2) return Lanes{0, 1, n};
  const size_t first = fromLowerRank ? 0 : 1;
  return Lanes{first, 2, (n - first + 1) / 2};
}

bool TcpConnection::striped(uint64_t msgBytes) const {
  return socks_.size() > 1 && msgBytes > 0 && msgBytes >= static_cast<uint64_t>(stripeMin_);
}

size_t TcpConnection::partBytes(uint64_t msgBytes, size_t part, size_t nparts) {
  return msgBytes / nparts + (part < msgBytes % nparts ? 1 : 0);
}

void TcpConnection::checkHeader(const Part& p) {
  checkMsgHeader(p.hdr, ExpectedMsg{p.seq, p.op->t->bytes, p.op->t->fp}, rank_, peer_);
}

void TcpConnection::poison(const MismatchRecord& why) {
  if (closed_) return;
  const MsgHeader h = poisonHeader(why);
  const auto until = PoisonClock::now() + kPoisonBudget;
  for (Socket& s : socks_) {
    if (s.fd < 0) continue;
    // The peer reads headers only at part boundaries: finish the part that is half written (its buffer is still
    // the caller's: poison() runs before the failed call returns), then the poison header.
    bool ok = true;
    if (!s.sends.empty() && s.sends.front().done > 0) {
      const Part& p = s.sends.front();
      if (p.done < kHeaderBytes)
        ok = writeAll(s.fd, reinterpret_cast<const char*>(&p.hdr) + p.done, kHeaderBytes - p.done, until);
      const size_t off = p.done < kHeaderBytes ? 0 : p.done - kHeaderBytes;
      ok = ok && writeAll(s.fd, p.data + off, p.bytes - off, until);
    }
    if (ok) writeAll(s.fd, reinterpret_cast<const char*>(&h), sizeof(h), until);
    // Drop what the peer sent us, so that closing with unread data does not reset the connection (a reset may
    // discard the poison before the peer reads it).
    char sink[16384];
    while (::recv(s.fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
  }
  close();
}

void TcpConnection::revealPoison(Clock::time_point until) {
  for (const Socket& s : socks_) {
    if (s.fd < 0) continue;
    // A poisoning peer writes the poison header, then closes: wait for the close (hang-up) before reading.
    for (;;) {
      pollfd p{s.fd, POLLRDHUP, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      const int rc = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
      if (rc > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) break;
      if (rc == 0 || (rc < 0 && errno != EINTR)) return;  // alive (or unknowable) until `until`
    }
  }
  scanForPoison();
}

void TcpConnection::scanForPoison() {
  const auto until = PoisonClock::now() + kPoisonBudget;
  for (size_t i = 0; i < socks_.size(); ++i) {
    const int fd = socks_[i].fd;
    if (fd < 0) continue;
    MsgHeader h{};
    size_t have = 0;  // header bytes already read
    size_t skip = 0;  // payload bytes to drop before the next header
    if (!socks_[i].recvs.empty() && socks_[i].recvs.front().done > 0) {
      const Part& p = socks_[i].recvs.front();
      if (p.done < kHeaderBytes) {
        std::memcpy(&h, &p.hdr, p.done);
        have = p.done;
      } else {
        skip = kHeaderBytes + p.bytes - p.done;
      }
    }
    for (int guard = 0; guard < 1 << 20; ++guard) {
      if (have == 0 && !readAll(fd, nullptr, skip, until)) break;
      if (!readAll(fd, reinterpret_cast<char*>(&h) + have, kHeaderBytes - have, until)) break;
      have = 0;
      if (h.magic == kPoisonMagic) throwMismatch(poisonRecord(h), base::format("from peer %d over tcp", peer_).c_str());
      if (h.magic != kMsgMagic) break;
      skip = striped(h.bytes) ? partBytes(h.bytes, i, socks_.size()) : h.bytes;
    }
  }
}

void TcpConnection::consume(std::deque<Part>& q, size_t n, bool recv) {
  while (n > 0) {
    Part& p = q.front();
    size_t total = kHeaderBytes + p.bytes;
    size_t take = std::min(n, total - p.done);
    bool headerWasIncomplete = p.done < kHeaderBytes;
    p.done += take;
    n -= take;
    if (recv && headerWasIncomplete && p.done >= kHeaderBytes) checkHeader(p);
    if (p.done < total) break;
    Op* op = p.op;
    q.pop_front();
    if (--op->partsLeft == 0) {
      op->t->complete = true;
      --pending_;
      freeOps_.push_back(op);
    }
  }
}

void TcpConnection::failIo(int err, const char* op) {
  if (err == ETIMEDOUT) {
    COLLIE_FAIL(ErrorCode::RemoteError,
                "peer %d is dead or unreachable: its host stopped answering keep-alive probes or retransmissions "
                "(COLLIE_PEER_DEAD_TIMEOUT=%lld ms; 0: the kernel's defaults): %s",
                peer_, static_cast<long long>(deadMs_), base::errnoString(err).c_str());
  }
  if (err == EHOSTUNREACH || err == ENETUNREACH) {
    COLLIE_FAIL(ErrorCode::RemoteError, "peer %d is unreachable: the network reports no route to its host: %s", peer_,
                base::errnoString(err).c_str());
  }
  if (err == 0 || err == ECONNRESET || err == EPIPE || err == ENOTCONN) {
    scanForPoison();
    COLLIE_FAIL(ErrorCode::RemoteError, "peer %d closed the connection (it may have exited or failed)%s%s", peer_,
                err ? ": " : "", err ? base::errnoString(err).c_str() : "");
  }
  COLLIE_FAIL(ErrorCode::SystemError, "tcp %s to peer %d failed: %s", op, peer_, base::errnoString(err).c_str());
}

bool TcpConnection::sendOn(Socket& s) {
  bool moved = false;
  iovec iov[2 * kMaxBatch];
  while (!s.sends.empty()) {
    size_t want = 0;
    msghdr msg{};
    msg.msg_iov = iov;
    bool capped = false;
    msg.msg_iovlen = static_cast<size_t>(buildIov(s.sends, iov, &want, sendBurst_, &capped));
    ssize_t n = ::sendmsg(s.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) break;
      failIo(err, "send");
    }
    if (n > 0) moved = true;
    consume(s.sends, static_cast<size_t>(n), /*recv=*/false);
    if (static_cast<size_t>(n) < want) break;  // the socket buffer is full
    if (capped) break;                         // the receives' turn (sendBurst_)
  }
  return moved;
}

bool TcpConnection::recvOn(Socket& s) {
  bool moved = false;
  iovec iov[2 * kMaxBatch];
  while (!s.recvs.empty()) {
    size_t want = 0;
    msghdr msg{};
    msg.msg_iov = iov;
    bool capped = false;
    msg.msg_iovlen = static_cast<size_t>(buildIov(s.recvs, iov, &want, SIZE_MAX, &capped));
    ssize_t n = ::recvmsg(s.fd, &msg, MSG_DONTWAIT);
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) break;
      failIo(err, "receive");
    }
    if (n == 0) failIo(0, "receive");
    moved = true;
    consume(s.recvs, static_cast<size_t>(n), /*recv=*/true);
    if (static_cast<size_t>(n) < want) break;  // nothing more has arrived yet
  }
  return moved;
}

}  // namespace collie::transport::tcp
