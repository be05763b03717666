// A directory of contact cards (COLLIE_PEER_CARDS=directory, core/card_directory.hpp) with every rank a thread: after
// init a rank holds the cards of its subtree in init's tree and of its seeds only, and learns every other card it
// needs when a call first connects to that peer, by asking the tree; every collective under every algorithm, split
// (connections of its own, or shared) and shrink then run with every element checked. Each test runs in a child of
// this binary with the variable set (it is read once per process), over shm and over tcp, with four ranks per host
// (COLLIE_HOST_ID=rank/4) so that hierarchical schedules run and pairs use both transports.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"
#include "core/api_access.hpp"
#include "core/bootstrap_plan.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

/// Runs `body` in a child of this binary under a directory of cards, once over shm and once over tcp.
void underDirectory(const std::function<void()>& body) {
  runInChildrenWith("COLLIE_PEER_CARDS=directory",
                    {{"COLLIE_HOST_ID=rank/4"}, {"COLLIE_HOST_ID=rank/4", "COLLIE_SHM_DISABLE=1"}}, body);
}

Options directoryOptions(const char* name) { return lazyOptions(name, 60s); }

TEST(CardDirectory, ARankHoldsItsSubtreesCardsAndLearnsTheOthersWhenItFirstConnects) {
  underDirectory([] {
    constexpr int kRanks = 32;
    std::array<std::atomic<int>, kRanks> atInit{};
    ThreadLauncher::run(
        kRanks,
        [&](Communicator& comm) {
          const int r = comm.rank(), n = comm.size();
          const int known = comm.knownContactCards();
          atInit[static_cast<size_t>(r)] = known;
          const int subtree = core::treePlace(r, n).size - 1;
          const int seeds = static_cast<int>(core::directorySeeds(r, n).size());
          if (r == 0) {
            EXPECT_EQ(known, n - 1) << "rank 0 holds every card";
          } else {
            EXPECT_GE(known, subtree) << "rank " << r << " lacks a card of its subtree";
            EXPECT_LE(known, subtree + seeds + comm.connectedPeers()) << "rank " << r << " holds cards it never needed";
          }
          checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 1001, false, 0);
          EXPECT_EQ(comm.knownContactCards(), n - 1) << "rank " << r << " after an AllToAll";
          checkCase(comm, Coll::AllReduce, DataType::Float64, ReduceOp::Sum, 4097, true, 0);
        },
        directoryOptions("cards"));
    int total = 0;
    for (const auto& k : atInit) total += k.load();
    EXPECT_LT(total, kRanks * (kRanks - 1) / 2) << "the ranks held " << total << " cards after init";
    std::printf("%d ranks: %.1f cards per rank after init (of %d), %d after an AllToAll\n", kRanks,
                static_cast<double>(total) / kRanks, kRanks - 1, kRanks - 1);
  });
}

TEST(CardDirectory, EveryCollectiveUnderEveryAlgorithmOnFreshCommunicators) {
  underDirectory([] {
    for (const char* algo : {"ring", "tree", "rhd", "direct", "hier"}) {
      SCOPED_TRACE(algo);
      ForcedAlgorithm forced(algo);
      ThreadLauncher::run(
          16,
          [](Communicator& comm) {
            for (Coll coll : kAllColls) {
              checkCase(comm, coll, DataType::Float32, ReduceOp::Sum, 4097, false, comm.size() - 3);
              checkCase(comm, coll, DataType::Int64, ReduceOp::Max, 37, true, 2);
            }
          },
          directoryOptions("cards-algo"));
    }
  });
}

TEST(CardDirectory, SplitAndShrinkChildrenLearnTheirCardsFromTheParentsDirectory) {
  underDirectory([] {
    ThreadLauncher::run(
        16,
        [](Communicator& comm) {
          const int r = comm.rank();
          auto own = comm.split(r % 2, -r);  // connections of its own: it gathers a directory of its own
          checkCase(*own, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 257, false, 0);
          EXPECT_EQ(own->knownContactCards(), own->size() - 1);
          checkCase(*own, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 1000, false, 0);
          Options share;
          share.shareConnections = true;
          auto shared = comm.split(r % 3, r, share);  // through the parent's links, and its directory
          checkCase(*shared, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 257, false, 0);
          auto nested = own->split(r % 4 < 2 ? 0 : 1, r);  // a split of a split under the child's own directory
          checkCase(*nested, Coll::AllGather, DataType::Int32, ReduceOp::Sum, 99, false, 0);
          if (r == 0 || r == 5) return;  // alive, left out of the shrink
          const std::array<int, 2> gone{0, 5};
          auto shrunk = comm.shrink(gone);
          EXPECT_EQ(shrunk->size(), 14);
          checkCase(*shrunk, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 129, false, 0);
          checkCase(*shrunk, Coll::Broadcast, DataType::Int32, ReduceOp::Sum, 5000, false, 13);
        },
        directoryOptions("cards-split"));
  });
}

// A rank that destroyed its communicator no longer answers for the cards it held: a lookup passes over it to the next
// holder (rank 0), and once every holder of a card is gone the call fails with RemoteError naming the card, in
// seconds, not at the timeout. The other ranks are idle meanwhile (lazy: nothing connects them).
TEST(CardDirectory, ALookupPassesOverDestroyedHoldersAndFailsQuicklyWhenNoneIsLeft) {
  underDirectory([] {
    constexpr int kRanks = 16;
    const int left = core::treePlace(0, kRanks).left;
    auto comms = Communicator::createAll(kRanks, directoryOptions("cards-gone"));
    const auto knows = [&](int a, int p) {
      return InternalAccess::coreComm(*comms[static_cast<size_t>(a)]).knowsContactCard(p);
    };
    // Pairs of a rank of the right half (`a`) and one deep in the left half (`p`) whose card `a` lacks (init's
    // calibration may have connected some), nor that of any holder of it below `left` (its ancestors): `a` must
    // ask `left` or rank 0.
    std::vector<std::pair<int, int>> pairs;
    for (int a = 1; a < kRanks; ++a)
      for (int p = 1; p < kRanks; ++p) {
        if (a == left || p == left || !core::subtreeHolds(left, p, kRanks) || core::subtreeHolds(left, a, kRanks))
          continue;
        bool lacks = !knows(a, p);
        for (int h = core::treePlace(p, kRanks).parent; h != left && lacks; h = core::treePlace(h, kRanks).parent)
          lacks = !knows(a, h);
        if (lacks) pairs.emplace_back(a, p);
      }
    ASSERT_FALSE(pairs.empty()) << "no pair of ranks that must ask for a card";
    const auto [a1, p1] = pairs.front();
    const auto second = std::find_if(pairs.rbegin(), pairs.rend(), [a = a1](const auto& q) { return q.first != a; });
    ASSERT_NE(second, pairs.rend()) << "no second rank that must ask for a card";
    const auto [a2, p2] = *second;  // another asker: a1 learns p1's card below
    const auto exchange = [&](int a, int p) {
      std::vector<int32_t> out(100), in(100, -1);
      for (size_t i = 0; i < out.size(); ++i) out[i] = a * 1000 + static_cast<int32_t>(i);
      std::thread receiver([&] { comms[static_cast<size_t>(p)]->recv(in.data(), in.size(), DataType::Int32, a); });
      comms[static_cast<size_t>(a)]->send(out.data(), out.size(), DataType::Int32, p);
      receiver.join();
      for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], a * 1000 + static_cast<int32_t>(i)) << i;
    };
    comms[static_cast<size_t>(left)].reset();  // the lowest holder a1 knows of p1's card
    exchange(a1, p1);
    comms[0].reset();  // and the last: nobody a2 can reach holds p2's card
    const auto start = std::chrono::steady_clock::now();
    std::vector<int32_t> out(10, 7);
    expectError("a card no live holder has", ErrorCode::RemoteError,
                {"cannot learn rank " + std::to_string(p2) + "'s contact card"},
                [&] { comms[static_cast<size_t>(a2)]->send(out.data(), out.size(), DataType::Int32, p2); });
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "the timeout is 60 s";
    destroyOnePerThread(comms);
  });
}

}  // namespace
}  // namespace collie::test
