// shm data path.
//
// Each direction of a pair is a ring of slots owned by the receiver (shm_segment.hpp). The sender fills slots
// in order; the receiver consumes them in order into its posted receives:
//   - a message of up to 32 bytes travels inline in the slot header's cache line (one line moves per message);
//   - a larger one is cut into slot-sized parts, copied in by the sender and out by the receiver;
//   - a message of at least directMinBytes, when the peer reads our memory (threads of one process; processes
//     where process_vm_readv is allowed and pays, see shm_transport.cpp), is one slot holding its address
//     (bytes = kDirectSlot): the receiver copies it straight from the sender's buffer with process_vm_readv (or
//     memcpy when both ranks are threads of one process) and then releases the slot. The send completes when the
//     receiver's head passes that slot, so the buffer stays untouched until it was read (single copy).
// Every slot carries the message number and size and the sender's call fingerprint, which the receiver checks
// against what it posted; a fingerprint that differs throws MismatchError (transport/fingerprint.hpp). A side that
// closes because of a mismatch leaves the record in its closed lines (PoisonNote) for the peer to report.
//
// Waking. The executor polls progress() for a while, then sleeps in Poller::wait (epoll), which first asks
// ShmWaker::prepareToSleep(). That sets this rank's RankControl::sleeping to 1 and re-checks every ring
// (wouldMove). A peer, after publishing a slot (release store of its seq) or advancing a head (release store),
// exchanges the sleeping flag of the rank on the other end with 0; if it was set, it writes the rank's poller
// eventfd (a duplicate received at connect time), which is in the rank's epoll set. Every write of the flag, by
// either side, is a read-modify-write (acq_rel), so the flag's modification order is one release sequence: if
// the peer's exchange comes first, the sleeper's exchange reads from it and synchronises with it, so its re-check
// sees the data; if the sleeper's comes first, the peer reads 1 and wakes it. No wake-up is lost, a peer never
// makes a syscall while the other side is awake, and no fence is needed, so ThreadSanitizer checks all of it.
// One epoll set thus waits for tcp sockets and shm peers alike.
//
// A receive from any source looks at the head slot with probe() before posting (its header holds the message's
// number, size and fingerprint); while probing, wouldMove() also answers for a slot no receive was posted for.
//
// Failure. The peer's closed flags (set by its close()) are read when progress() is idle and busy; its
// handshake socket, kept open and in the epoll set, tells (EOF/HUP) when the peer process died, which wakes a
// sleeping rank at once and is checked at most every millisecond while spinning. Either ends every pending
// transfer with RemoteError naming the peer, after whatever it sent before is consumed. A sender that closes
// with messages sent by address still unread (its call failed; the user may free the buffers next) waits until
// the receiver is not copying from them, and a receiver never starts such a copy once the sender closed
// (ConsumerFlags::reading), so no buffer is read after its owner gave up on it.
#include "transport/shm/shm_connection.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/small_copy.hpp"

namespace collie::transport::shm {

namespace {
constexpr size_t kSmallBytes = 256;  // sent at once when posted (postSend); a waiting receiver fetches ahead (pumpRecv)
}  // namespace

// ---- ShmWaker --------------------------------------------------------------------------------------------------

ShmWaker::ShmWaker(Segment control, base::Poller* poller) : control_(std::move(control)), poller_(poller) {}

ShmWaker::~ShmWaker() {
  if (poller_ && !conns_.empty()) poller_->removeSleepHook(this);
}

void ShmWaker::add(ShmConnection* c) {
  if (poller_ && conns_.empty()) poller_->addSleepHook(this);
  conns_.push_back(c);
}

void ShmWaker::remove(ShmConnection* c) {
  auto it = std::find(conns_.begin(), conns_.end(), c);
  if (it == conns_.end()) return;
  conns_.erase(it);
  if (poller_ && conns_.empty()) poller_->removeSleepHook(this);
}

bool ShmWaker::prepareToSleep() {
  // Read-modify-writes only (see the top of this file): a plain store would end the release sequence of a
  // peer's exchange and let this re-check miss what the peer published before it.
  control()->sleeping.exchange(1, std::memory_order_acq_rel);
  for (ShmConnection* c : conns_) {
    if (c->wouldMove()) {
      control()->sleeping.exchange(0, std::memory_order_acq_rel);
      return false;
    }
  }
  return true;
}

void ShmWaker::finishSleep() { control()->sleeping.exchange(0, std::memory_order_acq_rel); }

// ---- ShmConnection ---------------------------------------------------------------------------------------------

ShmConnection::ShmConnection(ShmLink link, std::shared_ptr<ShmWaker> waker)
    : rank_(link.rank), peer_(link.peer), link_(std::move(link)), waker_(std::move(waker)) {
  in_ = RingView::of(link_.recvRing.data());
  out_ = RingView::of(link_.sendRing.data());
  peerCtl_ = static_cast<RankControl*>(link_.peerControl.data());
  directMin_ = link_.peerReadsUs ? std::max<size_t>(link_.directMinBytes, 1) : SIZE_MAX;
  if (waker_) waker_->add(this);
  if (waker_ && waker_->poller() && link_.socket.get() >= 0) waker_->poller()->add(link_.socket.get());
}

ShmConnection::~ShmConnection() { close(); }

void ShmConnection::close() {
  if (closed_) return;
  closed_ = true;
  // Tell the peer (it may be asleep waiting for us), then let go of everything.
  in_.flags->closed.store(1, std::memory_order_release);
  out_.producer->closed.store(1, std::memory_order_seq_cst);
  wakePeer();
  // Our buffers may go away once we return: wait until the peer is not copying from one (a copy of one
  // message; bounded in case the peer is stopped, when its reads can no longer harm us anyway).
  if (!directs_.empty()) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (out_.flags->reading.load(std::memory_order_seq_cst) != 0 && std::chrono::steady_clock::now() < until)
      sched_yield();
  }
  if (waker_) {
    if (waker_->poller() && link_.socket.get() >= 0) waker_->poller()->remove(link_.socket.get());
    waker_->remove(this);
    waker_.reset();
  }
  link_.socket.reset();
  link_.peerWake.reset();
  link_.recvRing.reset();
  link_.sendRing.reset();
  link_.peerControl.reset();
  sends_.clear();
  recvs_.clear();
  directs_.clear();
  pending_ = 0;
}

void ShmConnection::poison(const MismatchRecord& why) {
  if (closed_) return;
  for (PoisonNote* note : {&out_.producer->poison, &in_.flags->poison}) {
    note->record = why;
    note->set.store(1, std::memory_order_release);
  }
  close();
}

void ShmConnection::check(bool ok, const char* what) const {
  COLLIE_INTERNAL_CHECK(ok, "shm connection of rank %d to peer %d: %s", rank_, peer_, what);
}

void ShmConnection::postSend(Transfer* t) {
  checkPosted("shm connection", rank_, peer_, closed_, *t, "send");
  // A peer that failed on a mismatch poisoned the lines before it closed them: a rank whose part of the mismatched
  // calls only sent learns it here, at its next send to that peer, rather than when a receive from it comes.
  if (peerClosed()) checkAlive();
  t->complete = false;
  const bool direct = t->bytes >= directMin_ && t->bytes > kInlineBytes;
  // A small message (one slot) with nothing queued before it goes into its slot at once: the peer may be waiting
  // for it. Waking a sleeping peer waits for progress(), which the poster calls next (a peer asleep has been
  // waiting for a while).
  const bool oneSlot = t->bytes <= kInlineBytes || (t->bytes <= kSmallBytes && t->bytes <= out_.slotBytes && !direct);
  if (oneSlot && sends_.empty() && roomToSend()) {
    sendSmall(t);
    wakeOwed_ = true;
    return;
  }
  sends_.push_back(SendOp{t, 0, direct});
  ++pending_;
}

bool ShmConnection::roomToSend() {
  if (tail_ - headSeen_ <= out_.mask) return true;
  headSeen_ = out_.consumer->head.load(std::memory_order_acquire);
  return tail_ - headSeen_ <= out_.mask;
}

void ShmConnection::sendSmall(Transfer* t) {
  SlotHeader* s = out_.slot(tail_);
  s->msgSeq = sendSeq_;
  s->fp = t->fp;
  if (t->bytes <= kInlineBytes) {  // the whole message in the header's line
    s->bytes = kInlineSlot | static_cast<uint32_t>(t->bytes);
    base::moveBytes(s->inl, t->buf, t->bytes);
  } else {  // in the lines after it
    s->big.msgBytes = t->bytes;
    s->bytes = static_cast<uint32_t>(t->bytes);
    std::memcpy(RingView::payload(s), t->buf, t->bytes);
  }
  s->seq.store(tail_ + 1, std::memory_order_release);
  ++tail_;
  ++sendSeq_;
  t->complete = true;
}

void ShmConnection::postRecv(Transfer* t) {
  checkPosted("shm connection", rank_, peer_, closed_, *t, "receive");
  t->complete = false;
  probing_ = false;
  recvs_.push_back(RecvOp{t, 0});
  ++pending_;
}

bool ShmConnection::progress() {
  if (error_) std::rethrow_exception(error_);
  const bool owed = wakeOwed_ && !closed_;  // postSend sent a message without waking the peer
  wakeOwed_ = false;
  if (pending_ == 0 || closed_) {
    if (owed) wakePeer();
    return owed;
  }
  try {
    bool moved = owed;
    if (!recvs_.empty()) moved |= pumpRecv();
    if (!sends_.empty() || !directs_.empty()) moved |= pumpSend();
    if (moved) {
      wakePeer();
    } else {
      checkPeer();
    }
    return moved;
  } catch (...) {
    error_ = std::current_exception();
    throw;
  }
}

bool ShmConnection::pumpRecv() {
  bool moved = false;
  while (!recvs_.empty()) {
    SlotHeader* s = in_.slot(head_);
    if (s->seq.load(std::memory_order_acquire) != head_ + 1) {
      // Not there yet. A small message past the header's line (33-256 bytes) has its payload read only once the
      // header is seen: fetch those lines while waiting, so that they cross with the header instead of after it
      // (the header's seq, written last, still decides; a line fetched too early is fetched again).
      const size_t want = recvs_.front().t->bytes - recvs_.front().off;
      if (want > kInlineBytes && want <= kSmallBytes)
        for (size_t at = 0; at < want; at += 64) __builtin_prefetch(RingView::payload(s) + at);
      break;
    }
    RecvOp& r = recvs_.front();
    Transfer* t = r.t;
    if (s->fp != t->fp) throwMismatch(MismatchRecord{peer_, rank_, s->fp, t->fp}, "over shm");
    if (s->msgSeq != recvSeq_ || s->messageBytes() != t->bytes) {
      COLLIE_FAIL(ErrorCode::InternalError,
                  "message mismatch from peer %d over shm: expected message #%u of %zu bytes, got #%u of %llu bytes",
                  peer_, recvSeq_, t->bytes, s->msgSeq, static_cast<unsigned long long>(s->messageBytes()));
    }
    if (s->isInline()) {
      check(r.off == 0, "corrupt slot (an inline part after data)");
      base::moveBytes(t->buf, s->inl, t->bytes);
      r.off = t->bytes;
    } else if (s->bytes != kDirectSlot) {
      check(s->bytes <= in_.slotBytes && s->bytes <= t->bytes - r.off, "corrupt slot (payload larger than expected)");
      if (s->bytes) std::memcpy(static_cast<char*>(t->buf) + r.off, RingView::payload(s), s->bytes);
      r.off += s->bytes;
    } else {
      check(r.off == 0, "corrupt slot (a direct part after data)");
      readPeer(t->buf, s->big.addr, t->bytes);
      r.off = t->bytes;
    }
    ++head_;
    in_.consumer->head.store(head_, std::memory_order_release);
    moved = true;
    if (r.off == t->bytes) {
      t->complete = true;
      recvs_.pop_front();
      ++recvSeq_;
      --pending_;
    }
  }
  return moved;
}

bool ShmConnection::pumpSend() {
  bool moved = false;
  if (!directs_.empty()) {
    headSeen_ = out_.consumer->head.load(std::memory_order_acquire);
    while (!directs_.empty() && headSeen_ > directs_.front().ticket) {
      directs_.front().t->complete = true;
      directs_.pop_front();
      --pending_;
      moved = true;
    }
  }
  while (!sends_.empty()) {
    if (!roomToSend()) break;  // full
    SendOp& op = sends_.front();
    Transfer* t = op.t;
    if (t->bytes <= kInlineBytes) {
      sendSmall(t);
      moved = true;
      sends_.pop_front();
      --pending_;
      continue;
    }
    SlotHeader* s = out_.slot(tail_);
    s->msgSeq = sendSeq_;
    s->fp = t->fp;
    s->big.msgBytes = t->bytes;
    if (op.direct) {
      s->bytes = kDirectSlot;
      s->big.addr = reinterpret_cast<uint64_t>(t->buf);
      s->seq.store(tail_ + 1, std::memory_order_release);
      directs_.push_back(DirectOp{t, tail_});
      ++tail_;
      ++sendSeq_;
      sends_.pop_front();
      moved = true;
      continue;
    }
    const size_t chunk = std::min<size_t>(out_.slotBytes, t->bytes - op.off);
    const char* src = static_cast<const char*>(t->buf) + op.off;
    s->bytes = static_cast<uint32_t>(chunk);
    std::memcpy(RingView::payload(s), src, chunk);
    s->seq.store(tail_ + 1, std::memory_order_release);
    ++tail_;
    op.off += chunk;
    moved = true;
    if (op.off == t->bytes) {
      t->complete = true;
      sends_.pop_front();
      ++sendSeq_;
      --pending_;
    }
  }
  return moved;
}

void ShmConnection::readPeer(void* dst, uint64_t addr, size_t bytes) {
  if (bytes == 0) return;
  // The sender's buffer is only ours to read while the sender has not closed (see ConsumerFlags::reading).
  in_.flags->reading.store(1, std::memory_order_seq_cst);
  struct Done {
    std::atomic<uint32_t>& reading;
    ~Done() { reading.store(0, std::memory_order_release); }
  } done_{in_.flags->reading};
  if (in_.producer->closed.load(std::memory_order_seq_cst) != 0)
    failGone("closed the connection (it may have failed or been aborted) before its message was read");
  if (link_.sameProcess) {
    std::memcpy(dst, reinterpret_cast<const void*>(addr), bytes);
    return;
  }
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(addr + done), bytes - done};
    ssize_t n = process_vm_readv(link_.peerPid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err == ESRCH) failGone("exited (its memory can no longer be read)");
      COLLIE_FAIL(ErrorCode::SystemError, "shm: rank %d could not read %zu bytes from peer %d (pid %d): %s", rank_,
                  bytes, peer_, static_cast<int>(link_.peerPid), base::errnoString(err).c_str());
    }
    check(n > 0, "process_vm_readv made no progress");
    done += static_cast<size_t>(n);
  }
}

void ShmConnection::wakePeer() {
  // Pairs with ShmWaker::prepareToSleep on the peer: our release stores of slots/head above, then this
  // exchange (release: it carries them to a sleeper whose exchange reads from it; acquire: it sees the flag the
  // sleeper set before its re-check). An RMW even when the flag is 0, for the release sequence.
  if (peerCtl_->sleeping.exchange(0, std::memory_order_acq_rel) != 0 && link_.peerWake.get() >= 0) {
    uint64_t one = 1;
    ssize_t rc = ::write(link_.peerWake.get(), &one, sizeof(one));
    (void)rc;  // EAGAIN: a wake-up is pending already
  }
}

bool ShmConnection::peerClosed() const {
  return in_.producer->closed.load(std::memory_order_acquire) != 0 ||
         out_.flags->closed.load(std::memory_order_acquire) != 0;
}

bool ShmConnection::peerGone() {
  if (link_.socket.get() < 0) return false;
  pollfd p{link_.socket.get(), POLLIN | POLLRDHUP, 0};
  int rc = ::poll(&p, 1, 0);
  return rc > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN)) != 0;
}

void ShmConnection::revealPoison(Clock::time_point until) {
  // A poisoning peer sets its note before it marks the lines closed.
  while (!peerClosed() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (const PoisonNote* note : {&in_.producer->poison, &out_.flags->poison}) {
    if (note->set.load(std::memory_order_acquire) != 0)
      throwMismatch(note->record, base::format("from peer %d over shm", peer_).c_str());
  }
}

void ShmConnection::checkAlive() {
  for (const PoisonNote* note : {&in_.producer->poison, &out_.flags->poison}) {
    if (note->set.load(std::memory_order_acquire) != 0)
      throwMismatch(note->record, base::format("from peer %d over shm", peer_).c_str());
  }
}

void ShmConnection::failGone(const char* why) {
  for (const PoisonNote* note : {&in_.producer->poison, &out_.flags->poison}) {
    if (note->set.load(std::memory_order_acquire) != 0)
      throwMismatch(note->record, base::format("from peer %d over shm", peer_).c_str());
  }
  COLLIE_FAIL(ErrorCode::RemoteError,
              "peer %d %s while rank %d waited on its shm connection (%zu receive(s), %zu send(s) pending)", peer_, why,
              rank_, recvs_.size(), sends_.size() + directs_.size());
}

bool ShmConnection::peerEnded() {
  if (peerClosed()) return true;
  if ((++idleChecks_ & 63) != 0) return false;  // the clock, then a syscall: not on every idle pass
  auto now = std::chrono::steady_clock::now();
  if (now - lastLivenessCheck_ < std::chrono::milliseconds(1)) return false;
  lastLivenessCheck_ = now;
  return peerGone();
}

void ShmConnection::checkPeer() {
  if (!peerEnded()) return;
  // Take what the peer sent before it went; anything still pending after that can never complete.
  pumpRecv();
  if (pending_ > 0)
    failGone(peerClosed() ? "closed the connection (it may have failed or been aborted)" : "exited or died");
}

bool ShmConnection::probe(Arrival* next) {
  if (error_) std::rethrow_exception(error_);
  COLLIE_USAGE_CHECK(!closed_, "receive from any source on the closed shm connection of rank %d to peer %d", rank_,
                     peer_);
  COLLIE_INTERNAL_CHECK(pending_ == 0, "shm connection to peer %d: probe with %zu transfers pending", peer_, pending_);
  probing_ = true;
  for (bool ended = false;; ended = true) {
    const SlotHeader* s = in_.slot(head_);
    if (s->seq.load(std::memory_order_acquire) == head_ + 1) {
      check(s->msgSeq == recvSeq_, "corrupt slot (a message number out of order)");
      next->bytes = s->messageBytes();
      next->fp = s->fp;
      return true;
    }
    if (ended) failGone(peerClosed() ? "closed the connection (it may have failed or been aborted)" : "exited or died");
    if (!peerEnded()) return false;  // else look once more: it may have sent before it went
  }
}

bool ShmConnection::wouldMove() {
  if (closed_ || error_) return false;
  if (probing_ && pending_ == 0)
    return in_.slot(head_)->seq.load(std::memory_order_acquire) == head_ + 1 || peerClosed() || peerGone();
  if (pending_ == 0) return false;
  if (!recvs_.empty() && in_.slot(head_)->seq.load(std::memory_order_acquire) == head_ + 1) return true;
  if (!sends_.empty() || !directs_.empty()) {
    uint64_t head = out_.consumer->head.load(std::memory_order_acquire);
    if (!directs_.empty() && head > directs_.front().ticket) return true;
    if (!sends_.empty() && tail_ - head <= out_.mask) return true;
  }
  return peerClosed() || peerGone();
}

}  // namespace collie::transport::shm
