// UCX transport setup.
//
// listen() opens a TCP listener before bootstrap and publishes its sockaddr (packed into the PeerInfo slot's 22 bytes;
// a UCX worker address is larger). connect(ctx, peers) then runs the common handshake (transport/handshake.hpp) with
// one socket per peer pair, exactly as tcp does with one socket:
//   1. make this communicator's UCP worker (first connect() only; see ucx_worker.hpp);
//   2. for every lower-ranked peer: connect to its listener and send a Hello carrying our worker address;
//   3. Handshake::acceptHigher: accept from every higher-ranked peer, answering each verified Hello with ours;
//      strangers (garbage, silence, a wrong secret, an address longer than kMaxAddressBytes) are logged and
//      closed, early hellos stashed;
//   4. Handshake::await: the answering Hello from every lower-ranked peer.
//   5. each peer's worker address makes a UCP endpoint (UcxConnection), and a 0-byte message each way wires it
//      up while both ranks are here (UCX over tcp connects lazily, needing the peer's progress), within the
//      same deadline: a peer UCX cannot reach (UCX_TLS without a common transport) fails here, by name.
// The handshake socket stays open as the pair's liveness channel, registered with ctx.poller.
#include "transport/ucx/ucx_transport.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/poller.hpp"
#include "base/socket.hpp"
#include "transport/ucx/ucx_connection.hpp"
#include "transport/ucx/ucx_worker.hpp"

namespace collie::transport::ucx {
namespace {

using handshake::Link;

constexpr uint32_t kHello = 1;
constexpr uint32_t kMaxAddressBytes = 64 * 1024;

/// The first message on every socket, in both directions; `addressBytes` bytes of UCX worker address follow.
struct Hello {
  handshake::Header header;
  uint32_t addressBytes;
  uint32_t pad;
};
static_assert(sizeof(Hello) == 48);

/// Handshake messages of variable length on a stream socket: a Hello, then its address, read as they arrive.
class HelloWire : public handshake::Wire {
 public:
  size_t messageBytes() const override { return sizeof(Hello); }
  int read(Link& link) override {
    if (link.got == 0) link.buf.resize(sizeof(Hello));
    for (;;) {
      if (link.got == sizeof(Hello) && link.buf.size() == sizeof(Hello)) {
        uint32_t extra = link.as<Hello>().addressBytes;
        if (extra == 0 || extra > kMaxAddressBytes) return -1;  // not a hello of ours
        link.buf.resize(sizeof(Hello) + extra);
      }
      if (link.got == link.buf.size()) return 1;
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
  }
};

}  // namespace

UcxTransport::UcxTransport(const UcxOptions& options) : options_(options) {}

UcxTransport::~UcxTransport() {
  if (listenFd_ >= 0) ::close(listenFd_);
}

sockaddr_storage UcxTransport::addressOf(const PeerInfo& info) {
  return handshake::socketAddressOf(info, TransportKind::Ucx);
}

std::unique_ptr<Transport> UcxTransport::shareListener() const {
  auto copy = std::make_unique<UcxTransport>(options_);  // its own worker, made at its first connect()
  copy->listenFd_ = handshake::duplicateListener(listenFd_, "ucx");
  return copy;
}

void UcxTransport::listen(PeerInfo& self) {
  COLLIE_USAGE_CHECK(listenFd_ < 0, "ucx transport: listen() called twice");
  sockaddr_storage addr{};
  listenFd_ = handshake::listenAndPublish(options_.bindAddr, TransportKind::Ucx, self, &addr);
  COLLIE_INFO(base::kLogNet, "ucx: rank %d handshake listener on %s", self.rank, base::addressToString(addr).c_str());
}

bool UcxTransport::canConnect(const PeerInfo& local, const PeerInfo& peer) const {
  return local.address(TransportKind::Ucx) != nullptr && peer.address(TransportKind::Ucx) != nullptr;
}

std::vector<std::unique_ptr<Connection>> UcxTransport::connect(const CommContext& ctx, const std::vector<int>& peers) {
  COLLIE_USAGE_CHECK(listenFd_ >= 0, "ucx transport: connect() before listen()");
  HelloWire wire;
  handshake::Handshake hs("ucx", TransportKind::Ucx, ctx, peers, /*channels=*/1, wire);
  const base::Deadline deadline = hs.deadline();
  if (!worker_) worker_ = std::make_shared<UcxWorker>(ctx.rank, options_.tls);
  worker_->attach(ctx.poller);
  const std::vector<uint8_t>& mine = worker_->address();
  auto sendHello = [&](Link& l) {
    std::vector<uint8_t> msg(sizeof(Hello) + mine.size());
    Hello h{};
    h.header = hs.header(kHello, l.peer, 0);
    h.addressBytes = static_cast<uint32_t>(mine.size());
    std::memcpy(msg.data(), &h, sizeof(h));
    std::memcpy(msg.data() + sizeof(h), mine.data(), mine.size());
    base::sendAll(l.fd.get(), msg.data(), msg.size(), deadline,
                  base::format("rank %d (ucx handshake) at %s", l.peer, l.from.c_str()));
  };
  std::map<int, Link> links;
  std::map<int, std::vector<uint8_t>> addresses;
  auto takeAddress = [&](Link& l) {
    COLLIE_INTERNAL_CHECK(l.header().type == kHello, "ucx connect of rank %d: rank %d sent message type %u", ctx.rank,
                          l.peer, l.header().type);
    addresses[l.peer].assign(l.buf.begin() + sizeof(Hello), l.buf.end());
    l.done = true;
  };

  for (int p : hs.lower()) {
    const sockaddr_storage target = addressOf(ctx.peers[static_cast<size_t>(p)]);
    COLLIE_ARG_CHECK(target.ss_family == AF_INET || target.ss_family == AF_INET6,
                     "ucx connect of rank %d: rank %d published no ucx address (family %d)", ctx.rank, p,
                     target.ss_family);
    Link& l = links[p];
    std::string what = base::format("rank %d (ucx handshake)", p);
    l.fd.reset(base::connectWithRetry(
        target, deadline, static_cast<int>(base::params::connectRetries()), what, {}, 0,
        handshake::unansweredLimit(ctx, p, target, base::params::peerDeadTimeoutMs())));  // a host that is down
    l.from = base::addressToString(target);
    l.peer = p;
    sendHello(l);
    base::setNonBlocking(l.fd.get(), true);
  }
  hs.acceptHigher(listenFd_, stash_, [&](Link& l) {
    sendHello(l);
    takeAddress(l);
    links[l.peer] = std::move(l);
  });
  std::vector<Link*> awaiting;
  for (int p : hs.lower()) awaiting.push_back(&links[p]);
  hs.await(awaiting, takeAddress);

  std::vector<std::unique_ptr<Connection>> out;
  out.reserve(peers.size());
  std::vector<UcxConnection*> wiring;
  for (int p : peers) {
    if (p == ctx.rank) {
      out.push_back(makeSelfConnection(p));
      continue;
    }
    Link& l = links[p];
    base::setNonBlocking(l.fd.get(), true);
    base::setDeadPeerTimeout(l.fd.get(), base::params::peerDeadTimeoutMs());  // a vanished host, as for tcp
    if (ctx.poller) ctx.poller->add(l.fd.get());
    auto conn = std::make_unique<UcxConnection>(ctx.rank, p, worker_, addresses[p], l.fd.release(), ctx.poller);
    conn->beginWireup();
    wiring.push_back(conn.get());
    out.push_back(std::move(conn));
  }
  // Step 5: the wireup messages, both ways with every peer, within the handshake's deadline.
  for (;;) {
    std::vector<int> missing;
    for (UcxConnection* c : wiring)
      if (!c->wiredUp()) missing.push_back(c->peer());
    if (missing.empty()) break;
    if (Clock::now() >= deadline) hs.failTimeout(missing, "complete the UCX wireup");
    ctx.poller ? ctx.poller->wait(std::chrono::milliseconds(1)) : std::this_thread::yield();
  }
  COLLIE_INFO(base::kLogNet, "ucx: rank %d%s connected to %zu peer(s)", ctx.rank, hs.where().c_str(), peers.size());
  return out;
}

}  // namespace collie::transport::ucx
