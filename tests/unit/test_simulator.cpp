// Every collective x algorithm in the simulator (src/sim/simulator.hpp): the real builders and the real
// executor for all ranks in one thread over in-memory links, checked for matched transfers, no deadlock and
// exact results. Exhaustive for nranks 1..64 (counts 0, 1, n-1 and 1001, small slices so that steps are cut in
// many slices, in-place and out-of-place, roots and ops varied), then a sample up to 4096 ranks with small
// counts; plus the simulator's own checks (a broken schedule must be caught) and its time model.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "sim/memory_connection.hpp"
#include "sim/simulator.hpp"

namespace collie::sim {
namespace {

struct Combo {
  Collective coll;
  Algorithm algo;
};

std::vector<Combo> allCombos() {
  std::vector<Combo> combos;
  for (Collective c : {Collective::AllReduce, Collective::Broadcast, Collective::Reduce, Collective::AllGather,
                       Collective::ReduceScatter, Collective::AllToAll})
    for (Algorithm a : algorithms::kAllAlgorithms)
      if (supports(a, c)) combos.push_back({c, a});
  return combos;
}

std::string comboName(const ::testing::TestParamInfo<Combo>& info) {
  return std::string(collectiveName(info.param.coll)) + "_" + algorithmName(info.param.algo);
}

std::string describeCase(const SimOptions& o) {
  return std::string(collectiveName(o.coll)) + " " + algorithmName(o.algo) + " nranks=" + std::to_string(o.nranks) +
         " count=" + std::to_string(o.count) + " root=" + std::to_string(o.root) +
         " op=" + std::to_string(static_cast<int>(o.op)) + " type=" + std::to_string(static_cast<int>(o.type)) +
         (o.inPlace ? " in-place" : "") + " slice=" + std::to_string(o.sliceBytes) +
         " inflight=" + std::to_string(o.slicesInFlight);
}

class SimulatorExhaustive : public ::testing::TestWithParam<Combo> {};

TEST_P(SimulatorExhaustive, EveryRankCountUpTo64) {
  const Combo c = GetParam();
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg, ReduceOp::Prod, ReduceOp::Min};
  const DataType types[] = {DataType::Int32, DataType::Int64, DataType::Uint8, DataType::Int8};
  int variant = 0;
  for (int n = 1; n <= 64; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(n - 1), size_t{1001}}) {
      sim::SimOptions o;
      o.coll = c.coll;
      o.algo = c.algo;
      o.nranks = n;
      o.count = count;
      o.root = (variant % 3 == 0) ? 0 : (variant % 3 == 1) ? n - 1 : n / 2;
      o.op = ops[variant % 5];
      o.type = types[variant % 4];
      o.inPlace = variant % 2 == 1;
      // Small slices: steps of the large count are cut in many slices, and a window of 1 or 3 of them.
      o.sliceBytes = count >= 1001 ? 64 : 4096;
      o.slicesInFlight = 1 + 2 * (variant % 2);
      ++variant;
      sim::SimResult r = simulate(o);
      ASSERT_TRUE(r.ok) << describeCase(o) << ": " << r.error;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Combos, SimulatorExhaustive, ::testing::ValuesIn(allCombos()), comboName);

// Larger rank counts with small counts. The ring's AllGather/ReduceScatter have n steps per rank (n^2 in all),
// the direct AllToAll n^2 links: they stop at 1000 and 255 ranks. The gathers move n^2 elements in all, so
// their slices are large; the others use 8-byte slices, so that 7 elements take several.
class SimulatorLarge : public ::testing::TestWithParam<Combo> {};

TEST_P(SimulatorLarge, SampleUpTo4096Ranks) {
  const Combo c = GetParam();
  const bool gathers =
      c.coll == Collective::AllGather || c.coll == Collective::ReduceScatter || c.coll == Collective::AllToAll;
  // hier on one host is a direct exchange among all ranks (n^2 links for AllGather and ReduceScatter, as direct's):
  // test_simulator_hosts.cpp takes it to 4096 on many hosts.
  const bool hier = c.algo == Algorithm::Hierarchical;
  const int maxRanks = c.algo == Algorithm::Direct || (hier && gathers) ? 255
                       : (c.algo == Algorithm::Ring && gathers) || hier ? 1000
                                                                        : 4096;
  int variant = 0;
  for (int n : {128, 255, 1000, 4096}) {
    if (n > maxRanks) continue;
    for (size_t count : {size_t{1}, size_t{7}}) {
      if (gathers && n > 1000 && count > 1) continue;
      sim::SimOptions o;
      o.coll = c.coll;
      o.algo = c.algo;
      o.nranks = n;
      o.count = count;
      o.root = variant % 2 ? n - 1 : n / 3;
      o.inPlace = variant % 2 == 0;
      o.sliceBytes = gathers ? 64 * 1024 : 8;
      ++variant;
      auto start = std::chrono::steady_clock::now();
      sim::SimResult r = simulate(o);
      ASSERT_TRUE(r.ok) << describeCase(o) << ": " << r.error;
      if (std::getenv("COLLIE_TEST_VERBOSE"))
        std::printf("  %s: %.2f s\n", describeCase(o).c_str(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Combos, SimulatorLarge, ::testing::ValuesIn(allCombos()), comboName);

// algorithms::supports() is the one rule: build() (and each builder) refuses every other pair with InvalidUsage
// naming the collective and the algorithm, instead of building another algorithm's schedule; every supported
// pair builds, at every rank of every size tried.
TEST(AlgorithmSupport, BuildRefusesUnsupportedPairsAndBuildsSupportedOnes) {
  using algorithms::ScheduleKey;
  const Collective colls[] = {Collective::AllReduce, Collective::Broadcast,     Collective::Reduce,
                              Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll,
                              Collective::Send,      Collective::Recv};
  int supported = 0;
  for (Collective c : colls) {
    for (Algorithm a : algorithms::kAllAlgorithms) {
      const std::string pair = std::string(algorithmName(a)) + " " + collectiveName(c);
      if (supports(a, c)) ++supported;
      for (int n : {1, 2, 3, 4, 7, 8}) {
        for (int r : {0, n / 2, n - 1}) {
          const int root = (c == Collective::Send || c == Collective::Recv) ? (r + 1) % n : n - 1;
          const ScheduleKey key{c, r, n, 1001, root};
          if (supports(a, c)) {
            EXPECT_NO_THROW(algorithms::build(a, key)) << pair << " nranks=" << n << " rank=" << r;
            continue;
          }
          for (int via = 0; via < 2; ++via) {  // build(), then the algorithm's own builder
            try {
              if (via == 0) {
                algorithms::build(a, key);
              } else if (a == Algorithm::Ring) {
                algorithms::buildRing(key);
              } else if (a == Algorithm::Direct) {
                algorithms::buildDirect(key);
              } else if (a == Algorithm::Tree) {
                algorithms::buildTree(key);
              } else if (a == Algorithm::HalvingDoubling) {
                algorithms::buildHalvingDoubling(key);
              } else {
                algorithms::buildHierarchical(key, algorithms::patterns::HostLayout::roundRobin(n, 2));
              }
              ADD_FAILURE() << pair << ": built a schedule (via " << (via == 0 ? "build()" : "the builder") << ")";
            } catch (const Error& e) {
              EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << pair;
              const std::string msg = e.what();
              EXPECT_NE(msg.find(algorithmName(a)), std::string::npos) << msg;
              EXPECT_NE(msg.find(collectiveName(c)), std::string::npos) << msg;
            }
          }
        }
      }
    }
  }
  // ring: 5, direct: AllReduce, AllToAll, Send, Recv; tree: 3; rhd: 3; hier: 5 (all but AllToAll, Send, Recv).
  EXPECT_EQ(supported, 20);
}

// ---- The simulator catches broken schedules ---------------------------------------------------------------------

// Schedule::inputReadOnce (the executor scales an Avg's or a PreMulSum's input as steps read it only where it holds):
// ring, tree and halving-doubling AllReduce read each input element once on every rank; the direct AllReduce's rank 0
// copies its input twice (to the area it sends from and to its output).
TEST(ScheduleInputReadOnce, SaysWhetherAnyInputElementIsReadTwice) {
  for (int n : {2, 3, 5, 8}) {
    for (int r = 0; r < n; ++r) {
      const algorithms::ScheduleKey key{algorithms::Collective::AllReduce, r, n, 1000, 0, 4};
      for (algorithms::Algorithm a :
           {algorithms::Algorithm::Ring, algorithms::Algorithm::Tree, algorithms::Algorithm::HalvingDoubling})
        EXPECT_TRUE(algorithms::build(a, key).inputReadOnce) << algorithms::algorithmName(a) << " " << r << "/" << n;
      if (r == 0) {
        EXPECT_FALSE(algorithms::build(algorithms::Algorithm::Direct, key).inputReadOnce) << "direct " << n;
      }
    }
  }
}

TEST(Simulator, ReportsADeadlockNamingTheWaitingRanks) {
  sim::SimOptions o;
  o.coll = Collective::AllReduce;
  o.algo = Algorithm::Ring;
  o.nranks = 4;
  o.count = 64;
  o.mutate = [](int rank, Schedule& s) {
    if (rank == 2) s.steps.erase(s.steps.begin());  // rank 2 never sends its first chunk
  };
  sim::SimResult r = simulate(o);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("deadlock"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("rank 3"), std::string::npos) << r.error;  // waits on rank 2
  EXPECT_NE(r.error.find("from rank 2"), std::string::npos) << r.error;
}

TEST(Simulator, ReportsASizeMismatchNamingBothRanks) {
  sim::SimOptions o;
  o.coll = Collective::AllReduce;
  o.algo = Algorithm::Tree;
  o.nranks = 5;
  o.count = 100;
  o.mutate = [](int rank, Schedule& s) {
    if (rank == 1 && s.steps[0].kind == StepKind::Send) s.steps[0].count -= 1;  // rank 1 is a leaf of tree 0
  };
  sim::SimResult r = simulate(o);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("size mismatch from rank 1 to rank 2"), std::string::npos) << r.error;
}

TEST(Simulator, ReportsWrongResults) {
  sim::SimOptions o;
  o.coll = Collective::AllGather;
  o.algo = Algorithm::HalvingDoubling;
  o.nranks = 8;
  o.count = 10;
  o.mutate = [](int rank, Schedule& s) {
    if (rank == 5) s.steps[0].src.offset = 1;  // copies its own block from the wrong place
  };
  sim::SimResult r = simulate(o);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find(": output["), std::string::npos) << r.error;  // everyone gets rank 5's block wrong
}

TEST(Simulator, ReportsAWriteToTheSendBuffer) {
  sim::SimOptions o;
  o.coll = Collective::AllReduce;
  o.algo = Algorithm::HalvingDoubling;
  o.nranks = 4;
  o.count = 16;
  o.mutate = [](int, Schedule& s) { s.steps.back().dst.buffer = Buffer::Input; };
  sim::SimResult r = simulate(o);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("input"), std::string::npos) << r.error;
}

// ---- The time model --------------------------------------------------------------------------------------------

SimResult timed(Collective coll, Algorithm algo, int n, size_t count, sim::MemoryCost cost, size_t slice) {
  SimOptions o;
  o.coll = coll;
  o.algo = algo;
  o.nranks = n;
  o.count = count;
  o.cost = cost;
  o.sliceBytes = slice;
  SimResult r = simulate(o);
  EXPECT_TRUE(r.ok) << r.error;
  return r;
}

TEST(SimulatorTime, LatencyOnlyCountsHops) {
  sim::MemoryCost alphaOnly{1e-6, 0, 0, 0};
  const double us = 1e-6;
  // Ring: 2(n-1) hops; tree: up and down its depth (log2 8 = 3) in parallel on both trees; rhd: 2 log2 n rounds
  // (above 2 KiB: 1024 floats a rank).
  EXPECT_NEAR(timed(Collective::AllReduce, Algorithm::Ring, 8, 8 * 16, alphaOnly, 1 << 20).seconds, 14 * us, 1e-9);
  EXPECT_NEAR(timed(Collective::AllReduce, Algorithm::Tree, 8, 8 * 16, alphaOnly, 1 << 20).seconds, 6 * us, 1e-9);
  EXPECT_NEAR(timed(Collective::AllReduce, Algorithm::HalvingDoubling, 8, 8 * 1024, alphaOnly, 1 << 20).seconds, 6 * us,
              1e-9);
  // Folding adds one hop in and one out.
  EXPECT_NEAR(timed(Collective::AllReduce, Algorithm::HalvingDoubling, 6, 1024, alphaOnly, 1 << 20).seconds, 6 * us,
              1e-9);
  // Up to 2 KiB rhd is recursive doubling: log2 n rounds. With 6 ranks the participants that absorb no extra rank
  // start a hop early, so the result reaches the extra ranks after 3 hops, not 4.
  EXPECT_NEAR(timed(Collective::AllReduce, Algorithm::HalvingDoubling, 8, 8 * 16, alphaOnly, 1 << 20).seconds, 3 * us,
              1e-9);
  EXPECT_NEAR(timed(Collective::AllReduce, Algorithm::HalvingDoubling, 8, 512, alphaOnly, 1 << 20).seconds, 3 * us,
              1e-9);
  EXPECT_NEAR(timed(Collective::AllReduce, Algorithm::HalvingDoubling, 8, 513, alphaOnly, 1 << 20).seconds, 6 * us,
              1e-9);
  EXPECT_NEAR(timed(Collective::AllReduce, Algorithm::HalvingDoubling, 6, 64, alphaOnly, 1 << 20).seconds, 3 * us,
              1e-9);
  // A chain broadcast of one slice: n-1 hops.
  EXPECT_NEAR(timed(Collective::Broadcast, Algorithm::Ring, 10, 64, alphaOnly, 1 << 20).seconds, 9 * us, 1e-9);
}

TEST(SimulatorTime, BandwidthAndPipelining) {
  sim::MemoryCost betaOnly{0, 1e-9, 0, 0};  // 1 GB/s ports
  const size_t count = 1 << 20;             // 4 MiB of int32
  const double bytes = 4.0 * count;
  // Ring AllReduce sends 2(n-1)/n of the buffer through each port.
  double ring = timed(Collective::AllReduce, Algorithm::Ring, 4, count, betaOnly, 64 * 1024).seconds;
  EXPECT_NEAR(ring, 1.5 * bytes * 1e-9, 0.05 * ring);
  // A pipelined chain broadcast costs about one buffer time, an unpipelined one (a single slice) n-1 of them.
  double piped = timed(Collective::Broadcast, Algorithm::Ring, 4, count, betaOnly, 64 * 1024).seconds;
  double whole = timed(Collective::Broadcast, Algorithm::Ring, 4, count, betaOnly, 64 << 20).seconds;
  EXPECT_LT(piped, 1.1 * bytes * 1e-9);
  EXPECT_NEAR(whole, 3 * bytes * 1e-9, 1e-6);
  // Reductions cost gamma per reduced byte: the ring reduces (n-1)/n of the buffer on every rank.
  sim::MemoryCost gammaOnly{0, 0, 1e-9, 0};
  double reduceTime = timed(Collective::AllReduce, Algorithm::Ring, 4, count, gammaOnly, 64 * 1024).seconds;
  EXPECT_NEAR(reduceTime, 0.75 * bytes * 1e-9, 0.05 * reduceTime);
}

TEST(SimulatorTime, TimingOnlyRunsOnSharedBuffers) {
  sim::SimOptions o;
  o.coll = Collective::AllReduce;
  o.algo = Algorithm::Tree;
  o.nranks = 256;
  o.count = 1 << 16;
  o.type = DataType::Float32;
  o.checkData = false;
  o.cost = {5e-6, 1e-10, 1e-11, 0};
  o.sliceBytes = 16 * 1024;
  sim::SimResult r = simulate(o);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_GT(r.seconds, 2 * 8 * 5e-6);
  EXPECT_GT(r.maxBytesSent, size_t{1} << 18);
}

// ---- The in-memory connection ------------------------------------------------------------------------------------

TEST(MemoryConnection, MatchesInOrderAndChecksSizes) {
  auto [a, b] = sim::makeMemoryConnectionPair(3, 7);
  EXPECT_EQ(a->peer(), 7);
  EXPECT_EQ(b->peer(), 3);
  std::string src1 = "first", src2 = "second!", dst1(5, 'x'), dst2(7, 'x');
  transport::Transfer s1{src1.data(), src1.size()}, s2{src2.data(), src2.size()};
  transport::Transfer r1{dst1.data(), dst1.size()}, r2{dst2.data(), dst2.size()};
  a->postSend(&s1);
  a->postSend(&s2);
  EXPECT_TRUE(a->busy());
  b->postRecv(&r1);
  EXPECT_TRUE(b->progress());
  EXPECT_TRUE(s1.complete && r1.complete);
  EXPECT_FALSE(s2.complete);
  b->postRecv(&r2);
  b->progress();
  EXPECT_EQ(dst1, src1);
  EXPECT_EQ(dst2, src2);
  EXPECT_FALSE(a->busy());
  EXPECT_FALSE(b->busy());
  transport::Transfer bad{dst1.data(), 3};
  a->postSend(&s1);
  try {
    b->postRecv(&bad);
    FAIL() << "a size mismatch must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("from rank 3 to rank 7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collie::sim
