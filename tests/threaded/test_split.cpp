// Communicator::split with every rank a thread, over shm here and over tcp in a child of this binary
// (COLLIE_SHM_DISABLE=1, read once per process; each test checks lastCall().transport to prove which ran):
//   - colors and keys (uneven colors, keys reversing the order): new ranks and sizes, every collective checked
//     element by element on every child, the parent still working;
//   - a split of a split of a split, and COLLIE_SPLIT_NOCOLOR ranks getting none; a grandchild made with the same
//     epoch and color as its parent, connecting while its grandparent does too (each its own secret);
//   - the parent destroyed right after split, before the child's first call (the child's connections are made
//     after, through the listeners it shares with the parent), and a split of that child;
//   - a parent that fails after the split: the child works, a split of the failed parent reports its failure;
//   - parent and child used at once from two threads of every rank;
//   - descriptors: a split opens no listening socket (the child shares the parent's listeners), only its poller's
//     two, and destroying the child gives back every descriptor it took;
//   - a rank that calls something else instead of split: every rank gets an error within the timeout, never a hang.
// The same with forked ranks: tests/multiproc/test_split_proc.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/fd_limits.hpp"
#include "common/bodies.hpp"
#include "common/descriptors.hpp"
#include "common/launcher.hpp"
#include "common/split_checks.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

bool overTcp() { return std::getenv("COLLIE_SHM_DISABLE") != nullptr; }

/// Runs `test` here over shm, and in a child of this binary over tcp.
void overShmAndTcp(const std::function<void()>& test) {
  test();
  if (overTcp()) return;  // the child: done
  const int status = rerunCurrentTestWith({"COLLIE_SHM_DISABLE=1"});
  ASSERT_TRUE(WIFEXITED(status)) << "the child run over tcp did not exit (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child run over tcp failed (its output is above)";
}

Options splitOptions(std::chrono::milliseconds timeout = 60s) {
  Options o;
  o.timeout = timeout;
  o.name = "split";
  return o;
}

/// Runs fn(r) on one thread per rank and joins them.
void onEveryRank(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

TEST(Split, ColorsAndKeysRunEveryCollectiveElementByElement) {
  overShmAndTcp([] {
    ThreadLauncher::run(
        7,
        [](Communicator& comm) {
          const int r = comm.rank(), n = comm.size();
          const int color = r % 3, key = n - r;  // sizes 3, 2, 2; new ranks count the old ones down
          auto sub = comm.split(color, key);
          ASSERT_NE(sub, nullptr);
          expectMembers(*sub,
                        membersOf(
                            n, r, [](int q) { return q % 3; }, [n](int q) { return n - q; }),
                        r);
          everyCollectiveChecked(*sub);
          EXPECT_EQ(sub->lastCall().transport, expectedTransport());
          checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 1001, false, 0);  // the parent still works
        },
        splitOptions());
  });
}

TEST(Split, NestedSplitsAndNoColorRanks) {
  overShmAndTcp([] {
    ThreadLauncher::run(
        8,
        [](Communicator& comm) {
          const int r = comm.rank();
          auto half = comm.split(r % 2, r);  // 0,2,4,6 and 1,3,5,7
          ASSERT_NE(half, nullptr);
          auto quarter = half->split(half->rank() / 2, -half->rank());  // pairs, reversed
          ASSERT_NE(quarter, nullptr);
          EXPECT_EQ(quarter->size(), 2);
          EXPECT_EQ(quarter->rank(), 1 - half->rank() % 2);
          auto again = quarter->split(0, 0);  // same color, equal keys: old order
          ASSERT_NE(again, nullptr);
          EXPECT_EQ(again->rank(), quarter->rank());
          // Old ranks seen through three levels (an AllGather of them), and a large AllReduce.
          const std::vector<int> halfMembers = membersOf(
              8, r, [](int q) { return q % 2; }, [](int q) { return q; });
          std::vector<int> pair;  // old ranks of the quarter: the half's ranks by pairs, reversed
          for (int h : membersOf(
                   4, half->rank(), [](int q) { return q / 2; }, [](int q) { return -q; }))
            pair.push_back(halfMembers[static_cast<size_t>(h)]);
          expectMembers(*again, pair, r);
          checkCase(*again, Coll::AllReduce, DataType::Float32, ReduceOp::Sum, 100003, false, 0);
          EXPECT_EQ(again->lastCall().transport, expectedTransport());
          // Ranks 1 and 6 opt out of a split of the parent; the others are renumbered in order.
          auto some = comm.split(r == 1 || r == 6 ? COLLIE_SPLIT_NOCOLOR : 5, 0);
          if (r == 1 || r == 6) {
            EXPECT_EQ(some, nullptr);
          } else {
            ASSERT_NE(some, nullptr);
            expectMembers(*some, {0, 2, 3, 4, 5, 7}, r);
          }
          checkCase(*half, Coll::ReduceScatter, DataType::Int32, ReduceOp::Max, 333, false, 0);
        },
        splitOptions());
  });
}

// A split of a split with the same epoch and color (each communicator's first split, color 0) while the grandparent
// lives and still connects pairs: the grandchild's secret was the grandparent's (an XOR that two equal salts undid),
// so one's hellos went to the other's desk and their connections mixed or were turned away.
TEST(Split, AGrandchildAndItsGrandparentConnectApartWhileBothLive) {
  overShmAndTcp([] {
    Options options = splitOptions();
    options.timeout = std::chrono::seconds(20);
    ThreadLauncher::run(
        4,
        [](Communicator& comm) {
          const int r = comm.rank();
          auto child = comm.split(0, r);
          auto grandchild = child->split(0, r);
          everyCollectiveChecked(*grandchild);                                            // every pair, its own
          checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 55, false, 0);  // every pair, the root's
          checkCase(*child, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 56, false, 0);
          checkCase(*grandchild, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 57, false, 0);
        },
        options);
  });
}

// Users destroy the parent once they have split it. The child's connections are all made after that (lazily),
// through the listeners it shares with the parent: the listeners must outlive the parent.
TEST(Split, ParentDestroyedBeforeTheChildsFirstCall) {
  overShmAndTcp([] {
    constexpr int n = 6;
    auto parents = Communicator::createAll(n, splitOptions());
    std::vector<std::unique_ptr<Communicator>> children(n);
    std::atomic<int> failures{0};
    onEveryRank(n, [&](int r) {
      try {
        children[static_cast<size_t>(r)] = parents[static_cast<size_t>(r)]->split(r % 2, r);
        parents[static_cast<size_t>(r)].reset();  // at once, while other ranks may still be in split
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        failures++;
      }
    });
    ASSERT_EQ(failures.load(), 0);
    ThreadLauncher::runOn(children, [](Communicator& child) {
      EXPECT_EQ(child.connectedPeers(), 0) << "nothing connected before the first call";
      everyCollectiveChecked(child);
      EXPECT_EQ(child.lastCall().transport, expectedTransport());
      auto grandchild = child.split(0, -child.rank());  // a split of an orphan: the listeners are still there
      ASSERT_NE(grandchild, nullptr);
      EXPECT_EQ(grandchild->rank(), child.size() - 1 - child.rank());
      checkCase(*grandchild, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 257, false, 0);
    });
  });
}

// A parent that fails after the split (here a mismatched call, which closes or poisons its connections and makes it
// refuse dials from then on) takes nothing of the child with it: the child's first calls connect through the
// listeners they share, to the child's own desks. A split of the failed parent reports the parent's failure at once.
TEST(Split, AFailedParentLeavesTheChildWorkingAndRefusesToSplitAgain) {
  overShmAndTcp([] {
    ThreadLauncher::run(
        6,
        [](Communicator& comm) {
          const int r = comm.rank();
          auto child = comm.split(r % 2, r);
          ASSERT_NE(child, nullptr);
          std::vector<int32_t> v(r == 0 ? 5 : 6, 1);  // rank 0 passes another count: a mismatch
          EXPECT_THROW(comm.allReduce(v.data(), v.data(), v.size(), DataType::Int32, ReduceOp::Sum), Error);
          EXPECT_NE(comm.asyncError(), ErrorCode::Success) << "rank " << r << ": the parent did not fail";
          try {
            comm.split(0, r);
            ADD_FAILURE() << "rank " << r << ": a failed parent split";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("mismatched calls"), std::string::npos) << e.what();
          }
          EXPECT_EQ(child->connectedPeers(), 0);
          everyCollectiveChecked(*child);
          EXPECT_EQ(child->lastCall().transport, expectedTransport());
        },
        splitOptions(10s));
  });
}

TEST(Split, ParentAndChildUsedAtOnce) {
  overShmAndTcp([] {
    ThreadLauncher::run(
        6,
        [](Communicator& comm) {
          auto sub = comm.split(comm.rank() / 3, comm.rank());  // 0,1,2 and 3,4,5: the child's first calls connect
          ASSERT_NE(sub, nullptr);
          std::thread other([&] {
            for (int i = 0; i < 3; ++i) {
              checkCase(*sub, Coll::AllReduce, DataType::Int64, ReduceOp::Sum, 70001, false, 0);
              checkCase(*sub, Coll::AllGather, DataType::Int32, ReduceOp::Sum, 999, false, 0);
            }
          });
          for (int i = 0; i < 3; ++i) {
            checkCase(comm, Coll::AllReduce, DataType::Float32, ReduceOp::Sum, 50021, false, 0);
            checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 131, false, 0);
          }
          other.join();
        },
        splitOptions());
  });
}

// A split opens no listening socket: the child takes dials on the parent's listeners. What it does open before
// its first call is its poller's (epoll and eventfd); before split shared listeners, one listening socket per
// transport came on top (tcp: 3 per rank, shm: 4). Destroying the child gives every descriptor back.
TEST(Split, TheChildOpensNoListenerAndLeaksNoDescriptor) {
  overShmAndTcp([] {
    constexpr int n = 8;
    auto parents = Communicator::createAll(n, splitOptions());
    auto splitAll = [&](std::vector<std::unique_ptr<Communicator>>& out) {
      onEveryRank(n, [&](int r) { out[static_cast<size_t>(r)] = parents[static_cast<size_t>(r)]->split(r % 2, r); });
    };
    std::vector<std::unique_ptr<Communicator>> children(n);
    splitAll(children);  // the parent connects the peers of split's all-gather (lazily) once and for all
    children.clear();
    children.resize(n);
    const long before = settledOpenDescriptors();
    const int listening = listeningSockets();
    splitAll(children);
    const long afterSplit = base::fdUsage().open;
    EXPECT_EQ(listeningSockets(), listening) << "a split opened a listening socket";
    for (auto& c : children) ASSERT_NE(c, nullptr);
    EXPECT_LE(afterSplit - before, 2 * n) << "descriptors the split took, all ranks (at most the pollers' 2 each)";
    ThreadLauncher::runOn(children, [](Communicator& child) {
      checkCase(child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 4099, false, 0);
    });
    children.clear();
    children.resize(n);
    EXPECT_EQ(settledOpenDescriptors(), before) << "descriptors left after destroying the children";
  });
}

// Every rank must call split. A rank that calls another collective instead makes every rank fail within the
// timeout (a mismatch of the calls, caught by their fingerprints), and one that calls an AllGather of split's very
// shape is caught by split's entries (named), not taken for a split.
TEST(Split, ARankCallingSomethingElseFailsEveryRankInsteadOfHanging) {
  overShmAndTcp([] {
    constexpr auto kTimeout = 5s;
    for (bool sameShape : {false, true}) {
      SCOPED_TRACE(sameShape ? "the odd rank calls AllGather(int32, 5)" : "the odd rank calls a barrier");
      auto comms = Communicator::createAll(4, splitOptions(kTimeout));
      std::vector<std::string> errors(4);
      std::vector<double> seconds(4);
      onEveryRank(4, [&](int r) {
        const auto t0 = std::chrono::steady_clock::now();
        try {
          Communicator& c = *comms[static_cast<size_t>(r)];
          if (r != 3) {
            auto sub = c.split(0, r);
          } else if (sameShape) {
            int32_t mine[5] = {1, 2, 3, 4, 5}, all[20];
            c.allGather(mine, all, 5, DataType::Int32);
          } else {
            c.barrier();
          }
        } catch (const Error& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
        seconds[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      });
      for (int r = 0; r < 4; ++r) {
        EXPECT_LT(seconds[static_cast<size_t>(r)], 2.0 * 5) << "rank " << r << " waited past the timeout";
        if (sameShape && r == 3) continue;  // its AllGather took the split's entries: it cannot tell
        EXPECT_FALSE(errors[static_cast<size_t>(r)].empty()) << "rank " << r << " got no error";
        if (sameShape)
          EXPECT_NE(errors[static_cast<size_t>(r)].find("no split entry from rank 3"), std::string::npos)
              << errors[static_cast<size_t>(r)];
        else
          EXPECT_NE(errors[static_cast<size_t>(r)].find("Barrier()"), std::string::npos)
              << errors[static_cast<size_t>(r)];
      }
    }
  });
}

}  // namespace
}  // namespace collie::test
