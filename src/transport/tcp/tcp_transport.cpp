// TCP transport setup.
//
// listen() opens a listener before bootstrap; its address travels to every rank in PeerInfo::tcpAddr.
// connect(ctx, peers) then links this rank to each peer with nsock sockets, without a central coordinator:
//   1. for every lower-ranked peer: connect nsock sockets to its listener and send a Hello on each
//      (the kernel completes a connect from the listen backlog, so this never waits for the peer's code);
//   2. accept from every higher-ranked peer until each has all nsock sockets: read its Hello, check magic,
//      secret and addressing, and answer with our own Hello. A connection that fails the check is logged
//      (COLLIE_WARN, NET) with its address and closed; accepting goes on. Hellos are read from all pending
//      connections at once, so a stranger that connects and stays silent delays nobody;
//   3. wait for the answering Hello on every socket of step 1, so both sides know the link is real.
// Step 3 only needs the lower rank to have reached step 2, which it does after its own step 1, so no rank
// waits on a rank that waits on it. Every wait ends at ctx.timeout with a Timeout naming the missing ranks.
// The sockets are then made non-blocking, given large buffers, registered with ctx.poller and handed to a
// TcpConnection per peer.
#include "transport/tcp/tcp_transport.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/poller.hpp"
#include "base/socket.hpp"
#include "transport/tcp/tcp_connection.hpp"

namespace collie::transport::tcp {
namespace {

constexpr uint32_t kHelloMagic = 0x434c4849;  // "CLHI"
constexpr uint32_t kHelloVersion = 1;

/// The first bytes on every socket, in both directions.
struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t fromRank;
  int32_t toRank;
  int32_t socketIndex;
  int32_t nsock;
  int64_t stripeMinBytes;
  uint8_t secret[16];
};
static_assert(sizeof(Hello) == 48);

/// A socket whose Hello is still being read.
struct Handshake {
  int fd = -1;
  sockaddr_storage addr{};
  Hello hello{};
  size_t got = 0;
  int peer = -1;  ///< connecting side: the rank we expect to answer
  int index = -1;
};

Hello makeHello(const CommContext& ctx, int to, int index, int nsock, int64_t stripeMin) {
  Hello h{};
  h.magic = kHelloMagic;
  h.version = kHelloVersion;
  h.fromRank = ctx.rank;
  h.toRank = to;
  h.socketIndex = index;
  h.nsock = nsock;
  h.stripeMinBytes = stripeMin;
  std::memcpy(h.secret, ctx.secret, sizeof(h.secret));
  return h;
}

bool authentic(const Hello& h, const uint8_t* secret) {
  uint8_t diff = 0;  // no early exit: the time taken says nothing about the secret
  for (size_t i = 0; i < sizeof(h.secret); ++i) diff |= static_cast<uint8_t>(h.secret[i] ^ secret[i]);
  return h.magic == kHelloMagic && h.version == kHelloVersion && diff == 0;
}

/// Reads what has arrived of hs.hello. Returns 1 when complete, 0 when more is needed, -1 on EOF or error.
int readHello(Handshake& hs) {
  while (hs.got < sizeof(Hello)) {
    ssize_t n = ::recv(hs.fd, reinterpret_cast<char*>(&hs.hello) + hs.got, sizeof(Hello) - hs.got, MSG_DONTWAIT);
    if (n > 0) {
      hs.got += static_cast<size_t>(n);
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

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

int pollMs(base::Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

void closeAll(std::vector<Handshake>& list) {
  for (Handshake& hs : list) {
    if (hs.fd >= 0) ::close(hs.fd);
    hs.fd = -1;
  }
}

}  // namespace

struct TcpTransport::Stashed {
  Hello hello;
  int fd;
};

TcpTransport::TcpTransport(const TcpOptions& options) : options_(options) {
  nsock_ = options.socketsPerPeer > 0 ? options.socketsPerPeer : static_cast<int>(base::params::socketsPerPeer());
  stripeMin_ = options.stripeMinBytes >= 0 ? options.stripeMinBytes : base::params::stripeMinBytes();
  COLLIE_ARG_CHECK(nsock_ >= 1 && nsock_ <= 64, "COLLIE_SOCKETS_PER_PEER=%d is not in 1..64", nsock_);
  COLLIE_ARG_CHECK(stripeMin_ >= 0, "COLLIE_STRIPE_MIN_BYTES=%lld is negative", static_cast<long long>(stripeMin_));
}

TcpTransport::~TcpTransport() {
  for (Stashed& s : stash_) ::close(s.fd);
  if (listenFd_ >= 0) ::close(listenFd_);
}

void TcpTransport::listen(PeerInfo& self) {
  COLLIE_USAGE_CHECK(listenFd_ < 0, "tcp transport: listen() called twice");
  sockaddr_storage addr = options_.bindAddr.ss_family == AF_UNSPEC ? base::defaultLocalAddress() : options_.bindAddr;
  base::setAddressPort(addr, 0);
  listenFd_ = base::listenOn(addr);
  base::setNonBlocking(listenFd_, true);
  listenAddr_ = addr;
  self.tcpAddr = addr;
  COLLIE_INFO(base::kLogNet, "tcp: rank %d listening on %s", self.rank, base::addressToString(addr).c_str());
}

std::vector<std::unique_ptr<Connection>> TcpTransport::connect(const CommContext& ctx, const std::vector<int>& peers) {
  COLLIE_USAGE_CHECK(listenFd_ >= 0, "tcp transport: connect() before listen()");
  auto timeout = ctx.timeout.count() > 0 ? ctx.timeout : std::chrono::milliseconds(base::params::timeoutMs());
  const base::Deadline deadline = Clock::now() + timeout;
  const char* comm = ctx.name.empty() ? "" : ctx.name.c_str();
  const int nsock = nsock_;

  // fds[peer][i]: socket i to peer; -1 until established. Closed on any failure.
  std::map<int, std::vector<int>> fds;
  std::vector<Handshake> pending;   // accepted, Hello not read yet
  std::vector<Handshake> awaiting;  // connected, answer not read yet
  struct Cleanup {
    std::map<int, std::vector<int>>& fds;
    std::vector<Handshake>& pending;
    bool armed = true;
    ~Cleanup() {
      if (!armed) return;
      closeAll(pending);
      for (auto& [peer, list] : fds)
        for (int fd : list)
          if (fd >= 0) ::close(fd);
    }
  } cleanup{fds, pending};

  std::vector<int> higher;
  for (int p : peers) {
    COLLIE_ARG_CHECK(p >= 0 && p < ctx.nranks && p < static_cast<int>(ctx.peers.size()),
                     "tcp connect%s%s: peer %d out of range (nranks %d)", *comm ? " of " : "", comm, p, ctx.nranks);
    COLLIE_ARG_CHECK(!fds.count(p), "tcp connect: peer %d listed twice", p);
    if (p == ctx.rank) continue;
    fds[p].assign(nsock, -1);
    if (p > ctx.rank) higher.push_back(p);
  }

  auto validConfig = [&](const Hello& h) {
    COLLIE_USAGE_CHECK(h.nsock == nsock && h.stripeMinBytes == stripeMin_,
                       "tcp: rank %d uses %d sockets per peer and stripes from %lld bytes but rank %d uses %d and "
                       "%lld; COLLIE_SOCKETS_PER_PEER and COLLIE_STRIPE_MIN_BYTES must be equal on all ranks",
                       h.fromRank, h.nsock, static_cast<long long>(h.stripeMinBytes), ctx.rank, nsock,
                       static_cast<long long>(stripeMin_));
  };

  // Step 1: connect to lower-ranked peers.
  for (auto& [p, list] : fds) {
    if (p > ctx.rank) continue;
    int family = ctx.peers[p].tcpAddr.ss_family;
    COLLIE_ARG_CHECK(family == AF_INET || family == AF_INET6,
                     "tcp connect of rank %d: rank %d published no tcp address (family %d)", ctx.rank, p, family);
    for (int i = 0; i < nsock; ++i) {
      std::string what = base::format("rank %d (tcp socket %d)", p, i);
      list[i] = base::connectWithRetry(ctx.peers[p].tcpAddr, deadline, static_cast<int>(base::params::connectRetries()),
                                       what);
      Hello h = makeHello(ctx, p, i, nsock, stripeMin_);
      base::sendAll(list[i], &h, sizeof(h), deadline, what);
      base::setNonBlocking(list[i], true);
      Handshake hs;
      hs.fd = list[i];
      hs.addr = ctx.peers[p].tcpAddr;
      hs.peer = p;
      hs.index = i;
      awaiting.push_back(hs);
    }
  }

  // Step 2: accept from higher-ranked peers.
  auto missingHigher = [&] {
    std::vector<int> missing;
    for (int p : higher)
      if (std::count(fds[p].begin(), fds[p].end(), -1) > 0) missing.push_back(p);
    return missing;
  };
  // Takes a verified connection from a higher-ranked peer; false (and a warning) if it does not fit.
  auto adopt = [&](int fd, const Hello& h, const std::string& from) {
    auto it = fds.find(h.fromRank);
    if (h.toRank != ctx.rank || it == fds.end() || h.fromRank <= ctx.rank || h.socketIndex < 0 ||
        h.socketIndex >= nsock || it->second[h.socketIndex] != -1) {
      COLLIE_WARN(base::kLogNet, "tcp: rank %d dropped an unexpected connection from %s (rank %d to %d, socket %d)",
                  ctx.rank, from.c_str(), h.fromRank, h.toRank, h.socketIndex);
      return false;
    }
    it->second[h.socketIndex] = fd;  // owned by fds from here on
    Hello answer = makeHello(ctx, h.fromRank, h.socketIndex, nsock, stripeMin_);
    base::sendAll(fd, &answer, sizeof(answer), deadline, base::format("rank %d at %s", h.fromRank, from.c_str()));
    validConfig(h);
    return true;
  };
  for (auto it = stash_.begin(); it != stash_.end();) {
    if (authentic(it->hello, ctx.secret) && fds.count(it->hello.fromRank) && it->hello.toRank == ctx.rank) {
      Stashed s = *it;
      it = stash_.erase(it);
      if (!adopt(s.fd, s.hello, "an earlier connection")) ::close(s.fd);
    } else {
      ++it;
    }
  }
  while (!missingHigher().empty()) {
    std::vector<pollfd> pfds;
    pfds.push_back(pollfd{listenFd_, POLLIN, 0});
    for (Handshake& hs : pending) pfds.push_back(pollfd{hs.fd, POLLIN, 0});
    if (Clock::now() >= deadline) {
      COLLIE_FAIL(ErrorCode::Timeout,
                  "tcp connect of rank %d%s%s: timed out after %lld ms waiting for peer rank(s) %s to connect",
                  ctx.rank, *comm ? " in " : "", comm, static_cast<long long>(timeout.count()),
                  rankList(missingHigher()).c_str());
    }
    int rc = ::poll(pfds.data(), pfds.size(), pollMs(deadline));
    if (rc < 0 && errno != EINTR) COLLIE_SYSCHECK(rc, "poll");
    if (rc <= 0) continue;
    for (size_t k = 1; k < pfds.size(); ++k) {
      if (!pfds[k].revents) continue;
      Handshake& hs = pending[k - 1];
      int state = readHello(hs);
      if (state == 0) continue;
      std::string from = base::addressToString(hs.addr);
      int fd = hs.fd;
      hs.fd = -1;  // removed below
      if (state < 0) {
        COLLIE_WARN(base::kLogNet, "tcp: rank %d: connection from %s closed before its handshake", ctx.rank,
                    from.c_str());
        ::close(fd);
      } else if (!authentic(hs.hello, ctx.secret)) {
        COLLIE_WARN(base::kLogNet, "tcp: rank %d refused a connection from %s: wrong magic or secret", ctx.rank,
                    from.c_str());
        ::close(fd);
      } else if (!fds.count(hs.hello.fromRank) && hs.hello.toRank == ctx.rank && hs.hello.fromRank > ctx.rank &&
                 hs.hello.fromRank < ctx.nranks) {
        stash_.push_back(Stashed{hs.hello, fd});  // a rank that a later connect() will ask for
      } else if (!adopt(fd, hs.hello, from)) {
        ::close(fd);
      }
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Handshake& hs) { return hs.fd < 0; }),
                  pending.end());
    if (pfds[0].revents) {
      for (;;) {
        Handshake hs;
        socklen_t len = sizeof(hs.addr);
        hs.fd = ::accept4(listenFd_, reinterpret_cast<sockaddr*>(&hs.addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (hs.fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          COLLIE_SYSCHECK(hs.fd, "accept");
        }
        pending.push_back(hs);
      }
    }
  }
  if (!pending.empty()) {
    // Strangers still silent: they are not ours to keep.
    for (Handshake& hs : pending)
      COLLIE_WARN(base::kLogNet, "tcp: rank %d dropped a silent connection from %s", ctx.rank,
                  base::addressToString(hs.addr).c_str());
    closeAll(pending);
    pending.clear();
  }

  // Step 3: the lower-ranked peers' answers.
  while (!awaiting.empty()) {
    std::vector<pollfd> pfds;
    for (Handshake& hs : awaiting) pfds.push_back(pollfd{hs.fd, POLLIN, 0});
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (Handshake& hs : awaiting)
        if (missing.empty() || missing.back() != hs.peer) missing.push_back(hs.peer);
      COLLIE_FAIL(ErrorCode::Timeout,
                  "tcp connect of rank %d%s%s: timed out after %lld ms waiting for peer rank(s) %s to accept", ctx.rank,
                  *comm ? " in " : "", comm, static_cast<long long>(timeout.count()), rankList(missing).c_str());
    }
    int rc = ::poll(pfds.data(), pfds.size(), pollMs(deadline));
    if (rc < 0 && errno != EINTR) COLLIE_SYSCHECK(rc, "poll");
    if (rc <= 0) continue;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!pfds[k].revents) continue;
      Handshake& hs = awaiting[k];
      int state = readHello(hs);
      if (state == 0) continue;
      std::string from = base::addressToString(hs.addr);
      COLLIE_ENFORCE(state > 0, ErrorCode::RemoteError,
                     "tcp connect of rank %d: rank %d at %s closed the connection during the handshake", ctx.rank,
                     hs.peer, from.c_str());
      const Hello& h = hs.hello;
      COLLIE_ENFORCE(
          authentic(h, ctx.secret) && h.fromRank == hs.peer && h.toRank == ctx.rank && h.socketIndex == hs.index,
          ErrorCode::InternalError,
          "tcp connect of rank %d: %s (expected rank %d) answered the handshake with a wrong magic, "
          "secret or rank",
          ctx.rank, from.c_str(), hs.peer);
      validConfig(h);
      hs.fd = -1;  // done; still owned by fds
    }
    awaiting.erase(std::remove_if(awaiting.begin(), awaiting.end(), [](const Handshake& hs) { return hs.fd < 0; }),
                   awaiting.end());
  }

  // The data path: non-blocking sockets with large buffers, registered with the poller.
  std::vector<std::unique_ptr<Connection>> out;
  out.reserve(peers.size());
  for (int p : peers) {
    if (p == ctx.rank) {
      out.push_back(makeSelfConnection(p));
      continue;
    }
    std::vector<int>& list = fds[p];
    for (int fd : list) {
      base::setNonBlocking(fd, true);
      base::setNoDelay(fd);  // accepted sockets do not have it yet; without it a small message waits ~40 ms
      if (options_.socketBufferBytes > 0) base::setBufferSizes(fd, options_.socketBufferBytes);
      if (ctx.poller) ctx.poller->add(fd);  // a failure later closes fd, which also takes it out of the epoll set
    }
    out.push_back(std::make_unique<TcpConnection>(ctx.rank, p, list, stripeMin_, ctx.poller));
    list.clear();  // owned by the connection now
  }
  cleanup.armed = false;
  COLLIE_INFO(base::kLogNet, "tcp: rank %d%s%s connected to %zu peer(s) with %d socket(s) each", ctx.rank,
              *comm ? " in " : "", comm, peers.size(), nsock);
  return out;
}

}  // namespace collie::transport::tcp
