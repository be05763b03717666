// The bootstrap root (see bootstrap.hpp): one thread that serves every connection at once, so that no stranger
// can stall a job's init.
//
//   - The listener and every connection are non-blocking and watched by one poll(). Each accepted connection has
//     kHelloWait (or what is left of the init time, if less) to send a complete hello; one that closes, sends
//     garbage (parseBootstrapHello fails), shows the wrong secret or stays silent is logged (WARN, BOOTSTRAP)
//     with its address and closed, without delaying anyone else.
//   - At most kMaxUnverified connections wait for their hello at once; a new one beyond that closes the oldest
//     waiting one, so a flood costs a bounded number of descriptors and a real rank, which speaks at once, gets
//     through (a connection is read as soon as it is accepted, and once more before it is closed for room).
//     kHelloWait and kMaxUnverified are the transports' (transport/handshake.hpp).
//   - accept() failing with EMFILE/ENFILE closes the oldest unverified connection if there is one (a stranger pays
//     for the descriptor), else pauses the listener briefly and tries again; the shortage is logged with
//     fdShortageMessage (the ranks themselves report it where it hits them).
//   - Once all ranks have checked in, the listener is closed and every rank's reply (the PeerInfo of its neighbours in
//     the table's all-gather tree, bootstrap_plan.hpp) is sent at once, non-blocking: a rank slow to read delays
//     nobody else. When the ranks' AgreedSettings differ, every rank gets the same refusal instead, naming the
//     setting and two ranks (rank 0 and the lowest rank that differs from it).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <thread>

#include "base/errors.hpp"
#include "base/fd_limits.hpp"
#include "base/log.hpp"
#include "base/socket.hpp"
#include "core/bootstrap.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/bootstrap_wire.hpp"
#include "transport/handshake.hpp"

namespace collie::core {
namespace {

using transport::UniqueFd;
using Clock = std::chrono::steady_clock;

using transport::handshake::kHelloWait;      // how long a connection may take to send its hello
using transport::handshake::kMaxUnverified;  // connections waiting for their hello at once

/// A connection that has not sent a complete hello yet.
struct Incoming {
  UniqueFd fd;
  std::string from;
  Clock::time_point expires;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kBootstrapHelloBytes);
  size_t got = 0;
};

/// A rank that checked in, and its reply while it is being sent.
struct RankLink {
  UniqueFd fd;
  std::string from;
  std::vector<uint8_t> out;
  size_t sent = 0;
};

int pollMs(Clock::time_point until) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
}

class RootServer {
 public:
  RootServer(int listenFd, const std::array<uint8_t, 16>& secret, std::chrono::milliseconds timeout)
      : listener_(listenFd), secret_(secret), deadline_(Clock::now() + timeout) {}

  void run() {
    try {
      if (!collect()) {
        COLLIE_WARN(base::kLogBootstrap, "bootstrap root: timed out with %zu of %d ranks checked in", checkedIn(),
                    nranks_);
        refuseCheckedIn(ErrorCode::Timeout, neverCheckedIn());
        return;
      }
      listener_.reset();  // every rank is in: nobody else may connect
      if (!incoming_.empty())
        COLLIE_WARN(base::kLogBootstrap,
                    "bootstrap root: closed %zu connection(s) that sent no hello (the first from %s)", incoming_.size(),
                    incoming_.front().from.c_str());
      incoming_.clear();
      const std::string disagreement = settingsDisagreement();
      if (!disagreement.empty()) {
        COLLIE_WARN(base::kLogBootstrap, "bootstrap root: refused every rank: %s", disagreement.c_str());
        refuseCheckedIn(ErrorCode::InvalidUsage, disagreement);
        return;
      }
      reply();
    } catch (const Error& e) {
      COLLIE_WARN(base::kLogBootstrap, "bootstrap root failed: %s", e.what());
    }
  }

 private:
  size_t checkedIn() const {
    return static_cast<size_t>(
        std::count_if(ranks_.begin(), ranks_.end(), [](const RankLink& l) { return l.fd.get() >= 0; }));
  }

  /// Accepts and reads hellos until every rank has checked in (true) or the deadline passes (false).
  bool collect() {
    Clock::time_point listenerPausedUntil{};
    bool shortageLogged = false;
    auto allIn = [&] { return nranks_ >= 0 && checkedIn() == static_cast<size_t>(nranks_); };
    while (!allIn()) {
      auto now = Clock::now();
      if (now >= deadline_) return false;
      dropExpired(now);
      if (allIn()) break;
      std::vector<pollfd> pfds;
      const bool listening = now >= listenerPausedUntil;
      if (listening) pfds.push_back(pollfd{listener_.get(), POLLIN, 0});
      for (Incoming& c : incoming_) pfds.push_back(pollfd{c.fd.get(), POLLIN, 0});
      Clock::time_point wake = deadline_;
      if (!listening) wake = std::min(wake, listenerPausedUntil);
      if (!incoming_.empty()) wake = std::min(wake, incoming_.front().expires);
      int rc = ::poll(pfds.data(), pfds.size(), pollMs(wake));
      if (rc < 0 && errno != EINTR) COLLIE_SYSCHECK(rc, "poll");
      if (rc <= 0) continue;
      const size_t first = listening ? 1 : 0;
      for (size_t k = first; k < pfds.size(); ++k)
        if (pfds[k].revents) readHello(incoming_[k - first]);
      incoming_.erase(
          std::remove_if(incoming_.begin(), incoming_.end(), [](const Incoming& c) { return c.fd.get() < 0; }),
          incoming_.end());
      if (!listening || !pfds[0].revents) continue;
      int err = acceptAll();
      if (err == 0) {
        shortageLogged = false;
        continue;
      }
      // Out of descriptors with no stranger left to close: wait for some to be freed.
      if (!shortageLogged) {
        COLLIE_WARN(base::kLogBootstrap, "bootstrap root: cannot accept: %s", base::fdShortageMessage(err).c_str());
        shortageLogged = true;
      }
      listenerPausedUntil = Clock::now() + base::FdShortageBackoff::kPause;
    }
    return true;
  }

  /// Accepts every pending connection. Returns 0, or the EMFILE/ENFILE that stopped it.
  int acceptAll() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        int err = errno;
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return 0;
        if (base::isFdShortage(err)) {
          if (incoming_.empty()) return err;
          dropOldest("to free a file descriptor");
          continue;
        }
        COLLIE_SYSCHECK(fd, "accept");
      }
      if (incoming_.size() >= kMaxUnverified) dropOldest("to make room (too many connections waiting)");
      Incoming c;
      c.fd.reset(fd);
      c.from = base::addressToString(addr);
      c.expires = std::min(deadline_, Clock::now() + kHelloWait);
      readHello(c);  // a real rank's hello is usually there already
      if (c.fd.get() >= 0) incoming_.push_back(std::move(c));
    }
  }

  /// Makes room: closes the oldest connection still without a hello, after a last look for it.
  void dropOldest(const char* why) {
    Incoming& oldest = incoming_.front();
    readHello(oldest);
    if (oldest.fd.get() >= 0)
      COLLIE_WARN(base::kLogBootstrap, "bootstrap root: closed the unverified connection from %s %s",
                  oldest.from.c_str(), why);
    incoming_.pop_front();
  }

  void dropExpired(Clock::time_point now) {
    while (!incoming_.empty() && incoming_.front().expires <= now) {
      Incoming& c = incoming_.front();
      readHello(c);  // a last look: this thread may have been held up while the hello waited
      if (c.fd.get() < 0) {
        incoming_.pop_front();
        continue;
      }
      COLLIE_WARN(base::kLogBootstrap,
                  "bootstrap root: refused the connection from %s: no hello within %lld ms (%zu "
                  "of %zu bytes)",
                  c.from.c_str(), static_cast<long long>(kHelloWait.count()), c.got, c.buf.size());
      incoming_.pop_front();
    }
  }

  void refuse(Incoming& c, const std::string& why) {
    COLLIE_WARN(base::kLogBootstrap, "bootstrap root: refused the connection from %s: %s", c.from.c_str(), why.c_str());
    c.fd.reset();
  }

  /// Reads what has arrived of c's hello; a complete one is checked, and c's fd either moves to a rank or closes.
  void readHello(Incoming& c) {
    while (c.got < c.buf.size()) {
      ssize_t n = ::recv(c.fd.get(), c.buf.data() + c.got, c.buf.size() - c.got, MSG_DONTWAIT);
      if (n > 0) {
        c.got += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      refuse(c, base::format("closed after %zu of %zu bytes of its hello", c.got, c.buf.size()));
      return;
    }
    BootstrapHello hello;
    try {
      hello = parseBootstrapHello(c.buf.data(), c.buf.size());
    } catch (const Error& e) {
      refuse(c, e.what());
      return;
    }
    if (!transport::handshake::secretsEqual(hello.secret.data(), secret_.data(), secret_.size())) {
      refuse(c, "it did not present the secret");
      return;
    }
    std::string problem;
    if (nranks_ < 0) {
      nranks_ = hello.nranks;
      ranks_.resize(static_cast<size_t>(nranks_));
      table_.resize(static_cast<size_t>(nranks_));
      settings_.resize(static_cast<size_t>(nranks_));
    }
    if (hello.nranks != nranks_) {
      problem = base::format("rank %d says nranks=%d but an earlier rank said %d", hello.rank, hello.nranks, nranks_);
    } else if (ranks_[static_cast<size_t>(hello.rank)].fd.get() >= 0) {
      problem = base::format("rank %d checked in twice (from %s)", hello.rank, c.from.c_str());
    }
    if (!problem.empty()) {
      BootstrapReply no;
      no.status = ErrorCode::InvalidUsage;
      no.message = problem;
      std::vector<uint8_t> bytes = encodeBootstrapReply(no);
      // Best effort: the reply is small and the socket's buffer empty; a rank that does not read it times out.
      ssize_t sent = ::send(c.fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)sent;
      refuse(c, problem);
      return;
    }
    table_[static_cast<size_t>(hello.rank)] = hello.info;
    settings_[static_cast<size_t>(hello.rank)] = hello.settings;
    RankLink& link = ranks_[static_cast<size_t>(hello.rank)];
    link.fd = std::move(c.fd);
    link.from = c.from;
    COLLIE_INFO(base::kLogBootstrap, "bootstrap root: rank %d of %d checked in from %s", hello.rank, nranks_,
                c.from.c_str());
  }

  /// "" when every rank's settings are rank 0's, else what differs between rank 0 and the lowest rank that differs.
  std::string settingsDisagreement() const {
    for (size_t r = 1; r < settings_.size(); ++r) {
      std::string d = describeSettingsDifference(settings_[0], 0, settings_[r], static_cast<int>(r));
      if (!d.empty()) return d;
    }
    return {};
  }

  /// At the deadline: which ranks never checked in.
  std::string neverCheckedIn() const {
    std::string missing;
    int count = 0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].fd.get() >= 0) continue;
      if (++count <= 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (count > 16) missing += base::format(" and %d more", count - 16);
    return base::format("the bootstrap root timed out: %d of %d ranks never checked in (rank(s) %s)", count, nranks_,
                        missing.c_str());
  }

  /// Refuses every rank that checked in (best effort: the reply is small and the socket's buffer empty), so that at
  /// the deadline they fail with a timeout that names the missing ranks rather than with a closed connection, and
  /// ranks whose settings differ all fail with the same message.
  void refuseCheckedIn(ErrorCode status, const std::string& why) {
    BootstrapReply no;
    no.status = status;
    no.message = why;
    const std::vector<uint8_t> bytes = encodeBootstrapReply(no);
    for (RankLink& l : ranks_) {
      if (l.fd.get() < 0) continue;
      ssize_t sent = ::send(l.fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)sent;
    }
  }

  /// Sends every rank the PeerInfo of its bootstrapPeers (bootstrap_plan.hpp), all at once.
  void reply() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      BootstrapReply yes;
      for (int p : rootAnswerRanks(static_cast<int>(r), nranks_, settings_[0].cardDirectory != 0))
        yes.table.push_back(table_[static_cast<size_t>(p)]);
      ranks_[r].out = encodeBootstrapReply(yes);
    }
    for (;;) {
      std::vector<pollfd> pfds;
      std::vector<RankLink*> open;
      for (RankLink& l : ranks_) {
        if (l.fd.get() < 0) continue;
        pfds.push_back(pollfd{l.fd.get(), POLLOUT, 0});
        open.push_back(&l);
      }
      if (open.empty()) return;
      if (Clock::now() >= deadline_) {
        for (RankLink* l : open)
          COLLIE_WARN(base::kLogBootstrap, "bootstrap root: timed out sending the table to rank %d at %s",
                      static_cast<int>(l - ranks_.data()), l->from.c_str());
        return;
      }
      int rc = ::poll(pfds.data(), pfds.size(), pollMs(deadline_));
      if (rc < 0 && errno != EINTR) COLLIE_SYSCHECK(rc, "poll");
      for (size_t k = 0; k < pfds.size() && rc > 0; ++k) {
        if (!pfds[k].revents) continue;
        RankLink& l = *open[k];
        ssize_t n = ::send(l.fd.get(), l.out.data() + l.sent, l.out.size() - l.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) l.sent += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          COLLIE_WARN(base::kLogBootstrap, "bootstrap root: lost rank %d at %s while sending the table: %s",
                      static_cast<int>(&l - ranks_.data()), l.from.c_str(), base::errnoString(errno).c_str());
          l.fd.reset();
        }
        if (l.sent == l.out.size()) l.fd.reset();  // done: the rank reads it and closes its side
      }
    }
  }

  UniqueFd listener_;
  std::array<uint8_t, 16> secret_;
  Clock::time_point deadline_;
  int nranks_ = -1;
  std::deque<Incoming> incoming_;  // oldest first
  std::vector<RankLink> ranks_;    // [rank]; fd -1 until it checks in
  std::vector<transport::PeerInfo> table_;
  std::vector<AgreedSettings> settings_;  // [rank]
};

}  // namespace

UniqueIdData BootstrapRoot::start(const sockaddr_storage& addr, const std::array<uint8_t, 16>& secret,
                                  std::chrono::milliseconds timeout) {
  UniqueIdData data;
  data.root = addr;
  data.secret = secret;
  int fd = base::listenOn(data.root);
  base::setNonBlocking(fd, true);
  std::thread([fd, secret, timeout] { RootServer(fd, secret, timeout).run(); }).detach();
  COLLIE_INFO(base::kLogBootstrap, "bootstrap root listening on %s", base::addressToString(data.root).c_str());
  return data;
}

}  // namespace collie::core
