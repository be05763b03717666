// Where an idle executor sleeps: one epoll set per communicator holding every transport fd (registered
// edge-triggered for input and output) plus an eventfd that wake() writes, so that abort or new work from
// another thread ends the sleep at once. Driven by one thread at a time; wake() is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

namespace collie::core {

class Poller {
 public:
  Poller();
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  /// Registers fd for edge-triggered readiness (EPOLLIN | EPOLLOUT | EPOLLRDHUP).
  void add(int fd);
  void remove(int fd);
  /// Sleeps until a registered fd becomes ready, wake() is called, or the timeout passes.
  void wait(std::chrono::microseconds timeout);
  /// Ends a current or the next wait() at once.
  void wake();

 private:
  int epollFd_ = -1;
  int eventFd_ = -1;
};

}  // namespace collie::core
