// Split with Options::shareConnections (src/core/link_share.hpp), every rank a thread, over shm here and over tcp in a
// child of this binary (COLLIE_SHM_DISABLE=1):
//   - every collective on a sharing child, element by element, between the parent's calls, takes no descriptor: not
//     at the split, not at its calls, not at its destruction, over pairs the parent had connected;
//   - a pair the child connects first is the parent's too (the parent then calls over it without connecting);
//   - a child of a sharing child shares the same connections;
//   - the parent destroyed first: the child goes on, connecting new pairs through the parent's links;
//   - a rank that calls parent and child in another order than its peer: both fail with a mismatch naming the
//     child's tag, within the timeout, and no call returns another communicator's data;
//   - an abort of the child fails the parent, naming the child, and closes the family's connections: the parent's
//     peers fail at once;
//   - an async call on the parent then a call on the child run in the order issued on every rank;
//   - a group mixing the parent and a sharing child, and ranks of a color that disagree on sharing, are refused;
//   - a group whose turn does not come within its timeout fails its Works;
//   - collieCommSplit's config->splitShare (0, 1; anything else refused);
//   - two children of different splits whose first tag candidates are the same get different tags, and a tag comes
//     free when its communicator is destroyed: calls in another order on them fail with a mismatch too;
//   - a waiting call of a sharing child finds a mismatch that no message shows (it asks its peers) before the
//     timeout, and takes no other member's message at the head of a connection for a contradiction.
#include <collie/collie.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_handle.hpp"
#include "common/bodies.hpp"
#include "common/descriptors.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"
#include "common/split_checks.hpp"
#include "core/api_access.hpp"
#include "core/link_share.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

/// Runs `test` here over shm, and in a child of this binary over tcp.
void overShmAndTcp(const std::function<void()>& test) {
  test();
  if (std::getenv("COLLIE_SHM_DISABLE") != nullptr) return;  // the child: done
  const int status = rerunCurrentTestWith({"COLLIE_SHM_DISABLE=1"});
  ASSERT_TRUE(WIFEXITED(status)) << "the child run over tcp did not exit (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child run over tcp failed (its output is above)";
}

Options shareOptions(std::chrono::milliseconds timeout = 60s) {
  Options o;
  o.timeout = timeout;
  o.name = "share";
  o.shareConnections = true;
  return o;
}

/// `n` parents (thread ranks) whose connections their children may share, not sharing any themselves.
ThreadRanks createParents(int n, std::chrono::milliseconds timeout = 60s) {
  Options o = shareOptions(timeout);
  o.shareConnections = false;
  return ThreadRanks(Communicator::createAll(n, o));
}

/// Runs fn(r) on one thread per rank and joins them.
void onEveryRank(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

/// What `calls` threw on one rank ("no error" when nothing) and how long they took.
struct Outcome {
  std::string error;
  double seconds = 0;
};

/// On every rank of `parents`, a child sharing its parent's connections, connected by an AllReduce, then `calls`
/// (rank, parent, child) timed: each rank's outcome.
std::vector<Outcome> timedOnSharingChildren(ThreadRanks& parents, std::chrono::milliseconds timeout,
                                            const std::function<void(int, Communicator&, Communicator&)>& calls) {
  const int n = static_cast<int>(parents.size());
  std::vector<Outcome> out(static_cast<size_t>(n));
  onEveryRank(n, [&](int r) {
    Communicator& parent = *parents[static_cast<size_t>(r)];
    auto child = parent.split(0, r, shareOptions(timeout));
    checkCase(*child, Coll::AllReduce, DataType::Float32, ReduceOp::Sum, 64, false, 0);  // connected
    Outcome& o = out[static_cast<size_t>(r)];
    const auto t0 = std::chrono::steady_clock::now();
    try {
      calls(r, parent, *child);
      o.error = "no error";
    } catch (const Error& e) {
      o.error = e.what();
    }
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  return out;
}

TEST(SplitShare, EveryCollectiveOnTheParentsConnectionsTakesNoDescriptor) {
  overShmAndTcp([] {
    constexpr int n = 8;
    auto parents = createParents(n);
    ThreadLauncher::runOn(parents, [](Communicator& comm) {  // connects every pair
      checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 33, false, 0);
    });
    const long before = settledOpenDescriptors();
    ThreadRanks children{std::vector<std::unique_ptr<Communicator>>(n)};
    onEveryRank(n, [&](int r) {
      auto& parent = *parents[static_cast<size_t>(r)];
      children[static_cast<size_t>(r)] = parent.split(r % 3, n - r, shareOptions());
      Communicator& child = *children[static_cast<size_t>(r)];
      expectMembers(child,
                    membersOf(
                        n, r, [](int q) { return q % 3; }, [&](int q) { return n - q; }),
                    r);
      everyCollectiveChecked(child);
      EXPECT_EQ(child.lastCall().transport, expectedTransport());
      checkCase(parent, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 1001, false, 0);  // in between
      checkCase(child, Coll::AllReduce, DataType::Float32, ReduceOp::Sum, 70001, false, 0);
      EXPECT_EQ(child.connectedPeers(), child.size() - 1) << "rank " << r;
    });
    EXPECT_EQ(settledOpenDescriptors(), before) << "descriptors the sharing children took";
    destroyOnePerThread(children);
    EXPECT_EQ(settledOpenDescriptors(), before) << "descriptors after destroying the children";
    ThreadLauncher::runOn(parents, [](Communicator& comm) {
      checkCase(comm, Coll::AllReduce, DataType::Int64, ReduceOp::Sum, 4099, false, 0);
    });
  });
}

TEST(SplitShare, APairTheChildConnectsFirstIsTheParentsToo) {
  overShmAndTcp([] {
    constexpr int n = 6;
    Options parentOptions = shareOptions();
    parentOptions.shareConnections = false;
    parentOptions.connect = ConnectMode::Lazy;  // whatever COLLIE_CONNECT says
    ThreadRanks parents(Communicator::createAll(n, parentOptions));
    std::vector<int> parentPeersBefore(n), parentPeersAfter(n);
    onEveryRank(n, [&](int r) {
      auto& parent = *parents[static_cast<size_t>(r)];
      parentPeersBefore[static_cast<size_t>(r)] = parent.connectedPeers();
      auto child = parent.split(0, r, shareOptions());  // the same ranks in the same order
      checkCase(*child, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 77, false, 0);  // every pair
      parentPeersAfter[static_cast<size_t>(r)] = parent.connectedPeers();
      auto grandchild = child->split(r % 2, r, shareOptions());  // shares the same connections
      everyCollectiveChecked(*grandchild);
      checkCase(parent, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 78, false, 0);
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_LT(parentPeersBefore[static_cast<size_t>(r)], n - 1) << "rank " << r << " was connected to all before";
      EXPECT_EQ(parentPeersAfter[static_cast<size_t>(r)], n - 1) << "rank " << r;
    }
  });
}

TEST(SplitShare, TheParentDestroyedFirstLeavesTheChildWorking) {
  overShmAndTcp([] {
    constexpr int n = 5;
    auto parents = createParents(n);
    ThreadRanks children{std::vector<std::unique_ptr<Communicator>>(n)};
    onEveryRank(n, [&](int r) {
      children[static_cast<size_t>(r)] = parents[static_cast<size_t>(r)]->split(0, -r, shareOptions());
    });
    destroyOnePerThread(parents);
    ThreadLauncher::runOn(children, [](Communicator& child) {
      everyCollectiveChecked(child);  // new pairs are connected through the destroyed parent's links
      EXPECT_EQ(child.connectedPeers(), child.size() - 1);
    });
  });
}

// Rank 0 calls the parent then the child, rank 1 the child then the parent, the same AllReduce: on one stream the
// parent's message would be taken for the child's. Both fail with a mismatch that names the child's tag.
TEST(SplitShare, CallsInAnotherOrderFailWithAMismatchInsteadOfWrongData) {
  overShmAndTcp([] {
    constexpr auto kTimeout = 5s;
    auto parents = createParents(2, kTimeout);
    std::vector<std::string> errors(2);
    std::vector<double> seconds(2);
    onEveryRank(2, [&](int r) {
      auto& parent = *parents[static_cast<size_t>(r)];
      auto child = parent.split(0, r, shareOptions(kTimeout));
      checkCase(*child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);  // connected, in order
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<int32_t> a(1024, r + 1), b(1024, 10 * (r + 1));
      try {
        Communicator& first = r == 0 ? parent : *child;
        Communicator& second = r == 0 ? *child : parent;
        first.allReduce(a.data(), a.data(), a.size(), DataType::Int32, ReduceOp::Sum);
        second.allReduce(b.data(), b.data(), b.size(), DataType::Int32, ReduceOp::Sum);
        errors[static_cast<size_t>(r)] = "no error; got " + std::to_string(a[0]) + " and " + std::to_string(b[0]);
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
      seconds[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(errors[static_cast<size_t>(r)].find("mismatched calls"), std::string::npos)
          << "rank " << r << ": " << errors[static_cast<size_t>(r)];
      EXPECT_NE(errors[static_cast<size_t>(r)].find("on the communicator tagged"), std::string::npos)
          << "rank " << r << ": " << errors[static_cast<size_t>(r)];
      EXPECT_LT(seconds[static_cast<size_t>(r)], 2.0 * 5) << "rank " << r;
    }
  });
}

TEST(SplitShare, AnAbortOfTheChildFailsTheParentNamingIt) {
  auto parents = createParents(3, 10s);
  std::vector<std::string> errors(3);
  onEveryRank(3, [&](int r) {
    auto& parent = *parents[static_cast<size_t>(r)];
    auto child = parent.split(0, r, shareOptions(10s));
    checkCase(*child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
    child->abort();
    try {
      checkCase(parent, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
      errors[static_cast<size_t>(r)] = "no error";
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("shares its connections with a communicator that failed"),
              std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("was aborted"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  }
}

// Every rank issues an async AllReduce on the parent, then a blocking one on the child, then waits for the first: the
// child's call waits for the parent's to end, so both run in the order issued on every rank (before, the parent's
// progress thread and the caller raced for the connections and ranks could run them in different orders).
TEST(SplitShare, AnAsyncCallOnTheParentThenACallOnTheChildRunInTheOrderIssued) {
  overShmAndTcp([] {
    constexpr int n = 4;
    auto parents = createParents(n, 30s);
    onEveryRank(n, [&](int r) {
      auto& parent = *parents[static_cast<size_t>(r)];
      auto child = parent.split(r % 2, r, shareOptions(30s));
      const int m = child->size();
      for (int round = 0; round < 20; ++round) {
        std::vector<int32_t> a(4099, r + round), b(777, 3 * r + 1);
        Work work = parent.allReduceAsync(a.data(), a.data(), a.size(), DataType::Int32, ReduceOp::Sum);
        child->allReduce(b.data(), b.data(), b.size(), DataType::Int32, ReduceOp::Sum);
        work.wait();
        int32_t wantB = 0;  // the child holds the ranks of r's parity
        for (int q = r % 2; q < n; q += 2) wantB += 3 * q + 1;
        ASSERT_EQ(m, n / 2);
        ASSERT_EQ(a[4098], n * (n - 1) / 2 + n * round) << "rank " << r << " round " << round;
        ASSERT_EQ(b[776], wantB) << "rank " << r << " round " << round;
      }
    });
  });
}

// A group that holds calls of a parent and of a child sharing its connections is refused: they run one call at a
// time and would wait on each other.
TEST(SplitShare, AGroupMixingTheParentAndASharingChildIsRefused) {
  auto parents = createParents(2, 10s);
  std::vector<std::string> errors(2);
  onEveryRank(2, [&](int r) {
    auto& parent = *parents[static_cast<size_t>(r)];
    auto child = parent.split(0, r, shareOptions(10s));
    int32_t x = 1, y = 2;
    try {
      groupStart();
      parent.allReduce(&x, &x, 1, DataType::Int32, ReduceOp::Sum);
      child->allReduce(&y, &y, 1, DataType::Int32, ReduceOp::Sum);
      groupEnd();
      errors[static_cast<size_t>(r)] = "no error";
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
    EXPECT_EQ(x, 1);  // nothing ran
    EXPECT_EQ(y, 2);
    checkCase(*child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);  // both still work
    checkCase(parent, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[static_cast<size_t>(r)].find("share their connections"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
}

// A group whose turn on the family does not come within its communicator's timeout is dropped, not left pending: rank
// 0's parent holds the family's turn with a receive that rank 1 answers only afterwards, and rank 0's child (timeout
// 1 s) ends a group of one send with groupEndAsync: it throws Timeout and the send's Work has failed with it (before
// 2026-11-29 that Work never completed). The receive then completes and both communicators go on.
TEST(SplitShare, AGroupWhoseTurnDoesNotComeIsDroppedWithItsWorksFailed) {
  auto parents = createParents(2, 30s);
  std::atomic<bool> childGaveUp{false};
  onEveryRank(2, [&](int r) {
    auto& parent = *parents[static_cast<size_t>(r)];
    auto child = parent.split(0, r, shareOptions(1s));
    int32_t got = -1, sent = 42, x = 7;
    if (r == 0) {
      Work held = parent.recvAsync(&got, 1, DataType::Int32, 1);
      groupStart();
      Work w = child->sendAsync(&x, 1, DataType::Int32, 1);
      try {
        groupEndAsync();
        ADD_FAILURE() << "the child's group got the family's turn while the parent's receive held it";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
      }
      EXPECT_TRUE(w.test()) << "the dropped group's Work is still pending";
      EXPECT_THROW(w.wait(), Error);
      childGaveUp = true;
      held.wait();
      EXPECT_EQ(got, 42);
    } else {
      while (!childGaveUp) std::this_thread::sleep_for(10ms);
      parent.send(&sent, 1, DataType::Int32, 0);
    }
    checkCase(*child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
    checkCase(parent, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
  });
}

// Rank 0 aborts its child {0, 1} while ranks 2 and 3 wait on the parent to receive from rank 0: the abort closes the
// family's connections, the parent's to ranks 2 and 3 included, so they fail at once rather than at their timeout
// (before, only the child's borrowed pair 0-1 was closed). A receive, not a collective: which peers a collective's
// rank waits on depends on the algorithm the tuner picks (halving-doubling pairs rank 3 with 2 and the idle rank 1,
// never with 0), and a rank waiting on an idle live peer rightly waits for its timeout.
TEST(SplitShare, AFailureOfTheChildReachesThePeersOfTheParentAtOnce) {
  overShmAndTcp([] {
    constexpr int n = 4;
    constexpr auto kTimeout = 60s;
    auto parents = createParents(n, kTimeout);
    ThreadLauncher::runOn(parents, [](Communicator& comm) {  // connects every pair
      checkCase(comm, Coll::AllToAll, DataType::Int32, ReduceOp::Sum, 33, false, 0);
    });
    ThreadRanks children{std::vector<std::unique_ptr<Communicator>>(n)};
    onEveryRank(n, [&](int r) {
      children[static_cast<size_t>(r)] = parents[static_cast<size_t>(r)]->split(r < 2 ? 0 : 1, r, shareOptions());
    });
    std::vector<std::string> errors(n);
    std::vector<double> seconds(n);
    onEveryRank(n, [&](int r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (r == 0) {
        std::this_thread::sleep_for(300ms);  // ranks 2 and 3 are waiting by now
        children[0]->abort();
        return;
      }
      if (r == 1) return;  // alive, calls nothing
      std::vector<int32_t> v(1024, r);
      try {
        parents[static_cast<size_t>(r)]->recv(v.data(), v.size(), DataType::Int32, 0);
        errors[static_cast<size_t>(r)] = "no error";
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
      seconds[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    for (int r = 2; r < n; ++r) {
      EXPECT_NE(errors[static_cast<size_t>(r)], "no error") << "rank " << r;
      EXPECT_LT(seconds[static_cast<size_t>(r)], 15.0) << "rank " << r << ": " << errors[static_cast<size_t>(r)];
    }
    destroyOnePerThread(children);
    destroyOnePerThread(parents);
  });
}

// Ranks of one color whose children would connect eagerly on some and lazily on others fail the split alike (the
// eager ones waited at init for dials the lazy ones never made, until the timeout); other colors may differ.
TEST(SplitShare, RanksOfAColorThatDisagreeOnTheConnectModeFailTheSplit) {
  auto parents = createParents(4, 10s);
  std::vector<std::string> errors(4);
  onEveryRank(4, [&](int r) {
    Options childOptions = shareOptions(10s);
    childOptions.shareConnections = false;
    // Color 0 (ranks 0, 1) disagrees; color 1 (ranks 2, 3) is eager on both.
    childOptions.connect = r == 1 ? ConnectMode::Lazy : ConnectMode::Eager;
    try {
      auto child = parents[static_cast<size_t>(r)]->split(r / 2, r, childOptions);
      errors[static_cast<size_t>(r)] = "no error";
      checkCase(*child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("must pass the same connect mode"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find(r == 1 ? "rank 0 connects eagerly and this rank lazily"
                                                         : "rank 1 connects lazily and this rank eagerly"),
              std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  }
  for (int r = 2; r < 4; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "no error") << "rank " << r;
  ThreadLauncher::runOn(parents, [](Communicator& comm) {  // the parent is unharmed
    checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
  });
}

// Ranks of one color that disagree on sharing fail the split alike, naming the rank that differs.
TEST(SplitShare, RanksOfAColorThatDisagreeOnSharingFailTheSplit) {
  auto parents = createParents(3, 10s);
  std::vector<std::string> errors(3);
  onEveryRank(3, [&](int r) {
    Options childOptions = shareOptions(10s);
    childOptions.shareConnections = r != 1;
    try {
      auto child = parents[static_cast<size_t>(r)]->split(0, r, childOptions);
      errors[static_cast<size_t>(r)] = "no error";
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("must pass the same shareConnections"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find(r == 1 ? "rank 0 shares" : "rank 1 does not share"),
              std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  }
  ThreadLauncher::runOn(parents, [](Communicator& comm) {  // the parent is unharmed
    checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
  });
}

// A child of a sharing child that does not share makes connections of its own (through the family's listeners).
TEST(SplitShare, AChildOfASharingChildThatDoesNotShareConnectsOnItsOwn) {
  overShmAndTcp([] {
    constexpr int n = 3;
    auto parents = createParents(n, 20s);
    onEveryRank(n, [&](int r) {
      auto& parent = *parents[static_cast<size_t>(r)];
      auto child = parent.split(0, r, shareOptions(20s));
      checkCase(*child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
      Options own = shareOptions(20s);
      own.shareConnections = false;
      auto grandchild = child->split(0, r, own);
      everyCollectiveChecked(*grandchild);
      checkCase(*child, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
    });
  });
}

TEST(SplitShare, TheCApiTakesSplitShareFromTheConfig) {
  collieUniqueId id;
  ASSERT_EQ(collieGetUniqueId(&id), collieSuccess);
  std::vector<collieComm_t> parents(2, nullptr);
  onEveryRank(2, [&](int r) {
    ASSERT_EQ(collieCommInitRank(&parents[static_cast<size_t>(r)], 2, id, r), collieSuccess);
    collieConfig_t bad = COLLIE_CONFIG_INITIALIZER;
    bad.splitShare = 2;
    collieComm_t none = nullptr;
    EXPECT_EQ(collieCommSplit(parents[static_cast<size_t>(r)], 0, r, &none, &bad), collieInvalidArgument);
    EXPECT_NE(std::string(collieGetLastError(nullptr)).find("config->splitShare=2: expected 0 or 1"), std::string::npos)
        << collieGetLastError(nullptr);
    collieConfig_t config = COLLIE_CONFIG_INITIALIZER;
    config.splitShare = 1;
    collieComm_t child = nullptr;
    ASSERT_EQ(collieCommSplit(parents[static_cast<size_t>(r)], 0, r, &child, &config), collieSuccess)
        << collieGetLastError(nullptr);
    int32_t v = r + 1;
    EXPECT_EQ(collieAllReduce(&v, &v, 1, collieInt32, collieSum, child, nullptr), collieSuccess);
    EXPECT_EQ(v, 3);
    EXPECT_EQ(collieCommDestroy(child), collieSuccess);
    EXPECT_EQ(collieCommDestroy(parents[static_cast<size_t>(r)]), collieSuccess);
  });
}

uint32_t tagOf(Communicator& c) { return InternalAccess::coreComm(c).fingerprintTag(); }

// A split whose config leaves splitShare unset takes the parent's own config's (NCCL takes it from the parent's
// config): a parent made with splitShare=1 has children that share its connections (their tag is a sharing one, not
// 0) and pass that on to theirs, a split's own 0 still says no, and a parent made without it has children that do not
// share (before 2026-11-30 collieCommInitRankConfig accepted splitShare=1 and nothing used it).
TEST(SplitShare, TheCApiTakesAnUnsetSplitShareFromTheParentsConfig) {
  auto tagOfHandle = [](collieComm_t h) { return tagOf(*h->shared->comm); };
  for (const int parentShare : {1, COLLIE_CONFIG_UNDEF_INT}) {
    collieUniqueId id;
    ASSERT_EQ(collieGetUniqueId(&id), collieSuccess);
    onEveryRank(2, [&](int r) {
      collieConfig_t config = COLLIE_CONFIG_INITIALIZER;
      config.splitShare = parentShare;
      collieComm_t parent = nullptr, child = nullptr, grandchild = nullptr, own = nullptr;
      ASSERT_EQ(collieCommInitRankConfig(&parent, 2, id, r, &config), collieSuccess) << collieGetLastError(nullptr);
      ASSERT_EQ(collieCommSplit(parent, 0, r, &child, nullptr), collieSuccess) << collieGetLastError(nullptr);
      ASSERT_EQ(collieCommSplit(child, 0, r, &grandchild, nullptr), collieSuccess) << collieGetLastError(nullptr);
      collieConfig_t no = COLLIE_CONFIG_INITIALIZER;
      no.splitShare = 0;
      ASSERT_EQ(collieCommSplit(parent, 0, r, &own, &no), collieSuccess) << collieGetLastError(nullptr);
      if (parentShare == 1) {
        EXPECT_NE(tagOfHandle(child), 0u) << "the child of a splitShare=1 parent does not share";
        EXPECT_NE(tagOfHandle(grandchild), 0u) << "the child's child does not share";
      } else {
        EXPECT_EQ(tagOfHandle(child), 0u) << "the child of a parent without splitShare shares";
        EXPECT_EQ(tagOfHandle(grandchild), 0u);
      }
      EXPECT_EQ(tagOfHandle(own), 0u) << "a split's own splitShare=0 was overridden";
      for (collieComm_t c : {grandchild, own, child, parent}) {
        int32_t v = r + 1;
        EXPECT_EQ(collieAllReduce(&v, &v, 1, collieInt32, collieSum, c, nullptr), collieSuccess);
        EXPECT_EQ(v, 3);
      }
      for (collieComm_t c : {grandchild, own, child, parent}) EXPECT_EQ(collieCommDestroy(c), collieSuccess);
    });
  }
}

/// A color whose first tag candidate, for the split numbered `epoch` of a parent tagged 0, is `tag`.
int colorWhoseFirstCandidateIs(uint32_t tag, int epoch) {
  for (int color = 1; color < (1 << 22); ++color)
    if (core::sharingTagCandidate(0, epoch, color, 0) == tag) return color;
  ADD_FAILURE() << "no color gives tag " << tag << " at split " << epoch;
  return 0;
}

TEST(SplitShare, ChildrenWhoseFirstTagCandidatesCollideGetDifferentTagsAndCallsInAnotherOrderFail) {
  overShmAndTcp([] {
    constexpr auto kTimeout = 5s;
    auto parents = createParents(2, kTimeout);
    const uint32_t first = core::sharingTagCandidate(0, 0, 0, 0);
    const int colliding = colorWhoseFirstCandidateIs(first, 1);  // split 1's color whose candidate 0 is split 0's
    const int again = colorWhoseFirstCandidateIs(first, 2);      // split 2's likewise
    std::vector<std::string> errors(2);
    onEveryRank(2, [&](int r) {
      auto& parent = *parents[static_cast<size_t>(r)];
      auto a = parent.split(0, r, shareOptions(kTimeout));
      EXPECT_EQ(tagOf(*a), first);
      auto b = parent.split(colliding, r, shareOptions(kTimeout));
      EXPECT_EQ(tagOf(*b), core::sharingTagCandidate(0, 1, colliding, 1)) << "candidate 0 is a's";
      EXPECT_NE(tagOf(*b), tagOf(*a));
      a.reset();  // its tag comes free
      auto c = parent.split(again, r, shareOptions(kTimeout));
      EXPECT_EQ(tagOf(*c), first) << "a's tag was not given back when a was destroyed";
      checkCase(*b, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);  // connected, in order
      checkCase(*c, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
      // The same call (number, collective, type, count) on c and b in another order on each rank: only the tags
      // tell them apart.
      std::vector<int32_t> x(1024, r + 1), y(1024, 10 * (r + 1));
      try {
        Communicator& one = r == 0 ? *c : *b;
        Communicator& two = r == 0 ? *b : *c;
        one.allReduce(x.data(), x.data(), x.size(), DataType::Int32, ReduceOp::Sum);
        two.allReduce(y.data(), y.data(), y.size(), DataType::Int32, ReduceOp::Sum);
        errors[static_cast<size_t>(r)] = "no error; got " + std::to_string(x[0]) + " and " + std::to_string(y[0]);
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
    for (int r = 0; r < 2; ++r)
      EXPECT_NE(errors[static_cast<size_t>(r)].find("mismatched calls"), std::string::npos)
          << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  });
}

// A Reduce on 3 ranks of a sharing child in which rank 1 names itself root (the others name 0): under ring every
// rank's part starts with a receive, so no message shows the mismatch and the waiting ranks must ask one another
// (through the root's listeners); and an AllReduce on rank 1 against the others' Reduce, whose telling message sits
// unread at the head of an idle connection. Before 2026-11-30 a sharing child neither looked nor asked: both waited
// until the timeout.
TEST(SplitShare, AWaitingChildFindsAMismatchNoReceiveShowsBeforeTheTimeout) {
  overShmAndTcp([] {
    constexpr auto kTimeout = 30s;
    for (bool allReduceAgainstReduce : {false, true}) {
      SCOPED_TRACE(allReduceAgainstReduce ? "AllReduce against Reduce" : "two roots");
      ForcedAlgorithm ring("ring");
      auto parents = createParents(3, kTimeout);
      const auto outcomes = timedOnSharingChildren(parents, kTimeout, [&](int r, Communicator&, Communicator& child) {
        std::vector<float> in(1024, 1.0f), out(1024, 0.0f);
        if (allReduceAgainstReduce && r == 1) {
          child.allReduce(in.data(), out.data(), in.size(), DataType::Float32, ReduceOp::Sum);
        } else {
          child.reduce(in.data(), out.data(), in.size(), DataType::Float32, ReduceOp::Sum,
                       !allReduceAgainstReduce && r == 1 ? 1 : 0);
        }
      });
      for (int r = 0; r < 3; ++r) {
        const Outcome& o = outcomes[static_cast<size_t>(r)];
        EXPECT_NE(o.error.find("mismatched calls: rank "), std::string::npos) << "rank " << r << ": " << o.error;
        EXPECT_LT(o.seconds, 10.0) << "rank " << r << ": " << o.error;
      }
    }
  });
}

// Rank 1 calls a Reduce of 1 element on the child, rooted at itself, where ranks 0 and 2 call it with 0 elements:
// they move nothing and go on to a Broadcast from rank 1 on the parent, whose turn on rank 1 waits behind its Reduce.
// No message shows the difference: ranks 0 and 2 wait on rank 1, which waits on them, each in a call of another
// member of the family. Ranks 0 and 2, asking rank 1, are told of its Reduce, and
// judge it against the Reduce they made (the family keeps each member's last calls while a child shares). Before
// 2026-11-30 they judged it against the parent's call of that number, found no contradiction, and every rank waited
// for the timeout (found by the random programs, tests/threaded/test_random_programs.cpp).
TEST(SplitShare, ARankStillInACallItsPeersPassedWithNothingToMoveIsAMismatchAcrossTheFamily) {
  overShmAndTcp([] {
    constexpr auto kTimeout = 40s;
    auto parents = createParents(3, kTimeout);
    const auto outcomes =
        timedOnSharingChildren(parents, kTimeout, [](int r, Communicator& parent, Communicator& child) {
          std::vector<float> in(3, 1.0f), out(3, 0.0f);
          child.reduce(in.data(), out.data(), r == 1 ? 1 : 0, DataType::Float32, ReduceOp::Sum, 1);
          parent.broadcast(in.data(), in.data(), 3, DataType::Float32, 1);
        });
    for (int r = 0; r < 3; ++r) {
      const std::string& e = outcomes[static_cast<size_t>(r)].error;
      EXPECT_NE(e.find("mismatched calls: rank "), std::string::npos) << "rank " << r << ": " << e;
      EXPECT_NE(e.find("Reduce(float32, sum, 0, root 1)"), std::string::npos) << "rank " << r << ": " << e;
      EXPECT_NE(e.find("Reduce(float32, sum, 1, root 1)"), std::string::npos) << "rank " << r << ": " << e;
      EXPECT_LT(outcomes[static_cast<size_t>(r)].seconds, 20.0) << "rank " << r << ": " << e;
    }
  });
}

// Rank 1 waits 3 s in a call on one member of a family (a group receiving from ranks 0 and 2; rank 2 comes late)
// while rank 0, done with it, starts a direct AllReduce on the other member whose number is that of a collective
// call in the waiting member's history: its message sits at the head of rank 1's idle connection from rank 0, which
// rank 1's look reads, and rank 1 asks rank 0 what it waits in (that AllReduce). Another member's message or call
// is no contradiction: every value is checked. The child waits first, then the parent.
TEST(SplitShare, AnotherMembersMessageAtTheHeadOfAWaitingChildsConnectionIsNoMismatch) {
  overShmAndTcp([] {
    constexpr auto kTimeout = 30s;
    ForcedAlgorithm direct("direct");
    auto parents = createParents(3, kTimeout);
    onEveryRank(3, [&](int r) {
      auto& parent = *parents[static_cast<size_t>(r)];
      auto child = parent.split(0, r, shareOptions(kTimeout));  // the parent's collective #0
      const auto collective = [](Communicator& c) {
        checkCase(c, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 64, false, 0);
      };
      collective(parent);                              // parent #1: connected
      for (int i = 0; i < 3; ++i) collective(*child);  // child #0-#2
      for (bool childWaits : {true, false}) {
        Communicator& waiting = childWaits ? *child : parent;
        Communicator& other = childWaits ? parent : *child;
        if (!childWaits) collective(parent);  // parent #3, the number of the child's next collective
        // The other's next collective is #2 (parent) or #3 (child), which the waiting one has made.
        std::vector<int32_t> from0(64, -1), from2(64, -1), mine(64, 100 * (r + 1)), sum(64, -1);
        if (r == 2) std::this_thread::sleep_for(3s);
        try {
          groupStart();
          if (r == 1) {
            waiting.recv(from0.data(), from0.size(), DataType::Int32, 0);
            waiting.recv(from2.data(), from2.size(), DataType::Int32, 2);
          } else {
            waiting.send(mine.data(), mine.size(), DataType::Int32, 1);
          }
          groupEnd();
          other.allReduce(mine.data(), sum.data(), mine.size(), DataType::Int32, ReduceOp::Sum);
        } catch (const Error& e) {
          FAIL() << "rank " << r << ", childWaits " << childWaits << ": " << e.what();
        }
        for (size_t i = 0; i < sum.size(); ++i) {
          ASSERT_EQ(sum[i], 100 + 200 + 300) << "childWaits " << childWaits << ", element " << i;
          if (r != 1) continue;
          ASSERT_EQ(from0[i], 100) << "childWaits " << childWaits << ", element " << i;
          ASSERT_EQ(from2[i], 300) << "childWaits " << childWaits << ", element " << i;
        }
      }
    });
  });
}

}  // namespace
}  // namespace collie::test
