// Strangers at the doors a job listens on: the bootstrap root and each rank's transport listeners (tcp, shm). Each
// kind of stranger (silent, garbage, a well-formed hello with the wrong secret), one alone and 200 at once, is let
// in before the job starts; the test then times a real init (or connect) with the strangers in the backlog against
// one without, in the same test, and requires that it succeeds, that the strangers cost less than kMaxDelay, that
// every stranger is closed and logged, and that the connections work (data checked element by element). Also: a
// connection that never speaks is closed after kHelloWait while the root or a rank still waits for the job; the
// root's listener is closed once the table is sent, the transports' with their communicator.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.hpp"
#include "common/bodies.hpp"
#include "common/descriptors.hpp"
#include "common/launcher.hpp"
#include "common/transport_harness.hpp"
#include "core/bootstrap.hpp"
#include "core/bootstrap_wire.hpp"
#include "transport/handshake.hpp"
#include "transport/shm/shm_hello.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_hello.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using transport::PeerInfo;

constexpr double kMaxDelay = 1.0;  // seconds a flood may add to an init
constexpr size_t kTcpHelloBytes = sizeof(transport::tcp::Hello);
constexpr size_t kShmMsgBytes = sizeof(transport::shm::Msg);

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

enum class Kind { Silent, Garbage, WrongSecret };
enum class Door { Root, Tcp, Shm };

struct Case {
  Door door;
  Kind kind;
  int count;
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  const char* door[] = {"Root", "Tcp", "Shm"};
  const char* kind[] = {"Silent", "Garbage", "WrongSecret"};
  return std::string(door[static_cast<int>(info.param.door)]) + kind[static_cast<int>(info.param.kind)] + "x" +
         std::to_string(info.param.count);
}

int dialTcp(const sockaddr_storage& addr) {
  int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), base::addressLength(addr)), 0)
      << std::strerror(errno);
  return fd;
}

int dialShm(const std::string& name) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())),
            0)
      << std::strerror(errno);
  return fd;
}

/// What a stranger of `kind` sends first at `door` (nothing when silent). A wrong-secret stranger sends a hello that
/// is right in every other field and size.
std::vector<uint8_t> strangerBytes(Door door, Kind kind, int toRank) {
  if (kind == Kind::Silent) return {};
  if (kind == Kind::Garbage) {
    const size_t bytes = door == Door::Root ? core::kBootstrapHelloBytes : door == Door::Tcp ? kTcpHelloBytes : 40;
    return std::vector<uint8_t>(bytes, 0x41);  // shm: a packet of the wrong size
  }
  if (door == Door::Root) {
    core::BootstrapHello hello;
    hello.secret.fill(0x42);
    hello.rank = 0;
    hello.nranks = 3;
    hello.info.rank = 0;
    return core::encodeBootstrapHello(hello);
  }
  transport::handshake::Header h{};
  h.magic = transport::handshake::kMagic;
  h.version = transport::handshake::kVersion;
  h.kind = static_cast<uint16_t>(door == Door::Tcp ? transport::TransportKind::Tcp : transport::TransportKind::Shm);
  h.type = 1;  // hello, in both transports
  h.fromRank = 2;
  h.toRank = toRank;
  std::memset(h.secret, 0x42, sizeof(h.secret));
  std::vector<uint8_t> bytes(door == Door::Tcp ? kTcpHelloBytes : kShmMsgBytes, 0);
  std::memcpy(bytes.data(), &h, sizeof(h));
  return bytes;
}

/// The strangers' connections, closed at the end.
struct Strangers {
  std::vector<int> fds;
  ~Strangers() {
    for (int fd : fds) ::close(fd);
  }
  /// Opens `count` connections with `dial` and sends each `bytes`.
  void open(int count, const std::function<int()>& dial, const std::vector<uint8_t>& bytes) {
    for (int i = 0; i < count; ++i) {
      int fd = dial();
      if (fd < 0) return;
      fds.push_back(fd);
      if (!bytes.empty()) {
        EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
      }
    }
  }
  /// How many were closed by the other side (EOF or reset) within `wait`.
  int closedWithin(std::chrono::milliseconds wait) {
    int closed = 0;
    auto deadline = Clock::now() + wait;
    for (int fd : fds) {
      for (;;) {
        pollfd p{fd, POLLIN, 0};
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) break;
        char c;
        ssize_t got = ::recv(fd, &c, 1, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          ++closed;
          break;
        }
      }
    }
    return closed;
  }
};

/// The log line each kind leaves at each door.
const char* expectedLog(Door door, Kind kind) {
  if (door == Door::Root) {
    if (kind == Kind::WrongSecret) return "did not present the secret";
    if (kind == Kind::Garbage) return "bootstrap hello has a bad magic";
    return "that sent no hello";
  }
  if (kind == Kind::WrongSecret) return "wrong magic or secret";
  if (kind == Kind::Garbage) return door == Door::Tcp ? "refused a connection from" : "closed or malformed";
  return "no hello within";  // the accept loop closes a silent one after kHelloWait
}

class StrangerFlood : public ::testing::TestWithParam<Case> {};

// ---- the bootstrap root ------------------------------------------------------------------------------------------

double timeInit(const UniqueId& id, int n, std::vector<std::unique_ptr<Communicator>>& comms) {
  comms.clear();
  comms.resize(static_cast<size_t>(n));
  Options o;
  o.timeout = 30s;
  o.name = "strangers";
  std::vector<std::thread> threads;
  auto t0 = Clock::now();
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        comms[static_cast<size_t>(r)] = Communicator::create(n, id, r, o);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << " init failed: " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return secondsSince(t0);
}

void floodTheRoot(Kind kind, int count) {
  constexpr int n = 3;
  std::vector<std::unique_ptr<Communicator>> comms;
  const double quiet = timeInit(UniqueId::create(), n, comms);
  comms.clear();

  UniqueId id = UniqueId::create();
  const sockaddr_storage root = core::decodeUniqueId(id.raw).root;
  Strangers strangers;
  ::testing::internal::CaptureStderr();
  strangers.open(
      count, [&] { return dialTcp(root); }, strangerBytes(Door::Root, kind, 0));
  const double flooded = timeInit(id, n, comms);
  const int closed = strangers.closedWithin(5s);
  std::string log = ::testing::internal::GetCapturedStderr();
  std::printf("root, %d %s stranger(s): init %.3f s without, %.3f s with\n", count,
              kind == Kind::Silent    ? "silent"
              : kind == Kind::Garbage ? "garbage"
                                      : "wrong-secret",
              quiet, flooded);
  EXPECT_LT(flooded - quiet, kMaxDelay) << "without strangers " << quiet << " s, with " << flooded << " s";
  EXPECT_EQ(closed, count) << "the root kept strangers' connections open";
  EXPECT_NE(log.find(expectedLog(Door::Root, kind)), std::string::npos) << log;
  if (kind == Kind::Silent && count > static_cast<int>(transport::handshake::kMaxUnverified)) {
    EXPECT_NE(log.find("to make room"), std::string::npos) << "the cap on unverified connections did not act";
  }
  for (auto& c : comms) ASSERT_NE(c, nullptr);
  ThreadLauncher::runOn(comms, [](Communicator& comm) {
    checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 1000, true, 0);
  });
}

// ---- a rank's transport listener ---------------------------------------------------------------------------------

std::unique_ptr<transport::Transport> makeTransport(Door door) {
  if (door == Door::Shm) return std::make_unique<transport::ShmTransport>();
  transport::TcpOptions o;
  o.bindAddr = base::parseAddress("127.0.0.1:0");
  return std::make_unique<transport::TcpTransport>(o);
}

double timeConnect(testing::Cluster& cluster) {
  auto t0 = Clock::now();
  cluster.connectAll();
  return secondsSince(t0);
}

void floodARank(Door door, Kind kind, int count) {
  constexpr int n = 3;
  auto make = [door] { return makeTransport(door); };
  testing::Cluster quietCluster(n, make);
  const double quiet = timeConnect(quietCluster);

  testing::Cluster cluster(n, make);
  const PeerInfo& target = cluster.ranks[0]->ctx.peers[0];
  Strangers strangers;
  ::testing::internal::CaptureStderr();
  strangers.open(
      count,
      [&] {
        return door == Door::Tcp ? dialTcp(transport::TcpTransport::addressOf(target))
                                 : dialShm(transport::ShmTransport::addressOf(target));
      },
      strangerBytes(door, kind, 0));
  const double flooded = timeConnect(cluster);
  const int closed = strangers.closedWithin(5s);
  std::string log = ::testing::internal::GetCapturedStderr();
  std::printf("%s listener, %d %s stranger(s): connect %.3f s without, %.3f s with\n",
              door == Door::Tcp ? "tcp" : "shm", count,
              kind == Kind::Silent    ? "silent"
              : kind == Kind::Garbage ? "garbage"
                                      : "wrong-secret",
              quiet, flooded);
  EXPECT_LT(flooded - quiet, kMaxDelay) << "without strangers " << quiet << " s, with " << flooded << " s";
  EXPECT_EQ(closed, count) << "rank 0 kept strangers' connections open";
  EXPECT_NE(log.find(expectedLog(door, kind)), std::string::npos) << log;
  if (kind == Kind::Silent && count > static_cast<int>(transport::handshake::kMaxUnverified)) {
    EXPECT_NE(log.find("to make room"), std::string::npos) << "the cap on unverified connections did not act";
  }
  testing::exchange(cluster, {1, 4097, 1u << 20});
}

TEST_P(StrangerFlood, DelaysInitByLessThanASecondAndIsClosed) {
  const Case c = GetParam();
  if (c.door == Door::Root) {
    floodTheRoot(c.kind, c.count);
  } else {
    floodARank(c.door, c.kind, c.count);
  }
}

std::vector<Case> allCases() {
  std::vector<Case> out;
  for (Door d : {Door::Root, Door::Tcp, Door::Shm})
    for (Kind k : {Kind::Silent, Kind::Garbage, Kind::WrongSecret})
      for (int count : {1, 200}) out.push_back(Case{d, k, count});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Doors, StrangerFlood, ::testing::ValuesIn(allCases()), caseName);

// ---- a stream of wrong-secret hellos while real peers connect -----------------------------------------------------

// A well-formed hello with a wrong secret is held kHelloWait (a peer's communicator may not be made yet) before it is
// refused. A stranger that keeps sending them, impersonating rank 2 to rank 0, fills rank 0's queue of waiting
// connections (kMaxUnverified) for as long as it goes on: each new one evicts the oldest, after a last look for its
// hello. A real peer's hello is on its socket right after its connect, so the last look finds it even when its
// connection was accepted first; nothing of a held stranger blocks the others. The real peers must connect within
// their timeout while the stream runs, and every stranger be refused.
class StrangerStream : public ::testing::TestWithParam<Door> {};

TEST_P(StrangerStream, RealPeersConnectWhileWrongSecretHellosKeepComing) {
  const Door door = GetParam();
  testing::Cluster cluster(
      3, [door] { return makeTransport(door); }, 10s);
  const PeerInfo& target = cluster.ranks[0]->ctx.peers[0];
  const std::vector<uint8_t> hello = strangerBytes(door, Kind::WrongSecret, 0);
  std::atomic<bool> stop{false};
  std::atomic<int> opened{0};
  Strangers last;  // the most recent ones, still open when the stream stops
  ::testing::internal::CaptureStderr();
  std::thread stream([&] {
    std::deque<int> open;
    while (!stop.load()) {
      int fd = door == Door::Tcp ? dialTcp(transport::TcpTransport::addressOf(target))
                                 : dialShm(transport::ShmTransport::addressOf(target));
      if (fd < 0) break;
      EXPECT_EQ(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
      open.push_back(fd);
      opened++;
      if (open.size() > 2 * transport::handshake::kMaxUnverified) {  // rank 0 closed these long ago
        ::close(open.front());
        open.pop_front();
      }
      std::this_thread::sleep_for(1ms);  // about 1000 a second: the queue stays full
    }
    last.fds.assign(open.begin(), open.end());
  });
  while (opened.load() < static_cast<int>(transport::handshake::kMaxUnverified) + 20) std::this_thread::sleep_for(1ms);
  const auto t0 = Clock::now();
  try {
    cluster.connectAll();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the real peers did not connect: " << e.what();
  }
  const double seconds = secondsSince(t0);
  stop = true;
  stream.join();
  const int closed = last.closedWithin(transport::handshake::kHelloWait + 3s);
  std::string log = ::testing::internal::GetCapturedStderr();
  std::printf("%s listener: 3 ranks connected in %.3f s while %d wrong-secret strangers came\n",
              door == Door::Tcp ? "tcp" : "shm", seconds, opened.load());
  EXPECT_LT(seconds, 10.0) << "the connect's timeout";
  EXPECT_EQ(closed, static_cast<int>(last.fds.size())) << "strangers left open";
  EXPECT_NE(log.find("wrong magic or secret"), std::string::npos) << log.substr(0, 2000);
  EXPECT_NE(log.find("to make room"), std::string::npos) << "the cap on waiting connections did not act";
  testing::exchange(cluster, {1, 4097});
}

INSTANTIATE_TEST_SUITE_P(Listeners, StrangerStream, ::testing::Values(Door::Tcp, Door::Shm),
                         [](const ::testing::TestParamInfo<Door>& info) {
                           return std::string(info.param == Door::Tcp ? "Tcp" : "Shm");
                         });

// ---- a connection that never speaks is closed after kHelloWait, while init goes on -------------------------------

TEST(HelloWait, TheRootClosesASilentConnectionWhileItWaitsForTheRanks) {
  constexpr int n = 2;
  UniqueId id = UniqueId::create();
  Strangers silent;
  silent.open(1, [&] { return dialTcp(core::decodeUniqueId(id.raw).root); }, {});
  ::testing::internal::CaptureStderr();
  std::vector<std::unique_ptr<Communicator>> comms(n);
  Options o;
  o.timeout = 30s;
  std::thread rank0([&] {  // waits for rank 1 meanwhile
    try {
      comms[0] = Communicator::create(n, id, 0, o);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank 0: " << e.what();
    }
  });
  EXPECT_EQ(silent.closedWithin(transport::handshake::kHelloWait + 2s), 1);
  std::string log = ::testing::internal::GetCapturedStderr();
  comms[1] = Communicator::create(n, id, 1, o);
  rank0.join();
  EXPECT_NE(log.find("no hello within 2000 ms"), std::string::npos) << log;
  ASSERT_NE(comms[0], nullptr);
  ThreadLauncher::runOn(comms, barrierBody);
}

TEST(HelloWait, ARankClosesASilentConnectionWhileItWaitsForItsPeers) {
  testing::Cluster cluster(2, [] { return makeTransport(Door::Tcp); });
  Strangers silent;
  silent.open(1, [&] { return dialTcp(transport::TcpTransport::addressOf(cluster.ranks[0]->ctx.peers[0])); }, {});
  ::testing::internal::CaptureStderr();
  std::thread rank0([&] {  // waits for rank 1 meanwhile
    try {
      cluster.connectRank(0);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank 0: " << e.what();
    }
  });
  EXPECT_EQ(silent.closedWithin(transport::handshake::kHelloWait + 2s), 1);
  std::string log = ::testing::internal::GetCapturedStderr();
  cluster.connectRank(1);
  rank0.join();
  EXPECT_NE(log.find("no hello within 2000 ms"), std::string::npos) << log;
  testing::exchange(cluster, {1, 4097});
}

// ---- a process of another user at a rank's shm listener ------------------------------------------------------------

// The shm listener is a unix socket in the abstract namespace, which has no permissions: a process of another user
// in the network namespace can connect. It is closed at once (and logged), not held kHelloWait as a stranger of this
// user is (whose hello may be a peer's whose communicator is not made yet), so it cannot pin this process's
// descriptors. A child process switches to user nobody and connects; it reports whether its connection was closed
// within a second.
TEST(OtherUser, AProcessOfAnotherUserAtTheShmListenerIsClosedAtOnce) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run a process as another user";
  testing::Cluster cluster(2, [] { return makeTransport(Door::Shm); });
  const std::string name = transport::ShmTransport::addressOf(cluster.ranks[0]->ctx.peers[0]);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  enum Outcome { kClosed = 0, kHeldOpen = 1, kNoConnect = 2, kNoSetuid = 3 };
  ::testing::internal::CaptureStderr();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {  // only system calls from here: this process has other threads
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(kNoSetuid);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) ::_exit(kNoConnect);
    pollfd p{fd, POLLIN, 0};
    char byte;
    if (::poll(&p, 1, 1000) == 1 && ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0) ::_exit(kClosed);
    ::_exit(kHeldOpen);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kClosed) << "1: held open for a second; 2: could not connect; 3: setuid failed";
  EXPECT_NE(log.find("it runs as user 65534"), std::string::npos) << log;
}

// ---- a root that times out tells the ranks that checked in which ranks never did -----------------------------------

TEST(RootTimeout, TheRanksThatCheckedInAreToldWhichRanksNeverDid) {
  sockaddr_storage addr = base::defaultLocalAddress();
  base::setAddressPort(addr, 0);
  UniqueId id;  // a root whose deadline (1.5 s) comes before the rank's
  id.raw = core::encodeUniqueId(core::BootstrapRoot::start(addr, core::randomSecret(), 1500ms));
  Options o;
  o.timeout = 30s;
  auto t0 = Clock::now();
  try {
    Communicator::create(3, id, 1, o);  // ranks 0 and 2 never come
    ADD_FAILURE() << "init succeeded without ranks 0 and 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("2 of 3 ranks never checked in (rank(s) 0, 2)"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(secondsSince(t0), 15.0);  // the root's deadline (1.5 s), not the rank's (30 s)
}

// ---- listeners close once they are no longer needed --------------------------------------------------------------

TEST(Listeners, TheRootStopsListeningOnceTheTableIsSentAndTheTransportsWithTheirCommunicator) {
  const int before = listeningSockets();
  UniqueId id = UniqueId::create();
  EXPECT_EQ(listeningSockets(), before + 1) << "the root listens";
  std::vector<std::unique_ptr<Communicator>> comms;
  timeInit(id, 3, comms);
  for (auto& c : comms) ASSERT_NE(c, nullptr);
  // The root closed its listener before it sent the table: nobody can dial it any more.
  const sockaddr_storage root = core::decodeUniqueId(id.raw).root;
  int fd = ::socket(root.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_NE(::connect(fd, reinterpret_cast<const sockaddr*>(&root), base::addressLength(root)), 0);
  EXPECT_EQ(errno, ECONNREFUSED);
  ::close(fd);
  ThreadLauncher::runOn(comms, barrierBody);
  // The transports' listeners stay open for shrink, and close with their communicator.
  EXPECT_GT(listeningSockets(), before);
  comms.clear();
  EXPECT_EQ(listeningSockets(), before);
}

}  // namespace
}  // namespace collie::test
