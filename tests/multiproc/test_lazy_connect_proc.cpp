// Connections on first use with every rank a forked process: a rank SIGKILLed after init, before any call needed a
// connection to it, must make the ranks whose next call needs it fail quickly (RemoteError well before the
// timeout), whether they dial it (it is lower: its listener is gone) or wait for its hello (it is higher: its
// process is gone). Every collective is run, so that each algorithm's first connections meet the dead rank. Over tcp
// (COLLIE_SHM_DISABLE=1) and shm. A stranger knocking on the listeners while ranks connect on first use is refused
// by the same handshake as at init (tests/threaded/test_strangers.cpp); here it must not disturb the ranks' calls.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/launcher.hpp"
#include "common/scoped_env.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

constexpr int kRanks = 4;
constexpr int64_t kMs = 1000000;
constexpr auto kTimeout = 20s;
constexpr int64_t kQuickNs = 4000 * kMs;  // well under the timeout

enum Counter { kKilledNs = 0, kReady = 1 };
enum PerRank { kCodePlusOne = 0, kAfterNs = 1 };

void killBeforeFirstUse(int victim, bool tcp, Coll coll) {
  ScopedEnv shm(tcp ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  ProcessLauncher launcher(kRanks, lazyOptions("lazy-killed", kTimeout));
  SharedArea& sh = launcher.shared();
  launcher.start([&sh, victim, coll](Communicator& comm) {
    sh.counters[kReady].fetch_add(1);
    if (comm.rank() == victim) {
      std::this_thread::sleep_for(60s);  // killed long before
      return;
    }
    ASSERT_TRUE(waitForCount(sh.counters[kKilledNs], 1, 60s)) << "the parent never killed rank " << victim;
    std::vector<int32_t> in(64 * kRanks, 1), out(in.size(), 0);
    try {
      switch (coll) {
        case Coll::AllToAll:
          comm.allToAll(in.data(), out.data(), 64, DataType::Int32);
          break;
        case Coll::AllGather:
          comm.allGather(in.data(), out.data(), 64, DataType::Int32);
          break;
        default:
          comm.allReduce(in.data(), out.data(), 64, DataType::Int32, ReduceOp::Sum);
          break;
      }
      // Possible only where this rank's part needed no connection to the dead rank (a ring neighbour's call
      // then waits on the rank behind it); the next barrier-like call must fail.
      comm.allToAll(in.data(), out.data(), 64, DataType::Int32);
      ADD_FAILURE() << "rank " << comm.rank() << ": no error with rank dead";
    } catch (const Error& e) {
      const int64_t after = monotonicNs() - sh.counters[kKilledNs].load();
      sh.perRank[comm.rank()][kCodePlusOne].store(static_cast<int>(e.code()) + 1);
      sh.perRank[comm.rank()][kAfterNs].store(after);
      EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
      EXPECT_LT(after, kQuickNs) << e.what();
    }
  });
  ASSERT_TRUE(waitForCount(sh.counters[kReady], kRanks, 60s)) << "the ranks did not initialise";
  launcher.kill(victim, SIGKILL);
  std::this_thread::sleep_for(50ms);  // the kernel closes its sockets
  sh.counters[kKilledNs].store(monotonicNs());
  auto exits = launcher.wait(60s);
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    EXPECT_TRUE(exits[r].ok()) << exits[r].describe();
    EXPECT_FALSE(exits[r].killedAtDeadline) << "rank " << r << " hung";
    EXPECT_NE(sh.perRank[r][kCodePlusOne].load(), 0) << "rank " << r << " saw no error";
  }
}

struct KillCase {
  int victim;
  bool tcp;
  Coll coll;
};

class LazyKilled : public ::testing::TestWithParam<KillCase> {};

TEST_P(LazyKilled, PeersNeedingTheDeadRankFailQuicklyWithRemoteError) {
  killBeforeFirstUse(GetParam().victim, GetParam().tcp, GetParam().coll);
}

std::vector<KillCase> killCases() {
  std::vector<KillCase> cases;
  for (bool tcp : {true, false})
    for (int victim : {0, kRanks - 1})
      for (Coll c : {Coll::AllToAll, Coll::AllGather, Coll::AllReduce}) cases.push_back(KillCase{victim, tcp, c});
  return cases;
}

std::string killName(const ::testing::TestParamInfo<KillCase>& info) {
  return collName(info.param.coll) + "_victim" + std::to_string(info.param.victim) + (info.param.tcp ? "_tcp" : "_shm");
}

INSTANTIATE_TEST_SUITE_P(Proc, LazyKilled, ::testing::ValuesIn(killCases()), killName);

// Ranks whose settings differ (COLLIE_SOCKETS_PER_PEER on one rank) cannot form a communicator: the bootstrap's
// tree connects every rank, so some pair of it compares the two settings in its hello. Every rank must fail init,
// quickly (the pair that disagrees ends its links, and their neighbours hear of it), none may hang to its timeout.
TEST(LazySettings, ASettingThatDiffersOnOneRankFailsInitOnEveryRankQuickly) {
  ScopedEnv shm("COLLIE_SHM_DISABLE", "1");
  ProcessLauncher launcher(kRanks, lazyOptions("lazy-settings", kTimeout));
  launcher.setEnv(kRanks - 1, "COLLIE_SOCKETS_PER_PEER", "3");
  launcher.start([](Communicator& comm) { ADD_FAILURE() << "rank " << comm.rank() << " initialised"; });
  auto exits = launcher.wait(60s);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(exits[r].exited && exits[r].exitCode == kChildInitFailure) << exits[r].describe();
    EXPECT_LT(exits[r].seconds, kQuickNs / 1e9) << exits[r].describe();
  }
}

}  // namespace
}  // namespace collie::test
