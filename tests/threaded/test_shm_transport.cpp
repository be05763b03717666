// What only the shm transport does, with 2-4 ranks as threads of this process: data through every path (inline,
// slots, single copy by memcpy between threads and by process_vm_readv), which pairs it can link, sleeping ranks
// woken through the poller without lost wake-ups, a closed sender's buffers never read, and clean-up of the
// shared memory. What every transport does (ordering, strangers, timeouts, failures, stashed hellos) is in
// tests/conformance/test_transport_conformance.cpp; processes (crashes, /dev/shm) in
// tests/multiproc/test_shm_proc.cpp.
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

#include "base/errors.hpp"
#include "base/fd_limits.hpp"
#include "base/poller.hpp"
#include "common/transport_harness.hpp"
#include "transport/shm/shm_connection.hpp"
#include "transport/shm/shm_transport.hpp"

namespace collie::transport {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using collie::testing::drive;
using collie::testing::runRanks;

using Rank = collie::testing::TransportRank;

/// n shm ranks.
struct Cluster : collie::testing::Cluster {
  explicit Cluster(int n, ShmOptions options = {}, std::chrono::milliseconds timeout = 20s)
      : collie::testing::Cluster(
            n, [options] { return std::unique_ptr<Transport>(new ShmTransport(options)); }, timeout) {}
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

long openFds() { return base::fdUsage().open; }

TEST_P(ShmExchange, SizesThroughEveryPath) {
  const Shape& shape = GetParam();
  const int fdsBefore = openFds();
  {
    Cluster cluster(shape.nranks, shape.options);
    cluster.connectAll();
    collie::testing::exchange(cluster, kSizes);
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
  EXPECT_FALSE(ShmTransport::addressOf(a).empty());
  EXPECT_TRUE(t.canConnect(a, b));
  b.hostHash = a.hostHash + 1;
  EXPECT_FALSE(t.canConnect(a, b));
  b.hostHash = a.hostHash;
  b.netNs = a.netNs + 1;
  EXPECT_FALSE(t.canConnect(a, b));
  b.netNs = a.netNs;
  b = PeerInfo{};  // a peer with shm disabled: same host, no shm address
  b.hostHash = a.hostHash;
  b.netNs = a.netNs;
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

TEST(ShmTransport, SendingIntoAClosedPeerFailsOnEveryPath) {
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

}  // namespace
}  // namespace collie::transport
