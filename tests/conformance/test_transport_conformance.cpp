// The transport conformance suite: what every transport (tcp, shm, ucx; a new one is one line in kTransports) must do,
// with ranks as threads of this process (and, for a killed peer, a forked process), each with its own Poller and
// CommContext built the way the communicator builds them:
//   - data: many messages in order, 0-byte and 64 MiB transfers, many transfers in flight both ways at once,
//     size mismatches reported;
//   - failure: a peer that closes (after its last data) or is killed gives RemoteError naming it, in time;
//   - handshake: strangers (garbage, silent, hung up, a real transport with the wrong secret) are refused and
//     logged while the real peers connect; missing peers time out naming exactly the missing ranks (never the
//     rank itself); hellos that arrive before their connect() are answered at once by the accept loop and used by
//     the later call (observed through Transport::stashedHellos, no sleeps).
// Transport-specific behaviour (striping, IPv6, single copy, waking, memfd clean-up) is in
// tests/threaded/test_tcp_transport.cpp, tests/threaded/test_shm_transport.cpp and tests/multiproc/.
#include <collie/config.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "base/socket.hpp"
#include "common/sanitizers.hpp"
#include "common/transport_harness.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#if COLLIE_WITH_UCX
#include "transport/ucx/ucx_transport.hpp"
#endif

namespace collie::transport {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using collie::testing::Cluster;
using collie::testing::drive;
using collie::testing::runRanks;
using collie::testing::TransportRank;

/// One transport under test: how to make it and how a stranger reaches its listener.
struct TransportUnderTest {
  const char* name;
  Cluster::Factory make;
  /// A connected socket to where `info`'s transport listens (blocking), as a stranger would dial it.
  int (*dial)(const PeerInfo& info);
  /// Whether a receive that fails on a mismatch, and the receives behind it, leave their buffers as they were. tcp
  /// reads a message's header and payload in one recvmsg, so the sender's bytes may be in them (README, "What collie
  /// cannot detect or survive"; perf/RESULTS.md measures what reading the header first would cost).
  bool mismatchLeavesBuffers = true;
};

/// For gtest's messages: the transport's name, not the struct's bytes.
void PrintTo(const TransportUnderTest& t, std::ostream* os) { *os << t.name; }

int dialTcp(const PeerInfo& info) {
  return base::connectWithRetry(TcpTransport::addressOf(info), SteadyClock::now() + 5s, 10, "the stranger");
}

int dialShm(const PeerInfo& info) {
  std::string name = ShmTransport::addressOf(info);
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr),
                     static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size()));
  EXPECT_EQ(rc, 0) << std::strerror(errno);
  return fd;
}

#if COLLIE_WITH_UCX
int dialUcx(const PeerInfo& info) {
  return base::connectWithRetry(UcxTransport::addressOf(info), SteadyClock::now() + 5s, 10, "the stranger");
}

/// UCX over the transports `tls` names, its handshake on loopback.
std::unique_ptr<Transport> makeUcx(const char* tls) {
  UcxOptions o;
  o.bindAddr = base::parseAddress("127.0.0.1:0");
  o.tls = tls;
  return std::unique_ptr<Transport>(new UcxTransport(o));
}
#endif

TcpOptions loopbackTcp() {
  TcpOptions o;
  o.bindAddr = base::parseAddress("127.0.0.1:0");
  return o;
}

const TransportUnderTest kTransports[] = {
    {"tcp", [] { return std::unique_ptr<Transport>(new TcpTransport(loopbackTcp())); }, dialTcp, false},
    {"tcp_3_sockets_striped",
     [] {
       TcpOptions o = loopbackTcp();
       o.socketsPerPeer = 3;
       o.stripeMinBytes = 4096;
       return std::unique_ptr<Transport>(new TcpTransport(o));
     },
     dialTcp, false},
    {"shm", [] { return std::unique_ptr<Transport>(new ShmTransport()); }, dialShm},
    {"shm_slots_only",
     [] {
       ShmOptions o;
       o.singleCopy = 0;
       return std::unique_ptr<Transport>(new ShmTransport(o));
     },
     dialShm},
#if COLLIE_WITH_UCX
    // UCX (label ucx too): over its tcp transport, and over its shared memory (sm: posix, sysv, cma) with self.
    {"ucx_tcp", [] { return makeUcx("tcp"); }, dialUcx},
    {"ucx_sm", [] { return makeUcx("sm,self"); }, dialUcx},
#endif
};

class Conformance : public ::testing::TestWithParam<TransportUnderTest> {
 protected:
  Cluster make(int n, std::chrono::milliseconds timeout = 20s) { return Cluster(n, GetParam().make, timeout); }
};

/// The part of a timeout message that lists the missing ranks: "rank(s) <list> to".
std::string missingIn(const std::string& message) {
  size_t at = message.find("rank(s) ");
  if (at == std::string::npos) return "<none>";
  size_t end = message.find(" to ", at);
  return message.substr(at + 8, end == std::string::npos ? std::string::npos : end - at - 8);
}

// ---- data --------------------------------------------------------------------------------------------------

TEST_P(Conformance, ManyMessagesArriveInOrder) {
  Cluster cluster = make(2);
  cluster.connectAll();
  constexpr int kCount = 20000;
  runRanks(2, [&](int r) {
    TransportRank& rank = *cluster.ranks[r];
    Connection& conn = *rank.conns[1 - r];
    if (r == 0) {
      // All posted at once.
      std::vector<std::vector<uint8_t>> bufs(kCount);
      std::vector<Transfer> ts(kCount);
      std::vector<Transfer*> all;
      for (int m = 0; m < kCount; ++m) {
        bufs[m].assign(static_cast<size_t>(m % 301), static_cast<uint8_t>(m));
        ts[m] = Transfer{bufs[m].data(), bufs[m].size()};
        conn.postSend(&ts[m]);
        all.push_back(&ts[m]);
      }
      drive(rank, all);
    } else {
      // Posted one at a time, so data often waits before its receive exists.
      std::vector<uint8_t> buf(301);
      for (int m = 0; m < kCount; ++m) {
        Transfer t{buf.data(), static_cast<size_t>(m % 301)};
        conn.postRecv(&t);
        drive(rank, {&t});
        for (int i = 0; i < m % 301; ++i) {
          if (buf[i] != static_cast<uint8_t>(m)) {
            ADD_FAILURE() << "message " << m << " byte " << i;
            return;
          }
        }
      }
    }
  });
}

TEST_P(Conformance, ZeroByteAndLargeTransfers) {
  Cluster cluster = make(2);
  cluster.connectAll();
  // 8 MiB under TSan (still many chunks, stripes and slots; 64 MiB took 17 s per transport there).
  const size_t large = collie::test::kThreadSanitizer ? 8u << 20 : 64u << 20;
  collie::testing::exchange(cluster, {0, large, 0, 1, 0});
}

TEST_P(Conformance, ManyTransfersInFlightBothWays) {
  Cluster cluster = make(3);
  cluster.connectAll();
  std::vector<size_t> sizes;
  for (int i = 0; i < 150; ++i) sizes.push_back(static_cast<size_t>((i * 7919) % 70000));
  collie::testing::exchange(cluster, sizes);
}

/// Whether every byte of `buf` is still `fill`; names the first that is not.
::testing::AssertionResult untouched(const std::vector<uint8_t>& buf, uint8_t fill) {
  for (size_t i = 0; i < buf.size(); ++i)
    if (buf[i] != fill)
      return ::testing::AssertionFailure()
             << "byte " << i << " of " << buf.size() << " was written: " << static_cast<int>(buf[i]) << " where "
             << static_cast<int>(fill) << " was left";
  return ::testing::AssertionSuccess();
}

// Sizes on either side of shm's inline limit (32 bytes travel in the slot header's line, 33 in its payload) and of
// ucx's (4096 bytes travel in the head's UCX message, 4097 in a message of their own; a receive of 20000 expects a
// body that a sender of 100 never sends, so the head must report it), and messages much larger and smaller than
// their receive. Where the transport promises it (all but tcp), neither the mismatched receive's buffer nor that of
// the receive posted after it is written.
TEST_P(Conformance, SizeMismatchIsReported) {
  for (auto [sent, expected] : {std::pair<size_t, size_t>{100, 200},
                                {32, 33},
                                {33, 32},
                                {4096, 4097},
                                {4097, 4096},
                                {100, 20000},
                                {20000, 100},
                                {1 << 20, 4096},
                                {4096, 1 << 20}}) {
    SCOPED_TRACE(std::to_string(sent) + " bytes sent, " + std::to_string(expected) + " expected");
    // Declared before the cluster, which goes first: its connections may still hold the transfers (a large send the
    // sender gave up on, the receive behind the failed one).
    std::vector<uint8_t> a(sent, 0x11), b(expected, 0xEE), a2(64, 0x22), b2(64, 0xEE);
    Transfer send{a.data(), a.size()}, recv{b.data(), b.size()};
    Transfer send2{a2.data(), a2.size()}, recv2{b2.data(), b2.size()};
    Cluster cluster = make(2);
    cluster.connectAll();
    EXPECT_FALSE(cluster.ranks[0]->conns[1]->busy());
    cluster.ranks[0]->conns[1]->postSend(&send);
    EXPECT_EQ(cluster.ranks[0]->conns[1]->busy(), !send.complete);  // shm may send a small message at once
    cluster.ranks[0]->conns[1]->postSend(&send2);
    cluster.ranks[1]->conns[0]->postRecv(&recv);
    cluster.ranks[1]->conns[0]->postRecv(&recv2);
    // The sender meanwhile, as in a real job: a message that fits the pair's buffers is sent at once; one that needs
    // the receiver (a large one; over ucx a rendezvous) waits for a receive that fails, until the sender gives up.
    std::jthread sender([&] {  // joined however this iteration ends
      try {
        drive(*cluster.ranks[0], {&send, &send2}, 1s);
      } catch (const std::exception&) {  // Error, or the harness's timeout: the receiver's error is what is tested
      }
    });
    try {
      drive(*cluster.ranks[1], {&recv}, 10s);
      ADD_FAILURE() << "expected a size mismatch";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InternalError);
      std::string what = e.what();
      EXPECT_NE(what.find("peer 0"), std::string::npos) << what;
      // Over tcp, whose sockets are streams of their own, a receive of the other size class than the sender's may look
      // at a socket where the sender's next message (a2, of the same call) comes first, and name that one's size
      // (seen once in CI under TSan: "expected 20000 got 64").
      const bool namesSent = what.find(std::to_string(sent)) != std::string::npos;
      const bool namesNext =
          !GetParam().mismatchLeavesBuffers && what.find(std::to_string(a2.size())) != std::string::npos;
      EXPECT_TRUE(namesSent || namesNext) << what;
      EXPECT_NE(what.find(std::to_string(expected)), std::string::npos) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected a size mismatch, got: " << e.what();
    }
    sender.join();
    EXPECT_THROW(cluster.ranks[1]->conns[0]->progress(), Error);  // the failure sticks
    EXPECT_FALSE(recv.complete);
    if (GetParam().mismatchLeavesBuffers) {
      EXPECT_TRUE(untouched(b, 0xEE));
      EXPECT_TRUE(untouched(b2, 0xEE));
    }
  }
}

// A message whose call fingerprint differs from the one its receive expects fails the receive with MismatchError
// naming the sender and carrying both fingerprints; the data never counts as received.
TEST_P(Conformance, FingerprintMismatchIsReported) {
  Cluster cluster = make(2);
  cluster.connectAll();
  std::vector<uint8_t> a(100, 1), b(100, 0);
  Transfer send{a.data(), a.size()}, recv{b.data(), b.size()};
  send.fp = Fingerprint{7, 0, 0x1234};
  recv.fp = Fingerprint{7, 0, 0x1235};
  cluster.ranks[0]->conns[1]->postSend(&send);
  cluster.ranks[1]->conns[0]->postRecv(&recv);
  drive(*cluster.ranks[0], {&send});
  try {
    drive(*cluster.ranks[1], {&recv}, 10s);
    FAIL() << "expected a mismatch";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    EXPECT_EQ(e.record().rankA, 0);
    EXPECT_EQ(e.record().rankB, 1);
    EXPECT_EQ(e.record().a, send.fp);
    EXPECT_EQ(e.record().b, recv.fp);
  }
  EXPECT_FALSE(recv.complete);
  if (GetParam().mismatchLeavesBuffers) {
    EXPECT_TRUE(untouched(b, 0));
  }
}

// A post that cannot be taken (a device buffer, a null buffer with bytes, a closed connection) fails before it touches
// the transfer or the connection: the transfer keeps its state and the pair still carries the next message. The self
// connection makes the same checks (transport::checkPosted).
TEST_P(Conformance, APostThatCannotBeTakenFailsBeforeItTouchesAnything) {
  Cluster cluster = make(2);
  cluster.connectAll();
  std::vector<uint8_t> a(64, 3), b(64, 0);
  auto expectRefused = [](Connection& c, Transfer& t, bool send, ErrorCode code, const char* words) {
    t.complete = true;  // a post that went ahead would clear it
    try {
      send ? c.postSend(&t) : c.postRecv(&t);
      ADD_FAILURE() << "a post of " << words << " was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
    EXPECT_TRUE(t.complete) << words;
  };
  std::unique_ptr<Connection> self = makeSelfConnection(0);
  for (Connection* c : {cluster.ranks[0]->conns[1].get(), self.get()}) {
    for (bool send : {true, false}) {
      Transfer device{a.data(), a.size()};
      device.kind = MemoryKind::Device;
      expectRefused(*c, device, send, ErrorCode::InternalError, "device buffer");
      Transfer null{nullptr, 8};
      expectRefused(*c, null, send, ErrorCode::InternalError, "8 bytes at null");
    }
  }
  Transfer send{a.data(), a.size()}, recv{b.data(), b.size()};
  cluster.ranks[0]->conns[1]->postSend(&send);
  cluster.ranks[1]->conns[0]->postRecv(&recv);
  drive(*cluster.ranks[0], {&send});
  drive(*cluster.ranks[1], {&recv});
  EXPECT_EQ(a, b);
  self->close();
  Transfer late{a.data(), a.size()};
  expectRefused(*self, late, true, ErrorCode::InvalidUsage, "posted on the closed self connection");
  cluster.ranks[0]->conns[1]->close();
  expectRefused(*cluster.ranks[0]->conns[1], late, true, ErrorCode::InvalidUsage, "posted on the closed");
  expectRefused(*cluster.ranks[0]->conns[1], late, false, ErrorCode::InvalidUsage, "posted on the closed");
}

// ---- failure -----------------------------------------------------------------------------------------------

// A contract the goodbyes after init rely on (core/release_gather_links.cpp): a connection delivers what the peer sent
// before its close, and only then reports the close.
TEST_P(Conformance, PeerCloseGivesRemoteErrorAfterItsLastData) {
  Cluster cluster = make(2);
  cluster.connectAll();
  TransportRank& r0 = *cluster.ranks[0];
  TransportRank& r1 = *cluster.ranks[1];
  // Rank 1 sends one message, then closes; rank 0 gets that message, then an error for the next one.
  std::vector<uint8_t> out(1000, 7), in(1000), in2(10);
  Transfer send{out.data(), out.size()}, recv{in.data(), in.size()}, recv2{in2.data(), in2.size()};
  r1.conns[0]->postSend(&send);
  drive(r1, {&send});
  r1.conns[0]->close();
  r1.conns[0]->close();  // idempotent
  EXPECT_FALSE(r1.conns[0]->busy());
  EXPECT_THROW(r1.conns[0]->postSend(&send), Error);
  r0.conns[1]->postRecv(&recv);
  r0.conns[1]->postRecv(&recv2);
  auto t0 = SteadyClock::now();
  try {
    drive(r0, {&recv, &recv2}, 10s);
    FAIL() << "expected a RemoteError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::RemoteError);
    EXPECT_NE(std::string(e.what()).find("peer 1 closed the connection"), std::string::npos) << e.what();
  }
  EXPECT_LT(SteadyClock::now() - t0, 1s) << "the close must wake the sleeping peer";
  EXPECT_TRUE(recv.complete);
  EXPECT_EQ(in[999], 7);
  EXPECT_FALSE(recv2.complete);
  EXPECT_THROW(r0.conns[1]->progress(), Error);

  // Sending into a closed peer fails too (and raises no SIGPIPE).
  Cluster again = make(2);
  again.connectAll();
  again.ranks[0]->conns[1]->close();
  std::vector<uint8_t> big(16 << 20);
  Transfer s{big.data(), big.size()};
  again.ranks[1]->conns[0]->postSend(&s);
  try {
    drive(*again.ranks[1], {&s}, 10s);
    FAIL() << "expected a RemoteError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::RemoteError);
    EXPECT_NE(std::string(e.what()).find("peer 0"), std::string::npos) << e.what();
  }
}

// Rank 1 is a forked process, killed with SIGKILL once connected while rank 0 waits on it.
TEST_P(Conformance, KilledPeerProcessGivesRemoteErrorNamingIt) {
  // Each process makes its own rank after the fork, so the fork happens while this process runs no thread of a
  // transport: a child forked while an accept loop runs may inherit its lock held and hang in its first dial.
  // The two ranks trade what they published through pipes.
  static_assert(std::is_trivially_copyable_v<PeerInfo>);
  int toParent[2], toChild[2];
  ASSERT_EQ(::pipe(toParent), 0);
  ASSERT_EQ(::pipe(toChild), 0);
  auto trade = [](int out, int in, int r, PeerInfo mine) {
    std::vector<PeerInfo> infos(2);
    infos[static_cast<size_t>(r)] = mine;
    if (::write(out, &mine, sizeof(mine)) != static_cast<ssize_t>(sizeof(mine))) return std::vector<PeerInfo>{};
    if (::read(in, &infos[static_cast<size_t>(1 - r)], sizeof(PeerInfo)) != static_cast<ssize_t>(sizeof(PeerInfo)))
      return std::vector<PeerInfo>{};
    return infos;
  };
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(toParent[0]);
    ::close(toChild[1]);
    int code = 0;
    try {
      TransportRank r1;
      std::vector<PeerInfo> infos = trade(toParent[1], toChild[0], 1, r1.listenAs(1, GetParam().make));
      if (infos.empty()) ::_exit(3);
      r1.setContext(1, infos, 10s);
      auto conns = r1.transport->connect(r1.ctx, {0});
      char c = 1;
      if (::write(toParent[1], &c, 1) != 1) code = 2;
      std::vector<uint8_t> buf(100);
      Transfer t{buf.data(), buf.size()};  // never sent: waits for its death
      conns[0]->postRecv(&t);
      for (;;) conns[0]->progress(), ::usleep(1000);
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  ::close(toParent[1]);
  ::close(toChild[0]);
  TransportRank r0;
  std::vector<PeerInfo> infos = trade(toChild[1], toParent[0], 0, r0.listenAs(0, GetParam().make));
  ASSERT_EQ(infos.size(), 2u);
  r0.setContext(0, infos, 10s);
  r0.conns = r0.transport->connect(r0.ctx, {1});
  r0.conns.insert(r0.conns.begin(), nullptr);  // indexed by peer rank
  char c = 0;
  ASSERT_EQ(::read(toParent[0], &c, 1), 1);
  ::close(toParent[0]);
  ::close(toChild[1]);
  std::vector<uint8_t> buf(100);
  Transfer t{buf.data(), buf.size()};
  r0.conns[1]->postRecv(&t);
  EXPECT_FALSE(r0.conns[1]->progress());
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  auto t0 = SteadyClock::now();
  try {
    drive(r0, {&t}, 10s);
    FAIL() << "expected a RemoteError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::RemoteError);
    EXPECT_NE(std::string(e.what()).find("peer 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(SteadyClock::now() - t0, 3s);
}

// ---- handshake ---------------------------------------------------------------------------------------------

TEST_P(Conformance, StrangersAreRefusedWhileTheRealPeersConnect) {
  Cluster cluster = make(3);
  const PeerInfo& target = cluster.ranks[0]->ctx.peers[0];
  // Strangers in rank 0's backlog before anyone connects: garbage, silence, one that hangs up. (A transport that
  // dials any time refuses them at once, from its accept loop: the log is captured from here.)
  ::testing::internal::CaptureStderr();
  int garbage = GetParam().dial(target);
  std::vector<uint8_t> junk(120, 0x41);
  EXPECT_EQ(::send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  int silent = GetParam().dial(target);
  ::close(GetParam().dial(target));

  // An impostor: a real transport of the same kind that says it is rank 1 but has the wrong secret. Rank 2 only
  // starts once the impostor gave up, so rank 0 is still connecting when it refuses it. (A transport that dials any
  // time holds a hello no communicator takes for kHelloWait, for a communicator not made yet, and its dialler
  // tries again until its timeout.)
  base::Poller ipoller;  // declared first: it must outlive the impostor's transport (a UCX worker detaches from it)
  std::unique_ptr<Transport> impostor = GetParam().make();
  PeerInfo impostorInfo;
  impostorInfo.rank = 1;
  impostorInfo.hostHash = 42;
  impostor->listen(impostorInfo);
  CommContext ictx = cluster.ranks[1]->ctx;
  ictx.peers[1] = impostorInfo;
  ictx.secret[5] ^= 0x10;
  ictx.timeout = 3s;
  ictx.poller = &ipoller;
  std::string impostorError;
  std::atomic<bool> impostorDone{false};

  runRanks(4, [&](int r) {
    if (r < 2) {
      cluster.connectRank(r);
    } else if (r == 2) {
      // Only after the impostor was turned away: rank 0 waits for rank 2, so it was still accepting then.
      while (!impostorDone.load()) std::this_thread::yield();
      cluster.connectRank(2);
    } else {
      try {
        impostor->connect(ictx, {0});
        impostorError = "connected";
      } catch (const Error& e) {
        impostorError = e.what();
      }
      impostorDone.store(true);
    }
  });
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(impostorError, "connected");
  EXPECT_TRUE(impostorError.find("rank 0") != std::string::npos || missingIn(impostorError) == "0") << impostorError;
  EXPECT_NE(log.find("refused a connection from"), std::string::npos) << log;
  EXPECT_NE(log.find("wrong magic or secret"), std::string::npos) << log;
  EXPECT_NE(log.find("closed or malformed before its hello"), std::string::npos) << log;
  // Rank 0 closed the refused connection (EOF, or a reset when it left our bytes unread).
  timeval tv{5, 0};
  ::setsockopt(garbage, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  ssize_t got = ::recv(garbage, &c, 1, 0);
  int err = errno;
  EXPECT_TRUE(got == 0 || (got < 0 && err != EAGAIN && err != EWOULDBLOCK)) << got << " " << std::strerror(err);
  ::close(garbage);
  ::close(silent);
  collie::testing::exchange(cluster, {1, 4097, 1u << 20});
}

TEST_P(Conformance, WrongSecretFromARealPeerFailsThatPeer) {
  Cluster cluster = make(2, 1s);
  cluster.ranks[1]->ctx.secret[3] ^= 1;
  std::string messages[2];
  ErrorCode codes[2] = {ErrorCode::Success, ErrorCode::Success};
  runRanks(2, [&](int r) {
    try {
      cluster.connectRank(r);
    } catch (const Error& e) {
      codes[r] = e.code();
      messages[r] = e.what();
    }
  });
  EXPECT_EQ(codes[0], ErrorCode::Timeout) << messages[0];
  EXPECT_EQ(missingIn(messages[0]), "1") << messages[0];
  EXPECT_NE(codes[1], ErrorCode::Success);
}

TEST_P(Conformance, TimeoutsNameExactlyTheMissingRanks) {
  // Rank 0 waits for ranks 1 and 2 to connect; neither does.
  {
    Cluster cluster = make(3, 300ms);
    auto start = SteadyClock::now();
    try {
      cluster.connectTo(0, {0, 1, 2});
      FAIL() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Timeout);
      EXPECT_EQ(missingIn(e.what()), "1, 2") << e.what();
      EXPECT_NE(std::string(e.what()).find("300 ms"), std::string::npos) << e.what();
    }
    auto took = SteadyClock::now() - start;
    EXPECT_GE(took, 290ms);
    EXPECT_LT(took, 2s);
  }
  // Rank 1 reaches rank 0's listener (the kernel accepts) but rank 0 never answers.
  {
    Cluster cluster = make(2, 300ms);
    auto start = SteadyClock::now();
    try {
      cluster.connectTo(1, {0});
      FAIL() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Timeout);
      EXPECT_EQ(missingIn(e.what()), "0") << e.what();
    }
    EXPECT_LT(SteadyClock::now() - start, 2s);
  }
  // Four ranks, rank 3 never shows: ranks 0-2 all fail naming rank 3 only (each other did connect, within the 2 s
  // that a loaded machine under a sanitizer may need for its three threads to get there).
  {
    Cluster cluster = make(4, 2s);
    std::string messages[3];
    runRanks(3, [&](int r) {
      try {
        cluster.connectRank(r);
      } catch (const Error& e) {
        messages[r] = e.what();
      }
    });
    for (int r = 0; r < 3; ++r) EXPECT_EQ(missingIn(messages[r]), "3") << "rank " << r << ": " << messages[r];
  }
}

// Rank 2's hello reaches rank 0 while rank 0 connects to rank 1 only: rank 0 answers it at once from its accept loop,
// and its second connect() uses that. Rank 1 starts only once rank 0 has counted
// the hello, so the order is forced without sleeping.
TEST_P(Conformance, EarlyHellosAreKeptForTheNextConnect) {
  Cluster cluster = make(3);
  Transport& t0 = *cluster.ranks[0]->transport;
  EXPECT_EQ(t0.stashedHellos(), 0u);
  runRanks(3, [&](int r) {
    if (r == 0) {
      cluster.connectTo(0, {1});
      cluster.connectTo(0, {2});
    } else if (r == 1) {
      auto until = SteadyClock::now() + 15s;
      while (t0.stashedHellos() == 0 && SteadyClock::now() < until) std::this_thread::yield();
      if (t0.stashedHellos() == 0) throw std::runtime_error("rank 0 never kept rank 2's hello");
      cluster.connectTo(1, {0});
      cluster.connectTo(1, {2});
    } else {
      cluster.connectTo(2, {0});
      cluster.connectTo(2, {1});
    }
  });
  EXPECT_GE(t0.stashedHellos(), 1u);
  collie::testing::exchange(cluster, {1, 70000});
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance, ::testing::ValuesIn(kTransports),
                         [](const ::testing::TestParamInfo<TransportUnderTest>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace collie::transport
