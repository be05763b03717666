// Init at scale with every rank a thread of this process: 256 ranks initialise (the root's at most 3 entries each,
// the table all-gathered along a tree, calibration) and run an AllReduce checked element by element, and the
// descriptors this process holds for them stay under a fixed bound per rank, which a full mesh (255 peers, several
// descriptors each) would exceed many times over. Over tcp, descriptors per rank after init and after a ring
// AllReduce are the same at 8, 32, 128 and 256 ranks (init closes the all-gather's links but to ring neighbours:
// bootstrap_plan.hpp, gatherOnlyPeers), and the pairs whose link init closed connect again for a halving-doubling or
// tree AllReduce and for Send/Recv. A few seconds each on 2 cores (perf/init_scale measures the same to 512 ranks).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/params.hpp"
#include "common/bodies.hpp"
#include "common/descriptors.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"
#include "core/bootstrap_plan.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

int openDescriptors() { return static_cast<int>(settledOpenDescriptors()); }

/// An AllReduce (sum of int64) on every communicator of `comms`, a thread each, checked element by element.
void allReduceOnEveryRank(std::vector<std::unique_ptr<Communicator>>& comms, size_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::thread> threads;
  std::vector<int> wrong(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int64_t> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = r * 1000003LL + static_cast<int64_t>(i);
      comms[static_cast<size_t>(r)]->allReduce(buf.data(), buf.data(), count, DataType::Int64, ReduceOp::Sum);
      const int64_t ranks = static_cast<int64_t>(n) * (n - 1) / 2;
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != ranks * 1000003LL + n * static_cast<int64_t>(i)) ++wrong[static_cast<size_t>(r)];
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0) << "rank " << r << " of " << n;
}

Options scaleOptions(const char* name) { return lazyOptions(name, 120s); }

TEST(InitScale, TwoHundredFiftySixRanksAllReduceWithABoundedNumberOfDescriptorsEach) {
  constexpr int kRanks = 256;
  constexpr int kMaxDescriptorsPerRank = 40;  // listeners, epoll, eventfd, and O(log N) peers' links
  const int before = openDescriptors();
  ASSERT_GE(before, 0);
  auto comms = Communicator::createAll(kRanks, scaleOptions("scale"));
  allReduceOnEveryRank(comms, 1000);
  const int used = openDescriptors() - before;
  int maxPeers = 0;
  for (const auto& c : comms) maxPeers = std::max(maxPeers, c->connectedPeers());
  EXPECT_LT(used, kMaxDescriptorsPerRank * kRanks) << used << " descriptors for " << kRanks << " ranks";
  EXPECT_LE(maxPeers, 2 * 9) << "a rank connected to " << maxPeers << " peers";
  RecordProperty("descriptors_per_rank", std::to_string(used / kRanks));
  std::printf("%d ranks: %.1f descriptors per rank, at most %d peers connected per rank\n", kRanks,
              static_cast<double>(used) / kRanks, maxPeers);
}

/// Runs `test` here over shm, and in a child of this binary over tcp (COLLIE_SHM_DISABLE is read once per process);
/// with `shmToo` false, only over tcp.
void overTcp(const std::function<void()>& test, bool shmToo) {
  if (std::getenv("COLLIE_SHM_DISABLE") != nullptr) {
    test();  // the child: tcp
    return;
  }
  if (shmToo) test();
  const int status = rerunCurrentTestWith({"COLLIE_SHM_DISABLE=1"});
  ASSERT_TRUE(WIFEXITED(status)) << "the child run over tcp did not exit (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child run over tcp failed (its output is above)";
}

// Over tcp each rank holds the tcp listener, its poller's epoll and eventfd, and COLLIE_SOCKETS_PER_PEER sockets per
// linked peer. With ring forced, init leaves a rank linked to its ring neighbours at most (the all-gather's other
// links closed, calibration's broadcast a ring), and the ring AllReduce needs those two whatever N: so descriptors per
// rank after init and after the AllReduce stay under 3 + 2 x sockets + 0.5 (7.5 with the default 2 sockets) and the
// same at every N. Before init closed those links they grew as log2 N (11, 15, 19, 21 at 8, 32, 128, 256 ranks).
TEST(InitScale, DescriptorsPerRankOverTcpDoNotGrowWithTheRankCount) {
  overTcp(
      [] {
        ForcedAlgorithm ring("ring");
        const double bound = 3 + 2.0 * static_cast<double>(base::params::socketsPerPeer()) + 0.5;
        std::vector<double> afterRing;
        for (int n : {8, 32, 128, 256}) {
          SCOPED_TRACE(std::to_string(n) + " ranks");
          const int before = openDescriptors();
          ASSERT_GE(before, 0);
          auto comms = Communicator::createAll(n, scaleOptions("fds"));
          const double init = static_cast<double>(openDescriptors() - before) / n;
          allReduceOnEveryRank(comms, 300);
          for (const auto& c : comms) ASSERT_EQ(c->lastCall().algorithm, "ring");
          afterRing.push_back(static_cast<double>(openDescriptors() - before) / n);
          std::printf("tcp, %d ranks: %.2f descriptors per rank after init, %.2f after a ring AllReduce\n", n, init,
                      afterRing.back());
          EXPECT_LE(init, bound);
          EXPECT_LE(afterRing.back(), bound);
        }
        const auto [least, most] = std::minmax_element(afterRing.begin(), afterRing.end());
        EXPECT_LE(*most - *least, 0.5) << "descriptors per rank after a ring AllReduce vary with the rank count";
      },
      false);
}

// The pairs whose link init closed (gatherOnlyPeers: the gather tree's edges that are not ring edges) connect again on
// first use: a forced halving-doubling AllReduce, a forced tree AllReduce, then Send/Recv between every rank and each
// peer it closed, all checked element by element, over shm and over tcp, at 8 and 12 ranks.
TEST(InitScale, PairsWhoseInitLinkWasClosedConnectAgain) {
  overTcp(
      [] {
        for (const char* algo : {"rhd", "tree"}) {
          ForcedAlgorithm forced(algo);
          for (int n : {8, 12}) {
            SCOPED_TRACE(std::string(algo) + ", " + std::to_string(n) + " ranks");
            ThreadLauncher::run(
                n,
                [algo](Communicator& comm) {
                  const int r = comm.rank(), size = comm.size();
                  const std::vector<int> closed = core::gatherOnlyPeers(r, size);
                  EXPECT_LE(comm.connectedPeers(), size - 1 - static_cast<int>(closed.size())) << "rank " << r;
                  checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 4099, false, 0);
                  EXPECT_EQ(comm.lastCall().algorithm, algo);
                  std::vector<std::vector<int32_t>> in(closed.size(), std::vector<int32_t>(129, -1));
                  std::vector<int32_t> out(129);
                  for (size_t i = 0; i < out.size(); ++i) out[i] = r * 1000 + static_cast<int32_t>(i);
                  groupStart();
                  for (size_t k = 0; k < closed.size(); ++k) {
                    comm.send(out.data(), out.size(), DataType::Int32, closed[k]);
                    comm.recv(in[k].data(), in[k].size(), DataType::Int32, closed[k]);
                  }
                  groupEnd();
                  for (size_t k = 0; k < closed.size(); ++k)
                    for (size_t i = 0; i < out.size(); ++i)
                      ASSERT_EQ(in[k][i], closed[k] * 1000 + static_cast<int32_t>(i))
                          << "rank " << r << " from " << closed[k] << " [" << i << "]";
                  EXPECT_GE(comm.connectedPeers(), static_cast<int>(closed.size())) << "rank " << r;
                },
                scaleOptions("again"));
          }
        }
      },
      true);
}

// Small rank counts (2 and 3: the root's answer is the whole table) and uneven trees: after init no rank is linked to
// the all-gather's peers whose links init closed (gatherOnlyPeers), and an AllToAll, which connects every pair from
// the all-gathered table (those closed pairs again included), is right element by element on every rank.
TEST(InitScale, EveryRankLearnsTheWholeTableFromTheTreeAllGather) {
  for (int n : {2, 3, 5, 7, 12, 17}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    ThreadLauncher::run(
        n,
        [](Communicator& comm) {
          const int r = comm.rank(), size = comm.size();
          const int closed = static_cast<int>(core::gatherOnlyPeers(r, size).size());
          EXPECT_LE(comm.connectedPeers(), size - 1 - closed) << "rank " << r;
          checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 33, false, 0);
          EXPECT_EQ(comm.connectedPeers(), size - 1) << "rank " << r;
        },
        scaleOptions("table"));
  }
}

// The table streamed down the tree in chunks (bootstrap_plan.hpp), which by default starts at 685 ranks: CTest
// runs this as init_scale.table_in_chunks with COLLIE_INIT_CHUNK=7 (97 ranks: 14 chunks for a leaf). Every rank sends
// to the ranks 1, 7, 31 and N/2 after it and receives from those before it, which connects pairs whose entries came in
// every chunk, and checks what it got.
TEST(InitScale, ATableStreamedDownInChunksConnectsPeersFromEveryChunk) {
  if (base::params::initChunk() == 0)
    GTEST_SKIP() << "run by CTest as init_scale.table_in_chunks (COLLIE_INIT_CHUNK=7)";
  for (int n : {97, 200}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    ThreadLauncher::run(
        n,
        [](Communicator& comm) {
          const int r = comm.rank(), size = comm.size();
          for (int stride : {1, 7, 31, size / 2}) {
            const int to = (r + stride) % size, from = (r - stride + size) % size;
            std::vector<int32_t> out(17, r * 100 + stride), in(17, -1);
            groupStart();
            comm.send(out.data(), out.size(), DataType::Int32, to);
            comm.recv(in.data(), in.size(), DataType::Int32, from);
            groupEnd();
            for (int32_t v : in) ASSERT_EQ(v, from * 100 + stride) << "rank " << r << " from " << from;
          }
        },
        scaleOptions("chunks"));
  }
}

}  // namespace
}  // namespace collie::test
