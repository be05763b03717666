// Init's table exchange (src/core/bootstrap_plan.hpp), for every rank count 1..64 and a sample of large ones:
//   - the tree: rank 0 at its root, every other rank a child of its parent, each subtree a contiguous range of ranks
//     (mod N) with its root in the middle;
//   - what the root sends each rank (bootstrapPeers): its tree neighbours, sorted, without the rank itself, at most 3
//     (so fewer than 2N entries from the root in all), symmetric (both ends of a link know each other);
//   - the all-gather's plan, run for all ranks at once on sets of known entries: a rank talks only to peers it
//     knows and sends only entries it holds at that round; the sends of p to q, in order, are the receives of q from p,
//     in order, with the same entries; no rank receives an entry twice; every rank ends with every entry, having
//     received exactly the N - 1 others and sent at most 2N + 1; no rank waits on a cycle (each round's start time is
//     computed from the messages it waits for, one unit per message), and the longest chain is tableGatherCost's, 2
//     floor(log2 N) where the down phase is one message and at most that plus its chunks where it is pipelined;
//   - the down phase in chunks: the table is in every rank after about N + (height + chunks) chunk times, not
//     height whole tables;
//   - the decision to gather at all is the same on every rank and agrees with what the root's answer holds;
//   - the links init closes afterwards (gatherOnlyPeers) are the all-gather's partners but ring neighbours,
//     symmetric (both ends close a link, or neither), so a rank keeps at most 2 of them whatever N.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/bootstrap_plan.hpp"

namespace collie::core {
namespace {

std::vector<int> sampleCounts() {
  std::vector<int> out;
  for (int n = 1; n <= 64; ++n) out.push_back(n);
  for (int n : {65, 96, 100, 127, 255, 257, 1000, 1023, 1024, 1025, 3000, 4096, 4097}) out.push_back(n);
  return out;
}

int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

TEST(BootstrapPlan, TheTreeHasRankZeroAtItsRootAndContiguousSubtrees) {
  for (int n : sampleCounts()) {
    for (int r = 0; r < n; ++r) {
      const TreePlace t = treePlace(r, n);
      ASSERT_TRUE(t.first >= 0 && t.first < n && t.size >= 1 && t.size <= n) << r << " of " << n;
      ASSERT_EQ((t.first + t.leftSize) % n, r) << r << " of " << n;
      ASSERT_EQ(t.leftSize, t.size / 2) << r << " is not the middle of its range, " << n;
      if (t.parent < 0) {
        EXPECT_EQ(r, 0) << n;
        EXPECT_EQ(t.size, n) << n;
        continue;
      }
      ASSERT_NE(r, 0) << n;
      const TreePlace p = treePlace(t.parent, n);
      ASSERT_TRUE(p.left == r || p.right == r) << r << " is not a child of its parent " << t.parent << ", " << n;
      if (p.left == r) {  // the parent's range before the parent
        EXPECT_TRUE(t.first == p.first && t.size == p.leftSize) << r << " of " << n;
      } else {  // after it
        EXPECT_TRUE(t.first == (t.parent + 1) % n && t.size == p.size - p.leftSize - 1) << r << " of " << n;
      }
    }
  }
}

TEST(BootstrapPlan, TheRootSendsEachRankItsTreeNeighboursOnly) {
  for (int n : sampleCounts()) {
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      const std::vector<int> mine = bootstrapPeers(r, n);
      total += mine.size();
      ASSERT_TRUE(std::is_sorted(mine.begin(), mine.end())) << r << " of " << n;
      ASSERT_EQ(std::adjacent_find(mine.begin(), mine.end()), mine.end()) << r << " of " << n;
      for (int p : mine) {
        ASSERT_TRUE(p >= 0 && p < n && p != r) << p << " for " << r << " of " << n;
        const std::vector<int> theirs = bootstrapPeers(p, n);
        ASSERT_TRUE(std::binary_search(theirs.begin(), theirs.end(), r)) << r << " knows " << p << ", " << n;
      }
      if (!tableGatherNeeded(n)) {
        EXPECT_EQ(mine.size(), static_cast<size_t>(n - 1)) << r << " of " << n;
        continue;
      }
      EXPECT_LE(mine.size(), 3u) << r << " of " << n;
      EXPECT_EQ(tableGatherPartners(r, n), mine) << r << " of " << n;
    }
    if (tableGatherNeeded(n)) {
      EXPECT_EQ(total, 2 * static_cast<size_t>(n - 1)) << n;  // each of the tree's N - 1 edges, both ends
    }
  }
}

TEST(BootstrapPlan, GatheringIsDecidedByTheRankCountAloneAndOnlyWhereTheRootLeftEntriesOut) {
  for (int n = 1; n <= 64; ++n) {
    bool someoneLacks = false;
    for (int r = 0; r < n; ++r) someoneLacks |= bootstrapPeers(r, n).size() < static_cast<size_t>(n - 1);
    EXPECT_EQ(tableGatherNeeded(n), someoneLacks) << n;
    EXPECT_EQ(tableGatherCost(n, 1, 0).finish > 0, tableGatherNeeded(n)) << n;
    for (int r = 0; r < n; ++r) EXPECT_EQ(tableGatherPlan(r, n).empty(), !tableGatherNeeded(n)) << r << " of " << n;
  }
}

// The all-gather for all ranks at once. A round starts when the previous one is done; a round is done when each of
// its receives has arrived, one unit after the round that holds the matching send started (sends do not wait).
class PlanRun {
 public:
  PlanRun(int n, int chunk) : plans_(static_cast<size_t>(n)), start_(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) {
      plans_[static_cast<size_t>(r)] = tableGatherPlan(r, n, chunk);
      start_[static_cast<size_t>(r)].assign(plans_[static_cast<size_t>(r)].size() + 1, kUnknown);
    }
    // The k-th send of p to q is the k-th receive of q from p: where it is, for each receive.
    std::map<std::pair<int, int>, std::vector<Where>> sends;
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < plans_[static_cast<size_t>(p)].size(); ++i)
        for (const TableMessage& m : plans_[static_cast<size_t>(p)][i].sends) sends[{p, m.peer}].push_back({p, i, &m});
    std::map<std::pair<int, int>, size_t> taken;
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < plans_[static_cast<size_t>(q)].size(); ++i)
        for (const TableMessage& m : plans_[static_cast<size_t>(q)][i].recvs) {
          const auto key = std::make_pair(m.peer, q);
          const size_t k = taken[key]++;
          const auto it = sends.find(key);
          if (it == sends.end() || k >= it->second.size()) {
            error_ = "rank " + std::to_string(q) + " receives from " + std::to_string(m.peer) + " what is never sent";
            return;
          }
          const Where& w = it->second[k];
          if (w.message->first != m.first || w.message->count != m.count) {
            error_ = "rank " + std::to_string(q) + " receives from " + std::to_string(m.peer) + " other entries";
            return;
          }
          matched_[{q, i, &m}] = w;
        }
    for (const auto& [key, list] : sends)
      if (taken[key] != list.size()) error_ = "rank " + std::to_string(key.first) + " sends what is never received";
  }
  const std::string& error() const { return error_; }
  const std::vector<TableRound>& plan(int r) const { return plans_[static_cast<size_t>(r)]; }
  /// When rank r's round i starts (i = the number of rounds: when r is done); -1 on a cycle.
  int startOf(int r, size_t i) {
    int& slot = start_[static_cast<size_t>(r)][i];
    if (slot == kVisiting) return -1;
    if (slot != kUnknown) return slot;
    if (i == 0) return slot = 0;
    slot = kVisiting;
    int t = startOf(r, i - 1);
    for (const TableMessage& m : plans_[static_cast<size_t>(r)][i - 1].recvs) {
      const Where& w = matched_.at({r, i - 1, &m});
      const int sent = t < 0 ? -1 : startOf(w.rank, w.round);
      t = sent < 0 || t < 0 ? -1 : std::max(t, sent + 1);
    }
    return slot = t;
  }

 private:
  static constexpr int kUnknown = -2, kVisiting = -3;
  struct Where {
    int rank;
    size_t round;
    const TableMessage* message;
    bool operator<(const Where& o) const {
      return std::tie(rank, round, message) < std::tie(o.rank, o.round, o.message);
    }
  };
  std::vector<std::vector<TableRound>> plans_;
  std::vector<std::vector<int>> start_;
  std::map<Where, Where> matched_;
  std::string error_;
};

/// Runs the all-gather of n ranks with `chunk` (0: the default) and checks it (see the file's comment).
void checkPlanRun(int n, int chunk) {
  SCOPED_TRACE(std::to_string(n) + " ranks, chunk " + std::to_string(chunk));
  PlanRun run(n, chunk);
  ASSERT_EQ(run.error(), "");
  int longest = 0;
  for (int r = 0; r < n; ++r) {
    // What r knows before each round: its entry, the root's answer, what earlier rounds brought.
    std::vector<char> known(static_cast<size_t>(n), 0), received(static_cast<size_t>(n), 0);
    known[static_cast<size_t>(r)] = 1;
    for (int p : bootstrapPeers(r, n)) known[static_cast<size_t>(p)] = 1;
    size_t sent = 0, got = 0;
    const std::vector<TableRound>& plan = run.plan(r);
    for (const TableRound& round : plan) {
      for (const TableMessage& m : round.sends) {
        ASSERT_TRUE(known[static_cast<size_t>(m.peer)]) << r << " sends to " << m.peer << " unknown, " << n;
        for (int i = 0; i < m.count; ++i)
          ASSERT_TRUE(known[static_cast<size_t>((m.first + i) % n)]) << r << " sends an entry it lacks, " << n;
        sent += static_cast<size_t>(m.count);
      }
      for (const TableMessage& m : round.recvs) {
        ASSERT_TRUE(known[static_cast<size_t>(m.peer)]) << r << " receives from " << m.peer << " unknown, " << n;
        for (int i = 0; i < m.count; ++i) {
          const int q = (m.first + i) % n;
          ASSERT_NE(q, r) << r << " receives its own entry, " << n;
          ASSERT_FALSE(received[static_cast<size_t>(q)]) << r << " receives rank " << q << "'s entry twice, " << n;
          received[static_cast<size_t>(q)] = 1;
        }
        got += static_cast<size_t>(m.count);
      }
      for (int q = 0; q < n; ++q) known[static_cast<size_t>(q)] |= received[static_cast<size_t>(q)];
    }
    for (int q = 0; q < n; ++q) ASSERT_TRUE(known[static_cast<size_t>(q)]) << r << " lacks " << q << ", " << n;
    EXPECT_LE(sent, 2 * static_cast<size_t>(n) + 1) << r << " of " << n;
    EXPECT_EQ(got, static_cast<size_t>(n - 1)) << r << " of " << n;
    const int done = run.startOf(r, plan.size());
    ASSERT_GE(done, 0) << r << " of " << n << " waits on a cycle";
    longest = std::max(longest, done);
  }
  const TableGatherCost cost = tableGatherCost(n, 1, 0, chunk);
  EXPECT_EQ(longest, cost.finish);
  const int entries = chunk > 0 ? chunk : tableChunkEntries(n);
  const int chunks = (n - 2 + entries) / entries;  // of a leaf's stream (N - 1 entries)
  if (chunks == 1) {
    EXPECT_EQ(longest, 2 * floorLog2(n));  // a leaf's entries up to the root, the table back down
  } else {
    EXPECT_LE(longest, 2 * floorLog2(n) + chunks);  // the chunks follow each other down
  }
  EXPECT_LE(cost.rounds, chunks + 2);  // up, then one per chunk in and one to finish
  if (chunk == 0) {
    EXPECT_LE(chunks, std::max(1, floorLog2(n)));
  }
}

TEST(BootstrapPlan, EveryRankEndsWithTheRootsTableEachEntryOnceWithoutACycle) {
  for (int n : sampleCounts()) {
    if (!tableGatherNeeded(n)) continue;
    // The default chunk (one message below 685 ranks), about five chunks, and one entry per chunk.
    std::vector<int> chunkSizes = {0, std::max(1, (n - 1) / 5)};
    if (n <= 40) chunkSizes.push_back(1);
    for (int chunk : chunkSizes) checkPlanRun(n, chunk);
  }
}

// Under a directory of cards a rank keeps its subtree's cards (subtreeHolds: exactly the ranks it is an ancestor of,
// or itself; rank 0 all), and starts knowing its tree neighbours, rank 0 and rank 0's children (directorySeeds), which
// the root's answer then carries (rootAnswerRanks).
TEST(BootstrapPlan, ADirectoryHolderKeepsItsSubtreeAndEveryRankKnowsTheTopOfTheTree) {
  for (int n : sampleCounts()) {
    if (n > 257) continue;  // every pair below: O(n^2 log n)
    const TreePlace top = treePlace(0, n);
    for (int r = 0; r < n; ++r) {
      std::vector<int> above = {r};  // r and its ancestors
      for (int a = treePlace(r, n).parent; a >= 0; a = treePlace(a, n).parent) above.push_back(a);
      ASSERT_EQ(above.back(), 0) << "rank " << r << " of " << n;
      for (int h = 0; h < n; ++h)
        ASSERT_EQ(subtreeHolds(h, r, n), std::find(above.begin(), above.end(), h) != above.end())
            << "holder " << h << ", rank " << r << " of " << n;
      const std::vector<int> seeds = directorySeeds(r, n);
      EXPECT_TRUE(std::is_sorted(seeds.begin(), seeds.end()));
      EXPECT_EQ(std::adjacent_find(seeds.begin(), seeds.end()), seeds.end());
      EXPECT_EQ(std::count(seeds.begin(), seeds.end(), r), 0);
      for (int p : bootstrapPeers(r, n)) {
        EXPECT_EQ(std::count(seeds.begin(), seeds.end(), p), 1);
      }
      for (int p : {0, top.left, top.right})
        if (p >= 0 && p != r) {
          EXPECT_EQ(std::count(seeds.begin(), seeds.end(), p), 1) << p;
        }
      EXPECT_LE(seeds.size(), 6u);
      EXPECT_EQ(rootAnswerRanks(r, n, true), seeds);
      EXPECT_EQ(rootAnswerRanks(r, n, false), bootstrapPeers(r, n));
    }
  }
}

// In time, with the entries of a message sent one after another (tableGatherCost(n, 0, 1)): the down phase's chunks
// follow each other down the tree, so the last rank has the table after about the up phase (N entries deep) plus
// (height + chunks) chunk times, rather than height whole tables one after another.
TEST(BootstrapPlan, TheDownPhaseIsPipelinedInChunks) {
  std::vector<int> counts = sampleCounts();
  counts.push_back(32768);  // chunked by default (from 685 ranks), in chunks larger than 683 (from about 8,900)
  for (int n : counts) {
    if (!tableGatherNeeded(n)) continue;
    // The default chunk where it cuts the table, else the table over the tree's height, as the default does at scale.
    const int chunk = n >= 32768 ? 0 : std::max(1, (n - 1) / std::max(1, floorLog2(n)));
    const int entries = chunk > 0 ? chunk : tableChunkEntries(n), chunks = (n - 2 + entries) / entries;
    const double path = tableGatherCost(n, 0, 1, chunk).finish;
    EXPECT_GE(path, n - 1) << n << " ranks";  // a rank receives N - 1 entries, one after another
    EXPECT_LE(path, n + (floorLog2(n) + chunks) * static_cast<double>(entries)) << n << " ranks";
    if (n >= 1000) {
      EXPECT_LE(path, 3.0 * n) << n << " ranks";  // unpipelined: about (height + 1) N
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
