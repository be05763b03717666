// shm transport setup.
//
// listen() opens a SOCK_SEQPACKET unix socket in the abstract namespace (no file anywhere, gone when the
// process is); its name travels to every rank in PeerInfo::shmAddr. connect(ctx, peers) then, per peer pair:
//   1. the higher rank connects to the lower rank's socket and sends Hello: the secret, its ranks, its ring
//      geometry, the address and value of a probe word, and over SCM_RIGHTS the fds of the ring it receives
//      on (created and reserved here, on its NUMA node), of its RankControl and of its poller's eventfd;
//   2. the lower rank accepts, checks the secret (a connection that cannot show it is logged and closed),
//      answers with its own Hello and fds, maps the peer's ring and control line, and tries to read the probe
//      word with process_vm_readv (the pid comes from SO_PEERCRED, as seen in this pid namespace). It sends
//      Ack {canReadYou};
//   3. the higher rank does the same on the answer: maps, probes, sends its Ack.
// A rank that can read its peer tells it so; that peer then sends large messages by address (single copy).
// Threads of one process (same pid and process token) read each other with memcpy. Between processes,
// COLLIE_SHM_SINGLE_COPY=1 (the default) uses process_vm_readv only where it is at least half as fast as
// memcpy (measured once per process, crossMemoryPays): in some VMs pinning the peer's pages costs more than
// the copy it saves.
// The socket stays open after the handshake: it is how a rank learns that its peer died (EOF), and it sits in
// the poller's epoll set so that this also ends a sleep. Every wait ends at ctx.timeout with a Timeout naming
// the missing ranks.
#include "transport/shm/shm_transport.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/poller.hpp"
#include "base/socket.hpp"
#include "base/topology.hpp"
#include "transport/shm/shm_connection.hpp"

namespace collie::transport::shm {
namespace {

constexpr uint32_t kMsgMagic = 0x434c5348;  // "CLSH"
constexpr uint32_t kMsgVersion = 1;
enum MsgType : uint32_t { kHello = 1, kAck = 2 };
constexpr int kMaxFds = 3;  // ring, control, eventfd

struct Msg {
  uint32_t magic;
  uint32_t version;
  uint32_t type;
  int32_t fromRank;
  int32_t toRank;
  int32_t pid;  ///< the sender's own view (for messages only)
  uint8_t secret[16];
  uint64_t token;  ///< equal tokens (and pids): the same process
  uint64_t probeAddr;
  uint64_t probeValue;
  uint64_t ringBytes;
  uint32_t slots;
  uint32_t slotBytes;
  uint32_t nfds;
  uint32_t canReadYou;  ///< kAck
};

/// This process: pid, a random token, and the probe word peers try to read. Renewed after fork().
std::atomic<uint64_t> gProbeWord{0};
struct Identity {
  pid_t pid = 0;
  uint64_t token = 0;
};
Identity identity() {
  static std::mutex mu;
  static Identity id;
  std::lock_guard<std::mutex> lock(mu);
  if (id.pid != getpid()) {
    id.pid = getpid();
    uint64_t t = 0;
    if (getrandom(&t, sizeof(t), 0) != sizeof(t)) t = static_cast<uint64_t>(id.pid) * 0x9e3779b97f4a7c15ull;
    id.token = t | 1;  // never 0
    gProbeWord.store(id.token);
  }
  return id;
}

uint64_t netNamespaceId() {
  struct stat st {};
  if (stat("/proc/self/ns/net", &st) != 0) return 0;  // unknown: peers that cannot tell either are assumed alike
  return static_cast<uint64_t>(st.st_ino) ^ (static_cast<uint64_t>(st.st_dev) << 32);
}

socklen_t abstractAddress(const char* name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  size_t len = std::min(std::strlen(name), sizeof(addr->sun_path) - 2);
  std::memcpy(addr->sun_path + 1, name, len);  // sun_path[0] == 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
}

int pollMs(base::Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

void sendMsg(int fd, const Msg& m, const int* fds, int nfds, base::Deadline deadline, int peer) {
  iovec iov{const_cast<Msg*>(&m), sizeof(m)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (nfds > 0) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<size_t>(nfds));
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<size_t>(nfds));
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * static_cast<size_t>(nfds));
  }
  for (;;) {
    ssize_t n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof(m))) return;
    int err = n < 0 ? errno : EIO;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      COLLIE_ENFORCE(Clock::now() < deadline, ErrorCode::Timeout, "shm handshake: timed out sending to rank %d", peer);
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, pollMs(deadline));
      continue;
    }
    COLLIE_FAIL(ErrorCode::RemoteError, "shm handshake: sending to rank %d failed: %s", peer,
                base::errnoString(err).c_str());
  }
}

/// Reads one message. Returns 1 when one was read, 0 when none is there yet, -1 on EOF, error or garbage.
int recvMsg(int fd, Msg* m, std::vector<UniqueFd>* fds) {
  iovec iov{m, sizeof(*m)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->emplace_back(got);  // owned (and closed) whatever happens next
    }
  }
  if (n != static_cast<ssize_t>(sizeof(*m)) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) return -1;
  return 1;
}

bool authentic(const Msg& m, const uint8_t* secret) {
  uint8_t diff = 0;  // no early exit: the time taken says nothing about the secret
  for (size_t i = 0; i < sizeof(m.secret); ++i) diff |= static_cast<uint8_t>(m.secret[i] ^ secret[i]);
  return m.magic == kMsgMagic && m.version == kMsgVersion && diff == 0;
}

bool canRead(pid_t pid, uint64_t addr, uint64_t value) {
  if (pid <= 0) return false;
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{reinterpret_cast<void*>(addr), sizeof(got)};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof(got)) && got == value;
}

pid_t peerPidOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

/// Whether process_vm_readv pays here. It replaces two copies through the ring (sender in, receiver out) with
/// one copy plus pinning the peer's pages, and the pinning costs more than a copy on some machines (0.3 us a
/// page in some VMs, where process_vm_readv moves ~12 GB/s against memcpy's 40+). Measured once per process:
/// 1 MiB of our own memory read with process_vm_readv and copied with memcpy, best of 3 each; it pays when it
/// is at least half as fast as memcpy.
bool crossMemoryPays() {
  static const bool pays = [] {
    constexpr size_t kBytes = 1 << 20;
    std::vector<char> a(kBytes, 1), b(kBytes, 2);
    double cma = 1e9, copy = 1e9;
    for (int i = 0; i < 3; ++i) {
      auto t0 = Clock::now();
      iovec local{b.data(), kBytes}, remote{a.data(), kBytes};
      if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kBytes)) return false;
      auto t1 = Clock::now();
      std::memcpy(b.data(), a.data(), kBytes);
      asm volatile("" ::: "memory");
      auto t2 = Clock::now();
      cma = std::min(cma, std::chrono::duration<double>(t1 - t0).count());
      copy = std::min(copy, std::chrono::duration<double>(t2 - t1).count());
    }
    bool yes = cma <= 2 * copy;
    COLLIE_INFO(base::kLogNet,
                "shm: process_vm_readv moves %.1f GB/s here, memcpy %.1f GB/s: large messages between processes go "
                "%s",
                kBytes / cma / 1e9, kBytes / copy / 1e9, yes ? "in one copy" : "through the slots (two copies)");
    return yes;
  }();
  return pays;
}

uint32_t roundUpPow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

struct ShmTransport::Stashed {
  Msg msg;
  UniqueFd sock;
  std::vector<UniqueFd> fds;
};

ShmTransport::ShmTransport(const ShmOptions& options) : options_(options) {
  int64_t slots = options.slots > 0 ? options.slots : base::params::shmSlots();
  int64_t slotBytes = options.slotBytes > 0 ? options.slotBytes : base::params::shmSlotBytes();
  COLLIE_ARG_CHECK(slots >= 1 && slots <= 4096, "COLLIE_SHM_SLOTS=%lld is not in 1..4096",
                   static_cast<long long>(slots));
  COLLIE_ARG_CHECK(slotBytes >= 64 && slotBytes <= (int64_t{1} << 30), "COLLIE_SHM_SLOT_BYTES=%lld is not in 64..2^30",
                   static_cast<long long>(slotBytes));
  slots_ = roundUpPow2(static_cast<uint32_t>(slots));
  slotBytes_ = static_cast<uint32_t>((slotBytes + 63) / 64 * 64);
  int64_t mode = options.singleCopy >= 0 ? options.singleCopy : base::params::shmSingleCopy();
  COLLIE_ARG_CHECK(mode >= 0 && mode <= 2, "COLLIE_SHM_SINGLE_COPY=%lld is not 0, 1 or 2",
                   static_cast<long long>(mode));
  singleCopy_ = static_cast<int>(mode);
  int64_t minBytes = options.singleCopyMin >= 0 ? options.singleCopyMin : base::params::shmSingleCopyMinBytes();
  COLLIE_ARG_CHECK(minBytes >= 0, "COLLIE_SHM_SINGLE_COPY_MIN_BYTES=%lld is negative",
                   static_cast<long long>(minBytes));
  singleCopyMin_ = static_cast<size_t>(minBytes);
  backing_ = parseBacking(options.backing.empty() ? base::params::shmBacking() : options.backing);
}

ShmTransport::~ShmTransport() {
  if (listenFd_ >= 0) ::close(listenFd_);
}

void ShmTransport::listen(PeerInfo& self) {
  COLLIE_USAGE_CHECK(listenFd_ < 0, "shm transport: listen() called twice");
  Identity id = identity();
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) rnd = id.token ^ reinterpret_cast<uintptr_t>(this);
  std::string name =
      base::format("collie-shm.%d.%016llx", static_cast<int>(id.pid), static_cast<unsigned long long>(rnd));
  static_assert(sizeof(PeerInfo::shmAddr) >= 40);
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  COLLIE_SYSCHECK(fd, "socket(AF_UNIX, SOCK_SEQPACKET)");
  UniqueFd guard(fd);
  sockaddr_un addr;
  socklen_t len = abstractAddress(name.c_str(), &addr);
  COLLIE_SYSCHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), "bind of the shm transport's unix socket");
  COLLIE_SYSCHECK(::listen(fd, 4096), "listen on the shm transport's unix socket");
  listenFd_ = guard.release();
  self.netNs = netNamespaceId();
  std::snprintf(self.shmAddr, sizeof(self.shmAddr), "%s", name.c_str());
  COLLIE_INFO(base::kLogNet, "shm: rank %d listening on @%s", self.rank, name.c_str());
}

bool ShmTransport::canConnect(const PeerInfo& local, const PeerInfo& peer) const {
  return local.shmAddr[0] != 0 && peer.shmAddr[0] != 0 && local.hostHash == peer.hostHash && local.netNs == peer.netNs;
}

std::vector<std::unique_ptr<Connection>> ShmTransport::connect(const CommContext& ctx, const std::vector<int>& peers) {
  COLLIE_USAGE_CHECK(listenFd_ >= 0, "shm transport: connect() before listen()");
  auto timeout = ctx.timeout.count() > 0 ? ctx.timeout : std::chrono::milliseconds(base::params::timeoutMs());
  const base::Deadline deadline = Clock::now() + timeout;
  const char* comm = ctx.name.empty() ? "" : ctx.name.c_str();
  const Identity id = identity();
  const int me = ctx.rank;
  const size_t myRingBytes = ringBytes(slots_, slotBytes_);

  struct PeerState {
    UniqueFd sock;
    UniqueFd ringFd;  // the ring we receive on, for the hello
    Segment ring;
    bool sentHello = false, gotHello = false, gotAck = false;
    bool peerReadsUs = false;
    ShmLink link;
  };
  std::map<int, PeerState> state;
  int others = 0;
  for (int p : peers) {
    COLLIE_ARG_CHECK(p >= 0 && p < ctx.nranks && p < static_cast<int>(ctx.peers.size()),
                     "shm connect%s%s: peer %d out of range (nranks %d)", *comm ? " of " : "", comm, p, ctx.nranks);
    COLLIE_ARG_CHECK(!state.count(p), "shm connect: peer %d listed twice", p);
    state[p];
    if (p != me) ++others;
  }
  state.erase(me);

  SegmentPurpose purpose;
  purpose.rank = me;
  purpose.peers = others;
  purpose.totalBytes = static_cast<size_t>(others) * myRingBytes + (waker_ ? 0 : kControlBytes);
  if (backing_ == Backing::DevShm && others > 0) checkDevShmRoom(purpose);
  if (!waker_ && others > 0) {
    purpose.what = "its control line";
    Segment control;
    controlFd_ = createSegment(backing_, kControlBytes, -1, purpose, &control);
    auto* rc = static_cast<RankControl*>(control.data());
    rc->magic = kControlMagic;
    rc->rank = me;
    waker_ = std::make_shared<ShmWaker>(std::move(control), ctx.poller);
  }
  const int wakeFd = ctx.poller ? ctx.poller->wakeFd() : -1;
  const int node = base::currentNumaNode();

  auto makeRing = [&](int p, PeerState& ps) {
    purpose.what = base::format("the ring from rank %d (%zu bytes)", p, myRingBytes);
    ps.ringFd = createSegment(backing_, myRingBytes, node, purpose, &ps.ring);
    auto* h = static_cast<RingHeader*>(ps.ring.data());
    h->magic = kRingMagic;
    h->version = kLayoutVersion;
    h->slots = slots_;
    h->slotBytes = slotBytes_;
    h->bytes = myRingBytes;
    h->owner = me;
    h->writer = p;
  };
  auto sendHello = [&](int p, PeerState& ps) {
    Msg m{};
    m.magic = kMsgMagic;
    m.version = kMsgVersion;
    m.type = kHello;
    m.fromRank = me;
    m.toRank = p;
    m.pid = static_cast<int32_t>(id.pid);
    std::memcpy(m.secret, ctx.secret, sizeof(m.secret));
    m.token = id.token;
    m.probeAddr = reinterpret_cast<uint64_t>(&gProbeWord);
    m.probeValue = gProbeWord.load();
    m.ringBytes = myRingBytes;
    m.slots = slots_;
    m.slotBytes = slotBytes_;
    int fds[kMaxFds] = {ps.ringFd.get(), controlFd_.get(), wakeFd};
    m.nfds = wakeFd >= 0 ? 3 : 2;
    sendMsg(ps.sock.get(), m, fds, static_cast<int>(m.nfds), deadline, p);
    ps.sentHello = true;
  };
  // Maps what the peer's hello brought, probes its memory and answers with our Ack.
  auto absorbHello = [&](int p, PeerState& ps, const Msg& m, std::vector<UniqueFd>& fds) {
    COLLIE_ENFORCE(m.type == kHello && m.fromRank == p && m.toRank == me && m.nfds >= 2 && fds.size() == m.nfds &&
                       m.slots >= 1 && (m.slots & (m.slots - 1)) == 0 && m.slotBytes % 64 == 0 && m.slotBytes > 0 &&
                       m.ringBytes == ringBytes(m.slots, m.slotBytes),
                   ErrorCode::InternalError, "shm connect of rank %d: rank %d sent a malformed hello", me, p);
    std::string what = base::format("the ring of rank %d", p);
    ps.link.sendRing = mapSegment(fds[0].get(), m.ringBytes, what);
    const auto* h = static_cast<const RingHeader*>(ps.link.sendRing.data());
    COLLIE_ENFORCE(h->magic == kRingMagic && h->version == kLayoutVersion && h->slots == m.slots &&
                       h->slotBytes == m.slotBytes && h->owner == p && h->writer == me,
                   ErrorCode::InternalError, "shm connect of rank %d: %s has a wrong header", me, what.c_str());
    ps.link.peerControl = mapSegment(fds[1].get(), kControlBytes, base::format("the control line of rank %d", p));
    COLLIE_ENFORCE(static_cast<const RankControl*>(ps.link.peerControl.data())->magic == kControlMagic,
                   ErrorCode::InternalError, "shm connect of rank %d: the control line of rank %d is wrong", me, p);
    if (m.nfds >= 3) ps.link.peerWake = std::move(fds[2]);
    ps.link.peerPid = peerPidOf(ps.sock.get());
    ps.link.sameProcess = ps.link.peerPid == id.pid && m.token == id.token && !options_.crossMemoryForThreads;
    bool readable = ps.link.sameProcess;
    if (!readable && singleCopy_ != 0) {
      readable = canRead(ps.link.peerPid, m.probeAddr, m.probeValue);
      if (!readable) {
        COLLIE_INFO(
            base::kLogNet, "shm: rank %d cannot read the memory of rank %d (pid %d): %s; it sends through slots", me, p,
            static_cast<int>(ps.link.peerPid), ps.link.peerPid > 0 ? "process_vm_readv refused" : "pid not visible");
      } else if (singleCopy_ == 1 && !crossMemoryPays()) {
        readable = false;  // allowed, but slower here than the two copies it would save
      }
    }
    ps.gotHello = true;
    Msg ack{};
    ack.magic = kMsgMagic;
    ack.version = kMsgVersion;
    ack.type = kAck;
    ack.fromRank = me;
    ack.toRank = p;
    std::memcpy(ack.secret, ctx.secret, sizeof(ack.secret));
    ack.canReadYou = singleCopy_ != 0 && readable ? 1 : 0;
    sendMsg(ps.sock.get(), ack, nullptr, 0, deadline, p);
  };
  // A verified hello on an accepted socket: false (and a warning) when it is not for this connect.
  auto adopt = [&](UniqueFd& sock, const Msg& m, std::vector<UniqueFd>& fds) {
    auto it = state.find(m.fromRank);
    if (m.type != kHello || m.toRank != me || it == state.end() || m.fromRank <= me || it->second.sock.get() >= 0) {
      COLLIE_WARN(base::kLogNet, "shm: rank %d dropped an unexpected connection (rank %d to %d)", me, m.fromRank,
                  m.toRank);
      return false;
    }
    PeerState& ps = it->second;
    COLLIE_TRACE(base::kLogNet, "shm: rank %d adopts the connection of rank %d", me, m.fromRank);
    ps.sock = std::move(sock);
    makeRing(m.fromRank, ps);
    sendHello(m.fromRank, ps);
    absorbHello(m.fromRank, ps, m, fds);
    return true;
  };

  // Step 1: connect to every lower-ranked peer and say hello.
  for (auto& [p, ps] : state) {
    if (p > me) continue;
    const char* name = ctx.peers[static_cast<size_t>(p)].shmAddr;
    COLLIE_ARG_CHECK(name[0] != 0, "shm connect of rank %d: rank %d does not listen on shm", me, p);
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    COLLIE_SYSCHECK(fd, "socket(AF_UNIX, SOCK_SEQPACKET)");
    ps.sock.reset(fd);
    sockaddr_un addr;
    socklen_t len = abstractAddress(name, &addr);
    for (;;) {
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) break;
      int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN && Clock::now() < deadline) {  // its backlog is full: it is busy accepting
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      COLLIE_FAIL(err == EAGAIN ? ErrorCode::Timeout : ErrorCode::RemoteError,
                  "shm connect of rank %d%s%s: cannot reach rank %d at @%s: %s (did it exit?)", me, *comm ? " in " : "",
                  comm, p, name, base::errnoString(err).c_str());
    }
    makeRing(p, ps);
    sendHello(p, ps);
  }
  for (auto it = stash_.begin(); it != stash_.end();) {
    if (authentic(it->msg, ctx.secret) && state.count(it->msg.fromRank) && it->msg.toRank == me) {
      Stashed s = std::move(*it);
      it = stash_.erase(it);
      adopt(s.sock, s.msg, s.fds);
    } else {
      ++it;
    }
  }

  // Step 2: accept the higher-ranked peers, and read every hello and ack.
  struct Pending {
    UniqueFd sock;
  };
  std::vector<Pending> pending;
  auto missing = [&](bool acceptOnly) {
    std::vector<int> out;
    for (auto& [p, ps] : state)
      if (acceptOnly ? ps.sock.get() < 0 : !(ps.gotHello && ps.gotAck)) out.push_back(p);
    return out;
  };
  while (!missing(false).empty()) {
    if (Clock::now() >= deadline) {
      COLLIE_FAIL(ErrorCode::Timeout,
                  "shm connect of rank %d%s%s: timed out after %lld ms waiting for peer rank(s) %s to finish the "
                  "handshake",
                  me, *comm ? " in " : "", comm, static_cast<long long>(timeout.count()),
                  rankList(missing(false)).c_str());
    }
    std::vector<pollfd> pfds;
    constexpr int kListener = INT_MIN;
    std::vector<int> who;  // kListener, -1 - i: pending[i], else the peer's rank
    if (!missing(true).empty()) {
      pfds.push_back(pollfd{listenFd_, POLLIN, 0});
      who.push_back(kListener);
    }
    for (size_t i = 0; i < pending.size(); ++i) {
      pfds.push_back(pollfd{pending[i].sock.get(), POLLIN, 0});
      who.push_back(-1 - static_cast<int>(i));
    }
    for (auto& [p, ps] : state) {
      if (ps.sock.get() >= 0 && !(ps.gotHello && ps.gotAck)) {
        pfds.push_back(pollfd{ps.sock.get(), POLLIN, 0});
        who.push_back(p);
      }
    }
    int rc = ::poll(pfds.data(), pfds.size(), std::min(pollMs(deadline), 100));
    if (rc < 0 && errno != EINTR) COLLIE_SYSCHECK(rc, "poll");
    if (rc <= 0) continue;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!pfds[k].revents) continue;
      if (who[k] == kListener) {
        for (;;) {
          int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            COLLIE_SYSCHECK(fd, "accept on the shm socket");
          }
          pending.push_back(Pending{UniqueFd(fd)});
        }
      } else if (who[k] < 0) {
        Pending& pe = pending[static_cast<size_t>(-1 - who[k])];
        Msg m{};
        std::vector<UniqueFd> fds;
        int got = recvMsg(pe.sock.get(), &m, &fds);
        if (got == 0) continue;
        UniqueFd sock = std::move(pe.sock);  // removed from pending below
        if (got < 0 || !authentic(m, ctx.secret)) {
          COLLIE_WARN(base::kLogNet, "shm: rank %d refused a local connection: %s", me,
                      got < 0 ? "closed or malformed before its hello" : "wrong magic or secret");
        } else if (!state.count(m.fromRank) && m.type == kHello && m.toRank == me && m.fromRank > me &&
                   m.fromRank < ctx.nranks) {
          stash_.push_back(Stashed{m, std::move(sock), std::move(fds)});  // for a later connect()
        } else {
          adopt(sock, m, fds);
        }
      } else {
        int p = who[k];
        PeerState& ps = state[p];
        Msg m{};
        std::vector<UniqueFd> fds;
        int got = recvMsg(ps.sock.get(), &m, &fds);
        if (got == 0) continue;
        COLLIE_ENFORCE(got > 0, ErrorCode::RemoteError,
                       "shm connect of rank %d%s%s: rank %d closed the connection during the handshake (it may have "
                       "failed during init)",
                       me, *comm ? " in " : "", comm, p);
        COLLIE_ENFORCE(authentic(m, ctx.secret) && m.fromRank == p && m.toRank == me, ErrorCode::InternalError,
                       "shm connect of rank %d: rank %d answered with a wrong magic, secret or rank", me, p);
        COLLIE_TRACE(base::kLogNet, "shm: rank %d got message type %u from rank %d", me, m.type, p);
        if (!ps.gotHello) {
          absorbHello(p, ps, m, fds);
        } else {
          COLLIE_ENFORCE(m.type == kAck && !ps.gotAck, ErrorCode::InternalError,
                         "shm connect of rank %d: unexpected message from rank %d", me, p);
          ps.gotAck = true;
          ps.peerReadsUs = m.canReadYou != 0;
        }
      }
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Pending& pe) { return pe.sock.get() < 0; }),
                  pending.end());
  }
  if (!pending.empty())
    COLLIE_WARN(base::kLogNet, "shm: rank %d dropped %zu silent local connection(s)", me, pending.size());

  std::vector<std::unique_ptr<Connection>> out;
  out.reserve(peers.size());
  int direct = 0;
  for (int p : peers) {
    if (p == me) {
      out.push_back(makeSelfConnection(p));
      continue;
    }
    PeerState& ps = state[p];
    ShmLink link = std::move(ps.link);
    link.rank = me;
    link.peer = p;
    link.recvRing = std::move(ps.ring);
    link.socket = std::move(ps.sock);
    link.peerReadsUs = ps.peerReadsUs && singleCopy_ != 0;
    link.directMinBytes = singleCopyMin_;
    direct += link.peerReadsUs ? 1 : 0;
    out.push_back(std::make_unique<ShmConnection>(std::move(link), waker_));
  }
  COLLIE_INFO(
      base::kLogNet,
      "shm: rank %d%s%s connected to %d peer(s): rings of %u x %u bytes, single copy from %zu bytes to %d of them", me,
      *comm ? " in " : "", comm, others, slots_, slotBytes_, singleCopyMin_, direct);
  return out;
}

}  // namespace collie::transport::shm
