// Init's table exchange (src/core/bootstrap_plan.hpp), for every rank count 1..64 and a sample of large ones:
//   - what the root sends each rank (bootstrapPeers): sorted, without the rank itself, at most floor(log2 N) + 1
//     entries (so O(N log N) from the root in all), symmetric (both ends of a link know each other), and every peer
//     the rank's part of the all-gather names is among them (nobody needs an address the root did not send);
//   - the all-gather itself, run by the simulator (the real builder and executor for all ranks, sizes matched,
//     nothing hanging): every rank ends with every rank's entry, i.e. the table the root holds. Its rounds are
//     tableGatherRounds(N) = log2 N for a power of two, else floor(log2 N) + 2 = ceil(log2 N) + 1 (the folded ranks'
//     entries in, the table back out); its longest chain of messages (the simulator's time with one unit of latency
//     per message and nothing else) is at least ceil(log2 N), which no all-gather can beat, and at most its rounds;
//   - the decision to gather at all is the same on every rank and agrees with what the root's answer holds;
//   - the links init closes afterwards (gatherOnlyPeers) are the all-gather's peers but ring neighbours, symmetric
//     (both ends close a link, or neither), so a rank keeps at most 2 of them whatever N.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include "core/bootstrap_plan.hpp"
#include "sim/simulator.hpp"
#include "transport/transport.hpp"

namespace collie::core {
namespace {

int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

std::vector<int> sampleCounts() {
  std::vector<int> out;
  for (int n = 1; n <= 64; ++n) out.push_back(n);
  for (int n : {65, 96, 100, 127, 255, 257, 1000, 1023, 1024, 1025, 3000, 4096, 4097}) out.push_back(n);
  return out;
}

TEST(BootstrapPlan, TheRootSendsEachRankAtMostLogNEntriesSymmetricallyCoveringItsSchedule) {
  for (int n : sampleCounts()) {
    std::vector<std::vector<int>> peers(static_cast<size_t>(n));
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      auto& mine = peers[static_cast<size_t>(r)] = bootstrapPeers(r, n);
      total += mine.size();
      ASSERT_TRUE(std::is_sorted(mine.begin(), mine.end())) << r << " of " << n;
      ASSERT_EQ(std::adjacent_find(mine.begin(), mine.end()), mine.end()) << r << " of " << n;
      for (int p : mine) ASSERT_TRUE(p >= 0 && p < n && p != r) << p << " for " << r << " of " << n;
      if (n <= 2) {
        EXPECT_EQ(mine.size(), static_cast<size_t>(n - 1)) << r << " of " << n;
        continue;
      }
      EXPECT_LE(mine.size(), static_cast<size_t>(floorLog2(n) + 1)) << r << " of " << n;
      for (const algorithms::Step& s : tableGatherSchedule(r, n).steps)
        for (int p : {s.sendPeer, s.recvPeer}) {
          if (p >= 0 && p != r) {
            ASSERT_TRUE(std::binary_search(mine.begin(), mine.end(), p)) << p << " for " << r << " of " << n;
          }
        }
    }
    for (int r = 0; r < n; ++r)
      for (int p : peers[static_cast<size_t>(r)])
        ASSERT_TRUE(std::binary_search(peers[static_cast<size_t>(p)].begin(), peers[static_cast<size_t>(p)].end(), r))
            << r << " knows " << p << " but not the other way, " << n << " ranks";
    EXPECT_LE(total, static_cast<size_t>(n) * static_cast<size_t>(floorLog2(n) + 1)) << n;
  }
}

TEST(BootstrapPlan, GatheringIsDecidedByTheRankCountAloneAndOnlyWhereTheRootLeftEntriesOut) {
  for (int n = 1; n <= 64; ++n) {
    bool someoneLacks = false;
    for (int r = 0; r < n; ++r) someoneLacks |= bootstrapPeers(r, n).size() < static_cast<size_t>(n - 1);
    EXPECT_EQ(tableGatherNeeded(n), someoneLacks) << n;
    EXPECT_EQ(tableGatherRounds(n) > 0, tableGatherNeeded(n)) << n;
  }
  EXPECT_EQ(tableGatherSelection(), "allgather:rhd");
}

TEST(BootstrapPlan, EveryRankEndsWithTheRootsTableInLogNRounds) {
  for (int n : sampleCounts()) {
    if (!tableGatherNeeded(n)) continue;
    sim::SimOptions o;
    o.coll = algorithms::Collective::AllGather;
    o.algo = kTableGatherAlgorithm;
    o.nranks = n;
    // Each rank's block is its entry (the simulator fills it with data of its own and checks every rank's table
    // block by block); a PeerInfo's bytes up to 64 ranks, one byte beyond (the schedule's peers and rounds do not
    // depend on the size).
    o.count = n <= 64 ? sizeof(transport::PeerInfo) : 1;
    o.type = DataType::Uint8;
    o.cost.alpha = 1;  // one unit per message, nothing else: the estimate counts rounds
    sim::SimResult res = sim::simulate(o);
    ASSERT_TRUE(res.ok) << n << " ranks: " << res.error;
    const bool powerOfTwo = (n & (n - 1)) == 0;
    EXPECT_EQ(tableGatherRounds(n), ceilLog2(n) + (powerOfTwo ? 0 : 1)) << n << " ranks";
    EXPECT_LE(res.seconds, tableGatherRounds(n)) << n << " ranks";
    EXPECT_GE(res.seconds, ceilLog2(n)) << n << " ranks";
    if (powerOfTwo) {
      EXPECT_DOUBLE_EQ(res.seconds, tableGatherRounds(n)) << n << " ranks";
    }
    // O(N) bytes per rank: what a rank holds at most doubles each round, so the doubling sends less than 2N entries,
    // and a folding rank sends the whole table back once.
    EXPECT_LE(res.maxBytesSent, 3 * static_cast<uint64_t>(n) * o.count) << n << " ranks";
  }
}

TEST(BootstrapPlan, InitClosesTheAllGathersLinksButRingNeighboursOnBothEnds) {
  for (int n : sampleCounts()) {
    std::vector<std::vector<int>> closed(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) closed[static_cast<size_t>(r)] = gatherOnlyPeers(r, n);
    for (int r = 0; r < n; ++r) {
      const std::vector<int>& mine = closed[static_cast<size_t>(r)];
      if (!tableGatherNeeded(n)) {
        EXPECT_TRUE(mine.empty()) << r << " of " << n;
        continue;
      }
      const std::vector<int> gathered = bootstrapPeers(r, n);
      std::vector<int> kept;
      std::set_difference(gathered.begin(), gathered.end(), mine.begin(), mine.end(), std::back_inserter(kept));
      EXPECT_EQ(kept.size() + mine.size(), gathered.size()) << r << " of " << n << ": closes a peer it did not gather";
      EXPECT_LE(kept.size(), 2u) << r << " of " << n;
      for (int p : kept) EXPECT_TRUE(p == (r + 1) % n || p == (r + n - 1) % n) << p << " kept by " << r << " of " << n;
      for (int p : mine) {
        EXPECT_FALSE(p == (r + 1) % n || p == (r + n - 1) % n) << p << " closed by " << r << " of " << n;
        const std::vector<int>& theirs = closed[static_cast<size_t>(p)];
        ASSERT_TRUE(std::find(theirs.begin(), theirs.end(), r) != theirs.end())
            << r << " closes its link to " << p << " but not the other way, " << n << " ranks";
      }
    }
  }
}

}  // namespace
}  // namespace collie::core
