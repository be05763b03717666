// Communicator::shrink with every rank a forked process, over tcp (COLLIE_SHM_DISABLE=1) and shm:
//   - a rank SIGKILLed by the parent at a random moment during a loop of random collectives (rank 0, the
//     bootstrap root's host, included): every survivor catches the error, shrinks, and runs every collective on
//     the new communicator, checked element by element; the time from the kill to the first call that worked
//     on the new communicator is printed;
//   - shrink of a healthy communicator, excluding a live rank that does not take part (it gets InvalidUsage if
//     it calls shrink), with the exclude list in another order on some ranks; the parent still works afterwards;
//   - mismatched exclude lists: every caller fails within the timeout, with a message that says why;
//   - repeated shrink, 5 -> 4 -> 3 ranks, the second victim being the original rank 0.
// The random seed is printed; COLLIE_TEST_SEED=N repeats a run.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/launcher.hpp"
#include "common/scoped_env.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kMs = 1000000;  // ns
constexpr auto kTimeout = 5s;

enum Counter { kKillNs = 0, kShrunk = 1 };
enum PerRank { kIterations = 0, kCodePlusOne = 1, kWorkingAfterNs = 2, kDone = 3, kErrorAfterNs = 4 };

Options shrinkOptions(const char* name) {
  Options o;
  o.timeout = kTimeout;
  o.name = name;
  return o;
}

uint64_t testSeed() {
  if (const char* s = std::getenv("COLLIE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

// Every collective on `comm`, checked element by element on every rank.
void everyCollective(Communicator& comm) {
  Matrix m;
  m.types = {DataType::Float32, DataType::Int32};
  m.ops = {ReduceOp::Sum, ReduceOp::Max};
  m.counts = {1, 1000, 65537};
  for (Coll coll : kAllColls) runMatrix(comm, coll, m);
}

// The collective of iteration `it`: the same on every rank (drawn from the seed and the iteration).
void randomCall(Communicator& comm, uint64_t seed, int64_t it) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(it));
  const Coll coll = kAllColls[rng() % kAllColls.size()];
  const size_t counts[] = {1, 257, 4096, 50000, 262147};
  const size_t count = counts[rng() % 5];
  const int root = static_cast<int>(rng() % static_cast<uint64_t>(comm.size()));
  checkCase(comm, coll, DataType::Float32, ReduceOp::Sum, count, rng() % 2 == 0, root);
}

// Runs randomCall until one fails with a peer's failure; returns false (with a gtest failure) when none did.
bool loopUntilPeerFails(Communicator& comm, SharedArea& sh, uint64_t seed, int slot) {
  const auto limit = std::chrono::steady_clock::now() + 60s;
  for (int64_t it = 0; std::chrono::steady_clock::now() < limit; ++it) {
    try {
      randomCall(comm, seed, it);
    } catch (const Error& e) {
      sh.perRank[slot][kCodePlusOne].store(static_cast<int>(e.code()) + 1);
      if (int64_t kill = sh.counters[kKillNs].load()) sh.perRank[slot][kErrorAfterNs].store(monotonicNs() - kill);
      EXPECT_TRUE(e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout) << e.what();
      return true;
    }
    sh.perRank[slot][kIterations].fetch_add(1);
  }
  ADD_FAILURE() << "no error within 60 s";
  return false;
}

// After a shrink: what the new communicator says, a first AllReduce (timed from the kill), then everything.
void checkShrunk(Communicator& small, int expectRank, int expectSize, SharedArea& sh, int slot) {
  EXPECT_EQ(small.size(), expectSize);
  EXPECT_EQ(small.rank(), expectRank);
  std::vector<int32_t> ranks(1, small.rank() + 1);
  small.allReduce(ranks.data(), ranks.data(), 1, DataType::Int32, ReduceOp::Sum);
  EXPECT_EQ(ranks[0], expectSize * (expectSize + 1) / 2);
  if (int64_t kill = sh.counters[kKillNs].load()) sh.perRank[slot][kWorkingAfterNs].store(monotonicNs() - kill);
  everyCollective(small);
}

// ---- A rank killed at a random moment ----------------------------------------------------------------------

struct KillCase {
  const char* transport;  // "tcp" or "shm"
  int nranks;
  int victim;
};

std::string caseName(const testing::TestParamInfo<KillCase>& info) {
  return std::string(info.param.transport) + "_" + std::to_string(info.param.nranks) + "ranks_kill" +
         std::to_string(info.param.victim);
}

class ShrinkAfterKill : public testing::TestWithParam<KillCase> {};

TEST_P(ShrinkAfterKill, SurvivorsShrinkAndRunEveryCollective) {
  const KillCase c = GetParam();
  ScopedEnv tcp(std::string(c.transport) == "tcp" ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  const uint64_t seed = testSeed();
  std::mt19937_64 rng(seed);
  const int64_t warmup = 1 + static_cast<int64_t>(rng() % 8);   // iterations every rank does before the kill
  const auto delay = std::chrono::microseconds(rng() % 20000);  // then this long: a random point inside a call
  std::printf("seed %llu (COLLIE_TEST_SEED): %s, %d ranks, rank %d killed after %lld iterations + %lld us\n",
              static_cast<unsigned long long>(seed), c.transport, c.nranks, c.victim, static_cast<long long>(warmup),
              static_cast<long long>(delay.count()));
  RecordProperty("seed", std::to_string(seed));

  ProcessLauncher launcher(c.nranks, shrinkOptions("shrink-kill"));
  SharedArea& sh = launcher.shared();
  launcher.start([&sh, seed, c](Communicator& comm) {
    const int r = comm.rank();
    if (!loopUntilPeerFails(comm, sh, seed, r)) return;
    EXPECT_NE(sh.counters[kKillNs].load(), 0) << "an error before the kill";
    const int exclude[] = {c.victim};
    auto small = comm.shrink(exclude);
    sh.counters[kShrunk].fetch_add(1);
    checkShrunk(*small, r < c.victim ? r : r - 1, c.nranks - 1, sh, r);
    sh.perRank[r][kDone].store(1);
  });
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (bool going = false; !going && std::chrono::steady_clock::now() < deadline;) {
    going = true;
    for (int r = 0; r < c.nranks; ++r) going = going && sh.perRank[r][kIterations].load() >= warmup;
    if (!going) std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(delay);
  sh.counters[kKillNs].store(monotonicNs());
  launcher.kill(c.victim, SIGKILL);
  auto exits = launcher.wait(90s);
  EXPECT_EQ(exits[static_cast<size_t>(c.victim)].signal, SIGKILL) << exits[static_cast<size_t>(c.victim)].describe();
  std::string times;
  for (int r = 0; r < c.nranks; ++r) {
    if (r == c.victim) continue;
    EXPECT_TRUE(exits[static_cast<size_t>(r)].ok()) << exits[static_cast<size_t>(r)].describe();
    EXPECT_EQ(sh.perRank[r][kDone].load(), 1) << "rank " << r << " did not finish on the shrunk communicator";
    times += " " + std::to_string(sh.perRank[r][kErrorAfterNs].load() / 1000) + " / " +
             std::to_string(sh.perRank[r][kWorkingAfterNs].load() / 1000) + " us;";
  }
  std::printf("kill -> error / first AllReduce done on the shrunk communicator, per survivor:%s\n", times.c_str());
  RecordProperty("kill_to_working_us", times);
}

INSTANTIATE_TEST_SUITE_P(Proc, ShrinkAfterKill,
                         testing::Values(KillCase{"tcp", 3, 0}, KillCase{"tcp", 4, 2}, KillCase{"tcp", 5, 4},
                                         KillCase{"shm", 3, 1}, KillCase{"shm", 4, 0}, KillCase{"shm", 5, 3}),
                         caseName);

// ---- Healthy communicator, mismatched lists, repeated shrink ------------------------------------------------

class ShrinkProc : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { tcp_.emplace(std::string(GetParam()) == "tcp" ? "COLLIE_SHM_DISABLE" : nullptr, "1"); }
  std::optional<ScopedEnv> tcp_;
};

TEST_P(ShrinkProc, HealthyCommunicatorWithoutALiveRank) {
  // 5 ranks; ranks 1 and 3 are left out but alive. Rank 1 calls shrink anyway (InvalidUsage); the survivors
  // pass the list in different orders. Afterwards all 5 use the parent again.
  constexpr int kRanks = 5;
  ProcessLauncher launcher(kRanks, shrinkOptions("shrink-healthy"));
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    const int r = comm.rank();
    if (r == 1 || r == 3) {
      if (r == 1) {
        const int self[] = {1, 3};
        try {
          comm.shrink(self);
          ADD_FAILURE() << "an excluded rank got a communicator";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
          EXPECT_NE(std::string(e.what()).find("exclude list"), std::string::npos) << e.what();
        }
      }
      waitForCount(sh.counters[kShrunk], 3, 60s);
    } else {
      const std::vector<int> exclude = r == 0 ? std::vector<int>{3, 1} : std::vector<int>{1, 3};
      auto small = comm.shrink(exclude);
      checkShrunk(*small, r / 2, 3, sh, r);
      sh.counters[kShrunk].fetch_add(1);
    }
    std::vector<int64_t> v(1000, r);
    comm.allReduce(v.data(), v.data(), v.size(), DataType::Int64, ReduceOp::Sum);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 0 + 1 + 2 + 3 + 4) << "element " << i;
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(90s)));
}

TEST_P(ShrinkProc, BadExcludeListsAreRefusedAtOnce) {
  ProcessLauncher launcher(3, shrinkOptions("shrink-args"));
  launcher.start([](Communicator& comm) {
    auto expect = [&](std::vector<int> list, ErrorCode code, const char* needle) {
      try {
        comm.shrink(list);
        ADD_FAILURE() << "accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    expect({3}, ErrorCode::InvalidArgument, "excludeRanks[0]=3");
    expect({0, -1}, ErrorCode::InvalidArgument, "excludeRanks[1]=-1");
    expect({2, 2}, ErrorCode::InvalidArgument, "twice");
    expect({comm.rank()}, ErrorCode::InvalidUsage, "exclude list");
    comm.barrier();  // the communicator is untouched
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
}

TEST_P(ShrinkProc, MismatchedExcludeListsFailEveryCallerWithinTheTimeout) {
  // Rank 3 is left alone (alive); ranks 0 and 1 exclude {3}, rank 2 excludes {1, 3}.
  constexpr int kRanks = 4;
  ProcessLauncher launcher(kRanks, shrinkOptions("shrink-mismatch"));
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    const int r = comm.rank();
    if (r == 3) {
      waitForCount(sh.counters[kShrunk], 3, 60s);
      return;
    }
    const std::vector<int> exclude = r == 2 ? std::vector<int>{1, 3} : std::vector<int>{3};
    const int64_t t0 = monotonicNs();
    try {
      comm.shrink(exclude);
      ADD_FAILURE() << "rank " << r << " got a communicator from mismatched lists";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout) << e.what();
      EXPECT_NE(std::string(e.what()).find("same exclude list"), std::string::npos) << e.what();
    }
    sh.perRank[r][kWorkingAfterNs].store(monotonicNs() - t0);
    EXPECT_LT(monotonicNs() - t0, 5000 * kMs + 3000 * kMs) << "later than the timeout";
    sh.counters[kShrunk].fetch_add(1);
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
  std::printf("mismatched lists failed after %lld, %lld, %lld ms\n",
              static_cast<long long>(sh.perRank[0][kWorkingAfterNs].load() / kMs),
              static_cast<long long>(sh.perRank[1][kWorkingAfterNs].load() / kMs),
              static_cast<long long>(sh.perRank[2][kWorkingAfterNs].load() / kMs));
}

TEST_P(ShrinkProc, RepeatedShrinkFiveFourThree) {
  // Rank 1 dies during a loop; 4 survivors shrink. Then the original rank 0 (the bootstrap root's host, rank 0
  // of the 4) dies; 3 survivors shrink again.
  constexpr int kRanks = 5;
  const uint64_t seed = testSeed();
  std::printf("seed %llu (COLLIE_TEST_SEED)\n", static_cast<unsigned long long>(seed));
  ProcessLauncher launcher(kRanks, shrinkOptions("shrink-repeat"));
  SharedArea& sh = launcher.shared();
  launcher.start([&sh, seed](Communicator& comm) {
    const int r = comm.rank();
    auto dieAt = [](Communicator& c, int64_t iterations, uint64_t s) {
      for (int64_t it = 0; it < iterations; ++it) randomCall(c, s, it);
      raise(SIGKILL);
    };
    const int64_t first = 2 + static_cast<int64_t>(seed % 5), second = 1 + static_cast<int64_t>(seed % 3);
    if (r == 1) dieAt(comm, first, seed);
    if (!loopUntilPeerFails(comm, sh, seed, r)) return;
    const int lost1[] = {1};
    auto four = comm.shrink(lost1);
    EXPECT_EQ(four->size(), 4);
    EXPECT_EQ(four->rank(), r == 0 ? 0 : r - 1);
    if (r == 0) dieAt(*four, second, seed + 1);
    if (!loopUntilPeerFails(*four, sh, seed + 1, r)) return;
    const int lost0[] = {0};
    auto three = four->shrink(lost0);
    checkShrunk(*three, r - 2, 3, sh, r);
    sh.perRank[r][kDone].store(1);
  });
  auto exits = launcher.wait(90s);
  for (int r : {0, 1})
    EXPECT_EQ(exits[static_cast<size_t>(r)].signal, SIGKILL) << exits[static_cast<size_t>(r)].describe();
  for (int r : {2, 3, 4}) {
    EXPECT_TRUE(exits[static_cast<size_t>(r)].ok()) << exits[static_cast<size_t>(r)].describe();
    EXPECT_EQ(sh.perRank[r][kDone].load(), 1) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Proc, ShrinkProc, testing::Values("tcp", "shm"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace collie::test
