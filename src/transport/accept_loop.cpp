// The process's accept loop and its listeners (see accept_loop.hpp).
#include "transport/accept_loop.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>

#include "base/errors.hpp"
#include "base/fd_limits.hpp"
#include "base/log.hpp"

namespace collie::transport::handshake {

using Clock = std::chrono::steady_clock;

/// One thread serving every Listener of this process: started with the first listener, stopped (its thread joined,
/// its eventfd closed) with the last. A forked child starts its own; the parent's it leaves alone.
class AcceptLoop {
 public:
  static std::shared_ptr<AcceptLoop> get() {
    static std::mutex mu;
    static std::weak_ptr<AcceptLoop> current;
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<AcceptLoop> loop = current.lock();
    if (!loop || loop->pid_ != ::getpid()) {
      loop.reset(new AcceptLoop());
      current = loop;
    }
    return loop;
  }

  ~AcceptLoop() {
    if (pid_ != ::getpid()) return;  // a forked child: the thread is not there (its handle is left, unjoined)
    {
      std::lock_guard<std::mutex> lock(mu);
      stop_ = true;
      changed();
    }
    thread_->join();
    delete thread_;
  }
  AcceptLoop(const AcceptLoop&) = delete;
  AcceptLoop& operator=(const AcceptLoop&) = delete;

  std::mutex mu;  ///< guards everything of every listener the loop reads; held while a Desk::take runs

  /// With mu held: the listeners or their desks changed; the loop rebuilds its poll set and offers held hellos.
  void changed() {
    ++generation_;
    wake();
  }
  /// Any thread, no lock: the loop starts a new round (Listener::add's desks are adopted at its start).
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  }
  pid_t pid() const { return pid_; }
  void add(Listener* l) {
    listeners_.push_back(l);
    changed();
  }
  void remove(Listener* l) {
    listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
    changed();
  }

 private:
  AcceptLoop() : pid_(::getpid()), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    COLLIE_SYSCHECK(wake_.get(), "eventfd for the accept loop");
    thread_ = new std::thread([this] { run(); });
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    std::vector<pollfd> pfds;
    std::vector<std::pair<Listener*, Link*>> owners;  // by pfds index (from 1): the listener, or a waiting link
    for (;;) {
      if (stop_) return;
      const auto now = Clock::now();
      for (Listener* l : listeners_) {
        if (l->adoptDesks()) l->offerHeld();  // before anything expires: a desk added meanwhile may take it
        l->expire(now);
      }
      pfds.assign(1, pollfd{wake_.get(), POLLIN, 0});
      owners.assign(1, {nullptr, nullptr});
      auto wakeAt = now + std::chrono::seconds(1);
      for (Listener* l : listeners_) {
        if (now >= l->pauseUntil_) {
          pfds.push_back(pollfd{l->fd_.get(), POLLIN, 0});
          owners.emplace_back(l, nullptr);
        } else {
          wakeAt = std::min(wakeAt, l->pauseUntil_);
        }
        for (Link& w : l->waiting_) {
          wakeAt = std::min(wakeAt, w.expires);
          if (w.done) continue;  // held: complete, nothing more to read
          pfds.push_back(pollfd{w.fd.get(), POLLIN, 0});
          owners.emplace_back(l, &w);
        }
      }
      const uint64_t generation = generation_;
      lock.unlock();
      int rc = ::poll(pfds.data(), pfds.size(), pollMs(wakeAt));
      lock.lock();
      uint64_t drained;
      while (::read(wake_.get(), &drained, sizeof(drained)) > 0) {
      }
      if (generation_ != generation) {  // listeners or desks changed while polling: held hellos may have a desk now
        for (Listener* l : listeners_) l->offerHeld();
        continue;
      }
      if (rc <= 0) continue;
      std::vector<Listener*> accepting;
      for (size_t k = 1; k < pfds.size(); ++k) {
        if (!pfds[k].revents) continue;
        auto [l, link] = owners[k];
        if (!link) {
          accepting.push_back(l);
        } else if (l->read(*link) == 1) {
          link->expires = Clock::time_point::min();  // consumed: removed below
        }
      }
      for (Listener* l : listeners_)
        l->waiting_.erase(std::remove_if(l->waiting_.begin(), l->waiting_.end(),
                                         [](const Link& w) { return w.expires == Clock::time_point::min(); }),
                          l->waiting_.end());
      for (Listener* l : accepting) l->acceptAll();
    }
  }

  pid_t pid_;
  UniqueFd wake_;
  std::thread* thread_ = nullptr;  ///< a pointer: a forked child must not destroy the parent's (joinable) handle
  std::vector<Listener*> listeners_;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Listener::Listener(UniqueFd fd, std::unique_ptr<Wire> wire, const char* transport, int rank)
    : fd_(std::move(fd)), wire_(std::move(wire)), transport_(transport), rank_(rank), loop_(AcceptLoop::get()) {
  std::lock_guard<std::mutex> lock(loop_->mu);
  loop_->add(this);
}

Listener::~Listener() {
  if (loop_->pid() != ::getpid()) return;  // a forked child: the parent's loop (and its lock) are not its own
  std::lock_guard<std::mutex> lock(loop_->mu);
  loop_->remove(this);  // the loop polls no descriptor of this listener from its next round; it skips this one's
  waiting_.clear();     // results (the generation changed), so the descriptors may close now
  fd_.reset();
}

// Not under the loop's lock, which a loop busy answering dials holds for long stretches (it lets go only to poll, and
// takes it back at once): a rank waiting for it under load was seen to wait seconds, while its peers' hellos, held
// for its desk, expired and were refused (hundreds of refusals and redials per 256-rank init on a loaded machine).
void Listener::add(Desk* desk) {
  {
    std::lock_guard<std::mutex> lock(pendingMu_);
    pendingDesks_.push_back(desk);
  }
  loop_->wake();
}

void Listener::remove(Desk* desk) {
  if (loop_->pid() != ::getpid()) return;       // a forked child (as ~Listener): the loop's lock may be held for good
  std::lock_guard<std::mutex> lock(loop_->mu);  // take() runs under it: not running now, and never again after
  {
    std::lock_guard<std::mutex> pending(pendingMu_);
    pendingDesks_.erase(std::remove(pendingDesks_.begin(), pendingDesks_.end(), desk), pendingDesks_.end());
  }
  desks_.erase(std::remove(desks_.begin(), desks_.end(), desk), desks_.end());
  loop_->changed();
}

bool Listener::adoptDesks() {
  std::lock_guard<std::mutex> lock(pendingMu_);
  if (pendingDesks_.empty()) return false;
  desks_.insert(desks_.end(), pendingDesks_.begin(), pendingDesks_.end());
  pendingDesks_.clear();
  return true;
}

void Listener::offerHeld() {
  for (auto it = waiting_.begin(); it != waiting_.end();) it = it->done && offer(*it) ? waiting_.erase(it) : it + 1;
}

Clock::duration Listener::acceptShortage(int* err) const {
  const int64_t since = shortageSince_.load();
  *err = shortageErr_.load();
  if (since == 0) return Clock::duration::zero();
  return Clock::now() - Clock::time_point(Clock::duration(since));
}

int Listener::read(Link& link) {
  int state;
  try {
    state = wire_->read(link);  // throws when the descriptors that came with a message cannot be received
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    if (error == nullptr || link.got != wire_->messageBytes()) {
      COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: %s", transport_.c_str(), rank_,
                  link.from.c_str(), e.what());
      link.fd.reset();
      return 1;
    }
    // The hello came whole without its descriptors: its desk turns the dial down and its communicator fails
    // naming why (a shortage here), rather than only waiting for the dial until its timeout.
    link.failure = e.what();
    link.failureCode = error->code();
    state = 1;
  }
  if (state == 0) return 0;
  if (state < 0) {
    COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: closed or malformed before its hello",
                transport_.c_str(), rank_, link.from.c_str());
    link.fd.reset();
    return 1;
  }
  const Header& h = link.header();
  if (h.magic != kMagic || h.version != kVersion) {
    COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: wrong magic or secret", transport_.c_str(),
                rank_, link.from.c_str());
    link.fd.reset();
    return 1;
  }
  if (offer(link)) return 1;
  link.done = true;  // held until it expires or a desk takes it
  return 0;
}

bool Listener::offer(Link& link) {
  const Header& h = link.header();
  for (Desk* desk : desks_) {
    if (!headerAuthentic(h, desk->kind, desk->rank, desk->secret)) continue;
    if (!dialerValid(h, desk->rank, desk->nranks, desk->channels)) {
      COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: it says it is rank %d (channel %d)",
                  transport_.c_str(), desk->rank, link.from.c_str(), h.fromRank, h.channel);
      link.fd.reset();
      return true;
    }
    const int from = h.fromRank;
    link.peer = from;
    link.channel = h.channel;
    try {
      desk->take(link);  // answers, or turns the dial away; nothing of it may end this thread
    } catch (const std::exception& e) {
      COLLIE_WARN(base::kLogNet, "%s: rank %d dropped the dial of rank %d: %s", transport_.c_str(), desk->rank, from,
                  e.what());
    }
    link.fd.reset();  // what take() left
    return true;
  }
  return false;
}

void Listener::expire(Clock::time_point now) {
  while (!waiting_.empty() && waiting_.front().expires <= now) refuseOldest("");
}

void Listener::refuseOldest(const char* why) {
  Link& oldest = waiting_.front();
  if (!oldest.done && read(oldest) == 1) {  // a last look: this thread may have been held up, or the peer slow
    waiting_.pop_front();
    return;
  }
  if (oldest.done) {
    COLLIE_WARN(base::kLogNet,
                "%s: rank %d refused a connection from %s: wrong magic or secret (no communicator here shows its "
                "secret within %lld ms: a stranger, or a peer whose communicator is not made here yet, which dials "
                "again)%s",
                transport_.c_str(), rank_, oldest.from.c_str(), static_cast<long long>(kHelloWait.count()), why);
  } else {
    COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: no hello within %lld ms%s",
                transport_.c_str(), rank_, oldest.from.c_str(), static_cast<long long>(kHelloWait.count()), why);
  }
  waiting_.pop_front();
}

void Listener::acceptAll() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      const bool shortage = base::isFdShortage(err);
      if (shortage) {
        // accept() fails for want of a descriptor before it looks for a connection: with none pending, nothing
        // is short (and a waiting connection, whose hello may be on its way, must not be closed for it).
        pollfd pending{fd_.get(), POLLIN, 0};
        if (::poll(&pending, 1, 0) == 0) return;
        base::noteFdShortage(err);
        if (!waiting_.empty()) {
          refuseOldest(" (closed to free a file descriptor)");
          continue;
        }
      }
      if (!fdShortage_) {
        COLLIE_WARN(base::kLogNet, "%s: rank %d cannot accept now (%s): pausing", transport_.c_str(), rank_,
                    base::errnoString(err).c_str());
        if (shortage) {
          shortageErr_ = err;
          shortageSince_ = Clock::now().time_since_epoch().count();
        }
      }
      fdShortage_ = true;
      pauseUntil_ = Clock::now() + base::FdShortageBackoff::kPause;
      return;
    }
    fdShortage_ = false;
    shortageSince_ = 0;
    if (waiting_.size() >= kMaxUnverified) refuseOldest(" (closed to make room: too many waiting)");
    Link l;
    l.fd.reset(fd);
    l.from = describePeer(fd, addr);
    // A unix socket in the abstract namespace has no permissions: any process of the network namespace may connect.
    // One of another user is no peer (every rank of a host runs as one user) and is not held for a hello.
    if (uid_t uid = 0; addr.ss_family == AF_UNIX && !sameUser(fd, &uid)) {
      COLLIE_WARN(base::kLogNet, "%s: rank %d refused a connection from %s: it runs as user %u, this rank as %u",
                  transport_.c_str(), rank_, l.from.c_str(), static_cast<unsigned>(uid),
                  static_cast<unsigned>(::geteuid()));
      continue;
    }
    l.expires = Clock::now() + kHelloWait;
    if (read(l) == 0) waiting_.push_back(std::move(l));  // its hello may be there already
  }
}

}  // namespace collie::transport::handshake
