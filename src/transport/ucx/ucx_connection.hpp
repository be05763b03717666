// The data path of the UCX transport: one Connection per peer over a UCP endpoint and tagged messages, plus the
// pair's handshake socket kept open as a liveness channel. Internal to src/transport/ucx (and its tests).
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <collie/collie.hpp>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.hpp"
#include "transport/ucx/ucx_worker.hpp"

namespace collie::transport::ucx {

/// What a closing side writes on the liveness socket before it shuts it: how many messages it sent.
struct Bye {
  uint32_t magic;
  uint32_t pad;
  uint64_t messagesSent;
};
static_assert(sizeof(Bye) == 16);
constexpr uint32_t kByeMagic = 0x434c4259;  // "CLBY"

/// The tag of message `seq` from `rank`: the sender's rank in the top 24 bits, the message number below.
inline ucp_tag_t messageTag(int rank, uint64_t seq) {
  return (static_cast<uint64_t>(rank) << 40) | (seq & ((uint64_t{1} << 40) - 1));
}
/// The message numbers of the wireup exchange, kWireupSeq and kWireupSeq - 1 (outside the numbered messages,
/// which would take 2^40 to reach them).
constexpr uint64_t kWireupSeq = (uint64_t{1} << 40) - 1;

/// Sends and receives to `peer` over an endpoint made from `peerAddress` on `worker`; `sideFd` (connected,
/// non-blocking, registered with `poller` by the caller) is owned and closed by the connection, and `poller` must
/// outlive it.
class UcxConnection final : public Connection {
 public:
  UcxConnection(int rank, int peer, std::shared_ptr<UcxWorker> worker, const std::vector<uint8_t>& peerAddress,
                int sideFd, base::Poller* poller);
  ~UcxConnection() override;
  UcxConnection(const UcxConnection&) = delete;
  UcxConnection& operator=(const UcxConnection&) = delete;

  int peer() const override { return peer_; }
  void postSend(Transfer* t) override { post(t, /*send=*/true); }
  void postRecv(Transfer* t) override { post(t, /*send=*/false); }
  /// Progresses the worker, completes the transfers UCX finished, and watches the liveness socket.
  bool progress() override;
  bool busy() const override { return !ops_.empty(); }
  /// Flushes the endpoint (bounded), tells the peer how many messages were sent, and closes. Idempotent.
  void close() override;

  /// Starts the pair's wireup: a 0-byte message each way, outside the numbered ones, so that UCX connects the
  /// endpoint while both ranks are in connect() (and a send posted later completes without the peer's help).
  void beginWireup();
  /// Progresses; true once both wireup messages have completed. Throws like progress().
  bool wiredUp();

 private:
  /// One posted transfer while UCX holds it. Heap-allocated: UCX's callback finds it through user_data, and an
  /// operation UCX never finishes (see abandon()) is freed by that callback instead.
  struct Op {
    UcxConnection* conn;  ///< null once abandoned
    Transfer* t;
    void* request = nullptr;
    uint64_t seq;
    bool send;
    bool done = false;
    ucs_status_t status = UCS_OK;
    ucp_tag_recv_info_t info{};
  };

  static void onSend(void* request, ucs_status_t status, void* user);
  static void onRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user);
  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);

  void post(Transfer* t, bool send) { postTagged(t, send, send ? sendSeq_++ : recvSeq_++); }
  void postTagged(Transfer* t, bool send, uint64_t seq);
  /// Frees a finished operation (and its UCX request).
  void dispose(Op* op);
  /// Completes (or fails) the transfers whose UCX operation finished; true if any did.
  bool reap();
  /// Reads the liveness socket: the peer's Bye, then EOF (or an error: it died).
  void watchPeer();
  [[noreturn]] void fail(ErrorCode code, const std::string& message);
  /// Cancels or force-ends every operation UCX still holds and closes the endpoint; waits (bounded) for UCX to
  /// hand them back, abandoning the rest.
  void release(bool flush);

  int rank_;
  int peer_;
  std::shared_ptr<UcxWorker> worker_;
  bool peerFailureMode_;  ///< UCP_ERR_HANDLING_MODE_PEER (see UcxWorker::peerFailureMode)
  ucp_ep_h ep_ = nullptr;
  int sideFd_;
  base::Poller* poller_;
  uint64_t sendSeq_ = 0;
  uint64_t recvSeq_ = 0;
  std::vector<Op*> ops_;       ///< posted, not yet complete, in posting order
  Transfer wire_[4];           ///< the wireup's messages: receive, send; receive, send after the flush
  void* wireFlush_ = nullptr;  ///< the wireup's flush request while it runs
  int wireStep_ = 0;           ///< 0: first messages, 1: flush, 2: second messages, 3: wired up
  ucs_status_t endpointStatus_ = UCS_OK;
  Bye bye_{};
  size_t byeGot_ = 0;
  bool peerGone_ = false;
  bool closed_ = false;
  std::exception_ptr error_;  ///< the first failure, rethrown by every later progress()
};

}  // namespace collie::transport::ucx
