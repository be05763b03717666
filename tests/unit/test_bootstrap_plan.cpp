// Init's table exchange (src/core/bootstrap_plan.hpp), for every rank count 1..64 and a sample of large ones:
//   - what the root sends each rank (bootstrapPeers): its ring neighbours, sorted, without the rank itself (so 2N
//     entries from the root in all), symmetric (both ends of a link know each other);
//   - the all-gather's plan, run for all ranks at once on sets of known entries: every partner a rank talks to in a
//     round, and every entry it sends, it knew before that round (from the root or an earlier round); every send is
//     a receive of the partner in the same round with the same entries; no rank receives an entry it already has;
//     every rank ends with every entry, having received exactly the N - 3 it lacked and sent as many, in
//     tableGatherRounds(N) = ceil(log2(N - 1)) - 1 rounds of at most two sends and two receives;
//   - the decision to gather at all is the same on every rank and agrees with what the root's answer holds;
//   - the links init closes afterwards (gatherOnlyPeers) are the all-gather's partners but ring neighbours,
//     symmetric (both ends close a link, or neither), so a rank keeps at most 2 of them whatever N.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "core/bootstrap_plan.hpp"

namespace collie::core {
namespace {

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

int ringNext(int r, int n) { return (r + 1) % n; }
int ringPrev(int r, int n) { return (r + n - 1) % n; }

TEST(BootstrapPlan, TheRootSendsEachRankItsRingNeighboursOnly) {
  for (int n : sampleCounts()) {
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      const std::vector<int> mine = bootstrapPeers(r, n);
      total += mine.size();
      std::vector<int> expected;
      if (n > 1) expected = {ringPrev(r, n), ringNext(r, n)};
      std::sort(expected.begin(), expected.end());
      expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
      ASSERT_EQ(mine, expected) << r << " of " << n;
      for (int p : mine) {
        const std::vector<int> theirs = bootstrapPeers(p, n);
        ASSERT_TRUE(std::binary_search(theirs.begin(), theirs.end(), r)) << r << " knows " << p << ", " << n;
      }
    }
    EXPECT_LE(total, 2 * static_cast<size_t>(n)) << n;
  }
}

TEST(BootstrapPlan, GatheringIsDecidedByTheRankCountAloneAndOnlyWhereTheRootLeftEntriesOut) {
  for (int n = 1; n <= 64; ++n) {
    bool someoneLacks = false;
    for (int r = 0; r < n; ++r) someoneLacks |= bootstrapPeers(r, n).size() < static_cast<size_t>(n - 1);
    EXPECT_EQ(tableGatherNeeded(n), someoneLacks) << n;
    EXPECT_EQ(tableGatherRounds(n) > 0, tableGatherNeeded(n)) << n;
    for (int r = 0; r < n; ++r) EXPECT_EQ(tableGatherPlan(r, n).size(), static_cast<size_t>(tableGatherRounds(n)));
  }
}

TEST(BootstrapPlan, EveryRankEndsWithTheRootsTableEachEntryOnceInLogNRounds) {
  for (int n : sampleCounts()) {
    std::vector<std::vector<TableRound>> plans(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) plans[static_cast<size_t>(r)] = tableGatherPlan(r, n);
    // known[r][q]: rank r holds rank q's entry.
    std::vector<std::vector<char>> known(static_cast<size_t>(n), std::vector<char>(static_cast<size_t>(n), 0));
    for (int r = 0; r < n; ++r) {
      known[static_cast<size_t>(r)][static_cast<size_t>(r)] = 1;
      for (int p : bootstrapPeers(r, n)) known[static_cast<size_t>(r)][static_cast<size_t>(p)] = 1;
    }
    std::vector<size_t> sent(static_cast<size_t>(n), 0), received(static_cast<size_t>(n), 0);
    const int rounds = tableGatherRounds(n);
    if (n >= 4) {
      EXPECT_EQ(rounds, ceilLog2(n - 1) - 1) << n;
    }
    for (int k = 0; k < rounds; ++k) {
      std::vector<std::vector<char>> next = known;
      for (int r = 0; r < n; ++r) {
        const TableRound& round = plans[static_cast<size_t>(r)][static_cast<size_t>(k)];
        const auto& mine = known[static_cast<size_t>(r)];
        ASSERT_LE(round.sends.size(), 2u);
        ASSERT_LE(round.recvs.size(), 2u);
        for (const TableMessage& m : round.sends) {
          ASSERT_TRUE(m.peer >= 0 && m.peer < n && m.peer != r && m.count > 0) << r << " of " << n << ", round " << k;
          ASSERT_TRUE(mine[static_cast<size_t>(m.peer)]) << r << " sends to " << m.peer << " unknown, " << n;
          for (int i = 0; i < m.count; ++i)
            ASSERT_TRUE(mine[static_cast<size_t>((m.first + i) % n)]) << r << " sends an entry it lacks, " << n;
          sent[static_cast<size_t>(r)] += static_cast<size_t>(m.count);
          // The partner receives exactly this in the same round.
          const TableRound& theirs = plans[static_cast<size_t>(m.peer)][static_cast<size_t>(k)];
          const bool matched = std::any_of(theirs.recvs.begin(), theirs.recvs.end(), [&](const TableMessage& t) {
            return t.peer == r && t.first == m.first && t.count == m.count;
          });
          ASSERT_TRUE(matched) << r << " sends " << m.peer << " what it does not receive, round " << k << ", " << n;
        }
        for (const TableMessage& m : round.recvs) {
          ASSERT_TRUE(m.peer >= 0 && m.peer < n && m.peer != r && m.count > 0) << r << " of " << n << ", round " << k;
          ASSERT_TRUE(mine[static_cast<size_t>(m.peer)]) << r << " receives from " << m.peer << " unknown, " << n;
          const TableRound& theirs = plans[static_cast<size_t>(m.peer)][static_cast<size_t>(k)];
          const bool matched = std::any_of(theirs.sends.begin(), theirs.sends.end(), [&](const TableMessage& t) {
            return t.peer == r && t.first == m.first && t.count == m.count;
          });
          ASSERT_TRUE(matched) << r << " receives from " << m.peer << " what it does not send, round " << k;
          for (int i = 0; i < m.count; ++i) {
            char& slot = next[static_cast<size_t>(r)][static_cast<size_t>((m.first + i) % n)];
            ASSERT_FALSE(slot) << r << " receives rank " << (m.first + i) % n << "'s entry twice, " << n;
            slot = 1;
          }
          received[static_cast<size_t>(r)] += static_cast<size_t>(m.count);
        }
      }
      known = std::move(next);
    }
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < n; ++q) ASSERT_TRUE(known[static_cast<size_t>(r)][static_cast<size_t>(q)]) << r << ", " << q;
      const size_t lacked = n >= 4 ? static_cast<size_t>(n - 3) : 0;
      EXPECT_EQ(received[static_cast<size_t>(r)], lacked) << r << " of " << n;
      EXPECT_EQ(sent[static_cast<size_t>(r)], lacked) << r << " of " << n;
    }
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
      const std::vector<int> gathered = tableGatherPartners(r, n);
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
