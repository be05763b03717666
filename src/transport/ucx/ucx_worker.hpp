// One UCP context and worker (UCX, OpenUCX) and what collie asks of UCX outside a connection.
//
// A UcxTransport owns one UcxWorker per communicator, made at its first connect(); its connections share it
// (std::shared_ptr, so the worker outlives the last endpoint). Per communicator rather than per process because
// (1) the tag space is the communicator's: a tag is (sender rank, message number), which would collide between
// two communicators on one worker; (2) ranks run as threads of one process in the tests, each needing its own
// worker; (3) the worker's lifetime is then the communicator's, with nothing global to tear down. The price is
// a UCP context per communicator (about 10 ms to create here).
//
// The worker is driven by the thread that drives the communicator's connections (UCS_THREAD_MODE_SERIALIZED:
// that thread may change between calls, never two at once). Progress is ucp_worker_progress; sleeping goes
// through collie's Poller: the worker's event fd (UCP_FEATURE_WAKEUP) is registered with it, and the worker is a
// SleepHook whose prepareToSleep() arms the worker (ucp_worker_arm), refusing the sleep when UCX already has
// events (UCS_ERR_BUSY), so no wake-up is lost.
//
// ucxHostInfo() answers, once per process, what collie-info and COLLIE_NET=auto ask: the UCX version and the
// transport/device resources UCX would use here (after UCX_TLS and UCX_NET_DEVICES), and whether one of them
// is RDMA (rc, dc, ud: InfiniBand or RoCE through libibverbs).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/poller.hpp"

namespace collie::transport::ucx {

class UcxWorker final : public base::SleepHook {
 public:
  /// ucp_init (reading UCX_* variables; a non-empty `tls` replaces UCX_TLS) and ucp_worker_create; fails with
  /// SystemError naming UCX's status.
  UcxWorker(int rank, const std::string& tls);
  ~UcxWorker() override;
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h handle() const { return worker_; }
  /// This worker's address (for the peers' ucp_ep_create).
  const std::vector<uint8_t>& address() const { return address_; }
  /// The transport/device resources of its context ("tcp/lo", "posix/memory", ...).
  const std::vector<std::string>& resources() const { return resources_; }
  /// Whether endpoints ask UCX to report a dead peer (UCP_ERR_HANDLING_MODE_PEER): only where a network
  /// transport (tcp, rc, dc, ud) is enabled, since UCX 1.13's shared-memory transports cannot honour it (a
  /// dead peer is then seen through the connection's liveness socket only).
  bool peerFailureMode() const { return peerFailureMode_; }
  /// Registers the event fd and this sleep hook with `poller` (once; a different poller replaces the first).
  void attach(base::Poller* poller);
  /// ucp_worker_progress until it reports nothing more (bounded); true when anything happened.
  bool progress();

  bool prepareToSleep() override;
  void finishSleep() override {}

 private:
  void detach();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int eventFd_ = -1;
  base::Poller* poller_ = nullptr;
  std::vector<uint8_t> address_;
  std::vector<std::string> resources_;
  bool peerFailureMode_ = false;
};

/// What UCX offers on this host (computed once per process).
struct UcxHostInfo {
  std::string version;                 ///< ucp_get_version_string()
  std::vector<std::string> resources;  ///< "tcp/eth0", "posix/memory", "rc_mlx5/mlx5_0:1", ...
  bool rdma = false;                   ///< a resource is rc*, dc* or ud* (InfiniBand / RoCE)
  std::string error;                   ///< why UCX could not be asked (then resources is empty)
};
const UcxHostInfo& ucxHostInfo();

}  // namespace collie::transport::ucx
