// TCP data path.
//
// Every message is numbered (per direction) in the order it was posted. A message of at least stripeMin bytes
// is cut into nsock near-equal parts, part i going to socket i; a smaller one goes whole to socket
// (number % nsock). Both sides number and cut messages the same way, so every socket carries the parts of
// the messages it is given in posting order, and each socket keeps a FIFO of pending send parts and one of
// pending receive parts.
//
// On the wire every part is a 16-byte MsgHeader {magic, message number, whole-message bytes} followed by the
// part's payload; a zero-byte message is a header alone, so it keeps its place in the order and a size
// mismatch is caught like any other. The receiver checks the header against what it posted. I/O uses
// sendmsg/recvmsg with an iovec list covering the header and payload of up to kMaxBatch queued parts, so a
// small message is one syscall each way and a burst of small messages shares syscalls.
//
// progress() tries every socket that has pending parts until the kernel would block (EAGAIN, or a short
// read/write, which for stream sockets means the same). The executor sleeps in an edge-triggered epoll only
// after a progress() that moved nothing, so no readiness edge is ever lost.
#include "transport/tcp/tcp_connection.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "base/errors.hpp"
#include "base/poller.hpp"

namespace collie::transport::tcp {
namespace {

constexpr int kMaxBatch = 64;  // parts per syscall (two iovecs each)
constexpr size_t kHeaderBytes = sizeof(MsgHeader);

}  // namespace

TcpConnection::TcpConnection(int rank, int peer, std::vector<int> fds, int64_t stripeMinBytes, base::Poller* poller)
    : rank_(rank), peer_(peer), stripeMin_(stripeMinBytes), poller_(poller) {
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
  COLLIE_USAGE_CHECK(!closed_, "%s posted on the closed tcp connection of rank %d to peer %d", what, rank_, peer_);
  COLLIE_INTERNAL_CHECK(t->kind == MemoryKind::Host,
                        "tcp connection to peer %d: %s of a device buffer (device buffers must be staged)", peer_,
                        what);
  COLLIE_INTERNAL_CHECK(t->bytes == 0 || t->buf != nullptr, "tcp connection to peer %d: %s of %zu bytes from null",
                        peer_, what, t->bytes);
  t->complete = false;
  uint32_t seq = send ? sendSeq_++ : recvSeq_++;
  size_t nsock = socks_.size();
  bool striped = nsock > 1 && t->bytes > 0 && t->bytes >= static_cast<uint64_t>(stripeMin_);
  size_t nparts = striped ? nsock : 1;
  Op* op = newOp(t, static_cast<uint32_t>(nparts));
  char* base = static_cast<char*>(t->buf);
  size_t offset = 0;
  for (size_t i = 0; i < nparts; ++i) {
    size_t bytes = t->bytes / nparts + (i < t->bytes % nparts ? 1 : 0);
    Socket& s = socks_[striped ? i : seq % nsock];
    Part part{op, base + offset, bytes, 0, seq, MsgHeader{kMsgMagic, seq, t->bytes}};
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

int TcpConnection::buildIov(const std::deque<Part>& q, iovec* iov, size_t* want) {
  int n = 0;
  size_t total = 0;
  int parts = 0;
  for (const Part& p : q) {
    if (parts++ == kMaxBatch) break;
    if (p.done < kHeaderBytes) {
      iov[n].iov_base = reinterpret_cast<char*>(const_cast<MsgHeader*>(&p.hdr)) + p.done;
      iov[n].iov_len = kHeaderBytes - p.done;
      total += iov[n++].iov_len;
      if (p.bytes > 0) {
        iov[n].iov_base = p.data;
        iov[n].iov_len = p.bytes;
        total += iov[n++].iov_len;
      }
    } else {
      size_t off = p.done - kHeaderBytes;
      iov[n].iov_base = p.data + off;
      iov[n].iov_len = p.bytes - off;
      total += iov[n++].iov_len;
    }
  }
  *want = total;
  return n;
}

void TcpConnection::checkHeader(const Part& p) {
  const MsgHeader& h = p.hdr;
  if (h.magic != kMsgMagic) {
    COLLIE_FAIL(ErrorCode::InternalError,
                "corrupt tcp stream from peer %d: bad message magic 0x%08x (expected message #%u of %zu bytes)", peer_,
                h.magic, p.seq, p.op->t->bytes);
  }
  if (h.bytes != p.op->t->bytes) {
    COLLIE_FAIL(ErrorCode::InternalError, "message size mismatch from peer %d: expected %zu got %llu", peer_,
                p.op->t->bytes, static_cast<unsigned long long>(h.bytes));
  }
  if (h.seq != p.seq) {
    COLLIE_FAIL(ErrorCode::InternalError, "message order mismatch from peer %d: expected message #%u got #%u", peer_,
                p.seq, h.seq);
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
  if (err == ETIMEDOUT || err == EHOSTUNREACH) {
    COLLIE_FAIL(ErrorCode::RemoteError,
                "peer %d is dead or unreachable: its host stopped answering (keep-alive and retransmissions gave up "
                "after COLLIE_PEER_DEAD_TIMEOUT): %s",
                peer_, base::errnoString(err).c_str());
  }
  if (err == 0 || err == ECONNRESET || err == EPIPE || err == ENOTCONN) {
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
    msg.msg_iovlen = static_cast<size_t>(buildIov(s.sends, iov, &want));
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
    msg.msg_iovlen = static_cast<size_t>(buildIov(s.recvs, iov, &want));
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
