// The UCX transport (OpenUCX's UCP layer): the network transport for InfiniBand and RoCE, where UCX drives
// libibverbs and librdmacm, and which runs here over UCX's own tcp and shared-memory transports (UCX_TLS picks;
// UCX_NET_DEVICES restricts the devices). Chosen with COLLIE_NET=ucx, or by COLLIE_NET=auto when UCX reports an
// RDMA transport on this host. See ucx_transport.cpp for the handshake and ucx_connection.cpp for the data path.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/accept_loop.hpp"
#include "transport/dialer.hpp"
#include "transport/handshake.hpp"
#include "transport/transport.hpp"

namespace collie::transport::ucx {

class UcxWorker;
class UcxProtocol;

/// Settings of a UcxTransport.
struct UcxOptions {
  sockaddr_storage bindAddr{};  ///< of the handshake listener; AF_UNSPEC: base::defaultLocalAddress() (port ignored)
  std::string tls;  ///< UCX transports ("tcp", "sm,self"; UCX_TLS's syntax); empty: UCX_TLS or UCX's default
};

/// UCX transport. listen() before bootstrap, then connect() or dial() once per set of peers: the dial rule
/// (transport/dialer.hpp) with one handshake socket per pair, its hellos carrying the UCX worker addresses; then a
/// UCP endpoint per peer, wired up before it is returned. The socket stays open as the pair's liveness channel.
class UcxTransport : public DialingTransport {
 public:
  explicit UcxTransport(const UcxOptions& options = {});
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  const char* name() const override { return "ucx"; }
  TransportKind kind() const override { return TransportKind::Ucx; }
  /// Opens the handshake listener (TCP; the process's accept loop serves it) and publishes its address as this
  /// transport's address: a UCX worker address (about 200 bytes here, more with InfiniBand devices) does not fit a
  /// PeerInfo slot, so it travels in the handshake instead.
  void listen(PeerInfo& self) override;
  /// Both ranks published a ucx address.
  bool canConnect(const PeerInfo& local, const PeerInfo& peer) const override;
  /// A transport on this one's listener (same address) with a worker of its own, answering only its own
  /// communicator (for core's shrink).
  std::unique_ptr<Transport> shareListener() const override;
  /// None: a UCX connection cannot look ahead (no probe), and taking an answered one waits for its wireup.
  std::vector<int> answeredPeers() const override { return {}; }

  /// Where `info` says its UCX handshake listener is (family AF_UNSPEC when it published none).
  static sockaddr_storage addressOf(const PeerInfo& info);

 private:
  friend class UcxProtocol;
  handshake::Dialer& dialer() const override { return *dialer_; }
  /// Makes the communicator's worker, once (the first serve, connect or dial), and attaches it to ctx's poller.
  void prepare(const CommContext& ctx) override;

  UcxOptions options_;
  std::shared_ptr<UcxWorker> worker_;  ///< shared with the connections
  std::unique_ptr<handshake::Wire> wire_;
  std::unique_ptr<UcxProtocol> protocol_;      ///< keeps the connections answered and not yet taken
  std::unique_ptr<handshake::Dialer> dialer_;  ///< after what it uses: destroyed first
};

}  // namespace collie::transport::ucx

namespace collie::transport {
using ucx::UcxOptions;
using ucx::UcxTransport;
}  // namespace collie::transport
