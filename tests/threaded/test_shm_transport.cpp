// The shm transport with 2-4 ranks as threads of this process: the handshake (strangers, wrong secrets, missing
// peers), data in both directions through every path (inline, slots, single copy by memcpy between threads and
// by process_vm_readv), ordering, size checks, peer close, sleeping ranks woken through the poller without lost
// wake-ups, and clean-up of the shared memory. Each rank has its own Poller and CommContext, built by hand the
// way the communicator builds them. Processes (crashes, /dev/shm) are in tests/multiproc/test_shm_proc.cpp.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/transport_harness.hpp"
#include "base/errors.hpp"
#include "base/poller.hpp"
#include "transport/shm/shm_connection.hpp"
#include "transport/shm/shm_transport.hpp"

namespace collie::transport {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using collie::testing::drive;
using collie::testing::exchange;
using collie::testing::pattern;
using collie::testing::runRanks;

struct Rank {
  base::Poller poller;  // first: outlives the transport and the connections
  std::unique_ptr<ShmTransport> transport;
  CommContext ctx;
  std::vector<std::unique_ptr<Connection>> conns;  // indexed by peer rank (null for self)
  int longSleeps = 0;                              // waits that ran into their (long) timeout
};

struct Cluster {
  std::vector<std::unique_ptr<Rank>> ranks;

  explicit Cluster(int n, ShmOptions options = {}, std::chrono::milliseconds timeout = 20s) {
    std::vector<PeerInfo> infos(n);
    for (int r = 0; r < n; ++r) {
      auto rank = std::make_unique<Rank>();
      rank->transport = std::make_unique<ShmTransport>(options);
      infos[r].rank = r;
      infos[r].hostHash = 42;
      rank->transport->listen(infos[r]);
      ranks.push_back(std::move(rank));
    }
    for (int r = 0; r < n; ++r) {
      CommContext& ctx = ranks[r]->ctx;
      ctx.rank = r;
      ctx.nranks = n;
      ctx.peers = infos;
      for (int i = 0; i < 16; ++i) ctx.secret[i] = static_cast<uint8_t>(0xB0 + i);
      ctx.name = "test";
      ctx.timeout = timeout;
      ctx.poller = &ranks[r]->poller;
    }
  }

  void connectAll() {
    runRanks(static_cast<int>(ranks.size()), [&](int r) { connectRank(r); });
  }
  void connectRank(int r) {
    int n = static_cast<int>(ranks.size());
    std::vector<int> peers;
    for (int p = 0; p < n; ++p) peers.push_back(p);  // self included: it gets a self connection
    auto conns = ranks[r]->transport->connect(ranks[r]->ctx, peers);
    ranks[r]->conns.resize(n);
    for (int p = 0; p < n; ++p)
      if (p != r) ranks[r]->conns[p] = std::move(conns[p]);
  }
};

/// Mappings of shm segments in this process (memfd or deleted /dev/shm files).
int shmMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line))
    if (line.find("memfd:collie-shm") != std::string::npos || line.find("/dev/shm/collie-") != std::string::npos) ++n;
  return n;
}

const std::vector<size_t> kSizes = {0, 1, 32, 33, 4097, 3u << 20, 0, 100, 65536, 65535, 5, 1u << 20};

struct Shape {
  const char* name;
  int nranks;
  ShmOptions options;
};

ShmOptions opts(int slots, int64_t slotBytes, int singleCopy, int64_t minBytes, bool cma, const char* backing = "") {
  ShmOptions o;
  o.slots = slots;
  o.slotBytes = slotBytes;
  o.singleCopy = singleCopy;
  o.singleCopyMin = minBytes;
  o.crossMemoryForThreads = cma;
  o.backing = backing;
  return o;
}

class ShmExchange : public ::testing::TestWithParam<Shape> {};

int openFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

TEST_P(ShmExchange, SizesThroughEveryPath) {
  const Shape& shape = GetParam();
  const int fdsBefore = openFds();
  {
    Cluster cluster(shape.nranks, shape.options);
    cluster.connectAll();
    exchange(cluster, kSizes);
    EXPECT_GT(shmMappings(), 0);
  }
  EXPECT_EQ(shmMappings(), 0) << "every segment must be unmapped once transports and connections are gone";
  EXPECT_EQ(openFds(), fdsBefore) << "every socket, segment and eventfd must be closed";
}

INSTANTIATE_TEST_SUITE_P(Paths, ShmExchange,
                         ::testing::Values(Shape{"defaults", 2, {}},
                                           Shape{"slots_only_tiny_ring", 2, opts(2, 64, 0, 0, false)},
                                           Shape{"slots_only_odd_slot_count", 3, opts(3, 4096, 0, 0, false)},
                                           Shape{"memcpy_between_threads_from_1_byte", 3, opts(4, 1024, 1, 1, false)},
                                           Shape{"process_vm_readv_from_1_byte", 2, opts(4, 1024, 2, 1, true)},
                                           Shape{"process_vm_readv_default_threshold", 4, opts(0, 0, 2, -1, true)},
                                           Shape{"process_vm_readv_where_it_pays", 2, opts(0, 0, 1, 1, true)},
                                           Shape{"devshm_backing", 2, opts(0, 0, -1, -1, false, "devshm")}),
                         [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

TEST(ShmTransport, CanConnectOnlyOnTheSameHostAndNetworkNamespace) {
  ShmTransport t;
  PeerInfo a, b;
  t.listen(a);
  std::memcpy(&b, &a, sizeof(a));
  EXPECT_NE(a.shmAddr[0], 0);
  EXPECT_TRUE(t.canConnect(a, b));
  b.hostHash = a.hostHash + 1;
  EXPECT_FALSE(t.canConnect(a, b));
  b.hostHash = a.hostHash;
  b.netNs = a.netNs + 1;
  EXPECT_FALSE(t.canConnect(a, b));
  b.netNs = a.netNs;
  b.shmAddr[0] = 0;  // a peer with shm disabled
  EXPECT_FALSE(t.canConnect(a, b));
  EXPECT_FALSE(t.canConnect(b, a));
}

TEST(ShmTransport, SingleCopyPathIsChosenWhereAllowed) {
  Cluster threads(2, opts(0, 0, 1, -1, false));
  threads.connectAll();
  EXPECT_TRUE(dynamic_cast<shm::ShmConnection&>(*threads.ranks[0]->conns[1]).singleCopy());
  Cluster cma(2, opts(0, 0, 2, -1, true));
  cma.connectAll();
  // process_vm_readv on our own pid is allowed wherever it exists at all.
  EXPECT_TRUE(dynamic_cast<shm::ShmConnection&>(*cma.ranks[0]->conns[1]).singleCopy());
  Cluster off(2, opts(0, 0, 0, -1, false));
  off.connectAll();
  EXPECT_FALSE(dynamic_cast<shm::ShmConnection&>(*off.ranks[1]->conns[0]).singleCopy());
}

// Both ranks sleep in their pollers whenever a progress pass moves nothing (no spinning at all), with a ring of
// two slots so that the sender keeps waiting for the receiver too. A lost wake-up would show as a wait that
// runs into its 2 s timeout.
TEST(ShmTransport, ManySmallMessagesWithSleepingRanksLoseNoWakeUp) {
  for (bool direct : {false, true}) {
    Cluster cluster(2, opts(2, 64, direct ? 1 : 0, 64, false));
    cluster.connectAll();
    constexpr int kCount = 20000;
    auto t0 = SteadyClock::now();
    runRanks(2, [&](int r) {
      Rank& rank = *cluster.ranks[r];
      Connection& conn = *rank.conns[1 - r];
      std::vector<uint8_t> buf(200);
      for (int m = 0; m < kCount; ++m) {
        size_t bytes = static_cast<size_t>(m % 131);  // inline, one slot, two slots, direct
        Transfer t{buf.data(), bytes};
        if ((m % 2) == r) {
          for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<uint8_t>(m + i);
          conn.postSend(&t);
        } else {
          conn.postRecv(&t);
        }
        drive(rank, {&t}, 60s);
        if ((m % 2) != r) {
          for (size_t i = 0; i < bytes; ++i) {
            if (buf[i] != static_cast<uint8_t>(m + i)) {
              ADD_FAILURE() << "message " << m << " byte " << i;
              return;
            }
          }
        }
      }
    });
    double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
    EXPECT_EQ(cluster.ranks[0]->longSleeps + cluster.ranks[1]->longSleeps, 0)
        << "lost wake-ups (direct=" << direct << "), " << secs << " s in all";
  }
}

// One-way streams of small messages, everything posted at once on the sending side and one at a time on the
// receiving side (data waits in the ring before its receive exists); both sides sleep when idle.
TEST(ShmTransport, StreamsInOrderWithSleepingRanks) {
  Cluster cluster(2, opts(4, 256, 1, 1000, false));
  cluster.connectAll();
  constexpr int kCount = 20000;
  runRanks(2, [&](int r) {
    Rank& rank = *cluster.ranks[r];
    Connection& conn = *rank.conns[1 - r];
    if (r == 0) {
      std::vector<std::vector<uint8_t>> bufs(kCount);
      std::vector<Transfer> ts(kCount);
      std::vector<Transfer*> all;
      for (int m = 0; m < kCount; ++m) {
        bufs[m].assign(static_cast<size_t>(m % 1200), static_cast<uint8_t>(m));
        ts[m] = Transfer{bufs[m].data(), bufs[m].size()};
        conn.postSend(&ts[m]);
        all.push_back(&ts[m]);
      }
      drive(rank, all);
    } else {
      std::vector<uint8_t> buf(1200);
      for (int m = 0; m < kCount; ++m) {
        Transfer t{buf.data(), static_cast<size_t>(m % 1200)};
        conn.postRecv(&t);
        drive(rank, {&t});
        for (int i = 0; i < m % 1200; ++i) {
          if (buf[i] != static_cast<uint8_t>(m)) {
            ADD_FAILURE() << "message " << m << " byte " << i;
            return;
          }
        }
      }
    }
  });
  EXPECT_EQ(cluster.ranks[0]->longSleeps + cluster.ranks[1]->longSleeps, 0);
}

TEST(ShmTransport, BusyAndSizeMismatch) {
  Cluster cluster(2);
  cluster.connectAll();
  std::vector<uint8_t> a(100), b(200);
  Transfer send{a.data(), a.size()}, recv{b.data(), b.size()};
  EXPECT_FALSE(cluster.ranks[0]->conns[1]->busy());
  cluster.ranks[0]->conns[1]->postSend(&send);
  EXPECT_TRUE(cluster.ranks[0]->conns[1]->busy());
  cluster.ranks[1]->conns[0]->postRecv(&recv);
  drive(*cluster.ranks[0], {&send});
  EXPECT_FALSE(cluster.ranks[0]->conns[1]->busy());
  try {
    drive(*cluster.ranks[1], {&recv}, 10s);
    FAIL() << "expected a size mismatch";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InternalError);
    EXPECT_NE(std::string(e.what()).find("expected message #0 of 200 bytes, got #0 of 100 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cluster.ranks[1]->conns[0]->progress(), Error);  // the failure sticks
}

TEST(ShmTransport, PeerCloseGivesRemoteErrorAfterItsLastData) {
  Cluster cluster(2);
  cluster.connectAll();
  Rank& r0 = *cluster.ranks[0];
  Rank& r1 = *cluster.ranks[1];
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

  // Sending into a closed peer fails too, on the slot path and the single-copy path.
  for (int singleCopy : {0, 1}) {
    Cluster again(2, opts(2, 64, singleCopy, 1, false));
    again.connectAll();
    again.ranks[0]->conns[1]->close();
    std::vector<uint8_t> big(1 << 20);
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
}

// A sender whose call failed closes its connection and may free its buffers: a message it sent by address and
// that is not read yet must never be read afterwards (the receiver fails instead), for threads (memcpy) and
// processes (process_vm_readv) alike.
TEST(ShmTransport, MessageSentByAddressIsNotReadAfterTheSenderClosed) {
  for (bool cma : {false, true}) {
    Cluster cluster(2, opts(4, 1024, 2, 1, cma));
    cluster.connectAll();
    auto big = std::make_unique<std::vector<uint8_t>>(1 << 20, 5);
    Transfer send{big->data(), big->size()};
    cluster.ranks[0]->conns[1]->postSend(&send);
    EXPECT_TRUE(cluster.ranks[0]->conns[1]->progress());  // the slot with its address is published
    EXPECT_FALSE(send.complete);
    cluster.ranks[0]->conns[1]->close();
    big.reset();  // what a user may do once the failed call returned
    std::vector<uint8_t> in(1 << 20);
    Transfer recv{in.data(), in.size()};
    cluster.ranks[1]->conns[0]->postRecv(&recv);
    try {
      drive(*cluster.ranks[1], {&recv}, 10s);
      FAIL() << "expected a RemoteError";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::RemoteError);
      EXPECT_NE(std::string(e.what()).find("before its message was read"), std::string::npos) << e.what();
    }
  }
}

TEST(ShmTransport, StrangersAreRefusedAndConnectSucceeds) {
  Cluster cluster(3);
  // Strangers in rank 0's backlog: one that sends garbage, one that says nothing, one that hangs up.
  auto dial = [&] {
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const char* name = cluster.ranks[0]->ctx.peers[0].shmAddr;
    std::memcpy(addr.sun_path + 1, name, std::strlen(name));
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr),
                        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(name))),
              0);
    return fd;
  };
  int wrong = dial();
  std::vector<uint8_t> junk(120, 0x41);
  EXPECT_EQ(::send(wrong, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
  int silent = dial();
  int quitter = dial();
  ::close(quitter);

  ::testing::internal::CaptureStderr();
  cluster.connectAll();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("refused a local connection"), std::string::npos) << log;
  char c;
  EXPECT_EQ(::recv(wrong, &c, 1, 0), 0);  // closed by rank 0
  ::close(wrong);
  ::close(silent);
  exchange(cluster, {1, 4097, 1u << 20});
}

TEST(ShmTransport, WrongSecretFromARealPeerFailsThatPeer) {
  Cluster cluster(2, {}, 1s);
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
  EXPECT_NE(messages[0].find("rank(s) 1"), std::string::npos) << messages[0];
  EXPECT_NE(codes[1], ErrorCode::Success);
}

TEST(ShmTransport, MissingPeersTimeOut) {
  Cluster cluster(3, {}, 300ms);
  auto start = SteadyClock::now();
  try {
    cluster.ranks[0]->transport->connect(cluster.ranks[0]->ctx, {1, 2});
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_NE(std::string(e.what()).find("rank(s) 1, 2"), std::string::npos) << e.what();
  }
  auto took = SteadyClock::now() - start;
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 2s);
  // Rank 1 reaches rank 0's socket (the kernel accepts) but rank 0 never answers.
  Cluster two(2, {}, 300ms);
  try {
    two.ranks[1]->transport->connect(two.ranks[1]->ctx, {0});
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_NE(std::string(e.what()).find("rank(s) 0"), std::string::npos) << e.what();
  }
}

TEST(ShmTransport, ConnectInTwoCallsWithStashedHellos) {
  // Rank 2 connects to rank 0 while rank 0 is still busy with rank 1: rank 0 keeps the hello for its second
  // connect() call.
  Cluster cluster(3);
  std::vector<std::vector<std::unique_ptr<Connection>>> got(3);
  runRanks(3, [&](int r) {
    Rank& rank = *cluster.ranks[r];
    auto add = [&](std::vector<int> peers) {
      auto conns = rank.transport->connect(rank.ctx, peers);
      rank.conns.resize(3);
      for (size_t i = 0; i < peers.size(); ++i) rank.conns[peers[i]] = std::move(conns[i]);
    };
    if (r == 0) {
      std::this_thread::sleep_for(100ms);  // let rank 2's hello arrive first
      add({1});
      add({2});
    } else if (r == 1) {
      add({0});
      add({2});
    } else {
      add({0});
      add({1});
    }
  });
  exchange(cluster, {1, 70000});
}

}  // namespace
}  // namespace collie::transport
