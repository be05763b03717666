// Connections on first use (COLLIE_CONNECT=lazy, Options::connect): with every rank a thread, a communicator is
// connected to a peer only once a call's schedule names it. Checked here through Communicator::connectedPeers():
// a ring AllReduce links each rank to its two neighbours only, AllToAll reaches everyone, eager connection makes
// the full mesh at init; every collective under every forced algorithm runs correctly (element by element) on
// communicators whose very first call makes the connections; split sub-communicators connect lazily too. Killed
// ranks and strangers under lazy connection are in tests/multiproc/test_lazy_connect_proc.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/bodies.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

Options lazyOptions(ConnectMode mode = ConnectMode::Lazy) {
  Options o;
  o.timeout = 60s;
  o.name = "lazy";
  o.connect = mode;
  return o;
}

// Init's all-gather of the table talks to its log2 N peers (bootstrap_plan.hpp: bootstrapPeers), then closes the
// links to all but the ring neighbours (gatherOnlyPeers); with ring forced, calibration's broadcast links ring
// neighbours only, so after init a rank is linked to at most its two neighbours, and ring AllReduces then connect
// exactly those two.
TEST(LazyConnect, RingAllReduceConnectsOnlyTheTwoNeighbours) {
  ForcedAlgorithm ring("ring");
  for (int ranks : {8, 6}) {
    ThreadLauncher::run(
        ranks,
        [](Communicator& comm) {
          const int r = comm.rank();
          EXPECT_LE(comm.connectedPeers(), 2) << "rank " << r << " after init";
          checkCase(comm, Coll::AllReduce, DataType::Float32, ReduceOp::Sum, 100003, false, 0);
          checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Max, 7, true, 0);
          EXPECT_EQ(comm.connectedPeers(), 2) << "rank " << r << ": a ring needs its two neighbours only";
        },
        lazyOptions());
  }
}

TEST(LazyConnect, AllToAllReachesEveryPeer) {
  constexpr int kRanks = 6;
  ThreadLauncher::run(
      kRanks,
      [](Communicator& comm) {
        checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 1001, false, 0);
        EXPECT_EQ(comm.connectedPeers(), comm.size() - 1);
      },
      lazyOptions());
}

TEST(LazyConnect, EagerConnectsEveryPairAtInit) {
  constexpr int kRanks = 5;
  ThreadLauncher::run(
      kRanks,
      [](Communicator& comm) {
        EXPECT_EQ(comm.connectedPeers(), comm.size() - 1) << "rank " << comm.rank();
        checkCase(comm, Coll::AllReduce, DataType::Float64, ReduceOp::Sum, 999, false, 0);
      },
      lazyOptions(ConnectMode::Eager));
}

// Each (algorithm, collective) on a fresh communicator, so that the call under test is the one that connects.
TEST(LazyConnect, EveryCollectiveUnderEveryAlgorithmConnectsOnItsFirstCall) {
  constexpr int kRanks = 5;  // not a power of two: halving-doubling folds a rank
  const Coll colls[] = {Coll::AllReduce, Coll::Broadcast,     Coll::Reduce,
                        Coll::AllGather, Coll::ReduceScatter, Coll::AllToAll};
  for (const char* algo : {"ring", "tree", "rhd", "direct"}) {
    ForcedAlgorithm forced(algo);
    for (Coll coll : colls) {
      SCOPED_TRACE(std::string(algo) + " " + collName(coll));
      ThreadLauncher::run(
          kRanks,
          [coll](Communicator& comm) {
            const int before = comm.connectedPeers();
            checkCase(comm, coll, DataType::Int32, ReduceOp::Sum, 4099, false, comm.size() - 1);
            EXPECT_GE(comm.connectedPeers(), before);
            EXPECT_LE(comm.connectedPeers(), comm.size() - 1);
          },
          lazyOptions());
    }
  }
}

TEST(LazyConnect, SendRecvConnectsOnlyThePair) {
  ForcedAlgorithm ring("ring");
  ThreadLauncher::run(
      6,
      [](Communicator& comm) {
        const int r = comm.rank(), n = comm.size();
        const int before = comm.connectedPeers();
        // Rank r talks to rank r + 3 (mod 6): not a ring neighbour, and init keeps no link but to ring neighbours
        // (bootstrap_plan.hpp: gatherOnlyPeers are closed), so a connection of its own.
        const int peer = (r + 3) % n;
        std::vector<int32_t> out(257), in(257, -1);
        for (size_t i = 0; i < out.size(); ++i) out[i] = r * 1000 + static_cast<int32_t>(i);
        groupStart();
        comm.send(out.data(), out.size(), DataType::Int32, peer);
        comm.recv(in.data(), in.size(), DataType::Int32, peer);
        groupEnd();
        for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], peer * 1000 + static_cast<int32_t>(i)) << i;
        EXPECT_EQ(comm.connectedPeers(), before + 1) << "rank " << r;
      },
      lazyOptions());
}

TEST(LazyConnect, SplitSubCommunicatorsConnectLazily) {
  ForcedAlgorithm ring("ring");
  ThreadLauncher::run(
      8,
      [](Communicator& comm) {
        splitBody(comm);
        auto sub = comm.split(comm.rank() % 2, comm.rank());
        ASSERT_NE(sub, nullptr);
        EXPECT_LE(sub->connectedPeers(), 2);
        checkCase(*sub, Coll::AllReduce, DataType::Float32, ReduceOp::Sum, 1234, false, 0);
        EXPECT_EQ(sub->connectedPeers(), 2) << "a ring of 4 ranks: two neighbours";
      },
      lazyOptions());
}

}  // namespace
}  // namespace collie::test
