// UCX transport setup.
//
// listen() opens a TCP listener before bootstrap and publishes its sockaddr (packed into the PeerInfo slot's 22 bytes;
// a UCX worker address is larger); the process's accept loop serves it (accept_loop.hpp), as tcp's. A pair is
// connected by one rank's dial (dialer.hpp: who dials, both at once, retries), over one handshake socket:
//   1. the dialler connects to the peer's listener and sends a Hello carrying its UCP worker address;
//   2. the peer's accept loop checks it (strangers are logged and closed) and answers with a Hello carrying its own;
//      it then makes its endpoint to the dialler and starts the wireup (a 0-byte message each way, a flush, and a
//      second message each way; ucx_connection.cpp), which its worker's linger thread moves on (UcxWorker::drive)
//      whatever its executor is doing: in another call, computing, or blocked in another communicator;
//   3. the dialler reads the answer, makes its endpoint and runs its side of the wireup within the deadline: a peer
//      UCX cannot reach (UCX_TLS without a common transport) fails here, by name.
// So a dial ends whatever the dialled rank is doing, as tcp's, and a message sent on a connection made on first use
// completes without the peer's executor (its wireup is over). The answering rank takes the connection (the wireup
// over, or finished then) when a call of its own first needs the peer. The handshake socket stays open as the
// pair's liveness channel, registered with ctx.poller.
#include "transport/ucx/ucx_transport.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
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

/// The first message on every socket, in both directions; `addressBytes` bytes of UCX worker address follow a
/// hello (type kHello), none a refusal (handshake::kRefusedDuplicate, kRefusedFailed).
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
      const int r = handshake::readStream(link);
      if (r != 1) return r;
      if (link.buf.size() != sizeof(Hello) || link.header().type != kHello) return 1;  // all of it, or a refusal
      const uint32_t extra = link.as<Hello>().addressBytes;
      if (extra == 0 || extra > kMaxAddressBytes) return -1;  // not a hello of ours
      link.buf.resize(sizeof(Hello) + extra);                 // then its address
    }
  }
};

/// The worker address a verified hello carries (checked: a hello, not a refusal).
std::vector<uint8_t> addressIn(const Link& l, int rank) {
  COLLIE_INTERNAL_CHECK(l.header().type == kHello && l.buf.size() > sizeof(Hello),
                        "ucx handshake of rank %d: rank %d sent message type %u", rank, l.peer, l.header().type);
  return std::vector<uint8_t>(l.buf.begin() + sizeof(Hello), l.buf.end());
}

}  // namespace

/// The ucx messages of the dial rule (dialer.hpp).
class UcxProtocol : public handshake::DialProtocol {
 public:
  explicit UcxProtocol(UcxTransport& transport) : transport_(transport) {}

  UniqueFd dialSocket(handshake::Handshake& hs, int peer, int /*channel*/) override {
    return handshake::dialPublishedListener(hs, "ucx", TransportKind::Ucx, peer,
                                            base::format("rank %d (ucx handshake)", peer),
                                            base::params::peerDeadTimeoutMs());
  }
  void sendHello(handshake::Handshake& hs, Link& l) override {
    l.from = base::addressToString(UcxTransport::addressOf(hs.context().peers[static_cast<size_t>(l.peer)]));
    send(hs, l);
    base::setNonBlocking(l.fd.get(), true);
  }
  void onAnswer(handshake::Handshake& hs, Link& l) override {
    std::vector<uint8_t> address = addressIn(l, hs.rank());
    std::lock_guard<std::mutex> lock(mu_);
    addresses_[l.peer] = std::move(address);
    l.done = true;
  }
  // On the accept loop's thread: answers, then starts this side's endpoint and wireup in the background.
  void answer(handshake::Handshake& hs, Link& l) override {
    std::vector<uint8_t> address = addressIn(l, hs.rank());
    send(hs, l);
    const CommContext& ctx = hs.context();
    auto conn = std::make_unique<UcxConnection>(ctx.rank, l.peer, transport_.worker_, address, -1, ctx.poller);
    conn->beginWireup();
    conn->wireInBackground();
    std::lock_guard<std::mutex> lock(mu_);
    answered_[l.peer] = std::move(conn);
  }
  std::unique_ptr<Connection> finish(handshake::Handshake& hs, int peer, std::vector<Link>& links,
                                     bool dialled) override {
    const CommContext& ctx = hs.context();
    std::unique_ptr<UcxConnection> conn;
    if (dialled) {
      std::vector<uint8_t> address;
      {
        std::lock_guard<std::mutex> lock(mu_);
        address = std::move(addresses_[peer]);
        addresses_.erase(peer);
      }
      conn = std::make_unique<UcxConnection>(ctx.rank, peer, transport_.worker_, address, -1, ctx.poller);
      conn->beginWireup();
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = answered_.find(peer);
      COLLIE_INTERNAL_CHECK(it != answered_.end(), "ucx connect of rank %d: no connection answered to rank %d",
                            ctx.rank, peer);
      conn = std::move(it->second);
      answered_.erase(it);
    }
    Link& l = links.at(0);
    base::setNonBlocking(l.fd.get(), true);
    base::setDeadPeerTimeout(l.fd.get(), base::params::peerDeadTimeoutMs());  // a vanished host, as for tcp
    if (ctx.poller) ctx.poller->add(l.fd.get());
    conn->adoptSideChannel(l.fd.release());
    // The wireup, within the handshake's deadline (the answering side's runs on its worker's linger thread).
    while (!conn->wiredUp()) {
      if (Clock::now() >= hs.deadline()) hs.failTimeout({peer}, "complete the UCX wireup");
      hs.checkWaiting({peer});
      ctx.poller ? ctx.poller->wait(std::chrono::milliseconds(1)) : std::this_thread::yield();
    }
    return conn;
  }
  void forget(int peer) override {
    std::lock_guard<std::mutex> lock(mu_);
    addresses_.erase(peer);
  }

 private:
  void send(handshake::Handshake& hs, Link& l) {
    const std::vector<uint8_t>& mine = transport_.worker_->address();
    std::vector<uint8_t> msg(sizeof(Hello) + mine.size());
    Hello h{};
    h.header = hs.header(kHello, l.peer, 0);
    h.addressBytes = static_cast<uint32_t>(mine.size());
    std::memcpy(msg.data(), &h, sizeof(h));
    std::memcpy(msg.data() + sizeof(h), mine.data(), mine.size());
    base::sendAll(l.fd.get(), msg.data(), msg.size(), hs.deadline(),
                  base::format("rank %d (ucx handshake) at %s", l.peer, l.from.c_str()));
  }

  UcxTransport& transport_;
  std::mutex mu_;                                           ///< the dialler's thread and the accept loop's
  std::map<int, std::vector<uint8_t>> addresses_;           ///< dialled: the peer's worker address, from its answer
  std::map<int, std::unique_ptr<UcxConnection>> answered_;  ///< answered, not taken yet
};

UcxTransport::UcxTransport(const UcxOptions& options) : options_(options) {
  wire_ = std::make_unique<HelloWire>();
  protocol_ = std::make_unique<UcxProtocol>(*this);
  dialer_ = std::make_unique<handshake::Dialer>("ucx", TransportKind::Ucx, /*channels=*/1, *protocol_, *wire_);
}

UcxTransport::~UcxTransport() = default;

sockaddr_storage UcxTransport::addressOf(const PeerInfo& info) {
  return handshake::socketAddressOf(info, TransportKind::Ucx);
}

std::unique_ptr<Transport> UcxTransport::shareListener() const {
  COLLIE_USAGE_CHECK(listener_ != nullptr, "ucx transport: shareListener() before listen()");
  auto copy = std::make_unique<UcxTransport>(options_);  // its own worker, made at its first serve()
  copy->listener_ = listener_;
  return copy;
}

void UcxTransport::listen(PeerInfo& self) {
  COLLIE_USAGE_CHECK(listener_ == nullptr, "ucx transport: listen() called twice");
  sockaddr_storage addr{};
  UniqueFd fd(handshake::listenAndPublish(options_.bindAddr, TransportKind::Ucx, self, &addr));
  listener_ = std::make_shared<handshake::Listener>(std::move(fd), std::make_unique<HelloWire>(), "ucx", self.rank);
  COLLIE_INFO(base::kLogNet, "ucx: rank %d handshake listener on %s", self.rank, base::addressToString(addr).c_str());
}

bool UcxTransport::canConnect(const PeerInfo& local, const PeerInfo& peer) const {
  return local.address(TransportKind::Ucx) != nullptr && peer.address(TransportKind::Ucx) != nullptr;
}

void UcxTransport::prepare(const CommContext& ctx) {
  // The executor's thread, before this rank's desk takes any dial (serve() runs first, and connect() and dial() call
  // it before the dialer serves), so the accept loop's thread always finds the worker made.
  if (!worker_) worker_ = std::make_shared<UcxWorker>(ctx.rank, options_.tls);
  worker_->attach(ctx.poller);
}

}  // namespace collie::transport::ucx
