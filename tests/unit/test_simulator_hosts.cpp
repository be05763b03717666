// The hierarchical (host-aware) schedules in the simulator (src/sim/simulator.hpp): the real builders and the
// real executor for every rank, checked for matched transfers, no deadlock and exact results, on many host
// layouts. Exhaustive for 1..8 hosts x 1..8 ranks per host, each shape three ways: hosts of consecutive ranks,
// hosts interleaved (rank r on host r mod H, as on the test bed), and uneven hosts (host h holds 1..L ranks,
// interleaved); then a sample up to 4096 ranks. Also: the flat ring through appendRingAllReduce is what it was,
// the hierarchical schedules' traffic between hosts is what their comment promises (AllReduce, AllGather and
// ReduceScatter), and the time model with hosts.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/patterns/hosts.hpp"
#include "sim/simulator.hpp"

namespace collie::sim {
namespace {

using algorithms::patterns::HostLayout;

std::string describeLayout(const HostLayout& hl) {
  std::string s = "hosts of ranks [";
  for (size_t r = 0; r < hl.hostOf.size(); ++r) s += (r ? " " : "") + std::to_string(hl.hostOf[r]);
  return s + "]";
}

// Host h holds 1 + (h * 5 + L) mod L ranks (1..L, varied), and the ranks of the hosts are interleaved: rank r goes
// to the next host (round robin) that still has room.
HostLayout uneven(int hosts, int perHost) {
  std::vector<int> room;
  for (int h = 0; h < hosts; ++h) room.push_back(1 + (h * 5 + perHost) % perHost);
  room[0] = perHost;  // at least one host holds L ranks
  std::vector<uint64_t> ids;
  for (int h = 0, left = 1; left > 0; h = (h + 1) % hosts) {
    if (room[static_cast<size_t>(h)] > 0) {
      --room[static_cast<size_t>(h)];
      ids.push_back(static_cast<uint64_t>(h));
    }
    left = 0;
    for (int x : room) left += x;
  }
  return HostLayout::fromIds(ids);
}

std::vector<HostLayout> layoutsOf(int hosts, int perHost) {
  const int n = hosts * perHost;
  return {HostLayout::blocks(n, perHost), HostLayout::roundRobin(n, hosts), uneven(hosts, perHost)};
}

std::string describeCase(const SimOptions& o) {
  return std::string(collectiveName(o.coll)) + " hier nranks=" + std::to_string(o.nranks) +
         " count=" + std::to_string(o.count) + " root=" + std::to_string(o.root) +
         " op=" + std::to_string(static_cast<int>(o.op)) + (o.inPlace ? " in-place" : "") +
         " slice=" + std::to_string(o.sliceBytes) + " " + describeLayout(o.hosts);
}

class HierarchicalExhaustive : public ::testing::TestWithParam<Collective> {};

TEST_P(HierarchicalExhaustive, Hosts1To8TimesRanks1To8EvenAndUneven) {
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg, ReduceOp::Prod, ReduceOp::Min};
  const DataType types[] = {DataType::Int32, DataType::Int64, DataType::Uint8, DataType::Int8};
  int variant = 0, runs = 0;
  for (int hosts = 1; hosts <= 8; ++hosts) {
    for (int perHost = 1; perHost <= 8; ++perHost) {
      for (const HostLayout& hl : layoutsOf(hosts, perHost)) {
        const int n = static_cast<int>(hl.hostOf.size());
        // AllGather and ReduceScatter count per rank: n x 201 elements per rank, still many slices per step.
        const size_t large =
            GetParam() == Collective::AllGather || GetParam() == Collective::ReduceScatter ? 201 : 1001;
        for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(hl.maxLocal * hosts - 1), large}) {
          SimOptions o;
          o.coll = GetParam();
          o.algo = Algorithm::Hierarchical;
          o.nranks = n;
          o.hosts = hl;
          o.count = count;
          o.root = (variant % 3 == 0) ? 0 : (variant % 3 == 1) ? n - 1 : n / 2;
          o.op = ops[variant % 5];
          o.type = types[variant % 4];
          o.inPlace = variant % 2 == 1;
          o.sliceBytes = count == large ? 64 : 4096;  // large counts: many slices per step
          o.slicesInFlight = 1 + 2 * (variant % 2);
          ++variant;
          SimResult r = simulate(o);
          ASSERT_TRUE(r.ok) << describeCase(o) << ": " << r.error;
          ++runs;
        }
      }
    }
  }
  EXPECT_EQ(runs, 8 * 8 * 3 * 4);
}

INSTANTIATE_TEST_SUITE_P(Colls, HierarchicalExhaustive,
                         ::testing::Values(Collective::AllReduce, Collective::Broadcast, Collective::Reduce,
                                           Collective::AllGather, Collective::ReduceScatter),
                         [](const ::testing::TestParamInfo<Collective>& info) {
                           return std::string(collectiveName(info.param));
                         });

TEST(HierarchicalLarge, SampleUpTo4096Ranks) {
  struct Shape {
    int hosts, perHost;
  };
  int variant = 0;
  for (Shape s : {Shape{16, 8}, Shape{128, 8}, Shape{64, 16}, Shape{512, 8}, Shape{8, 512}, Shape{1024, 4}}) {
    const int n = s.hosts * s.perHost;
    for (const HostLayout& hl : {HostLayout::blocks(n, s.perHost), uneven(s.hosts, s.perHost)}) {
      // Every shard non-empty (and cut in several chunks between hosts) up to 1024 ranks and 20000 ranks x shards;
      // 7 elements (most shards empty) at every size: beyond, the steps of full shards take minutes to simulate.
      const size_t full = static_cast<size_t>(hl.maxLocal) * static_cast<size_t>(s.hosts) + 3;
      for (size_t count :
           {size_t{7}, hl.hostOf.size() <= 1024 && hl.hostOf.size() * static_cast<size_t>(hl.maxLocal) <= 20000
                           ? full
                           : size_t{1}})
        for (Collective c : {Collective::AllReduce, Collective::Broadcast, Collective::Reduce}) {
          SimOptions o;
          o.coll = c;
          o.algo = Algorithm::Hierarchical;
          o.nranks = static_cast<int>(hl.hostOf.size());
          o.hosts = hl;
          o.count = count;
          o.sliceBytes = 8;
          o.root = variant % 3 == 0 ? o.nranks - 1 : o.nranks / 3;
          o.inPlace = variant % 2 == 0;
          ++variant;
          auto start = std::chrono::steady_clock::now();
          SimResult r = simulate(o);
          if (std::getenv("COLLIE_TEST_VERBOSE"))
            std::printf("  %s %dx%d n=%d count=%zu: %.2f s\n", collectiveName(c), s.hosts, s.perHost, o.nranks, o.count,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          ASSERT_TRUE(r.ok) << collectiveName(c) << " hosts=" << s.hosts << " perHost=" << s.perHost
                            << " nranks=" << o.nranks << " count=" << o.count << ": " << r.error;
        }
    }
  }
}

// AllGather and ReduceScatter move n blocks to (from) every rank, n^2 in all, and each rank runs H-1 ring steps
// between hosts and L-1 exchanges inside its host per piece of its shard, so the samples keep H and L near sqrt(n)
// (64 x 64 for 4096 ranks), with 1 or 7 elements per rank. On hosts of consecutive ranks (rank r on host r / L) a
// shard's blocks lie L blocks apart: H pieces per shard.
void simulateGathers(const HostLayout& hl, size_t count, int variant) {
  for (Collective c : {Collective::AllGather, Collective::ReduceScatter}) {
    SimOptions o;
    o.coll = c;
    o.algo = Algorithm::Hierarchical;
    o.nranks = static_cast<int>(hl.hostOf.size());
    o.hosts = hl;
    o.count = count;
    o.sliceBytes = 8;
    o.inPlace = variant % 2 == 0;
    o.op = variant % 3 == 0 ? ReduceOp::Max : ReduceOp::Sum;
    auto start = std::chrono::steady_clock::now();
    SimResult r = simulate(o);
    if (std::getenv("COLLIE_TEST_VERBOSE"))
      std::printf("  %s H=%d n=%d count=%zu: %.2f s\n", collectiveName(c), hl.nhosts(), o.nranks, o.count,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    ASSERT_TRUE(r.ok) << collectiveName(c) << " H=" << hl.nhosts() << " n=" << o.nranks << " count=" << o.count << " "
                      << (o.nranks <= 128 ? describeLayout(hl) : "") << ": " << r.error;
  }
}

TEST(HierarchicalLarge, GathersSampleUpTo1024Ranks) {
  int variant = 0;
  for (const HostLayout& hl : layoutsOf(16, 8))  // consecutive, interleaved, uneven
    for (size_t count : {size_t{1}, size_t{7}}) simulateGathers(hl, count, variant++);
  simulateGathers(HostLayout::roundRobin(1024, 32), 1, variant++);
  simulateGathers(HostLayout::blocks(1024, 32), 1, variant++);
  simulateGathers(uneven(32, 32), 1, variant++);
  simulateGathers(uneven(32, 32), 7, variant++);
}

TEST(HierarchicalLarge, Gathers4096Ranks) { simulateGathers(HostLayout::roundRobin(4096, 64), 1, 0); }

// The flat ring, built through appendRingAllReduce, still sends 2(n-1)/n of the buffer per rank in 2n-1 steps.
TEST(HierarchicalTraffic, FlatRingUnchanged) {
  for (int n : {2, 3, 8}) {
    SimOptions o;
    o.coll = Collective::AllReduce;
    o.algo = Algorithm::Ring;
    o.nranks = n;
    o.count = 1000 * static_cast<size_t>(n);
    o.sliceBytes = 1 << 20;
    SimResult r = simulate(o);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.maxBytesSent, 2u * (n - 1) * 1000 * 4) << n;
    EXPECT_EQ(r.maxSteps, 2u * (n - 1) + 1) << n;  // send, n-1 reduce, n-2 copy, receive
  }
}

// With the time model, bytes between hosts cost 1 ns each and share each host's port; inside a host they are free.
// 4 hosts x 2 ranks interleaved (the test bed's placement): every hop of the flat ring crosses hosts, two ring
// streams share each host's port and each carries 2 x 7/8 of the buffer: 3.5 S per port. Hierarchical moves
// 2 x 3/4 S through each port: 1.5 S, so it must be more than twice as fast (the intra-host phases are free).
/// Seconds the simulator's time model gives `coll` with `algo` on 4 hosts x 2 ranks (round robin) for `count`
/// int32 per rank: memory nearly free, 10 us and 1 ns/B between hosts.
double timedAcrossHosts(Collective coll, Algorithm algo, size_t count) {
  SimOptions o;
  o.coll = coll;
  o.algo = algo;
  o.nranks = 8;
  o.hosts = HostLayout::roundRobin(8, 4);
  o.count = count;
  o.type = DataType::Int32;
  o.checkData = false;
  o.sliceBytes = 256 * 1024;
  o.cost = MemoryCost{1e-9, 1e-15, 0, 0};
  o.interHost = MemoryCost{10e-6, 1e-9, 0, 0};
  SimResult r = simulate(o);
  EXPECT_TRUE(r.ok) << r.error;
  return r.seconds;
}

TEST(HierarchicalTraffic, BeatsTheFlatRingAcrossHostsInTheTimeModel) {
  auto timed = [](Algorithm a) { return timedAcrossHosts(Collective::AllReduce, a, 1 << 20); };
  const double bytes = 4.0 * (1 << 20);
  const double ring = timed(Algorithm::Ring), hier = timed(Algorithm::Hierarchical);
  EXPECT_GT(ring, 3.4 * bytes * 1e-9) << "the flat ring's ports carry 3.5 S each";
  EXPECT_LT(hier, 1.7 * bytes * 1e-9) << "the hierarchical schedule's ports carry 1.5 S each";
  EXPECT_GT(ring / hier, 2.0);
}

// The same for AllGather and ReduceScatter (count per rank: one block B): the flat ring passes n-1 = 7 blocks
// through every hop, and all of them cross hosts, two streams per host port: 14 B per port. Hierarchical sends
// each host's L (H-1) = 6 blocks through its port, so it must be more than twice as fast.
TEST(HierarchicalTraffic, GathersBeatTheFlatRingAcrossHostsInTheTimeModel) {
  for (Collective c : {Collective::AllGather, Collective::ReduceScatter}) {
    auto timed = [c](Algorithm a) { return timedAcrossHosts(c, a, 1 << 18); };
    const double block = 4.0 * (1 << 18);
    const double ring = timed(Algorithm::Ring), hier = timed(Algorithm::Hierarchical);
    EXPECT_GT(ring, 13.5 * block * 1e-9) << collectiveName(c) << ": the flat ring's ports carry 14 blocks each";
    EXPECT_LT(hier, 6.8 * block * 1e-9) << collectiveName(c) << ": the hierarchical schedule's ports carry 6 each";
    EXPECT_GT(ring / hier, 2.0) << collectiveName(c);
  }
}

// A ReduceScatter owner keeps in Scratch only the host's partial sums of its own shard's blocks (one per host that
// has a rank of that local index), not a copy of the whole input; a rank alone on its host keeps none.
TEST(HierarchicalTraffic, ReduceScatterScratchHoldsOnlyTheOwnedShard) {
  const size_t block = 100;
  for (int r = 0; r < 8; ++r) {  // 4 hosts x 2: every shard has a block on each host
    const Schedule s = algorithms::build(Algorithm::Hierarchical, {Collective::ReduceScatter, r, 8, block, 0},
                                         HostLayout::roundRobin(8, 4));
    EXPECT_EQ(s.scratchCount, 4 * block) << "rank " << r;
  }
  const HostLayout hl = HostLayout::blocks(5, 2);                             // hosts {0, 1}, {2, 3}, {4}
  const size_t expected[] = {3 * block, 2 * block, 3 * block, 2 * block, 0};  // shard 0: ranks 0, 2, 4; 1: 1, 3
  for (int r = 0; r < 5; ++r)
    EXPECT_EQ(algorithms::build(Algorithm::Hierarchical, {Collective::ReduceScatter, r, 5, block, 0}, hl).scratchCount,
              expected[r])
        << "rank " << r;
}

}  // namespace
}  // namespace collie::sim
