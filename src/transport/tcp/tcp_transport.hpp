// The TCP transport: the fallback that links any two ranks that can reach each other over IP. Each peer pair
// shares several sockets (COLLIE_SOCKETS_PER_PEER); messages of at least COLLIE_STRIPE_MIN_BYTES are striped
// across all of them, smaller ones take turns. See tcp_transport.cpp for the handshake and
// tcp_connection.cpp for the data path.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/accept_loop.hpp"
#include "transport/dialer.hpp"
#include "transport/handshake.hpp"
#include "transport/transport.hpp"

namespace collie::transport::tcp {

/// Settings of a TcpTransport; the defaults come from the params registry.
struct TcpOptions {
  int socketsPerPeer = 0;           ///< 0: COLLIE_SOCKETS_PER_PEER. Must be equal on all ranks.
  int64_t stripeMinBytes = -1;      ///< < 0: COLLIE_STRIPE_MIN_BYTES (stripeMinFor). Must be equal on all ranks.
  int socketBufferBytes = 4 << 20;  ///< SO_SNDBUF / SO_RCVBUF of the data sockets
  int64_t peerDeadTimeoutMs = -1;   ///< < 0: COLLIE_PEER_DEAD_TIMEOUT; 0: the kernel's defaults
  sockaddr_storage bindAddr{};      ///< AF_UNSPEC: base::defaultLocalAddress() (port is ignored; 0 is used)
};

class TcpProtocol;

/// TCP transport. listen() before bootstrap, then connect() or dial() once per set of peers: the common handshake
/// (transport/handshake.hpp) on each of socketsPerPeer() sockets per peer, by the dial rule (dialer.hpp).
/// Connections that cannot show the secret are logged and dropped.
class TcpTransport : public DialingTransport {
 public:
  explicit TcpTransport(const TcpOptions& options = {});
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  const char* name() const override { return "tcp"; }
  TransportKind kind() const override { return TransportKind::Tcp; }
  /// Listens on options.bindAddr (default: base::defaultLocalAddress()), port 0; publishes it in self's
  /// address of kind Tcp.
  void listen(PeerInfo& self) override;
  /// Always true: TCP is the fallback transport.
  bool canConnect(const PeerInfo& /*local*/, const PeerInfo& /*peer*/) const override { return true; }
  /// A TcpTransport with these options on this listener (same address), answering only its own communicator.
  std::unique_ptr<Transport> shareListener() const override;

  /// Where `info` says its TCP transport listens (family AF_UNSPEC when it published no tcp address).
  static sockaddr_storage addressOf(const PeerInfo& info);

  int socketsPerPeer() const { return nsock_; }
  int64_t stripeMinBytes() const { return stripeMin_; }
  /// The striping threshold of a communicator of `nranks`: the one set (options, COLLIE_STRIPE_MIN_BYTES), else
  /// 1 MiB with 2 ranks and the parameter's default with more (tcp_transport.cpp says why).
  int64_t stripeMinFor(int nranks) const;
  /// Payload bytes one sendmsg writes before a connection reads its receives: 256 KiB with 2 ranks, else no limit
  /// (tcp_transport.cpp says why).
  static size_t sendBurstFor(int nranks);

 private:
  handshake::Dialer& dialer() const override { return *dialer_; }
  std::string connectionDetail() const override;

  TcpOptions options_;
  int nsock_;
  int64_t stripeMin_;
  bool stripeSet_;  ///< the threshold was set (options or COLLIE_STRIPE_MIN_BYTES), not defaulted
  sockaddr_storage listenAddr_{};
  std::unique_ptr<handshake::Wire> wire_;
  std::unique_ptr<TcpProtocol> protocol_;
  std::unique_ptr<handshake::Dialer> dialer_;  ///< after what it uses: destroyed first
};

}  // namespace collie::transport::tcp

namespace collie::transport {
using tcp::TcpOptions;
using tcp::TcpTransport;
}  // namespace collie::transport
