// collie over the UCX transport (label ucx): every collective and dtype class, every algorithm, async calls,
// groups and split, ranks as threads (2 to 8) and as processes, and a rank killed mid-stream. CTest runs this
// binary twice, with UCX_TLS=tcp and with UCX_TLS=sm,self (tests/CMakeLists.txt); COLLIE_NET=ucx and
// COLLIE_SHM_DISABLE=1 are set before anything reads them, so every peer pair is a UCX connection, and after
// every call the bodies check (Communicator::lastCall) that UCX is what carried it. The transport-level
// contract (ordering, sizes, strangers, timeouts, a killed peer) is in tests/conformance/ (ucx_tcp, ucx_sm).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "common/bodies.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"
#include "core/bootstrap_plan.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

// Before main(): params are read once per process, and the forked ranks inherit the environment.
const bool kEnvironmentSet = [] {
  setenv("COLLIE_NET", "ucx", 1);
  setenv("COLLIE_SHM_DISABLE", "1", 1);
  return true;
}();

Options ucxOptions(std::chrono::milliseconds timeout = 60s) {
  Options o;
  o.timeout = timeout;
  o.name = "ucx";
  return o;
}

/// What every call must have run over: UCX only (no tcp, no shm), whenever it moved data between ranks.
CallCheck ranOverUcx(const std::string& forcedAlgo = "") {
  return [forcedAlgo](const CallInfo& ran) {
    EXPECT_EQ(ran.transport.find("tcp"), std::string::npos) << ran.collective << " ran over " << ran.transport;
    EXPECT_EQ(ran.transport.find("shm"), std::string::npos) << ran.collective << " ran over " << ran.transport;
    if (ran.transport != "self" && !ran.transport.empty()) {
      EXPECT_EQ(ran.transport, "ucx") << ran.collective;
    }
    if (!forcedAlgo.empty()) {
      algorithms::Collective coll;
      algorithms::Algorithm algo;
      ASSERT_TRUE(algorithms::parseCollective(ran.collective, &coll)) << ran.collective;
      ASSERT_TRUE(algorithms::parseAlgorithm(forcedAlgo, &algo)) << forcedAlgo;
      if (algorithms::supports(algo, coll)) {
        EXPECT_EQ(ran.algorithm, forcedAlgo) << ran.collective;
      }
    }
  };
}

std::string tls() {
  const char* v = std::getenv("UCX_TLS");
  return v ? v : "(UCX's default)";
}

TEST(Ucx, EveryPeerPairIsAUcxConnection) {
  CheckEachCall check(ranOverUcx());
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        int x = comm.rank() + 1;
        comm.allReduce(&x, &x, 1, DataType::Int32, ReduceOp::Sum);
        EXPECT_EQ(x, 6);
        EXPECT_EQ(comm.lastCall().transport, "ucx") << "UCX_TLS=" << tls();
      },
      ucxOptions());
}

// Over ucx, as over tcp and shm, a communicator connects on first use by default and keeps O(1) links after init
// (release_gather_links.cpp closes the table all-gather's links but the ring neighbours'; with ring forced,
// calibration links ring neighbours only). A pair whose link was closed connects again when a call needs it, whatever
// the peer is doing: here rank 2 posts its receive from rank 0 only after rank 0's send to it has returned (a chain
// through rank 1), so rank 0's dial, the UCX wireup and its message all complete while rank 2's executor waits on
// rank 1 (rank 2 answers on its accept loop's thread, and its worker's linger thread runs its side of the wireup).
// 0 and 2 are a gather-only pair at 8 ranks.
TEST(Ucx, ConnectsOnFirstUseWhateverThePeerIsDoing) {
  constexpr int n = 8;
  ForcedAlgorithm ring("ring");
  ThreadLauncher::run(
      n,
      [](Communicator& comm) {
        const int r = comm.rank();
        if (r == 0) {
          std::vector<int> gatherOnly = core::gatherOnlyPeers(r, n);
          ASSERT_NE(std::find(gatherOnly.begin(), gatherOnly.end(), 2), gatherOnly.end())
              << "0 and 2 are no gather-only pair";
        }
        EXPECT_LE(comm.connectedPeers(), 2) << "rank " << r << " after init";
        int v = -1;
        if (r == 0) {
          v = 100;
          comm.send(&v, 1, DataType::Int32, 2);
          v = 101;
          comm.send(&v, 1, DataType::Int32, 1);
        } else if (r == 1) {
          comm.recv(&v, 1, DataType::Int32, 0);
          EXPECT_EQ(v, 101);
          comm.send(&v, 1, DataType::Int32, 2);
        } else if (r == 2) {
          comm.recv(&v, 1, DataType::Int32, 1);
          EXPECT_EQ(v, 101);
          comm.recv(&v, 1, DataType::Int32, 0);
          EXPECT_EQ(v, 100);
        }
        if (r == 0 || r == 2) {  // rank 1, the pair 0-2, and at most one more ring neighbour from init
          EXPECT_GE(comm.connectedPeers(), 2) << "rank " << r;
          EXPECT_LE(comm.connectedPeers(), 3) << "rank " << r;
        }
        int x = r + 1;
        comm.allReduce(&x, &x, 1, DataType::Int32, ReduceOp::Sum);
        EXPECT_EQ(x, n * (n + 1) / 2);
        EXPECT_EQ(comm.lastCall().transport, "ucx");
      },
      ucxOptions(20s));
}

// ---- every collective, every dtype class and op ------------------------------------------------------------

class UcxCollectives : public ::testing::TestWithParam<std::tuple<Coll, int>> {};

// UCX matches a message only to a receive posted for it, so collie cannot look at one first: a receive from any
// source says so (InvalidUsage naming the peer) and leaves the communicator usable.
TEST(Ucx, ReceiveFromAnySourceIsRefusedAndTheCommunicatorStaysUsable) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        float v[3] = {1, 2, 3};
        if (comm.rank() == 0) {
          try {
            comm.recvAny(v, 3, DataType::Float32);
            ADD_FAILURE() << "recvAny over ucx returned";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
            EXPECT_NE(std::string(e.what()).find("the connection to peer 1"), std::string::npos) << e.what();
          }
          EXPECT_EQ(comm.asyncError(), ErrorCode::Success);
          comm.recv(v, 3, DataType::Float32, 1);
          EXPECT_EQ(v[2], 30.0f);
        } else {
          v[2] = 30;
          comm.send(v, 3, DataType::Float32, 0);
        }
      },
      ucxOptions());
}

TEST_P(UcxCollectives, TypesOpsCountsAndPlacement) {
  const auto [coll, nranks] = GetParam();
  CheckEachCall check(ranOverUcx());
  Matrix m;
  m.counts = {0, 1, 7, static_cast<size_t>(nranks + 1), 4097, 70001};
  if (nranks > 4) {  // fewer cases where there are more ranks than cores many times over
    m.types = {DataType::Int8, DataType::Int64, DataType::Float16, DataType::Float64, DataType::Bfloat16};
    m.ops = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Avg};
  }
  ThreadLauncher::run(
      nranks, [&](Communicator& comm) { runMatrix(comm, coll, m); }, ucxOptions());
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxCollectives,
                         ::testing::Combine(::testing::ValuesIn(kAllColls), ::testing::Values(2, 3, 5, 8)),
                         [](const ::testing::TestParamInfo<std::tuple<Coll, int>>& info) {
                           return collName(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) +
                                  "ranks";
                         });

// ---- every algorithm, forced, over every collective it implements ------------------------------------------

class UcxAlgorithms : public ::testing::TestWithParam<std::tuple<algorithms::Algorithm, int>> {};

TEST_P(UcxAlgorithms, EveryCollectiveItImplements) {
  const auto [algo, nranks] = GetParam();
  const std::string name = algorithms::algorithmName(algo);
  ForcedAlgorithm forced(name);
  CheckEachCall check(ranOverUcx(name));
  Matrix m;
  m.types = {DataType::Float32, DataType::Int64, DataType::Bfloat16};
  m.ops = {ReduceOp::Sum, ReduceOp::Max};
  m.counts = {1, static_cast<size_t>(nranks - 1), 4097, 300001};
  int ran = 0;
  for (Coll coll : kAllColls) {
    algorithms::Collective c;
    if (!algorithms::parseCollective(collName(coll), &c)) continue;  // SendRecv: point to point, no algorithm
    if (!algorithms::supports(algo, c)) continue;
    ++ran;
    ThreadLauncher::run(
        nranks, [&](Communicator& comm) { runMatrix(comm, coll, m); }, ucxOptions());
  }
  EXPECT_GT(ran, 0) << name << " implements no collective of the test bodies";
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxAlgorithms,
                         ::testing::Combine(::testing::ValuesIn(algorithms::kAllAlgorithms), ::testing::Values(3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<algorithms::Algorithm, int>>& info) {
                           return std::string(algorithms::algorithmName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// ---- async calls, groups, split --------------------------------------------------------------------------

TEST(UcxBodies, AsyncGroupsSplitBarrier) {
  CheckEachCall check(ranOverUcx());
  using Body = collie::test::TestBody;
  for (const Body& body : {Body(asyncBody), Body(groupBody), Body(splitBody), Body(barrierBody)})
    ThreadLauncher::run(4, body, ucxOptions());
}

// ---- ranks as processes ----------------------------------------------------------------------------------

TEST(UcxProcesses, CollectivesWithRanksAsProcesses) {
  auto body = [](Communicator& comm) {
    CheckEachCall check(ranOverUcx());
    Matrix m;
    m.types = {DataType::Int32, DataType::Float32, DataType::Bfloat16};
    m.ops = {ReduceOp::Sum, ReduceOp::Max};
    m.counts = {1, 4097, kLargeCount};
    for (Coll coll : kAllColls) runMatrix(comm, coll, m);
  };
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(4, body, ucxOptions(), 180s)));
}

// Rank 2 is SIGKILLed while every rank runs AllReduces: every other rank gets RemoteError or Timeout within the
// communicator's timeout (plus a margin), and its communicator stays failed.
TEST(UcxProcesses, KilledRankGivesEveryOtherRankAnError) {
  constexpr int kRanks = 4, kVictim = 2;
  constexpr int64_t kMs = 1000000;
  constexpr auto kTimeout = 5s;
  ProcessLauncher launcher(kRanks, ucxOptions(kTimeout));
  SharedArea& sh = launcher.shared();  // counters[0]: when the victim was killed; perRank[r]: iterations, code+1
  launcher.start([&sh](Communicator& comm) {
    std::vector<float> buf(1 << 16, 1.0f);
    const int r = comm.rank();
    for (;;) {
      try {
        comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Max);
        ASSERT_EQ(comm.lastCall().transport, "ucx");
      } catch (const Error& e) {
        const int64_t killed = sh.counters[0].load();
        sh.perRank[r][1].store(static_cast<int>(e.code()) + 1);
        EXPECT_NE(killed, 0) << "an error before the kill: " << e.what();
        EXPECT_TRUE(e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout) << e.what();
        EXPECT_LT(monotonicNs() - killed, 5000 * kMs + 3000 * kMs) << "too late: " << e.what();
        EXPECT_THROW(comm.barrier(), Error);
        return;
      }
      sh.perRank[r][0].fetch_add(1);
    }
  });
  auto going = [&] {
    for (int r = 0; r < kRanks; ++r)
      if (sh.perRank[r][0].load() < 3) return false;
    return true;
  };
  for (auto until = std::chrono::steady_clock::now() + 60s; !going() && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(going()) << "the ranks did not get going";
  sh.counters[0].store(monotonicNs());
  launcher.kill(kVictim, SIGKILL);
  auto exits = launcher.wait(60s);
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    EXPECT_TRUE(exits[r].ok()) << exits[r].describe();
    EXPECT_FALSE(exits[r].killedAtDeadline) << "rank " << r << " hung";
    EXPECT_NE(sh.perRank[r][1].load(), 0) << "rank " << r << " saw no error";
  }
}

}  // namespace
}  // namespace collie::test
