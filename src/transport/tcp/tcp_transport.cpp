// TCP transport setup.
//
// listen() opens a listener before bootstrap; its address travels to every rank in the PeerInfo (an opaque
// TransportAddress of kind Tcp holding the sockaddr), and the process's accept loop serves it (accept_loop.hpp).
// A pair is connected by one rank's dial (dialer.hpp: who dials, both at once, retries), with nsock sockets:
//   1. the dialler connects nsock sockets to the peer's listener and sends a hello on each, channel i on socket
//      i (the kernel completes a connect from the listen backlog, so this never waits for the peer);
//   2. the peer's accept loop checks each hello (strangers are logged and closed) and answers it with its own;
//   3. the dialler reads the answer on every socket.
// The hellos also carry the socket count and striping threshold, which must agree. The sockets are then made
// non-blocking, given large buffers, registered with ctx.poller and handed to a TcpConnection per peer.
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
    return handshake::readStream(link);
  }
};

}  // namespace

/// The tcp messages of the dial rule (dialer.hpp).
class TcpProtocol : public handshake::DialProtocol {
 public:
  TcpProtocol(const TcpTransport& transport, int64_t deadMs, int bufferBytes)
      : transport_(transport), deadMs_(deadMs), bufferBytes_(bufferBytes) {}

  UniqueFd dialSocket(handshake::Handshake& hs, int peer, int channel) override {
    return handshake::dialPublishedListener(hs, "tcp", TransportKind::Tcp, peer,
                                            base::format("rank %d (tcp socket %d)", peer, channel), deadMs_);
  }
  void sendHello(handshake::Handshake& hs, Link& l) override {
    l.from = base::addressToString(TcpTransport::addressOf(hs.context().peers[static_cast<size_t>(l.peer)]));
    send(hs, l);
    base::setNonBlocking(l.fd.get(), true);
  }
  void onAnswer(handshake::Handshake& hs, Link& l) override {
    checkHelloConfig(l.as<Hello>(), hs.rank(), transport_.socketsPerPeer(), stripeFor(hs));
    l.done = true;
  }
  void answer(handshake::Handshake& hs, Link& l) override {
    send(hs, l);  // first, so that a dialler with other settings reads them and says which
    checkHelloConfig(l.as<Hello>(), hs.rank(), transport_.socketsPerPeer(), stripeFor(hs));
  }
  std::unique_ptr<Connection> finish(handshake::Handshake& hs, int peer, std::vector<Link>& links,
                                     bool /*dialled*/) override {
    // The data path: non-blocking sockets with large buffers and dead-peer detection, registered with the poller.
    const CommContext& ctx = hs.context();
    std::vector<int> fds;
    for (Link& l : links) fds.push_back(l.fd.get());
    for (int fd : fds) {
      base::setNonBlocking(fd, true);
      base::setNoDelay(fd);  // accepted sockets do not have it yet; without it a small message waits ~40 ms
      if (bufferBytes_ > 0) base::setBufferSizes(fd, bufferBytes_);
      base::setDeadPeerTimeout(fd, deadMs_);  // dead (no answer) is told apart from late (alive, not calling)
      if (ctx.poller) ctx.poller->add(fd);    // a failure later closes fd, which also takes it out of the epoll set
    }
    auto conn = std::make_unique<TcpConnection>(ctx.rank, peer, fds, stripeFor(hs), ctx.poller, deadMs_,
                                                TcpTransport::sendBurstFor(ctx.nranks));
    for (Link& l : links) l.fd.release();  // owned by the connection now
    return conn;
  }

 private:
  void send(handshake::Handshake& hs, Link& l) {
    Hello h{};
    h.header = hs.header(kHelloType, l.peer, l.channel);
    h.nsock = transport_.socketsPerPeer();
    h.stripeMinBytes = stripeFor(hs);
    base::sendAll(l.fd.get(), &h, sizeof(h), hs.deadline(), base::format("rank %d at %s", l.peer, l.from.c_str()));
  }

  int64_t stripeFor(const handshake::Handshake& hs) const { return transport_.stripeMinFor(hs.context().nranks); }

  const TcpTransport& transport_;
  int64_t deadMs_;
  int bufferBytes_;
};

TcpTransport::TcpTransport(const TcpOptions& options) : options_(options) {
  nsock_ = options.socketsPerPeer > 0 ? options.socketsPerPeer : static_cast<int>(base::params::socketsPerPeer());
  stripeMin_ = options.stripeMinBytes >= 0 ? options.stripeMinBytes : base::params::stripeMinBytes();
  COLLIE_ARG_CHECK(nsock_ >= 1 && nsock_ <= 64, "COLLIE_SOCKETS_PER_PEER=%d is not in 1..64", nsock_);
  COLLIE_ARG_CHECK(stripeMin_ >= 0, "COLLIE_STRIPE_MIN_BYTES=%lld is negative", static_cast<long long>(stripeMin_));
  const int64_t deadMs = options.peerDeadTimeoutMs >= 0 ? options.peerDeadTimeoutMs : base::params::peerDeadTimeoutMs();
  wire_ = std::make_unique<StreamWire>();
  stripeSet_ = options.stripeMinBytes >= 0 || std::getenv("COLLIE_STRIPE_MIN_BYTES") != nullptr;
  protocol_ = std::make_unique<TcpProtocol>(*this, deadMs, options.socketBufferBytes);
  dialer_ = std::make_unique<handshake::Dialer>("tcp", TransportKind::Tcp, nsock_, *protocol_, *wire_);
}

TcpTransport::~TcpTransport() = default;

sockaddr_storage TcpTransport::addressOf(const PeerInfo& info) {
  return handshake::socketAddressOf(info, TransportKind::Tcp);
}

std::unique_ptr<Transport> TcpTransport::shareListener() const {
  COLLIE_USAGE_CHECK(listener_ != nullptr, "tcp transport: shareListener() before listen()");
  auto copy = std::make_unique<TcpTransport>(options_);
  copy->listener_ = listener_;
  copy->listenAddr_ = listenAddr_;
  return copy;
}

void TcpTransport::listen(PeerInfo& self) {
  COLLIE_USAGE_CHECK(listener_ == nullptr, "tcp transport: listen() called twice");
  UniqueFd fd(handshake::listenAndPublish(options_.bindAddr, TransportKind::Tcp, self, &listenAddr_));
  listener_ = std::make_shared<handshake::Listener>(std::move(fd), std::make_unique<StreamWire>(), "tcp", self.rank);
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

// On loopback a sendmsg also delivers into the peer's socket, holding our end's lock, while the peer's data and
// acknowledgements wait in socket backlogs. With 2 ranks, each with a CPU, writing at most 256 KiB per sendmsg and
// reading what arrived in between made 1-32 MiB AllReduces 1.1-1.8x faster (a 2 MiB ring's four 256 KiB slices
// had gone out in one 1 MiB sendmsg; perf/RESULTS.md, issue 14 item 3). With 4 ranks on 2 CPUs it cost 1-2 MiB
// 15-40% (two ranks share each CPU), so more ranks write all they can at once.
size_t TcpTransport::sendBurstFor(int nranks) { return nranks == 2 ? size_t{256} << 10 : SIZE_MAX; }

std::string TcpTransport::connectionDetail() const { return base::format(" with %d socket(s) each", nsock_); }

}  // namespace collie::transport::tcp
