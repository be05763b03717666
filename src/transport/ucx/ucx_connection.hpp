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

#include "transport/fingerprint.hpp"
#include "transport/transport.hpp"
#include "transport/ucx/ucx_worker.hpp"

namespace collie::transport::ucx {

/// What a closing side writes on the liveness socket before it shuts it: how many messages it sent, and, when it
/// closes because its ranks made mismatched calls (poison()), the mismatch.
struct Bye {
  uint32_t magic;
  uint32_t poisoned;  ///< 1: `why` holds the mismatch
  uint64_t messagesSent;
  MismatchRecord why;
};
static_assert(sizeof(Bye) == 56);
constexpr uint32_t kByeMagic = 0x434c4259;  // "CLBY"

/// A message is this head (tag 2k) followed by its body. A body of up to kInlineBytes travels in the head's UCX
/// message (one tagged message of sizeof(MsgHead) + bytes: one UCX message per message where latency is what
/// counts); a larger one is a second tagged message (tag 2k+1, the user's buffer, so large bodies keep UCX's
/// zero-copy rendezvous). The head carries the size and the call's fingerprint (transport/fingerprint.hpp), checked
/// by the receiver before the message counts. Both ends choose by their own size, so they agree unless the sizes
/// differ, which the head reports: a receive head always has room for an inline body.
struct MsgHead {
  uint32_t magic;
  uint32_t pad;
  uint64_t bytes;
  Fingerprint fp;
};
static_assert(sizeof(MsgHead) == 32);
constexpr uint32_t kHeadMagic = 0x434c5548;  // "CLUH"
constexpr size_t kInlineBytes = 4096;        // a head with it fits one of UCX tcp's 8 KiB send segments

/// The tag of message `seq` from `rank`: the sender's rank in the top 24 bits, the message number below.
inline ucp_tag_t messageTag(int rank, uint64_t seq) {
  return (static_cast<uint64_t>(rank) << 40) | (seq & ((uint64_t{1} << 40) - 1));
}
/// The message numbers of the wireup exchange, kWireupSeq and kWireupSeq - 1 (outside the numbered messages,
/// which would take 2^40 to reach them).
constexpr uint64_t kWireupSeq = (uint64_t{1} << 40) - 1;

/// Sends and receives to `peer` over an endpoint made from `peerAddress` on `worker`; `sideFd` (connected,
/// non-blocking, registered with `poller` by the caller; -1: adoptSideChannel() later) is owned and closed by the
/// connection, and `poller` must outlive it.
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
  void close() override { closeWith(nullptr); }
  /// Closes, passing `why` to the peer in the Bye: its next progress() throws MismatchError(why).
  void poison(const MismatchRecord& why) override { closeWith(&why); }

  /// Starts the pair's wireup: a 0-byte message each way, outside the numbered ones, so that UCX connects the
  /// endpoint while both ranks are connecting the pair (the answering rank on its worker's linger thread), and a send
  /// posted later completes without the peer's help.
  void beginWireup();
  /// Progresses; true once both wireup messages have completed. Throws like progress().
  bool wiredUp();
  /// Lets the worker's linger thread move the wireup on (UcxWorker::drive) until it ends, fails or this closes:
  /// for a connection answered while this rank's executor is elsewhere.
  void wireInBackground();
  /// The pair's liveness socket, for a connection made before its socket was handed over (connected,
  /// non-blocking, registered with the poller by the caller; owned and closed by the connection from now on).
  void adoptSideChannel(int sideFd);

 private:
  /// One posted transfer while UCX holds it. Heap-allocated: UCX's callback finds it through user_data, and an
  /// operation its connection gave up on while UCX still holds it (release()) is freed by that callback, or by the
  /// worker after ucp_worker_destroy when UCX never calls back (UcxWorker::adopt).
  struct Op {
    UcxConnection* conn;  ///< null once abandoned (then `orphanOf` keeps it)
    Transfer* t;
    void* request = nullptr;
    uint64_t seq;  ///< the message's number (both parts of a message share it)
    bool send;
    bool done = false;
    ucs_status_t status = UCS_OK;
    ucp_tag_recv_info_t info{};
    bool head = false;         ///< the message's head (MsgHead); its body, unless inline or empty, is `pair`
    Op* pair = nullptr;        ///< head <-> body of one message
    bool consumed = false;     ///< a body whose message its head completed
    bool headChecked = false;  ///< a received head checked (checkHead) while its body was still coming
    /// A head's UCX message (sent, or received into): the MsgHead, then an inline body. A receive's has room for
    /// sizeof(MsgHead) + kInlineBytes, so a sender's inline body always arrives whole and its head reports it.
    std::unique_ptr<uint8_t[]> wire{};
    UcxWorker* orphanOf = nullptr;  ///< the worker that adopted it (UcxWorker::adopt)
  };

  static void onSend(void* request, ucs_status_t status, void* user);
  static void onRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user);
  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);

  /// A user's message: its head and body (see MsgHead).
  void post(Transfer* t, bool send);
  /// One tagged UCX message of `t` under tag number `tagSeq` (the wireup's).
  void postRaw(Transfer* t, bool send, uint64_t tagSeq);
  void checkPost(Transfer* t, bool send);
  /// Posts op's UCX operation on buf/bytes under `tag`; a failure to post is kept in op for reap().
  void issue(Op* op, void* buf, size_t bytes, ucp_tag_t tag);
  /// Why the completed message of `op` (a head with its body, or a raw op) failed; null when it did not.
  std::exception_ptr check(const Op* op) const;
  /// Why a received head (done, whether or not its body is) does not match its receive; null when it does.
  std::exception_ptr checkHead(const Op* op) const;
  /// Frees a finished operation (and its UCX request).
  void dispose(Op* op);
  /// Completes (or fails) the transfers whose UCX operation finished; true if any did.
  bool reap();
  /// Whether op (or its body) failed because UCX found the peer's side gone.
  static bool failedByPeer(const Op* op);
  /// Reads the liveness socket: the peer's Bye, then EOF (or an error: it died).
  void watchPeer();
  /// Fails with the mismatch the peer's Bye carries, if it came and carries one.
  void failIfPoisoned();
  /// UCX reported the peer's side gone: waits (kByeWait at most) for the peer's Bye, and fails with the mismatch
  /// it carries, else with `closed`.
  [[noreturn]] void failClosedByPeer(std::exception_ptr closed);
  void closeWith(const MismatchRecord* why);
  [[noreturn]] void fail(ErrorCode code, const std::string& message);
  [[noreturn]] void fail(std::exception_ptr error);
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
  std::chrono::steady_clock::time_point goneAt_{};  ///< when peerGone_ was seen
  bool closed_ = false;
  std::exception_ptr error_;  ///< the first failure, rethrown by every later progress()
};

}  // namespace collie::transport::ucx
