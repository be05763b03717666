// UCX data path.
//
// Message k (per direction, in posting order) from rank s travels as UCP tagged messages: its head, with tag
// messageTag(s, 2k) and the body inline up to kInlineBytes, and a larger body with tag messageTag(s, 2k + 1)
// (ucx_connection.hpp, MsgHead). A receive is posted with the exact tag it expects (full mask), so messages fill
// receives in posting order whatever order UCX delivers them in, and a message waits in UCX's unexpected queue until
// its receive is posted. Sizes are checked on arrival: a smaller message completes with its length, which must equal
// the posted size; a larger one is reported by UCX as truncated. UCX picks the protocol per size (eager copies
// for small messages; rendezvous, zero-copy where the transport allows and with UCX's registration cache, for
// large ones); collie only posts and reaps.
//
// Completion: UCX calls onSend/onRecv (from ucp_worker_progress) with the operation's Op; progress() then
// completes the Transfers in its list. Immediate completions (no request) are reaped the same way.
//
// Liveness: the pair's handshake socket stays open. A closing side writes a Bye holding how many of its
// messages were delivered, then shuts the socket; a killed one just drops it. On EOF, receives numbered below
// the Bye's count are still coming through UCX and are waited for; every other pending transfer fails with
// RemoteError naming the peer at once (MismatchError when the Bye carries a mismatch: poison()). The socket is
// registered with the poller, so a sleeping rank wakes. When UCX tells first (an operation fails because the
// peer's endpoint is gone), the rank waits up to kByeWait for the Bye, so a peer's mismatch is reported as that
// whichever channel brings news of it first.
// Endpoints use UCP_ERR_HANDLING_MODE_PEER where a network transport is enabled, so UCX reports a dead peer on
// its own operations as an error status (never a fatal abort); UCX 1.13's shared-memory transports cannot, so
// with only those (UCX_TLS=sm,self) the liveness socket alone tells. Every UCX error is reported with
// ucs_status_string.
#include "transport/ucx/ucx_connection.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/poller.hpp"

namespace collie::transport::ucx {
namespace {

using namespace std::chrono_literals;

/// How long close() lets UCX send what it still buffers, and how long a failure waits for UCX to hand back the
/// operations it cancels, before giving up on them. The flush is short on purpose: in UCX 1.13 an endpoint flush
/// with peer failure handling completes only once the peer progresses, which a peer that already closed (or has
/// not reached its own close yet) does not do; what it waits for locally (bytes still in UCX's socket buffers)
/// leaves in microseconds. Large messages are not at risk: a rendezvous send completes only once received.
constexpr auto kFlushWait = 50ms;
// How long the messages a closed peer said it sent may take to arrive. Its close flushes for kFlushWait only, so
// one still queued inside its UCX then never comes: after this, the wait ends as a closed peer, not a timeout.
constexpr auto kGoodbyeGrace = 2s;
constexpr auto kReleaseWait = 1s;
// How long a rank whose UCX operation failed on the peer's side waits for that peer's Bye before it reports a
// closed connection: the Bye (on the liveness socket) may carry the mismatch the peer failed on, and it was
// written before the peer closed its endpoint but travels on another connection.
constexpr auto kByeWait = 200ms;

// UCS_ERR_SHMEM_SEGMENT: over UCX's shared-memory transports a send attaches the peer's segment (shmat), which fails
// once the peer has died and its segment is gone (seen when a rank is killed mid-call: "shmat failed: Invalid
// argument", then this status on the survivors' sends).
bool peerFailure(ucs_status_t s) {
  return s == UCS_ERR_CONNECTION_RESET || s == UCS_ERR_ENDPOINT_TIMEOUT || s == UCS_ERR_UNREACHABLE ||
         s == UCS_ERR_REJECTED || s == UCS_ERR_NOT_CONNECTED || s == UCS_ERR_CANCELED || s == UCS_ERR_TIMED_OUT ||
         s == UCS_ERR_IO_ERROR || s == UCS_ERR_SHMEM_SEGMENT;
}

}  // namespace

UcxConnection::UcxConnection(int rank, int peer, std::shared_ptr<UcxWorker> worker,
                             const std::vector<uint8_t>& peerAddress, int sideFd, base::Poller* poller)
    : rank_(rank),
      peer_(peer),
      worker_(std::move(worker)),
      peerFailureMode_(worker_->peerFailureMode()),
      sideFd_(sideFd),
      poller_(poller) {
  ucp_ep_params_t params{};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peerAddress.data());
  params.err_mode = peerFailureMode_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = onEndpointError;
  params.err_handler.arg = this;
  std::unique_lock<std::recursive_mutex> lock(worker_->mutex());
  ucs_status_t s = ucp_ep_create(worker_->handle(), &params, &ep_);
  lock.unlock();
  if (s != UCS_OK) {
    ep_ = nullptr;
    close();
    // A peer that died after its hello (UCS_ERR_UNREACHABLE over tcp) is a remote failure, not a local one.
    COLLIE_FAIL(peerFailure(s) ? ErrorCode::RemoteError : ErrorCode::SystemError,
                "ucx: rank %d cannot make an endpoint to rank %d: %s", rank, peer, ucs_status_string(s));
  }
}

UcxConnection::~UcxConnection() { close(); }

void UcxConnection::onSend(void* request, ucs_status_t status, void* user) {
  Op* op = static_cast<Op*>(user);
  if (!op->conn) {  // abandoned by its connection (see release)
    ucp_request_free(request);
    op->orphanOf->forget(op);
    delete op;
    return;
  }
  op->done = true;
  op->status = status;
}

void UcxConnection::onRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  Op* op = static_cast<Op*>(user);
  if (!op->conn) {
    ucp_request_free(request);
    op->orphanOf->forget(op);
    delete op;
    return;
  }
  op->done = true;
  op->status = status;
  if (info) op->info = *info;
}

void UcxConnection::onEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  static_cast<UcxConnection*>(arg)->endpointStatus_ = status;
}

// Three steps, each side moving on alone: (1) a 0-byte message each way (UCX connects the endpoint); (2) a flush
// of the endpoint, which completes once UCX's own wireup messages are through (it needs the peer's progress);
// (3) a second 0-byte message each way, sent after the flush: a side returns only once the peer's flush is
// done too, so no side leaves while the other still needs it. An endpoint closed later (a forced close on a
// failure) then has no wireup message of UCX's pending, which UCX 1.13 cannot purge (it asserts).
void UcxConnection::beginWireup() {
  postRaw(&wire_[0], /*send=*/false, kWireupSeq);
  postRaw(&wire_[1], /*send=*/true, kWireupSeq);
  postRaw(&wire_[2], /*send=*/false, kWireupSeq - 1);
}

bool UcxConnection::wiredUp() {
  std::lock_guard<std::recursive_mutex> lock(worker_->mutex());
  if (error_) std::rethrow_exception(error_);
  if (wireStep_ == 3) return true;
  worker_->progress();
  reap();
  if (wireStep_ == 0 && wire_[0].complete && wire_[1].complete) {
    ucp_request_param_t param{};
    ucs_status_ptr_t r = ucp_ep_flush_nbx(ep_, &param);
    if (UCS_PTR_IS_ERR(r))
      fail(ErrorCode::RemoteError,
           base::format("ucx wireup with peer %d failed: %s", peer_, ucs_status_string(UCS_PTR_STATUS(r))));
    wireFlush_ = r;
    wireStep_ = 1;
  }
  if (wireStep_ == 1) {
    ucs_status_t s = wireFlush_ ? ucp_request_check_status(wireFlush_) : UCS_OK;
    if (s == UCS_INPROGRESS) return false;
    if (wireFlush_) ucp_request_free(wireFlush_);
    wireFlush_ = nullptr;
    if (s != UCS_OK)
      fail(ErrorCode::RemoteError, base::format("ucx wireup with peer %d failed: %s", peer_, ucs_status_string(s)));
    postRaw(&wire_[3], /*send=*/true, kWireupSeq - 1);
    wireStep_ = 2;
  }
  if (wireStep_ == 2 && wire_[2].complete && wire_[3].complete) wireStep_ = 3;
  if (wireStep_ == 3) return true;
  // A peer that failed or exited before its side of the wireup ended never sends the rest: its liveness socket says
  // so (once this side has it), rather than the timeout.
  watchPeer();
  if (peerGone_) {
    if (byeGot_ == sizeof(Bye) && bye_.magic == kByeMagic && bye_.poisoned) {
      try {
        throwMismatch(bye_.why, base::format("from peer %d over ucx", peer_).c_str());
      } catch (...) {
        fail(std::current_exception());
      }
    }
    fail(ErrorCode::RemoteError,
         base::format("peer %d closed the connection during its UCX wireup (it may have exited or failed)", peer_));
  }
  return false;
}

void UcxConnection::wireInBackground() {
  worker_->drive(this, [this] { return wiredUp(); });
}

void UcxConnection::adoptSideChannel(int sideFd) {
  std::lock_guard<std::recursive_mutex> lock(worker_->mutex());
  COLLIE_INTERNAL_CHECK(sideFd_ < 0, "ucx connection to peer %d: a second liveness socket", peer_);
  if (closed_) {
    ::close(sideFd);  // closed already (its communicator failed): the peer sees the socket go
    return;
  }
  sideFd_ = sideFd;
}

void UcxConnection::checkPost(Transfer* t, bool send) {
  const char* what = send ? "send" : "receive";
  checkPosted("ucx connection", rank_, peer_, closed_, *t, what);
  if (error_) std::rethrow_exception(error_);
  t->complete = false;
}

void UcxConnection::post(Transfer* t, bool send) {
  std::lock_guard<std::recursive_mutex> lock(worker_->mutex());
  checkPost(t, send);
  const uint64_t seq = send ? sendSeq_++ : recvSeq_++;
  const bool inlined = t->bytes <= kInlineBytes;
  Op* head = new Op{this, t, nullptr, seq, send};
  head->head = true;
  // A receive has room for an inline body whatever this side expects (see MsgHead).
  const size_t headBytes = sizeof(MsgHead) + (!send ? kInlineBytes : inlined ? t->bytes : 0);
  head->wire.reset(new uint8_t[headBytes]);
  if (send) {
    const MsgHead h{kHeadMagic, 0, t->bytes, t->fp};
    std::memcpy(head->wire.get(), &h, sizeof(h));
    if (inlined && t->bytes > 0) std::memcpy(head->wire.get() + sizeof(MsgHead), t->buf, t->bytes);
  }
  Op* body = nullptr;
  if (!inlined) {
    body = new Op{this, t, nullptr, seq, send};
    body->pair = head;
    head->pair = body;
  }
  issue(head, head->wire.get(), headBytes, messageTag(send ? rank_ : peer_, 2 * seq));
  if (body) issue(body, t->buf, t->bytes, messageTag(send ? rank_ : peer_, 2 * seq + 1));
}

void UcxConnection::postRaw(Transfer* t, bool send, uint64_t tagSeq) {
  std::lock_guard<std::recursive_mutex> lock(worker_->mutex());
  checkPost(t, send);
  Op* op = new Op{this, t, nullptr, tagSeq, send};
  issue(op, t->buf, t->bytes, messageTag(send ? rank_ : peer_, tagSeq));
}

void UcxConnection::issue(Op* op, void* buf, size_t bytes, ucp_tag_t tag) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = op;
  ucs_status_ptr_t r;
  if (op->send) {
    param.cb.send = onSend;
    r = ucp_tag_send_nbx(ep_, buf, bytes, tag, &param);
  } else {
    // Always through the callback: UCX 1.13 does not fill recv_info on every immediate completion.
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = onRecv;
    r = ucp_tag_recv_nbx(worker_->handle(), buf, bytes, tag, ~ucp_tag_t{0}, &param);
  }
  if (UCS_PTR_IS_ERR(r)) {
    op->done = true;  // reported by the next progress()
    op->status = UCS_PTR_STATUS(r);
  } else if (r == nullptr) {
    op->done = true;  // completed at once: reaped by the next progress()
  } else {
    op->request = r;
    worker_->opStarted(op->send);
  }
  ops_.push_back(op);
}

void UcxConnection::dispose(Op* op) {
  if (op->request) {
    ucp_request_free(op->request);
    worker_->opFinished(op->send);
  }
  delete op;
}

namespace {
std::exception_ptr errorOf(ErrorCode code, const std::string& message) {
  try {
    COLLIE_FAIL(code, "%s", message.c_str());
  } catch (...) {
    return std::current_exception();
  }
}
}  // namespace

std::exception_ptr UcxConnection::checkHead(const Op* op) const {
  const size_t expected = op->t->bytes;
  MsgHead h;
  std::memcpy(&h, op->wire.get(), sizeof(h));
  const bool inlined = h.bytes <= kInlineBytes && op->info.length == sizeof(MsgHead) + h.bytes;
  if ((op->info.length != sizeof(MsgHead) && !inlined) || h.magic != kHeadMagic)
    return errorOf(ErrorCode::InternalError,
                   base::format("corrupt ucx message from peer %d: a head of %zu bytes, magic 0x%08x (expected "
                                "message #%llu of %zu bytes)",
                                peer_, op->info.length, h.magic, static_cast<unsigned long long>(op->seq), expected));
  if (h.fp != op->t->fp) {
    MismatchRecord r;
    r.rankA = peer_;
    r.a = h.fp;
    r.rankB = rank_;
    r.b = op->t->fp;
    try {
      throwMismatch(r, base::format("from peer %d over ucx", peer_).c_str());
    } catch (...) {
      return std::current_exception();
    }
  }
  if (h.bytes != expected)
    return errorOf(ErrorCode::InternalError, base::format("message size mismatch from peer %d: expected %zu got %llu",
                                                          peer_, expected, static_cast<unsigned long long>(h.bytes)));
  // Sizes agree, so both ends chose the same way: the body is inline exactly when no body message is posted.
  if (expected > 0 && inlined == (op->pair != nullptr))
    return errorOf(ErrorCode::InternalError,
                   base::format("corrupt ucx message from peer %d: message #%llu of %zu bytes came %s its body", peer_,
                                static_cast<unsigned long long>(op->seq), expected, inlined ? "with" : "without"));
  return nullptr;
}

bool UcxConnection::failedByPeer(const Op* op) {
  for (const Op* part : {op, static_cast<const Op*>(op->pair)})
    if (part && peerFailure(part->status)) return true;
  return false;
}

std::exception_ptr UcxConnection::check(const Op* op) const {
  const char* what = op->send ? "send" : "receive";
  const size_t expected = op->t->bytes;
  // The head first: a mismatched call or size is what to report, not the body's truncation that follows from it.
  if (!op->send && op->head && op->status == UCS_OK && !op->headChecked)
    if (std::exception_ptr e = checkHead(op)) return e;
  for (const Op* part : {op, static_cast<const Op*>(op->pair)}) {
    if (!part || part->status == UCS_OK) continue;
    if (!part->send && part->status == UCS_ERR_MESSAGE_TRUNCATED)
      return errorOf(ErrorCode::InternalError,
                     base::format("message size mismatch from peer %d: expected %zu got a larger message (UCX: %s)",
                                  peer_, expected, ucs_status_string(part->status)));
    if (peerFailure(part->status))
      return errorOf(ErrorCode::RemoteError,
                     base::format("peer %d closed the connection (it may have exited or failed): UCX %s: %s", peer_,
                                  what, ucs_status_string(part->status)));
    return errorOf(ErrorCode::SystemError,
                   base::format("ucx %s to peer %d failed: %s", what, peer_, ucs_status_string(part->status)));
  }
  if (op->send || (op->head && !op->pair)) return nullptr;  // a head without a body: checked above
  const Op* body = op->head ? op->pair : op;
  if (body->info.length != expected)
    return errorOf(ErrorCode::InternalError, base::format("message size mismatch from peer %d: expected %zu got %zu",
                                                          peer_, expected, body->info.length));
  return nullptr;
}

bool UcxConnection::reap() {
  bool any = false;
  std::exception_ptr error;
  bool byPeer = false;  // error is UCX's report of the peer's side gone
  auto keep = ops_.begin();
  for (Op* op : ops_) {
    if (op->consumed) {  // the body of a message its head completed (heads come first in ops_)
      dispose(op);
      continue;
    }
    if (!op->done) {
      *keep++ = op;
      continue;
    }
    if (op->pair && !op->pair->done) {
      // A head that shows the message is not the one expected fails now: its body may never come (the sender
      // sent a smaller message inline).
      if (!error && !op->send && op->head && op->status == UCS_OK && !op->headChecked) {
        error = checkHead(op);  // once: not again on every pass while a large body arrives
        op->headChecked = true;
      }
      *keep++ = op;
      continue;
    }
    any = true;
    if (!error) {
      error = check(op);
      byPeer = error && failedByPeer(op);
      if (!error && !op->send && op->head && !op->pair && op->t->bytes > 0)
        std::memcpy(op->t->buf, op->wire.get() + sizeof(MsgHead), op->t->bytes);  // the inline body
      if (!error) op->t->complete = true;
    }
    if (op->pair) op->pair->consumed = true;
    dispose(op);
  }
  ops_.erase(keep, ops_.end());
  if (error) {
    if (byPeer) failClosedByPeer(error);
    fail(error);
  }
  return any;
}

void UcxConnection::failClosedByPeer(std::exception_ptr closed) {
  const auto until = Clock::now() + kByeWait;
  for (;;) {
    watchPeer();
    if (peerGone_ || byeGot_ == sizeof(Bye) || sideFd_ < 0) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{sideFd_, POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(left));
  }
  failIfPoisoned();
  fail(closed);
}

void UcxConnection::failIfPoisoned() {
  if (byeGot_ != sizeof(Bye) || bye_.magic != kByeMagic || !bye_.poisoned) return;
  try {
    throwMismatch(bye_.why, base::format("from peer %d over ucx", peer_).c_str());
  } catch (...) {
    fail(std::current_exception());
  }
}

void UcxConnection::watchPeer() {
  if (peerGone_ || sideFd_ < 0) return;
  char sink[64];
  for (;;) {
    bool wantBye = byeGot_ < sizeof(Bye);
    char* dst = wantBye ? reinterpret_cast<char*>(&bye_) + byeGot_ : sink;
    ssize_t n = ::recv(sideFd_, dst, wantBye ? sizeof(Bye) - byeGot_ : sizeof(sink), MSG_DONTWAIT);
    if (n > 0) {
      if (wantBye) byeGot_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    peerGone_ = true;  // EOF, or a reset: the peer closed or died
    goneAt_ = std::chrono::steady_clock::now();
    return;
  }
}

bool UcxConnection::progress() {
  std::lock_guard<std::recursive_mutex> lock(worker_->mutex());
  if (error_) std::rethrow_exception(error_);
  if (ops_.empty()) return false;
  worker_->progress();
  // Only completions count as movement: UCX's own traffic (wireup, acknowledgements) must not keep a rank
  // spinning, and the poller's sleep hook re-checks UCX before sleeping anyway.
  bool moved = reap();
  if (moved || ops_.empty()) return moved;
  watchPeer();  // only on a pass that moved nothing: the socket costs a syscall
  if (!peerGone_) return false;
  const bool said = byeGot_ == sizeof(Bye) && bye_.magic == kByeMagic;
  failIfPoisoned();
  size_t coming = 0;
  for (const Op* op : ops_) coming += (said && !op->send && op->seq < bye_.messagesSent) ? 1 : 0;
  if (!coming) {
    fail(ErrorCode::RemoteError, base::format("peer %d closed the connection (it may have exited or failed)%s", peer_,
                                              said ? "" : ": its socket closed without a goodbye"));
  }
  if (std::chrono::steady_clock::now() - goneAt_ > kGoodbyeGrace) {
    fail(ErrorCode::RemoteError,
         base::format(
             "peer %d closed the connection (it may have exited or failed); %zu message(s) it had sent did "
             "not arrive within %lld ms of its goodbye",
             peer_, coming,
             static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(kGoodbyeGrace).count())));
  }
  return false;
}

[[noreturn]] void UcxConnection::fail(ErrorCode code, const std::string& message) { fail(errorOf(code, message)); }

[[noreturn]] void UcxConnection::fail(std::exception_ptr error) {
  error_ = error;
  release(/*flush=*/false);
  std::rethrow_exception(error_);
}

void UcxConnection::release(bool flush) {
  ucp_worker_h worker = worker_->handle();
  if (wireFlush_) ucp_request_free(wireFlush_);  // UCX releases it when it completes
  wireFlush_ = nullptr;
  // Receives are cancelled; sends end with the endpoint (force: failed at once; flush: once delivered).
  for (Op* op : ops_)
    if (!op->send && !op->done && op->request) ucp_request_cancel(worker, op->request);
  const auto deadline = Clock::now() + (flush ? kFlushWait : kReleaseWait);
  auto await = [&](ucs_status_ptr_t r, const char* what) {
    if (!UCS_PTR_IS_PTR(r)) return;
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) ucp_worker_progress(worker);
    if (ucp_request_check_status(r) == UCS_INPROGRESS)
      COLLIE_INFO(base::kLogNet, "ucx: rank %d: %s the endpoint to rank %d did not finish in time", rank_, what, peer_);
    ucp_request_free(r);
  };
  if (ep_) {
    ucp_request_param_t param{};
    if (flush && peerFailureMode_) await(ucp_ep_flush_nbx(ep_, &param), "flushing");  // delivers what is in flight
    // With peer failure handling a forced close needs nothing from the peer (a graceful one waits for it);
    // without it UCX wants a graceful close, which for shared memory is local.
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = peerFailureMode_ ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &param);
    ep_ = nullptr;
    await(r, "closing");
  }
  auto pending = [&] { return std::any_of(ops_.begin(), ops_.end(), [](const Op* op) { return !op->done; }); };
  while (pending() && Clock::now() < deadline) ucp_worker_progress(worker);
  for (Op* op : ops_) {
    if (op->done) {
      dispose(op);
    } else {
      worker_->opFinished(op->send);
      op->conn = nullptr;  // UCX still holds it: its callback frees it, or the worker once destroyed
      op->t = nullptr;
      op->orphanOf = worker_.get();
      worker_->adopt(op, [](void* p) { delete static_cast<Op*>(p); });
    }
  }
  ops_.clear();
}

void UcxConnection::closeWith(const MismatchRecord* why) {
  std::lock_guard<std::recursive_mutex> lock(worker_->mutex());
  if (closed_) return;
  closed_ = true;
  worker_->undrive(this);
  // Messages the peer can still count on: all of them after a flush, else those before the first send that did
  // not complete.
  const bool flush = !error_ && endpointStatus_ == UCS_OK && !peerGone_;
  uint64_t delivered = sendSeq_;
  for (const Op* op : ops_)
    if (!flush && op->send && (!op->done || op->status != UCS_OK)) delivered = std::min(delivered, op->seq);
  release(flush);
  if (sideFd_ >= 0) {
    Bye bye{kByeMagic, why ? 1u : 0u, delivered, why ? *why : MismatchRecord{}};
    (void)!::send(sideFd_, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (poller_) poller_->remove(sideFd_);
    ::shutdown(sideFd_, SHUT_RDWR);
    ::close(sideFd_);
    sideFd_ = -1;
  }
}

}  // namespace collie::transport::ucx
