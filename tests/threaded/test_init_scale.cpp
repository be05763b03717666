// Init at scale with every rank a thread of this process: 256 ranks initialise (the root's O(log N) entries each,
// the table all-gathered in log2 N rounds, calibration) and run an AllReduce checked element by element, and the
// descriptors this process holds for them stay under a fixed bound per rank, which a full mesh (255 peers, several
// descriptors each) would exceed many times over. Takes a few seconds on 2 cores (perf/init_scale measures the same to
// 512 ranks).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/fd_limits.hpp"
#include "common/bodies.hpp"
#include "common/launcher.hpp"
#include "core/bootstrap_plan.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

int openDescriptors() { return static_cast<int>(base::fdUsage().open); }

TEST(InitScale, TwoHundredFiftySixRanksAllReduceWithABoundedNumberOfDescriptorsEach) {
  constexpr int kRanks = 256;
  constexpr int kMaxDescriptorsPerRank = 40;  // listeners, epoll, eventfd, and O(log N) peers' links
  constexpr size_t kCount = 1000;
  const int before = openDescriptors();
  ASSERT_GE(before, 0);
  Options options;
  options.timeout = 120s;
  options.name = "scale";
  options.connect = ConnectMode::Lazy;
  auto comms = Communicator::createAll(kRanks, options);
  std::vector<std::thread> threads;
  std::vector<int> wrong(kRanks, 0);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int64_t> buf(kCount);
      for (size_t i = 0; i < kCount; ++i) buf[i] = r * 1000003LL + static_cast<int64_t>(i);
      comms[static_cast<size_t>(r)]->allReduce(buf.data(), buf.data(), kCount, DataType::Int64, ReduceOp::Sum);
      const int64_t ranks = static_cast<int64_t>(kRanks) * (kRanks - 1) / 2;
      for (size_t i = 0; i < kCount; ++i)
        if (buf[i] != ranks * 1000003LL + kRanks * static_cast<int64_t>(i)) ++wrong[static_cast<size_t>(r)];
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0) << "rank " << r;
  const int used = openDescriptors() - before;
  int maxPeers = 0;
  for (const auto& c : comms) maxPeers = std::max(maxPeers, c->connectedPeers());
  EXPECT_LT(used, kMaxDescriptorsPerRank * kRanks) << used << " descriptors for " << kRanks << " ranks";
  EXPECT_LE(maxPeers, 2 * 9) << "a rank connected to " << maxPeers << " peers";
  RecordProperty("descriptors_per_rank", std::to_string(used / kRanks));
  std::printf("%d ranks: %.1f descriptors per rank, at most %d peers connected per rank\n", kRanks,
              static_cast<double>(used) / kRanks, maxPeers);
}

// Rank counts whose table all-gather folds ranks (not powers of two) and small ones: after init each rank is connected
// to no more than the all-gather's peers and calibration's (a broadcast and rank 0's ping-pong), and an AllToAll,
// which connects every pair from the all-gathered table, is right element by element on every rank.
TEST(InitScale, EveryRankLearnsTheWholeTableFromTheLogRoundAllGather) {
  for (int n : {2, 3, 5, 7, 12, 17}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    Options options;
    options.timeout = 60s;
    options.name = "table";
    options.connect = ConnectMode::Lazy;
    ThreadLauncher::run(
        n,
        [](Communicator& comm) {
          const int r = comm.rank(), size = comm.size();
          const int gathered = static_cast<int>(core::bootstrapPeers(r, size).size());
          EXPECT_GE(comm.connectedPeers(), core::tableGatherNeeded(size) ? gathered : 0) << "rank " << r;
          checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 33, false, 0);
          EXPECT_EQ(comm.connectedPeers(), size - 1) << "rank " << r;
        },
        options);
  }
}

}  // namespace
}  // namespace collie::test
