// Socket helpers (see socket.hpp).
//
// Interface selection follows NCCL_SOCKET_IFNAME: "eth,ib" keeps interfaces whose names start with a listed
// prefix, "^docker,lo" drops them, "=eth0" and "^=eth0" compare whole names. With no filter every interface
// but loopback and docker bridges is taken, and loopback only when nothing else is up. IPv6 link-local
// addresses are skipped: they need a scope id that a peer on another host cannot use.
//
// The blocking helpers never block in the kernel without a deadline: connect is started non-blocking and
// finished with poll(), and sendAll/recvAll use MSG_DONTWAIT plus poll(), so a blocking fd works too.
#include "base/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "base/errors.hpp"
#include "base/fd_limits.hpp"
#include "base/log.hpp"
#include "base/params.hpp"

namespace collie::base {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

/// Closes the fd on scope exit unless released.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

/// Milliseconds left until `deadline`, rounded up, clamped to [0, INT_MAX].
int msUntil(Deadline deadline) {
  auto left = deadline - SteadyClock::now();
  if (left <= SteadyClock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

/// Throws when `stop` is set and true: the waiter's owner gave up on it (an abort).
void checkStop(const std::atomic<bool>* stop, const std::string& what) {
  if (stop && stop->load(std::memory_order_relaxed))
    COLLIE_FAIL(ErrorCode::InvalidUsage, "stopped waiting for %s: aborted", what.c_str());
}

/// Polls one fd for `events` until the deadline. Returns false on timeout; with `stop`, looks at it every kStopLookMs.
bool pollUntil(int fd, short events, Deadline deadline, const std::atomic<bool>* stop = nullptr,
               const std::string& what = {}) {
  for (;;) {
    checkStop(stop, what);
    pollfd p{fd, events, 0};
    const int left = msUntil(deadline);
    const int ms = stop ? std::min(left, kStopLookMs) : left;
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc == 0) {
      if (left == 0) return false;
      continue;  // rounding (poll woke a little early), or time to look at `stop`
    }
    if (errno != EINTR) COLLIE_SYSCHECK(rc, "poll");
  }
}

bool isRetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH || err == EAGAIN ||
         err == ECONNABORTED || err == ECONNRESET || err == EINTR;
}

bool isLinkLocalV6(const sockaddr* sa) {
  if (sa->sa_family != AF_INET6) return false;
  const auto* a = reinterpret_cast<const sockaddr_in6*>(sa);
  return IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr);
}

int familyFromString(const std::string& family) {
  if (family.empty()) return AF_UNSPEC;
  if (family == "AF_INET" || family == "inet" || family == "ipv4") return AF_INET;
  if (family == "AF_INET6" || family == "inet6" || family == "ipv6") return AF_INET6;
  COLLIE_FAIL(ErrorCode::InvalidArgument, "COLLIE_SOCKET_FAMILY='%s' is not AF_INET or AF_INET6", family.c_str());
}

/// A numeric sysctl value, or -1 when it cannot be read.
long readSysctl(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  if (std::fscanf(f, "%ld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}

}  // namespace

std::string addressToString(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    return format("%s:%d", host, ntohs(a->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    std::string scope;
    char ifname[IF_NAMESIZE] = {0};
    if (a->sin6_scope_id != 0 && if_indextoname(a->sin6_scope_id, ifname)) scope = std::string("%") + ifname;
    return format("[%s%s]:%d", host, scope.c_str(), ntohs(a->sin6_port));
  }
  return format("<address family %d>", static_cast<int>(addr.ss_family));
}

sockaddr_storage parseAddress(const std::string& hostPort) {
  std::string host = hostPort;
  std::string port;
  if (!hostPort.empty() && hostPort[0] == '[') {
    size_t close = hostPort.find(']');
    COLLIE_ARG_CHECK(close != std::string::npos, "bad address '%s': missing ']'", hostPort.c_str());
    host = hostPort.substr(1, close - 1);
    if (close + 1 < hostPort.size()) {
      COLLIE_ARG_CHECK(hostPort[close + 1] == ':', "bad address '%s': expected ':' after ']'", hostPort.c_str());
      port = hostPort.substr(close + 2);
      COLLIE_ARG_CHECK(!port.empty(), "bad address '%s': empty port", hostPort.c_str());
    }
  } else if (size_t colon = hostPort.find(':'); colon != std::string::npos && hostPort.rfind(':') == colon) {
    host = hostPort.substr(0, colon);  // exactly one ':': host:port (more than one is a bare IPv6 address)
    port = hostPort.substr(colon + 1);
    COLLIE_ARG_CHECK(!port.empty(), "bad address '%s': empty port", hostPort.c_str());
  }
  COLLIE_ARG_CHECK(!host.empty(), "bad address '%s': empty host", hostPort.c_str());
  int portNum = 0;
  if (!port.empty()) {
    char* end = nullptr;
    long v = std::strtol(port.c_str(), &end, 10);
    COLLIE_ARG_CHECK(*end == '\0' && v >= 0 && v <= 65535 && std::isdigit(static_cast<unsigned char>(port[0])),
                     "bad address '%s': port '%s' is not a number in 0..65535", hostPort.c_str(), port.c_str());
    portNum = static_cast<int>(v);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  COLLIE_ARG_CHECK(rc == 0 && res != nullptr, "cannot resolve '%s': %s", host.c_str(),
                   rc == 0 ? "no address" : gai_strerror(rc));
  sockaddr_storage out{};
  // Prefer IPv4 when a name resolves to both (it is what every peer can reach on a dual-stack network).
  const addrinfo* pick = res;
  for (const addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  }
  std::memcpy(&out, pick->ai_addr, std::min<size_t>(pick->ai_addrlen, sizeof(out)));
  freeaddrinfo(res);
  setAddressPort(out, portNum);
  return out;
}

int addressPort(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  COLLIE_FAIL(ErrorCode::InvalidArgument, "address family %d is not IPv4 or IPv6", static_cast<int>(addr.ss_family));
}

void setAddressPort(sockaddr_storage& addr, int port) {
  COLLIE_ARG_CHECK(port >= 0 && port <= 65535, "port %d out of range", port);
  if (addr.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(static_cast<uint16_t>(port));
  } else if (addr.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    COLLIE_FAIL(ErrorCode::InvalidArgument, "address family %d is not IPv4 or IPv6", static_cast<int>(addr.ss_family));
  }
}

size_t packAddress(const sockaddr_storage& addr, uint8_t* out) {
  addressPort(addr);  // throws for a family other than IPv4 and IPv6
  if (addr.ss_family == AF_INET) {
    const auto& a4 = reinterpret_cast<const sockaddr_in&>(addr);
    std::memcpy(out, &a4.sin_port, 2);  // network order, as in the sockaddr
    std::memcpy(out + 2, &a4.sin_addr, 4);
    return 6;
  }
  const auto& a6 = reinterpret_cast<const sockaddr_in6&>(addr);
  std::memcpy(out, &a6.sin6_port, 2);
  std::memcpy(out + 2, &a6.sin6_addr, 16);
  std::memcpy(out + 18, &a6.sin6_scope_id, 4);
  return kPackedAddressBytes;
}

sockaddr_storage unpackAddress(const uint8_t* bytes, size_t length) {
  sockaddr_storage addr{};
  if (length == 6) {
    auto& a4 = reinterpret_cast<sockaddr_in&>(addr);
    a4.sin_family = AF_INET;
    std::memcpy(&a4.sin_port, bytes, 2);
    std::memcpy(&a4.sin_addr, bytes + 2, 4);
  } else if (length == kPackedAddressBytes) {
    auto& a6 = reinterpret_cast<sockaddr_in6&>(addr);
    a6.sin6_family = AF_INET6;
    std::memcpy(&a6.sin6_port, bytes, 2);
    std::memcpy(&a6.sin6_addr, bytes + 2, 16);
    std::memcpy(&a6.sin6_scope_id, bytes + 18, 4);
  }
  return addr;
}

socklen_t addressLength(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) return sizeof(sockaddr_in);
  if (addr.ss_family == AF_INET6) return sizeof(sockaddr_in6);
  COLLIE_FAIL(ErrorCode::InvalidArgument, "address family %d is not IPv4 or IPv6", static_cast<int>(addr.ss_family));
}

bool interfaceMatches(const std::string& filter, const std::string& name) {
  if (filter.empty()) return name.rfind("lo", 0) != 0 && name.rfind("docker", 0) != 0;
  size_t pos = 0;
  bool exclude = false;
  bool exact = false;
  if (pos < filter.size() && filter[pos] == '^') {
    exclude = true;
    ++pos;
  }
  if (pos < filter.size() && filter[pos] == '=') {
    exact = true;
    ++pos;
  }
  bool matched = false;
  while (pos <= filter.size() && !matched) {
    size_t comma = filter.find(',', pos);
    if (comma == std::string::npos) comma = filter.size();
    std::string item = filter.substr(pos, comma - pos);
    if (!item.empty()) matched = exact ? name == item : name.rfind(item, 0) == 0;
    pos = comma + 1;
  }
  return exclude ? !matched : matched;
}

std::vector<InterfaceAddress> findInterfaces(const std::string& filter, const std::string& family) {
  int wantFamily = familyFromString(family);
  ifaddrs* list = nullptr;
  COLLIE_SYSCHECK(getifaddrs(&list), "getifaddrs");
  std::vector<InterfaceAddress> found;
  std::vector<InterfaceAddress> loopback;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || !ifa->ifa_name) continue;
    int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (wantFamily != AF_UNSPEC && fam != wantFamily) continue;
    if (!(ifa->ifa_flags & IFF_UP) || isLinkLocalV6(ifa->ifa_addr)) continue;
    InterfaceAddress entry;
    entry.name = ifa->ifa_name;
    entry.addr = sockaddr_storage{};
    std::memcpy(&entry.addr, ifa->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    bool isLoopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    if (filter.empty()) {
      if (isLoopback || !interfaceMatches(filter, entry.name)) {
        if (isLoopback) loopback.push_back(entry);
        continue;
      }
    } else if (!interfaceMatches(filter, entry.name)) {
      continue;
    }
    found.push_back(entry);
  }
  freeifaddrs(list);
  if (found.empty() && filter.empty()) found = std::move(loopback);
  // Best first: IPv4 before IPv6, otherwise the order of getifaddrs (the kernel's interface order).
  std::stable_sort(found.begin(), found.end(), [](const InterfaceAddress& a, const InterfaceAddress& b) {
    return a.addr.ss_family == AF_INET && b.addr.ss_family != AF_INET;
  });
  return found;
}

sockaddr_storage defaultLocalAddress() {
  const std::string& filter = params::socketIfname();
  const std::string& family = params::socketFamily();
  std::vector<InterfaceAddress> ifs = findInterfaces(filter, family);
  COLLIE_ENFORCE(!ifs.empty(), ErrorCode::SystemError,
                 "no usable network interface (COLLIE_SOCKET_IFNAME='%s', COLLIE_SOCKET_FAMILY='%s')", filter.c_str(),
                 family.c_str());
  COLLIE_INFO(kLogNet, "using interface %s address %s", ifs[0].name.c_str(), addressToString(ifs[0].addr).c_str());
  sockaddr_storage addr = ifs[0].addr;
  setAddressPort(addr, 0);
  return addr;
}

int listenOn(sockaddr_storage& addr, int backlog) {
  FdGuard fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  COLLIE_SYSCHECK(fd.get(), "socket");
  int one = 1;
  COLLIE_SYSCHECK(setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), "setsockopt(SO_REUSEADDR)");
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), addressLength(addr)) < 0) {
    int err = errno;
    COLLIE_FAIL(ErrorCode::SystemError, "bind to %s failed: %s", addressToString(addr).c_str(),
                errnoString(err).c_str());
  }
  COLLIE_SYSCHECK(::listen(fd.get(), backlog), "listen");
  socklen_t len = sizeof(addr);
  COLLIE_SYSCHECK(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len), "getsockname");
  return fd.release();
}

int connectWithRetry(const sockaddr_storage& addr, Deadline deadline, int retries, const std::string& what,
                     const std::function<void()>& beforeRetry, int refusedLimit, milliseconds unansweredLimit,
                     const std::atomic<bool>* stop) {
  auto backoff = milliseconds(10);
  int lastErr = 0;
  int refused = 0;  // refusals in a row
  FdShortageBackoff shortage;
  // Since when every attempt went unanswered (none yet: the first attempt starts the clock).
  std::optional<SteadyClock::time_point> silentSince;
  const auto failUnanswered = [&](const char* how) {
    COLLIE_FAIL(
        ErrorCode::RemoteError,
        "cannot reach %s at %s: no answer to a connection for %lld ms (%s; COLLIE_PEER_DEAD_TIMEOUT=%lld ms): "
        "its host is down or unreachable",
        what.c_str(), addressToString(addr).c_str(),
        static_cast<long long>(std::chrono::duration_cast<milliseconds>(SteadyClock::now() - *silentSince).count()),
        how, static_cast<long long>(unansweredLimit.count()));
  };
  for (int attempt = 1;; ++attempt) {
    FdGuard fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0 && isFdShortage(errno)) {
      shortage.wait(errno, format("socket for %s", what.c_str()).c_str(), deadline);
      --attempt;  // not an attempt to connect
      continue;
    }
    COLLIE_SYSCHECK(fd.get(), "socket");
    shortage.reset();
    if (!silentSince) silentSince = SteadyClock::now();
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), addressLength(addr));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      const bool bounded = unansweredLimit.count() > 0 && *silentSince + unansweredLimit < deadline;
      if (!pollUntil(fd.get(), POLLOUT, bounded ? *silentSince + unansweredLimit : deadline, stop, what)) {
        if (bounded) failUnanswered("its SYNs went unanswered");
        COLLIE_FAIL(ErrorCode::Timeout, "timed out connecting to %s at %s (attempt %d)", what.c_str(),
                    addressToString(addr).c_str(), attempt);
      }
      socklen_t len = sizeof(err);
      COLLIE_SYSCHECK(getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len), "getsockopt(SO_ERROR)");
    }
    if (err == 0) {
      setNonBlocking(fd.get(), false);
      setNoDelay(fd.get());
      return fd.release();
    }
    lastErr = err;
    const bool unanswered = err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH;
    if (!unanswered) silentSince.reset();  // refused, reset...: the host answered
    if (unanswered && unansweredLimit.count() > 0 && SteadyClock::now() - *silentSince >= unansweredLimit)
      failUnanswered(errnoString(err).c_str());
    refused = err == ECONNREFUSED ? refused + 1 : 0;
    if (refusedLimit > 0 && refused >= refusedLimit) {
      COLLIE_FAIL(ErrorCode::RemoteError,
                  "cannot reach %s at %s: connection refused %d times in a row (nothing listens there any more: its "
                  "communicator was destroyed or its process ended)",
                  what.c_str(), addressToString(addr).c_str(), refused);
    }
    if (!isRetryableConnectError(err)) {
      COLLIE_FAIL(ErrorCode::SystemError, "connect to %s at %s failed: %s", what.c_str(), addressToString(addr).c_str(),
                  errnoString(err).c_str());
    }
    if (retries > 0 && attempt >= retries) {
      COLLIE_FAIL(ErrorCode::SystemError, "connect to %s at %s failed after %d attempts: %s", what.c_str(),
                  addressToString(addr).c_str(), attempt, errnoString(lastErr).c_str());
    }
    auto now = SteadyClock::now();
    if (now >= deadline) {
      COLLIE_FAIL(ErrorCode::Timeout, "timed out connecting to %s at %s after %d attempts (last error: %s)",
                  what.c_str(), addressToString(addr).c_str(), attempt, errnoString(lastErr).c_str());
    }
    if (beforeRetry) beforeRetry();
    COLLIE_TRACE(kLogNet, "connect to %s at %s: %s; retrying in %lld ms", what.c_str(), addressToString(addr).c_str(),
                 errnoString(err).c_str(), static_cast<long long>(backoff.count()));
    const auto wakeAt = now + std::min<SteadyClock::duration>(backoff, deadline - now);
    for (auto left = wakeAt - now; left > SteadyClock::duration::zero(); left = wakeAt - SteadyClock::now()) {
      std::this_thread::sleep_for(stop ? std::min<SteadyClock::duration>(left, milliseconds(kStopLookMs)) : left);
      checkStop(stop, what);
    }
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
}

bool isLoopbackAddress(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    return (ntohl(a.sin_addr.s_addr) >> 24) == 127;
  }
  if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

int acceptUntil(int listenFd, Deadline deadline, sockaddr_storage* peer) {
  for (;;) {
    if (!pollUntil(listenFd, POLLIN, deadline)) return -1;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    // Non-blocking per call so that a connection that vanished between poll and accept cannot block us.
    int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED || errno == EPROTO) {
        continue;
      }
      COLLIE_SYSCHECK(fd, "accept");
    }
    setNonBlocking(fd, false);
    setNoDelay(fd);
    if (peer) *peer = addr;
    return fd;
  }
}

void sendAll(int fd, const void* buf, size_t bytes, Deadline deadline, const std::string& what,
             const std::atomic<bool>* stop) {
  const char* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::send(fd, p + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (!pollUntil(fd, POLLOUT, deadline, stop, what)) {
        COLLIE_FAIL(ErrorCode::Timeout, "timed out sending to %s (%zu of %zu bytes sent)", what.c_str(), done, bytes);
      }
      continue;
    }
    if (err == EPIPE || err == ECONNRESET) {
      COLLIE_FAIL(ErrorCode::RemoteError, "%s closed the connection while we were sending (%s)", what.c_str(),
                  errnoString(err).c_str());
    }
    COLLIE_FAIL(ErrorCode::SystemError, "send to %s failed: %s", what.c_str(), errnoString(err).c_str());
  }
}

void recvAll(int fd, void* buf, size_t bytes, Deadline deadline, const std::string& what,
             const std::atomic<bool>* stop) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::recv(fd, p + done, bytes - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      COLLIE_FAIL(ErrorCode::RemoteError, "%s closed the connection (%zu of %zu bytes received)", what.c_str(), done,
                  bytes);
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (!pollUntil(fd, POLLIN, deadline, stop, what)) {
        COLLIE_FAIL(ErrorCode::Timeout, "timed out receiving from %s (%zu of %zu bytes received)", what.c_str(), done,
                    bytes);
      }
      continue;
    }
    if (err == ECONNRESET || err == EPIPE) {
      COLLIE_FAIL(ErrorCode::RemoteError, "%s reset the connection (%zu of %zu bytes received)", what.c_str(), done,
                  bytes);
    }
    COLLIE_FAIL(ErrorCode::SystemError, "recv from %s failed: %s", what.c_str(), errnoString(err).c_str());
  }
}

void setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  COLLIE_SYSCHECK(flags, "fcntl(F_GETFL)");
  int want = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (want != flags) COLLIE_SYSCHECK(fcntl(fd, F_SETFL, want), "fcntl(F_SETFL)");
}

void setNoDelay(int fd) {
  int one = 1;
  COLLIE_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "setsockopt(TCP_NODELAY)");
}

void setDeadPeerTimeout(int fd, int64_t ms) {
  if (ms <= 0) return;
  // Seconds for the probes: half the time idle, the other half split into up to 5 unanswered probes.
  const int total = static_cast<int>(std::max<int64_t>(1, (ms + 999) / 1000));
  const int idle = std::max(1, total / 2);
  const int rest = std::max(1, total - idle);
  const int count = std::min(rest, 5);
  const int interval = std::max(1, rest / count);
  const int one = 1;
  COLLIE_SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), "setsockopt(SO_KEEPALIVE)");
  COLLIE_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)), "setsockopt(TCP_KEEPIDLE)");
  COLLIE_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)), "setsockopt(TCP_KEEPINTVL)");
  COLLIE_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)), "setsockopt(TCP_KEEPCNT)");
}

int64_t unansweredMs(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return -1;
  // Unacknowledged data, or at least two window probes in a row unanswered (a live peer with a shut window shows at
  // most the one in flight: its answers reset the count, while the time since its last answer grows with the
  // probes' back-off, up to two minutes, so that time alone would call it dead).
  if (info.tcpi_unacked == 0 && info.tcpi_probes < 2) return -1;
  return info.tcpi_last_ack_recv;
}

void setBufferSizes(int fd, int bytes) {
  // Setting SO_SNDBUF/SO_RCVBUF turns off the kernel's buffer auto-tuning, and the kernel caps the value at
  // net.core.{w,r}mem_max. Where that cap is below what we ask for, auto-tuning (which may grow past the cap)
  // is the better deal, so the buffer is left alone.
  static const long wmemMax = readSysctl("/proc/sys/net/core/wmem_max");
  static const long rmemMax = readSysctl("/proc/sys/net/core/rmem_max");
  if (wmemMax < 0 || bytes <= wmemMax) {
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) < 0) {
      COLLIE_INFO(kLogNet, "setsockopt(SO_SNDBUF, %d) failed: %s", bytes, errnoString(errno).c_str());
    }
  }
  if (rmemMax < 0 || bytes <= rmemMax) {
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) < 0) {
      COLLIE_INFO(kLogNet, "setsockopt(SO_RCVBUF, %d) failed: %s", bytes, errnoString(errno).c_str());
    }
  }
}

}  // namespace collie::base
