// Where an idle executor sleeps: one epoll set per communicator holding every transport fd (registered
// edge-triggered for input and output) plus an eventfd that wake() writes, so that abort or new work from
// another thread ends the sleep at once. Driven by one thread at a time; wake() is thread-safe.
//
// Transports whose peers signal through shared memory rather than fds (shm) take part through two hooks:
//   - wakeFd(): the eventfd, which such a transport hands to its peers (duplicated over SCM_RIGHTS); a peer
//     writes to it to end this poller's sleep, so one epoll_wait covers sockets and shared memory alike;
//   - SleepHook: called right before epoll_wait. The hook announces the sleep where its peers look (a flag in
//     shared memory) and then re-checks its rings; a peer writes the eventfd only when it sees the flag. The
//     flag store and the re-check on this side, and the data store and the flag load on the peer's side, are
//     each separated by a full fence, so either the hook sees the peer's data or the peer sees the flag: no
//     wake-up is lost. See src/transport/shm/shm_connection.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace collie::base {

/// Something the poller asks before it sleeps (see the file comment).
class SleepHook {
 public:
  virtual ~SleepHook() = default;
  /// Announces the coming sleep to the peers that may end it, then re-checks for work. Returns false when
  /// work is already there: the poller then does not sleep.
  virtual bool prepareToSleep() = 0;
  /// Called after every prepareToSleep() (whether or not the poller slept): the sleep is over.
  virtual void finishSleep() = 0;
};

class Poller {
 public:
  Poller();
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  /// Registers fd for edge-triggered readiness (EPOLLIN | EPOLLOUT | EPOLLRDHUP).
  void add(int fd);
  void remove(int fd);
  /// Sleeps until a registered fd becomes ready, wake() is called, the wake fd is written, or the timeout
  /// passes. Returns at once when a SleepHook finds work.
  void wait(std::chrono::microseconds timeout);
  /// Whether a registered fd became ready, or wake() was called, since the last wait() or readyNow(), without
  /// sleeping (epoll_wait with no timeout; the readiness is taken, as wait() takes it). Runs no SleepHook.
  bool readyNow();
  /// Ends a current or the next wait() at once.
  void wake();
  /// The eventfd that ends a wait() when 8 bytes (any non-zero count) are written to it, from any process
  /// that holds a duplicate.
  int wakeFd() const { return eventFd_; }
  /// Registers a hook called around every sleep (by the thread that drives the poller). The hook must be
  /// removed before it is destroyed.
  void addSleepHook(SleepHook* hook);
  void removeSleepHook(SleepHook* hook);

 private:
  int epollFd_ = -1;
  int eventFd_ = -1;
  std::vector<SleepHook*> hooks_;
};

}  // namespace collie::base
