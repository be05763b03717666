// Communicator::split with every rank a forked process, over tcp (COLLIE_SHM_DISABLE=1) and shm:
//   - colors and keys, every collective checked element by element on each child, a nested split, NOCOLOR ranks,
//     and parent and child used at once from two threads of each process;
//   - a parent made inside the test (its own bootstrap), destroyed right after split: the child connects afterwards
//     through the listeners it shared with the parent, and runs every collective;
//   - descriptors of each process: the split opens no listening socket (only the child's poller, 2), and the child
//     gives every descriptor back when destroyed;
//   - a rank that calls a barrier instead of split: every rank fails within the timeout;
//   - a child sharing the parent's connections (and a nested one): every collective, no descriptor taken, calls in
//     another order failing as a mismatch.
// The same with thread ranks: tests/threaded/test_split.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/fd_limits.hpp"
#include "common/bodies.hpp"
#include "common/descriptors.hpp"
#include "common/launcher.hpp"
#include "common/scoped_env.hpp"
#include "common/split_checks.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

Options splitOptions(std::chrono::milliseconds timeout = 60s) {
  Options o;
  o.timeout = timeout;
  o.name = "split-proc";
  return o;
}

class SplitProc : public testing::TestWithParam<const char*> {
 protected:
  bool tcp() const { return std::string(GetParam()) == "tcp"; }
};

TEST_P(SplitProc, ColorsKeysNestedNoColorAndParentWithChildAtOnce) {
  ScopedEnv shm(tcp() ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  auto exits = ProcessLauncher::run(
      5,
      [](Communicator& comm) {
        const int r = comm.rank(), n = comm.size();
        auto sub = comm.split(r % 2, n - r);  // 4,2,0 and 3,1
        ASSERT_NE(sub, nullptr);
        expectMembers(*sub,
                      membersOf(
                          n, r, [](int q) { return q % 2; }, [n](int q) { return n - q; }),
                      r);
        everyCollectiveChecked(*sub);
        EXPECT_EQ(sub->lastCall().transport, expectedTransport());
        auto nested = sub->split(0, sub->rank() == 0 ? 100 : 0);  // the first moves last
        ASSERT_NE(nested, nullptr);
        EXPECT_EQ(nested->rank(), sub->rank() == 0 ? sub->size() - 1 : sub->rank() - 1);
        checkCase(*nested, Coll::AllReduce, DataType::Float32, ReduceOp::Sum, 100003, false, 0);
        auto some = comm.split(r == 2 ? COLLIE_SPLIT_NOCOLOR : 1, 0);
        std::thread child;  // calls on `some` while this thread calls on `sub`
        if (r == 2) {
          EXPECT_EQ(some, nullptr);
        } else {
          ASSERT_NE(some, nullptr);
          expectMembers(*some, {0, 1, 3, 4}, r);
          child = std::thread([&] {
            for (int i = 0; i < 3; ++i)
              checkCase(*some, Coll::AllReduce, DataType::Int64, ReduceOp::Sum, 70001, true, 0);
          });
        }
        try {
          for (int i = 0; i < 3; ++i) checkCase(*sub, Coll::AllGather, DataType::Int32, ReduceOp::Sum, 999, false, 0);
        } catch (...) {
          if (child.joinable()) child.join();
          throw;
        }
        if (child.joinable()) child.join();
        checkCase(comm, Coll::Broadcast, DataType::Int32, ReduceOp::Sum, 4097, false, n - 1);  // the parent works
      },
      splitOptions());
  EXPECT_TRUE(allRanksSucceeded(exits));
}

// A child sharing its parent's connections (link_share.hpp) with processes: every collective on it, between the
// parent's calls, takes no descriptor of the process once the parent has connected every pair; a nested sharing
// child too; then calls of parent and child in another order on one rank fail as a mismatch on every rank.
TEST_P(SplitProc, AChildSharingTheParentsConnectionsTakesNoDescriptor) {
  ScopedEnv shm(tcp() ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  auto exits = ProcessLauncher::run(
      4,
      [](Communicator& comm) {
        const int r = comm.rank(), n = comm.size();
        checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 33, false, 0);  // every pair connected
        const long before = settledOpenDescriptors();
        Options share = splitOptions();
        share.shareConnections = true;
        auto sub = comm.split(r % 2, n - r, share);
        ASSERT_NE(sub, nullptr);
        everyCollectiveChecked(*sub);
        checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 1001, false, 0);
        auto nested = sub->split(0, -sub->rank(), share);
        everyCollectiveChecked(*nested);
        EXPECT_EQ(settledOpenDescriptors(), before) << "descriptors the sharing children took on rank " << r;
        nested.reset();
        // Rank 0 calls the child first, the others the parent first: a mismatch on every rank of the child's pair
        // with rank 0, named by the child's tag; the rest fail with it (one fate), none with wrong data.
        std::vector<int32_t> a(256, r), b(256, r);
        try {
          Communicator& first = r == 0 ? *sub : comm;
          Communicator& second = r == 0 ? comm : *sub;
          first.allReduce(a.data(), a.data(), a.size(), DataType::Int32, ReduceOp::Sum);
          second.allReduce(b.data(), b.data(), b.size(), DataType::Int32, ReduceOp::Sum);
          ADD_FAILURE() << "rank " << r << ": calls in another order than rank 0's went through";
        } catch (const Error& e) {
          if (r == 0 || r == 2) {  // rank 0's child pair: 0 and 2
            EXPECT_NE(std::string(e.what()).find("tagged"), std::string::npos) << "rank " << r << ": " << e.what();
          }
        }
      },
      splitOptions(10s));
  EXPECT_TRUE(allRanksSucceeded(exits));
}

TEST_P(SplitProc, ParentDestroyedRightAfterSplit) {
  ScopedEnv shm(tcp() ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  constexpr int n = 4;
  ProcessLauncher launcher(n, splitOptions());
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    // A parent of our own (the launcher's communicator stays alive, and its listeners with it): rank 0 makes the
    // id (its process hosts the bootstrap root) and passes it through the shared page.
    const int r = comm.rank();
    static_assert(sizeof(collieUniqueId) <= sizeof(sh.counters));
    UniqueId id;
    if (r == 0) {
      id = UniqueId::create();
      int64_t words[16] = {};
      std::memcpy(words, &id.raw, sizeof(id.raw));
      for (int i = 0; i < 16; ++i) sh.counters[i].store(words[i]);
      sh.perRank[0][0].store(1);
    } else {
      ASSERT_TRUE(waitForCount(sh.perRank[0][0], 1, 30s)) << "rank 0 never published the id";
      int64_t words[16];
      for (int i = 0; i < 16; ++i) words[i] = sh.counters[i].load();
      std::memcpy(&id.raw, words, sizeof(id.raw));
    }
    auto parent = Communicator::create(n, id, r, splitOptions());
    auto child = parent->split(r / 2, -r);  // 1,0 and 3,2
    parent.reset();
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->connectedPeers(), 0) << "nothing connected before the first call";
    expectMembers(*child, {r / 2 * 2 + 1, r / 2 * 2}, r);
    everyCollectiveChecked(*child);
    EXPECT_EQ(child->lastCall().transport, expectedTransport());
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(120s)));
}

TEST_P(SplitProc, TheChildOpensNoListenerAndLeaksNoDescriptor) {
  ScopedEnv shm(tcp() ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  auto exits = ProcessLauncher::run(
      4,
      [](Communicator& comm) {
        auto first = comm.split(comm.rank() % 2, 0);  // the parent connects split's all-gather's peers once for all
        first.reset();
        comm.barrier();  // and the barrier's
        const long before = settledOpenDescriptors();
        const int listening = listeningSockets();
        auto child = comm.split(comm.rank() % 2, 0);
        ASSERT_NE(child, nullptr);
        const long opened = base::fdUsage().open - before;
        EXPECT_EQ(listeningSockets(), listening) << "the split opened a listening socket";
        comm.barrier();  // every rank has counted before a peer's first call on its child dials this rank
        EXPECT_LE(opened, 2) << "the child's poller (epoll, eventfd) and no listener";
        checkCase(*child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 4099, false, 0);
        child.reset();
        EXPECT_EQ(settledOpenDescriptors(), before) << "descriptors left after destroying the child";
      },
      splitOptions());
  EXPECT_TRUE(allRanksSucceeded(exits));
}

TEST_P(SplitProc, ARankCallingABarrierInsteadFailsEveryRankWithinTheTimeout) {
  ScopedEnv shm(tcp() ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  auto exits = ProcessLauncher::run(
      4,
      [](Communicator& comm) {
        const auto t0 = std::chrono::steady_clock::now();
        try {
          if (comm.rank() == 3)
            comm.barrier();
          else
            comm.split(0, comm.rank());
          ADD_FAILURE() << "rank " << comm.rank() << " got no error";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("Barrier()"), std::string::npos) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s) << "waited past the timeout";
      },
      splitOptions(4s), 60s);
  EXPECT_TRUE(allRanksSucceeded(exits));
}

INSTANTIATE_TEST_SUITE_P(Proc, SplitProc, testing::Values("tcp", "shm"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace collie::test
