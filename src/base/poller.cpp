#include "base/poller.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/errors.hpp"

namespace collie::base {

Poller::Poller() {
  epollFd_ = epoll_create1(EPOLL_CLOEXEC);
  COLLIE_SYSCHECK(epollFd_, "epoll_create1");
  eventFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  COLLIE_SYSCHECK(eventFd_, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = eventFd_;
  COLLIE_SYSCHECK(epoll_ctl(epollFd_, EPOLL_CTL_ADD, eventFd_, &ev), "epoll_ctl(eventfd)");
}

Poller::~Poller() {
  if (eventFd_ >= 0) ::close(eventFd_);
  if (epollFd_ >= 0) ::close(epollFd_);
}

void Poller::add(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  COLLIE_SYSCHECK(epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd, &ev), "epoll_ctl(ADD)");
}

void Poller::remove(int fd) { epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd, nullptr); }

void Poller::addSleepHook(SleepHook* hook) { hooks_.push_back(hook); }

void Poller::removeSleepHook(SleepHook* hook) {
  hooks_.erase(std::remove(hooks_.begin(), hooks_.end(), hook), hooks_.end());
}

namespace {
// Reads the eventfd (wakeFd) if it is among the events epoll_wait returned.
void drainWake(int eventFd, const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == eventFd) {
      uint64_t drained;
      while (read(eventFd, &drained, sizeof(drained)) > 0) {
      }
    }
  }
}
}  // namespace

bool Poller::readyNow() {
  epoll_event events[32];
  const int n = epoll_wait(epollFd_, events, 32, 0);
  if (n < 0 && errno != EINTR) COLLIE_SYSCHECK(n, "epoll_wait");
  drainWake(eventFd_, events, n);
  return n > 0;
}

void Poller::wait(std::chrono::microseconds timeout) {
  // Every hook announces the sleep and re-checks; one that finds work cancels the sleep (the hooks already
  // prepared are finished all the same).
  size_t prepared = 0;
  bool sleep = true;
  while (prepared < hooks_.size() && sleep) sleep = hooks_[prepared++]->prepareToSleep();
  struct Finish {
    std::vector<SleepHook*>& hooks;
    size_t& n;
    ~Finish() {
      for (size_t i = 0; i < n; ++i) hooks[i]->finishSleep();
    }
  } finish{hooks_, prepared};
  if (!sleep) return;
  epoll_event events[32];
  int ms = static_cast<int>((timeout.count() + 999) / 1000);
  int n = epoll_wait(epollFd_, events, 32, ms < 0 ? 0 : ms);
  if (n < 0 && errno != EINTR) COLLIE_SYSCHECK(n, "epoll_wait");
  drainWake(eventFd_, events, n);
}

void Poller::wake() {
  uint64_t one = 1;
  ssize_t rc = write(eventFd_, &one, sizeof(one));
  (void)rc;  // EAGAIN means a wake-up is already pending
}

}  // namespace collie::base
