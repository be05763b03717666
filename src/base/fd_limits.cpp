// Counting descriptors and backing off through a shortage (see fd_limits.hpp).
#include "base/fd_limits.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>

#include "base/errors.hpp"

namespace collie::base {

namespace {

std::atomic<int64_t> gLastShortageNs{0};  ///< steady clock ns; 0: never
std::atomic<int> gLastShortageErr{0};

}  // namespace

bool isFdShortage(int err) { return err == EMFILE || err == ENFILE; }

void noteFdShortage(int err) {
  gLastShortageErr.store(err, std::memory_order_relaxed);
  gLastShortageNs.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_release);
}

std::chrono::steady_clock::time_point lastFdShortage(int* err) {
  const int64_t ns = gLastShortageNs.load(std::memory_order_acquire);
  *err = gLastShortageErr.load(std::memory_order_relaxed);
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ns));
}

FdUsage fdUsage() {
  FdUsage usage;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    usage.limit = static_cast<long>(lim.rlim_cur);
  // /proc/self/fd needs a descriptor of its own, which a process at its limit does not have: then every descriptor
  // below the limit is asked (cheap where limits are small, which is where this happens).
  if (DIR* dir = opendir("/proc/self/fd")) {
    long n = 0;
    while (dirent* e = readdir(dir))
      if (e->d_name[0] != '.') ++n;
    closedir(dir);
    usage.open = n - 1;  // not the one that listed them
    return usage;
  }
  if (usage.limit > 0) {
    long n = 0;
    for (long fd = 0; fd < std::min(usage.limit, 1L << 20); ++fd)
      if (fcntl(static_cast<int>(fd), F_GETFD) >= 0) ++n;
    usage.open = n;
  }
  return usage;
}

std::string fdShortageMessage(int err) {
  FdUsage u = fdUsage();
  std::string open = u.open >= 0 ? std::to_string(u.open) : "?";
  std::string limit = u.limit >= 0 ? std::to_string(u.limit) : "unlimited";
  if (err == ENFILE) {
    return format(
        "the system is out of file descriptors (ENFILE): %s open in this process, limit %s; raise the "
        "system's limit (sysctl fs.file-max) or lower COLLIE_SOCKETS_PER_PEER",
        open.c_str(), limit.c_str());
  }
  return format("out of file descriptors: %s open, limit %s; raise ulimit -n (or lower COLLIE_SOCKETS_PER_PEER)",
                open.c_str(), limit.c_str());
}

void FdShortageBackoff::wait(int err, const char* what, std::chrono::steady_clock::time_point deadline) {
  noteFdShortage(err);
  auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    since_ = now;
  }
  if (now - since_ >= kGrace || now >= deadline) {
    started_ = false;
    COLLIE_FAIL(ErrorCode::SystemError, "%s failed: %s", what, fdShortageMessage(err).c_str());
  }
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kPause, deadline - now));
}

}  // namespace collie::base
