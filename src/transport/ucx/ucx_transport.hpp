// The UCX transport (OpenUCX's UCP layer): the network transport for InfiniBand and RoCE, where UCX drives
// libibverbs and librdmacm, and which runs here over UCX's own tcp and shared-memory transports (UCX_TLS picks;
// UCX_NET_DEVICES restricts the devices). Chosen with COLLIE_NET=ucx, or by COLLIE_NET=auto when UCX reports an
// RDMA transport on this host. See ucx_transport.cpp for the handshake and ucx_connection.cpp for the data path.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/handshake.hpp"
#include "transport/transport.hpp"

namespace collie::transport::ucx {

class UcxWorker;

/// Settings of a UcxTransport.
struct UcxOptions {
  sockaddr_storage bindAddr{};  ///< of the handshake listener; AF_UNSPEC: base::defaultLocalAddress() (port ignored)
  std::string tls;  ///< UCX transports ("tcp", "sm,self"; UCX_TLS's syntax); empty: UCX_TLS or UCX's default
};

/// UCX transport. listen() before bootstrap, then connect() once per set of peers.
class UcxTransport : public Transport {
 public:
  explicit UcxTransport(const UcxOptions& options = {});
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  const char* name() const override { return "ucx"; }
  TransportKind kind() const override { return TransportKind::Ucx; }
  /// Opens the handshake listener (TCP) and publishes its address as this transport's address: a UCX worker
  /// address (about 200 bytes here, more with InfiniBand devices) does not fit a PeerInfo slot, so it travels in
  /// the handshake instead.
  void listen(PeerInfo& self) override;
  /// Both ranks published a ucx address.
  bool canConnect(const PeerInfo& local, const PeerInfo& peer) const override;
  /// The common handshake (transport/handshake.hpp), one socket per peer, carrying the UCX worker addresses;
  /// then a UCP endpoint per peer. The socket stays open as the pair's liveness channel.
  std::vector<std::unique_ptr<Connection>> connect(const CommContext& ctx, const std::vector<int>& peers) override;
  uint64_t stashedHellos() const override { return stash_.kept(); }
  /// A transport on a duplicate of this one's listener, with a worker of its own (for core's shrink).
  std::unique_ptr<Transport> shareListener() const override;

  /// Where `info` says its UCX handshake listener is (family AF_UNSPEC when it published none).
  static sockaddr_storage addressOf(const PeerInfo& info);

 private:
  UcxOptions options_;
  int listenFd_ = -1;
  std::shared_ptr<UcxWorker> worker_;  ///< made by the first connect(); shared with the connections
  handshake::Stash stash_;
};

}  // namespace collie::transport::ucx

namespace collie::transport {
using ucx::UcxOptions;
using ucx::UcxTransport;
}  // namespace collie::transport
