// The data path of the shm transport: one Connection over two rings in shared memory (one per direction) to a
// peer on the same host, plus the sleep hook that lets a rank sleep in its poller and be woken by shm peers.
// Internal to src/transport/shm (and its tests); the rest of collie sees a plain Connection.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <vector>

#include "base/poller.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace collie::transport::shm {

class ShmConnection;

/// This rank's side of sleeping and waking (one per transport): owns the rank's RankControl, registers itself
/// with the poller while it has connections, and answers the poller's "may I sleep?" for all of them.
class ShmWaker final : public base::SleepHook {
 public:
  ShmWaker(Segment control, base::Poller* poller);
  ~ShmWaker() override;
  ShmWaker(const ShmWaker&) = delete;
  ShmWaker& operator=(const ShmWaker&) = delete;

  bool prepareToSleep() override;
  void finishSleep() override;
  void add(ShmConnection* c);
  void remove(ShmConnection* c);
  RankControl* control() const { return static_cast<RankControl*>(control_.data()); }
  base::Poller* poller() const { return poller_; }

 private:
  Segment control_;
  base::Poller* poller_;
  std::vector<ShmConnection*> conns_;
};

/// Everything a ShmConnection is made of, gathered by the handshake.
struct ShmLink {
  int rank = -1;
  int peer = -1;
  Segment recvRing;     ///< ours: the peer writes, we read
  Segment sendRing;     ///< the peer's: we write
  Segment peerControl;  ///< the peer's RankControl
  UniqueFd peerWake;    ///< the peer's poller eventfd (invalid: the peer has no poller)
  UniqueFd socket;      ///< the handshake socket, kept to learn when the peer goes away
  pid_t peerPid = 0;    ///< as seen from this process (0: not visible here)
  bool sameProcess = false;
  bool peerReadsUs = false;  ///< the peer can read our memory: large sends may go by address
  size_t directMinBytes = SIZE_MAX;
};

class ShmConnection final : public Connection {
 public:
  ShmConnection(ShmLink link, std::shared_ptr<ShmWaker> waker);
  ~ShmConnection() override;
  ShmConnection(const ShmConnection&) = delete;
  ShmConnection& operator=(const ShmConnection&) = delete;

  int peer() const override { return peer_; }
  void postSend(Transfer* t) override;
  void postRecv(Transfer* t) override;
  bool progress() override;
  bool busy() const override { return pending_ > 0; }
  void close() override;
  /// Leaves `why` in this side's closed lines for the peer, then closes.
  void poison(const MismatchRecord& why) override;
  /// Reads the head slot's header (message size, fingerprint) without consuming it.
  bool probe(Arrival* next) override;
  void endProbe() override { probing_ = false; }
  void revealPoison(Clock::time_point until) override;
  /// Reports a poison the peer left (a mismatch found elsewhere) even with nothing pending on this connection.
  void checkAlive() override;

  /// For the sleep hook: whether progress() would move something now (or fail), without moving it.
  bool wouldMove();
  /// Whether large sends go by address (the single-copy path).
  bool singleCopy() const { return directMin_ != SIZE_MAX; }

 private:
  struct SendOp {
    Transfer* t;
    size_t off;
    bool direct;
  };
  struct RecvOp {
    Transfer* t;
    size_t off;
  };
  struct DirectOp {
    Transfer* t;
    uint64_t ticket;
  };

  bool pumpRecv();
  bool pumpSend();
  /// Whether out_ has a free slot (reads the peer's head only when the last one read says full).
  bool roomToSend();
  /// Writes `t` (one slot's worth at most; inline up to kInlineBytes) whole into the next slot and completes it.
  void sendSmall(Transfer* t);
  void readPeer(void* dst, uint64_t addr, size_t bytes);
  void wakePeer();
  /// Idle and busy: fails if the peer closed or died (after taking what it sent before).
  void checkPeer();
  /// Whether the peer closed or (checked at most every millisecond, a syscall) died.
  bool peerEnded();
  bool peerClosed() const;
  bool peerGone();  ///< the socket says the peer closed it or died (a syscall)
  [[noreturn]] void failGone(const char* why);
  void check(bool ok, const char* what) const;

  int rank_, peer_;
  ShmLink link_;
  std::shared_ptr<ShmWaker> waker_;
  RingView in_, out_;
  RankControl* peerCtl_ = nullptr;
  uint64_t head_ = 0;      ///< next ticket to consume from in_
  uint64_t tail_ = 0;      ///< next ticket to fill in out_
  uint64_t headSeen_ = 0;  ///< out_'s head as last read
  uint32_t sendSeq_ = 0, recvSeq_ = 0;
  size_t directMin_;
  size_t pending_ = 0;
  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  std::deque<DirectOp> directs_;
  bool closed_ = false;
  bool wakeOwed_ = false;  ///< postSend sent a message; progress() wakes the peer
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point lastLivenessCheck_{};
  uint32_t idleChecks_ = 0;
  bool probing_ = false;  ///< between probe() and endProbe(): a message's arrival ends the poller's sleep
};

}  // namespace collie::transport::shm
