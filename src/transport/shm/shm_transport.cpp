// shm transport setup.
//
// listen() opens a SOCK_SEQPACKET unix socket in the abstract namespace (no file anywhere, gone when the
// process is); its name travels to every rank in the PeerInfo (an opaque TransportAddress of kind Shm), and the
// process's accept loop serves it (accept_loop.hpp). A pair is connected by one rank's dial (dialer.hpp: who
// dials, both at once, retries) and the common handshake:
//   1. the dialler connects to the peer's socket and sends Hello: the common header (ranks, secret), its ring
//      geometry, the address and value of a probe word, and over SCM_RIGHTS the fds of the ring it receives on
//      (created and reserved here, on its NUMA node), of its RankControl and of its poller's eventfd;
//   2. the peer's accept loop checks it (strangers are logged and closed), answers with its own Hello and fds,
//      maps the dialler's ring and control line, and tries to read the probe word with process_vm_readv (the pid
//      comes from SO_PEERCRED, as seen in this pid namespace). It sends Ack {canReadYou};
//   3. the dialler does the same on the answer: maps, probes, sends its Ack; the answering side reads that Ack
//      when it takes the connection (finish).
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
#include "base/fd_limits.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/poller.hpp"
#include "base/socket.hpp"
#include "base/topology.hpp"
#include "transport/shm/shm_connection.hpp"
#include "transport/shm/shm_hello.hpp"

namespace collie::transport::shm {
namespace {

using handshake::Link;

/// Handshake messages on the SOCK_SEQPACKET socket: one Msg per packet, with its fds.
class SeqpacketWire : public handshake::Wire {
 public:
  size_t messageBytes() const override { return sizeof(Msg); }
  int read(Link& link) override;
};

/// What a rank publishes of its shm socket: the two numbers of its name, 12 bytes, rather than the name (33).
struct ShmAddress {
  int32_t pid = 0;
  uint64_t token = 0;  ///< random, so that a name is not reused by the next process with that pid
} __attribute__((packed));
static_assert(sizeof(ShmAddress) == 12 && sizeof(ShmAddress) <= TransportAddress::kBytes);

std::string shmSocketName(const ShmAddress& a) {
  return base::format("collie-shm.%d.%016llx", static_cast<int>(a.pid), static_cast<unsigned long long>(a.token));
}

/// The name of a PeerInfo's shm socket ("" when it published none).
std::string shmAddressOf(const PeerInfo& info) {
  const TransportAddress* a = info.address(TransportKind::Shm);
  if (!a || a->length != sizeof(ShmAddress)) return std::string();
  ShmAddress packed;
  std::memcpy(&packed, a->bytes, sizeof(packed));
  return shmSocketName(packed);
}

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

socklen_t abstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  size_t len = std::min(name.size(), sizeof(addr->sun_path) - 2);
  std::memcpy(addr->sun_path + 1, name.data(), len);  // sun_path[0] == 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
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
      ::poll(&p, 1, handshake::pollMs(deadline));
      continue;
    }
    COLLIE_FAIL(ErrorCode::RemoteError, "shm handshake: sending to rank %d failed: %s", peer,
                base::errnoString(err).c_str());
  }
}

int SeqpacketWire::read(Link& link) {
  link.buf.resize(sizeof(Msg));
  iovec iov{link.buf.data(), sizeof(Msg)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(link.fd.get(), &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  link.fds.clear();
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      link.fds.emplace_back(got);  // owned (and closed) whatever happens next
    }
  }
  if (link.fds.size() > kMaxFds) return -1;  // the control buffer holds one more (CMSG_SPACE rounds up): garbage
  if ((mh.msg_flags & MSG_CTRUNC) && n == static_cast<ssize_t>(sizeof(Msg))) {
    // Fewer descriptors than the message announces (and no more than fit): the kernel could not install them
    // here, which at our descriptor limit is the cause, not the peer.
    const uint32_t announced = reinterpret_cast<const Msg*>(link.buf.data())->nfds;
    if (announced <= kMaxFds && link.fds.size() < announced) {
      link.got = sizeof(Msg);  // the message itself is whole: the listener can tell whose hello it lost
      base::noteFdShortage(EMFILE);
      COLLIE_FAIL(ErrorCode::SystemError, "shm handshake: %u descriptor(s) from %s could not be received: %s",
                  announced, link.from.c_str(), base::fdShortageMessage(EMFILE).c_str());
    }
  }
  if (n != static_cast<ssize_t>(sizeof(Msg)) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) return -1;
  link.got = sizeof(Msg);
  return 1;
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
  wire_ = std::make_unique<SeqpacketWire>();
  handshake::DialProtocol& protocol = *this;
  dialer_ = std::make_unique<handshake::Dialer>("shm", TransportKind::Shm, 1, protocol, *wire_);
}

/// One side of one pair's handshake: the ring this rank receives on, and what the peer's hello brought.
struct ShmTransport::PairSetup {
  UniqueFd ringFd;  // the ring we receive on, for the hello
  Segment ring;
  bool gotHello = false, gotAck = false;
  bool peerReadsUs = false;
  ShmLink shm;
};

ShmTransport::~ShmTransport() { dialer_.reset(); }  // no answer may run on what goes next

void ShmTransport::listen(PeerInfo& self) {
  COLLIE_USAGE_CHECK(listener_ == nullptr, "shm transport: listen() called twice");
  Identity id = identity();
  ShmAddress published;
  published.pid = id.pid;
  if (getrandom(&published.token, sizeof(published.token), 0) != sizeof(published.token))
    published.token = id.token ^ reinterpret_cast<uintptr_t>(this);
  const std::string name = shmSocketName(published);
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  COLLIE_SYSCHECK(fd, "socket(AF_UNIX, SOCK_SEQPACKET)");
  UniqueFd guard(fd);
  sockaddr_un addr;
  socklen_t len = abstractAddress(name.c_str(), &addr);
  COLLIE_SYSCHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), "bind of the shm transport's unix socket");
  COLLIE_SYSCHECK(::listen(fd, 4096), "listen on the shm transport's unix socket");
  listener_ =
      std::make_shared<handshake::Listener>(std::move(guard), std::make_unique<SeqpacketWire>(), "shm", self.rank);
  self.netNs = networkNamespaceId();
  self.setAddress(TransportKind::Shm, &published, sizeof(published));
  COLLIE_INFO(base::kLogNet, "shm: rank %d listening on @%s", self.rank, name.c_str());
}

std::string ShmTransport::addressOf(const PeerInfo& info) { return shmAddressOf(info); }

std::unique_ptr<Transport> ShmTransport::shareListener() const {
  COLLIE_USAGE_CHECK(listener_ != nullptr, "shm transport: shareListener() before listen()");
  auto copy = std::make_unique<ShmTransport>(options_);
  copy->listener_ = listener_;
  return copy;
}

bool ShmTransport::canConnect(const PeerInfo& local, const PeerInfo& peer) const {
  return local.address(TransportKind::Shm) && peer.address(TransportKind::Shm) && local.hostHash == peer.hostHash &&
         local.netNs == peer.netNs;
}

void ShmTransport::makeControl(const CommContext& ctx) {
  if (waker_) return;
  SegmentPurpose purpose;
  purpose.rank = ctx.rank;
  purpose.peers = 1;
  purpose.totalBytes = kControlBytes;
  purpose.what = "its control line";
  Segment control;
  controlFd_ = createSegment(backing_, kControlBytes, -1, purpose, &control);
  auto* rc = static_cast<RankControl*>(control.data());
  rc->magic = kControlMagic;
  rc->rank = ctx.rank;
  waker_ = std::make_shared<ShmWaker>(std::move(control), ctx.poller);
}

void ShmTransport::makeRing(const CommContext& ctx, int p, PairSetup& ps) {
  const size_t bytes = ringBytes(slots_, slotBytes_);
  SegmentPurpose purpose;
  purpose.rank = ctx.rank;
  purpose.peers = 1;
  purpose.totalBytes = bytes;
  purpose.what = base::format("the ring from rank %d (%zu bytes)", p, bytes);
  if (backing_ == Backing::DevShm) checkDevShmRoom(purpose);
  ps.ringFd = createSegment(backing_, bytes, base::currentNumaNode(), purpose, &ps.ring);
  auto* h = static_cast<RingHeader*>(ps.ring.data());
  h->magic = kRingMagic;
  h->version = kLayoutVersion;
  h->slots = slots_;
  h->slotBytes = slotBytes_;
  h->bytes = bytes;
  h->owner = ctx.rank;
  h->writer = p;
}

void ShmTransport::sendOurHello(handshake::Handshake& hs, int p, PairSetup& ps, int fd) {
  const Identity id = identity();
  const int wakeFd = hs.context().poller ? hs.context().poller->wakeFd() : -1;
  Msg m{};
  m.header = hs.header(kHello, p, 0);
  m.pid = static_cast<int32_t>(id.pid);
  m.token = id.token;
  m.probeAddr = reinterpret_cast<uint64_t>(&gProbeWord);
  m.probeValue = gProbeWord.load();
  m.ringBytes = ringBytes(slots_, slotBytes_);
  m.slots = slots_;
  m.slotBytes = slotBytes_;
  int control;
  {
    std::lock_guard<std::mutex> lock(mu_);
    makeControl(hs.context());
    control = controlFd_.get();
  }
  int fds[kMaxFds] = {ps.ringFd.get(), control, wakeFd};
  m.nfds = wakeFd >= 0 ? 3 : 2;
  sendMsg(fd, m, fds, static_cast<int>(m.nfds), hs.deadline(), p);
}

void ShmTransport::absorbHello(handshake::Handshake& hs, int p, PairSetup& ps, int fd, const Msg& m,
                               std::vector<UniqueFd>& fds) {
  const int me = hs.rank();
  const Identity id = identity();
  checkHello(m, fds.size(), me, p);
  std::string what = base::format("the ring of rank %d", p);
  ps.shm.sendRing = mapSegment(fds[0].get(), m.ringBytes, what);
  const auto* h = static_cast<const RingHeader*>(ps.shm.sendRing.data());
  COLLIE_ENFORCE(h->magic == kRingMagic && h->version == kLayoutVersion && h->slots == m.slots &&
                     h->slotBytes == m.slotBytes && h->owner == p && h->writer == me,
                 ErrorCode::InternalError, "shm connect of rank %d: %s has a wrong header", me, what.c_str());
  ps.shm.peerControl = mapSegment(fds[1].get(), kControlBytes, base::format("the control line of rank %d", p));
  COLLIE_ENFORCE(static_cast<const RankControl*>(ps.shm.peerControl.data())->magic == kControlMagic,
                 ErrorCode::InternalError, "shm connect of rank %d: the control line of rank %d is wrong", me, p);
  if (m.nfds >= 3) ps.shm.peerWake = std::move(fds[2]);
  ps.shm.peerPid = peerPidOf(fd);
  ps.shm.sameProcess = ps.shm.peerPid == id.pid && m.token == id.token && !options_.crossMemoryForThreads;
  bool readable = ps.shm.sameProcess;
  if (!readable && singleCopy_ != 0) {
    readable = canRead(ps.shm.peerPid, m.probeAddr, m.probeValue);
    if (!readable) {
      COLLIE_INFO(base::kLogNet, "shm: rank %d cannot read the memory of rank %d (pid %d): %s; it sends through slots",
                  me, p, static_cast<int>(ps.shm.peerPid),
                  ps.shm.peerPid > 0 ? "process_vm_readv refused" : "pid not visible");
    } else if (singleCopy_ == 1 && !crossMemoryPays()) {
      readable = false;  // allowed, but slower here than the two copies it would save
    }
  }
  ps.gotHello = true;
  Msg ack{};
  ack.header = hs.header(kAck, p, 0);
  ack.canReadYou = singleCopy_ != 0 && readable ? 1 : 0;
  sendMsg(fd, ack, nullptr, 0, hs.deadline(), p);
}

UniqueFd ShmTransport::dialSocket(handshake::Handshake& hs, int p, int /*channel*/) {
  const int me = hs.rank();
  const base::Deadline deadline = hs.deadline();
  const std::string name = shmAddressOf(hs.context().peers[static_cast<size_t>(p)]);
  COLLIE_ARG_CHECK(!name.empty(), "shm connect of rank %d: rank %d does not listen on shm", me, p);
  int fd;
  base::FdShortageBackoff shortage;
  while ((fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 && base::isFdShortage(errno))
    shortage.wait(errno, "socket(AF_UNIX, SOCK_SEQPACKET)", deadline);
  COLLIE_SYSCHECK(fd, "socket(AF_UNIX, SOCK_SEQPACKET)");
  UniqueFd out(fd);
  sockaddr_un addr;
  socklen_t len = abstractAddress(name, &addr);
  for (;;) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) break;
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN && Clock::now() < deadline) {  // its backlog is full: it is busy accepting
      hs.checkWaiting({p});
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    COLLIE_FAIL(err == EAGAIN ? ErrorCode::Timeout : ErrorCode::RemoteError,
                "shm connect of rank %d%s: cannot reach rank %d at @%s: %s (did it exit?)", me, hs.where().c_str(), p,
                name.c_str(), base::errnoString(err).c_str());
  }
  return out;
}

void ShmTransport::sendHello(handshake::Handshake& hs, handshake::Link& link) {
  const int p = link.peer;
  link.from = "@" + shmAddressOf(hs.context().peers[static_cast<size_t>(p)]);
  std::unique_ptr<PairSetup>& ps = dialing_[p];
  if (!ps) {
    ps = std::make_unique<PairSetup>();
    makeRing(hs.context(), p, *ps);
  }
  sendOurHello(hs, p, *ps, link.fd.get());
}

void ShmTransport::onAnswer(handshake::Handshake& hs, handshake::Link& link) {
  PairSetup& ps = *dialing_.at(link.peer);
  const Msg& m = link.as<Msg>();
  COLLIE_TRACE(base::kLogNet, "shm: rank %d got message type %u from rank %d", hs.rank(), m.header.type, link.peer);
  if (!ps.gotHello) {
    absorbHello(hs, link.peer, ps, link.fd.get(), m, link.fds);
  } else {
    COLLIE_ENFORCE(m.header.type == kAck && !ps.gotAck, ErrorCode::InternalError,
                   "shm connect of rank %d: unexpected message from rank %d", hs.rank(), link.peer);
    ps.gotAck = true;
    ps.peerReadsUs = m.canReadYou != 0;
  }
  link.done = ps.gotHello && ps.gotAck;
}

// On the accept loop's thread.
void ShmTransport::answer(handshake::Handshake& hs, handshake::Link& link) {
  const int p = link.peer;
  auto ps = std::make_unique<PairSetup>();
  const Msg m = link.as<Msg>();
  std::vector<UniqueFd> fds = std::move(link.fds);
  COLLIE_TRACE(base::kLogNet, "shm: rank %d answers the dial of rank %d", hs.rank(), p);
  makeRing(hs.context(), p, *ps);
  sendOurHello(hs, p, *ps, link.fd.get());
  absorbHello(hs, p, *ps, link.fd.get(), m, fds);
  link.clearMessage();
  std::lock_guard<std::mutex> lock(mu_);
  answering_[p] = std::move(ps);
}

void ShmTransport::forget(int peer) { dialing_.erase(peer); }

std::unique_ptr<Connection> ShmTransport::finish(handshake::Handshake& hs, int p, std::vector<handshake::Link>& links,
                                                 bool dialled) {
  std::unique_ptr<PairSetup> ps;
  if (dialled) {
    ps = std::move(dialing_.at(p));
    dialing_.erase(p);
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = answering_.find(p);
      COLLIE_INTERNAL_CHECK(it != answering_.end(), "shm connect of rank %d: no answered dial of rank %d", hs.rank(),
                            p);
      ps = std::move(it->second);
      answering_.erase(it);
    }
    // The dialler's Ack, sent as soon as it read our hello.
    handshake::Link& l = links[0];
    l.done = false;
    l.clearMessage();
    hs.await({&l}, [&](handshake::Link& got) {
      const Msg& m = got.as<Msg>();
      COLLIE_ENFORCE(m.header.type == kAck, ErrorCode::InternalError,
                     "shm connect of rank %d: unexpected message from rank %d", hs.rank(), p);
      ps->gotAck = true;
      ps->peerReadsUs = m.canReadYou != 0;
      got.done = true;
    });
  }
  return makeConnection(hs.rank(), p, *ps, std::move(links[0].fd));
}

std::unique_ptr<Connection> ShmTransport::makeConnection(int me, int p, PairSetup& ps, UniqueFd socket) {
  ShmLink link = std::move(ps.shm);
  link.rank = me;
  link.peer = p;
  link.recvRing = std::move(ps.ring);
  link.socket = std::move(socket);
  link.peerReadsUs = ps.peerReadsUs && singleCopy_ != 0;
  link.directMinBytes = singleCopyMin_;
  std::shared_ptr<ShmWaker> waker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waker = waker_;
  }
  COLLIE_INFO(base::kLogNet, "shm: rank %d connected to rank %d: rings of %u x %u bytes, single copy from %zu bytes%s",
              me, p, slots_, slotBytes_, singleCopyMin_, link.peerReadsUs ? "" : " (not to this peer)");
  return std::make_unique<ShmConnection>(std::move(link), waker);
}

}  // namespace collie::transport::shm
