// The common handshake of all transports (see handshake.hpp): hello checking, awaiting answers, and the one deadline
// with its timeout message.
#include "transport/handshake.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"

namespace collie::transport::handshake {

bool secretsEqual(const uint8_t* a, const uint8_t* b, size_t bytes) {
  volatile uint8_t diff = 0;  // no early exit: the time taken says nothing about where they differ
  for (size_t i = 0; i < bytes; ++i) diff = static_cast<uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

bool headerAuthentic(const Header& h, TransportKind kind, int rank, const uint8_t* secret) {
  bool secretOk = secretsEqual(h.secret, secret, sizeof(h.secret));
  return secretOk && h.magic == kMagic && h.version == kVersion && h.kind == static_cast<uint16_t>(kind) &&
         h.toRank == rank;
}

bool dialerValid(const Header& h, int rank, int nranks, int channels) {
  return h.fromRank >= 0 && h.fromRank != rank && h.fromRank < nranks && h.channel >= 0 && h.channel < channels;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

int pollMs(base::Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

std::string describePeer(int fd, const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET || addr.ss_family == AF_INET6) return base::addressToString(addr);
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0)
    return base::format("a local process (pid %d)", static_cast<int>(cred.pid));
  return "a local process";
}

bool sameUser(int fd, uid_t* uid) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  *uid = cred.uid;
  return cred.uid == ::geteuid();
}

Handshake::Handshake(const char* transport, TransportKind kind, const CommContext& ctx, const std::vector<int>& peers,
                     int channels, Wire& wire, std::chrono::milliseconds timeout)
    : transport_(transport), kind_(kind), ctx_(ctx), wire_(wire), channels_(channels) {
  timeout_ = timeout.count() > 0       ? timeout
             : ctx.timeout.count() > 0 ? ctx.timeout
                                       : std::chrono::milliseconds(base::params::timeoutMs());
  deadline_ = Clock::now() + timeout_;
  COLLIE_INTERNAL_CHECK(channels >= 1 && wire.messageBytes() >= sizeof(Header), "%s handshake: %d channels", transport,
                        channels);
  std::vector<bool> listed(static_cast<size_t>(std::max(ctx.nranks, 0)), false);
  for (int p : peers) {
    COLLIE_ARG_CHECK(p >= 0 && p < ctx.nranks && p < static_cast<int>(ctx.peers.size()),
                     "%s connect%s: peer %d out of range (nranks %d)", transport, where().c_str(), p, ctx.nranks);
    COLLIE_ARG_CHECK(!listed[static_cast<size_t>(p)], "%s connect%s: peer %d listed twice", transport, where().c_str(),
                     p);
    listed[static_cast<size_t>(p)] = true;
  }
}

std::string Handshake::where() const { return ctx_.name.empty() ? std::string() : " in " + ctx_.name; }

Header makeHeader(TransportKind kind, uint32_t type, int fromRank, int toRank, int channel, const uint8_t* secret) {
  Header h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.kind = static_cast<uint16_t>(kind);
  h.type = type;
  h.fromRank = fromRank;
  h.toRank = toRank;
  h.channel = channel;
  std::memcpy(h.secret, secret, sizeof(h.secret));
  return h;
}

Header Handshake::header(uint32_t type, int to, int channel) const {
  return makeHeader(kind_, type, ctx_.rank, to, channel, ctx_.secret);
}

bool Handshake::authentic(const Header& h) const { return headerAuthentic(h, kind_, ctx_.rank, ctx_.secret); }

void Handshake::failTimeout(const std::vector<int>& missing, const char* toDoWhat) const {
  COLLIE_FAIL(ErrorCode::Timeout, "%s connect of rank %d%s: timed out after %lld ms waiting for peer rank(s) %s to %s",
              transport_, ctx_.rank, where().c_str(), static_cast<long long>(timeout_.count()),
              rankList(missing).c_str(), toDoWhat);
}

int Handshake::waitMs(base::Deadline until) const { return pollMs(std::min(until, Clock::now() + kLivenessEvery)); }

int Handshake::goneAmong(const std::vector<int>& missing) {
  if (ctx_.abort && ctx_.abort->load(std::memory_order_relaxed))
    COLLIE_FAIL(ErrorCode::InvalidUsage, "%s connect of rank %d%s: the communicator was aborted", transport_, ctx_.rank,
                where().c_str());
  const auto now = Clock::now();
  if (now < nextLivenessCheck_) return -1;
  nextLivenessCheck_ = now + kLivenessEvery;
  const PeerInfo& self = ctx_.peers[static_cast<size_t>(ctx_.rank)];
  for (int p : missing) {
    const PeerInfo& peer = ctx_.peers[static_cast<size_t>(p)];
    if (peer.hostHash != self.hostHash || peer.pid <= 0 || peer.pid == self.pid) continue;
    if (::kill(peer.pid, 0) != 0 && errno == ESRCH) return p;
  }
  return -1;
}

void Handshake::failGone(int peer) const {
  COLLIE_FAIL(ErrorCode::RemoteError,
              "%s connect of rank %d%s: rank %d (pid %d on this host) has exited before connecting to this rank",
              transport_, ctx_.rank, where().c_str(), peer,
              static_cast<int>(ctx_.peers[static_cast<size_t>(peer)].pid));
}

void Handshake::checkWaiting(const std::vector<int>& missing) {
  if (const int gone = goneAmong(missing); gone >= 0) failGone(gone);
}

int Handshake::pollWaiting(std::vector<pollfd>& pfds, const std::vector<int>& missing, base::Deadline until) {
  const int gone = goneAmong(missing);
  const int rc = ::poll(pfds.data(), pfds.size(), gone >= 0 ? 0 : waitMs(until));
  if (rc < 0) {
    if (errno != EINTR) COLLIE_SYSCHECK(rc, "poll");
    return 0;
  }
  if (rc == 0 && gone >= 0) failGone(gone);
  return rc;
}

void Handshake::await(const std::vector<Link*>& links, const std::function<void(Link&)>& onMessage) {
  const int me = ctx_.rank;
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<Link*> open;
    for (Link* l : links) {
      if (l->done) continue;
      pfds.push_back(pollfd{l->fd.get(), POLLIN, 0});
      open.push_back(l);
    }
    if (open.empty()) return;
    if (Clock::now() >= deadline_) {
      std::vector<int> missing;
      for (Link* l : open) missing.push_back(l->peer);
      std::sort(missing.begin(), missing.end());
      missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
      failTimeout(missing, "answer");
    }
    std::vector<int> waitingOn;
    for (Link* l : open) waitingOn.push_back(l->peer);
    if (pollWaiting(pfds, waitingOn, deadline_) == 0) continue;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!pfds[k].revents) continue;
      Link& l = *open[k];
      while (!l.done) {
        int state = wire_.read(l);
        if (state == 0) break;
        COLLIE_ENFORCE(state > 0, ErrorCode::RemoteError,
                       "%s connect of rank %d%s: rank %d at %s closed the connection during the handshake (it may "
                       "have failed during init)",
                       transport_, me, where().c_str(), l.peer, l.from.c_str());
        const Header& h = l.header();
        COLLIE_ENFORCE(authentic(h) && h.fromRank == l.peer && h.channel == l.channel, ErrorCode::InternalError,
                       "%s connect of rank %d%s: %s (expected rank %d) answered the handshake with a wrong magic, "
                       "secret or rank",
                       transport_, me, where().c_str(), l.from.c_str(), l.peer);
        onMessage(l);
        l.clearMessage();
      }
    }
  }
}

int listenAndPublish(const sockaddr_storage& bind, TransportKind kind, PeerInfo& self, sockaddr_storage* bound) {
  sockaddr_storage addr = bind.ss_family == AF_UNSPEC ? base::defaultLocalAddress() : bind;
  base::setAddressPort(addr, 0);
  const int fd = base::listenOn(addr);
  base::setNonBlocking(fd, true);
  static_assert(base::kPackedAddressBytes <= TransportAddress::kBytes);
  uint8_t packed[base::kPackedAddressBytes];
  self.setAddress(kind, packed, base::packAddress(addr, packed));
  *bound = addr;
  return fd;
}

sockaddr_storage socketAddressOf(const PeerInfo& info, TransportKind kind) {
  const TransportAddress* a = info.address(kind);
  return a ? base::unpackAddress(a->bytes, a->length) : sockaddr_storage{};
}

std::chrono::milliseconds unansweredLimit(const CommContext& ctx, int peer, const sockaddr_storage& target,
                                          int64_t deadMs) {
  const PeerInfo& self = ctx.peers[static_cast<size_t>(ctx.rank)];
  const PeerInfo& other = ctx.peers[static_cast<size_t>(peer)];
  const bool sameHost = other.hostHash == self.hostHash && other.netNs == self.netNs;
  if (deadMs <= 0 || sameHost || base::isLoopbackAddress(target)) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(deadMs);
}

UniqueFd dialPublishedListener(Handshake& hs, const char* transport, TransportKind kind, int peer,
                               const std::string& what, int64_t deadMs) {
  const sockaddr_storage target = socketAddressOf(hs.context().peers[static_cast<size_t>(peer)], kind);
  COLLIE_ARG_CHECK(target.ss_family == AF_INET || target.ss_family == AF_INET6,
                   "%s connect of rank %d: rank %d published no %s address (family %d)", transport, hs.rank(), peer,
                   transport, target.ss_family);
  constexpr int kRefusedIsGone = 3;
  return UniqueFd(base::connectWithRetry(
      target, hs.deadline(), static_cast<int>(base::params::connectRetries()), what,
      [&hs, peer] { hs.checkWaiting({peer}); }, kRefusedIsGone, unansweredLimit(hs.context(), peer, target, deadMs),
      hs.context().abort));
}

int readStream(Link& link) {
  while (link.got < link.buf.size()) {
    ssize_t n = ::recv(link.fd.get(), link.buf.data() + link.got, link.buf.size() - link.got, MSG_DONTWAIT);
    if (n > 0) {
      link.got += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    } else {
      return -1;
    }
  }
  return 1;
}

}  // namespace collie::transport::handshake
