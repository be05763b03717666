// TCP transport setup.
//
// listen() opens a listener before bootstrap; its address travels to every rank in the PeerInfo (an opaque
// TransportAddress of kind Tcp holding the sockaddr). connect(ctx, peers) then links this rank to each peer with
// nsock sockets, using the common handshake (transport/handshake.hpp):
//   1. for every lower-ranked peer: connect nsock sockets to its listener and send a hello on each, channel i
//      on socket i (the kernel completes a connect from the listen backlog, so this never waits for the peer);
//   2. Handshake::acceptHigher: accept from every higher-ranked peer until each has all nsock sockets, answering
//      every verified hello with our own; strangers are logged and closed, early hellos stashed;
//   3. Handshake::await: the answering hello on every socket of step 1.
// Step 3 only needs the lower rank to have reached step 2, which it does after its own step 1, so no rank
// waits on a rank that waits on it. The hellos also carry the socket count and striping threshold, which must
// agree. The sockets are then made non-blocking, given large buffers, registered with ctx.poller and handed to
// a TcpConnection per peer.
#include "transport/tcp/tcp_transport.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/poller.hpp"
#include "base/socket.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tcp/tcp_hello.hpp"

namespace collie::transport::tcp {
namespace {

using handshake::Link;

/// Handshake messages on a stream socket: a fixed-size Hello, read as it arrives.
class StreamWire : public handshake::Wire {
 public:
  size_t messageBytes() const override { return sizeof(Hello); }
  int read(Link& link) override {
    link.buf.resize(sizeof(Hello));
    while (link.got < sizeof(Hello)) {
      ssize_t n = ::recv(link.fd.get(), link.buf.data() + link.got, sizeof(Hello) - link.got, MSG_DONTWAIT);
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
};

}  // namespace

TcpTransport::TcpTransport(const TcpOptions& options) : options_(options) {
  nsock_ = options.socketsPerPeer > 0 ? options.socketsPerPeer : static_cast<int>(base::params::socketsPerPeer());
  stripeMin_ = options.stripeMinBytes >= 0 ? options.stripeMinBytes : base::params::stripeMinBytes();
  stripeSet_ = options.stripeMinBytes >= 0 || std::getenv("COLLIE_STRIPE_MIN_BYTES") != nullptr;
  COLLIE_ARG_CHECK(nsock_ >= 1 && nsock_ <= 64, "COLLIE_SOCKETS_PER_PEER=%d is not in 1..64", nsock_);
  COLLIE_ARG_CHECK(stripeMin_ >= 0, "COLLIE_STRIPE_MIN_BYTES=%lld is negative", static_cast<long long>(stripeMin_));
}

TcpTransport::~TcpTransport() {
  if (listenFd_ >= 0) ::close(listenFd_);
}

sockaddr_storage TcpTransport::addressOf(const PeerInfo& info) {
  return handshake::socketAddressOf(info, TransportKind::Tcp);
}

std::unique_ptr<Transport> TcpTransport::shareListener() const {
  auto copy = std::make_unique<TcpTransport>(options_);
  copy->listenFd_ = handshake::duplicateListener(listenFd_, "tcp");
  copy->listenAddr_ = listenAddr_;
  return copy;
}

void TcpTransport::listen(PeerInfo& self) {
  COLLIE_USAGE_CHECK(listenFd_ < 0, "tcp transport: listen() called twice");
  listenFd_ = handshake::listenAndPublish(options_.bindAddr, TransportKind::Tcp, self, &listenAddr_);
  COLLIE_INFO(base::kLogNet, "tcp: rank %d listening on %s", self.rank, base::addressToString(listenAddr_).c_str());
}

// Striping a message across a peer's sockets makes each socket carry both directions (tcp_connection.cpp). With 2
// ranks, each with a CPU, a ring's or a halving-doubling's pair streams both ways at once, and a socket's two
// directions take turns at its lock: 256-512 KiB slices (2-4 MiB AllReduces) are faster whole on their direction's
// socket (2 MiB: 2.9 -> 3.7 GB/s busbw). With 4 ranks on 2 CPUs the same 256 KiB slices of halving-doubling were
// faster striped (2 MiB: 2.5 against 2.2 GB/s), so more ranks keep the parameter's default.
int64_t TcpTransport::stripeMinFor(int nranks) const {
  if (stripeSet_ || nranks != 2) return stripeMin_;
  return std::max<int64_t>(stripeMin_, int64_t{1} << 20);
}

std::vector<std::unique_ptr<Connection>> TcpTransport::connect(const CommContext& ctx, const std::vector<int>& peers) {
  COLLIE_USAGE_CHECK(listenFd_ >= 0, "tcp transport: connect() before listen()");
  const int nsock = nsock_;
  const int64_t stripeMin = stripeMinFor(ctx.nranks);
  StreamWire wire;
  handshake::Handshake hs("tcp", TransportKind::Tcp, ctx, peers, nsock, wire);
  const base::Deadline deadline = hs.deadline();
  const std::string where = hs.where();

  // links[peer][i]: socket i to peer.
  std::map<int, std::vector<Link>> links;
  auto makeHello = [&](int to, int index) {
    Hello h{};
    h.header = hs.header(kHelloType, to, index);
    h.nsock = nsock;
    h.stripeMinBytes = stripeMin;
    return h;
  };
  auto validConfig = [&](const Link& l) { checkHelloConfig(l.as<Hello>(), ctx.rank, nsock, stripeMin); };

  // Step 1: connect to lower-ranked peers.
  for (int p : hs.lower()) {
    const sockaddr_storage target = addressOf(ctx.peers[static_cast<size_t>(p)]);
    COLLIE_ARG_CHECK(target.ss_family == AF_INET || target.ss_family == AF_INET6,
                     "tcp connect of rank %d: rank %d published no tcp address (family %d)", ctx.rank, p,
                     target.ss_family);
    std::vector<Link>& list = links[p];
    list.resize(static_cast<size_t>(nsock));
    for (int i = 0; i < nsock; ++i) {
      std::string what = base::format("rank %d (tcp socket %d)", p, i);
      Link& l = list[static_cast<size_t>(i)];
      l.fd.reset(base::connectWithRetry(target, deadline, static_cast<int>(base::params::connectRetries()), what,
                                        [&hs, p] { hs.checkWaiting({p}); }));
      l.from = base::addressToString(target);
      l.peer = p;
      l.channel = i;
      Hello h = makeHello(p, i);
      base::sendAll(l.fd.get(), &h, sizeof(h), deadline, what);
      base::setNonBlocking(l.fd.get(), true);
    }
  }

  // Step 2: accept from higher-ranked peers, answering each hello.
  for (int p : hs.higher()) links[p].resize(static_cast<size_t>(nsock));
  hs.acceptHigher(listenFd_, stash_, [&](Link& l) {
    Hello answer = makeHello(l.peer, l.channel);
    base::sendAll(l.fd.get(), &answer, sizeof(answer), deadline, base::format("rank %d at %s", l.peer, l.from.c_str()));
    validConfig(l);
    l.done = true;
    links[l.peer][static_cast<size_t>(l.channel)] = std::move(l);
  });

  // Step 3: the lower-ranked peers' answers.
  std::vector<Link*> awaiting;
  for (int p : hs.lower())
    for (Link& l : links[p]) awaiting.push_back(&l);
  hs.await(awaiting, [&](Link& l) {
    validConfig(l);
    l.done = true;
  });

  // The data path: non-blocking sockets with large buffers and dead-peer detection, registered with the poller.
  const int64_t deadMs =
      options_.peerDeadTimeoutMs >= 0 ? options_.peerDeadTimeoutMs : base::params::peerDeadTimeoutMs();
  std::vector<std::unique_ptr<Connection>> out;
  out.reserve(peers.size());
  for (int p : peers) {
    if (p == ctx.rank) {
      out.push_back(makeSelfConnection(p));
      continue;
    }
    std::vector<int> list;
    for (Link& l : links[p]) list.push_back(l.fd.get());
    for (int fd : list) {
      base::setNonBlocking(fd, true);
      base::setNoDelay(fd);  // accepted sockets do not have it yet; without it a small message waits ~40 ms
      if (options_.socketBufferBytes > 0) base::setBufferSizes(fd, options_.socketBufferBytes);
      base::setDeadPeerTimeout(fd, deadMs);  // dead (no answer) is told apart from late (alive, not calling)
      if (ctx.poller) ctx.poller->add(fd);   // a failure later closes fd, which also takes it out of the epoll set
    }
    out.push_back(std::make_unique<TcpConnection>(ctx.rank, p, list, stripeMin, ctx.poller, deadMs));
    for (Link& l : links[p]) l.fd.release();  // owned by the connection now
  }
  COLLIE_INFO(base::kLogNet, "tcp: rank %d%s connected to %zu peer(s) with %d socket(s) each", ctx.rank, where.c_str(),
              peers.size(), nsock);
  return out;
}

}  // namespace collie::transport::tcp
