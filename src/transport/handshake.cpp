// The common handshake of all transports (see handshake.hpp): hello checking, accepting with strangers refused and
// early hellos stashed, awaiting answers, and the one deadline with its timeout message.
#include "transport/handshake.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "base/errors.hpp"
#include "base/fd_limits.hpp"
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

bool helloSenderValid(const Header& h, int rank, int nranks, int channels) {
  return h.fromRank > rank && h.fromRank < nranks && h.channel >= 0 && h.channel < channels;
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

Handshake::Handshake(const char* transport, TransportKind kind, const CommContext& ctx, const std::vector<int>& peers,
                     int channels, Wire& wire)
    : transport_(transport), kind_(kind), ctx_(ctx), wire_(wire), channels_(channels) {
  timeout_ = ctx.timeout.count() > 0 ? ctx.timeout : std::chrono::milliseconds(base::params::timeoutMs());
  deadline_ = Clock::now() + timeout_;
  COLLIE_INTERNAL_CHECK(channels >= 1 && wire.messageBytes() >= sizeof(Header), "%s handshake: %d channels", transport,
                        channels);
  inCall_.assign(static_cast<size_t>(std::max(ctx.nranks, 0)), false);
  adopted_.resize(inCall_.size());
  for (int p : peers) {
    COLLIE_ARG_CHECK(p >= 0 && p < ctx.nranks && p < static_cast<int>(ctx.peers.size()),
                     "%s connect%s: peer %d out of range (nranks %d)", transport, where().c_str(), p, ctx.nranks);
    COLLIE_ARG_CHECK(!inCall_[static_cast<size_t>(p)], "%s connect%s: peer %d listed twice", transport, where().c_str(),
                     p);
    inCall_[static_cast<size_t>(p)] = true;
    if (p < ctx.rank) lower_.push_back(p);
    if (p > ctx.rank) {
      higher_.push_back(p);
      adopted_[static_cast<size_t>(p)].assign(static_cast<size_t>(channels), false);
    }
  }
  std::sort(lower_.begin(), lower_.end());
  std::sort(higher_.begin(), higher_.end());
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

int Handshake::takeIncoming(Link& link, Stash& stash, const std::function<void(Link&)>& adopt) {
  int state = wire_.read(link);
  if (state == 0) return 0;
  const int me = ctx_.rank;
  if (state < 0) {
    COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: closed or malformed before its hello",
                transport_, me, link.from.c_str());
    link.fd.reset();
    return 1;
  }
  const Header& h = link.header();
  if (!authentic(h)) {
    COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: wrong magic or secret", transport_, me,
                link.from.c_str());
    link.fd.reset();
    return 1;
  }
  const int from = h.fromRank;
  if (!helloSenderValid(h, me, ctx_.nranks, channels_)) {
    COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: it says it is rank %d (channel %d)",
                transport_, me, link.from.c_str(), from, h.channel);
    link.fd.reset();
    return 1;
  }
  link.peer = from;
  link.channel = h.channel;
  if (!inCall_[static_cast<size_t>(from)]) {
    COLLIE_TRACE(base::kLogNet, "%s: rank %d keeps the hello of rank %d for a later connect", transport_, me, from);
    stash.links_.push_back(std::move(link));
    stash.kept_.fetch_add(1, std::memory_order_relaxed);
    return 1;
  }
  auto& slots = adopted_[static_cast<size_t>(from)];
  if (slots[static_cast<size_t>(h.channel)]) {
    COLLIE_WARN(base::kLogNet, "%s: rank %d refused a second connection from %s for rank %d channel %d", transport_, me,
                link.from.c_str(), from, h.channel);
    link.fd.reset();
    return 1;
  }
  slots[static_cast<size_t>(h.channel)] = true;
  adopt(link);
  return 1;
}

void Handshake::acceptHigher(int listenFd, Stash& stash, const std::function<void(Link&)>& adopt) {
  auto missing = [&] {
    std::vector<int> out;
    for (int p : higher_) {
      const auto& slots = adopted_[static_cast<size_t>(p)];
      if (std::find(slots.begin(), slots.end(), false) != slots.end()) out.push_back(p);
    }
    return out;
  };
  // Hellos that arrived during an earlier call.
  for (auto it = stash.links_.begin(); it != stash.links_.end();) {
    const int from = it->peer;
    if (from >= 0 && from < static_cast<int>(inCall_.size()) && inCall_[static_cast<size_t>(from)] &&
        from > ctx_.rank && authentic(it->header())) {
      Link link = std::move(*it);
      it = stash.links_.erase(it);
      auto slot = adopted_[static_cast<size_t>(from)][static_cast<size_t>(link.channel)];
      if (slot) continue;  // a duplicate: closed with `link`
      slot = true;
      adopt(link);
    } else {
      ++it;
    }
  }
  std::deque<Link> pending;  // accepted, hello not complete yet; oldest first
  base::FdShortageBackoff shortage;
  while (!missing().empty()) {
    const auto now = Clock::now();
    if (now >= deadline_) failTimeout(missing(), "connect");
    while (!pending.empty() && pending.front().expires <= now) {
      // A last look first: this thread may have been held up while the hello waited.
      if (takeIncoming(pending.front(), stash, adopt) == 0)
        COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: no hello within %lld ms", transport_,
                    ctx_.rank, pending.front().from.c_str(), static_cast<long long>(kHelloWait.count()));
      pending.pop_front();
    }
    if (missing().empty()) break;
    std::vector<pollfd> pfds;
    pfds.push_back(pollfd{listenFd, POLLIN, 0});
    for (Link& l : pending) pfds.push_back(pollfd{l.fd.get(), POLLIN, 0});
    if (pollWaiting(pfds, missing(), pending.empty() ? deadline_ : pending.front().expires) == 0) continue;
    for (size_t k = 1; k < pfds.size(); ++k)
      if (pfds[k].revents) takeIncoming(pending[k - 1], stash, adopt);
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Link& l) { return l.fd.get() < 0; }),
                  pending.end());
    if (!pfds[0].revents) continue;
    if (int err = acceptPending(listenFd, pending, stash, adopt)) {
      shortage.wait(err, "accept", deadline_);  // throws once the shortage outlasts its grace
    } else {
      shortage.reset();
    }
  }
  // Strangers still silent: they are not ours to keep.
  for (Link& l : pending)
    COLLIE_WARN(base::kLogNet, "%s: rank %d dropped a silent connection from %s", transport_, ctx_.rank,
                l.from.c_str());
}

int Handshake::acceptPending(int listenFd, std::deque<Link>& pending, Stash& stash,
                             const std::function<void(Link&)>& adopt) {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return 0;
      if (!base::isFdShortage(err)) COLLIE_SYSCHECK(fd, "accept");
      if (pending.empty()) return err;
      dropOldest(pending, stash, adopt, "to free a file descriptor");
      continue;
    }
    if (pending.size() >= kMaxUnverified) dropOldest(pending, stash, adopt, "to make room (too many waiting)");
    Link l;
    l.fd.reset(fd);
    l.from = describePeer(fd, addr);
    l.expires = std::min(deadline_, Clock::now() + kHelloWait);
    if (takeIncoming(l, stash, adopt) == 0) pending.push_back(std::move(l));  // its hello may be there already
  }
}

void Handshake::dropOldest(std::deque<Link>& pending, Stash& stash, const std::function<void(Link&)>& adopt,
                           const char* why) {
  Link& oldest = pending.front();
  if (takeIncoming(oldest, stash, adopt) == 0)  // a real peer's hello that just arrived is kept
    COLLIE_WARN(base::kLogNet, "%s: rank %d closed the unverified connection from %s %s", transport_, ctx_.rank,
                oldest.from.c_str(), why);
  pending.pop_front();
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

int duplicateListener(int fd, const char* transportName) {
  COLLIE_USAGE_CHECK(fd >= 0, "%s transport: shareListener() before listen()", transportName);
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  COLLIE_SYSCHECK(copy, base::format("dup of the %s listener", transportName).c_str());
  return copy;
}

std::chrono::milliseconds unansweredLimit(const CommContext& ctx, int peer, const sockaddr_storage& target,
                                          int64_t deadMs) {
  const PeerInfo& self = ctx.peers[static_cast<size_t>(ctx.rank)];
  const PeerInfo& other = ctx.peers[static_cast<size_t>(peer)];
  const bool sameHost = other.hostHash == self.hostHash && other.netNs == self.netNs;
  if (deadMs <= 0 || sameHost || base::isLoopbackAddress(target)) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(deadMs);
}

}  // namespace collie::transport::handshake
